"""Post-training static quantisation of float models, and lowering of a quantised graph onto
accelerator layers (the descriptions a firmware compiler consumes) and host ops.

Float model -> quantised model (all on ``onnx.ModelProto``)::

    model = load_model(path, shapes)                 # planner.net.onnx_import
    model = seeded_weights(model, seed=0)            # optional: meaningful random weights
    model = fold_batchnorm(model)                    # Conv + BatchNormalization -> Conv
    model = fold_pad(model)                          # zero Pad -> Conv's own padding
    model = conv_transpose_as_conv(model)            # k x k stride-k ConvTranspose -> Conv
    model = normalise_gemm(model)                    # Gemm's alpha, beta, transA, 2-D bias
    qmodel = quantize_qdq(model, calibration)        # onnxruntime.quantization, QDQ format
    lowered = lower(import_onnx(qmodel))             # AccelLayer / HostOp steps

``quantize_qdq`` calls ``onnxruntime.quantization.quantize_static``: per-channel symmetric int8
weights, per-tensor asymmetric int8 activations (MinMax calibration), int32 biases with scale
``s_x * s_w[m]``. Calibration runs on the inputs given, or on ``samples`` seeded standard
normal inputs (:func:`generated_inputs`).

Quantised graph -> :class:`Lowered` (:func:`lower`): each Conv, Gemm or MatMul whose inputs come
from DequantizeLinear and whose output goes (through an optional Relu / Clip) into one
QuantizeLinear becomes an :class:`AccelLayer`, as does a ``QLinearConv`` / ``QLinearMatMul``.
Everything else stays a :class:`HostOp` in float semantics (dequantised inputs, quantised
outputs, exactly as the QDQ graph says); nodes whose outputs nobody reads any more are removed
(dead-code elimination). The integer arithmetic of a layer is the hardware's (``spec.golden``
int8 x int8 -> int32, then ``spec.golden.requantize``) with per-output-channel multiplier/shift
from :func:`planner.requant.quantize_multiplier` and bounds from
:func:`planner.requant.activation_bounds`. Zero points fold as in :mod:`planner.zero_points`: the conv
input's zero point is the padded layout's halo value and ``-x_zp * sum(w[m])`` joins the bias.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Literal

import numpy as np

from planner.zero_points import resolve_conv_pads
from planner.requant import activation_bounds, quantize_multiplier
from planner.shapes import ConvShape, GemmShape

from .graph import Graph, ModelError, Node

__all__ = ["fold_batchnorm", "fold_pad", "conv_transpose_as_conv", "normalise_gemm",
           "seeded_weights", "generated_inputs", "CalibrationReader", "quantize_qdq",
           "AccelLayer", "HostOp", "Lowered", "lower", "check_lowered", "LayerKind"]

LayerKind = Literal["conv", "fc", "gemm"]

#: The opset :func:`quantize_qdq` quantises at (at least): per-channel DequantizeLinear's.
PER_CHANNEL_OPSET = 13
INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1


# -- float model transforms (ModelProto) -----------------------------------------------------------

def _copy(model):
    import onnx

    out = onnx.ModelProto()
    out.CopyFrom(model)
    return out


def _attr(node, name, default):
    from onnx import helper

    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def fold_batchnorm(model):
    """A copy of ``model`` with every ``Conv -> BatchNormalization`` pair (constant conv weights
    and BN parameters, the conv output read only by the BN) replaced by one Conv:
    ``W' = W * g``, ``B' = (B - mean) * g + beta`` with ``g = scale / sqrt(var + eps)``.
    Other BatchNormalization nodes are kept (they run on the host)."""
    from onnx import numpy_helper

    model = _copy(model)
    g = model.graph
    arrays = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    producers = {o: n for n in g.node for o in n.output}
    uses: dict[str, int] = {}
    for n in g.node:
        for i in n.input:
            uses[i] = uses.get(i, 0) + 1
    for o in g.output:
        uses[o.name] = uses.get(o.name, 0) + 1
    removed = []
    for bn in g.node:
        if bn.op_type != "BatchNormalization" or len([o for o in bn.output if o]) != 1:
            continue
        conv = producers.get(bn.input[0])
        params = list(bn.input[1:5])
        has_b = len(conv.input) > 2 and bool(conv.input[2]) if conv is not None else False
        if conv is None or conv.op_type != "Conv" or uses.get(bn.input[0]) != 1 \
                or not all(p in arrays for p in params) or conv.input[1] not in arrays \
                or (has_b and conv.input[2] not in arrays):
            continue
        scale, beta, mean, var = (arrays[p].astype(np.float64) for p in params)
        gain = scale / np.sqrt(var + float(_attr(bn, "epsilon", 1e-5)))
        w = arrays[conv.input[1]].astype(np.float64)
        b = arrays[conv.input[2]].astype(np.float64) if has_b else np.zeros(w.shape[0])
        wname, bname = f"{conv.name}_bnfold_w", f"{conv.name}_bnfold_b"
        g.initializer.append(numpy_helper.from_array(
            (w * gain.reshape(-1, *[1] * (w.ndim - 1))).astype(np.float32), wname))
        g.initializer.append(numpy_helper.from_array(((b - mean) * gain + beta).astype(
            np.float32), bname))
        x = conv.input[0]
        del conv.input[:]
        conv.input.extend([x, wname, bname])
        conv.output[0] = bn.output[0]
        removed.append(bn.name)
    if not removed:
        return model
    return _with_nodes(model, [n for n in g.node if n.name not in removed])


def _read_names(nodes) -> set[str]:
    """Every tensor name ``nodes`` read, their subgraphs' (If / Loop / Scan bodies) included."""
    from onnx import AttributeProto

    out = set()
    for n in nodes:
        out.update(n.input)
        for a in n.attribute:
            if a.type == AttributeProto.GRAPH:
                out |= _read_names(a.g.node) | {o.name for o in a.g.output}
            elif a.type == AttributeProto.GRAPHS:
                for sub in a.graphs:
                    out |= _read_names(sub.node) | {o.name for o in sub.output}
    return out


def _with_nodes(model, nodes):
    """``model`` (a copy the caller owns) with graph nodes ``nodes``, the initialisers nothing
    reads any more (no node, subgraph, graph output or graph input) dropped, and the inferred
    shapes cleared (they are redone)."""
    g = model.graph
    del g.node[:]
    g.node.extend(nodes)
    used = _read_names(g.node) | {o.name for o in g.output} | {i.name for i in g.input}
    inits = [t for t in g.initializer if t.name in used]
    del g.initializer[:]
    g.initializer.extend(inits)
    del g.value_info[:]
    return model


def _namer(model):
    """A function giving names no tensor, initialiser or node of ``model`` has (nor an earlier
    call gave): ``base``, else ``base_1``, ``base_2``, ..."""
    g = model.graph
    taken = ({n.name for n in g.node} | {t.name for t in g.initializer} |
             {i.name for i in g.input} | {o.name for o in g.output} | _read_names(g.node) |
             {o for n in g.node for o in n.output})

    def fresh(base: str) -> str:
        name, i = base, 0
        while name in taken:
            i += 1
            name = f"{base}_{i}"
        taken.add(name)
        return name
    return fresh


def _rewriting(model):
    """A pass's start: ``(a copy of model, its graph, its initialisers as arrays by name, a
    fresh-name function)``."""
    from onnx import numpy_helper

    model = _copy(model)
    g = model.graph
    return model, g, {t.name: numpy_helper.to_array(t) for t in g.initializer}, _namer(model)


