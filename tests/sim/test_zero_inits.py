"""tb.tools.compact_zero_inits: Yosys' word-by-word all-zero memory initialisers become loops
that set the same words to the same values, in both simulators; anything else is left alone."""

import shutil
import subprocess

import pytest
from amaranth import *
from amaranth.back import verilog
from amaranth.lib import memory, wiring
from amaranth.lib.wiring import In, Out

from hw.sim.harness import SimTop
from spec.config import PRESETS
from tb.tools import VERILATOR_ARGS, compact_zero_inits, missing_tool, prepare_env

DEPTH = 40


class TwoMemories(wiring.Component):
    """A zero-initialised memory and one with an initial value, both read asynchronously."""
    addr: In(range(DEPTH))
    zeros: Out(24)
    lut: Out(24)

    def elaborate(self, platform):
        m = Module()
        m.submodules.z = z = memory.Memory(shape=24, depth=DEPTH, init=[])
        m.submodules.t = t = memory.Memory(shape=24, depth=DEPTH,
                                           init=[7 * i + 1 for i in range(DEPTH)])
        for mem, out in ((z, self.zeros), (t, self.lut)):
            port = mem.read_port(domain="comb")
            m.d.comb += [port.addr.eq(self.addr), out.eq(port.data)]
        return m


TB = f"""
module tb;
  reg [5:0] addr = 0;
  wire [23:0] zeros, lut;
  two_memories dut(.addr(addr), .zeros(zeros), .lut(lut));
  initial begin
    for (int a = 0; a < {DEPTH}; a = a + 1) begin
      addr = a; #1 $display("%0d %0d %0d", a, zeros, lut);
    end
    $finish;
  end
endmodule
"""
EXPECTED = [f"{a} 0 {7 * a + 1}" for a in range(DEPTH)]


@pytest.fixture(scope="module")
def source():
    return verilog.convert(TwoMemories(), name="two_memories", emit_src=False)


def test_compact_zero_inits_rewrites_only_the_all_zero_memory(source):
    text, count = compact_zero_inits(source)
    assert count == 1
    assert text.count("initial begin") == source.count("initial begin")
    assert f"for (int i = 0; i < {DEPTH}; i = i + 1)" in text
    assert len(text.splitlines()) == len(source.splitlines()) - DEPTH + 1
    # the initialised memory's words are all still there, one a line
    assert all(f"= 24'h{7 * i + 1:06x};" in text for i in range(DEPTH))


def test_compact_zero_inits_leaves_other_blocks_alone():
    nonzero = "  initial begin\n    m[0] = 8'h00;\n    m[1] = 8'h01;\n  end"
    gap = "  initial begin\n    m[0] = 8'h00;\n    m[2] = 8'h00;\n  end"
    mixed = "  initial begin\n    m[0] = 8'h00;\n    n[1] = 8'h00;\n  end"
    other = "  initial begin\n    m[0] = 8'h00;\n    x = 1;\n  end"
    for block in (nonzero, gap, mixed, other):
        assert compact_zero_inits(block) == (block, 0)
    # a memory named like the loop variable would be hidden by it
    named_i = "  initial begin\n    i[0] = 8'h00;\n    i[1] = 8'h00;\n  end"
    assert compact_zero_inits(named_i) == (named_i, 0)
    escaped = "  initial begin\n    \\local [0] = 128'h0;\n    \\local [1] = 128'd0;\n  end"
    assert compact_zero_inits(escaped) == (
        "  initial begin\n    for (int i = 0; i < 2; i = i + 1) \\local [i] = 128'd0;\n  end", 1)


def _run_verilator(tmp_path, name, rtl):
    work = tmp_path / name
    work.mkdir()
    (work / "dut.v").write_text(rtl)
    (work / "tb.sv").write_text(TB)
    # --x-initial unique and a random reset: a word nothing initialises is not zero
    at = VERILATOR_ARGS.index("--x-initial")
    args = VERILATOR_ARGS[:at] + VERILATOR_ARGS[at + 2:]
    subprocess.run(["verilator", "--binary", *args, "--x-initial", "unique", "--top-module",
                    "tb", "-Mdir", str(work / "obj"), "-o", "sim", str(work / "dut.v"),
                    str(work / "tb.sv")], check=True, capture_output=True)
    return subprocess.run([str(work / "obj" / "sim"), "+verilator+rand+reset+2",
                           "+verilator+seed+7"], check=True, capture_output=True,
                          text=True).stdout.split("\n")[:DEPTH]


@pytest.mark.rtl
def test_compacted_memories_simulate_the_same_in_verilator(tmp_path, source):
    if missing_tool("verilator"):
        pytest.skip(missing_tool("verilator"))
    prepare_env()
    compacted, _ = compact_zero_inits(source)
    assert _run_verilator(tmp_path, "compacted", compacted) == EXPECTED
    # the check can fail: without any initialiser the zero memory reads random words
    start = compacted.index("    for (int i = 0;")
    dropped = compacted[:start] + compacted[compacted.index("\n", start) + 1:]
    assert _run_verilator(tmp_path, "dropped", dropped) != EXPECTED


def test_compact_zero_inits_finds_the_accelerators_memories():
    """The rewrite matches what this Amaranth/Yosys writes for a whole accelerator (otherwise
    the build-time saving would silently be lost)."""
    text = verilog.convert(SimTop(PRESETS["tiny"]), name="sim_top", emit_src=False)
    compacted, count = compact_zero_inits(text)
    assert count >= 10 and len(compacted) < 0.8 * len(text)


@pytest.mark.rtl
@pytest.mark.skipif(shutil.which("iverilog") is None, reason="icarus: `iverilog` not on PATH")
def test_compacted_memories_simulate_the_same_in_icarus(tmp_path, source):
    (tmp_path / "tb.sv").write_text(TB)
    (tmp_path / "dut.v").write_text(compact_zero_inits(source)[0])
    exe = tmp_path / "t.vvp"
    subprocess.run(["iverilog", "-g2012", "-o", str(exe), "-s", "tb", str(tmp_path / "tb.sv"),
                    str(tmp_path / "dut.v")], check=True, capture_output=True)
    out = subprocess.run(["vvp", str(exe)], check=True, capture_output=True, text=True).stdout
    assert out.split("\n")[:DEPTH] == EXPECTED
