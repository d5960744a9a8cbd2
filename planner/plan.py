"""Planning one GEMM or convolution with a named strategy (seed 000; the tuning database of
seed 001 with ``db``). Re-exported by :mod:`planner`."""

from __future__ import annotations

import functools
from typing import Literal

from spec.config import AccelConfig, require_config

from .convplan import conv_best_plan
from .layout import Layout
from .search import best_plan, greedy_plan, search
from .shapes import ConvShape, GemmShape
from .tiling import TilingPlan, seed_plan
from .tunedb.lookup import db_plan

__all__ = ["Strategy", "STRATEGIES", "SHAPE_STRATEGIES", "plan_gemm", "plan_conv"]

Strategy = Literal["seed", "greedy", "search", "best", "db"]
#: The strategies that plan from the shape and the config alone (``db`` also needs a tuning
#: database).
SHAPE_STRATEGIES: tuple[str, ...] = ("seed", "greedy", "search", "best")
#: Strategy names accepted by :func:`plan_gemm` and the CLI.
STRATEGIES: tuple[str, ...] = SHAPE_STRATEGIES + ("db",)


def plan_gemm(shape: GemmShape, cfg: AccelConfig, strategy: Strategy = "best",
              b_bytes: int | None = None, db=None) -> TilingPlan:
    """Plan one GEMM with ``strategy``.

    ``seed`` is seed 000 legalised, ``greedy`` the Gemmini-style baseline, ``search`` the
    exhaustive oracle and ``best`` (default) the seed refined by local search. ``b_bytes``
    (seed and best only) is the bytes of one load of B when it is not ``k*n`` (a convolution's
    input tensor). ``db`` asks the tuning database ``db`` (a path or
    :class:`planner.tunedb.TuneDB`; seed 001, docs/tunedb.md).
    """
    if not isinstance(shape, GemmShape):
        raise ValueError(f"shape must be a GemmShape, not {type(shape).__name__}")
    require_config(cfg)
    if strategy in SHAPE_STRATEGIES:
        return _plan(shape, cfg, strategy, b_bytes)
    if strategy == "db":
        if db is None:
            raise ValueError("strategy 'db' needs a tuning database (db=PATH, --db PATH)")
        return db_plan(shape, cfg, db)
    raise ValueError(f"strategy must be one of {', '.join(STRATEGIES)}, not {strategy!r}")


@functools.lru_cache(maxsize=4096)
def _plan(shape: GemmShape, cfg: AccelConfig, strategy: str, b_bytes: int | None) -> TilingPlan:
    """:func:`plan_gemm` of a strategy that needs only the shape and the config: a function
    of its arguments, so cached (an image repeats a record's shape once per output row or
    fused block; a plan is immutable)."""
    if strategy == "seed":
        return seed_plan(shape, cfg, b_bytes)
    if strategy == "greedy":
        return greedy_plan(shape, cfg)
    if strategy == "search":
        return search(shape, cfg)
    return best_plan(shape, cfg, b_bytes)


def plan_conv(shape: ConvShape, cfg: AccelConfig, strategy: Strategy = "best",
              layout: str = "NCHW") -> tuple[TilingPlan, int]:
    """Plan a convolution: ``(plan of one group's GEMM, number of groups)`` (seed 000 mapping).

    ``best`` ranks tilings with the convolution model of the layer's tables in ``layout``
    (:func:`planner.convplan.conv_best_plan`); the other strategies plan the GEMM."""
    if not isinstance(shape, ConvShape):
        raise ValueError(f"shape must be a ConvShape, not {type(shape).__name__}")
    require_config(cfg)
    if strategy == "best":
        return conv_best_plan(shape, cfg, Layout(layout).value), shape.groups
    return plan_gemm(shape.gemm, cfg, strategy, shape.b_tensor_bytes), shape.groups
