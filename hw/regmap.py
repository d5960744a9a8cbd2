"""The control/status register map: one list that the RTL, the testbenches and the C-header
generator all walk. Imports nothing from Amaranth; no register offset is typed anywhere else.
"""

from __future__ import annotations

import dataclasses

from .desc import DESC_FIELDS

__all__ = ["Register", "REGISTERS", "COUNTERS", "REG", "CSR_ADDR_BITS", "CTRL_BITS", "STATUS_BITS"]

#: Performance counters, in register order. These names are also the planner's
#: ``CycleBreakdown`` fields and the benchmark JSON keys. 32 bits each, wrapping.
#:
#: Every cycle from the one after ``start`` up to and including the one that raises ``done``
#: counts in ``total_cycles`` and in exactly one of the six ``*_cycles`` categories, tested in
#: this priority order: a real (non-padding) beat is issued to the array (``mac_active``); the compute
#: engine is busy otherwise: padding beats, pipeline fill and drain (``stall_drain``); the A load
#: is busy (``stall_load_a``); the B load is busy (``stall_load_b``); the store is busy
#: (``stall_store``); none of them: descriptor checks and per-step control (``stall_ctrl``).
#: Byte counters count whole beats accepted by each memory port.
COUNTERS: tuple[str, ...] = (
    "total_cycles",
    "mac_active_cycles",
    "stall_drain_cycles",
    "stall_load_a_cycles",
    "stall_load_b_cycles",
    "stall_store_cycles",
    "stall_ctrl_cycles",
    "rd_a_bytes",
    "rd_b_bytes",
    "wr_c_bytes",
)

CSR_ADDR_BITS = 6

#: Bit positions inside CTRL and STATUS (the RTL, the C headers and the testbench read these).
CTRL_BITS: dict[str, int] = {"START": 0}
STATUS_BITS: dict[str, int] = {"BUSY": 0, "DONE": 1}


@dataclasses.dataclass(frozen=True)
class Register:
    name: str
    offset: int          # word offset; byte offset = 4 * offset
    access: str          # "r", "w" or "rw"
    doc: str


def _build() -> tuple[Register, ...]:
    regs = [
        Register("CTRL", 0, "w", "write 1 to bit 0: start (ignored while busy)"),
        Register("STATUS", 1, "r", "bit 0 busy, bit 1 done (cleared by start)"),
        Register("ERROR", 2, "r", "ErrorCode of the last run; 0 = none"),
        Register("CONFIG_ID", 3, "r", "AccelConfig.config_id of this instance"),
    ]
    for name in DESC_FIELDS:
        regs.append(Register(f"DESC_{name.upper()}", len(regs), "rw", f"descriptor field {name}"))
    for name in COUNTERS:
        regs.append(Register(f"PERF_{name.upper()}", len(regs), "r", f"counter {name}"))
    assert len(regs) <= 1 << CSR_ADDR_BITS
    return tuple(regs)


REGISTERS: tuple[Register, ...] = _build()
#: Register by name.
REG: dict[str, Register] = {r.name: r for r in REGISTERS}
