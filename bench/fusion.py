"""Fused against unfused chains on the RTL: memory traffic and cycles from the RTL counters.

    python -m bench.fusion [--preset default] [--chains NAME,...] [--candidates chosen|all]

For each chain of :data:`tb.fusion.CHAINS` (BERT-base FFN seq 128, ResNet-50 3x3 -> 1x1 pairs):
the planner's fusion plan (:func:`planner.fusion.plan_fusion`), then one Verilator simulation
running the chain unfused, fused as planned and (``--candidates all``) fused with every other
block partition that fits the local buffer, each as one image in one start/done. Every output is
checked bit-exactly against the numpy golden model. Writes ``bench/results/fusion-<preset>.json``
and ``.md``: per variant the blocks, records, measured and predicted cycles, and the memory-port
bytes of the layers (A / B / C) and of the whole image run (the CRC read of the image and the
record fetches included). docs/fusion.md has the results.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from hw.config import PRESETS
from planner.fusion import intermediate_bytes, plan_fusion
from tb.fusion import CHAINS, random_data, run_chain

RESULTS = Path(__file__).resolve().parent / "results"
DRAM = ("rd_a_bytes", "rd_b_bytes", "wr_c_bytes")


def run(name: str, preset: str, candidates: str, work: Path, seed: int = 1) -> dict:
    cfg = PRESETS[preset]
    chain = CHAINS[name]
    plan = plan_fusion(chain, cfg)
    fits = [c.block for c in plan.candidates if not c.refused]
    blocks = [None, plan.block] + ([b for b in fits if b != plan.block]
                                   if candidates == "all" else [])
    start = time.monotonic()
    golden, runs = run_chain(chain, random_data(chain, np.random.default_rng(seed)), cfg,
                             blocks, workdir=work / name)
    wall = time.monotonic() - start
    variants = []
    for r in runs:
        layer_bytes = {n: sum(layer[n] for layer in r.layers) for n in DRAM}
        variants.append({
            "variant": "unfused" if r.block is None else
                       ("fused (planned)" if r.block == plan.block else "fused"),
            "block": r.block,
            "records": len(r.layers),
            "bit_exact": bool(np.array_equal(r.output, golden)),
            "error": r.error_name,
            "cycles": r.counters["total_cycles"],
            "predicted_cycles": r.built.predicted_cycles,
            "layer_cycles": sum(layer["total_cycles"] for layer in r.layers),
            "layer_dram_bytes": layer_bytes,
            "predicted_layer_dram_bytes": sum(b.predicted_dram_bytes for b in r.built.layers),
            "image_dram_bytes": {n: r.counters[n] for n in DRAM},
            "image_bytes": len(r.built.blob),
        })
    base = variants[0]
    for v in variants:
        v["dram_saved_bytes"] = (sum(base["image_dram_bytes"].values())
                                 - sum(v["image_dram_bytes"].values()))
        v["cycles_saved"] = base["cycles"] - v["cycles"]
    return {
        "chain": name, "preset": preset, "config_id": f"{cfg.config_id:08x}",
        "local_buf_bytes": cfg.local_buf_bytes,
        "producer": chain.producer.name, "consumer": chain.consumer.name,
        "intermediate_bytes": intermediate_bytes(chain),
        "candidates": [{"block": c.block, "blocks": c.blocks, "local_bytes": c.local_bytes,
                        "predicted_cycles": c.predicted_cycles,
                        "predicted_dram_bytes": c.predicted_dram_bytes, "refused": c.refused}
                       for c in plan.candidates],
        "planned_block": plan.block,
        "variants": variants,
        "simulation_s": round(wall, 1),
    }


def markdown(results: list[dict]) -> str:
    out = []
    for r in results:
        out += [f"### {r['chain']} ({r['producer']} -> {r['consumer']}), preset `{r['preset']}`",
                "",
                f"intermediate tensor {r['intermediate_bytes']:,} bytes (int8); local buffer "
                f"{r['local_buf_bytes'] // 1024} KiB; config_id `{r['config_id']}`; "
                f"{r['simulation_s']} s of simulation.", "",
                "| variant | block | records | cycles (measured) | predicted | memory bytes A / B / "
                "C (layers) | image memory bytes | saved vs unfused | bit-exact |",
                "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
        for v in r["variants"]:
            lb = v["layer_dram_bytes"]
            out.append(
                f"| {v['variant']} | {v['block'] if v['block'] is not None else '—'} "
                f"| {v['records']} | {v['cycles']:,} | {v['predicted_cycles']:,} "
                f"| {lb['rd_a_bytes']:,} / {lb['rd_b_bytes']:,} / {lb['wr_c_bytes']:,} "
                f"| {sum(v['image_dram_bytes'].values()):,} "
                f"| {v['dram_saved_bytes']:,} B, {v['cycles_saved']:,} cycles "
                f"| {'yes' if v['bit_exact'] else 'NO'} |")
        out.append("")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.fusion", description=__doc__.split("\n")[0])
    ap.add_argument("--preset", default="default", choices=sorted(PRESETS))
    ap.add_argument("--chains", default=",".join(CHAINS),
                    help=f"comma-separated, from {', '.join(CHAINS)}")
    ap.add_argument("--candidates", choices=("chosen", "all"), default="all",
                    help="run only the planned partition, or every one that fits")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    names = [n for n in args.chains.split(",") if n]
    unknown = [n for n in names if n not in CHAINS]
    if unknown:
        ap.error(f"unknown chain(s) {', '.join(unknown)}; known: {', '.join(CHAINS)}")
    results = []
    with tempfile.TemporaryDirectory(prefix="tessera-fusion-") as tmp:
        for name in names:
            print(f"[fusion] {name} on {args.preset} ...", file=sys.stderr, flush=True)
            results.append(run(name, args.preset, args.candidates, Path(tmp)))
    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.out / f"fusion-{args.preset}"
    stem.with_suffix(".json").write_text(json.dumps(results, indent=1) + "\n")
    text = markdown(results)
    stem.with_suffix(".md").write_text(text + "\n")
    print(text)
    bad = [(r["chain"], v["variant"], v["block"]) for r in results for v in r["variants"]
           if not v["bit_exact"] or v["error"] != "NONE"]
    if bad:
        print(f"FAIL: not bit-exact or refused: {bad}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
