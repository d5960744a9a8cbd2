"""Tessera planner: seed-000 GEMM/convolution tiling, its cycle model, an oracle and baselines.

Pure Python (the GEMM planner needs no numpy; `planner.offsets` and `planner.layout`, the
convolution tables, use numpy); imports :mod:`spec.config` and :mod:`spec.desc`, never Amaranth.

Typical use::

    from spec.config import PRESETS
    import planner
    cfg = PRESETS["default"]
    plan = planner.plan_gemm(planner.GemmShape(1024, 1024, 128), cfg)      # strategy="best"
    counters = planner.predict(plan, cfg)                                   # CycleBreakdown
    desc = planner.to_descriptor(plan, plan.shape, cfg, a_addr, b_addr, c_addr)
"""

from __future__ import annotations

import dataclasses

from spec.config import AccelConfig, require_config

from .conv import ConvProgram, block_plan, k_part_shape, k_parts, row_bands
from .convcost import predict_conv
from .convplan import conv_descriptor
from .dwcost import (depthwise_blocks, depthwise_descriptor, is_depthwise, channel_chunks,
                     mesh_fits, mesh_odd, predict_depthwise)
from .cost import (COUNTER_FIELDS, DEFAULT_CONSTANTS, CycleBreakdown, ModelConstants, PostLoad,
                   lower_bound_cycles, predict, predict_reference, utilisation)
from .layout import Layout, padded_dims
from .offsets import compile_tables
from .plan import STRATEGIES, Strategy, plan_conv, plan_gemm
from .search import best_plan, greedy_plan, search
from .shapes import ConvShape, GemmShape
from .tiling import (TILING_FIELDS, SeedDecision, TilingPlan, seed_decision, seed_plan,
                     to_descriptor)
from .workload import Layer, Workload, load_workload, parse_workload

__all__ = ["GemmShape", "ConvShape", "TilingPlan", "SeedDecision", "CycleBreakdown", "LayerCost",
           "PostLoad", "DATA_FRACTIONS",
           "layer_cost", "check_addressable", "runs_in_k_parts",
           "ModelConstants", "DEFAULT_CONSTANTS", "COUNTER_FIELDS", "STRATEGIES", "Strategy",
           "plan_gemm", "plan_conv", "predict", "predict_reference", "lower_bound_cycles",
           "utilisation", "to_descriptor", "seed_decision", "seed_plan", "greedy_plan",
           "search", "best_plan", "Layer", "Workload", "load_workload", "parse_workload"]

@dataclasses.dataclass(frozen=True)
class LayerCost:
    """A layer's plan and its predicted counters: ``plan`` tiles one group's GEMM, ``counters``
    cover the whole layer (every group)."""

    shape: GemmShape | ConvShape
    plan: TilingPlan
    groups: int
    counters: CycleBreakdown
    table_entries: int = 0      # a convolution's offset + run + group table entries
    mesh: bool = False          # a depthwise layer on the mesh (``plan``: its per-group GEMM)
    bands: int = 0              # records of row bands an image (0: the whole layer, one record)
    #: K parts an image and group (1: every record takes the whole K; more: slices of input
    #: channels, :func:`planner.conv.k_parts`, whose int32 partial sums the host adds)
    k_parts: int = 1

    @property
    def cycles(self) -> int:
        return self.counters.total_cycles

    @property
    def macs(self) -> int:
        return self.shape.macs


def check_addressable(shape: GemmShape | ConvShape, cfg: AccelConfig,
                      out_bytes: int = 4) -> None:
    """Raise ValueError when the layer's operands cannot all lie in the device memory
    ``cfg`` addresses: int8 weights (A), the input (B: ``k x n``, or a convolution's whole
    input tensor), the output (C: ``out_bytes`` an element, 4 for int32, 1 for a requantised
    layer). A layer that cannot be placed cannot run, so it gets no cycle count."""
    if isinstance(shape, ConvShape):
        g = shape.gemm
        a = g.m * g.k * shape.groups
        b = shape.b_tensor_bytes * shape.groups
        c = out_bytes * g.m * g.n * shape.groups
    else:
        a, b, c = shape.m * shape.k, shape.k * shape.n, out_bytes * shape.m * shape.n
    if a + b + c > cfg.dram_bytes:
        raise ValueError(
            f"{shape}: its operands need {a + b + c:,} bytes of device memory (A {a:,}, B {b:,}, "
            f"C {c:,} as {'int32' if out_bytes == 4 else 'int8'}), more than dram_bytes="
            f"{cfg.dram_bytes:,} (dram_addr_bits={cfg.dram_addr_bits}): it cannot run on this "
            f"configuration")


