"""Image builder: lays out a network's layers, weights, tables and quantisation parameters as one
firmware image, and its activations in device memory around it.

Device memory holds the image at ``image_addr`` and a *data region* (from ``data_addr``) with the
activation buffers (:meth:`ImageBuilder.buffer`) and one statistics record per layer record.
Layers are added in execution order; :meth:`ImageBuilder.build` returns the sealed image.

Tensor layouts (what the layers read and write):

* a GEMM / fully connected layer computes ``C (m x n) = W (m x k) @ B (k x n)``: ``B`` row-major
  at ``b_addr`` with ``b_stride`` bytes per row, ``C`` row-major at ``out_addr`` with
  ``out_stride`` bytes per row (int8 or int32 elements). An int8 ``C`` is directly the ``B`` of
  a following layer (features x tokens), so MLPs chain with no host work.
* a convolution reads its input in the padded NCHW layout (:mod:`planner.layout`, the halo
  holding the input zero point) and writes output channel ``c``, pixel ``(p, q)`` at
  ``out_addr + c * out_chan_stride + (p * out_row_stride + q) * e`` (``e`` the output
  element's bytes: 1 for int8, 4 for int32; ``out_chan_stride`` is in bytes). With
  ``out_row_stride = out_w`` the output is plain CHW: one record, or, when the layer's tables
  do not fit the table memories, one record per band of output rows
  (:func:`planner.conv.row_bands`); a larger ``out_row_stride`` writes into the interior of
  the next convolution's padded input, so convolution chains need no host re-layout either:
  on a config with the row store in one record whose output rows are row lanes
  (:func:`spec.desc.row_store`, :func:`planner.convplan.row_store_plan`), else (or when its
  tables do not fit) one record per output row (the tables of row 0, with ``b_addr`` moved
  down ``stride_h`` input rows per row).
* a depthwise 3x3 (pad 1), 5x5 (pad 2) or 7x7 (pad 3) layer on the mesh (stride 1 or 2, ``b_mode`` 2 to 7;
  with stride 2 the top / left pad may be one less on an even side, TF ``"SAME"``: ``b_mode``
  3, 5 or 7 plus 8 / 16; configs with ``dw_mesh``) reads its input as dense NCHW (no halo: the
  record's ``pad_value`` is the padding) and writes dense NCHW.

Every layer is planned by :mod:`planner` (``strategy``), and every record passes
:func:`spec.record.check_record` before the image is sealed.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib

import numpy as np

from planner.conv import block_plan, compile_conv, row_bands
from planner.convplan import row_store_plan
from planner.convcost import predict_conv
from planner.cost import PostLoad, image_overhead_cycles, on_chip, predict
from planner.dwcost import (MESH_KERNELS, depthwise_descriptor, depthwise_macs,
                            kernel_refusal, predict_depthwise)
from planner.layout import padded_dims, weights_k_major
from planner.offsets import compile_tables
from planner.plan import plan_gemm
from planner.shapes import ConvShape, GemmShape
from planner.tiling import TILING_FIELDS
from spec.config import AccelConfig, require_config
from spec.desc import (DEPTHWISE_STRIDES, GemmDescriptor, depthwise_arrays,
                       depthwise_weight_words, table_problems)
from spec.layouts import STATS_BYTES, OpKind, OutFormat, PostMode, SectionKind
from spec.record import SECTION_ALIGN_BYTES, check_record, layer_record, written_range

from .image import (Image, ImageError, Layer, decode, encode, image_bytes, section_layout,
                    with_a_crcs)

__all__ = ["Requant", "ImageBuilder", "BuiltLayer", "image_overhead", "predicted_image_cycles"]


def _row_store(shape, cfg: AccelConfig, post: PostLoad):
    """``(tables, plan)`` of one row store record of ``shape`` (batch 1, one group), or None
    when the config has no row store, no tiling takes a row a partition, or the row lanes'
    tables do not fit the table memories (the caller then writes a record a row)."""
    plan = row_store_plan(shape, cfg, post=post)
    if plan is None:
        return None
    tables = compile_tables(shape, "NCHW", cfg, row_width=plan.partition_n)
    if table_problems(cfg, k=shape.gemm.k, run_count=tables.run_count, n=tables.n):
        return None
    return tables, plan


@dataclasses.dataclass(frozen=True)
class Requant:
    """Int8 output of a layer: per-output-channel ``multiplier`` / ``shift`` (``m`` int32 each,
    :func:`planner.requant.quantize_multiplier`), the output ``zero_point`` and clamp bounds
    (:func:`planner.requant.activation_bounds`); ``post_mode`` documents which activation the
    bounds implement."""

    multiplier: np.ndarray
    shift: np.ndarray
    zero_point: int = 0
    act_min: int = -128
    act_max: int = 127
    post_mode: PostMode = PostMode.NONE

    def __post_init__(self):
        if self.post_mode not in set(PostMode):
            raise ValueError(f"Requant.post_mode must be one of "
                             f"{', '.join(f'{p.name} ({p.value})' for p in PostMode)}, not "
                             f"{self.post_mode!r}")


@dataclasses.dataclass(frozen=True)
class BuiltLayer:
    """A layer record as built, with the name it was added under and the planner's prediction
    of its counters (register-mode run of the descriptor, without image overheads)."""

    name: str
    layer: Layer
    predicted_cycles: int
    #: predicted memory-port bytes (rd_a + rd_b + wr_c; on-chip operands cross no port)
    predicted_dram_bytes: int = 0
    #: useful multiply-accumulates: ``m * k * n``, the kernel's taps per output of a depthwise
    #: record (nine, 25 for 5x5, 49 for 7x7) and of a block-diagonal one (:meth:`ImageBuilder.conv`)
    macs: int = 0


def _align(value: int, to: int = SECTION_ALIGN_BYTES) -> int:
    return -(-value // to) * to


def _tiling(plan) -> dict[str, int]:
    return {name: getattr(plan, name) for name in TILING_FIELDS}


def _ints(where: str, **values) -> None:
    """Raise ``ValueError`` naming the first of ``values`` that is not an integer (a Python or
    numpy int; ``bool`` is not one, ``None`` is skipped). An address or size of ``2.5`` would
    otherwise be truncated silently into the image."""
    for key, value in values.items():
        if value is not None and (isinstance(value, bool) or
                                  not isinstance(value, (int, np.integer))):
            raise ValueError(f"{where}: {key} must be an int, not {value!r}")


def _int_array(name: str, values, m: int, lo: int, hi: int) -> np.ndarray:
    arr = np.asarray(values)
    if arr.shape != (m,) or not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"{name} must be an integer array of shape ({m},), not "
                         f"{arr.dtype} {arr.shape}")
    if arr.size and (arr.min() < lo or arr.max() > hi):
        raise ValueError(f"{name} values must be in [{lo}, {hi}], got range "
                         f"[{arr.min()}, {arr.max()}]")
    return arr.astype("<i4")


class ImageBuilder:
    """Builds one image for ``cfg``.

    Parameters
    ----------
    cfg : AccelConfig
    image_addr : int
        Device address of the image (64-byte aligned).
    data_addr : int, optional
        Start of the data region (activations, statistics); default: half of ``dram_bytes``.
        The image must end below it (:meth:`build` checks).
    strategy : str
        The planner strategy every layer is tiled with.
    share_blobs : bool
        Store identical weights / tables / parameter arrays once (the records of one layer's
        blocks share them; docs/fusion.md). Off by default, so existing images keep their
        layout.
    """

    def __init__(self, cfg: AccelConfig, *, image_addr: int = 0, data_addr: int | None = None,
                 strategy: str = "best", share_blobs: bool = False):
        require_config(cfg)
        _ints("ImageBuilder", image_addr=image_addr, data_addr=data_addr)
        if image_addr % SECTION_ALIGN_BYTES or not 0 <= image_addr < cfg.dram_bytes:
            raise ValueError(f"image_addr={image_addr!r} must be {SECTION_ALIGN_BYTES}-byte "
                             f"aligned in [0, dram_bytes={cfg.dram_bytes:#x})")
        data_addr = cfg.dram_bytes // 2 if data_addr is None else data_addr
        if data_addr % SECTION_ALIGN_BYTES or not image_addr < data_addr < cfg.dram_bytes:
            raise ValueError(f"data_addr={data_addr!r} must be {SECTION_ALIGN_BYTES}-byte "
                             f"aligned in (image_addr, dram_bytes={cfg.dram_bytes:#x})")
        self.cfg = cfg
        self.image_addr = image_addr
        self.data_addr = data_addr
        self.strategy = strategy
        self._data_top = data_addr
        self._local_top = cfg.local_base
        self.buffers: dict[str, tuple[int, int]] = {}
        self._blobs: dict[SectionKind, bytearray] = {k: bytearray() for k in
                                                     (SectionKind.TABLES, SectionKind.QUANT,
                                                      SectionKind.WEIGHTS)}
        # (name, desc fields, layer fields, predicted cycles)
        self._pending: list[tuple] = []
        self._names: dict[str, None] = {}       # an ordered set: _restore truncates it
        self._shared: dict[tuple, tuple[SectionKind, int]] | None = {} if share_blobs else None

    # -- memory -----------------------------------------------------------------------------------

    def buffer(self, name: str, nbytes: int) -> int:
        """Allocate ``nbytes`` in the data region (64-byte aligned) and return the address.
        Buffers are a C beat apart: the beat-rounded ranges the ports may address around a
        tensor (``spec.desc.tensor_extents``) never reach the next buffer."""
        if name in self.buffers:
            raise ValueError(f"buffer {name!r} already exists")
        if type(nbytes) is not int or nbytes <= 0:
            raise ValueError(f"buffer {name!r}: nbytes must be a positive int, not {nbytes!r}")
        addr = self._data_top
        if addr + nbytes > self.cfg.dram_bytes:
            raise ValueError(f"buffer {name!r} of {nbytes} bytes does not fit: data region ends "
                             f"at dram_bytes={self.cfg.dram_bytes:#x}, {addr:#x} is in use")
        self._data_top = _align(addr + nbytes + self.cfg.c_beat_bytes)
        self.buffers[name] = (addr, nbytes)
        return addr

    def local(self, name: str, nbytes: int) -> int:
        """Allocate ``nbytes`` in the accelerator's on-chip local buffer (64-byte aligned, so
        whole local rows) and return its device address (``>= cfg.local_base``). A layer whose
        output is there writes it on chip (int8 only), a layer reading it as B reads it on chip:
        the intermediate of a fused pair (docs/fusion.md). The host cannot read or write it."""
        if name in self.buffers:
            raise ValueError(f"buffer {name!r} already exists")
        if type(nbytes) is not int or nbytes <= 0:
            raise ValueError(f"local buffer {name!r}: nbytes must be a positive int, not "
                             f"{nbytes!r}")
        addr = self._local_top
        end = self.cfg.local_base + self.cfg.local_buf_bytes
        unreachable = self.cfg.local_unreachable()
        if unreachable:
            raise ValueError(f"local buffer {name!r}: {unreachable}")
        if addr + nbytes > end:
            raise ValueError(f"local buffer {name!r} of {nbytes} bytes does not fit: "
                             f"local_buf_bytes={self.cfg.local_buf_bytes}, "
                             f"{addr - self.cfg.local_base} bytes are in use")
        self._local_top = _align(addr + nbytes)
        self.buffers[name] = (addr, nbytes)
        return addr

    def _is_local(self, addr) -> bool:
        return not isinstance(addr, tuple) and addr >= self.cfg.local_base

    def _blob(self, kind: SectionKind, data: bytes, tail: int = 0) -> tuple[SectionKind, int]:
        """Append ``data`` (+ ``tail`` zero bytes a beat read may reach) to a section; return a
        reference resolved to a device address at :meth:`build`."""
        if self._shared is not None:
            key = (kind, tail, hashlib.blake2s(data).digest())
            if key in self._shared:
                return self._shared[key]
            self._shared[key] = (kind, len(self._blobs[kind]))
        blob = self._blobs[kind]
        offset = len(blob)
        blob += data + bytes(tail)
        blob += bytes(_align(len(blob)) - len(blob))
        return (kind, offset)

    def _quant(self, m: int, bias, requant: Requant | None, where: str) -> dict:
        fields: dict = {}
        if bias is not None:
            fields["bias_addr"] = self._blob(SectionKind.QUANT,
                                             _int_array("bias", bias, m, -2**31, 2**31 - 1)
                                             .tobytes())
            fields["bias_present"] = 1
        if requant is not None:
            _ints(f"{where}: requant", zero_point=requant.zero_point, act_min=requant.act_min,
                  act_max=requant.act_max, post_mode=requant.post_mode)
            fields.update(
                out_format=OutFormat.INT8, post_mode=PostMode(requant.post_mode),
                out_zero_point=int(requant.zero_point), act_min=int(requant.act_min),
                act_max=int(requant.act_max),
                mult_addr=self._blob(SectionKind.QUANT, _int_array(
                    "multiplier", requant.multiplier, m, 1, 2**31 - 1).tobytes()),
                shift_addr=self._blob(SectionKind.QUANT, _int_array(
                    "shift", requant.shift, m, -31, 31).tobytes()))
        return fields

    def _weights(self, w: np.ndarray) -> tuple[tuple[SectionKind, int], int]:
        """A (m x k) int8 stored k-major with ``a_stride = m``; returns (reference, stride)."""
        m, k = w.shape
        img = np.ascontiguousarray(w.T.astype(np.int8))
        tail = -(-m // self.cfg.array_rows) * self.cfg.array_rows - m
        return self._blob(SectionKind.WEIGHTS, img.tobytes(), tail), m

    # -- layers -----------------------------------------------------------------------------------

    def _state(self) -> tuple:
        """What a layer call may change (lengths, not copies: a layer only appends)."""
        return (len(self._names), {k: len(v) for k, v in self._blobs.items()},
                None if self._shared is None else len(self._shared), len(self.buffers),
                self._data_top, self._local_top, len(self._pending))

    def _restore(self, state: tuple) -> None:
        names, blobs, shared, buffers, self._data_top, self._local_top, pending = state
        self._names = dict(list(self._names.items())[:names])
        for kind, size in blobs.items():
            del self._blobs[kind][size:]
        if shared is not None:
            self._shared = dict(list(self._shared.items())[:shared])
        self.buffers = dict(list(self.buffers.items())[:buffers])
        del self._pending[pending:]

    @staticmethod
    def _all_or_nothing(method):
        """A layer call that raises leaves the builder as it was: its name free again, no
        orphan blobs, buffers or records (a caller may catch the error and add the layer
        another way, as the compiler does when it sends a refused layer to the host)."""
        @functools.wraps(method)
        def call(self, *args, **kwargs):
            state = self._state()
            try:
                return method(self, *args, **kwargs)
            except BaseException:
                self._restore(state)
                raise
        return call

    @_all_or_nothing
    def gemm(self, name: str, *, weights: np.ndarray, n: int, b_addr: int, b_stride: int,
             out_addr: int, out_stride: int, bias=None, requant: Requant | None = None,
             op_kind: OpKind = OpKind.GEMM) -> None:
        """``C = weights @ B`` (+ bias, requantised when ``requant`` is given, else int32)."""
        self._claim(name)
        _ints(name, n=n, b_addr=b_addr, b_stride=b_stride, out_addr=out_addr,
              out_stride=out_stride)
        w = np.asarray(weights)
        if w.ndim != 2 or w.dtype != np.int8:
            raise ValueError(f"{name}: weights must be a 2-D int8 array (m x k), not "
                             f"{w.dtype} {w.shape}")
        if op_kind not in set(OpKind):
            raise ValueError(f"{name}: op_kind must be one of "
                             f"{', '.join(f'{k.name} ({k.value})' for k in OpKind)}, not "
                             f"{op_kind!r}")
        if OpKind(op_kind) == OpKind.CONV:
            raise ValueError(f"{name}: op_kind CONV needs ImageBuilder.conv")
        m, k = w.shape
        shape = GemmShape(m, k, n)
        # a local operand is served at one beat per cycle: plan for the ports the layer sees
        # (legality depends on buffer sizes only, which the view keeps)
        plan = plan_gemm(shape, on_chip(self.cfg, b_local=self._is_local(b_addr),
                                        c_local=self._is_local(out_addr)), self.strategy)
        a_ref, a_stride = self._weights(w)
        desc = dict(m=m, k=k, n=n, **_tiling(plan), a_addr=a_ref, a_stride=a_stride,
                    b_addr=b_addr, b_stride=b_stride, c_addr=out_addr, c_stride=out_stride)
        fields = {"op_kind": OpKind(op_kind), **self._quant(m, bias, requant, name)}
        post = PostLoad(bias=bias is not None, requant=requant is not None)
        self._add(name, desc, fields, predict(plan, self.cfg, post=post,
                                              b_local=self._is_local(b_addr),
                                              c_local=self._is_local(out_addr)), m * k * n)

    @_all_or_nothing
    def conv(self, name: str, *, shape, weights: np.ndarray, x_addr: int, out_addr: int,
             out_chan_stride: int, out_row_stride: int | None = None, bias=None,
             requant: Requant | None = None, rows: tuple[int, int] | None = None,
             diagonal: bool = False) -> None:
        """One convolution (``shape``: :class:`planner.ConvShape`, batch 1, one group) over the
        padded NCHW input at ``x_addr``; output placement as in the module docstring.

        ``diagonal``: ``weights`` are zero but for output channel ``o``'s input channel ``o``
        (``shape.in_channels == shape.out_channels``): a block of a depthwise layer run as one
        dense convolution (the zeros cost array time, not results), whose useful MACs are the
        kernel's taps per output, not ``in_channels`` times them.

        ``rows = (p0, p1)`` computes output rows ``p0 .. p1-1`` only, in one record, writing
        pixel ``(p, q)`` of channel ``c`` at ``out_addr + c * out_chan_stride + ((p - p0) *
        out_w + q) * e`` (a block of a fused pair, docs/fusion.md).

        A dense output whose tables do not fit the table memories is written in bands of
        output rows, one record each (:func:`planner.conv.row_bands`); ``ValueError`` when
        not even one row fits (more taps than ``conv_offset_entries``)."""
        self._claim(name)
        _ints(name, x_addr=x_addr, out_addr=out_addr, out_chan_stride=out_chan_stride,
              out_row_stride=out_row_stride)
        if not isinstance(shape, ConvShape):
            raise ValueError(f"{name}: shape must be a planner.ConvShape, not "
                             f"{type(shape).__name__}")
        if shape.groups != 1 or shape.batch != 1:
            raise ValueError(f"{name}: the builder handles batch 1, one group (got batch="
                             f"{shape.batch}, groups={shape.groups})")
        w = np.asarray(weights)
        if w.dtype != np.int8 or w.shape != (shape.out_channels, shape.in_channels,
                                             shape.kernel_h, shape.kernel_w):
            raise ValueError(f"{name}: weights must be int8 of shape (K, C, R, S) = "
                             f"{(shape.out_channels, shape.in_channels, shape.kernel_h, shape.kernel_w)}"
                             f", not {w.dtype} {w.shape}")
        if diagonal and (shape.in_channels != shape.out_channels or
                         np.any(w[~np.eye(shape.out_channels, dtype=bool)])):
            raise ValueError(f"{name}: diagonal weights need in_channels == out_channels (not "
                             f"{shape.in_channels}, {shape.out_channels}) and zeros off the "
                             "diagonal (output channel o reads input channel o only)")
        P, Q = shape.out_h, shape.out_w
        row_stride = Q if out_row_stride is None else out_row_stride
        if row_stride < Q:
            raise ValueError(f"{name}: out_row_stride={row_stride} < out_w={Q}")
        if rows is not None and not (isinstance(rows, tuple) and len(rows) == 2 and
                                     0 <= rows[0] < rows[1] <= P and row_stride == Q):
            raise ValueError(f"{name}: rows={rows!r} must be (p0, p1) with 0 <= p0 < p1 <= "
                             f"out_h={P}, and out_row_stride left at out_w")
        gemm = shape.gemm
        a = weights_k_major(w, shape, 0)                          # (k, m) int8
        a_ref = self._blob(SectionKind.WEIGHTS, np.ascontiguousarray(a).tobytes(),
                           -(-gemm.m // self.cfg.array_rows) * self.cfg.array_rows - gemm.m)
        quant = self._quant(gemm.m, bias, requant, name)
        c_local = self._is_local(out_addr)
        post = PostLoad(bias=bias is not None, requant=requant is not None)
        elem = 1 if requant is not None else 4          # output element bytes: int8 or int32
        hp, wp = padded_dims(shape)
        x_bytes = shape.in_channels * hp * wp
        taps = gemm.k // (shape.in_channels if diagonal else 1)
        # into a padded buffer on a config with the row store: one record, its output rows
        # at the buffer's row pitch (spec.desc.row_store), when a channel's rows end before
        # the next channel's start (not with channels interleaved by row, e.g. HCW)
        if rows is None and row_stride != Q and not c_local and \
                out_chan_stride >= ((P - 1) * row_stride + Q) * elem:
            stored = _row_store(shape, self.cfg, post)
            if stored is not None:
                tables, plan = stored
                refs = {key: self._blob(SectionKind.TABLES, blob, self.cfg.b_beat_bytes)
                        for key, blob in tables.to_bytes().items()}
                desc = dict(m=gemm.m, k=gemm.k, n=tables.n, **_tiling(plan), a_addr=a_ref,
                            a_stride=gemm.m, b_addr=x_addr, b_stride=x_bytes, c_addr=out_addr,
                            c_stride=out_chan_stride, b_mode=1, off_addr=refs["off"],
                            run_addr=refs["run"], grp_addr=refs["grp"],
                            run_count=tables.run_count, c_rows=P, c_row_elems=Q,
                            c_row_pitch=row_stride * elem)
                probe = GemmDescriptor(**{key: (0 if isinstance(v, tuple) else v)
                                          for key, v in desc.items()})
                self._add(name, desc, {"op_kind": OpKind.CONV, **quant},
                          predict_conv(probe, tables, self.cfg, post=post), gemm.m * taps * P * Q)
                return
        # records (first output row, rows): the whole layer; a band of rows (the caller's, or
        # the planner's when the whole layer's tables do not fit: planner.conv.row_bands); or,
        # into a padded buffer, one record per output row
        if rows is not None:
            records, tag = [(rows[0], rows[1] - rows[0])], None
        elif row_stride == Q:
            records = [(p0, p1 - p0) for p0, p1 in row_bands(shape, "NCHW", self.cfg)]
            tag = None if len(records) == 1 else "rows"
        else:
            records, tag = [(p, 1) for p in range(P)], "row"
        whole = records == [(0, P)] and tag is None and rows is None
        program = compile_conv(shape, "NCHW", self.cfg, self.strategy) if whole else None
        blocks = {}             # band height -> (tables, their blobs, plan), shared by bands
        for p0, height in records:
            if height not in blocks:
                if whole:
                    tables, plan = program.tables, program.plan
                else:
                    tables = compile_tables(shape, "NCHW", self.cfg, pixels=height * Q)
                    plan = block_plan(shape, "NCHW", self.cfg, height * Q, self.strategy,
                                      c_local=c_local, post=post)
                refs = {key: self._blob(SectionKind.TABLES, blob, self.cfg.b_beat_bytes)
                        for key, blob in tables.to_bytes().items()}
                blocks[height] = (tables, refs, plan)
            tables, refs, plan = blocks[height]
            b_addr = x_addr + p0 * shape.stride_h * wp
            desc = dict(m=gemm.m, k=gemm.k, n=height * Q, **_tiling(plan), a_addr=a_ref,
                        a_stride=gemm.m, b_addr=b_addr, b_stride=x_bytes - (b_addr - x_addr),
                        c_addr=out_addr + (0 if rows else p0 * row_stride * elem),
                        c_stride=out_chan_stride,
                        b_mode=1, off_addr=refs["off"], run_addr=refs["run"],
                        grp_addr=refs["grp"], run_count=tables.run_count)
            probe = GemmDescriptor(**{key: (0 if isinstance(v, tuple) else v)
                                      for key, v in desc.items()})
            cycles = predict_conv(probe, tables, self.cfg, post=post, c_local=c_local)
            label = {None: name, "row": f"{name}[row {p0}]",
                     "rows": f"{name}[rows {p0}:{p0 + height}]"}[tag]
            self._add(label, desc, {"op_kind": OpKind.CONV, **quant}, cycles,
                      gemm.m * taps * height * Q)

    @_all_or_nothing
    def depthwise(self, name: str, *, weights: np.ndarray, h: int, w: int, x_addr: int,
                  out_addr: int, pad_value: int = 0, bias=None,
                  requant: Requant | None = None, stride: int = 1, odd_rows: bool = False,
                  odd_cols: bool = False) -> None:
        """A depthwise ``k`` x ``k`` convolution on the mesh, 3x3 with pad 1, 5x5 with pad 2 or
        7x7 with pad 3, ``stride`` 1 or 2 (``b_mode`` 2 / 3, 4 / 5 or 6 / 7,
        :func:`planner.dwcost.depthwise_b_mode`;
        the kernel is the ``weights``'; with ``odd_rows`` / ``odd_cols``, stride 2 and an even
        ``h`` / ``w``, the top / left pad is ``p - 1``, TF ``"SAME"``: the ``b_mode`` plus 8 /
        16, :func:`spec.desc.depthwise_odd`): the ``C`` channels of the dense NCHW ``h x w`` input
        at ``x_addr``, padded with ``pad_value`` (the input zero point), each with its own
        ``weights`` (``(C, k, k)`` or ``(C, 1, k, k)`` int8), into the dense NCHW output at
        ``out_addr`` (``ceil(h / s) x ceil(w / s)`` maps). The weights are u32 arrays in the
        QUANT section (under the image's CRC): three for 3x3, seven for 5x5, thirteen for 7x7
        (:func:`spec.desc.depthwise_weight_words`)."""
        self._claim(name)
        _ints(name, h=h, w=w, x_addr=x_addr, out_addr=out_addr, pad_value=pad_value,
              stride=stride)
        if h < 1 or w < 1:
            raise ValueError(f"{name}: h={h}, w={w}: the map must be at least 1 x 1")
        if stride not in (1, 2):
            raise ValueError(f"{name}: stride={stride!r} must be 1 or 2 (a depthwise layer on "
                             f"the mesh)")
        if (odd_rows or odd_cols) and (stride != 2 or (odd_rows and h % 2) or
                                       (odd_cols and w % 2)):
            raise ValueError(f"{name}: odd_rows={odd_rows}, odd_cols={odd_cols} (a top / left "
                             f"pad one less, TF \"SAME\") need stride 2 and an even h / w, not "
                             f"stride={stride}, h={h}, w={w}")
        if not self.cfg.dw_mesh:
            raise ValueError(f"{name}: a depthwise layer on the mesh needs a config with "
                             f"dw_mesh=1; this one has none")
        wt = np.asarray(weights)
        if wt.dtype != np.int8 or wt.ndim not in (3, 4) or wt.shape[-1] != wt.shape[-2] or \
                wt.shape[-1] not in MESH_KERNELS or (wt.ndim == 4 and wt.shape[1] != 1) or \
                wt.shape[0] < 1:
            raise ValueError(f"{name}: weights must be int8 of shape (C, k, k) or (C, 1, k, k) "
                             f"with C >= 1 and k in {list(MESH_KERNELS)} (the mesh's kernels), "
                             f"not {wt.dtype} {wt.shape}")
        c, kernel = wt.shape[0], wt.shape[-1]
        why = kernel_refusal(kernel, self.cfg)
        if why is not None:
            raise ValueError(f"{name}: {why}")
        wt = wt.reshape(c, kernel * kernel)
        if not -128 <= int(pad_value) <= 127:
            raise ValueError(f"{name}: pad_value={pad_value} must be an int8 in [-128, 127]")
        words = np.array([depthwise_weight_words(wt[ch]) for ch in range(c)], "<u4")
        a_ref = self._blob(SectionKind.QUANT, np.ascontiguousarray(words.T).tobytes())
        probe = depthwise_descriptor(c, h, w, self.cfg, out_bytes=1 if requant else 4,
                                     b_addr=x_addr, c_addr=out_addr, stride=stride,
                                     kernel=kernel, odd_rows=odd_rows, odd_cols=odd_cols)
        desc = {**dataclasses.asdict(probe), "a_addr": a_ref}
        fields = {"op_kind": OpKind.DEPTHWISE, "pad_value": int(pad_value),
                  **self._quant(c, bias, requant, name)}
        post = PostLoad(bias=bias is not None, requant=requant is not None)
        self._add(name, desc, fields, predict_depthwise(probe, self.cfg, post=post),
                  depthwise_macs(probe))

    def _claim(self, name: str) -> None:
        """Refuse a layer name in use before anything of the layer is added."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"layer name must be a non-empty str, not {name!r}")
        if name in self._names:
            raise ValueError(f"layer name {name!r} is already used")
        self._names[name] = None

    def _add(self, name: str, desc: dict, fields: dict, predicted, macs: int) -> None:
        """``predicted``: the planner's :class:`~planner.cost.CycleBreakdown` of the record;
        ``macs`` its useful multiply-accumulates."""
        stats = self.buffer(f"{name}.stats", STATS_BYTES)
        self._pending.append((name, desc, {**fields, "stats_addr": stats}, predicted, macs))

    def _spill(self, lo: int, hi: int) -> list[str]:
        """Why an output written over ``[lo, hi)`` is not inside one buffer of this builder
        (it would overwrite the next buffer or a statistics record: the run would report
        success with wrong data); empty when it is."""
        for buf, (addr, nbytes) in self.buffers.items():
            if addr <= lo < addr + nbytes:
                if hi <= addr + nbytes:
                    return []
                return [f"its output [{lo:#x}, {hi:#x}) runs {hi - addr - nbytes} bytes past "
                        f"the end of buffer {buf!r} [{addr:#x}, {addr + nbytes:#x}) (an int32 "
                        f"output takes 4 bytes an element)"]
        return [f"its output [{lo:#x}, {hi:#x}) does not start inside any buffer of this "
                f"builder (ImageBuilder.buffer / local)"]

    # -- image ------------------------------------------------------------------------------------

    def build(self) -> tuple[bytes, list[BuiltLayer]]:
        """The sealed image and its layers (with their predicted cycles). Raises
        :class:`~firmware.image.ImageError` listing every rule a record breaks."""
        if not self._pending:
            raise ImageError("the image has no layers: add at least one with "
                             "ImageBuilder.gemm or ImageBuilder.conv")
        layout = section_layout(len(self._pending), {k: len(b) for k, b in self._blobs.items()})
        end = self.image_addr + image_bytes(layout)
        if end > self.data_addr:
            raise ImageError(f"the image [{self.image_addr:#x}, {end:#x}) overlaps the data "
                             f"region at data_addr={self.data_addr:#x}; move data_addr up")
        base = {kind: self.image_addr + off for kind, (off, _) in layout.items()}

        def resolve(value):
            if isinstance(value, tuple):
                kind, offset = value
                return base[kind] + offset
            return int(value)

        built, problems = [], []
        image_range = (self.image_addr, end)
        blob_view = {k: bytes(b) for k, b in self._blobs.items()}

        def read_words(addr, count):
            for kind, start in base.items():
                if kind in blob_view and start <= addr < start + len(blob_view[kind]):
                    # Python ints: check_record sign-extends them (a NumPy uint32 would
                    # overflow on a negative shift)
                    return np.frombuffer(blob_view[kind], "<u4", count, addr - start).tolist()
            raise ImageError(f"no section holds address {addr:#x}")

        for name, desc, fields, predicted, macs in self._pending:
            d = GemmDescriptor(**{k: resolve(v) for k, v in desc.items()})
            f = {k: resolve(v) for k, v in fields.items()}
            rec = layer_record(d, **f)
            lo, hi = written_range(rec)
            rec["out_window_lo"], rec["out_window_hi"] = lo, hi
            errs = check_record(rec, self.cfg, image=image_range,
                                weights_at=base[SectionKind.WEIGHTS], read_words=read_words)
            problems += [f"layer {name!r}: {code.name}: {msg}" for code, msg in errs]
            problems += [f"layer {name!r}: {msg}" for msg in self._spill(lo, hi)]
            layer = Layer(desc=d, out_window_lo=lo, out_window_hi=hi, **f)
            built.append(BuiltLayer(
                name=name, layer=layer, predicted_cycles=predicted.total_cycles,
                predicted_dram_bytes=(predicted.rd_a_bytes + predicted.rd_b_bytes
                                      + predicted.wr_c_bytes), macs=macs))
        if problems:
            raise ImageError("image breaks hardware rules:\n  " + "\n  ".join(problems))
        image = with_a_crcs(Image(config_id=self.cfg.config_id,
                                  layers=tuple(b.layer for b in built),
                                  sections={k: bytes(v) for k, v in self._blobs.items()},
                                  base_addr=self.image_addr), self.cfg)
        built = [dataclasses.replace(b, layer=layer) for b, layer in zip(built, image.layers)]
        return encode(image), built


def _post_of(layer: Layer) -> PostLoad:
    return PostLoad(bias=layer.bias_present == 1, requant=layer.out_format == OutFormat.INT8)


def image_overhead(blob: bytes, cfg: AccelConfig) -> int:
    """Cycles the run of image ``blob`` spends outside its layers
    (:func:`planner.cost.image_overhead_cycles`; the CRC pass reads the bytes before the
    weights section)."""
    image = decode(blob)
    crc_bytes = image.section_offsets()[SectionKind.WEIGHTS][0]
    return image_overhead_cycles(crc_bytes, [(layer.desc.m, _post_of(layer),
                                              depthwise_arrays(layer.desc.b_mode)
                                              if layer.desc.b_mode in DEPTHWISE_STRIDES else 0)
                                             for layer in image.layers], cfg)


def predicted_image_cycles(blob: bytes, layers: list[BuiltLayer], cfg: AccelConfig) -> int:
    """The predicted ``total_cycles`` of running the image: every layer's prediction plus the
    image overhead."""
    return sum(b.predicted_cycles for b in layers) + image_overhead(blob, cfg)