def _opset(model) -> int:
    return next((i.version for i in model.opset_import if i.domain in ("", "ai.onnx")), 0)




def _text(value) -> str:
    """A string attribute's value (onnx gives bytes)."""
    return value.decode() if isinstance(value, bytes) else str(value)


def fold_pad(model):
    """A copy of ``model`` in which every zero ``Pad`` feeding a 2-D ``Conv`` (constant mode,
    value 0 or none, constant pads, nothing added to the batch and channel axes; the
    ``ZeroPadding2D`` of Keras models before a stride-2 convolution) is the convolution's own
    padding: the Conv reads the Pad's input with its ``pads`` increased by the Pad's (a Conv
    with ``auto_pad=VALID`` has none of its own; other ``auto_pad`` values are left alone). A Pad
    whose output other nodes read too stays for them. The float function is unchanged: a
    convolution pads with zeros. (On the accelerator the padding is the padded input layout's
    halo, so the Pad costs nothing; as a host op it split the segment and made the Conv an
    unpadded one.)"""
    from onnx import helper, numpy_helper

    model = _copy(model)
    g = model.graph
    arrays = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    opset = next((i.version for i in model.opset_import if i.domain in ("", "ai.onnx")), 0)
    producers = {o: n for n in g.node for o in n.output}
    outputs = {o.name for o in g.output}
    folded = set()
    for conv in g.node:
        if conv.op_type != "Conv" or conv.domain not in ("", "ai.onnx") or not conv.input:
            continue
        pad = producers.get(conv.input[0])
        if pad is None or pad.op_type != "Pad" or pad.domain not in ("", "ai.onnx"):
            continue
        if _text(_attr(pad, "mode", "constant")) != "constant":
            continue
        if opset < 11:
            pads, value = list(_attr(pad, "pads", [])), float(_attr(pad, "value", 0.0))
        else:
            ins = list(pad.input) + [""] * 3
            if ins[1] not in arrays or (ins[2] and ins[2] not in arrays) or ins[3]:
                continue                    # computed pads or value, or an axes input
            pads = [int(v) for v in arrays[ins[1]].reshape(-1)]
            value = float(arrays[ins[2]].reshape(-1)[0]) if ins[2] else 0.0
        kernel = _attr(conv, "kernel_shape", None)
        rank = len(pads) // 2
        auto = _text(_attr(conv, "auto_pad", "NOTSET"))
        if value != 0.0 or rank != 4 or any(pads[i] or pads[i + rank] for i in (0, 1)) or \
                any(p < 0 for p in pads) or auto not in ("NOTSET", "VALID") \
                or (kernel is not None and len(kernel) != 2):
            continue
        # (auto_pad VALID: no padding of its own, as a TF export of ZeroPadding2D + a "valid"
        # Conv may write it)
        own = list(_attr(conv, "pads", [0, 0, 0, 0])) if auto == "NOTSET" else [0, 0, 0, 0]
        new = [own[0] + pads[2], own[1] + pads[3], own[2] + pads[6], own[3] + pads[7]]
        attrs = {a.name: helper.get_attribute_value(a) for a in conv.attribute
                 if a.name not in ("pads", "auto_pad")}
        replacement = helper.make_node("Conv", [pad.input[0], *conv.input[1:]],
                                       list(conv.output), name=conv.name, pads=new, **attrs)
        conv.CopyFrom(replacement)
        folded.add(pad.output[0])
    if not folded:
        return model
    used = {i for n in g.node for i in n.input} | outputs
    return _with_nodes(model, [n for n in g.node if not (
        n.op_type == "Pad" and n.output[0] in folded and n.output[0] not in used)])


def conv_transpose_as_conv(model):
    """A copy of ``model`` in which every float ``ConvTranspose`` whose square kernel equals its
    stride (no overlap: a UNet decoder's 2 x 2 stride-2 upsampling), with no padding, output
    padding, dilation, groups or ``output_shape`` and constant weights, is a 1x1 ``Conv`` to
    ``C_out * k * k`` channels (``W'[c k k + a k + b, i] = W[i, c, a, b]``, the bias repeated)
    followed by ``DepthToSpace`` (CRD, block ``k``). The convolution runs on the accelerator;
    the rearrangement is a host layout op. (ONNX's ConvTranspose ran whole on the host.) The
    float function is unchanged."""
    from onnx import helper, numpy_helper

    if _opset(model) < 11:          # DepthToSpace's mode from opset 11 (load_model lifts)
        return model
    model, g, arrays, fresh = _rewriting(model)
    nodes, changed = [], False
    for node in g.node:
        w = arrays.get(node.input[1]) if len(node.input) > 1 else None
        b_name = node.input[2] if len(node.input) > 2 else ""
        kernel = list(_attr(node, "kernel_shape", [] if w is None else list(w.shape[2:])))
        strides = list(_attr(node, "strides", [1] * len(kernel)))
        plain = (node.op_type == "ConvTranspose" and node.domain in ("", "ai.onnx")
                 and w is not None and w.ndim == 4 and (not b_name or b_name in arrays)
                 and len(kernel) == 2 and kernel[0] == kernel[1] == strides[0] == strides[1]
                 and kernel == list(w.shape[2:])
                 and not any(_attr(node, "pads", [0] * 4))
                 and not any(_attr(node, "output_padding", [0, 0]))
                 and list(_attr(node, "dilations", [1, 1])) == [1, 1]
                 and int(_attr(node, "group", 1)) == 1
                 and _attr(node, "output_shape", None) is None
                 and _text(_attr(node, "auto_pad", "NOTSET")) == "NOTSET")
        if not plain:
            nodes.append(node)
            continue
        changed = True
        k = kernel[0]
        c_in, c_out = w.shape[0], w.shape[1]
        tag = node.name or node.output[0]
        wc = np.ascontiguousarray(w.transpose(1, 2, 3, 0).reshape(c_out * k * k, c_in, 1, 1))
        w_name = fresh(f"{tag}_as_conv_w")
        g.initializer.append(numpy_helper.from_array(wc.astype(w.dtype), w_name))
        ins = [node.input[0], w_name]
        if b_name:
            bias = arrays[b_name]
            ins.append(fresh(f"{tag}_as_conv_b"))
            g.initializer.append(numpy_helper.from_array(np.repeat(bias, k * k), ins[-1]))
        if k == 1:                  # a 1x1 stride-1 ConvTranspose is a 1x1 Conv
            nodes.append(helper.make_node("Conv", ins, list(node.output),
                                          name=node.name or fresh("as_conv"), kernel_shape=[1, 1]))
            continue
        mid = fresh(f"{tag}_as_conv")
        nodes += [helper.make_node("Conv", ins, [mid], name=mid, kernel_shape=[1, 1]),
                  helper.make_node("DepthToSpace", [mid], list(node.output),
                                   name=node.name or fresh(f"{tag}_depth_to_space"),
                                   blocksize=k, mode="CRD")]
    return _with_nodes(model, nodes) if changed else model


