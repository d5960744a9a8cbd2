"""Answering a shape from the tuning database (seed 001 ¶100-121).

Matching rules (seed ¶104): *exact* (same shape) and *multiple* (same rank, every dimension of the
query an integer multiple of the record's). Lookup order (seed ¶106-118, figure 7):

1. exact match in the initial database;
2. exact match in the boundary database;
3. multiple match in the initial database;
4. multiple match in the boundary database.

Several matches under one rule: the lowest estimated cost wins (¶120; ties: initial before
boundary, then the smaller record shape). Estimated cost of running the query with a record's
tiling: ``record cycles * prod_d ceil(query_d / tile_d) / prod_d ceil(record_d / tile_d)``, the
tile being the record's partition sizes (``partition_m, partition_k, partition_n``). Records are
whole numbers of their tiles (regular loops, :mod:`planner.tunedb.build`), so for a multiple this
is the size ratio, and the estimate holds in the linear regime the boundary walk established.

Auto-padding (¶121): when the query matches nothing, it is padded, and the four rules are tried
again on the padded shape, which is what then runs (rows and columns of zeros; the extra output is
discarded): first to ``block_m`` / ``block_n`` multiples, then, per record, to the smallest
multiple of that record's shape, accepted when the padded volume is at most ``1 + max_pad``
times the query's. When nothing matches the analytic planner answers (``rule = "analytic"``).
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Sequence

from spec.config import AccelConfig
from planner.search import best_plan
from planner.shapes import GemmShape
from planner.tiling import TILING_FIELDS, TilingPlan, make_plan

from .build import DIMS, PARTITION, pad_to_blocks
from .store import Record, TuneDB

__all__ = ["RULES", "LookupResult", "lookup", "estimate", "tile_count", "run_tiling", "db_plan",
           "match"]

#: Lookup rules in the seed's order.
RULES = ("exact-initial", "exact-boundary", "multiple-initial", "multiple-boundary")
#: Largest accepted padding overhead (padded volume / query volume - 1) by default.
MAX_PAD = 0.25


@dataclasses.dataclass(frozen=True)
class LookupResult:
    """The answer for ``query``: run ``run_shape`` with ``tiling``; ``estimated_cycles``.

    ``rule`` is one of :data:`RULES` or ``"analytic"`` (no match: the analytic planner's plan and
    prediction); ``padding`` is ``"none"``, ``"blocks"`` or ``"record"``; ``record`` the matched
    record; ``matches`` how many records matched under the winning rule.
    """

    query: tuple[int, int, int]
    run_shape: tuple[int, int, int]
    rule: str
    padding: str
    tiling: tuple[int, ...]
    estimated_cycles: int
    record: Record | None
    matches: int

    @property
    def tiling_dict(self) -> dict[str, int]:
        return dict(zip(TILING_FIELDS, self.tiling))

    def as_dict(self) -> dict:
        return {"query": list(self.query), "run_shape": list(self.run_shape), "rule": self.rule,
                "padding": self.padding, "tiling": self.tiling_dict,
                "estimated_cycles": self.estimated_cycles, "matches": self.matches,
                "record": None if self.record is None else
                {"kind": self.record.kind, "shape": list(self.record.dims),
                 "cycles": self.record.cycles, "source": self.record.source}}


def _tile(record: Record) -> tuple[int, int, int]:
    t = record.tiling_dict
    return tuple(t[PARTITION[d]] for d in DIMS)


def tile_count(dims: Sequence[int], tile: Sequence[int]) -> int:
    """``prod_d ceil(dims_d / tile_d)``."""
    return math.prod(-(-d // t) for d, t in zip(dims, tile))


def estimate(record: Record, dims: Sequence[int]) -> int:
    """Estimated cycles of ``dims`` run with ``record``'s tiling (the module docstring)."""
    tile = _tile(record)
    return round(record.cycles * tile_count(dims, tile) / tile_count(record.dims, tile))


def run_tiling(record: Record, dims: Sequence[int], cfg: AccelConfig) -> tuple[int, ...]:
    """``record``'s tiling applied to ``dims`` (split-K flag and loop order recomputed)."""
    t = record.tiling_dict
    plan = make_plan(GemmShape(*dims), cfg, t["partition_m"], t["partition_n"], t["partition_k"],
                     t["outer_m"], "db", tiles=(t["tile_m"], t["tile_n"]))
    return plan.key


