"""Memory initialisers at the speed of integer formatting in Amaranth 0.5's RTLIL backend.

Amaranth 0.5 (``amaranth.back.rtlil.ModuleEmitter.emit_memory``) builds each memory's
``$meminit_v2`` ``DATA`` constant one net object per bit, then joins the bits back into a
string: for the ``default`` preset's 832 KiB of on-chip memories that is 6.6 million bits per
conversion and about half of the Verilog generation time (docs/simulation.md). :func:`fast_meminit`
replaces that one method, for the duration of a ``with`` block, by one that formats the same
constant from the initial words directly; everything else (the cell, its parameters, the
Verilog Yosys writes from it) is the backend's own. ``tests/hw/test_fastinit.py`` checks that
conversions with and without it are byte-identical. On any other Amaranth version, or if the
backend's method has changed, it leaves the backend alone.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect

from amaranth.back import rtlil as _rtlil
from amaranth.hdl import _nir

__all__ = ["fast_meminit", "PATCHED_SOURCE_SHA256"]

#: SHA-256 of the source of the method replaced, as in Amaranth 0.5.10: any other source is
#: left alone, since the replacement is only known to give the same output as that one.
PATCHED_SOURCE_SHA256 = "181b0bb8f5d58042ec280b2b87f1d05a9166fb30057897c290a7f9707d0704a2"


def _emit_memory(self, cell_idx, cell):
    """The backend's ``emit_memory`` with the ``DATA`` constant formatted from ``cell.init``:
    row 0's bit 0 is the least significant bit, as the original's bit-by-bit sigspec."""
    memory_info = self.memories[cell_idx]
    width, depth = cell.width, cell.depth
    mask = (1 << width) - 1
    rows = [int(row) & mask for row in cell.init]
    assert len(rows) == depth
    if any(rows):
        bits = "".join(format(row, f"0{width}b") for row in reversed(rows))
    else:
        bits = "0" * (width * depth)
    self.builder.cell("$meminit_v2", ports={
        "ADDR": self.sigspec(),
        "DATA": f"{width * depth}'{bits}",
        "EN": self.sigspec(_nir.Value.ones(cell.width)),
    }, parameters={
        "MEMID": memory_info.memid,
        "ABITS": 0,
        "WIDTH": cell.width,
        "WORDS": cell.depth,
        "PRIORITY": 0,
    }, src_loc=cell.src_loc)


def _source_sha256() -> str | None:
    method = getattr(getattr(_rtlil, "ModuleEmitter", None), "emit_memory", None)
    if method is None:
        return None
    return hashlib.sha256(inspect.getsource(method).encode()).hexdigest()


@contextlib.contextmanager
def fast_meminit():
    """Within the block, Amaranth's RTLIL backend formats memory initialisers directly (when
    its ``emit_memory`` is the one this module knows); otherwise a no-op."""
    if _source_sha256() != PATCHED_SOURCE_SHA256:
        yield False
        return
    original = _rtlil.ModuleEmitter.emit_memory
    _rtlil.ModuleEmitter.emit_memory = _emit_memory
    try:
        yield True
    finally:
        _rtlil.ModuleEmitter.emit_memory = original
