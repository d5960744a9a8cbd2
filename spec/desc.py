"""The GEMM descriptor the sequencer executes, its error codes, and their legality rules.

Imports nothing from Amaranth. The descriptor carries exactly seed 000's tiling outputs plus the
tensor addresses; :func:`check` states, in Python, the same rules the RTL checks before it runs a
descriptor (the RTL test-suite asserts that both agree), so the planner can only emit what the
hardware accepts.

Memory layouts (element addresses, in bytes from the start of the memory):

* A (``m`` x ``k``, int8) is stored *k-major* (as A transposed): ``A[i, kk]`` is at
  ``a_addr + kk * a_stride + i``. Weights are static, so the compiler lays them out once.
* B (``k`` x ``n``, int8) is row-major: ``B[kk, j]`` is at ``b_addr + kk * b_stride + j``.
* C (``m`` x ``n``, int32, little-endian) is row-major: ``C[i, j]`` is at
  ``c_addr + i * c_stride + 4 * j``.
* With ``b_mode = 1`` (implicit-im2col convolution, docs/conv_tables.md) B is not a matrix in
  memory: ``B[kk, j]`` is at ``b_addr + base[j] + off[kk]``, read through three tables at
  ``off_addr`` (``k`` u32 offsets), ``run_addr`` (``run_count`` u64 runs) and ``grp_addr``
  (``ceil(n / array_cols) + 1`` u32 run indices). ``b_stride`` is then the size in bytes of
  the input tensor region at ``b_addr`` that the tables address.
* With ``b_mode = 2`` (a depthwise 3x3 convolution, stride 1, pad 1, on the mesh; configs with
  ``dw_mesh = 1``; docs/architecture.md "Depthwise convolution") the fields mean: ``m``
  channels of ``k`` x ``n`` maps (``h`` x ``w``); the input dense NCHW int8 at ``b_addr`` with
  ``b_stride`` its channel pitch ``k * n``; the output dense NCHW at ``c_addr`` with
  ``c_stride`` its channel pitch ``k * n * out_bytes``; the weights three u32 arrays of ``m``
  words at ``a_addr``, ``a_addr + a_stride``, ``a_addr + 2 a_stride`` (taps ``4t .. 4t + 3``
  of a channel in array ``t``, :func:`depthwise_weight_words`); ``partition_m`` the channels a
  strip step takes (``G``); ``acc_buffer_needed`` the accumulator bytes of a step, at least
  ``(G k + array_rows)`` rows. Every field a depthwise layer does not use
  (:data:`DEPTHWISE_UNUSED`) is 0.
* With ``c_rows`` nonzero (the *row store*, configs with ``row_store = 1``; ``b_mode`` 0 or
  1) C is laid out as rows of pixels: ``n = c_rows * partition_n``, each n partition is one
  output row of which the first ``c_row_elems`` elements are stored (more than
  ``partition_n - array_cols``: the row ends in the partition's last lane group), and ``C[i, r *
  partition_n + q]`` (``q < c_row_elems``) is at ``c_addr + i * c_stride + r * c_row_pitch
  + q * out_bytes``; the others are computed and never written (:func:`row_store`). A
  convolution so writes the interior of a padded buffer in one record. With ``c_rows = 0``
  ``c_row_elems`` and ``c_row_pitch`` are 0 too.
* ``b_mode = 3`` is the same layer with stride 2 (:data:`B_MODE_DEPTHWISE_S2`): every field as
  with ``b_mode = 2`` but the output, ``ceil(k / 2)`` x ``ceil(n / 2)`` maps, so ``c_stride``
  is ``ceil(k / 2) * ceil(n / 2) * out_bytes`` (:func:`depthwise_out`). The mesh computes the
  stride-1 results and the store keeps their even rows and columns.
* ``b_mode = 4`` and ``5`` (:data:`B_MODE_DEPTHWISE5`, :data:`B_MODE_DEPTHWISE5_S2`) are a
  depthwise 5x5 layer with pad 2, stride 1 or 2: every field as with ``b_mode`` 2 and 3 (the
  output maps are the same sizes), but the weights are seven u32 arrays at ``a_addr + t
  a_stride`` (``t < 7``; taps ``4t .. 4t + 3`` of the channel's 25, row-major, in array ``t``:
  :func:`depthwise_weight_words`, :func:`depthwise_arrays`). ``b_mode = 6`` and ``7``
  (:data:`B_MODE_DEPTHWISE7`, :data:`B_MODE_DEPTHWISE7_S2`) are the same for a 7x7 layer with
  pad 3: 13 weight arrays of the channel's 49 taps.
* A stride-2 depthwise ``b_mode`` (3, 5 or 7) plus :data:`B_MODE_ODD_ROWS` (8) and / or
  :data:`B_MODE_ODD_COLS` (16) is the same layer with a top (left) pad one less than the
  kernel's: pads ``(p - 1, p)``, TF/Keras ``"SAME"`` padding of a map of even height (width).
  Its outputs are the stride-1 results' odd rows (columns), which the store keeps instead of
  the even ones (:func:`depthwise_odd`); ``k`` (``n``) must then be even, and the output maps
  are the same sizes.

Loop nest (seed 000 step 5): outer partitions (``m`` outside ``n`` when ``outer_m`` is 1, else
``n`` outside ``m``) -> split-K partitions -> inner tiles (``tile_m`` x ``tile_n``) -> array tiles
(``array_rows`` x ``array_cols``).
"""

from __future__ import annotations

import dataclasses
import enum
import fractions
import functools

from .config import AccelConfig

