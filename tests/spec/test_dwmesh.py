"""The rotating mesh's depthwise dataflow (spec/dwmesh.py) against the grouped convolution."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from spec.config import PRESETS
from spec.desc import DIM_BITS, col_phase_kernels, col_phase_ranges, depthwise_mesh_side
from spec.dwmesh import (PASS_ROWS, PHASE_TAPS, SERPENTINE, MeshTile, col_phases, input_bound,
                         mac_utilisation, mesh_depthwise, out_size, padded_input, plan_tiles, quad_mode, row_phases,
                         run_strip_tile, run_tile, strip_channels, strip_step_cycles,
                         strip_steps, strip_tile_acc, strip_tile_writes, tile_cycles, tile_patches,
                         tile_weights, serpentine, strip_tile_cycles, walks, row_passes,
                         row_pass_ranges, pass_tile_beats, one_strip, one_tile, phase_halves,
                         pair_fill)
from spec.golden import conv2d_int8


def _reference(x, w, stride, pad):
    c = x.shape[0]
    return conv2d_int8(x[None], w[:, None], stride=(stride, stride), pads=(pad,) * 4,
                       groups=c)[0]


def _random(rng, c, h, w, kernel=3):
    return (rng.integers(-128, 128, (c, h, w), dtype=np.int8),
            rng.integers(-128, 128, (c, kernel, kernel), dtype=np.int8))


@pytest.mark.parametrize("c,h,w,stride,pad", [
    (3, 7, 7, 1, 1),      # quadrant mode, the pads meet through the rings' wrap
    (5, 7, 5, 1, 1),      # quadrants, a partial group of channels
    (2, 14, 14, 1, 1),    # one 16x16 patch, 14x14 outputs
    (2, 20, 31, 1, 1),    # ragged tiles in both directions
    (1, 6, 6, 1, 0),      # no padding
    (2, 14, 14, 2, 1),    # stride 2 halves: two channels' row phases
    (3, 29, 17, 2, 1),    # stride 2, whole-mesh tiles, ragged
    (2, 9, 9, 2, 0),
    (2, 1, 1, 1, 1),      # a single pixel
    (4, 15, 15, 1, 1),
])
def test_mesh_matches_grouped_convolution(c, h, w, stride, pad):
    rng = np.random.default_rng(c * 1000 + h * 10 + w)
    x, wt = _random(rng, c, h, w)
    got, cycles = mesh_depthwise(x, wt, stride=stride, pad=pad)
    np.testing.assert_array_equal(got, _reference(x, wt, stride, pad))
    tiles = plan_tiles(c, h, w, stride=stride, pad=pad, rows=16, cols=16)
    assert cycles == sum(tile_cycles(t, stride, 16) for t in tiles) - (len(tiles) - 1)


@settings(max_examples=40, deadline=None)
@given(c=st.integers(1, 6), h=st.integers(1, 40), w=st.integers(1, 40),
       stride=st.sampled_from([1, 2]), pad=st.sampled_from([0, 1]),
       size=st.sampled_from([(4, 4), (8, 8), (16, 16), (8, 16)]), seed=st.integers(0, 2**16))
def test_mesh_random_shapes_and_meshes(c, h, w, stride, pad, size, seed):
    if out_size(h, pad, stride) < 1 or out_size(w, pad, stride) < 1:
        return
    rng = np.random.default_rng(seed)
    x, wt = _random(rng, c, h, w)
    got, _ = mesh_depthwise(x, wt, stride=stride, pad=pad, rows=size[0], cols=size[1])
    np.testing.assert_array_equal(got, _reference(x, wt, stride, pad))


def test_extreme_values_wrap_like_the_accumulators():
    x = np.full((1, 5, 5), -128, np.int8)
    w = np.full((1, 3, 3), -128, np.int8)
    got, _ = mesh_depthwise(x, w)
    np.testing.assert_array_equal(got, _reference(x, w, 1, 1))
    assert got[0, 2, 2] == 9 * 128 * 128


def test_walks_visit_every_tap_once():
    assert sorted(t for t, _ in SERPENTINE) == [(dy, dx) for dy in range(3) for dx in range(3)]
    phased = [(dy, dx) for p in (0, 1) for dy, dx, _ in PHASE_TAPS[p]]
    assert sorted(phased) == [(dy, dx) for dy in range(3) for dx in range(3)]
    assert all(dy % 2 == p for p in (0, 1) for dy, _, _ in PHASE_TAPS[p])


def test_mobilenet_v2_depthwise_bounds():
    """The bound the design gives MobileNet-V2's depthwise layers on the 16x16 (docs/
    architecture.md's table): stride 1 at 43.1% (7x7 too: four channels a tile, their 7 rows
    two a store beat, 16 C-port beats a 16-beat tile; a beat a row, 28, would bound it at
    24.6%), stride 2 at 15.0%."""
    for h, ch in ((112, 32), (56, 144), (28, 192), (14, 384), (14, 576)):
        # 16 beats a tile: its first fill beat is the previous tile's last tap beat
        assert mac_utilisation(ch, h, h, stride=1) == pytest.approx(9 * 196 / (16 * 256),
                                                                    rel=1e-3)
    assert mac_utilisation(960, 7, 7, stride=1) == pytest.approx(4 * 49 * 9 / (16 * 256),
                                                                 rel=1e-3)
    for h, ch in ((112, 96), (56, 144), (28, 192), (14, 576)):
        # 15 x 7 outputs in 23 beats (two fills, nine taps, phase 1's first fill beat in
        # phase 0's last tap beat, the next tile's first in its last), the maps' 7 k rows in
        # tiles of 15
        assert mac_utilisation(ch, h, h, stride=2) == pytest.approx(
            15 * 7 * 9 / (23 * 256) * 14 / 15, rel=1e-3)


def test_input_bandwidth_bound():
    """What memory allows any dataflow on the default 16x16 (docs/architecture.md's table):
    stride 2 reads four input bytes an output, so its even maps are capped at 28.1% by the two
    16 B/cycle ports (the pads are never read); stride 1 is not input-bound."""
    cfg = PRESETS["default"]
    port = cfg.a_port_bytes_per_cycle + cfg.b_port_bytes_per_cycle
    assert port == 32
    for h in (112, 56, 28, 14):
        assert input_bound(h, h, stride=2, bytes_per_cycle=port) == 9 * 32 / (4 * 256)
        assert input_bound(h, h, stride=1, bytes_per_cycle=port) == 1.0
    # odd maps: a stride-2 output row and column more than half the input's
    assert input_bound(7, 7, stride=2, bytes_per_cycle=port) == 9 * 16 * 32 / (49 * 256)
    assert input_bound(7, 7, stride=1, bytes_per_cycle=4) == 9 * 4 / 256
    with pytest.raises(ValueError, match="stride=3 1 or 2"):
        input_bound(7, 7, stride=3, bytes_per_cycle=port)


@pytest.mark.parametrize("kwargs,match", [
    (dict(x=np.zeros((2, 4, 4), np.int16)), "x must be an int8 array"),
    (dict(w=np.zeros((3, 3, 3), np.int8)), r"w must be an int8 array \(C, 3, 3\) = \(2, 3, 3\)"),
    (dict(stride=3), "stride=3 must be 1 or 2"),
    (dict(pad=2), "pad=2 must be 0 or 1"),
    (dict(rows=6, cols=5), "even sides"),
    (dict(x=np.zeros((2, 2, 2), np.int8), pad=0), "has no 3x3 window"),
])
def test_bad_input_is_named(kwargs, match):
    args = dict(x=np.zeros((2, 4, 4), np.int8), w=np.zeros((2, 3, 3), np.int8))
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        mesh_depthwise(args.pop("x"), args.pop("w"), **args)


@pytest.mark.parametrize("c,h,w,size,group", [
    (3, 20, 31, 16, 1), (2, 14, 14, 16, 2), (4, 28, 30, 16, 3), (1, 7, 7, 16, 1),
    (3, 9, 5, 8, 1), (2, 1, 1, 16, 1), (2, 2, 16, 8, 2), (1, 15, 15, 16, 1),
    (2, 6, 14, 16, 2), (2, 6, 15, 16, 2), (1, 4, 16, 16, 1), (1, 4, 17, 16, 1),
    (5, 12, 7, 8, 4), (4, 7, 7, 16, 4), (3, 9, 5, 8, 3), (5, 13, 6, 8, 2), (7, 7, 20, 16, 3),
    (3, 1, 5, 8, 3), (2, 16, 16, 16, 2), (3, 56, 20, 16, 3), (2, 12, 9, 8, 2),
    (1, 8, 8, 8, 1)])
@pytest.mark.parametrize("stride", [1, 2])
def test_strip_steps_replayed_on_a_memory_give_the_convolution(c, h, w, size, group, stride):
    """Execute the steps as the hardware will: block loads from a byte memory into buffer
    words (stale words and the lanes past each load full of garbage, the memory around the
    maps too), each tile's fill words masked with the pad value (the input zero point), its
    results written over whole accumulator rows, one store per step into the NCHW output; the
    result is the grouped convolution of the map padded with that value, and nothing outside
    the output is written."""
    _replay(c, h, w, size, group, stride, seed=c * 31 + h + w + size)


@pytest.mark.parametrize("c,size,group", [
    (1, 16, 1), (2, 16, 2), (3, 16, 3), (4, 16, 4), (5, 16, 5), (9, 16, 7), (13, 16, 6),
    (11, 8, 11), (6, 8, 3), (7, 8, 2), (70, 16, 70)])
def test_quadrant_steps_replayed_on_a_memory_give_the_convolution(c, size, group):
    """The quadrant mode (maps of size / 2 - 1 rows and columns): four channels
    a tile, two rows a word, two output rows a store row, a channel's last row alone; every
    number of channels in a step's last tile (1 to 4), odd and even step sizes."""
    n = size // 2 - 1
    steps = _replay(c, n, n, size, group, 1, seed=c * 7 + size + group)
    assert all(t.quads for s in steps for t in s.tiles)


@settings(max_examples=60, deadline=None)
@given(c=st.integers(1, 9), h=st.integers(1, 20), w=st.integers(1, 34),
       size=st.sampled_from([4, 8, 16]), group=st.integers(1, 9), stride=st.sampled_from([1, 2]),
       seed=st.integers(0, 2**16), quad=st.booleans())
def test_strip_steps_replayed_on_random_shapes(c, h, w, size, group, stride, seed, quad):
    """The same replay on random maps, meshes and channel groups (two maps a tile whenever
    they fit half the mesh, a lone last one for odd groups; four a tile in the quadrant
    mode)."""
    if quad and h <= size // 2 - 1 and stride == 1 and size >= 8:
        h = w = size // 2 - 1                   # the quadrant mode's maps, half the time
    _replay(c, h, w, size, min(group, c), stride, seed=seed)


def _replay(c, h, w, size, group, stride, *, seed, kernel=3, odd_rows=False, odd_cols=False):
    if h % 2 and stride == 2:
        group = 1                 # odd maps with stride 2: one channel a step
    rng = np.random.default_rng(seed)
    x, wt = _random(rng, c, h, w, kernel)
    pad = int(rng.integers(-128, 128))
    x_addr, out_addr = 700, 40_000
    mem = rng.integers(-128, 128, 80_000).astype(np.int64)   # garbage around the map
    mem[x_addr:x_addr + x.size] = x.reshape(-1)
    out_mem = np.full(80_000, -999, np.int64)
    written = np.zeros(80_000, bool)      # (an output may well be -999 itself)
    steps = strip_steps(c, h, w, x_addr=x_addr, out_addr=out_addr, rows=size, cols=size,
                        group=group, stride=stride, kernel=kernel, odd_rows=odd_rows,
                        odd_cols=odd_cols)
    oh, ow = -(-h // stride), -(-w // stride)

    def load(block):
        words = rng.integers(-128, 128, (2 * block.groups * block.words + 8, size)).astype(
            np.int64)                                                          # stale
        for word, data in block.word_bytes(mem):
            words[word, :len(data)] = data
        return words

    for step in steps:
        a_words, b_words = load(step.a_load), load(step.b_load)
        acc = rng.integers(-9, 9, (step.channels * h + size, size)).astype(np.int64)
        for tile in step.tiles:
            result = run_strip_tile(tile, a_words, b_words, wt, size, pad)
            for acc_row, lanes in strip_tile_acc(tile, result):
                acc[acc_row] = lanes
        assert step.out_rows == step.channels * step.ch_rows
        assert step.ch_rows == (-(-oh // 2) if step.half_last else oh)
        for acc_row, addr, elems in step.store_rows():
            out_mem[addr:addr + elems] = acc[acc_row, step.lane0::step.lane_step][:elems]
            written[addr:addr + elems] = True
    got = out_mem[out_addr:out_addr + c * oh * ow].reshape(c, oh, ow)
    wrapped = ((got + (1 << 31)) % (1 << 32) - (1 << 31)).astype(np.int32)
    p = (kernel - 1) // 2
    # (TF "SAME" on an even side: one less pad above / on the left, the kernel's below / right)
    top, left = p - odd_rows, p - odd_cols
    padded = np.pad(x, ((0, 0), (top, p), (left, p)), constant_values=pad)
    np.testing.assert_array_equal(wrapped, _reference(padded, wt, stride, 0))
    assert np.flatnonzero(written).tolist() == list(range(out_addr,
                                                                  out_addr + c * oh * ow))
    # every load stays inside the input tensor
    for step in steps:
        for block in (step.a_load, step.b_load):
            for lo, end in block.spans():
                assert x_addr <= lo and end <= x_addr + x.size
    return steps


@pytest.mark.parametrize("kernel,c,h,w,size,group", [
    *((5, *case) for case in (
        (1, 7, 7, 16, 1), (3, 14, 14, 16, 3), (2, 28, 30, 16, 2), (4, 12, 12, 16, 4),
        (3, 13, 25, 16, 2), (2, 1, 1, 16, 2), (5, 2, 3, 16, 5), (2, 9, 17, 8, 2),
        (3, 5, 5, 8, 3), (1, 4, 4, 6, 1), (2, 56, 20, 16, 2), (3, 11, 6, 8, 1))),
    *((7, *case) for case in (
        (1, 7, 7, 16, 1), (3, 14, 14, 16, 3), (2, 28, 30, 16, 2), (4, 10, 10, 16, 4),
        (3, 13, 25, 16, 2), (2, 1, 1, 16, 2), (5, 2, 3, 16, 5), (2, 9, 17, 10, 2),
        (3, 5, 5, 10, 3), (2, 56, 20, 16, 2), (3, 11, 6, 10, 1), (2, 12, 23, 12, 2)))])
@pytest.mark.parametrize("stride", [1, 2])
def test_big_kernel_strip_steps_replayed_on_a_memory_give_the_convolution(kernel, c, h, w, size,
                                                                           group, stride):
    """Depthwise 5x5 (pad 2) and 7x7 (pad 3) in whole-mesh tiles of the 25- and 49-tap walks:
    the same replay as the 3x3 layers' (stale words, garbage lanes, garbage around the maps, a
    random pad value), channels starting at odd and even stacked rows, first and later strips,
    the decimating store for stride 2; a first tile masks the top pad rows (two fill words
    for 5x5, three for 7x7: two even, one odd), a first strip rotates by the pad."""
    steps = _replay(c, h, w, size, group, stride, seed=c * 17 + h + w + size + kernel,
                    kernel=kernel)
    tiles = [t for s in steps for t in s.tiles]
    # (maps of the heights row_passes takes: two fills a tile for 5x5, three for 7x7,
    # size - 2 output rows; stride-2 5x5 maps of a multiple of 4 rows above a tile in row
    # phases: two fills, size - 2 stride-2 output rows, a top pad row in each phase)
    phases = row_phases(h, rows=size, stride=stride, kernel=kernel)
    passes = not phases and row_passes(h, rows=size, kernel=kernel)
    single = not phases and one_tile(h, rows=size, kernel=kernel)
    assert not (passes and single)
    # (maps of up to size / 2 - 1 rows two channels a tile, the window's rows two a fill:
    # StripTile.pairs, session 41)
    pairs = single and 2 * h + 2 <= size and size % 4 == 0
    # (and stride-2 5x5 maps of size / 2 to size - 2 rows in row phases two channels a tile,
    # phase_halves)
    two = pairs or phase_halves(h, rows=size, stride=stride, kernel=kernel)
    assert all(t.halves == (two and s.channels > 1) and t.pairs == (pairs and s.channels > 1)
               for s in steps for t in s.tiles)
    # (stride-2 5x5 maps the row phases take whole-mesh, wide enough: row and column phases,
    # four fills a tile, session 42)
    cph = col_phases(h, w, rows=size, cols=size, stride=stride, kernel=kernel)
    assert all(t.kernel == kernel and not t.quads and t.passes == passes
               and t.cphases == cph and bool(t.phase3) == cph
               and bool(t.phase1) == (passes or phases)
               and bool(t.phase2) == ((passes or phases) and (kernel == 7 or cph)) for t in tiles)
    assert {t.pre_right for s in steps for t in s.tiles if s.ox0 == 0} == (
        {1} if cph else {kernel // 2})
    assert {(t.a_lo, t.b_lo) for t in tiles if t.oy0 == 0} == (
        {{5: (1, 0), 7: (1, 1)}[kernel]} if phases else {{5: (1, 1), 7: (2, 1)}[kernel]})
    fills = (kernel + 1) // 2
    assert all(strip_tile_cycles(t, size) == (2 * size + kernel ** 2 - 3 if cph else
                                              pass_tile_beats(kernel, size) if passes or phases
                                              else fills * (size // 2) + kernel ** 2 - fills + 1
                                              if t.pairs else size // 2 + kernel ** 2)
               for t in tiles)
    assert {t.th for t in tiles if t.oy0 == 0} == (
        {min(h // 2, size - 2)} if phases else {h} if single else
        {min(h, size - (2 if passes else kernel - 1))})


@settings(max_examples=60, deadline=None)
@given(kernel=st.sampled_from([5, 7]), c=st.integers(1, 6), h=st.integers(1, 30),
       w=st.integers(1, 30), size=st.sampled_from([6, 8, 10, 16]), group=st.integers(1, 6),
       stride=st.sampled_from([1, 2]), seed=st.integers(0, 2**16))
def test_big_kernel_strip_steps_replayed_on_random_shapes(kernel, c, h, w, size, group, stride,
                                                          seed):
    if kernel == 7 and size < 10:
        size = 10                   # (a 7x7 kernel needs a mesh of at least 9 x 9)
    _replay(c, h, w, size, min(group, c), stride, seed=seed, kernel=kernel)


@pytest.mark.parametrize("kernel", [3, 5, 7])
@pytest.mark.parametrize("c,h,w,size,group,odd_rows,odd_cols", [
    (3, 14, 14, 16, 3, True, True),      # TF "SAME" stride 2: pads (p - 1, p) on both axes
    (2, 56, 20, 16, 2, True, True),      # tall maps (3x3: what would run in row phases)
    (2, 28, 30, 16, 2, True, True),      # a second strip
    (3, 16, 9, 16, 3, True, False),      # odd width: symmetric columns
    (1, 9, 12, 16, 1, False, True),      # odd height: symmetric rows, one channel a step
    (4, 6, 6, 16, 4, True, True),        # small maps (3x3: two channels a tile)
    (2, 2, 2, 16, 2, True, True),
    (3, 12, 18, 10, 3, True, True),      # a smaller mesh
    (3, 32, 20, 16, 3, True, False),     # 3x3: row phases with the odd rows, several tiles
    (2, 16, 16, 8, 2, False, True),      # 3x3: row phases keeping the odd columns
    (5, 12, 9, 8, 5, True, False),       # 3x3 on the 8 x 8: odd channel counts in phases
])
def test_odd_stride2_strip_steps_replayed_on_a_memory_give_tf_same_padding(
        kernel, c, h, w, size, group, odd_rows, odd_cols):
    """Stride 2 with a top / left pad one less than the kernel's (TF/Keras "SAME" of an even
    side): the stride-1 steps, the store keeping the odd rows / columns (``row0`` / ``lane0``);
    the same replay on a memory with garbage around it, against the convolution with those
    pads."""
    if size < depthwise_mesh_side(kernel):
        size = 10                       # (7x7 walks meshes of 9 x 9 and up; the 3x3 shape)
    steps = _replay(c, h, w, size, group, 2, seed=c * 31 + h + w + size + kernel,
                    kernel=kernel, odd_rows=odd_rows, odd_cols=odd_cols)
    # (3x3 and 5x5 maps of a multiple of 4 rows above the tile's run in row phases, the odd
    # rows too: their accumulator rows are the output rows)
    phases = row_phases(h, rows=size, stride=2, kernel=kernel)
    # (and wide enough ones in column phases too: every lane an output, the odd columns in
    # the fills, session 42)
    cph = col_phases(h, w, rows=size, cols=size, stride=2, kernel=kernel)
    assert {(s.row0, s.lane0, s.acc_rstride, s.lane_step) for s in steps} == {
        (int(odd_rows and not phases), int(odd_cols and not cph), 1 if phases else 2,
         1 if cph else 2)}
    # (maps row_passes takes: two fills a tile or more, the store the same)
    two = phases or row_passes(h, rows=size, kernel=kernel)
    assert all(bool(t.phase1) == two and t.passes == (two and not phases) and not t.quads
               for s in steps for t in s.tiles)


@settings(max_examples=40, deadline=None)
@given(c=st.integers(1, 6), h=st.integers(1, 20), w=st.integers(1, 34),
       kernel=st.sampled_from([3, 5, 7]), size=st.sampled_from([10, 16]),
       group=st.integers(1, 6), seed=st.integers(0, 2**16))
def test_odd_stride2_strip_steps_replayed_on_random_shapes(c, h, w, kernel, size, group, seed):
    """The same on random maps: the odd rows / columns wherever the side is even."""
    _replay(c, h, w, size, min(group, c), 2, seed=seed, kernel=kernel,
            odd_rows=h % 2 == 0, odd_cols=w % 2 == 0)


@pytest.mark.parametrize("kernel,size", [(3, 16), (5, 16), (7, 16), (3, 8), (5, 8), (7, 10)])
@pytest.mark.parametrize("stride,odd", [(1, False), (2, False), (2, True)])
def test_maps_at_most_cols_minus_pad_wide_run_in_one_strip(kernel, size, stride, odd):
    """A map of at most ``cols - pad`` columns is one strip of all its columns (``one_strip``):
    its left pad, rotated in from the lanes past the map, is its right pad too round the row
    ring; one column more and the strips are ``cols - 2 pad`` wide again. Replayed on a
    memory for both widths, stride 1 and 2, TF "SAME" columns, tall maps (row passes and
    phases) and short ones (two channels a tile)."""
    pad = kernel // 2
    for w in (size - pad, size - pad - 1, size - pad + 1):
        assert one_strip(w, cols=size, kernel=kernel) == (w <= size - pad)
        for c, h, group in ((3, w, 3), (2, 4 * size, 2), (4, 3, 4)):
            steps = _replay(c, h, w, size, group, stride, seed=w * 7 + h + kernel,
                            kernel=kernel, odd_rows=odd and h % 2 == 0, odd_cols=odd and w % 2 == 0)
            strip = w if w <= size - pad else size - 2 * pad
            if col_phases(h, w, rows=size, cols=size, stride=stride, kernel=kernel):
                # (row and column phases: strips of size - pad output columns, session 42)
                ow, n = -(-w // 2), size - pad
                assert [s.tw for s in steps if s.c0 == 0] == [2 * min(n, ow - ox0)
                                                              for ox0 in range(0, ow, n)]
                continue
            assert [s.tw for s in steps if s.c0 == 0] == [min(strip, w - ox0)
                                                          for ox0 in range(0, w, strip)]


def test_odd_stride2_needs_stride_2_and_even_sides():
    for kwargs in (dict(stride=1, odd_rows=True), dict(h=7, odd_rows=True),
                   dict(w=9, odd_cols=True)):
        args = dict(h=8, w=8, stride=2) | kwargs
        with pytest.raises(ValueError, match="odd_rows=.*need stride 2"):
            strip_steps(2, args.pop("h"), args.pop("w"), x_addr=0, out_addr=0, **args)


def test_serpentine_walks_visit_every_tap_once_with_one_move_between():
    for k in (1, 3, 5, 7):
        walk = serpentine(k)
        assert sorted(t for t, _ in walk) == [(dy, dx) for dy in range(k) for dx in range(k)]
        # each move brings the next tap's window: LEFT = dx + 1, RIGHT = dx - 1, UP = dy + 1
        step = {"LEFT": (0, 1), "RIGHT": (0, -1), "UP": (1, 0)}
        for ((dy, dx), move), ((ny, nx), _) in zip(walk, walk[1:]):
            assert (ny - dy, nx - dx) == step[move]
        assert walk[-1][1] is None
    assert serpentine(3) == SERPENTINE
    assert walks(1, 5) == [serpentine(5)] and walks(1, 7) == [serpentine(7)]
    # 7x7 row phases (session 40): the window rows 0, 2, 4, then 1, 3, 5, then 6 alone
    assert [sorted({dy for (dy, _), _ in w}) for w in walks(2, 7)] == [[0, 2, 4], [1, 3, 5],
                                                                        [6]]
    assert sorted(t for w in walks(2, 7) for t, _ in w) == [(dy, dx) for dy in range(7)
                                                             for dx in range(7)]
    # 5x5 row phases (session 39): the even window rows, then the odd ones, each phase's
    # rows one phase row (an UP) apart
    assert [[t for t, _ in w] for w in walks(2, 5)] == [
        [(dy, dx) for i, dy in enumerate((0, 2, 4))
         for dx in (range(5) if i % 2 == 0 else range(4, -1, -1))],
        [(1, dx) for dx in range(5)] + [(3, dx) for dx in range(4, -1, -1)]]
    assert [[t for t, _ in w] for w in walks(2, 3)] == [
        [(dy, dx) for dy, dx, _ in PHASE_TAPS[p]] for p in (0, 1)]
    with pytest.raises(ValueError, match="kernel=4"):
        serpentine(4)


def test_strip_steps_refuse_a_kernel_they_do_not_walk():
    with pytest.raises(ValueError, match="kernel=9 must be one of"):
        strip_steps(1, 8, 8, x_addr=0, out_addr=0, kernel=9)
    with pytest.raises(ValueError, match="too small for 5x5 tiles"):
        strip_steps(1, 8, 8, x_addr=0, out_addr=0, rows=4, cols=4, kernel=5)
    # a 7x7 strip after the first starts three columns left of its outputs: at least 3 wide
    with pytest.raises(ValueError, match=r"too small for 7x7 tiles \(it needs at least 9 rows"):
        strip_steps(1, 8, 8, x_addr=0, out_addr=0, rows=8, cols=8, kernel=7)


def test_row_passes_where_they_pay_and_what_a_tile_takes():
    """5x5 tiles in row passes (session 39): two fills a tile, the window rows 0 to 2 then 3
    and 4 from a patch three rows further down, ``rows - 2`` output rows in ``rows + 24``
    beats; taken for the heights where a channel's tiles then take fewer beats, above the
    maps that are one tile without them (``one_tile``: 14 rows and less; session 40)."""
    assert row_pass_ranges(16, 5) == ((24, 28), (36, 42), (48, 56), (96, 98),
                                      (108, 112), (120, 126), (180, 182))
    # (on the 8 x 8 passes cost fewer beats an output row: from 9 rows up, for good)
    assert row_pass_ranges(8, 5) == ((8, (1 << DIM_BITS) - 1),)
    assert row_pass_ranges(4, 5) == row_pass_ranges(16, 3) == ()
    taken = [h for h in range(1, 300) if row_passes(h, rows=16, kernel=5)]
    assert taken == [h for lo, hi in row_pass_ranges(16, 5) for h in range(lo + 1, hi + 1)]
    for rows in (6, 8, 10, 12, 14, 16, 20, 32):   # exactly where a channel's beats drop
        for h in range(1, 3000):
            passes, plain = -(-h // (rows - 2)), -(-h // (rows - 4))
            assert row_passes(h, rows=rows, kernel=5) == (h > rows - 2 and (
                passes * (rows + 23) < plain * (rows // 2 + 24))), (rows, h)
    assert not any(row_passes(h, rows=16, kernel=3) for h in range(1, 300))
    # 7x7: three passes (window rows 0-2, 3-5, 6), 14 rows in 71 beats against 10 in 57: fewer
    # beats a row, so from 100 rows up for good
    assert row_pass_ranges(16, 7) == ((13, 14), (20, 28), (30, 42), (50, 56), (60, 98),
                                      (100, (1 << DIM_BITS) - 1))
    assert pass_tile_beats(7, 16) == 3 * 8 + 49 - 2 and pass_tile_beats(5, 16) == 40
    for rows in (10, 12, 16, 20):
        for h in range(1, 3000):
            passes, plain = -(-h // (rows - 2)), -(-h // (rows - 6))
            assert row_passes(h, rows=rows, kernel=7) == (h > rows - 3 and (
                passes * (3 * rows // 2 + 46) < plain * (rows // 2 + 48))), (rows, h)
    three = walks(1, 7, passes=True)
    assert [sorted({dy for (dy, _), _ in w}) for w in three] == [[0, 1, 2], [3, 4, 5], [6]]
    assert sorted(t for w in three for t, _ in w) == [(dy, dx) for dy in range(7)
                                                      for dx in range(7)]
    # the walks: every tap once, each pass from the top left of its own fill
    two = walks(1, 5, passes=True)
    assert [sorted({dy for (dy, _), _ in w}) for w in two] == [[0, 1, 2], [3, 4]]
    assert sorted(t for w in two for t, _ in w) == [(dy, dx) for dy in range(5)
                                                    for dx in range(5)]
    assert [w[0][0] for w in two] == [(0, 0), (3, 0)] and [w[-1][1] for w in two] == [None] * 2
    assert tuple(tuple(sorted({dy for (dy, _), _ in w})) for w in two) == \
        tuple(tuple(r) for r in PASS_ROWS[5])
    for bad in ((2, 5), (1, 3), (2, 7)):
        with pytest.raises(ValueError, match="row passes"):
            walks(*bad, passes=True)
    # a 28-row map: two tiles a channel, 14 rows each (one strip of 14 columns: one_strip)
    steps = strip_steps(3, 28, 14, x_addr=0, out_addr=0, group=3, kernel=5)
    assert [len(s.tiles) for s in steps] == [6]
    tile = steps[0].tiles[1]
    assert (tile.th, tile.acc_row, tile.phase1.acc_row) == (14, 14, 14)
    # pass 1's patch starts at input row oy0 + 1: the channel's fill words a word or two on,
    # the buffers traded, no top pad
    assert (tile.phase1.swap, tile.phase1.a_lo, tile.phase1.b_lo) == (not tile.swap, 0, 0)
    assert (tile.phase1.a_base, tile.phase1.b_base) == (
        (tile.a_base + 1, tile.b_base + 2) if tile.swap else (tile.a_base + 2, tile.b_base + 1))
    assert strip_step_cycles(steps[0], 16) == 6 * 40 - 5        # against 9 * 33 - 8
    assert [len(s.tiles) for s in strip_steps(1, 16, 14, x_addr=0, out_addr=0,
                                              kernel=5)] == [2]     # (no passes: 2 either way)
    # a 14 x 14 map: one whole-mesh tile a channel, the map's top pad rows its bottom ones
    # round the ring (one_tile; 40-beat tiles in row passes until session 40, and two strips)
    steps = strip_steps(3, 14, 14, x_addr=0, out_addr=0, group=3, kernel=5)
    assert [[(t.th, t.phase1, t.passes) for t in s.tiles] for s in steps] == [
        [(14, None, False)] * 3]
    assert strip_step_cycles(steps[0], 16) == 3 * 33 - 2
    assert [one_tile(h, rows=16, kernel=k) for k, h in ((3, 15), (3, 16), (5, 14), (5, 15),
                                                        (7, 13), (7, 14))] == [True, False] * 3
    # 7x7 on a 14 x 14 map: one tile a strip (10 and 4 output columns), three passes, the
    # third's patch six rows on: the same buffers three words on
    steps = strip_steps(2, 14, 14, x_addr=0, out_addr=0, group=2, kernel=7)
    assert [len(s.tiles) for s in steps] == [2, 2]
    tile = steps[0].tiles[1]
    assert (tile.th, tile.phase1.swap, tile.phase2.swap) == (14, not tile.swap, tile.swap)
    assert (tile.phase2.a_base, tile.phase2.b_base, tile.phase2.a_lo, tile.phase2.b_lo) == (
        tile.a_base + 3, tile.b_base + 3, 0, 0)
    assert strip_step_cycles(steps[0], 16) == 2 * 71 - 1         # against 4 * 57 - 3


def test_strip_steps_beats_and_channel_groups():
    steps = strip_steps(4, 14, 14, x_addr=0, out_addr=0, group=4)
    (step,) = steps
    assert [t.channel for t in step.tiles] == [0, 1, 2, 3]
    assert all(t.pre_right for t in step.tiles)
    assert strip_step_cycles(step, 16) == 4 * (8 + 9) - 3     # a fill beat in a tap beat
    # the second column strip needs no pre-rotation
    steps = strip_steps(1, 28, 28, x_addr=0, out_addr=0)
    # the first strip's pre-rotation costs no beat (the fill rows enter rotated)
    assert [strip_step_cycles(s, 16) for s in steps] == [2 * 17 - 1, 2 * 17 - 1]
    assert strip_channels(14, w=14, rows=16, buf_words=4096, acc_rows=512, channels=960) == 35
    assert strip_channels(7, w=7, rows=16, buf_words=4096, acc_rows=512, channels=960) == 70
    assert strip_channels(7, w=7, rows=16, buf_words=4096, acc_rows=512, channels=960,
                          stride=2) == 1
    assert strip_channels(7, w=7, rows=16, buf_words=20, acc_rows=512, channels=960) == 5
    # odd maps: channels stack, every other channel's rows swap buffers
    (step,) = strip_steps(3, 9, 9, x_addr=0, out_addr=0, group=3)
    assert [t.swap for t in step.tiles] == [False, True, False]
    assert (step.a_load.words, step.b_load.words) == (13, 14)
    # maps of up to rows / 2 - 1 rows: two channels a tile, one in each half of the mesh (but
    # 7 x 7 ones, four a tile: the quadrant mode)
    (step,) = strip_steps(3, 7, 6, x_addr=0, out_addr=0, group=3)
    assert (step.a_load.words, step.b_load.words) == (10, 11)
    assert [(t.channel, t.halves, t.pair and t.pair.channel) for t in step.tiles] == \
        [(0, True, 1), (2, True, None)]
    assert step.tiles[0].pair.swap and not step.tiles[0].swap
    assert strip_step_cycles(step, 16) == 2 * (8 + 9) - 1
    assert [t.halves for t in strip_steps(3, 8, 7, x_addr=0, out_addr=0, group=3)[0].tiles] \
        == [False] * 3
    assert [t.halves for t in strip_steps(3, 7, 6, x_addr=0, out_addr=0, group=1)[0].tiles] \
        == [False]
    assert strip_channels(112, w=112, rows=16, buf_words=4096, acc_rows=512, channels=32) == 4


def test_quadrant_mode_where_it_runs_and_what_a_step_takes():
    """7 x 7 maps on the 16x16: four channels a 17-beat tile (16 back to back), two rows a
    14-byte word, four store rows a channel (14, 14, 14 and 7 elements, the channel's 49
    elements back to back)."""
    assert quad_mode(7, 7, rows=16, cols=16, stride=1)
    for kwargs in (dict(stride=2), dict(h=6), dict(w=6), dict(cols=8)):
        args = dict(h=7, w=7, rows=16, cols=16, stride=1) | kwargs
        assert not quad_mode(**args)
    assert quad_mode(3, 3, rows=8, cols=8, stride=1)
    assert not quad_mode(1, 1, rows=4, cols=4, stride=1)
    steps = strip_steps(960, 7, 7, x_addr=0, out_addr=1000, group=70)
    assert len(steps) == 14
    step = steps[0]
    assert [t.quads for t in step.tiles] == [4] * 17 + [2]
    assert [(t.channel, t.a_base, t.acc_row) for t in step.tiles[:3]] == \
        [(0, 0, 0), (4, 14, 16), (8, 28, 32)]
    assert strip_step_cycles(step, 16) == 18 * 17 - 17
    assert (step.a_load.addr, step.a_load.stride, step.a_load.words, step.a_load.nbytes) == \
        (7, 14, 244, 14)
    assert (step.b_load.addr, step.b_load.words) == (0, 245)
    assert (step.out_rows, step.ch_rows, step.out_tw, step.out_row_stride) == (280, 4, 14, 14)
    assert step.store_rows()[:6] == [(0, 1000, 14), (1, 1014, 14), (2, 1028, 14),
                                     (3, 1042, 7), (4, 1049, 14), (5, 1063, 14)]
    assert steps[1].out_addr == 1000 + 70 * 49
    # 6 x 6 maps: two channels a tile, a row a store row
    step = strip_steps(960, 6, 6, x_addr=0, out_addr=0, group=70)[0]
    assert [t.quads for t in step.tiles] == [0] * 35 and step.out_rows == 420


def test_row_phases_where_they_pay_and_what_a_step_takes():
    """Stride 2 runs in row phases for maps of a multiple of 4 rows above R - 2 (16 x 16 and
    up on the 16x16, where one 23-beat phase tile beats two 16-beat stride-1 ones), and two
    channels a tile for even maps of R/2 to R - 2 rows (phase_halves); a
    112-row channel is four tiles (15, 15, 15, 11 output rows) of 24 beats back to back, one
    less each after the first."""
    assert [h for h in range(1, 41) if row_phases(h, rows=16, stride=2)] == [
        8, 10, 12, 14, 16, 20, 24, 28, 32, 36, 40]     # (8 to 14: phase_halves)
    assert [h for h in range(1, 21) if row_phases(h, rows=8, stride=2)] == [4, 6, 8, 12, 16,
                                                                          20]
    assert not row_phases(112, rows=16, stride=1)
    (step,) = strip_steps(1, 112, 14, x_addr=0, out_addr=0, stride=2)
    assert [(t.oy0, t.th, t.acc_row) for t in step.tiles] == \
        [(0, 15, 0), (15, 15, 15), (30, 15, 30), (45, 11, 45)]
    assert strip_step_cycles(step, 16) == 4 * (16 + 8) - 3
    for block, addr in ((step.a_load, 0), (step.b_load, 2 * 14)):
        assert (block.addr, block.stride, block.words, block.groups, block.gaddr,
                block.gwords) == (addr, 4 * 14, 28, 2, 14, 28)
    # every other tile starts at padded row 2 mod 4: its phases' buffers swap
    assert [(t.swap, t.phase1.swap) for t in step.tiles] == [(True, False), (False, True)] * 2
    assert (step.out_rows, step.acc_rstride, step.lane_step, step.out_tw) == (56, 1, 2, 7)


def test_row_phases_two_channels_a_tile_where_a_phase_fits_half_the_mesh():
    """Even maps of R/2 to R - 2 rows with stride 2 (MobileNet-V2's 14 x 14 layer) run in row
    phases two channels a tile: a 24-beat tile (23 back to back) gives two channels' 7 output
    rows, where a 16-beat stride-1 tile gave one channel's and its store kept a quarter; the
    bottom half's phase-1 fill is its channel's. With G h / 2 odd buffer A holds a row of each
    of its classes more than B (ceil and floor of G h / 4, both second groups at A's count)."""
    assert [h for h in range(1, 30) if phase_halves(h, rows=16, stride=2)] == [8, 10, 12, 14]
    assert [h for h in range(1, 12) if phase_halves(h, rows=8, stride=2)] == [4, 6]
    assert not phase_halves(14, rows=16, stride=1)
    assert phase_halves(14, rows=16, stride=2, kernel=5)
    assert not phase_halves(14, rows=16, stride=2, kernel=7)
    assert not phase_halves(14, rows=14, stride=2)               # (a mesh of 4 k + 2 rows)
    (step,) = strip_steps(5, 14, 14, x_addr=0, out_addr=0, stride=2, group=5)
    assert [(t.channel, t.pair and t.pair.channel, t.th, t.acc_row) for t in step.tiles] == \
        [(0, 1, 7, 0), (2, 3, 7, 14), (4, None, 7, 28)]
    for t in step.tiles:
        assert t.halves and t.phase1.halves and t.phase1.pair == (t.pair and t.pair.phase1)
    assert strip_step_cycles(step, 16) == 3 * (16 + 8) - 2
    # 70 stacked rows: classes 0 and 1 18 rows each in A, 2 and 3 17 each in B
    assert (step.a_load.words, step.a_load.gwords) == (18, 18)
    assert (step.b_load.words, step.b_load.gwords) == (17, 18)
    assert (step.out_rows, step.acc_rstride, step.lane_step, step.out_tw) == (35, 1, 2, 7)
    # the buffer half bounds G by A's words: 2 ceil(G h / 4) <= 35 words allows 4 channels
    # of 14 rows (28 words), not 5 (36)
    assert strip_channels(14, w=14, rows=16, buf_words=35, acc_rows=512, channels=9,
                          stride=2) == 4
    assert strip_channels(14, w=14, rows=16, buf_words=35, acc_rows=512, channels=9,
                          stride=1) == 5


def test_column_phases_where_they_pay_and_what_a_step_takes():
    """Stride-2 3x3 and 5x5 maps the row phases take whole-mesh (a multiple of 4 rows above R
    - 2) run in row and column phases where that needs fewer beats a tile row (session 42):
    on the 16x16 every 3x3 map of 16 columns and more, 5x5 of 15 and more; strips of R - p
    output columns, four fills a 37-beat tile back to back (3x3; 5x5: 53), every input row
    loaded once, two beats a row deinterleaved into an even-byte and an odd-byte word."""
    # (3x3 maps of 31 to 42 columns: two 37-beat strips lose to three 23-beat ones)
    assert [w for w in range(1, 50) if col_phases(112, w, rows=16, cols=16, stride=2)] == \
        list(range(16, 31)) + list(range(43, 50))
    assert [w for w in range(1, 40) if col_phases(56, w, rows=16, cols=16, stride=2,
                                                  kernel=5)] == list(range(15, 40))
    assert [h for h in range(1, 41) if col_phases(h, 56, rows=16, cols=16, stride=2)] == [
        16, 20, 24, 28, 32, 36, 40]                  # (8 to 14: phase_halves)
    assert not col_phases(112, 112, rows=16, cols=16, stride=1)
    assert not col_phases(112, 112, rows=16, cols=16, stride=2, kernel=7)
    assert not col_phases(112, 112, rows=14, cols=14, stride=2)   # (a mesh of 4 k + 2 rows)
    assert [col_phase_kernels(r, c) for r, c in ((16, 16), (8, 8), (4, 4), (14, 14), (16, 8))] \
        == [(3, 5), (3, 5), (3,), (), ()]
    assert col_phase_ranges(16, 3) == ((15, 30), (42, (1 << 24) - 1))
    assert col_phase_ranges(4, 5) == col_phase_ranges(16, 7) == ()
    steps = strip_steps(3, 112, 112, x_addr=0, out_addr=0, stride=2, group=3)
    assert [(s.ox0, s.tw, s.out_tw, s.lane_step) for s in steps] == [
        (0, 30, 15, 1), (30, 30, 15, 1), (60, 30, 15, 1), (90, 22, 11, 1)]
    step = steps[1]
    words = 3 * 112 // 4
    for block, addr in ((step.a_load, 29), (step.b_load, 29 + 2 * 112)):
        assert (block.addr, block.stride, block.words, block.nbytes, block.groups, block.gaddr,
                block.gwords, block.dwords) == (addr, 4 * 112, words, 32, 2, 112, 2 * words,
                                                words)
        assert block.beats == 4 * words
    tiles = step.tiles
    assert [(t.channel, t.oy0, t.th, t.acc_row) for t in tiles[:5]] == [
        (0, 0, 15, 0), (0, 15, 15, 15), (0, 30, 15, 30), (0, 45, 11, 45), (1, 0, 15, 56)]
    assert all(t.cphases and strip_tile_cycles(t, 16) == 38 for t in tiles)
    assert strip_step_cycles(step, 16) == 12 * 38 - 11
    # a later strip reads phase c from the words of parity c; the first from column 0: phase
    # 0's lanes from the odd bytes, rotated right one lane (its lane 0 the left pad)
    fills = lambda t: (t, t.phase1, t.phase2, t.phase3)       # noqa: E731
    assert [(f.pre_right, f.cols) for f in fills(tiles[0])] == [(0, 16)] * 4
    first = steps[0].tiles[0]
    assert [(f.pre_right, f.cols) for f in fills(first)] == [(1, 15), (0, 16), (1, 15), (0, 16)]
    assert [f.a_base - first.a_base for f in fills(first)][:2] == [0, -words]
    assert [(f.pre_right, f.cols) for f in fills(steps[3].tiles[0])] == [(0, 12), (0, 11)] * 2
    *_, last = strip_steps(1, 112, 61, x_addr=0, out_addr=0, stride=2)
    assert (last.tw, last.a_load.nbytes) == (2, 2)   # (output 30: input columns 59, 60)
    # the buffer half bounds G by G h words
    assert strip_channels(112, w=112, rows=16, buf_words=512, acc_rows=4096, channels=96,
                          stride=2) == 4
    # (14 columns: row phases, G h / 2 words)
    assert strip_channels(112, w=14, rows=16, buf_words=512, acc_rows=4096, channels=96,
                          stride=2) == 9
    (s5, *_) = strip_steps(2, 56, 56, x_addr=0, out_addr=0, stride=2, group=2, kernel=5)
    assert [(f.pre_right, f.cols) for f in fills(s5.tiles[0])] == [(1, 15)] * 4
    assert strip_tile_cycles(s5.tiles[0], 16) == 54 and s5.out_tw == 14


@pytest.mark.parametrize("kernel,c,h,w,size,group,odd_rows,odd_cols", [
    (3, 3, 16, 16, 16, 3, False, False),    # one strip
    (3, 2, 28, 28, 16, 2, False, False),    # MobileNet-V2's 28 x 28: one strip of 14
    (3, 2, 56, 61, 16, 2, False, False),    # odd width: the last strip's right pad
    (3, 2, 32, 46, 16, 1, True, True),      # TF "SAME"
    (3, 3, 24, 34, 8, 2, False, True),      # the 8 x 8 mesh; odd columns only
    (3, 2, 20, 40, 12, 2, True, False),
    (5, 2, 56, 56, 16, 2, False, False),    # EfficientNet-B0's 56 x 56 5x5 stride 2
    (5, 3, 20, 31, 16, 3, True, False),
    (5, 2, 16, 30, 8, 2, True, True),
    (5, 1, 28, 17, 12, 1, False, False),
])
def test_column_phase_steps_replayed_on_a_memory_give_the_convolution(
        kernel, c, h, w, size, group, odd_rows, odd_cols):
    """Row and column phases (StripTile.cphases): the replay on a byte memory full of garbage,
    stale buffer words, a random pad value; first and later strips, ragged last ones, the
    deinterleaved loads' words of either parity, TF "SAME" rows and columns."""
    assert col_phases(h, w, rows=size, cols=size, stride=2, kernel=kernel)
    steps = _replay(c, h, w, size, group, 2, seed=c * 13 + h + w + size + kernel,
                    kernel=kernel, odd_rows=odd_rows, odd_cols=odd_cols)
    assert all(t.cphases and t.phase3 for s in steps for t in s.tiles)
    assert {(s.lane_step, s.lane0, s.acc_rstride, s.row0) for s in steps} == {(1, 0, 1, 0)}


def test_column_phase_walks_visit_every_tap_once():
    for kernel, taps in ((3, [4, 2, 2, 1]), (5, [9, 6, 6, 4])):
        fills = walks(2, kernel, cphases=True)
        assert [len(f) for f in fills] == taps
        assert sorted(t for f in fills for t, _ in f) == [(dy, dx) for dy in range(kernel)
                                                          for dx in range(kernel)]
        # in a phase patch a move is two window rows or columns
        step = {"LEFT": (0, 2), "RIGHT": (0, -2), "UP": (2, 0)}
        for f in fills:
            for ((dy, dx), move), ((ny, nx), _) in zip(f, f[1:]):
                assert (ny - dy, nx - dx) == step[move]
            assert f[-1][1] is None
    for stride, kernel in ((1, 3), (2, 7)):
        with pytest.raises(ValueError, match="row and column phases walk stride-2 3x3 and 5x5"):
            walks(stride, kernel, cphases=True)


def test_big_kernels_on_maps_of_half_the_mesh_two_channels_a_tile():
    """5x5 and 7x7 maps of up to R/2 - 1 rows (EfficientNet-B0's 7 x 7 stage) run two
    channels a tile, one in each half, the window's rows two a fill: 47 and 78 beats for two
    channels where one channel took 33 and 57; pass q's fill is the tile's fill words from q
    on, in both halves."""
    assert [sorted({dy for (dy, _), _ in walk}) for walk in walks(1, 5, pairs=True)] == [
        [0, 1], [2, 3], [4]]
    assert len(walks(1, 7, pairs=True)) == 4
    with pytest.raises(ValueError, match="two-row passes walk stride-1 5x5 and 7x7"):
        walks(1, 3, pairs=True)
    for kernel, beats in ((5, 47), (7, 78)):
        (step,) = strip_steps(5, 7, 7, x_addr=0, out_addr=0, group=5, kernel=kernel)
        assert [(t.channel, t.pair and t.pair.channel, t.pairs, t.halves) for t in step.tiles] \
            == [(0, 1, True, True), (2, 3, True, True), (4, None, True, True)]
        assert [strip_tile_cycles(t, 16) for t in step.tiles] == [beats] * 3
        top = step.tiles[0]
        moved = pair_fill(top, 2)
        assert (moved.a_base, moved.b_base, moved.a_lo, moved.b_lo) == (
            top.a_base + 2, top.b_base + 2, max(0, top.a_lo - 2), max(0, top.b_lo - 2))
        assert moved.pair.a_base == top.pair.a_base + 2
    # one channel a step, or maps taller than half the mesh: one channel a tile as before
    (step,) = strip_steps(1, 7, 7, x_addr=0, out_addr=0, kernel=5)
    assert not step.tiles[0].pairs and strip_tile_cycles(step.tiles[0], 16) == 33
    (step,) = strip_steps(2, 8, 8, x_addr=0, out_addr=0, group=2, kernel=5)
    assert not any(t.pairs for t in step.tiles)


@pytest.mark.parametrize("kwargs, match", [
    (dict(group=2, h=7, stride=2), "group=2 must be >= 1, and 1 when h=7 is odd with stride 2"),
    (dict(group=0), "group=0 must be >= 1"),
    (dict(rows=6, cols=3), "a 6x3 mesh must have even rows >= 4 and cols >= 4"),
    (dict(h=0), "channels=2, h=0, w=8 must be >= 1"),
    (dict(stride=3), "stride=3 must be 1 or 2"),
])
def test_strip_steps_refuse_bad_arguments(kwargs, match):
    args = dict(channels=2, h=8, w=8, x_addr=0, out_addr=0) | kwargs
    with pytest.raises(ValueError, match=match):
        strip_steps(**args)


@pytest.mark.parametrize("rows,g_count", [(16, 4), (16, 7), (8, 6), (16, 2)])
def test_quadrant_fill_from_two_row_words(rows, g_count):
    """The design claim behind the quadrant mode (built in session 31: spec.dwmesh.quad_mode;
    this checks the claim against tile_patches, independently of strip_patch): maps of ``n =
    R/2 - 1`` rows and columns need no new load layout. Loaded as the
    strip loads are but ``2 n`` bytes a word (buffer-A word ``j`` the stacked rows ``2 j + 1``
    and ``2 j + 2``, buffer-B word ``j`` rows ``2 j`` and ``2 j + 1``; no word reads past the
    step's maps), each of a half's ``R/4`` fill beats reads one A word and one B word (the
    half's left channel is even, so the two channels start at different parities) and a fixed
    lane shuffle makes the quadrant patches of spec.dwmesh.tile_patches: lane 0 and lane
    ``R/2`` the left pads, each word's low ``n`` bytes one row, its high ``n`` the next."""
    n = rows // 2 - 1
    rng = np.random.default_rng(rows * 10 + g_count)
    x, wt = _random(rng, g_count, n, n)
    pad = int(rng.integers(-128, 128))
    stacked = x.reshape(-1).astype(np.int64)              # the step's maps, dense NCHW
    s_rows = g_count * n
    a_words = [stacked[(2 * j + 1) * n:(2 * j + 3) * n] for j in range((s_rows - 1) // 2)]
    b_words = [stacked[2 * j * n:(2 * j + 2) * n] for j in range(s_rows // 2)]
    assert all(len(word) == 2 * n for word in a_words + b_words)   # inside the maps

    def fill_row(left, right):
        """A mesh row: the pad, the left quadrant's n values, the pad, the right's."""
        row = np.full(rows, pad, np.int64)
        if left is not None:
            row[1:1 + n] = left
        if right is not None:
            row[rows // 2 + 1:] = right
        return row

    padded = np.pad(x.astype(np.int64), ((0, 0), (1, 1), (1, 1)), constant_values=pad)
    for t in range(-(-g_count // 4)):
        patch = []
        for half in (0, 1):
            g = 4 * t + 2 * half                        # the half's left channel (even)
            have = [g < g_count, g + 1 < g_count]
            for kk in range(rows // 4):
                if kk == 0:
                    # the top pad row, then row 0 of each: the low bytes of the words at
                    # stacked rows g n (B, even) and (g + 1) n (A, odd)
                    left = b_words[g * n // 2][:n] if have[0] else None
                    right = a_words[((g + 1) * n - 1) // 2][:n] if have[1] else None
                    patch += [fill_row(None, None), fill_row(left, right)]
                else:
                    # rows 2 kk - 1 and 2 kk: A word at stacked row g n + 2 kk - 1, B word at
                    # (g + 1) n + 2 kk - 1
                    lw = a_words[g * n // 2 + kk - 1] if have[0] else None
                    rw = b_words[((g + 1) * n + 2 * kk - 1) // 2] if have[1] else None
                    patch += [fill_row(lw[:n] if have[0] else None, rw[:n] if have[1] else None),
                              fill_row(lw[n:] if have[0] else None, rw[n:] if have[1] else None)]
        got = np.stack(patch)
        channels = tuple(range(4 * t, min(4 * t + 4, g_count)))
        (want,) = tile_patches(MeshTile(channels, 0, 0, n, n, (2, 2)), padded - pad, stride=1,
                               rows=rows, cols=rows)
        # tile_patches zero-fills what is not a map; here that is the pad value
        expect = np.full((rows, rows), pad, np.int64)
        for q in range(len(channels)):
            qi, qj = divmod(q, 2)
            expect[qi * (n + 1):qi * (n + 1) + n + 1, qj * (n + 1):qj * (n + 1) + n + 1] = \
                want[qi * (n + 1):(qi + 1) * (n + 1), qj * (n + 1):(qj + 1) * (n + 1)] + pad
        np.testing.assert_array_equal(got, expect)
