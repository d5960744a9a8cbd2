"""``tessera explain``: where each operation of an ONNX model runs, and why (seed 004).

::

    tessera explain MODEL.onnx [--input-shape NAME=1,3,224,224 ...] [--config PRESET|FILE.json]
                    [--th1 1.5] [--th2 50000] [--host-timings FILE.json] [--json]

Prints one row per operation: its cost ``c`` (microseconds) and benefit ``p`` on the host and
on the accelerator, the decision, the rule that made it (threshold, fused with the previous
op, minimum cost) and the reason; then totals and the scalar work tiling created. ``--json``
prints the rows as JSON instead.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from hw.config import PRESETS, AccelConfig

__all__ = ["main"]


def _config(value: str) -> AccelConfig:
    if value in PRESETS:
        return PRESETS[value]
    path = Path(value)
    if path.suffix == ".json" and path.is_file():
        return AccelConfig.from_json(path.read_text())
    raise ValueError(f"--config must be a preset ({', '.join(PRESETS)}) or an AccelConfig JSON "
                     f"file, not {value!r}")


def _fmt(v) -> str:
    return "-" if v is None else f"{v:.1f}" if v >= 100 else f"{v:.2f}"


def _table(rows: list[dict], title: str) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title, show_lines=False)
    for col in ("op", "type", "cat", "c host us", "p host", "c accel us", "p accel", "on",
                "rule", "reason"):
        table.add_column(col, overflow="fold")
    for r in rows:
        table.add_row(r["op"], r["op_type"], r["category"], _fmt(r["c_host_us"]),
                      _fmt(r["p_host"]), _fmt(r["c_accel_us"]), _fmt(r["p_accel"]),
                      r["decision"], r["rule"], r["reason"])
    Console(width=200).print(table)


def _summary(rows: list[dict]) -> dict:
    out = {"ops": len(rows), "host": 0, "accel": 0, "fused": 0, "min_cost": 0,
           "tiling_scalar_exprs": 0, "tiling_scalar_runtime_exprs": 0}
    for r in rows:
        out[r["decision"]] += 1
        out["fused"] += r["rule"] == "fused"
        out["min_cost"] += r["rule"] == "min-cost"
        ts = r.get("tiling_scalars")
        if ts:
            out["tiling_scalar_exprs"] += ts["loop_counts"] + ts["address_exprs"] + \
                ts["table_entries"]
            out["tiling_scalar_runtime_exprs"] += ts["runtime_exprs"]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tessera explain", description=__doc__.split("\n")[0])
    parser.add_argument("model", help="ONNX model file")
    parser.add_argument("--input-shape", action="append", default=[], metavar="NAME=D0,D1,...",
                        help="shape of a graph input (resolves symbolic dims); repeatable")
    parser.add_argument("--config", default="default",
                        help=f"accelerator preset ({', '.join(PRESETS)}) or AccelConfig JSON")
    parser.add_argument("--th1", type=float, default=None, help="minimum benefit p")
    parser.add_argument("--th2", type=float, default=None, help="maximum cost c (us)")
    parser.add_argument("--host-timings", default=None,
                        help="host timings JSON (measured and written on first use)")
    parser.add_argument("--json", action="store_true", help="print JSON rows")
    args = parser.parse_args(argv)

    from .assign import FunctionLibrary, Thresholds, explain, load_host_timings
    from .graph import ModelError
    from .onnx_import import import_onnx, parse_input_shapes

    try:
        cfg = _config(args.config)
        shapes = parse_input_shapes(args.input_shape)
        defaults = Thresholds()
        th = Thresholds(th1=defaults.th1 if args.th1 is None else args.th1,
                        th2=defaults.th2 if args.th2 is None else args.th2)
        lib = FunctionLibrary(host=load_host_timings(args.host_timings))
        graph = import_onnx(args.model, shapes)
        rows = explain(graph, cfg, lib, th)
    except (ModelError, ValueError) as e:
        print(f"tessera explain: {e}", file=sys.stderr)
        return 2
    summary = _summary(rows)
    if args.json:
        print(json.dumps({"model": str(args.model), "th1": th.th1, "th2": th.th2,
                          "summary": summary, "ops": rows}, indent=1))
        return 0
    _table(rows, f"{Path(args.model).name}: th1={th.th1:g}, th2={th.th2:g}us, "
                 f"config={args.config}")
    print(f"{summary['ops']} ops: {summary['accel']} on the accelerator, {summary['host']} on the "
          f"host ({summary['fused']} fused with their producer, {summary['min_cost']} by minimum "
          f"cost). Tiling created {summary['tiling_scalar_exprs']} scalar expressions (loop "
          f"counts, tile addresses, conv table entries), all constant-folded at compile time "
          f"on the host: {summary['tiling_scalar_runtime_exprs']} left at run time.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
