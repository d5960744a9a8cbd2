"""Bit-exact numpy int8 reference of a lowered network (:class:`planner.net.lower.Lowered`).

Accelerator layers run exactly as the hardware computes them: :func:`spec.golden.conv2d_int8` on
the padded layout (halo = input zero point) or :func:`spec.golden.gemm_int8`, then
:func:`spec.golden.requantize` with the layer's bias, multiplier, shift, zero point and bounds;
activation x activation GEMMs add :func:`planner.zero_points.fold_matmul_integer`'s host correction
before requantising. Host ops run in numpy with the QDQ graph's semantics: QuantizeLinear
(``round_half_even(x / scale) + zp``, saturated; float32), DequantizeLinear
(``(x - zp) * scale``, float32) and float32 operators between them. Common operators have numpy
implementations here; every other standard operator runs through ``onnx.reference`` (numpy),
so nothing is refused unless no implementation exists at all (an unknown domain), which raises
:class:`HostOpError` naming the operator.

:func:`compare_with_onnxruntime` runs the quantised model on onnxruntime with the same inputs
and reports, per graph output, the max abs difference in output LSBs and the share of exactly
equal elements. onnxruntime requantises in float (one round-half-even) where the hardware uses
gemmlowp's two roundings, and fuses host ops into integer kernels, so small differences are
expected (docs/networks.md states the measured ones).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping

import numpy as np

from spec import golden
from planner.zero_points import finish, fold_matmul_integer

from .graph import Graph, ModelError, Node
from .lower import AccelLayer, Lowered

__all__ = ["HostOpError", "run", "run_layer", "requantise_conv", "HostExecutor", "Comparison",
           "compare_with_onnxruntime", "onnxruntime_outputs"]


class HostOpError(ModelError):
    """A host operator has no numpy implementation; the message names it."""


def _to_int8(x: np.ndarray, offset: int, what: str = "tensor") -> np.ndarray:
    """``x`` (int8, or uint8 with ``offset`` 128) as int8; ``what`` names it in the error."""
    if offset:
        if x.dtype != np.uint8:
            raise ModelError(f"{what}: expected a uint8 tensor, got {x.dtype}")
        return (x.astype(np.int16) - offset).astype(np.int8)
    if x.dtype != np.int8:
        raise ModelError(f"{what}: expected an int8 tensor, got {x.dtype}")
    return x


def _from_int8(y: np.ndarray, offset: int) -> np.ndarray:
    return (y.astype(np.int16) + offset).astype(np.uint8) if offset else y


def _requant(layer: AccelLayer, acc: np.ndarray) -> np.ndarray:
    return golden.requantize(acc, multiplier=layer.multiplier, shift=layer.shift,
                             bias=layer.bias, zero_point=layer.out_zero_point,
                             act_min=layer.act_min, act_max=layer.act_max)


def requantise_conv(layer: AccelLayer, acc: np.ndarray) -> np.ndarray:
    """The output tensor of convolution ``layer`` from its int32 accumulators ``acc`` (N, K,
    P, Q), the sums without the bias: this adds the bias and applies the requantisation and
    clamp of the layer, as the hardware's post-processor does."""
    n, k, p, q = acc.shape
    y = _requant(layer, np.ascontiguousarray(acc.transpose(1, 0, 2, 3)).reshape(k, n * p * q))
    return _from_int8(np.ascontiguousarray(y.reshape(k, n, p, q).transpose(1, 0, 2, 3)),
                      layer.out_offset)