def _is_multiple(dims: Sequence[int], ref: Sequence[int]) -> bool:
    return all(d % r == 0 for d, r in zip(dims, ref))


def match(records: Sequence[Record], dims: tuple[int, int, int]
          ) -> tuple[str, list[tuple[int, Record]]] | None:
    """The first rule of :data:`RULES` with a match for ``dims``: ``(rule, [(estimate,
    record), ...])`` sorted best first; ``None`` when no rule matches."""
    for rule in RULES:
        kind = rule.split("-")[1]
        if rule.startswith("exact"):
            hits = [r for r in records if r.kind == kind and r.dims == dims]
        else:
            hits = [r for r in records if r.kind == kind and _is_multiple(dims, r.dims)]
        if hits:
            scored = sorted(((estimate(r, dims), r) for r in hits),
                            key=lambda x: (x[0], x[1].dims))
            return rule, scored
    return None


def lookup(records: Sequence[Record], shape: GemmShape, cfg: AccelConfig, *,
           auto_pad: bool = True, max_pad: float = MAX_PAD) -> LookupResult:
    """Answer ``shape`` from ``records`` (one configuration's records; see the module doc)."""
    q = (shape.m, shape.k, shape.n)

    def result(rule, run, padding, scored) -> LookupResult:
        est, rec = scored[0]
        return LookupResult(q, run, rule, padding, run_tiling(rec, run, cfg), est, rec,
                            len(scored))

    hit = match(records, q)
    if hit:
        return result(hit[0], q, "none", hit[1])
    if auto_pad:
        p = pad_to_blocks(shape, cfg)
        pdims = (p.m, p.k, p.n)
        if pdims != q:
            hit = match(records, pdims)
            if hit and math.prod(pdims) <= (1 + max_pad) * math.prod(q):
                return result(hit[0], pdims, "blocks", hit[1])
        # per record: the smallest multiple of its shape covering the query
        best = None
        vol = math.prod(q)
        for rule in RULES:
            kind = rule.split("-")[1]
            scored = []
            for r in records:
                if r.kind != kind:
                    continue
                run = tuple(-(-d // rd) * rd for d, rd in zip(q, r.dims))
                if (run == r.dims) != rule.startswith("exact"):
                    continue
                if math.prod(run) > (1 + max_pad) * vol:
                    continue
                scored.append((estimate(r, run), r, run))
            if scored:
                scored.sort(key=lambda x: (x[0], x[1].dims))
                best = (rule, scored)
                break
        if best:
            rule, scored = best
            est, rec, run = scored[0]
            return LookupResult(q, run, rule, "record", run_tiling(rec, run, cfg), est, rec,
                                len(scored))
    plan = best_plan(shape, cfg)
    return LookupResult(q, q, "analytic", "none", plan.key, plan.predicted_cycles, None, 0)


def db_plan(shape: GemmShape, cfg: AccelConfig, db: TuneDB | str | Path) -> TilingPlan:
    """``planner.plan_gemm(..., strategy="db")``: the database's tiling for ``shape``.

    The tiling comes from :func:`lookup` (padding only chooses the record: the hardware runs the
    unpadded shape with it, covering ragged edges itself); ``predicted_cycles`` is the analytic
    model's for ``shape``; ``strategy`` is ``db:<rule>`` (``db:analytic`` when nothing matched).
    """
    if isinstance(db, TuneDB):
        records = db.records()
        if db.cfg.config_id != cfg.config_id:
            raise ValueError(f"tuning database is for config_id {db.config_id}, not "
                             f"{cfg.config_id:08x}")
    else:
        with TuneDB.open(db, cfg, create=False) as handle:
            records = handle.records()
    res = lookup(records, shape, cfg)
    t = res.tiling_dict
    # a padded record's partitions may exceed the unpadded dims: cover them instead
    pm = min(t["partition_m"], -(-shape.m // cfg.block_m) * cfg.block_m)
    pn = min(t["partition_n"], -(-shape.n // cfg.block_n) * cfg.block_n)
    pk = min(t["partition_k"], shape.k)
    return make_plan(shape, cfg, pm, pn, pk, t["outer_m"], f"db:{res.rule}")
