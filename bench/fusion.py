"""Fused against unfused chains on the RTL: memory traffic and cycles from the RTL counters.

    python -m bench.fusion [--preset default] [--chains NAME,...] [--candidates chosen|all]
    python -m bench.fusion --network light_resnet50 [--preset default]

For each chain of :data:`tb.fusion.CHAINS` (BERT-base FFN seq 128, ResNet-50 3x3 -> 1x1 pairs):
the planner's fusion plan (:func:`firmware.chains.fusion_plan`), then one Verilator simulation
running the chain unfused, fused as planned and (``--candidates all``) fused with every other
block partition that fits the local buffer, each as one image in one start/done. Every output is
checked bit-exactly against the numpy golden model. Writes ``bench/results/fusion-<preset>.json``
and ``.md``: per variant the blocks, records, measured and predicted cycles, and the memory-port
bytes of the layers (A / B / C) and of the whole image run (the CRC read of the image and the
record fetches included). docs/fusion.md has the results.

``--network light_resnet50`` instead compiles the onnx wheel's light_resnet50 (seeded weights,
BatchNormalization folded, 1x3x224x224) without and with ``fuse=True`` and runs both on
Verilator (``flow.execute.run_network``, about 5 minutes each): cycles measured and
predicted, memory bytes of the accelerator layers, and whether the outputs are bit-exactly
equal. Writes ``bench/results/fusion-<network>-<preset>.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from firmware.chains import fusion_plan
from flow.cli import compile_model
from flow.execute import compare_outputs, layer_rows, run_network
from planner.fusion import intermediate_bytes
from spec.config import PRESETS
from tb.fusion import CHAINS, random_data, run_chain

RESULTS = Path(__file__).resolve().parent / "results"
DRAM = ("rd_a_bytes", "rd_b_bytes", "wr_c_bytes")


def run(name: str, preset: str, candidates: str, work: Path, seed: int = 1) -> dict:
    cfg = PRESETS[preset]
    chain = CHAINS[name]
    plan = fusion_plan(chain, cfg)
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


def run_network_pair(network: str, preset: str, work: Path) -> dict:
    """The network compiled unfused and fused, both run on Verilator (module docstring)."""
    import onnx


    model = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light" / f"{network}.onnx"
    if not model.exists():
        raise SystemExit(f"python -m bench.fusion: no model {model}")
    cfg = PRESETS[preset]
    out, runs = {"network": network, "preset": preset, "config_id": f"{cfg.config_id:08x}"}, {}
    for fuse in (False, True):
        net = compile_model(model, {}, cfg, seed=0, fuse=fuse)
        feeds = {n: np.random.default_rng(9).standard_normal(v["shape"]).astype(np.float32)
                 for n, v in net.inputs.items()}
        start = time.monotonic()
        run = run_network(net, feeds, sim="verilator", workdir=work / f"fuse{int(fuse)}")
        rows = [r for r in layer_rows(run, cfg) if r["where"] != "host"]
        runs[fuse] = run
        out["fused" if fuse else "unfused"] = {
            "fused_pairs": [list(f) for seg in net.segments for f in seg.fused],
            "cycles": run.total_cycles, "predicted_cycles": run.predicted_cycles,
            "dram_rd_bytes": sum(r["dram_rd_bytes"] for r in rows),
            "dram_wr_bytes": sum(r["dram_wr_bytes"] for r in rows),
            "wall_s": round(time.monotonic() - start, 1)}
    same = compare_outputs(runs[True].outputs, runs[False].outputs)
    out["bit_exact_fused_vs_unfused"] = all(c["bit_exact"] for c in same.values())
    return out


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
    ap.add_argument("--network", choices=("light_resnet50",),
                    help="run a whole network unfused and fused instead of the chains")
    args = ap.parse_args(argv)
    if args.network:
        with tempfile.TemporaryDirectory(prefix="tessera-fusion-") as tmp:
            result = run_network_pair(args.network, args.preset, Path(tmp))
        args.out.mkdir(parents=True, exist_ok=True)
        path = args.out / f"fusion-{args.network}-{args.preset}.json"
        path.write_text(json.dumps(result, indent=1) + "\n")
        print(json.dumps(result, indent=1))
        return 0 if result["bit_exact_fused_vs_unfused"] else 1
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
