"""Building the tuning database (seed 001): measured initial records, then boundary records.

**Initial database** (seed ¶62-64). For every requested GEMM shape:

1. *Auto-pad* ``m`` / ``n`` to ``block_m`` / ``block_n`` multiples (seed ¶121: tensors padded to
   the tile so they move in regular loops); the record is keyed by the padded shape.
2. *Enumerate* the planner's legal tilings (:func:`planner.search.candidates`: block-multiple
   partitions fitting the buffer and accumulator halves, balanced ``partition_k``, both orders).
3. *Filter* by the software constraint "regular loops": every partition divides its dimension,
   so the shape is a whole number of tiles and its integer multiples replicate the tiling
   exactly (what the lookup's multiple rule relies on).
4. *Prune* with the analytic model (:func:`planner.cost.predict_tiling`): only the ``top_n``
   predicted-fastest survivors are measured (the seed measures every survivor).
5. *Measure* them on the RTL and keep the fastest **if** its utilisation (useful MACs of the
   requested shape over ``macs_per_cycle * cycles``) reaches ``util_floor``, the tolerable-cost
   threshold; otherwise the shape is rejected.

**Boundary database** (seed ¶65-98). From each initial record, halve one dimension at a time, in
any order, keeping the record's tiling (a partition larger than the halved dimension shrinks to
it; halving stops where the dimension is odd, would leave a block fraction, or would make the
loops irregular). A halving is *linear* when ``cost(half) / cost(shape)`` is within
``linear_tol`` (relative) of the size ratio 1/2. A *boundary shape* is a shape reached from the
initial shape by linear halvings none of whose own halvings is linear (the minimal linear shapes,
¶67); it is stored with its tiling, measured cost and evidence (path, the linear step into it,
every failed halving with its ratio). An initial shape whose every first halving is non-linear
has no boundary shape and is dropped from the walk (¶95-97); it stays in the initial database.

The walk runs on measured costs where they exist and on the analytic model elsewhere, in rounds:
each round measures what the current walk needs (every first halving, each boundary candidate,
the parent it was reached from and all its halvings) and re-walks; it ends when nothing new is
needed. So every stored ratio is a measured one; the model only chooses where to look (it is
exact on this RTL, docs/planner.md, so one round normally suffices). Deviation from the seed:
the interior of a path is not re-measured.
"""

from __future__ import annotations

import dataclasses
import math
from collections import deque
from typing import Callable, Iterable, Sequence

from spec.config import AccelConfig
from planner.cost import predict_tiling
from planner.search import candidates
from planner.shapes import GemmShape
from planner.tiling import make_plan

from .measure import Case, Executor, MeasureFn
from .store import Record, TuneDB

__all__ = ["BuildOptions", "BuildReport", "Measurer", "build_db", "pad_to_blocks",
           "initial_candidates", "halvings", "node_tiling", "is_linear", "DIMS"]

#: Dimension names in shape order (``m x k x n``) and the partition field of each.
DIMS = ("m", "k", "n")
PARTITION = {"m": "partition_m", "k": "partition_k", "n": "partition_n"}


@dataclasses.dataclass(frozen=True, kw_only=True)
class BuildOptions:
    """Builder parameters (each is a CLI option of ``tessera tunedb build``)."""

    #: Candidates measured per shape, the analytic model's fastest first.
    top_n: int = 3
    #: Tolerable-cost threshold: least utilisation of a stored initial record.
    util_floor: float = 0.5
    #: A halving is linear when ``|cost ratio / 0.5 - 1| <= linear_tol``.
    linear_tol: float = 0.02
    #: Cases per measurement job (one simulator process).
    batch_cases: int = 24
    #: Measurement rounds of the boundary walk before it gives up on unconfirmed shapes.
    max_rounds: int = 6

    def __post_init__(self):
        if type(self.top_n) is not int or self.top_n < 1:
            raise ValueError(f"top_n must be a positive int, not {self.top_n!r}")
        if not 0 <= self.util_floor <= 1:
            raise ValueError(f"util_floor must be in [0, 1], not {self.util_floor!r}")
        if not 0 <= self.linear_tol < 1:
            raise ValueError(f"linear_tol must be in [0, 1), not {self.linear_tol!r}")
        if type(self.batch_cases) is not int or self.batch_cases < 1:
            raise ValueError(f"batch_cases must be a positive int, not {self.batch_cases!r}")


