"""Bit-exact numpy golden models of every operation the hardware performs.

Imports nothing from Amaranth. Every test compares RTL results with these functions.
"""

from __future__ import annotations

import numpy as np

__all__ = ["gemm_int8", "conv2d_int8"]


def gemm_int8(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``C = A @ B`` for int8 ``A`` (m x k) and ``B`` (k x n), as the matrix unit computes it.

    Products are exact int16; they are summed in an int32 accumulator that wraps modulo 2**32
    on overflow (two's complement), exactly like the hardware's 32-bit adders. The sum is computed
    in int64 and then wrapped, which gives the same result in any summation order.
    """
    a = np.asarray(a)
    b = np.asarray(b)
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"gemm_int8 needs A (m x k) and B (k x n), got {a.shape} and {b.shape}")
    for name, x in (("A", a), ("B", b)):
        if x.dtype != np.int8:
            raise ValueError(f"gemm_int8: {name} must be int8, not {x.dtype}")
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
        raise ValueError(f"conv2d_int8: empty x {x.shape} or w {w.shape}")
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
