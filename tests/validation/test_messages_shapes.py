"""planner shapes, workload files, tiling, layouts and convolution tables: every refusal names
the field and states the allowed range or set."""

import json

import numpy as np
import pytest

from spec.config import PRESETS
from planner import plan_gemm
from planner.layout import group_base_bytes, padded_bytes, to_padded, weights_k_major
from planner.offsets import ConvTables, _check_range, compile_tables, gather_b
from planner.shapes import MAX_DIM, ConvShape, GemmShape
from planner.tiling import to_descriptor
from planner.workload import load_workload, parse_workload

from .util import refused

TINY = PRESETS["tiny"]
CONV = dict(batch=1, in_channels=4, height=6, width=6, out_channels=4, kernel_h=3, kernel_w=3)


def conv(**changes) -> ConvShape:
    return ConvShape(**{**CONV, **changes})


# -- GemmShape / ConvShape ---------------------------------------------------------------------

@pytest.mark.parametrize("name", ["m", "k", "n"])
@pytest.mark.parametrize("bad", [0, -3, MAX_DIM + 1, 2.0, "4", True])
def test_gemm_shape_dims(name, bad):
    dims = {"m": 4, "k": 4, "n": 4, name: bad}
    with refused(ValueError, f"GemmShape.{name} must be an int in [1, {MAX_DIM}], not {bad!r}"):
        GemmShape(**dims)


@pytest.mark.parametrize("name", ["batch", "in_channels", "height", "width", "out_channels"])
@pytest.mark.parametrize("bad", [0, MAX_DIM + 1, 1.0])
def test_conv_shape_sizes(name, bad):
    with refused(ValueError, f"ConvShape.{name} must be an int in [1, {MAX_DIM}], not {bad!r}"):
        conv(**{name: bad})


@pytest.mark.parametrize("name", ["kernel_h", "kernel_w", "stride_h", "stride_w", "dilation_h",
                                  "dilation_w"])
@pytest.mark.parametrize("bad", [0, 4097, None])
def test_conv_shape_kernel_stride_dilation(name, bad):
    with refused(ValueError, f"ConvShape.{name} must be an int in [1, 4096], not {bad!r}"):
        conv(**{name: bad})


@pytest.mark.parametrize("pad, kern, dil", [("pad_top", "kernel_h", "dilation_h"),
                                            ("pad_bottom", "kernel_h", "dilation_h"),
                                            ("pad_left", "kernel_w", "dilation_w"),
                                            ("pad_right", "kernel_w", "dilation_w")])
@pytest.mark.parametrize("kernel, dilation", [(1, 1), (3, 1), (3, 2)])
def test_conv_shape_pads(pad, kern, dil, kernel, dilation):
    hi = dilation * (kernel - 1)
    with refused(ValueError, f"ConvShape.{pad} must be an int in [0, {hi}], not {hi + 1}"):
        conv(**{kern: kernel, dil: dilation, pad: hi + 1})
    with refused(ValueError, f"ConvShape.{pad} must be an int in [0, {hi}], not -1"):
        conv(**{kern: kernel, dil: dilation, pad: -1})


@pytest.mark.parametrize("groups", [0, 5])
def test_conv_shape_groups_range(groups):
    with refused(ValueError, f"ConvShape.groups must be an int in [1, 4], not {groups}"):
        conv(groups=groups)


@pytest.mark.parametrize("changes, field", [
    (dict(in_channels=4, out_channels=6, groups=4), "out_channels=6"),
    (dict(in_channels=6, out_channels=8, groups=4), "in_channels=6"),
    (dict(in_channels=9, out_channels=9, groups=2), "in_channels=9"),
])
def test_conv_shape_groups_divide(changes, field):
    with refused(ValueError, f"ConvShape.groups={changes['groups']} must divide {field}"):
        conv(**changes)