@dataclasses.dataclass
class BuildReport:
    """What a build did: stored, rejected and dropped shapes, boundary shapes, run counts."""

    initial: list[dict] = dataclasses.field(default_factory=list)
    rejected: list[dict] = dataclasses.field(default_factory=list)
    dropped: list[dict] = dataclasses.field(default_factory=list)
    boundary: list[dict] = dataclasses.field(default_factory=list)
    unconfirmed: list[dict] = dataclasses.field(default_factory=list)
    measured_runs: int = 0
    rounds: int = 0

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


class Measurer:
    """Measures cases once: results are cached in the database's ``measurements`` table.

    Missing cases are deduplicated, sorted, cut into jobs of ``batch_cases`` and run by
    ``executor``; every finished job is stored at once (a stopped build resumes).
    """

    def __init__(self, db: TuneDB, fn: MeasureFn, executor: Executor, batch_cases: int = 24,
                 log: Callable[[str], None] = lambda s: None):
        self._db, self._fn, self._ex = db, fn, executor
        self._batch = batch_cases
        self._log = log
        self.runs = 0

    def measure(self, cases: Iterable[Case]) -> dict[Case, dict]:
        out: dict[Case, dict] = {}
        todo = []
        for c in sorted(set(cases)):
            hit = self._db.measurement("gemm", c.dims, c.tiling)
            if hit is None:
                todo.append(c)
            else:
                out[c] = hit
        jobs = [todo[i:i + self._batch] for i in range(0, len(todo), self._batch)]
        if jobs:
            self._log(f"measuring {len(todo)} cases in {len(jobs)} jobs "
                      f"({self._ex.scheduler})")
        for i, result in self._ex.imap(self._fn, self._db.cfg, jobs):
            job = jobs[i]
            self._db.put_measurements(("gemm", c.dims, c.tiling, r) for c, r in zip(job, result))
            out.update(zip(job, result))
            self._log(f"job {i + 1}/{len(jobs)} stored ({len(job)} cases)")
        self.runs += len(todo)
        return out


