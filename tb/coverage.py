"""Functional coverage of the RTL regressions: which features the runs exercised.

The pytest launchers hand every run's result records to :func:`record` (GEMM cases, conv cases,
post-processed cases, error outcomes, stall profiles, image runs); they land as JSON lines in
``$TESSERA_COVERAGE_DIR`` (default ``build/coverage``), one file per process, so parallel
workers never share a file. ``python -m tb.coverage [DIR] [--json OUT] [--reset]`` folds them
into the bins of :data:`BINS` and prints every bin with its hit count; uncovered bins are
listed, never hidden (exit status 1 when any is missing).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

from spec.desc import ErrorCode, col_phases
from spec.dwmesh import one_strip, one_tile, phase_halves, row_pairs, row_passes, row_phases

__all__ = ["BINS", "record", "report", "coverage_dir"]


def coverage_dir() -> Path:
    return Path(os.environ.get("TESSERA_COVERAGE_DIR", "build/coverage"))


def record(kind: str, records: list[dict], **extra) -> None:
    """Append ``records`` of ``kind`` (a :data:`BINS` group) to this process's coverage file."""
    if kind not in BINS:
        raise ValueError(f"coverage kind must be one of {', '.join(BINS)}, not {kind!r}")
    out = coverage_dir()
    out.mkdir(parents=True, exist_ok=True)
    with open(out / f"{kind}-{os.getpid()}.jsonl", "a") as f:
        for r in records:
            f.write(json.dumps({**r, **extra}) + "\n")


