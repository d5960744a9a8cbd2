"""Search strategies over legal tilings: the exhaustive oracle, a Gemmini-style greedy baseline and
the default planner (seed 000 refined by local search).

The search space is an iterator of :class:`Candidate` (``partition_m``, ``partition_n``,
``partition_k``, ``outer_m``) and the objective :func:`planner.cost.predict_tiling`'s
``total_cycles`` (ties: smaller accumulator, fewer DRAM bytes, then the tiling numbers, so every
strategy is deterministic).

Oracle space (:func:`candidates`): ``partition_m`` / ``partition_n`` every block multiple up to the
dim rounded up whose int32 outputs fit one accumulator half; ``partition_k`` every value
``ceil(k / nk)`` (the balanced split into ``nk`` partitions, ``nk = 1`` being no split-K) that fits
both buffer halves, or every ``1..k`` with ``exhaustive_k=True``; both loop orders when both
have more than one partition. Accumulator size is not a free axis: the model's cycles do not depend
on it, so each tiling gets the smallest power-of-two fraction of the half that holds it. Inner
tiles (``tile_m``, ``tile_n``) only order array tiles that run back to back, so they do not change
the cycles either; all strategies use seed 000 step 4 for them.

Pruning is exact: candidates are visited in order of :func:`planner.cost.lower_bound_cycles`
and the search stops when the bound reaches the best total found. Restricting ``partition_k`` to
balanced values loses at most 0.03% on ResNet-50's layers against ``exhaustive_k=True`` (tested;
a short last chunk can shorten the prologue, so on tiny shapes an uneven split wins by up to 4%).
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Iterator

from spec.config import AccelConfig

from .cost import DEFAULT_CONSTANTS, ModelConstants, lower_bound_cycles, predict_tiling
from .shapes import GemmShape
from .tiling import TilingPlan, acc_bytes_for, make_plan, seed_plan

__all__ = ["Candidate", "candidates", "search", "greedy_plan", "refine", "best_plan",
           "balanced_k_values"]


@dataclasses.dataclass(frozen=True, order=True)
class Candidate:
    partition_m: int
    partition_n: int
    partition_k: int
    outer_m: int


def balanced_k_values(k: int, cap: int) -> list[int]:
    """Distinct ``ceil(k / nk)`` for ``nk >= 1`` that are ``<= cap``, largest first."""
    out, nk = [], max(1, -(-k // max(cap, 1)))
    while nk <= k:
        v = -(-k // nk)
        if v <= cap and (not out or out[-1] != v):
            out.append(v)
        nk = max(nk + 1, -(-k // (v - 1)) if v > 1 else k + 1)
    return out


def _pairs(shape: GemmShape, cfg: AccelConfig) -> Iterator[tuple[int, int, int]]:
    bm, bn = cfg.block_m, cfg.block_n
    acc_cap = cfg.acc_half_bytes // cfg.acc_bytes
    d_s = cfg.operand_bytes
    for pm in range(bm, -(-shape.m // bm) * bm + 1, bm):
        for pn in range(bn, -(-shape.n // bn) * bn + 1, bn):
            if pm * pn > acc_cap:
                break
            cap = min(cfg.buf_a_half_bytes // (pm * d_s), cfg.buf_b_half_bytes // (pn * d_s))
            if cap >= 1:
                yield pm, pn, cap


def candidates(shape: GemmShape, cfg: AccelConfig, exhaustive_k: bool = False
               ) -> Iterator[Candidate]:
    """Every legal tiling of the oracle's space (see the module docstring)."""
    m, k, n = shape.m, shape.k, shape.n
    for pm, pn, cap in _pairs(shape, cfg):
        ks = range(min(k, cap), 0, -1) if exhaustive_k else balanced_k_values(k, cap)
        multi = -(-m // pm) > 1 and -(-n // pn) > 1
        for pk in ks:
            yield Candidate(pm, pn, pk, 1)
            if multi:
                yield Candidate(pm, pn, pk, 0)


def _key(shape: GemmShape, cfg: AccelConfig, c: Candidate, consts: ModelConstants):
    bd = predict_tiling(shape.m, shape.k, shape.n, c.partition_m, c.partition_n, c.partition_k,
                        c.outer_m, cfg, consts)
    return (bd.total_cycles, acc_bytes_for(c.partition_m, c.partition_n, cfg),
            bd.rd_a_bytes + bd.rd_b_bytes + bd.wr_c_bytes, -c.partition_k, c.partition_m,
            c.partition_n, -c.outer_m)


def _plan(shape: GemmShape, cfg: AccelConfig, c: Candidate, strategy: str) -> TilingPlan:
    return make_plan(shape, cfg, c.partition_m, c.partition_n, c.partition_k, c.outer_m,
                     strategy)


def search(shape: GemmShape, cfg: AccelConfig, exhaustive_k: bool = False,
           consts: ModelConstants = DEFAULT_CONSTANTS) -> TilingPlan:
    """The oracle: the candidate with the fewest predicted cycles (branch and bound, exact)."""
    m, k, n = shape.m, shape.k, shape.n
    bounded = []
    for c in candidates(shape, cfg, exhaustive_k):
        if c.outer_m == 0:
            continue  # same bound as its outer_m=1 twin, which is added just before
        lb = lower_bound_cycles(m, k, n, c.partition_m, c.partition_n, c.partition_k, cfg,
                                consts)
        bounded.append((lb, c))
    bounded.sort(key=lambda x: x[0])
    best = best_key = None
    for lb, c in bounded:
        if best_key is not None and lb > best_key[0]:
            break
        twins = [c]
        if -(-m // c.partition_m) > 1 and -(-n // c.partition_n) > 1:
            twins.append(dataclasses.replace(c, outer_m=0))
        for cand in twins:
            key = _key(shape, cfg, cand, consts)
            if best_key is None or key < best_key:
                best, best_key = cand, key
    if best is None:
        raise ValueError(f"no legal tiling of {shape} fits this configuration")
    return _plan(shape, cfg, best, "search")


def greedy_plan(shape: GemmShape, cfg: AccelConfig) -> TilingPlan:
    """Gemmini-style baseline: grow the tiles round-robin (n, m, k) while they fit.

    Starting from one block along m and n and one array height (``array_rows``) along k, each
    round grows ``partition_n`` by ``block_n``, ``partition_m`` by ``block_m`` and
    ``partition_k`` by ``array_rows`` where the A and B buffer halves and the accumulator half
    still hold them and the dim is not yet covered; stops when nothing grows. Loop order fixed:
    m partitions outside, n inside, k innermost (Gemmini's ``i0, j0, k0``).
    """
    m, k, n = shape.m, shape.k, shape.n
    bm, bn, step_k = cfg.block_m, cfg.block_n, cfg.array_rows
    d_s = cfg.operand_bytes
    acc_cap = cfg.acc_half_bytes // cfg.acc_bytes
    m_top, n_top, k_top = -(-m // bm) * bm, -(-n // bn) * bn, -(-k // step_k) * step_k

    def fits(pm, pn, pk):
        pk = min(pk, k)
        return (pm * pk * d_s <= cfg.buf_a_half_bytes and pk * pn * d_s <= cfg.buf_b_half_bytes
                and pm * pn <= acc_cap)

    pm, pn, pk = bm, bn, min(step_k, k)
    if not fits(pm, pn, pk):
        pk = 1
    grown = True
    while grown:
        grown = False
        if pn + bn <= n_top and fits(pm, pn + bn, pk):
            pn, grown = pn + bn, True
        if pm + bm <= m_top and fits(pm + bm, pn, pk):
            pm, grown = pm + bm, True
        if pk < k and pk + step_k <= k_top and fits(pm, pn, pk + step_k):
            pk, grown = min(pk + step_k, k), True
    return _plan(shape, cfg, Candidate(pm, pn, pk, 1), "greedy")


def _neighbours(shape: GemmShape, cfg: AccelConfig, c: Candidate) -> Iterator[Candidate]:
    m, k, n = shape.m, shape.k, shape.n
    bm, bn = cfg.block_m, cfg.block_n
    acc_cap = cfg.acc_half_bytes // cfg.acc_bytes
    d_s = cfg.operand_bytes
    m_top, n_top = -(-m // bm) * bm, -(-n // bn) * bn
    pms = {c.partition_m, c.partition_m - bm, c.partition_m + bm, c.partition_m * 2,
           c.partition_m // 2 // bm * bm, m_top}
    pns = {c.partition_n, c.partition_n - bn, c.partition_n + bn, c.partition_n * 2,
           c.partition_n // 2 // bn * bn, n_top}
    for pm in pms:
        if not bm <= pm <= m_top:
            continue
        for pn in pns:
            if not bn <= pn <= n_top or pm * pn > acc_cap:
                continue
            cap = min(cfg.buf_a_half_bytes // (pm * d_s), cfg.buf_b_half_bytes // (pn * d_s))
            if cap < 1:
                continue
            ks = balanced_k_values(k, cap)
            # keep pk's split count or move it by one; the largest fitting pk
            nk = -(-k // c.partition_k)
            picks = {ks[0]}
            for v in ks:
                if abs(-(-k // v) - nk) <= 1:
                    picks.add(v)
            for pk in picks:
                yield Candidate(pm, pn, pk, c.outer_m)
                yield Candidate(pm, pn, pk, 1 - c.outer_m)


def refine(shape: GemmShape, cfg: AccelConfig, start: TilingPlan, max_rounds: int = 64,
           consts: ModelConstants = DEFAULT_CONSTANTS,
           key: Callable[[Candidate], tuple] | None = None,
           bound: Callable[[Candidate], int] | None = None) -> Candidate:
    """Steepest-descent local search over neighbouring legal tilings from ``start``.

    Neighbours change ``partition_m`` / ``partition_n`` by one block, double or halve them or
    make them cover the dim, move the split-K count by at most one (balanced ``partition_k``) or
    take the largest fitting ``partition_k``, and flip the loop order. Candidates are ranked by
    ``key`` (smaller is better; its first element the cycles), the GEMM model's by default,
    whose lower bound then skips neighbours that cannot win. :mod:`planner.convplan` ranks with
    the convolution model instead, and gives its lower bound as ``bound`` (a neighbour whose
    bound exceeds the best cycles found is skipped: it cannot win).
    """
    if key is None:
        if bound is not None:
            raise ValueError("refine: bound= goes with a key= of its own (the GEMM model's key "
                             "brings its lower bound)")

        def key(c: Candidate) -> tuple:
            return _key(shape, cfg, c, consts)

        def bound(c: Candidate) -> int:
            return lower_bound_cycles(shape.m, shape.k, shape.n, c.partition_m, c.partition_n,
                                      c.partition_k, cfg, consts)
    cur = Candidate(start.partition_m, start.partition_n, start.partition_k, start.outer_m)
    cur_key = key(cur)
    for _ in range(max_rounds):
        best, best_key = cur, cur_key
        for c in _neighbours(shape, cfg, cur):
            if bound is not None and bound(c) > best_key[0]:
                continue  # cannot beat the best neighbour so far
            k = key(c)
            if k < best_key:
                best, best_key = c, k
        if best == cur:
            break
        cur, cur_key = best, best_key
    return cur


def best_plan(shape: GemmShape, cfg: AccelConfig, b_bytes: int | None = None) -> TilingPlan:
    """The default planner: seed 000, refined by local search when that predicts fewer cycles.

    Local search starts from both the seed plan and the greedy plan; ``strategy`` reports
    ``"seed"`` when the seed plan was already the best found, else ``"seed+local"``.
    """
    seed = seed_plan(shape, cfg, b_bytes)
    best = seed
    for start in (seed, greedy_plan(shape, cfg)):
        c = refine(shape, cfg, start)
        if c != Candidate(seed.partition_m, seed.partition_n, seed.partition_k, seed.outer_m):
            plan = _plan(shape, cfg, c, "seed+local")
            if plan.predicted_cycles < best.predicted_cycles:
                best = plan
    if best is seed:
        return dataclasses.replace(seed, strategy="seed")
    return best
