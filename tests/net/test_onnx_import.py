"""ONNX import: folding of weight subgraphs, opset upgrade, symbolic dims, clear errors."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper, version_converter

from planner.net.graph import ModelError
from planner.net.models import encoder_block
from planner.net.onnx_import import (_convert_version, _infer, _without_large_data,
                                     import_onnx, load_model, parse_input_shapes)

from .conftest import LIGHT


def _tiny(nodes, inputs, outputs, inits=(), opset=13, domains=()):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)] + [
        helper.make_opsetid(d, 1) for d in domains])


def test_import_light_resnet50_folds_constant_of_shape_weights():
    g = import_onnx(LIGHT / "light_resnet50.onnx")
    assert g.opset >= 11                                   # upgraded from opset 9
    counts = g.op_counts()
    assert "ConstantOfShape" not in counts
    assert counts["Conv"] == 53 and counts["Gemm"] == 1
    conv = next(n for n in g.nodes if n.op_type == "Conv")
    w = g.const(conv.inputs[1])
    assert w is not None and w.shape == (64, 3, 7, 7)
    assert g.inputs == ["gpu_0/data_0"]                    # initialisers are not inputs
    assert g.tensors[g.outputs[0]].shape == (1, 1000)
    assert all(g.tensors[o].is_static for n in g.nodes for o in n.outputs)


def test_import_resolves_symbolic_dims_for_given_input_shapes():
    model = encoder_block(seq=None, hidden=64, heads=4, ffn=128)
    g = import_onnx(model, {"x": (1, 16, 64)})
    assert g.symbols == {"seq": 16}
    assert g.tensors["scores"].shape == (1, 4, 16, 16)
    assert g.tensors["y"].shape == (1, 16, 64)
    symbolic = import_onnx(model)
    assert symbolic.tensors["scores"].shape == (1, 4, "seq", "seq")


def test_import_rejects_a_given_shape_that_contradicts_the_model():
    model = encoder_block(seq=None, hidden=64, heads=4, ffn=128)
    with pytest.raises(ModelError, match=r"'x' dim 2 is fixed at 64"):
        import_onnx(model, {"x": (1, 16, 32)})
    with pytest.raises(ModelError, match=r"'x' has rank 3"):
        import_onnx(model, {"x": (16, 64)})
    with pytest.raises(ModelError, match=r"'nope', which is not a graph input"):
        import_onnx(model, {"nope": (1,)})


def test_import_names_the_node_with_an_undefined_input():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    model = _tiny([helper.make_node("Add", ["x", "ghost"], ["y"], name="adder")], [x], [y])
    with pytest.raises(ModelError, match=r"Add node 'adder': input 1 'ghost'"):
        load_model(model)


def test_import_names_a_node_in_a_cycle():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    z = helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 4])
    model = _tiny([helper.make_node("Add", ["x", "b"], ["a"], name="first"),
                   helper.make_node("Relu", ["a"], ["b"], name="second"),
                   helper.make_node("Relu", ["a"], ["z"], name="out")], [x], [z])
    with pytest.raises(ModelError, match="cycle"):
        load_model(model)


def test_import_refuses_garbage_bytes_and_missing_files(tmp_path):
    with pytest.raises(ModelError, match="not an ONNX model|no graph nodes"):
        import_onnx(b"\x08\x07garbage\xff\xff")
    with pytest.raises(ModelError, match="does not exist"):
        import_onnx(tmp_path / "missing.onnx")


def test_import_lifts_old_opsets_and_names_the_node_it_cannot_lift():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    lifted = load_model(_tiny([helper.make_node("Relu", ["x"], ["y"])], [x], [y], opset=5))
    assert [(o.domain, o.version) for o in lifted.opset_import if o.domain in ("", "ai.onnx")] \
        == [("", 13)]
    x4 = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])
    y4 = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 4, 4])
    old = _tiny([helper.make_node("ImageScaler", ["x"], ["y"], name="scaler", scale=2.0)],
                [x4], [y4], opset=6)
    with pytest.raises(ModelError, match=r"opset 6 is older than 7 .* cannot lift it to 13 "
                                         r"at node 'scaler' \(ImageScaler\)"):
        load_model(old)


def test_import_refuses_bad_attributes():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    bad = _tiny([helper.make_node("Softmax", ["x"], ["y"], name="sm", axis=7)], [x], [y])
    with pytest.raises(ModelError, match="sm|axis"):
        load_model(bad)


def test_import_keeps_unknown_ops_as_nodes():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    z = helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 4])
    model = _tiny([helper.make_node("Fancy", ["x"], ["y"], name="fancy", domain="com.example"),
                   helper.make_node("Relu", ["y"], ["z"], name="relu")], [x], [z],
                  domains=["com.example"])
    g = import_onnx(model)
    assert [(n.op_type, n.domain) for n in g.nodes] == [("Fancy", "com.example"), ("Relu", "")]


def test_import_folds_shape_arithmetic_of_static_tensors():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [24])
    model = _tiny([helper.make_node("Shape", ["x"], ["s"]),
                   helper.make_node("ReduceProd", ["s"], ["n"], keepdims=1),
                   helper.make_node("Reshape", ["x", "n"], ["y"], name="flat")], [x], [y])
    g = import_onnx(model)
    assert [n.op_type for n in g.nodes] == ["Reshape"]
    assert np.array_equal(g.const(g.nodes[0].inputs[1]), [24])
    assert g.tensors["y"].shape == (24,)


def test_parse_input_shapes_names_the_bad_spec():
    assert parse_input_shapes(["a=1,3,8,8", "b:c=2"]) == {"a": (1, 3, 8, 8), "b:c": (2,)}
    for bad in ("a", "a=", "a=1,x", "=1", "a=0,2"):
        with pytest.raises(ValueError, match="NAME=D0,D1"):
            parse_input_shapes([bad])


def test_a_graph_output_without_a_shape_is_named():
    """onnx.checker refuses a graph output whose type has no shape, without naming it; the
    error names it (onnxruntime runs such a model, so users meet this)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(ModelError, match=r"onnx.checker: .*shape.* \(graph output 'y' without "
                                         r"a shape: give each one, symbolic dimensions "
                                         r"allowed\)"):
        load_model(model)


