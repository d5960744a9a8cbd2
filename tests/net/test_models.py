"""planner.net.models' test networks: what they build."""

import onnx
import pytest

from planner.net.models import conv_chain, inverted_residual_net

BLOCKS = [(16, 1, 1), (24, 6, 2, 5), (32, 6, 2, 7), (40, 6, 2)]


def _convs(model):
    return {n.name: {a.name: list(a.ints) for a in n.attribute if a.name in ("pads", "strides")}
            for n in model.graph.node if n.op_type == "Conv"}


def test_inverted_residual_net_tf_same_pads_stride_2_on_even_sides_like_keras():
    """``tf_same``: TF/Keras "SAME" padding, ``(total // 2, total - total // 2)`` a side with
    ``total = max((ceil(n / s) - 1) s + k - n, 0)``: a stride-2 layer on an even side one less
    before than after, on an odd side (the 64 x 44 input's 11 columns at the third block)
    symmetric; stride 1 symmetric."""
    convs = _convs(inverted_residual_net(height=64, width=44, blocks=BLOCKS, tf_same=True))
    onnx.checker.check_model(inverted_residual_net(height=64, width=44, blocks=BLOCKS,
                                                   tf_same=True))
    assert convs["stem"]["pads"] == [0, 0, 1, 1]            # 64 x 44 -> 32 x 22
    assert convs["b0_dw"]["pads"] == [1, 1, 1, 1]           # stride 1
    assert convs["b1_dw"]["pads"] == [1, 1, 2, 2]           # 32 x 22, 5x5 -> 16 x 11
    assert convs["b2_dw"]["pads"] == [2, 3, 3, 3]           # 16 x 11, 7x7: odd width
    assert convs["b3_dw"]["pads"] == [0, 0, 1, 1]           # 8 x 6, 3x3
    assert all(c["pads"] == [0] * 4 for name, c in convs.items() if "_dw" not in name
               and name != "stem")


def test_inverted_residual_net_default_pads_are_symmetric():
    convs = _convs(inverted_residual_net(height=64, width=44, blocks=BLOCKS))
    assert [convs[f"b{i}_dw"]["pads"] for i in range(4)] == [[1] * 4, [2] * 4, [3] * 4, [1] * 4]
    assert convs["stem"]["pads"] == [1] * 4


def test_conv_chain_builds_each_layer_as_given():
    """conv_chain: each layer's kernel, stride, groups and pads; a ReLU unless asked off; the
    residual Add of the layer's input; a valid model whose maps shrink as the pads say."""
    model = conv_chain(height=12, width=9, classes=5, layers=(
        (8, 3, 1, 1), (8, 3, 1, 4, (1, 1, 1, 1), False, True), (6, 5, 2, 2, (2, 0, 1, 2), True,
                                                                 False)))
    onnx.checker.check_model(model, full_check=True)
    convs = {n.name: {a.name: (list(a.ints) if a.ints else a.i) for a in n.attribute}
             for n in model.graph.node if n.op_type == "Conv"}
    assert convs["c1"]["group"] == 4 and convs["c2"]["group"] == 2
    assert convs["c2"]["pads"] == [2, 0, 1, 2] and convs["c2"]["strides"] == [2, 2]
    ops = [n.op_type for n in model.graph.node]
    assert ops == ["Conv", "Relu", "Conv", "Add", "Conv", "Relu", "GlobalAveragePool",
                   "Flatten", "Gemm"]


@pytest.mark.parametrize("layers, match", [
    (((8, 3, 1, 2),), "groups=2 must divide the input channels 3"),
    (((8, 3, 1, 1, (1, 1, 3, 1), True, False),), r"pads=\(1, 1, 3, 1\) must be four ints"),
    (((8, 9, 1, 1, (0, 0, 0, 0), True, False),), "does not fit the padded 6 x 6 map"),
    (((3, 3, 2, 1, (1, 1, 1, 1), True, True),), "residual needs the output shape"),
    (((8, 3, 1),), "must be \\(out, kernel, stride, groups\\)"),
])
def test_conv_chain_refuses_a_layer_it_cannot_build(layers, match):
    with pytest.raises(ValueError, match=match):
        conv_chain(height=6, width=6, layers=layers)


def test_conv_chain_takes_a_batch_of_images():
    """``batch`` images in one input, ``batch`` rows of logits out; a batch outside 1-64 is
    refused by name."""
    model = conv_chain(height=7, width=5, classes=3, layers=((4, 3, 1, 1),), batch=3)
    onnx.checker.check_model(model, full_check=True)
    dims = [[d.dim_value for d in t.type.tensor_type.shape.dim]
            for t in (model.graph.input[0], model.graph.output[0])]
    assert dims == [[3, 3, 7, 5], [3, 3]]
    for bad in (0, 65, 2.0):
        with pytest.raises(ValueError, match=r"batch must be an int in \[1, 64\]"):
            conv_chain(height=7, width=5, layers=((4, 3, 1, 1),), batch=bad)
