"""The rotating mesh's depthwise dataflow (spec/dwmesh.py) against the grouped convolution."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from spec.dwmesh import (PHASE_TAPS, SERPENTINE, layer_steps, mac_utilisation, mesh_depthwise,
                         out_size, padded_input, plan_tiles, run_tile, tile_cycles, tile_weights)
from spec.golden import conv2d_int8


def _reference(x, w, stride, pad):
    c = x.shape[0]
    return conv2d_int8(x[None], w[:, None], stride=(stride, stride), pads=(pad,) * 4,
                       groups=c)[0]


def _random(rng, c, h, w):
    return (rng.integers(-128, 128, (c, h, w), dtype=np.int8),
            rng.integers(-128, 128, (c, 3, 3), dtype=np.int8))


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
    assert cycles == sum(tile_cycles(t, stride, 16) for t in tiles)


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
    architecture.md's table): stride 1 at 40.5% (7x7: the stores of four channels' 7 rows,
    28 C-port beats a tile, bound it at 24.6%), stride 2 at 13.8%."""
    for h, ch in ((112, 32), (56, 144), (28, 192), (14, 384), (14, 576)):
        assert mac_utilisation(ch, h, h, stride=1) == pytest.approx(9 * 196 / (17 * 256))
    assert mac_utilisation(960, 7, 7, stride=1) == pytest.approx(4 * 49 * 9 / (28 * 256))
    for h, ch in ((112, 96), (56, 144), (28, 192), (14, 576)):
        assert mac_utilisation(ch, h, h, stride=2) == pytest.approx(0.1378125)


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


@pytest.mark.parametrize("c,h,w,stride,pad,size", [
    (3, 20, 31, 1, 1, 16), (2, 7, 7, 1, 1, 16), (2, 29, 17, 2, 1, 16), (3, 14, 14, 2, 1, 16),
    (2, 9, 9, 2, 0, 8), (4, 11, 6, 1, 0, 8)])
def test_layer_steps_replayed_on_a_memory_give_the_convolution(c, h, w, stride, pad, size):
    """Execute the steps as the hardware will: block loads from a byte memory into buffer
    words (stale words full of garbage), the mesh run on the words, the stores into the
    output layout; the result is the grouped convolution."""
    rng = np.random.default_rng(c * 31 + h + stride)
    x, wt = _random(rng, c, h, w)
    hp, wp = h + 2 * pad, w + 2 * pad
    chan_stride, x_addr = hp * wp + 5, 64                  # a gap between maps
    oh, ow = out_size(h, pad, stride), out_size(w, pad, stride)
    out_addr, row_stride = 40_000, ow + 3                  # a padded output's interior
    mem = rng.integers(-128, 128, 80_000).astype(np.int64)  # garbage everywhere else
    for ch in range(c):
        base = x_addr + ch * chan_stride
        mem[base:base + hp * wp] = padded_input(x, pad)[ch].reshape(-1)
    steps = layer_steps(c, h, w, stride=stride, pad=pad, x_addr=x_addr,
                        chan_stride=chan_stride, out_addr=out_addr,
                        out_chan_stride=oh * row_stride, out_row_stride=row_stride,
                        rows=size, cols=size)
    out_mem = np.full(80_000, -999, np.int64)

    def words(load):
        got = rng.integers(-128, 128, (size // 2, size)).astype(np.int64)   # stale words
        for k in range(load.words):
            got[k] = 0
            got[k, :load.nbytes] = mem[load.addr + k * load.stride:
                                       load.addr + k * load.stride + load.nbytes]
        return got

    for step in steps:
        patches = []
        for a_load, b_load in step.loads:
            patch = np.zeros((size, size), np.int64)
            patch[0::2], patch[1::2] = words(a_load), words(b_load)
            patches.append(patch)
        acc, _ = run_tile(step.tile, patches, tile_weights(step.tile, wt), stride=stride)
        for st in step.stores:
            for r in range(st.rows):
                row = acc[st.acc_row0 + r, st.col0::stride][:st.cols]
                out_mem[st.addr + r * st.row_stride:st.addr + r * st.row_stride + st.cols] = row
    got = np.stack([np.stack([out_mem[out_addr + ch * oh * row_stride + p * row_stride:][:ow]
                              for p in range(oh)]) for ch in range(c)])
    wrapped = ((got + (1 << 31)) % (1 << 32) - (1 << 31)).astype(np.int32)
    np.testing.assert_array_equal(wrapped, _reference(x, wt, stride, pad))
    # the stores wrote nothing outside the output windows
    written = np.flatnonzero(out_mem != -999)
    inside = [(out_addr + ch * oh * row_stride + p * row_stride + q)
              for ch in range(c) for p in range(oh) for q in range(ow)]
    assert sorted(written.tolist()) == sorted(inside)


def test_layer_steps_reject_layouts_that_overlap():
    with pytest.raises(ValueError, match="chan_stride=10 is less than a padded map"):
        layer_steps(2, 4, 4, stride=1, pad=1, x_addr=0, chan_stride=10, out_addr=0,
                    out_chan_stride=16, out_row_stride=4)
    with pytest.raises(ValueError, match="out_row_stride=3 < out_w=4"):
        layer_steps(2, 4, 4, stride=1, pad=1, x_addr=0, chan_stride=36, out_addr=0,
                    out_chan_stride=16, out_row_stride=3)