def layer_cost(shape: GemmShape | ConvShape, cfg: AccelConfig, strategy: Strategy = "best",
               db=None, *, plan: TilingPlan | None = None, layout: str = "NCHW",
               post: PostLoad | None = None) -> LayerCost:
    """The one cost entry point for a layer: plan it with ``strategy`` (or take ``plan``, one
    group's GEMM tiling) and predict its counters, a GEMM with :func:`predict` and a
    convolution with the convolution model of its compiled tables (:mod:`planner.convcost`,
    input in ``layout``; what ``bench`` and the compiler use), a depthwise 3x3 (pad 1), 5x5
    (pad 2) or 7x7 (pad 3) layer of stride 1 or 2 (with stride 2 also padded one less before
    an even side, TF "SAME": :func:`planner.dwcost.mesh_pads`) the mesh runs
    (:func:`planner.dwcost.mesh_fits`) with the mesh's model (one record per
    image and ``quant_entries`` channels; ``plan`` is then its per-group GEMM's), any other
    depthwise layer as the dense convolutions of its channel blocks
    (:func:`planner.dwcost.depthwise_blocks`), and a convolution whose tables do not fit the
    table memories in bands of output rows (:func:`planner.conv.row_bands`; ``plan`` does not
    apply: each band is planned with ``strategy``), and a convolution with more taps per group
    than the offset table holds as its K parts (:func:`planner.conv.k_parts`: slices of input
    channels, each a convolution of its own with int32 partial sums, which the host adds and
    requantises; NCHW input only; ``plan`` does not apply). Every layer with dense output,
    which a shape alone implies, and, by default, without post-processing (int32 output, no
    bias); ``post`` (:class:`planner.cost.PostLoad`) costs the post-processed records the
    compiler builds instead: their parameter loads, the requantiser on every store, and one
    record per ``quant_entries`` output channels (``plan`` then does not apply to a layer of
    more; K parts stay raw: the host requantises them). In a compiled network the records can
    differ still (docs/planner.md, "What layer_cost does not see"). A
    convolution of ``batch > 1`` costs ``batch`` times its one-image cost (one record set per
    image, as the compiler runs it; ``plan`` does not apply). Raises ``ValueError`` for a layer
    ``cfg`` cannot run (its operands exceed the device memory, not even one input channel's
    taps fit the offset table, or not even one output row's runs fit): it gets no cycle
    count."""
    require_config(cfg)
    post = post if post is not None and post.active else None
    out_bytes = 1 if post is not None and post.requant else 4
    if not runs_in_k_parts(shape, cfg):     # (K parts run an image at a time: _k_split_cost)
        check_addressable(shape, cfg, out_bytes)
    if mesh_fits(shape, cfg):
        # one record per image and chunk of quant_entries channels (flow.compile)
        plan = plan or plan_gemm(shape.gemm, cfg, "seed")
        odd_rows, odd_cols = mesh_odd(shape)
        parts = [predict_depthwise(depthwise_descriptor(c1 - c0, shape.height, shape.width,
                                                        cfg, out_bytes=out_bytes,
                                                        stride=shape.stride_h,
                                                        kernel=shape.kernel_h,
                                                        odd_rows=odd_rows, odd_cols=odd_cols),
                                   cfg, post=post)
                 for c0, c1 in channel_chunks(shape.in_channels, cfg)]
        counters = CycleBreakdown(**{k: shape.batch * sum(getattr(p, k) for p in parts)
                                     for k in COUNTER_FIELDS})
        return LayerCost(shape, plan, shape.groups, counters, mesh=True)
    if is_depthwise(shape):
        # off the mesh: blocks of array_rows channels, dense with diagonal weights (the
        # compiler's records, flow.compile), each planned with ``strategy`` (``plan``, a
        # per-group GEMM's tiling, does not apply)
        parts = [(layer_cost(sub, cfg, strategy, db, layout=layout, post=post), count)
                 for sub, count in depthwise_blocks(shape, cfg)]
        counters = CycleBreakdown(**{k: sum(getattr(c.counters, k) * n for c, n in parts)
                                     for k in COUNTER_FIELDS})
        return LayerCost(shape, parts[0][0].plan, sum(n for _, n in parts), counters,
                         sum(c.table_entries * n for c, n in parts))
    if isinstance(shape, GemmShape):
        if post is not None and shape.m > cfg.quant_entries:
            # one record per chunk of the parameter memories' channels (flow.compile)
            return _chunked(shape, 1, [layer_cost(GemmShape(c1 - c0, shape.k, shape.n), cfg,
                                                  strategy, db, post=post)
                                       for c0, c1 in channel_chunks(shape.m, cfg)])
        plan = plan or plan_gemm(shape, cfg, strategy, None, db)
        return LayerCost(shape, plan, 1, predict(plan, cfg, post=post))
    if not isinstance(shape, ConvShape):
        raise ValueError(f"shape must be a GemmShape or a ConvShape, not "
                         f"{type(shape).__name__}")
    if shape.batch > 1:
        # one record set per image, as the compiler runs it (flow.compile)
        one = layer_cost(dataclasses.replace(shape, batch=1), cfg, strategy, db, layout=layout,
                         post=post)
        return LayerCost(shape, one.plan, shape.groups, CycleBreakdown(
            **{k: shape.batch * getattr(one.counters, k) for k in COUNTER_FIELDS}),
            one.table_entries, bands=one.bands, k_parts=one.k_parts)
    parts = k_parts(shape, cfg)             # raises when not even one channel's taps fit
    if len(parts) > 1:
        return _k_split_cost(shape, cfg, strategy, layout, db, parts)
    per_out = shape.out_channels // shape.groups
    if post is not None and per_out > cfg.quant_entries:
        # each group in chunks of the parameter memories' channels (flow.compile)
        chunks = [layer_cost(dataclasses.replace(shape, in_channels=shape.in_channels //
                                                 shape.groups, out_channels=c1 - c0, groups=1),
                             cfg, strategy, db, layout=layout, post=post)
                  for c0, c1 in channel_chunks(per_out, cfg)]
        return _chunked(shape, shape.groups, chunks)
    tables = compile_tables(shape, layout, cfg)
    bands = row_bands(shape, layout, cfg, whole=tables)     # raises when no band fits
    if len(bands) > 1:
        return _banded_cost(shape, cfg, strategy, layout, db, bands, post)
    if plan is None:
        plan, _ = plan_conv(shape, cfg, strategy) if strategy != "db" else \
            (plan_gemm(shape.gemm, cfg, strategy, None, db), shape.groups)
    program = ConvProgram(shape=shape, layout=Layout(layout), plan=plan, tables=tables)
    return LayerCost(shape, plan, shape.groups, program.predict(cfg, post=post),
                     _entries(tables))


