"""Seed 004 assignment: thresholds, costs and the fuse-with-previous rule change decisions."""

import dataclasses
import json

import numpy as np
import pytest
from onnx import TensorProto, helper

from spec.config import PRESETS
from planner.net.assign import (FunctionLibrary, Thresholds, analyse, assign, explain,
                                load_host_timings)
from planner.net.graph import ModelError
from planner.net.models import encoder_block, small_cnn
from planner.net.onnx_import import import_onnx

from .conftest import FIXED_TIMINGS

CFG = PRESETS["default"]


@pytest.fixture(scope="module")
def cnn_ops():
    return analyse(import_onnx(small_cnn(height=64, width=64)), CFG)


def _by_name(decisions):
    return {d.op.name: d for d in decisions}


def test_default_thresholds_put_convs_on_the_accelerator_and_fuse_relu(cnn_ops, lib):
    d = _by_name(assign(cnn_ops, lib))
    assert d["conv0"].processor == "accel" and d["conv0"].rule == "threshold"
    # Relu alone: host benefit p = 1 < th1 and the accelerator cannot run it standalone
    assert d["relu0"].evaluations["host"].p < Thresholds().th1
    assert not d["relu0"].evaluations["accel"].supported
    assert (d["relu0"].processor, d["relu0"].rule, d["relu0"].fused_with) == \
        ("accel", "fused", "conv0")
    assert (d["bn2"].processor, d["bn2"].rule, d["bn2"].fused_with) == ("accel", "fused", "conv2")
    assert (d["relu2"].rule, d["relu2"].fused_with) == ("fused", "bn2")   # chains of fusions
    assert d["gap"].processor == "host"


def test_lower_th1_lets_the_host_take_relu_by_threshold(cnn_ops, lib):
    d = _by_name(assign(cnn_ops, lib, Thresholds(th1=1.0)))
    assert (d["relu0"].processor, d["relu0"].rule) == ("host", "threshold")


def test_no_passing_processor_and_no_fusion_falls_back_to_minimum_cost(cnn_ops, lib):
    d = _by_name(assign(cnn_ops, lib, Thresholds(th1=1e9, th2=-1.0)))
    for dec in d.values():
        assert dec.rule == "min-cost"
        supported = [e for e in dec.evaluations.values() if e.supported]
        assert dec.evaluations[dec.processor].c == min(e.c for e in supported)


def test_costs_change_decisions_slow_link_keeps_the_network_on_the_host(cnn_ops, lib):
    slow = dataclasses.replace(lib, link_bytes_per_s=1e3)     # 1 kB/s host <-> device
    d = _by_name(assign(cnn_ops, slow, Thresholds(th2=10_000.0)))
    conv0 = d["conv0"]
    assert conv0.evaluations["accel"].t > 10_000.0            # input crosses the link
    assert conv0.processor == "host"
    assert d["relu0"].processor == "host"


def test_relu_after_a_host_add_fuses_with_it_on_the_host(lib):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 16, 16])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 16, 16])
    graph = helper.make_graph([helper.make_node("Add", ["x", "x"], ["s"], name="residual"),
                               helper.make_node("Relu", ["s"], ["y"], name="relu")], "g", [x], [y])
    ops = analyse(import_onnx(helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 13)])), CFG)
    d = _by_name(assign(ops, lib))
    assert (d["residual"].processor, d["residual"].rule) == ("host", "threshold")
    assert (d["relu"].processor, d["relu"].rule, d["relu"].fused_with) == \
        ("host", "fused", "residual")
    # a benefit threshold the fused pair misses too: minimum cost
    d = _by_name(assign(ops, lib, Thresholds(th1=1.6)))
    assert d["relu"].rule == "min-cost"


def test_faster_host_matmul_moves_the_small_fc_to_the_host(cnn_ops, lib):
    fast = dataclasses.replace(lib, host=dataclasses.replace(FIXED_TIMINGS, ns_per_mac=1e-6,
                                                             op_overhead_ns=0.0))
    base, quick = _by_name(assign(cnn_ops, lib)), _by_name(assign(cnn_ops, fast))
    assert base["fc"].processor == "accel"
    assert quick["fc"].evaluations["accel"].p < Thresholds().th1
    assert quick["fc"].processor == "host"


