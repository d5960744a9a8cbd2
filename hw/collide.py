"""Read/write collisions of the on-chip memories, made visible in simulation.

Every memory of the design has synchronous, non-transparent read ports: in the RTL (and in
every simulator) a read of the address a write port writes in the same cycle returns the old
data. An FPGA block RAM does not promise that across its two ports, and the ECP5 flow tells
Yosys not to emulate it (``no_rw_check``, :mod:`bench.fpga`): the design must never *use* the
data of such a read. :func:`read_data` is how the RTL takes a read port's data; in a build
elaborated under :func:`poison_collisions` it returns the data inverted (every bit wrong) from
the cycle after a read that collided with a write until the port's next read, so a simulation
of that build (``hw.build.emit(cfg, poison_collisions=True)``, ``tests/sim/test_collisions.py``)
gives wrong results wherever such data is used. Outside the ``with`` block, :func:`read_data`
is ``port.data`` and the generated Verilog is unchanged.
"""

from __future__ import annotations

import contextlib
import contextvars

from amaranth.hdl import Cat, Module, Mux, Signal, Value

__all__ = ["poison_collisions", "read_data"]

_POISON = contextvars.ContextVar("tessera_poison_collisions", default=False)


@contextlib.contextmanager
def poison_collisions():
    """Elaborate inside this block to build the poisoned read data of :func:`read_data`."""
    token = _POISON.set(True)
    try:
        yield
    finally:
        _POISON.reset(token)


def read_data(m: Module, port, writes) -> Value:
    """The data of synchronous read ``port`` (``lib.memory`` read port, domain ``sync``), for
    the design to use; ``writes`` are the memory's write ports.

    Poisoned (only under :func:`poison_collisions`): when the port reads (``en``) an address
    that one of ``writes`` writes in the same cycle (any of its byte enables), the data is
    inverted until the port's next read."""
    if not _POISON.get():
        return port.data
    if not writes:
        raise ValueError("read_data: a memory without write ports has no collisions to poison")
    hit = Signal(name="rw_collision")
    with m.If(port.en):
        m.d.sync += hit.eq(Cat(w.en.any() & (w.addr == port.addr) for w in writes).any())
    return Mux(hit, ~port.data, port.data)
