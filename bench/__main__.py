"""Per-layer performance report of whole networks on the RTL, with peers side by side.

    python -m bench [--workload FILE ...] [--preset default] [--peers greedy,scalesim]
    python -m bench --from-json bench/results/bench-resnet50-default.json   # re-render only
    python -m bench --from-json FILE.json --peers scalesim [--scalesim bw]  # add SCALE-Sim only

For each workload (default: ResNet-50 and BERT-base seq 128): every distinct layer runs once on
the Verilator build of the config (one simulation per network and strategy, layers bit-exact
against the golden model) and is weighted by its count. Writes, under ``--out``
(``bench/results``): ``bench-<network>-<preset>.json`` and ``.md``, three PNGs per network
(``-util``, ``-predicted``, ``-roofline``), and ``bench-summary-<preset>.md`` with the headline
table. Peers: ``greedy`` = the Gemmini-style greedy tiling on the same RTL; ``scalesim`` =
SCALE-Sim 3.0.0 (own venv under build/) in OS and WS dataflows: stall-free from its fold model
in closed form, and with ``--scalesim bw|full`` SCALE-Sim's own bandwidth-limited (and
stall-free) runs (bench.peer_scalesim documents the mapping).
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import tempfile
from pathlib import Path

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from hw.build import emit
from planner.shapes import ConvShape, GemmShape
from planner.workload import load_workload
from spec.config import PRESETS
from tb.tools import build, missing_tool

from .network import BenchLayer, distinct_layers, layer_record, network_totals, run_on_rtl
from .peer_scalesim import DATAFLOWS, run_scalesim, stall_free_cycles
from .report import markdown, plot_all

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
WORKLOADS = [ROOT / "planner" / "workloads" / "resnet50.json",
             ROOT / "planner" / "workloads" / "bert_base_seq128.json"]

GREEDY_NOTE = ("planner strategy `greedy` (planner.search.greedy_plan, Gemmini-style: tiles grown "
               "round-robin n, m, k while they fit the buffer halves and the accumulator; m "
               "outer, n inner, k innermost) run on the same RTL; cycles counted exactly as ours "
               "(start to done, every load, drain and store).")
SCALESIM_NOTES = {
    "stall_free": ("SCALE-Sim 3.0.0 `Total Cycles`, InterfaceBandwidth=CALC: its fold schedule "
                   "with infinite memory bandwidth (no stalls); a full fill/drain per fold and no "
                   "overlap between folds; no padding (convs get the touched input extent), no "
                   "batch; initial DRAM prefetch and final write-back not counted."),
    "bw_limited": ("SCALE-Sim 3.0.0 `Total Cycles`, InterfaceBandwidth=USER: filter/ifmap DRAM "
                   "bandwidth = our A/B port bytes per cycle, ofmap = our C port outputs per "
                   "cycle; compute plus memory stall cycles, the initial prefetch and final "
                   "write-back not counted (JSON: `total_cycles_incl_prefetch`)."),
    "formula": ("SCALE-Sim 3.0.0's stall-free `Total Cycles` from its fold model in closed form "
                "(bench.peer_scalesim.stall_free_cycles; equal to SCALE-Sim's own runs, see "
                "docs/bench.md): a full fill/drain per fold, no fold overlap, infinite "
                "bandwidth; no padding, no batch."),
}


def _peer_greedy(layers, raws, cfg) -> dict:
    rows = []
    for layer, raw in zip(layers, raws):
        rec = layer_record(layer, raw, cfg)
        rows.append({"cycles": rec["cycles"], "utilisation": rec["utilisation"],
                     "predicted_cycles": rec["predicted_cycles"], "plan": rec["plan"],
                     "stalls": rec["stalls"], "dram_bytes": rec["dram_bytes"]})
    total = sum(r["cycles"] * layer.count for r, layer in zip(rows, layers))
    return {"layers": rows, "total_cycles": total, "note": GREEDY_NOTE}


def _peer_scalesim(layers, results: dict, cfg) -> dict:
    peers = {}
    for key, per_layer in results.items():
        mode = key.split("_", 2)[2]
        rows = []
        for layer, res in zip(layers, per_layer):
            if res is None:
                rows.append({"cycles": None})
                continue
            rows.append({"cycles": res["total_cycles"], **res,
                         "utilisation": layer.shape.macs / (cfg.macs_per_cycle *
                                                            res["total_cycles"])})
        complete = all(r["cycles"] is not None for r in rows)
        total = (sum(r["cycles"] * layer.count for r, layer in zip(rows, layers))
                 if complete else None)
        peers[key] = {"layers": rows, "total_cycles": total, "note": SCALESIM_NOTES[mode]}
    return peers


def _scalesim_peers(layers, cfg, how: str, work: Path, progress, network: str) -> dict:
    """SCALE-Sim columns. ``formula``: stall-free OS and WS from its fold model in closed form
    (bench.peer_scalesim.stall_free_cycles); ``bw``: plus real SCALE-Sim runs, OS,
    bandwidth-limited; ``full``: real runs of OS and WS in both modes."""

    results: dict[str, list] = {}
    notes = {}
    if how in ("formula", "bw"):
        for df in DATAFLOWS:
            rows = []
            for layer in layers:
                try:
                    rows.append({"total_cycles": stall_free_cycles(layer.shape, cfg, df),
                                 "source": "fold formula"})
                except ValueError:
                    rows.append(None)
            results[f"scalesim_{df}_stall_free"] = rows
            notes[f"scalesim_{df}_stall_free"] = SCALESIM_NOTES["formula"]
    runs = {"formula": [], "bw": [("os", "bw_limited")],
            "full": [(df, mode) for df in DATAFLOWS for mode in ("stall_free", "bw_limited")]}[how]
    if runs:
        task = progress.add_task(f"{network} SCALE-Sim runs ({', '.join(map(':'.join, runs))})",
                                 total=len(layers) * len(runs))
        results.update(run_scalesim([(layer.name, layer.shape) for layer in layers], cfg,
                                    work / "scalesim", runs=runs,
                                    progress=lambda n: progress.update(task, completed=n)))
    peers = _peer_scalesim(layers, results, cfg)
    for key, note in notes.items():
        peers[key]["note"] = note
    return peers


def run_network(workload_path: Path, preset: str, peers: set[str], out: Path, layout: str,
                progress, scalesim: str = "formula") -> dict:

    cfg = PRESETS[preset]
    workload = load_workload(workload_path)
    layers = distinct_layers(workload)
    build("verilator", emit(cfg))
    work = Path(tempfile.mkdtemp(prefix=f"bench-{workload.network}-"))
    strategies = ["best"] + (["greedy"] if "greedy" in peers else [])
    raws = {}
    for strategy in strategies:
        task = progress.add_task(f"{workload.network} RTL ({strategy} tiling)", total=len(layers))
        raws[strategy] = run_on_rtl(layers, cfg, strategy, work / strategy, layout=layout,
                                    progress=lambda n, t=task: progress.update(t, completed=n))
    records = [layer_record(layer, raw, cfg) for layer, raw in zip(layers, raws["best"])]
    report = {
        "network": workload.network, "workload": str(workload_path.relative_to(ROOT))
        if workload_path.is_relative_to(ROOT) else str(workload_path),
        "preset": preset, "config_id": f"{cfg.config_id:08x}", "config": cfg.to_dict(),
        "strategy": "best", "layout": layout, "simulator": "verilator",
        "date": datetime.date.today().isoformat(),
        "layers": records, "totals": network_totals(records, cfg), "peers": {},
    }
    if "greedy" in peers:
        report["peers"]["greedy"] = _peer_greedy(layers, raws["greedy"], cfg)
    if "scalesim" in peers:
        report["peers"].update(_scalesim_peers(layers, cfg, scalesim, work, progress,
                                               workload.network))
    write_report(report, out)
    return report


def add_scalesim(report: dict, how: str) -> None:
    """Add (or replace) the SCALE-Sim columns of a finished report; runs no RTL."""


    cfg = PRESETS[report["preset"]]
    if f"{cfg.config_id:08x}" != report["config_id"]:
        raise ValueError(f"{report['network']}: preset {report['preset']} is config "
                         f"{cfg.config_id:08x} now, the report was made on {report['config_id']}")
    layers = []
    for r in report["layers"]:
        shape = ConvShape(**r["shape"]) if r["kind"] == "conv" else GemmShape(**r["shape"])
        layers.append(BenchLayer(r["name"], tuple(r["names"]), shape, r["count"]))
    work = Path(tempfile.mkdtemp(prefix=f"bench-{report['network']}-scalesim-"))
    with Progress() as progress:
        report["peers"].update(_scalesim_peers(layers, cfg, how, work, progress,
                                               report["network"]))


def write_report(report: dict, out: Path) -> Path:
    stem = f"bench-{report['network']}-{report['preset']}"
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stem}.json").write_text(json.dumps(report, indent=1) + "\n")
    plots = plot_all(report, out, stem)
    (out / f"{stem}.md").write_text(markdown(report, plots))
    return out / f"{stem}.md"


def headline(reports: list[dict]) -> str:
    """The headline table: one row per network."""
    lines = ["| network | config | MAC utilisation | cycles | predicted (error) | worst layer "
             "error | greedy tiling on RTL | SCALE-Sim OS stall-free | SCALE-Sim OS bw-limited "
             "| SCALE-Sim best of OS/WS stall-free |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for rep in reports:
        t, p, cfg = rep["totals"], rep["peers"], rep["config"]
        peak = cfg["array_rows"] * cfg["array_cols"]

        def cell(cycles):
            return "—" if cycles is None else f"{cycles:,} ({t['macs'] / (peak * cycles):.1%})"

        def total(key):
            return p[key]["total_cycles"] if key in p else None

        best_sf = None
        if "scalesim_os_stall_free" in p and "scalesim_ws_stall_free" in p:
            os_rows = p["scalesim_os_stall_free"]["layers"]
            ws_rows = p["scalesim_ws_stall_free"]["layers"]
            if all(r["cycles"] is not None for r in os_rows + ws_rows):
                best_sf = sum(min(o["cycles"], w["cycles"]) * r["count"]
                              for o, w, r in zip(os_rows, ws_rows, rep["layers"]))
        lines.append(
            f"| {rep['network']} | {rep['preset']} ({cfg['array_rows']}x{cfg['array_cols']}, "
            f"{cfg['a_port_bytes_per_cycle']} B/cycle A/B) | **{t['utilisation']:.1%}** | "
            f"{t['cycles']:,} | {t['predicted_cycles']:,} ({t['prediction_error']:+.2%}) | "
            f"{t['worst_layer_prediction_error']:+.2%} ({t['worst_layer']}) | "
            f"{cell(total('greedy'))} | {cell(total('scalesim_os_stall_free'))} | "
            f"{cell(total('scalesim_os_bw_limited'))} | {cell(best_sf)} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workload", type=Path, action="append",
                        help="workload JSON (repeatable; default ResNet-50 and BERT-base)")
    parser.add_argument("--preset", choices=sorted(PRESETS), default="default")
    parser.add_argument("--peers", default="greedy,scalesim",
                        help="comma-separated subset of greedy,scalesim ('' for none)")
    parser.add_argument("--scalesim", choices=["formula", "bw", "full"], default="formula",
                        help="formula (default): stall-free OS/WS from SCALE-Sim's fold model "
                             "in closed form; bw: plus SCALE-Sim runs, OS bandwidth-limited "
                             "(cached; hours for ResNet-50); full: SCALE-Sim runs of OS and WS "
                             "in both modes")
    parser.add_argument("--layout", choices=["NCHW", "NHWC"], default="NCHW")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--from-json", type=Path, action="append",
                        help="re-render reports from bench JSON files; runs nothing")
    args = parser.parse_args(argv)
    peers = set(filter(None, args.peers.split(",")))
    if peers - {"greedy", "scalesim"}:
        parser.error(f"unknown peers {sorted(peers - {'greedy', 'scalesim'})}")
    try:                # every file read before the first (long) RTL run
        if args.from_json:
            reports = [read_report(p) for p in args.from_json]
        for path in args.workload or []:
            load_workload(path)
    except (OSError, ValueError) as exc:
        parser.error(str(exc))
    if args.from_json:
        for rep in reports:
            if "scalesim" in peers and args.peers != parser.get_default("peers"):
                add_scalesim(rep, args.scalesim)
            print(f"wrote {write_report(rep, args.out)}")
    else:


        reason = missing_tool("verilator")
        if reason:
            print(f"FAIL: {reason}", file=sys.stderr)
            return 1
        reports = []
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                   TimeElapsedColumn())
        for path in args.workload or WORKLOADS:
            with Progress(*columns) as progress:
                reports.append(run_network(path.resolve(), args.preset, peers, args.out,
                                           args.layout, progress, args.scalesim))
            print(f"wrote {args.out / ('bench-' + reports[-1]['network'] + '-' + args.preset)}"
                  ".{json,md,-*.png}")
    preset = reports[0]["preset"]
    if args.from_json:      # the summary keeps the rows of the reports not re-rendered
        given = {r["network"] for r in reports}
        for path in sorted(args.out.glob(f"bench-*-{preset}.json")):
            try:
                rep = read_report(path)
            except (OSError, ValueError) as e:      # not one of ours: not a row
                print(f"summary: skipped {e}", file=sys.stderr)
                continue
            if rep["network"] not in given and rep["preset"] == preset:
                reports.append(rep)
        order = [p.stem for p in WORKLOADS]
        reports.sort(key=lambda r: (order.index(r["network"]) if r["network"] in order
                                    else len(order), r["network"]))
    summary = args.out / f"bench-summary-{preset}.md"
    summary.write_text(headline(reports))
    print(headline(reports))
    print(f"wrote {summary}")
    return 0


#: what every bench report (``bench-<network>-<preset>.json``) has
REPORT_KEYS = ("network", "preset", "config_id", "config", "layers", "totals", "peers")


def read_report(path: Path) -> dict:
    """A bench report written by :func:`write_report`; ``ValueError`` naming ``path`` for
    anything else (another tool's JSON, not JSON at all)."""
    try:
        report = json.loads(path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: not a bench report (not JSON: {e})") from None
    missing = [k for k in REPORT_KEYS if not isinstance(report, dict) or k not in report]
    if missing:
        raise ValueError(f"{path}: not a bench report (no {', '.join(missing)}; python -m "
                         f"bench writes them as bench-<network>-<preset>.json)")
    return report


if __name__ == "__main__":
    sys.exit(main())