__all__ = ["ErrorCode", "Tiling", "Operands", "GemmDescriptor", "DESC_FIELDS", "check",
           "DIM_BITS", "MAX_DIM", "tensor_extents", "groups_n", "local_problem", "table_problems",
           "B_MODE_DEPTHWISE", "B_MODE_DEPTHWISE_S2", "DEPTHWISE_STRIDES", "DEPTHWISE_UNUSED",
           "depthwise_out", "depthwise_words", "depthwise_weight_words", "ROW_FIELDS",
           "B_MODE_DEPTHWISE5", "B_MODE_DEPTHWISE5_S2", "DEPTHWISE_KERNELS", "depthwise_arrays",
           "B_MODE_DEPTHWISE7", "B_MODE_DEPTHWISE7_S2", "depthwise_kernels",
           "depthwise_mesh_side", "B_MODE_ODD_ROWS", "B_MODE_ODD_COLS", "depthwise_odd",
           "phase_halves", "col_phases", "col_phase_ranges", "col_phase_kernels",
           "row_store", "c_span"]

#: Bits of a dimension (m, k, n, partitions): the width of the hardware's length and count
#: registers, and MAX_DIM the largest value the 32-bit descriptor fields may carry.
DIM_BITS = 24
MAX_DIM = (1 << DIM_BITS) - 1


class ErrorCode(enum.IntEnum):
    """Values of the ERROR register; 0 means success. Reaches C headers as ``ACCEL_ERR_*``."""

    NONE = 0
    BAD_SHAPE = 1           # m, k or n is 0 or larger than MAX_DIM
    BAD_PARTITION_M = 2     # partition_m is 0 or not a multiple of array_rows
    BAD_PARTITION_N = 3     # partition_n is 0 or not a multiple of array_cols
    BAD_PARTITION_K = 4     # partition_k is 0, or < k without need_splitk
    BAD_TILE = 5            # tile_m / tile_n not an array multiple in [array, partition]
    BUF_A_OVERFLOW = 6      # partition_m * partition_k > buf_a_half_bytes
    BUF_B_OVERFLOW = 7      # partition_k * partition_n > buf_b_half_bytes
    ACC_OVERFLOW = 8        # partition_m * partition_n * 4 > acc_buffer_needed, or
                            # acc_buffer_needed > acc_half_bytes
    BAD_ADDRESS = 9         # a tensor reaches outside the memory, or C overlaps A or B; a B
                            # or C in the local buffer that it cannot serve (local_problem)
    BAD_FLAGS = 10          # outer_m or need_splitk is neither 0 nor 1, b_mode is not 0, 1
                            # (or with dw_mesh a DEPTHWISE_STRIDES value whose kernel the mesh
                            # walks), or a depthwise layer sets an unused field or an odd-row
                            # (column) bit on an odd height (width)
    BAD_TABLE = 11          # convolution tables larger than the on-chip table memories
    # layer record rules (spec.record.check_record)
    BAD_LAYER = 12          # op_kind / out_format / post_mode / bias_present / int8 fields,
                            # or more output channels than quant_entries with post-processing
    BAD_WINDOW = 13         # output window, written range, statistics or parameter addresses
    BAD_QUANT = 14          # a multiplier outside [1, 2**31) or a shift outside [-31, 31]
    # image rules (spec.record.check_header), image runs only
    BAD_IMAGE = 15          # magic, format version or the image structure
    CONFIG_MISMATCH = 16    # the image's config_id is not this accelerator's
    BAD_CRC = 17            # the image's CRC-32 does not match its bytes
    BAD_WEIGHTS = 18        # a layer's A loads do not match its record's a_crc (after it ran)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Tiling:
    """A GEMM shape with seed 000's tiling of it: the descriptor fields from ``m`` to
    ``acc_buffer_needed``, in descriptor order (base of :class:`GemmDescriptor` and of
    :class:`planner.tiling.TilingPlan`)."""

    m: int
    k: int
    n: int
    partition_m: int
    partition_n: int
    partition_k: int
    tile_m: int
    tile_n: int
    outer_m: int          # seed 000 outer loop flag: 1 = m partitions outside n partitions
    need_splitk: int
    acc_buffer_needed: int  # bytes of one accumulator half the plan uses


@dataclasses.dataclass(frozen=True, kw_only=True)
class Operands:
    """Where A (k-major), B and C live, with their row strides in bytes: the descriptor fields
    from ``a_addr`` to ``c_stride``, in descriptor order (base of :class:`GemmDescriptor` and of
    :class:`tb.placement.Placement`)."""

    a_addr: int
    a_stride: int
    b_addr: int
    b_stride: int
    c_addr: int
    c_stride: int


@dataclasses.dataclass(frozen=True, kw_only=True)
class GemmDescriptor(Operands, Tiling):
    """One tiled GEMM as the sequencer executes it. Every field is an unsigned 32-bit word.

    Fields, in register order: :class:`Tiling`'s, then :class:`Operands`', then the
    convolution ones below (dataclass fields follow the bases in reverse MRO order)."""

    b_mode: int = 0       # 0: B dense row-major; 1: B through the convolution tables;
                          # 2, 3: depthwise 3x3, stride 1 or 2, on the mesh; 4, 5: the same
                          # 5x5; 6, 7: 7x7 (module docstring)
    off_addr: int = 0
    run_addr: int = 0
    grp_addr: int = 0
    run_count: int = 0
    # the row store (module docstring; configs with row_store = 1): 0 = C dense row-major
    c_rows: int = 0
    c_row_elems: int = 0
    c_row_pitch: int = 0

    def __post_init__(self):
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if type(value) is not int or not 0 <= value < (1 << 32):
                raise ValueError(f"GemmDescriptor.{field.name} must be an int in [0, 2**32), "
                                 f"not {value!r}")

    def words(self) -> list[int]:
        """The descriptor as register words, in :data:`DESC_FIELDS` order."""
        return [getattr(self, name) for name in DESC_FIELDS]


#: Register order of the descriptor fields (the CSR map and the firmware image use it).
DESC_FIELDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(GemmDescriptor))

