"""Cycle model of a convolution on the RTL: the GEMM model's lock-step schedule with B loads
replaced by gathers through the convolution tables (docs/architecture.md, "Convolution").

The schedule is :func:`spec.schedule.steps` of the convolution's descriptor (the RTL's
reference semantics); every phase costs ``max(compute, load A, gather B, store) + control``, with
the stall categories assigned as the RTL counters assign them. The GEMM-specific timings
(compute, drain, A loads, stores, control) come from :mod:`planner.cost` and its calibrated
:class:`~planner.cost.ModelConstants`; the gather timing follows ``hw/addrgen.py``:

* before the prologue the tables load, one 32-bit word per B request;
* a gather spends 3 cycles finding its runs, then per tap issues one request per run of the
  block's lane groups, each waiting for the credit its span costs (``tessera_strided_cost``),
  with 2 bubble cycles between taps; it ends when the last response (port latency) is in.

Gather timing is an approximation where credit carries over bubbles (runs of stride > 1); its
error against the RTL is reported in ``docs/conv.md``.
"""

from __future__ import annotations

import math

import numpy as np

from spec.config import AccelConfig
from spec.desc import GemmDescriptor
from spec.schedule import steps

from .cost import (DEFAULT_CONSTANTS, CycleBreakdown, ModelConstants, PostLoad, _Timing,
                   off_chip_bytes, on_chip,
                   post_consts, with_post)
from .offsets import ConvTables

__all__ = ["run_beats", "gather_cycles", "table_load_cycles", "predict_conv"]


def run_beats(stride: np.ndarray, cfg: AccelConfig) -> np.ndarray:
    """Bandwidth of each run's request in B beats: the beats its span covers, at most one per
    lane (the memory model's ``tessera_strided_cost``)."""
    lanes = cfg.array_cols
    span = (lanes - 1) * np.maximum(stride, 1) + 1
    return np.minimum(-(-span // cfg.b_beat_bytes), lanes)


def gather_cycles(beats: np.ndarray, k_eff: int, cfg: AccelConfig) -> int:
    """Cycles the gather of one block is busy: ``beats`` are the run costs of its lane groups
    (one request each per tap), repeated for ``k_eff`` taps.

    3 cycles find the runs and read the first tap; each tap then issues its requests, a request
    of ``b`` beats taking ``b`` cycles of credit, except that the tap's 2 bubble cycles (NEXT,
    TAP) pre-charge the first one; the last response arrives ``b_port_latency_cycles`` after
    the last request."""
    if len(beats) == 0:
        return 3 + 3 * (k_eff - 1) + 1
    cost = np.ceil(beats * (cfg.b_beat_bytes / cfg.b_port_bytes_per_cycle)).astype(np.int64)
    issue = max(1, int(cost[0]) - 2) + int(cost[1:].sum())
    return 3 + k_eff * issue + 2 * (k_eff - 1) + cfg.b_port_latency_cycles


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
    t = _Timing(cfg, consts)
    R, C = cfg.array_rows, cfg.array_cols
    stride = tables.runs()["stride"]
    beats_all = run_beats(stride, cfg)
    groups = tables.groups.astype(np.int64)

    def gather(s) -> int:
        g0 = s.n0 // C
        lo, hi = groups[g0], groups[g0 + s.groups_n]
        return gather_cycles(beats_all[lo:hi], s.k_eff, cfg)

    plan = list(steps(d, cfg))
    mac = drain = sa = sb = ss = 0
    # + 1: the sequencer's TABLES state hands over to the prologue in a control cycle
    ctrl = consts.start_cycles + len(plan) * t.ctrl + consts.finish_cycles + 1
    rd_a = rd_b = wr_c = 0
    table = table_load_cycles(tables, cfg)
    sb += table
    rd_b += (tables.k + 2 * tables.run_count + len(tables.groups)) * cfg.b_beat_bytes
    # prologue: loads of step 0
    first = plan[0]
    la0, lb0 = t.load_a(first.k_eff * first.groups_m), gather(first)
    sa += la0
    sb += max(0, lb0 - la0)
    pending_store = 0
    for i, s in enumerate(plan):
        rd_a += s.k_eff * s.groups_m * cfg.a_beat_bytes if s.load_a else 0
        if s.load_b:
            g0 = s.n0 // C
            rd_b += s.k_eff * int(groups[g0 + s.groups_n] - groups[g0]) * cfg.b_beat_bytes
        nxt = plan[i + 1] if i + 1 < len(plan) else None
        busy = s.groups_m * s.groups_n * max(s.k_eff, R) + t.drain
        real = s.groups_m * s.groups_n * s.k_eff
        ca = t.load_a(nxt.k_eff * nxt.groups_m) if nxt is not None and nxt.load_a else 0
        cb = gather(nxt) if nxt is not None and nxt.load_b else 0
        cs = t.store(pending_store)
        mac += real
        drain += busy - real
        sa += max(0, ca - busy)
        sb += max(0, cb - max(busy, ca))
        ss += max(0, cs - max(busy, ca, cb))
        wr_c += pending_store * cfg.c_beat_bytes
        pending_store = s.m_eff * s.groups_n if s.last_k else 0
    ss += t.store(pending_store)
    wr_c += pending_store * cfg.c_beat_bytes
    total = mac + drain + sa + sb + ss + ctrl
    return CycleBreakdown(total_cycles=total, mac_active_cycles=mac, stall_drain_cycles=drain,
                          stall_load_a_cycles=sa, stall_load_b_cycles=sb, stall_store_cycles=ss,
                          stall_ctrl_cycles=ctrl, rd_a_bytes=rd_a, rd_b_bytes=rd_b,
                          wr_c_bytes=wr_c)
