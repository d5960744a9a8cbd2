"""Block RAM output registers for the ECP5 flow: fold a read port's next register into the RAM.

An ECP5 ``DP16KD`` block RAM can register its read data inside the block (``REGMODE_A`` /
``REGMODE_B`` = ``"OUTREG"``): the read is the same, one cycle later, and the clock-to-out of
the port drops from 5.83 ns (``NOREG``: the RAM's read latch straight to the fabric) to
0.96 ns (nextpnr 0.11's delays, speed grade 6, measured on a one-RAM design). Yosys 0.4x's
``memory_libmap`` never sets it, so every read of an RAM into a register of the fabric costs
about 6 ns of a 10 ns cycle before any routing. Vendor tools fold that register into the RAM;
:func:`absorb_output_registers` does the same on Yosys's JSON netlist between ``synth_ecp5``
and nextpnr.

A read port ``X`` (``A`` or ``B``) of a ``DP16KD`` is folded when, and only when:

* it is ``NOREG`` (its output clock enable ``OCEX``, unused then, tied to a constant), its
  reset ``RSTX`` is tied to 0,
  and its clock is not inverted (``CLKXMUX`` = ``"CLKX"``);
* every data output ``DOXi`` that anything reads drives exactly one pin: the ``DI`` of a
  ``TRELLIS_FF`` clocked by the same net, not inverted, with no set/reset (``LSR`` tied to 0)
  and reset value 0 (``REGSET`` = ``"RESET"``, what the RAM's output register holds after
  configuration), not a module port;
* those flip-flops share one clock enable (or have none): it becomes ``OCEX``.

Then each such flip-flop is removed and its ``Q`` net is driven by ``DOXi``: the same register,
in the RAM. The design, its cycles and its results are unchanged; only where the register sits.
The RTL marks a register meant for this with ``keep`` so that Yosys keeps it apart (e.g. the
local buffer's first read register, :data:`hw.sequencer.LOCAL_READ_LATENCY`).
"""

from __future__ import annotations

from collections import defaultdict

__all__ = ["absorb_output_registers"]

_PORTS = ("A", "B")
#: Data outputs of a DP16KD read port.
_DATA_BITS = 18


def _const(bits, value: str) -> bool:
    return bits is not None and len(bits) == 1 and bits[0] == value


def _is_const(bits) -> bool:
    return _const(bits, "0") or _const(bits, "1")


def _param(params: dict, name: str, default: str) -> str:
    """A cell parameter as a string (Yosys pads string parameters with spaces)."""
    return str(params.get(name, default)).strip()


def absorb_output_registers(netlist: dict, top: str = "fpga_top") -> int:
    """Fold the eligible read registers into their ``DP16KD`` (in place); return how many RAM
    ports now use ``OUTREG``.

    ``netlist`` is Yosys's ``write_json`` output, ``top`` the module to edit (the flattened
    design's top, :mod:`bench.fpga`'s wrapper by default)."""
    modules = netlist.get("modules") if isinstance(netlist, dict) else None
    if not isinstance(modules, dict) or not modules:
        raise ValueError("not a Yosys JSON netlist: no 'modules'")
    if top not in modules:
        raise ValueError(f"top={top!r}: no such module (have {', '.join(sorted(modules))})")
    module = modules[top]
    cells = module["cells"]

    port_bits = {b for p in module.get("ports", {}).values() for b in p["bits"]}
    sinks: dict[object, list[tuple[str, str]]] = defaultdict(list)
    for name, cell in cells.items():
        dirs = cell.get("port_directions", {})
        for pin, bits in cell["connections"].items():
            if dirs.get(pin) == "input":
                for b in bits:
                    sinks[b].append((name, pin))

    folded = 0
    for name in list(cells):
        ram = cells.get(name)
        if ram is None or ram["type"] != "DP16KD":
            continue
        params, conn = ram["parameters"], ram["connections"]
        for x in _PORTS:
            if _param(params, f"REGMODE_{x}", "NOREG") != "NOREG":
                continue
            if _param(params, f"CLK{x}MUX", f"CLK{x}") != f"CLK{x}":
                continue
            # in NOREG mode the output clock enable is unused: Yosys ties it to either constant
            if not (_is_const(conn.get(f"OCE{x}")) and _const(conn.get(f"RST{x}"), "0")):
                continue
            clock = conn.get(f"CLK{x}")
            regs: list[tuple[str, str]] = []        # (DO pin, flip-flop)
            ok = True
            for i in range(_DATA_BITS):
                pin = f"DO{x}{i}"
                bits = conn.get(pin)
                if not bits or isinstance(bits[0], str):
                    continue
                readers = sinks.get(bits[0], [])
                if not readers:
                    continue
                if len(readers) != 1 or bits[0] in port_bits:
                    ok = False
                    break
                ff_name, ff_pin = readers[0]
                ff = cells[ff_name]
                fp, fc = ff["parameters"], ff["connections"]
                if (ff["type"] != "TRELLIS_FF" or ff_pin != "DI"
                        or fc.get("CLK") != clock or _param(fp, "CLKMUX", "CLK") != "CLK"
                        or _param(fp, "REGSET", "RESET") != "RESET"
                        or not (_const(fc.get("LSR"), "0") or _param(fp, "LSRMUX", "LSR") == "0")
                        or _param(fp, "CEMUX", "CE") == "INV"):
                    ok = False
                    break
                regs.append((pin, ff_name))
            if not ok or not regs:
                continue
            enables = set()
            for _, ff_name in regs:
                fp, fc = cells[ff_name]["parameters"], cells[ff_name]["connections"]
                always = (_param(fp, "CEMUX", "CE") == "1" or _const(fc.get("CE"), "1")
                          or not fc.get("CE"))
                enables.add(("1",) if always else tuple(fc["CE"]))
            if len(enables) != 1:
                continue
            (enable,) = enables
            for pin, ff_name in regs:
                conn[pin] = list(cells[ff_name]["connections"]["Q"])
                del cells[ff_name]
            conn[f"OCE{x}"] = list(enable)
            params[f"REGMODE_{x}"] = "OUTREG"
            folded += 1
    return folded
