"""planner.zero_points and tb.onnx_cases without RTL: the zero-point folding, computed with the golden
int8 models, equals ONNX's expected outputs (the wheel's node tests, and random cases checked
against onnx.reference), and inputs the int8 datapath cannot run exactly are refused."""

import numpy as np
import pytest

from spec.golden import conv2d_int8, gemm_int8
from planner.zero_points import (exact_int8, finish, fold_conv_float, fold_conv_integer,
                           fold_matmul_integer, resolve_conv_pads)


def folded_result(spec):
    """What the RTL run computes (tb.onnx_cases.run_spec), with the golden models instead."""
    from tb.onnx_cases import conv_shape, fold

    f = fold(spec)
    if spec["op"] == "MatMulInteger":
        return finish(gemm_int8(f.a8, f.b8), f.correction)
    s = conv_shape(spec, f.x8, f.w8)
    # the padded layout with its halo, then a conv without pads (tb.conv._padded_image)
    xp = np.pad(f.x8, ((0, 0), (0, 0), (s.pad_top, s.pad_bottom), (s.pad_left, s.pad_right)),
                constant_values=f.halo)
    acc = conv2d_int8(xp, f.w8, stride=(s.stride_h, s.stride_w),
                      dilation=(s.dilation_h, s.dilation_w), groups=s.groups)
    return finish(acc, f.correction.reshape(1, -1, 1, 1))


@pytest.fixture(scope="module")
def specs():
    pytest.importorskip("onnx", reason="onnx (the dev extra) provides the conformance cases")
    from tb.onnx_cases import collect_specs

    return collect_specs()


def test_selected_cases(specs):
    names = {s["name"] for s in specs}
    assert len(specs) >= 6 and len(names) == len(specs)
    assert {"test_convinteger_with_padding", "test_convinteger_without_padding",
            "test_matmulinteger", "test_basic_conv_with_padding", "test_basic_conv_without_padding",
            "test_conv_with_strides_and_asymmetric_padding", "test_conv_with_autopad_same",
            "test_conv_with_strides_padding", "test_conv_with_strides_no_padding"} <= names
    assert {s["op"] for s in specs} == {"Conv", "ConvInteger", "MatMulInteger"}


def test_folded_equals_onnx_expected(specs):
    from tb.onnx_cases import expected

    for spec in specs:
        got = folded_result(spec)
        assert np.array_equal(got, expected(spec)), spec["name"]


def test_autopad_same_resolved(specs):
    spec = next(s for s in specs if s["name"] == "test_conv_with_autopad_same")
    assert spec["onnx_attrs"]["auto_pad"] == "SAME_LOWER"
    assert spec["attrs"]["pads"] == [1, 1, 1, 1]


def test_resolve_pads_odd_totals():
    # in 4, kernel 3, stride 2: out 2, total pad 1 -> at the end (UPPER) or beginning (LOWER)
    assert resolve_conv_pads("SAME_UPPER", None, (4, 6), (3, 2), (2, 1), (1, 1)) == (0, 0, 1, 1)
    assert resolve_conv_pads("SAME_LOWER", None, (4, 6), (3, 2), (2, 1), (1, 1)) == (1, 1, 0, 0)
    assert resolve_conv_pads(b"VALID", [1, 1, 1, 1], (4, 4), (3, 3), (1, 1), (1, 1)) == (0,) * 4
    assert resolve_conv_pads("NOTSET", [1, 0, 2, 0], (4, 4), (3, 3), (1, 1), (1, 1)) == \
        (1, 0, 2, 0)
    with pytest.raises(ValueError, match="auto_pad"):
        resolve_conv_pads("SAME", None, (4, 4), (3, 3), (1, 1), (1, 1))


