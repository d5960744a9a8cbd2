"""Convolution compiler: the plan, the tables and the descriptors of one conv layer.

``compile_conv(shape, layout, cfg)`` is the planner's whole answer for a convolution: the seed-000
tiling of one group's implicit GEMM (``M = out/groups``, ``K = (C/groups)*R*S``,
``N = batch*P*Q``; the B load cost counts the input tensor once, not the im2col matrix), the
statically compiled base/offset tables (seed 002, ``docs/conv_tables.md``), the predicted RTL
counters (:mod:`planner.convcost`) and one :class:`spec.desc.GemmDescriptor` per group.
"""

from __future__ import annotations

import dataclasses

from spec.config import AccelConfig, require_config
from spec.desc import GemmDescriptor, check, table_problems

from .convcost import predict_conv
from .convplan import conv_best_plan, conv_descriptor
from .cost import CycleBreakdown, PostLoad, on_chip
from .layout import Layout
from .offsets import ConvTables, compile_tables
from .plan import plan_conv, plan_gemm
from .shapes import ConvShape, GemmShape
from .tiling import TILING_FIELDS, TilingPlan

__all__ = ["ConvProgram", "compile_conv", "row_bands", "k_parts", "k_part_shape", "block_plan",
           "TILING_FIELDS"]



@dataclasses.dataclass(frozen=True)
class ConvProgram:
    """A compiled convolution layer: run :meth:`descriptor` for every group."""

    shape: ConvShape
    layout: Layout
    plan: TilingPlan
    tables: ConvTables

    @property
    def groups(self) -> int:
        return self.shape.groups

    def descriptor(self, group: int, cfg: AccelConfig, *, x_addr: int, a_addr: int,
                   c_addr: int, off_addr: int, run_addr: int, grp_addr: int,
                   c_stride: int | None = None, tiling: dict | None = None) -> GemmDescriptor:
        """The descriptor of group ``group``.

        ``x_addr`` is the padded input tensor (all groups); ``a_addr`` this group's k-major
        weights (``a_stride = M``); ``c_addr`` this group's output rows (``c_stride`` defaults to
        ``4 * N``); the three table addresses are shared by all groups. ``tiling`` overrides the
        plan's tiling fields. Raises ``ValueError`` listing every rule of :func:`spec.desc.check`
        the descriptor breaks.
        """
        if not 0 <= group < self.groups:
            raise ValueError(f"group must be in [0, {self.groups - 1}], not {group!r}")
        d = self._descriptor(group, x_addr, a_addr, c_addr, off_addr, run_addr, grp_addr,
                             c_stride, tiling)
        errors = check(d, cfg)
        if errors:
            raise ValueError("descriptor breaks spec.desc rules: " +
                             "; ".join(msg for _, msg in errors))
        return d

    def _descriptor(self, group, x_addr, a_addr, c_addr, off_addr, run_addr, grp_addr,
                    c_stride=None, tiling=None) -> GemmDescriptor:
        fields = {name: getattr(self.plan, name) for name in TILING_FIELDS}
        fields.update(tiling or {})
        return conv_descriptor(self.shape, self.layout, self.tables, fields, group,
                               x_addr=x_addr, a_addr=a_addr, c_addr=c_addr, off_addr=off_addr,
                               run_addr=run_addr, grp_addr=grp_addr, c_stride=c_stride)

    def predict(self, cfg: AccelConfig, tiling: dict | None = None, *,
                post: PostLoad | None = None) -> CycleBreakdown:
        """Predicted counters of the whole layer (every group; the groups run one after another;
        ``post``: each group's post-processing, :func:`planner.convcost.predict_conv`).
        Addresses do not change cycles, so none are needed. Raises ``ValueError`` when the
        tables do not fit ``cfg``'s table memories: one record cannot run the layer, so it gets
        no cycle count here (:func:`planner.layer_cost` costs it in bands, :func:`row_bands`)."""
        problems = _fits(self.tables, self.shape, cfg)
        if problems:
            raise ValueError(f"{self.shape}: its convolution tables do not fit this "
                             f"configuration's table memories ({'; '.join(problems)}): one "
                             f"record cannot run it (planner.layer_cost costs it in bands of "
                             f"output rows)")
        d = self._descriptor(0, 0, 0, 0, 0, 0, 0, tiling=tiling)
        one = predict_conv(d, self.tables, cfg, post=post).as_dict()
        return CycleBreakdown(**{name: value * self.groups for name, value in one.items()})


def compile_conv(shape: ConvShape, layout: Layout | str, cfg: AccelConfig,
                 strategy: str = "best") -> ConvProgram:
    """Plan and compile one convolution layer for ``cfg`` (see the module docstring)."""
    require_config(cfg)
    plan, _ = plan_conv(shape, cfg, strategy, Layout(layout).value)
    return ConvProgram(shape=shape, layout=Layout(layout), plan=plan,
                       tables=compile_tables(shape, layout, cfg))


