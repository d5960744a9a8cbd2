"""Seed 004 assignment on lowered networks: thresholds, costs and the fuse-with-previous rule
change decisions, and the compiler takes the decisions ``tessera explain`` prints."""

import dataclasses
import json
import re

import numpy as np
import pytest
from onnx import TensorProto, helper

from flow.compile import compile_network
from planner.net.assign import (SEED_EXAMPLE, FunctionLibrary, Thresholds, analyse, assign,
                                decide, explain, host_timings_path, load_host_timings)
from planner.net.graph import ModelError
from planner.net.lower import fold_batchnorm, lower, quantize_qdq
from planner.net.models import encoder_block, small_cnn
from planner.net.onnx_import import import_onnx, load_model
from spec.config import PRESETS

from .conftest import FIXED_TIMINGS

CFG = PRESETS["default"]


def _lowered(model):
    return lower(import_onnx(quantize_qdq(fold_batchnorm(load_model(model)), samples=2, seed=1)))


@pytest.fixture(scope="module")
def cnn():
    return _lowered(small_cnn(height=64, width=64))


@pytest.fixture(scope="module")
def cnn_ops(cnn):
    return analyse(cnn, CFG)


def _by_name(decisions):
    return {d.op.name: d for d in decisions}


def test_one_op_per_layer_and_host_op_with_the_lowering_fusions_inside(cnn, cnn_ops):
    assert [op.name for op in cnn_ops] == [s.name for s in cnn.steps]
    conv0 = next(op for op in cnn_ops if op.name == "conv0")
    assert (conv0.op_class, conv0.category, conv0.refusal) == ("conv", "tensor", None)
    assert conv0.accel_cycles > 0 and conv0.macs == 64 * 64 * 16 * 3 * 9
    assert not any(op.op_type == "Relu" for op in cnn_ops)    # fused into the conv layers
    gap = next(op for op in cnn_ops if op.name == "gap")
    assert gap.accel_cycles is None and "no standalone GlobalAveragePool" in gap.refusal


def test_default_thresholds_put_every_supported_layer_on_the_accelerator(cnn_ops, lib):
    fast_host = dataclasses.replace(lib, host=dataclasses.replace(
        FIXED_TIMINGS, ns_per_mac=1e-9, op_overhead_ns=0.0))
    for library in (lib, fast_host):
        for d in assign(cnn_ops, library):
            assert d.rule == "threshold"
            want = "accel" if d.op.accel_cycles is not None else "host"
            assert d.processor == want, (d.op.name, d.reason)
    d = _by_name(assign(cnn_ops, lib))
    assert "(no limit)" in d["conv0"].reason
    # the cause leads: the accelerator cannot run it, then the host's passing evaluation
    assert d["gap"].reason.startswith(
        "the accelerator cannot run it (the accelerator runs no standalone GlobalAveragePool: it "
        "has no pooling unit); on the host p=")



def test_host_ops_say_what_the_accelerator_lacks():
    """An op the accelerator has no unit for says which (an element-wise Add, Softmax, a
    layout op), not only that it runs no standalone op of its type."""
    ops = {op.op_type: op for op in analyse(_lowered(encoder_block(seq=8, hidden=32, heads=2,
                                                                   ffn=64)), CFG)}
    assert ops["Add"].refusal == ("the accelerator runs no standalone Add: it has no "
                                  "element-wise unit (a layer's bias is added in its "
                                  "post-processing)")
    assert ops["Softmax"].refusal.endswith("no unit for transcendental functions or "
                                           "reductions")
    assert ops["Transpose"].refusal.endswith(": a layout op: the host moves the bytes")

def test_no_passing_processor_and_no_fusion_falls_back_to_minimum_cost(cnn_ops, lib):
    d = _by_name(assign(cnn_ops, lib, Thresholds(th1=1e9, th2=0.0)))
    for dec in d.values():
        assert dec.rule == "min-cost"
        supported = [e for e in dec.evaluations.values() if e.supported]
        assert dec.evaluations[dec.processor].c == min(e.c for e in supported)


def test_costs_change_decisions_slow_link_keeps_the_network_on_the_host(cnn_ops, lib):
    slow = dataclasses.replace(lib, link_bytes_per_s=1e3)     # 1 kB/s host <-> device
    d = _by_name(assign(cnn_ops, slow, Thresholds(th1=1.5, th2=10_000.0)))
    conv0 = d["conv0"]
    assert conv0.evaluations["accel"].t > 10_000.0            # input crosses the link
    assert conv0.processor == "host"
    assert d["conv1"].processor == "host"


