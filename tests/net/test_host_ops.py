"""Lowering and host-operator semantics against an independent reference: the ONNX operator
definitions written out in numpy here (or onnxruntime with its graph optimisations off, whose
kernels follow the operator definitions), on models that exercise the corner each test names.
Every case runs on the golden device (no RTL): what is checked is which layers the compiler
matches and what the host computes."""

from __future__ import annotations

import re

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from flow.compile import compile_network
from flow.execute import run_network
from planner.net.lower import lower
from planner.net.onnx_import import import_onnx
from spec.config import PRESETS

SMALL = PRESETS["small"]


def _model(nodes, inputs, outputs, consts, opset=17):
    graph = helper.make_graph(nodes, "g", inputs, outputs,
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def _ort(model, feeds):
    """onnxruntime without graph optimisations: its fused QDQ kernels (QGemm) are not the
    operator definitions (a (7, 1) Gemm bias goes wrong there)."""
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    s = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in s.get_outputs()], s.run(None, feeds)))


def _run(model, feeds, cfg=SMALL):
    low = lower(import_onnx(model))
    net = compile_network(low, cfg)
    return low, net, run_network(net, feeds).outputs


def _qdq_gemm(bias_shape, seed=0, per_channel=False):
    """x (7, 10) -> Q/DQ -> Gemm(W int8 (10, 7), C int32 ``bias_shape`` via DQ) -> Q/DQ;
    ``per_channel``: W's scale per output feature (DequantizeLinear axis 1)."""
    rng = np.random.default_rng(seed)
    consts = {"sx": np.float32(0.05), "zx": np.int8(3),
              "wq": rng.integers(-100, 100, (10, 7)).astype(np.int8),
              "ws": rng.uniform(0.01, 0.03, 7).astype(np.float32) if per_channel
              else np.float32(0.02), "wz": np.zeros(7, np.int8) if per_channel else np.int8(0),
              "bq": rng.integers(-2000, 2000, bias_shape).astype(np.int32),
              "bs": np.float32(0.001), "bz": np.int32(0),
              "sy": np.float32(0.04), "zy": np.int8(-1)}
    nodes = [helper.make_node("QuantizeLinear", ["x", "sx", "zx"], ["xq"], name="qx"),
             helper.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["xd"], name="dqx"),
             helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["wd"], name="dqw",
                              axis=1),
             helper.make_node("DequantizeLinear", ["bq", "bs", "bz"], ["bd"], name="dqb"),
             helper.make_node("Gemm", ["xd", "wd", "bd"], ["y0"], name="fc"),
             helper.make_node("QuantizeLinear", ["y0", "sy", "zy"], ["yq"], name="qy"),
             helper.make_node("DequantizeLinear", ["yq", "sy", "zy"], ["y"], name="dqy")]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [7, 10])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [7, 7])], consts)


@pytest.mark.parametrize("bias_shape, on_accel", [
    ((7,), True), ((1, 7), True), ((1,), True), ((), True), ((1, 1), True),
    ((7, 1), False), ((7, 7), False)])
def test_gemm_bias_along_the_output_features_only(bias_shape, on_accel):
    """The accelerator's bias is per output feature (a column of the ONNX Gemm). A ``C`` of
    ``(rows, 1)`` or ``(rows, N)`` is per row: the layer runs on the host. With rows == N = 7
    a ``(7, 1)`` bias used to be flattened and added along the features (130 LSB off, no
    error); a scalar ``(1,)`` one aborted the compile ("cannot reshape")."""
    model = _qdq_gemm(bias_shape)
    feeds = {"x": np.random.default_rng(1).standard_normal((7, 10)).astype(np.float32)}
    low, net, out = _run(model, feeds)
    layers = [n for s in net.steps if s.kind == "segment" for n in s.layer_names]
    assert layers == (["fc"] if on_accel else [])
    if not on_accel:
        assert "is not per output channel" in low.unmatched["fc"]
    want = _ort(model, feeds)["y"]
    lsb = np.abs(out["y"] - want).max() / 0.04
    assert lsb <= (1.001 if on_accel else 1e-3), lsb


