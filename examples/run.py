"""Run a demo network's image on the RTL and check every buffer against the golden model.

::

    python -m examples.run cnn [--preset small] [--sim verilator|icarus] [--seed 0] [--json F]
    python -m examples.run mlp

Prints one row per layer record (from the statistics records the hardware wrote: cycles, MAC
utilisation, stalls, DRAM bytes, the planner's prediction) and PASS/FAIL per buffer. Exit
status 1 on any mismatch or error.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

from firmware.builder import image_overhead, predicted_image_cycles
from firmware.demos import NETWORKS, Network, budget_cycles
from flow.argtypes import SEED
from spec.config import PRESETS, AccelConfig
from tb.jobs import ImageRun, run_jobs

__all__ = ["run_network", "main"]


def run_network(net: Network, cfg: AccelConfig, *, workdir: Path, sim: str = "verilator",
                plusargs=(), budget_scale: int = 1):
    """Run ``net`` in one start/done; return ``(result, mismatches)`` where ``mismatches`` maps
    buffer name -> list of differing byte offsets (empty: bit-exact). ``plusargs`` and
    ``budget_scale`` are for runs under injected memory stalls."""

    run = ImageRun(net.blob, budget_cycles=budget_scale * budget_cycles(net), load=net.load,
                   read=net.read)
    (result,) = run_jobs([run], cfg, workdir=workdir, sim=sim, plusargs=plusargs)
    mismatches = {}
    for name, _, _ in net.read:
        got = np.frombuffer(result.reads.get(name, b""), np.uint8)
        want = np.frombuffer(net.golden[name], np.uint8)
        if got.shape != want.shape:
            mismatches[name] = [f"length {got.size} != {want.size}"]
        else:
            mismatches[name] = np.flatnonzero(got != want).tolist()
    return result, mismatches


def layer_rows(net: Network, result, cfg: AccelConfig) -> list[dict]:
    rows = []
    for built, counters in zip(net.layers, result.layers):
        d = built.layer.desc
        macs = d.m * d.n * d.k
        total = counters["total_cycles"]
        rows.append({"layer": built.name, "m": d.m, "k": d.k, "n": d.n,
                     "cycles": total, "predicted": built.predicted_cycles,
                     "mac_util": macs / (cfg.array_rows * cfg.array_cols * total),
                     **{k: v for k, v in counters.items() if k != "total_cycles"}})
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m examples.run", description=__doc__.split("\n")[0])
    ap.add_argument("network", choices=sorted(NETWORKS))
    ap.add_argument("--preset", default="small", choices=sorted(PRESETS))
    ap.add_argument("--sim", default="verilator", choices=("verilator", "icarus"))
    ap.add_argument("--seed", type=SEED, default=0)
    ap.add_argument("--json", type=Path, help="write the per-layer report here")
    args = ap.parse_args(argv)
    cfg = PRESETS[args.preset]
    net = NETWORKS[args.network](cfg, args.seed)
    with tempfile.TemporaryDirectory(prefix=f"tessera-{net.name}-") as tmp:
        result, mismatches = run_network(net, cfg, workdir=Path(tmp), sim=args.sim)
    rows = layer_rows(net, result, cfg)
    print(f"{net.name} on {args.preset} ({args.sim}): image {len(net.blob)} bytes, "
          f"{len(net.layers)} layer records, one start/done")
    print(f"{'layer':<18} {'m':>4} {'k':>5} {'n':>5} {'cycles':>8} {'pred':>8} {'util':>6} "
          f"{'rdA':>6} {'rdB':>6} {'wrC':>6}")
    for r in rows:
        print(f"{r['layer']:<18} {r['m']:>4} {r['k']:>5} {r['n']:>5} {r['cycles']:>8} "
              f"{r['predicted']:>8} {100 * r['mac_util']:>5.1f}% {r['rd_a_bytes']:>6} "
              f"{r['rd_b_bytes']:>6} {r['wr_c_bytes']:>6}")
    c = result.counters
    print(f"image total: {c['total_cycles']} cycles, predicted "
          f"{predicted_image_cycles(net.blob, net.layers, cfg)} (of which the image run itself: "
          f"header, CRC, check pass, record fetches, statistics: "
          f"{image_overhead(net.blob, cfg)}); error {result.error_name}")
    ok = result.error == 0
    for name, bad in mismatches.items():
        print(f"  {name:<10} {'PASS' if not bad else f'FAIL ({len(bad)} bytes differ)'}")
        ok &= not bad
    if args.json:
        args.json.write_text(json.dumps({"network": net.name, "preset": args.preset,
                                         "counters": c, "layers": rows,
                                         "bit_exact": ok}, indent=1) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
