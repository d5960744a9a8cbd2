"""hw/fastinit.py: memory initialisers formatted directly give the backend's own Verilog."""

import pytest
from amaranth import Module, signed, unsigned
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out
from amaranth.back import rtlil as amaranth_rtlil, verilog
from amaranth.lib.memory import Memory

from hw.fastinit import fast_meminit
from hw.top import AccelTop
from spec.config import PRESETS


class _Memories(wiring.Component):
    """Memories of odd and wide widths, zero, sparse, negative and full initialisers."""

    addr: In(6)
    out: Out(200)

    def elaborate(self, platform):
        m = Module()
        shapes = [(unsigned(8), 64, []), (unsigned(13), 37, [1, 8191, 0, 4096, 77]),
                  (signed(7), 20, [-1, -64, 63, 0, -5]), (unsigned(128), 48, [0] * 47 + [1 << 127]),
                  (unsigned(3), 5, [7, 6, 5, 4, 3])]
        outs = []
        for idx, (shape, depth, init) in enumerate(shapes):
            mem = Memory(shape=shape, depth=depth, init=init)
            m.submodules[f"mem{idx}"] = mem
            rd = mem.read_port()
            wr = mem.write_port()
            m.d.comb += [rd.addr.eq(self.addr), wr.addr.eq(self.addr + 1),
                         wr.data.eq(self.addr), wr.en.eq(self.addr[0])]
            outs.append(rd.data)
        m.d.comb += self.out.eq(sum(o.as_unsigned() for o in outs))
        return m


def _both(make, name):
    plain = verilog.convert(make(), name=name, emit_src=False)
    with fast_meminit() as active:
        fast = verilog.convert(make(), name=name, emit_src=False)
    return plain, fast, active


def test_same_verilog_for_every_kind_of_initialiser():
    plain, fast, active = _both(_Memories, "mems")
    assert active, "fast_meminit did not recognise this Amaranth's emit_memory"
    assert "initial" in plain and fast == plain


def test_same_verilog_for_a_whole_accelerator():
    cfg = PRESETS["tiny"]
    plain, fast, _ = _both(lambda: AccelTop(cfg), "accel_top")
    assert fast == plain


def test_unknown_backend_is_left_alone(monkeypatch):
    def other(self, cell_idx, cell):        # a backend method this module does not know
        raise AssertionError("not called: the original stays in place")

    monkeypatch.setattr(amaranth_rtlil.ModuleEmitter, "emit_memory", other)
    with fast_meminit() as active:
        assert not active
        assert amaranth_rtlil.ModuleEmitter.emit_memory is other
    assert amaranth_rtlil.ModuleEmitter.emit_memory is other


def test_the_original_comes_back_after_an_error():
    original = amaranth_rtlil.ModuleEmitter.emit_memory
    with pytest.raises(RuntimeError):
        with fast_meminit():
            raise RuntimeError("conversion failed")
    assert amaranth_rtlil.ModuleEmitter.emit_memory is original
