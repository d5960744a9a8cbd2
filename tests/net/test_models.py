"""planner.net.models' test networks: what they build."""

import onnx

from planner.net.models import inverted_residual_net

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