def normalise_gemm(model):
    """A copy of ``model`` whose float Gemm nodes say ``Y = A @ B' + C`` with a per-output
    bias, the form the lowering accelerates (``transB`` stays as it is), where the model allows:

    * ``alpha != 1`` with a constant ``B``: ``alpha`` goes into ``B``;
    * ``beta != 1`` with a constant ``C``: ``beta`` goes into ``C``;
    * a constant ``C`` of shape ``()``, ``(1,)``, ``(1, 1)`` or ``(1, N)`` becomes ``(N,)``
      (onnxruntime's quantiser fails on a 2-D bias); a ``(M, N)`` or ``(M, 1)`` one, which is not
      per output feature, leaves the Gemm for an ``Add`` after it;
    * ``transA = 1``: a ``Transpose`` before the Gemm feeds it ``A``.

    A Gemm with ``alpha != 1`` and a computed ``B``, or ``beta != 1`` and a computed ``C``, is
    left as it is (it runs on the host). The float function is unchanged up to float32
    rounding of the scaled constants."""
    from onnx import helper, numpy_helper

    if _opset(model) < 11:          # Gemm's C is optional from opset 11 (load_model lifts)
        return model
    model, g, arrays, fresh = _rewriting(model)
    nodes, changed = [], False
    for node in g.node:
        if node.op_type != "Gemm" or node.domain not in ("", "ai.onnx"):
            nodes.append(node)
            continue
        alpha, beta = float(_attr(node, "alpha", 1.0)), float(_attr(node, "beta", 1.0))
        trans_a, trans_b = int(_attr(node, "transA", 0)), int(_attr(node, "transB", 0))
        a, b = node.input[0], node.input[1]
        c = node.input[2] if len(node.input) > 2 else ""
        if (alpha != 1.0 and b not in arrays) or (c and beta != 1.0 and c not in arrays) \
                or (b in arrays and arrays[b].ndim != 2):
            nodes.append(node)
            continue
        cb = arrays.get(c) if c else None
        n = arrays[b].shape[0 if trans_b else 1] if b in arrays else None
        # the bias C per output feature: (N,), (1, N), () or (1,) [, (1, 1)] broadcast on N;
        # (M, N) and (M, 1) with M > 1 are not (an Add after the Gemm)
        per_out = cb is not None and (cb.ndim <= 1 or (cb.ndim == 2 and cb.shape[0] == 1))
        as_vector = per_out and (n is not None or cb.size > 1)
        add_after = cb is not None and not per_out
        reshape = per_out and as_vector and cb.shape != ((n,) if n is not None
                                                       else (cb.size,))
        if not (alpha != 1.0 or (cb is not None and (beta != 1.0 or reshape or add_after))
                or trans_a):
            nodes.append(node)
            continue
        changed = True
        tag = node.name or node.output[0]
        if alpha != 1.0:
            b = fresh(f"{tag}_alpha_b")
            w = arrays[node.input[1]]
            g.initializer.append(numpy_helper.from_array(
                (w.astype(np.float64) * alpha).astype(w.dtype), b))
        if cb is not None and (beta != 1.0 or reshape or add_after):
            scaled = cb.astype(np.float64) * beta
            if reshape:
                scaled = np.broadcast_to(scaled.reshape(-1), (n,) if n is not None
                                         else (cb.size,))
            c = fresh(f"{tag}_beta_c")
            g.initializer.append(numpy_helper.from_array(
                np.ascontiguousarray(scaled, dtype=cb.dtype), c))
        if trans_a:
            at = fresh(f"{tag}_transA")
            nodes.append(helper.make_node("Transpose", [a], [at], name=at, perm=[1, 0]))
            a = at
        y = node.output[0]
        inputs = [a, b] + ([c] if c and not add_after else [])
        out = fresh(f"{tag}_no_bias") if add_after else y
        nodes.append(helper.make_node("Gemm", inputs, [out], name=node.name, transB=trans_b))
        if add_after:
            nodes.append(helper.make_node("Add", [out, c], [y], name=fresh(f"{tag}_bias")))
    return _with_nodes(model, nodes) if changed else model

#: operators whose float constant inputs seeded_weights replaces as data: element-wise
#: arithmetic, and the weights of the layers it gives a role above (any other input position)
_SEEDED_ARITHMETIC = frozenset({"Add", "Sub", "Mul", "Div", "PRelu", "Sum"})
_SEEDED_WEIGHTS = frozenset({"Conv", "ConvTranspose", "Gemm", "MatMul", "BatchNormalization",
                             "InstanceNormalization", "LayerNormalization"})


def seeded_weights(model, seed: int):
    """A copy of ``model`` whose float initialisers (weights, biases, BatchNormalization
    parameters, constant-folded weights such as the ``light_*`` models' ConstantOfShape ones)
    are replaced by seeded random values of the same shape and dtype, by role:

    * Conv weight: normal, std ``sqrt(2 / fan_in)`` (He); Gemm / MatMul weight: std
      ``sqrt(1 / fan_in)``; biases: normal, std 0.05;
    * BatchNormalization scale uniform [0.5, 1], bias and mean normal std 0.1, var uniform
      [0.5, 1.5];
    * a float constant of element-wise arithmetic (Add, Sub, Mul, Div, PRelu, Sum):
      uniform [0.5, 1.5] for Mul/Div operands, normal std 0.1 else.

    Other float initialisers are operator parameters, not weights, and are kept: Dropout's
    ratio (randomised, it left [0, 1) and onnxruntime's quantiser failed on AlexNet and
    VGG-19), Clip's bounds, Resize's scales, Pad's value. So are integer initialisers (shapes,
    axes, quantised weights)."""
    from onnx import numpy_helper

    if type(seed) is not int or seed < 0:
        raise ValueError(f"seed must be an int >= 0, not {seed!r}")
    model = _copy(model)
    g = model.graph
    roles: dict[str, tuple[str, int]] = {}
    for n in g.node:
        for i, name in enumerate(n.input):
            roles.setdefault(name, (n.op_type, i))
    rng = np.random.default_rng(seed)
    for k, t in enumerate(g.initializer):
        arr = numpy_helper.to_array(t)
        if arr.dtype.kind != "f" or arr.size == 0:
            continue
        op, pos = roles.get(t.name, ("", -1))
        shape = arr.shape
        if op == "Conv" and pos == 1 and arr.ndim >= 2:
            fan_in = int(np.prod(shape[1:]))
            new = rng.normal(0, math.sqrt(2 / fan_in), shape)
        elif op in ("Gemm", "MatMul") and pos == 1 and arr.ndim == 2:
            trans_b = op == "Gemm" and any(
                a.name == "transB" and a.i for n in g.node if t.name in n.input
                for a in n.attribute)
            fan_in = shape[1] if trans_b else shape[0]
            new = rng.normal(0, math.sqrt(1 / fan_in), shape)
        elif op in ("Conv", "Gemm") and pos == 2:
            new = rng.normal(0, 0.05, shape)
        elif op == "BatchNormalization" and pos in (1, 2, 3, 4):
            new = {1: lambda: rng.uniform(0.5, 1.0, shape), 2: lambda: rng.normal(0, .1, shape),
                   3: lambda: rng.normal(0, .1, shape),
                   4: lambda: rng.uniform(0.5, 1.5, shape)}[pos]()
        elif op in ("Mul", "Div"):
            new = rng.uniform(0.5, 1.5, shape)
        elif op in _SEEDED_ARITHMETIC or (op in _SEEDED_WEIGHTS and pos > 0):
            new = rng.normal(0, 0.1, shape)
        else:                   # an operator's parameter (Dropout ratio, Clip bounds, ...)
            continue
        g.initializer[k].CopyFrom(numpy_helper.from_array(new.astype(arr.dtype), t.name))
    return model


# -- calibration and onnxruntime quantisation ------------------------------------------------------