def test_relu_after_a_host_add_fuses_with_it_on_the_host(lib):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 16, 16])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 16, 16])
    graph = helper.make_graph([helper.make_node("Add", ["x", "x"], ["s"], name="residual"),
                               helper.make_node("Relu", ["s"], ["y"], name="relu")], "g", [x], [y])
    ops = analyse(import_onnx(helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 13)])), CFG)
    d = _by_name(assign(ops, lib, SEED_EXAMPLE))
    assert (d["residual"].processor, d["residual"].rule) == ("host", "threshold")
    assert (d["relu"].processor, d["relu"].rule, d["relu"].fused_with) == \
        ("host", "fused", "residual")
    # a benefit threshold the fused pair misses too: minimum cost
    d = _by_name(assign(ops, lib, Thresholds(th1=1.6)))
    assert d["relu"].rule == "min-cost"


def test_faster_host_matmul_moves_the_small_fc_to_the_host(cnn_ops, lib):
    fast = dataclasses.replace(lib, host=dataclasses.replace(FIXED_TIMINGS, ns_per_mac=1e-6,
                                                             op_overhead_ns=0.0))
    base, quick = _by_name(assign(cnn_ops, lib, SEED_EXAMPLE)), \
        _by_name(assign(cnn_ops, fast, SEED_EXAMPLE))
    assert base["fc"].processor == "accel"
    assert quick["fc"].evaluations["accel"].p < SEED_EXAMPLE.th1
    assert quick["fc"].processor == "host"


@pytest.mark.parametrize("th", [Thresholds(), SEED_EXAMPLE, Thresholds(th1=3.0),
                                Thresholds(th1=1e9, th2=0.0)], ids=str)
def test_ops_the_accelerator_cannot_run_always_go_to_the_host(lib, th):
    """The lowering fused into each layer what the post-processor applies; nothing else is
    fused onto the accelerator, whatever the thresholds (a transformer block's bias Adds,
    Softmax and LayerNorm included)."""
    for d in assign(analyse(_lowered(encoder_block(seq=16, hidden=64, heads=4, ffn=128)), CFG),
                    lib, th):
        if d.op.accel_cycles is None:
            assert d.processor == "host", (d.op.name, d.rule, d.reason)


def test_the_compiler_runs_on_the_host_what_seed_004_puts_there(cnn, lib):
    # a host 5x faster per MAC: the convolutions' speed-up on small's 8x8 falls under th1, the
    # tiny fc's (dominated by the host's per-op overhead) does not
    fast = dataclasses.replace(lib, host=dataclasses.replace(FIXED_TIMINGS, ns_per_mac=0.01))
    small = PRESETS["small"]
    decisions = _by_name(decide(cnn, small, fast, SEED_EXAMPLE))
    on_host = {n for n, d in decisions.items() if d.processor == "host"}
    net = compile_network(cnn, small, lib=fast, th=SEED_EXAMPLE)
    host_layers = net.summary()["host_layers"]
    assert set(host_layers) == on_host & {l.name for l in cnn.layers} == \
        {"conv0", "conv1", "conv2", "conv3"}
    assert [s.layer_names for s in net.steps if s.kind == "segment"] == [["fc"]]
    assert all(host_layers[n] == decisions[n].reason for n in host_layers)
    rows = {r["op"]: r["decision"] for r in explain(cnn, small, fast, SEED_EXAMPLE)}
    assert rows == {n: d.processor for n, d in decisions.items()}
    # default thresholds: every layer on the accelerator, whatever the host's speed
    assert compile_network(cnn, small, lib=fast).summary()["host_layers"] == {}


def test_tiling_scalar_work_is_reported_and_folded_at_compile_time(cnn_ops):
    conv = next(op for op in cnn_ops if op.name == "conv0")
    assert conv.tiling.loop_counts == 3
    assert conv.tiling.address_exprs >= 3
    assert conv.tiling.table_entries > 0
    assert conv.tiling.runtime_exprs == 0
    gap = next(op for op in cnn_ops if op.name == "gap")
    assert gap.tiling is None



