"""hw.collide: a read that collides with a write returns the old data in the plain build and
wrong data in a poisoned one, until the port's next read; the plain build is unchanged."""

from types import SimpleNamespace

import pytest
from amaranth import Elaboratable, Module, Signal
from amaranth.back import verilog
from amaranth.lib.memory import Memory

from hw.build import build_dir
from hw.collide import poison_collisions, read_data
from spec.config import PRESETS

from .util import run_sim


class Ram(Elaboratable):
    def __init__(self, granularity=None):
        self.granularity = granularity
        self.w_addr, self.w_data, self.w_en = Signal(4), Signal(16), Signal(2)
        self.r_addr, self.r_en, self.r_data = Signal(4), Signal(init=1), Signal(16)

    def elaborate(self, platform):
        m = Module()
        m.submodules.mem = mem = Memory(shape=16, depth=16, init=[])
        w = mem.write_port(granularity=self.granularity)
        r = mem.read_port(transparent_for=())
        m.d.comb += [w.addr.eq(self.w_addr), w.data.eq(self.w_data),
                     w.en.eq(self.w_en if self.granularity else self.w_en[0]),
                     r.addr.eq(self.r_addr), r.en.eq(self.r_en),
                     self.r_data.eq(read_data(m, r, [w]))]
        return m


def _reads(dut, poison, steps):
    """Apply ``steps`` (dicts of inputs, one a cycle) after writing 0x1234 to address 3; return
    the read data seen after each step."""
    seen = []

    async def bench(ctx):
        ctx.set(dut.w_addr, 3)
        ctx.set(dut.w_data, 0x1234)
        ctx.set(dut.w_en, 3)
        await ctx.tick()
        ctx.set(dut.w_en, 0)
        for step in steps:
            for name, value in step.items():
                ctx.set(getattr(dut, name), value)
            await ctx.tick()
            seen.append(ctx.get(dut.r_data))

    if poison:
        with poison_collisions():
            run_sim(dut, bench)
    else:
        run_sim(dut, bench)
    return seen


# read address 3 while writing 0xbeef there (old data: 0x1234), then hold the port (en low),
# then read address 3 again without a write (0xbeef), then a read of 3 beside a write of 4
STEPS = [dict(r_addr=3, w_addr=3, w_data=0xBEEF, w_en=3), dict(r_en=0, w_en=0),
         dict(r_en=0), dict(r_en=1), dict(w_addr=4, w_data=0x5555, w_en=3)]


@pytest.mark.parametrize("granularity", [None, 8])
def test_a_colliding_read_is_old_data_plainly_and_wrong_data_poisoned(granularity):
    assert _reads(Ram(granularity), False, STEPS) == [0x1234, 0x1234, 0x1234, 0xBEEF, 0xBEEF]
    wrong = 0x1234 ^ 0xFFFF
    assert _reads(Ram(granularity), True, STEPS) == [wrong, wrong, wrong, 0xBEEF, 0xBEEF]


def test_one_written_byte_is_enough_to_poison():
    steps = [dict(r_addr=3, w_addr=3, w_data=0xBEEF, w_en=2)]
    assert _reads(Ram(8), True, steps) == [0x1234 ^ 0xFFFF]


def _verilog(ram):
    return verilog.convert(ram, name="ram", emit_src=False,
                           ports=[ram.w_addr, ram.w_data, ram.w_en, ram.r_addr, ram.r_en,
                                  ram.r_data])


def test_plain_builds_are_unchanged_and_poisoned_ones_live_apart():
    plain = _verilog(Ram())
    assert "rw_collision" not in plain
    with poison_collisions():
        poisoned = _verilog(Ram())
    assert "rw_collision" in poisoned
    assert _verilog(Ram()) == plain             # the block has ended
    cfg = PRESETS["tiny"]
    assert build_dir(cfg, "/b") != build_dir(cfg, "/b", poison_collisions=True)
    assert build_dir(cfg, "/b", poison_collisions=True).name.endswith("-poison")


def test_a_memory_without_writes_is_refused():
    port = SimpleNamespace(data=Signal(8), en=Signal(), addr=Signal(2))
    with poison_collisions(), pytest.raises(ValueError, match="without write ports"):
        read_data(None, port, [])
