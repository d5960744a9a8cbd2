"""Per-layer and per-network planning tables (CLI ``plan`` and the ``report`` in docs/planner.md).

Network totals weight each layer by ``count`` (and a grouped convolution by its ``groups``
independent GEMMs). The gap of a strategy is ``cycles / oracle_cycles - 1``.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from spec.config import AccelConfig

from . import LayerCost, PostLoad, layer_cost, plan_conv, plan_gemm
from .shapes import ConvShape, GemmShape
from .tiling import TilingPlan
from .workload import Layer, Workload, layer_gemm, load_workload

__all__ = ["LayerResult", "evaluate", "plan_layer", "plan_table", "totals", "markdown_report",
           "DEFAULT_WORKLOADS", "gap", "layer_costs", "cost_totals"]

#: The networks of the acceptance table, in the shared workloads directory.
DEFAULT_WORKLOADS = ("resnet50.json", "bert_base_seq128.json", "bert_large_seq128.json")


@dataclasses.dataclass(frozen=True)
class LayerResult:
    layer: Layer
    instances: int            # count * groups
    plans: dict[str, TilingPlan]


def gap(plan: TilingPlan, oracle: TilingPlan) -> float:
    return plan.predicted_cycles / oracle.predicted_cycles - 1


def evaluate(workload: Workload, cfg: AccelConfig, strategies: tuple[str, ...], db=None
             ) -> list[LayerResult]:
    """Plan every layer with every strategy in ``strategies``."""
    out = []
    for layer in workload.layers:
        _, groups, _ = layer_gemm(layer.shape)
        plans = {s: plan_layer(layer.shape, cfg, s, db) for s in strategies}
        out.append(LayerResult(layer, layer.count * groups, plans))
    return out


def plan_layer(shape: GemmShape | ConvShape, cfg: AccelConfig, strategy: str, db=None
               ) -> TilingPlan:
    """One layer's plan (of one group's GEMM) as the compiler makes it: ``best`` plans a
    convolution with the convolution model of its tables (:func:`planner.plan_conv`); every
    other strategy, and every GEMM, plans the GEMM (a convolution's B load counted once)."""
    if strategy == "best" and isinstance(shape, ConvShape):
        return plan_conv(shape, cfg, strategy)[0]
    gemm, _, b_bytes = layer_gemm(shape)
    return plan_gemm(gemm, cfg, strategy, b_bytes if strategy in ("seed", "best") else None, db)


def totals(results: list[LayerResult], strategy: str, cfg: AccelConfig) -> tuple[int, float]:
    """``(total cycles, utilisation)`` of a network, layers weighted by their instances."""
    cycles = sum(r.plans[strategy].predicted_cycles * r.instances for r in results)
    macs = sum(r.plans[strategy].shape.macs * r.instances for r in results)
    return cycles, macs / (cfg.macs_per_cycle * cycles)


def layer_costs(results: list[LayerResult], strategy: str, cfg: AccelConfig,
                db=None, post: PostLoad | None = None) -> list[LayerCost]:
    """Each layer's predicted counters with ``strategy``'s plan, from the one cost entry point
    (:func:`planner.layer_cost`: the convolution model for convolutions; a layer run in bands
    of rows plans its bands with ``strategy`` and ``db``)."""
    costs, refused = [], []
    for r in results:
        try:
            plan = r.plans[strategy] if post is None else None   # post may chunk a layer
            costs.append(layer_cost(r.layer.shape, cfg, strategy, db, plan=plan, post=post))
        except ValueError as err:
            refused.append((r.layer.name, str(err)))
    if len(refused) == 1:
        raise ValueError(f"layer {refused[0][0]}: {refused[0][1]}")
    if refused:
        # every one named, each reason once (the first layer's in full): a network with
        # several layers the configuration cannot run says so in one pass
        lines = [f"{len(refused)} layers cannot run on this configuration:"]
        for name, reason in refused:
            lines.append(f"  layer {name}: {reason}")
        raise ValueError("\n".join(lines))
    return costs


def cost_totals(results: list[LayerResult], costs: list[LayerCost],
                cfg: AccelConfig) -> tuple[int, float]:
    """``(total cycles, utilisation)`` of a network from its layers' costs, times ``count``."""
    cycles = sum(c.cycles * r.layer.count for r, c in zip(results, costs))
    macs = sum(c.macs * r.layer.count for r, c in zip(results, costs))
    return cycles, macs / (cfg.macs_per_cycle * cycles)


def _by(c: LayerCost, p) -> str:
    """The ``by`` column of :func:`plan_table`."""
    if c.mesh:
        return "mesh"
    if c.k_parts > 1:
        return f"{c.k_parts} K parts" + ("+b" if c.bands else "")
    return f"{c.bands} bands" if c.bands else p.strategy


def plan_table(results: list[LayerResult], strategy: str, cfg: AccelConfig,
               oracle: str | None = "search", db=None, post: PostLoad | None = None) -> str:
    """A fixed-width text table of one strategy's plans: each layer's predicted cycles (all
    its groups; :func:`layer_costs`) and utilisation, and the plan's gap to ``oracle`` on the
    GEMM model (the tiling planner's quality). ``by`` names the plan's strategy, or ``mesh``
    for a depthwise layer the mesh runs (its cycles are the mesh's; the tiling columns are its
    per-group GEMM's, which it does not use), ``N bands`` for a convolution run in bands of
    output rows, ``N K parts`` for one whose taps exceed the offset table (slices of input
    channels whose int32 partial sums the host adds: :func:`planner.conv.k_parts`; with
    ``+b`` when the parts also run in bands); the tiling columns are then the whole layer's
    GEMM plan, as for a layer ``post`` splits into chunks of ``quant_entries`` output
    channels (each chunk is costed with its own plan)."""
    head = (f"{'layer':<20} {'M x K x N':>18} {'cnt':>4} {'pm':>5} {'pn':>5} {'pk':>5} "
            f"{'tm':>4} {'tn':>4} {'om':>2} {'sk':>2} {'acc':>6} {'ldA':>4} {'ldB':>4} "
            f"{'cycles':>10} {'util':>6} {'gap':>7} {'by':<10}")
    lines = [head, "-" * len(head)]
    costs = layer_costs(results, strategy, cfg, db, post)
    for r, c in zip(results, costs):
        p = r.plans[strategy]
        g = f"{gap(p, r.plans[oracle]) * 100:6.2f}%" if oracle in r.plans else "      -"
        util = c.macs / (cfg.macs_per_cycle * c.cycles)
        lines.append(
            f"{r.layer.name[:20]:<20} {str(p.shape):>18} {r.layer.count:>4} {p.partition_m:>5} "
            f"{p.partition_n:>5} {p.partition_k:>5} {p.tile_m:>4} {p.tile_n:>4} "
            f"{p.outer_m:>2} {p.need_splitk:>2} {p.acc_buffer_needed:>6} {p.loads_a:>4} "
            f"{p.loads_b:>4} {c.cycles:>10} {util:>6.3f} {g} "
            f"{_by(c, p):<10}")
    cycles, util = cost_totals(results, costs, cfg)
    line = f"total (layers x count): {cycles} cycles, utilisation {util:.3f}"
    if oracle and all(oracle in r.plans for r in results):
        g_cycles, _ = totals(results, strategy, cfg)
        o_cycles, _ = totals(results, oracle, cfg)
        line += f", GEMM-model gap to oracle {(g_cycles / o_cycles - 1) * 100:.2f}%"
    lines.append(line)
    return "\n".join(lines)


def markdown_report(cfg: AccelConfig, preset: str, workload_paths: list[Path]) -> str:
    """The gap table of docs/planner.md: seed, greedy and best against the oracle, per layer."""
    strategies = ("seed", "greedy", "best", "search")
    out = [f"Preset `{preset}` (config_id `{cfg.config_id:08x}`); gap = predicted cycles / "
           f"oracle cycles - 1. Generated by `python -m planner report`.", ""]
    summary = ["| network | strategy | total cycles | utilisation | gap to oracle | layers "
               "within 1% | within 5% | worst layer gap |",
               "|---|---|---:|---:|---:|---:|---:|---:|"]
    for path in workload_paths:
        workload = load_workload(path)
        results = evaluate(workload, cfg, strategies)
        o_cycles, _ = totals(results, "search", cfg)
        out += [f"### {workload.network}", "",
                "| layer | M x K x N | count | oracle (pm, pn, pk, outer) | oracle util | seed "
                "gap | greedy gap | best gap | best by |",
                "|---|---|---:|---|---:|---:|---:|---:|---|"]
        for r in results:
            o = r.plans["search"]
            out.append(
                f"| {r.layer.name} | {o.shape} | {r.instances} | ({o.partition_m}, "
                f"{o.partition_n}, {o.partition_k}, {o.outer_m}) | {o.predicted_util:.3f} | "
                + " | ".join(f"{gap(r.plans[s], o) * 100:.2f}%" for s in ("seed", "greedy", "best"))
                + f" | {r.plans['best'].strategy} |")
        out.append("")
        for s in strategies:
            cycles, util = totals(results, s, cfg)
            gaps = [gap(r.plans[s], r.plans["search"]) for r in results]
            n = len(gaps)
            summary.append(
                f"| {workload.network} | {s} | {cycles} | {util:.3f} | "
                f"{(cycles / o_cycles - 1) * 100:.2f}% | {sum(g <= 0.01 for g in gaps)}/{n} | "
                f"{sum(g <= 0.05 for g in gaps)}/{n} | {max(gaps) * 100:.2f}% |")
    return "\n".join(summary + [""] + out)
