"""Shape validation, the convolution mapping and workload files."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

import planner
from spec.config import PRESETS
from planner import ConvShape, GemmShape, load_workload, parse_workload, plan_conv
from planner.workload import layer_gemm

WORKLOADS = Path(planner.__file__).parent / "workloads"


@given(st.sampled_from("mkn"), st.one_of(st.integers(-5, 0), st.integers(1 << 24, 1 << 30),
                                          st.floats(1, 10), st.just("8")))
def test_shapes_gemm_invalid_field_named_with_range(field, value):
    args = {"m": 8, "k": 8, "n": 8, field: value}
    with pytest.raises(ValueError, match=rf"GemmShape\.{field} must be an int in \[1, 16777215\]"):
        GemmShape(**args)


def test_shapes_take_numpy_integers_as_ints():
    """numpy integers (what array shapes give) were refused as "not an int"; they are stored
    as Python ints, so the shapes equal, hash and print as if given ints."""
    import numpy as np

    g = GemmShape(np.int64(8), np.int32(16), np.uint16(4))
    assert g == GemmShape(8, 16, 4) and hash(g) == hash(GemmShape(8, 16, 4))
    assert {type(v) for v in (g.m, g.k, g.n)} == {int} and str(g) == "8x16x4"
    c = _conv(batch=np.int64(1), height=np.int64(56))
    assert c == _conv() and type(c.height) is int
    with pytest.raises(ValueError, match=r"GemmShape\.m must be an int in \[1, 16777215\], "
                                         r"not 0"):
        GemmShape(np.int64(0), 8, 8)


def _conv(**kw):
    base = dict(batch=1, in_channels=64, height=56, width=56, out_channels=64, kernel_h=3,
                kernel_w=3, stride_h=1, stride_w=1, pad_top=1, pad_left=1, pad_bottom=1,
                pad_right=1)
    base.update(kw)
    return ConvShape(**base)


def test_shapes_conv_maps_to_gemm_per_seed():
    c = _conv()
    assert (c.out_h, c.out_w) == (56, 56)
    assert c.gemm == GemmShape(64, 576, 3136)
    assert c.b_tensor_bytes == 64 * 56 * 56  # input tensor once, not the im2col k*n
    s = _conv(stride_h=2, stride_w=2, pad_bottom=0, pad_right=0)
    assert (s.out_h, s.out_w) == (28, 28)
    d = _conv(dilation_h=2, dilation_w=2, pad_top=2, pad_bottom=2, pad_left=2, pad_right=2)
    assert (d.out_h, d.out_w) == (56, 56)


def test_shapes_conv_groups_are_independent_gemms():
    c = _conv(groups=4, out_channels=128)
    assert c.gemm == GemmShape(32, 16 * 9, 3136)
    plan, groups = plan_conv(c, PRESETS["default"])
    assert groups == 4 and plan.shape == c.gemm
    assert c.macs == 4 * c.gemm.macs


@pytest.mark.parametrize("kw,match", [
    (dict(groups=3), r"groups=3 must divide in_channels"),
    (dict(groups=0), r"ConvShape\.groups must be an int in \[1, 64\]"),
    (dict(pad_top=3), r"ConvShape\.pad_top must be an int in \[0, 2\]"),
    (dict(kernel_h=0), r"ConvShape\.kernel_h must be an int in \[1, 4096\]"),
    (dict(height=1, pad_top=0, pad_bottom=0), r"kernel_h=3 .* must fit the padded input"),
    (dict(stride_w=-1), r"ConvShape\.stride_w"),
    (dict(batch=0), r"ConvShape\.batch must be an int in \[1, "),
])
def test_shapes_conv_invalid_fields_are_named(kw, match):
    with pytest.raises(ValueError, match=match):
        _conv(**kw)


def test_shapes_workload_files_parse_and_match_their_mac_totals():
    for name in ("resnet50", "bert_base_seq128", "bert_large_seq128"):
        path = WORKLOADS / f"{name}.json"
        w = load_workload(path)
        macs = 0
        for layer in w.layers:
            gemm, groups, _ = layer_gemm(layer.shape)
            macs += gemm.macs * groups * layer.count
        assert macs == json.loads(path.read_text())["totals"]["macs"]


@pytest.mark.parametrize("layer,match", [
    ({"kind": "gemm", "M": 1, "K": 2}, "misses|missing"),
    ({"kind": "gemm", "M": 1, "K": 2, "N": 3, "X": 1}, "unknown"),
    ({"kind": "pool"}, "kind must be"),
    ({"kind": "gemm", "M": 0, "K": 2, "N": 3}, r"GemmShape\.m"),
    ({"kind": "gemm", "M": 1, "K": 2, "N": 3, "count": 0}, "count must be"),
    ({"kind": "conv", "N": 1, "C": 3, "H": 8, "W": 8, "K": 4, "R": 3, "S": 3, "P": 7},
     "P=7 disagrees"),
])
def test_shapes_workload_bad_layers_are_refused(layer, match):
    with pytest.raises(ValueError, match=match):
        parse_workload(json.dumps({"network": "x", "layers": [layer]}))


def test_shapes_workload_duplicate_keys_refused():
    with pytest.raises(ValueError, match="duplicate key"):
        parse_workload('{"layers": [{"kind": "gemm", "M": 1, "M": 2, "K": 1, "N": 1}]}')


def test_shapes_import_planner_does_not_import_amaranth():
    code = "import sys, planner, planner.report; assert 'amaranth' not in sys.modules, 'amaranth'"
    subprocess.run([sys.executable, "-c", code], check=True)
