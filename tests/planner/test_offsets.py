"""planner.offsets: the convolution tables of docs/conv_tables.md.

The functional check is independent: B gathered by walking the segment tables (as the RTL does)
times the k-major weights must equal the direct convolution of spec.golden for every group.
"""

from pathlib import Path

import numpy as np
import pytest

from spec.config import PRESETS
from spec.golden import conv2d_int8, gemm_int8
from planner.layout import group_base_bytes, to_padded, weights_k_major
from planner.offsets import ConvTables, compile_tables, gather_b
from planner.shapes import ConvShape
from planner.workload import load_workload

ROOT = Path(__file__).resolve().parents[2]
TINY, DEFAULT = PRESETS["tiny"], PRESETS["default"]


def conv(n, c, h, w, k, r, s, stride=(1, 1), pads=(0, 0, 0, 0), dil=(1, 1), groups=1):
    return ConvShape(batch=n, in_channels=c, height=h, width=w, out_channels=k, kernel_h=r,
                     kernel_w=s, stride_h=stride[0], stride_w=stride[1], pad_top=pads[0],
                     pad_left=pads[1], pad_bottom=pads[2], pad_right=pads[3],
                     dilation_h=dil[0], dilation_w=dil[1], groups=groups)


def run_fields(t: ConvTables):
    f = t.runs()
    return [(int(f["base"][i]), int(f["lane_lo"][i]), int(f["lane_cnt"][i]),
             int(f["stride"][i]), int(f["last"][i])) for i in range(t.run_count)]


# -- hand-checked tables -------------------------------------------------------------------------

def test_offsets_1x1_stride2_nchw_one_run_per_row_two_when_crossing():
    # Wp = 11, Q = 6, P = 3: base = 22p + 2q; lane groups of 4 (tiny)
    t = compile_tables(conv(1, 2, 5, 11, 1, 1, 1, stride=(2, 2)), "NCHW", TINY)
    assert t.offsets.tolist() == [0, 55]
    assert run_fields(t) == [(0, 0, 4, 2, 1),
                             (8, 0, 2, 2, 0), (22, 2, 2, 2, 1),
                             (26, 0, 4, 2, 1),
                             (44, 0, 4, 2, 1),
                             (52, 0, 2, 2, 1)]
    assert t.groups.tolist() == [0, 1, 3, 4, 5, 6]


def test_offsets_1x3_padded_nchw_single_lane_runs_have_stride_1():
    # W = 3, pads 1/1: Wp = 5, Q = 3, P = 3 -> bases 0 1 2 | 5 6 7 | 10 11 12
    t = compile_tables(conv(1, 1, 3, 3, 1, 1, 3, pads=(0, 1, 0, 1)), "NCHW", TINY)
    assert t.offsets.tolist() == [0, 1, 2]
    assert run_fields(t) == [(0, 0, 3, 1, 0), (5, 3, 1, 1, 1),
                             (6, 0, 2, 1, 0), (10, 2, 2, 1, 1),
                             (12, 0, 1, 1, 1)]
    assert t.groups.tolist() == [0, 2, 4, 5]


def test_offsets_nhwc_3x3_by_hand():
    # C = 3, H = W = 4, pads 1: Hp = Wp = 6; base = (6p + q)*3, off = (6r + s)*3 + c
    t = compile_tables(conv(1, 3, 4, 4, 2, 3, 3, pads=(1, 1, 1, 1)), "NHWC", TINY)
    assert t.offsets.tolist() == [(6 * r + s) * 3 + c for c in range(3) for r in range(3)
                                  for s in range(3)]
    assert run_fields(t) == [((6 * p) * 3, 0, 4, 3, 1) for p in range(4)]
    assert t.groups.tolist() == [0, 1, 2, 3, 4]


def test_offsets_default_1x1_nchw_contiguous_rows_one_run_per_group():
    # no halo, stride 1: rows are contiguous, so every group (16 lanes) is one run
    t = compile_tables(conv(1, 8, 7, 9, 4, 1, 1), "NCHW", DEFAULT)
    assert t.run_count == 4 and t.runs_per_group().tolist() == [1, 1, 1, 1]
    assert run_fields(t)[-1] == (48, 0, 15, 1, 1)