def test_deep_conv_model_checks_its_arguments():
    """planner.net.models.deep_conv: a valid model (the onnx checker passes), and its
    arguments named when they are out of range."""
    from planner.net.models import deep_conv

    model = deep_conv(130, groups=2, batch=2, stride=2)
    dims = [d.dim_value for d in model.graph.output[0].type.tensor_type.shape.dim]
    assert dims == [2, 16, 4, 4]
    with pytest.raises(ValueError, match="mid=130 must be a multiple of groups=3"):
        deep_conv(130, groups=3)
    with pytest.raises(ValueError, match=r"stride must be an int in \[1, 8\], not 0"):
        deep_conv(130, stride=0)


def test_inverted_residual_net_takes_a_kernel_per_block():
    """planner.net.models.inverted_residual_net: a block may give its depthwise kernel (3, 5
    or 7, pad kernel // 2); a bad block or kernel is named."""
    from planner.net.models import inverted_residual_net

    model = load_model(inverted_residual_net(blocks=((16, 1, 1, 5), (24, 6, 2, 7), (24, 6, 1))))
    kernels = {n.name: [list(a.ints) for a in n.attribute if a.name in ("kernel_shape", "pads")]
               for n in model.graph.node if n.name.endswith("_dw")}
    assert kernels == {"b0_dw": [[5, 5], [2, 2, 2, 2]], "b1_dw": [[7, 7], [3, 3, 3, 3]],
                       "b2_dw": [[3, 3], [1, 1, 1, 1]]}
    with pytest.raises(ValueError, match=r"blocks\[0\] kernel=4 must be 3, 5 or 7"):
        inverted_residual_net(blocks=((16, 1, 1, 4),))
    with pytest.raises(ValueError, match=r"blocks\[1\]=\(24, 6\) must be \(out, expansion, "
                                         r"stride\) or \(out, expansion, stride, kernel\)"):
        inverted_residual_net(blocks=((16, 1, 1), (24, 6)))


