"""Statically compiled address tables of an implicit-im2col convolution (seed 002, BRIEF §2.3;
the format is docs/conv_tables.md, which the RTL reads).

The implicit GEMM of one group (seed 000 mapping) has ``M = out_channels/groups``,
``K = (C/groups)*R*S`` and ``N = batch*P*Q``. B is never materialised: ``B[k, n]`` is the input
byte at ``b_addr + base[n] + off[k]`` in the padded layout (:mod:`planner.layout`), with group
``g``'s channel offset (:func:`planner.layout.group_base_bytes`) folded into ``b_addr``. One set
of tables serves every group.

Seed 002 keeps one base per lane; the hardware instead stores the lanes of each *lane group*
(``array_cols`` consecutive output pixels) as greedy maximal runs of constant stride, so one B
beat is one strided memory request per run (deviation from the seed, which has no runs).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from spec.config import AccelConfig
from spec.tables import run_field_bits, run_field_shift

from .layout import Layout, _layout, padded_dims
from .shapes import ConvShape

__all__ = ["ConvTables", "compile_tables", "row_width", "gather_b", "base_offsets", "tap_offsets",
           "RUN_BASE_BITS", "RUN_STRIDE_BITS"]

#: Segment (run) entry fields: bit position and width (spec.tables, docs/conv_tables.md).
RUN_BASE_BITS = run_field_bits("base")
RUN_LANE_LO_SHIFT, RUN_LANE_CNT_SHIFT, RUN_STRIDE_SHIFT, RUN_LAST_SHIFT = (
    run_field_shift(name) for name in ("lane_lo", "lane_cnt", "stride", "last"))
RUN_LANE_BITS = run_field_bits("lane_lo")
RUN_STRIDE_BITS = run_field_bits("stride")


def base_offsets(shape: ConvShape, layout: Layout | str) -> np.ndarray:
    """``base[n]`` (int64, length ``N = batch*P*Q``), ``n = (b*P + p)*Q + q``."""
    layout = _layout(layout)
    hp, wp = padded_dims(shape)
    b = np.arange(shape.batch, dtype=np.int64)[:, None, None]
    p = np.arange(shape.out_h, dtype=np.int64)[None, :, None]
    q = np.arange(shape.out_w, dtype=np.int64)[None, None, :]
    sh, sw, cc = shape.stride_h, shape.stride_w, shape.in_channels
    if layout is Layout.NCHW:
        base = b * (cc * hp * wp) + p * (sh * wp) + q * sw
    else:
        base = ((b * hp + p * sh) * wp + q * sw) * cc
    return base.reshape(-1)


def tap_offsets(shape: ConvShape, layout: Layout | str) -> np.ndarray:
    """``off[k]`` (int64, length ``K = (C/groups)*R*S``), ``k = (c*R + r)*S + s``."""
    layout = _layout(layout)
    hp, wp = padded_dims(shape)
    c = np.arange(shape.in_channels // shape.groups, dtype=np.int64)[:, None, None]
    r = np.arange(shape.kernel_h, dtype=np.int64)[None, :, None]
    s = np.arange(shape.kernel_w, dtype=np.int64)[None, None, :]
    dh, dw, cc = shape.dilation_h, shape.dilation_w, shape.in_channels
    if layout is Layout.NCHW:
        off = c * (hp * wp) + r * (dh * wp) + s * dw
    else:
        off = (r * (dh * wp) + s * dw) * cc + c
    return off.reshape(-1)


@dataclasses.dataclass(frozen=True, eq=False)
class ConvTables:
    """The three tables of one convolution layer (every group shares them).

    ``offsets``: u32 ``[K]``; ``segments``: u64 ``[run_count]`` (``base | lane_lo << 32 |
    lane_cnt << 40 | stride << 48 | last << 63``); ``groups``: u32 ``[ceil(N/lanes) + 1]``, the
    first run of each lane group and finally ``run_count``. ``lanes`` is ``cfg.array_cols``.
    """

    shape: ConvShape
    layout: Layout
    lanes: int
    offsets: np.ndarray
    segments: np.ndarray
    groups: np.ndarray
    #: Output pixels the tables cover: all of the layer's (``None``), or its first ``pixels``
    #: (:func:`compile_tables` ``pixels=``: one output row, run once per row with ``b_addr``
    #: moved down by the row's input offset).
    pixels: int | None = None
    #: ``(width, valid)`` of tables over *row lanes* (:func:`compile_tables` ``row_width=``, a
    #: record with a row store, docs/conv_tables.md): output row ``p`` is lanes ``p * width ..
    #: p * width + width - 1``, of which the first ``valid`` (the row's pixels) have runs and the
    #: others none (their outputs are never stored). ``None``: lane ``n`` is pixel ``n``.
    row_lanes: tuple[int, int] | None = None

    # -- sizes -----------------------------------------------------------------------------------

    @property
    def k(self) -> int:
        return int(self.offsets.size)

    @property
    def n(self) -> int:
        return self.shape.gemm.n if self.pixels is None else self.pixels

    def valid_lanes(self) -> np.ndarray:
        """Lanes with runs in each lane group (int64, length ``ceil(n / lanes)``): a prefix of
        the group, all of it but in the last group, or with :attr:`row_lanes` the part of the
        group inside its row's ``valid`` pixels."""
        return _valid_lanes(self.n, self.lanes, self.row_lanes)

    @property
    def run_count(self) -> int:
        """Entries of the segment table (the descriptor's ``run_count``)."""
        return int(self.segments.size)

    @property
    def lane_groups(self) -> int:
        return int(self.groups.size) - 1

    @property
    def table_bytes(self) -> dict[str, int]:
        """Bytes of each table image: ``off``, ``run``, ``grp``."""
        return {name: len(blob) for name, blob in self.to_bytes().items()}

    @property
    def size_bytes(self) -> int:
        """Bytes of all three table images together."""
        return 4 * self.offsets.size + 8 * self.segments.size + 4 * self.groups.size

    @property
    def span_bytes(self) -> int:
        """Bytes from ``b_addr`` (group base included) to one past the last byte any tap of any
        lane reads: ``max(base) + max(off) + 1``."""
        return int(self.runs()["last_lane_base"].max()) + int(self.offsets.max()) + 1

    def runs_per_group(self) -> np.ndarray:
        """Run count of each lane group (int64, length :attr:`lane_groups`)."""
        return np.diff(self.groups.astype(np.int64))

    # -- fields and images -----------------------------------------------------------------------

    def runs(self) -> dict[str, np.ndarray]:
        """The segment table decoded into int64 field arrays: ``base``, ``lane_lo``,
        ``lane_cnt``, ``stride``, ``last``, and ``last_lane_base`` (base of a run's last lane)."""
        seg = self.segments.astype(np.uint64)
        lane_mask = np.uint64((1 << RUN_LANE_BITS) - 1)
        out = {
            "base": (seg & np.uint64(0xFFFF_FFFF)).astype(np.int64),
            "lane_lo": ((seg >> np.uint64(RUN_LANE_LO_SHIFT)) & lane_mask).astype(np.int64),
            "lane_cnt": ((seg >> np.uint64(RUN_LANE_CNT_SHIFT)) & lane_mask).astype(np.int64),
            "stride": ((seg >> np.uint64(RUN_STRIDE_SHIFT))
                       & np.uint64((1 << RUN_STRIDE_BITS) - 1)).astype(np.int64),
            "last": (seg >> np.uint64(RUN_LAST_SHIFT)).astype(np.int64),
        }
        out["last_lane_base"] = out["base"] + (out["lane_cnt"] - 1) * out["stride"]
        return out

    def to_bytes(self) -> dict[str, bytes]:
        """Little-endian memory images: ``off`` (u32 each), ``run`` (u64 each), ``grp`` (u32)."""
        return {"off": self.offsets.astype("<u4").tobytes(),
                "run": self.segments.astype("<u8").tobytes(),
                "grp": self.groups.astype("<u4").tobytes()}

    @classmethod
    def from_bytes(cls, shape: ConvShape, layout: Layout | str, lanes: int, off: bytes,
                   run: bytes, grp: bytes) -> "ConvTables":
        """Inverse of :meth:`to_bytes` (no consistency check beyond the lengths)."""
        for name, blob, size in (("off", off, 4), ("run", run, 8), ("grp", grp, 4)):
            if len(blob) % size:
                raise ValueError(f"{name} image length {len(blob)} is not a multiple of {size}")
        return cls(shape=shape, layout=_layout(layout), lanes=lanes,
                   offsets=np.frombuffer(off, "<u4").astype(np.uint32),
                   segments=np.frombuffer(run, "<u8").astype(np.uint64),
                   groups=np.frombuffer(grp, "<u4").astype(np.uint32))