#: ``b_mode`` of a depthwise 3x3 layer (stride 1, pad 1) on the mesh.
B_MODE_DEPTHWISE = 2
#: ``b_mode`` of a depthwise 3x3 layer with stride 2 (pad 1) on the mesh.
B_MODE_DEPTHWISE_S2 = 3
#: ``b_mode`` of a depthwise 5x5 layer (stride 1, pad 2) on the mesh.
B_MODE_DEPTHWISE5 = 4
#: ``b_mode`` of a depthwise 5x5 layer with stride 2 (pad 2) on the mesh.
B_MODE_DEPTHWISE5_S2 = 5
#: ``b_mode`` of a depthwise 7x7 layer (stride 1, pad 3) on the mesh.
B_MODE_DEPTHWISE7 = 6
#: ``b_mode`` of a depthwise 7x7 layer with stride 2 (pad 3) on the mesh.
B_MODE_DEPTHWISE7_S2 = 7
#: ``b_mode`` bit of a stride-2 depthwise layer whose top pad is one less than the kernel's
#: ``p = (k - 1) / 2`` (``p - 1`` above, ``p`` below: TF/Keras ``"SAME"`` or ONNX
#: ``SAME_UPPER`` padding of a map of even height): its outputs are the stride-1 results' odd
#: rows, which the store keeps instead of the even ones. The map's height ``k`` must be even.
B_MODE_ODD_ROWS = 8
#: The same for the columns (left pad ``p - 1``, right pad ``p``; the map's width ``n`` even).
B_MODE_ODD_COLS = 16
_STRIDE2 = (B_MODE_DEPTHWISE_S2, B_MODE_DEPTHWISE5_S2, B_MODE_DEPTHWISE7_S2)
_ODD = (B_MODE_ODD_ROWS, B_MODE_ODD_COLS, B_MODE_ODD_ROWS | B_MODE_ODD_COLS)
#: The depthwise ``b_mode`` values and their strides: ``2 + 2 kernel code + (stride 2)``, the
#: stride-2 ones also with :data:`B_MODE_ODD_ROWS` and / or :data:`B_MODE_ODD_COLS`
#: (:func:`depthwise_odd`).
DEPTHWISE_STRIDES: dict[int, int] = {
    B_MODE_DEPTHWISE: 1, B_MODE_DEPTHWISE_S2: 2, B_MODE_DEPTHWISE5: 1, B_MODE_DEPTHWISE5_S2: 2,
    B_MODE_DEPTHWISE7: 1, B_MODE_DEPTHWISE7_S2: 2,
    **{b | odd: 2 for b in _STRIDE2 for odd in _ODD}}
#: The depthwise ``b_mode`` values and their kernels (``k`` x ``k``, pad ``(k - 1) / 2``, or
#: ``p - 1`` on the top or left with :func:`depthwise_odd`): the kernel code ``(b_mode[2:0] -
#: 2) >> 1`` (0 3x3, 1 5x5, 2 7x7), as :func:`hw.checker.depthwise_mode` decodes it.
DEPTHWISE_KERNELS: dict[int, int] = {
    b: 3 + 2 * (((b & 7) - B_MODE_DEPTHWISE) >> 1) for b in DEPTHWISE_STRIDES}
#: Descriptor fields a depthwise layer does not use: they must be 0 (``BAD_FLAGS``).
DEPTHWISE_UNUSED: tuple[str, ...] = ("partition_n", "partition_k", "tile_m", "tile_n",
                                     "outer_m", "need_splitk", "off_addr", "run_addr",
                                     "grp_addr", "run_count", "c_rows", "c_row_elems",
                                     "c_row_pitch")
#: The row store's descriptor fields (:func:`row_store`).
ROW_FIELDS: tuple[str, ...] = ("c_rows", "c_row_elems", "c_row_pitch")


def row_store(d: GemmDescriptor) -> bool:
    """``d`` lays C out as rows of pixels (``c_rows`` nonzero: module docstring)."""
    return d.c_rows != 0


