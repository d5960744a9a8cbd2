# amaranth: UnusedElaboratable=no
"""The depthwise feeder (hw/dwfeed.py) driving the array's mesh mode from buffer words, against
spec/dwmesh.py, tiles back to back."""

import dataclasses

import numpy as np
import pytest
from amaranth import Elaboratable, Module, unsigned
from amaranth.lib.memory import Memory

from hw.array import SystolicArray
from hw.dwfeed import DwFeeder, tile_program
from spec.config import PRESETS
from spec.dwmesh import (mesh_depthwise, padded_input, plan_tiles, run_strip_tile, serpentine,
                         scatter_results, strip_steps, strip_tile_cycles, tile_cycles,
                         tile_patches, tile_weights, walks)

from .test_array import pack, unpack_signed
from .util import run_sim


class _Harness(Elaboratable):
    """Buffers A and B (initialised), the feeder and the array, wired as the compute engine
    will wire them."""

    def __init__(self, cfg, a_words, b_words):
        self.feed = DwFeeder(cfg, tag_bits=8)
        self.array = SystolicArray(cfg, tag_bits=8, mesh=True)
        self._a, self._b, self._cfg = a_words, b_words, cfg

    def elaborate(self, platform):
        m = Module()
        cfg = self._cfg
        m.submodules.feed = feed = self.feed
        m.submodules.array = arr = self.array
        m.submodules.buf_a = buf_a = Memory(shape=unsigned(8 * cfg.a_beat_bytes),
                                            depth=len(self._a), init=self._a)
        m.submodules.buf_b = buf_b = Memory(shape=unsigned(8 * cfg.b_beat_bytes),
                                            depth=len(self._b), init=self._b)
        ra, rb = buf_a.read_port(), buf_b.read_port()
        m.d.comb += [ra.addr.eq(feed.a_raddr), ra.en.eq(feed.rd_en), feed.a_rdata.eq(ra.data),
                     rb.addr.eq(feed.b_raddr), rb.en.eq(feed.rd_en), feed.b_rdata.eq(rb.data)]
        m.d.comb += [arr.i_mesh.eq(feed.o_mesh), arr.i_move.eq(feed.o_move),
                     arr.i_split.eq(feed.o_split), arr.i_fill.eq(feed.o_fill),
                     arr.i_w.eq(feed.o_w), arr.i_tap.eq(feed.o_tap),
                     arr.i_first.eq(feed.o_first), arr.i_last.eq(feed.o_last),
                     arr.i_tag.eq(feed.o_tag)]
        return m


async def _issue_tiles(ctx, feed, started, tiles):
    """Start the feeder on each tile's parameters (a dict of ``p_*`` values) as soon as it is
    ready, and append the cycle each start was taken to ``started``."""
    cycle = 0
    for params in tiles:
        ctx.set(feed.start, 1)
        for name, value in params.items():
            ctx.set(getattr(feed, name), value)
        while not ctx.get(feed.ready):
            await ctx.tick()
            cycle += 1
        started.append(cycle)
        await ctx.tick()
        cycle += 1
    ctx.set(feed.start, 0)


