"""Seed 000's tiling method (BRIEF §2.1) and its legalisation to the hardware as built.

Two stages, both pure functions:

1. :func:`seed_decision` runs the seed's analytic method literally, in real-valued elements, and
   returns a :class:`SeedDecision` naming the branch it took (``"fits"``, ``"nosplit"`` or
   ``"splitk"``) with the seed's intermediate numbers (reload counts, utilisations, accumulator
   size). Unit tests check every branch against hand computations.
2. :func:`legalise` turns a decision into a :class:`TilingPlan` the hardware accepts
   (:func:`spec.desc.check` passes): partitions rounded to block multiples, fitting one double-buffer
   half of A and B and one accumulator half (int32 elements), ragged edges covered exactly once.

Seed parameters taken from :class:`spec.config.AccelConfig`: ``d_s`` = ``operand_bytes``; ``bs_a`` /
``bs_b`` = ``buf_a_half_bytes`` / ``buf_b_half_bytes`` (the hardware double-buffers, so one
partition may only use one half); load bandwidths = ``a_port_bytes_per_cycle`` /
``b_port_bytes_per_cycle`` (bytes per cycle, i.e. ``d_s`` * elements per cycle); ``hw_power`` =
``macs_per_cycle``; ``acc_max`` = ``acc_half_bytes``; sync granularity = ``sync_bytes``; block sizes
= ``block_m`` / ``block_n``.

Resolved inconsistencies of the seed (each also noted where the code makes the choice):

* ``gemm_cycle = m*k*n / hw_power``: the seed's formula (1) multiplies by ``d_s``; a MAC count
  over MACs per cycle has no element size in it.
* No-split utilisation is ``gemm / max(gemm, loadA_total, loadB_total)`` over all three terms for
  each loop order; the seed's formula (8) drops the non-reloaded operand's term.
* Split-K reload ratio: derived from equal total load cycles, ``reloads_a / reloads_b =
  (n*k/bw_b) / (m*k/bw_a) = n*bw_a / (m*bw_b)``; the seed's ¶191 states the inverse.
* The accumulator element is ``acc_bytes`` (int32), not ``d_s``: ``reloads_a * reloads_b =
  m*n*acc_bytes / acc``.
* Formula (7) lacks its ``max``: ``util_splitk = gemm / max(gemm, loadA_total, loadB_total)``.
* Reload counts are whole partitions (``ceil``), not the seed's real-valued ratios.
* "Fits" case: the seed keeps A resident when ``m < n``; if A then does not fit a buffer half but
  B does, B is kept resident instead (the seed's choice would overflow).
* The hardware always stages results in the accumulator, so every plan, split-K or not, needs
  ``acc_buffer_needed >= partition_m * partition_n * 4`` (the seed reports 0 without split-K).
* Accumulator halving stops at one array tile of int32 (``R * C * 4`` bytes).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Literal

from spec.config import AccelConfig
from spec.desc import DESC_FIELDS, GemmDescriptor, Tiling, check

from .cost import predict_tiling, utilisation
from .shapes import GemmShape

__all__ = ["TilingPlan", "SeedDecision", "Branch", "seed_decision", "legalise", "seed_plan",
           "inner_tiles", "acc_bytes_for", "make_plan", "to_descriptor", "SPLITK_OUTER_M",
           "TILING_FIELDS", "tiling_fields"]

#: The descriptor fields a :class:`TilingPlan` decides (seed 000's outputs): the descriptor's
#: fields from ``partition_m`` to ``acc_buffer_needed``, in descriptor order.
TILING_FIELDS = DESC_FIELDS[DESC_FIELDS.index("partition_m"):
                            DESC_FIELDS.index("acc_buffer_needed") + 1]

Branch = Literal["fits", "nosplit", "splitk"]

#: Seed ¶200: the outer loop flag of the split-K branch is a preset; 1 = m partitions outside.
SPLITK_OUTER_M = 1


@dataclasses.dataclass(frozen=True, kw_only=True)
class TilingPlan(Tiling):
    """A legal tiling of one GEMM, with the seed's output names (seed 000 step 5 loop nest):
    the :class:`spec.desc.Tiling` fields, then the plan's derived numbers.

    ``loads_a`` / ``loads_b`` count how many times the whole operand is read from memory;
    ``predicted_util`` and ``predicted_cycles`` come from :func:`planner.cost.predict`;
    ``strategy`` names the planner that produced the plan (``seed``, ``greedy``, ``search``,
    ``seed+local``...).
    """

    loads_a: int
    loads_b: int
    predicted_cycles: int
    predicted_util: float
    strategy: str

    @property
    def shape(self) -> GemmShape:
        return GemmShape(self.m, self.k, self.n)

    @property
    def key(self) -> tuple[int, ...]:
        """The tiling itself (what the hardware sees), without derived numbers."""
        return tuple(getattr(self, name) for name in TILING_FIELDS)


@dataclasses.dataclass(frozen=True, kw_only=True)
class SeedDecision:
    """The seed method's real-valued outputs before legalisation (seed 000 steps 1-4)."""

    branch: Branch
    partition_m: float
    partition_n: float
    partition_k: float
    outer_m: int
    need_splitk: int
    acc_buffer_needed: float  # bytes; the seed's 0 when no accumulator is needed
    loads_a: int
    loads_b: int
    util: float               # the seed's analytic utilisation of the chosen branch
    util_nosplit: float = 0.0
    util_splitk: float = 0.0