def c_span(d: GemmDescriptor, out_bytes: int, *, lanes: int = 1) -> int:
    """Bytes from a C row's start (``c_addr + i * c_stride``) to one past its last element
    (rounded up to ``lanes`` elements a beat, as the store's beats cover them): ``n`` elements,
    or with the row store ``(c_rows - 1) * c_row_pitch`` plus the last row's
    ``c_row_elems``."""
    if row_store(d):
        return (d.c_rows - 1) * d.c_row_pitch + out_bytes * (-(-d.c_row_elems // lanes) * lanes)
    return out_bytes * (-(-d.n // lanes) * lanes)


def depthwise_out(d: GemmDescriptor) -> tuple[int, int]:
    """The output map of a depthwise descriptor (:data:`DEPTHWISE_STRIDES`): ``(k, n)`` with
    stride 1, ``(ceil(k / 2), ceil(n / 2))`` with stride 2 (a k x k window with pad ``(k - 1) /
    2``; with :func:`depthwise_odd` the map's even side gives as many outputs either way)."""
    s = DEPTHWISE_STRIDES[d.b_mode]
    return -(-d.k // s), -(-d.n // s)


def depthwise_odd(b_mode: int) -> tuple[bool, bool]:
    """Whether a depthwise ``b_mode`` keeps the odd rows and the odd columns of the stride-1
    results (:data:`B_MODE_ODD_ROWS`, :data:`B_MODE_ODD_COLS`): ``(odd_rows, odd_cols)``. A
    stride-2 layer with pads ``(top, bottom)`` = ``(p, p)`` keeps the even rows, one with
    ``(p - 1, p)`` (and an even height) the odd ones; the same for the columns."""
    return bool(b_mode & B_MODE_ODD_ROWS), bool(b_mode & B_MODE_ODD_COLS)


def phase_halves(h: int, *, rows: int, stride: int, kernel: int = 3) -> bool:
    """A stride-2 3x3 or 5x5 depthwise layer of ``h``-row maps runs in row phases two channels
    a tile, one in each half of the mesh (:attr:`spec.dwmesh.StripTile.halves` with
    :attr:`spec.dwmesh.StripTile.phase1`; session 41): ``h`` even, from ``rows / 2`` to
    ``rows - 2`` (8 to 14 on the 16x16, MobileNet-V2's 14 x 14 layer among them), so that a
    channel's ``h / 2 + 1`` phase-0 rows (3x3) fill at most half the mesh. A ``rows + 8``-beat
    tile then gives two channels' ``h / 2`` output rows, where a whole-mesh stride-1 tile
    (:func:`spec.dwmesh.one_tile`, ``rows / 2 + 9`` beats) gave one channel's, three of its
    four outputs dropped by the store. With ``h`` two more than a multiple of 4 the step's
    stacked maps split into classes of unequal size: buffer A holds ``ceil(G h / 4)`` rows of
    each of its two classes, one row more than half the step's rows when ``G h / 2`` is odd
    (:func:`depthwise_words`). A 5x5 layer the same (its phases the window rows 0, 2, 4, then
    1, 3): phase 0's ``h / 2 + 2`` rows are one more than half the mesh at ``h = rows - 2``,
    and that row (a bottom pad row) is, round the mesh's column ring, the other half's first
    row, a top pad row: the same pad value. (In this module, beside the other descriptor
    rules that use it; :mod:`spec.dwmesh` builds the tiles.)"""
    return (stride == 2 and kernel in (3, 5) and h % 2 == 0 and rows % 4 == 0
            and rows // 2 <= h <= rows - 2)


def col_phases(h: int, w: int, *, rows: int, cols: int, stride: int, kernel: int = 3) -> bool:
    """A stride-2 3x3 or 5x5 depthwise layer of ``h x w`` maps runs in row *and* column phases
    (:attr:`spec.dwmesh.StripTile.cphases`, session 42): every PE an output, ``cols - p``
    output columns a strip (pad ``p``), four fills a tile, the window columns ``0, 2, ..`` from
    the input's columns of one parity and ``1, 3, ..`` from the other's, which the loads
    deinterleave (:attr:`spec.dwmesh.BlockLoad.dwords`). Taken for the maps the row phases
    take whole-mesh (``h`` a multiple of 4 above ``rows - 2``; not :func:`phase_halves`'), on
    a square mesh of a multiple of 4 rows, where it needs fewer beats a tile row: ``ceil(ceil(w
    / 2) / (cols - p))`` strips of ``2 rows + k^2 - 4``-beat tiles (back to back) against the
    row phases' strips of ``cols - 2 p`` columns (one for maps of at most ``cols - p``) of
    ``rows + k^2 - 2``. On the 16x16 that is a 3x3 map of 16 to 30 columns or of 43 and
    more (MobileNet-V2's 28, 56 and 112: ``ceil(w / 30)`` strips of 37 beats against ``ceil(w
    / 14)`` of 23; from 31 to 42 columns two such strips lose to three of 23 beats) and a 5x5
    map of 15 columns and more."""
    return (stride == 2 and kernel in col_phase_kernels(rows, cols) and h % 4 == 0
            and h > rows - 2 and _col_phases_pay(w, cols, kernel))


def col_phase_kernels(rows: int, cols: int) -> tuple[int, ...]:
    """The kernels a ``rows`` x ``cols`` mesh runs in row and column phases
    (:func:`col_phases`): 3x3 and 5x5 on a square mesh of a multiple of 4 rows that walks
    them (:func:`depthwise_mesh_side`)."""
    return tuple(k for k in (3, 5) if rows == cols and rows % 4 == 0
                 and rows >= depthwise_mesh_side(k))


def _col_phases_pay(w: int, cols: int, kernel: int) -> bool:
    # column phases' strips of 2 C + k^2 - 4 beats against the row phases' of C + k^2 - 2
    # (a square mesh: C rows) for a map of w columns (col_phases)
    pad = (kernel - 1) // 2
    rp = 1 if w <= cols - pad else -(-w // (cols - 2 * pad))
    cp = -(-(-(-w // 2)) // (cols - pad))
    return w >= 1 and cp * (2 * cols + kernel * kernel - 4) < rp * (cols + kernel * kernel - 2)


@functools.lru_cache(maxsize=None)
def col_phase_ranges(cols: int, kernel: int) -> tuple[tuple[int, int], ...]:
    """The map widths :func:`col_phases` takes on a square mesh of ``cols`` columns, as ``(lo,
    hi)`` ranges ``lo < w <= hi`` (the RTL compares with them), ``hi`` up to ``2 ** DIM_BITS -
    1``: for 3x3 on the 16x16 ``(15, 30)`` and ``(42, 2 ** 24 - 1)``, for 5x5 ``(14, 2 ** 24 -
    1)``. Past a width the per-column costs decide (``a / (2 (C - p))`` a column in column
    phases, ``b / (C - 2 p)`` in row phases, for tiles of ``a = 2 C + k^2 - 4`` and ``b = C +
    k^2 - 2`` beats): with the first smaller, column phases win for good above ``a / s``
    (``s`` the difference), the last range then open to the largest width."""
    if kernel not in (3, 5) or cols < depthwise_mesh_side(kernel):
        return ()
    top, hi_open = (1 << DIM_BITS) - 1, False
    pad = (kernel - 1) // 2
    a, b = 2 * cols + kernel * kernel - 4, cols + kernel * kernel - 2
    slope = fractions.Fraction(b, cols - 2 * pad) - fractions.Fraction(a, 2 * (cols - pad))
    if slope > 0:                                # won for good above a / slope
        top, hi_open = min(top, int(a / slope) + 1), True
    elif slope < 0:                              # lost for good above b / -slope
        top = min(top, int(b / -slope) + 1)
    assert top < 1 << 16, f"col_phase_ranges: a {cols}-column mesh scans {top} widths"
    ranges, start = [], None
    for w in range(1, top + 2):
        if w <= top and _col_phases_pay(w, cols, kernel):
            start = w - 1 if start is None else start
        elif start is not None:
            ranges.append((start, w - 1))
            start = None
    if hi_open and ranges and ranges[-1][1] == top:
        ranges[-1] = (ranges[-1][0], (1 << DIM_BITS) - 1)
    return tuple(ranges)


def depthwise_words(d: GemmDescriptor, rows: int) -> tuple[int, int]:
    """Buffer-A and buffer-B words a depthwise strip step fills on a mesh of ``rows`` rows: the
    odd and even rows of its ``partition_m`` channels' maps stacked (``G k`` rows), ``(G k) >>
    1`` and ``(G k + 1) >> 1``; in row phases two channels a tile
    (:func:`phase_halves`) the stacked rows ``4 j`` and ``4 j + 1`` in A, ``4 j +
    2`` and ``4 j + 3`` in B, each buffer's second class from word ``ceil(G k / 4)``: ``2
    ceil(G k / 4)`` words of A, and B up to word ``G k / 2`` (its classes ``floor(G k / 4)``
    rows each); in row and column phases (:func:`col_phases`) every row twice, its columns of
    either parity a word: ``G k`` words of each."""
    gk = d.partition_m * d.k
    if col_phases(d.k, d.n, rows=rows, cols=rows, stride=DEPTHWISE_STRIDES[d.b_mode],
                  kernel=DEPTHWISE_KERNELS[d.b_mode]):
        return gk, gk
    if phase_halves(d.k, rows=rows, stride=DEPTHWISE_STRIDES[d.b_mode],
                    kernel=DEPTHWISE_KERNELS[d.b_mode]):
        return 2 * -(-gk // 4), (gk + 1) >> 1
    return gk >> 1, (gk + 1) >> 1


def depthwise_mesh_side(kernel: int) -> int:
    """The fewest rows and columns a mesh walking a ``kernel`` x ``kernel`` depthwise kernel
    has: with pad ``p = (kernel - 1) / 2``, ``2 p + max(2, p)`` (tiles of ``2 p`` fewer outputs
    than the mesh, at least two; strips at least ``p`` wide: :func:`spec.dwmesh.strip_steps`):
    4 for 3x3, 6 for 5x5, 9 for 7x7."""
    pad = (kernel - 1) // 2
    return 2 * pad + max(2, pad)


def depthwise_kernels(cfg: AccelConfig) -> tuple[int, ...]:
    """The depthwise kernels ``cfg``'s mesh walks (none without ``dw_mesh``): those of
    :data:`DEPTHWISE_KERNELS` whose :func:`depthwise_mesh_side` the array reaches (3x3 from 4 x
    4, 5x5 from 6 x 6, 7x7 from 9 x 9)."""
    side = min(cfg.array_rows, cfg.array_cols)
    kernels = sorted(set(DEPTHWISE_KERNELS.values()))
    return tuple(k for k in kernels if side >= depthwise_mesh_side(k)) if cfg.dw_mesh else ()


def depthwise_arrays(b_mode: int) -> int:
    """The weight arrays of a depthwise ``b_mode``: ``ceil(taps / 4)`` u32 arrays, 3 for 3x3, 7
    for 5x5, 13 for 7x7."""
    return -(-DEPTHWISE_KERNELS[b_mode] ** 2 // 4)


def depthwise_weight_words(taps) -> tuple[int, ...]:
    """The u32 weight words of one depthwise channel (its 9, 25 or 49 int8 ``taps``, row-major
    3 x 3, 5 x 5 or 7 x 7): word ``t`` holds taps ``4t .. 4t + 3``, tap ``4t`` in its low byte
    (the last word only the last tap): 3, 7 or 13 words."""
    flat = [int(v) for v in taps]
    if len(flat) not in (9, 25, 49) or not all(-128 <= v <= 127 for v in flat):
        raise ValueError(f"depthwise_weight_words: 9, 25 or 49 int8 taps (3x3, 5x5, 7x7), not "
                         f"{taps!r}")
    words = -(-len(flat) // 4)
    b = [v & 0xFF for v in flat] + [0] * (4 * words - len(flat))
    return tuple(int.from_bytes(bytes(b[4 * t:4 * t + 4]), "little") for t in range(words))


def _extent(addr: int, rows: int, stride: int, row_bytes: int) -> tuple[int, int]:
    """[first, last+1) byte range touched by ``rows`` rows of ``row_bytes`` at ``stride``."""
    return addr, addr + (rows - 1) * stride + row_bytes


def groups_n(d: GemmDescriptor, cfg: AccelConfig) -> int:
    """Lane groups of N: the group table has one more entry."""
    return lane_groups(d.n, cfg)


def lane_groups(n: int, cfg: AccelConfig) -> int:
    """Lane groups of ``n`` output pixels (``array_cols`` lanes each)."""
    return -(-n // cfg.array_cols)


def tensor_extents(d: GemmDescriptor, cfg: AccelConfig, *,
                   out_bytes: int = 4) -> dict[str, tuple[int, int]]:
    """Byte ranges the memory ports may address for A, B and C (and the convolution tables),
    each row rounded up to whole lane groups. Reads past a row's end are masked; C elements past
    ``n`` carry cleared strobes, so the bytes *written* are exactly
    ``c_addr + i * c_stride + [0, out_bytes * n)``. A table word read fetches a whole B beat.
    ``out_bytes`` is the size of a C element: 4 (int32 output) or 1 (int8 output). With the
    row store C's rows are ``c_rows`` rows of pixels each (:func:`c_span`).

    A depthwise layer (:data:`DEPTHWISE_STRIDES`) has ``a``: its weight arrays, ``b``: the input's
    ``m`` channels at ``b_stride``, ``c``: the output's at ``c_stride`` (written exactly). Its
    row loads are beats too: the last one may read up to ``array_cols - 1`` bytes past ``b``
    (masked, never written anywhere), which these extents do not count, so a depthwise input
    may end exactly where another tensor begins."""
    r, c = cfg.array_rows, cfg.array_cols
    a_row = -(-d.m // r) * r
    b_row = -(-d.n // c) * c
    out = {
        "a": _extent(d.a_addr, d.k, d.a_stride, a_row),
        "b": _extent(d.b_addr, d.k, d.b_stride, b_row),
        "c": _extent(d.c_addr, d.m, d.c_stride, c_span(d, out_bytes, lanes=c)),
    }
    if d.b_mode in DEPTHWISE_STRIDES:
        arrays = depthwise_arrays(d.b_mode)
        return {"a": (d.a_addr, d.a_addr + (arrays - 1) * d.a_stride + 4 * d.m),
                "b": (d.b_addr, d.b_addr + d.m * d.b_stride),
                "c": (d.c_addr, d.c_addr + d.m * d.c_stride)}
    if d.b_mode == 1:
        beat = cfg.b_beat_bytes
        out["b"] = (d.b_addr, d.b_addr + d.b_stride)
        out["off"] = (d.off_addr, d.off_addr + 4 * (d.k - 1) + beat)
        out["run"] = (d.run_addr, d.run_addr + 8 * (d.run_count - 1) + 4 + beat)
        out["grp"] = (d.grp_addr, d.grp_addr + 4 * groups_n(d, cfg) + beat)
    return out


def _local_text(cfg: AccelConfig) -> str:
    return f"[{cfg.local_base:#x}, {cfg.local_base + cfg.local_buf_bytes:#x})"


def local_problem(d: GemmDescriptor, cfg: AccelConfig, operand: str, *,
                  out_bytes: int = 4) -> str | None:
    """Why operand ``"b"`` or ``"c"`` of ``d``, lying in the on-chip local buffer, cannot be
    served there (None when it can). The local buffer holds rows of one B beat: a local B is a
    dense matrix (``b_mode`` 0), a local C is int8, and their address and row stride are whole
    rows (multiples of ``b_beat_bytes``)."""
    row = cfg.b_beat_bytes
    where = f"lies in the local buffer {_local_text(cfg)}"
    if operand == "b":
        if d.b_mode != 0:
            return f"B {where}, which serves dense operands only: b_mode must be 0, not {d.b_mode}"
        if d.b_addr % row or d.b_stride % row:
            return (f"B {where}: b_addr={d.b_addr:#x} and b_stride={d.b_stride} must be "
                    f"multiples of its row of {row} bytes")
        return None
    if out_bytes != 1:
        return f"C {where}, which holds int8 outputs only (out_format INT8)"
    if d.c_addr % row or d.c_stride % row:
        return (f"C {where}: c_addr={d.c_addr:#x} and c_stride={d.c_stride} must be multiples "
                f"of its row of {row} bytes")
    return None


def table_problems(cfg: AccelConfig, *, k: int, run_count: int, n: int) -> list[str]:
    """Why a convolution's tables (``b_mode = 1``: ``k`` offsets, ``run_count`` runs, a group
    entry per lane group of the ``n`` output pixels and one more) do not fit the on-chip table
    memories of ``cfg``; empty when they fit. :func:`check` reports each as ``BAD_TABLE``; the
    planner runs a layer whose tables do not fit in bands of output rows
    (:func:`planner.conv.row_bands`)."""
    problems = []
    if k > cfg.conv_offset_entries:
        problems.append(f"k={k} offsets exceed conv_offset_entries={cfg.conv_offset_entries}")
    if not 1 <= run_count <= cfg.conv_run_entries:
        problems.append(f"run_count={run_count} must be in [1, "
                        f"conv_run_entries={cfg.conv_run_entries}]")
    groups = lane_groups(n, cfg) + 1
    if groups > cfg.conv_group_entries:
        problems.append(f"n={n} needs {groups} group entries, more than "
                        f"conv_group_entries={cfg.conv_group_entries}")
    return problems


def check(d: GemmDescriptor, cfg: AccelConfig, *,
          out_bytes: int = 4) -> list[tuple[ErrorCode, str]]:
    """Every rule ``d`` breaks on ``cfg``, in the priority order the RTL reports them.

    The RTL reports the first entry's code; an empty list means the hardware runs it.
    ``out_bytes`` is the C element size (4: int32 output, 1: int8 output; see
    :func:`spec.record.check_record` for the rest of a layer's rules).
    """
    r, c = cfg.array_rows, cfg.array_cols
    errs: list[tuple[ErrorCode, str]] = []

    def bad(code: ErrorCode, msg: str):
        errs.append((code, msg))

    for name in ("m", "k", "n"):
        if not 1 <= getattr(d, name) <= MAX_DIM:
            bad(ErrorCode.BAD_SHAPE, f"{name}={getattr(d, name)} must be in [1, {MAX_DIM}]")
    if d.b_mode in DEPTHWISE_STRIDES and cfg.dw_mesh:
        return errs + _check_depthwise(d, cfg, out_bytes)
    if not (1 <= d.partition_m <= MAX_DIM and d.partition_m % r == 0):
        bad(ErrorCode.BAD_PARTITION_M,
            f"partition_m={d.partition_m} must be a positive multiple of array_rows={r}")
    if not (1 <= d.partition_n <= MAX_DIM and d.partition_n % c == 0):
        bad(ErrorCode.BAD_PARTITION_N,
            f"partition_n={d.partition_n} must be a positive multiple of array_cols={c}")
    elif cfg.row_store and row_store(d) and (
            d.n != d.c_rows * d.partition_n or
            not max(1, d.partition_n - c + 1) <= d.c_row_elems <= d.partition_n):
        bad(ErrorCode.BAD_PARTITION_N,
            f"the row store needs n = c_rows*partition_n ({d.n} != {d.c_rows}*"
            f"{d.partition_n}) and c_row_elems={d.c_row_elems} in [max(1, partition_n - "
            f"array_cols + 1), partition_n]: each n partition is one row of pixels, in its "
            "last lane group (the store writes every lane group of a partition)")
    if not 1 <= d.partition_k <= MAX_DIM:
        bad(ErrorCode.BAD_PARTITION_K, f"partition_k={d.partition_k} must be in [1, {MAX_DIM}]")
    elif not d.need_splitk and d.partition_k < d.k:
        bad(ErrorCode.BAD_PARTITION_K,
            f"partition_k={d.partition_k} < k={d.k} needs need_splitk=1")
    if not (r <= d.tile_m <= max(d.partition_m, r) and d.tile_m % r == 0):
        bad(ErrorCode.BAD_TILE,
            f"tile_m={d.tile_m} must be a multiple of {r} in [{r}, partition_m]")
    if not (c <= d.tile_n <= max(d.partition_n, c) and d.tile_n % c == 0):
        bad(ErrorCode.BAD_TILE,
            f"tile_n={d.tile_n} must be a multiple of {c} in [{c}, partition_n]")
    if d.partition_m * d.partition_k > cfg.buf_a_half_bytes:
        bad(ErrorCode.BUF_A_OVERFLOW,
            f"partition_m*partition_k={d.partition_m * d.partition_k} exceeds "
            f"buf_a_half_bytes={cfg.buf_a_half_bytes}")
    if d.partition_k * d.partition_n > cfg.buf_b_half_bytes:
        bad(ErrorCode.BUF_B_OVERFLOW,
            f"partition_k*partition_n={d.partition_k * d.partition_n} exceeds "
            f"buf_b_half_bytes={cfg.buf_b_half_bytes}")
    acc_need = d.partition_m * d.partition_n * cfg.acc_bytes
    if acc_need > d.acc_buffer_needed or d.acc_buffer_needed > cfg.acc_half_bytes:
        bad(ErrorCode.ACC_OVERFLOW,
            f"need partition_m*partition_n*4={acc_need} <= acc_buffer_needed="
            f"{d.acc_buffer_needed} <= acc_half_bytes={cfg.acc_half_bytes}")
    for name in ("outer_m", "need_splitk"):
        if getattr(d, name) not in (0, 1):
            bad(ErrorCode.BAD_FLAGS, f"{name}={getattr(d, name)} must be 0 or 1")
    if d.b_mode not in (0, 1):
        bad(ErrorCode.BAD_FLAGS, _b_mode_text(d.b_mode, cfg))
    rows = [name for name in ROW_FIELDS if getattr(d, name)]
    if rows and not cfg.row_store:
        bad(ErrorCode.BAD_FLAGS, f"{', '.join(f'{n}={getattr(d, n)}' for n in rows)}: the row "
                                 "store needs a config with row_store=1; this one has none "
                                 "(the fields must be 0)")
    elif rows and not d.c_rows:
        bad(ErrorCode.BAD_FLAGS, f"c_row_elems={d.c_row_elems}, c_row_pitch={d.c_row_pitch} "
                                 "must be 0 when c_rows=0 (no row store)")
    if d.b_mode == 1 and not errs:
        for problem in table_problems(cfg, k=d.k, run_count=d.run_count, n=d.n):
            bad(ErrorCode.BAD_TABLE, problem)
    if not errs:
        ext = tensor_extents(d, cfg, out_bytes=out_bytes)
        for name, (lo, hi) in ext.items():
            if hi <= cfg.dram_bytes:
                continue
            if name in ("b", "c") and cfg.is_local(lo, hi):
                problem = local_problem(d, cfg, name, out_bytes=out_bytes)
                if problem:
                    bad(ErrorCode.BAD_ADDRESS, problem)
                continue
            bad(ErrorCode.BAD_ADDRESS, f"{name.upper()} spans [{lo:#x}, {hi:#x}) beyond "
                                       f"dram_bytes={cfg.dram_bytes:#x} and is not inside the "
                                       f"local buffer {_local_text(cfg)} (only B and C may be)")
        if row_store(d):
            if ext["c"][1] > cfg.dram_bytes:
                bad(ErrorCode.BAD_ADDRESS, f"C [{ext['c'][0]:#x}, {ext['c'][1]:#x}) is not in "
                                           f"memory: the row store writes memory only")
            if d.c_row_pitch < out_bytes * d.c_row_elems:
                bad(ErrorCode.BAD_ADDRESS, f"c_row_pitch={d.c_row_pitch} < {out_bytes}*"
                                           f"c_row_elems={out_bytes * d.c_row_elems}: C's rows of "
                                           "pixels overlap")
            if d.c_stride < c_span(d, out_bytes):
                bad(ErrorCode.BAD_ADDRESS, f"c_stride={d.c_stride} < (c_rows-1)*c_row_pitch + "
                                           f"{out_bytes}*c_row_elems={c_span(d, out_bytes)}: C "
                                           "rows overlap")
        elif d.c_stride < out_bytes * d.n:
            bad(ErrorCode.BAD_ADDRESS, f"c_stride={d.c_stride} < {out_bytes}*n="
                                       f"{out_bytes * d.n}: C rows overlap")
        for name in [key for key in ext if key != "c"]:
            lo, hi = ext[name]
            if lo < ext["c"][1] and ext["c"][0] < hi:
                bad(ErrorCode.BAD_ADDRESS, f"C [{ext['c'][0]:#x}, {ext['c'][1]:#x}) overlaps "
                                           f"{name.upper()} [{lo:#x}, {hi:#x})")
    return errs


def _b_mode_text(b_mode: int, cfg: AccelConfig) -> str:
    if cfg.dw_mesh:
        return (f"b_mode={b_mode} must be 0 to 7 (2 to 7: depthwise 3x3, 5x5 or 7x7, stride 1 "
                f"or 2) or a stride-2 depthwise value (3, 5, 7) plus {B_MODE_ODD_ROWS} (odd "
                f"rows) and / or {B_MODE_ODD_COLS} (odd columns)")
    if b_mode in DEPTHWISE_STRIDES:
        k = DEPTHWISE_KERNELS[b_mode]
        return (f"b_mode={b_mode} (depthwise {k}x{k} on the mesh) needs a config with "
                "dw_mesh=1; this one has none")
    return f"b_mode={b_mode} must be 0 or 1 (2 to 7 and the odd-pad values, depthwise, need dw_mesh=1)"


def _check_depthwise(d: GemmDescriptor, cfg: AccelConfig,
                     out_bytes: int) -> list[tuple[ErrorCode, str]]:
    """The rules of a depthwise descriptor (:data:`DEPTHWISE_STRIDES` on a ``dw_mesh`` config) after the
    shape's, in the RTL's priority order (:func:`check`)."""
    errs: list[tuple[ErrorCode, str]] = []

    def bad(code: ErrorCode, msg: str):
        errs.append((code, msg))

    g, h, w, m = d.partition_m, d.k, d.n, d.m
    if not 1 <= g <= MAX_DIM:
        bad(ErrorCode.BAD_PARTITION_M, f"partition_m={g} (channels a depthwise strip step "
                                       f"takes) must be in [1, {MAX_DIM}]")
    elif h % 2 and g != 1 and DEPTHWISE_STRIDES[d.b_mode] == 2:
        bad(ErrorCode.BAD_PARTITION_M, f"partition_m={g} must be 1 when k={h} (the map's "
                                       f"height) is odd with stride 2 (b_mode={d.b_mode}): the "
                                       "channels' even output rows are not every other "
                                       "accumulator row")
    words_a, words_b = depthwise_words(d, cfg.array_rows)
    half_a, half_b = cfg.buf_a_depth // 2, cfg.buf_b_depth // 2
    if words_a > half_a:
        bad(ErrorCode.BUF_A_OVERFLOW, f"partition_m={g} channels of k={h} rows fill {words_a} "
                                      f"buffer-A words (odd rows), more than a half's {half_a}")
    if words_b > half_b:
        bad(ErrorCode.BUF_B_OVERFLOW, f"partition_m={g} channels of k={h} rows fill {words_b} "
                                      f"buffer-B words (even rows), more than a half's {half_b}")
    acc_need = (g * h + cfg.array_rows) * cfg.c_beat_bytes
    if acc_need > d.acc_buffer_needed or d.acc_buffer_needed > cfg.acc_half_bytes:
        bad(ErrorCode.ACC_OVERFLOW,
            f"need (partition_m*k + array_rows)*{cfg.c_beat_bytes}={acc_need} <= "
            f"acc_buffer_needed={d.acc_buffer_needed} <= acc_half_bytes={cfg.acc_half_bytes}")
    kernel = DEPTHWISE_KERNELS[d.b_mode]
    if kernel not in depthwise_kernels(cfg):
        bad(ErrorCode.BAD_FLAGS, f"b_mode={d.b_mode} (depthwise {kernel}x{kernel}) needs a mesh "
                                 f"of at least {depthwise_mesh_side(kernel)} rows "
                                 f"and columns; this one is {cfg.array_rows}x{cfg.array_cols} "
                                 f"(it walks {', '.join(f'{k}x{k}' for k in depthwise_kernels(cfg))})")
    odd_rows, odd_cols = depthwise_odd(d.b_mode)
    for odd, side, name, size in ((odd_rows, "rows", "height k", h),
                                  (odd_cols, "columns", "width n", w)):
        if odd and size % 2:
            bad(ErrorCode.BAD_FLAGS, f"b_mode={d.b_mode} keeps the odd output {side} of the "
                                     f"stride-1 results, which needs an even map {name}, not "
                                     f"{name[-1]}={size} (an odd side's stride-2 pads are the "
                                     "same on both ends: it keeps the even ones)")
            break
    used = [name for name in DEPTHWISE_UNUSED if getattr(d, name)]
    if used:
        bad(ErrorCode.BAD_FLAGS, f"a depthwise descriptor (b_mode={d.b_mode}) uses none of "
                                 f"{', '.join(DEPTHWISE_UNUSED)}: they must be 0, not "
                                 f"{', '.join(f'{n}={getattr(d, n)}' for n in used)}")
    if d.b_stride != h * w:
        bad(ErrorCode.BAD_ADDRESS, f"b_stride={d.b_stride} must be the input's channel pitch "
                                   f"k*n={h * w} (dense NCHW int8)")
    oh, ow = depthwise_out(d)
    if d.c_stride != oh * ow * out_bytes:
        pitch = "k*n" if DEPTHWISE_STRIDES[d.b_mode] == 1 else "ceil(k/2)*ceil(n/2)"
        bad(ErrorCode.BAD_ADDRESS, f"c_stride={d.c_stride} must be the output's channel pitch "
                                   f"{pitch}*{out_bytes}={oh * ow * out_bytes} (dense NCHW)")
    if d.a_addr % 4 or d.a_stride % 4 or d.a_stride < 4 * m:
        bad(ErrorCode.BAD_ADDRESS, f"a_addr={d.a_addr:#x}, a_stride={d.a_stride}: the "
                                   f"{depthwise_arrays(d.b_mode)} weight arrays of m={m} u32 "
                                   f"need 4-byte alignment and a_stride >= 4*m={4 * m}")
    ext = tensor_extents(d, cfg, out_bytes=out_bytes)
    names = {"a": "the weights", "b": "the input", "c": "the output"}
    for name, (lo, hi) in ext.items():
        if hi > cfg.dram_bytes:
            bad(ErrorCode.BAD_ADDRESS, f"{names[name]} [{lo:#x}, {hi:#x}) reach past "
                                       f"dram_bytes={cfg.dram_bytes:#x} (a depthwise layer's "
                                       "operands are in memory)")
    c_lo, c_hi = ext["c"]
    for name in ("a", "b"):
        lo, hi = ext[name]
        if lo < c_hi and c_lo < hi:
            bad(ErrorCode.BAD_ADDRESS, f"the output [{c_lo:#x}, {c_hi:#x}) overlaps "
                                       f"{names[name]} [{lo:#x}, {hi:#x})")
    return errs