@pytest.mark.parametrize("axis, changes, span, padded", [
    ("h", dict(height=2, kernel_h=5), 5, "2+0+0=2"),
    ("w", dict(width=3, kernel_w=3, dilation_w=2), 5, "3+0+0=3"),
    ("h", dict(height=1, kernel_h=5, pad_top=1, pad_bottom=2), 5, "1+1+2=4"),
])
def test_conv_shape_kernel_must_fit(axis, changes, span, padded):
    kern = changes[f"kernel_{axis}"]
    with refused(ValueError, f"ConvShape.kernel_{axis}={kern} (dilated span {span}) must fit "
                             f"the padded input {padded}"):
        conv(**changes)


@pytest.mark.parametrize("changes, name, value", [
    (dict(in_channels=4096, height=64, width=64, kernel_h=64, kernel_w=64),
     "K ((C/groups)*R*S)", 4096 * 64 * 64),
    (dict(batch=4096, height=64, width=64, kernel_h=1, kernel_w=1), "N (batch*P*Q)",
     4096 * 64 * 64),
])
def test_conv_shape_gemm_dims(changes, name, value):
    with refused(ValueError, f"ConvShape GEMM {name}={value} must be in [1, {MAX_DIM}]"):
        conv(**changes)


# -- workload JSON -----------------------------------------------------------------------------

def workload(*layers, **top) -> str:
    return json.dumps({"network": "t", "layers": list(layers), **top})


GEMM = {"name": "g", "kind": "gemm", "M": 8, "K": 8, "N": 8}
CONV_LAYER = {"name": "c", "kind": "conv", "N": 1, "C": 4, "H": 6, "W": 6, "K": 4, "R": 3,
              "S": 3}


@pytest.mark.parametrize("text", ['{"layers": [], "layers": []}',
                                  '{"layers": [{"kind": "gemm", "kind": "conv"}]}'])
def test_workload_duplicate_keys(text):
    with refused(ValueError, "duplicate key", "in workload JSON"):
        parse_workload(text)


@pytest.mark.parametrize("text", ["[]", "{}", '{"layers": 3}', '{"layers": {}}'])
def test_workload_top_level(text):
    with refused(ValueError, "workload JSON must be an object with a 'layers' list"):
        parse_workload(text)


@pytest.mark.parametrize("raw", [[1, 2], "gemm", 7, None])
def test_workload_layer_must_be_object(raw):
    with refused(ValueError, "workload layer 0 must be an object with kind 'gemm' or 'conv', "
                             f"not {type(raw).__name__}"):
        parse_workload(workload(raw))


@pytest.mark.parametrize("count", [0, -1, 1.5, "2", True, 2**31])
def test_workload_count(count):
    with refused(ValueError, f"workload layer 0 (g): count must be an int in [1, 2147483647], "
                             f"not {count!r}"):
        parse_workload(workload({**GEMM, "count": count}))


@pytest.mark.parametrize("name", [None, "", "  ", 3, ["g"]])
def test_workload_layer_name(name):
    with refused(ValueError, f"workload layer 0: name must be a non-empty string, not "
                             f"{name!r}"):
        parse_workload(workload({**GEMM, "name": name}))


def test_workload_needs_layers():
    with refused(ValueError, "workload has no layers (its 'layers' list is empty)"):
        parse_workload(workload())


def test_workload_file_errors_name_the_file(tmp_path):
    path = tmp_path / "w.json"
    path.write_text(workload())
    with refused(ValueError, f"{path}: workload has no layers"):
        load_workload(path)
    path.write_text("# a README")
    with refused(ValueError, f"{path}: not a workload JSON file (Expecting value"):
        load_workload(path)
    path.write_bytes(b"PK\x03\x04\x80")
    with refused(ValueError, f"{path}: not a workload JSON file (not UTF-8 text: "):
        load_workload(path)


@pytest.mark.parametrize("change, missing, unknown", [
    (dict(M=None), "['M']", "[]"), (dict(X=1), "[]", "['X']"), (dict(K=None, R=3), "['K']",
                                                               "['R']")])
def test_workload_gemm_keys(change, missing, unknown):
    raw = {k: v for k, v in {**GEMM, **change}.items() if v is not None}
    with refused(ValueError, f"workload layer 0 (g): gemm layers need exactly M, K, N (missing "
                             f"{missing}, unknown {unknown})"):
        parse_workload(workload(raw))


