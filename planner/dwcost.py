"""Cycle model of a depthwise layer on the mesh: 3x3 pad 1 (``b_mode`` 2, or 3 for stride 2)
5x5 pad 2 (``b_mode`` 4, or 5 for stride 2) or 7x7 pad 3 (6, 7; docs/architecture.md,
"Depthwise convolution"): the sequencer's phases over :func:`spec.dwmesh.strip_steps`' strips
(of the ``b_mode``'s kernel, :data:`spec.desc.DEPTHWISE_KERNELS`). A stride-2 layer whose top
(left) pad is one less, ``p - 1`` before and ``p`` after an even side (TF/Keras ``"SAME"``,
ONNX ``SAME_UPPER``), has the stride-2 ``b_mode`` plus :data:`spec.desc.B_MODE_ODD_ROWS` (8)
(:data:`spec.desc.B_MODE_ODD_COLS`, 16): its strips are the stride-1 ones, the store keeping
the odd rows (columns; :func:`spec.desc.depthwise_odd`, :func:`mesh_odd`).

After the checks, the parameter arrays (the post-processing ones the layer uses through the B
port, beside them its weight arrays through the A port: :func:`spec.desc.depthwise_arrays`, 3
for 3x3, 7 for 5x5, 13 for 7x7) and the walk's start, phase ``k`` issues the compute of strip ``k - 1``, the A and
B loads of strip ``k`` and the store of strip ``k - 2``; it lasts ``max(compute, load A, load B,
store wait + store) + step_ctrl_cycles``, the stall categories assigned as the RTL counters
assign them (:meth:`planner.cost._Timing.phase`). A strip's compute runs
``mesh_start_cycles`` (``mesh_halves_start_cycles`` more when its tiles take two channels
each: maps of up to ``R / 2 - 1`` rows, or stride-2 3x3 and 5x5 ones of ``R / 2`` to ``R -
2`` in row phases, :func:`spec.dwmesh.phase_halves`; ``mesh_quad_start_cycles``, one less for each
channel fewer than four in its first tile, in the quadrant mode) plus its tiles' beats (``R / 2`` fills and nine taps,
25 for a 5x5 tile, 49 for a 7x7 one,
one beat less for every tile after a strip's first, whose first fill beat is its predecessor's
last tap beat: :func:`spec.dwmesh.strip_step_cycles`; the taps are the MAC-active cycles); its
loads are one beat a row (of every group: stride 2's row phases load two classes of rows into
each buffer, :func:`spec.dwmesh.row_phases`); its store one beat an output row (``G h`` of
them, ``G ceil(h / 2)`` with stride 2; in the quadrant mode, 7 x 7 maps on the 16x16,
:func:`spec.dwmesh.quad_mode`, ``R / 4`` a channel, two output rows each), after the mesh's
drain. A row-phase tile is two fills
and nine taps, ``R + 8`` beats (phase 1's first fill beat is phase 0's last tap beat; one
less after a strip's first); in row and column phases (:func:`spec.desc.col_phases`) four
fills, ``2 R + k^2 - 3`` beats, the loads two beats a row of each class, deinterleaved, a cycle
longer than as many plain beats. A 5x5 or 7x7 layer's tiles are whole-mesh stride-1 tiles of ``(R
- 4) x (C - 4)`` or ``(R - 6) x (C - 6)`` outputs (stride 2: the same tiles, the decimating
store), or ``(R - 2)`` rows in row passes (:func:`spec.dwmesh.row_passes`), or with stride 2
in row phases; two channels a tile for maps of up to ``R / 2 - 1`` rows, the window's rows two
a fill (:attr:`spec.dwmesh.StripTile.pairs`), or in 5x5 row phases
(:func:`spec.dwmesh.phase_halves`);
no quadrants. A map of at most ``C -
pad`` columns is one strip, of at most ``R - pad`` rows one tile a channel (any kernel:
:func:`spec.dwmesh.one_strip`, :func:`spec.dwmesh.one_tile`).
"""

from __future__ import annotations

import dataclasses

from spec.config import AccelConfig
from spec.desc import (DEPTHWISE_KERNELS, DEPTHWISE_STRIDES, DEPTHWISE_UNUSED, GemmDescriptor,
                       check, depthwise_arrays, depthwise_kernels, depthwise_mesh_side,
                       depthwise_odd, depthwise_out)