def _onnx_run(op, inputs, attrs, out_dtype):
    """``op`` on ``inputs`` (name -> array, in order; None = absent) by onnx.reference."""
    pytest.importorskip("onnx")
    from onnx import helper
    from onnx.reference import ReferenceEvaluator

    names = [k if v is not None else "" for k, v in inputs.items()]
    present = {k: v for k, v in inputs.items() if v is not None}
    node = helper.make_node(op, names, ["y"], **attrs)
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
         for k, v in present.items()],
        [helper.make_tensor_value_info("y", out_dtype, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    return ReferenceEvaluator(model).run(None, present)[0]


def _spec(op, inputs, attrs, want):
    from tb.onnx_cases import _array, conv_attrs

    resolved = {} if op == "MatMulInteger" else conv_attrs(
        attrs, inputs["x"].shape, inputs["w"].shape)
    return {"name": "random", "op": op, "attrs": resolved,
            "inputs": {k: None if v is None else _array(v) for k, v in inputs.items()},
            "expected": _array(want)}


@pytest.mark.parametrize("seed", range(12))
def test_random_convinteger_against_onnx_reference(seed):
    pytest.importorskip("onnx")
    from onnx import TensorProto

    rng = np.random.default_rng(seed)
    dt = (np.uint8, np.int8)[seed % 2]
    lo, hi = np.iinfo(dt).min, np.iinfo(dt).max + 1
    groups = (1, 2)[seed % 3 == 0]
    c, k = groups * int(rng.integers(1, 3)), groups * int(rng.integers(1, 3))
    kh, kw = int(rng.integers(1, 4)), int(rng.integers(1, 4))
    dil = [int(rng.integers(1, 3)), int(rng.integers(1, 3))]
    x = rng.integers(lo, hi, size=(1 + seed % 2, c, int(rng.integers(4, 8)),
                                   int(rng.integers(4, 8)))).astype(dt)
    # weights near the weight zero point so that w - w_zp fits int8
    w_zp = rng.integers(lo + 64, hi - 64, size=(k,) if seed % 4 < 2 else ()).astype(dt)
    w = (w_zp.reshape(-1, 1, 1, 1) if w_zp.ndim else w_zp) + rng.integers(
        -64, 64, size=(k, c // groups, kh, kw))
    w = w.astype(dt)
    x_zp = np.array(rng.integers(lo, hi), dtype=dt)
    attrs = {"group": groups, "dilations": dil, "strides": [1 + seed % 2, 1 + seed // 6]}
    if seed % 3 == 1:
        attrs["auto_pad"] = ("SAME_UPPER", "SAME_LOWER")[seed % 2]
    else:
        attrs["pads"] = [int(rng.integers(0, d * (s - 1) + 1))
                         for d, s in zip(dil * 2, (kh, kw, kh, kw))]
    inputs = {"x": x, "w": w, "x_zero_point": x_zp, "w_zero_point": w_zp}
    want = _onnx_run("ConvInteger", inputs, attrs, TensorProto.INT32)
    spec = _spec("ConvInteger", inputs, attrs, want)
    assert np.array_equal(folded_result(spec), want.astype(np.int64))


@pytest.mark.parametrize("seed", range(8))
def test_random_matmulinteger_against_onnx_reference(seed):
    pytest.importorskip("onnx")
    from onnx import TensorProto

    rng = np.random.default_rng(seed)
    da, db = (np.uint8, np.int8)[seed % 2], (np.uint8, np.int8)[(seed // 2) % 2]
    m, kk, n = (int(v) for v in rng.integers(1, 9, size=3))
    a = rng.integers(np.iinfo(da).min, np.iinfo(da).max + 1, size=(m, kk)).astype(da)
    b = rng.integers(np.iinfo(db).min, np.iinfo(db).max + 1, size=(kk, n)).astype(db)
    a_zp = rng.integers(np.iinfo(da).min, np.iinfo(da).max + 1,
                        size=(m,) if seed % 4 == 3 else ()).astype(da)
    b_zp = rng.integers(np.iinfo(db).min, np.iinfo(db).max + 1,
                        size=(n,) if seed % 4 >= 2 else ()).astype(db)
    inputs = {"a": a, "b": b, "a_zero_point": a_zp if seed != 5 else None,
              "b_zero_point": b_zp}
    want = (a.astype(np.int64) - (a_zp.reshape(-1, 1) if a_zp.ndim else a_zp) *
            (seed != 5)) @ (b.astype(np.int64) - b_zp)
    f = fold_matmul_integer(a, b, inputs["a_zero_point"], b_zp)
    assert np.array_equal(finish(gemm_int8(f.a8, f.b8), f.correction), want)
    if a_zp.ndim == 0:                  # onnx.reference takes per-tensor zero points here
        ref = _onnx_run("MatMulInteger", {"A": a, "B": b, "a_zero_point": inputs[
            "a_zero_point"], "b_zero_point": b_zp}, {}, TensorProto.INT32)
        assert np.array_equal(ref, want)


def test_refusals():
    with pytest.raises(ValueError, match="integral"):
        exact_int8("X", np.array([1.5, 2.0], np.float32))
    with pytest.raises(ValueError, match=r"\[-128, 127\]"):
        fold_conv_float(np.full((1, 1, 3, 3), 200.0), np.ones((1, 1, 3, 3)))
    w = np.array([[[[0, 255]]]], np.uint8)
    with pytest.raises(ValueError, match="activation-sum correction"):
        fold_conv_integer(np.zeros((1, 1, 2, 2), np.uint8), w, np.uint8(3), np.uint8(0))
    with pytest.raises(ValueError, match="must match"):
        fold_conv_integer(np.zeros((1, 1, 2, 2), np.uint8), w, np.int8(3))
    with pytest.raises(ValueError, match="2-D"):
        fold_matmul_integer(np.zeros((2, 2, 2), np.uint8), np.zeros((2, 2), np.uint8))


def test_halo_and_correction_rule():
    # uint8: x8 = x - 128, halo = x_zp - 128, c[m] = (128 - x_zp) * sum(w'[m])
    x = np.array([[[[0, 255], [7, 9]]]], np.uint8)
    w = np.array([[[[3]]], [[[5]]]], np.uint8)
    f = fold_conv_integer(x, w, np.uint8(7), np.array([1, 2], np.uint8))
    assert f.halo == 7 - 128
    assert f.x8.dtype == np.int8 and f.x8.ravel().tolist() == [-128, 127, -121, -119]
    assert f.w8.ravel().tolist() == [2, 3]
    assert f.correction.tolist() == [(128 - 7) * 2, (128 - 7) * 3]
    g = fold_conv_integer(x.astype(np.int16).clip(-128, 127).astype(np.int8),
                          w.astype(np.int8), np.int8(-5))
    assert g.halo == -5 and g.correction.tolist() == [5 * 3, 5 * 5]
