"""Workload files (``/work/shared/workloads/*.json`` format) and per-layer GEMM lists.

A file is ``{"network", "layers": [...]}``; a layer is ``{"kind": "gemm", "M", "K", "N",
"count"}`` or ``{"kind": "conv", "N", "C", "H", "W", "K", "R", "S", "stride_h", "stride_w",
"pad_top", "pad_left", "pad_bottom", "pad_right", "dilation_h", "dilation_w", "groups", ["P",
"Q"], "count"}``, each with an optional ``"name"``. Unknown or missing keys, duplicate keys,
a ``P``/``Q`` that disagrees with the shape, a name that is not a non-empty string, a count
outside ``[1, MAX_COUNT]`` and a file without layers are refused with the layer (and the file)
named.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from spec.config import loads_unique

from .shapes import ConvShape, GemmShape

__all__ = ["Layer", "Workload", "load_workload", "parse_workload", "layer_gemm", "MAX_COUNT"]

#: The most times a workload may say a layer runs (a 32-bit signed count; more is a mistake)
MAX_COUNT = 2**31 - 1

_CONV_KEYS = {"N": "batch", "C": "in_channels", "H": "height", "W": "width",
              "K": "out_channels", "R": "kernel_h", "S": "kernel_w", "stride_h": "stride_h",
              "stride_w": "stride_w", "pad_top": "pad_top", "pad_left": "pad_left",
              "pad_bottom": "pad_bottom", "pad_right": "pad_right",
              "dilation_h": "dilation_h", "dilation_w": "dilation_w", "groups": "groups"}
_CONV_OPTIONAL = {"stride_h", "stride_w", "pad_top", "pad_left", "pad_bottom", "pad_right",
                  "dilation_h", "dilation_w", "groups"}


@dataclasses.dataclass(frozen=True)
class Layer:
    """One layer: its shape and how many times the network runs it."""

    name: str
    shape: GemmShape | ConvShape
    count: int = 1


@dataclasses.dataclass(frozen=True)
class Workload:
    network: str
    layers: tuple[Layer, ...]


def layer_gemm(shape: GemmShape | ConvShape) -> tuple[GemmShape, int, int | None]:
    """``(gemm, instances, b_bytes)``: a conv is ``groups`` GEMMs whose B load is the input."""
    if isinstance(shape, ConvShape):
        return shape.gemm, shape.groups, shape.b_tensor_bytes
    return shape, 1, None


def _parse_layer(raw: dict, index: int) -> Layer:
    if not isinstance(raw, dict):
        raise ValueError(f"workload layer {index} must be an object with kind 'gemm' or "
                         f"'conv', not {type(raw).__name__} {raw!r}")
    name = raw.get("name", f"layer{index}")
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"workload layer {index}: name must be a non-empty string, not "
                         f"{name!r}")
    where = f"workload layer {index} ({name})"
    kind = raw.get("kind")
    count = raw.get("count", 1)
    if type(count) is not int or not 1 <= count <= MAX_COUNT:
        raise ValueError(f"{where}: count must be an int in [1, {MAX_COUNT}], not {count!r}")
    meta = {"name", "kind", "count"}
    if kind == "gemm":
        keys = {"M", "K", "N"}
        extra, missing = set(raw) - keys - meta, keys - set(raw)
        if extra or missing:
            raise ValueError(f"{where}: gemm layers need exactly M, K, N (missing "
                             f"{sorted(missing)}, unknown {sorted(extra)})")
        try:
            return Layer(name, GemmShape(raw["M"], raw["K"], raw["N"]), count)
        except ValueError as err:
            raise ValueError(f"{where}: {err}") from None
    if kind == "conv":
        extra = set(raw) - set(_CONV_KEYS) - meta - {"P", "Q"}
        missing = set(_CONV_KEYS) - _CONV_OPTIONAL - set(raw)
        if extra or missing:
            raise ValueError(f"{where}: conv layer has unknown keys {sorted(extra)} / misses "
                             f"{sorted(missing)}; keys are N, C, H, W, K, R, S (required), "
                             f"{', '.join(k for k in _CONV_KEYS if k in _CONV_OPTIONAL)}, P, Q "
                             f"and name, kind, count")
        try:
            shape = ConvShape(**{_CONV_KEYS[k]: v for k, v in raw.items() if k in _CONV_KEYS})
        except ValueError as err:
            raise ValueError(f"{where}: {err}") from None
        for key, value in (("P", shape.out_h), ("Q", shape.out_w)):
            if key in raw and (type(raw[key]) is not int or raw[key] != value):
                raise ValueError(f"{where}: {key}={raw[key]!r} disagrees with the shape (the "
                                 f"int {value})")
        return Layer(name, shape, count)
    raise ValueError(f"{where}: kind must be 'gemm' or 'conv', not {kind!r}")


def parse_workload(text: str, default_name: str = "workload") -> Workload:
    """Parse workload JSON text (duplicate keys refused)."""
    data = loads_unique(text, lambda key: ValueError(f"duplicate key {key!r} in workload JSON"))
    if not isinstance(data, dict) or not isinstance(data.get("layers"), list):
        raise ValueError("workload JSON must be an object with a 'layers' list")
    if not data["layers"]:
        raise ValueError("workload has no layers (its 'layers' list is empty)")
    layers = tuple(_parse_layer(raw, i) for i, raw in enumerate(data["layers"]))
    return Workload(str(data.get("network", default_name)), layers)


def load_workload(path: str | Path) -> Workload:
    """:func:`parse_workload` of a file (UTF-8, with or without a byte-order mark); its
    ``ValueError`` names the file."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as err:
        raise ValueError(f"{path}: not a workload JSON file (not UTF-8 text: {err})") from None
    try:
        return parse_workload(text, path.stem)
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: not a workload JSON file ({err})") from None
    except ValueError as err:
        raise ValueError(f"{path}: {err}") from None
