"""Compile a lowered network (:class:`planner.net.lower.Lowered`) into *segments*: maximal
runs of consecutive accelerator layers, each one firmware image (:class:`firmware.builder.
ImageBuilder`), with the host ops between them. The result, :class:`CompiledNetwork`, is saved as
one ``.tsr`` file (docs/networks.md, "Compiled networks").

Steps, in execution order (:attr:`CompiledNetwork.steps`):

* ``host``: a host op (numpy, :class:`planner.net.reference.HostExecutor`);
* ``host_layer``: an accelerator layer the hardware cannot run (grouped convolution, too many
  output channels, tables past the on-chip capacity, ...), run on the host by the bit-exact
  integer reference (:func:`planner.net.reference.run_layer`); ``reason`` says why;
* ``segment``: one image of conv / fc layers. Tensors produced and consumed inside the segment
  stay in device memory in the layouts the builder documents: a convolution's input is padded
  NCHW (its halo holding the input zero point, written by the host before the run, the interior
  written by the producing convolution), a fully connected layer's input and output are
  features x tokens row-major int8. The host writes the segment's inputs, runs the image (one
  start, one done) and reads back every tensor a later step or the graph output needs;
* ``gemm``: an activation x activation GEMM (attention). Both operands are run-time tensors, so
  its image is built at run time (:func:`build_gemm_image`): the left operand becomes the A
  (weights) operand and zero points fold exactly as ``tb/qlinear.py`` does (``-zb * rowsum(a) +
  K*za*zb`` into the bias, ``-za * colsum(b)`` by extending K with copies of ``b`` whose weights
  are the int8 parts of ``-za``), so the hardware requantises and no host arithmetic touches the
  result;
* ``ksplit``: a convolution with more taps per group than the offset table holds
  (``conv_offset_entries``; ResNet-50's 512-channel 3x3 layers on ``small`` and ``fpga``). Its
  image, built at run time from its input (:func:`build_ksplit_image`), runs one convolution per
  K part (:func:`planner.conv.k_parts`: slices of input channels) with int32 output; the host
  adds the parts' partial sums and requantises them
  (:func:`planner.net.reference.requantise_conv`), the same arithmetic as the post-processor's.

A tensor that two layers of one segment need in different layouts (a conv output read by a
fully connected layer, two convolutions with different padding) ends the segment: the next one
gets it from the host. A segment whose image does not fit device memory is split in two.
"""

from __future__ import annotations

import dataclasses
import heapq
import io
import json
import re
import zipfile
import zlib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np

from firmware.builder import ImageBuilder, Requant, image_overhead
from firmware.image import ImageError
from firmware.runtime import image_budget_cycles
from planner.fusion import channels, fusible_pairs, fusion_op
from planner.net.assign import FunctionLibrary, Thresholds, decide, one_line
from planner.net.graph import Graph, ModelError, Node, Tensor
from planner.dwcost import (block_channels, channel_chunks, channel_multiplier, is_depthwise,
                             mesh_fits, mesh_odd, mesh_refusal)
from planner.net.lower import AccelLayer, HostOp, Lowered
from planner import DATA_FRACTIONS, runs_in_k_parts
from planner.conv import k_part_shape, k_parts
from planner.net.reference import _from_int8, _to_int8
from planner.plan import SHAPE_STRATEGIES
from planner.zero_points import int8_parts
from planner.shapes import ConvShape, GemmShape
from spec.config import AccelConfig, require_config
from spec.layouts import OpKind, PostMode

from .tsr_onnx import restore_initializers, share_initializers

__all__ = ["TensorBuffer", "LayerRecord", "Segment", "Step", "CompiledNetwork", "compile_network",
           "COMPILE_STRATEGIES", "check_strategy", "build_gemm_image", "build_ksplit_image",
           "ksplit_accumulators", "ksplit_predicted_cycles", "k_split", "CompileError",
           "TSR_FORMAT", "TSR_VERSION", "TSR_READS", "on_mesh", "OnProgress", "progress",
           "planning_progress"]

TSR_FORMAT = "tessera-network"
#: The version :meth:`CompiledNetwork.save` writes. 2: ``model.onnx``'s large initialisers refer
#: to the ``arrays/I.npy`` members holding the same bytes (:mod:`flow.tsr_onnx`).
TSR_VERSION = 2
#: The versions :meth:`CompiledNetwork.load` reads (1: ``model.onnx`` holds its own data).
TSR_READS = (1, 2)

#: ``on_event(event)``: what a long compilation is doing, for progress displays (``tessera
#: compile``): events of :func:`progress`
OnProgress = Callable[[dict], None]


def progress(on_event: OnProgress | None, what: str, done: int = 0,
             total: int | None = None) -> None:
    """Send ``{"event": "progress", "what", "done", "total"}`` to ``on_event`` (if any):
    ``done`` of ``total`` parts of the stage ``what`` are finished (``total`` None: a stage
    not counted in parts)."""
    if on_event is not None:
        on_event({"event": "progress", "what": what, "done": done, "total": total})


def planning_progress(on_event: OnProgress | None) -> Callable[[int, int], None]:
    """``on_layer(done, total)`` for :func:`planner.net.assign.analyse` (and ``decide``,
    ``explain``): a "planning layers" :func:`progress` event to ``on_event`` per layer."""
    return lambda done, total: progress(on_event, "planning layers", done, total)


class CompileError(ModelError):
    """The network cannot be compiled (the message names the layer or tensor and why), or a
    ``.tsr`` file is not a compiled network."""


# -- device buffers --------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class TensorBuffer:
    """One tensor in device memory.

    ``layout``: ``nchw`` (NCHW, image after image, each channel ``(H + pads[0] + pads[2]) x
    (W + pads[1] + pads[3])`` with the halo holding ``halo``) or ``fm`` (features x tokens: the tensor
    ``(..., K)`` as ``K`` rows of ``tokens = prod(...)`` int8, i.e. transposed) or ``rowmajor``
    (the tensor as it is, e.g. an (M x N) GEMM output). ``offset`` is
    128 for a uint8 tensor (stored as ``x - 128``)."""

    tensor: str
    addr: int
    nbytes: int
    layout: str
    shape: tuple[int, ...]
    pads: tuple[int, int, int, int] = (0, 0, 0, 0)
    halo: int = 0
    offset: int = 0

    #: the layouts :meth:`encode` and :meth:`decode` know
    LAYOUTS = ("nchw", "fm", "rowmajor")

    def __post_init__(self):
        # a .tsr's buffers come from a file: a wrong one would write past a buffer or
        # reorder a tensor silently, so each field is checked (ValueError naming it)
        def ints(values, what: str, lo: int, hi: int | None = None) -> None:
            if not all(type(v) is int and v >= lo and (hi is None or v <= hi) for v in values):
                span = f">= {lo}" if hi is None else f"in [{lo}, {hi}]"
                raise ValueError(f"buffer {self.tensor!r}: {what} must be ints {span}, not "
                                 f"{values!r}")
        if not isinstance(self.tensor, str):
            raise ValueError(f"buffer tensor must be a name, not {self.tensor!r}")
        if self.layout not in self.LAYOUTS:
            raise ValueError(f"buffer {self.tensor!r}: layout must be one of "
                             f"{', '.join(self.LAYOUTS)}, not {self.layout!r}")
        ints([self.addr], "addr", 0)
        if not isinstance(self.shape, tuple) or not self.shape or (
                self.layout == "nchw" and len(self.shape) != 4):
            raise ValueError(f"buffer {self.tensor!r}: shape {self.shape!r} is not a "
                             f"{'4-d (N, C, H, W)' if self.layout == 'nchw' else 'non-empty'} "
                             f"tuple")
        ints(self.shape, "shape", 1)
        if not isinstance(self.pads, tuple) or len(self.pads) != 4:
            raise ValueError(f"buffer {self.tensor!r}: pads must be 4 ints (top, left, bottom, "
                             f"right), not {self.pads!r}")
        ints(self.pads, "pads", 0)
        ints([self.halo], "halo", -128, 127)
        if self.offset not in (0, 128) or type(self.offset) is not int:
            raise ValueError(f"buffer {self.tensor!r}: offset must be 0 or 128 (a uint8 "
                             f"tensor), not {self.offset!r}")
        want = _nbytes(self.layout, self.shape, self.pads)
        if self.nbytes != want or type(self.nbytes) is not int:
            raise ValueError(f"buffer {self.tensor!r}: nbytes={self.nbytes!r}, but its layout "
                             f"{self.layout}, shape {list(self.shape)} and pads "
                             f"{list(self.pads)} take {want}")

    @property
    def padded_hw(self) -> tuple[int, int]:
        _, _, h, w = self.shape
        t, l, b, r = self.pads
        return h + t + b, w + l + r

    @property
    def needs_fill(self) -> bool:
        """A padded buffer whose halo the host writes before the run."""
        return self.layout == "nchw" and any(self.pads)

    def encode(self, x: np.ndarray) -> bytes:
        """Device bytes of tensor ``x`` (int8, or uint8 with ``offset``)."""

        x8 = _to_int8(np.asarray(x), self.offset, f"tensor {self.tensor!r}")
        if tuple(x8.shape) != tuple(self.shape):
            raise ValueError(f"tensor {self.tensor!r}: shape {x8.shape} != {self.shape}")
        if self.layout == "nchw":
            t, l, b, r = self.pads
            out = np.pad(x8, ((0, 0), (0, 0), (t, b), (l, r)), constant_values=self.halo)
        elif self.layout == "rowmajor":
            out = x8
        else:
            out = x8.reshape(-1, self.shape[-1]).T
        return np.ascontiguousarray(out, np.int8).tobytes()

    def fill(self) -> bytes:
        """The halo pre-fill: the whole buffer holding ``halo``."""
        return np.full(self.nbytes, self.halo, np.int8).tobytes()

    def decode(self, raw: bytes) -> np.ndarray:
        """Inverse of :meth:`encode`: the tensor (int8, or uint8 with ``offset``)."""

        a = np.frombuffer(raw, np.int8, self.nbytes)
        if self.layout == "nchw":
            n, c = self.shape[:2]
            hp, wp = self.padded_hw
            t, l, _, _ = self.pads
            y = a.reshape(n, c, hp, wp)[:, :, t:t + self.shape[2], l:l + self.shape[3]]
        elif self.layout == "rowmajor":
            y = a.reshape(self.shape)
        else:
            k = self.shape[-1]
            y = a.reshape(k, -1).T.reshape(self.shape)
        return _from_int8(np.ascontiguousarray(y), self.offset)

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping) -> "TensorBuffer":
        if not isinstance(d, Mapping) or not isinstance(d.get("shape"), list) \
                or not isinstance(d.get("pads"), list):
            raise ValueError(f"buffer {d!r} is not an object with shape and pads lists")
        return cls(**{**d, "shape": tuple(d["shape"]), "pads": tuple(d["pads"])})


