"""Float ONNX models built with ``onnx.helper`` for tests and demos: a small 5-layer CNN, a
BERT-base-shaped transformer encoder block, a ResNet bottleneck block, a ReLU MLP (the last
two have fusible producer/consumer pairs, docs/fusion.md) and a MobileNet-V2-style network of
inverted residual blocks (depthwise convolutions), and a two-convolution net whose second layer
has as many taps as asked (K parts, docs/networks.md), and a chain of convolutions of any
kernel, stride, grouping and padding (the random networks of the tests). Weights are seeded
random values.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["small_cnn", "encoder_block", "bottleneck", "mlp", "inverted_residual_net",
           "deep_conv", "conv_chain", "BERT_BASE", "MOBILENET_BLOCKS"]

#: BERT-base encoder dimensions.
BERT_BASE = {"hidden": 768, "heads": 12, "ffn": 3072}

OPSET = 17  # LayerNormalization exists from opset 17


def _check(name: str, value, lo: int, hi: int) -> None:
    if type(value) is not int or not lo <= value <= hi:
        raise ValueError(f"{name} must be an int in [{lo}, {hi}], not {value!r}")


def _make(nodes, inputs, outputs, inits, name):
    import onnx
    from onnx import helper

    graph = helper.make_graph(nodes, name, inputs, outputs,
                              [onnx.numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="tessera.planner.net.models")
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def _image_model(height: int, width: int, classes: int, seed: int, *, min_side: int):
    """Check an image classifier's sizes; its seeded generator, initialisers and nodes."""
    _check("height", height, min_side, 4096)
    _check("width", width, min_side, 4096)
    _check("classes", classes, 1, 100000)
    return np.random.default_rng(seed), {}, []


def _classifier(nodes, inits, rng, x: str, channels: int, classes: int, hw, name: str, *,
                batch: int = 1):
    """Global average pooling, flatten and a Gemm head with ``classes`` outputs after ``x``
    (``channels`` deep), on input ``x`` of ``batch x 3 x hw``: the model."""
    from onnx import TensorProto, helper

    nodes.append(helper.make_node("GlobalAveragePool", [x], ["gap"], name="gap"))
    nodes.append(helper.make_node("Flatten", ["gap"], ["flat"], name="flatten", axis=1))
    inits["fc_w"] = rng.normal(0, math.sqrt(1 / channels), (classes, channels)).astype(
        np.float32)
    inits["fc_b"] = rng.normal(0, 0.05, classes).astype(np.float32)
    nodes.append(helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["logits"], name="fc",
                                  transB=1))
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, *hw])]
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, classes])]
    return _make(nodes, inputs, outputs, inits, name)


def small_cnn(*, height: int = 32, width: int = 32, classes: int = 10, batchnorm: bool = True,
              seed: int = 0):
    """A 5-layer CNN on ``1 x 3 x height x width``: four 3x3 convs (16, 32, 32, 64 channels;
    pad 1; strides 1, 2, 1, 2) with ReLU — the third followed by BatchNormalization when
    ``batchnorm`` — then global average pooling, flatten and a fully connected head (Gemm) with
    ``classes`` outputs. Input ``x``, output ``logits``."""
    from onnx import helper

    rng, inits, nodes = _image_model(height, width, classes, seed, min_side=4)
    chans = [3, 16, 32, 32, 64]
    strides = [1, 2, 1, 2]
    x = "x"
    for i, (cin, cout, s) in enumerate(zip(chans, chans[1:], strides)):
        w = rng.normal(0, math.sqrt(2 / (cin * 9)), (cout, cin, 3, 3)).astype(np.float32)
        inits[f"conv{i}_w"] = w
        inits[f"conv{i}_b"] = rng.normal(0, 0.05, cout).astype(np.float32)
        y = f"conv{i}"
        nodes.append(helper.make_node("Conv", [x, f"conv{i}_w", f"conv{i}_b"], [y], name=y,
                                      kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[s, s]))
        if batchnorm and i == 2:
            for p, v in (("scale", rng.uniform(0.8, 1.2, cout)), ("bias", rng.normal(0, .1, cout)),
                         ("mean", rng.normal(0, .1, cout)), ("var", rng.uniform(.5, 1.5, cout))):
                inits[f"bn{i}_{p}"] = v.astype(np.float32)
            nodes.append(helper.make_node(
                "BatchNormalization", [y] + [f"bn{i}_{p}" for p in ("scale", "bias", "mean",
                                                                     "var")],
                [f"bn{i}"], name=f"bn{i}", epsilon=1e-5))
            y = f"bn{i}"
        nodes.append(helper.make_node("Relu", [y], [f"relu{i}"], name=f"relu{i}"))
        x = f"relu{i}"
    return _classifier(nodes, inits, rng, x, chans[-1], classes, (height, width), "small_cnn")


