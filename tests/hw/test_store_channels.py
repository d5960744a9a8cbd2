# amaranth: UnusedElaboratable=no
"""StoreEngine(channel_rows=True): a depthwise step's store takes ``p_ch_rows`` rows of each
output channel, so the post-processor's channel advances every ``p_ch_rows`` rows."""

import numpy as np
import pytest
from amaranth import Elaboratable, Module, unsigned
from amaranth.lib.memory import Memory

from hw.dma import StoreEngine
from spec.config import PRESETS

from .util import run_sim

CFG = PRESETS["tiny"]


class _Harness(Elaboratable):
    """The store engine, an accumulator and a bias memory (synchronous reads)."""

    def __init__(self, acc_rows, biases):
        self.se = StoreEngine(CFG, channel_rows=True)
        self._acc, self._bias = acc_rows, biases

    def elaborate(self, platform):
        m = Module()
        m.submodules.se = se = self.se
        m.submodules.acc = acc = Memory(shape=unsigned(8 * CFG.c_beat_bytes),
                                        depth=len(self._acc), init=self._acc)
        m.submodules.bias = bias = Memory(shape=unsigned(32), depth=len(self._bias),
                                          init=self._bias)
        ra, rb = acc.read_port(), bias.read_port()
        m.d.comb += [ra.addr.eq(se.acc_raddr), ra.en.eq(se.acc_ren), se.acc_rdata.eq(ra.data),
                     rb.addr.eq(se.q_ch), rb.en.eq(se.q_ren), se.q_bias.eq(rb.data)]
        return m


def set_params(ctx, se, *, rows, post, bias, ch0, ch_rows, even=0, elems=None, rstride=1,
               half_last=0, odd=0, acc_base=0):
    """An int32 store of ``rows`` dense rows of ``elems`` (``array_cols``) elements at 0x100
    (row pitch ``4 * array_cols``), the accumulator from row ``acc_base`` at ``rstride``, the
    window all of memory; ``even``: the rows' even lanes (with ``odd`` their odd ones)."""
    C = CFG.array_cols
    for name, value in (("p_addr", 0x100), ("p_stride", 4 * C), ("p_rows", rows),
                        ("p_groups", 1), ("p_elems", C if elems is None else elems),
                        ("p_acc_base", acc_base), ("p_even_lanes", even),
                        ("p_odd_lanes", odd), ("p_half_last", half_last),
                        ("p_acc_rstride", rstride), ("p_post", post), ("p_int8", 0),
                        ("p_bias", bias),
                        ("p_ch0", ch0), ("p_ch_rows", ch_rows), ("p_act_min", -128),
                        ("p_act_max", 127), ("p_win_lo", 0), ("p_win_hi", 1 << 20)):
        ctx.set(getattr(se, name), value)


def _store(acc, rng, **params):
    """Run one post-processed int32 store (``set_params(**params)``, bias on) over the
    accumulator rows ``acc``; returns ``({address: (data, strobes)}, biases)``."""
    biases = [int(b) & 0xFFFFFFFF for b in rng.integers(-5000, 5000, 16)]
    words = [sum((int(v) & 0xFFFFFFFF) << (32 * j) for j, v in enumerate(row)) for row in acc]
    dut = _Harness(words, biases)
    se = dut.se
    out = {}

    async def bench(ctx):
        set_params(ctx, se, post=1, bias=1, **params)
        ctx.set(se.mem.ready, 1)
        ctx.set(se.start, 1)
        await ctx.tick()
        ctx.set(se.start, 0)
        for _ in range(100):
            fire = ctx.get(se.mem.valid)
            if fire:
                out[ctx.get(se.mem.addr)] = (ctx.get(se.mem.data), ctx.get(se.mem.strb))
            await ctx.tick()
            ctx.set(se.mem.bvalid, fire)

    run_sim(dut, bench)
    return out, [b - (1 << 32) if b >> 31 else b for b in biases]


