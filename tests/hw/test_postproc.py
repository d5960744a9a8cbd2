"""PostProc (Amaranth simulator) against hw.golden.requantize, row by row, with stalls."""

import numpy as np
import pytest

from hw.config import PRESETS
from hw.golden import requantize
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


@pytest.mark.parametrize("preset", ["tiny", "small"])
def test_postproc_matches_golden_with_stalls(preset, tmp_path):
    cfg = PRESETS[preset]
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
    want = np.stack([requantize(acc[i:i + 1], multiplier=int(mult[i]), shift=int(shift[i]),
                                bias=int(bias[i]), zero_point=int(zp[i]), act_min=int(lo[i]),
                                act_max=int(hi[i]))[0] for i in range(rows)])
    dut = PostProc(cfg)
    got = []
    stall = [1, 1, 0, 1, 0, 0, 1, 1, 1]

    async def bench(ctx):
        i = cycle = 0
        while len(got) < rows and cycle < 10 * rows:
            en = stall[cycle % len(stall)]
            ctx.set(dut.en, en)
            if i < rows:
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
            await ctx.tick()
            if en and i < rows:
                i += 1
            cycle += 1

    run_sim(dut, bench, tmp_path=tmp_path, name="postproc")
    assert len(got) == rows
    assert np.array_equal(np.array(got, dtype=np.int64), want.astype(np.int64))
