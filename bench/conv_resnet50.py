"""Every ResNet-50 convolution layer on the RTL: bit-exact against the golden conv, with cycles,
MAC utilisation, stall breakdown and table sizes per layer.

    python -m bench.conv_resnet50 [--preset default] [--layout NCHW] [--only NAME,...]

Writes ``bench/results/conv_resnet50-<preset>-<layout>.json`` and prints a Markdown table.
Layers repeated in the network run once and are weighted by their count in the totals. Batch 1,
random full-range int8 data; the planner's default tiling of each group's GEMM.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
from pathlib import Path

from hw.build import emit
from spec.config import PRESETS
from planner.shapes import ConvShape
from planner.workload import load_workload
from tb.tools import build, missing_tool

from .report import table

RESULTS = Path(__file__).resolve().parent / "results"
WORKLOAD = Path(__file__).resolve().parent.parent / "planner" / "workloads" / "resnet50.json"


def conv_layers(only: set[str] | None = None):
    return [layer for layer in load_workload(WORKLOAD).layers
            if isinstance(layer.shape, ConvShape) and (not only or layer.name in only)]


def run_layers(preset: str, layout: str, layers, work_dir: Path) -> list[dict]:
    """Run ``layers`` in one simulator process; return one record per layer."""
    cfg = PRESETS[preset]
    out = emit(cfg)
    runner = build("verilator", out)
    convs = [{**dataclasses.asdict(layer.shape), "layout": layout} for layer in layers]
    runner.test(hdl_toplevel="sim_top", test_module="tb.conv", test_dir=work_dir,
                extra_env={"ACCEL_BUILD": str(out), "TESSERA_CONVS": json.dumps(convs),
                           "TESSERA_SEED": "1"})
    results = work_dir / "conv_results.json"
    if not results.exists():
        raise RuntimeError(f"the convolution run failed; see {work_dir}")
    records = json.loads(results.read_text())
    for layer, record in zip(layers, records):
        record["name"], record["count"] = layer.name, layer.count
    return records


#: Heading of the per-layer table, and its alignment row.
TABLE_HEAD = ["layer", "count", "M x K x N", "cycles", "predicted (error)", "MAC util",
              "stall load A / B / store / drain", "runs", "tables (B)"]
TABLE_ALIGN = "|---|---:|---|---:|---:|---:|---|---:|---:|"


def _cells(r: dict) -> list[str]:
    """The table row of one layer record."""
    s = r["shape"]
    m = s["out_channels"] // s["groups"]
    k = s["in_channels"] // s["groups"] * s["kernel_h"] * s["kernel_w"]
    n = r["macs"] // (s["out_channels"] * k)
    return [str(r["name"]), str(r["count"]), f"{m}x{k}x{n}", str(r["total_cycles"]),
            f"{r['predicted']['total_cycles']} "
            f"({r['predicted']['total_cycles'] / r['total_cycles'] - 1:+.2%})",
            f"{r['utilisation']:.1%}",
            f"{r['stall_load_a_cycles']} / {r['stall_load_b_cycles']} / "
            f"{r['stall_store_cycles']} / {r['stall_drain_cycles']}",
            str(r["run_count"]), str(r["table_bytes"])]


def markdown(records: list[dict]) -> str:
    return "\n".join(table(TABLE_HEAD, TABLE_ALIGN, map(_cells, records)))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.conv_resnet50", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", choices=sorted(PRESETS), default="default")
    parser.add_argument("--layout", choices=["NCHW", "NHWC"], default="NCHW")
    parser.add_argument("--only", default="", help="comma-separated layer names")
    args = parser.parse_args(argv)
    only = set(filter(None, args.only.split(",")))
    layers = conv_layers(only or None)
    missing = only - {layer.name for layer in layers}
    if missing:         # before the simulator build
        parser.error(f"--only: no ResNet-50 convolution named {', '.join(sorted(missing))}")
    reason = missing_tool("verilator")
    if reason:
        print(f"FAIL: {reason}", file=sys.stderr)
        return 1
    work = Path(tempfile.mkdtemp(prefix="conv-resnet50-"))
    records = run_layers(args.preset, args.layout, layers, work)
    cfg = PRESETS[args.preset]
    macs = sum(r["macs"] * r["count"] for r in records)
    cycles = sum(r["total_cycles"] * r["count"] for r in records)
    summary = {"preset": args.preset, "layout": args.layout, "layers": len(records),
               "weighted_macs": macs, "weighted_cycles": cycles,
               "utilisation": macs / (cfg.macs_per_cycle * cycles)}
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"conv_resnet50-{args.preset}-{args.layout}.json"
    path.write_text(json.dumps({"summary": summary, "layers": records}, indent=1) + "\n")
    print(markdown(records))
    print(f"\nall conv layers weighted by count: {cycles} cycles, MAC utilisation "
          f"{summary['utilisation']:.1%}; wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