def _float_inputs(model) -> list[tuple[str, tuple[int, ...], np.dtype]]:
    from onnx import helper

    inits = {t.name for t in model.graph.initializer}
    out = []
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
        if None in dims:
            raise ValueError(f"graph input {vi.name!r} has a symbolic dimension; give its shape "
                             f"(--input-shape {vi.name}=D0,D1,... on the command line, "
                             f"input_shapes in Python) before generating calibration data")
        out.append((vi.name, tuple(dims), np.dtype(helper.tensor_dtype_to_np_dtype(
            tt.elem_type))))
    return out


def _check_memory(specs, samples: int) -> None:
    """``ValueError`` naming the input when ``samples`` float64 draws of it would need more
    memory than the machine has (numpy's MemoryError, or the kernel's OOM killer, otherwise)."""
    try:
        ram = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):        # (not POSIX: no limit known)
        return
    for name, shape, _ in specs:
        need = samples * 8 * math.prod(shape)
        if need > ram:
            raise ValueError(f"graph input {name!r} of shape {list(shape)}: {samples} generated "
                             f"calibration samples of it need {need / 2**30:,.1f} GiB, more "
                             f"than this machine's {ram / 2**30:,.1f} GiB (give --calib samples, "
                             f"or a smaller --input-shape where its dims are symbolic)")


def generated_inputs(model, samples: int = 4, seed: int = 0) -> list[dict[str, np.ndarray]]:
    """``samples`` feeds of seeded standard-normal values for every (float) graph input;
    ``ValueError`` before allocating feeds larger than the machine's memory."""
    if type(samples) is not int or samples < 1:
        raise ValueError(f"samples must be an int >= 1, not {samples!r}")
    rng = np.random.default_rng(seed)
    specs = _float_inputs(model)
    _check_memory(specs, samples)
    return [{name: rng.normal(0, 1, shape).astype(dtype) for name, shape, dtype in specs}
            for _ in range(samples)]


class CalibrationReader:
    """An ``onnxruntime.quantization.CalibrationDataReader`` over a list of feeds."""

    def __init__(self, feeds: Sequence[Mapping[str, np.ndarray]]):
        if not feeds:
            raise ValueError("calibration needs at least one feed")
        self._feeds = [dict(f) for f in feeds]
        self._next = 0

    def get_next(self) -> dict[str, np.ndarray] | None:
        if self._next >= len(self._feeds):
            return None
        self._next += 1
        return self._feeds[self._next - 1]

    def rewind(self) -> None:
        self._next = 0


def quantize_qdq(model, calibration: Sequence[Mapping[str, np.ndarray]] | None = None, *,
                 samples: int = 4, seed: int = 0, labels: Sequence[str] | None = None):
    """The QDQ int8 model of float ``model`` (module docstring) via onnxruntime.

    Each calibration feed must give every graph input, with the input's shape (its static
    dimensions; a symbolic one takes any size) and real values; ``labels`` name the feeds in
    the errors (default ``calibration feed i``; ``tessera compile --calib`` gives the files)."""
    import onnx
    from onnxruntime.quantization import (CalibrationDataReader, CalibrationMethod, QuantFormat,
                                          QuantType, quantize_static)

    feeds = list(calibration) if calibration is not None else generated_inputs(model, samples,
                                                                               seed)
    labels = list(labels) if labels is not None else [f"calibration feed {i}"
                                                      for i in range(len(feeds))]
    if len(labels) != len(feeds):
        raise ValueError(f"labels: {len(labels)} for {len(feeds)} calibration feeds")
    if not feeds:
        raise ValueError("calibration needs at least one feed")
    inits = {t.name for t in model.graph.initializer}
    graph_inputs = [vi for vi in model.graph.input if vi.name not in inits]
    shapes = {vi.name: tuple(d.dim_value if d.HasField("dim_value") else None
                             for d in vi.type.tensor_type.shape.dim) for vi in graph_inputs}
    dtypes = {vi.name: np.dtype(onnx.helper.tensor_dtype_to_np_dtype(
        vi.type.tensor_type.elem_type)) for vi in graph_inputs}
    checked = []
    for label, feed in zip(labels, feeds):
        if set(feed) != set(shapes):
            raise ValueError(f"{label} has inputs {sorted(feed)}, the model needs "
                             f"{sorted(shapes)}")
        cast = {}
        for name, want in shapes.items():
            x = np.asarray(feed[name])
            if x.ndim != len(want) or any(w is not None and w != d
                                          for w, d in zip(want, x.shape)):
                shown = tuple("?" if w is None else w for w in want)
                raise ValueError(f"{label}: input {name!r} has shape {x.shape}, the model "
                                 f"needs {shown}")
            if x.dtype.kind not in "fiu":
                raise ValueError(f"{label}: input {name!r} is {x.dtype}, not real numbers")
            if x.dtype.kind == "f" and not np.isfinite(x).all():
                raise ValueError(f"{label}: input {name!r} holds NaN or infinite values")
            # np.save of float64 data is the common case for a float32 input: the values,
            # in the input's type (onnxruntime refuses any other)
            cast[name] = x.astype(dtypes[name], copy=False)
        checked.append(cast)
    feeds = checked

    class Reader(CalibrationReader, CalibrationDataReader):
        pass

    opset = next((i.version for i in model.opset_import if i.domain in ("", "ai.onnx")), 0)
    if opset < PER_CHANNEL_OPSET:
        # per-channel DequantizeLinear (its axis) needs opset 13: quantising an opset 11/12
        # model wrote nodes the checker refused, naming tessera's own node
        from onnx import version_converter
        try:
            model = version_converter.convert_version(model, PER_CHANNEL_OPSET)
        except Exception as e:
            raise ModelError(f"upgrading the float model from opset {opset} to "
                             f"{PER_CHANNEL_OPSET} for quantisation failed: {e}") from None
    with tempfile.TemporaryDirectory(prefix="tessera-quant-") as tmp:
        src, dst = Path(tmp) / "float.onnx", Path(tmp) / "int8.onnx"
        onnx.save(model, src)
        root = logging.getLogger()
        root.addFilter(_no_preprocess_advice)
        try:
            quantize_static(src, dst, Reader(feeds), quant_format=QuantFormat.QDQ,
                            per_channel=True, activation_type=QuantType.QInt8,
                            weight_type=QuantType.QInt8,
                            calibrate_method=CalibrationMethod.MinMax,
                            extra_options={"WeightSymmetric": True,
                                           "ActivationSymmetric": False})
        except Exception as e:      # onnxruntime's quantiser: IndexError, ORT Fail, ...
            why = " ".join(str(e).split())[:400]
            raise ModelError(f"onnxruntime's quantiser failed on this float model "
                             f"({type(e).__name__}: {why}); give a quantised (QDQ or "
                             f"QLinear) model instead") from None
        finally:
            root.removeFilter(_no_preprocess_advice)
        return onnx.load(dst)


def _no_preprocess_advice(record: logging.LogRecord) -> bool:
    """Drops two onnxruntime quantiser warnings that say nothing to a tessera user:
    "Please consider pre-processing before quantization", which every ``tessera compile`` of a
    float model printed (the model it quantises is already shape-inferred and folded,
    :mod:`planner.net.onnx_import`), and "Axis 1 is out-of-range for weight 'ln_g' with rank
    1", printed for every LayerNormalization scale (its per-channel quantisation falls back to
    per-tensor, as it should for a 1-D weight; the user set no axis)."""
    text = record.getMessage()
    return "pre-processing before quantization" not in text and not (
        text.startswith("Axis ") and "is out-of-range for weight" in text)