def pad_to_blocks(shape: GemmShape, cfg: AccelConfig) -> GemmShape:
    """``m`` and ``n`` rounded up to ``block_m`` / ``block_n`` multiples (``k`` unchanged)."""
    return GemmShape(-(-shape.m // cfg.block_m) * cfg.block_m, shape.k,
                     -(-shape.n // cfg.block_n) * cfg.block_n)


def _tiling(dims: tuple[int, int, int], cfg: AccelConfig, pm: int, pn: int, pk: int,
            outer_m: int) -> tuple[int, ...]:
    return make_plan(GemmShape(*dims), cfg, pm, pn, pk, outer_m, "tunedb").key


def _rank_key(dims, cfg, pm, pn, pk, outer_m):
    bd = predict_tiling(*dims, pm, pn, pk, outer_m, cfg)
    return (bd.total_cycles, bd.rd_a_bytes + bd.rd_b_bytes + bd.wr_c_bytes, -pk, pm, pn,
            -outer_m)


def initial_candidates(shape: GemmShape, cfg: AccelConfig, top_n: int) -> list[Case]:
    """The ``top_n`` predicted-fastest regular legal tilings of ``shape`` (steps 2-4 above)."""
    m, k, n = shape.m, shape.k, shape.n
    ranked = []
    for c in candidates(shape, cfg):
        if m % c.partition_m or n % c.partition_n or k % c.partition_k:
            continue
        ranked.append((_rank_key((m, k, n), cfg, c.partition_m, c.partition_n,
                                 c.partition_k, c.outer_m), c))
    ranked.sort(key=lambda x: x[0])
    out: list[Case] = []
    for _, c in ranked:
        case = Case(m, k, n, _tiling((m, k, n), cfg, c.partition_m, c.partition_n,
                                     c.partition_k, c.outer_m))
        if case not in out:
            out.append(case)
        if len(out) == top_n:
            break
    return out


def node_tiling(root: Record, dims: tuple[int, int, int], cfg: AccelConfig) -> tuple[int, ...]:
    """The root record's tiling on a halved shape: each partition ``min(partition, dim)``."""
    t = root.tiling_dict
    pm, pk, pn = (min(t[PARTITION[d]], v) for d, v in zip(DIMS, dims))
    return _tiling(dims, cfg, pm, pn, pk, t["outer_m"])


def halvings(root: Record, dims: tuple[int, int, int], cfg: AccelConfig
             ) -> list[tuple[str, tuple[int, int, int]]]:
    """``(dim, halved dims)`` for every dimension of ``dims`` that may be halved (see above)."""
    t = root.tiling_dict
    gran = {"m": cfg.block_m, "k": 1, "n": cfg.block_n}
    out = []
    for i, d in enumerate(DIMS):
        size = dims[i]
        if size % 2:
            continue
        half = size // 2
        part = t[PARTITION[d]]
        if half % gran[d] or (half >= part and half % part):
            continue
        out.append((d, dims[:i] + (half,) + dims[i + 1:]))
    return out


def is_linear(parent_cycles: int, child_cycles: int, tol: float) -> bool:
    """Seed ¶77-79: the size ratio (1/2) equals the cost ratio, within ``tol`` relative."""
    return abs(child_cycles / parent_cycles / 0.5 - 1) <= tol


@dataclasses.dataclass
class _Walk:
    parent: dict            # dims -> parent dims (linear step into it)
    minimal: list           # boundary candidates (dims), BFS order
    first: list             # (dim, dims) first halvings of the root
    first_linear: bool


def _walk(root: Record, cfg: AccelConfig, cost: Callable[[tuple], int], tol: float) -> _Walk:
    start = root.dims
    parent: dict = {}
    queue = deque([start])
    seen = {start}
    while queue:
        node = queue.popleft()
        for _, child in halvings(root, node, cfg):
            if child not in seen and is_linear(cost(node), cost(child), tol):
                seen.add(child)
                parent[child] = node
                queue.append(child)
    minimal = [s for s in parent if not any(is_linear(cost(s), cost(c), tol)
                                            for _, c in halvings(root, s, cfg))]
    first = halvings(root, start, cfg)
    return _Walk(parent, minimal, first,
                 any(is_linear(cost(start), cost(c), tol) for _, c in first))


def _path(walk: _Walk, node, start) -> list:
    out = [node]
    while out[-1] != start:
        out.append(walk.parent[out[-1]])
    return [list(d) for d in reversed(out)]


def _util(dims, cfg: AccelConfig, cycles: int) -> float:
    return math.prod(dims) / (cfg.macs_per_cycle * cycles)


def build_db(db: TuneDB, shapes: Sequence[tuple[str, GemmShape]], measure_fn: MeasureFn,
             executor: Executor, opts: BuildOptions = BuildOptions(),
             log: Callable[[str], None] = lambda s: None) -> BuildReport:
    """Build the initial and boundary records of ``shapes`` into ``db`` (replacing its records).

    ``shapes`` are ``(source name, shape)``; shapes equal after padding are measured once (the
    first name is kept). Returns a :class:`BuildReport`.
    """
    cfg = db.cfg
    report = BuildReport()
    meas = Measurer(db, measure_fn, executor, opts.batch_cases, log)

    # -- initial database -----------------------------------------------------------------------
    wanted: dict[tuple, tuple[str, GemmShape]] = {}
    for name, shape in shapes:
        padded = pad_to_blocks(shape, cfg)
        wanted.setdefault((padded.m, padded.k, padded.n), (name, shape))
    cands = {dims: initial_candidates(GemmShape(*dims), cfg, opts.top_n) for dims in wanted}
    log(f"initial: {len(wanted)} shapes, {sum(map(len, cands.values()))} candidate runs")
    got = meas.measure(c for cs in cands.values() for c in cs)
    initial: list[Record] = []
    for dims in sorted(wanted):
        name, requested = wanted[dims]
        rows = []
        for rank, c in enumerate(cands[dims]):
            t = c.tiling_dict
            pred = predict_tiling(*dims, t["partition_m"], t["partition_n"], t["partition_k"],
                                  t["outer_m"], cfg).total_cycles
            rows.append({"rank": rank, "tiling": t, "predicted": pred,
                         "measured": got[c]["total_cycles"]})
        best_row = min(rows, key=lambda r: (r["measured"], r["rank"]))
        best = cands[dims][best_row["rank"]]
        cycles = got[best]["total_cycles"]
        util = requested.macs / (cfg.macs_per_cycle * cycles)
        evidence = {"requested": [requested.m, requested.k, requested.n], "candidates": rows,
                    "util_floor": opts.util_floor}
        entry = {"shape": list(dims), "source": name, "cycles": cycles, "util": util}
        if util < opts.util_floor:
            report.rejected.append(entry)
            log(f"rejected {name} {dims}: utilisation {util:.3f} < {opts.util_floor}")
            continue
        initial.append(Record(kind="initial", op="gemm", m=dims[0], k=dims[1], n=dims[2],
                              tiling=best.tiling, cycles=cycles, counters=got[best], util=util,
                              source=name, evidence=evidence))

    # -- boundary database ----------------------------------------------------------------------
    known: dict[Case, dict] = dict(got)

    def cost_fn(root: Record):
        def cost(dims):
            case = Case(*dims, node_tiling(root, dims, cfg))
            hit = known.get(case)
            if hit is not None:
                return hit["total_cycles"]
            t = case.tiling_dict
            return predict_tiling(*dims, t["partition_m"], t["partition_n"], t["partition_k"],
                                  t["outer_m"], cfg).total_cycles
        return cost

    def needed(root: Record, walk: _Walk) -> set[Case]:
        want = {c for _, c in walk.first}
        for s in walk.minimal:
            want.add(s)
            want.add(walk.parent[s])
            want.update(c for _, c in halvings(root, s, cfg))
        return {Case(*d, node_tiling(root, d, cfg)) for d in want} - set(known)

    walks: dict = {}
    for rnd in range(1, opts.max_rounds + 1):
        report.rounds = rnd
        walks = {r.dims: _walk(r, cfg, cost_fn(r), opts.linear_tol) for r in initial}
        todo = set().union(*(needed(r, walks[r.dims]) for r in initial)) if initial else set()
        log(f"boundary round {rnd}: {sum(len(w.minimal) for w in walks.values())} candidates, "
            f"{len(todo)} new runs")
        if not todo:
            break
        known.update(meas.measure(todo))
    confirmed_all = not any(needed(r, walks[r.dims]) for r in initial)

    boundary: dict[tuple, Record] = {}
    final_initial = []
    for root in initial:
        walk = walks[root.dims]
        cost = cost_fn(root)
        first = [{"dim": d, "shape": list(c), "cycles": cost(c),
                  "ratio": cost(c) / root.cycles} for d, c in walk.first]
        ev = dict(root.evidence, first_halvings=first, linear=walk.first_linear,
                  linear_tol=opts.linear_tol)
        final_initial.append(dataclasses.replace(root, evidence=ev))
        report.initial.append({"shape": list(root.dims), "source": root.source,
                               "cycles": root.cycles, "util": root.util,
                               "tiling": root.tiling_dict, "linear": walk.first_linear})
        if not walk.first_linear:
            report.dropped.append({"shape": list(root.dims), "source": root.source,
                                   "first_halvings": first})
            continue
        for s in walk.minimal:
            case = Case(*s, node_tiling(root, s, cfg))
            par = walk.parent[s]
            par_case = Case(*par, node_tiling(root, par, cfg))
            kids = halvings(root, s, cfg)
            kid_cases = [Case(*c, node_tiling(root, c, cfg)) for _, c in kids]
            if any(c not in known for c in (case, par_case, *kid_cases)):
                report.unconfirmed.append({"shape": list(s), "root": list(root.dims)})
                continue
            cycles = known[case]["total_cycles"]
            evidence = {
                "root": list(root.dims), "root_source": root.source,
                "path": _path(walk, s, root.dims),
                "parent": {"shape": list(par), "cycles": known[par_case]["total_cycles"],
                           "ratio": cycles / known[par_case]["total_cycles"]},
                "failed_halvings": [{"dim": d, "shape": list(c),
                                     "cycles": known[kc]["total_cycles"],
                                     "ratio": known[kc]["total_cycles"] / cycles}
                                    for (d, c), kc in zip(kids, kid_cases)],
                "linear_tol": opts.linear_tol}
            rec = Record(kind="boundary", op="gemm", m=s[0], k=s[1], n=s[2], tiling=case.tiling,
                         cycles=cycles, counters=known[case], util=_util(s, cfg, cycles),
                         source=f"boundary of {root.m}x{root.k}x{root.n} ({root.source})",
                         evidence=evidence)
            old = boundary.get(s)
            if old is None or (rec.cycles, rec.tiling) < (old.cycles, old.tiling):
                boundary[s] = rec
    for s in sorted(boundary):
        r = boundary[s]
        report.boundary.append({"shape": list(s), "tiling": r.tiling_dict, "cycles": r.cycles,
                                "source": r.source, "parent": r.evidence["parent"],
                                "failed_halvings": r.evidence["failed_halvings"]})
    if not confirmed_all:
        log(f"boundary walk stopped after {opts.max_rounds} rounds with unconfirmed shapes")
    db.put_records(final_initial + [boundary[s] for s in sorted(boundary)], replace_all=True)
    report.measured_runs = meas.runs
    return report
