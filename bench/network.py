"""Run every distinct layer of a workload on the RTL and turn the counters into bench records.

One Verilator simulation per (network, strategy) runs all of its distinct layers
(:mod:`bench.rtl_layers`); layers with equal shapes run once and carry the summed count.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from pathlib import Path
from typing import Callable

from hw.build import emit
from planner.conv import TILING_FIELDS
from planner.shapes import ConvShape, GemmShape
from planner.workload import Workload
from spec.config import AccelConfig
from spec.regmap import COUNTERS
from tb.tools import build, missing_tool

from .roofline import roofline
from .rtl_layers import RESULTS_NAME

__all__ = ["BenchLayer", "distinct_layers", "run_on_rtl", "layer_record", "network_totals",
           "STALLS"]

#: Stall categories of the RTL counters (``spec.layouts.COUNTERS``), in report order.
STALLS = ("stall_load_a_cycles", "stall_load_b_cycles", "stall_store_cycles",
          "stall_drain_cycles", "stall_ctrl_cycles")


@dataclasses.dataclass(frozen=True)
class BenchLayer:
    """A distinct layer shape: its first name, every name sharing the shape, summed count."""

    name: str
    names: tuple[str, ...]
    shape: GemmShape | ConvShape
    count: int

    @property
    def gemm(self) -> GemmShape:
        return self.shape.gemm if isinstance(self.shape, ConvShape) else self.shape

    @property
    def groups(self) -> int:
        return self.shape.groups if isinstance(self.shape, ConvShape) else 1

    def job(self, layout: str) -> dict:
        """The layer's entry in a :mod:`bench.rtl_layers` job."""
        if isinstance(self.shape, ConvShape):
            return {"kind": "conv", "shape": dataclasses.asdict(self.shape), "layout": layout}
        return {"kind": "gemm", "m": self.shape.m, "k": self.shape.k, "n": self.shape.n}


def distinct_layers(workload: Workload) -> list[BenchLayer]:
    """Layers with distinct shapes in workload order; equal shapes merge (counts add)."""
    merged: dict[GemmShape | ConvShape, BenchLayer] = {}
    for layer in workload.layers:
        old = merged.get(layer.shape)
        if old is None:
            merged[layer.shape] = BenchLayer(layer.name, (layer.name,), layer.shape, layer.count)
        else:
            merged[layer.shape] = dataclasses.replace(
                old, names=old.names + (layer.name,), count=old.count + layer.count)
    return list(merged.values())


def run_on_rtl(layers: list[BenchLayer], cfg: AccelConfig, strategy: str, workdir: Path, *,
               layout: str = "NCHW", seed: int = 1,
               progress: Callable[[int], None] | None = None) -> list[dict]:
    """Run ``layers`` with ``strategy``'s tiling in one Verilator simulation; return the raw
    testbench records in order. ``progress(done)`` is called as layers finish. The simulator's
    output goes to ``workdir/sim.log``."""


    reason = missing_tool("verilator")
    if reason:
        raise RuntimeError(reason)
    workdir = Path(workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    job = workdir / "job.json"
    job.write_text(json.dumps({"strategy": strategy, "seed": seed,
                               "layers": [layer.job(layout) for layer in layers]}, indent=1))
    results = workdir / RESULTS_NAME
    results.unlink(missing_ok=True)
    out = emit(cfg)
    runner = build("verilator", out)
    failure: list[BaseException] = []

    def simulate():
        try:
            runner.test(hdl_toplevel="sim_top", test_module="bench.rtl_layers", test_dir=workdir,
                        extra_env={"ACCEL_BUILD": str(out), "TESSERA_BENCH_JOB": str(job)},
                        results_xml=str(workdir / "results.xml"), log_file=workdir / "sim.log")
        except BaseException as err:      # reported after the join
            failure.append(err)

    thread = threading.Thread(target=simulate, daemon=True)
    thread.start()
    done = 0
    while thread.is_alive():
        thread.join(0.5)
        if progress is not None and results.exists():
            try:
                now = len(json.loads(results.read_text()))
            except (OSError, ValueError):
                continue
            if now != done:
                done = now
                progress(done)
    records = json.loads(results.read_text()) if results.exists() else []
    if progress is not None:
        progress(len(records))
    if failure or len(records) != len(layers):
        raise RuntimeError(f"the simulation finished {len(records)} of {len(layers)} layers "
                           f"({failure[0] if failure else 'see the log'}); log: "
                           f"{workdir / 'sim.log'}")
    return records


def layer_record(layer: BenchLayer, raw: dict, cfg: AccelConfig) -> dict:
    """The bench record of one layer from its testbench record ``raw``."""

    cycles = raw["total_cycles"]
    predicted = raw["predicted"]["total_cycles"]
    macs = layer.shape.macs
    gemm = layer.gemm
    return {
        "name": layer.name, "names": list(layer.names), "count": layer.count,
        "kind": "conv" if isinstance(layer.shape, ConvShape) else "gemm",
        "shape": dataclasses.asdict(layer.shape), "gemm": str(gemm), "groups": layer.groups,
        "macs": macs,
        "plan": {"strategy": raw["strategy"], **{f: raw[f] for f in TILING_FIELDS}},
        "counters": {name: raw[name] for name in COUNTERS},
        "cycles": cycles,
        "utilisation": macs / (cfg.macs_per_cycle * cycles),
        "stalls": {name: raw[name] for name in STALLS},
        "dram_bytes": {"a": raw["rd_a_bytes"], "b": raw["rd_b_bytes"], "c": raw["wr_c_bytes"]},
        "predicted_cycles": predicted,
        "prediction_error": predicted / cycles - 1,
        "planner_predicted_cycles": raw.get("planner_predicted_cycles"),
        "roofline": roofline(layer.shape, raw, cfg),
        "sim_wall_s": raw.get("run_wall_s"),
    }


def network_totals(records: list[dict], cfg: AccelConfig) -> dict:
    """Totals over ``records`` weighted by count."""
    macs = sum(r["macs"] * r["count"] for r in records)
    cycles = sum(r["cycles"] * r["count"] for r in records)
    predicted = sum(r["predicted_cycles"] * r["count"] for r in records)
    bound = sum(r["roofline"]["compulsory"]["cycles"] * r["count"] for r in records)
    traffic = sum(r["roofline"]["traffic"]["cycles"] * r["count"] for r in records)
    worst = max(records, key=lambda r: abs(r["prediction_error"]))
    return {
        "layers": len(records), "layer_instances": sum(r["count"] for r in records),
        "macs": macs, "cycles": cycles, "utilisation": macs / (cfg.macs_per_cycle * cycles),
        "predicted_cycles": predicted, "prediction_error": predicted / cycles - 1,
        "worst_layer_prediction_error": worst["prediction_error"],
        "worst_layer": worst["name"],
        "stalls": {s: sum(r["stalls"][s] * r["count"] for r in records) for s in STALLS},
        "dram_bytes": {p: sum(r["dram_bytes"][p] * r["count"] for r in records)
                       for p in ("a", "b", "c")},
        "roofline_cycles": bound, "roofline_efficiency": bound / cycles,
        "traffic_bound_cycles": traffic, "traffic_bound_efficiency": traffic / cycles,
    }
