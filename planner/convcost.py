"""Cycle model of a convolution on the RTL: the GEMM model's lock-step schedule with B loads
replaced by gathers through the convolution tables (docs/architecture.md, "Convolution").

The schedule is :func:`spec.schedule.steps` of the convolution's descriptor (the RTL's
reference semantics); every phase costs ``max(compute, load A, gather B, store) + control``, with
the stall categories assigned as the RTL counters assign them. The GEMM-specific timings
(compute, drain, A loads, stores, control) come from :mod:`planner.cost` and its calibrated
:class:`~planner.cost.ModelConstants`; the gather timing follows ``hw/addrgen.py``:

* before the prologue the tables load, one 32-bit word per B request;
* a gather's first request reaches the port :data:`GATHER_FILL_CYCLES` after its start; then
  it issues, tap after tap without a pause, one request per run of the block's lane groups,
  each waiting for the credit its span costs (``tessera_strided_cost``); it ends when the last
  response (port latency) is in.

The gather timing is exact when the B port earns a beat per cycle (every preset).
"""

from __future__ import annotations

import collections
import math
from collections.abc import Callable

import numpy as np

from spec.config import AccelConfig
from spec.desc import GemmDescriptor
from spec.schedule import Step, steps

from .cost import (DEFAULT_CONSTANTS, CycleBreakdown, ModelConstants, PostLoad, _reps, _Timing,
                   off_chip_bytes, on_chip, param_load_cycles,
                   post_consts, with_post)
from .offsets import ConvTables

__all__ = ["run_beats", "gather_cycles", "table_load_cycles", "predict_conv",
           "predict_conv_reference", "conv_lower_bound",
           "GATHER_FILL_CYCLES", "GATHER_EMPTY_CYCLES"]

#: Cycles from a gather's start to its first request on the B port (hw/addrgen.py): start,
#: group-table read, walker setup, run/offset table read, their register, the request queue's
#: write and its output register.
GATHER_FILL_CYCLES = 7
#: Busy cycles of a gather whose lane groups have no runs: start, group-table read, setup.
GATHER_EMPTY_CYCLES = 3