@pytest.mark.parametrize("rows,ch_rows,ch0", [(7, 3, 2), (6, 1, 0), (5, 5, 4), (8, 2, 1)])
def test_channel_advances_every_ch_rows_rows(rows, ch_rows, ch0):
    C = CFG.array_cols
    rng = np.random.default_rng(rows * 10 + ch_rows)
    acc = rng.integers(-1000, 1000, (rows, C))
    out, biases = _store(acc, rng, rows=rows, ch0=ch0, ch_rows=ch_rows)
    assert len(out) == rows
    for r in range(rows):
        bias = biases[ch0 + r // ch_rows]
        word, _ = out[0x100 + r * 4 * C]
        got = [(word >> (32 * j)) & 0xFFFFFFFF for j in range(C)]
        assert got == [(int(v) + bias) & 0xFFFFFFFF for v in acc[r]]


@pytest.mark.parametrize("rows,ch_rows,elems", [(3, 3, 2), (4, 2, 2), (2, 1, 1)])
@pytest.mark.parametrize("odd", [0, 1])
def test_even_or_odd_lanes_of_every_other_row(rows, ch_rows, elems, odd):
    """A stride-2 depthwise step's store (``p_even_lanes``, accumulator rows at a stride of
    2): element ``j`` of store row ``r`` is lane ``2 j`` of accumulator row ``2 r``, the
    channel advancing every ``ch_rows`` rows; nothing is written past ``elems``. With ``odd``
    (the TF "SAME" store: ``p_odd_lanes`` too, the accumulator from row 1,
    spec.dwmesh.StripStep.row0 / lane0) lane ``2 j + 1`` of row ``2 r + 1``."""
    C = CFG.array_cols
    rng = np.random.default_rng(rows * 7 + elems + 50 * odd)
    acc = rng.integers(-1000, 1000, (2 * rows + 1, C))
    out, biases = _store(acc, rng, rows=rows, ch0=1, ch_rows=ch_rows, even=1, odd=odd,
                         elems=elems, rstride=2, acc_base=odd)
    assert len(out) == rows
    for r in range(rows):
        bias = biases[1 + r // ch_rows]
        word, strb = out[0x100 + r * 4 * C]
        assert strb == (1 << 4 * elems) - 1
        got = [(word >> (32 * j)) & 0xFFFFFFFF for j in range(elems)]
        assert got == [(int(v) + bias) & 0xFFFFFFFF for v in acc[2 * r + odd, odd::2][:elems]]


def test_odd_lanes_alone_select_nothing():
    """``p_odd_lanes`` without ``p_even_lanes``: every lane in order."""
    C = CFG.array_cols
    rng = np.random.default_rng(3)
    acc = rng.integers(-1000, 1000, (1, C))
    out, biases = _store(acc, rng, rows=1, ch0=0, ch_rows=1, odd=1)
    word, _ = out[0x100]
    assert [(word >> (32 * j)) & 0xFFFFFFFF for j in range(C)] == [
        (int(v) + biases[0]) & 0xFFFFFFFF for v in acc[0]]


@pytest.mark.parametrize("rows,ch_rows", [(7, 3), (4, 2), (3, 1), (5, 5)])
def test_half_last_rows(rows, ch_rows):
    """The depthwise quadrant mode's store (``p_half_last``): a channel's last row writes half
    the row's elements and the next row starts half a row pitch after it, so each channel's
    rows are back to back (spec.dwmesh.StripStep.store_rows); the channel advances every
    ``ch_rows`` rows, and no byte past a short row's half is written."""
    C = CFG.array_cols
    rng = np.random.default_rng(rows * 5 + ch_rows)
    acc = rng.integers(-1000, 1000, (rows, C))
    out, biases = _store(acc, rng, rows=rows, ch0=2, ch_rows=ch_rows, half_last=1)
    assert len(out) == rows
    addr = 0x100
    for r in range(rows):
        short = r % ch_rows == ch_rows - 1
        elems = C // 2 if short else C
        word, strb = out[addr]
        assert strb == (1 << 4 * elems) - 1
        bias = biases[2 + r // ch_rows]
        got = [(word >> (32 * j)) & 0xFFFFFFFF for j in range(elems)]
        assert got == [(int(v) + bias) & 0xFFFFFFFF for v in acc[r, :elems]]
        addr += 4 * elems
