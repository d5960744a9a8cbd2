"""Zero points, folded by the compiler: ONNX ``Conv`` / ``ConvInteger`` / ``MatMulInteger`` on
the int8 datapath (pure numpy; no ONNX import).

The hardware multiplies int8 by int8 and accumulates exactly in int32 (wrapping modulo 2**32,
spec.golden). It has no zero-point inputs. Quantised operators whose operands are uint8, or carry a
zero point, are mapped onto it here, at compile time, by *shift and correct*:

**Activation shift.** Each integer operand ``x`` is stored as ``x8 = x - s`` with ``s = 128``
for uint8 and ``s = 0`` for int8, so ``x8`` is int8. With zero point ``zp`` the operator wants
``x - zp = x8 + d`` where ``d = s - zp`` (a compile-time constant; ``d`` is in [-127, 128]).

**ConvInteger** ``y = conv(x - x_zp, w - w_zp)``, zero padding in the *shifted* domain (a pad tap
contributes ``0``, the same as a real pixel equal to ``x_zp``):

* weights: ``w' = w - w_zp`` (``w_zp`` scalar or one per output channel) is computed at compile
  time and must fit int8. It does for the ONNX test data. Otherwise :func:`fold_conv_integer`
  raises ``ValueError``: a weight zero point that leaves ``w'`` outside int8 needs an
  activation-sum correction (``w_zp * window_sum(x - x_zp)``), which is not implemented.
* halo: the padded layout's halo stores ``x_zp - s``, the int8 image of the zero point
  (``x_zp - 128`` for uint8; ``tb.conv.conv_on_rtl(..., halo=)``), so that *every* tap, halo
  included, reads a value ``v`` with ``v + d = (x - x_zp)`` at that tap (``0`` in the halo).
* correction: ``y[n, m, p, q] = conv_rtl(x8, w')[n, m, p, q] + c[m]`` with
  ``c[m] = d * sum_k w'[m, k] = (s - x_zp) * sum(w'[m])``: one int32 per output channel,
  which depends only on the weights and zero points (compile time, like a bias).

**Conv** (float ONNX tensors): the inputs and weights must hold integers in int8 and the bias
integers. They run as a plain int8 convolution with a zero halo, and the bias is the correction.

**MatMulInteger** ``Y = (A - a_zp) @ (B - b_zp)``, A ``M x K``, B ``K x N``, ``a_zp`` scalar or
per row, ``b_zp`` scalar or per column. Both operands are shifted (``a8 = A - sa``,
``b8 = B - sb``, ``da = sa - a_zp``, ``db = sb - b_zp``) and the GEMM ``a8 @ b8`` runs on the
array; then ``Y = a8 @ b8 + da * colsum(b8) + db * rowsum(a8) + K * da * db``. This always fits
int8, whatever the zero points, so nothing is refused. ``colsum(b8)`` is compile time when B is
a weight. ``rowsum(a8)`` is ``M*K`` additions on the host per run: scalar host-side work, like
the other scalar work seed 004 puts on the host. Folding the zero points into the operands
(``A - a_zp`` as int8) would need that elementwise pass over the activations instead.

Results wrap to int32 like the hardware's accumulators (:func:`finish`).
"""

from __future__ import annotations

import dataclasses

import numpy as np

__all__ = ["ConvFold", "GemmFold", "resolve_conv_pads", "exact_int8", "exact_int",
           "fold_conv_float", "fold_conv_integer", "fold_matmul_integer", "finish",
           "int8_parts", "activation_gemm_k"]


def exact_int(name: str, arr, lo: int | None = None, hi: int | None = None) -> np.ndarray:
    """``arr`` as int64, refusing (``ValueError``) non-integral values or values outside
    [lo, hi]."""
    a = np.asarray(arr)
    if a.dtype.kind == "f":
        flat = a.reshape(-1)
        bad = flat[~np.isfinite(flat) | (flat != np.round(flat))]
        if bad.size:
            raise ValueError(f"{name}: float values must be integral to run on the int8 "
                             f"datapath exactly; non-integral values {bad[:4].tolist()}")
    elif a.dtype.kind not in "iub":
        raise ValueError(f"{name}: dtype {a.dtype} is not numeric (bool, int, uint or "
                         f"float)")
    out = a.astype(np.int64)
    if lo is not None and out.size and (out.min() < lo or out.max() > hi):
        raise ValueError(f"{name}: values must be in [{lo}, {hi}], got range "
                         f"[{out.min()}, {out.max()}]")
    return out


