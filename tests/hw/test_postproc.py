# amaranth: UnusedElaboratable=no
"""PostProc (Amaranth simulator) against spec.golden.requantize, row by row, with stalls."""

import dataclasses

import numpy as np
import pytest

from spec.config import PRESETS
from spec.golden import requantize
from hw.postproc import PostProc

from .util import run_sim

I32_MIN, I32_MAX = -(1 << 31), (1 << 31) - 1


def _pack(values, bits):
    word = 0
    for i, v in enumerate(values):
        word |= (int(v) & ((1 << bits) - 1)) << (bits * i)
    return word


def _unpack_int8(word, count):
    return [((word >> (8 * i)) & 0xFF) - (256 if (word >> (8 * i)) & 0x80 else 0)
            for i in range(count)]


#: (preset, requant_lanes): a lane per column (0), and lanes shared over the row
CONFIGS = [("tiny", 0), ("small", 0), ("tiny", 1), ("small", 2), ("small", 4)]


def _cfg(preset, lanes):
    return dataclasses.replace(PRESETS[preset], requant_lanes=lanes)


@pytest.mark.parametrize("preset, lanes", CONFIGS)
def test_postproc_matches_golden_with_stalls(preset, lanes, tmp_path):
    cfg = _cfg(preset, lanes)
    C = cfg.array_cols
    rng = np.random.default_rng(7)
    rows = 64
    acc = rng.integers(I32_MIN, I32_MAX, size=(rows, C), endpoint=True, dtype=np.int64)
    acc[0] = [I32_MIN, I32_MAX, 0, -1][:C] + [5] * (C - 4)
    acc[1:8] = rng.integers(-(1 << 20), 1 << 20, size=(7, C))
    acc = acc.astype(np.int32)
    bias = rng.integers(-(1 << 24), 1 << 24, size=rows)
    bias[2] = I32_MAX
    mult = rng.integers(1, 1 << 31, size=rows)
    mult[3] = I32_MAX
    shift = rng.integers(-4, 32, size=rows)
    shift[4], shift[5] = -31, 31
    zp = rng.integers(-128, 128, size=rows)
    lo = rng.integers(-128, 0, size=rows)
    hi = rng.integers(0, 128, size=rows)
    # exact ties of both roundings: multiplier 0.5 (2**30), shifts 0..3, odd and even values
    for r in range(8, 16):
        mult[r], shift[r], bias[r], zp[r], lo[r], hi[r] = 1 << 30, (r - 8) % 4, 0, 0, -128, 127
        acc[r] = np.resize(np.array([-7, -6, -5, -3, -2, -1, 1, 3, 5, 6, 7, 9], np.int32)
                           * (1 << ((r - 8) % 4)), C)
    for en_copies in (1, cfg.post_lanes + 1):
        _check(cfg, acc, bias, mult, shift, zp, lo, hi, tmp_path,
               stall=[1, 1, 0, 1, 0, 0, 1, 1, 1], en_copies=en_copies)


def test_postproc_en_copies_range():
    cfg = _cfg("small", 4)
    assert len(PostProc(cfg, en_copies=5).en) == 5
    for bad in (0, 6):
        with pytest.raises(ValueError, match=f"en_copies={bad}: must be in 1..5"):
            PostProc(cfg, en_copies=bad)


def _check(cfg, acc, bias, mult, shift, zp, lo, hi, tmp_path, *, stall, en_copies=1):
    """Runs the rows through PostProc with the ``en`` pattern ``stall`` (repeated; every one of
    ``en_copies`` copies of ``en`` alike), a row every ``row_cycles`` enabled cycles (the fastest
    it takes them); compares the int8 output and the int32 ``acc + bias`` with the golden model,
    and, in a stall-free run, the latency."""
    C = cfg.array_cols
    rows = len(acc)
    want = np.stack([requantize(acc[i:i + 1], multiplier=int(mult[i]), shift=int(shift[i]),
                                bias=int(bias[i]), zero_point=int(zp[i]), act_min=int(lo[i]),
                                act_max=int(hi[i]))[0] for i in range(rows)])
    want_sum = (acc.astype(np.int64) + np.asarray(bias, dtype=np.int64)[:, None]
                + (1 << 31)) % (1 << 32) - (1 << 31)
    dut = PostProc(cfg, en_copies=en_copies)
    P = dut.row_cycles
    assert P == cfg.array_cols // (cfg.requant_lanes or cfg.array_cols)
    assert dut.row_latency == PostProc.latency + P - 1
    got, got_sum, first_out = [], [], []

    async def bench(ctx):
        i = cycle = phase = 0
        while len(got) < rows and cycle < 10 * P * rows + 2 * dut.row_latency:
            en = stall[cycle % len(stall)]
            ctx.set(dut.en, (1 << en_copies) - 1 if en else 0)
            if i < rows and phase == 0:
                for port, value in ((dut.i_valid, 1), (dut.i_data, _pack(acc[i], 32)),
                                    (dut.i_bias, int(bias[i])), (dut.i_mult, int(mult[i])),
                                    (dut.i_shift, int(shift[i])),
                                    (dut.i_zero_point, int(zp[i])),
                                    (dut.i_act_min, int(lo[i])), (dut.i_act_max, int(hi[i]))):
                    ctx.set(port, value)
            else:
                ctx.set(dut.i_valid, 0)
            if en and ctx.get(dut.o_valid):
                got.append(_unpack_int8(ctx.get(dut.o_data), C))
                word = ctx.get(dut.o_sum)
                got_sum.append([((word >> (32 * k)) + (1 << 31)) % (1 << 32) - (1 << 31)
                                for k in range(C)])
                first_out.append(cycle)
            await ctx.tick()
            if en and i < rows:
                phase = (phase + 1) % P
                i += phase == 0
            cycle += 1

    run_sim(dut, bench, tmp_path=tmp_path, name="postproc")
    assert len(got) == rows
    assert np.array_equal(np.array(got, dtype=np.int64), want.astype(np.int64))
    assert np.array_equal(np.array(got_sum, dtype=np.int64), want_sum)
    if all(stall):
        assert first_out[0] == dut.row_latency
        assert np.array_equal(np.diff(first_out), np.full(rows - 1, P))


