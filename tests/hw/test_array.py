import numpy as np
import pytest

from hw.array import SystolicArray
from spec.config import PRESETS

from .util import run_sim


def pack(values, bits):
    word = 0
    for idx, v in enumerate(values):
        word |= (int(v) & ((1 << bits) - 1)) << (bits * idx)
    return word


def unpack_signed(word, bits, count):
    out = []
    for idx in range(count):
        v = (word >> (bits * idx)) & ((1 << bits) - 1)
        out.append(v - (1 << bits) if v >> (bits - 1) else v)
    return out


@pytest.mark.parametrize("preset", ["tiny", "small"])
def test_array_streams_back_to_back_tiles(preset, tmp_path):
    cfg = PRESETS[preset]
    R, C = cfg.array_rows, cfg.array_cols
    rng = np.random.default_rng(1)
    # Tiles of varied length (>= R), full int8 range including -128 * -128.
    lengths = [R, R + 3, 2 * R + 1, R, 5 * R]
    tiles = []
    for t, L in enumerate(lengths):
        a = rng.integers(-128, 128, size=(R, L))
        b = rng.integers(-128, 128, size=(L, C))
        if t == 0:
            a[:] = -128
            b[:] = -128
        tiles.append((a, b))
    dut = SystolicArray(cfg, tag_bits=8)
    got = {}

    async def producer(ctx):
        for t, (a, b) in enumerate(tiles):
            L = a.shape[1]
            for k in range(L):
                ctx.set(dut.i_valid, 1)
                ctx.set(dut.i_first, k == 0)
                ctx.set(dut.i_last, k == L - 1)
                ctx.set(dut.i_a, pack(a[:, k], 8))
                ctx.set(dut.i_b, pack(b[k, :], 8))
                ctx.set(dut.i_a00, int(a[0, k]) & 0xFF)   # PE (0, 0)'s copies
                ctx.set(dut.i_b00, int(b[k, 0]) & 0xFF)
                ctx.set(dut.i_tag, t)
                await ctx.tick()
        ctx.set(dut.i_valid, 0)

    first_row_cycle = {}
    early, late = [], []                  # (valid, r, tag) per cycle of e_* and of o_*
    earlier = []                          # ... and of f_*

    async def monitor(ctx):
        cycle = 0
        async for (clk_edge, rst, valid, row, r, tag, e_valid, e_r, e_tag, f_valid, f_r,
                   f_tag, f_first, f_first_tag) in ctx.tick().sample(
                       dut.o_valid, dut.o_row, dut.o_r, dut.o_tag, dut.e_valid, dut.e_r,
                       dut.e_tag, dut.f_valid, dut.f_r, dut.f_tag, dut.f_first, dut.f_first_tag):
            # f_first marks the tile's first row (f_r == R - 1), with its tag
            assert f_first == (f_valid and f_r == R - 1), f"cycle {cycle}: f_first"
            assert not f_first or f_first_tag == f_tag, f"cycle {cycle}: f_first_tag"
            if valid:
                got[(tag, r)] = unpack_signed(row, 32, C)
                first_row_cycle.setdefault(tag, cycle)
            late.append((valid, r, tag) if valid else (0,))
            early.append((e_valid, e_r, e_tag) if e_valid else (0,))
            earlier.append((f_valid, f_r, f_tag) if f_valid else (0,))
            cycle += 1

    async def waiter(ctx):
        await ctx.tick().repeat(sum(lengths) + 3 * (R + C) + 8)

    run_sim(dut, producer, waiter, processes=[monitor], tmp_path=tmp_path, name="array")
    last_beat = np.cumsum(lengths) - 1
    for t, (a, b) in enumerate(tiles):
        assert first_row_cycle[t] == last_beat[t] + dut.latency, f"tile {t} latency"
        want = a.astype(np.int64) @ b.astype(np.int64)
        for r in range(R):
            assert got.get((t, r)) == list(want[r]), f"tile {t} row {r}"
    # e_* announces every result row one cycle before o_* carries it
    assert early[:-1] == late[1:]
    assert earlier[:-1] == early[1:]      # f_* one cycle before e_*
    assert sum(v[0] for v in late) == len(tiles) * R