@pytest.mark.parametrize("channels,h,w,stride,pad", [
    (6, 3, 3, 1, 1),        # quadrants
    (2, 13, 9, 1, 1),       # whole mesh, ragged
    (3, 6, 6, 2, 1),        # stride 2 halves
    (1, 21, 15, 2, 0),      # stride 2, whole mesh
])
def test_feeder_runs_tiles_back_to_back(channels, h, w, stride, pad):
    cfg = PRESETS["small"]
    R, C = cfg.array_rows, cfg.array_cols
    rng = np.random.default_rng(channels + 10 * h + stride)
    x = rng.integers(-128, 128, (channels, h, w), dtype=np.int8)
    wt = rng.integers(-128, 128, (channels, 3, 3), dtype=np.int8)
    x[0, 0, 0], wt[0, 0, 0] = -128, -128
    expect, beats = mesh_depthwise(x, wt, stride=stride, pad=pad, rows=R, cols=C)
    tiles = plan_tiles(channels, h, w, stride=stride, pad=pad, rows=R, cols=C)
    padded = padded_input(x, pad)
    # tile t's words at t*R: even patch rows in buffer A, odd ones in B, phase after phase
    a_words, b_words = [], []
    for tile in tiles:
        patches = tile_patches(tile, padded, stride=stride, rows=R, cols=C)
        rows = [row for patch in patches for row in patch]
        a_words += [pack(r, 8) for r in rows[0::2]] + [0] * (R - len(rows) // 2)
        b_words += [pack(r, 8) for r in rows[1::2]] + [0] * (R - len(rows) // 2)
    dut = _Harness(cfg, a_words, b_words)
    feed, arr = dut.feed, dut.array
    started, rows_out = [], {}

    async def driver(ctx):
        await _issue_tiles(ctx, feed, started, [
            {"p_stride2": stride == 2, "p_split": SystolicArray.SPLITS[tile.split],
             "p_a_base": t * R, "p_b_base": t * R, "p_a_hi": R, "p_b_hi": R,
             # the second row phase's words follow the first's
             "p_a_base1": t * R + R // 2, "p_b_base1": t * R + R // 2, "p_a_hi1": R,
             "p_b_hi1": R,
             "p_w": pack(tile_weights(tile, wt).reshape(4, 9).reshape(-1), 8), "p_tag": t}
            for t, tile in enumerate(tiles)])

    async def monitor(ctx):
        for cycle in range(beats + 4 * R + 16):
            if ctx.get(arr.o_valid):
                t = ctx.get(arr.o_tag)
                rows_out.setdefault(t, []).append((ctx.get(arr.o_r),
                                                   unpack_signed(ctx.get(arr.o_row), 32, C)))
            await ctx.tick()

    run_sim(dut, driver, monitor)
    # no bubble between tiles: each starts when the previous one's program ends
    # a tile after another makes its first fill beat in that one's last tap beat
    assert np.diff(started).tolist() == [tile_cycles(t, stride, R) - (i > 0)
                                         for i, t in enumerate(tiles[:-1])]
    assert sum(tile_cycles(t, stride, R) for t in tiles) - (len(tiles) - 1) == beats
    got = np.zeros_like(expect)
    for t, tile in enumerate(tiles):
        acc = np.zeros((R, C), np.int64)
        assert [r for r, _ in rows_out[t]] == list(range(R - 1, -1, -1))
        for r, row in rows_out[t]:
            acc[r] = row
        scatter_results(tile, acc, got, stride=stride)
    np.testing.assert_array_equal(got, expect)


@pytest.mark.parametrize("c,h,w,group,stride,quad,kernel", [
    (2, 10, 13, 2, 1, False, 3), (1, 5, 6, 1, 1, False, 3), (3, 4, 20, 3, 1, False, 3),
    (3, 5, 6, 3, 1, False, 3), (2, 7, 9, 2, 1, False, 3), (5, 3, 6, 5, 1, False, 3),
    (4, 2, 11, 4, 1, False, 3),
    # stride 2's row phases: two fills a tile, the second with the *1 parameters (maps of
    # up to 7 columns on the 8x8; wider ones in column phases, below)
    (2, 8, 7, 2, 2, False, 3), (3, 16, 6, 3, 2, False, 3), (1, 12, 5, 1, 2, False, 3),
    # stride 2 in row and column phases (session 42): four fills a tile, fill f with
    # parameter set f, the second column phase's rotation and pad lanes; first and later
    # strips, a ragged last one (3x3 on the 8x8: strips of 7 output columns)
    (2, 8, 9, 2, 2, False, 3), (3, 16, 20, 3, 2, False, 3), (2, 12, 31, 1, 2, False, 3),
    (2, 8, 9, 2, 2, False, 5), (3, 12, 10, 3, 2, False, 5), (1, 16, 25, 1, 2, False, 5),
    # ... two channels a tile (4 and 6 rows on the 8x8, spec.dwmesh.phase_halves): each
    # fill in halves, the second with the *2 and *3 parameters; a lone last channel; 18
    # stacked rows, classes 0 and 1 a row longer than 2 and 3
    (3, 6, 9, 3, 2, False, 3), (4, 4, 7, 4, 2, False, 3), (2, 6, 6, 2, 2, False, 3),
    # the quadrant mode: 3 x 3 maps on the 8x8, four a tile, 1 to 4 in a step's last
    (7, 3, 3, 7, 1, True, 3), (6, 3, 3, 6, 1, True, 3), (9, 3, 3, 9, 1, True, 3),
    (4, 3, 3, 4, 1, True, 3), (1, 3, 3, 1, 1, True, 3),
    # depthwise 5x5: the 25-tap walk, both top pad rows masked, two lanes of pre-rotation;
    # maps row_passes takes (5, 9, 10 rows on the 8x8: two fills a tile, 6 output rows)
    (2, 10, 13, 2, 1, False, 5), (1, 5, 6, 1, 1, False, 5), (3, 4, 9, 3, 1, False, 5),
    (3, 7, 5, 3, 1, False, 5), (1, 1, 1, 1, 1, False, 5), (2, 9, 10, 2, 1, False, 5),
    # depthwise 7x7 (on the 16x16: 10 x 10 outputs a tile): three top pad rows (two even
    # fill words, one odd), three lanes of pre-rotation; 12 and 28 rows in row passes
    # (three fills a tile, 14 x 10 outputs; 28 rows two tiles a channel)
    (2, 12, 13, 2, 1, False, 7), (3, 7, 7, 3, 1, False, 7), (2, 28, 9, 2, 1, False, 7),
    # ... two channels a tile on maps of up to R/2 - 1 rows (7 on the 16x16, 3 on the 8x8),
    # the window's rows two a fill in halves (session 41): a lone last channel, one row
    (2, 7, 7, 2, 1, False, 5), (2, 3, 6, 2, 1, False, 5), (4, 6, 9, 4, 1, False, 7),
    (3, 1, 4, 3, 1, False, 7), (2, 3, 3, 2, 1, False, 5),
    # 5x5 stride 2 in row phases (8 and 12 rows on the 8x8: window rows 0, 2, 4 then 1, 3;
    # maps of up to 6 columns)
    (2, 8, 6, 2, 2, False, 5), (3, 12, 5, 3, 2, False, 5),
    # ... two channels a tile (4 and 6 rows on the 8x8: phase_halves; a top pad row in
    # both fills of both halves, phase 0's last row round the ring)
    (3, 6, 9, 3, 2, False, 5), (2, 4, 7, 2, 2, False, 5),
    # 7x7 stride 2 in row phases (16 and 32 rows on the 16x16: window rows 0, 2, 4, then 1,
    # 3, 5, then 6 with the *2 parameters; 14 stride-2 rows a tile)
    (2, 32, 9, 2, 2, False, 7), (3, 16, 12, 2, 2, False, 7)])
def test_feeder_runs_strip_tiles_with_masks_and_the_left_pad_rotation(c, h, w, group, stride,
                                                                       quad, kernel):
    """A strip step's tiles (spec.dwmesh.strip_steps) from buffers loaded as its loads load
    them, stale words full of garbage: the masked fill words and the pre-rotation give each
    tile's accumulators as spec.dwmesh.run_strip_tile computes them, tiles back to back; maps
    of up to R/2 - 1 rows two channels a tile, one in each half (with a last lone one);
    stride 2 in row phases; maps of R/2 - 1 rows and columns four a tile (the quadrant
    mode), from two-row words."""
    _feed_strip_tiles(PRESETS["default" if kernel == 7 else "small"],   # (7x7: 9 columns)
                      c, h, w, group, stride, quad, kernel)


@pytest.mark.parametrize("c,h,w,group", [(2, 8, 6, 2), (1, 12, 11, 1), (3, 4, 4, 3)])
def test_feeder_runs_column_phase_tiles_on_a_4x4_mesh(c, h, w, group):
    """Stride 2 in row and column phases on the smallest mesh that takes them (4x4, 3x3:
    its fourth fill's words from 3 R / 2 = 6 of the program, strips of 3 output columns)."""
    cfg = dataclasses.replace(PRESETS["tiny"], dw_mesh=1)
    assert all(t.cphases for s in strip_steps(c, h, w, x_addr=0, out_addr=0, rows=4, cols=4,
                                              group=group, stride=2) for t in s.tiles)
    _feed_strip_tiles(cfg, c, h, w, group, 2, False, 3)


def _feed_strip_tiles(cfg, c, h, w, group, stride, quad, kernel):
    R, C = cfg.array_rows, cfg.array_cols
    rng = np.random.default_rng(c + 7 * h + w)
    x = rng.integers(-128, 128, (c, h, w), dtype=np.int8)
    wt = rng.integers(-128, 128, (c, kernel, kernel), dtype=np.int8)
    x_addr = 100
    mem = rng.integers(-128, 128, 4000).astype(np.int64)
    mem[x_addr:x_addr + x.size] = x.reshape(-1)
    depth = 64
    pad = int(rng.integers(-128, 128))
    for step in strip_steps(c, h, w, x_addr=x_addr, out_addr=0, rows=R, cols=C, group=group,
                            stride=stride, kernel=kernel):
        assert all(bool(t.quads) == quad for t in step.tiles)
        words = {}
        for name, block in (("a", step.a_load), ("b", step.b_load)):
            # stale words, and garbage past each load's bytes: the pad mask replaces it
            got = rng.integers(-128, 128, (depth, C)).astype(np.int64)
            for word, data in block.word_bytes(mem):
                got[word, :len(data)] = data
            words[name] = got
        dut = _Harness(cfg, [pack(r, 8) for r in words["a"]], [pack(r, 8) for r in words["b"]])
        feed, arr = dut.feed, dut.array
        started, rows_out = [], {}

        def params(t, tile):
            # a lone top half: the bottom all padding, with the top's weights; a row-phase
            # tile's second phase; in halves and row phases the top half's second fill the
            # *2 parameters and the bottom half's the *3 ones
            def lone(t):
                return dataclasses.replace(t, a_hi=0, b_hi=0)
            bottom = (tile.pair or lone(tile)) if tile.halves else (tile.phase1 or lone(tile))
            third = tile.phase2
            if tile.halves and tile.phase1:
                third = tile.phase1
                fourth = tile.pair.phase1 if tile.pair else lone(tile.phase1)
            if tile.cphases:        # row and column phases: fill f with parameter set f
                fourth = tile.phase3
            weights = [wt[tile.channel], wt[bottom.channel]] if tile.halves else \
                [wt[tile.channel]]
            if tile.quads:          # a quadrant without a channel: the tile's first's weights
                weights = [wt[tile.channel + q if q < tile.quads else tile.channel]
                           for q in range(4)]
            split = (2, 2) if tile.quads else (2, 1) if tile.halves else (1, 1)
            two = tile.phase1 is not None       # row phases (3x3) or row passes (5x5)
            if tile.halves and kernel > 3:      # region 1's 5x5 / 7x7 taps from tap 49
                weights = [np.pad(v.reshape(-1), (0, 49 - kernel * kernel)) for v in weights]
            return {"p_stride2": two and not tile.passes, "p_quads": tile.quads,
                    "p_passes": tile.passes, "p_pairs": tile.pairs,
                    "p_b_lo1": bottom.b_lo if tile.pairs or tile.cphases else 0,
                    "p_a_lo2": tile.phase1.a_lo if tile.halves and tile.phase1 else
                    third.a_lo if tile.cphases else 0,
                    "p_cphases": tile.cphases,
                    "p_pre_right1": bottom.pre_right if tile.cphases else 0,
                    "p_pad_mask1": sum(1 << j for j in range(bottom.cols, C))
                    if tile.cphases else 0,
                    "p_split": SystolicArray.SPLITS[split],
                    "p_a_base": tile.a_base % depth, "p_b_base": tile.b_base,
                    "p_a_lo": tile.a_lo, "p_a_hi": tile.a_hi, "p_b_hi": tile.b_hi,
                    "p_b_lo": tile.b_lo, "p_kernel": (tile.kernel - 3) // 2,
                    "p_pre_right": tile.pre_right, "p_swap": tile.swap,
                    "p_halves": tile.halves and not tile.pairs,
                    "p_a_base1": bottom.a_base % depth,
                    "p_b_base1": bottom.b_base, "p_a_lo1": bottom.a_lo,
                    "p_a_hi1": bottom.a_hi, "p_b_hi1": bottom.b_hi, "p_swap1": bottom.swap,
                    # a 7x7 pass tile's third fill
                    **({"p_a_base2": third.a_base % depth,
                        "p_b_base2": third.b_base, "p_a_hi2": third.a_hi,
                        "p_b_hi2": third.b_hi, "p_swap2": third.swap}
                       if third else {}),
                    **({"p_a_base3": fourth.a_base % depth,
                        "p_b_base3": fourth.b_base, "p_a_hi3": fourth.a_hi,
                        "p_b_hi3": fourth.b_hi, "p_swap3": fourth.swap}
                       if (tile.halves and tile.phase1) or tile.cphases else {}),
                    "p_w": pack(np.pad(np.concatenate([v.reshape(-1) for v in weights]),
                                       (0, 98 - sum(v.size for v in weights))), 8),
                    "p_tag": t, "p_pad": pad & 0xFF,
                    "p_pad_mask": sum(1 << j for j in range(tile.cols, C))}

        async def driver(ctx, tiles=step.tiles):
            await _issue_tiles(ctx, feed, started, [params(t, tile)
                                                    for t, tile in enumerate(tiles)])

        async def monitor(ctx, beats=sum(strip_tile_cycles(t, R) for t in step.tiles)):
            for _ in range(beats + 4 * R + 16):
                if ctx.get(arr.o_valid):
                    rows_out.setdefault(ctx.get(arr.o_tag), []).append(
                        (ctx.get(arr.o_r), unpack_signed(ctx.get(arr.o_row), 32, C)))
                await ctx.tick()

        run_sim(dut, driver, monitor)
        assert np.diff(started).tolist() == [strip_tile_cycles(t, R) - (i > 0)
                                             for i, t in enumerate(step.tiles[:-1])]
        for t, tile in enumerate(step.tiles):
            acc = np.zeros((R, C), np.int64)
            for r, row in rows_out[t]:
                acc[r] = row
            expect = run_strip_tile(tile, words["a"], words["b"], wt, R, pad)
            wrapped = (expect + (1 << 31)) % (1 << 32) - (1 << 31)
            np.testing.assert_array_equal(acc, wrapped)


@pytest.mark.parametrize("stride,length", [(1, 8 // 2 + 9), (2, 2 * (8 // 2) + 9 - 1)])
def test_tile_program_is_the_models_schedule(stride, length):
    prog = tile_program(8, stride)
    assert len(prog) == length
    taps = [b for b in prog if b[2] is not None]
    assert sorted(b[2] for b in taps) == list(range(9))
    # stride 2: phase 1's first fill beat is phase 0's last tap (dy = 2, dx = 0)
    assert [b[:3] for b in prog if b[0] == "FILL" and b[2] is not None] == \
        ([("FILL", 4, 6)] if stride == 2 else [])
    assert [b[3] for b in taps].count(True) == 1 and taps[0][3]
    assert [b[4] for b in taps].count(True) == 1 and taps[-1][4]
    assert [b[1] for b in prog if b[0] == "FILL"] == list(range(4 * stride))


@pytest.mark.parametrize("kernel", [5, 7])
def test_big_kernel_tile_program_is_the_models_schedule(kernel):
    prog = tile_program(16, 1, kernel=kernel)
    assert len(prog) == 16 // 2 + kernel ** 2
    taps = [b for b in prog if b[2] is not None]
    assert [b[2] for b in taps] == [kernel * dy + dx for (dy, dx), _ in serpentine(kernel)]
    assert [b[0] for b in taps] == [mv or "HOLD" for _, mv in serpentine(kernel)]
    assert taps[0][3] and taps[-1][4] and sum(b[3] + b[4] for b in taps) == 2


def test_7x7_pass_tile_program_is_the_models_schedule():
    """A 7x7 tile in row passes: three fills (words 0 .. 3 R/2 - 1), each after the first in
    the last tap of the pass before."""
    prog = tile_program(16, 1, kernel=7, passes=True)
    assert len(prog) == 3 * 8 + 49 - 2
    taps = [b for b in prog if b[2] is not None]
    assert [b[2] for b in taps] == [7 * dy + dx for w in walks(1, 7, passes=True)
                                    for (dy, dx), _ in w]
    assert [b[1] for b in prog if b[0] == "FILL"] == list(range(24))
    assert [b[:3] for b in prog if b[0] == "FILL" and b[2] is not None] == [
        ("FILL", 8, 7 * 2 + 6), ("FILL", 16, 7 * 5 + 6)]
    assert taps[0][3] and taps[-1][4] and sum(b[3] + b[4] for b in taps) == 2


def test_7x7_row_phase_tile_program_is_the_models_schedule():
    """A 7x7 stride-2 tile in row phases (session 40): three fills (words 0 .. 3 R/2 - 1),
    the window rows 0, 2, 4, then 1, 3, 5, then 6, each fill after the first in the last tap
    of the one before."""
    prog = tile_program(16, 2, kernel=7)
    assert len(prog) == 3 * 8 + 49 - 2
    taps = [b for b in prog if b[2] is not None]
    assert [b[2] for b in taps] == [7 * dy + dx for w in walks(2, 7) for (dy, dx), _ in w]
    assert [b[1] for b in prog if b[0] == "FILL"] == list(range(24))
    assert [b[:3] for b in prog if b[0] == "FILL" and b[2] is not None] == [
        ("FILL", 8, 7 * 4 + 6), ("FILL", 16, 7 * 5 + 6)]
    assert taps[0][3] and taps[-1][4] and sum(b[3] + b[4] for b in taps) == 2


def test_pass_tile_program_is_the_models_schedule():
    """A 5x5 tile in row passes: two fills (words 0 .. R/2 - 1, then R/2 .. R - 1, the
    second's first in pass 0's last tap), each pass's serpentine from its fill's top left."""
    prog = tile_program(16, 1, kernel=5, passes=True)
    assert len(prog) == 16 + 25 - 1
    taps = [b for b in prog if b[2] is not None]
    two = walks(1, 5, passes=True)
    assert [b[2] for b in taps] == [5 * dy + dx for w in two for (dy, dx), _ in w]
    assert [b[1] for b in prog if b[0] == "FILL"] == list(range(16))
    assert [b[:3] for b in prog if b[0] == "FILL" and b[2] is not None] == [("FILL", 8, 14)]
    assert taps[0][3] and taps[-1][4] and sum(b[3] + b[4] for b in taps) == 2


def test_feeder_needs_a_square_array():
    cfg = dataclasses.replace(PRESETS["small"], array_cols=16, block_n=16)
    with pytest.raises(ValueError, match="must be square, not 8x16"):
        DwFeeder(cfg, tag_bits=4)


@pytest.mark.parametrize("kernel", [3, 5])
def test_column_phase_tile_program_is_the_models_schedule(kernel):
    """A stride-2 tile in row and column phases (session 42): four fills (words 0 .. 2 R - 1),
    fill f's words f R/2 .., each fill after the first in the last tap of the one before."""
    prog = tile_program(16, 2, kernel=kernel, cphases=True)
    assert len(prog) == 4 * 8 + kernel ** 2 - 3
    taps = [b for b in prog if b[2] is not None]
    fills = walks(2, kernel, cphases=True)
    assert [b[2] for b in taps] == [kernel * dy + dx for w in fills for (dy, dx), _ in w]
    assert [b[1] for b in prog if b[0] == "FILL"] == list(range(32))
    assert [b[:3] for b in prog if b[0] == "FILL" and b[2] is not None] == [
        ("FILL", 8 * f, kernel * w[-1][0][0] + w[-1][0][1]) for f, w in enumerate(fills[:-1], 1)]
    assert taps[0][3] and taps[-1][4] and sum(b[3] + b[4] for b in taps) == 2