def _one_op(op, inputs, attrs, opset, consts=None, outputs=1):
    """A model of one ``op`` node on graph inputs ``inputs`` (name -> array) and constants."""
    consts = consts or {}
    names = list(inputs) + list(consts)
    node = helper.make_node(op, names, [f"y{i}" for i in range(outputs)], name="op", **attrs)
    ins = [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
           for k, v in inputs.items()]
    outs = [helper.make_empty_tensor_value_info(f"y{i}") for i in range(outputs)]
    model = _model([node], ins, outs, consts, opset)
    typed = {v.name: v for v in onnx.shape_inference.infer_shapes(model).graph.value_info}
    for out in model.graph.output:
        if out.name in typed:
            out.CopyFrom(typed[out.name])
    return model


RNG = np.random.default_rng(7)
X3 = RNG.standard_normal((2, 3, 4)).astype(np.float32)


@pytest.mark.parametrize("op, inputs, attrs, opset, consts", [
    # integer Div truncates toward zero and keeps the type (it was float64 true division)
    ("Div", {"a": np.array([7, -7, 7, -7, 100000, -3], np.int32),
             "b": np.array([2, 2, -2, -2, 7, 5], np.int32)}, {}, 17, None),
    ("Div", {"a": RNG.standard_normal(6).astype(np.float32),
             "b": np.full(6, 3, np.float32)}, {}, 17, None),
    # opset 21: no zero point, output_dtype INT8 (it was uint8)
    ("QuantizeLinear", {"x": RNG.standard_normal((4, 6)).astype(np.float32) * 3},
     {"output_dtype": TensorProto.INT8}, 21, {"s": np.float32(0.02)}),
    # axis == rank: (N, 1) (it was (1, N))
    ("Flatten", {"x": X3}, {"axis": 3}, 13, None),
    ("Flatten", {"x": X3}, {"axis": -1}, 13, None),
    ("Flatten", {"x": X3}, {"axis": 0}, 13, None),
    # before opset 13 the input is coerced to 2-D at axis (default 1) (it was softmax over -1)
    ("Softmax", {"x": X3}, {}, 12, None),
    ("Softmax", {"x": X3}, {"axis": 2}, 11, None),
    ("Softmax", {"x": X3}, {}, 13, None),
    ("LogSoftmax", {"x": X3}, {}, 12, None),
    ("LogSoftmax", {"x": X3}, {"axis": 1}, 13, None),
    ("Hardmax", {"x": X3}, {}, 11, None),
    ("Hardmax", {"x": X3}, {"axis": 1}, 13, None),
    # inference mode with the running statistics (onnx.reference used batch statistics <= 13)
    ("BatchNormalization", {"x": RNG.standard_normal((2, 3, 4, 4)).astype(np.float32)},
     {"epsilon": 1e-3}, 13,
     {"scale": RNG.uniform(0.5, 1, 3).astype(np.float32),
      "b": RNG.standard_normal(3).astype(np.float32),
      "mean": RNG.standard_normal(3).astype(np.float32),
      "var": RNG.uniform(0.5, 1.5, 3).astype(np.float32)}),
    ("BatchNormalization", {"x": RNG.standard_normal((1, 3, 5)).astype(np.float32)}, {}, 15,
     {"scale": np.float32([1, 2, 3]), "b": np.float32([0, 1, -1]),
      "mean": np.float32([0.5, 0, -0.5]), "var": np.float32([1, 2, 0.25])}),
])
def test_host_operators_follow_their_opset_definition(op, inputs, attrs, opset, consts):
    model = _one_op(op, inputs, attrs, opset, consts)
    _, net, out = _run(model, inputs)
    assert all(s.kind == "host" for s in net.steps)
    want = _ort(model, inputs)["y0"]
    assert out["y0"].dtype == want.dtype and out["y0"].shape == want.shape
    if want.dtype.kind in "iu":
        np.testing.assert_array_equal(out["y0"], want)
    else:
        np.testing.assert_allclose(out["y0"], want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op, inputs, attrs, opset, consts, outputs, message", [
    ("Div", {"a": np.array([1, 2], np.int32), "b": np.array([1, 0], np.int32)}, {}, 17, None,
     1, "integer division by zero"),
    ("QuantizeLinear", {"x": np.ones((2, 4), np.float32)}, {"axis": 1, "block_size": 2}, 21,
     {"s": np.full((2, 2), 0.1, np.float32), "z": np.zeros((2, 2), np.int8)}, 1,
     "blocked quantisation (block_size=2) is not supported on the host"),
    ("BatchNormalization", {"x": np.ones((1, 2, 2, 2), np.float32)}, {"training_mode": 1}, 15,
     {k: np.ones(2, np.float32) for k in ("s", "b", "m", "v")}, 3,
     "BatchNormalization in training mode"),
])
def test_host_operators_refuse_what_they_do_not_implement(op, inputs, attrs, opset, consts,
                                                          outputs, message):
    from planner.net.reference import HostOpError

    model = _one_op(op, inputs, attrs, opset, consts, outputs)
    with pytest.raises(HostOpError, match=re.escape(message)):
        _run(model, inputs)


