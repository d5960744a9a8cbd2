"""Lowering and host-operator semantics against an independent reference: the ONNX operator
definitions written out in numpy here (or onnxruntime with its graph optimisations off, whose
kernels follow the operator definitions), on models that exercise the corner each test names.
Every case runs on the golden device (no RTL): what is checked is which layers the compiler
matches and what the host computes."""

from __future__ import annotations

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


def _qdq_gemm(bias_shape, seed=0):
    """x (7, 10) -> Q/DQ -> Gemm(W int8 (10, 7), C int32 ``bias_shape`` via DQ) -> Q/DQ."""
    rng = np.random.default_rng(seed)
    consts = {"sx": np.float32(0.05), "zx": np.int8(3),
              "wq": rng.integers(-100, 100, (10, 7)).astype(np.int8),
              "ws": np.float32(0.02), "wz": np.int8(0),
              "bq": rng.integers(-2000, 2000, bias_shape).astype(np.int32),
              "bs": np.float32(0.001), "bz": np.int32(0),
              "sy": np.float32(0.04), "zy": np.int8(-1)}
    nodes = [helper.make_node("QuantizeLinear", ["x", "sx", "zx"], ["xq"], name="qx"),
             helper.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["xd"], name="dqx"),
             helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["wd"], name="dqw"),
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
