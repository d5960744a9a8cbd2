"""Tilings for tests: random legal descriptors (wider coverage than any planner's choice) and
memory placement of the three tensors."""

from __future__ import annotations

import dataclasses

import numpy as np

from spec.config import AccelConfig
from spec.desc import GemmDescriptor, Operands, check

__all__ = ["Placement", "place", "random_tiling", "descriptor", "align"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Placement(Operands):
    """Where A (k-major), B and C live, with their strides in bytes (the
    :class:`spec.desc.Operands` fields), and the guard regions around C."""

    guard_bytes: int
    end: int            # first byte past the last region (guards included)


def align(x: int, to: int = 64) -> int:
    """``x`` rounded up to a multiple of ``to``."""
    return -(-x // to) * to


def place(m: int, k: int, n: int, cfg: AccelConfig, *, rng: np.random.Generator | None = None,
          base: int = 0, guard_bytes: int = 64) -> Placement:
    """Lay A, B and C out one after another, with optional random row padding and a guard
    region before and after C (the testbench checks the guards stay untouched)."""
    pad = (lambda hi: int(rng.integers(0, hi + 1))) if rng is not None else (lambda hi: 0)
    r, c = cfg.array_rows, cfg.array_cols
    a_stride = m + pad(8)
    b_stride = n + pad(8)
    c_stride = 4 * n + 4 * pad(4)
    a_addr = align(base)
    a_end = a_addr + (k - 1) * a_stride + -(-m // r) * r
    b_addr = align(a_end)
    b_end = b_addr + (k - 1) * b_stride + -(-n // c) * c
    c_addr = align(b_end + guard_bytes)
    c_end = c_addr + (m - 1) * c_stride + 4 * n
    return Placement(a_addr=a_addr, a_stride=a_stride, b_addr=b_addr, b_stride=b_stride,
                     c_addr=c_addr, c_stride=c_stride, guard_bytes=guard_bytes,
                     end=align(c_end + guard_bytes))


def random_tiling(m: int, k: int, n: int, cfg: AccelConfig, rng: np.random.Generator, *,
                  outer_m: int | None = None, splitk: bool | None = None) -> dict:
    """A random tiling the hardware accepts: partitions in array multiples that fit the buffer
    halves and the accumulator half, random inner tiles, loop order and split-K (forced when
    ``k`` does not fit). Returns the tiling fields of a :class:`GemmDescriptor`."""
    R, C = cfg.array_rows, cfg.array_cols
    gm_all, gn_all = -(-m // R), -(-n // C)
    acc_elems = cfg.acc_half_bytes // cfg.acc_bytes
    # largest pm such that at least one array tile of n fits the accumulator and one k row fits A
    gm_max = min(gm_all, acc_elems // (R * C), cfg.buf_a_half_bytes // R)
    pm = R * int(rng.integers(1, gm_max + 1))
    gn_max = min(gn_all, acc_elems // (pm * C), cfg.buf_b_half_bytes // C)
    pn = C * int(rng.integers(1, gn_max + 1))
    pk_max = min(cfg.buf_a_half_bytes // pm, cfg.buf_b_half_bytes // pn)
    if splitk is None:
        splitk = bool(rng.integers(0, 2))
    if k > pk_max:
        splitk = True
    if splitk and k > 1:
        pk = int(rng.integers(1, min(k - 1, pk_max) + 1))
    else:
        pk = k
    tiling = dict(
        partition_m=pm, partition_n=pn, partition_k=pk,
        tile_m=R * int(rng.integers(1, pm // R + 1)),
        tile_n=C * int(rng.integers(1, pn // C + 1)),
        outer_m=int(rng.integers(0, 2)) if outer_m is None else outer_m,
        need_splitk=int(splitk),
        acc_buffer_needed=pm * pn * cfg.acc_bytes,
    )
    return tiling


def descriptor(m: int, k: int, n: int, tiling: dict, where: Placement,
               cfg: AccelConfig) -> GemmDescriptor:
    """Combine shape, tiling and placement; raise ``ValueError`` listing every rule broken."""
    desc = GemmDescriptor(m=m, k=k, n=n, **tiling, a_addr=where.a_addr, a_stride=where.a_stride,
                          b_addr=where.b_addr, b_stride=where.b_stride, c_addr=where.c_addr,
                          c_stride=where.c_stride)
    errors = check(desc, cfg)
    if errors:
        raise ValueError("illegal descriptor: " + "; ".join(msg for _, msg in errors))
    return desc
