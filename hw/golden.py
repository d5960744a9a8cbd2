"""Bit-exact numpy golden models of every operation the hardware performs.

Imports nothing from Amaranth. Every test compares RTL results with these functions.
"""

from __future__ import annotations

import numpy as np

__all__ = ["gemm_int8"]


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