def test_every_output_of_a_host_operator_is_computed():
    """Dropout's mask and LayerNormalization's Mean and InvStdDev as graph outputs: the numpy
    implementations returned the first output only, and the run ended in a KeyError."""
    x = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    for op, consts, outputs in [
            ("Dropout", {}, 2),
            ("LayerNormalization", {"g": RNG.uniform(0.5, 1.5, 4).astype(np.float32),
                                    "b": RNG.standard_normal(4).astype(np.float32)}, 3)]:
        model = _one_op(op, {"x": x}, {}, 17, consts, outputs)
        _, _, out = _run(model, {"x": x})
        want = _ort(model, {"x": x})
        assert out.keys() == want.keys() and len(want) == outputs
        for k in want:
            assert out[k].dtype == want[k].dtype and out[k].shape == want[k].shape, k
            np.testing.assert_allclose(out[k], want[k], rtol=1e-5, atol=1e-6)


def test_a_constant_graph_output_is_kept():
    """An initializer (or a folded Shape) listed as a graph output: the compiled network kept
    only the constants host steps read, and the run ended in a KeyError."""
    x = RNG.standard_normal((1, 3, 4, 4)).astype(np.float32)
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="relu"),
             helper.make_node("Shape", ["x"], ["shp"], name="shape")]
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, x.shape),
                    helper.make_tensor_value_info("shp", TensorProto.INT64, [4]),
                    helper.make_tensor_value_info("cst", TensorProto.FLOAT, [3])],
                   {"cst": np.float32([1, 2, 3])})
    _, net, out = _run(model, {"x": x})
    assert set(net.outputs) == {"y", "shp", "cst"}
    np.testing.assert_array_equal(out["shp"], [1, 3, 4, 4])
    np.testing.assert_array_equal(out["cst"], [1, 2, 3])
    np.testing.assert_array_equal(out["y"], np.maximum(x, 0))


@pytest.mark.parametrize("shape, attrs", [
    ((1, 2, 4, 4), dict(kernel_shape=[2, 2])),
    ((2, 3, 7, 6), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 0, 1, 1])),
    ((2, 3, 7, 6), dict(kernel_shape=[3, 2], auto_pad="SAME_UPPER", strides=[2, 1])),
    ((1, 2, 8, 8), dict(kernel_shape=[2, 2], dilations=[2, 2], storage_order=1)),
    ((1, 2, 7, 7), dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)),
    ((2, 3, 9), dict(kernel_shape=[3], strides=[2])),
    ((2, 3, 7, 8), dict(kernel_shape=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1)),
    ((2, 3, 7, 8), dict(kernel_shape=[3, 2], strides=[2, 2], auto_pad="SAME_LOWER")),
    ((1, 2, 5, 6, 7), dict(kernel_shape=[2, 3, 2], storage_order=1, pads=[1, 0, 1, 0, 1, 1])),
])
@pytest.mark.parametrize("dtype", [np.float32, np.int8, np.uint8])
def test_maxpool_is_onnxruntimes(shape, attrs, dtype):
    """Values and Indices (flat over the whole input, batch and channel included, the first
    maximum of each window; ties from a few distinct values), as onnxruntime computes them.
    onnx.reference got the first case's indices wrong (28% equal), the values and shape of
    ceil_mode with pads and of SAME_LOWER with stride 2 wrong, and failed on int8 input."""
    x = np.random.default_rng(3).integers(-3, 4, shape).astype(dtype)
    model = _one_op("MaxPool", {"x": x}, attrs, 17, outputs=2)
    _, _, out = _run(model, {"x": x})
    want = _ort(model, {"x": x})
    np.testing.assert_array_equal(out["y0"], want["y0"])
    np.testing.assert_array_equal(out["y1"], want["y1"])