@pytest.mark.parametrize("name, bad", [("M", 0), ("K", MAX_DIM + 1), ("N", 2.5)])
def test_workload_gemm_shape(name, bad):
    field = {"M": "m", "K": "k", "N": "n"}[name]
    with refused(ValueError, f"workload layer 0 (g): GemmShape.{field} must be an int in "
                             f"[1, {MAX_DIM}], not {bad!r}"):
        parse_workload(workload({**GEMM, name: bad}))


@pytest.mark.parametrize("change, fragment", [
    (dict(R=None), "misses ['R']"), (dict(stride=2), "unknown keys ['stride']"),
    (dict(pad=1, H=None), "unknown keys ['pad'] / misses ['H']")])
def test_workload_conv_keys(change, fragment):
    raw = {k: v for k, v in {**CONV_LAYER, **change}.items() if v is not None}
    with refused(ValueError, f"workload layer 0 (c): conv layer has {fragment}"
                 if fragment.startswith("unknown") else f"workload layer 0 (c): conv layer",
                 fragment, "keys are N, C, H, W, K, R, S (required), stride_h, stride_w",
                 "dilation_w, groups, P, Q and name, kind, count"):
        parse_workload(workload(raw))


@pytest.mark.parametrize("key, bad, message", [
    ("C", 0, f"ConvShape.in_channels must be an int in [1, {MAX_DIM}], not 0"),
    ("R", 5000, "ConvShape.kernel_h must be an int in [1, 4096], not 5000"),
    ("pad_top", 3, "ConvShape.pad_top must be an int in [0, 2], not 3"),
    ("groups", 3, "ConvShape.groups=3 must divide in_channels=4"),
])
def test_workload_conv_shape(key, bad, message):
    with refused(ValueError, f"workload layer 0 (c): {message}"):
        parse_workload(workload({**CONV_LAYER, key: bad}))


@pytest.mark.parametrize("key, bad, right", [("P", 5, 4), ("Q", 6, 4), ("P", 0, 4),
                                             ("P", "4", 4), ("Q", 4.0, 4)])
def test_workload_conv_output_size_must_agree(key, bad, right):
    """(P "4" was refused as "P=4 disagrees with the shape (4)".)"""
    with refused(ValueError, f"workload layer 0 (c): {key}={bad!r} disagrees with the shape "
                             f"(the int {right})"):
        parse_workload(workload({**CONV_LAYER, key: bad}))


@pytest.mark.parametrize("kind", [None, "fc", "Conv", 3])
def test_workload_kind(kind):
    raw = {**GEMM, "kind": kind} if kind is not None else {k: v for k, v in GEMM.items()
                                                           if k != "kind"}
    with refused(ValueError, f"workload layer 0 (g): kind must be 'gemm' or 'conv', not "
                             f"{kind!r}"):
        parse_workload(workload(raw))


# -- tiling ------------------------------------------------------------------------------------

@pytest.mark.parametrize("other", [GemmShape(64, 32, 17), GemmShape(8, 32, 16)])
def test_to_descriptor_plan_shape(other):
    plan = plan_gemm(GemmShape(64, 32, 16), TINY, "seed")
    with refused(ValueError, f"plan is for shape 64x32x16, not {other}"):
        to_descriptor(plan, other, TINY, 0, 1 << 16, 1 << 17)


@pytest.mark.parametrize("addrs, strides, fragment", [
    ((0, 1 << 16, 0), {}, "C [0x0, "),
    ((0, 1 << 16, TINY.dram_bytes - 64), {}, f"beyond dram_bytes={TINY.dram_bytes:#x}"),
    ((0, 1 << 16, 1 << 17), dict(c_stride=8), "c_stride=8 < 4*n=64: C rows overlap"),
])
def test_to_descriptor_lists_hw_rules(addrs, strides, fragment):
    shape = GemmShape(64, 32, 16)
    plan = plan_gemm(shape, TINY, "seed")
    with refused(ValueError, "descriptor breaks spec.desc rules: ", fragment):
        to_descriptor(plan, shape, TINY, *addrs, **strides)


