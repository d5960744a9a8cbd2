"""Registers into the ECP5's hard blocks: block RAM read registers and multiplier registers.

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
* those flip-flops share one clock enable (or have none): it becomes ``OCEX`` (an inverted
  one, ``CEMUX`` = ``"INV"``, through a ``LUT4`` inverter shared by its users, as for the
  multipliers below; the store's accumulator read register, loaded on ``~word_hold``, stayed
  in the fabric without it: 10.25 ns of the whole 8x8, 0c732f5 seed 2, session 25).

Then each such flip-flop is removed and its ``Q`` net is driven by ``DOXi``: the same register,
in the RAM. The design, its cycles and its results are unchanged; only where the register sits.
The RTL marks a register meant for this with ``keep`` so that Yosys keeps it apart (e.g. the
local buffer's first read register, :data:`hw.sequencer.LOCAL_READ_LATENCY`).

A ``MULT18X18D`` has the same choice: registers on its ``A`` and ``B`` inputs and its ``P``
output (``REG_INPUTA_CLK``, ``REG_INPUTB_CLK``, ``REG_OUTPUT_CLK``), which Yosys never uses.
Unregistered, a multiply is 3.93 ns from ``A``/``B`` to ``P`` (speed grade 6) between two
fabric registers, so each of the array's products (a PE's operand copy, the multiplier, the
product register) was two fabric-to-DSP hops and the multiply in one cycle. With the output
register the block's clock-to-out is 0.74 ns (a one-multiplier design: 144 MHz -> 206 MHz with
the input registers, 245 MHz with both). :func:`absorb_dsp_registers` folds, per multiplier:

* an input port (``A`` or ``B``) when every signal on its pins that is not a constant is the
  ``Q`` of a ``TRELLIS_FF`` (same conditions as above: one clock, no set/reset, reset value 0,
  one clock enable for the port, possibly inverted): the block's input register takes each
  flip-flop's ``DI``. A flip-flop whose ``Q`` also drives other cells stays for them (the same
  register, duplicated); one that only drove this multiplier is removed;
* the output when every ``P`` bit that anything reads drives exactly one ``TRELLIS_FF``
  ``DI`` (same conditions): the flip-flops are removed and ``P`` drives their ``Q`` nets.

Everything folded must share one clock (``CLK0``); each group gets a clock enable of its own
(``CE0`` A, ``CE1`` B, ``CE2`` P; an inverted enable through a new ``LUT4`` inverter shared by
its users), ``RST0`` tied to 0. Cycles and results are unchanged.
"""

from __future__ import annotations

from collections import defaultdict

__all__ = ["absorb_output_registers", "absorb_dsp_registers"]

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


def _module(netlist: dict, top: str) -> dict:
    modules = netlist.get("modules") if isinstance(netlist, dict) else None
    if not isinstance(modules, dict) or not modules:
        raise ValueError("not a Yosys JSON netlist: no 'modules'")
    if top not in modules:
        raise ValueError(f"top={top!r}: no such module (have {', '.join(sorted(modules))})")
    return modules[top]


def _pins(cells: dict) -> tuple[dict, dict]:
    """``(sinks, driver)``: the input pins each net feeds, the output pin that drives it."""
    sinks: dict[object, list[tuple[str, str]]] = defaultdict(list)
    driver: dict[object, tuple[str, str]] = {}
    for name, cell in cells.items():
        dirs = cell.get("port_directions", {})
        for pin, bits in cell["connections"].items():
            for b in bits:
                if dirs.get(pin) == "input":
                    sinks[b].append((name, pin))
                elif dirs.get(pin) == "output":
                    driver[b] = (name, pin)
    return sinks, driver


def _plain_ff(ff: dict, clock) -> tuple | None:
    """The clock enable of ``ff`` (``("1",)``, ``(net,)`` or ``("INV", net)``) when it is a
    ``TRELLIS_FF`` on ``clock`` (any clock when ``None``: pass its own), not inverted, with no
    set/reset and reset value 0; else ``None``."""
    if ff["type"] != "TRELLIS_FF":
        return None
    fp, fc = ff["parameters"], ff["connections"]
    if ((clock is not None and fc.get("CLK") != clock)
            or _param(fp, "CLKMUX", "CLK") != "CLK"
            or _param(fp, "REGSET", "RESET") != "RESET"
            or not (_const(fc.get("LSR"), "0") or _param(fp, "LSRMUX", "LSR") == "0")):
        return None
    cemux = _param(fp, "CEMUX", "CE")
    if cemux not in ("1", "CE", "INV"):
        return None
    if cemux == "1" or _const(fc.get("CE"), "1") or not fc.get("CE"):
        return ("INV", "1") if cemux == "INV" and _const(fc.get("CE"), "1") else ("1",)
    return ("INV", fc["CE"][0]) if cemux == "INV" else (fc["CE"][0],)


class _Inverters:
    """Inverted copies of nets, for folded clock enables: one ``LUT4`` inverter per net,
    shared by every block that needs it (a constant is inverted in place)."""

    def __init__(self, cells: dict):
        self._cells = cells
        self._made: dict[object, int] = {}
        self._next = 1 + max((b for c in cells.values() for bits in c["connections"].values()
                              for b in bits if isinstance(b, int)), default=1)

    def __call__(self, net):
        if net in ("0", "1"):
            return "1" if net == "0" else "0"
        if net not in self._made:
            self._made[net], self._next = self._next, self._next + 1
            self._cells[f"$outreg_inv_{self._made[net]}"] = {
                "type": "LUT4", "parameters": {"INIT": "0101010101010101"},    # Z = ~A
                "attributes": {}, "connections": {"A": [net], "B": ["0"], "C": ["0"],
                                                  "D": ["0"], "Z": [self._made[net]]},
                "port_directions": {"A": "input", "B": "input", "C": "input",
                                    "D": "input", "Z": "output"}}
        return self._made[net]

    def enable(self, enable: tuple):
        """The net for an enable of :func:`_plain_ff` (``(net,)`` or ``("INV", net)``)."""
        return self(enable[1]) if enable[0] == "INV" else enable[0]