def _chunked(shape: GemmShape | ConvShape, groups: int, chunks: list[LayerCost]) -> LayerCost:
    """A layer as ``groups`` times its output-channel chunks' records (one group's each)."""
    counters = CycleBreakdown(**{k: groups * sum(getattr(c.counters, k) for c in chunks)
                                 for k in COUNTER_FIELDS})
    return LayerCost(shape, chunks[0].plan, getattr(shape, "groups", 1), counters,
                     groups * sum(c.table_entries for c in chunks),
                     bands=max(c.bands for c in chunks))


#: Where an image's data region may start, as fractions of the DRAM, in the order the compiler
#: tries them (flow.compile): the middle first, then up for a large image, then down for large
#: tensors (a VGG-19 layer on tiny needs 3.4 of its 4 MiB for its tensors).
DATA_FRACTIONS = (0.5, 0.625, 0.75, 0.875, 0.25, 0.125, 0.0625)


def runs_in_k_parts(shape: GemmShape | ConvShape, cfg: AccelConfig) -> bool:
    """``shape`` is a convolution that runs in K parts on ``cfg`` (the compiler's ``ksplit``
    steps, :func:`layer_cost`): one group's taps exceed the offset table and one input
    channel's fit (:func:`planner.conv.k_parts`). Depthwise layers never do (their channel
    blocks have as few channels as the table takes)."""
    if not isinstance(shape, ConvShape) or is_depthwise(shape) or mesh_fits(shape, cfg):
        return False
    try:
        return len(k_parts(shape, cfg)) > 1
    except ValueError:
        return False