def _nbytes(layout: str, shape: Sequence[int], pads=(0, 0, 0, 0)) -> int:
    if layout == "nchw":
        n, c, h, w = shape
        return n * c * (h + pads[0] + pads[2]) * (w + pads[1] + pads[3])
    return int(np.prod(shape))


# -- what the hardware can run ---------------------------------------------------------------------

def _post_mode(layer: AccelLayer):

    return {"none": PostMode.NONE, "relu": PostMode.RELU, "relu6": PostMode.RELU6,
            "clip": PostMode.CLAMP}[layer.activation]


def _requant(layer: AccelLayer):

    return Requant(multiplier=np.asarray(layer.multiplier, np.int32),
                   shift=np.asarray(layer.shift, np.int32), zero_point=layer.out_zero_point,
                   act_min=layer.act_min, act_max=layer.act_max, post_mode=_post_mode(layer))


# -- segments --------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class LayerRecord:
    """One record of an image: the layer it belongs to, its GEMM dimensions (a depthwise
    record: channels, height, width), the planner's predicted cycles (register-mode run of its
    descriptor) and, when they are not ``m * k * n``, its useful MACs (``useful_macs``:
    :attr:`firmware.builder.BuiltLayer.macs`)."""

    layer: str
    name: str
    m: int
    k: int
    n: int
    predicted_cycles: int
    useful_macs: int = 0

    @property
    def macs(self) -> int:
        return self.useful_macs or self.m * self.k * self.n


@dataclasses.dataclass
class Segment:
    """One image and its tensors in device memory: ``inputs`` the host writes, ``fills`` (padded
    buffers of tensors produced inside the segment) whose halo it writes, ``outputs`` it reads
    back after the run."""

    index: int
    layers: list[str]
    image: bytes
    inputs: list[TensorBuffer]
    fills: list[TensorBuffer]
    outputs: list[TensorBuffer]
    records: list[LayerRecord]
    #: Predicted cycles the image run spends outside its layers (header, CRC, check pass,
    #: record fetches, statistics: firmware.builder.image_overhead, exact on the RTL).
    overhead_cycles: int = 0
    #: Fused pairs (producer, consumer, tensor): the tensor stays in the local buffer
    #: (compile_network(fuse=True), docs/fusion.md).
    fused: list[tuple[str, str, str]] = dataclasses.field(default_factory=list)
    #: Candidate pairs left unfused (producer, consumer, reason): those the hardware or the
    #: local buffer cannot serve (:func:`planner.fusion.fusible_pairs`' refusals), then those
    #: whose segment is predicted faster without them (compile_network(fuse=True) only).
    unfused: list[tuple[str, str, str]] = dataclasses.field(default_factory=list)

    @property
    def predicted_cycles(self) -> int:
        return sum(r.predicted_cycles for r in self.records) + self.overhead_cycles

    @property
    def budget_cycles(self) -> int:
        return image_budget_cycles(self.predicted_cycles, len(self.image), len(self.records))


@dataclasses.dataclass
class Step:
    """One step of a compiled network (module docstring): ``kind`` is ``host``,
    ``host_layer``, ``segment``, ``gemm`` or ``ksplit``."""

    kind: str
    name: str
    node: Node | None = None            # host
    layer: str | None = None            # host_layer, gemm, ksplit
    segment: Segment | None = None      # segment
    reason: str = ""                    # host_layer

    @property
    def layer_names(self) -> list[str]:
        if self.kind == "segment":
            return list(self.segment.layers)
        return [self.layer] if self.layer else []


