"""The worst register-to-register paths of a routed design, from nextpnr's SDF.

    python -m bench.sta build/fpga/small/routed.sdf [--top 10] [--json]

nextpnr's report names one critical path per clock pair. Closing timing on a design of 30,000
cells needs the next ones too: which paths are behind the worst, whether they are the same bus,
and how much of each is logic and how much routing. ``bench.fpga`` has nextpnr write the routed
delays (``--sdf routed.sdf``); this module reads them back and does the static timing analysis
itself, on the same numbers nextpnr used (the slow corner: the third value of every
``min:typ:max`` triple; ideal clock, like nextpnr's analysis of one clock domain):

* every ``IOPATH`` is a logic arc of its cell, every ``INTERCONNECT`` a routing arc;
* a path starts at the output of an arc from a clock pin (flip-flop clock-to-q, a block RAM's
  clocked read, a registered DSP output) and ends at a pin with a ``SETUPHOLD`` check, where the
  setup time is added;
* arrival times are the longest over the acyclic graph of arcs (arcs into clock pins are not
  data); input and output pads are not start or end points (the ``fpga_top`` wrapper registers
  every port, and nextpnr reports pad paths separately).

:func:`failing_by_module` counts the endpoints over a period per submodule of the end register
(where the work is), and :func:`worst_paths` reports the worst endpoint of each distinct
(start, end) *signal* pair: a
32-bit adder's 32 failing endpoints are one entry, named by the registers' signal (the cell
name without yosys's and nextpnr's ``_TRELLIS_FF_Q_7``-style suffixes). On the designs checked
(``tests/bench/test_sta.py``, and the routed 8x8 against nextpnr's own report) the worst entry
is nextpnr's critical path, to the picosecond.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import sys
from collections import defaultdict
from pathlib import Path

from flow.argtypes import at_least

__all__ = ["TimingGraph", "TimingPath", "parse_sdf", "worst_paths", "failing_by_module",
           "signal_name", "main"]

#: Pin names of clock inputs (flip-flop, block RAM ports, DSP register clocks).
_CLOCK_PIN = re.compile(r"^(CLK[A-Z0-9]*|CLKI)$")
_TRIPLE = r"\(\s*(-?[\d.]*):(-?[\d.]*):(-?[\d.]*)\s*\)"
_INSTANCE = re.compile(r"^\s*\(INSTANCE\s*(.*?)\)\s*$")
_CELLTYPE = re.compile(r'^\s*\(CELLTYPE\s+"([^"]*)"\)')
_IOPATH = re.compile(r"^\s*\(IOPATH\s+(\S+)\s+(\S+)\s+" + _TRIPLE + r"\s*" + _TRIPLE)
_INTERCONNECT = re.compile(r"^\s*\(INTERCONNECT\s+(\S+)\s+(\S+)\s+" + _TRIPLE + r"\s*" + _TRIPLE)
_SETUP = re.compile(r"^\s*\(SETUPHOLD\s+\((?:posedge|negedge)\s+(\S+)\)\s+"
                    r"\((?:posedge|negedge)\s+(\S+)\)\s+" + _TRIPLE)
_SUFFIX = re.compile(r"(_TRELLIS_FF_Q|_TRELLIS_COMB|_TRELLIS_IO|_DI_|_DO|\$).*$")


def _unescape(name: str) -> str:
    return re.sub(r"\\(.)", r"\1", name)


def _split_pin(ref: str) -> tuple[str, str]:
    """``cell/PIN`` (SDF ``DIVIDER /``; an escaped ``\\/`` belongs to the cell name)."""
    cut = max(i for i, ch in enumerate(ref) if ch == "/" and (i == 0 or ref[i - 1] != "\\"))
    return _unescape(ref[:cut]), ref[cut + 1:]


def _worst(groups: tuple[str, ...]) -> float:
    """The slow corner (max) of the rise and fall triples, in ns (the SDF's TIMESCALE is 1ps)."""
    return max(float(v) for v in groups[2::3] if v) / 1000.0


def signal_name(cell: str) -> str:
    """The signal a cell belongs to: ``u.x2_4_TRELLIS_FF_Q_5`` -> ``u.x2_4``, a block RAM slice
    ``u.seq.buf_a.mem.1.0`` -> ``u.seq.buf_a.mem``."""
    base = _SUFFIX.sub("", cell)
    return re.sub(r"(\.\d+)+$", "", base) or cell


@dataclasses.dataclass
class TimingGraph:
    """Pins (``cell/PIN``) and the arcs between them, with each cell's type.

    ``arcs[u]`` lists ``(v, delay_ns, kind)``, kind ``"logic"`` or ``"routing"``;
    ``launch[pin]`` is the clock-to-out delay of a start pin, ``setup[pin]`` the setup time of
    an end pin.
    """

    cell_type: dict[str, str] = dataclasses.field(default_factory=dict)
    arcs: dict[str, list[tuple[str, float, str]]] = dataclasses.field(
        default_factory=lambda: defaultdict(list))
    launch: dict[str, float] = dataclasses.field(default_factory=dict)
    setup: dict[str, float] = dataclasses.field(default_factory=dict)

    @property
    def arc_count(self) -> int:
        return sum(len(v) for v in self.arcs.values())


@dataclasses.dataclass(frozen=True)
class TimingPath:
    """One register-to-register path: its pins from the start (clock-to-out) to the end."""

    delay_ns: float
    logic_ns: float
    routing_ns: float
    start: str
    end: str
    pins: tuple[str, ...]
    cells: tuple[str, ...]
    #: How many endpoints of the same (start signal, end signal) pair fail the same target.
    endpoints: int

    @property
    def fmax_mhz(self) -> float:
        return 1000.0 / self.delay_ns

    def to_json(self, graph: TimingGraph | None = None) -> dict:
        out = {"delay_ns": round(self.delay_ns, 3), "fmax_mhz": round(self.fmax_mhz, 2),
               "logic_ns": round(self.logic_ns, 3), "routing_ns": round(self.routing_ns, 3),
               "from": self.start, "to": self.end, "cells": len(self.cells),
               "endpoints": self.endpoints}
        if graph is not None:
            out["through"] = [f"{graph.cell_type.get(c, '?')} {c}" for c in self.cells]
        return out


def parse_sdf(path: str | Path) -> TimingGraph:
    """Read nextpnr's SDF (``--sdf``) into a :class:`TimingGraph`.

    Raises ``ValueError`` naming the file and line of anything it cannot read as SDF of that
    form (it is not a general SDF reader: one top cell with every ``INTERCONNECT``, then one
    ``CELL`` per placed cell with ``IOPATH`` and ``SETUPHOLD`` entries)."""
    path = Path(path)
    graph = TimingGraph()
    cell = ctype = None
    seen_header = False
    with path.open() as f:
        for lineno, line in enumerate(f, 1):
            if not seen_header:
                if line.strip():
                    if not line.lstrip().startswith("(DELAYFILE"):
                        raise ValueError(f"{path}:{lineno}: not an SDF file (expected "
                                         f"'(DELAYFILE', got {line.strip()[:40]!r})")
                    seen_header = True
                continue
            if "(INTERCONNECT" in line:
                mo = _INTERCONNECT.match(line)
                if mo is None:
                    raise ValueError(f"{path}:{lineno}: unreadable INTERCONNECT: {line.strip()}")
                (src_cell, src_pin), (dst_cell, dst_pin) = (_split_pin(mo.group(1)),
                                                            _split_pin(mo.group(2)))
                if _CLOCK_PIN.match(dst_pin):
                    continue                              # the clock network: ideal clock
                graph.arcs[f"{src_cell}/{src_pin}"].append(
                    (f"{dst_cell}/{dst_pin}", _worst(mo.groups()[2:]), "routing"))
            elif "(CELLTYPE" in line:
                mo = _CELLTYPE.match(line)
                ctype = mo.group(1) if mo else None
            elif "(INSTANCE" in line:
                mo = _INSTANCE.match(line)
                cell = _unescape(mo.group(1).strip()) if mo else None
                if cell is not None and ctype is not None:
                    graph.cell_type[cell] = ctype
            elif "(IOPATH" in line:
                mo = _IOPATH.match(line)
                if mo is None or cell is None:
                    raise ValueError(f"{path}:{lineno}: unreadable IOPATH: {line.strip()}")
                src, dst = mo.group(1).strip("()"), mo.group(2)
                src = src.split()[-1]                      # "(posedge CLK)" -> CLK
                delay = _worst(mo.groups()[2:])
                if _CLOCK_PIN.match(src):
                    pin = f"{cell}/{dst}"
                    graph.launch[pin] = max(graph.launch.get(pin, 0.0), delay)
                else:
                    graph.arcs[f"{cell}/{src}"].append((f"{cell}/{dst}", delay, "logic"))
            elif "(SETUPHOLD" in line:
                mo = _SETUP.match(line)
                if mo is None or cell is None:
                    raise ValueError(f"{path}:{lineno}: unreadable SETUPHOLD: {line.strip()}")
                pin = f"{cell}/{mo.group(1)}"
                setup = float(mo.group(5) or 0) / 1000.0
                graph.setup[pin] = max(graph.setup.get(pin, 0.0), setup)
    if not seen_header:
        raise ValueError(f"{path}: empty file, not an SDF file")
    return graph


def _arrivals(graph: TimingGraph):
    """Longest arrival time at every pin reachable from a start pin, with its predecessor."""
    indeg: dict[str, int] = defaultdict(int)
    for u, outs in graph.arcs.items():
        for v, _, _ in outs:
            indeg[v] += 1
    arrival: dict[str, float] = dict(graph.launch)
    pred: dict[str, tuple[str, float, str] | None] = {p: None for p in graph.launch}
    nodes = set(graph.arcs) | set(indeg) | set(graph.launch)
    ready = [n for n in nodes if indeg[n] == 0]
    done = 0
    while ready:
        u = ready.pop()
        done += 1
        t = arrival.get(u)
        for v, d, kind in graph.arcs.get(u, ()):
            if t is not None and (v not in arrival or t + d > arrival[v]):
                arrival[v] = t + d
                pred[v] = (u, d, kind)
            indeg[v] -= 1
            if indeg[v] == 0:
                ready.append(v)
    if done != len(nodes):
        raise ValueError(f"combinational loop: {len(nodes) - done} pins are on a cycle of arcs")
    return arrival, pred


def worst_paths(graph: TimingGraph, top: int = 10, *,
                period_ns: float | None = None) -> list[TimingPath]:
    """The ``top`` worst paths, one per (start signal, end signal) pair, worst first.

    ``period_ns``: count, for each pair, the endpoints whose path exceeds it (else every
    endpoint of the pair is counted)."""
    if top < 1:
        raise ValueError(f"top={top}: must be >= 1")
    arrival, pred = _arrivals(graph)
    ends = [(arrival[p] + s, p) for p, s in graph.setup.items() if p in arrival]
    out: list[TimingPath] = []
    index: dict[tuple[str, str], int] = {}
    for delay, end in sorted(ends, reverse=True):
        pins, logic, routing = [end], 0.0, 0.0
        step = pred[end]
        while step is not None:
            u, d, kind = step
            if kind == "logic":
                logic += d
            else:
                routing += d
            pins.append(u)
            step = pred[u]
        pins.reverse()
        logic += graph.launch[pins[0]] + graph.setup[end]
        start = pins[0]
        key = (signal_name(start.rsplit("/", 1)[0]), signal_name(end.rsplit("/", 1)[0]))
        if key in index:
            if period_ns is None or delay > period_ns:
                p = out[index[key]]
                out[index[key]] = dataclasses.replace(p, endpoints=p.endpoints + 1)
            continue
        if len(out) == top:
            continue
        cells = tuple(dict.fromkeys(p.rsplit("/", 1)[0] for p in pins))
        index[key] = len(out)
        out.append(TimingPath(delay_ns=delay, logic_ns=logic, routing_ns=routing, start=start,
                              end=end, pins=tuple(pins), cells=cells,
                              endpoints=int(period_ns is None or delay > period_ns)))
    return out


def failing_by_module(graph: TimingGraph, period_ns: float, *, depth: int = 3,
                      top: int = 12) -> list[tuple[str, int, float]]:
    """Endpoints slower than ``period_ns`` per submodule of their end register, most first:
    ``(module, endpoints, worst path ns)``. The module is the cell name's hierarchical prefix
    cut to ``depth`` levels (``u_accel.seq.store``); where the failures are, not just the worst.
    """
    if period_ns <= 0:
        raise ValueError(f"period_ns={period_ns}: must be > 0")
    arrival, _ = _arrivals(graph)
    count: dict[str, int] = defaultdict(int)
    worst: dict[str, float] = {}
    for pin, setup in graph.setup.items():
        if pin not in arrival or arrival[pin] + setup <= period_ns:
            continue
        parts = signal_name(pin.rsplit("/", 1)[0]).split(".")
        module = ".".join(parts[:-1][:depth]) or "(top)"
        count[module] += 1
        worst[module] = max(worst.get(module, 0.0), arrival[pin] + setup)
    ranked = sorted(count, key=lambda mod: (-count[mod], mod))
    return [(mod, count[mod], worst[mod]) for mod in ranked[:top]]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.sta", description=__doc__.split("\n")[0])
    parser.add_argument("sdf", type=Path, help="nextpnr's --sdf output (bench.fpga: routed.sdf)")
    parser.add_argument("--top", type=at_least(int, 1), default=10, help="paths to list (default 10)")
    parser.add_argument("--period", type=float, default=10.0,
                        help="clock period in ns for the failing-endpoint counts (default 10)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(argv)
    try:
        graph = parse_sdf(args.sdf)
        paths = worst_paths(graph, args.top, period_ns=args.period)
    except (OSError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps([p.to_json(graph) for p in paths], indent=1))
        return 0
    for i, p in enumerate(paths, 1):
        print(f"{i:2}. {p.delay_ns:6.2f} ns ({p.fmax_mhz:6.2f} MHz)  logic {p.logic_ns:5.2f}  "
              f"routing {p.routing_ns:5.2f}  cells {len(p.cells):2}  endpoints over "
              f"{args.period:g} ns: {p.endpoints}")
        print(f"    from {p.start}\n    to   {p.end}")
    print(f"\nendpoints over {args.period:g} ns by the end register's module:")
    for module, n, ns in failing_by_module(graph, args.period):
        print(f"  {n:6}  worst {ns:6.2f} ns  {module}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
