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
            if move == "FILL":        # word k: rows 2k, 2k+1 of the phases' patches
                beats.append(("FILL", split, rows_of[2 * word:2 * word + 2], None, 0, 0, 0, t))
            else:
                beats.append((move, split, None, weights[:, tap], 1, first, last, t))
    return tiles, beats


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
        for cycle, (move, split, fill, wts, tap, first, last, t) in enumerate(beats):
            ctx.set(dut.i_mesh, 1)
            ctx.set(dut.i_move, SystolicArray.MOVES[move])
            ctx.set(dut.i_split, split)
            ctx.set(dut.i_fill, 0 if fill is None else pack(fill.reshape(-1), 8))
            ctx.set(dut.i_w, 0 if wts is None else pack(wts, 8))
            ctx.set(dut.i_tap, tap)
            ctx.set(dut.i_first, first)
            ctx.set(dut.i_last, last)
            ctx.set(dut.i_tag, t)
            if last:
                last_tap_cycle[t] = cycle
            await ctx.tick()
        ctx.set(dut.i_mesh, 0)
        ctx.set(dut.i_tap, 0)

    async def monitor(ctx):
        for cycle in range(len(beats) + R + 8):
            if ctx.get(dut.o_valid):
                t, r = ctx.get(dut.o_tag), ctx.get(dut.o_r)
                rows_out.setdefault(t, []).append(
                    (cycle, r, unpack_signed(ctx.get(dut.o_row), 32, C)))
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