def encoder_block(*, seq: int | None = 128, hidden: int = BERT_BASE["hidden"],
                  heads: int = BERT_BASE["heads"], ffn: int = BERT_BASE["ffn"], seed: int = 0):
    """One post-LayerNorm transformer encoder block (BERT-base shapes by default) on input
    ``x`` of shape ``1 x seq x hidden``, output ``y`` of the same shape.

    Q, K, V projections (MatMul + Add), per-head attention (``Q K^T / sqrt(d)``, Softmax,
    ``P V``), output projection, residual Add + LayerNormalization, FFN (MatMul, GELU as the
    exact erf form, MatMul) and a second residual Add + LayerNormalization. ``seq=None`` leaves
    the sequence length symbolic (``seq``), to be resolved by the importer's input shapes.
    """
    from onnx import TensorProto, helper

    if seq is not None:
        _check("seq", seq, 1, 1 << 16)
    _check("hidden", hidden, 1, 1 << 16)
    _check("heads", heads, 1, hidden)
    _check("ffn", ffn, 1, 1 << 18)
    if hidden % heads:
        raise ValueError(f"heads={heads} must divide hidden={hidden}")
    head_dim = hidden // heads
    rng = np.random.default_rng(seed)
    inits: dict[str, np.ndarray] = {}
    nodes = []

    def weight(name, fan_in, fan_out):
        inits[name + "_w"] = rng.normal(0, 1 / math.sqrt(fan_in), (fan_in, fan_out)).astype(
            np.float32)
        inits[name + "_b"] = rng.normal(0, 0.02, fan_out).astype(np.float32)

    def dense(name, x, fan_in, fan_out):
        weight(name, fan_in, fan_out)
        nodes.append(helper.make_node("MatMul", [x, name + "_w"], [name + "_mm"], name=name))
        nodes.append(helper.make_node("Add", [name + "_mm", name + "_b"], [name],
                                      name=name + "_bias"))
        return name

    def node(op, ins, out, **attrs):
        nodes.append(helper.make_node(op, ins, [out], name=out, **attrs))
        return out

    inits["heads_shape"] = np.array([0, 0, heads, head_dim], np.int64)
    inits["merge_shape"] = np.array([0, 0, hidden], np.int64)
    inits["inv_sqrt_d"] = np.array(1 / math.sqrt(head_dim), np.float32)
    inits["half"] = np.array(0.5, np.float32)
    inits["one"] = np.array(1.0, np.float32)
    inits["inv_sqrt2"] = np.array(1 / math.sqrt(2), np.float32)
    for ln in ("ln1", "ln2"):
        inits[ln + "_g"] = rng.uniform(0.9, 1.1, hidden).astype(np.float32)
        inits[ln + "_b"] = rng.normal(0, 0.02, hidden).astype(np.float32)

    split = {}
    for part in ("q", "k", "v"):
        p = dense(part, "x", hidden, hidden)
        r = node("Reshape", [p, "heads_shape"], part + "_heads")
        perm = [0, 2, 3, 1] if part == "k" else [0, 2, 1, 3]   # K transposed for Q K^T
        split[part] = node("Transpose", [r], part + "_t", perm=perm)
    scores = node("MatMul", [split["q"], split["k"]], "scores")
    scaled = node("Mul", [scores, "inv_sqrt_d"], "scores_scaled")
    probs = node("Softmax", [scaled], "probs", axis=-1)
    ctx = node("MatMul", [probs, split["v"]], "context")
    ctx = node("Transpose", [ctx], "context_t", perm=[0, 2, 1, 3])
    ctx = node("Reshape", [ctx, "merge_shape"], "context_merged")
    attn = dense("attn_out", ctx, hidden, hidden)
    res1 = node("Add", [attn, "x"], "residual1")
    ln1 = node("LayerNormalization", [res1, "ln1_g", "ln1_b"], "ln1", axis=-1, epsilon=1e-12)
    up = dense("ffn_up", ln1, hidden, ffn)
    # GELU(x) = 0.5 x (1 + erf(x / sqrt 2))
    e = node("Mul", [up, "inv_sqrt2"], "gelu_scaled")
    e = node("Erf", [e], "gelu_erf")
    e = node("Add", [e, "one"], "gelu_1p")
    e = node("Mul", [up, e], "gelu_x")
    gelu = node("Mul", [e, "half"], "gelu")
    down = dense("ffn_down", gelu, ffn, hidden)
    res2 = node("Add", [down, ln1], "residual2")
    node("LayerNormalization", [res2, "ln2_g", "ln2_b"], "y", axis=-1, epsilon=1e-12)
    dims = [1, "seq" if seq is None else seq, hidden]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, dims)]
    return _make(nodes, inputs, outputs, inits, "encoder_block")