# -- layouts -----------------------------------------------------------------------------------

@pytest.mark.parametrize("layout", ["CHWN", "nchw", 3, None])
def test_layout_names(layout):
    with refused(ValueError, f"layout must be one of ['NCHW', 'NHWC'], not {layout!r}"):
        padded_bytes(conv(), layout)


@pytest.mark.parametrize("group", [-1, 2, 1.0, "0"])
def test_layout_group_base(group):
    with refused(ValueError, f"group must be an int in [0, 1], not {group!r}"):
        group_base_bytes(conv(groups=2), "NCHW", group)


@pytest.mark.parametrize("x", [np.zeros((1, 4, 6, 6), np.uint8), np.zeros((1, 4, 6, 5), np.int8),
                               np.zeros((4, 6, 6), np.int8)])
def test_layout_to_padded(x):
    with refused(ValueError, f"x_nchw must be int8 of shape (1, 4, 6, 6), not {x.dtype} "
                             f"{x.shape}"):
        to_padded(x, conv(), "NHWC")


@pytest.mark.parametrize("w", [np.zeros((4, 2, 3, 3), np.int16), np.zeros((4, 4, 3, 3), np.int8)])
def test_layout_weights_shape(w):
    with refused(ValueError, f"w must be int8 of shape (4, 2, 3, 3), not {w.dtype} {w.shape}"):
        weights_k_major(w, conv(groups=2), 0)


@pytest.mark.parametrize("group", [-1, 2, np.int64(0)])
def test_layout_weights_group(group):
    with refused(ValueError, f"group must be an int in [0, 1], not {group!r}"):
        weights_k_major(np.zeros((4, 2, 3, 3), np.int8), conv(groups=2), group)


# -- convolution tables ------------------------------------------------------------------------

@pytest.mark.parametrize("name, size", [("off", 4), ("run", 8), ("grp", 4)])
def test_tables_from_bytes_lengths(name, size):
    blobs = {"off": bytes(8), "run": bytes(16), "grp": bytes(8), name: bytes(size + 1)}
    with refused(ValueError, f"{name} image length {size + 1} is not a multiple of {size}"):
        ConvTables.from_bytes(conv(), "NCHW", 4, **blobs)


def test_tables_base_past_32_bits():
    big = ConvShape(batch=2, in_channels=1 << 16, height=256, width=256, out_channels=1,
                    kernel_h=1, kernel_w=1)
    with refused(ValueError, "conv tables: base=4294967296 (output pixel n=65536) must be < "
                             "4294967296"):
        compile_tables(big, "NCHW", PRESETS["default"])


@pytest.mark.parametrize("field, hi, where, at", [
    ("off", 1 << 32, lambda i: f"tap k={i}", "(tap k=2)"),
    ("stride", 1 << 15, lambda i: f"run {i}", "(run 2)"),
    ("run_count", 1 << 32, None, "(entry 2)"),
])
def test_tables_field_ranges(field, hi, where, at):
    with refused(ValueError, f"conv tables: {field}={hi} {at} must be < {hi}"):
        _check_range(field, np.array([0, hi - 1, hi, hi + 1], np.int64), hi, where)


@pytest.mark.parametrize("shape", [(1, 4, 6, 6), GemmShape(4, 4, 4), None])
def test_tables_shape_type(shape):
    with refused(ValueError, f"shape must be a ConvShape, not {type(shape).__name__}"):
        compile_tables(shape, "NCHW", TINY)


@pytest.mark.parametrize("pixels", [0, 17, -1, 2.0])
def test_tables_pixels(pixels):
    with refused(ValueError, f"pixels must be an int in [1, 16], not {pixels!r}"):
        compile_tables(conv(), "NCHW", TINY, pixels=pixels)


@pytest.mark.parametrize("width", [3, 8, 2.0, 0])
def test_tables_row_width(width):
    with refused(ValueError, f"row_width must be out_w=4 rounded up to a multiple of "
                             f"array_cols=4 (4), not {width!r}"):
        compile_tables(conv(), "NCHW", TINY, row_width=width)