from spec.dwmesh import strip_channels, strip_pad, strip_step_cycles, strip_steps

from .shapes import ConvShape
from .cost import (DEFAULT_CONSTANTS, CycleBreakdown, ModelConstants, PostLoad, _Timing,
                   param_load_cycles, post_consts)

__all__ = ["predict_depthwise", "depthwise_macs", "mesh_shape", "depthwise_descriptor",
           "is_depthwise", "depthwise_blocks", "block_channels", "mesh_fits", "mesh_refusal",
           "channel_chunks", "depthwise_b_mode", "MESH_KERNELS", "kernel_refusal",
           "channel_multiplier", "mesh_pads", "mesh_odd", "port_bound"]

#: The kernels the mesh runs (``k`` x ``k``, pad ``(k - 1) / 2``): the depthwise ``b_mode``
#: values' (:data:`spec.desc.DEPTHWISE_KERNELS`), 3, 5 and 7.
MESH_KERNELS: tuple[int, ...] = tuple(sorted(set(DEPTHWISE_KERNELS.values())))
_KERNELS_TEXT = " or ".join(f"{k}x{k}" for k in MESH_KERNELS)


def depthwise_b_mode(kernel: int, stride: int, *, odd_rows: bool = False,
                     odd_cols: bool = False) -> int:
    """The ``b_mode`` of a depthwise ``kernel`` x ``kernel`` layer (pad ``(kernel - 1) / 2``)
    of ``stride`` on the mesh: 2 or 3 for 3x3, 4 or 5 for 5x5, 6 or 7 for 7x7 (stride 1 or
    2). ``odd_rows`` / ``odd_cols`` (stride 2 only): the layer's top / left pad is one less
    (TF ``"SAME"`` of an even side, :func:`mesh_odd`), the stride-2 value plus
    :data:`spec.desc.B_MODE_ODD_ROWS` (8) / :data:`spec.desc.B_MODE_ODD_COLS` (16): 11, 19 or
    27 for 3x3, 13, 21, 29 for 5x5, 15, 23, 31 for 7x7."""
    odd = (bool(odd_rows), bool(odd_cols))
    if any(odd) and stride != 2:
        raise ValueError(f"depthwise_b_mode: odd_rows={odd_rows}, odd_cols={odd_cols} need "
                         f"stride 2, not stride={stride!r} (a stride-1 layer on the mesh pads "
                         f"by (kernel - 1) / 2 on every side)")
    for b_mode, k in DEPTHWISE_KERNELS.items():
        if k == kernel and DEPTHWISE_STRIDES[b_mode] == stride and depthwise_odd(b_mode) == odd:
            return b_mode
    raise ValueError(f"depthwise_b_mode: kernel={kernel!r}, stride={stride!r}: the mesh runs "
                     f"kernels {list(MESH_KERNELS)} with stride 1 or 2")


def channel_multiplier(shape) -> int:
    """The channel multiplier of a convolution ``shape`` that is depthwise but for it
    (``groups`` = its input channels, more than one, its output channels a larger multiple of
    them): the multiple; 0 for any other shape (a depthwise one included)."""
    if not (isinstance(shape, ConvShape) and shape.groups > 1 and
            shape.groups == shape.in_channels and shape.out_channels % shape.groups == 0):
        return 0
    mult = shape.out_channels // shape.groups
    return mult if mult > 1 else 0


def kernel_refusal(kernel: int, cfg: AccelConfig) -> str | None:
    """Why ``cfg``'s mesh cannot walk a ``kernel`` x ``kernel`` window (None when it can): the
    kernel is not one of :data:`MESH_KERNELS`, or the mesh is too small for its tiles and
    strips (:func:`spec.desc.depthwise_kernels`: a 5x5 kernel needs a 6 x 6 mesh, a 7x7 one a
    9 x 9 mesh, so ``tiny``'s 4 x 4 with ``dw_mesh`` runs 3x3 only, ``small``'s 8 x 8 3x3 and
    5x5)."""
    if not cfg.dw_mesh:
        return "the config has no depthwise mesh (dw_mesh=0)"
    if kernel not in MESH_KERNELS:
        return f"{kernel}x{kernel} kernel; the mesh walks {_KERNELS_TEXT}"
    if kernel not in depthwise_kernels(cfg):
        side = depthwise_mesh_side(kernel)
        return (f"{kernel}x{kernel} kernel on a {cfg.array_rows} x {cfg.array_cols} mesh; its "
                f"tiles and strips need at least {side} x {side} PEs")
    return None