def test_a_conv_behind_a_custom_op_names_where_shape_inference_stopped():
    """A quantised Conv whose input comes from an op of another domain (onnxruntime's
    com.microsoft QLinear* ops, say) has no static shape; lowering names that op instead of
    asking for input shapes, which would not help."""
    from planner.net.lower import lower

    rng = np.random.default_rng(0)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 6, 6])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", "c", "h", "w"])
    inits = [helper.make_tensor("s", TensorProto.FLOAT, [], [0.05]),
             helper.make_tensor("z", TensorProto.INT8, [], [0]),
             helper.make_tensor("wq", TensorProto.INT8, [8, 4, 3, 3],
                                rng.integers(-50, 50, 8 * 4 * 9).tolist())]
    nodes = [helper.make_node("Fancy", ["x"], ["f"], name="fancy", domain="com.example"),
             helper.make_node("QuantizeLinear", ["f", "s", "z"], ["fq"], name="q0"),
             helper.make_node("DequantizeLinear", ["fq", "s", "z"], ["fd"], name="dq0"),
             helper.make_node("DequantizeLinear", ["wq", "s", "z"], ["wd"], name="dqw"),
             helper.make_node("Conv", ["fd", "wd"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("QuantizeLinear", ["c", "s", "z"], ["cq"], name="q1"),
             helper.make_node("DequantizeLinear", ["cq", "s", "z"], ["y"], name="dq1")]
    g = import_onnx(_tiny(nodes, [x], [y], inits, domains=["com.example"]))
    assert lower(g).unmatched["conv"] == (
        "tensor 'fq' has no static shape: shape inference stops at Fancy node 'fancy', an op "
        "of domain 'com.example' whose output shapes it does not know")


def test_shape_inference_without_the_weights_data_infers_the_same():
    """``_infer`` moves large float initializers' data out of the model while ONNX infers (their
    dims are what it reads): the same value_info as inference on the whole model, a shape
    tensor's values still propagated, and every initializer's data back in both models, also
    when inference fails."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.normal(size=(2048, 64)).astype(np.float32), "w")
    shape = numpy_helper.from_array(np.array([8, 8], np.int64), "shape")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm"),
             helper.make_node("Reshape", ["y", "shape"], ["z"], name="r")]
    model = _tiny(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2048])],
                  [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)], [w, shape])
    before = model.SerializeToString()
    out = _infer(model)
    assert model.SerializeToString() == before
    whole = onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True,
                                              data_prop=True)
    assert out.SerializeToString() == whole.SerializeToString()
    (z,) = [o for o in out.graph.output if o.name == "z"]
    assert [d.dim_value for d in z.type.tensor_type.shape.dim] == [8, 8]
    bad = _tiny([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")],
                [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3])],
                [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w])
    before = bad.SerializeToString()
    with pytest.raises(ModelError, match="shape inference failed"):
        _infer(bad)
    assert bad.SerializeToString() == before


def test_opset_upgrade_without_the_weights_data_converts_the_same():
    """The version converter (opset 9 -> 13) runs without the large weights' data too: the same
    model as a conversion with it, the input model unchanged; and a transform that changes a
    tensor whose data was set aside gets ``None`` (the caller then runs it with the data)."""
    rng = np.random.default_rng(1)
    w = numpy_helper.from_array(rng.normal(size=(8, 3, 16, 16)).astype(np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"], name="c"),
             helper.make_node("Upsample", ["y", "scales"], ["z"], name="u", mode="nearest")]
    scales = numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")
    model = _tiny(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 20, 20])],
                  [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)], [w, scales],
                  opset=9)
    before = model.SerializeToString()
    out = _convert_version(model, 13)
    assert model.SerializeToString() == before
    aside = _without_large_data(model, lambda m: version_converter.convert_version(m, 13))
    assert aside is not None and aside.SerializeToString() == out.SerializeToString()
    whole = version_converter.convert_version(model, 13)
    assert out.SerializeToString() == whole.SerializeToString()
    assert out.opset_import[0].version == 13 and {n.op_type for n in out.graph.node} >= \
        {"Conv", "Resize"}

    def rescale(m):                 # changes the set-aside tensor: needs its data
        m = onnx.ModelProto.FromString(m.SerializeToString())
        m.graph.initializer[0].dims[0] = 4
        return m

    assert _without_large_data(model, rescale) is None
    assert model.SerializeToString() == before
