"""Bit-exact numpy golden models of every operation the hardware performs.

Imports nothing from Amaranth. Every test compares RTL results with these functions.
"""

from __future__ import annotations

import numpy as np

__all__ = ["gemm_int8", "conv2d_int8", "requantize"]


#: The longest ``k`` whose float64 dot products of int8 values are exact: every partial sum
#: is at most ``k * 2**14`` in magnitude, and float64 holds integers up to 2**53 exactly.
_EXACT_F64_K = 1 << 39


def gemm_int8(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``C = A @ B`` for int8 ``A`` (m x k) and ``B`` (k x n), as the matrix unit computes it.

    Products are exact int16; they are summed in an int32 accumulator that wraps modulo 2**32
    on overflow (two's complement), exactly like the hardware's 32-bit adders. The sum is computed
    exactly and then wrapped, which gives the same result in any summation order: in float64
    (numpy's BLAS) while every partial sum is an integer below 2**53 in magnitude, which holds
    for ``k`` up to 2**39 (a product is at most 2**14), else in int64 (no BLAS; 10-50x slower).
    """
    a = np.asarray(a)
    b = np.asarray(b)
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"gemm_int8 needs A (m x k) and B (k x n), got {a.shape} and {b.shape}")
    for name, x in (("A", a), ("B", b)):
        if x.dtype != np.int8:
            raise ValueError(f"gemm_int8: {name} must be int8, not {x.dtype}")
    if a.shape[1] <= _EXACT_F64_K:
        wide = (a.astype(np.float64) @ b.astype(np.float64)).astype(np.int64)
    else:
        wide = a.astype(np.int64) @ b.astype(np.int64)
    return wide.astype(np.uint64).astype(np.uint32).view(np.int32) if wide.size else \
        wide.astype(np.int32)


def _pair(name: str, value, lo: int) -> tuple[int, int]:
    try:
        pair = tuple(value)
    except TypeError:
        pair = ()
    if len(pair) != 2 or any(type(v) is not int or v < lo for v in pair):
        raise ValueError(f"conv2d_int8: {name} must be two ints >= {lo}, not {value!r}")
    return pair


def conv2d_int8(x: np.ndarray, w: np.ndarray, *, stride=(1, 1), pads=(0, 0, 0, 0),
                dilation=(1, 1), groups: int = 1) -> np.ndarray:
    """2-D convolution of int8 ``x`` (N, C, H, W) with int8 ``w`` (K, C/groups, R, S) -> int32
    (N, K, P, Q), the reference for the convolution path (seed 002, docs/conv_tables.md).

    ``pads`` is ``(top, left, bottom, right)``; ``P = (H + top + bottom - dh*(R-1) - 1) // sh + 1``
    and ``Q`` likewise. Out channel ``o`` of group ``g = o // (K/groups)`` reads input channels
    ``g*(C/groups) ..``. Like :func:`gemm_int8`, the exact sum wraps modulo 2**32.

    Computed directly, independently of the convolution tables: for every tap ``(r, s)`` the
    strided window of the zero-padded input is contracted with ``w[:, :, r, s]``, per group, as
    a batched matmul in float64. Every product is at most 2**14 in magnitude and a sum has at
    most ``(C/groups)*R*S`` < 2**39 of them, so every float64 partial sum is an exact integer.
    """
    x = np.asarray(x)
    w = np.asarray(w)
    for name, arr in (("x", x), ("w", w)):
        if arr.dtype != np.int8:
            raise ValueError(f"conv2d_int8: {name} must be int8, not {arr.dtype}")
        if arr.ndim != 4:
            raise ValueError(f"conv2d_int8: {name} must be 4-D, not shape {arr.shape}")
    sh, sw = _pair("stride", stride, 1)
    dh, dw = _pair("dilation", dilation, 1)
    try:
        pads = tuple(pads)
    except TypeError:
        pads = ()
    if len(pads) != 4 or any(type(v) is not int or v < 0 for v in pads):
        raise ValueError(f"conv2d_int8: pads must be four ints >= 0 (top, left, bottom, right), "
                         f"not {pads!r}")
    top, left, bottom, right = pads
    n, c, h, wd = x.shape
    k, cg, r_, s_ = w.shape
    if type(groups) is not int or groups < 1 or c % groups or k % groups:
        raise ValueError(f"conv2d_int8: groups={groups!r} must be an int >= 1 dividing C={c} "
                         f"and K={k}")
    if cg * groups != c:
        raise ValueError(f"conv2d_int8: w has {cg} input channels per group; x has C={c} and "
                         f"groups={groups}, so it needs {c // groups}")
    if min(x.shape) < 1 or min(w.shape) < 1:
        raise ValueError(f"conv2d_int8: every dim of x and w must be >= 1, not x {x.shape} "
                         f"and w {w.shape}")
    hp, wp = h + top + bottom, wd + left + right
    p = (hp - dh * (r_ - 1) - 1) // sh + 1
    q = (wp - dw * (s_ - 1) - 1) // sw + 1
    if p < 1 or q < 1:
        raise ValueError(f"conv2d_int8: dilated kernel {r_}x{s_} (dilation {dh}x{dw}) does not "
                         f"fit the padded input {hp}x{wp}")
    m = k // groups
    xp = np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right))).astype(np.float64)
    wf = w.astype(np.float64).reshape(groups, m, cg, r_, s_)
    acc = np.zeros((groups, m, n * p * q), dtype=np.float64)
    for r in range(r_):
        for s in range(s_):
            win = xp[:, :, r * dh: r * dh + sh * (p - 1) + 1: sh,
                     s * dw: s * dw + sw * (q - 1) + 1: sw]          # (n, c, p, q)
            win = win.reshape(n, groups, cg, p * q).transpose(1, 2, 0, 3).reshape(
                groups, cg, n * p * q)
            acc += wf[:, :, :, r, s] @ win
    out = acc.astype(np.int64).reshape(groups, m, n, p, q).transpose(2, 0, 1, 3, 4)
    return out.reshape(n, k, p, q).astype(np.uint64).astype(np.uint32).view(np.int32)


INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1


def _rounding_doubling_high_mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """gemmlowp ``SaturatingRoundingDoublingHighMul``: ``a * b / 2**31`` rounded to nearest with
    ties toward +infinity (``-1.5 -> -1``, ``1.5 -> 2``), computed exactly in int64; the one
    overflowing case ``INT32_MIN * INT32_MIN`` saturates to ``INT32_MAX``."""
    a = a.astype(np.int64)
    b = b.astype(np.int64)
    ab = a * b                                             # |ab| <= 2**62: exact
    nudge = np.where(ab >= 0, 1 << 30, 1 - (1 << 30))
    total = ab + nudge
    # C integer division truncates toward zero
    q = np.where(total >= 0, total >> 31, -((-total) >> 31))
    return np.where((a == INT32_MIN) & (b == INT32_MIN), INT32_MAX, q)


def _rounding_divide_by_pot(x: np.ndarray, exponent: np.ndarray) -> np.ndarray:
    """gemmlowp ``RoundingDivideByPOT``: ``x / 2**exponent`` rounded to nearest, ties away from
    zero (arithmetic shift plus a remainder test)."""
    x = x.astype(np.int64)
    exponent = exponent.astype(np.int64)
    mask = (np.int64(1) << exponent) - 1
    remainder = x & mask
    threshold = (mask >> 1) + (x < 0)
    return (x >> exponent) + (remainder > threshold)


def requantize(acc: np.ndarray, *, multiplier, shift, bias=None, zero_point: int = 0,
               act_min: int = -128, act_max: int = 127) -> np.ndarray:
    """int32 accumulators of an ``M x N`` output (``M`` = output channels, rows) to int8, exactly
    as TFLite / gemmlowp's ``MultiplyByQuantizedMultiplier`` does, per output channel ``m``:

    ``x = acc + bias[m]`` (int32, wrapping); ``y = RDBP(SRDHM(x << max(-shift, 0), mult[m]),
    max(shift, 0))`` where ``shift[m] > 0`` is a right shift and ``< 0`` a left shift applied
    before the multiply (saturating to int32); ``y + zero_point`` clamped to
    ``[act_min, act_max]``.

    Rounding contract (exactly gemmlowp / TFLite): the doubling high multiply rounds to nearest
    with ties toward +infinity (``SRDHM``), then the right shift rounds to nearest with ties away
    from zero (``RDBP``). Two roundings are not one round-half-to-even of the real product
    (onnxruntime's float ``QLinear*`` reference), so results can differ from that path by one
    LSB near ties.
    """
    acc = np.asarray(acc)
    if acc.ndim != 2 or acc.dtype != np.int32:
        raise ValueError(f"requantize: acc must be a 2-D int32 array, not {acc.dtype} "
                         f"{acc.shape}")
    m = acc.shape[0]

    def per_row(name, value, lo, hi):
        raw = np.asarray(value)
        if raw.dtype.kind not in "iu":      # (a float shift of 1.9 acted as 1, silently)
            raise ValueError(f"requantize: {name} must be integers, not {raw.dtype} "
                             f"{value!r:.60}")
        if raw.shape not in ((), (m,), (1,)):
            raise ValueError(f"requantize: {name} must be a scalar or one per output row, "
                             f"shape ({m},), not shape {raw.shape}")
        arr = np.broadcast_to(raw.astype(np.int64), (m,)).copy()
        if arr.size and (arr.min() < lo or arr.max() > hi):
            raise ValueError(f"requantize: {name} must be in [{lo}, {hi}]")
        return arr[:, None]

    mult = per_row("multiplier", multiplier, 1, INT32_MAX)
    sh = per_row("shift", shift, -31, 31)
    b = per_row("bias", 0 if bias is None else bias, INT32_MIN, INT32_MAX)
    for name, value in (("zero_point", zero_point), ("act_min", act_min), ("act_max", act_max)):
        if not isinstance(value, (int, np.integer)) or isinstance(value, bool):
            raise ValueError(f"requantize: {name} must be an int, not {value!r}")
        if not -128 <= value <= 127:
            raise ValueError(f"requantize: {name} must be in [-128, 127], not {value!r}")
    if act_min > act_max:
        raise ValueError(f"requantize: act_min={act_min} > act_max={act_max}; act_min must be "
                         f"<= act_max")
    x = acc.astype(np.int64) + b
    x = ((x - INT32_MIN) % (1 << 32)) + INT32_MIN                    # int32 wrap of acc + bias
    left = np.maximum(-sh, 0)
    x = np.clip(x << left, INT32_MIN, INT32_MAX)                     # saturating left shift
    y = _rounding_divide_by_pot(_rounding_doubling_high_mul(x, mult), np.maximum(sh, 0))
    return np.clip(y + zero_point, act_min, act_max).astype(np.int8)
