"""bench.outreg: a block RAM's read register folded into the RAM, only where that is exact."""

import copy

import pytest

from bench.outreg import absorb_dsp_registers, absorb_output_registers

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


def lut(a, z):
    """A LUT4 reading net ``a`` into net ``z``."""
    return {"type": "LUT4", "parameters": {}, "connections": {"A": [a], "Z": [z]},
            "port_directions": {"A": "input", "Z": "output"}}


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


def test_an_inverted_enable_reaches_the_output_enable_through_one_shared_inverter():
    """Registers loaded when their enable is low (``CEMUX`` INV) fold too: the port's ``OCE``
    is the enable through a LUT4 inverter, one per enable net, shared by every port."""
    second = {f"r{i}": ff(400 + i, 500 + i, ce=EN, cemux="INV") for i in range(2)}
    n = netlist(regs={i: ff(100 + i, 200 + i, ce=EN, cemux="INV") for i in range(4)},
                ram_conns={"DOA0": [400], "DOA1": [401], "CLKA": [CLK]}, extra=second)
    ram = n["modules"]["fpga_top"]["cells"]["ram"]
    ram["port_directions"].update(DOA0="output", DOA1="output")
    assert absorb_output_registers(n) == 2
    cells = n["modules"]["fpga_top"]["cells"]
    (inv,) = [c for c in cells.values() if c["type"] == "LUT4"]
    assert inv["connections"]["A"] == [EN] and inv["parameters"]["INIT"] == "0101010101010101"
    assert ram["connections"]["OCEA"] == ram["connections"]["OCEB"] == inv["connections"]["Z"]
    assert not [c for c in cells.values() if c["type"] == "TRELLIS_FF"]