def bottleneck(*, channels: int = 64, height: int = 14, width: int = 14, seed: int = 0):
    """A ResNet-50-style bottleneck on ``1 x channels x height x width``: 1x1 conv to
    ``channels/4``, ReLU, 3x3 conv (pad 1), ReLU, 1x1 conv back to ``channels``, the residual
    Add of the input, ReLU. Input ``x``, output ``y``. Its 3x3 -> 1x1 pair is fusible."""
    from onnx import TensorProto, helper

    _check("channels", channels, 4, 4096)
    _check("height", height, 1, 1024)
    _check("width", width, 1, 1024)
    rng = np.random.default_rng(seed)
    mid = channels // 4
    inits: dict[str, np.ndarray] = {}
    nodes = []
    x = "x"
    for i, (cin, cout, k) in enumerate([(channels, mid, 1), (mid, mid, 3), (mid, channels, 1)]):
        inits[f"c{i}_w"] = rng.normal(0, math.sqrt(2 / (cin * k * k)),
                                      (cout, cin, k, k)).astype(np.float32)
        inits[f"c{i}_b"] = rng.normal(0, 0.05, cout).astype(np.float32)
        pad = k // 2
        nodes.append(helper.make_node("Conv", [x, f"c{i}_w", f"c{i}_b"], [f"c{i}"], name=f"c{i}",
                                      kernel_shape=[k, k], pads=[pad] * 4))
        x = f"c{i}"
        if i < 2:
            nodes.append(helper.make_node("Relu", [x], [f"r{i}"], name=f"r{i}"))
            x = f"r{i}"
    nodes.append(helper.make_node("Add", [x, "x"], ["sum"], name="residual"))
    nodes.append(helper.make_node("Relu", ["sum"], ["y"], name="out"))
    shape = [1, channels, height, width]
    return _make(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                 [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)], inits,
                 "bottleneck")


def mlp(*, tokens: int = 16, features: tuple[int, ...] = (64, 256, 64), seed: int = 0):
    """``tokens x features[0]`` through fully connected layers (Gemm) with ReLU between them
    (none after the last): a transformer-FFN-shaped MLP whose layer pairs are fusible. Input ``x``, output
    ``y``."""
    from onnx import TensorProto, helper

    _check("tokens", tokens, 1, 65536)
    if len(features) < 2:
        raise ValueError(f"features must list at least 2 sizes, not {features!r}")
    for f in features:
        _check("features[i]", f, 1, 65536)
    rng = np.random.default_rng(seed)
    inits: dict[str, np.ndarray] = {}
    nodes = []
    x = "x"
    for i, (fin, fout) in enumerate(zip(features, features[1:])):
        inits[f"l{i}_w"] = rng.normal(0, math.sqrt(2 / fin), (fout, fin)).astype(np.float32)
        inits[f"l{i}_b"] = rng.normal(0, 0.05, fout).astype(np.float32)
        last = i == len(features) - 2
        out = "y" if last else f"l{i}"
        nodes.append(helper.make_node("Gemm", [x, f"l{i}_w", f"l{i}_b"], [out], name=f"l{i}",
                                      transB=1))
        x = out
        if not last:
            nodes.append(helper.make_node("Relu", [x], [f"r{i}"], name=f"r{i}"))
            x = f"r{i}"
    return _make(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                       [tokens, features[0]])],
                 [helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                                [tokens, features[-1]])], inits, "mlp")