def run_layer(layer: AccelLayer, env: Mapping[str, np.ndarray]) -> np.ndarray:
    """The int8 (or uint8) output tensor of one accelerator layer."""
    x8 = _to_int8(np.asarray(env[layer.input]), layer.in_offset,
                  f"layer {layer.name!r}'s input {layer.input!r}")
    if layer.kind == "conv":
        s = layer.shape
        xp = np.pad(x8, ((0, 0), (0, 0), (s.pad_top, s.pad_bottom), (s.pad_left, s.pad_right)),
                    constant_values=layer.halo)
        acc = golden.conv2d_int8(xp, layer.weights, stride=(s.stride_h, s.stride_w),
                                 dilation=(s.dilation_h, s.dilation_w), groups=s.groups)
        return requantise_conv(layer, acc)
    elif layer.kind == "fc":
        rows = x8.reshape(-1, layer.shape.k)
        acc = golden.gemm_int8(layer.weights, np.ascontiguousarray(rows.T))
        y = _requant(layer, acc).T.reshape(*x8.shape[:-1], layer.shape.m)
    elif layer.kind == "gemm":
        b8 = _to_int8(np.asarray(env[layer.input_b]), 0,
                      f"layer {layer.name!r}'s input {layer.input_b!r}")
        s = layer.shape
        a3, b3 = x8.reshape(-1, s.m, s.k), b8.reshape(-1, s.k, s.n)
        outs = []
        for a, b in zip(a3, b3):
            fold = fold_matmul_integer(a, b, np.int8(layer.in_zero_point),
                                       np.int8(layer.b_zero_point))
            acc = finish(golden.gemm_int8(fold.a8, fold.b8), fold.correction)
            outs.append(_requant(layer, acc))
        y = np.stack(outs).reshape(*x8.shape[:-1], s.n)
    else:
        raise ModelError(f"layer {layer.name!r}: unknown kind {layer.kind!r}")
    return _from_int8(np.ascontiguousarray(y), layer.out_offset)


# -- host ops -------------------------------------------------------------------------------------

def _axis_param(p: np.ndarray, x: np.ndarray, axis: int) -> np.ndarray:
    p = np.asarray(p)
    if p.ndim == 0 or p.size == 1:
        return p.reshape(())
    shape = [1] * x.ndim
    shape[axis % x.ndim] = p.size
    return p.reshape(shape)


def _blocked(n: Node) -> None:
    if n.attrs.get("block_size", 0):
        raise HostOpError(f"{n}: blocked quantisation (block_size="
                          f"{n.attrs['block_size']}) is not supported on the host")


def _output_dtype(n: Node) -> np.dtype:
    """The numpy type of a Q/DQ node's ``output_dtype`` attribute (opsets 21 and 23)."""
    from onnx import helper

    return np.dtype(helper.tensor_dtype_to_np_dtype(n.attrs["output_dtype"]))


def _quantize(n: Node, x, scale, zp=None) -> np.ndarray:
    """QuantizeLinear: the output type is the zero point's, else the ``output_dtype``
    attribute's (opset 21), else uint8."""
    _blocked(n)
    axis = n.attrs.get("axis", 1)
    x = np.asarray(x, np.float32)
    if zp is not None:
        dtype = np.asarray(zp).dtype
    elif n.attrs.get("output_dtype", 0):
        dtype = _output_dtype(n)
    else:
        dtype = np.dtype(np.uint8)
    if dtype.kind not in "iu":
        raise HostOpError(f"{n}: QuantizeLinear to {dtype} is not supported on the host "
                          f"(integer outputs only)")
    info = np.iinfo(dtype)
    scale = _axis_param(np.asarray(scale, np.float32), x, axis)
    zp = 0 if zp is None else _axis_param(np.asarray(zp, np.int32), x, axis)
    q = np.rint(x / scale).astype(np.float64) + zp
    return np.clip(q, info.min, info.max).astype(dtype)


def _dequantize(n: Node, x, scale, zp=None) -> np.ndarray:
    _blocked(n)
    axis = n.attrs.get("axis", 1)
    x = np.asarray(x)
    # the output is of the scale's type (float16 too), or output_dtype's (opset 23)
    out = np.asarray(scale).dtype
    if n.attrs.get("output_dtype", 0):
        out = _output_dtype(n)
    scale = _axis_param(np.asarray(scale, np.float32), x, axis)
    zp = 0 if zp is None else _axis_param(np.asarray(zp, np.int32), x, axis)
    y = (x.astype(np.int32) - zp).astype(np.float32) * scale
    return y.astype(out) if out.kind == "f" else y