def test_one_dimensional_qlinear_conv_on_the_host():
    """A 1-D QLinearConv with per-channel weight scales (the accelerator runs 2-D ones only):
    onnx.reference returned a (1, 5, 5, 9) tensor for (1, 5, 9)."""
    rng = np.random.default_rng(5)
    x = rng.integers(0, 256, (1, 3, 9)).astype(np.uint8)
    consts = {"xs": np.float32(0.05), "xz": np.uint8(128),
              "w": rng.integers(-100, 100, (5, 3, 3)).astype(np.int8),
              "ws": rng.uniform(0.005, 0.02, 5).astype(np.float32), "wz": np.zeros(5, np.int8),
              "ys": np.float32(0.2), "yz": np.uint8(120)}
    model = _one_op("QLinearConv", {"x": x}, {"pads": [1, 1], "strides": [2]}, 17, consts)
    _, net, out = _run(model, {"x": x})
    assert all(s.kind == "host" for s in net.steps)
    want = _ort(model, {"x": x})["y0"]
    assert out["y0"].shape == want.shape == (1, 5, 5)
    assert np.abs(out["y0"].astype(int) - want).max() <= 1


def test_qlinear_matmul_with_a_one_dimensional_weight_runs_on_the_host():
    """B of shape (K,): the zero-point subtraction broadcast it to (1, K), the lowering took
    it for a K = 1 layer, compile put that layer on the host, and the run failed with
    "cannot reshape array of size 400 into shape (4,10)"."""
    rng = np.random.default_rng(6)
    a = rng.integers(0, 256, (4, 10)).astype(np.uint8)
    consts = {"as": np.float32(0.05), "az": np.uint8(128), "b": rng.integers(0, 256, 10)
              .astype(np.uint8), "bs": np.float32(0.02), "bz": np.uint8(100),
              "ys": np.float32(0.3), "yz": np.uint8(128)}
    model = _one_op("QLinearMatMul", {"a": a}, {}, 17, consts)     # inputs in ONNX order
    low, net, out = _run(model, {"a": a})
    assert all(s.kind == "host" for s in net.steps)
    assert "rank 1 is not accelerated" in low.unmatched["op"]
    np.testing.assert_array_equal(out["y0"], _ort(model, {"a": a})["y0"])


@pytest.mark.parametrize("a_shape, b_shape, az, bz", [
    ((4, 10), (10, 7), np.uint8(3), np.int8(-2)),
    ((4, 10), (10, 7), np.array([1, 50, 100, 200], np.uint8), np.int8(3)),
    ((4, 10), (10, 7), np.uint8(7), np.array([1, -2, 3, 0, 5, -6, 7], np.int8)),
    ((2, 1, 10), (10, 7), np.array([[[5]], [[250]]], np.uint8), np.int8(0)),
    ((2, 4, 10), (2, 10, 7), np.arange(8, dtype=np.uint8).reshape(2, 4, 1) * 30,
     np.arange(14, dtype=np.int8).reshape(2, 1, 7) - 7),
])
def test_matmul_integer_on_the_host_takes_every_zero_point_form(a_shape, b_shape, az, bz):
    """The operator's forms: ``a_zero_point`` a scalar, one per row of a 2-D ``a`` or
    ``[..., M, 1]``; ``b_zero_point`` a scalar, one per column or ``[..., 1, N]``, against the
    definition written out here (onnxruntime refuses the per-row forms). A per-row
    ``a_zero_point`` ended in onnx.reference's broadcast error."""
    rng = np.random.default_rng(8)
    a = rng.integers(0, 256, a_shape).astype(np.uint8)
    b = rng.integers(-128, 128, b_shape).astype(np.int8)
    model = _one_op("MatMulInteger", {"a": a}, {}, 17, {"b": b, "az": az, "bz": bz})
    _, net, out = _run(model, {"a": a})
    za = np.asarray(az, np.int64)
    za = za.reshape(-1, 1) if za.ndim == 1 else za         # (M,) is per row of a 2-D a
    want = np.matmul(a.astype(np.int64) - za, b.astype(np.int64) - np.asarray(bz, np.int64))
    assert out["y0"].dtype == np.int32 and out["y0"].shape == want.shape
    np.testing.assert_array_equal(out["y0"], want.astype(np.int32))


