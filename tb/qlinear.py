"""ONNX ``QLinearConv`` / ``QLinearMatMul`` node tests lowered onto the accelerator, requantised
by the hardware's post-processor (no host arithmetic on the outputs).

Zero points are folded exactly (:mod:`planner.zero_points` shifts uint8 operands to int8):

``sum (x - zx)(w - zw) = sum x*w + sum x*(-zw) - zx*sum(w - zw)``

* the ``-zx * sum(w - zw)`` term (and ``K*zx*zw``) depends on the output channel only: it is the
  layer's int32 **bias**;
* the ``x * (-zw)`` term depends on every input value: the reduction is **extended** with a
  second copy of the input whose weights are ``-zw`` (split into int8 parts when ``-zw`` does
  not fit int8), so the array computes it;
* convolution padding holds the input zero point (the halo), so padded taps contribute 0.

The int32 result is exactly ONNX's integer accumulator; the post-processor then applies
``quantize_multiplier(x_scale * w_scale / y_scale)`` with gemmlowp rounding (spec.golden.requantize),
where ONNX's reference rounds the real product half-to-even once. Elements where the two
roundings disagree are reported by :func:`compare`, never hidden.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from firmware.builder import ImageBuilder, Requant
from spec.config import AccelConfig
from spec.golden import conv2d_int8, gemm_int8, requantize
from spec.layouts import OpKind
from planner.layout import padded_bytes, padded_dims
from planner.requant import quantize_multiplier
from planner.shapes import ConvShape
from planner.zero_points import resolve_conv_pads

from .onnx_nodes import node_tests

__all__ = ["QCase", "collect_qlinear_cases", "lower", "Lowered", "compare"]

OPS = ("QLinearConv", "QLinearMatMul")


@dataclasses.dataclass
class QCase:
    name: str
    op: str
    inputs: dict[str, np.ndarray]
    attrs: dict
    expected: np.ndarray


def collect_qlinear_cases() -> list[QCase]:
    """Every node test of :data:`OPS` in the installed ``onnx`` wheel."""
    out = []
    for name, node, attrs, by_name, expected in node_tests(OPS):
        roles = dict(zip(_ROLES[node.op_type], node.input))
        arrays = {role: np.asarray(by_name[n]) for role, n in roles.items() if n}
        out.append(QCase(name, node.op_type, arrays, attrs, np.asarray(expected)))
    return out


_ROLES = {"QLinearConv": ("x", "x_scale", "x_zero_point", "w", "w_scale", "w_zero_point",
                          "y_scale", "y_zero_point", "b"),
          "QLinearMatMul": ("a", "a_scale", "a_zero_point", "b", "b_scale", "b_zero_point",
                            "y_scale", "y_zero_point")}


def _shift(x: np.ndarray) -> tuple[np.ndarray, int]:
    if x.dtype == np.uint8:
        return (x.astype(np.int16) - 128).astype(np.int8), 128
    if x.dtype == np.int8:
        return x.copy(), 0
    raise ValueError(f"operand dtype must be uint8 or int8, not {x.dtype}")


def _int8_parts(values: np.ndarray) -> list[np.ndarray]:
    """Arrays of int8 values summing to ``values`` (each in [-255, 255])."""
    left = values.astype(np.int64)
    parts = []
    while np.any(left):
        part = np.clip(left, -128, 127)
        parts.append(part.astype(np.int8))
        left = left - part
    return parts


def _requant(scale: float, m: int, y_zp: int, y_dtype) -> tuple[Requant, int]:
    mult, shift = quantize_multiplier(scale)
    s_y = 128 if y_dtype == np.uint8 else 0
    rq = Requant(multiplier=np.full(m, mult, np.int32), shift=np.full(m, shift, np.int32),
                 zero_point=int(y_zp) - s_y)
    return rq, s_y


def _scale(*values) -> float:
    """The real multiplier from the given scale tensors, in float64."""
    x, w, y = (np.asarray(v, dtype=np.float64).reshape(-1) for v in values)
    if w.size != 1 or x.size != 1 or y.size != 1:
        raise ValueError("only per-tensor scales are lowered")
    return float(x[0] * w[0] / y[0])


@dataclasses.dataclass
class Lowered:
    """One case as an image: ``load``, ``read`` regions and how to turn the bytes read back
    into the ONNX output (``decode``); ``golden`` is the same arithmetic in numpy."""

    blob: bytes
    load: list
    read: list
    budget_cycles: int
    decode: object
    golden: np.ndarray


def lower(case: QCase, cfg: AccelConfig) -> Lowered:
    if case.op == "QLinearMatMul":
        return _lower_matmul(case, cfg)
    return _lower_conv(case, cfg)


def _lower_matmul(case: QCase, cfg: AccelConfig) -> Lowered:
    i = case.inputs
    a, b = i["a"], i["b"]
    batch_shape = a.shape[:-2]
    a2 = a.reshape(-1, *a.shape[-2:])
    b2 = b.reshape(-1, *b.shape[-2:])
    if b2.shape[0] != a2.shape[0]:
        raise ValueError(f"{case.name}: batch shapes differ: {a.shape} @ {b.shape}")
    m, k = a2.shape[1:]
    n = b2.shape[2]
    za = int(np.asarray(i["a_zero_point"]).reshape(-1)[0])
    zb = int(np.asarray(i["b_zero_point"]).reshape(-1)[0])
    rq, s_y = _requant(_scale(i["a_scale"], i["b_scale"], i["y_scale"]), m,
                       int(np.asarray(i["y_zero_point"]).reshape(-1)[0]), case.expected.dtype)
    builder = ImageBuilder(cfg)
    loads, reads, golden = [], [], []
    for t in range(a2.shape[0]):
        a8, sa = _shift(a2[t])
        b8, sb = _shift(b2[t])
        za8, zb8 = za - sa, zb - sb
        parts = _int8_parts(np.array([-za8]))
        weights = np.concatenate([a8] + [np.full((m, k), p[0], np.int8) for p in parts], axis=1)
        b_ext = np.concatenate([b8] * (1 + len(parts)), axis=0)
        bias = (-zb8 * a8.astype(np.int64).sum(axis=1) + k * za8 * zb8).astype(np.int32)
        b_addr = builder.buffer(f"b{t}", b_ext.size)
        y_addr = builder.buffer(f"y{t}", m * n)
        builder.gemm(f"matmul{t}", weights=weights, n=n, b_addr=b_addr, b_stride=n,
                     out_addr=y_addr, out_stride=n, bias=bias, requant=rq, op_kind=OpKind.GEMM)
        loads.append((b_addr, b_ext.tobytes()))
        reads.append((f"y{t}", y_addr, m * n))
        acc = gemm_int8(weights, b_ext)
        golden.append(requantize(acc, multiplier=rq.multiplier, shift=rq.shift, bias=bias,
                                 zero_point=rq.zero_point))
    blob, layers = builder.build()
    dtype = case.expected.dtype

    def decode(raw: dict[str, bytes]) -> np.ndarray:
        ys = [np.frombuffer(raw[f"y{t}"], np.int8).reshape(m, n) for t in range(a2.shape[0])]
        return _to_dtype(np.stack(ys), s_y, dtype).reshape(*batch_shape, m, n)

    want = _to_dtype(np.stack(golden), s_y, dtype).reshape(*batch_shape, m, n)
    budget = 4 * sum(layer.predicted_cycles for layer in layers) + 4 * len(blob) + 20_000
    return Lowered(blob, loads, reads, budget, decode, want)


def _lower_conv(case: QCase, cfg: AccelConfig) -> Lowered:
    i = case.inputs
    x, w = i["x"], i["w"]
    if x.ndim != 4 or x.shape[0] != 1 or int(case.attrs.get("group", 1)) != 1:
        raise ValueError(f"{case.name}: only batch-1, 2-D, one-group QLinearConv is lowered")
    if "b" in i:
        raise ValueError(f"{case.name}: a QLinearConv bias input is not lowered here")
    kernel = list(w.shape[2:])
    strides = [int(v) for v in case.attrs.get("strides", [1, 1])]
    dil = [int(v) for v in case.attrs.get("dilations", [1, 1])]
    pads = resolve_conv_pads(case.attrs.get("auto_pad", "NOTSET"), case.attrs.get("pads"),
                             x.shape[2:], kernel, strides, dil)
    x8, sx = _shift(x)
    w8, sw = _shift(w)
    xz8 = int(np.asarray(i["x_zero_point"]).reshape(-1)[0]) - sx
    wz = np.broadcast_to(np.asarray(i["w_zero_point"]).astype(np.int64).reshape(-1),
                         (w.shape[0],))
    wz8 = wz - sw
    kout, cin = w.shape[:2]
    parts = _int8_parts(-wz8)
    w_ext = np.concatenate([w8] + [np.broadcast_to(p.reshape(-1, 1, 1, 1), w8.shape)
                                   .astype(np.int8) for p in parts], axis=1)
    x_ext = np.concatenate([x8] * (1 + len(parts)), axis=1)
    bias = (-xz8 * (w8.astype(np.int64) - wz8.reshape(-1, 1, 1, 1)).reshape(kout, -1).sum(1)
            ).astype(np.int32)
    shape = ConvShape(batch=1, in_channels=x_ext.shape[1], height=x.shape[2], width=x.shape[3],
                      out_channels=kout, kernel_h=kernel[0], kernel_w=kernel[1],
                      stride_h=strides[0], stride_w=strides[1], pad_top=pads[0],
                      pad_left=pads[1], pad_bottom=pads[2], pad_right=pads[3],
                      dilation_h=dil[0], dilation_w=dil[1])
    wsc = np.asarray(i["w_scale"], np.float64).reshape(-1)
    if wsc.size != 1:
        raise ValueError(f"{case.name}: per-channel w_scale is not lowered here")
    rq, s_y = _requant(_scale(i["x_scale"], wsc, i["y_scale"]), kout,
                       int(np.asarray(i["y_zero_point"]).reshape(-1)[0]), case.expected.dtype)
    builder = ImageBuilder(cfg)
    x_addr = builder.buffer("x", padded_bytes(shape, "NCHW"))
    p, q = shape.out_h, shape.out_w
    y_addr = builder.buffer("y", kout * p * q)
    builder.conv("conv", shape=shape, weights=w_ext, x_addr=x_addr, out_addr=y_addr,
                 out_chan_stride=p * q, bias=bias, requant=rq)
    blob, layers = builder.build()
    hp, wp = padded_dims(shape)
    xp = np.full((1, x_ext.shape[1], hp, wp), xz8, np.int8)            # halo = zero point
    xp[:, :, pads[0]:pads[0] + x.shape[2], pads[1]:pads[1] + x.shape[3]] = x_ext
    acc = conv2d_int8(xp, w_ext, stride=tuple(strides), dilation=tuple(dil))
    y8 = requantize(acc.reshape(kout, -1), multiplier=rq.multiplier, shift=rq.shift,
                    bias=bias, zero_point=rq.zero_point)
    dtype = case.expected.dtype

    def decode(raw: dict[str, bytes]) -> np.ndarray:
        return _to_dtype(np.frombuffer(raw["y"], np.int8), s_y, dtype).reshape(1, kout, p, q)

    want = _to_dtype(y8, s_y, dtype).reshape(1, kout, p, q)
    budget = 4 * sum(layer.predicted_cycles for layer in layers) + 4 * len(blob) + 20_000
    return Lowered(blob, [(x_addr, xp.tobytes())], [("y", y_addr, kout * p * q)], budget,
                   decode, want)


def _to_dtype(q8: np.ndarray, s: int, dtype) -> np.ndarray:
    return (q8.astype(np.int16) + s).astype(dtype)


def compare(case: QCase, got: np.ndarray) -> list[dict]:
    """Every element where ``got`` differs from ONNX's expected output, with its index and the
    two values."""
    want = case.expected
    if got.shape != want.shape:
        return [{"index": None, "got": list(got.shape), "expected": list(want.shape)}]
    idx = np.argwhere(got != want)
    return [{"index": [int(v) for v in ix], "got": int(got[tuple(ix)]),
             "expected": int(want[tuple(ix)])} for ix in idx]