def _seed_inputs(cfg: AccelConfig):
    d_s = cfg.operand_bytes
    return (d_s, cfg.a_port_bytes_per_cycle / d_s, cfg.b_port_bytes_per_cycle / d_s,
            cfg.buf_a_half_bytes, cfg.buf_b_half_bytes, cfg.macs_per_cycle)


def _splitk_loads(m: int, n: int, acc: float, la: float, lb: float, acc_elem: int
                  ) -> tuple[int, int]:
    """Integer reload counts for split-K with accumulator ``acc`` bytes (seed ¶154-156, ¶191).

    ``ra * rb >= P = m*n*acc_elem/acc`` (the output partitions fit the accumulator); the ratio
    comes from equal total load cycles, ``la*ra == lb*rb`` (la, lb = cycles of one full load);
    both positive integers; then the seed's doubling/halving keeps ``la*ra / (lb*rb)`` in
    ``[0.5, 2]`` where integers allow.
    """
    p = max(1, math.ceil(m * n * acc_elem / acc))
    ideal_ra = math.sqrt(p * lb / la)
    best = None
    for ra in {max(1, math.floor(ideal_ra)), max(1, math.ceil(ideal_ra))}:
        rb = max(1, math.ceil(p / ra))
        cost = (max(la * ra, lb * rb), ra + rb, ra)
        if best is None or cost < best[0]:
            best = (cost, ra, rb)
    _, ra, rb = best
    # Seed ¶155: outside [0.5, 2] double one count and halve the other (product kept >= p).
    for _ in range(64):
        ratio = la * ra / (lb * rb)
        if ratio > 2 and ra > 1:
            ra, rb = max(1, ra // 2), rb * 2
        elif ratio < 0.5 and rb > 1:
            ra, rb = ra * 2, max(1, rb // 2)
        else:
            break
        rb = max(rb, math.ceil(p / ra))
    return ra, rb


def seed_decision(shape: GemmShape, cfg: AccelConfig, b_bytes: int | None = None) -> SeedDecision:
    """Seed 000 steps 1-3 on ``shape``; ``b_bytes`` overrides the size of one load of B.

    For a convolution ``b_bytes`` is the input tensor (seed: the B load counts it once, R*S
    reuse), not the im2col matrix ``k*n``.
    """
    m, k, n = shape.m, shape.k, shape.n
    d_s, bw_a, bw_b, bs_a, bs_b, hw_power = _seed_inputs(cfg)
    acc_elem, acc_max = cfg.acc_bytes, cfg.acc_half_bytes
    size_a = m * k * d_s                                       # step 1
    size_b = k * n * d_s if b_bytes is None else b_bytes
    gemm = m * k * n / hw_power                                # formula (1), without d_s
    la = size_a / (bw_a * d_s)                                 # formula (2): one full load of A
    lb = size_b / (bw_b * d_s)                                 # formula (3)

    if size_a <= bs_a or size_b <= bs_b:                       # step 2: one operand resident
        util = gemm / max(gemm, la, lb)                        # formula (4)
        a_resident = size_a <= bs_a and (m < n or size_b > bs_b)
        if a_resident:  # seed: m < n -> partition_m = m, flag 1 (m outside, n inside)
            pm, pn, outer = m, min(bs_b / (k * d_s), n), 1
        else:           # seed: else partition_n = n, flag 0
            pm, pn, outer = min(bs_a / (k * d_s), m), n, 0
        return SeedDecision(branch="fits", partition_m=pm, partition_n=pn, partition_k=k,
                            outer_m=outer, need_splitk=0, acc_buffer_needed=0, loads_a=1,
                            loads_b=1, util=util, util_nosplit=util)

    # Step 3: reloads unavoidable. No split-K, both orders; max of all three terms (not (8)).
    pm_ns, pn_ns = bs_a / (k * d_s), bs_b / (k * d_s)
    reloads_b = math.ceil(m / pm_ns) if pm_ns >= 1 else m     # order 1: n inside, B reloaded
    reloads_a = math.ceil(n / pn_ns) if pn_ns >= 1 else n     # order 0: m inside, A reloaded
    cyc_1 = max(gemm, la, lb * reloads_b)
    cyc_0 = max(gemm, la * reloads_a, lb)
    util_ns = gemm / min(cyc_1, cyc_0)

    def util_sk(acc: float) -> tuple[float, int, int]:
        ra, rb = _splitk_loads(m, n, acc, la, lb, acc_elem)
        return gemm / max(gemm, la * ra, lb * rb), ra, rb    # formula (7) with its max

    util_max, ra, rb = util_sk(acc_max)
    if util_ns >= util_max:
        # Seed ¶177-181: partitions fill the buffers, partition_k = k; the operand with the lower
        # bandwidth stays resident (bw_a < bw_b -> flag 1, A loaded once).
        if bw_a < bw_b:
            return SeedDecision(branch="nosplit", partition_m=pm_ns, partition_n=pn_ns,
                                partition_k=k, outer_m=1, need_splitk=0, acc_buffer_needed=0,
                                loads_a=1, loads_b=reloads_b, util=gemm / cyc_1,
                                util_nosplit=util_ns, util_splitk=util_max)
        return SeedDecision(branch="nosplit", partition_m=pm_ns, partition_n=pn_ns,
                            partition_k=k, outer_m=0, need_splitk=0, acc_buffer_needed=0,
                            loads_a=reloads_a, loads_b=1, util=gemm / cyc_0,
                            util_nosplit=util_ns, util_splitk=util_max)
    # Split-K: halve the accumulator while the utilisation stays equal (seed ¶185-188); stop at
    # one array tile of int32.
    acc, util = acc_max, util_max
    floor_bytes = cfg.array_rows * cfg.array_cols * acc_elem
    while acc / 2 >= floor_bytes:
        u2, ra2, rb2 = util_sk(acc / 2)
        if u2 < util:
            break
        acc, ra, rb = acc / 2, ra2, rb2
    pm, pn = m / rb, n / ra                                    # seed ¶190
    pk = min(bs_a / (pm * d_s), bs_b / (pn * d_s), k)
    return SeedDecision(branch="splitk", partition_m=pm, partition_n=pn, partition_k=pk,
                        outer_m=SPLITK_OUTER_M, need_splitk=1, acc_buffer_needed=acc,
                        loads_a=ra, loads_b=rb, util=util, util_nosplit=util_ns,
                        util_splitk=util_max)


def inner_tiles(partition_m: int, partition_n: int, cfg: AccelConfig) -> tuple[int, int]:
    """Seed 000 step 4: inner tiles from the sync granularity and the block sizes.

    ``sync_bytes`` is converted to the seed's unit, minimum data blocks (seed ¶209): ``sync =
    sync_bytes / (block_m * block_n * d_s)``. Then ``tile_m_block = min(sync / (2*d_s),
    block_num_m)`` and ``tile_n_block = max(1, sync / (2*d_s) / tile_m_block)``, clamped to the
    partition (the seed leaves ``tile_n`` unbounded) and to at least one block.
    """
    d_s = cfg.operand_bytes
    sync_blocks = cfg.sync_bytes // (cfg.block_m * cfg.block_n * d_s)
    per_sync = max(1, sync_blocks // (2 * d_s))
    block_num_m = max(1, partition_m // cfg.block_m)
    block_num_n = max(1, partition_n // cfg.block_n)
    tile_m_block = max(1, min(per_sync, block_num_m))
    tile_n_block = min(max(1, per_sync // tile_m_block), block_num_n)
    tile_m = min(tile_m_block * cfg.block_m, partition_m)
    tile_n = min(tile_n_block * cfg.block_n, partition_n)
    # Array multiples (blocks are multiples of the array, partitions too): already true.
    return tile_m, tile_n


def acc_bytes_for(partition_m: int, partition_n: int, cfg: AccelConfig,
                  at_least: float = 0) -> int:
    """Smallest ``acc_half_bytes / 2**j`` holding the partition's int32 outputs (and ``at_least``).

    Power-of-two fractions of the accumulator half, as the seed's halving produces.
    """
    need = max(partition_m * partition_n * cfg.acc_bytes, at_least)
    acc = cfg.acc_half_bytes
    while acc // 2 >= need and acc % 2 == 0:
        acc //= 2
    return acc


def _round_dim(ideal: float, dim: int, block: int) -> int:
    """A block multiple near ``ideal``: the whole (rounded-up) dim if ``ideal`` covers it."""
    cover = -(-dim // block) * block
    if ideal >= dim:
        return cover
    return max(block, min(cover, int(ideal // block) * block))


def tiling_fields(shape: GemmShape, cfg: AccelConfig, partition_m: int, partition_n: int,
                  partition_k: int, outer_m: int, acc_at_least: float = 0,
                  tiles: tuple[int, int] | None = None) -> dict[str, int]:
    """The descriptor's :data:`TILING_FIELDS` of a legal tiling (the part of
    :func:`make_plan` without the GEMM model's predictions: what a search ranking tilings
    with another cycle model needs)."""
    m, k, n = shape.m, shape.k, shape.n
    nm, nn = -(-m // partition_m), -(-n // partition_n)
    if nm == 1 or nn == 1:
        outer_m = 1  # canonical: with one partition along m or n both orders are one sequence
    tile_m, tile_n = tiles if tiles else inner_tiles(partition_m, partition_n, cfg)
    return dict(partition_m=partition_m, partition_n=partition_n,
                partition_k=min(partition_k, k), tile_m=tile_m, tile_n=tile_n,
                outer_m=outer_m, need_splitk=int(partition_k < k),
                acc_buffer_needed=acc_bytes_for(partition_m, partition_n, cfg, acc_at_least))


def make_plan(shape: GemmShape, cfg: AccelConfig, partition_m: int, partition_n: int,
              partition_k: int, outer_m: int, strategy: str, acc_at_least: float = 0,
              tiles: tuple[int, int] | None = None) -> TilingPlan:
    """Complete a legal tiling with inner tiles, accumulator size, loads and predictions."""
    m, k, n = shape.m, shape.k, shape.n
    fields = tiling_fields(shape, cfg, partition_m, partition_n, partition_k, outer_m,
                           acc_at_least, tiles)
    bd = predict_tiling(m, k, n, partition_m, partition_n, partition_k, fields["outer_m"], cfg)
    loads_a = bd.rd_a_bytes // (k * -(-m // cfg.array_rows) * cfg.a_beat_bytes)
    loads_b = bd.rd_b_bytes // (k * -(-n // cfg.array_cols) * cfg.b_beat_bytes)
    return TilingPlan(
        m=m, k=k, n=n, **fields, loads_a=loads_a, loads_b=loads_b,
        predicted_cycles=bd.total_cycles,
        predicted_util=utilisation(m, k, n, cfg, bd.total_cycles), strategy=strategy)


def legalise(decision: SeedDecision, shape: GemmShape, cfg: AccelConfig,
             strategy: str = "seed") -> TilingPlan:
    """Round a seed decision to a plan :func:`spec.desc.check` accepts.

    * ``partition_m`` / ``partition_n``: block multiples (``block_m`` / ``block_n``, themselves
      array multiples); a value covering the dim becomes the dim rounded up, so the ragged last
      partition is covered exactly once by the sequencer's ``min(pm, m - m0)``.
    * Operand halves: ``pm`` / ``pn`` at most the block multiples one k step of which fits
      buffer A's / B's half (a block always fits: :class:`AccelConfig` requires it). Without
      this a config with an operand half smaller than the rounded partition got ``pk = 0``,
      hidden by ``max(1, ...)``: a descriptor the checker refuses.
    * Accumulator: while ``pm * pn * acc_bytes > acc_half_bytes`` shrink the streamed (inner
      loop) dimension first, then the resident one, one block at a time.
    * ``partition_k``: ``k`` without split-K if both operand blocks fit their halves, else the
      largest ``pk`` that fits, equalised to ``ceil(k / ceil(k / pk))`` so the split-K partitions
      have equal size (no tiny ragged last partition).
    """
    m, k, n = shape.m, shape.k, shape.n
    bm, bn = cfg.block_m, cfg.block_n
    pm = _round_dim(decision.partition_m, m, bm)
    pn = _round_dim(decision.partition_n, n, bn)
    pm = min(pm, max(bm, cfg.buf_a_half_bytes // cfg.operand_bytes // bm * bm))
    pn = min(pn, max(bn, cfg.buf_b_half_bytes // cfg.operand_bytes // bn * bn))
    acc_cap = cfg.acc_half_bytes // cfg.acc_bytes
    # The inner partition loop streams; shrink it first (outer_m=1: n inside).
    first, second = ("n", "m") if decision.outer_m else ("m", "n")
    for dim in (first, second):
        while pm * pn > acc_cap:
            if dim == "n" and pn > bn:
                pn = max(bn, min(pn - bn, (acc_cap // pm) // bn * bn))
            elif dim == "m" and pm > bm:
                pm = max(bm, min(pm - bm, (acc_cap // pn) // bm * bm))
            else:
                break
    cap_k = min(cfg.buf_a_half_bytes // (pm * cfg.operand_bytes),
                cfg.buf_b_half_bytes // (pn * cfg.operand_bytes))
    if decision.need_splitk:
        pk = max(1, min(int(decision.partition_k), cap_k, k))
    else:
        pk = min(k, cap_k)  # without split-K the whole k must fit; else split (deviation)
    pk = -(-k // -(-k // pk))
    acc_at_least = decision.acc_buffer_needed if decision.need_splitk else 0
    acc_at_least = min(acc_at_least, cfg.acc_half_bytes)
    return make_plan(shape, cfg, pm, pn, pk, decision.outer_m, strategy, acc_at_least)


def seed_plan(shape: GemmShape, cfg: AccelConfig, b_bytes: int | None = None) -> TilingPlan:
    """Seed 000 method, legalised: ``legalise(seed_decision(shape, cfg, b_bytes), ...)``."""
    return legalise(seed_decision(shape, cfg, b_bytes), shape, cfg, "seed")


def to_descriptor(plan: TilingPlan, shape: GemmShape, cfg: AccelConfig, a_addr: int, b_addr: int,
                  c_addr: int, a_stride: int | None = None, b_stride: int | None = None,
                  c_stride: int | None = None) -> GemmDescriptor:
    """The :class:`spec.desc.GemmDescriptor` executing ``plan`` on ``shape``.

    Default strides are dense: ``a_stride = m`` (A is k-major), ``b_stride = n``, ``c_stride =
    4 * n``. Raises :class:`ValueError` if ``plan`` is for another shape or breaks a rule of
    :func:`spec.desc.check` (the message lists every broken rule).
    """
    if (plan.m, plan.k, plan.n) != (shape.m, shape.k, shape.n):
        raise ValueError(f"plan is for shape {plan.m}x{plan.k}x{plan.n}, not {shape}")
    desc = GemmDescriptor(
        m=shape.m, k=shape.k, n=shape.n, partition_m=plan.partition_m,
        partition_n=plan.partition_n, partition_k=plan.partition_k, tile_m=plan.tile_m,
        tile_n=plan.tile_n, outer_m=plan.outer_m, need_splitk=plan.need_splitk,
        acc_buffer_needed=plan.acc_buffer_needed, a_addr=a_addr,
        a_stride=shape.m if a_stride is None else a_stride, b_addr=b_addr,
        b_stride=shape.n if b_stride is None else b_stride, c_addr=c_addr,
        c_stride=cfg.acc_bytes * shape.n if c_stride is None else c_stride)
    errs = check(desc, cfg)
    if errs:
        raise ValueError("descriptor breaks spec.desc rules: " + "; ".join(msg for _, msg in errs))
    return desc
