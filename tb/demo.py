"""``make sim``: build a config with Verilator and run planner-tiled GEMMs on the RTL.

Prints, per GEMM: the tiling, cycles, MAC utilisation (= MACs / (R*C*total cycles)), the stall
breakdown, the planner's prediction and PASS/FAIL against the numpy golden model.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys

from hw.build import emit
from planner.plan import SHAPE_STRATEGIES
from spec.config import PRESETS
from spec.regmap import COUNTERS
from tb.cases import planned_cases
from tb.tools import build, heartbeat, missing_tool

DEFAULT_SHAPES = "512x512x512,300x700x1000"


def report(records: list[dict], cfg) -> str:
    lines = []
    for r in records:
        macs = r["m"] * r["k"] * r["n"]
        total = r["total_cycles"]
        pred = r["predicted"]["total_cycles"]
        lines.append(f"GEMM {r['m']}x{r['k']}x{r['n']} (M x K x N) on "
                     f"{cfg.array_rows}x{cfg.array_cols}, strategy {r['strategy']}")
        lines.append(f"  tiling     partition m/n/k {r['partition_m']}/{r['partition_n']}/"
                     f"{r['partition_k']}, tile m/n {r['tile_m']}/{r['tile_n']}, outer_m "
                     f"{r['outer_m']}, split-K {r['need_splitk']}")
        lines.append(f"  cycles     {total:>10}   utilisation {macs / (cfg.macs_per_cycle * total):7.2%}"
                     f"   predicted {pred} ({(pred - total) / total:+.2%})")
        lines.append("  counters   (and their share of the cycles; a mac_active cycle can leave "
                     "a ragged tile's PEs idle)")
        for name in COUNTERS[1:7]:
            lines.append(f"    {name:22} {r[name]:>10}  {r[name] / total:7.2%}")
        lines.append(f"  DRAM bytes read A {r['rd_a_bytes']}, read B {r['rd_b_bytes']}, "
                     f"written C {r['wr_c_bytes']}")
        lines.append("  result     PASS (bit-exact against numpy, guards untouched, counters "
                     "consistent)")
    return "\n".join(lines)


def _say(event: dict) -> None:
    """A heartbeat line (tb.tools.heartbeat): what is running and for how long."""
    if event["event"] == "build" and event["elapsed_s"] > 0:
        print(f"  ... {event['what']}: {event['elapsed_s']:.0f} s", flush=True)
    elif event["event"] == "built":
        print(f"  {event['what']}: done in {event['elapsed_s']:.0f} s", flush=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tb.demo", description=__doc__)
    parser.add_argument("--preset", choices=sorted(PRESETS), default="default")
    parser.add_argument("--shapes", default=DEFAULT_SHAPES, help="MxKxN,... (default %(default)s)")
    parser.add_argument("--strategy", default="best", choices=SHAPE_STRATEGIES,
                        help="planner strategy (default %(default)s)")
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args(argv)
    cfg = PRESETS[args.preset]
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    try:                    # before anything is built: the run checks the same things
        planned_cases(args.shapes, cfg, args.strategy, seed)
    except ValueError as e:
        print(f"python -m tb.demo: error: {e}", file=sys.stderr)
        return 2
    reason = missing_tool("verilator")
    if reason:
        print(f"FAIL: {reason}", file=sys.stderr)
        return 1
    print(f"Building {args.preset} ({cfg.array_rows}x{cfg.array_cols}, config_id "
          f"{cfg.config_id:08x}) with Verilator...", flush=True)
    with heartbeat(_say, "generating Verilog", every_s=10):
        out = emit(cfg)
    with heartbeat(_say, "compiling the Verilator model (cached after the first use)",
                   every_s=10):
        runner = build("verilator", out)
    print(f"Running {args.shapes} (seed {seed})...", flush=True)
    test_dir = out / "demo"                 # reused: the last run's files, kept on FAIL
    shutil.rmtree(test_dir, ignore_errors=True)
    test_dir.mkdir()
    xml = runner.test(hdl_toplevel="sim_top", test_module="tb.planned", test_dir=test_dir,
                      extra_env={"ACCEL_BUILD": str(out), "TESSERA_PLANNED": args.shapes,
                                 "TESSERA_STRATEGY": args.strategy,
                                 "TESSERA_SEED": str(seed)},
                      results_xml=str(test_dir / "results.xml"))
    from cocotb_tools.runner import get_results
    tests, fails = get_results(xml)
    results = test_dir / "planned_results.json"
    if fails or not results.exists():
        print(f"FAIL: see {test_dir} (seed {seed})")
        return 1
    print()
    print(report(json.loads(results.read_text()), cfg))
    print("\nPASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