def run_beats(stride: np.ndarray, cfg: AccelConfig) -> np.ndarray:
    """Bandwidth of each run's request in B beats: the beats its span covers, at most one per
    lane (the memory model's ``tessera_strided_cost``)."""
    lanes = cfg.array_cols
    span = (lanes - 1) * np.maximum(stride, 1) + 1
    return np.minimum(-(-span // cfg.b_beat_bytes), lanes)


def gather_cycles(beats: np.ndarray, k_eff: int, cfg: AccelConfig) -> int:
    """Cycles the gather of one block is busy: ``beats`` are the run costs of its lane groups
    (one request each per tap), repeated for ``k_eff`` taps.

    ``hw/addrgen.py``: the start, the group-table read and the walker's setup take 3 cycles;
    the first request reaches the port :data:`GATHER_FILL_CYCLES` cycles after the start; from
    then on requests follow each other without a gap between taps, so the port's credit is the
    only limit: a request of ``b`` beats is accepted when ``b * b_beat_bytes`` of credit is
    there (the credit is one beat when a request is first shown: the address generator shows
    stride 1 between requests, so no credit banks for a stale strided one). The last response
    arrives ``b_port_latency_cycles`` after the last request, and the busy flag falls in the
    cycle after it. Exact when a beat is earned in a cycle (``b_port_bytes_per_cycle ==
    b_beat_bytes``, every preset); with a slower port, the credit left over from the previous
    request can make a request one cycle earlier than this."""
    if len(beats) == 0:
        return GATHER_EMPTY_CYCLES
    need = int(np.asarray(beats, dtype=np.int64).sum()) * k_eff * cfg.b_beat_bytes
    requests = len(beats) * k_eff
    # request i is accepted at the first cycle with credit for it: beat + bpc * t >= its need
    # plus everything before it (the credit only grows while the port waits for it)
    last = max(requests - 1, -(-(need - cfg.b_beat_bytes) // cfg.b_port_bytes_per_cycle))
    return GATHER_FILL_CYCLES + last + cfg.b_port_latency_cycles


def table_load_cycles(tables: ConvTables, cfg: AccelConfig) -> int:
    """Cycles of the table load: every table word is one B beat, then the latency."""
    words = tables.k + 2 * tables.run_count + len(tables.groups)
    per_beat = cfg.b_beat_bytes / cfg.b_port_bytes_per_cycle
    return math.ceil((words - 1) * per_beat) + 1 + cfg.b_port_latency_cycles


def predict_conv(d: GemmDescriptor, tables: ConvTables, cfg: AccelConfig,
                 consts: ModelConstants = DEFAULT_CONSTANTS, *,
                 post: PostLoad | None = None, c_local: bool = False) -> CycleBreakdown:
    """Predicted RTL counters of one convolution descriptor (one group) through ``tables``;
    ``post`` and ``c_local`` (the output goes to the local buffer) as in
    :func:`planner.cost.predict`."""
    if c_local:
        active = post is not None and post.active
        body = off_chip_bytes(predict_conv(d, tables, on_chip(cfg, c_local=True),
                                           post_consts(consts, cfg) if active else consts),
                              c_local=True)
        return with_post(body, d.m, post, cfg, consts)
    if post is not None and post.active:
        body = predict_conv(d, tables, cfg, post_consts(consts, cfg))
        return with_post(body, d.m, post, cfg, consts)
    if d.b_mode != 1:
        raise ValueError(f"predict_conv needs a convolution descriptor (b_mode=1), not "
                         f"b_mode={d.b_mode}")
    return _walk(d, tables, cfg, consts, _grouped_steps(d, cfg, _gather_class(tables, cfg)))


def conv_lower_bound(m: int, k: int, n: int, tables: ConvTables, cfg: AccelConfig,
                     consts: ModelConstants = DEFAULT_CONSTANTS, *,
                     post: PostLoad | None = None) -> Callable[[int, int, int], int]:
    """``bound(pm, pn, pk)``: a cheap lower bound of :func:`predict_conv`'s ``total_cycles`` for
    a descriptor of ``m x k x n`` with partitions ``pm``, ``pn``, ``pk`` through ``tables``,
    any loop order, with or without ``c_local``: what :func:`_walk` counts whatever the
    gathers and stores cost. Its start, control and finish cycles, every step's beats (a
    tile's ``k`` beats, at least ``array_rows``: each phase's MAC and drain cycles are at least
    its beats), the table load and step 0's A load (the prologue's), plus ``post``'s parameter
    loads (:func:`~planner.cost.with_post`). :func:`planner.convplan.conv_best_plan`'s descent
    skips a tiling whose bound cannot beat the best one found (as
    :func:`planner.search.refine` does with the GEMM model's
    :func:`~planner.cost.lower_bound_cycles`)."""
    R, C = cfg.array_rows, cfg.array_cols
    t = _Timing(cfg, consts)
    fixed = consts.start_cycles + consts.finish_cycles + 1 + table_load_cycles(tables, cfg)
    if post is not None and post.active:
        fixed += param_load_cycles(m, post, cfg, consts).total
    tiles = -(-m // R) * -(-n // C)

    def bound(pm: int, pn: int, pk: int) -> int:
        nm, nn, nk = -(-m // pm), -(-n // pn), -(-k // pk)
        beats = (nk - 1) * max(pk, R) + max(k - (nk - 1) * pk, R)
        return (fixed + nm * nn * nk * t.ctrl + tiles * beats
                + t.load_a(min(pk, k) * -(-min(pm, m) // R)))
    return bound


def _gather_class(tables: ConvTables, cfg: AccelConfig):
    """``n_class`` for :func:`_grouped_steps`: what a step's n block costs the walk, its lane
    groups, their runs (the B bytes) and the runs' beats (with ``k_eff``, the gather's
    cycles: :func:`gather_cycles`)."""
    C = cfg.array_cols
    groups = tables.groups.astype(np.int64)
    beats = np.concatenate(([0], np.cumsum(run_beats(tables.runs()["stride"], cfg))))

    def n_class(n0: int, n_eff: int) -> tuple[int, int, int]:
        g0, gn = n0 // C, -(-n_eff // C)
        lo, hi = int(groups[g0]), int(groups[g0 + gn])
        return gn, hi - lo, int(beats[hi] - beats[lo])
    return n_class


def predict_conv_reference(d: GemmDescriptor, tables: ConvTables, cfg: AccelConfig,
                           consts: ModelConstants = DEFAULT_CONSTANTS) -> CycleBreakdown:
    """:func:`predict_conv` (no ``post``, ``c_local``) as a plain walk of every step of
    :func:`spec.schedule.steps`: the specification the grouped walk is tested against."""
    plan = list(steps(d, cfg))
    walk = []
    for i, s in enumerate(plan):
        prev = plan[i - 1] if i else None
        store = prev.m_eff * prev.groups_n if prev is not None and prev.last_k else 0
        walk.append((1, s, plan[i + 1] if i + 1 < len(plan) else None, store))
    return _walk(d, tables, cfg, consts, walk)


def _grouped_steps(d: GemmDescriptor, cfg: AccelConfig, n_class):
    """The steps of :func:`spec.schedule.steps` as ``(weight, step, next, pending store)``,
    grouped twice:

    * within an (m, n) block, the split-K steps that cost the same: only the first and the
      last two k steps can differ from the others (the first stores the block before, the last
      two load a different next block or a shorter last k chunk);
    * across blocks, the blocks whose steps cost the same: a block's steps depend only on its
      own ``m_eff`` and n block, on how it relates to the blocks before and after it (the same
      m or n block or not; the one before's store; the one after's load), and on the n blocks'
      cost class ``n_class(n0, n_eff)`` (hashable: :func:`_gather_class`). Such blocks are
      walked once, with their count as a weight.

    The walk's cost only sums its phases, so the order of the groups does not matter, apart
    from the first step (the prologue's loads) and the last (the epilogue's store): step 0's
    block comes first and the last block, the only one with no block after it, last."""
    R, C = cfg.array_rows, cfg.array_cols
    ms = range(0, d.m, d.partition_m)
    ns = range(0, d.n, d.partition_n)
    # each block's (m, n) indices in execution order, and its (m0, n0)
    index = [(i, j) for i in range(len(ms)) for j in range(len(ns))] if d.outer_m else \
        [(i, j) for j in range(len(ns)) for i in range(len(ms))]
    blocks = [(ms[i], ns[j]) for i, j in index]
    nk = -(-d.k // d.partition_k)

    memo: dict[tuple[int, int], Step] = {}

    def step(b, q) -> Step:
        got = memo.get((b, q))
        if got is not None:
            return got
        m0, n0 = blocks[b]
        k0 = q * d.partition_k
        if q:                                   # the step before: same block, k before
            pm0, pn0, pk0 = m0, n0, k0 - d.partition_k
        elif b:                                 # the previous block's last k step
            (pm0, pn0), pk0 = blocks[b - 1], (nk - 1) * d.partition_k
        else:
            pm0 = pn0 = pk0 = None
        first = pk0 is None
        m_eff, n_eff = min(d.partition_m, d.m - m0), min(d.partition_n, d.n - n0)
        got = memo[b, q] = Step(
            m0=m0, n0=n0, k0=k0, m_eff=m_eff, n_eff=n_eff, k_eff=min(d.partition_k, d.k - k0),
            groups_m=-(-m_eff // R), groups_n=-(-n_eff // C),
            load_a=first or (pm0, pk0) != (m0, k0), load_b=first or (pn0, pk0) != (n0, k0),
            last_k=q == nk - 1)
        return got

    # the part of each block's signature its own m and n blocks give
    m_own = [min(d.partition_m, d.m - m0) for m0 in ms]
    n_own = []
    for n0 in ns:
        n_eff = min(d.partition_n, d.n - n0)
        n_own.append((n_eff, n_class(n0, n_eff)))
    own = [(m_own[i], n_own[j]) for i, j in index]

    last = len(blocks) - 1
    kinds: dict[tuple, list[int]] = {}         # signature -> [a block of that kind, count]
    for b in range(len(blocks)):
        i, j = index[b]
        if b:
            pi, pj = index[b - 1]
            before = (pi == i, pj == j, own[b - 1])
        else:
            before = None
        if b < last:
            ni, nj = index[b + 1]
            after = (ni == i, nj == j, own[b + 1])
        else:
            after = None
        sig = (own[b], before, after)
        kind = kinds.get(sig)
        if kind is None:
            kinds[sig] = [b, 1]
        else:
            kind[1] += 1

    reps = _reps(nk)
    for b, count in kinds.values():
        for q, w in reps:
            if q + 1 < nk:
                nxt = step(b, q + 1)
            else:
                nxt = step(b + 1, 0) if b < last else None
            # a block's first step stores the block before it (its last step is the last k)
            if q == 0 and b:
                p = step(b - 1, nk - 1)
                store = p.m_eff * p.groups_n
            else:
                store = 0
            yield w * count, step(b, q), nxt, store


def _walk(d: GemmDescriptor, tables: ConvTables, cfg: AccelConfig, consts: ModelConstants,
          walk) -> CycleBreakdown:
    """The counters of the phases ``walk`` gives as ``(weight, step, next step, pending
    store beats)``, the first of them step 0."""
    t = _Timing(cfg, consts)
    R, C = cfg.array_rows, cfg.array_cols
    stride = tables.runs()["stride"]
    beats_all = run_beats(stride, cfg)
    groups = tables.groups.astype(np.int64)
    gathers: dict[tuple[int, int, int], int] = {}

    def gather(s) -> int:
        key = (s.n0, s.groups_n, s.k_eff)
        if key not in gathers:
            g0 = s.n0 // C
            lo, hi = groups[g0], groups[g0 + s.groups_n]
            gathers[key] = gather_cycles(beats_all[lo:hi], s.k_eff, cfg)
        return gathers[key]

    mac = drain = sa = sb = ss = 0
    rd_a = rd_b = wr_c = 0
    table = table_load_cycles(tables, cfg)
    sb += table
    rd_b += (tables.k + 2 * tables.run_count + len(tables.groups)) * cfg.b_beat_bytes
    n_steps = 0
    pending_store = 0
    # phases with the same inputs cost the same: count them, then cost each kind once
    phases: collections.Counter = collections.Counter()
    load_a: dict[int, int] = {}
    for i, (w, s, nxt, store) in enumerate(walk):
        if i == 0:                      # prologue: loads of step 0
            la0, lb0 = t.load_a(s.k_eff * s.groups_m), gather(s)
            sa += la0
            sb += max(0, lb0 - la0)
        n_steps += w
        rd_a += w * s.k_eff * s.groups_m * cfg.a_beat_bytes if s.load_a else 0
        if s.load_b:
            g0 = s.n0 // C
            rd_b += w * s.k_eff * int(groups[g0 + s.groups_n] - groups[g0]) * cfg.b_beat_bytes
        tiles = s.groups_m * s.groups_n
        if nxt is not None and nxt.load_a:
            a_beats = nxt.k_eff * nxt.groups_m
            ca = load_a.get(a_beats)
            if ca is None:
                ca = load_a[a_beats] = t.load_a(a_beats)
        else:
            ca = 0
        cb = gather(nxt) if nxt is not None and nxt.load_b else 0
        phases[tiles * max(s.k_eff, R), tiles * s.k_eff, ca, cb, store] += w
        wr_c += w * store * cfg.c_beat_bytes
        pending_store = s.m_eff * s.groups_n if s.last_k else 0
    for inputs, w in phases.items():
        ph = t.phase(*inputs)
        mac, drain, sa, sb, ss = (x + w * y for x, y in zip((mac, drain, sa, sb, ss), ph))
    _, dr, _, _, st = t.phase(0, 0, 0, 0, pending_store)      # the epilogue: the last store
    drain += dr
    ss += st
    wr_c += pending_store * cfg.c_beat_bytes
    # + 1: the sequencer's TABLES state hands over to the prologue in a control cycle
    ctrl = consts.start_cycles + n_steps * t.ctrl + consts.finish_cycles + 1
    total = mac + drain + sa + sb + ss + ctrl
    return CycleBreakdown(total_cycles=total, mac_active_cycles=mac, stall_drain_cycles=drain,
                          stall_load_a_cycles=sa, stall_load_b_cycles=sb, stall_store_cycles=ss,
                          stall_ctrl_cycles=ctrl, rd_a_bytes=rd_a, rd_b_bytes=rd_b,
                          wr_c_bytes=wr_c)
