"""The array's depthwise mesh mode (hw/array.py, ``mesh=True``) against spec/dwmesh.py."""

import numpy as np
import pytest

from hw.array import SystolicArray
from hw.dwfeed import tile_program
from spec.config import PRESETS
from spec.dwmesh import (mesh_depthwise, padded_input, plan_tiles, scatter_results, tile_patches,
                         tile_weights)

from .test_array import pack, unpack_signed
from .util import run_sim


def _beats(x, w, stride, pad, rows, cols):
    """The mesh's input per cycle for every tile of a layer, the feeder's program
    (``hw.dwfeed.tile_program``) with its words' rows: (move, split, fill rows, weights, tap,
    first, last, tile index)."""
    channels, h, wd = x.shape
    padded = padded_input(x, pad)
    tiles = plan_tiles(channels, h, wd, stride=stride, pad=pad, rows=rows, cols=cols)
    beats = []
    for t, tile in enumerate(tiles):
        split = SystolicArray.SPLITS[tile.split]
        weights = tile_weights(tile, w).reshape(4, 9)
        rows_of = np.concatenate(tile_patches(tile, padded, stride=stride, rows=rows, cols=cols))
        for move, word, tap, first, last in tile_program(rows, stride):
            # a fill's word k: rows 2k, 2k+1 of the phases' patches; a beat may tap and fill
            fill = rows_of[2 * word:2 * word + 2] if move == "FILL" else None
            wts = None if tap is None else weights[:, tap]
            beats.append((move, split, fill, wts, int(tap is not None), first, last, t))
    return tiles, beats


def set_mesh_beat(ctx, dut, beat):
    """Drive one of :func:`_beats`' mesh inputs (the tile index as the tag)."""
    move, split, fill, wts, tap, first, last, t = beat
    ctx.set(dut.i_mesh, 1)
    ctx.set(dut.i_move, SystolicArray.MOVES[move])
    ctx.set(dut.i_split, split)
    ctx.set(dut.i_fill, 0 if fill is None else pack(fill.reshape(-1), 8))
    ctx.set(dut.i_w, 0 if wts is None else pack(wts, 8))
    ctx.set(dut.i_tap, tap)
    ctx.set(dut.i_first, first)
    ctx.set(dut.i_last, last)
    ctx.set(dut.i_tag, t)


@pytest.mark.parametrize("channels,h,w,stride,pad,split", [
    (5, 3, 3, 1, 1, (2, 2)),        # quadrants (4 + 1 channels): the pads meet through the wrap
    (2, 4, 4, 1, 0, (2, 2)),        # quadrants without padding
    (2, 7, 7, 1, 1, (1, 1)),        # whole-mesh tiles (6 x 6 outputs on the 8x8)
    (2, 20, 17, 1, 1, (1, 1)),      # ragged
    (3, 6, 6, 2, 1, (2, 1)),        # stride 2 halves (two channels' row phases)
    (1, 29, 17, 2, 1, (1, 1)),      # stride 2, whole mesh
])
def test_mesh_mode_matches_the_model(channels, h, w, stride, pad, split):
    cfg = PRESETS["small"]
    R, C = cfg.array_rows, cfg.array_cols
    rng = np.random.default_rng(channels * 100 + h)
    x = rng.integers(-128, 128, (channels, h, w), dtype=np.int8)
    wt = rng.integers(-128, 128, (channels, 3, 3), dtype=np.int8)
    x[0, 0, :] = -128                   # the extreme product in every column
    wt[0] = -128
    expect, _ = mesh_depthwise(x, wt, stride=stride, pad=pad, rows=R, cols=C)
    tiles, beats = _beats(x, wt, stride, pad, R, C)
    assert {t.split for t in tiles} == {split}
    dut = SystolicArray(cfg, tag_bits=8, mesh=True)
    rows_out = {}
    last_tap_cycle = {}

    async def producer(ctx):
        for cycle, beat in enumerate(beats):
            set_mesh_beat(ctx, dut, beat)
            t, last = beat[7], beat[6]
            if last:
                last_tap_cycle[t] = cycle
            await ctx.tick()
        ctx.set(dut.i_mesh, 0)
        ctx.set(dut.i_tap, 0)

    stages = {"f": [], "e": [], "o": []}      # (valid, r, tag) of f_*, e_*, o_* per cycle

    async def monitor(ctx):
        for cycle in range(len(beats) + R + 8):
            if ctx.get(dut.o_valid):
                t, r = ctx.get(dut.o_tag), ctx.get(dut.o_r)
                rows_out.setdefault(t, []).append(
                    (cycle, r, unpack_signed(ctx.get(dut.o_row), 32, C)))
            for x, seen in stages.items():
                valid = ctx.get(getattr(dut, f"{x}_valid"))
                seen.append((1, ctx.get(getattr(dut, f"{x}_r")), ctx.get(getattr(dut, f"{x}_tag")))
                            if valid else (0,))
            await ctx.tick()

    run_sim(dut, producer, monitor)
    got = np.zeros_like(expect)
    for t, tile in enumerate(tiles):
        out = rows_out[t]
        assert [r for _, r, _ in out] == list(range(R - 1, -1, -1))
        assert out[0][0] == last_tap_cycle[t] + SystolicArray.mesh_latency
        assert [c for c, _, _ in out] == list(range(out[0][0], out[0][0] + R))
        acc = np.zeros((R, C), np.int64)
        for _, r, row in out:
            acc[r] = row
        scatter_results(tile, acc, got, stride=stride)
    np.testing.assert_array_equal(got, expect)
    # mesh rows are announced like a GEMM tile's: f_* a cycle before e_*, e_* before o_*
    assert stages["f"][:-1] == stages["e"][1:] and stages["e"][:-1] == stages["o"][1:]