def deep_conv(mid: int, *, groups: int = 1, batch: int = 1, stride: int = 1, side: int = 8,
              seed: int | None = None):
    """A 3x3 convolution ``x`` (``batch x 4 x side x side``) to ``mid`` channels, ReLU, then a
    3x3 convolution (``stride``, pad 1) of ``groups`` groups of ``mid / groups`` channels to 8
    channels a group, ``y``: its ``9 mid / groups`` taps a group exceed ``tiny``'s 1,024
    offset entries from ``mid / groups`` = 114 on (K parts). ``seed`` defaults to ``mid``."""
    from onnx import TensorProto, helper

    _check("mid", mid, 1, 65536)
    _check("groups", groups, 1, mid)
    if mid % groups:
        raise ValueError(f"mid={mid} must be a multiple of groups={groups}")
    for name, value, hi in (("batch", batch, 64), ("stride", stride, 8), ("side", side, 4096)):
        _check(name, value, 1, hi)
    rng = np.random.default_rng(mid if seed is None else seed)
    inits = {"w0": rng.normal(0, .3, (mid, 4, 3, 3)).astype(np.float32),
             "w1": rng.normal(0, .1, (8 * groups, mid // groups, 3, 3)).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w0"], ["a"], name="wide", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["a"], ["r"], name="relu"),
             helper.make_node("Conv", ["r", "w1"], ["y"], name="deep", group=groups,
                              pads=[1, 1, 1, 1], strides=[stride, stride])]
    out = -(-side // stride)
    return _make(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                       [batch, 4, side, side])],
                 [helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                                [batch, 8 * groups, out, out])], inits, "deep")


#: ``(out channels, expansion, stride)`` of each inverted residual block of
#: :func:`inverted_residual_net` by default: MobileNet-V2's first stages, narrowed.
MOBILENET_BLOCKS = ((16, 1, 1), (24, 6, 2), (24, 6, 1), (32, 6, 2), (32, 6, 1))


