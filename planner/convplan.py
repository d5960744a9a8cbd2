"""Tiling a convolution with the convolution model: the ``best`` plan of a convolution layer.

The GEMM planner (:func:`planner.search.best_plan`) ranks tilings with the GEMM model, whose B
loads are dense ``k x n`` reads. A convolution's B loads are gathers through its tables
(:mod:`planner.convcost`), whose cost depends on the runs of each lane group and their strides:
a stride-2 layer on a small map can be gather-bound under the tiling the GEMM model prefers.
:func:`conv_best_plan` therefore starts from the GEMM planner's best plan and from the greedy
plan and descends over the same neighbourhood as :func:`planner.search.refine`, ranking with
:func:`planner.convcost.predict_conv` of the layer's own tables. The convolution model is exact
on the RTL (``docs/conv.md``), so the plan it picks is never slower on the RTL than the two it
starts from.
"""

from __future__ import annotations

import functools

from spec.config import AccelConfig
from spec.desc import GemmDescriptor

from .convcost import conv_lower_bound, predict_conv
from .cost import CycleBreakdown, PostLoad, on_chip
from .layout import Layout, group_base_bytes, padded_bytes
from .offsets import ConvTables, compile_tables, row_width
from .search import Candidate, best_plan, greedy_plan, refine, search
from .shapes import ConvShape, GemmShape
from .tiling import TILING_FIELDS, TilingPlan, acc_bytes_for, make_plan, tiling_fields

__all__ = ["conv_descriptor", "conv_best_plan", "row_store_plan", "row_width", "MAX_ROUNDS"]

#: Rounds of steepest descent at most, per starting plan.
MAX_ROUNDS = 32
#: Whether the descents skip tilings whose :func:`~planner.convcost.conv_lower_bound` cannot
#: beat the best found (the same plans, fewer evaluations of the model; off: every neighbour
#: evaluated, what ``tests/planner/test_convplan.py`` compares with)
PRUNE = True