def test_host_work_of_k_parts_and_attention_gemms_is_in_the_accelerator_cost(cnn_ops, lib):
    """A layer in K parts leaves the host its int32 partial sums to read back, add and
    requantise; an activation x activation GEMM its int32 output to correct for the zero
    points and requantise. Seed 004's accelerator cost includes that work (a = cycles at the
    clock + host passes at the quant rate, t + the read-back); a layer the accelerator
    finishes has none."""
    from planner.net.models import deep_conv

    small = PRESETS["small"]
    ops = {op.name: op for op in analyse(_lowered(deep_conv(512)), small)}
    wide, deep = ops["wide"], ops["deep"]               # 4 -> 512 -> 8 channels, 3x3, 8 x 8
    outputs = 8 * 8 * 8
    assert (wide.host_elements, wide.host_readback_bytes) == (0, 0)
    assert (deep.host_elements, deep.host_readback_bytes) == (3 * outputs, 2 * 4 * outputs)
    quant_ns = lib.host.ns_per_element["quant"]
    assert lib.exec_us(deep, "accel") == pytest.approx(
        deep.accel_cycles / lib.accel_clock_hz * 1e6 + 3 * outputs * quant_ns / 1e3)
    ev = {d.op.name: d for d in assign([wide, deep], lib)}["deep"].evaluations["accel"]
    assert ev.t == pytest.approx(lib.transfer_us(2 * 4 * outputs))   # its input is on chip
    ops = analyse(_lowered(encoder_block(seq=8, hidden=64, heads=4, ffn=128)), small)
    scores = next(op for op in ops if op.name == "scores")
    assert (scores.host_elements, scores.host_readback_bytes) == (2 * scores.elements,
                                                                   4 * scores.elements)
    assert all(op.host_elements == 0 for op in cnn_ops)

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
    assert (d["scale"].processor, d["scale"].rule) == ("host", "threshold")
    # were the accelerator able to run it, it would pay the control round trip there
    runnable = dataclasses.replace(ops["scale"], accel_cycles=1, refusal=None)
    ev = assign([runnable], lib)[0].evaluations["accel"]
    assert ev.supported and ev.t >= lib.control_roundtrip_us


def test_explain_rows_carry_c_and_p_per_processor_and_a_reason(cnn, lib):
    rows = explain(cnn, CFG, lib)
    assert [r["op"] for r in rows] == [s.name for s in cnn.steps]
    conv = next(r for r in rows if r["op"] == "conv0")
    assert conv["c_accel_us"] > 0 and conv["p_accel"] > 0 and conv["c_host_us"] > 0
    assert "th1" in conv["reason"] and conv["decision"] == "accel"
    gap = next(r for r in rows if r["op"] == "gap")
    assert gap["c_accel_us"] is None and gap["decision"] == "host"
    assert json.loads(json.dumps(rows)) == rows


def test_analyse_refuses_symbolic_input_shapes():
    g = import_onnx(encoder_block(seq=None, hidden=64, heads=4, ffn=128))
    with pytest.raises(ModelError, match=r"'x' has symbolic shape.*--input-shape x="):
        analyse(g, CFG)


def test_thresholds_and_library_validate_their_fields():
    with pytest.raises(ValueError, match="Thresholds.th1 must be a number >= 0"):
        Thresholds(th1=float("nan"))
    with pytest.raises(ValueError, match="Thresholds.th2 must be a number >= 0 .*not -5"):
        Thresholds(th2=-5)
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


@pytest.mark.parametrize("text, message", [
    ("{not json", r"not a host timings file \(Expecting property name"),
    ("[1, 2]", r"not a host timings file \(a JSON list, not an object\)"),
    ('{"ns_per_mac": "abc", "ns_per_element": {}, "op_overhead_ns": 1}',
     r"HostTimings.ns_per_mac must be a finite number of ns >= 0, not 'abc'"),
    ('{"ns_per_mac": 1, "ns_per_element": null, "op_overhead_ns": 1}',
     r"HostTimings.ns_per_element must be an object"),
    ('{"ns_per_mac": 1, "ns_per_element": {"pool": -1}, "op_overhead_ns": 1}',
     r"HostTimings.ns_per_element\['pool'\] must be a finite number of ns >= 0, not -1"),
    ('{"ns_per_mac": 1, "ns_per_element": {}, "op_overhead_ns": true}',
     r"HostTimings.op_overhead_ns must be .*, not True"),
], ids=["json", "list", "string", "null", "negative", "bool"])
def test_a_bad_host_timings_file_is_refused_naming_file_and_field(tmp_path, text, message):
    path = tmp_path / "timings.json"
    path.write_text(text)
    with pytest.raises(ValueError, match=f"{re.escape(str(path))}: .*{message}.*; "
                                         f"--host-timings takes a file tessera wrote"):
        load_host_timings(path)             # (not "delete it": it may be the user's own file)
    assert path.read_text() == text                 # not measured over


def test_host_timings_are_not_written_where_no_directory_is(tmp_path):
    """An explicit path's directory is not created (the default cache's is)."""
    with pytest.raises(ValueError, match="no directory .* to write the measured host timings"):
        load_host_timings(tmp_path / "missing" / "timings.json")
    assert not (tmp_path / "missing").exists()
    with pytest.raises(ValueError, match="the host timings file is a directory"):
        load_host_timings(tmp_path)


def test_the_default_host_timings_live_in_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert host_timings_path() == tmp_path / "cache" / "tessera" / "host_timings.json"
    assert host_timings_path(tmp_path / "t.json") == tmp_path / "t.json"
    load_host_timings()
    assert host_timings_path().is_file()