def mesh_pads(kernel: int, stride: int, size: int) -> tuple[tuple[int, int], ...]:
    """The ``(before, after)`` pads the mesh takes on an axis of ``size`` inputs of a
    ``kernel`` x ``kernel`` layer of ``stride``: ``(p, p)`` (``p = (kernel - 1) / 2``), and
    with stride 2 on an even ``size`` also ``(p - 1, p)`` (TF/Keras ``"SAME"``, ONNX
    ``SAME_UPPER``: the stride-1 results' odd rows or columns, :func:`mesh_odd`)."""
    p = strip_pad(kernel)
    return ((p, p), (p - 1, p)) if stride == 2 and size % 2 == 0 else ((p, p),)


def _pads_fit(shape) -> bool:
    k, s = shape.kernel_h, shape.stride_h
    return ((shape.pad_top, shape.pad_bottom) in mesh_pads(k, s, shape.height) and
            (shape.pad_left, shape.pad_right) in mesh_pads(k, s, shape.width))


def mesh_shape(shape) -> bool:
    """``shape`` (a :class:`planner.shapes.ConvShape`) is a convolution the depthwise mesh
    runs: depthwise (``groups`` = input = output channels), ``k`` x ``k`` for ``k`` in
    :data:`MESH_KERNELS` (3, 5, 7), stride 1 or 2 (the same on both axes), no dilation, and
    on each axis the pads :func:`mesh_pads` allows: ``(k - 1) / 2`` on both ends, or with
    stride 2 one less before an even side (TF ``"SAME"``)."""
    return (is_depthwise(shape) and shape.kernel_h == shape.kernel_w in MESH_KERNELS and
            shape.stride_h == shape.stride_w in (1, 2) and
            shape.dilation_h == shape.dilation_w == 1 and _pads_fit(shape))


def mesh_odd(shape) -> tuple[bool, bool]:
    """``(odd_rows, odd_cols)`` of a :func:`mesh_shape` convolution: its top (left) pad is
    ``p - 1``, so the mesh keeps the stride-1 results' odd rows (columns)
    (:func:`depthwise_b_mode`, :func:`spec.desc.depthwise_odd`). Raises ``ValueError`` for a
    shape the mesh does not run."""
    if not mesh_shape(shape):
        raise ValueError(f"mesh_odd needs a convolution the depthwise mesh runs "
                         f"(planner.dwcost.mesh_shape), not {shape}")
    p = strip_pad(shape.kernel_h)
    return shape.pad_top == p - 1, shape.pad_left == p - 1


def channel_chunks(channels: int, cfg: AccelConfig) -> list[tuple[int, int]]:
    """Output-channel ranges of at most ``quant_entries`` channels (the parameter memories;
    a depthwise layer's weights are parameter arrays too): a wider layer is one record (group)
    per range."""
    step = cfg.quant_entries
    return [(c0, min(channels, c0 + step)) for c0 in range(0, channels, step)]


def mesh_fits(shape, cfg: AccelConfig) -> bool:
    """The mesh can run ``shape`` (a :func:`mesh_shape` on a ``dw_mesh`` config): one
    channel's strips fit a buffer half and an accumulator half (a map too tall for them runs
    as channel blocks instead, :func:`depthwise_blocks`)."""
    return mesh_refusal(shape, cfg) is None


