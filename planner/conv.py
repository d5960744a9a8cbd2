"""Convolution compiler: the plan, the tables and the descriptors of one conv layer.

``compile_conv(shape, layout, cfg)`` is the planner's whole answer for a convolution: the seed-000
tiling of one group's implicit GEMM (``M = out/groups``, ``K = (C/groups)*R*S``,
``N = batch*P*Q``; the B load cost counts the input tensor once, not the im2col matrix), the
statically compiled base/offset tables (seed 002, ``docs/conv_tables.md``), the predicted RTL
counters (:mod:`planner.convcost`) and one :class:`spec.desc.GemmDescriptor` per group.
"""

from __future__ import annotations

import dataclasses

from spec.config import AccelConfig
from spec.desc import GemmDescriptor, check

from .convcost import predict_conv
from .convplan import conv_descriptor
from .cost import CycleBreakdown
from .layout import Layout
from .offsets import ConvTables, compile_tables
from .plan import plan_conv
from .shapes import ConvShape
from .tiling import TILING_FIELDS, TilingPlan

__all__ = ["ConvProgram", "compile_conv", "TILING_FIELDS"]



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

    def predict(self, cfg: AccelConfig, tiling: dict | None = None) -> CycleBreakdown:
        """Predicted counters of the whole layer (every group; the groups run one after another).
        Addresses do not change cycles, so none are needed."""
        d = self._descriptor(0, 0, 0, 0, 0, 0, 0, tiling=tiling)
        one = predict_conv(d, self.tables, cfg).as_dict()
        return CycleBreakdown(**{name: value * self.groups for name, value in one.items()})


def compile_conv(shape: ConvShape, layout: Layout | str, cfg: AccelConfig,
                 strategy: str = "best") -> ConvProgram:
    """Plan and compile one convolution layer for ``cfg`` (see the module docstring)."""
    plan, _ = plan_conv(shape, cfg, strategy, Layout(layout).value)
    return ConvProgram(shape=shape, layout=Layout(layout), plan=plan,
                       tables=compile_tables(shape, layout, cfg))
