"""The README's first hour: its three commands on ``light_squeezenet.onnx``, run as the README
writes them, print what the README quotes (the summary lines, the quoted table rows, the
totals, and the utilisation its prose states), so the walkthrough a newcomer follows first
stays true."""

import re
import shlex
from pathlib import Path

import pytest

import planner
from flow import tessera
from spec.config import PRESETS
from tb.demo import DEFAULT_SHAPES
from tb.tools import missing_tool

from .conftest import LIGHT

README = Path(__file__).resolve().parents[2] / "README.md"


def _section(title: str) -> str:
    """The README's section ``## title`` (up to the next ``## ``)."""
    text = README.read_text()
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end >= 0 else len(text)]


def _blocks(section: str) -> list[list[str]]:
    """The fenced code blocks of ``section``, as lists of lines."""
    return [b.strip("\n").splitlines() for b in section.split("```")[1::2]]


def _cells(row: str) -> list[str]:
    """A table row of ``tessera run``'s report, its cells stripped (the README's excerpt has
    narrower columns than the full table)."""
    return [c.strip() for c in row.strip().strip("│").split("│")]


def _commands(block: list[str]) -> dict[str, list[str]]:
    """The ``tessera`` commands of the README's command block by subcommand, ``$LIGHT``
    resolved and comments dropped."""
    out = {}
    for line in block:
        if line.startswith("tessera "):
            argv = shlex.split(line.split("#")[0].replace("$LIGHT", str(LIGHT)))[1:]
            out[argv[0]] = argv
    return out


#: The README's section the tests below run.
FIRST_HOUR = "Your first hour: an ONNX model to per-layer cycles on the RTL"
#: Its sentence on the whole network's utilisation, totals and cycles.
WHOLE_NETWORK = re.compile(r"at ([\d.]+)% MAC utilisation over the whole network "
                           r"\(([\d,]+) MACs in ([\d,]+) cycles\)")
#: ``run``'s comparison lines for SqueezeNet's output.
COMPARISON = "softmaxout_1: vs "
#: The start of ``run``'s totals line, whose first number is the run's duration: it differs
#: from run to run, so :func:`_totals` replaces it by ``-`` and only the cycle counts after it
#: are compared.
TOTALS_START = re.compile(r"^wall time [\d.]+ s;")


def _totals(lines: list[str]) -> str:
    """The one totals line of ``lines``, its duration replaced by ``-``."""
    (line,) = [TOTALS_START.sub("wall time - s;", r) for r in lines if TOTALS_START.match(r)]
    return line


def test_readme_blocks_are_what_the_test_expects():
    """The parsing below finds the three commands and each quoted output (a README edit that
    moves them fails here, in the fast tier, not as a confusing mismatch after a run)."""
    section = _section(FIRST_HOUR)
    blocks = _blocks(section)
    assert set(_commands(blocks[0])) == {"explain", "compile", "run"}
    assert blocks[1][0].endswith(" ...") and blocks[2][0].startswith("squeezenet.tsr: ")
    assert sum(line.startswith("┃") for line in blocks[3]) == 1
    assert sum(line.startswith("│") for line in blocks[3]) >= 1
    assert _totals(blocks[3])
    assert [line.strip().split(":")[1] for line in blocks[3]
            if line.lstrip().startswith(COMPARISON)] == [" vs golden device", " vs onnxruntime"]
    assert WHOLE_NETWORK.search(" ".join(section.split()))


@pytest.mark.rtl
def test_readme_first_hour_prints_what_the_readme_quotes(tmp_path, monkeypatch, capsys):
    reason = missing_tool("verilator")
    if reason:
        pytest.skip(reason)
    section = _section(FIRST_HOUR)
    blocks = _blocks(section)
    commands = _commands(blocks[0])
    monkeypatch.chdir(tmp_path)         # the commands write squeezenet.tsr / .html here
    for var in ("FORCE_COLOR", "TTY_COMPATIBLE"):       # rich would colour the table
        monkeypatch.delenv(var, raising=False)

    assert tessera.main(commands["explain"]) == 0
    explained = capsys.readouterr().out.splitlines()
    quoted = blocks[1][0][:-len(" ...")]
    assert any(line.startswith(quoted) for line in explained), (quoted, explained[-3:])

    assert tessera.main(commands["compile"]) == 0
    compiled = capsys.readouterr().out.splitlines()
    assert blocks[2][0] in compiled, (blocks[2][0], compiled)

    assert tessera.main(commands["run"]) == 0
    ran = capsys.readouterr().out.splitlines()
    assert (tmp_path / "squeezenet.html").exists()
    (header,) = [_cells(r.replace("┃", "│")) for r in ran if r.startswith("┃")]
    (quoted_header,) = [_cells(r.replace("┃", "│")) for r in blocks[3] if r.startswith("┃")]
    assert header == quoted_header
    rows = {tuple(_cells(r)[:2]): _cells(r) for r in ran if r.startswith("│")}
    quoted_rows = [_cells(r) for r in blocks[3] if r.startswith("│")]
    assert quoted_rows
    for q in quoted_rows:
        assert rows.get(tuple(q[:2])) == q, (q, rows.get(tuple(q[:2])))
    # the totals line (cycles predicted and measured), its duration replaced in both
    total = _totals(ran)
    assert total == _totals(blocks[3])
    # against the golden device as quoted; against onnxruntime (whose kernels vary with its
    # version and the CPU) no more LSB off than quoted
    lsb = re.compile(r"\((\d+) LSB\)")
    ours = {line.split(":")[1]: line for line in ran if line.lstrip().startswith(COMPARISON)}
    for line in blocks[3]:
        if line.lstrip().startswith(COMPARISON):
            got = ours[line.split(":")[1]]
            if "golden" in line:
                assert got == line
            else:
                assert int(lsb.search(got).group(1)) <= int(lsb.search(line).group(1)), got

    # the prose's totals: every accelerator layer's MACs in the measured cycles
    column = header.index("MACs")
    macs = sum(int(c[column].replace(",", "")) for c in rows.values()
               if c[2].startswith("accel"))
    cycles = int(re.search(r"measured ([\d,]+) cycles", total).group(1).replace(",", ""))
    util = 100 * macs / (PRESETS["default"].macs_per_cycle * cycles)
    stated = WHOLE_NETWORK.search(" ".join(section.split()))
    assert (stated.group(1), stated.group(2), stated.group(3)) == \
        (f"{util:.1f}", f"{macs:,}", f"{cycles:,}")


def test_readme_make_sim_numbers_are_the_planners():
    """``make sim``'s first GEMM as the README states it: the cycles the planner predicts with
    ``make sim``'s strategy and the MAC utilisation (the RTL runs it in exactly that many: the
    cycle model is exact for every legal tiling, which tests/sim/test_rtl.py's random GEMMs
    check counter by counter)."""
    prose = " ".join(README.read_text().split())
    stated = re.search(r"the (\d+)x(\d+)x(\d+) GEMM runs in ([\d,]+) cycles, which is "
                       r"\*\*([\d.]+)% MAC utilisation\*\*", prose)
    assert stated, "the README's sentence on make sim's first GEMM"
    m, k, n = (int(stated.group(i)) for i in (1, 2, 3))
    assert DEFAULT_SHAPES.split(",")[0] == f"{m}x{k}x{n}"
    cfg = PRESETS["default"]
    cycles = planner.layer_cost(planner.GemmShape(m, k, n), cfg, "best").cycles
    util = 100 * m * k * n / (cfg.macs_per_cycle * cycles)
    assert (stated.group(4), stated.group(5)) == (f"{cycles:,}", f"{util:.1f}")
