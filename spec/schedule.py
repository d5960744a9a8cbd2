"""The sequencer's schedule in plain Python: which steps run, what each loads, computes and
stores. Imports nothing from Amaranth.

This is the reference semantics of :class:`hw.sequencer.Sequencer`: the planner's cycle model
walks these steps, and the RTL tests check the byte and MAC-beat counters against
:func:`traffic`.
"""

from __future__ import annotations

import dataclasses
import zlib
from typing import Callable, Iterator, Sequence

import numpy as np

from .config import AccelConfig
from .desc import GemmDescriptor

__all__ = ["Step", "steps", "traffic", "a_load_crc"]


@dataclasses.dataclass(frozen=True)
class Step:
    """One (m partition, n partition, k partition) of a descriptor."""

    m0: int
    n0: int
    k0: int
    m_eff: int        # rows of this partition inside the matrix
    n_eff: int
    k_eff: int
    groups_m: int     # array tiles along m: ceil(m_eff / array_rows)
    groups_n: int
    load_a: bool      # the A block differs from the previous step's: loaded before this step
    load_b: bool
    last_k: bool      # last split-K step of its (m, n) partition: its store follows


def steps(d: GemmDescriptor, cfg: AccelConfig) -> Iterator[Step]:
    """Steps in execution order: outer partition loop, inner partition loop, split-K loop."""
    R, C = cfg.array_rows, cfg.array_cols
    ms = range(0, d.m, d.partition_m)
    ns = range(0, d.n, d.partition_n)
    ks = range(0, d.k, d.partition_k)
    if d.outer_m:
        order = ((m0, n0) for m0 in ms for n0 in ns)
    else:
        order = ((m0, n0) for n0 in ns for m0 in ms)
    prev = None
    for m0, n0 in order:
        for k0 in ks:
            m_eff = min(d.partition_m, d.m - m0)
            n_eff = min(d.partition_n, d.n - n0)
            yield Step(
                m0=m0, n0=n0, k0=k0, m_eff=m_eff, n_eff=n_eff,
                k_eff=min(d.partition_k, d.k - k0),
                groups_m=-(-m_eff // R), groups_n=-(-n_eff // C),
                load_a=prev is None or (prev[0], prev[2]) != (m0, k0),
                load_b=prev is None or (prev[1], prev[2]) != (n0, k0),
                last_k=k0 + d.partition_k >= d.k,
            )
            prev = (m0, n0, k0)


def traffic(d: GemmDescriptor, cfg: AccelConfig,
            group_table: Sequence[int] | None = None) -> dict[str, int]:
    """Exact values of the byte counters and of ``mac_active_cycles`` for a run of ``d``.

    A convolution (``b_mode = 1``) needs its group table (``run index of each lane group``, as
    in ``docs/conv_tables.md``): its B traffic is one B beat per table word, then one beat per
    run per tap of every gathered block.
    """
    out = {"rd_a_bytes": 0, "rd_b_bytes": 0, "wr_c_bytes": 0, "mac_active_cycles": 0}
    if d.b_mode:
        if group_table is None:
            raise ValueError("traffic() of a convolution descriptor needs its group_table")
        words = d.k + 2 * d.run_count + len(group_table)
        out["rd_b_bytes"] += words * cfg.b_beat_bytes
    for s in steps(d, cfg):
        if s.load_a:
            out["rd_a_bytes"] += s.k_eff * s.groups_m * cfg.a_beat_bytes
        if s.load_b and d.b_mode:
            g0 = s.n0 // cfg.array_cols
            runs = int(group_table[g0 + s.groups_n]) - int(group_table[g0])
            out["rd_b_bytes"] += s.k_eff * runs * cfg.b_beat_bytes
        elif s.load_b:
            out["rd_b_bytes"] += s.k_eff * s.groups_n * cfg.b_beat_bytes
        if s.last_k:
            out["wr_c_bytes"] += s.m_eff * s.groups_n * cfg.c_beat_bytes
        out["mac_active_cycles"] += s.groups_m * s.groups_n * s.k_eff
    return out


def a_load_crc(d: GemmDescriptor, cfg: AccelConfig, read: Callable[[int, int], bytes]) -> int:
    """CRC-32 (:func:`zlib.crc32`) of the A beats a run of ``d`` writes into buffer A, in the
    order the load engine writes them: the record word ``a_crc`` an image run checks when the
    layer ends (``ErrorCode.BAD_WEIGHTS``; docs/firmware.md).

    Every step that loads A (:func:`steps`) loads rows ``k0 .. k0 + k_eff - 1``, each as
    ``groups_m`` beats of ``a_beat_bytes``, row by row: row ``kk``'s bytes are
    ``A[kk, m0 .. m0 + m_eff - 1]`` (from ``a_addr + kk * a_stride + m0``) and zeros up to the
    whole beats (the engine masks bytes past ``m_eff``, so memory past the matrix never counts).
    ``read(addr, nbytes)`` returns device memory."""
    if not isinstance(d, GemmDescriptor):
        raise TypeError(f"a_load_crc needs a GemmDescriptor, not {type(d).__name__}")
    span = (d.k - 1) * d.a_stride + d.m
    raw = np.frombuffer(bytes(read(d.a_addr, span)), np.uint8)
    if raw.size != span:
        raise ValueError(f"read({d.a_addr:#x}, {span}) returned {raw.size} bytes")
    rows = np.lib.stride_tricks.as_strided(raw, shape=(d.k, d.m), strides=(d.a_stride, 1),
                                           writeable=False)      # A[kk, i], k-major
    w = cfg.a_beat_bytes
    crc = 0
    for s in steps(d, cfg):
        if s.load_a:
            block = np.zeros((s.k_eff, s.groups_m * w), np.uint8)
            block[:, :s.m_eff] = rows[s.k0:s.k0 + s.k_eff, s.m0:s.m0 + s.m_eff]
            crc = zlib.crc32(block.tobytes(), crc)
    return crc
