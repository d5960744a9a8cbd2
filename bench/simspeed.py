"""Simulation throughput: simulated cycles per second of the free-running RTL, per simulator and
config, and Verilator build times. Writes ``bench/results/simspeed.json``.

    python -m bench.simspeed [--presets tiny,small,default] [--simulators verilator,icarus,amaranth]
    python -m bench.simspeed --floor [--presets small,default]   (bench.simfloor)

Each measurement runs one planner-tiled GEMM (``tb.planned``) and divides the accelerator's
``total_cycles`` by the wall time from writing the descriptor to ``done`` (the clock runs in
HDL; Python only waits). Build time is measured on a fresh build directory (ccache, when
installed, may make it shorter than a cold build). ``amaranth`` is Amaranth's Python simulator on
``AccelTop`` with the memory ports answered from Python (bench.amaranth_speed), stopped after
``AMARANTH_MAX_CYCLES``. Icarus runs a config whose ``dram_addr_bits`` is above
``tb.tools.ICARUS_MAX_ADDR_BITS`` (``default``'s 2 GiB) with that many address bits instead: its
memory model is a dense array (the row's ``dram_addr_bits`` says so).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

from hw.build import emit
from spec.config import PRESETS
from tb.tools import ICARUS_MAX_ADDR_BITS, build, missing_tool

from .amaranth_speed import measure_amaranth
from .simfloor import PARTS, measure_floor

RESULTS = Path(__file__).resolve().parent / "results"

#: GEMM per preset: large enough that the run dominates setup, small enough for Icarus on tiny.
SHAPES = {"tiny": "64x128x64", "small": "256x256x256", "default": "512x512x512"}
#: Icarus and Amaranth's simulator are 100-1000x slower: smaller GEMMs (same tiling rules).
SLOW_SHAPES = {"tiny": "64x128x64", "small": "64x128x64", "default": "64x128x64"}
AMARANTH_MAX_CYCLES = {"tiny": 20000, "small": 5000, "default": 2000}


def measure(sim: str, preset: str, build_root: Path | None = None) -> dict:
    if sim == "amaranth":

        return measure_amaranth(preset, SLOW_SHAPES[preset], AMARANTH_MAX_CYCLES[preset])
    shape = SHAPES[preset] if sim == "verilator" else SLOW_SHAPES[preset]
    cfg = PRESETS[preset]
    if sim == "icarus" and cfg.dram_addr_bits > ICARUS_MAX_ADDR_BITS:
        # Icarus's memory model is dense: the same array and ports over a smaller memory (the
        # address width does not change what is simulated per cycle)
        cfg = dataclasses.replace(cfg, dram_addr_bits=ICARUS_MAX_ADDR_BITS)
    out = emit(cfg, build_root.resolve() if build_root else None)
    shutil.rmtree(out / f"sim-{sim}", ignore_errors=True)
    started = time.perf_counter()
    runner = build(sim, out)
    build_s = time.perf_counter() - started
    test_dir = Path(tempfile.mkdtemp(prefix=f"simspeed-{sim}-", dir=out))
    runner.test(hdl_toplevel="sim_top", test_module="tb.planned", test_dir=test_dir,
                extra_env={"ACCEL_BUILD": str(out), "TESSERA_PLANNED": shape,
                           "TESSERA_SEED": "1"})
    record = json.loads((test_dir / "planned_results.json").read_text())[0]
    return {
        "simulator": sim, "preset": preset, "array": f"{cfg.array_rows}x{cfg.array_cols}",
        "gemm": shape, "dram_addr_bits": cfg.dram_addr_bits,
        "total_cycles": record["total_cycles"],
        "run_wall_s": round(record["run_wall_s"], 3),
        "cycles_per_s": round(record["total_cycles"] / record["run_wall_s"]),
        "build_s": round(build_s, 1),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.simspeed", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--presets", default="tiny,small,default")
    parser.add_argument("--simulators", default="verilator,icarus,amaranth")
    parser.add_argument("--out", type=Path, default=None,
                        help="default bench/results/simspeed.json (simfloor.json with --floor)")
    parser.add_argument("--floor", action="store_true",
                        help="instead: each block's Verilator model alone, with no testbench "
                             "(bench.simfloor: the array, the requantiser, the idle sim_top)")
    parser.add_argument("--build-root", type=Path, default=None,
                        help="emit and build under this directory instead of build/ (the "
                             "measurement deletes and rebuilds the simulator build it times)")
    args = parser.parse_args(argv)
    for option, given, known in (("--simulators", args.simulators, ("verilator", "icarus",
                                                                      "amaranth")),
                                 ("--presets", args.presets, tuple(PRESETS))):
        unknown = [v for v in given.split(",") if v not in known]
        if unknown:             # before any build
            parser.error(f"{option}: {', '.join(map(repr, unknown))} not among "
                         f"{', '.join(known)}")
    if args.floor:
        return _floor(args)
    args.out = args.out or RESULTS / "simspeed.json"
    rows = []
    for sim in args.simulators.split(","):
        reason = None if sim == "amaranth" else missing_tool(sim)
        if reason:
            print(f"skipping {reason}", file=sys.stderr)
            continue
        for preset in args.presets.split(","):
            print(f"measuring {sim} {preset}...", file=sys.stderr, flush=True)
            rows.append(measure(sim, preset, args.build_root))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"machine": platform.platform(), "cpu": platform.processor(),
                                    "results": rows}, indent=1) + "\n")
    print(f"{'simulator':10} {'preset':8} {'array':6} {'GEMM':12} {'cycles':>9} "
          f"{'cycles/s':>10} {'build s':>8}")
    for r in rows:
        print(f"{r['simulator']:10} {r['preset']:8} {r['array']:6} {r['gemm']:12} "
              f"{r['total_cycles']:>9} {r['cycles_per_s']:>10} {str(r['build_s']):>8}")
    print(f"wrote {args.out}")
    return 0


def _floor(args) -> int:
    reason = missing_tool("verilator")
    if reason:
        print(f"--floor needs Verilator: {reason}", file=sys.stderr)
        return 1
    out = args.out or RESULTS / "simfloor.json"
    work = (args.build_root or Path("build")).resolve() / "simfloor"
    rows = []
    for preset in args.presets.split(","):
        for part in PARTS:
            print(f"measuring the floor of {preset} {part}...", file=sys.stderr, flush=True)
            rows.append(measure_floor(part, preset, work))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"machine": platform.platform(), "cpu": platform.processor(),
                               "results": rows}, indent=1) + "\n")
    print(f"{'preset':8} {'array':6} {'part':11} {'cycles/s':>10}")
    for r in rows:
        print(f"{r['preset']:8} {r['array']:6} {r['part']:11} {r['cycles_per_s']:>10}")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