def test_offsets_byte_images_are_little_endian_and_round_trip():
    shape = conv(1, 2, 5, 11, 1, 1, 1, stride=(2, 2))
    t = compile_tables(shape, "NCHW", TINY)
    img = t.to_bytes()
    assert img["off"] == (0).to_bytes(4, "little") + (55).to_bytes(4, "little")
    entry = 22 | 2 << 32 | 2 << 40 | 2 << 48 | 1 << 63
    assert img["run"][16:24] == entry.to_bytes(8, "little")
    assert img["grp"] == b"".join(v.to_bytes(4, "little") for v in (0, 1, 3, 4, 5, 6))
    assert t.table_bytes == {"off": 8, "run": 48, "grp": 24} and t.size_bytes == 80
    back = ConvTables.from_bytes(shape, "NCHW", 4, **img)
    assert back.to_bytes() == img and run_fields(back) == run_fields(t)
    assert back.offsets.dtype == np.uint32 and back.segments.dtype == np.uint64


# -- functional: gathered B x weights == direct convolution -------------------------------------

CASES = [
    # (N, C, H, W, K, R, S, stride, pads(t,l,b,r), dilation, groups)
    (1, 3, 7, 6, 5, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 1),
    (2, 4, 8, 9, 6, 3, 3, (2, 2), (1, 0, 2, 1), (1, 1), 2),
    (1, 5, 9, 7, 5, 3, 3, (1, 2), (2, 2, 0, 1), (2, 2), 5),       # depthwise, dilated
    (2, 3, 6, 8, 2, 1, 3, (1, 1), (0, 1, 0, 2), (1, 1), 1),       # 1x3
    (1, 2, 8, 5, 3, 3, 1, (2, 1), (1, 0, 2, 0), (1, 1), 1),       # 3x1
    (1, 2, 11, 10, 3, 5, 5, (2, 2), (2, 3, 1, 2), (1, 1), 1),
    (2, 1, 13, 12, 2, 7, 7, (2, 2), (3, 3, 3, 3), (1, 1), 1),
    (2, 6, 5, 5, 9, 1, 1, (1, 1), (0, 0, 0, 0), (1, 1), 3),
    (1, 7, 19, 18, 5, 1, 1, (2, 2), (0, 0, 0, 0), (1, 1), 1),     # 1x1 stride 2
    (2, 4, 9, 9, 4, 3, 3, (2, 1), (0, 2, 3, 1), (2, 1), 2),
    (1, 6, 17, 21, 6, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 6),     # Q > 16: runs inside rows
]


