"""Wall-clock time to plan a whole network with each planner strategy.

``python bench/plan_speed.py [--preset default] [--strategy best] [--workload FILE.json]`` prints
the seconds per strategy and writes ``bench/results/plan_speed-<network>-<preset>.json``. Each
run starts from an empty cycle-model cache, so the timings are cold.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from spec.config import PRESETS  # noqa: E402
import planner  # noqa: E402
from planner import cost  # noqa: E402
from planner.convplan import conv_best_plan  # noqa: E402
from planner.report import plan_layer  # noqa: E402
from planner.workload import layer_gemm  # noqa: E402


def time_network(workload: planner.Workload, cfg, strategy: str) -> dict:
    """Plan every layer as the compiler does (:func:`planner.report.plan_layer`).
    ``predicted_total_cycles`` is the GEMM model's number of each plan."""
    cost._CACHE.clear()
    conv_best_plan.cache_clear()
    start = time.perf_counter()
    cycles = 0
    for layer in workload.layers:
        _, groups, _ = layer_gemm(layer.shape)
        plan = plan_layer(layer.shape, cfg, strategy)
        cycles += plan.predicted_cycles * groups * layer.count
    seconds = time.perf_counter() - start
    return {"strategy": strategy, "seconds": seconds, "layers": len(workload.layers),
            "predicted_total_cycles": cycles}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--preset", default="default", choices=sorted(PRESETS))
    parser.add_argument("--workload", default=str(ROOT / "planner/workloads/resnet50.json"))
    parser.add_argument("--strategy", nargs="*", default=["best", "seed", "greedy", "search"])
    parser.add_argument("--out", default=str(ROOT / "bench/results"))
    args = parser.parse_args(argv)
    cfg = PRESETS[args.preset]
    workload = planner.load_workload(args.workload)
    runs = [time_network(workload, cfg, s) for s in args.strategy]
    for r in runs:
        print(f"{workload.network} [{args.preset}] {r['strategy']:>7}: {r['seconds']:.3f} s "
              f"for {r['layers']} layers, {r['predicted_total_cycles']} predicted cycles")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"plan_speed-{workload.network}-{args.preset}.json"
    path.write_text(json.dumps({"network": workload.network, "preset": args.preset,
                                "config_id": f"{cfg.config_id:08x}",
                                "python": platform.python_version(),
                                "machine": platform.machine(), "runs": runs}, indent=1) + "\n")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