def row_width(shape: ConvShape, cfg: AccelConfig) -> int:
    """The row lanes of ``shape``'s output rows on ``cfg``: ``out_w`` rounded up to whole lane
    groups (:func:`compile_tables` ``row_width``)."""
    return -(-shape.out_w // cfg.array_cols) * cfg.array_cols


_row_width = row_width          # (compile_tables' parameter of that name hides it)


def _valid_lanes(n: int, cols: int, row_lanes: tuple[int, int] | None) -> np.ndarray:
    g = np.arange(-(-n // cols), dtype=np.int64)
    if row_lanes is None:
        return np.minimum(cols, n - g * cols)
    width, valid = row_lanes
    return np.clip(valid - (g % (width // cols)) * cols, 0, cols)


def _check_range(field: str, values: np.ndarray, hi: int, where=None) -> None:
    """Raise ValueError naming ``field`` and the first value >= ``hi``."""
    bad = np.flatnonzero(values >= hi)
    if bad.size:
        i = int(bad[0])
        at = f" ({where(i)})" if where else f" (entry {i})"
        raise ValueError(f"conv tables: {field}={int(values[i])}{at} must be < {hi}")


def compile_tables(shape: ConvShape, layout: Layout | str, cfg: AccelConfig, *,
                   pixels: int | None = None, row_width: int | None = None) -> ConvTables:
    """Build the offset, segment and group tables of ``shape`` in ``layout`` for ``cfg``.

    ``pixels`` limits the tables to the first ``pixels`` output pixels (e.g. ``out_w``: one
    output row; row ``p`` then runs the same tables with ``b_addr`` advanced by
    ``p * stride_h`` padded input rows).

    ``row_width`` (``out_w`` rounded up to a multiple of ``array_cols``; batch 1) lays the
    output rows out as *row lanes* for a record with a row store: row ``p`` is lanes ``p *
    row_width`` on, its ``out_w`` pixels first; the lanes past them have no runs (the B
    buffer keeps whatever it held there, and the store never writes their outputs).
    ``pixels`` is then a whole number of rows of lanes (default: every row).

    Lane group ``G`` holds output pixels ``G*cols .. min(G*cols + cols, N) - 1``. Its lanes are
    cut greedily from lane 0: a run starting at lane ``lo`` has stride
    ``base[lo+1] - base[lo]`` (1 if ``lo`` is the group's last valid lane) and extends while the
    next lane's base difference equals that stride. A difference that is not in
    ``[1, 2**15)`` (a jump to the next image, or a row jump of a very wide tensor) is never a
    stride: lane ``lo`` then forms a single-lane run of stride 1.

    Raises
    ------
    ValueError
        When a field does not fit its entry: an offset or run base >= 2**32, or a run stride
        >= 2**15; the message names the field, its value and where it occurs.
    """
    layout = _layout(layout)
    if not isinstance(shape, ConvShape):
        raise ValueError(f"shape must be a ConvShape, not {type(shape).__name__}")
    cols = cfg.array_cols
    gemm = shape.gemm
    n = gemm.n
    row_lanes = None
    if row_width is not None:
        q, want = shape.out_w, _row_width(shape, cfg)
        if type(row_width) is not int or row_width != want:
            raise ValueError(f"row_width must be out_w={q} rounded up to a multiple of "
                             f"array_cols={cols} ({want}), not {row_width!r}")
        if shape.batch != 1:
            raise ValueError(f"row_width: row lanes need batch 1, not batch={shape.batch}")
        row_lanes, n = (row_width, q), shape.out_h * row_width
    if pixels is not None:
        if type(pixels) is not int or not 1 <= pixels <= n or (
                row_width is not None and pixels % row_width):
            raise ValueError(f"pixels must be an int in [1, {n}]"
                             + ("" if row_width is None else
                                f", a multiple of row_width={row_width}")
                             + f", not {pixels!r}")
        n = pixels
    off = tap_offsets(shape, layout)
    _check_range("off", off, 1 << 32, lambda i: f"tap k={i}")
    if row_width is None:
        base = base_offsets(shape, layout)[:n]
    else:                       # row lanes: a row's pixels, then lanes with no run
        rows = base_offsets(shape, layout).reshape(shape.out_h, shape.out_w)[:n // row_width]
        base = np.full((rows.shape[0], row_width), -1, np.int64)
        base[:, :shape.out_w] = rows
        base = base.reshape(-1)
    _check_range("base", base, 1 << RUN_BASE_BITS, lambda i: f"output pixel n={i}")

    ngroups = -(-n // cols)
    padded = np.full(ngroups * cols, -1, dtype=np.int64)
    padded[:n] = base
    bases = padded.reshape(ngroups, cols)
    valid = _valid_lanes(n, cols, row_lanes)                  # lanes with runs, per group
    lane = np.arange(cols, dtype=np.int64)
    # diff[G, j] = base[j+1] - base[j]; only meaningful while lane j+1 is valid
    diff = np.empty_like(bases)
    diff[:, :-1] = bases[:, 1:] - bases[:, :-1]
    diff[:, -1] = 1
    diff[lane[None, :] + 1 >= valid[:, None]] = 1     # a run starting at the last lane: stride 1
    # A jump no run stride can encode (across images or rows of a wide tensor, or backwards)
    # ends the run: the lane before it is a run of its own.
    jump = (diff <= 0) | (diff >= 1 << RUN_STRIDE_BITS)

    # Greedy cut, vectorised over lane groups, sequential over the (few) lanes.
    starts = np.zeros((ngroups, cols), dtype=bool)
    run_stride = np.zeros((ngroups, cols), dtype=np.int64)
    cur = np.zeros(ngroups, dtype=np.int64)
    for j in range(cols):
        live = j < valid
        if j == 0:
            new = live
        else:
            new = live & ((diff[:, j - 1] != cur) | jump[:, j - 1])
        cur = np.where(new, np.where(jump[:, j], 1, diff[:, j]), cur)
        starts[:, j] = new
        run_stride[:, j] = cur

    gidx, lo = np.nonzero(starts)                    # group-major, lane ascending
    nxt = np.empty_like(lo)
    nxt[:-1] = lo[1:]
    same = np.zeros(lo.size, dtype=bool)
    same[:-1] = gidx[1:] == gidx[:-1]
    cnt = np.where(same, nxt, valid[gidx]) - lo
    stride = run_stride[gidx, lo]
    last = ~same
    _check_range("stride", stride, 1 << RUN_STRIDE_BITS,
                 lambda i: f"run {i}: lane group {int(gidx[i])}, lane_lo {int(lo[i])}")
    run_base = bases[gidx, lo]

    seg = (run_base.astype(np.uint64)
           | (lo.astype(np.uint64) << np.uint64(RUN_LANE_LO_SHIFT))
           | (cnt.astype(np.uint64) << np.uint64(RUN_LANE_CNT_SHIFT))
           | (stride.astype(np.uint64) << np.uint64(RUN_STRIDE_SHIFT))
           | (last.astype(np.uint64) << np.uint64(RUN_LAST_SHIFT)))
    first = np.zeros(ngroups + 1, dtype=np.int64)
    np.cumsum(starts.sum(axis=1), out=first[1:])
    _check_range("run_count", first[-1:], 1 << 32)
    return ConvTables(shape=shape, layout=layout, lanes=cols, offsets=off.astype(np.uint32),
                      segments=seg, groups=first.astype(np.uint32),
                      pixels=n if row_width is not None else pixels, row_lanes=row_lanes)


def _as_range(name: str, value, size: int) -> range:
    if value is None:
        return range(size)
    if isinstance(value, tuple) and len(value) == 2:
        value = range(*value)
    if not isinstance(value, range) or value.step != 1 or not (
            0 <= value.start <= value.stop <= size):
        raise ValueError(f"{name} must be a step-1 range (or (lo, hi)) within [0, {size}], "
                         f"not {value!r}")
    return value


def gather_b(tables: ConvTables, tensor_bytes, k_range=None, n_range=None) -> np.ndarray:
    """``B[k, n]`` for ``k`` in ``k_range``, ``n`` in ``n_range`` (int8), read the way the B load
    engine reads it: walk each lane group's runs (group table -> segment entries), fill lanes
    ``lane_lo .. lane_lo + lane_cnt - 1`` from ``base + off[k] + i*stride``.

    ``tensor_bytes`` is memory from ``b_addr`` on (a group's base already applied), as bytes or
    an int8/uint8 array. Row lanes with no run (:attr:`ConvTables.row_lanes`) read 0 here
    (the hardware leaves whatever the buffer held; their outputs are never stored). Raises
    ValueError when the tables are malformed: a valid lane filled twice or never, a ``last``
    flag out of place, or an address outside ``tensor_bytes``.
    """
    mem = np.frombuffer(bytes(tensor_bytes), dtype=np.int8) if isinstance(
        tensor_bytes, (bytes, bytearray, memoryview)) else np.asarray(tensor_bytes).view(np.int8)
    mem = mem.reshape(-1)
    cols = tables.lanes
    n_total = tables.n
    ks = _as_range("k_range", k_range, tables.k)
    ns = _as_range("n_range", n_range, n_total)
    f = tables.runs()
    grp = tables.groups.astype(np.int64)
    if grp.size != -(-n_total // cols) + 1 or grp[0] != 0 or grp[-1] != tables.run_count \
            or np.any(np.diff(grp) < 1):
        raise ValueError(f"gather_b: the group table must hold {-(-n_total // cols) + 1} "
                         f"non-decreasing run indices from 0 to run_count={tables.run_count}, "
                         f"each group >= 1 run; got {grp.tolist()[:8]}"
                         f"{' ...' if grp.size > 8 else ''}")

    g_lo, g_hi = ns.start // cols, -(-ns.stop // cols)
    lane_addr = np.full((g_hi - g_lo) * cols, -1, dtype=np.int64)
    filled = np.zeros_like(lane_addr)
    valid_lanes = tables.valid_lanes()
    for g in range(g_lo, g_hi):
        first, stop = int(grp[g]), int(grp[g + 1])
        valid = int(valid_lanes[g])
        for i in range(first, stop):
            lo, cnt = int(f["lane_lo"][i]), int(f["lane_cnt"][i])
            if bool(f["last"][i]) != (i == stop - 1):
                raise ValueError(f"gather_b: run {i} of lane group {g} has last={f['last'][i]}, "
                                 f"expected {int(i == stop - 1)} (last is 1 only on a group's "
                                 f"final run)")
            if cnt < 1 or lo + cnt > valid:
                raise ValueError(f"gather_b: run {i} lane_lo={lo} + lane_cnt={cnt} must be in "
                                 f"[1, {valid}] (group {g}'s valid lanes)")
            dst = (g - g_lo) * cols + lo
            lane_addr[dst:dst + cnt] = f["base"][i] + np.arange(cnt) * f["stride"][i]
            filled[dst:dst + cnt] += 1
        if np.any(filled[(g - g_lo) * cols:(g - g_lo) * cols + valid] != 1):
            raise ValueError(f"gather_b: lane group {g} does not fill each lane exactly once")
    want = lane_addr[ns.start - g_lo * cols: ns.stop - g_lo * cols]
    off = tables.offsets.astype(np.int64)[ks.start:ks.stop]
    live = filled[ns.start - g_lo * cols: ns.stop - g_lo * cols] > 0
    addr = off[:, None] + want[None, :]
    got = addr[:, live]
    if got.size and (got.min() < 0 or got.max() >= mem.size):
        bad = int(got.min()) if got.min() < 0 else int(got.max())
        raise ValueError(f"gather_b: address {bad} outside the {mem.size}-byte tensor: "
                         f"addresses must be in [0, {mem.size})")
    out = np.zeros(addr.shape, np.int8)      # row lanes with no run: 0 here (stale on chip)
    out[:, live] = mem[got]
    return out