@pytest.mark.parametrize("why, change", [
    ("a data bit read twice", dict(extra={"lut": lut(101, 400)})),
    ("a register with a reset", dict(regs={2: ff(102, 202, lsr=RST)})),
    ("a register that resets to 1", dict(regs={0: ff(100, 200, regset="SET")})),
    ("a register on another clock", dict(regs={1: ff(101, 201, clk=OTHER_CLK)})),
    ("registers with different enables", dict(regs={0: ff(100, 200, ce=EN)})),
    ("a data bit into logic", dict(regs={3: lut(103, 203)})),
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


# -- multipliers --------------------------------------------------------------------------------

def dsp_netlist(*, a_regs=None, p_regs=None, extra=None):
    """A MULT18X18D: A0-7 from flip-flops (D nets 10+i -> Q nets 20+i, A8-17 = the sign bit),
    B0-7 from flip-flops (30+i -> 40+i), P0-15 into flip-flops (P nets 100+i -> Q 200+i)."""
    conns = {**{f"A{i}": [20 + min(i, 7)] for i in range(18)},
             **{f"B{i}": [40 + min(i, 7)] for i in range(18)},
             **{f"P{i}": [100 + i] for i in range(36)}, "SIGNEDA": ["1"], "SIGNEDB": ["1"]}
    dirs = {p: ("output" if p[0] == "P" else "input") for p in conns}
    cells = {"mul": {"type": "MULT18X18D", "parameters": {}, "connections": conns,
                     "port_directions": dirs}}
    for i in range(8):
        cells[f"a{i}"] = (a_regs or {}).get(i, ff(10 + i, 20 + i))
        cells[f"b{i}"] = ff(30 + i, 40 + i)
    for i in range(16):
        cells[f"p{i}"] = (p_regs or {}).get(i, ff(100 + i, 200 + i))
    cells.update(extra or {})
    return {"modules": {"fpga_top": {"ports": {}, "cells": cells, "netnames": {}}}}


def test_a_multipliers_input_and_output_registers_move_into_it():
    n = dsp_netlist()
    assert absorb_dsp_registers(n) == 3
    cells = n["modules"]["fpga_top"]["cells"]
    assert set(cells) == {"mul"}
    mul = cells["mul"]
    p, c = mul["parameters"], mul["connections"]
    assert (p["REG_INPUTA_CLK"], p["REG_INPUTB_CLK"], p["REG_OUTPUT_CLK"]) == ("CLK0",) * 3
    assert [c[f"A{i}"] for i in (0, 7, 17)] == [[10], [17], [17]]     # the D nets
    assert [c[f"P{i}"] for i in (0, 15)] == [[200], [215]]             # the Q nets
    assert c["P16"] == [116]                                           # unread: untouched
    assert (c["CLK0"], c["RST0"], c["CE0"], c["CE1"], c["CE2"]) == ([CLK], ["0"], ["1"],
                                                                      ["1"], ["1"])


def test_a_shared_input_register_is_duplicated_and_an_inverted_enable_inverted():
    reader = lut(23, 99)
    n = dsp_netlist(a_regs={i: ff(10 + i, 20 + i, ce=EN, cemux="INV") for i in range(8)},
                    extra={"reader": reader})
    assert absorb_dsp_registers(n) == 3
    cells = n["modules"]["fpga_top"]["cells"]
    assert "a3" in cells and "a2" not in cells        # a3's Q is also read elsewhere
    (inv,) = [c for c in cells.values() if c["type"] == "LUT4" and c is not reader]
    assert inv["connections"]["A"] == [EN] and inv["parameters"]["INIT"] == "0101010101010101"
    assert cells["mul"]["connections"]["CE0"] == inv["connections"]["Z"]
    assert cells["mul"]["connections"]["CE1"] == ["1"]


@pytest.mark.parametrize("why, change, groups", [
    ("an input register with a reset", dict(a_regs={3: ff(13, 23, lsr=RST)}), {"B", "P"}),
    ("an input from logic", dict(a_regs={2: lut(12, 22)}), {"B", "P"}),
    ("an input register on another clock", dict(a_regs={0: ff(10, 20, clk=OTHER_CLK)}),
     {"B", "P"}),
    ("A on one clock, B and P on another: one clock per block",
     dict(a_regs={i: ff(10 + i, 20 + i, clk=OTHER_CLK) for i in range(8)}), {"A"}),
    ("a product bit read twice", dict(extra={"lut": lut(105, 98)}), {"A", "B"}),
    ("output registers with two enables", dict(p_regs={4: ff(104, 204, ce=EN)}), {"A", "B"}),
])
def test_a_group_that_is_not_one_plain_register_stays(why, change, groups):
    n = dsp_netlist(**change)
    assert absorb_dsp_registers(n) == len(groups), why
    p = n["modules"]["fpga_top"]["cells"]["mul"]["parameters"]
    assert {g for g, key in (("A", "REG_INPUTA_CLK"), ("B", "REG_INPUTB_CLK"),
                             ("P", "REG_OUTPUT_CLK")) if p.get(key) == "CLK0"} == groups, why


@pytest.mark.parametrize("second_first", [False, True])
def test_a_product_register_feeding_the_next_multiplier_moves_only_once(second_first):
    """P of one multiplier -> its register -> A of another: the register goes into one block
    (whichever is folded first), never into both, and no net is left without its driver."""
    first = dsp_netlist()["modules"]["fpga_top"]["cells"]
    conns = {**{f"A{i}": [200 + min(i, 7)] for i in range(18)},
             **{f"B{i}": ["0"] for i in range(18)}, **{f"P{i}": [300 + i] for i in range(36)}}
    second = {"type": "MULT18X18D", "parameters": {}, "connections": conns,
              "port_directions": {p: ("output" if p[0] == "P" else "input") for p in conns}}
    cells = {"mul2": second, **first} if second_first else {**first, "mul2": second}
    n = {"modules": {"fpga_top": {"ports": {}, "cells": cells, "netnames": {}}}}

    def driven():
        return {b for c in n["modules"]["fpga_top"]["cells"].values()
                for pin, bits in c["connections"].items()
                if c["port_directions"].get(pin) == "output" for b in bits}

    before = driven()
    assert absorb_dsp_registers(n) == 3
    after = driven()
    cells = n["modules"]["fpga_top"]["cells"]
    for name, c in cells.items():
        for pin, bits in c["connections"].items():
            if c["port_directions"].get(pin) == "input":
                assert all(b in after for b in bits if b in before), (name, pin)
    folded_into = [name for name, key in (("mul", "REG_OUTPUT_CLK"), ("mul2", "REG_INPUTA_CLK"))
                   if cells[name]["parameters"].get(key) == "CLK0"]
    assert folded_into == (["mul2"] if second_first else ["mul"])