def conv_descriptor(shape: ConvShape, layout: Layout | str, tables: ConvTables,
                    tiling: dict, group: int = 0, *, x_addr: int = 0, a_addr: int = 0,
                    c_addr: int = 0, off_addr: int = 0, run_addr: int = 0, grp_addr: int = 0,
                    c_stride: int | None = None, c_row_pitch: int = 0) -> GemmDescriptor:
    """The descriptor of group ``group`` of a convolution with ``tiling`` (the plan's
    :data:`~planner.tiling.TILING_FIELDS`) over the output pixels ``tables`` cover (all of
    them, or the first ``tables.n``: a block of rows). Tables over row lanes
    (:attr:`~planner.offsets.ConvTables.row_lanes`) make a row store descriptor: one n
    partition a row, ``c_row_pitch`` bytes apart (default: the row lanes' own width in int32
    elements). Addresses default to 0: they do not change cycles. Not checked against
    :func:`spec.desc.check` (:meth:`planner.conv.ConvProgram.descriptor` checks)."""
    layout = Layout(layout)
    gemm = shape.gemm
    n = tables.n
    b_addr = x_addr + group_base_bytes(shape, layout, group)
    rows = {}
    if tables.row_lanes is not None:
        width, valid = tables.row_lanes
        if tiling["partition_n"] != width:
            raise ValueError(f"a row store descriptor needs partition_n = the row lanes' "
                             f"width {width}, not {tiling['partition_n']}")
        rows = dict(c_rows=n // width, c_row_elems=valid, c_row_pitch=c_row_pitch or 4 * width)
    return GemmDescriptor(
        m=gemm.m, k=gemm.k, n=n, **tiling,
        a_addr=a_addr, a_stride=gemm.m,
        b_addr=b_addr, b_stride=padded_bytes(shape, layout) - (b_addr - x_addr),
        c_addr=c_addr, c_stride=4 * n if c_stride is None else c_stride,
        b_mode=1, off_addr=off_addr, run_addr=run_addr, grp_addr=grp_addr,
        run_count=tables.run_count, **rows)


def _tiling(plan: TilingPlan) -> dict:
    return {name: getattr(plan, name) for name in TILING_FIELDS}


@functools.lru_cache(maxsize=1024)
def conv_best_plan(shape: ConvShape, cfg: AccelConfig, layout: str = "NCHW", *,
                   pixels: int | None = None, c_local: bool = False,
                   post: PostLoad | None = None) -> TilingPlan:
    """The tiling of one group's GEMM with the fewest cycles the convolution model predicts,
    found by steepest descent (:func:`planner.search.refine` with this model as its key) from
    the GEMM planner's ``best`` plan, the ``greedy`` plan and the GEMM oracle's
    (:func:`planner.search.search`) (ties: less accumulator, less traffic, larger
    ``partition_k``, then the GEMM plan). The oracle's start matters where the B port is the
    bound: a 3x3 128->32 conv on 14x14 descends from it to 86.1% (every B block gathered once,
    short split-K steps), from the other two only to 84.1%.

    ``pixels`` plans one record over the first ``pixels`` output pixels (a block of output
    rows, as the firmware builder runs a layer whose output goes to a padded or fused buffer;
    its GEMM plans go through ``on_chip(cfg, c_local=c_local)``); ``c_local`` and ``post``
    are the record's as :func:`planner.convcost.predict_conv` takes them.

    The plan's ``predicted_cycles`` stays the GEMM model's number, as for every
    :class:`~planner.tiling.TilingPlan`; ``strategy`` gets ``+conv`` when the descent moved
    away from the GEMM plan. The convolution's own prediction is
    :meth:`planner.conv.ConvProgram.predict` (or :func:`planner.layer_cost`).
    """
    if not isinstance(shape, ConvShape):
        raise ValueError(f"shape must be a ConvShape, not {type(shape).__name__}")
    if pixels is None:
        gemm, gcfg, b_bytes = shape.gemm, cfg, shape.b_tensor_bytes
    else:
        if not 1 <= pixels <= shape.gemm.n:
            raise ValueError(f"pixels must be in [1, {shape.gemm.n}] (the output pixels of "
                             f"{shape}), not {pixels!r}")
        gemm = GemmShape(shape.gemm.m, shape.gemm.k, pixels)
        gcfg, b_bytes = on_chip(cfg, c_local=c_local), None
    tables = compile_tables(shape, layout, cfg, pixels=pixels)
    gemm_best = best_plan(gemm, gcfg, b_bytes)

    @functools.cache
    def key(c: Candidate) -> tuple:
        d = conv_descriptor(shape, layout, tables, tiling_fields(
            gemm, gcfg, c.partition_m, c.partition_n, c.partition_k, c.outer_m))
        bd: CycleBreakdown = predict_conv(d, tables, cfg, post=post, c_local=c_local)
        return (bd.total_cycles, acc_bytes_for(c.partition_m, c.partition_n, gcfg),
                bd.rd_a_bytes + bd.rd_b_bytes + bd.wr_c_bytes, -c.partition_k,
                c.partition_m, c.partition_n, -c.outer_m)

    lower = conv_lower_bound(gemm.m, gemm.k, tables.n, tables, cfg, post=post)

    @functools.cache
    def bound(c: Candidate) -> int:
        return lower(c.partition_m, c.partition_n, c.partition_k)

    def candidate(plan: TilingPlan) -> Candidate:
        return Candidate(plan.partition_m, plan.partition_n, plan.partition_k, plan.outer_m)

    start = candidate(gemm_best)
    best, best_key = start, key(start)
    for origin in (gemm_best, greedy_plan(gemm, gcfg), search(gemm, gcfg)):
        found = refine(gemm, gcfg, origin, MAX_ROUNDS, key=key, bound=bound if PRUNE else None)
        if key(found) < best_key:
            best, best_key = found, key(found)
    if best == start:
        return gemm_best
    return make_plan(gemm, gcfg, best.partition_m, best.partition_n, best.partition_k,
                     best.outer_m, f"{gemm_best.strategy}+conv")


@functools.lru_cache(maxsize=1024)
def row_store_plan(shape: ConvShape, cfg: AccelConfig, *,
                   post: PostLoad | None = None) -> TilingPlan | None:
    """The tiling of one record that computes every output row of ``shape`` (batch 1, one
    group) into a buffer of its own row pitch through the row store
    (:func:`spec.desc.row_store`, configs with ``row_store``): the output rows as row lanes
    (:func:`row_width` lanes a row, the lanes past ``out_w`` computed and never written),
    ``partition_n`` one row, the rest ranked with the convolution model of those tables as
    :func:`conv_best_plan` ranks (steepest descent from the GEMM planner's plans of one row
    of lanes). None when the config has no row store, or no legal tiling takes a whole row a
    partition. This is how the firmware builder writes the interior of the next
    convolution's padded input in one record rather than one record a row."""
    if not cfg.row_store or shape.batch != 1 or shape.groups != 1:
        return None
    width = row_width(shape, cfg)
    rows = shape.out_h
    one_row = GemmShape(shape.gemm.m, shape.gemm.k, width)
    record = GemmShape(shape.gemm.m, shape.gemm.k, rows * width)
    tables = compile_tables(shape, "NCHW", cfg, row_width=width)

    @functools.cache
    def key(c: Candidate) -> tuple:
        if c.partition_n != width:
            return (float("inf"),)
        d = conv_descriptor(shape, "NCHW", tables, tiling_fields(
            record, cfg, c.partition_m, width, c.partition_k, c.outer_m))
        bd: CycleBreakdown = predict_conv(d, tables, cfg, post=post)
        return (bd.total_cycles, acc_bytes_for(c.partition_m, width, cfg),
                bd.rd_a_bytes + bd.rd_b_bytes + bd.wr_c_bytes, -c.partition_k,
                c.partition_m, -c.outer_m)

    lower = conv_lower_bound(record.m, record.k, tables.n, tables, cfg, post=post)

    @functools.cache
    def bound(c: Candidate) -> int:
        return lower(c.partition_m, width, c.partition_k)

    best, best_key = None, (float("inf"),)
    for origin in (best_plan(one_row, cfg), greedy_plan(one_row, cfg), search(one_row, cfg)):
        if origin.partition_n != width:
            continue
        found = refine(one_row, cfg, origin, MAX_ROUNDS, key=key, bound=bound if PRUNE else None)
        if key(found) < best_key:
            best, best_key = found, key(found)
    if best is None:
        return None
    return make_plan(record, cfg, best.partition_m, width, best.partition_k, best.outer_m,
                     "row-store")
