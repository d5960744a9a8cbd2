"""StoreEngine alone (Amaranth simulation): beat addresses and strobes for int32 and int8
output, and the output-window guard clearing every strobe outside [win_lo, win_hi)."""

import pytest
from amaranth.sim import Simulator

from spec.config import PRESETS
from hw.dma import StoreEngine

CFG = PRESETS["tiny"]


def run_store(*, rows, groups, elems, addr, stride, win, post=0, int8=0, cfg=CFG):
    """Start one store; return the accepted beats as (addr, strb) in order."""
    dut = StoreEngine(cfg)
    beats = []

    async def bench(ctx):
        ctx.set(dut.mem.ready, 1)
        ctx.set(dut.p_addr, addr)
        ctx.set(dut.p_stride, stride)
        ctx.set(dut.p_rows, rows)
        ctx.set(dut.p_groups, groups)
        ctx.set(dut.p_elems, elems)
        ctx.set(dut.p_acc_base, 0)
        ctx.set(dut.p_acc_rstride, groups)
        ctx.set(dut.p_post, post)
        ctx.set(dut.p_int8, int8)
        ctx.set(dut.p_act_min, -128)
        ctx.set(dut.p_act_max, 127)
        ctx.set(dut.p_win_lo, win[0])
        ctx.set(dut.p_win_hi, win[1])
        ctx.set(dut.q_mult, 1 << 30)
        ctx.set(dut.q_shift, 0)
        ctx.set(dut.start, 1)
        await ctx.tick()
        ctx.set(dut.start, 0)
        acked = 0
        for _ in range(200):
            if ctx.get(dut.mem.valid):
                beats.append((ctx.get(dut.mem.addr), ctx.get(dut.mem.strb)))
            fire = ctx.get(dut.mem.valid)
            await ctx.tick()
            # acknowledge each beat one cycle after it was accepted
            ctx.set(dut.mem.bvalid, fire)
            acked += fire
            if not ctx.get(dut.busy) and not fire:
                break
        assert not ctx.get(dut.busy), "store never finished"

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    return beats


def written_bytes(beats, cfg=CFG):
    out = set()
    for addr, strb in beats:
        out |= {addr + b for b in range(cfg.c_beat_bytes) if strb >> b & 1}
    return out


@pytest.mark.parametrize("int8", [0, 1])
def test_store_writes_exactly_the_elements(int8):
    elem = 1 if int8 else 4
    rows, elems, stride, base = 3, 6, 64, 0x100
    groups = -(-elems // CFG.array_cols)
    beats = run_store(rows=rows, groups=groups, elems=elems, addr=base, stride=stride,
                      win=(0, CFG.dram_bytes), post=int8, int8=int8)
    assert len(beats) == rows * groups
    want = {base + r * stride + j for r in range(rows) for j in range(elem * elems)}
    assert written_bytes(beats) == want
    # int8 beats step by array_cols bytes, int32 beats by a whole C beat
    step = CFG.array_cols * elem
    assert [a for a, _ in beats[:groups]] == [base + g * step for g in range(groups)]


@pytest.mark.parametrize("int8", [0, 1])
@pytest.mark.parametrize("win", [(0x104, 0x130), (0x100, 0x117), (0x13f, 0x141),
                                 (0x200, 0x300)])
def test_store_window_guard_clears_strobes_outside(int8, win):
    elem = 1 if int8 else 4
    rows, elems, stride, base = 2, 6, 64, 0x100
    groups = -(-elems // CFG.array_cols)
    beats = run_store(rows=rows, groups=groups, elems=elems, addr=base, stride=stride,
                      win=win, post=int8, int8=int8)
    full = {base + r * stride + j for r in range(rows) for j in range(elem * elems)}
    got = written_bytes(beats)
    assert got == {a for a in full if win[0] <= a < win[1]}


@pytest.mark.parametrize("preset", ["small", "fpga"])
@pytest.mark.parametrize("int8", [0, 1])
def test_store_window_guard_wide_beats(preset, int8):
    """The guard's parts (registered in stage 1, finished in stage 2) on 32- and 64-byte
    beats: windows ending at every kind of byte offset, wholly below or above the beat, and
    reaching past the last beat (`above` larger than a beat)."""
    cfg = PRESETS[preset]
    W, elem = cfg.c_beat_bytes, 1 if int8 else 4
    rows, elems, stride, base = 2, cfg.array_cols + 3, 4 * W, 0x400
    groups = -(-elems // cfg.array_cols)
    full = {base + r * stride + j for r in range(rows) for j in range(elem * elems)}
    for win in [(base + 1, base + W - 1), (base + 5, base + W + 7), (base + W - 3, base + 2 * W),
                (base - 0x100, base), (base + 5 * W, base + 6 * W), (0, base + stride + 13),
                (base + stride + 2, cfg.dram_bytes)]:
        beats = run_store(rows=rows, groups=groups, elems=elems, addr=base, stride=stride,
                          win=win, post=int8, int8=int8, cfg=cfg)
        assert len(beats) == rows * groups
        assert written_bytes(beats, cfg) == {a for a in full if win[0] <= a < win[1]}, win
