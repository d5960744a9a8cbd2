"""Bench reports: Markdown tables and PNG plots from the JSON a ``python -m bench`` run writes.

A report is a dict ``{"network", "preset", "config", "layers": [record...], "totals": {...},
"peers": {...}}`` (records from :func:`bench.network.layer_record`). Everything here is a pure
function of that dict, so it can be regenerated from the JSON without a simulator.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from .network import STALLS

__all__ = ["markdown", "peer_rows", "plot_all", "table", "PEER_COLUMNS"]

#: Peer columns of the side-by-side table: (key in report["peers"], heading).
PEER_COLUMNS = (
    ("greedy", "greedy tiling on RTL"),
    ("scalesim_os_stall_free", "SCALE-Sim OS stall-free"),
    ("scalesim_os_bw_limited", "SCALE-Sim OS bw-limited"),
    ("scalesim_ws_stall_free", "SCALE-Sim WS stall-free"),
    ("scalesim_ws_bw_limited", "SCALE-Sim WS bw-limited"),
)


def _pct(x: float) -> str:
    return f"{x:.1%}"


def _err(x: float) -> str:
    return f"{x:+.2%}"


def _plan(p: dict) -> str:
    return (f"{p['partition_m']}/{p['partition_n']}/{p['partition_k']} "
            f"{'m' if p['outer_m'] else 'n'}-outer{' split-K' if p['need_splitk'] else ''}")


def _config_line(report: dict) -> str:
    c = report["config"]
    return (f"preset `{report['preset']}` (config_id `{report['config_id']}`): "
            f"{c['array_rows']}x{c['array_cols']} array, A/B buffers "
            f"{c['buf_a_bytes'] >> 10}/{c['buf_b_bytes'] >> 10} KiB, accumulator "
            f"{c['acc_buf_bytes'] >> 10} KiB, ports A/B/C {c['a_port_bytes_per_cycle']}/"
            f"{c['b_port_bytes_per_cycle']}/{c['c_port_bytes_per_cycle']} B/cycle")


def peer_rows(report: dict) -> tuple[list[str], list[list[str]]]:
    """Heading and rows (per layer, then total cycles and MAC utilisation) of the peers table."""
    peers = report.get("peers", {})
    cols = [(key, head) for key, head in PEER_COLUMNS if key in peers]
    head = ["layer", "count", "Tessera RTL (best)"] + [h for _, h in cols]
    rows = []
    for i, r in enumerate(report["layers"]):
        row = [r["name"], str(r["count"]), f"{r['cycles']:,}"]
        for key, _ in cols:
            cyc = peers[key]["layers"][i]["cycles"]
            row.append("—" if cyc is None else f"{cyc:,}")
        rows.append(row)
    macs = report["totals"]["macs"]
    per_cycle = report["config"]["array_rows"] * report["config"]["array_cols"]
    total = ["**total (weighted)**", str(report["totals"]["layer_instances"]),
             f"**{report['totals']['cycles']:,}**"]
    util = ["**MAC utilisation**", "", f"**{_pct(report['totals']['utilisation'])}**"]
    for key, _ in cols:
        cyc = peers[key]["total_cycles"]
        total.append("—" if cyc is None else f"**{cyc:,}**")
        util.append("—" if cyc is None else f"**{_pct(macs / (per_cycle * cyc))}**")
    return head, rows + [total, util]


def table(head: list[str], align: str, rows: Iterable[list[str]]) -> list[str]:
    """The lines of a Markdown table: ``head``, the alignment row ``align`` as given (e.g.
    ``"|---|---:|"``), then ``rows`` of cells."""
    return ["| " + " | ".join(head) + " |", align,
            *("| " + " | ".join(row) + " |" for row in rows)]


def _table(head: list[str], rows: list[list[str]], right_from: int = 1) -> list[str]:
    align = ["---" if i < right_from else "---:" for i in range(len(head))]
    return table(head, "| " + " | ".join(align) + " |", rows)


def markdown(report: dict, plots: dict[str, str] | None = None) -> str:
    """The Markdown report of one network (``plots``: title -> relative PNG path)."""
    t = report["totals"]
    lines = [f"# {report['network']} on the RTL", "",
             _config_line(report) + f"; tiling strategy `{report['strategy']}`; "
             f"Verilator, every distinct layer run once and weighted by its count.", "",
             "## Network", ""]
    lines += _table(["metric", "value"], [
        ["distinct layers / instances", f"{t['layers']} / {t['layer_instances']}"],
        ["MACs", f"{t['macs']:,}"],
        ["cycles (measured)", f"{t['cycles']:,}"],
        ["MAC utilisation", _pct(t["utilisation"])],
        ["cycles (predicted)", f"{t['predicted_cycles']:,} ({_err(t['prediction_error'])})"],
        ["worst layer prediction error", f"{_err(t['worst_layer_prediction_error'])} "
                                         f"({t['worst_layer']})"],
        ["roofline bound (compulsory traffic)",
         f"{t['roofline_cycles']:,.0f} cycles, efficiency {_pct(t['roofline_efficiency'])}"],
        ["bound of the measured traffic",
         f"{t['traffic_bound_cycles']:,.0f} cycles, efficiency "
         f"{_pct(t['traffic_bound_efficiency'])}"],
        ["stall cycles load A / load B / store / drain / ctrl",
         " / ".join(f"{t['stalls'][s]:,}" for s in STALLS)],
        ["DRAM bytes A / B / C", " / ".join(f"{t['dram_bytes'][p]:,}" for p in "abc")],
    ])
    lines += ["", "## Layers", "",
              "plan = partition m/n/k and loop order; stalls = load A / load B / store / drain / "
              "ctrl cycles; roofline = max(MACs/(R*C), bytes/bandwidth per port) with compulsory "
              "traffic, binding term named; eff = roofline / measured.", ""]
    rows = []
    for r in report["layers"]:
        roof = r["roofline"]["compulsory"]
        groups = f" g{r['groups']}" if r["groups"] > 1 else ""
        rows.append([r["name"], str(r["count"]), r["gemm"] + groups, _plan(r["plan"]),
                     f"{r['cycles']:,}", _pct(r["utilisation"]),
                     " / ".join(f"{r['stalls'][s]:,}" for s in STALLS),
                     " / ".join(f"{r['dram_bytes'][p]:,}" for p in "abc"),
                     f"{r['predicted_cycles']:,} ({_err(r['prediction_error'])})",
                     f"{roof['cycles']:,.0f} ({roof['binding']})", _pct(roof["efficiency"])])
    lines += _table(["layer", "count", "M x K x N", "plan", "cycles", "MAC util", "stalls",
                     "DRAM bytes A / B / C", "predicted (error)", "roofline", "eff"], rows,
                    right_from=4)
    if report.get("peers"):
        head, rows = peer_rows(report)
        lines += ["", "## Peers (cycles)", "", *_table(head, rows, right_from=1)]
        for key, _ in PEER_COLUMNS:
            if key in report["peers"] and report["peers"][key].get("note"):
                lines += ["", f"- `{key}`: {report['peers'][key]['note']}"]
    if plots:
        lines += ["", "## Plots", ""]
        lines += [f"![{title}]({path})" for title, path in plots.items()]
    return "\n".join(lines) + "\n"


def plot_all(report: dict, out_dir: Path, stem: str) -> dict[str, str]:
    """Write the three PNGs; return {title: file name}."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter

    out_dir.mkdir(parents=True, exist_ok=True)
    layers = report["layers"]
    names = [r["name"] for r in layers]
    files = {}

    def save(fig, title: str, name: str) -> None:
        """Lay ``fig`` out, write it to ``out_dir / name`` and list it in ``files``."""
        fig.tight_layout()
        files[title] = name
        fig.savefig(out_dir / name, dpi=110)
        plt.close(fig)

    # per-layer MAC utilisation bars (greedy beside when present)
    fig, ax = plt.subplots(figsize=(max(6.0, 0.45 * len(layers) + 2), 4.2))
    xs = range(len(layers))
    greedy = report.get("peers", {}).get("greedy")
    width = 0.4 if greedy else 0.8
    ax.bar([x - (width / 2 if greedy else 0) for x in xs], [r["utilisation"] for r in layers],
           width, label=f"{report['strategy']} tiling")
    if greedy:
        util = [g.get("utilisation") or 0.0 for g in greedy["layers"]]
        ax.bar([x + width / 2 for x in xs], util, width, label="greedy tiling")
    ax.axhline(report["totals"]["utilisation"], color="k", ls="--", lw=1,
               label=f"network {report['totals']['utilisation']:.1%}")
    ax.set_xticks(list(xs), [f"{n} (x{r['count']})" for n, r in zip(names, layers)],
                  rotation=70, ha="right", fontsize=7)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("MAC utilisation")
    ax.set_title(f"{report['network']} on {report['preset']}: per-layer MAC utilisation (RTL)")
    ax.legend(fontsize=8, loc="lower left")
    save(fig, "per-layer MAC utilisation", f"{stem}-util.png")

    # measured vs predicted (left) and the error per layer (right)
    fig, (ax, ax_err) = plt.subplots(1, 2, figsize=(10, 4.5))
    meas = [r["cycles"] for r in layers]
    pred = [r["predicted_cycles"] for r in layers]
    errs = [100 * r["prediction_error"] for r in layers]
    lo, hi = min(meas + pred) * 0.8, max(meas + pred) * 1.25
    ax.plot([lo, hi], [lo, hi], "k-", lw=0.8, label="exact")
    ax.fill_between([lo, hi], [lo * 0.97, hi * 0.97], [lo * 1.03, hi * 1.03], color="0.85",
                    label="±3%")
    outside = [abs(e) > 3 for e in errs]
    colours = ["tab:red" if o else "tab:blue" for o in outside]
    ax.scatter(meas, pred, s=18, zorder=3, c=colours)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_xlabel("measured cycles (RTL)")
    ax.set_ylabel("predicted cycles (cycle model)")
    ax.legend(fontsize=8)
    ax_err.axhspan(-3, 3, color="0.85", label="±3%")
    ax_err.axhline(0, color="k", lw=0.8)
    ax_err.scatter(meas, errs, s=18, zorder=3, c=colours)
    for r, e, o in zip(layers, errs, outside):
        if o:
            ax_err.annotate(r["name"], (r["cycles"], e), fontsize=7, xytext=(4, 0),
                            textcoords="offset points")
    ax_err.set_xscale("log")
    for axis in (ax.xaxis, ax.yaxis, ax_err.xaxis):
        axis.set_minor_formatter(NullFormatter())
    bound = max(5.0, max(abs(e) for e in errs) * 1.3)
    ax_err.set_ylim(-bound, bound)
    ax_err.set_xlabel("measured cycles (RTL)")
    ax_err.set_ylabel("prediction error (%)")
    ax_err.legend(fontsize=8)
    fig.suptitle(f"{report['network']} on {report['preset']}: cycle model vs RTL, worst "
                 f"{report['totals']['worst_layer_prediction_error']:+.2%}")
    save(fig, "measured vs predicted cycles", f"{stem}-predicted.png")

    # roofline per port: x = MACs per byte on the binding memory port (compulsory traffic)
    cfg = report["config"]
    peak = cfg["array_rows"] * cfg["array_cols"]
    bws = {"a": cfg["a_port_bytes_per_cycle"], "b": cfg["b_port_bytes_per_cycle"],
           "c": cfg["c_port_bytes_per_cycle"]}
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    xs_all = []
    markers = {"a": "s", "b": "o", "c": "^"}
    for port in "abc":
        pts = []
        for r in layers:
            terms = r["roofline"]["compulsory"]["terms_cycles"]
            mem = max("abc", key=lambda p: terms[p])
            if mem == port:
                intensity = r["macs"] / (terms[port] * bws[port])
                pts.append((intensity, r["macs"] / r["cycles"]))
        if pts:
            xs_all += [p[0] for p in pts]
            ax.scatter([p[0] for p in pts], [p[1] for p in pts], marker=markers[port], s=22,
                       zorder=3, label=f"layers, busiest port {port.upper()}")
    knees = [peak / bw for bw in bws.values()]
    xs_all = xs_all or [1.0]
    x_lo, x_hi = min(xs_all + knees) / 3, max(xs_all + knees) * 3
    for bw in sorted(set(bws.values())):
        ports = "/".join(p.upper() for p in "abc" if bws[p] == bw)
        x_knee = peak / bw
        ax.plot([x_lo, min(x_hi, x_knee)], [bw * x_lo, bw * min(x_hi, x_knee)], "--", lw=1,
                label=f"port {ports}: {bw} B/cycle")
    ax.axhline(peak, color="k", lw=1, label=f"compute {peak} MACs/cycle")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(x_lo, x_hi)
    ax.set_xlabel("MACs per byte on the layer's busiest port (compulsory traffic)")
    ax.set_ylabel("MACs per cycle (measured)")
    ax.set_title(f"{report['network']} on {report['preset']}: roofline")
    ax.legend(fontsize=7, loc="lower right")
    save(fig, "roofline", f"{stem}-roofline.png")
    return files