def _k_split_cost(shape: ConvShape, cfg: AccelConfig, strategy: Strategy, layout: str, db,
                  parts: list[tuple[int, int]]) -> LayerCost:
    """A one-image convolution whose ``K`` exceeds the offset table, as the compiler runs it:
    per group, one convolution per K part (:func:`planner.conv.k_parts`, each costed by
    :func:`layer_cost`, in bands of rows if its tables need them), int32 partial sums that
    the host adds and requantises."""
    if Layout(layout) is not Layout.NCHW:
        raise ValueError(f"{shape}: K={shape.gemm.k} offsets exceed conv_offset_entries="
                         f"{cfg.conv_offset_entries}, and only an NCHW input is split into "
                         f"K parts (its channels are contiguous), not {Layout(layout).value}")
    # one image a run (flow.compile): the weights below the data region, the padded input
    # and every part's int32 partial sums in it; the region starts at one of the fractions
    # of the DRAM the compiler tries (DATA_FRACTIONS)
    hp, wp = padded_dims(shape)
    weights = shape.gemm.m * shape.gemm.k * shape.groups
    data = shape.in_channels * hp * wp + 4 * shape.out_channels * shape.out_h * shape.out_w * \
        len(parts)
    dram = cfg.dram_bytes
    if not any(weights <= dram * f and data <= dram * (1 - f) for f in DATA_FRACTIONS):
        raise ValueError(f"{shape}: in {len(parts)} K parts an image run needs {weights:,} "
                         f"bytes of weights and {data:,} bytes of padded input and int32 "
                         f"partial sums, which no split of dram_bytes={dram:,} between an "
                         f"image and its data region holds: it cannot run on this "
                         f"configuration")
    costs: dict[ConvShape, LayerCost] = {}
    for part in parts:
        sub = k_part_shape(shape, part)
        if sub not in costs:
            costs[sub] = layer_cost(sub, cfg, strategy, db, layout=layout)
    each = [costs[k_part_shape(shape, p)] for p in parts]
    counters = CycleBreakdown(**{k: shape.groups * sum(getattr(c.counters, k) for c in each)
                                 for k in COUNTER_FIELDS})
    return LayerCost(shape, each[0].plan, shape.groups, counters,
                     sum(c.table_entries for c in each), bands=max(c.bands for c in each),
                     k_parts=len(parts))


def _entries(tables) -> int:
    return int(tables.offsets.size + tables.segments.size + tables.groups.size)


def _banded_cost(shape: ConvShape, cfg: AccelConfig, strategy: Strategy, layout: str, db,
                 bands: list[tuple[int, int]], post: PostLoad | None = None) -> LayerCost:
    """A one-image convolution whose tables do not fit the table memories, as the compiler runs
    it: each group on its own, in ``bands`` of output rows (:func:`planner.conv.row_bands`),
    each band a record planned with ``strategy`` (:func:`planner.conv.block_plan`)."""
    group = CycleBreakdown(**{k: 0 for k in COUNTER_FIELDS})       # one group's records
    entries, first, done = 0, None, {}
    for rows in (p1 - p0 for p0, p1 in bands):
        if rows not in done:
            pixels = rows * shape.out_w
            tables = compile_tables(shape, layout, cfg, pixels=pixels)
            plan = block_plan(shape, layout, cfg, pixels, strategy, db=db, post=post)
            d = conv_descriptor(shape, layout, tables,
                                {name: getattr(plan, name) for name in TILING_FIELDS})
            done[rows] = (predict_conv(d, tables, cfg, post=post), plan)
            entries += _entries(tables)
        counters, plan = done[rows]
        first = first or plan
        group = CycleBreakdown(**{k: getattr(group, k) + getattr(counters, k)
                                  for k in COUNTER_FIELDS})
    return LayerCost(shape, first, shape.groups, CycleBreakdown(
        **{k: shape.groups * getattr(group, k) for k in COUNTER_FIELDS}), entries,
        bands=len(bands))
