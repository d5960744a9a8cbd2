"""``python -m planner``: plan GEMMs, convolutions or workload files; regenerate the gap report.

::

    python -m planner plan --gemm 1024,1024,128 [--strategy best] [--json]
    python -m planner plan --conv N=1,C=64,H=56,W=56,K=64,R=3,S=3,stride=1,pad=1
    python -m planner plan --workload planner/workloads/resnet50.json --preset default
    python -m planner report [--preset default] [--out FILE.md | --doc docs/planner.md]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

from spec.config import PRESETS, AccelConfig

from . import STRATEGIES, PostLoad
from .report import (DEFAULT_WORKLOADS, cost_totals, evaluate, layer_costs, markdown_report,
                     plan_table)
from .shapes import ConvShape, GemmShape
from .workload import Layer, Workload, load_workload

__all__ = ["main", "parse_conv", "parse_gemm"]

#: Markers of the generated section in docs/planner.md.
REPORT_BEGIN, REPORT_END = "<!-- planner report: begin -->", "<!-- planner report: end -->"
#: Copies of the shared workload files shipped with the planner.
WORKLOAD_DIR = Path(__file__).parent / "workloads"

_CONV_ALIASES = {"N": ("batch",), "C": ("in_channels",), "H": ("height",), "W": ("width",),
                 "K": ("out_channels",), "R": ("kernel_h",), "S": ("kernel_w",),
                 "stride": ("stride_h", "stride_w"), "stride_h": ("stride_h",),
                 "stride_w": ("stride_w",),
                 "pad": ("pad_top", "pad_left", "pad_bottom", "pad_right"),
                 "pad_top": ("pad_top",), "pad_left": ("pad_left",),
                 "pad_bottom": ("pad_bottom",), "pad_right": ("pad_right",),
                 "dilation": ("dilation_h", "dilation_w"), "dilation_h": ("dilation_h",),
                 "dilation_w": ("dilation_w",), "groups": ("groups",)}


def parse_gemm(text: str) -> GemmShape:
    parts = text.split(",")
    if len(parts) != 3 or not all(p.strip().isdigit() for p in parts):
        raise ValueError(f"--gemm takes M,K,N (three positive integers), not {text!r}")
    return GemmShape(*(int(p) for p in parts))


def parse_conv(text: str) -> ConvShape:
    """``N=1,C=64,H=56,W=56,K=64,R=3,S=3[,stride=..][,pad=..][,dilation=..][,groups=..]``."""
    values: dict[str, int] = {}
    for item in text.split(","):
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or key not in _CONV_ALIASES or not value.strip().isdigit():
            raise ValueError(f"--conv item {item!r} must be KEY=INT with KEY one of "
                             f"{', '.join(_CONV_ALIASES)}")
        for field in _CONV_ALIASES[key]:
            if field in values:         # (R=3,...,R=5 took the last one silently)
                raise ValueError(f"--conv sets {field} twice (item {item!r})")
            values[field] = int(value)
    missing = [k for k in ("N", "C", "H", "W", "K", "R", "S")
               if _CONV_ALIASES[k][0] not in values]
    if missing:
        raise ValueError(f"--conv misses {', '.join(missing)} (N, C, H, W, K, R and S are "
                         f"required)")
    return ConvShape(**values)


def _config(args) -> tuple[AccelConfig, str]:
    if args.config:
        try:
            return AccelConfig.from_json(Path(args.config).read_text()), args.config
        except (ValueError, TypeError) as e:    # (not UTF-8 or not JSON: ValueErrors too)
            raise ValueError(f"--config {args.config}: {e}") from None
    if args.preset not in PRESETS:
        raise ValueError(f"--preset must be one of {', '.join(PRESETS)}, not {args.preset!r}")
    return PRESETS[args.preset], args.preset


def _cmd_plan(args) -> int:
    cfg, _ = _config(args)
    if args.gemm is not None:      # "" too: parse_gemm refuses it with a message
        workload = Workload("gemm", (Layer("gemm", parse_gemm(args.gemm)),))
    elif args.conv is not None:
        workload = Workload("conv", (Layer("conv", parse_conv(args.conv)),))
    else:
        workload = load_workload(args.workload)
    strategies = (args.strategy,) if args.strategy == "search" else (args.strategy, "search")
    post = PostLoad(bias=True, requant=True) if args.post else None
    results = evaluate(workload, cfg, strategies, args.db)
    if args.json:
        layers = []
        costs = layer_costs(results, args.strategy, cfg, args.db, post)
        for r, c in zip(results, costs):
            p, o = r.plans[args.strategy], r.plans["search"]
            layers.append({"name": r.layer.name, "count": r.layer.count,
                           "instances": r.instances, "plan": dataclasses.asdict(p),
                           "counters": c.counters.as_dict(), "cycles": c.cycles,
                           "mesh": c.mesh, "bands": c.bands, "k_parts": c.k_parts,
                           "oracle_cycles": o.predicted_cycles,
                           "gap": p.predicted_cycles / o.predicted_cycles - 1})
        cycles, util = cost_totals(results, costs, cfg)
        json.dump({"network": workload.network, "strategy": args.strategy, "post": args.post,
                   "config_id": f"{cfg.config_id:08x}", "layers": layers,
                   "total_cycles": cycles, "utilisation": util}, sys.stdout, indent=1)
        print()
    else:
        table = plan_table(results, args.strategy, cfg, db=args.db,     # refuses what
                           post=post)                                   # cannot run
        what = ("post-processed layers: bias, int8 requantisation (as tessera compile builds "
                "them)" if post else "raw layers: int32 output, no post-processing (--post: "
                "as tessera compile builds them; docs/planner.md)")
        print(f"{workload.network}: strategy {args.strategy}, config {cfg.config_id:08x}; "
              f"{what}")
        print(table)
    return 0


def _cmd_report(args) -> int:
    if args.out and Path(args.out).is_dir():        # before the report is computed
        raise ValueError(f"--out {args.out}: is a directory, not a file")
    cfg, name = _config(args)
    paths = [Path(p) for p in args.workloads] if args.workloads else \
        [WORKLOAD_DIR / f for f in DEFAULT_WORKLOADS]
    text = markdown_report(cfg, name, paths) + "\n"
    if args.doc:
        doc = Path(args.doc)
        old = doc.read_text()
        head, sep1, rest = old.partition(REPORT_BEGIN)
        _, sep2, tail = rest.partition(REPORT_END)
        if not (sep1 and sep2):
            raise ValueError(f"{doc} has no {REPORT_BEGIN} ... {REPORT_END} section")
        doc.write_text(head + REPORT_BEGIN + "\n" + text + REPORT_END + tail)
    elif args.out:
        Path(args.out).write_text(text)
    else:
        sys.stdout.write(text)
    return 0


def main(argv: list[str] | None = None, prog: str = "python -m planner") -> int:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    for name in ("plan", "report"):
        p = sub.add_parser(name)
        p.add_argument("--config", help="AccelConfig JSON file (overrides --preset)")
        p.add_argument("--preset", default="default", help=f"one of {', '.join(PRESETS)}")
        if name == "plan":
            what = p.add_mutually_exclusive_group(required=True)
            what.add_argument("--gemm", metavar="M,K,N")
            what.add_argument("--conv", metavar="N=..,C=..,H=..,W=..,K=..,R=..,S=..[,...]")
            what.add_argument("--workload", metavar="FILE.json")
            p.add_argument("--strategy", default="best", choices=STRATEGIES)
            p.add_argument("--json", action="store_true", help="machine-readable output")
            p.add_argument("--db", metavar="PATH", help="tuning database (--strategy db)")
            p.add_argument("--post", action="store_true",
                           help="cost each layer post-processed (bias and int8 "
                                "requantisation), as tessera compile builds it; default: the "
                                "raw layer (int32 output), as bench measures it")
        else:
            p.add_argument("--workloads", nargs="*", metavar="FILE.json")
            p.add_argument("--out", help="write the markdown here instead of stdout")
            p.add_argument("--doc", help="replace the marked report section of this file "
                                         "(docs/planner.md)")
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in ("--gemm", "--conv", "--workload", "--strategy"):
        parser.error(f"{argv[0]} is an option of the plan command: {prog} plan "
                     f"{' '.join(argv)}")
    args = parser.parse_args(argv)
    try:
        return _cmd_plan(args) if args.cmd == "plan" else _cmd_report(args)
    except ValueError as err:  # bad shapes, configs and workloads: a clear message, no trace
        print(f"error: {err}", file=sys.stderr)
        return 2
    except OSError as err:     # --config / --workload / --doc / --out files
        verb = "write" if args.cmd == "report" and err.filename in (args.out, args.doc) \
            else "read"
        print(f"error: cannot {verb} {err.filename!r}: {err.strerror or err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