def mesh_refusal(shape, cfg: AccelConfig) -> str | None:
    """Why the depthwise mesh cannot run depthwise convolution ``shape`` on ``cfg`` (None
    when it can, :func:`mesh_fits`); such a layer runs as dense channel blocks. The first
    reason found: not depthwise (a channel multiplier named), the config, the kernel, the
    stride, the dilation, the padding, the map's size."""
    if not is_depthwise(shape):
        mult = channel_multiplier(shape)
        if mult:
            return (f"channel multiplier {mult} (out_channels={shape.out_channels} of "
                    f"groups={shape.groups}); the mesh runs one output channel per input "
                    f"channel")
        return "not a depthwise convolution"
    if not cfg.dw_mesh:
        return "the config has no depthwise mesh (dw_mesh=0)"
    if shape.kernel_h != shape.kernel_w or shape.kernel_h not in MESH_KERNELS:
        return f"{shape.kernel_h}x{shape.kernel_w} kernel; the mesh walks {_KERNELS_TEXT}"
    if not shape.stride_h == shape.stride_w in (1, 2):
        return (f"stride ({shape.stride_h}, {shape.stride_w}); the mesh runs 1 or 2, the same "
                f"on both axes")
    if (shape.dilation_h, shape.dilation_w) != (1, 1):
        return f"dilation ({shape.dilation_h}, {shape.dilation_w}); the mesh runs 1"
    pads = (shape.pad_top, shape.pad_left, shape.pad_bottom, shape.pad_right)
    k, p = shape.kernel_h, strip_pad(shape.kernel_h)
    if not _pads_fit(shape):
        return (f"padding {pads} (top, left, bottom, right) of a {shape.height} x "
                f"{shape.width} map; the mesh pads a {k}x{k} kernel by {p} before and after, "
                f"or with stride 2 by {p - 1} before and {p} after an even side (TF \"SAME\")")
    why = kernel_refusal(k, cfg)
    if why is not None:
        return why
    c = min(shape.in_channels, cfg.quant_entries)
    odd_rows, odd_cols = mesh_odd(shape)
    d = depthwise_descriptor(c, shape.height, shape.width, cfg, out_bytes=4, group=1,
                             stride=shape.stride_h, kernel=k, odd_rows=odd_rows,
                             odd_cols=odd_cols)
    w_bytes = -(-4 * depthwise_arrays(d.b_mode) * c // 64) * 64
    x_bytes = c * shape.height * shape.width
    placed = dataclasses.replace(d, a_addr=0, b_addr=w_bytes, c_addr=w_bytes + x_bytes)
    errs = check(placed, cfg, out_bytes=4)
    if errs:
        code, msg = errs[0]
        return (f"one channel's {shape.height} x {shape.width} map does not fit the mesh's "
                f"buffers ({code.name}: {msg})")
    return None


def block_channels(cfg: AccelConfig, taps: int = 1) -> int:
    """Channels of one dense block of a depthwise layer of ``taps`` taps a channel off the
    mesh: an array's rows, at most the parameter memories' ``quant_entries``, and at most as
    many as the offset table holds the taps of (a block's ``K`` is its channels' taps: a
    31 x 31 kernel's 961 taps allow 4 channels a block with 4,096 entries). 0 when one
    channel's taps do not fit: the layer cannot run."""
    return min(cfg.array_rows, cfg.quant_entries, cfg.conv_offset_entries // taps)


def is_depthwise(shape) -> bool:
    """``shape`` is a depthwise convolution: one input and one output channel per group."""
    return (isinstance(shape, ConvShape) and shape.groups > 1 and
            shape.groups == shape.in_channels == shape.out_channels)


def depthwise_blocks(shape: ConvShape, cfg: AccelConfig) -> list[tuple[ConvShape, int]]:
    """How a depthwise layer runs off the mesh: blocks of ``array_rows`` channels (fewer when
    their taps would exceed the offset table, :func:`block_channels`; the last one smaller), each a dense one-image convolution whose weights are zero but for output
    channel ``o``'s input channel ``o`` (the zeros cost array time, not results: about
    ``1 / array_rows`` of the array does useful work, against one column's worth per channel
    as separate groups). ``(block shape, count)`` pairs, ``count`` over every image."""
    if not is_depthwise(shape):
        raise ValueError(f"depthwise_blocks needs a depthwise convolution, not {shape}")
    taps = shape.kernel_h * shape.kernel_w
    block, c = block_channels(cfg, taps), shape.in_channels
    if block == 0:
        raise ValueError(f"{shape}: one channel's {taps} taps exceed conv_offset_entries="
                         f"{cfg.conv_offset_entries}: it cannot run on this configuration")
    out = []
    for size, count in ((block, c // block), (c % block, 1)):
        if size and count:
            sub = dataclasses.replace(shape, batch=1, in_channels=size, out_channels=size,
                                      groups=1)
            out.append((sub, count * shape.batch))
    return out


def depthwise_descriptor(channels: int, h: int, w: int, cfg: AccelConfig, *, out_bytes: int,
                         a_addr: int = 0, a_stride: int | None = None, b_addr: int = 0,
                         c_addr: int = 0, group: int | None = None,
                         stride: int = 1, kernel: int = 3, odd_rows: bool = False,
                         odd_cols: bool = False) -> GemmDescriptor:
    """The descriptor of a depthwise ``kernel`` x ``kernel`` layer (pad ``(kernel - 1) / 2``;
    3, 5 or 7, ``b_mode`` 2 / 3, 4 / 5 or 6 / 7: :func:`depthwise_b_mode`; with ``odd_rows``
    / ``odd_cols``, stride 2 and an even ``h`` / ``w``, the top / left pad one less, the
    ``b_mode`` plus 8 / 16: :func:`mesh_odd` gives them of a shape) on the mesh: ``channels``
    dense NCHW ``h x w`` maps at ``b_addr``, the weight arrays (3, 7 for 5x5, 13 for 7x7) at ``a_addr``
    (``a_stride``: default ``4 * channels``, the arrays back to back), the dense output
    (``out_bytes`` an element; ``h x w`` maps, ``ceil(h / 2) x ceil(w / 2)`` with ``stride``
    2) at ``c_addr``; ``group`` (``G``) channels a strip step, by default as many as a buffer
    and an accumulator half hold (:func:`spec.dwmesh.strip_channels`)."""
    if stride not in (1, 2):
        raise ValueError(f"depthwise_descriptor: stride={stride!r} must be 1 or 2")
    if kernel not in MESH_KERNELS:
        raise ValueError(f"depthwise_descriptor: kernel={kernel!r} must be one of "
                         f"{list(MESH_KERNELS)}")
    if group is None:
        group = strip_channels(h, rows=cfg.array_rows,
                               buf_words=min(cfg.buf_a_depth, cfg.buf_b_depth) // 2,
                               acc_rows=cfg.acc_depth // 2, channels=channels, stride=stride,
                               kernel=kernel, w=w)
    return GemmDescriptor(m=channels, k=h, n=w, partition_m=group,
                          acc_buffer_needed=(group * h + cfg.array_rows) * cfg.c_beat_bytes,
                          a_addr=a_addr, a_stride=4 * channels if a_stride is None else a_stride,
                          b_addr=b_addr, b_stride=h * w, c_addr=c_addr,
                          c_stride=out_bytes * -(-h // stride) * -(-w // stride),
                          b_mode=depthwise_b_mode(kernel, stride, odd_rows=odd_rows,
                                                  odd_cols=odd_cols),
                          **{name: 0 for name in DEPTHWISE_UNUSED})


def depthwise_macs(d: GemmDescriptor) -> int:
    """Multiply-accumulates of the layer: a tap per output element (nine, 25 for 5x5, 49 for 7x7; the
    stride-2 layer's outputs: the mesh computes four times as many)."""
    oh, ow = depthwise_out(d)
    return DEPTHWISE_KERNELS[d.b_mode] ** 2 * d.m * oh * ow


def predict_depthwise(d: GemmDescriptor, cfg: AccelConfig,
                      consts: ModelConstants = DEFAULT_CONSTANTS, *,
                      post: PostLoad | None = None) -> CycleBreakdown:
    """Predicted RTL counters of the depthwise descriptor ``d`` (a
    :data:`spec.desc.DEPTHWISE_STRIDES` ``b_mode``, legal on ``cfg``); ``post``: the
    post-processing arrays it loads (bias, requantisation)."""
    if d.b_mode not in DEPTHWISE_STRIDES:
        raise ValueError(f"predict_depthwise needs a depthwise descriptor (b_mode one of "
                         f"{sorted(DEPTHWISE_STRIDES)}), not b_mode={d.b_mode}")
    odd_rows, odd_cols = depthwise_odd(d.b_mode)
    post = post or PostLoad(bias=False, requant=False)
    layer_consts = post_consts(consts, cfg) if post.active else consts
    R = cfg.array_rows
    t = _Timing(cfg, layer_consts)
    t.wait = R + consts.mesh_drain_extra_cycles - consts.step_ctrl_cycles
    steps = strip_steps(d.m, d.k, d.n, x_addr=0, out_addr=0, rows=R, cols=cfg.array_cols,
                        group=d.partition_m, stride=DEPTHWISE_STRIDES[d.b_mode],
                        kernel=DEPTHWISE_KERNELS[d.b_mode], odd_rows=odd_rows,
                        odd_cols=odd_cols)
    mac = drain = sa = sb = ss = 0
    ctrl = consts.start_cycles + consts.dw_walk_cycles
    rd_a = rd_b = wr_c = 0
    # phase k: compute k - 1, loads of k, store of k - 2 (the control cycles of the first
    # and the last phase are in start_cycles, as a GEMM's prologue's and epilogue's)
    ctrl -= 2 * consts.step_ctrl_cycles
    for k in range(len(steps) + 2):
        comp = steps[k - 1] if 1 <= k <= len(steps) else None
        load = steps[k] if k < len(steps) else None
        store = steps[k - 2] if k >= 2 else None
        beats = taps = 0
        if comp is not None:
            first = comp.tiles[0]
            beats = (consts.mesh_start_cycles + strip_step_cycles(comp, R)
                     + consts.mesh_halves_start_cycles * first.halves
                     + (consts.mesh_quad_start_cycles - 4 + first.quads if first.quads else 0))
            taps = sum(tile.kernel ** 2 for tile in comp.tiles)
        # a load's beats: a row each, in every group (two in stride 2's row phases; two a
        # row's class in the column phases, whose deinterleaving loads end a cycle later:
        # the last row's odd-byte word)
        ca = t.load_a(load.a_load.beats) + (load.a_load.dwords != 0) if load is not None else 0
        cb = t.load_b(load.b_load.beats) + (load.b_load.dwords != 0) if load is not None else 0
        rows = store.out_rows if store is not None else 0
        ph = t.phase(beats, taps, ca, cb, rows)
        mac, drain, sa, sb, ss = (x + y for x, y in zip((mac, drain, sa, sb, ss), ph))
        ctrl += consts.step_ctrl_cycles
        if load is not None:
            rd_a += load.a_load.beats * cfg.a_beat_bytes
            rd_b += load.b_load.beats * cfg.b_beat_bytes
        wr_c += rows * cfg.c_beat_bytes
    ctrl += consts.finish_cycles
    p = param_load_cycles(d.m, post, cfg, consts, weight_arrays=depthwise_arrays(d.b_mode))
    sa += p.load_a
    sb += p.load_b
    ctrl += p.ctrl
    rd_a += p.read_a
    rd_b += p.read_b
    total = mac + drain + sa + sb + ss + ctrl
    return CycleBreakdown(total_cycles=total, mac_active_cycles=mac, stall_drain_cycles=drain,
                          stall_load_a_cycles=sa, stall_load_b_cycles=sb,
                          stall_store_cycles=ss, stall_ctrl_cycles=ctrl, rd_a_bytes=rd_a,
                          rd_b_bytes=rd_b, wr_c_bytes=wr_c)


def port_bound(d: GemmDescriptor, cfg: AccelConfig, *, post: PostLoad | None = None) -> float:
    """The most MAC utilisation *any* dataflow on ``cfg`` could give the depthwise layer ``d``
    (legal on ``cfg``), whatever its array: :func:`depthwise_macs` over ``cfg.macs_per_cycle``
    times the cycles the two operand ports need, together, for the bytes the layer must read,
    each of them once: the ``m`` dense ``k x n`` input maps (the pads are never read), the
    weight arrays and the ``post``-processing arrays (bias, multiplier, shift) as the parameter
    loads read them (:func:`planner.cost.param_load_cycles`: whole beats of ``4 m`` bytes an
    array), with no port latency, no control cycle and nothing else. At most 1.

    :func:`spec.dwmesh.input_bound` is the same without the parameter arrays. They matter for
    small stride-2 maps: a 3x3 stride-2 layer of ``14 x 14`` maps requantised with bias reads
    196 input and 24 parameter bytes a channel for 441 MACs, so on ``default``'s two 16 B/cycle
    ports no dataflow exceeds 25.06% (28.1% without them), and one of ``7 x 7`` maps 24.7%
    (docs/architecture.md)."""
    if d.b_mode not in DEPTHWISE_STRIDES:
        raise ValueError(f"port_bound needs a depthwise descriptor (b_mode one of "
                         f"{sorted(DEPTHWISE_STRIDES)}), not b_mode={d.b_mode}")
    p = param_load_cycles(d.m, post or PostLoad(bias=False, requant=False), cfg,
                          weight_arrays=depthwise_arrays(d.b_mode))
    read = d.m * d.k * d.n + p.read_a + p.read_b
    cycles = read / (cfg.a_port_bytes_per_cycle + cfg.b_port_bytes_per_cycle)
    return min(1.0, depthwise_macs(d) / (cfg.macs_per_cycle * cycles))