#: kind -> bin name -> predicate over one record of that kind.
BINS: dict[str, dict[str, Callable[[dict], bool]]] = {
    "gemm": {
        "loop order n outside m (outer_m=0)": lambda r: r["outer_m"] == 0,
        "loop order m outside n (outer_m=1)": lambda r: r["outer_m"] == 1,
        "split-K over several steps": lambda r: r["need_splitk"] == 1 and r["partition_k"] < r["k"],
        "k in one step": lambda r: r["partition_k"] >= r["k"],
        "ragged m (m % R != 0)": lambda r: r["m"] % r["R"] != 0,
        "ragged n (n % C != 0)": lambda r: r["n"] % r["C"] != 0,
        "k < R (short reduction)": lambda r: r["k"] < r["R"],
        "k >= 2048 (long reduction)": lambda r: r["k"] >= 2048,
        "several m partitions": lambda r: r["m"] > r["partition_m"],
        "several n partitions": lambda r: r["n"] > r["partition_n"],
        "single array tile (m <= R, n <= C)": lambda r: r["m"] <= r["R"] and r["n"] <= r["C"],
    },
    "stall": {f"stall profile {p}": (lambda p: lambda r: r["profile"] == p)(p)
              for p in ("requests", "responses", "mixed", "random")},
    "conv": {
        "layout NCHW": lambda r: r["layout"] == "NCHW",
        "layout NHWC": lambda r: r["layout"] == "NHWC",
        "1x1 kernel": lambda r: r["shape"]["kernel_h"] == r["shape"]["kernel_w"] == 1,
        "stride > 1": lambda r: max(r["shape"]["stride_h"], r["shape"]["stride_w"]) > 1,
        "dilation > 1": lambda r: max(r["shape"]["dilation_h"], r["shape"]["dilation_w"]) > 1,
        "groups > 1 (grouped / depthwise)": lambda r: r["shape"]["groups"] > 1,
        "padding": lambda r: any(r["shape"][f"pad_{s}"] for s in ("top", "left", "bottom",
                                                                 "right")),
        "asymmetric padding": lambda r: r["shape"]["pad_top"] != r["shape"]["pad_bottom"] or
        r["shape"]["pad_left"] != r["shape"]["pad_right"],
        "batch > 1": lambda r: r["shape"]["batch"] > 1,
    },
    "post": {
        "int8 output": lambda r: r["int8"],
        "int32 output with bias": lambda r: not r["int8"] and r["bias"],
        "clamp NONE": lambda r: r["int8"] and r["mode"] == "NONE",
        "clamp RELU": lambda r: r["int8"] and r["mode"] == "RELU",
        "clamp RELU6": lambda r: r["int8"] and r["mode"] == "RELU6",
        "clamp CLAMP": lambda r: r["int8"] and r["mode"] == "CLAMP",
        "left shift (shift < 0)": lambda r: r["int8"] and r["shift_min"] < 0,
        "right shift >= 16": lambda r: r["int8"] and r["shift_max"] >= 16,
        "bias": lambda r: r["bias"],
    },
    "error": {},            # filled below: one bin per ErrorCode
    "image": {
        "multi-layer image run": lambda r: r["records"] > 1,
        "per-row convolution records (padded consumer)": lambda r: r["per_row"],
        "image run under memory stalls": lambda r: r["stalls"],
    },
    "depthwise": {          # depthwise layers on the mesh (tests/sim/test_depthwise.py)
        "several channels a strip step (G > 1)": lambda r: r["group"] > 1,
        "one channel a step (odd h)": lambda r: r["h"] % 2 == 1 and r["group"] == 1,
        "odd h, several channels a step (rows swap buffers)":
            lambda r: r["h"] % 2 == 1 and r["group"] > 1,
        "a short last channel group": lambda r: r["channels"] % r["group"] != 0,
        "several column strips": lambda r: not one_strip(r["w"], cols=r["C"],
                                                         kernel=r["kernel"]),
        # (spec.dwmesh.one_strip / one_tile: the map's left / top pad is its right / bottom
        # one round the mesh's rings, where strips / tiles of C - 2 pad would take two)
        "one strip wider than C - 2 pad columns":
            lambda r: r["w"] > r["C"] - (r["kernel"] - 1) and
            one_strip(r["w"], cols=r["C"], kernel=r["kernel"]),
        "one tile taller than R - 2 pad rows":
            lambda r: r["h"] > r["C"] - (r["kernel"] - 1) and not _phases(r) and
            one_tile(r["h"], rows=r["C"], kernel=r["kernel"]),
        "one-row map": lambda r: r["h"] == 1,
        "int8 output (requantised)": lambda r: r["int8"],
        "int32 output": lambda r: not r["int8"],
        "padding with a nonzero pad value": lambda r: r["pad"] != 0,
        "stride 2 (even rows and lanes stored)": lambda r: r.get("stride", 1) == 2,
        "stride 2 with an odd map": lambda r: r.get("stride", 1) == 2 and r["h"] % 2 == 1,
        # (spec.dwmesh.row_phases, with the record's array size as C: the mesh is square)
        "stride 2 in row phases (two load groups a buffer)": lambda r: _phases(r),
        "stride 2 in row phases, two tiles a channel":
            lambda r: r["kernel"] == 3 and _phases(r) and r["h"] // 2 > r["C"] - 1,
        # (spec.dwmesh.phase_halves: even maps of R/2 to R - 2 rows, a phase in half the mesh)
        "row phases two channels a tile (each fill in halves)":
            lambda r: _phase_halves(r) and r["group"] > 1,
        "5x5 row phases two channels a tile (phase 0 round the column ring)":
            lambda r: _phase_halves(r) and r["group"] > 1 and r["kernel"] == 5,
        "row phases two channels a tile, a lone last channel":
            lambda r: _phase_halves(r) and r["group"] > 1 and (
                r["group"] % 2 == 1 or r["channels"] % r["group"] % 2 == 1),
        # (spec.dwmesh.StripTile.pairs: 5x5 and 7x7 maps of up to R/2 - 1 rows)
        "5x5 or 7x7 two channels a tile (window rows two a fill)":
            lambda r: _pairs(r) and r["group"] > 1,
        "5x5 or 7x7 two channels a tile, a lone last channel":
            lambda r: _pairs(r) and r["group"] > 1 and (
                r["group"] % 2 == 1 or r["channels"] % r["group"] % 2 == 1),
        "row phases two channels a tile, A's classes a row longer (G h / 2 odd)":
            lambda r: _phase_halves(r) and r["h"] // 2 % 2 == 1 and (
                r["group"] % 2 == 1 or r["channels"] % r["group"] % 2 == 1),
        # TF "SAME" (b_mode + 8 / 16: the store from accumulator row 1, the odd lanes)
        "stride 2 keeping the odd rows (TF SAME, even h)": lambda r: r.get("odd_rows", False),
        "stride 2 keeping the odd columns (TF SAME, even w)":
            lambda r: r.get("odd_cols", False),
        "TF SAME with one odd side (odd rows or columns alone)":
            lambda r: r.get("odd_rows", False) != r.get("odd_cols", False),
        "row phases keeping the odd columns (2c)":
            lambda r: _phases(r) and r.get("odd_cols", False) and not r.get("odd_rows"),
        "row phases keeping the odd rows (phase 0 the even input rows)":
            lambda r: r["kernel"] == 3 and _phases(r) and r.get("odd_rows", False),
        # row passes (spec.dwmesh.row_passes: two fills a 5x5 tile, three a 7x7 one, rows - 2
        # output rows; not where a stride-2 5x5 layer takes row phases)
        "5x5 in row passes": lambda r: r["kernel"] == 5 and _passes(r),
        "7x7 in row passes (three fills a tile)": lambda r: r["kernel"] == 7 and _passes(r),
        "row passes, several tiles a channel": lambda r: _passes(r) and r["h"] > r["C"] - 2,
        "row passes with stride 2 (a quarter stored)":
            lambda r: _passes(r) and r.get("stride", 1) == 2,
        "row passes keeping the odd rows (TF SAME)":
            lambda r: _passes(r) and r.get("odd_rows", False),
        # 5x5 stride 2 in row phases (window rows 0, 2, 4 then 1, 3)
        "5x5 stride 2 in row phases": lambda r: r["kernel"] == 5 and _phases(r),
        "5x5 row phases keeping the odd rows (TF SAME)":
            lambda r: r["kernel"] == 5 and _phases(r) and r.get("odd_rows", False),
        # 7x7 stride 2 in row phases (window rows 0, 2, 4, then 1, 3, 5, then 6)
        "7x7 stride 2 in row phases (three fills a tile)":
            lambda r: r["kernel"] == 7 and _phases(r),
        "7x7 row phases keeping the odd rows (TF SAME)":
            lambda r: r["kernel"] == 7 and _phases(r) and r.get("odd_rows", False),
        # stride 2 in row and column phases (spec.desc.col_phases: four fills a tile, the
        # deinterleaving loads, every lane an output; session 42)
        "3x3 in row and column phases": lambda r: _cph(r) and r["kernel"] == 3,
        "5x5 in row and column phases (both first-strip fills rotated)":
            lambda r: _cph(r) and r["kernel"] == 5 and not r.get("odd_cols", False),
        "column phases, several strips":
            lambda r: _cph(r) and -(-r["w"] // 2) > r["C"] - r["kernel"] // 2,
        "column phases, an odd width (the last strip's right pad)":
            lambda r: _cph(r) and r["w"] % 2 == 1,
        "column phases keeping the odd columns (TF SAME)":
            lambda r: _cph(r) and r.get("odd_cols", False),
        "column phases keeping the odd rows (TF SAME)":
            lambda r: _cph(r) and r.get("odd_rows", False),
        "column phases, several tiles a channel":
            lambda r: _cph(r) and r["h"] // 2 > r["C"] - 1 - (r["kernel"] == 5),
    },
    "fusion": {             # fused chains (tests/sim/test_fusion.py, docs/fusion.md)
        "producer output in the local buffer": lambda r: r["local_c"] > 0,
        "consumer B from the local buffer": lambda r: r["local_b"] > 0,
        "GEMM -> GEMM chain": lambda r: r["local_b"] > 0 and r["chain"] == "gemm",
        "conv -> 1x1 chain": lambda r: r["local_b"] > 0 and r["chain"] == "conv",
        "several blocks (conv halo rows)": lambda r: r["chain"] == "conv" and r["local_b"] > 1,
        "fused chain under memory stalls": lambda r: r["local_b"] > 0 and r["stalls"],
    },
}


