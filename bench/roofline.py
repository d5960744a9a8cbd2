"""Roofline bounds of one layer on one config: compute and per-port memory terms.

The accelerator has three memory ports of separate bandwidth (A loads, B loads, C stores;
``AccelConfig.*_port_bytes_per_cycle``), so a layer cannot finish before the slowest of

* ``macs / (array_rows * array_cols)`` cycles of compute, and
* ``bytes_p / bw_p`` cycles on each port ``p``.

The bound is the largest of these four terms; the efficiency of a run is ``bound / measured
cycles``. Two byte counts are used:

* **compulsory**: each operand read once and the int32 output written once (A = weights,
  B = the input tensor for a convolution, ``k*n`` for a GEMM; C = ``m*n*4`` per group). This is
  the bound for any tiling: the roofline proper.
* **traffic**: the bytes the run moved (the RTL's ``rd_a_bytes``/``rd_b_bytes``/``wr_c_bytes``
  counters, reloads and whole beats included). This is the bound for the chosen tiling.
"""

from __future__ import annotations

import dataclasses

from spec.config import AccelConfig
from planner.shapes import ConvShape, GemmShape

__all__ = ["PORTS", "Bound", "compulsory_bytes", "bound", "roofline"]

#: Port name -> (counter of its bytes, config field of its bandwidth).
PORTS: dict[str, tuple[str, str]] = {
    "a": ("rd_a_bytes", "a_port_bytes_per_cycle"),
    "b": ("rd_b_bytes", "b_port_bytes_per_cycle"),
    "c": ("wr_c_bytes", "c_port_bytes_per_cycle"),
}


@dataclasses.dataclass(frozen=True)
class Bound:
    """Lower bound on a layer's cycles. ``terms_cycles`` has ``compute``, ``a``, ``b``, ``c``."""

    terms_cycles: dict[str, float]

    @property
    def cycles(self) -> float:
        return max(self.terms_cycles.values())

    @property
    def binding(self) -> str:
        """The term that sets the bound (``compute`` on ties)."""
        return max(self.terms_cycles, key=lambda name: (self.terms_cycles[name],
                                                          name == "compute"))

    def as_dict(self) -> dict:
        return {"cycles": self.cycles, "binding": self.binding,
                "terms_cycles": dict(self.terms_cycles)}


def compulsory_bytes(shape: GemmShape | ConvShape) -> dict[str, int]:
    """Bytes each port moves when every operand is read once and the int32 output written once."""
    if isinstance(shape, ConvShape):
        g = shape.gemm
        return {"a": shape.groups * g.m * g.k, "b": shape.groups * shape.b_tensor_bytes,
                "c": shape.groups * g.m * g.n * 4}
    return {"a": shape.m * shape.k, "b": shape.k * shape.n, "c": shape.m * shape.n * 4}


def bound(macs: int, port_bytes: dict[str, int], cfg: AccelConfig) -> Bound:
    """The roofline bound of ``macs`` with ``port_bytes`` (keys ``a``, ``b``, ``c``) on ``cfg``."""
    terms = {"compute": macs / cfg.macs_per_cycle}
    for port, (_, bw_field) in PORTS.items():
        terms[port] = port_bytes[port] / getattr(cfg, bw_field)
    return Bound(terms)


def roofline(shape: GemmShape | ConvShape, counters: dict[str, int], cfg: AccelConfig) -> dict:
    """Both bounds of a measured layer and the run's efficiency against each.

    ``counters`` holds the RTL counters of the run (``total_cycles`` and the byte counters).
    """
    macs = shape.macs
    compulsory = bound(macs, compulsory_bytes(shape), cfg)
    traffic = bound(macs, {p: counters[name] for p, (name, _) in PORTS.items()}, cfg)
    cycles = counters["total_cycles"]
    return {"compulsory": {**compulsory.as_dict(), "efficiency": compulsory.cycles / cycles},
            "traffic": {**traffic.as_dict(), "efficiency": traffic.cycles / cycles}}
