"""The Icarus time-0 fix in tb.tools.icarus_source: without it, combinational logic with constant
inputs stays X in Icarus (amaranth-lang/amaranth#1629); with it, it has its value at time 1."""

import shutil
import subprocess

import pytest
from amaranth import *
from amaranth.back import verilog
from amaranth.lib import wiring
from amaranth.lib.wiring import Out

from tb.tools import icarus_source


class ConstIf(wiring.Component):
    o: Out(3)

    def elaborate(self, platform):
        m = Module()
        flag = Signal(init=1)              # a register that keeps its initial value
        m.d.sync += flag.eq(flag)
        with m.If(flag):
            m.d.comb += self.o.eq(5)
        with m.Else():
            m.d.comb += self.o.eq(2)
        return m


TB = """
module tb;
  wire [2:0] o;
  reg clk = 0, rst = 0;
  const_if dut(.clk(clk), .rst(rst), .o(o));
  initial begin #1 $display("o=%b", o); $finish; end
endmodule
"""


def run_icarus(tmp_path, source):
    (tmp_path / "tb.v").write_text(TB)
    exe = tmp_path / "t.vvp"
    subprocess.run(["iverilog", "-g2012", "-o", str(exe), "-s", "tb", str(tmp_path / "tb.v"),
                    str(source)], check=True, capture_output=True)
    return subprocess.run(["vvp", str(exe)], check=True, capture_output=True,
                          text=True).stdout


@pytest.mark.skipif(shutil.which("iverilog") is None, reason="icarus: `iverilog` not on PATH")
def test_icarus_time0_fix_evaluates_constant_logic(tmp_path):
    raw = tmp_path / "const_if.v"
    raw.write_text(verilog.convert(ConstIf(), name="const_if", emit_src=False))
    assert "o=xxx" in run_icarus(tmp_path, raw)          # the bug this fix exists for
    assert "o=101" in run_icarus(tmp_path, icarus_source(raw))