# -- lowering --------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True, eq=False)
class AccelLayer:
    """One accelerator layer, everything a firmware compiler needs.

    ``kind``:

    * ``conv``: NCHW int8 ``input`` (``shape``: :class:`ConvShape`) convolved with ``weights``
      (K, C/groups, R, S), the padded layout's halo holding ``halo`` (the input zero point);
      output NCHW int8.
    * ``fc``: ``input`` of shape (..., K) as ``rows = prod(...)`` vectors; the array computes
      ``C[M x rows] = weights[M x K] @ input^T`` (``shape``: ``GemmShape(M=out features, K,
      N=rows)``, OpKind.FC) and the output tensor (..., M) is ``C`` transposed.
    * ``gemm``: activation x activation ``input @ input_b`` (e.g. attention), ``batch``
      independent GEMMs of ``shape`` (leading dims of the operands). Zero points of both
      operands are nonzero in general: the array produces raw int32 (OutFormat.INT32) and the
      host adds the :func:`planner.zero_points.fold_matmul_integer` correction (``rowsum``/``colsum``,
      scalar host work) before requantising (``host_correction = True``).

    Requantisation (per output channel ``m``, :func:`spec.golden.requantize`): ``bias`` int32
    (the ONNX bias plus the zero-point fold), ``multiplier`` / ``shift`` int32 from
    ``in_scale * weight_scale[m] / out_scale``, ``out_zero_point``, ``[act_min, act_max]``.
    All zero points are in the int8 domain (a uint8 tensor is stored as ``x - 128``).
    """

    name: str
    kind: LayerKind
    op_type: str
    input: str
    output: str
    shape: ConvShape | GemmShape
    weights: np.ndarray | None
    bias: np.ndarray
    multiplier: np.ndarray
    shift: np.ndarray
    in_scale: float
    in_zero_point: int
    weight_scale: np.ndarray
    out_scale: float
    out_zero_point: int
    act_min: int
    act_max: int
    activation: str = "none"
    halo: int = 0
    input_b: str | None = None
    b_scale: float = 1.0
    b_zero_point: int = 0
    batch: int = 1
    host_correction: bool = False
    in_offset: int = 0          # 128 when the input tensor is uint8 (stored as x - 128)
    out_offset: int = 0         # 128 when the output tensor is uint8
    in_shape: tuple[int, ...] = ()
    out_shape: tuple[int, ...] = ()
    source_nodes: tuple[str, ...] = ()
    #: The layer runs on the depthwise mesh (set by the compiler for a
    #: :func:`planner.dwcost.mesh_shape`
    #: convolution on a config with ``dw_mesh``): it reads its input unpadded, the record's
    #: ``pad_value`` (``halo``, the input zero point) standing for the padding.
    mesh: bool = False

    @property
    def macs(self) -> int:
        return self.shape.macs * self.batch

    @property
    def in_layout(self) -> tuple:
        """The layout the layer reads its input in: ``("nchw", pads, halo)`` for a convolution
        (its padding stored with the tensor), else ``("fm", (0, 0, 0, 0), 0)``."""
        if self.kind == "conv" and self.mesh:
            return ("nchw", (0, 0, 0, 0), self.halo)
        if self.kind == "conv":
            s = self.shape
            return ("nchw", (s.pad_top, s.pad_left, s.pad_bottom, s.pad_right), self.halo)
        return ("fm", (0, 0, 0, 0), 0)

    @property
    def out_layout(self) -> tuple:
        """The default layout of the layer's output (as the host reads it back)."""
        return ("nchw", (0, 0, 0, 0), 0) if self.kind == "conv" else ("fm", (0, 0, 0, 0), 0)

    @property
    def inputs(self) -> tuple[str, ...]:
        return (self.input,) if self.input_b is None else (self.input, self.input_b)

    @property
    def outputs(self) -> tuple[str, ...]:
        return (self.output,)


@dataclasses.dataclass(frozen=True, eq=False)
class HostOp:
    """An operator left to the host (float semantics of the QDQ graph, or integer Q/DQ)."""

    node: Node

    @property
    def name(self) -> str:
        return self.node.name

    @property
    def op_type(self) -> str:
        return self.node.op_type

    @property
    def inputs(self) -> tuple[str, ...]:
        return tuple(self.node.inputs)

    @property
    def outputs(self) -> tuple[str, ...]:
        return tuple(n for n in self.node.outputs if n)


Step = AccelLayer | HostOp


@dataclasses.dataclass
class Lowered:
    """A quantised network as steps in execution order, over the tensors of ``graph``."""

    graph: Graph
    steps: list[Step]
    removed: list[str]            # nodes eliminated as dead code (folded into layers)
    #: Conv/Gemm/MatMul nodes left on the host, with the reason no pattern matched.
    unmatched: dict[str, str] = dataclasses.field(default_factory=dict)

    @property
    def layers(self) -> list[AccelLayer]:
        return [s for s in self.steps if isinstance(s, AccelLayer)]

    @property
    def host_ops(self) -> list[HostOp]:
        return [s for s in self.steps if isinstance(s, HostOp)]


def _per_channel(bias: np.ndarray, m: int) -> np.ndarray:
    """``bias`` as ``m`` per-output-channel values: a scalar, or ``(m,)`` / ``(1, m)``, the
    shapes that broadcast along the output's channel axis only. A Gemm's ``C`` may also be
    ``(rows, 1)`` or ``(rows, m)``, a bias per row (token); the accelerator's bias is per
    channel, so such a layer is not matched (it runs on the host). Flattening such a ``C``
    when ``rows == m`` used to apply it along the wrong axis."""
    shape = bias.shape
    if not (bias.ndim <= 1 and bias.size in (1, m)
            or bias.ndim == 2 and shape[0] == 1 and shape[1] in (1, m)):
        raise _NoMatch(f"bias of shape {shape} is not per output channel (a scalar, ({m},) "
                       f"or (1, {m}))")
    return np.broadcast_to(bias.reshape(-1), (m,))


class _NoMatch(Exception):
    """The node does not match an accelerator pattern (it stays a host op); the message says
    why."""


def _scalar(arr, what: str) -> float:
    a = np.asarray(arr)
    if a.size != 1:
        raise _NoMatch(f"{what} is not per-tensor (shape {a.shape})")
    return a.reshape(()).item()


def _not_negative(scale, what: str):
    """``scale`` if no element is negative, else :class:`_NoMatch`: the requantiser's
    multipliers and the activation bounds assume positive scales (a negative one is well
    defined in ONNX, and the host runs it)."""
    if np.any(np.asarray(scale, np.float64) < 0):
        raise _NoMatch(f"{what} is negative (the requantiser's multipliers are positive)")
    return scale


def _qparams(g: Graph, scale_name: str, zp_name: str, what: str):
    scale = g.const(scale_name)
    if scale is None:
        raise _NoMatch(f"{what} scale {scale_name!r} is not a constant")
    zp = g.const(zp_name) if zp_name else None
    return _not_negative(scale, f"{what} scale {scale_name!r}"), zp


def _int8_domain(zp, what: str) -> tuple[int, int]:
    """(zero point in the int8 domain, offset) for an int8/uint8 activation zero point."""
    if zp is None:
        return 0, 0
    zp = np.asarray(zp)
    if zp.dtype == np.uint8:
        return int(_scalar(zp, what)) - 128, 128
    if zp.dtype == np.int8:
        return int(_scalar(zp, what)), 0
    raise _NoMatch(f"{what} dtype {zp.dtype} is not int8 or uint8")