def inverted_residual_net(*, height: int = 32, width: int = 32, classes: int = 10,
                          blocks=MOBILENET_BLOCKS, stem: int = 16, seed: int = 0,
                          tf_same: bool = False):
    """A MobileNet-V2-style network on ``1 x 3 x height x width``: a 3x3 stride-2 stem conv
    (``stem`` channels, ReLU), then one inverted residual block per ``(out, expansion,
    stride)`` or ``(out, expansion, stride, kernel)`` of ``blocks`` — a 1x1 expand conv to ``in
    * expansion`` channels with ReLU (omitted at expansion 1), a ``kernel`` x ``kernel``
    depthwise conv (3 unless given: 3, 5 or 7; ``group`` = its channels, pad ``kernel // 2``,
    the block's stride) with ReLU, a 1x1 project conv to ``out`` channels, and a residual
    ``Add`` when the stride is 1 and ``in == out`` — then global average pooling, flatten and
    a Gemm head (EfficientNet's MBConv blocks without squeeze-and-excitation, with kernels).
    With ``tf_same`` every convolution is padded as TF/Keras ``"SAME"`` pads it (what a
    Keras-exported EfficientNet carries): a stride-2 one on an even side by ``kernel // 2 -
    1`` before and ``kernel // 2`` after, the others symmetrically. Input ``x``, output
    ``logits``."""
    from onnx import helper

    _check("stem", stem, 1, 4096)
    rng, inits, nodes = _image_model(height, width, classes, seed, min_side=8)

    side = [height, width]                      # the map's size at the current layer

    def same(n, k, stride):                     # TF "SAME": (before, after) for a side of n
        total = max((-(-n // stride) - 1) * stride + k - n, 0)
        return total // 2, total - total // 2

    def conv(name, x, cin, cout, k, stride=1, group=1, relu=True):
        w = rng.normal(0, math.sqrt(2 / (cin // group * k * k)),
                       (cout, cin // group, k, k)).astype(np.float32)
        inits[f"{name}_w"] = w
        inits[f"{name}_b"] = rng.normal(0, 0.05, cout).astype(np.float32)
        if tf_same:
            (top, bottom), (left, right) = (same(n, k, stride) for n in side)
        else:
            top = bottom = left = right = k // 2
        side[:] = [-(-n // stride) for n in side]
        nodes.append(helper.make_node("Conv", [x, f"{name}_w", f"{name}_b"], [name], name=name,
                                      kernel_shape=[k, k], pads=[top, left, bottom, right],
                                      strides=[stride, stride], group=group))
        if not relu:
            return name
        nodes.append(helper.make_node("Relu", [name], [f"{name}_relu"], name=f"{name}_relu"))
        return f"{name}_relu"

    x, cin = conv("stem", "x", 3, stem, 3, stride=2), stem
    for i, block in enumerate(blocks):
        if len(block) not in (3, 4):
            raise ValueError(f"inverted_residual_net: blocks[{i}]={block!r} must be (out, "
                             f"expansion, stride) or (out, expansion, stride, kernel)")
        cout, t, stride, kernel = (*block, 3)[:4]
        _check(f"blocks[{i}] expansion", t, 1, 64)
        _check(f"blocks[{i}] stride", stride, 1, 2)
        if kernel not in (3, 5, 7):
            raise ValueError(f"inverted_residual_net: blocks[{i}] kernel={kernel!r} must be 3, "
                             f"5 or 7")
        mid = cin * t
        y = conv(f"b{i}_expand", x, cin, mid, 1) if t != 1 else x
        y = conv(f"b{i}_dw", y, mid, mid, kernel, stride=stride, group=mid)
        y = conv(f"b{i}_project", y, mid, cout, 1, relu=False)
        if stride == 1 and cin == cout:
            nodes.append(helper.make_node("Add", [y, x], [f"b{i}_add"], name=f"b{i}_add"))
            y = f"b{i}_add"
        x, cin = y, cout
    return _classifier(nodes, inits, rng, x, cin, classes, (height, width),
                       "inverted_residual_net")


def conv_chain(*, height: int = 16, width: int = 16, classes: int = 10,
               layers=((16, 3, 1, 1), (32, 3, 2, 1)), seed: int = 0, batch: int = 1):
    """A chain of convolutions on ``batch x 3 x height x width``, then global average pooling,
    flatten and a Gemm head. Each of ``layers`` is ``(out, kernel, stride, groups)`` or
    ``(out, kernel, stride, groups, pads, relu, residual)``: a ``kernel`` x ``kernel`` Conv to
    ``out`` channels in ``groups`` groups (dividing both channel counts), ``pads`` (top, left,
    bottom, right; default ``kernel // 2`` each), then a ReLU when ``relu`` (default true), then
    the residual ``Add`` of the layer's input when ``residual`` (the input and output shapes
    must match). Input ``x``, output ``logits``."""
    from onnx import helper

    rng, inits, nodes = _image_model(height, width, classes, seed, min_side=1)
    _check("batch", batch, 1, 64)
    x, cin, side = "x", 3, (height, width)
    for i, layer in enumerate(layers):
        if len(layer) not in (4, 7):
            raise ValueError(f"conv_chain: layers[{i}]={layer!r} must be (out, kernel, stride, "
                             f"groups) or (out, kernel, stride, groups, pads, relu, residual)")
        cout, k, s, g = layer[:4]
        pads, relu, residual = layer[4:] if len(layer) == 7 else ((k // 2,) * 4, True, False)
        _check(f"layers[{i}] out", cout, 1, 65536)
        _check(f"layers[{i}] kernel", k, 1, 15)
        _check(f"layers[{i}] stride", s, 1, 4)
        _check(f"layers[{i}] groups", g, 1, 65536)
        if cin % g or cout % g:
            raise ValueError(f"conv_chain: layers[{i}] groups={g} must divide the input "
                             f"channels {cin} and out={cout}")
        if len(pads) != 4 or any(type(p) is not int or not 0 <= p < k for p in pads):
            raise ValueError(f"conv_chain: layers[{i}] pads={pads!r} must be four ints in "
                             f"[0, {k - 1}]")
        out = tuple((n + a + b - k) // s + 1 for n, a, b in zip(side, pads[:2], pads[2:]))
        if min(out) < 1:
            raise ValueError(f"conv_chain: layers[{i}]: a {k}x{k} kernel does not fit the "
                             f"padded {side[0]} x {side[1]} map")
        if residual and (cout != cin or out != side):
            raise ValueError(f"conv_chain: layers[{i}] residual needs the output shape "
                             f"{cout} x {out} to be the input's {cin} x {side}")
        inits[f"c{i}_w"] = rng.normal(0, math.sqrt(2 / (cin // g * k * k)),
                                      (cout, cin // g, k, k)).astype(np.float32)
        inits[f"c{i}_b"] = rng.normal(0, 0.05, cout).astype(np.float32)
        y = f"c{i}"
        nodes.append(helper.make_node("Conv", [x, f"c{i}_w", f"c{i}_b"], [y], name=y,
                                      kernel_shape=[k, k], pads=list(pads), strides=[s, s],
                                      group=g))
        if relu:
            nodes.append(helper.make_node("Relu", [y], [f"c{i}_relu"], name=f"c{i}_relu"))
            y = f"c{i}_relu"
        if residual:
            nodes.append(helper.make_node("Add", [y, x], [f"c{i}_add"], name=f"c{i}_add"))
            y = f"c{i}_add"
        x, cin, side = y, cout, out
    return _classifier(nodes, inits, rng, x, cin, classes, (height, width), "conv_chain",
                       batch=batch)