@pytest.mark.parametrize("gap_change", [0, -1])
def test_modes_take_turns_at_the_documented_gaps(gap_change):
    """A GEMM tile, mesh tiles as soon as its last beat has passed the last PE, then a GEMM
    tile ``mesh_gemm_gap`` cycles after the last mesh tap: every result exact. One cycle
    sooner (``gap_change = -1``) the second GEMM tile's first beat meets the last tap at PE
    (0, 0) and its result is wrong: the gap is needed, not just allowed."""
    cfg = PRESETS["small"]
    R, C = cfg.array_rows, cfg.array_cols
    rng = np.random.default_rng(7)
    x = rng.integers(-128, 128, size=(2, 7, 7), dtype=np.int8)
    w = rng.integers(-128, 128, size=(2, 3, 3), dtype=np.int8)
    expect, _ = mesh_depthwise(x, w, stride=1, pad=1, rows=R, cols=C)
    tiles, beats = _beats(x, w, 1, 1, R, C)
    gemm = [(rng.integers(-128, 128, size=(R, L)), rng.integers(-128, 128, size=(L, C)))
            for L in (R + 2, R)]
    gemm_tags = (100, 101)                         # (mesh tiles carry their index)
    dut = SystolicArray(cfg, tag_bits=8, mesh=True)
    rows_out = {}

    async def gemm_tile(ctx, a, b, tag):
        for k in range(a.shape[1]):
            ctx.set(dut.i_valid, 1)
            ctx.set(dut.i_first, k == 0)
            ctx.set(dut.i_last, k == a.shape[1] - 1)
            ctx.set(dut.i_a, pack(a[:, k], 8))
            ctx.set(dut.i_b, pack(b[k, :], 8))
            ctx.set(dut.i_a00, int(a[0, k]) & 0xFF)   # PE (0, 0)'s copies
            ctx.set(dut.i_b00, int(b[k, 0]) & 0xFF)
            ctx.set(dut.i_tag, tag)
            await ctx.tick()
        ctx.set(dut.i_valid, 0)
        ctx.set(dut.i_first, 0)
        ctx.set(dut.i_last, 0)

    async def producer(ctx):
        await gemm_tile(ctx, *gemm[0], gemm_tags[0])
        for _ in range(R + C - 2):                 # its last beat passes the last PE
            await ctx.tick()
        for beat in beats:
            set_mesh_beat(ctx, dut, beat)
            await ctx.tick()
        ctx.set(dut.i_mesh, 0)
        ctx.set(dut.i_tap, 0)
        ctx.set(dut.i_first, 0)
        ctx.set(dut.i_last, 0)
        for _ in range(SystolicArray.mesh_gemm_gap - 1 + gap_change):
            await ctx.tick()
        await gemm_tile(ctx, *gemm[1], gemm_tags[1])

    async def monitor(ctx):
        for _ in range(len(beats) + 8 * (R + C) + 40):
            if ctx.get(dut.o_valid):
                t, r = ctx.get(dut.o_tag), ctx.get(dut.o_r)
                rows_out.setdefault(t, {})[r] = unpack_signed(ctx.get(dut.o_row), 32, C)
            await ctx.tick()

    run_sim(dut, producer, monitor)
    got_mesh = np.zeros_like(expect)
    for t, tile in enumerate(tiles):
        acc = np.array([rows_out[t][r] for r in range(R)])
        scatter_results(tile, acc, got_mesh, stride=1)
    np.testing.assert_array_equal(got_mesh, expect)
    results = [np.array([rows_out[tag][r] for r in range(R)]) for tag in gemm_tags]
    assert np.array_equal(results[0], gemm[0][0] @ gemm[0][1])
    assert np.array_equal(results[1], gemm[1][0] @ gemm[1][1]) == (gap_change == 0)
