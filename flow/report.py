"""A ``tessera run`` report as one self-contained HTML page: the summary, the per-layer table
and a bar chart of each accelerator layer's cycles (measured and predicted), drawn as inline
SVG, so the page needs nothing but a browser."""

from __future__ import annotations

import html

__all__ = ["html_report"]

_COLUMNS = ("step", "layer", "where", "records", "MACs", "cycles", "predicted", "meas/pred",
            "MAC util", "DRAM rd B", "DRAM wr B")


def _cells(r: dict) -> list[str]:
    if r["where"] == "host":
        return [str(r["step"]), r["layer"], f"host ({r['op_type']})"] + [""] * 8
    cyc, pred = r["cycles"], r["predicted_cycles"]
    return [str(r["step"]), r["layer"], r["where"], str(r["records"]), f"{r['macs']:,}",
            "-" if cyc is None else f"{cyc:,}", f"{pred:,}",
            "-" if not cyc or not pred else f"{cyc / pred:.2f}",
            "-" if r["mac_util"] is None else f"{100 * r['mac_util']:.1f}%",
            "-" if cyc is None else f"{r['dram_rd_bytes']:,}",
            "-" if cyc is None else f"{r['dram_wr_bytes']:,}"]


def _chart(rows: list[dict]) -> str:
    """Horizontal bars per accelerator layer: measured cycles (solid, when measured) over the
    prediction (outlined)."""
    layers = [r for r in rows if r["where"] != "host"]
    if not layers:
        return "<p>No accelerator layers.</p>"
    top = max(max(r["predicted_cycles"], r["cycles"] or 0) for r in layers) or 1
    label_w, bar_w, row_h = 220, 560, 18
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{label_w + bar_w + 110}" '
             f'height="{row_h * len(layers) + 24}" font-family="sans-serif" font-size="11">']
    for i, r in enumerate(layers):
        y = 4 + i * row_h
        name = html.escape(r["layer"][:32])
        parts.append(f'<text x="{label_w - 6}" y="{y + 12}" text-anchor="end">{name}</text>')
        pred_w = bar_w * r["predicted_cycles"] / top
        if r["cycles"]:
            parts.append(f'<rect x="{label_w}" y="{y + 2}" width="{bar_w * r["cycles"] / top:.1f}"'
                         f' height="{row_h - 6}" fill="#4a7ebb"/>')
        parts.append(f'<rect x="{label_w}" y="{y + 1}" width="{pred_w:.1f}" '
                     f'height="{row_h - 4}" fill="none" stroke="#c0504d"/>')
        shown = r["cycles"] if r["cycles"] else r["predicted_cycles"]
        parts.append(f'<text x="{label_w + bar_w + 6}" y="{y + 12}">{shown:,}</text>')
    y = 4 + len(layers) * row_h + 14
    parts.append(f'<text x="{label_w}" y="{y}">bars: measured cycles; outline: predicted '
                 f'(longest {top:,})</text></svg>')
    return "\n".join(parts)


def html_report(report: dict) -> str:
    """The page for ``report`` (the dict ``tessera run --json`` writes)."""
    title = f"{report['network']} on {report['sim']}"
    total = report.get("total_cycles")
    summary = [f"predicted {report['predicted_cycles']:,} cycles",
               f"wall time {report['wall_s']:.1f} s"]
    if total is not None:
        summary.insert(0, f"measured {total:,} cycles (image runs, header/CRC/check passes "
                          f"included)")
    for key, what in (("vs_golden", "vs golden device"), ("vs_onnxruntime", "vs onnxruntime")):
        for name, c in report.get(key, {}).items():
            exact = "bit-exact" if c["bit_exact"] else f"max abs diff {c['max_abs_diff']:g}"
            summary.append(f"{html.escape(name)} {what}: {exact}, {c['pct_equal']:.1f}% equal")
    head = "".join(f"<th>{html.escape(c)}</th>" for c in _COLUMNS)
    body = "\n".join("<tr>" + "".join(f"<td>{html.escape(v)}</td>" for v in _cells(r))
                     + "</tr>" for r in report["layers"])
    return f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:2px 6px;text-align:right}}td:nth-child(2),
td:nth-child(3){{text-align:left}}</style></head>
<body><h1>{html.escape(title)}</h1>
<ul>{"".join(f"<li>{s}</li>" for s in summary)}</ul>
<h2>Cycles per accelerator layer</h2>
{_chart(report["layers"])}
<h2>Every step</h2>
<table><tr>{head}</tr>
{body}
</table></body></html>
"""