def _fits(tables: ConvTables, shape: ConvShape, cfg: AccelConfig) -> list[str]:
    return table_problems(cfg, k=shape.gemm.k, run_count=tables.run_count, n=tables.n)


def row_bands(shape: ConvShape, layout: Layout | str, cfg: AccelConfig, *,
              whole: ConvTables | None = None) -> list[tuple[int, int]]:
    """The output rows each record of a one-image convolution with dense output computes:
    ``[(0, out_h)]`` (one record) when the whole layer's tables fit ``cfg``'s table memories
    (:func:`spec.desc.table_problems`); otherwise bands ``(p0, p1)`` of the most rows whose
    tables fit, the last one shorter. Every band of ``b`` rows runs the tables of the first
    ``b * out_w`` pixels with ``b_addr`` moved down ``p0 * stride_h`` input rows, as the
    firmware builder runs a layer row by row into a padded buffer.

    Raises ``ValueError`` naming the limit when not even one output row fits (more than
    ``conv_offset_entries`` taps, which no band changes, or an output row wider than the run
    or group tables hold): such a layer cannot run on ``cfg``. ``whole``: the layer's tables,
    when the caller has compiled them already."""
    if shape.batch != 1:
        raise ValueError(f"row_bands takes one image (batch 1), not batch={shape.batch}")
    P, Q = shape.out_h, shape.out_w
    whole = whole or compile_tables(shape, layout, cfg)
    if not _fits(whole, shape, cfg):
        return [(0, P)]
    one = _fits(compile_tables(shape, layout, cfg, pixels=Q), shape, cfg) if P > 1 else \
        _fits(whole, shape, cfg)
    if one:
        raise ValueError(f"{shape}: its convolution tables do not fit this configuration's "
                         f"table memories even for one output row ({'; '.join(one)}): it "
                         f"cannot run on this configuration")
    lo, hi = 1, P - 1                   # lo rows fit, P rows do not: the most that fit
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if _fits(compile_tables(shape, layout, cfg, pixels=mid * Q), shape, cfg):
            hi = mid - 1
        else:
            lo = mid
    return [(p0, min(p0 + lo, P)) for p0 in range(0, P, lo)]


def k_parts(shape: ConvShape, cfg: AccelConfig) -> list[tuple[int, int]]:
    """The input channels ``(c0, c1)`` (within a group) of each *K part* of a convolution:
    ``[(0, in_channels / groups)]`` when one group's ``K = (C / groups) R S`` offsets fit the
    offset table (``conv_offset_entries``); otherwise the fewest equal slices of whole input
    channels whose taps fit, the last one possibly smaller. Each part is a convolution of its
    own (its input channels are a contiguous slice of an NCHW input) whose int32 partial sums
    the host adds before requantising (``flow.compile``'s ``ksplit`` steps): the offset
    table holds one entry per tap, and no band of output rows changes ``K`` (ResNet-50's
    512-channel 3x3 layers have 4,608 taps, against 4,096 entries on ``small`` and ``fpga``).

    Raises ``ValueError`` when not even one input channel's ``R S`` taps fit."""
    require_config(cfg)
    per_in = shape.in_channels // shape.groups
    taps = shape.kernel_h * shape.kernel_w
    most = cfg.conv_offset_entries // taps          # input channels a part may have
    if most == 0:
        raise ValueError(f"{shape}: one input channel's {taps} taps exceed "
                         f"conv_offset_entries={cfg.conv_offset_entries}: it cannot run on this "
                         f"configuration")
    count = -(-per_in // most)
    size = -(-per_in // count)
    return [(c0, min(c0 + size, per_in)) for c0 in range(0, per_in, size)]


def k_part_shape(shape: ConvShape, part: tuple[int, int]) -> ConvShape:
    """The one-image, one-group convolution of K part ``part`` (:func:`k_parts`) of one group
    of ``shape``: ``c1 - c0`` input channels, every output channel of the group."""
    c0, c1 = part
    return dataclasses.replace(shape, in_channels=c1 - c0,
                               out_channels=shape.out_channels // shape.groups, groups=1,
                               batch=1)


def block_plan(shape: ConvShape, layout: Layout | str, cfg: AccelConfig, pixels: int,
               strategy: str = "best", *, c_local: bool = False,
               post: PostLoad | None = None, db=None) -> TilingPlan:
    """The tiling of a record over the first ``pixels`` output pixels of ``shape`` (a band of
    output rows, :func:`row_bands`, or one row into a padded buffer): ``best`` ranks with the
    convolution model of the band's tables (:func:`planner.convplan.conv_best_plan`), any
    other strategy plans the band's GEMM (``M x K x pixels``) as the GEMM planner does, with
    the output in the local buffer when ``c_local`` (``db``: the tuning database of the
    ``db`` strategy)."""
    if strategy == "best":
        return conv_best_plan(shape, cfg, Layout(layout).value, pixels=pixels, c_local=c_local,
                              post=post)
    gemm = shape.gemm
    return plan_gemm(GemmShape(gemm.m, gemm.k, pixels), on_chip(cfg, c_local=c_local), strategy,
                     None, db)

