"""``tessera tunedb`` (``python -m flow.tunedb_cli``): build, query, stats, export.

::

    tessera tunedb build --db small.tunedb --preset small \\
        --workload planner/workloads/resnet50.json \\
        --workload planner/workloads/bert_base_seq128.json \\
        --random 24 --seed 1 [--top 3] [--util-floor 0.5] [--linear-tol 0.02] \\
        [--scheduler local|serial|tcp://host:8786] [--workers 2] [--report build.json]
    tessera tunedb query --db small.tunedb --gemm 512,256,384 [--json] [--no-pad]
    tessera tunedb stats --db small.tunedb
    tessera tunedb export --db small.tunedb [--out records.json]

Convolution layers of a workload enter as their implicit GEMM (``M=K_out, K=C*R*S,
N=N*P*Q`` per group, :class:`planner.shapes.ConvShape.gemm`). ``--measure model`` replaces the RTL
by the analytic model (a dry run of the method; the stored cycles are then predictions).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from flow.argtypes import SEED, at_least
from flow.measure import measure_rtl
from flow.outputs import check_writable
from planner.shapes import GemmShape
from planner.tunedb.build import BuildOptions, build_db
from planner.tunedb.lookup import MAX_PAD, lookup
from planner.tunedb.measure import Executor, measure_model
from planner.tunedb.store import TuneDB, TuneDBError
from planner.workload import layer_gemm, load_workload
from spec.config import PRESETS, AccelConfig

__all__ = ["main", "workload_shapes", "random_shapes"]


def workload_shapes(path: str | Path) -> list[tuple[str, GemmShape]]:
    """``(network:layer, GEMM)`` of every layer (a convolution as one group's implicit GEMM)."""
    w = load_workload(path)
    return [(f"{w.network}:{layer.name}", layer_gemm(layer.shape)[0]) for layer in w.layers]


def random_shapes(cfg: AccelConfig, count: int, seed: int) -> list[tuple[str, GemmShape]]:
    """``count`` random shapes: ``m``, ``n`` 4-32 blocks, ``k`` 4-64 array heights."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(count):
        m = cfg.block_m * int(rng.integers(4, 33))
        n = cfg.block_n * int(rng.integers(4, 33))
        k = cfg.array_rows * int(rng.integers(4, 65))
        out.append((f"random{seed}:{i}", GemmShape(m, k, n)))
    return out


def _parse_gemm(text: str) -> GemmShape:
    parts = text.split(",")
    if len(parts) != 3 or not all(p.strip().isdigit() for p in parts):
        raise ValueError(f"--gemm takes M,K,N (three positive integers), not {text!r}")
    return GemmShape(*(int(p) for p in parts))


def _config(args) -> AccelConfig | None:
    if getattr(args, "config", None):
        return AccelConfig.from_json(Path(args.config).read_text())
    if getattr(args, "preset", None):
        if args.preset not in PRESETS:
            raise ValueError(f"--preset must be one of {', '.join(PRESETS)}, not {args.preset!r}")
        return PRESETS[args.preset]
    return None


def _cmd_build(args) -> int:
    cfg = _config(args) or PRESETS["small"]
    check_writable("--report", args.report)        # before the build, which may be long
    shapes: list[tuple[str, GemmShape]] = []
    for path in args.workload or []:
        shapes += workload_shapes(path)
    for i, text in enumerate(args.gemm or []):
        shapes.append((f"gemm:{i}", _parse_gemm(text)))
    if args.random:
        shapes += random_shapes(cfg, args.random, args.seed)
    if not shapes:
        raise ValueError("nothing to build: give --workload, --gemm or --random")
    opts = BuildOptions(top_n=args.top, util_floor=args.util_floor, linear_tol=args.linear_tol,
                        batch_cases=args.batch)
    fn = measure_rtl if args.measure == "rtl" else measure_model

    def log(msg):
        print(f"tunedb: {msg}", file=sys.stderr, flush=True)

    # the executor first: a bad --scheduler must not leave an empty database behind
    with Executor(args.scheduler, args.workers) as ex, TuneDB.open(args.db, cfg) as db:
        report = build_db(db, shapes, fn, ex, opts, log)
        stats = db.stats()
    out = {"config_id": f"{cfg.config_id:08x}", "options": vars(args), "stats": stats,
           **report.as_dict()}
    if args.report:
        Path(args.report).write_text(json.dumps(out, indent=1) + "\n")
    print(f"{len(report.initial)} initial ({len(report.rejected)} rejected below utilisation "
          f"{opts.util_floor}, {len(report.dropped)} without a linear halving), "
          f"{len(report.boundary)} boundary shapes, {report.measured_runs} RTL runs "
          f"({args.measure}), {report.rounds} boundary rounds")
    print("boundary shapes (linear tolerance "
          f"{opts.linear_tol:.0%}; ratio = cost / parent cost, size ratio 0.5):")
    for b in report.boundary:
        fails = ", ".join(f"{f['dim']}/2 -> {f['ratio']:.3f}" for f in b["failed_halvings"]) \
            or "no halvable dimension"
        p = b["parent"]
        print(f"  {'x'.join(map(str, b['shape'])):>14} {b['cycles']:>9} cycles  from "
              f"{'x'.join(map(str, p['shape']))} ratio {p['ratio']:.4f}; halvings: {fails}")
    return 0


def _cmd_query(args) -> int:
    cfg = _config(args)
    with TuneDB.open(args.db, cfg, create=False) as db:
        res = lookup(db.records(), _parse_gemm(args.gemm), db.cfg, auto_pad=not args.no_pad,
                     max_pad=args.max_pad)
    if args.json:
        print(json.dumps(res.as_dict(), indent=1))
        return 0
    print(f"{'x'.join(map(str, res.query))}: rule {res.rule}, padding {res.padding}, runs "
          f"{'x'.join(map(str, res.run_shape))}, estimated {res.estimated_cycles} cycles")
    print("  tiling " + ", ".join(f"{k}={v}" for k, v in res.tiling_dict.items()))
    if res.record is not None:
        print(f"  record {res.record.kind} {'x'.join(map(str, res.record.dims))} "
              f"{res.record.cycles} cycles ({res.record.source}); {res.matches} match(es)")
    return 0


def _cmd_stats(args) -> int:
    with TuneDB.open(args.db, _config(args), create=False) as db:
        print(json.dumps(db.stats(), indent=1))
    return 0


def _cmd_export(args) -> int:
    check_writable("--out", args.out)
    with TuneDB.open(args.db, _config(args), create=False) as db:
        out = {**db.stats(), "config": db.cfg.to_dict(),
               "records": [r.as_dict() for r in db.records()]}
    text = json.dumps(out, indent=1) + "\n"
    if args.out:
        Path(args.out).write_text(text)
    else:
        sys.stdout.write(text)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tessera tunedb", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    for name in ("build", "query", "stats", "export"):
        p = sub.add_parser(name)
        p.add_argument("--db", required=True, help="tuning database file (SQLite)")
        p.add_argument("--config", help="AccelConfig JSON file (overrides --preset)")
        p.add_argument("--preset", help=f"one of {', '.join(PRESETS)} (build: default small; "
                                        f"others: checked against the database)")
        if name == "build":
            p.add_argument("--workload", action="append", metavar="FILE.json")
            p.add_argument("--gemm", action="append", metavar="M,K,N")
            p.add_argument("--random", type=at_least(int, 0), default=0, metavar="COUNT")
            p.add_argument("--seed", type=SEED, default=1)
            p.add_argument("--top", type=at_least(int, 1), default=BuildOptions.top_n)
            p.add_argument("--util-floor", type=at_least(float, 0),
                           default=BuildOptions.util_floor)
            p.add_argument("--linear-tol", type=at_least(float, 0),
                           default=BuildOptions.linear_tol)
            p.add_argument("--batch", type=at_least(int, 1), default=BuildOptions.batch_cases,
                           help="cases per measurement job (one simulator process)")
            p.add_argument("--scheduler", default="local",
                           help="local (Dask LocalCluster), serial, or tcp://host:port")
            p.add_argument("--workers", type=at_least(int, 1), default=2,
                           help="LocalCluster workers")
            p.add_argument("--measure", choices=("rtl", "model"), default="rtl")
            p.add_argument("--report", metavar="FILE.json")
        elif name == "query":
            p.add_argument("--gemm", required=True, metavar="M,K,N")
            p.add_argument("--no-pad", action="store_true", help="no auto-padding")
            p.add_argument("--max-pad", type=at_least(float, 0), default=MAX_PAD)
            p.add_argument("--json", action="store_true")
        elif name == "export":
            p.add_argument("--out", metavar="FILE.json")
    args = parser.parse_args(argv)
    cmds = {"build": _cmd_build, "query": _cmd_query, "stats": _cmd_stats,
            "export": _cmd_export}
    try:
        return cmds[args.cmd](args)
    except (ValueError, TuneDBError, RuntimeError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