def test_tables_row_width_needs_batch_1_and_whole_rows():
    with refused(ValueError, "row_width: row lanes need batch 1, not batch=2"):
        compile_tables(conv(batch=2), "NCHW", TINY, row_width=4)
    with refused(ValueError, "pixels must be an int in [1, 16], a multiple of row_width=4, "
                             "not 6"):
        compile_tables(conv(), "NCHW", TINY, row_width=4, pixels=6)


def _tables():
    shape = ConvShape(batch=1, in_channels=1, height=3, width=3, out_channels=1, kernel_h=1,
                      kernel_w=3, pad_left=1, pad_right=1)
    return compile_tables(shape, "NCHW", TINY)


@pytest.mark.parametrize("arg, value, size", [
    ("k_range", range(0, 4), 3), ("k_range", range(0, 3, 2), 3), ("k_range", (-1, 2), 3),
    ("n_range", range(0, 10), 9), ("n_range", (2, 1), 9), ("n_range", [0, 1], 9)])
def test_gather_b_ranges(arg, value, size):
    with refused(ValueError, f"{arg} must be a step-1 range (or (lo, hi)) within [0, {size}], "
                             f"not "):
        gather_b(_tables(), bytes(64), **{arg: value})


def _with(t, **changes):
    fields = dict(shape=t.shape, layout=t.layout, lanes=t.lanes, offsets=t.offsets,
                  segments=t.segments, groups=t.groups)
    return ConvTables(**{**fields, **changes})


@pytest.mark.parametrize("edit", [lambda g: g[:-1], lambda g: [1] + g[1:],
                                  lambda g: g[:-1] + [g[-1] + 1], lambda g: [0, 0] + g[2:]])
def test_gather_b_group_table(edit):
    t = _tables()
    groups = edit(t.groups.tolist())
    with refused(ValueError, f"gather_b: the group table must hold 4 non-decreasing run "
                             f"indices from 0 to run_count={t.run_count}, each group >= 1 run; "
                             f"got {groups}"):
        gather_b(_with(t, groups=np.array(groups, np.uint32)), bytes(64))


def test_gather_b_last_flag():
    t = _tables()
    assert t.groups.tolist()[:2] == [0, 2]
    seg = t.segments.copy()
    seg[0] |= np.uint64(1 << 63)
    with refused(ValueError, "gather_b: run 0 of lane group 0 has last=1, expected 0 (last is "
                             "1 only on a group's final run)"):
        gather_b(_with(t, segments=seg), bytes(64))
    seg = t.segments.copy()
    seg[1] &= ~np.uint64(1 << 63)
    with refused(ValueError, "gather_b: run 1 of lane group 0 has last=0, expected 1"):
        gather_b(_with(t, segments=seg), bytes(64))


@pytest.mark.parametrize("delta", [+2, -1])
def test_gather_b_lane_count(delta):
    t = _tables()
    runs = t.runs()
    lo, cnt = int(runs["lane_lo"][1]), int(runs["lane_cnt"][1])
    seg = t.segments.copy()
    seg[1] = np.uint64(int(seg[1]) + (delta << 40))
    with refused(ValueError, f"gather_b: run 1 lane_lo={lo} + lane_cnt={cnt + delta} must be "
                             f"in [1, 4] (group 0's valid lanes)"):
        gather_b(_with(t, segments=seg), bytes(64))


def test_gather_b_fill_each_lane_once():
    t = _tables()
    seg = t.segments.copy()
    seg[0] -= np.uint64(1 << 40)
    with refused(ValueError, "gather_b: lane group 0 does not fill each lane exactly once"):
        gather_b(_with(t, segments=seg), bytes(64))


@pytest.mark.parametrize("size", [1, 8, 14])
def test_gather_b_address(size):
    with refused(ValueError, f"-byte tensor: addresses must be in [0, {size})",
                 f"outside the {size}-byte tensor"):
        gather_b(_tables(), bytes(size))