def test_dequantize_linear_returns_the_scales_type():
    """A float16 scale gives a float16 output (it was float32)."""
    q = np.array([[-5, 0, 7, 127]], np.int8)
    model = _one_op("DequantizeLinear", {"q": q}, {}, 19,
                    {"s": np.float16(0.1), "z": np.int8(2)})
    _, _, out = _run(model, {"q": q})
    want = _ort(model, {"q": q})["y0"]
    assert out["y0"].dtype == want.dtype == np.float16
    np.testing.assert_array_equal(out["y0"], want)


def test_host_operators_keep_their_types_and_opset_rules():
    """Dropout's mask is all False before opset 12 (not defined in inference; onnxruntime's
    zeros) and all True from it; DequantizeLinear's opset-23 ``output_dtype``; a float16
    LayerNormalization's Y is float16; float64 BatchNormalization computes in float64."""
    x = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    for opset in (11, 12):      # (opset 10 models are imported as opset 13)
        model = _one_op("Dropout", {"x": x}, {}, opset, outputs=2)
        out, want = _run(model, {"x": x})[2], _ort(model, {"x": x})
        np.testing.assert_array_equal(out["y1"], want["y1"])
    q = np.array([[-5, 0, 7, 127]], np.int8)
    model = _one_op("DequantizeLinear", {"q": q}, {"output_dtype": TensorProto.FLOAT16}, 23,
                    {"s": np.float32(0.1), "z": np.int8(2)})
    out, want = _run(model, {"q": q})[2], _ort(model, {"q": q})
    assert out["y0"].dtype == want["y0"].dtype == np.float16
    np.testing.assert_array_equal(out["y0"], want["y0"])
    h = x.astype(np.float16)
    model = _one_op("LayerNormalization", {"h": h}, {}, 17,
                    {"g": np.ones(4, np.float16), "b": np.zeros(4, np.float16)})
    out, want = _run(model, {"h": h})[2], _ort(model, {"h": h})
    assert out["y0"].dtype == want["y0"].dtype == np.float16
    np.testing.assert_allclose(out["y0"], want["y0"], atol=2e-3)
    d = RNG.standard_normal((2, 3, 4, 5))
    stats = {"sc": RNG.uniform(0.5, 1, 3), "bi": RNG.standard_normal(3),
             "me": RNG.standard_normal(3), "va": RNG.uniform(0.5, 1.5, 3)}
    model = _one_op("BatchNormalization", {"d": d}, {}, 15, stats)
    out, want = _run(model, {"d": d})[2], _ort(model, {"d": d})
    assert out["y0"].dtype == np.float64
    np.testing.assert_allclose(out["y0"], want["y0"], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("op, attrs, opset", [
    ("LpPool", dict(kernel_shape=[3, 3], p=1, pads=[1, 1, 1, 1], strides=[2, 2], ceil_mode=1),
     18),
    ("LpPool", dict(kernel_shape=[3, 3], p=2, pads=[1, 1, 1, 1], strides=[2, 2], ceil_mode=1),
     18),
    ("LpPool", dict(kernel_shape=[3, 2], p=3, strides=[2, 2], auto_pad="SAME_LOWER"), 18),
    ("LpPool", dict(kernel_shape=[2, 2], p=2, dilations=[2, 2]), 18),
    ("GlobalLpPool", dict(p=3), 17),
    ("GlobalLpPool", {}, 17),
])
def test_lp_pooling_is_onnxruntimes(op, attrs, opset):
    """onnx.reference's LpPool was wrong with ceil_mode and pads (2.4 off), and it has no
    GlobalLpPool at all."""
    x = RNG.standard_normal((2, 3, 7, 8)).astype(np.float32)
    model = _one_op(op, {"x": x}, attrs, opset)
    out, want = _run(model, {"x": x})[2], _ort(model, {"x": x})
    assert out["y0"].shape == want["y0"].shape and out["y0"].dtype == want["y0"].dtype
    np.testing.assert_allclose(out["y0"], want["y0"], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op, attrs, consts", [
    ("LRN", dict(size=1, alpha=0.1, beta=0.75, bias=1.0), None),
    ("LRN", dict(size=3, alpha=0.1, beta=0.75, bias=1.0), None),
    ("LRN", dict(size=5), None),
])
def test_lrn_is_its_definition(op, attrs, consts):
    """onnx.reference's LRN was up to 1.0 off (AlexNet and GoogLeNet use it)."""
    x = RNG.standard_normal((2, 5, 6, 5)).astype(np.float32)
    model = _one_op(op, {"x": x}, attrs, 17, consts)
    out, want = _run(model, {"x": x})[2], _ort(model, {"x": x})
    np.testing.assert_allclose(out["y0"], want["y0"], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("axis, depth", [(-1, np.int64(4)), (0, np.array([4], np.int64)),
                                         (1, np.array([5], np.int64))])
def test_one_hot_takes_a_one_element_depth(axis, depth):
    """``depth`` as a 1-element tensor made onnx.reference fail; negative indices count from
    the end, out-of-range ones are all off."""
    i = np.array([[0, 2, -1], [3, 7, -5]], np.int64)
    model = _one_op("OneHot", {"i": i}, {"axis": axis}, 17,
                    {"d": depth, "v": np.float32([-2, 3])})
    out, want = _run(model, {"i": i})[2], _ort(model, {"i": i})
    assert out["y0"].dtype == want["y0"].dtype
    np.testing.assert_array_equal(out["y0"], want["y0"])


def test_compare_also_reports_onnxruntime_without_its_fused_kernels(tmp_path, capsys):
    """``tessera run --compare`` on a Gemm with a (7, 1) bias: onnxruntime's fused QGemm
    applies the bias along the features, so the default comparison shows a large difference
    although tessera is right; the comparison with the graph optimisations off says so."""
    import json

    from flow.cli import compile_main, run_main

    onnx.save(_qdq_gemm((7, 1), per_channel=True), tmp_path / "g.onnx")
    assert compile_main([str(tmp_path / "g.onnx"), "-o", str(tmp_path / "g.tsr"),
                         "--config", "small"]) == 0
    capsys.readouterr()
    x = np.random.default_rng(1).standard_normal((7, 10)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    assert run_main([str(tmp_path / "g.tsr"), "--input", str(tmp_path / "x.npy"), "--compare",
                     "--json", str(tmp_path / "r.json")]) == 0
    out = capsys.readouterr().out
    assert "y: vs onnxruntime with its graph optimisations off: max abs diff 0 (0 LSB), " \
           "100.0% exactly equal" in out
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["vs_onnxruntime"]["y"]["max_abs_diff_lsb"] > 1
    assert report["vs_onnxruntime_unoptimised"]["y"]["max_abs_diff_lsb"] == 0


def test_compare_keeps_the_optimised_result_when_the_unoptimised_session_fails(
        tmp_path, capsys, monkeypatch):
    """The second comparison (graph optimisations off, after a difference above 1 LSB) failing
    in onnxruntime is reported, not raised: the first one's result stands."""
    import json

    import flow.cli
    from flow.cli import compile_main, run_main

    onnx.save(_qdq_gemm((7, 1), per_channel=True), tmp_path / "g.onnx")
    assert compile_main([str(tmp_path / "g.onnx"), "-o", str(tmp_path / "g.tsr"),
                         "--config", "small"]) == 0
    real = flow.cli.onnxruntime_outputs

    def fail_unoptimised(model, feeds, *, optimise=True):
        if not optimise:
            raise RuntimeError("no kernel for this node")
        return real(model, feeds, optimise=optimise)

    monkeypatch.setattr(flow.cli, "onnxruntime_outputs", fail_unoptimised)
    capsys.readouterr()
    np.save(tmp_path / "x.npy", np.random.default_rng(1).standard_normal((7, 10)).astype(
        np.float32))
    assert run_main([str(tmp_path / "g.tsr"), "--input", str(tmp_path / "x.npy"), "--compare",
                     "--json", str(tmp_path / "r.json")]) == 0
    captured = capsys.readouterr()
    assert "cannot run the stored model with its graph optimisations off (RuntimeError: no " \
           "kernel for this node); compared with them on only" in captured.err
    assert "y: vs onnxruntime: max abs diff" in captured.out
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["vs_onnxruntime"]["y"]["max_abs_diff_lsb"] > 1
    assert report["vs_onnxruntime_unoptimised"] == {
        "error": "RuntimeError: no kernel for this node"}