def exact_int8(name: str, arr) -> np.ndarray:
    """``arr`` as int8 when every element is an integer in [-128, 127]; else ``ValueError``."""
    return exact_int(name, arr, -128, 127).astype(np.int8)


def resolve_conv_pads(auto_pad: str, pads, in_hw, kernel_hw, strides, dilations
                      ) -> tuple[int, int, int, int]:
    """Explicit ``(top, left, bottom, right)`` pads of a 2-D ONNX Conv (ONNX order
    ``[h_begin, w_begin, h_end, w_end]`` is the same).

    ``SAME_UPPER`` / ``SAME_LOWER``: output ``ceil(in / stride)``, total pad
    ``max(0, (out - 1) * stride + dilation * (kernel - 1) + 1 - in)``; the odd pixel goes at the
    end (UPPER) or the beginning (LOWER). ``VALID``: no pads. ``NOTSET`` (or empty): ``pads``,
    default zeros.
    """
    auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else (auto_pad or "NOTSET")
    if auto_pad == "NOTSET":
        p = [0, 0, 0, 0] if pads is None else [int(v) for v in pads]
        if len(p) != 4 or min(p) < 0:
            raise ValueError(f"Conv pads must be 4 ints >= 0 for a 2-D conv, not {pads!r}")
        return tuple(p)
    if auto_pad == "VALID":
        return (0, 0, 0, 0)
    if auto_pad not in ("SAME_UPPER", "SAME_LOWER"):
        raise ValueError(f"Conv auto_pad {auto_pad!r} is not NOTSET, SAME_UPPER, SAME_LOWER "
                         f"or VALID")
    begin, end = [], []
    for size, k, s, d in zip(in_hw, kernel_hw, strides, dilations):
        out = -(-size // s)
        total = max(0, (out - 1) * s + d * (k - 1) + 1 - size)
        small, big = total // 2, total - total // 2
        begin.append(small if auto_pad == "SAME_UPPER" else big)
        end.append(big if auto_pad == "SAME_UPPER" else small)
    return (begin[0], begin[1], end[0], end[1])


@dataclasses.dataclass(frozen=True)
class ConvFold:
    """A convolution as the hardware runs it: int8 ``x8`` (NCHW) and ``w8`` (K, C/g, R, S),
    the int8 ``halo`` value of the padded layout, and ``correction`` (int64, one per output
    channel) added to the int32 result by :func:`finish`."""

    x8: np.ndarray
    w8: np.ndarray
    halo: int
    correction: np.ndarray


@dataclasses.dataclass(frozen=True)
class GemmFold:
    """``a8`` (M x K) and ``b8`` (K x N) int8 for the array; ``correction`` (M x N int64)."""

    a8: np.ndarray
    b8: np.ndarray
    correction: np.ndarray


def fold_conv_float(x, w, b=None) -> ConvFold:
    """ONNX ``Conv`` on float tensors holding small integers: exact int8, bias as correction."""
    x8 = exact_int8("Conv input X", x)
    w8 = exact_int8("Conv weight W", w)
    k = w8.shape[0]
    corr = np.zeros(k, np.int64) if b is None else exact_int("Conv bias B", b, -2**31, 2**31 - 1)
    if corr.shape != (k,):
        raise ValueError(f"Conv bias B must have shape ({k},), not {corr.shape}")
    return ConvFold(x8, w8, 0, corr)


def _shift(name: str, x) -> tuple[np.ndarray, int]:
    """(int8 image ``x - s``, s) of a uint8 (s = 128) or int8 (s = 0) operand."""
    x = np.asarray(x)
    if x.dtype == np.uint8:
        return (x.astype(np.int16) - 128).astype(np.int8), 128
    if x.dtype == np.int8:
        return x.copy(), 0
    raise ValueError(f"{name} must be uint8 or int8, not {x.dtype}")


def _zero_point(name: str, zp, operand_dtype, shape_ok: tuple[int, ...]) -> np.ndarray:
    """Zero point as int64 (0 when absent); its dtype must match the operand's and its size be
    1 or ``shape_ok[0]``."""
    if zp is None:
        return np.zeros((), np.int64)
    zp = np.asarray(zp)
    if zp.dtype != operand_dtype:
        raise ValueError(f"{name} dtype {zp.dtype} must match its operand's {operand_dtype}")
    if zp.size == 1:
        return zp.astype(np.int64).reshape(())
    if zp.ndim != 1 or zp.shape != shape_ok:
        raise ValueError(f"{name} must be a scalar or have shape {shape_ok}, not {zp.shape}")
    return zp.astype(np.int64)


def fold_conv_integer(x, w, x_zp=None, w_zp=None) -> ConvFold:
    """ONNX ``ConvInteger``: ``conv(x - x_zp, w - w_zp)`` as ``conv_rtl(x - s, w') + c``
    (module docstring). ``x_zp`` is per tensor, ``w_zp`` per tensor or per output channel."""
    x = np.asarray(x)
    w = np.asarray(w)
    x8, s = _shift("ConvInteger x", x)
    xz = _zero_point("ConvInteger x_zero_point", x_zp, x.dtype, ())
    if xz.ndim:
        raise ValueError("ConvInteger x_zero_point must be a scalar (per tensor)")
    if w.dtype not in (np.uint8, np.int8):
        raise ValueError(f"ConvInteger w must be uint8 or int8, not {w.dtype}")
    k = w.shape[0]
    wz = _zero_point("ConvInteger w_zero_point", w_zp, w.dtype, (k,))
    wz = wz.reshape(-1, *([1] * (w.ndim - 1))) if wz.ndim else wz
    wd = w.astype(np.int64) - wz
    if wd.min() < -128 or wd.max() > 127:
        raise ValueError(
            f"ConvInteger: w - w_zero_point spans [{wd.min()}, {wd.max()}], outside int8 "
            f"[-128, 127]; a weight zero point like this needs the activation-sum correction "
            f"(w_zp * window_sum(x - x_zp)), which is not implemented")
    d = s - int(xz)                          # x - x_zp = x8 + d at every tap
    halo = int(xz) - s                       # halo + d = 0: zero padding in the shifted domain
    corr = d * wd.reshape(k, -1).sum(axis=1)
    return ConvFold(x8, wd.astype(np.int8), halo, corr.astype(np.int64))


def fold_matmul_integer(a, b, a_zp=None, b_zp=None) -> GemmFold:
    """ONNX ``MatMulInteger`` (2-D): ``(A - a_zp) @ (B - b_zp)`` as ``a8 @ b8`` plus the
    host-side correction ``da*colsum(b8) + db*rowsum(a8) + K*da*db`` (module docstring)."""
    a = np.asarray(a)
    b = np.asarray(b)
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"MatMulInteger: only 2-D A (M x K) @ B (K x N) is supported, got "
                         f"{a.shape} and {b.shape}")
    m, kk = a.shape
    n = b.shape[1]
    a8, sa = _shift("MatMulInteger A", a)
    b8, sb = _shift("MatMulInteger B", b)
    da = (sa - _zero_point("MatMulInteger a_zero_point", a_zp, a.dtype, (m,))).reshape(-1, 1)
    db = (sb - _zero_point("MatMulInteger b_zero_point", b_zp, b.dtype, (n,))).reshape(1, -1)
    rowsum = a8.astype(np.int64).sum(axis=1, keepdims=True)         # M x 1, host, per run
    colsum = b8.astype(np.int64).sum(axis=0, keepdims=True)         # 1 x N
    corr = da * colsum + db * rowsum + kk * da * db
    return GemmFold(a8, b8, np.broadcast_to(corr, (m, n)).astype(np.int64))


def finish(acc: np.ndarray, correction: np.ndarray) -> np.ndarray:
    """``acc + correction`` wrapped to int32, as the accumulators would (two's complement)."""
    total = np.asarray(acc).astype(np.int64) + correction
    return total.astype(np.uint64).astype(np.uint32).view(np.int32)


def int8_parts(value: int) -> list[int]:
    """int8 values summing to ``value`` (none for 0): the weights of the copies of ``b`` by
    which an activation x activation GEMM's K is extended to fold ``-za * colsum(b)``
    (``flow.compile.build_gemm_image``, as ``tb/qlinear.py`` does)."""
    parts, left = [], int(value)
    while left:
        p = max(-128, min(127, left))
        parts.append(p)
        left -= p
    return parts


def activation_gemm_k(k: int, a_zero_point: int) -> int:
    """The K an activation x activation GEMM of depth ``k`` runs with: ``k`` once more for
    every int8 part of ``-a_zero_point`` (:func:`int8_parts`)."""
    return k * (1 + len(int8_parts(-a_zero_point)))