def _softmax_family(n: Node, opset: int, x) -> list[np.ndarray]:
    """Softmax, LogSoftmax and Hardmax. From opset 13 along ``axis`` (default -1); before it,
    over the input coerced to 2-D at ``axis`` (default 1): every dimension from ``axis`` on
    is one row (onnx.reference applies the opset-13 rule to older models)."""
    x = np.asarray(x)
    shape = x.shape
    if opset >= 13:
        axis = n.attrs.get("axis", -1) % max(x.ndim, 1)
    else:
        a = n.attrs.get("axis", 1)
        a = a + x.ndim if a < 0 else a
        x, axis = x.reshape(int(np.prod(shape[:a])), -1), 1
    if n.op_type == "Hardmax":
        first = np.argmax(x, axis=axis)
        y = (np.arange(x.shape[axis]).reshape([-1 if d == axis else 1 for d in range(x.ndim)])
             == np.expand_dims(first, axis)).astype(x.dtype)
    else:
        z = x.astype(_work_type(x)) - x.max(axis=axis, keepdims=True)
        total = np.exp(z).sum(axis=axis, keepdims=True)
        y = (z - np.log(total) if n.op_type == "LogSoftmax" else np.exp(z) / total)
        y = y.astype(x.dtype)
    return [y.reshape(shape)]


def _work_type(x: np.ndarray) -> type:
    """The float type a host operator computes ``x`` in: float64 for float64, else float32."""
    return np.float64 if x.dtype == np.float64 else np.float32


def _divide(n: Node, a, b):
    """Div: integer operands divide with truncation toward zero (C, onnxruntime), keeping
    their type; numpy's ``/`` gave float64."""
    a, b = np.asarray(a), np.asarray(b)
    dtype = np.result_type(a, b)
    if dtype.kind not in "iu":
        return a / b
    if not np.all(b):
        raise HostOpError(f"{n}: integer division by zero")
    q = np.floor_divide(a, b)
    q = q + ((np.remainder(a, b) != 0) & ((a < 0) != (b < 0)))
    return q.astype(dtype)


def _flatten(n: Node, x) -> np.ndarray:
    """Flatten to ``(prod(shape[:axis]), prod(shape[axis:]))``, ``axis`` in [-rank, rank]."""
    a = n.attrs.get("axis", 1)
    a = a + x.ndim if a < 0 else a
    return x.reshape(int(np.prod(x.shape[:a])), int(np.prod(x.shape[a:])))


