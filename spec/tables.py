"""The convolution run-table entry (docs/conv_tables.md): one 64-bit word per B-load run.

Fields from bit 0 up, in order; :mod:`planner.offsets` packs them with numpy, and
:class:`hw.addrgen.AddrGen` reads them through an ``amaranth.lib.data`` view of the same list.
"""

from __future__ import annotations

__all__ = ["RUN_ENTRY_FIELDS", "RUN_ENTRY_BITS", "run_field_shift", "run_field_bits"]

#: ``(name, bits)`` from the least significant bit: the run's base offset, its first lane and
#: lane count within the lane group, the byte stride between its lanes, and the last-run flag
#: of the lane group.
RUN_ENTRY_FIELDS: tuple[tuple[str, int], ...] = (
    ("base", 32), ("lane_lo", 8), ("lane_cnt", 8), ("stride", 15), ("last", 1))
RUN_ENTRY_BITS = sum(bits for _, bits in RUN_ENTRY_FIELDS)


def run_field_shift(name: str) -> int:
    """Bit position of field ``name`` in a run entry."""
    shift = 0
    for field, bits in RUN_ENTRY_FIELDS:
        if field == name:
            return shift
        shift += bits
    raise KeyError(f"no run-entry field {name!r}; fields are "
                   f"{', '.join(f for f, _ in RUN_ENTRY_FIELDS)}")


def run_field_bits(name: str) -> int:
    """Width of field ``name`` in a run entry."""
    return dict(RUN_ENTRY_FIELDS)[name]