class _Lowerer:
    def __init__(self, g: Graph):
        self.g = g
        self.consumers: dict[str, list[Node]] = {}
        for n in g.nodes:
            for i in n.inputs:
                if i:
                    self.consumers.setdefault(i, []).append(n)
        self.producers = {o: n for n in g.nodes for o in n.outputs if o}

    def dq_source(self, name: str, what: str):
        """(quantised tensor, scale, zero point, axis) behind DequantizeLinear ``name``."""
        dq = self.producers.get(name)
        if dq is None or dq.op_type != "DequantizeLinear":
            raise _NoMatch(f"{what} {name!r} is not produced by DequantizeLinear")
        scale, zp = _qparams(self.g, dq.input(1), dq.input(2), what)
        return dq.input(0), scale, zp, int(dq.attrs.get("axis", 1)), dq

    def output_chain(self, node: Node):
        """Follow ``node``'s output through an optional Relu/Clip into one QuantizeLinear:
        (q node, activation, clip bounds (float) or None, fused nodes)."""
        out = node.outputs[0]
        users = self.consumers.get(out, [])
        fused = []
        activation, bounds = "none", None
        if len(users) == 1 and users[0].op_type in ("Relu", "Clip") \
                and out not in self.g.outputs:
            act = users[0]
            if act.op_type == "Relu":
                activation = "relu"
            else:
                lo = self.g.const(act.input(1)) if act.input(1) else None
                hi = self.g.const(act.input(2)) if act.input(2) else None
                if (act.input(1) and lo is None) or (act.input(2) and hi is None):
                    raise _NoMatch("Clip bounds are not constants")
                lo = -math.inf if lo is None else float(np.asarray(lo).reshape(()))
                hi = math.inf if hi is None else float(np.asarray(hi).reshape(()))
                activation, bounds = "clip", (lo, hi)
                if lo == 0.0 and hi == 6.0:
                    activation = "relu6"
                elif lo == 0.0 and hi == math.inf:
                    activation = "relu"
            fused.append(act)
            out = act.outputs[0]
            users = self.consumers.get(out, [])
        if len(users) != 1 or users[0].op_type != "QuantizeLinear" or out in self.g.outputs:
            raise _NoMatch("output does not go into exactly one QuantizeLinear")
        return users[0], activation, bounds, fused

    def out_qparams(self, q: Node):
        scale, zp = _qparams(self.g, q.input(1), q.input(2), "output")
        s = float(_scalar(scale, "output scale"))
        z, off = _int8_domain(zp if zp is not None else np.zeros((), np.uint8), "output zero "
                              "point")
        return s, z, off

    def bounds(self, activation, clip, zp: int, scale: float) -> tuple[int, int]:
        if activation in ("none", "relu", "relu6"):
            return activation_bounds(activation, zp, scale)
        lo, hi = clip
        qlo = -128 if lo == -math.inf else max(-128, zp + round(lo / scale))
        qhi = 127 if hi == math.inf else min(127, zp + round(hi / scale))
        if qlo > qhi:
            raise _NoMatch(f"Clip [{lo}, {hi}] is empty after quantisation")
        return qlo, qhi

    # -- patterns ----------------------------------------------------------------------------

    def match(self, node: Node) -> AccelLayer:
        if node.op_type in ("Conv", "Gemm", "MatMul"):
            return self.match_qdq(node)
        if node.op_type in ("QLinearConv", "QLinearMatMul"):
            return self.match_qlinear(node)
        raise _NoMatch(f"{node.op_type} is not an accelerator operator")

    def match_qdq(self, node: Node) -> AccelLayer:
        x, xs, xz, _, _ = self.dq_source(node.input(0), "input A")
        xs = float(_scalar(xs, "input scale"))
        xz, x_off = _int8_domain(xz, "input zero point")
        if self.g.const(x) is not None:
            raise _NoMatch("input A is a constant")
        w, ws, wz, axis, _ = self.dq_source(node.input(1), "input B")
        q, activation, clip, fused = self.output_chain(node)
        ys, yz, y_off = self.out_qparams(q)
        wq = self.g.const(w)
        common = dict(name=node.name, op_type=node.op_type, input=x, output=q.outputs[0],
                      in_scale=xs, in_zero_point=xz, in_offset=x_off, out_scale=ys,
                      out_zero_point=yz, out_offset=y_off,
                      in_shape=self.static(x), out_shape=self.static(q.outputs[0]),
                      source_nodes=tuple([node.name] + [f.name for f in fused] + [q.name]))
        if wq is None:
            if node.op_type != "MatMul":
                raise _NoMatch(f"{node.op_type} weight is not a constant")
            return self.act_gemm(node, common, w, ws, wz, activation, clip)
        if wq.dtype != np.int8:
            raise _NoMatch(f"weights are {wq.dtype}, not int8")
        if wz is not None and np.any(np.asarray(wz) != 0):
            raise _NoMatch("weight zero point is not 0 (asymmetric weights)")
        bias_name = node.input(2) if node.op_type in ("Conv", "Gemm") else ""
        if node.op_type == "Conv":
            if wq.ndim != 4:
                raise _NoMatch(f"only 2-D convolutions are accelerated (weight rank {wq.ndim})")
            w_oc, ws_axis = wq, 0
        elif node.op_type == "Gemm":
            if node.attrs.get("transA", 0) or node.attrs.get("alpha", 1.0) != 1.0 \
                    or node.attrs.get("beta", 1.0) != 1.0:
                raise _NoMatch("Gemm with transA, alpha or beta is not accelerated")
            trans_b = bool(node.attrs.get("transB", 0))
            w_oc, ws_axis = (wq, 0) if trans_b else (wq.T, 1)
        else:
            if wq.ndim != 2:
                raise _NoMatch(f"MatMul weight of rank {wq.ndim} is not accelerated")
            w_oc, ws_axis = wq.T, 1
        m = w_oc.shape[0]
        ws = np.asarray(ws, np.float64).reshape(-1)
        if ws.size == 1:
            ws = np.full(m, ws[0])
        elif ws.size != m or (axis % wq.ndim) != ws_axis:
            raise _NoMatch(f"weight scale of shape {ws.shape} (axis {axis}) is not per output "
                           f"channel")
        bias = self.bias(bias_name, m, xs, ws)
        act_min, act_max = self.bounds(activation, clip, yz, ys)
        if node.op_type == "Conv":
            shape, halo = self.conv_shape(node, x, wq), xz
            corr = -xz * w_oc.reshape(m, -1).astype(np.int64).sum(axis=1)
            kind, weights = "conv", wq
        else:
            xshape = self.static(x)
            if xshape[-1] != w_oc.shape[1]:
                raise _NoMatch(f"input {x!r} last dim {xshape[-1]} != weight K {w_oc.shape[1]}")
            rows = int(np.prod(xshape[:-1]))
            shape, halo = GemmShape(m, int(w_oc.shape[1]), rows), 0
            corr = -xz * w_oc.astype(np.int64).sum(axis=1)
            kind, weights = "fc", np.ascontiguousarray(w_oc)
        total = bias.astype(np.int64) + corr
        if total.min() < INT32_MIN or total.max() > INT32_MAX:
            raise _NoMatch("bias plus zero-point correction overflows int32")
        mult, shift = self.requant(xs * ws / ys)
        return AccelLayer(kind=kind, shape=shape, weights=weights, bias=total.astype(np.int32),
                          multiplier=mult, shift=shift, weight_scale=ws, act_min=act_min,
                          act_max=act_max, activation=activation, halo=halo, **common)

    def act_gemm(self, node, common, b, bs, bz, activation, clip) -> AccelLayer:
        bs = float(_scalar(bs, "input B scale"))
        bz, b_off = _int8_domain(bz, "input B zero point")
        if b_off or common["in_offset"]:
            raise _NoMatch("uint8 activation x activation MatMul is not accelerated")
        ashape, bshape = self.static(common["input"]), self.static(b)
        if len(ashape) < 2 or len(bshape) < 2 or ashape[:-2] != bshape[:-2]:
            raise _NoMatch(f"batched MatMul {ashape} @ {bshape} needs equal batch dims")
        batch = int(np.prod(ashape[:-2])) if len(ashape) > 2 else 1
        shape = GemmShape(ashape[-2], ashape[-1], bshape[-1])
        ys, yz = common["out_scale"], common["out_zero_point"]
        act_min, act_max = self.bounds(activation, clip, yz, ys)
        mult, shift = self.requant(np.full(shape.m, common["in_scale"] * bs / ys))
        return AccelLayer(kind="gemm", shape=shape, weights=None,
                          bias=np.zeros(shape.m, np.int32), multiplier=mult, shift=shift,
                          weight_scale=np.full(shape.m, bs), act_min=act_min, act_max=act_max,
                          activation=activation, input_b=b, b_scale=bs, b_zero_point=bz,
                          batch=batch, host_correction=True, **common)

    def match_qlinear(self, node: Node) -> AccelLayer:
        """QLinearConv (x, xs, xz, w, ws, wz, ys, yz, B) and QLinearMatMul (a, as, az, b, bs,
        bz, ys, yz), mapped onto the same layer as the QDQ pattern."""
        g = self.g
        x = node.input(0)
        scales = [g.const(node.input(i)) for i in (1, 4, 6)]
        if any(v is None for v in scales):
            raise _NoMatch("QLinear scales are not constants")
        for v, i in zip(scales, (1, 4, 6)):
            _not_negative(v, f"scale {node.input(i)!r}")
        xs = float(_scalar(scales[0], "x scale"))
        xz, x_off = _int8_domain(g.const(node.input(2)), "x zero point")
        wq, ws, wz = g.const(node.input(3)), scales[1], g.const(node.input(5))
        ys = float(_scalar(scales[2], "y scale"))
        yz, y_off = _int8_domain(g.const(node.input(7)), "y zero point")
        out = node.outputs[0]
        common = dict(name=node.name, op_type=node.op_type, input=x, output=out, in_scale=xs,
                      in_zero_point=xz, in_offset=x_off, out_scale=ys, out_zero_point=yz,
                      out_offset=y_off, in_shape=self.static(x), out_shape=self.static(out),
                      source_nodes=(node.name,))
        if wq is None:
            raise _NoMatch("QLinear weight is not a constant")
        if node.op_type == "QLinearMatMul" and wq.ndim != 2:
            # checked before the zero point is subtracted, which broadcasts a 1-D weight to 2-D
            raise _NoMatch(f"QLinearMatMul weight of rank {wq.ndim} is not accelerated")
        if wq.dtype == np.uint8:
            wd = wq.astype(np.int64) - np.asarray(wz, np.int64).reshape(
                -1, *[1] * (wq.ndim - 1)) if node.op_type == "QLinearConv" else \
                wq.astype(np.int64) - np.asarray(wz, np.int64).reshape(1, -1)
        else:
            wd = wq.astype(np.int64) - (0 if wz is None else (
                np.asarray(wz, np.int64).reshape(-1, *[1] * (wq.ndim - 1))
                if node.op_type == "QLinearConv" else np.asarray(wz, np.int64).reshape(1, -1)))
        if wd.min() < -128 or wd.max() > 127:
            raise _NoMatch("w - w_zero_point does not fit int8")
        wd = wd.astype(np.int8)
        if node.op_type == "QLinearConv":
            m = wd.shape[0]
            w_oc = wd
        else:
            if wd.ndim != 2:
                raise _NoMatch("QLinearMatMul weight is not 2-D")
            w_oc = np.ascontiguousarray(wd.T)
            m = w_oc.shape[0]
        ws = np.asarray(ws, np.float64).reshape(-1)
        ws = np.full(m, ws[0]) if ws.size == 1 else ws
        if ws.size != m:
            raise _NoMatch("weight scale is not per tensor or per output channel")
        bias = np.zeros(m, np.int64)
        if node.op_type == "QLinearConv" and node.input(8):
            b = g.const(node.input(8))
            if b is None:
                raise _NoMatch("QLinearConv bias is not a constant")
            bias = b.astype(np.int64)
        if node.op_type == "QLinearConv":
            shape = self.conv_shape(node, x, wd)
            corr = -xz * w_oc.reshape(m, -1).astype(np.int64).sum(axis=1)
            kind, weights, halo = "conv", wd, xz
        else:
            xshape = self.static(x)
            shape = GemmShape(m, int(w_oc.shape[1]), int(np.prod(xshape[:-1])))
            corr = -xz * w_oc.astype(np.int64).sum(axis=1)
            kind, weights, halo = "fc", w_oc, 0
        total = bias + corr
        if total.min() < INT32_MIN or total.max() > INT32_MAX:
            raise _NoMatch("bias plus zero-point correction overflows int32")
        act_min, act_max = activation_bounds("none", yz, ys)
        mult, shift = self.requant(xs * ws / ys)
        return AccelLayer(kind=kind, shape=shape, weights=weights, bias=total.astype(np.int32),
                          multiplier=mult, shift=shift, weight_scale=ws, act_min=act_min,
                          act_max=act_max, halo=halo, **common)

    # -- helpers -----------------------------------------------------------------------------

    def static(self, name: str) -> tuple[int, ...]:
        t = self.g.tensors.get(name)
        if t is None or not t.is_static:
            custom = self._unshaped_custom(name)
            why = (f": shape inference stops at {custom}, an op of domain {custom.domain!r} "
                   "whose output shapes it does not know" if custom is not None
                   else " (give input shapes)")
            raise _NoMatch(f"tensor {name!r} has no static shape{why}")
        return tuple(t.shape)

    def _unshaped_custom(self, name: str):
        """The first node of a non-ONNX domain above tensor ``name`` along tensors without a
        static shape (what stopped shape inference there), or None."""
        todo, seen = [name], set()
        while todo:
            node = self.producers.get(todo.pop())
            if node is None or node.name in seen:
                continue
            seen.add(node.name)
            if node.domain not in ("", "ai.onnx"):
                return node
            todo += [i for i in node.inputs if i and not getattr(self.g.tensors.get(i),
                                                                 "is_static", False)]
        return None

    def bias(self, name: str, m: int, xs: float, ws: np.ndarray) -> np.ndarray:
        """int32 bias at scale ``xs * ws[m]``: the quantised bias behind a DequantizeLinear when
        its scale is that (onnxruntime's convention), else the float bias re-quantised."""
        if not name:
            return np.zeros(m, np.int64)
        want = xs * ws
        dq = self.producers.get(name)
        if dq is not None and dq.op_type == "DequantizeLinear":
            bq, bs, bz = self.g.const(dq.input(0)), self.g.const(dq.input(1)), \
                self.g.const(dq.input(2)) if dq.input(2) else None
            if bq is None or bs is None:
                raise _NoMatch("bias is not a constant")
            bq = _per_channel(bq, m)
            bs = np.broadcast_to(np.asarray(bs, np.float64).reshape(-1), (m,))
            if bq.dtype == np.int32 and (bz is None or not np.any(bz)) \
                    and np.allclose(bs, want, rtol=1e-6, atol=0):
                return bq.astype(np.int64)
            real = (bq.astype(np.float64) - (0 if bz is None else np.asarray(
                bz, np.float64).reshape(-1))) * bs
        else:
            real = self.g.const(name)
            if real is None:
                raise _NoMatch("bias is not a constant")
            real = _per_channel(np.asarray(real, np.float64), m)
        return np.round(real / want).astype(np.int64)

    @staticmethod
    def requant(real: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per-channel (multiplier, shift); a scale below ``2**-32`` (an all-zero weight
        channel) rounds every int32 accumulator to 0, as ``mult = 1, shift = 31`` does. One
        that is negative, not finite or at least ``2**31`` leaves the layer to the host."""
        mult, shift = [], []
        for s in np.asarray(real, np.float64).reshape(-1):
            if not 0 <= s < 2.0 ** 31:
                raise _NoMatch(f"the real multiplier in_scale x weight_scale / out_scale = {s} "
                               f"is outside the requantiser's range [0, 2**31)")
            if s < 2.0 ** -32:
                mq, sh = 1, 31
            else:
                try:
                    mq, sh = quantize_multiplier(float(s))
                except ValueError as e:     # (just below 2**31 it rounds up to 2**31)
                    raise _NoMatch(f"the real multiplier in_scale x weight_scale / out_scale "
                                   f"= {s} is outside the requantiser's range ({e})") from None
            mult.append(mq)
            shift.append(sh)
        return np.array(mult, np.int32), np.array(shift, np.int32)

    def conv_shape(self, node: Node, x: str, w: np.ndarray) -> ConvShape:
        xshape = self.static(x)
        if len(xshape) != 4:
            raise _NoMatch(f"conv input rank {len(xshape)} is not 4")
        a = node.attrs
        # what ONNX requires of the weights (onnx.checker does not check it; onnxruntime
        # refuses such a node): a malformed model, not a pattern that does not match
        what = f"{node.op_type} node {node.name!r}"
        kernel = [int(v) for v in a.get("kernel_shape", w.shape[2:])]
        if w.ndim != 4 or kernel != [int(v) for v in w.shape[2:]]:
            raise ModelError(f"{what}: kernel_shape {kernel} does not match its weights of "
                             f"shape {tuple(w.shape)} (K, C/group, kH, kW)")
        groups = int(a.get("group", 1))
        if groups < 1 or w.shape[0] % groups or w.shape[1] * groups != xshape[1]:
            raise ModelError(f"{what}: group={groups} with weights of shape {tuple(w.shape)} "
                             f"does not fit its input's {xshape[1]} channels (ONNX requires "
                             f"C = group x weights' dim 1 = {w.shape[1] * groups} and K a "
                             f"multiple of group)")
        strides = [int(v) for v in a.get("strides", [1, 1])]
        dil = [int(v) for v in a.get("dilations", [1, 1])]
        pads = resolve_conv_pads(a.get("auto_pad", "NOTSET"), a.get("pads"), xshape[2:], kernel,
                                 strides, dil)
        try:
            return ConvShape(batch=xshape[0], in_channels=xshape[1], height=xshape[2],
                             width=xshape[3], out_channels=w.shape[0], kernel_h=kernel[0],
                             kernel_w=kernel[1], stride_h=strides[0], stride_w=strides[1],
                             pad_top=pads[0], pad_left=pads[1], pad_bottom=pads[2],
                             pad_right=pads[3], dilation_h=dil[0], dilation_w=dil[1],
                             groups=groups)
        except ValueError as e:
            raise _NoMatch(str(e)) from None


#: where each quantising operator keeps its scales: (input index, dividing by it)
_SCALES = {"QuantizeLinear": ((1, True),), "DequantizeLinear": ((1, False),),
           "QLinearConv": ((1, False), (4, False), (6, True)),
           "QLinearMatMul": ((1, False), (4, False), (6, True))}


def check_scales(g: Graph) -> None:
    """Raise :class:`ModelError` for a constant quantisation scale that is not a finite number,
    or zero where the operator divides by it (QuantizeLinear's ``y_scale``, QLinear*'s output
    scale): onnxruntime would compute infinities and NaNs from it. A zero DequantizeLinear
    scale (an all-zero weight channel) and negative scales are well defined; the matchers
    leave layers with negative scales to the host (:meth:`_Lowerer.scale`)."""
    for node in g.nodes:
        for index, divides in _SCALES.get(node.op_type, ()):
            name = node.input(index)
            value = g.const(name) if name else None
            if value is None:
                continue
            s = np.asarray(value, np.float64)
            bad = ~np.isfinite(s) | ((s == 0) if divides else False)
            if bad.any():
                need = "a finite non-zero number" if divides else "a finite number"
                where = "" if s.ndim == 0 else f" (element {int(np.flatnonzero(bad)[0])})"
                raise ModelError(f"{node.op_type} node {node.name!r}: scale {name!r} must be "
                                 f"{need}, not {s[bad].flat[0]}{where}")


def lower(g: Graph) -> Lowered:
    """Map a quantised graph onto accelerator layers and host ops (module docstring).

    Raises :class:`ModelError` only for a malformed graph (among them scales that are not
    finite: :func:`check_scales`); an operator that does not match a pattern stays a host op
    and :attr:`Lowered.unmatched` says why."""
    check_scales(g)
    low = _Lowerer(g)
    claimed: dict[str, AccelLayer] = {}        # node name -> layer that absorbed it
    anchors: dict[str, AccelLayer] = {}
    reasons: dict[str, str] = {}
    for node in g.nodes:
        if node.name in claimed:
            continue
        try:
            layer = low.match(node)
        except _NoMatch as e:
            if node.op_type in ("Conv", "Gemm", "MatMul", "QLinearConv", "QLinearMatMul"):
                reasons[node.name] = str(e)
            continue
        anchors[node.name] = layer
        for name in layer.source_nodes:
            claimed[name] = layer
    steps: list[Step] = []
    for node in g.nodes:
        if node.name in anchors:
            steps.append(anchors[node.name])
        elif node.name not in claimed:
            steps.append(HostOp(node))
    steps, dead = _eliminate_dead(steps, g.outputs)
    removed = sorted(set(claimed) - set(anchors)) + dead
    return Lowered(graph=g, steps=steps, removed=removed, unmatched=reasons)


def _eliminate_dead(steps: list[Step], outputs: Sequence[str]) -> tuple[list[Step], list[str]]:
    """Drop steps none of whose outputs is read (iterated to a fixed point)."""
    dead: list[str] = []
    while True:
        read = set(outputs) | {i for s in steps for i in s.inputs if i}
        keep = [s for s in steps if any(o in read for o in s.outputs)]
        if len(keep) == len(steps):
            return steps, dead
        dead += [s.name for s in steps if s not in keep]
        steps = keep


def check_lowered(lowered: Lowered) -> None:
    """Raise :class:`ModelError` if a step reads a tensor no earlier step or input defines."""
    g = lowered.graph
    defined = set(g.inputs) | {n for n, t in g.tensors.items() if t.is_const}
    for s in lowered.steps:
        for i in s.inputs:
            if i and i not in defined:
                raise ModelError(f"step {s.name!r} reads {i!r} before it is defined")
        defined.update(s.outputs)