@pytest.mark.parametrize("preset, lanes", CONFIGS)
def test_postproc_every_shift_and_extreme_multiplier(preset, lanes, tmp_path):
    """Every shift -31..31 with the multiplier's extremes and a tie (2**30), on accumulators
    at the int32 limits and at the saturation edges of each left shift, without stalls
    (latency checked)."""
    cfg = _cfg(preset, lanes)
    C = cfg.array_cols
    rng = np.random.default_rng(11)
    cases = [(s, mu) for s in range(-31, 32)
             for mu in (1, 2, 1 << 30, (1 << 30) + 1, (1 << 31) - 1, int(rng.integers(1, 1 << 31)))]
    rows = len(cases)
    shift = np.array([s for s, _ in cases])
    mult = np.array([mu for _, mu in cases])
    acc = np.empty((rows, C), dtype=np.int64)
    for r, (s, _) in enumerate(cases):
        edge = (1 << (31 - max(-s, 0))) - 1          # largest x whose left shift fits
        vals = [I32_MIN, I32_MAX, edge, edge + 1, -edge - 1, -edge - 2, 0, -1,
                *rng.integers(I32_MIN, I32_MAX, size=8, endpoint=True)]
        acc[r] = np.clip(np.array(vals[:C] if C <= len(vals) else np.resize(vals, C)),
                         I32_MIN, I32_MAX)
    acc = acc.astype(np.int32)
    bias = np.zeros(rows, dtype=np.int64)
    bias[::7] = rng.integers(I32_MIN, I32_MAX, size=len(bias[::7]), endpoint=True)
    zp = rng.integers(-128, 128, size=rows)
    lo = rng.integers(-128, 0, size=rows)
    hi = rng.integers(0, 128, size=rows)
    lo[::5], hi[::5] = -128, 127
    _check(cfg, acc, bias, mult, shift, zp, lo, hi, tmp_path, stall=[1])


def test_decode_shift_every_code():
    """The shift decode (a 64-entry table in the RTL) gives, for every value of the 6-bit field,
    the magnitudes and the masks the lanes use: checked in the Amaranth simulator against
    independent formulas (thermometer and one-hot codes of ``left`` and ``right``)."""
    from amaranth import Module, Signal, signed
    m = Module()
    shift = Signal(signed(6))
    dec = PostProc.decode_shift(m, shift)
    dec.update(PostProc.decode_right(m, dec["right"]))       # (the lanes decode it later)

    def want(s):
        left = min(-s, 31) if s < 0 else 0      # -32 wraps to 0 in 5 bits; see below
        left = 0 if s == -32 else left
        right = max(s, 0)
        return {"left": left, "right": right,
                "x_max": int("".join("1" if left < 31 - b else "0" for b in reversed(range(31))),
                             2),
                "half": sum(1 << b for b in range(31) if right == b + 1),
                "half_neg": sum(1 << b for b in range(30) if right > b + 1)}

    async def bench(ctx):
        for s in range(-32, 32):
            ctx.set(shift, s)
            got = {name: ctx.get(sig) & ((1 << 32) - 1) for name, sig in dec.items()}
            assert got == want(s) == PostProc.shift_decode_value(s), s

    from amaranth.sim import Simulator
    sim = Simulator(m)                      # combinational only: no clock
    sim.add_testbench(bench)
    sim.run()


@pytest.mark.parametrize("shift", [-33, 32, 100])
def test_shift_decode_value_rejects_out_of_range(shift):
    with pytest.raises(ValueError, match=r"shift=.*-32\.\.31"):
        PostProc.shift_decode_value(shift)
