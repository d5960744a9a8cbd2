"""bench.outreg: a block RAM's read register folded into the RAM, only where that is exact."""

import copy

import pytest

from bench.outreg import absorb_output_registers

CLK, RST, EN, OTHER_CLK = 2, 3, 4, 5


def ff(di, q, *, clk=CLK, ce=None, lsr="0", regset="RESET", cemux=None):
    params = {"CLKMUX": "CLK", "GSR": "DISABLED", "LSRMUX": "LSR", "REGSET": regset,
              "SRMODE": "LSR_OVER_CE", "CEMUX": cemux or ("1 " if ce is None else "CE")}
    conns = {"CLK": [clk], "DI": [di], "LSR": [lsr], "Q": [q]}
    dirs = {"CLK": "input", "DI": "input", "LSR": "input", "Q": "output"}
    if ce is not None:
        conns["CE"], dirs["CE"] = [ce], "input"
    return {"type": "TRELLIS_FF", "parameters": params, "connections": conns,
            "port_directions": dirs}


def netlist(bits=4, *, ram_params=None, ram_conns=None, regs=None, extra=None, ports=None):
    """One DP16KD reading DOB0.. into one flip-flop each (nets 100+i -> 200+i)."""
    conns = {"CLKA": [CLK], "CLKB": [CLK], "OCEA": ["1"], "OCEB": ["1"], "RSTA": ["0"],
             "RSTB": ["0"], "CEB": ["1"], **{f"DOB{i}": [100 + i] for i in range(bits)},
             **{f"DOB{i}": [300 + i] for i in range(bits, 18)}}
    conns.update(ram_conns or {})
    dirs = {p: ("output" if p.startswith("DO") else "input") for p in conns}
    params = {"REGMODE_A": "NOREG", "REGMODE_B": "NOREG", "CLKAMUX": "CLKA",
              "CLKBMUX": "CLKB", "RESETMODE": "ASYNC"}
    params.update(ram_params or {})
    cells = {"ram": {"type": "DP16KD", "parameters": params, "connections": conns,
                     "port_directions": dirs}}
    for i in range(bits):
        cells[f"q{i}"] = (regs or {}).get(i, ff(100 + i, 200 + i))
    cells.update(extra or {})
    return {"modules": {"fpga_top": {"ports": ports or {}, "cells": cells, "netnames": {}}}}


def test_a_plain_read_register_moves_into_the_ram():
    n = netlist()
    assert absorb_output_registers(n) == 1
    cells = n["modules"]["fpga_top"]["cells"]
    assert set(cells) == {"ram"}
    ram = cells["ram"]
    assert ram["parameters"]["REGMODE_B"] == "OUTREG"
    assert ram["parameters"]["REGMODE_A"] == "NOREG"          # port A reads nothing
    assert [ram["connections"][f"DOB{i}"] for i in range(4)] == [[200], [201], [202], [203]]
    assert ram["connections"]["DOB4"] == [304]                 # unread outputs untouched
    assert ram["connections"]["OCEB"] == ["1"]


def test_the_registers_shared_enable_becomes_the_output_enable():
    n = netlist(regs={i: ff(100 + i, 200 + i, ce=EN) for i in range(4)},
                ram_conns={"OCEB": ["0"]})           # unused in NOREG: either constant
    assert absorb_output_registers(n) == 1
    assert n["modules"]["fpga_top"]["cells"]["ram"]["connections"]["OCEB"] == [EN]


@pytest.mark.parametrize("why, change", [
    ("a data bit read twice", dict(extra={"lut": {
        "type": "LUT4", "parameters": {}, "connections": {"A": [101], "Z": [400]},
        "port_directions": {"A": "input", "Z": "output"}}})),
    ("a register with a reset", dict(regs={2: ff(102, 202, lsr=RST)})),
    ("a register that resets to 1", dict(regs={0: ff(100, 200, regset="SET")})),
    ("a register on another clock", dict(regs={1: ff(101, 201, clk=OTHER_CLK)})),
    ("registers with different enables", dict(regs={0: ff(100, 200, ce=EN)})),
    ("an inverted enable", dict(regs={i: ff(100 + i, 200 + i, ce=EN, cemux="INV")
                                      for i in range(4)})),
    ("a data bit into logic", dict(regs={3: {
        "type": "LUT4", "parameters": {}, "connections": {"A": [103], "Z": [203]},
        "port_directions": {"A": "input", "Z": "output"}}})),
    ("an output register already", dict(ram_params={"REGMODE_B": "OUTREG"})),
    ("a read reset in use", dict(ram_conns={"RSTB": [RST]})),
    ("an output enable in use", dict(ram_conns={"OCEB": [EN]})),
    ("an inverted RAM clock", dict(ram_params={"CLKBMUX": "INV"})),
    ("a data bit that is a module port", dict(ports={"o": {"direction": "output",
                                                           "bits": [102]}})),
])
def test_nothing_moves_where_it_would_not_be_the_same_register(why, change):
    n = netlist(**change)
    before = copy.deepcopy(n)
    assert absorb_output_registers(n) == 0, why
    assert n == before, why


def test_ports_are_folded_independently():
    n = netlist(ram_conns={"DOA0": [500], "CLKA": [CLK]},
                extra={"qa": ff(500, 600, lsr=RST)})
    n["modules"]["fpga_top"]["cells"]["ram"]["port_directions"]["DOA0"] = "output"
    assert absorb_output_registers(n) == 1
    ram = n["modules"]["fpga_top"]["cells"]["ram"]
    assert (ram["parameters"]["REGMODE_A"], ram["parameters"]["REGMODE_B"]) == ("NOREG", "OUTREG")
    assert "qa" in n["modules"]["fpga_top"]["cells"]


def test_bad_netlists_are_refused_by_name():
    with pytest.raises(ValueError, match="not a Yosys JSON netlist"):
        absorb_output_registers({"cells": {}})
    with pytest.raises(ValueError, match="top='fpga_top': no such module"):
        absorb_output_registers({"modules": {"other": {"cells": {}}}})