def absorb_output_registers(netlist: dict, top: str = "fpga_top") -> int:
    """Fold the eligible read registers into their ``DP16KD`` (in place); return how many RAM
    ports now use ``OUTREG``.

    ``netlist`` is Yosys's ``write_json`` output, ``top`` the module to edit (the flattened
    design's top, :mod:`bench.fpga`'s wrapper by default)."""
    module = _module(netlist, top)
    cells = module["cells"]
    port_bits = {b for p in module.get("ports", {}).values() for b in p["bits"]}
    sinks, _ = _pins(cells)
    inverters = _Inverters(cells)

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
            enables: set[tuple] = set()
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
                enable = _plain_ff(cells[ff_name], clock) if ff_pin == "DI" else None
                if enable is None:
                    ok = False
                    break
                enables.add(enable)
                regs.append((pin, ff_name))
            if not ok or not regs or len(enables) != 1:
                continue
            (enable,) = enables
            for pin, ff_name in regs:
                conn[pin] = list(cells[ff_name]["connections"]["Q"])
                del cells[ff_name]
            conn[f"OCE{x}"] = [inverters.enable(enable)]
            params[f"REGMODE_{x}"] = "OUTREG"
            folded += 1
    return folded


#: ``MULT18X18D`` register groups folded by :func:`absorb_dsp_registers`: (group, its
#: parameter prefix, the clock enable it gets).
_DSP_GROUPS = (("A", "REG_INPUTA", "CE0"), ("B", "REG_INPUTB", "CE1"), ("P", "REG_OUTPUT", "CE2"))


def absorb_dsp_registers(netlist: dict, top: str = "fpga_top") -> int:
    """Fold the registers around each ``MULT18X18D`` into it (in place); return how many
    register groups (an input port or the output, each up to 18 or 36 flip-flops) moved."""
    module = _module(netlist, top)
    cells = module["cells"]
    port_bits = {b for p in module.get("ports", {}).values() for b in p["bits"]}
    sinks, driver = _pins(cells)
    inverters = _Inverters(cells)

    folded = 0
    for name in [n for n, c in cells.items() if c["type"] == "MULT18X18D"]:
        dsp = cells[name]
        params, conn = dsp["parameters"], dsp["connections"]
        if any(_param(params, f"{prefix}_CLK", "NONE") != "NONE" for _, prefix, _ in _DSP_GROUPS):
            continue
        if any(not _is_const(conn.get(p)) for p in ("CLK0", "CE0", "CE1", "CE2", "RST0")
               if p in conn):
            continue
        plans = {}                      # group -> (clock, enable, [(pin, flip-flop)])
        for group, _, _ in _DSP_GROUPS:
            regs, enables, ok, clock = [], set(), True, None
            for pin in [p for p in conn if p[:1] == group and p[1:].isdigit()]:
                bits = conn[pin]
                if not bits or isinstance(bits[0], str):
                    continue
                if group == "P":
                    readers = sinks.get(bits[0], [])
                    if not readers:
                        continue
                    if len(readers) != 1 or readers[0][1] != "DI" or bits[0] in port_bits:
                        ok = False
                        break
                    ff_name = readers[0][0]
                else:
                    ff_name, ff_pin = driver.get(bits[0], (None, None))
                    if ff_name is None or ff_pin != "Q":
                        ok = False
                        break
                ff = cells[ff_name]
                enable = _plain_ff(ff, clock)
                if enable is None:
                    ok = False
                    break
                clock = clock or ff["connections"]["CLK"]
                enables.add(enable)
                regs.append((pin, ff_name))
            if ok and regs and len(enables) == 1:
                plans[group] = (clock, enables.pop(), regs)
        if not plans:
            continue
        # the block has one clock for its registers: the groups on the first group's clock
        clock = next(iter(plans.values()))[0]
        plans = {g: plan[1:] for g, plan in plans.items() if plan[0] == clock}
        inputs = set()                  # input flip-flops, removed once nothing reads them
        for group, prefix, ce in _DSP_GROUPS:
            if group not in plans:
                continue
            enable, regs = plans[group]
            for pin, ff_name in regs:
                ff_conn = cells[ff_name]["connections"]
                if group == "P":        # P drives the register's Q net; its old net is dead
                    q = ff_conn["Q"][0]
                    sinks.pop(conn[pin][0], None)
                    driver[q] = (name, pin)
                    conn[pin] = [q]
                    del cells[ff_name]
                else:                   # the pin reads the register's D net instead of its Q
                    q, d = conn[pin][0], ff_conn["DI"][0]
                    sinks[q].remove((name, pin))
                    sinks[d].append((name, pin))
                    conn[pin] = [d]
                    inputs.add(ff_name)
            conn[ce] = [inverters.enable(enable)]
            params[f"{prefix}_CLK"], params[f"{prefix}_CE"] = "CLK0", ce
            params[f"{prefix}_RST"] = "RST0"
            folded += 1
        for ff_name in inputs:
            q = cells[ff_name]["connections"]["Q"][0]
            if not sinks[q] and q not in port_bits:
                sinks[cells[ff_name]["connections"]["DI"][0]].remove((ff_name, "DI"))
                del cells[ff_name]
        conn["CLK0"], conn["RST0"] = list(clock), ["0"]
        for pin in ("CLK0", "RST0", "CE0", "CE1", "CE2"):
            if pin in conn:
                dsp.setdefault("port_directions", {})[pin] = "input"
    return folded