def _schedule(steps: Sequence, host_layers: Mapping[str, str],
              ksplit: frozenset[str] = frozenset()) -> list:
    """The steps in a topological order that keeps accelerator layers together: whenever a
    conv / fc layer is ready it goes first (lowest original position first), so host ops that
    no pending layer needs (e.g. the dequantisation of a residual branch) move past the run."""

    producer = {o: i for i, s in enumerate(steps) for o in s.outputs}
    deps = [{producer[x] for x in s.inputs if x in producer} for s in steps]
    users: list[list[int]] = [[] for _ in steps]
    for i, d in enumerate(deps):
        for j in d:
            users[j].append(i)
    waiting = [len(d) for d in deps]

    def key(i: int) -> tuple[int, int]:
        s = steps[i]
        accel = isinstance(s, AccelLayer) and s.kind != "gemm" and s.name not in host_layers \
            and s.name not in ksplit
        return (0 if accel else 1, i)

    ready = [key(i) for i, w in enumerate(waiting) if w == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        _, i = heapq.heappop(ready)
        order.append(steps[i])
        for u in users[i]:
            waiting[u] -= 1
            if waiting[u] == 0:
                heapq.heappush(ready, key(u))
    if len(order) != len(steps):
        raise CompileError("the lowered steps have a dependency cycle")
    return order


def _segment_runs(steps: Sequence, host_layers: Mapping[str, str],
                  ksplit: frozenset[str] = frozenset()) -> list:
    """Group the lowered steps: HostOp, ('host_layer', layer), ('gemm', layer), ('ksplit',
    layer) and lists of conv/fc layers that can share an image (module docstring)."""
    out: list = []
    cur: list[AccelLayer] = []
    layouts: dict[str, tuple] = {}      # tensor produced in cur -> layout its consumers need
    producer: dict[str, AccelLayer] = {}

    def close():
        nonlocal cur
        if cur:
            out.append(cur)
        cur = []
        layouts.clear()
        producer.clear()

    for step in steps:
        if isinstance(step, HostOp):
            close()
            out.append(step)
            continue
        if step.name in host_layers:
            close()
            out.append(("host_layer", step))
            continue
        if step.kind == "gemm" or step.name in ksplit:
            close()
            out.append(("gemm" if step.kind == "gemm" else "ksplit", step))
            continue
        want = step.in_layout
        src = producer.get(step.input)
        if src is not None:
            ok = src.kind == step.kind and layouts.get(step.input, want) == want
            if step.kind == "conv" and tuple(src.out_shape) != tuple(step.in_shape):
                ok = False
            if not ok:
                close()
        if step.input in producer:
            layouts[step.input] = want
        cur.append(step)
        producer[step.output] = step
    close()
    return out


class _Fit(Exception):
    """A segment's image or data do not fit device memory (split it)."""


def _build_segment(index: int, layers: list[AccelLayer], reads_after: set[str],
                   cfg: AccelConfig, strategy: str, data_fraction: float,
                   fuse: bool = False, skip: frozenset[str] = frozenset()) -> Segment:
    """One image for ``layers``; raises :class:`_Fit` when it does not fit, ``ValueError`` /
    ``ImageError`` naming the layer when the hardware refuses it. With ``fuse``, the
    intermediates of :func:`fusible_pairs` stay in the local buffer, but for the pairs whose
    producer is in ``skip``."""

    data_addr = int(cfg.dram_bytes * data_fraction) // 64 * 64
    b = ImageBuilder(cfg, data_addr=data_addr, strategy=strategy)

    candidates, refused = fusible_pairs(layers, reads_after, cfg) if fuse else ([], [])
    pairs = [pc for pc in candidates if pc[0].name not in skip]
    local_out = {p.name: (p.output, row) for p, _, row in pairs}
    local_in = {c.name: p.output for p, c, _ in pairs}
    local_at: dict[str, tuple[int, int]] = {}
    produced = {l.output: l for l in layers}
    # layout of every tensor the segment touches: consumers inside decide, else the default
    inner: dict[str, tuple] = {}
    for l in layers:
        if l.input in produced:
            inner[l.input] = l.in_layout
    bufs: dict[tuple, TensorBuffer] = {}

    def buffer(tensor: str, layout: tuple, shape, offset: int) -> TensorBuffer:
        key = (tensor, layout)
        if key not in bufs:
            kind, pads, halo = layout
            nbytes = _nbytes(kind, shape, pads)
            try:
                addr = b.buffer(f"{tensor}@{kind}{''.join(map(str, pads))}", nbytes)
            except ValueError as e:
                raise _Fit(str(e)) from None
            bufs[key] = TensorBuffer(tensor=tensor, addr=addr, nbytes=nbytes, layout=kind,
                                     shape=tuple(shape), pads=tuple(pads), halo=halo,
                                     offset=offset)
        return bufs[key]

    inputs, fills, outputs = [], [], []
    for l in layers:
        if l.name in local_in:              # the consumer of a fused pair: B on chip
            x_local = local_at[local_in[l.name]]
            yb = buffer(l.output, inner.get(l.output, l.out_layout), l.out_shape,
                        l.out_offset)
            if l.output in reads_after and yb not in outputs:
                outputs.append(yb)
            try:
                _add_layer(b, l, None, yb, cfg, x_local=x_local)
            except (ValueError, ImageError) as e:
                raise _Refused(l.name, str(e)) from None
            continue
        if l.input in produced:
            xb = buffer(l.input, l.in_layout, l.in_shape, l.in_offset)
        else:
            xb = buffer(l.input, l.in_layout, l.in_shape, l.in_offset)
            if xb not in inputs:
                inputs.append(xb)
        if l.name in local_out:             # the producer of a fused pair: C on chip
            tensor, row = local_out[l.name]
            try:
                local_at[tensor] = (b.local(f"{tensor}@local",
                                            channels(fusion_op(l)) * row), row)
                _add_layer(b, l, xb, None, cfg, y_local=local_at[tensor])
            except (ValueError, ImageError) as e:
                raise _Refused(l.name, str(e)) from None
            continue
        layout = inner.get(l.output, l.out_layout)
        yb = buffer(l.output, layout, l.out_shape, l.out_offset)
        if yb.needs_fill and yb not in fills:
            fills.append(yb)
        if l.output in reads_after and yb not in outputs:
            outputs.append(yb)
        try:
            _add_layer(b, l, xb, yb, cfg)
        except (ValueError, ImageError) as e:
            raise _Refused(l.name, str(e)) from None
    try:
        blob, built = b.build()
    except ImageError as e:
        if "overlaps the data region" in str(e):
            raise _Fit(str(e)) from None
        named = re.search(r"layer '([^'\[]+)", str(e))
        raise _Refused(named.group(1) if named else None, str(e)) from None
    records = []
    for bl in built:
        owner = bl.name.split("[")[0]
        d = bl.layer.desc
        records.append(LayerRecord(layer=owner, name=bl.name, m=d.m, k=d.k, n=d.n,
                                   predicted_cycles=int(bl.predicted_cycles),
                                   useful_macs=0 if bl.macs == d.m * d.k * d.n else bl.macs))
    return Segment(index=index, layers=[l.name for l in layers], image=blob, inputs=inputs,
                   fills=fills, outputs=outputs, records=records,
                   overhead_cycles=image_overhead(blob, b.cfg),
                   fused=[(p.name, c.name, p.output) for p, c, _ in pairs],
                   unfused=list(refused))


def _add_layer(b, l: AccelLayer, xb: TensorBuffer | None, yb: TensorBuffer | None,
               cfg: AccelConfig, *, x_local: tuple[int, int] | None = None,
               y_local: tuple[int, int] | None = None) -> None:
    """Add ``l`` to builder ``b``: input in ``xb``, output into ``yb``; split into output-channel
    chunks when it has more than ``quant_entries`` channels. ``x_local`` / ``y_local`` =
    ``(address, row bytes)``: the input / output is a fused intermediate in the local buffer
    (one row per channel or feature; fusible_pairs guarantees one chunk, and a 1x1 consumer
    runs as the GEMM it is, since the local buffer serves dense B only)."""

    rq = _requant(l)
    w = np.asarray(l.weights, np.int8)
    bias = np.asarray(l.bias, np.int32)
    m = w.shape[0]
    if y_local is not None:
        addr, row = y_local
        if l.kind == "conv":
            b.conv(l.name, shape=l.shape, weights=w, x_addr=xb.addr, out_addr=addr,
                   out_chan_stride=row, bias=bias, requant=rq)
        else:
            b.gemm(l.name, weights=w, n=l.shape.n, b_addr=xb.addr, b_stride=l.shape.n,
                   out_addr=addr, out_stride=row, bias=bias, requant=rq, op_kind=OpKind.FC)
        return
    if x_local is not None:
        addr, row = x_local
        pixels = l.shape.n if l.kind == "fc" else l.shape.out_h * l.shape.out_w
        b.gemm(l.name, weights=w.reshape(m, -1), n=pixels, b_addr=addr, b_stride=row,
               out_addr=yb.addr, out_stride=pixels, bias=bias, requant=rq,
               op_kind=OpKind.FC if l.kind == "fc" else OpKind.GEMM)
        return
    if l.mesh:
        _add_depthwise(b, l, w, bias, rq, xb, yb, cfg)
        return
    if l.kind == "conv":
        _add_conv(b, l, w, bias, rq, xb, yb, cfg)
        return
    parts = channel_chunks(m, cfg)
    for c0, c1 in parts:
        name = l.name if len(parts) == 1 else f"{l.name}[ch {c0}:{c1}]"
        rqc = dataclasses.replace(rq, multiplier=rq.multiplier[c0:c1], shift=rq.shift[c0:c1])
        rows = l.shape.n
        b.gemm(name, weights=w[c0:c1], n=rows, b_addr=xb.addr, b_stride=rows,
               out_addr=yb.addr + c0 * rows, out_stride=rows, bias=bias[c0:c1],
               requant=rqc, op_kind=OpKind.FC)


def _add_conv(b, l: AccelLayer, w: np.ndarray, bias: np.ndarray, rq, xb: TensorBuffer,
              yb: TensorBuffer, cfg: AccelConfig) -> None:
    """A convolution into padded NCHW ``yb``: one batch-1 ungrouped convolution per image and
    group (its input channels are a contiguous slice of ``xb``, its output channels one of
    ``yb``), each split into output-channel chunks of at most ``quant_entries``; a depthwise
    layer as dense channel blocks instead (:func:`_add_depthwise_blocks`)."""
    s, groups = l.shape, l.shape.groups
    per_out, per_in = s.out_channels // groups, s.in_channels // groups
    hpi, wpi = xb.padded_hw
    hp, wp = yb.padded_hw
    if is_depthwise(s):
        _add_depthwise_blocks(b, l, w, bias, rq, xb, yb, cfg)
        return
    for n in range(s.batch):
        x_img = xb.addr + n * s.in_channels * hpi * wpi
        y_img = yb.addr + n * s.out_channels * hp * wp
        for g in range(groups):
            label = l.name + (f"[n{n}]" if s.batch > 1 else "") + (f"[g{g}]" if groups > 1
                                                                    else "")
            parts = [(g * per_out + c0, g * per_out + c1)
                     for c0, c1 in channel_chunks(per_out, cfg)]
            for c0, c1 in parts:
                name = label if len(parts) == 1 else f"{label}[ch {c0}:{c1}]"
                rqc = dataclasses.replace(rq, multiplier=rq.multiplier[c0:c1],
                                          shift=rq.shift[c0:c1])
                sub = dataclasses.replace(s, in_channels=per_in, out_channels=c1 - c0, groups=1,
                                          batch=1)
                b.conv(name, shape=sub, weights=w[c0:c1],
                       x_addr=x_img + g * per_in * hpi * wpi,
                       out_addr=y_img + c0 * hp * wp + yb.pads[0] * wp + yb.pads[1],
                       out_chan_stride=hp * wp, out_row_stride=None if wp == sub.out_w else wp,
                       bias=bias[c0:c1], requant=rqc)


def _add_depthwise(b, l: AccelLayer, w: np.ndarray, bias: np.ndarray, rq, xb: TensorBuffer,
                   yb: TensorBuffer, cfg: AccelConfig) -> None:
    """A depthwise layer on the mesh (``l.mesh``): one record per image and chunk of at most
    ``quant_entries`` channels, from and into dense NCHW buffers (a stride-2 layer with the
    top / left pad one less, TF "SAME", keeps the odd rows / columns:
    :func:`planner.dwcost.mesh_odd`)."""
    s = l.shape
    odd_rows, odd_cols = mesh_odd(s)
    if xb.pads != (0, 0, 0, 0) or yb.pads != (0, 0, 0, 0):
        raise ValueError(f"{l.name}: a depthwise layer on the mesh reads and writes unpadded "
                         f"NCHW, not input pads {xb.pads} / output pads {yb.pads}")
    plane, out_plane = s.height * s.width, s.out_h * s.out_w
    for n in range(s.batch):
        for c0, c1 in channel_chunks(s.in_channels, cfg):
            name = l.name + (f"[n{n}]" if s.batch > 1 else "") + (
                f"[ch {c0}:{c1}]" if c1 - c0 < s.in_channels else "")
            rqc = dataclasses.replace(rq, multiplier=rq.multiplier[c0:c1],
                                      shift=rq.shift[c0:c1])
            at = n * s.in_channels + c0
            b.depthwise(name, weights=w[c0:c1], h=s.height, w=s.width,
                        x_addr=xb.addr + at * plane, out_addr=yb.addr + at * out_plane,
                        pad_value=l.halo, bias=bias[c0:c1], requant=rqc, stride=s.stride_h,
                        odd_rows=odd_rows, odd_cols=odd_cols)


def _add_depthwise_blocks(b, l: AccelLayer, w: np.ndarray, bias: np.ndarray, rq,
                          xb: TensorBuffer, yb: TensorBuffer, cfg: AccelConfig) -> None:
    """A depthwise layer off the mesh (:func:`planner.dwcost.depthwise_blocks`): per image,
    blocks of ``array_rows`` channels (fewer when their taps exceed the offset table), each a
    dense convolution with diagonal weights over its slice of the padded input, into its slice
    of ``yb``."""
    s = l.shape
    hpi, wpi = xb.padded_hw
    hp, wp = yb.padded_hw
    block = block_channels(cfg, s.kernel_h * s.kernel_w)
    if block == 0:          # (layer_cost refuses such a layer: seed 004 keeps it on the host)
        raise ValueError(f"{l.name}: one channel's {s.kernel_h * s.kernel_w} taps exceed "
                         f"conv_offset_entries={cfg.conv_offset_entries}")
    for n in range(s.batch):
        x_img = xb.addr + n * s.in_channels * hpi * wpi
        y_img = yb.addr + n * s.out_channels * hp * wp
        for c0 in range(0, s.in_channels, block):
            c1 = min(s.in_channels, c0 + block)
            size = c1 - c0
            diag = np.zeros((size, size, s.kernel_h, s.kernel_w), np.int8)
            diag[np.arange(size), np.arange(size)] = w[c0:c1, 0]
            sub = dataclasses.replace(s, in_channels=size, out_channels=size, groups=1,
                                      batch=1)
            name = l.name + (f"[n{n}]" if s.batch > 1 else "") + f"[ch {c0}:{c1}]"
            rqc = dataclasses.replace(rq, multiplier=rq.multiplier[c0:c1],
                                      shift=rq.shift[c0:c1])
            b.conv(name, shape=sub, weights=diag, x_addr=x_img + c0 * hpi * wpi,
                   out_addr=y_img + c0 * hp * wp + yb.pads[0] * wp + yb.pads[1],
                   out_chan_stride=hp * wp, out_row_stride=None if wp == sub.out_w else wp,
                   bias=bias[c0:c1], requant=rqc, diagonal=True)


class _Refused(Exception):
    def __init__(self, layer: str | None, reason: str):
        super().__init__(reason)
        self.layer, self.reason = layer, reason


def _build_fitting(index: int, layers: list[AccelLayer], reads_after: set[str],
                   cfg: AccelConfig, strategy: str, fuse: bool = False) -> list[Segment]:
    """Build ``layers`` as one image, moving the data region up when the image is large; split
    the run in two when it does not fit at all."""
    last = None
    for fraction in DATA_FRACTIONS:
        try:
            seg = _build_segment(index, layers, reads_after, cfg, strategy, fraction, fuse)
        except _Fit as e:
            last = e
            continue
        return [_paying(seg, layers, reads_after, cfg, strategy, fraction)]
    if len(layers) == 1:
        raise _Refused(layers[0].name, f"does not fit device memory ({last})")
    half = len(layers) // 2
    first, second = layers[:half], layers[half:]
    needed = reads_after | {l.input for l in second} | {l.input_b for l in second if l.input_b}
    return (_build_fitting(index, first, needed, cfg, strategy, fuse)
            + _build_fitting(index, second, reads_after, cfg, strategy, fuse))


def _paying(seg: Segment, layers: list[AccelLayer], reads_after: set[str], cfg: AccelConfig,
            strategy: str, fraction: float) -> Segment:
    """``seg`` without the fused pairs that do not pay: each pair whose segment is predicted
    faster unfused (the builder's own predictions, the other pairs fused) is left unfused, as
    seed 003's chain planner refuses a fusion that does not pay
    (:func:`planner.fusion.plan_fusion`). A tie keeps the pair: it saves memory traffic."""
    slower = {}
    for producer, consumer, _ in seg.fused:
        try:
            alone = _build_segment(seg.index, layers, reads_after, cfg, strategy, fraction,
                                   True, frozenset({producer}))
        except (_Fit, _Refused):
            continue
        if alone.predicted_cycles < seg.predicted_cycles:
            slower[producer] = (consumer, seg.predicted_cycles - alone.predicted_cycles)
    if not slower:
        return seg
    try:
        best = _build_segment(seg.index, layers, reads_after, cfg, strategy, fraction, True,
                              frozenset(slower))
    except (_Fit, _Refused):
        return seg
    if best.predicted_cycles >= seg.predicted_cycles:
        return seg
    best.unfused += [(p, c, f"does not pay: the segment is predicted {extra:,} cycles faster "
                            f"unfused") for p, (c, extra) in slower.items()]
    return best


# -- activation x activation GEMMs (built at run time) ---------------------------------------------

def build_gemm_image(layer: AccelLayer, a: np.ndarray, b: np.ndarray, cfg: AccelConfig,
                     strategy: str = "best") -> tuple[Segment, list[tuple[int, bytes]],
                                                      tuple[int, ...]]:
    """The image of activation x activation ``layer`` for operands ``a`` (batch..., M, K) and
    ``b`` (batch..., K, N): one GEMM record per batch entry, requantised by the hardware.
    Returns ``(segment, loads, out_shape)``: the host writes ``loads`` (the extended ``b``)
    before the run and reads ``segment.outputs`` (one (M x N) buffer per batch entry) after."""

    s = layer.shape
    a3 = np.asarray(a, np.int8).reshape(-1, s.m, s.k)
    b3 = np.asarray(b, np.int8).reshape(-1, s.k, s.n)
    if a3.shape[0] != b3.shape[0]:
        raise ValueError(f"{layer.name}: batch {a3.shape[0]} != {b3.shape[0]}")
    za, zb = layer.in_zero_point, layer.b_zero_point
    parts = int8_parts(-za)
    builder = ImageBuilder(cfg, strategy=strategy)
    loads, outputs = [], []
    rq = _requant(layer)
    for t in range(a3.shape[0]):
        a8, b8 = a3[t], b3[t]
        weights = np.concatenate([a8] + [np.full((s.m, s.k), p, np.int8) for p in parts], axis=1)
        b_ext = np.concatenate([b8] * (1 + len(parts)), axis=0)
        bias = (np.asarray(layer.bias, np.int64) - zb * a8.astype(np.int64).sum(axis=1)
                + s.k * za * zb)
        b_addr = builder.buffer(f"b{t}", b_ext.size)
        y_addr = builder.buffer(f"y{t}", s.m * s.n)
        builder.gemm(f"{layer.name}[{t}]", weights=weights, n=s.n, b_addr=b_addr, b_stride=s.n,
                     out_addr=y_addr, out_stride=s.n, bias=bias.astype(np.int32), requant=rq,
                     op_kind=OpKind.GEMM)
        loads.append((b_addr, np.ascontiguousarray(b_ext).tobytes()))
        outputs.append(TensorBuffer(tensor=f"{layer.output}[{t}]", addr=y_addr,
                                    nbytes=s.m * s.n, layout="rowmajor", shape=(s.m, s.n)))
    blob, built = builder.build()
    # the extended K's copies of b fold a zero point: they are not the layer's MACs
    records = [LayerRecord(layer=layer.name, name=bl.name, m=bl.layer.desc.m,
                           k=bl.layer.desc.k, n=bl.layer.desc.n,
                           predicted_cycles=int(bl.predicted_cycles),
                           useful_macs=s.m * s.k * s.n) for bl in built]
    seg = Segment(index=-1, layers=[layer.name], image=blob, inputs=[], fills=[],
                  outputs=outputs, records=records,
                  overhead_cycles=image_overhead(blob, builder.cfg))
    return seg, loads, tuple(layer.out_shape)


# -- convolutions in K parts (built at run time) ---------------------------------------------------

def k_split(layer: AccelLayer, cfg: AccelConfig) -> bool:
    """``layer`` is a convolution the compiler runs in K parts (a ``ksplit`` step:
    :func:`planner.runs_in_k_parts`)."""
    return layer.kind == "conv" and not layer.mesh and runs_in_k_parts(layer.shape, cfg)


def build_ksplit_image(layer: AccelLayer, x: np.ndarray, cfg: AccelConfig,
                       strategy: str = "best", image: int = 0
                       ) -> tuple[Segment, list[tuple[int, bytes]], list[tuple[int, int, int]]]:
    """The image of convolution ``layer`` in K parts (:func:`k_split`) for image ``image`` of
    its input, ``x`` (int8, ``1 x C x H x W``; one run per image keeps the device memory an
    image needs): per group and K part (:func:`planner.conv.k_parts`) one convolution over the
    part's input channels with int32 output (no bias, no requantisation) into a buffer of its
    own. Returns ``(segment, loads, partials)``: the host writes ``loads`` (the input in the
    padded layout, its halo the input zero point) before the run; after it, each partial
    ``(group, addr, nbytes)`` holds the group's ``(K / groups, P, Q)`` little-endian int32
    sums over the part's channels, which the host adds (:func:`ksplit_accumulators`) and
    requantises (:func:`planner.net.reference.requantise_conv`). Raises ``ValueError`` when
    the image does not fit the device memory."""
    s = layer.shape
    x8 = np.asarray(x)
    if x8.dtype != np.int8 or x8.shape != (1, s.in_channels, s.height, s.width):
        raise ValueError(f"{layer.name}: input must be one int8 image of shape "
                         f"{(1, s.in_channels, s.height, s.width)}, not {x8.dtype} "
                         f"{x8.shape}")
    if not 0 <= image < s.batch:
        raise ValueError(f"{layer.name}: image={image} must be in [0, batch={s.batch})")
    parts = k_parts(s, cfg)
    xp = np.pad(x8, ((0, 0), (0, 0), (s.pad_top, s.pad_bottom), (s.pad_left, s.pad_right)),
                constant_values=layer.halo)
    last = None
    for fraction in DATA_FRACTIONS:
        try:
            return _ksplit_image(layer, xp, parts, cfg, strategy, image, fraction)
        except (ValueError, ImageError) as e:
            last = e
    raise ValueError(f"{layer.name}: its K parts' image: {last}") from None


def _ksplit_image(layer: AccelLayer, xp: np.ndarray, parts: list[tuple[int, int]],
                  cfg: AccelConfig, strategy: str, image: int, fraction: float):
    """:func:`build_ksplit_image` with the data region from ``fraction`` of the DRAM."""
    s = layer.shape
    per_out, per_in = s.out_channels // s.groups, s.in_channels // s.groups
    w = np.asarray(layer.weights, np.int8)
    hp, wp = xp.shape[2:]
    pq = s.out_h * s.out_w
    builder = ImageBuilder(cfg, strategy=strategy,
                           data_addr=int(cfg.dram_bytes * fraction) // 64 * 64)
    partials = []
    x_addr = builder.buffer("x", xp.size)
    for g in range(s.groups):
        label = layer.name + (f"[n{image}]" if s.batch > 1 else "") + (
            f"[g{g}]" if s.groups > 1 else "")
        for i, (c0, c1) in enumerate(parts):
            y_addr = builder.buffer(f"part{g}.{i}", 4 * per_out * pq)
            builder.conv(f"{label}[K {c0}:{c1}]", shape=k_part_shape(s, (c0, c1)),
                         weights=np.ascontiguousarray(w[g * per_out:(g + 1) * per_out, c0:c1]),
                         x_addr=x_addr + (g * per_in + c0) * hp * wp,
                         out_addr=y_addr, out_chan_stride=4 * pq)
            partials.append((g, y_addr, 4 * per_out * pq))
    blob, built = builder.build()
    records = [LayerRecord(layer=layer.name, name=bl.name, m=bl.layer.desc.m,
                           k=bl.layer.desc.k, n=bl.layer.desc.n,
                           predicted_cycles=int(bl.predicted_cycles)) for bl in built]
    seg = Segment(index=-1, layers=[layer.name], image=blob, inputs=[], fills=[], outputs=[],
                  records=records, overhead_cycles=image_overhead(blob, builder.cfg))
    return seg, [(x_addr, np.ascontiguousarray(xp).tobytes())], partials


def ksplit_predicted_cycles(layer: AccelLayer, cfg: AccelConfig, strategy: str = "best") -> int:
    """Predicted cycles of a ``ksplit`` layer's image runs, one per image: those of its
    image built from a zero input, whose cycles depend on the shapes only. Raises
    ``ValueError`` when the image does not fit the device memory."""
    s = layer.shape
    x = np.zeros((1, s.in_channels, s.height, s.width), np.int8)
    return s.batch * build_ksplit_image(layer, x, cfg, strategy)[0].predicted_cycles


def ksplit_accumulators(layer: AccelLayer, partials: Sequence[tuple[int, int, bytes]]
                        ) -> np.ndarray:
    """The int32 accumulators ``(N, K, P, Q)`` of a ``ksplit`` layer: the sum of its parts'
    partials, each ``(image, group, raw bytes)`` as :func:`build_ksplit_image` places them,
    wrapping as the hardware's int32 accumulator does."""
    s = layer.shape
    per_out = s.out_channels // s.groups
    acc = np.zeros((s.batch, s.out_channels, s.out_h, s.out_w), np.int64)
    for n, g, raw in partials:
        acc[n, g * per_out:(g + 1) * per_out] += np.frombuffer(raw, "<i4").reshape(
            per_out, s.out_h, s.out_w)
    return ((acc + (1 << 31)) % (1 << 32) - (1 << 31)).astype(np.int32)


# -- the compiled network --------------------------------------------------------------------------

@dataclasses.dataclass
class CompiledNetwork:
    """A network compiled for ``cfg``: steps in execution order, every accelerator layer (also
    those run on the host or built at run time) by name, the constants host ops read, the graph
    inputs/outputs, and optionally the quantised ONNX model (for onnxruntime comparisons)."""

    cfg: AccelConfig
    steps: list[Step]
    layers: dict[str, AccelLayer]
    constants: dict[str, np.ndarray]
    inputs: dict[str, dict]            # name -> {"shape": [...], "dtype": "float32"}
    outputs: list[str]
    opset: int
    strategy: str = "best"
    name: str = "network"
    qmodel: bytes | None = None
    #: operators of the accelerator's kinds (Conv, Gemm, MatMul, QLinear*) that match no
    #: accelerator layer and run as host ops, and why (:attr:`planner.net.lower.Lowered.unmatched`)
    unmatched: dict[str, str] = dataclasses.field(default_factory=dict)

    @property
    def segments(self) -> list[Segment]:
        return [s.segment for s in self.steps if s.kind == "segment"]

    def check_dataflow(self) -> None:
        """Raise :class:`CompileError` unless the inputs are ``{name: {shape, dtype}}``, every
        step reads only tensors a graph input, a constant or an earlier step defines, and every
        graph output is defined (what :meth:`load` checks of a file, whose steps the executor
        would otherwise fail on half-way, or run wrongly)."""
        if not isinstance(self.inputs, dict) or not isinstance(self.outputs, list):
            raise CompileError("inputs must be an object of name -> {shape, dtype} and outputs "
                               "a list of names")
        for name, spec in self.inputs.items():
            shape = spec.get("shape") if isinstance(spec, dict) else None
            if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
                raise CompileError(f"graph input {name!r}: shape must be a list of ints >= 0, "
                                   f"not {shape!r}")
            try:                    # (np.dtype(None) is float64: a missing dtype is not one)
                dtype = np.dtype(spec["dtype"]) if isinstance(spec.get("dtype"), str) else None
            except TypeError:
                dtype = None
            if dtype is None or dtype.kind not in "biuf":
                raise CompileError(f"graph input {name!r}: dtype must be a numeric numpy type, "
                                   f"not {spec.get('dtype')!r}")
        defined = set(self.inputs) | set(self.constants)
        for step in self.steps:
            if step.kind == "host":
                reads, writes = step.node.inputs, step.node.outputs
            elif step.kind == "segment":
                reads = [b.tensor for b in step.segment.inputs]
                writes = [b.tensor for b in step.segment.outputs]
            else:
                if step.layer not in self.layers:
                    raise CompileError(f"step {step.name!r}: no layer {step.layer!r}")
                layer = self.layers[step.layer]
                reads, writes = [layer.input, layer.input_b], [layer.output]
            for t in reads:
                if t and t not in defined:
                    raise CompileError(f"step {step.name!r} reads {t!r}, which no graph input, "
                                       f"constant or earlier step defines")
            defined.update(t for t in writes if t)
        for t in self.outputs:
            if t not in defined:
                raise CompileError(f"graph output {t!r} is defined by no step")

    def graph(self) -> Graph:
        """A minimal :class:`Graph` for the host executor (constants, inputs, outputs)."""
        tensors = {n: Tensor(n, tuple(v.shape), v.dtype, v) for n, v in self.constants.items()}
        for n, spec in self.inputs.items():
            tensors[n] = Tensor(n, tuple(spec["shape"]), np.dtype(spec["dtype"]))
        nodes = []
        for s in self.steps:
            if s.kind == "host":
                nodes.append(s.node)
                for o in s.node.outputs:
                    if o:
                        tensors.setdefault(o, Tensor(o, None, None))
        # A view for the host executor, not validated: accelerator layer outputs have no
        # producing node in it.
        g = Graph.__new__(Graph)
        g.nodes, g.tensors, g.inputs, g.outputs = nodes, tensors, list(self.inputs), \
            list(self.outputs)
        g.opset, g.symbols, g.name = self.opset, {}, self.name
        return g

    def lowered(self) -> Lowered:
        """The network as :class:`Lowered` steps (for :func:`planner.net.reference.run`)."""
        steps = []
        for s in self.steps:
            if s.kind == "host":
                steps.append(HostOp(s.node))
            else:
                steps.extend(self.layers[n] for n in s.layer_names)
        return Lowered(graph=self.graph(), steps=steps, removed=[])

    # -- .tsr ------------------------------------------------------------------------------------

    def save(self, path: str | Path) -> Path:
        """Write the ``.tsr`` file (a zip: ``plan.json``, ``images/*.bin``, ``arrays/*.npy``,
        optionally ``model.onnx``, whose large initialisers refer to the ``arrays`` members
        holding their bytes; docs/networks.md)."""
        path = Path(path)
        arrays: list[np.ndarray] = []

        def ref(a) -> dict:
            arrays.append(np.asarray(a, order="C"))      # keeps 0-D (ascontiguousarray: 1-D)
            return {"array": len(arrays) - 1}

        def enc(v):
            if isinstance(v, np.ndarray):
                return ref(v)
            if isinstance(v, (np.integer, np.floating)):
                return v.item()
            if isinstance(v, (list, tuple)):
                return [enc(x) for x in v]
            if isinstance(v, (GemmShape, ConvShape)):
                return {"shape_type": type(v).__name__, **dataclasses.asdict(v)}
            if isinstance(v, bytes):
                return {"bytes": v.hex()}
            return v

        layers = {n: {f.name: enc(getattr(l, f.name)) for f in dataclasses.fields(l)}
                  for n, l in self.layers.items()}
        steps = []
        for s in self.steps:
            d = {"kind": s.kind, "name": s.name}
            if s.kind == "host":
                d["node"] = {"name": s.node.name, "op_type": s.node.op_type,
                             "inputs": list(s.node.inputs), "outputs": list(s.node.outputs),
                             "domain": s.node.domain,
                             "attrs": {k: enc(v) for k, v in s.node.attrs.items()}}
            elif s.kind == "segment":
                seg = s.segment
                d["segment"] = {"index": seg.index, "layers": seg.layers,
                                "image": f"images/segment{seg.index}.bin",
                                "inputs": [b.as_dict() for b in seg.inputs],
                                "fills": [b.as_dict() for b in seg.fills],
                                "outputs": [b.as_dict() for b in seg.outputs],
                                "records": [dataclasses.asdict(r) for r in seg.records],
                                "overhead_cycles": seg.overhead_cycles,
                                "fused": [list(f) for f in seg.fused],
                                "unfused": [list(f) for f in seg.unfused]}
            else:
                d["layer"] = s.layer
                d["reason"] = s.reason
            steps.append(d)
        plan = {"format": TSR_FORMAT, "version": TSR_VERSION, "name": self.name,
                "config": self.cfg.to_dict(),
                "config_id": self.cfg.config_id, "strategy": self.strategy,
                "opset": self.opset, "inputs": self.inputs, "outputs": self.outputs,
                "constants": {n: ref(v) for n, v in self.constants.items()},
                "layers": layers, "steps": steps, "unmatched": self.unmatched}
        members: dict[str, tuple[bytes, int]] = {}      # name -> (.npy bytes, data offset)
        for i, a in enumerate(arrays):
            buf = io.BytesIO()
            np.save(buf, a, allow_pickle=False)
            data = buf.getvalue()
            members[f"arrays/{i}.npy"] = (data, len(data) - a.nbytes)   # the data ends it
        tmp = path.with_name(path.name + ".part")
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
            z.writestr("plan.json", json.dumps(plan, indent=1) + "\n")
            for seg in self.segments:
                z.writestr(f"images/segment{seg.index}.bin", seg.image)
            for name, (data, _) in members.items():
                z.writestr(name, data)
            if self.qmodel is not None:
                z.writestr("model.onnx", share_initializers(self.qmodel, members))
        tmp.replace(path)
        return path

    @classmethod
    def load(cls, path: str | Path) -> "CompiledNetwork":
        """Read a ``.tsr`` file; :class:`CompileError` says what is wrong with a bad one."""
        path = Path(path)
        if not path.exists():           # (as explain names a missing model file)
            raise CompileError(f"compiled network {str(path)!r} does not exist")
        try:
            z = zipfile.ZipFile(path)
        except (OSError, zipfile.BadZipFile) as e:
            hint = (f"; an ONNX model is compiled first: tessera compile {path} -o "
                    f"{path.stem}.tsr"                  # (here: its directory may be read-only)
                    if path.suffix.lower() == ".onnx" and path.is_file() else "")
            raise CompileError(f"{path}: not a compiled network (.tsr zip): {e}{hint}") from None
        with z:
            try:
                plan = json.loads(z.read("plan.json"))
            except (KeyError, ValueError, zlib.error, EOFError, zipfile.BadZipFile) as e:
                raise CompileError(f"{path}: no readable plan.json ({e})") from None
            if not isinstance(plan, dict):
                raise CompileError(f"{path}: plan.json is a {type(plan).__name__}, not an "
                                   f"object")
            if plan.get("format") != TSR_FORMAT or plan.get("version") not in TSR_READS:
                raise CompileError(f"{path}: format {plan.get('format')!r} version "
                                   f"{plan.get('version')!r}, expected {TSR_FORMAT!r} version "
                                   f"{' or '.join(map(str, TSR_READS))}")
            try:
                cache: dict[int, np.ndarray] = {}

                def arr(i: int) -> np.ndarray:
                    if i not in cache:
                        cache[i] = np.load(io.BytesIO(z.read(f"arrays/{i}.npy")),
                                           allow_pickle=False)
                    return cache[i]

                def dec(v):
                    if isinstance(v, dict) and set(v) == {"array"}:
                        return arr(v["array"])
                    if isinstance(v, dict) and "shape_type" in v:
                        kind = {"GemmShape": GemmShape, "ConvShape": ConvShape}[v["shape_type"]]
                        return kind(**{k: x for k, x in v.items() if k != "shape_type"})
                    if isinstance(v, dict) and set(v) == {"bytes"}:
                        return bytes.fromhex(v["bytes"])
                    if isinstance(v, list):
                        return [dec(x) for x in v]
                    return v


                cfg = AccelConfig.from_dict(plan["config"])
                if cfg.config_id != plan["config_id"]:
                    raise CompileError(f"{path}: the stored configuration hashes to "
                                       f"{cfg.config_id:#010x}, not config_id="
                                       f"{plan['config_id']:#010x}")
                tuples = {"in_shape", "out_shape", "source_nodes"}
                layers = {}
                for n, d in plan["layers"].items():
                    fields = {k: dec(v) for k, v in d.items()}
                    for k in tuples:
                        fields[k] = tuple(fields[k])
                    layers[n] = AccelLayer(**fields)
                steps = []
                for d in plan["steps"]:
                    if d["kind"] == "host":
                        nd = d["node"]
                        attrs = {k: dec(v) for k, v in nd["attrs"].items()}
                        node = Node(nd["name"], nd["op_type"], list(nd["inputs"]),
                                    list(nd["outputs"]), attrs, nd["domain"])
                        steps.append(Step("host", d["name"], node=node))
                    elif d["kind"] == "segment":
                        sd = d["segment"]
                        seg = Segment(index=sd["index"], layers=sd["layers"],
                                      image=z.read(sd["image"]),
                                      inputs=[TensorBuffer.from_dict(x) for x in sd["inputs"]],
                                      fills=[TensorBuffer.from_dict(x) for x in sd["fills"]],
                                      outputs=[TensorBuffer.from_dict(x) for x in sd["outputs"]],
                                      records=[LayerRecord(**r) for r in sd["records"]],
                                      overhead_cycles=int(sd["overhead_cycles"]) if
                                      "overhead_cycles" in sd else image_overhead(
                                          z.read(sd["image"]), cfg),
                                      fused=[tuple(f) for f in sd.get("fused", [])],
                                      unfused=[tuple(f) for f in sd.get("unfused", [])])
                        steps.append(Step("segment", d["name"], segment=seg))
                    else:
                        steps.append(Step(d["kind"], d["name"], layer=d["layer"],
                                          reason=d.get("reason", "")))
                qmodel = z.read("model.onnx") if "model.onnx" in z.namelist() else None
                if qmodel is not None and plan["version"] >= 2:    # (1: its own data)
                    qmodel = restore_initializers(qmodel, z.read)
                constants = {n: dec(v) for n, v in plan["constants"].items()}
                net = cls(cfg=cfg, steps=steps, layers=layers, constants=constants,
                          inputs=plan["inputs"], outputs=plan["outputs"], opset=plan["opset"],
                          strategy=plan["strategy"], name=plan["name"], qmodel=qmodel,
                          unmatched=dict(plan.get("unmatched", {})))   # (since session 46)
                net.check_dataflow()
                return net
            except CompileError as e:
                if str(e).startswith(str(path)):
                    raise
                raise CompileError(f"{path}: damaged compiled network ({e})") from None
            except (KeyError, TypeError, ValueError, AttributeError, zipfile.BadZipFile,
                    zlib.error, EOFError) as e:
                # a member or a field missing, or of the wrong kind: a damaged or hand-edited file
                raise CompileError(f"{path}: damaged compiled network ({_damage(e)})") from None

    def summary(self) -> dict:
        segs = self.segments
        return {"steps": len(self.steps), "segments": len(segs),
                "gemm_steps": sum(s.kind == "gemm" for s in self.steps),
                "ksplit_steps": sum(s.kind == "ksplit" for s in self.steps),
                "host_ops": sum(s.kind == "host" for s in self.steps),
                "host_layers": {s.layer: s.reason for s in self.steps if s.kind == "host_layer"},
                "unmatched": dict(self.unmatched),
                "records": sum(len(s.records) for s in segs),
                "image_bytes": sum(len(s.image) for s in segs),
                "predicted_cycles": sum(s.predicted_cycles for s in segs),
                "gemm_predicted_cycles": self.gemm_predicted_cycles(),
                "ksplit_predicted_cycles": self.ksplit_predicted_cycles()}

    def depthwise_placement(self) -> list[tuple[str, str | None]]:
        """Where each depthwise convolution run on the accelerator runs, in network order:
        ``(layer, None)`` on the depthwise mesh, ``(layer, reason)`` as dense channel blocks
        (:func:`planner.dwcost.mesh_refusal`'s reason, or its output read padded, which the
        mesh cannot write: :func:`on_mesh`), or, for a convolution with a channel multiplier
        (``groups`` = its input channels, more output channels; not depthwise), as one
        convolution per group, the reason naming the multiplier. ``tessera compile`` prints
        it."""
        on_host = {s.layer for s in self.steps if s.kind == "host_layer"}
        out = []
        for name, l in self.layers.items():
            if l.kind != "conv" or name in on_host or not (
                    is_depthwise(l.shape) or channel_multiplier(l.shape)):
                continue
            why = None if l.mesh else mesh_refusal(l.shape, self.cfg) or (
                "a convolution off the mesh reads its output padded, and the mesh writes "
                "dense NCHW only")
            out.append((name, why))
        return out

    def gemm_predicted_cycles(self) -> int:
        """Predicted cycles of the run-time GEMM steps (activation x activation), whose images
        are built from their operands at run time (:func:`build_gemm_image`): the same images
        built from zero operands, since their cycles depend on the shapes and zero points
        only. ``predicted_cycles`` in :meth:`summary` counts the segments only."""
        total = 0
        for step in self.steps:
            if step.kind == "gemm":
                layer = self.layers[step.layer]
                s = layer.shape
                a = np.zeros(layer.in_shape, np.int8)
                b = np.zeros((a.size // (s.m * s.k), s.k, s.n), np.int8)
                total += build_gemm_image(layer, a, b, self.cfg, self.strategy)[0] \
                    .predicted_cycles
        return total

    def ksplit_predicted_cycles(self) -> int:
        """Predicted cycles of the ``ksplit`` steps (convolutions in K parts), whose images
        are built from their input at run time (:func:`build_ksplit_image`):
        :func:`ksplit_predicted_cycles`."""
        return sum(ksplit_predicted_cycles(self.layers[step.layer], self.cfg, self.strategy)
                   for step in self.steps if step.kind == "ksplit")


#: the planner strategies :func:`compile_network` takes (every one but the tuning database's)
COMPILE_STRATEGIES = SHAPE_STRATEGIES


def _damage(e: Exception) -> str:
    """What a decoding error says about a damaged ``.tsr``: a missing member or field, or a
    value of the wrong kind."""
    if isinstance(e, KeyError):
        text = str(e.args[0]) if e.args else ""
        return text if text.startswith("There is no item") else f"no field {text!r}"
    return str(e) or type(e).__name__


def _builder_refusal(message: str, cfg: AccelConfig) -> str:
    """A host layer's reason from the image builder's refusal, in the compiler's terms: the
    builder's "move data_addr up" is an option of its API, not of ``tessera compile`` (which
    splits the device memory itself), so such a refusal says the memory is too small."""
    text = one_line(message).replace(
        "; move data_addr up", f", in a device memory of {cfg.dram_bytes:,} bytes "
                               f"(dram_addr_bits={cfg.dram_addr_bits})")
    return f"the image builder refused it: {text}"


def check_strategy(strategy: str) -> None:
    """Raise :class:`CompileError` unless ``strategy`` is one of :data:`COMPILE_STRATEGIES`."""
    if strategy not in COMPILE_STRATEGIES:
        raise CompileError(f"strategy must be one of {', '.join(COMPILE_STRATEGIES)}, not "
                           f"{strategy!r} (the tuning database's 'db' is not one: planner "
                           f"plan --db uses it)")


def compile_network(lowered: Lowered, cfg: AccelConfig, *, strategy: str = "best",
                    qmodel=None, name: str | None = None, fuse: bool = False,
                    lib: FunctionLibrary | None = None, th: Thresholds = Thresholds(),
                    on_event: OnProgress | None = None) -> CompiledNetwork:
    """Segments, images and host steps for ``lowered`` on ``cfg`` (module docstring).

    Where each layer runs is seed 004's decision (:func:`planner.net.assign.decide` with ``lib``
    and ``th``; the default thresholds put every layer the accelerator supports on it). A layer
    decided ``host`` (the configuration cannot run it, or the thresholds prefer the host) and a
    layer whose record the image builder refuses run on the host, with the reason recorded in
    their ``host_layer`` step. A convolution with more taps per group than the offset table
    holds runs in K parts (:func:`k_split`: a ``ksplit`` step, built at run time). With
    ``fuse``, every pair of
    :func:`fusible_pairs` keeps its intermediate in the accelerator's local buffer (seed 003;
    docs/fusion.md); each segment lists its fused pairs. ``on_event`` gets a
    :func:`progress` event after each layer is planned ("planning layers") and after each
    run of the network is built ("building images": a segment's image, or a host step)."""
    require_config(cfg)
    check_strategy(strategy)
    g = lowered.graph
    for n in g.inputs:
        if not g.tensors[n].is_static:
            raise CompileError(f"graph input {n!r} has shape {g.tensors[n].shape}: give its "
                               f"shape (--input-shape {n}=...)")
    lowered = on_mesh(lowered, cfg)
    layers = {l.name: l for l in lowered.layers}
    decisions = decide(lowered, cfg, lib, th, on_layer=planning_progress(on_event))
    host_layers = {d.op.name: d.reason for d in decisions
                   if d.op.name in layers and d.processor == "host"}
    ksplit = set()
    for n, l in layers.items():
        if n not in host_layers and k_split(l, cfg):
            try:        # built once now: an image that does not fit runs on the host
                ksplit_predicted_cycles(l, cfg, strategy)
                ksplit.add(n)
            except ValueError as e:
                host_layers[n] = _builder_refusal(str(e), cfg)
    ksplit = frozenset(ksplit)
    while True:
        runs = _segment_runs(_schedule(lowered.steps, host_layers, ksplit), host_layers, ksplit)
        try:
            steps = _compile_runs(runs, lowered, cfg, strategy, fuse, on_event)
            break
        except _Refused as e:
            if e.layer is None or e.layer in host_layers:
                raise CompileError(f"image refused: {e.reason}") from None
            host_layers[e.layer] = _builder_refusal(e.reason, cfg)
    for s in steps:
        if s.kind == "host_layer":
            s.reason = host_layers[s.layer]
    used = {i for s in steps if s.kind == "host" for i in s.node.inputs if i}
    used |= {i for s in steps if s.kind in ("host_layer", "gemm", "ksplit")
             for i in layers[s.layer].inputs}
    used |= set(g.outputs)          # a graph output may be a constant (a folded Shape)
    constants = {n: t.value for n, t in g.tensors.items() if t.is_const and n in used}
    inputs = {n: {"shape": [int(d) for d in g.tensors[n].shape],
                  "dtype": np.dtype(g.tensors[n].dtype).name} for n in g.inputs}
    q = None
    if qmodel is not None:
        q = qmodel if isinstance(qmodel, bytes) else qmodel.SerializeToString()
    return CompiledNetwork(cfg=cfg, steps=steps, layers=layers, constants=constants,
                           inputs=inputs, outputs=list(g.outputs), opset=g.opset,
                           strategy=strategy, name=name or g.name, qmodel=q,
                           unmatched=dict(lowered.unmatched))


def on_mesh(lowered: Lowered, cfg: AccelConfig) -> Lowered:
    """``lowered`` with every depthwise layer the config's mesh can run marked ``mesh``
    (:func:`planner.dwcost.mesh_fits`), unless a reader of its output needs that output
    padded (a convolution off the mesh reads a padded buffer, and the mesh writes dense NCHW
    only): such a layer runs as dense channel blocks (:func:`_add_depthwise_blocks`)."""
    if not cfg.dw_mesh:
        return lowered
    steps = [dataclasses.replace(s, mesh=True) if isinstance(s, AccelLayer) and
             s.kind == "conv" and mesh_fits(s.shape, cfg) else s for s in lowered.steps]
    while True:
        readers: dict[str, list[AccelLayer]] = {}
        for s in steps:
            if isinstance(s, AccelLayer):
                for t in s.inputs:
                    readers.setdefault(t, []).append(s)
        padded = {i for i, s in enumerate(steps) if isinstance(s, AccelLayer) and s.mesh and
                  any(r.in_layout[1] != (0, 0, 0, 0) for r in readers.get(s.output, []))}
        if not padded:
            return dataclasses.replace(lowered, steps=steps)
        steps = [dataclasses.replace(s, mesh=False) if i in padded else s
                 for i, s in enumerate(steps)]


def _compile_runs(runs: list, lowered: Lowered, cfg: AccelConfig, strategy: str,
                  fuse: bool = False, on_event: OnProgress | None = None) -> list[Step]:
    # tensors read by each position onwards (to know what a segment must hand back)
    reads_from: list[set[str]] = [set() for _ in range(len(runs) + 1)]
    reads_from[-1] = set(lowered.graph.outputs)
    for i in range(len(runs) - 1, -1, -1):
        r = runs[i]
        if isinstance(r, HostOp):
            ins = set(r.inputs)
        elif isinstance(r, tuple):
            ins = set(r[1].inputs)
        else:
            ins = {i_ for l in r for i_ in l.inputs}
        reads_from[i] = reads_from[i + 1] | ins
    steps: list[Step] = []
    index = 0
    for i, r in enumerate(runs):
        progress(on_event, "building images", i, len(runs))
        if isinstance(r, HostOp):
            steps.append(Step("host", r.name, node=r.node))
        elif isinstance(r, tuple):
            steps.append(Step(r[0], r[1].name, layer=r[1].name))
        else:
            for seg in _build_fitting(index, r, reads_from[i + 1], cfg, strategy, fuse):
                seg.index = index
                index += 1
                steps.append(Step("segment", f"segment{seg.index}", segment=seg))
    progress(on_event, "building images", len(runs), len(runs))
    return steps
