"""tb.tools.verilator_ports_config: only the top's ports are visible to VPI, inputs writable."""

import pytest

from tb.tools import verilator_ports_config

VERILOG = """module inner(a, y);
  input [3:0] a;
  output y;
endmodule

module top(csr__addr, clk, done, rst, \\odd.name , bus);
  input [5:0] csr__addr;
  wire [5:0] csr__addr;
  output clk;
  wire clk;
  output done;
  reg done;
  input rst;
  output [1:0] \\odd.name ;
  inout [7:0] bus;
  wire [511:0] \\b_rd.rdata ;
endmodule
"""


def test_ports_config_lists_the_top_ports_only(tmp_path):
    path = tmp_path / "top.v"
    path.write_text(VERILOG)
    out = verilator_ports_config(path, "top")
    assert out == tmp_path / "top_ports.vlt"
    assert out.read_text().splitlines() == [
        "`verilator_config",
        'public_flat_rw -module "top" -var "csr__addr"',
        'public_flat_rd -module "top" -var "clk"',
        'public_flat_rd -module "top" -var "done"',
        'public_flat_rw -module "top" -var "rst"',
        'public_flat_rd -module "top" -var "odd.name"',
        'public_flat_rw -module "top" -var "bus"',
    ]
    stamp = out.stat().st_mtime_ns
    verilator_ports_config(path, "top")          # unchanged: not rewritten (cached builds hold)
    assert out.stat().st_mtime_ns == stamp


def test_ports_config_refuses_a_missing_module(tmp_path):
    path = tmp_path / "top.v"
    path.write_text(VERILOG)
    with pytest.raises(RuntimeError, match="module sim_top not found"):
        verilator_ports_config(path, "sim_top")


def test_ports_config_refuses_a_port_it_cannot_read(tmp_path):
    """A port whose declaration is in a form the parser does not know is an error, not a port
    that silently stays private."""
    path = tmp_path / "top.v"
    path.write_text(VERILOG.replace("  input rst;", "  input signed rst;"))
    with pytest.raises(RuntimeError, match="port list .* does not match"):
        verilator_ports_config(path, "top")