def check_against_golden(case, layout, cfg, seed):
    n, c, h, w, k, r, s, stride, pads, dil, groups = case
    shape = conv(n, c, h, w, k, r, s, stride, pads, dil, groups)
    rng = np.random.default_rng(seed)
    x = rng.integers(-128, 128, size=(n, c, h, w), dtype=np.int8)
    wt = rng.integers(-128, 128, size=(k, c // groups, r, s), dtype=np.int8)
    want = conv2d_int8(x, wt, stride=stride, pads=pads, dilation=dil, groups=groups)
    mem = to_padded(x, shape, layout).tobytes()
    t = compile_tables(shape, layout, cfg)
    assert t.lanes == cfg.array_cols
    assert t.k == shape.gemm.k and t.lane_groups == -(-shape.gemm.n // cfg.array_cols)
    m = shape.gemm.m
    for g in range(groups):
        region = mem[group_base_bytes(shape, layout, g):]
        assert t.span_bytes <= len(region)
        b = gather_b(t, region)
        assert b.shape == (shape.gemm.k, shape.gemm.n)
        a = weights_k_major(wt, shape, g).T
        got = gemm_int8(a, b)
        ref = want[:, g * m:(g + 1) * m].transpose(1, 0, 2, 3).reshape(m, -1)
        assert np.array_equal(got, ref), (case, layout, g)
    return t, mem


@pytest.mark.parametrize("cfg", [TINY, DEFAULT], ids=["tiny", "default"])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("index", range(len(CASES)))
def test_offsets_gathered_gemm_equals_direct_conv(index, layout, cfg):
    check_against_golden(CASES[index], layout, cfg, seed=index)


def test_offsets_random_shapes_match_direct_conv():
    rng = np.random.default_rng(2024)
    for trial in range(24):
        r, s = int(rng.integers(1, 6)), int(rng.integers(1, 6))
        dil = (int(rng.integers(1, 3)), int(rng.integers(1, 3)))
        pads = tuple(int(rng.integers(0, min(3, d * (kk - 1)) + 1))
                     for d, kk in ((dil[0], r), (dil[1], s), (dil[0], r), (dil[1], s)))
        groups = int(rng.choice([1, 2, 3]))
        c, k = groups * int(rng.integers(1, 4)), groups * int(rng.integers(1, 4))
        h = int(rng.integers(dil[0] * (r - 1) + 1, 14))
        w = int(rng.integers(dil[1] * (s - 1) + 1, 14))
        case = (int(rng.integers(1, 3)), c, h, w, k, r, s,
                (int(rng.integers(1, 3)), int(rng.integers(1, 3))), pads, dil, groups)
        cfg = TINY if trial % 2 else PRESETS["small"]
        check_against_golden(case, ["NCHW", "NHWC"][trial % 3 == 0], cfg, seed=trial)


def test_offsets_gather_b_sub_ranges():
    case = CASES[1]
    t, mem = check_against_golden(case, "NHWC", TINY, seed=99)
    full = gather_b(t, mem)
    part = gather_b(t, np.frombuffer(mem, np.int8), k_range=range(3, 17), n_range=(5, 23))
    assert np.array_equal(part, full[3:17, 5:23])
    with pytest.raises(ValueError, match="n_range"):
        gather_b(t, mem, n_range=range(0, t.n + 1))


def test_offsets_gather_b_rejects_malformed_tables():
    shape = conv(1, 1, 3, 3, 1, 1, 3, pads=(0, 1, 0, 1))
    t = compile_tables(shape, "NCHW", TINY)
    mem = bytes(64)
    seg = t.segments.copy()
    seg[0] |= np.uint64(1 << 63)                     # 'last' on group 0's first of 2 runs
    bad = ConvTables(shape=shape, layout=t.layout, lanes=4, offsets=t.offsets, segments=seg,
                     groups=t.groups)
    with pytest.raises(ValueError, match="last"):
        gather_b(bad, mem)
    seg = t.segments.copy()
    seg[0] -= np.uint64(1 << 40)                     # lane_cnt 3 -> 2: lane 2 never filled
    bad = ConvTables(shape=shape, layout=t.layout, lanes=4, offsets=t.offsets, segments=seg,
                     groups=t.groups)
    with pytest.raises(ValueError, match="exactly once"):
        gather_b(bad, mem)


# -- the cut rule, run by run --------------------------------------------------------------------

def greedy_reference(bases, cols):
    """docs/conv_tables.md in scalar Python: cut each lane group greedily from its first lane."""
    runs, firsts = [], []
    for g0 in range(0, len(bases), cols):
        lanes = bases[g0:g0 + cols]
        firsts.append(len(runs))
        lo = 0
        while lo < len(lanes):
            stride = lanes[lo + 1] - lanes[lo] if lo + 1 < len(lanes) else 1
            hi = lo + 1
            while hi < len(lanes) and lanes[hi] - lanes[hi - 1] == stride:
                hi += 1
            runs.append((lanes[lo], lo, hi - lo, stride, int(hi == len(lanes))))
            lo = hi
    return runs, firsts + [len(runs)]


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_offsets_segments_follow_the_greedy_rule(layout):
    for i, case in enumerate(CASES):
        n, c, h, w, k, r, s, stride, pads, dil, groups = case
        shape = conv(n, c, h, w, k, r, s, stride, pads, dil, groups)
        hp, wp = h + pads[0] + pads[2], w + pads[1] + pads[3]
        pix = [(b, p, q) for b in range(n) for p in range(shape.out_h) for q in range(shape.out_w)]
        if layout == "NCHW":
            bases = [b * c * hp * wp + p * stride[0] * wp + q * stride[1] for b, p, q in pix]
        else:
            bases = [((b * hp + p * stride[0]) * wp + q * stride[1]) * c for b, p, q in pix]
        for cfg in (TINY, DEFAULT):
            t = compile_tables(shape, layout, cfg)
            runs, firsts = greedy_reference(bases, cfg.array_cols)
            assert run_fields(t) == runs, (i, layout)
            assert t.groups.tolist() == firsts


# -- validation ----------------------------------------------------------------------------------

def test_offsets_splits_jumps_too_wide_for_a_stride():
    # NHWC 1x1: neighbouring pixels are C bytes apart; 2**15 cannot be a stride, so every lane
    # becomes a run of its own, while 2**15 - 1 still makes one run
    wide = compile_tables(conv(1, 1 << 15, 1, 2, 1, 1, 1), "NHWC", TINY)
    runs = wide.runs()
    assert list(runs["lane_cnt"]) == [1, 1] and list(runs["stride"]) == [1, 1]
    assert list(runs["base"]) == [0, 1 << 15]
    narrow = compile_tables(conv(1, (1 << 15) - 1, 1, 2, 1, 1, 1), "NHWC", TINY)
    assert list(narrow.runs()["lane_cnt"]) == [2]


def test_offsets_rejects_base_and_offset_past_32_bits():
    with pytest.raises(ValueError, match=r"base=4294967296 \(output pixel n=65536"):
        compile_tables(conv(2, 1 << 16, 256, 256, 1, 1, 1), "NCHW", DEFAULT)
    with pytest.raises(ValueError, match=r"off=\d+ \(tap k=65536"):
        compile_tables(conv(1, 1 << 17, 256, 256, 1, 1, 1), "NCHW", DEFAULT)


def test_offsets_rejects_bad_arguments():
    with pytest.raises(ValueError, match="layout"):
        compile_tables(conv(1, 1, 3, 3, 1, 1, 1), "CHWN", TINY)
    with pytest.raises(ValueError, match="ConvShape"):
        compile_tables((1, 1, 3, 3), "NCHW", TINY)


# -- every ResNet-50 layer (generation time is measured by bench/conv_tables.py, not here) -----

def test_offsets_resnet50_every_layer_compiles_and_fits_on_chip():
    layers = [layer for layer in load_workload(ROOT / "planner/workloads/resnet50.json").layers
              if isinstance(layer.shape, ConvShape)]
    assert sum(layer.count for layer in layers) == 53
    for layout in ("NCHW", "NHWC"):
        for layer in layers:
            tables = compile_tables(layer.shape, layout, DEFAULT)
            assert tables.k <= DEFAULT.conv_offset_entries, (layer.name, layout)
            assert tables.run_count <= DEFAULT.conv_run_entries, (layer.name, layout)
            assert len(tables.groups) <= DEFAULT.conv_group_entries, (layer.name, layout)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_offsets_resnet50_res5_downsample_matches_direct_conv(layout):
    # res5_0_branch2b: 512 -> 512, 14x14 -> 7x7, 3x3 stride 2; lane groups cross rows of 7
    # (64 of its 512 out channels, to keep the int64 GEMM quick)
    shape = conv(1, 512, 14, 14, 64, 3, 3, stride=(2, 2), pads=(1, 1, 1, 1))
    rng = np.random.default_rng(5)
    x = rng.integers(-128, 128, size=(1, 512, 14, 14), dtype=np.int8)
    wt = rng.integers(-128, 128, size=(64, 512, 3, 3), dtype=np.int8)
    t = compile_tables(shape, layout, DEFAULT)
    b = gather_b(t, to_padded(x, shape, layout))
    got = gemm_int8(weights_k_major(wt, shape, 0).T, b)
    want = conv2d_int8(x, wt, stride=(2, 2), pads=(1, 1, 1, 1)).reshape(64, 49)
    assert np.array_equal(got, want)
    assert t.runs_per_group().tolist() == [3, 3, 3, 1]


@pytest.mark.parametrize("cfg", [TINY, DEFAULT], ids=["tiny", "default"])
@pytest.mark.parametrize("index", [0, 1, 4, 5, 6, 7])
def test_offsets_row_lanes_gather_each_row_at_a_lane_group(index, cfg):
    """Tables over row lanes (the row store): lane p*W + q is pixel (p, q) for q < out_w, the
    lanes past it have no run (0 in gather_b); the valid lanes hold the dense layout's B, a
    lane group never crosses a row, and a row starts a group."""
    case = CASES[index]
    if case[0] != 1:
        case = (1, *case[1:])
    n, c, h, w, k, r, s, stride, pads, dil, groups = case
    shape = conv(n, c, h, w, k, r, s, stride, pads, dil, groups)
    dense, mem = check_against_golden(case, "NCHW", cfg, seed=index)
    width = -(-shape.out_w // cfg.array_cols) * cfg.array_cols
    rows = compile_tables(shape, "NCHW", cfg, row_width=width)
    assert rows.row_lanes == (width, shape.out_w) and rows.n == shape.out_h * width
    valid = rows.valid_lanes()
    assert valid.tolist() == [min(cfg.array_cols, shape.out_w - g * cfg.array_cols)
                              for _ in range(shape.out_h)
                              for g in range(width // cfg.array_cols)]
    assert rows.run_count <= dense.run_count + shape.out_h
    for g in range(groups):
        region = mem[group_base_bytes(shape, "NCHW", g):]
        got = gather_b(rows, region).reshape(shape.gemm.k, shape.out_h, width)
        want = gather_b(dense, region).reshape(shape.gemm.k, shape.out_h, shape.out_w)
        assert np.array_equal(got[:, :, :shape.out_w], want)
        assert not got[:, :, shape.out_w:].any()
    half = compile_tables(shape, "NCHW", cfg, row_width=width, pixels=width)
    assert half.n == width and half.lane_groups == width // cfg.array_cols