def _phases(r) -> bool:
    """A depthwise record's layer runs in row phases alone (spec.dwmesh.row_phases, not in
    column phases too; the record's array size as the mesh's rows: the mesh is square)."""
    return (row_phases(r["h"], rows=r["C"], stride=r.get("stride", 1), kernel=r["kernel"])
            and not _cph(r))


def _cph(r) -> bool:
    """... in row and column phases (spec.desc.col_phases)."""
    return col_phases(r["h"], r["w"], rows=r["C"], cols=r["C"], stride=r.get("stride", 1),
                      kernel=r["kernel"])


def _phase_halves(r) -> bool:
    """... in row phases two channels a tile (spec.dwmesh.phase_halves)."""
    return phase_halves(r["h"], rows=r["C"], stride=r.get("stride", 1), kernel=r["kernel"])


def _pairs(r) -> bool:
    """... two channels a tile, a 5x5 or 7x7 window's rows two a fill (spec.dwmesh.row_pairs)."""
    return row_pairs(r["h"], rows=r["C"], kernel=r["kernel"])


def _passes(r) -> bool:
    """... in row passes (spec.dwmesh.row_passes), which row phases take precedence over."""
    return not _phases(r) and row_passes(r["h"], rows=r["C"], kernel=r["kernel"])


def _error_bins():
    for code in ErrorCode:
        BINS["error"][f"outcome {code.name}"] = (lambda c: lambda r: r["error"] == c)(code.name)