def test_accelerator_does_not_fuse_ops_its_postprocessor_cannot_absorb(lib):
    model = encoder_block(seq=16, hidden=64, heads=4, ffn=128)
    d = _by_name(assign(analyse(import_onnx(model), CFG), lib, Thresholds(th1=3.0)))
    # bias Add after a MatMul: no processor passes th1 = 3 alone, the accelerator cannot absorb
    # a tensor Add, so it is not fused there
    assert d["q"].processor in ("accel", "host")
    assert not (d["q_bias"].processor == "accel" and d["q_bias"].rule == "fused")


def test_tiling_scalar_work_is_reported_and_folded_at_compile_time(cnn_ops):
    conv = next(op for op in cnn_ops if op.name == "conv0")
    assert conv.tiling.loop_counts == 3
    assert conv.tiling.address_exprs >= 3
    assert conv.tiling.table_entries > 0
    assert conv.tiling.runtime_exprs == 0
    relu = next(op for op in cnn_ops if op.name == "relu0")
    assert relu.tiling is None


def test_scalar_ops_prefer_the_host_and_pay_a_control_round_trip_on_the_accelerator(lib):
    n = helper.make_tensor_value_info("n", TensorProto.INT64, [2])
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 6])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [24])
    one = helper.make_tensor("one", TensorProto.INT64, [1], [1])
    graph = helper.make_graph(
        [helper.make_node("ReduceProd", ["n"], ["count"], name="count", keepdims=1),
         helper.make_node("Mul", ["count", "one"], ["count1"], name="scale"),
         helper.make_node("Reshape", ["x", "count1"], ["y"], name="flat")],
        "g", [x, n], [y], [one])
    g = import_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]))
    ops = {op.name: op for op in analyse(g, CFG)}
    assert ops["scale"].category == "scalar"
    d = _by_name(assign(list(ops.values()), lib))
    ev = d["scale"].evaluations["accel"]
    assert d["scale"].processor == "host"
    assert ev.t >= lib.control_roundtrip_us or not ev.supported


def test_explain_rows_carry_c_and_p_per_processor_and_a_reason(lib):
    rows = explain(import_onnx(small_cnn()), CFG, lib)
    assert len(rows) == 12
    conv = rows[0]
    assert conv["c_accel_us"] > 0 and conv["p_accel"] > 0 and conv["c_host_us"] > 0
    assert "th1" in conv["reason"] and conv["decision"] == "accel"
    assert json.loads(json.dumps(rows)) == rows


def test_analyse_refuses_symbolic_input_shapes():
    g = import_onnx(encoder_block(seq=None, hidden=64, heads=4, ffn=128))
    with pytest.raises(ModelError, match=r"'x' has symbolic shape.*--input-shape x="):
        analyse(g, CFG)


def test_thresholds_and_library_validate_their_fields():
    with pytest.raises(ValueError, match="Thresholds.th1 must be a number"):
        Thresholds(th1=float("nan"))
    with pytest.raises(ValueError, match="FunctionLibrary.link_bytes_per_s must be > 0"):
        FunctionLibrary(host=FIXED_TIMINGS, link_bytes_per_s=0)


def test_host_timings_are_measured_once_and_cached(tmp_path):
    path = tmp_path / "timings.json"
    first = load_host_timings(path)
    assert path.is_file()
    data = json.loads(path.read_text())
    assert data["ns_per_mac"] > 0 and set(data["ns_per_element"]) >= {"elementwise", "layout"}
    path.write_text(json.dumps({**data, "ns_per_mac": 123.0}))
    assert load_host_timings(path).ns_per_mac == 123.0          # read back, not re-measured
    assert first.ns_per_mac == data["ns_per_mac"]
    path.write_text(json.dumps({"bogus": 1}))
    with pytest.raises(ValueError, match="not a host timings file"):
        load_host_timings(path)
    assert np.isfinite(first.op_overhead_ns)
