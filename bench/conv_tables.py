"""Convolution table sizes and generation time for every conv layer of a network (seed 002).

``python bench/conv_tables.py [--preset default] [--workload FILE.json] [--batch B] [--repeat 5]``
prints,
per conv layer and layout (NCHW, NHWC), the bytes of the offset, run and group tables, the runs
per lane group and the best-of-``repeat`` generation time, then the network totals (each layer
counted ``count`` times), and writes ``bench/results/conv_tables-<network>-<preset>.json``
(``--out`` changes the directory; the ResNet-50 default is also written as
``conv_tables.json``). ``--batch`` overrides every layer's batch (the file name gains ``-bB``);
a layer whose tables cannot be encoded is listed with the error instead of its numbers.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np

from flow.argtypes import at_least  # noqa: E402
from planner.offsets import compile_tables  # noqa: E402
from planner.shapes import ConvShape  # noqa: E402
from planner.workload import load_workload  # noqa: E402
from spec.config import PRESETS  # noqa: E402

LAYOUTS = ("NCHW", "NHWC")


def measure(shape: ConvShape, layout: str, cfg, repeat: int) -> dict:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        try:
            tables = compile_tables(shape, layout, cfg)
        except ValueError as err:
            return {"error": str(err)}
        best = min(best, time.perf_counter() - start)
    per_group = tables.runs_per_group()
    sizes = tables.table_bytes
    capacity = {"off": ("conv_offset_entries", tables.k),
                "run": ("conv_run_entries", tables.run_count),
                "grp": ("conv_group_entries", tables.lane_groups + 1)}
    fits = {name: (getattr(cfg, field) >= used if hasattr(cfg, field) else None)
            for name, (field, used) in capacity.items()}
    return {"off_bytes": sizes["off"], "run_bytes": sizes["run"], "grp_bytes": sizes["grp"],
            "total_bytes": tables.size_bytes, "run_count": tables.run_count,
            "lane_groups": tables.lane_groups, "runs_per_group_max": int(per_group.max()),
            "runs_per_group_mean": float(per_group.mean()),
            "runs_per_group_hist": {str(k): int(v) for k, v in
                                    zip(*map(list, _hist(per_group)))},
            "stride_max": int(tables.runs()["stride"].max()), "span_bytes": tables.span_bytes, "fits_on_chip": fits, "seconds": best}


def _hist(values):
    keys, counts = np.unique(values, return_counts=True)
    return keys.tolist(), counts.tolist()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--preset", default="default", choices=sorted(PRESETS))
    parser.add_argument("--workload", default=str(ROOT / "planner/workloads/resnet50.json"))
    parser.add_argument("--repeat", type=at_least(int, 1), default=5)
    parser.add_argument("--batch", type=at_least(int, 1), default=None)
    parser.add_argument("--out", default=str(ROOT / "bench/results"))
    args = parser.parse_args(argv)
    cfg = PRESETS[args.preset]
    workload = load_workload(args.workload)
    layers = [layer for layer in workload.layers if isinstance(layer.shape, ConvShape)]

    rows = []
    for layer in layers:
        shape = layer.shape if args.batch is None else dataclasses.replace(layer.shape,
                                                                           batch=args.batch)
        row = {"name": layer.name, "count": layer.count, "gemm": str(shape.gemm),
               "groups": shape.groups}
        for layout in LAYOUTS:
            row[layout] = measure(shape, layout, cfg, args.repeat)
        rows.append(row)

    head = (f"{'layer':<18}{'cnt':>4} {'MxKxN':>16} | " + " | ".join(
        f"{lay}: off/run/grp bytes, runs/grp max mean, us" for lay in LAYOUTS))
    print(f"{workload.network} conv tables [{args.preset}, array_cols={cfg.array_cols}"
          f"{'' if args.batch is None else f', batch={args.batch}'}]")
    print(head)
    for row in rows:
        cells = []
        for layout in LAYOUTS:
            m = row[layout]
            if "error" in m:
                cells.append(f"{'ERROR: ' + m['error'][13:48]:<47}")
                continue
            cells.append(f"{m['off_bytes']:>6}/{m['run_bytes']:>6}/{m['grp_bytes']:>5} "
                         f"{m['runs_per_group_max']:>2} {m['runs_per_group_mean']:5.2f} "
                         f"{m['seconds'] * 1e6:7.0f}")
        print(f"{row['name']:<18}{row['count']:>4} {row['gemm']:>16} | " + " | ".join(cells))

    totals = {}
    for layout in LAYOUTS:
        per = [(row[layout], row["count"]) for row in rows if "error" not in row[layout]]
        failed = [row["name"] for row in rows if "error" in row[layout]]
        totals[layout] = {
            "failed_layers": failed,
            "layers": sum(c for _, c in per),
            "unique_layers": len(per),
            "total_bytes": sum(m["total_bytes"] * c for m, c in per),
            "max_layer_bytes": max(m["total_bytes"] for m, _ in per),
            "run_count": sum(m["run_count"] * c for m, c in per),
            "runs_per_group_max": max(m["runs_per_group_max"] for m, _ in per),
            "stride_max": max(m["stride_max"] for m, _ in per),
            "seconds": sum(m["seconds"] * c for m, c in per),
            "all_fit_on_chip": all(v is not False for m, _ in per
                                   for v in m["fits_on_chip"].values()),
        }
        t = totals[layout]
        print(f"{layout}: {t['layers']} layers, tables {t['total_bytes']} bytes in all "
              f"(largest layer {t['max_layer_bytes']}), {t['run_count']} runs, max "
              f"{t['runs_per_group_max']} runs per lane group, max stride {t['stride_max']}, "
              f"generated in {t['seconds'] * 1e3:.1f} ms; all fit on chip: "
              f"{t['all_fit_on_chip']}; failed: {failed or 'none'}")

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    blob = json.dumps({"network": workload.network, "preset": args.preset,
                       "config_id": f"{cfg.config_id:08x}", "array_cols": cfg.array_cols,
                       "batch": args.batch, "repeat": args.repeat, "python": platform.python_version(),
                       "machine": platform.machine(), "layers": rows, "totals": totals},
                      indent=1) + "\n"
    suffix = "" if args.batch is None else f"-b{args.batch}"
    paths = [out / f"conv_tables-{workload.network}-{args.preset}{suffix}.json"]
    if workload.network == "resnet50" and args.preset == "default" and args.batch is None:
        paths.append(out / "conv_tables.json")
    for path in paths:
        path.write_text(blob)
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
