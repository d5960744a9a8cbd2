"""The control/status register map: one list that the RTL, the testbenches and the C-header
generator all walk. Imports nothing from Amaranth; no register offset is typed anywhere else.
"""

from __future__ import annotations

import dataclasses

from .layouts import COUNTERS, LAYER_WORDS

__all__ = ["Register", "REGISTERS", "COUNTERS", "REG", "CSR_ADDR_BITS", "CSR_READ_LATENCY",
           "CSR_WRITE_LATENCY",
           "CTRL_BITS", "STATUS_BITS", "record_register"]


CSR_ADDR_BITS = 6
#: Clock edges from a CSR read's ``addr`` to its ``rdata``: the address decoded into one select
#: flip-flop per register, an AND-OR stage per group of registers (beside them), then the OR of
#: the groups (so no cycle of the read mux spans the chip; the whole design's slowest path on
#: the ECP5 more than once).
CSR_READ_LATENCY = 3
#: Clock edges from a CSR write (``we`` high) to the register holding the new value (and, for
#: ``CTRL``, to the start): the write is decoded into one strobe per register, registered, then
#: applied (no cycle spans bus inputs -> address compare -> start -> every counter's reset). A
#: write is ignored when the accelerator is busy in the cycle it is applied.
CSR_WRITE_LATENCY = 1

#: Bit positions inside CTRL and STATUS (the RTL, the C headers and the testbench read these).
CTRL_BITS: dict[str, int] = {"START": 0, "RUN_IMAGE": 1}
STATUS_BITS: dict[str, int] = {"BUSY": 0, "DONE": 1, "IMAGE": 2}


def record_register(field: str) -> str:
    """The register holding layer-record field ``field`` (a :data:`spec.layouts.LAYER_WORDS` name):
    ``DESC_<X>`` for descriptor words, ``LAYER_<X>`` for the rest."""
    if field.startswith("desc_"):
        return f"DESC_{field[len('desc_'):].upper()}"
    return f"LAYER_{field.upper()}"


@dataclasses.dataclass(frozen=True)
class Register:
    name: str
    offset: int          # word offset; byte offset = 4 * offset
    access: str          # "r", "w" or "rw"
    doc: str


def _build() -> tuple[Register, ...]:
    regs = [
        Register("CTRL", 0, "w", "bit 0 START: run the layer in the record registers; bit 1 "
                 "RUN_IMAGE: run the image at IMAGE_ADDR (both ignored while busy)"),
        Register("STATUS", 1, "r", "bit 0 busy, bit 1 done (cleared by start), bit 2 the last "
                 "run was an image run"),
        Register("ERROR", 2, "r", "ErrorCode of the last run; 0 = none"),
        Register("CONFIG_ID", 3, "r", "AccelConfig.config_id of this instance"),
        Register("IMAGE_ADDR", 4, "rw", "device address of the image RUN_IMAGE runs"),
        Register("LAYER_INDEX", 5, "r", "image runs: the layer running, or the one that failed"),
    ]
    for name in LAYER_WORDS:
        what = "descriptor field" if name.startswith("desc_") else "layer record field"
        regs.append(Register(record_register(name), len(regs), "rw", f"{what} {name} (image "
                             "runs load it from each record)"))
    for name in COUNTERS:
        regs.append(Register(f"PERF_{name.upper()}", len(regs), "r",
                             f"counter {name} (of the layer, or of the whole image run)"))
    assert len(regs) <= 1 << CSR_ADDR_BITS
    return tuple(regs)


REGISTERS: tuple[Register, ...] = _build()
#: Register by name.
REG: dict[str, Register] = {r.name: r for r in REGISTERS}