def _pool_geometry(n: Node, spatial: tuple[int, ...]):
    """``(kernel, strides, dilations, pad_begin, out)`` of a pooling node over ``spatial``, as
    onnxruntime computes them (``auto_pad``; ``ceil_mode``, whose last window must start
    inside the input or its leading pad)."""
    sp = len(spatial)
    k = list(n.attrs["kernel_shape"])
    st = list(n.attrs.get("strides", [1] * sp))
    dil = list(n.attrs.get("dilations", [1] * sp))
    pads = list(n.attrs.get("pads", [0] * 2 * sp))
    auto = n.attrs.get("auto_pad", "NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else auto
    begin, out = [], []
    for i, size in enumerate(spatial):
        span = (k[i] - 1) * dil[i] + 1
        if auto in ("SAME_UPPER", "SAME_LOWER"):
            o = -(-size // st[i])
            need = max((o - 1) * st[i] + span - size, 0)
            begin.append(need // 2 if auto == "SAME_UPPER" else need - need // 2)
        elif auto == "VALID":
            o = (size - span) // st[i] + 1
            begin.append(0)
        else:
            total = size + pads[i] + pads[sp + i] - span
            if n.attrs.get("ceil_mode", 0):
                o = -(-total // st[i]) + 1
                if (o - 1) * st[i] >= size + pads[i]:
                    o -= 1
            else:
                o = total // st[i] + 1
            begin.append(pads[i])
        out.append(o)
    return k, st, dil, begin, out


def _windows(n: Node, x: np.ndarray):
    """``(output shape, [(valid, clipped coordinates)] per kernel position)`` of a pooling
    node over ``x``, kernel positions in row-major order: ``valid`` marks the output positions
    whose window position lies inside the input, ``clipped`` the spatial coordinates (clipped
    into the input) to read there."""
    sp = x.ndim - 2
    k, st, dil, begin, out = _pool_geometry(n, x.shape[2:])
    grid = np.meshgrid(*[np.arange(o) for o in out], indexing="ij")
    taps = []
    for off in itertools.product(*[range(kk) for kk in k]):
        coords = [grid[i] * st[i] - begin[i] + off[i] * dil[i] for i in range(sp)]
        valid = np.logical_and.reduce([(c >= 0) & (c < x.shape[2 + i])
                                       for i, c in enumerate(coords)])
        taps.append((valid, [np.clip(c, 0, x.shape[2 + i] - 1) for i, c in enumerate(coords)]))
    return (*x.shape[:2], *out), taps


def _maxpool(n: Node, x) -> list[np.ndarray]:
    """MaxPool and its Indices, as onnxruntime computes them: the maximum over each window's
    positions inside the input, and the input's flat index of its first maximum (kernel
    positions in row-major order), batch and channel included, the spatial position row-major
    (``storage_order`` 0) or column-major (1). onnx.reference got the indices wrong (a 2 x 2
    window with the default strides: 28% equal), the values and shape wrong with
    ``ceil_mode`` and pads or ``SAME_LOWER``, and failed on int8 input."""
    x = np.asarray(x)
    sp = x.ndim - 2
    shape, taps = _windows(n, x)
    lowest = np.finfo(x.dtype).min if x.dtype.kind == "f" else np.iinfo(x.dtype).min
    best = np.full(shape, lowest, x.dtype)
    index = np.zeros(shape, np.int64)
    found = np.zeros(shape, bool)
    order = "F" if n.attrs.get("storage_order", 0) else "C"
    for valid, clipped in taps:
        vals = x[(slice(None), slice(None), *clipped)]
        better = valid & (~found | (vals > best))
        best = np.where(better, vals, best)
        index = np.where(better, np.ravel_multi_index(clipped, x.shape[2:], order=order), index)
        found |= valid
    plane = int(np.prod(x.shape[2:]))
    index = index + np.arange(x.shape[0] * x.shape[1]).reshape(
        x.shape[0], x.shape[1], *[1] * sp) * plane
    return [best, index]


def _lppool(n: Node, x) -> list[np.ndarray]:
    """LpPool: ``(sum |x|^p) ** (1/p)`` over each window's positions inside the input (pads add
    zeros), the windows as MaxPool's (onnx.reference got ``ceil_mode`` with pads wrong)."""
    x = np.asarray(x)
    shape, taps = _windows(n, x)
    p = n.attrs.get("p", 2)
    work = _work_type(x)
    total = np.zeros(shape, work)
    for valid, clipped in taps:
        vals = np.abs(x[(slice(None), slice(None), *clipped)].astype(work)) ** p
        total += np.where(valid, vals, 0)
    return [(total ** (1.0 / p)).astype(x.dtype)]


def _lrn(n: Node, x) -> list[np.ndarray]:
    """LRN across channels: ``x / (bias + alpha / size * sum of squares) ** beta``, the sum
    over channels ``c - floor((size-1)/2) .. c + ceil((size-1)/2)`` (onnx.reference was up to
    1.0 off on unit-variance input)."""
    x = np.asarray(x)
    size = n.attrs["size"]
    alpha, beta = n.attrs.get("alpha", 1e-4), n.attrs.get("beta", 0.75)
    bias = n.attrs.get("bias", 1.0)
    work = _work_type(x)
    sq = np.square(x.astype(work))
    total = np.zeros_like(sq)
    channels = x.shape[1]
    for c in range(channels):
        lo, hi = max(0, c - (size - 1) // 2), min(channels - 1, c + size // 2)
        total[:, c] = sq[:, lo:hi + 1].sum(axis=1)
    return [(x.astype(work) / (bias + alpha / size * total) ** beta).astype(x.dtype)]


def _one_hot(n: Node, indices, depth, values) -> list[np.ndarray]:
    """OneHot: ``values[1]`` where the (possibly negative) index along the new ``axis``
    equals the position, ``values[0]`` elsewhere (onnx.reference failed on a 1-element
    ``depth`` tensor)."""
    depth = int(np.asarray(depth).reshape(-1)[0])
    values = np.asarray(values).reshape(-1)
    idx = np.asarray(indices).astype(np.int64)
    idx = np.where(idx < 0, idx + depth, idx)
    axis = n.attrs.get("axis", -1)
    axis = axis + idx.ndim + 1 if axis < 0 else axis
    positions = np.arange(depth).reshape([-1 if d == axis else 1 for d in range(idx.ndim + 1)])
    hot = np.expand_dims(idx, axis) == positions
    return [np.where(hot, values[1], values[0]).astype(values.dtype)]


def _matmul_integer(n: Node, a, b, az=None, bz=None) -> list[np.ndarray]:
    """MatMulInteger in int32 with the operator's zero-point forms: ``a``'s a scalar, one per
    row of a 2-D ``a`` (``(M,)``) or ``[..., M, 1]``; ``b``'s a scalar, one per column
    (``(N,)``) or ``[..., 1, N]`` (onnx.reference refused the per-row ``(M,)`` form)."""
    a, b = np.asarray(a).astype(np.int32), np.asarray(b).astype(np.int32)
    if az is not None:
        az = np.asarray(az, np.int32)
        a = a - (az.reshape(-1, 1) if az.ndim == 1 and az.size > 1 else az)
    if bz is not None:
        b = b - np.asarray(bz, np.int32)
    return [np.matmul(a, b).astype(np.int32)]


def _dropout(n: Node, opset: int, x, ratio=None, training_mode=None) -> list[np.ndarray]:
    """Dropout in inference: the identity, and a mask of ones from opset 12 (before it the
    mask is not defined in inference, and onnxruntime gives zeros)."""
    if training_mode is not None and bool(np.asarray(training_mode)):
        raise HostOpError(f"{n}: Dropout in training mode (random) is not supported on the host")
    return [x, np.full(np.shape(x), opset >= 12, bool)]


def _batchnorm(n: Node, x, scale, bias, mean, var) -> list[np.ndarray]:
    """BatchNormalization in inference mode, every opset: ``(x - mean) / sqrt(var + eps) *
    scale + bias`` per channel (axis 1). onnx.reference's opset 9-13 kernel computes batch
    statistics instead (training mode)."""
    if n.attrs.get("training_mode", 0) or len([o for o in n.outputs if o]) > 1:
        raise HostOpError(f"{n}: BatchNormalization in training mode (running statistics as "
                          f"outputs) is not supported on the host")
    x = np.asarray(x)
    shape = (1, -1) + (1,) * (x.ndim - 2)
    work = _work_type(x)
    p = [np.asarray(v, work).reshape(shape) for v in (scale, bias, mean, var)]
    eps = work(n.attrs.get("epsilon", 1e-5))
    y = (x.astype(work) - p[2]) / np.sqrt(p[3] + eps) * p[0] + p[1]
    return [y.astype(x.dtype)]


def _layernorm(x, gamma, beta, axis, eps) -> list[np.ndarray]:
    """LayerNormalization's three outputs: Y (of the input's type), Mean and InvStdDev (float32,
    the default ``stash_type``; of the input's rank, 1 along the normalised axes)."""
    dtype = np.asarray(x).dtype
    x = np.asarray(x, np.float32)
    axes = tuple(range(axis % x.ndim, x.ndim))
    mean = x.mean(axis=axes, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
    inv = (1 / np.sqrt(var + np.float32(eps))).astype(np.float32)
    y = (x - mean) * inv
    y = y * gamma
    return [(y + beta if beta is not None else y).astype(dtype), mean, inv]


def _reshape(x, shape, allowzero):
    shape = [int(d) for d in np.asarray(shape).reshape(-1)]
    if not allowzero:
        shape = [x.shape[i] if d == 0 else d for i, d in enumerate(shape)]
    return x.reshape(shape)


_NUMPY = {
    "Relu": lambda n, x: [np.maximum(x, 0).astype(x.dtype)],
    "Add": lambda n, a, b: [a + b],
    "Sub": lambda n, a, b: [a - b],
    "Mul": lambda n, a, b: [a * b],
    "Div": lambda n, a, b: [_divide(n, a, b)],
    "Sum": lambda n, *xs: [sum(xs[1:], xs[0])],
    "Identity": lambda n, x: [x],
    "MatMulInteger": _matmul_integer,
    "MaxPool": _maxpool,
    "LRN": _lrn,
    "OneHot": _one_hot,
    "LpPool": _lppool,
    "GlobalLpPool": lambda n, x: [(np.sum(np.abs(x.astype(_work_type(x))) ** n.attrs.get("p", 2),
                                          axis=tuple(range(2, x.ndim)), keepdims=True)
                                   ** (1.0 / n.attrs.get("p", 2))).astype(x.dtype)],
    "Reshape": lambda n, x, s: [_reshape(x, s, n.attrs.get("allowzero", 0))],
    "Flatten": lambda n, x: [_flatten(n, x)],
    "BatchNormalization": _batchnorm,
    "Transpose": lambda n, x: [np.transpose(x, n.attrs.get("perm"))],
    "Concat": lambda n, *xs: [np.concatenate(xs, axis=n.attrs["axis"])],
    "Erf": None,   # onnx.reference (scipy-free numpy erf)
    "GlobalAveragePool": lambda n, x: [x.mean(axis=tuple(range(2, x.ndim)), keepdims=True)
                                       .astype(x.dtype)],
    "LayerNormalization": lambda n, x, g, b=None: _layernorm(
        x, g, b, n.attrs.get("axis", -1), n.attrs.get("epsilon", 1e-5)),
    "QuantizeLinear": lambda n, *args: [_quantize(n, *args)],
    "DequantizeLinear": lambda n, *args: [_dequantize(n, *args)],
}

#: Host operators whose semantics changed with the opset: ``fn(node, opset, *inputs)``.
_NUMPY_OPSET = {**{name: _softmax_family for name in ("Softmax", "LogSoftmax", "Hardmax")},
                "Dropout": _dropout}


class HostExecutor:
    """Runs host nodes: numpy implementations above, else ``onnx.reference`` (one evaluator per
    node, built once)."""

    def __init__(self, graph: Graph):
        self._graph = graph
        self._evaluators: dict[str, object] = {}

    def __call__(self, node: Node, env: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        args = [env[i] if i else None for i in node.inputs]
        fn = _NUMPY.get(node.op_type) if node.domain == "" else None
        by_opset = _NUMPY_OPSET.get(node.op_type) if node.domain == "" else None
        if fn is not None or by_opset is not None:
            while args and args[-1] is None:
                args.pop()
            try:
                outs = fn(node, *args) if fn is not None else \
                    by_opset(node, self._graph.opset, *args)
            except HostOpError:
                raise
            except Exception as e:
                raise HostOpError(f"{node}: host execution failed ({type(e).__name__}: {e})") \
                    from None
            missing = [o for o in node.outputs[len(outs):] if o]
            if missing:
                raise HostOpError(f"{node}: outputs {missing} are not computed on the host")
            return outs
        if node.op_type == "QLinearConv" and node.domain == "" and np.ndim(args[0]) == 3:
            return self._conv1d_as_2d(node, args)
        return self._reference(node, args)

    def _conv1d_as_2d(self, node: Node, args) -> list[np.ndarray]:
        """A 1-D QLinearConv as the 2-D one over a height-1 map (onnx.reference broadcasts a
        per-channel weight scale of a 1-D convolution wrongly: (1, 5, 5, 9) for (1, 5, 9))."""
        args = list(args)
        args[0] = np.asarray(args[0])[:, :, None, :]
        args[3] = np.asarray(args[3])[:, :, None, :]
        a = dict(node.attrs)
        for key in ("kernel_shape", "strides", "dilations"):
            if key in a:
                a[key] = [1, *a[key]]
        if "pads" in a:
            a["pads"] = [0, a["pads"][0], 0, a["pads"][1]]
        lifted = dataclasses.replace(node, name=f"{node.name}#2d", attrs=a)
        return [np.asarray(y)[:, :, 0, :] for y in self._reference(lifted, args)]

    def _reference(self, node: Node, args) -> list[np.ndarray]:
        from onnx import helper

        if node.domain not in ("", "ai.onnx"):
            raise HostOpError(f"{node}: operator {node.domain}.{node.op_type} has no numpy "
                              f"implementation (unknown domain); it cannot run on the host")
        ev = self._evaluators.get(node.name)
        feeds = {name: a for name, a in zip(node.inputs, args) if name}
        if ev is None:
            from onnx.reference import ReferenceEvaluator

            inputs = [helper.make_tensor_value_info(
                n, helper.np_dtype_to_tensor_dtype(np.asarray(v).dtype), np.asarray(v).shape)
                for n, v in feeds.items()]
            attrs = {k: v for k, v in node.attrs.items()}
            proto = helper.make_node(node.op_type, node.inputs, node.outputs, name=node.name,
                                     **{k: (helper.make_tensor(k, helper.np_dtype_to_tensor_dtype(
                                         v.dtype), v.shape, v.reshape(-1).tolist())
                                         if isinstance(v, np.ndarray) else v)
                                        for k, v in attrs.items()})
            outputs = [helper.make_empty_tensor_value_info(o) for o in node.outputs if o]
            model = helper.make_model(helper.make_graph([proto], "host", inputs, outputs),
                                      opset_imports=[helper.make_opsetid("", self._graph.opset)])
            try:
                ev = ReferenceEvaluator(model)
            except Exception as e:
                raise HostOpError(f"{node}: no numpy implementation ({type(e).__name__}: "
                                  f"{e})") from None
            self._evaluators[node.name] = ev
        try:
            return list(ev.run(None, feeds))
        except Exception as e:
            raise HostOpError(f"{node}: host execution failed ({type(e).__name__}: {e})") \
                from None


def run(lowered: Lowered, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every tensor of the lowered network for ``feeds`` (graph inputs by name)."""
    g = lowered.graph
    missing = [n for n in g.inputs if n not in feeds]
    if missing:
        raise ValueError(f"feeds lack graph inputs {missing}")
    env: dict[str, np.ndarray] = {n: t.value for n, t in g.tensors.items() if t.is_const}
    env.update({k: np.asarray(v) for k, v in feeds.items()})
    host = HostExecutor(g)
    for step in lowered.steps:
        if isinstance(step, AccelLayer):
            env[step.output] = run_layer(step, env)
        else:
            outs = host(step.node, env)
            for name, value in zip([o for o in step.node.outputs], outs):
                if name:
                    env[name] = np.asarray(value)
    return env


# -- comparison ---------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Comparison:
    """Reference vs onnxruntime on one graph output."""

    output: str
    elements: int
    max_abs_diff: float          # in output units
    max_abs_diff_lsb: float      # in LSBs of the output's quantisation (nan if not quantised)
    pct_equal: float             # % of exactly equal elements

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def onnxruntime_outputs(qmodel, feeds: Mapping[str, np.ndarray], *,
                        optimise: bool = True) -> dict[str, np.ndarray]:
    """Outputs of onnxruntime (CPU, default optimisations, exact integer kernels) on the
    quantised model; ``optimise=False`` turns its graph optimisations off, so every node runs
    as its operator defines it (its fused QDQ kernels are not always the same: a QGemm applies
    a ``(rows, 1)`` bias along the features).

    ``session.x64quantprecision`` selects onnxruntime's exact uint8 x int8 kernels: on x86 CPUs
    without VNNI (AVX2 only) its default kernel adds neighbouring products in saturating int16
    pairs, which is not the ONNX arithmetic (measured here with onnxruntime 1.32: an h256
    encoder block differed from the int8 reference by 8 LSB with the default kernel, 3 LSB with
    the exact one; tests/net/test_quantize.py reproduces the saturation). It changes nothing on
    CPUs with VNNI."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    opts.add_session_config_entry("session.x64quantprecision", "1")
    if not optimise:
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(qmodel.SerializeToString(), opts,
                                providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, dict(feeds))))


def _output_scale(g: Graph, name: str) -> float:
    node = g.producer(name)
    if node is not None and node.op_type == "DequantizeLinear":
        s = g.const(node.input(1))
        if s is not None and np.asarray(s).size == 1:
            return float(np.asarray(s).reshape(()))
    return float("nan")


def compare_with_onnxruntime(qmodel, lowered: Lowered, feeds: Mapping[str, np.ndarray]
                             ) -> list[Comparison]:
    """Run both on ``feeds``; one :class:`Comparison` per graph output."""
    ours = run(lowered, feeds)
    theirs = onnxruntime_outputs(qmodel, feeds)
    out = []
    for name in lowered.graph.outputs:
        a = np.asarray(ours[name], np.float64)
        b = np.asarray(theirs[name], np.float64)
        if a.shape != b.shape:
            raise ModelError(f"output {name!r}: reference shape {a.shape} != onnxruntime "
                             f"{b.shape}")
        diff = np.abs(a - b)
        scale = _output_scale(lowered.graph, name)
        out.append(Comparison(output=name, elements=int(a.size),
                              max_abs_diff=float(diff.max()) if a.size else 0.0,
                              max_abs_diff_lsb=float(np.round(diff.max() / scale, 3))
                              if a.size and scale == scale else float("nan"),
                              pct_equal=float(100.0 * np.mean(diff == 0)) if a.size else 100.0))
    return out
