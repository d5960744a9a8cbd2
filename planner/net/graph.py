"""A small graph IR of a network: nodes (operators) and tensors, in topological order.

Built from ONNX by :mod:`planner.net.onnx_import`; consumed by quantisation, lowering
(:mod:`planner.net.lower`), the int8 reference (:mod:`planner.net.reference`) and the
host/accelerator assignment (:mod:`planner.net.assign`). Pure Python + numpy, no ONNX import.

Shapes are tuples whose entries are ``int`` (known) or ``str`` (a symbolic dimension that no
given input shape resolved); ``None`` is an unknown rank.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

__all__ = ["ModelError", "Tensor", "Node", "Graph"]


class ModelError(ValueError):
    """A malformed or unsupported model. The message names the node (or graph input) and the
    field at fault."""


Dim = int | str


@dataclasses.dataclass
class Tensor:
    """A value of the graph: a graph input, a node output or a constant (``value`` set)."""

    name: str
    shape: tuple[Dim, ...] | None
    dtype: np.dtype | None
    value: np.ndarray | None = None

    @property
    def is_const(self) -> bool:
        return self.value is not None

    @property
    def is_static(self) -> bool:
        """Known rank and every dimension an int."""
        return self.shape is not None and all(type(d) is int for d in self.shape)

    @property
    def elements(self) -> int | None:
        if not self.is_static:
            return None
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int | None:
        """Bytes of the tensor (``None`` when the shape or dtype is unknown)."""
        n = self.elements
        if n is None or self.dtype is None:
            return None
        return n * np.dtype(self.dtype).itemsize


@dataclasses.dataclass
class Node:
    """One operator. ``inputs`` keeps ONNX positions: an absent optional input is ``""``."""

    name: str
    op_type: str
    inputs: list[str]
    outputs: list[str]
    attrs: dict[str, Any] = dataclasses.field(default_factory=dict)
    domain: str = ""

    def input(self, i: int) -> str:
        """Name of input ``i`` (``""`` when absent)."""
        return self.inputs[i] if i < len(self.inputs) else ""

    def __str__(self) -> str:
        return f"{self.op_type} node {self.name!r}"


@dataclasses.dataclass
class Graph:
    """Nodes in topological order, every tensor by name, the graph's inputs and outputs.

    ``symbols`` maps each symbolic input dimension to the value it was resolved to (seed 004's
    shape derivation: every later shape is an expression of these).
    """

    nodes: list[Node]
    tensors: dict[str, Tensor]
    inputs: list[str]
    outputs: list[str]
    opset: int
    symbols: dict[str, int] = dataclasses.field(default_factory=dict)
    name: str = "network"

    def __post_init__(self):
        self.validate()

    def validate(self) -> None:
        """Raise :class:`ModelError` unless every node input is defined before use, every
        tensor has one producer and every graph output is produced."""
        defined = set(self.inputs) | {t.name for t in self.tensors.values() if t.is_const}
        for name in self.inputs:
            if name not in self.tensors:
                raise ModelError(f"graph input {name!r} has no tensor entry")
        for node in self.nodes:
            for i, name in enumerate(node.inputs):
                if name and name not in defined:
                    raise ModelError(f"{node}: input {i} {name!r} is not a graph input, a "
                                     f"constant or an output of an earlier node")
            for name in node.outputs:
                if not name:
                    continue
                if name in defined:
                    raise ModelError(f"{node}: output {name!r} is already defined")
                if name not in self.tensors:
                    raise ModelError(f"{node}: output {name!r} has no tensor entry")
                defined.add(name)
        for name in self.outputs:
            if name not in defined:
                raise ModelError(f"graph output {name!r} is not produced by any node")

    # -- queries -------------------------------------------------------------------------------

    def producer(self, name: str) -> Node | None:
        return self._producers().get(name)

    def consumers(self, name: str) -> list[Node]:
        return [n for n in self.nodes if name in n.inputs]

    def const(self, name: str) -> np.ndarray | None:
        """The constant value of tensor ``name`` (``None`` for a runtime tensor)."""
        t = self.tensors.get(name) if name else None
        return None if t is None else t.value

    def tensor(self, name: str) -> Tensor:
        try:
            return self.tensors[name]
        except KeyError:
            raise ModelError(f"no tensor named {name!r}") from None

    def node(self, name: str) -> Node:
        for n in self.nodes:
            if n.name == name:
                return n
        raise ModelError(f"no node named {name!r}")

    def _producers(self) -> dict[str, Node]:
        return {out: n for n in self.nodes for out in n.outputs if out}

    def op_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for n in self.nodes:
            counts[n.op_type] = counts.get(n.op_type, 0) + 1
        return counts