_error_bins()


def report(directory: Path, skipped: list[str] | None = None) -> tuple[dict, list[str]]:
    """``({kind: {bin: hits}}, [uncovered bin names])`` from every file in ``directory``.
    A line that is not a whole record (a worker killed mid-write) counts for no bin; it is
    listed in ``skipped`` as ``file:line: why`` when a list is given. Skipping can only miss
    bins, never hit one."""
    hits = {kind: dict.fromkeys(bins, 0) for kind, bins in BINS.items()}
    for path in sorted(Path(directory).glob("*.jsonl")):
        kind = path.name.split("-")[0]
        if kind not in BINS:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            try:
                r = json.loads(line)
                matched = [name for name, pred in BINS[kind].items() if pred(r)]
            except (ValueError, KeyError, TypeError) as exc:
                if skipped is not None:
                    skipped.append(f"{path.name}:{number}: {type(exc).__name__}: {exc}")
                continue
            for name in matched:
                hits[kind][name] += 1
    missing = [f"{kind}: {name}" for kind, bins in hits.items()
               for name, n in bins.items() if n == 0]
    return hits, missing


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tb.coverage", description=__doc__.split("\n")[0])
    ap.add_argument("directory", nargs="?", type=Path, default=None)
    ap.add_argument("--json", type=Path, help="also write the bins and hits here")
    ap.add_argument("--reset", action="store_true", help="delete the collected files and exit")
    args = ap.parse_args(argv)
    directory = args.directory or coverage_dir()
    if args.reset:
        for path in Path(directory).glob("*.jsonl"):
            path.unlink()
        return 0
    if not Path(directory).is_dir():
        print(f"error: {directory}: no such directory (the tests write their coverage there: "
              f"run make test first)", file=sys.stderr)
        return 2
    skipped: list[str] = []
    hits, missing = report(directory, skipped)
    for line in skipped:
        print(f"warning: skipped {line}", file=sys.stderr)
    total = sum(len(b) for b in hits.values())
    print(f"functional coverage from {directory}: {total - len(missing)}/{total} bins hit")
    for kind, bins in hits.items():
        print(f"  {kind}")
        for name, n in bins.items():
            print(f"    {'MISS' if n == 0 else 'hit ':4} {n:>7}  {name}")
    if missing:
        print("uncovered bins:\n  " + "\n  ".join(missing))
    if args.json:
        args.json.write_text(json.dumps({"hits": hits, "missing": missing}, indent=1) + "\n")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
