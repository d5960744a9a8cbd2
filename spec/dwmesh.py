"""Depthwise 3x3 convolution on a rotating mesh: the dataflow of issue 18, as a numpy model.

The matrix unit cannot run a depthwise convolution well as a GEMM: output ``(c, p)`` needs input
``X[c][p + tap]``, which depends on both the PE's row and its column, while A reaches a PE by
its row and B by its column (docs/architecture.md, "Depthwise convolution: the rotating mesh").
The design this module models gives every PE ``(i, j)`` an int8 register ``x[i][j]`` that
takes part in one of five moves per cycle:

* ``FILL``: the mesh shifts up two rows, and rows ``R-2`` and ``R-1`` are loaded from a
  buffer-A word and a buffer-B word (one padded input row each: both buffers hold rows of a
  channel's padded map with the layouts they already have, A k-major with ``a_stride`` = the
  map's row pitch, B row-major);
* ``LEFT``, ``RIGHT``, ``UP``: a rotation: every row of the mesh is a ring of ``C``
  registers and every column a ring of ``R``;
* ``HOLD``.

A *tap* beat multiplies every ``x[i][j]`` by its quadrant's weight (broadcast, one weight per
quadrant and tap) into the PE's accumulator, which the array already has, with the beat's
``first`` / ``last`` flags; the rotation after it happens at the same clock edge. A tile is
``R/2`` fill beats, then the nine taps of a serpentine walk over the 3x3 window with eight
rotations (right, right, down, left, left, down, right, right in window terms), so PE
``(i, j)`` accumulates ``sum W[dy][dx] * P[y0 + i + dy][x0 + j + dx]`` for the tile's patch
``P``. Outputs whose window would leave the patch are not valid, except where the wrap of a
ring lands on the same value, a zero pad. So a 16x16 patch computes 14x14 outputs, and in
the *quadrant* mode the four 8x8 quadrants hold four channels' 7x7 maps with their pads, each
quadrant with its own channel's weight: the bottom (right) zero pad of a quadrant's map is not
in the quadrant, and the rotation brings in the row (column) below it instead, which is the top
(left) zero pad of the next quadrant's map (or, at the mesh's edge, of the first): zero
either way. The quadrants need no rings of their own.

Stride 2 uses row phases: the patch of phase ``p`` holds padded rows ``2a + p`` (a load with
twice the row pitch), the phase-0 patch takes the taps with ``dy`` = 0 and 2 (six beats, one
``UP`` in between), a second fill the phase-1 patch and the three taps with ``dy = 1``; the
accumulators carry the sum across the fill. Columns keep full resolution, so only the PEs of
even columns hold outputs: 15 x 7 per tile on a 16x16 mesh. Wide enough maps split the
columns into phases too (:func:`spec.desc.col_phases`, :attr:`StripTile.cphases`, session 42):
four fills a tile, each of one row phase and one column phase, from loads that deinterleave
each row's even and odd bytes into two words, and every PE holds an output: 15 x 15 per tile.

A depthwise 5x5 or 7x7 layer (pad 2 or 3) walks the 25- or 49-tap :func:`serpentine` on the
same mesh, in whole-mesh tiles of ``(R - 4) x (C - 4)`` or ``(R - 6) x (C - 6)`` outputs
(:func:`strip_steps` with ``kernel=5`` or ``7``).

:func:`mesh_depthwise` runs this schedule move by move and returns the outputs and the cycles
it took (fill and tap beats; the pipeline's start and drain are the array's, as for a GEMM).
It is the golden model the RTL of the mesh will be compared with, and the bound the planner
will cost; :func:`spec.golden.conv2d_int8` with ``groups == C`` is its reference
(``tests/spec/test_dwmesh.py``).
"""

from __future__ import annotations

import dataclasses
import fractions
import functools
import itertools
from dataclasses import dataclass

import numpy as np

from .desc import DIM_BITS, col_phases, depthwise_mesh_side, phase_halves

__all__ = ["MeshTile", "plan_tiles", "mesh_depthwise", "tile_cycles", "store_beats",
           "mac_utilisation", "input_bound", "out_size", "padded_input", "walks", "tile_patches",
           "tile_weights", "scatter_results", "run_tile", "BlockLoad", "StripTile",
           "StripStep", "strip_channels", "row_phases", "phase_halves", "strip_steps",
           "strip_patch",
           "strip_tile_cycles", "run_strip_tile", "strip_tile_writes", "strip_step_cycles",
           "strip_tile_acc", "quad_mode", "serpentine", "strip_pad", "kernel_tile", "KERNELS",
           "SERPENTINE",
           "PHASE_TAPS", "PASS_ROWS", "PHASE_ROWS", "row_passes", "row_pass_ranges",
           "pass_tile_beats", "one_strip", "one_tile", "pair_fill", "row_pairs", "col_phases",
           "CPHASE_FILLS"]

#: The kernels the strip steps take (``kernel`` x ``kernel`` windows, pad ``(kernel - 1) / 2``):
#: 3x3 in every mode, 5x5 and 7x7 as whole-mesh stride-1 tiles, in row passes, two channels a
#: tile on maps of half the mesh (:attr:`StripTile.pairs`) or with stride 2 in row phases (or
#: through the decimating store); no quadrants.
KERNELS = (3, 5, 7)

#: The serpentine walk over the 3x3 window: (dy, dx) of each tap, and the rotation that follows
#: it (None after the last). A rotation "LEFT" brings the right neighbour's value, so it moves
#: the window one column right; "UP" brings the value from below: one row down.
SERPENTINE = (((0, 0), "LEFT"), ((0, 1), "LEFT"), ((0, 2), "UP"), ((1, 2), "RIGHT"),
              ((1, 1), "RIGHT"), ((1, 0), "UP"), ((2, 0), "LEFT"), ((2, 1), "LEFT"),
              ((2, 2), None))


def serpentine(kernel: int) -> tuple[tuple[tuple[int, int], str | None], ...]:
    """The serpentine walk over a ``kernel`` x ``kernel`` window: ``((dy, dx), move after)`` per
    tap, row by row, left to right on even rows and right to left on odd ones, an ``UP``
    between rows; :data:`SERPENTINE` for 3x3."""
    if kernel < 1 or kernel % 2 == 0:
        raise ValueError(f"serpentine: kernel={kernel!r} must be odd and >= 1")
    return _serpentine_rows(kernel, range(kernel))


def _serpentine_rows(kernel: int, dys: range,
                     dxs: range | None = None) -> tuple[tuple[tuple[int, int], str | None], ...]:
    """The serpentine over the window rows ``dys`` of a ``kernel``-wide window, from its top
    left corner (a fresh fill): ``((dy, dx), move after)``, ``dy`` the kernel's row, an ``UP``
    from one of ``dys`` to the next (the mesh's next row holds it); over the window columns
    ``dxs`` (default all of them; a column phase's, one ``LEFT`` apart in its patch)."""
    dxs = range(kernel) if dxs is None else dxs
    taps = []
    for i, dy in enumerate(dys):
        xs = dxs if i % 2 == 0 else dxs[::-1]
        along = "LEFT" if i % 2 == 0 else "RIGHT"
        for j, dx in enumerate(xs):
            move = along if j < len(dxs) - 1 else ("UP" if i < len(dys) - 1 else None)
            taps.append(((dy, dx), move))
    return tuple(taps)


assert serpentine(3) == SERPENTINE

#: Stride 2, per row phase: phase 0 takes dy = 0 and 2 (window rows 0 and 1 of the phase), phase
#: 1 takes dy = 1 (its window row 0). Entries: (dy, dx, rotation after).
PHASE_TAPS = {0: ((0, 0, "LEFT"), (0, 1, "LEFT"), (0, 2, "UP"), (2, 2, "RIGHT"),
                  (2, 1, "RIGHT"), (2, 0, None)),
              1: ((1, 0, "LEFT"), (1, 1, "LEFT"), (1, 2, None))}


@dataclass(frozen=True)
class MeshTile:
    """One patch run: ``channels`` and the output window ``[oy0, oy0 + th) x [ox0, ox0 + tw)``
    it computes. ``split`` is (1, 1) for one channel on the whole mesh, (2, 2) for the quadrant
    mode (four channels, one per ``R/2`` x ``C/2`` quadrant), (2, 1) for stride 2's halves
    (two channels, one above the other)."""
    channels: tuple[int, ...]
    oy0: int
    ox0: int
    th: int
    tw: int
    split: tuple[int, int] = (1, 1)

    @property
    def quad(self) -> bool:
        return self.split != (1, 1)


def _check(x, w, stride, pad, rows, cols):
    if not (isinstance(x, np.ndarray) and x.dtype == np.int8 and x.ndim == 3):
        raise ValueError(f"mesh_depthwise: x must be an int8 array (C, H, W), not "
                         f"{getattr(x, 'dtype', type(x))} of shape {getattr(x, 'shape', None)}")
    if not (isinstance(w, np.ndarray) and w.dtype == np.int8 and w.shape == (x.shape[0], 3, 3)):
        raise ValueError(f"mesh_depthwise: w must be an int8 array (C, 3, 3) = "
                         f"({x.shape[0]}, 3, 3), not {getattr(w, 'shape', None)}")
    if stride not in (1, 2):
        raise ValueError(f"mesh_depthwise: stride={stride!r} must be 1 or 2")
    if pad not in (0, 1):
        raise ValueError(f"mesh_depthwise: pad={pad!r} must be 0 or 1 (3x3 windows)")
    if rows < 4 or cols < 4 or rows % 2 or cols % 2:
        raise ValueError(f"mesh_depthwise: a {rows}x{cols} mesh must have even sides >= 4")


def out_size(h: int, pad: int, stride: int, kernel: int = 3) -> int:
    """Output extent of a ``kernel``-wide window over ``h`` inputs with ``pad`` on both
    sides."""
    return (h + 2 * pad - kernel) // stride + 1


def strip_pad(kernel: int) -> int:
    """The pad of a strip step's ``kernel`` x ``kernel`` layer: ``(kernel - 1) / 2`` a side
    (1 for 3x3, 2 for 5x5, 3 for 7x7), the output map the input's with stride 1."""
    if kernel not in KERNELS:
        raise ValueError(f"strip_pad: kernel={kernel!r} must be one of {KERNELS}")
    return (kernel - 1) // 2


def plan_tiles(channels: int, h: int, w: int, *, stride: int, pad: int, rows: int,
               cols: int, split: bool = True) -> list[MeshTile]:
    """The patch runs of a depthwise layer, channel-major (every tile of a channel, then the
    next channel), in the order the mesh runs them; ``split=False``: whole-mesh tiles only (a
    split mesh's fill words hold two channels' rows, which plain padded NCHW cannot give one
    load)."""
    oh, ow = out_size(h, pad, stride), out_size(w, pad, stride)
    if oh < 1 or ow < 1:
        raise ValueError(f"mesh_depthwise: a {h}x{w} map with pad {pad} has no 3x3 window")
    tiles = []
    if stride == 1:
        # a whole map with pads 1 fits a quadrant when its padded size is one more than the
        # quadrant's (the missing zero pad is the next quadrant's, rotated in); else two less
        quad_h, quad_w = rows // 2 - (2 if pad == 0 else 1), cols // 2 - (2 if pad == 0 else 1)
        if split and oh <= quad_h and ow <= quad_w:
            for c0 in range(0, channels, 4):
                group = tuple(range(c0, min(c0 + 4, channels)))
                tiles.append(MeshTile(group, 0, 0, oh, ow, (2, 2)))
            return tiles
        th, tw = rows - 2, cols - 2
    else:
        th, tw = rows - 1, (cols - 1) // 2
        # two channels' row phases one above the other, when a phase fits half the rows
        if split and oh <= rows // 2 - 1 and ow <= tw:
            for c0 in range(0, channels, 2):
                group = tuple(range(c0, min(c0 + 2, channels)))
                tiles.append(MeshTile(group, 0, 0, oh, ow, (2, 1)))
            return tiles
    for c in range(channels):
        for oy0 in range(0, oh, th):
            for ox0 in range(0, ow, tw):
                tiles.append(MeshTile((c,), oy0, ox0, min(th, oh - oy0), min(tw, ow - ox0)))
    return tiles


def tile_cycles(tile: MeshTile, stride: int, rows: int) -> int:
    """Beats of one tile: ``rows / 2`` fill beats per row phase, one beat per tap, less one for
    the second phase (its first fill beat is the first phase's last tap beat)."""
    return (rows // 2 + 9) if stride == 1 else (2 * (rows // 2) + 8)


def _rotate(mesh: np.ndarray, move: str) -> np.ndarray:
    """``mesh`` after one rotation: rows and columns are rings of the whole mesh."""
    if move == "LEFT":              # x[i][j] <- x[i][j + 1]
        return np.roll(mesh, -1, axis=1)
    if move == "RIGHT":             # x[i][j] <- x[i][j - 1]
        return np.roll(mesh, 1, axis=1)
    if move == "UP":                # x[i][j] <- x[i + 1][j]
        return np.roll(mesh, -1, axis=0)
    raise ValueError(f"unknown move {move!r}")


def _fill(mesh: np.ndarray, patch: np.ndarray) -> tuple[np.ndarray, int]:
    """Fill ``mesh`` with ``patch`` (rows x cols) two rows per beat, bottom entry: the first
    beat's rows end at the top. Returns the new mesh and the beats taken."""
    rows = mesh.shape[0]
    for b in range(rows // 2):
        mesh = np.concatenate([mesh[2:], patch[2 * b:2 * b + 2]])
    return mesh, rows // 2


def padded_input(x: np.ndarray, pad: int) -> np.ndarray:
    """``x`` (C, H, W) with ``pad`` zero rows and columns around each map (int64)."""
    channels, h, w = x.shape
    padded = np.zeros((channels, h + 2 * pad, w + 2 * pad), np.int64)
    padded[:, pad:pad + h, pad:pad + w] = x
    return padded


#: The row passes of a 5x5 or 7x7 tile (:func:`row_passes`): the window rows of each pass,
#: three at most, so that the tile's ``rows - 2`` output rows need no patch row past the mesh.
#: A pass's patch starts its first window row further down than the tile's first padded
#: row (:attr:`StripTile.phase1`, :attr:`StripTile.phase2`).
PASS_ROWS = {5: (range(0, 3), range(3, 5)), 7: (range(0, 3), range(3, 6), range(6, 7))}

#: Stride 2's row phases (:func:`row_phases`): the window rows each fill of a tile takes, one
#: phase row apart (the even rows, then the odd ones); a 7x7 tile's even rows in two fills,
#: 0, 2, 4 and then 6 alone, so that a tile keeps ``rows - 2`` output rows.
PHASE_ROWS = {3: (range(0, 3, 2), range(1, 3, 2)), 5: (range(0, 5, 2), range(1, 5, 2)),
              7: (range(0, 5, 2), range(1, 7, 2), range(6, 7))}


#: Row and column phases (:func:`col_phases`): the ``(row phase, column phase)`` of each of a
#: tile's four fills, in order; the row phase indexes :data:`PHASE_ROWS`, the column phase
#: ``c`` takes the window columns ``c, c + 2, ..``.
CPHASE_FILLS = ((0, 0), (0, 1), (1, 0), (1, 1))


def walks(stride: int, kernel: int = 3, *, passes: bool = False, pairs: bool = False,
          cphases: bool = False) -> list[tuple[tuple[tuple[int, int], str | None], ...]]:
    """The taps of each row phase: ``((dy, dx), move after)``, one phase with stride 1 (the
    :func:`serpentine` of ``kernel``); stride 2's row phases the window rows of
    :data:`PHASE_ROWS`, a fill each. With ``passes`` (a
    5x5 tile in row passes, :func:`row_passes`; its ``stride`` is 1, a stride-2 layer's tiles
    being stride-1 ones) one serpentine per pass over its window rows
    (:data:`PASS_ROWS`), each from the top left of its own fill. With ``pairs`` (a 5x5 or
    7x7 tile two channels a tile, :attr:`StripTile.pairs`) one serpentine per pair of window
    rows (0 and 1, 2 and 3, ..., the last alone), each from its own fill. With ``cphases``
    (stride 2 in row and column phases, :attr:`StripTile.cphases`) one serpentine a fill of
    :data:`CPHASE_FILLS` over its row phase's window rows and its column phase's columns (3x3:
    4, 2, 2 and 1 taps; 5x5: 9, 6, 6 and 4)."""
    if kernel not in KERNELS:
        raise ValueError(f"walks: kernel={kernel!r} must be one of {KERNELS}")
    if cphases:
        if stride != 2 or kernel == 7:
            raise ValueError(f"walks: row and column phases walk stride-2 3x3 and 5x5 windows, "
                             f"not stride {stride} {kernel}x{kernel}")
        return [_serpentine_rows(kernel, PHASE_ROWS[kernel][r], range(c, kernel, 2))
                for r, c in CPHASE_FILLS]
    if pairs:
        if kernel == 3 or stride != 1:
            raise ValueError(f"walks: two-row passes walk stride-1 5x5 and 7x7 windows, not "
                             f"stride {stride} {kernel}x{kernel}")
        return [_serpentine_rows(kernel, range(dy, min(dy + 2, kernel)))
                for dy in range(0, kernel, 2)]
    if passes:
        if kernel not in PASS_ROWS or stride != 1:
            raise ValueError(f"walks: row passes walk stride-1 windows of "
                             f"{sorted(PASS_ROWS)}, not stride {stride} {kernel}x{kernel}")
        return [_serpentine_rows(kernel, dys) for dys in PASS_ROWS[kernel]]
    if stride == 1:
        return [serpentine(kernel)]
    # phase 0 the even window rows, phase 1 the odd ones, one phase row apart each
    # (:data:`PHASE_TAPS` for 3x3); a 7x7 tile's phase 0 rows 0, 2, 4 and a third fill for
    # row 6 (PHASE_ROWS)
    return [_serpentine_rows(kernel, dys) for dys in PHASE_ROWS[kernel]]


def tile_patches(tile: MeshTile, padded: np.ndarray, *, stride: int, rows: int,
                 cols: int) -> list[np.ndarray]:
    """The ``rows`` x ``cols`` patch of each row phase of ``tile`` (zeros past the map, as the
    loads fill them): region ``q`` of a split mesh holds channel ``tile.channels[q]``."""
    sr, sc = tile.split
    hr, hc = rows // sr, cols // sc
    patches = []
    for phase in range(len(walks(stride))):
        patch = np.zeros((rows, cols), np.int64)
        for q, c in enumerate(tile.channels):
            qi, qj = divmod(q, sc)
            y0, x0 = stride * tile.oy0 + phase, stride * tile.ox0
            part = padded[c, y0:, x0:x0 + hc][::stride][:hr]
            patch[qi * hr:qi * hr + part.shape[0], qj * hc:qj * hc + part.shape[1]] = part
        patches.append(patch)
    return patches


def tile_weights(tile: MeshTile, w: np.ndarray) -> np.ndarray:
    """Each region's 3x3 weights (4, 3, 3): the tile's channels' in region order, zeros for
    regions without a channel."""
    weights = np.zeros((4, 3, 3), np.int64)
    weights[:len(tile.channels)] = w[list(tile.channels)]
    return weights


def scatter_results(tile: MeshTile, acc: np.ndarray, out: np.ndarray, *, stride: int) -> None:
    """Copy a tile's results from the mesh's accumulators ``acc`` (rows x cols) into ``out``
    (C, OH, OW): region ``q``'s PE ``(i, stride * j)`` holds output ``(oy0 + i, ox0 + j)`` of
    its channel."""
    rows, cols = acc.shape
    sr, sc = tile.split
    hr, hc = rows // sr, cols // sc
    for q, c in enumerate(tile.channels):
        qi, qj = divmod(q, sc)
        region = acc[qi * hr:qi * hr + tile.th, qj * hc:(qj + 1) * hc]
        out[c, tile.oy0:tile.oy0 + tile.th, tile.ox0:tile.ox0 + tile.tw] = \
            region[:, 0:stride * tile.tw:stride]


def run_tile(tile: MeshTile, patches: list[np.ndarray], weights: np.ndarray, *,
             stride: int) -> tuple[np.ndarray, int]:
    """One tile on the mesh, move by move: fill each row phase's patch, take its taps.
    ``weights``: (4, 3, 3), region order. Returns the accumulators (exact int64) and the
    beats taken."""
    rows, cols = patches[0].shape
    sr, sc = tile.split
    # each PE's weight: its region's channel's (one region unless the mesh is split)
    ones = np.ones((rows // sr, cols // sc), np.int64)
    mesh = np.zeros((rows, cols), np.int64)
    acc = np.zeros((rows, cols), np.int64)
    first, beats = True, 0
    for phase, (patch, taps) in enumerate(zip(patches, walks(stride))):
        mesh, fill = _fill(mesh, patch)
        beats += fill - (phase > 0)     # a phase's first fill beat: the last phase's last tap
        for (dy, dx), move in taps:
            prod = mesh * np.kron(weights[:sr * sc, dy, dx].reshape(sr, sc), ones)
            acc = prod if first else acc + prod
            first = False
            beats += 1
            if move is not None:
                mesh = _rotate(mesh, move)
    return acc, beats


def mesh_depthwise(x: np.ndarray, w: np.ndarray, *, stride: int = 1, pad: int = 1,
                   rows: int = 16, cols: int = 16) -> tuple[np.ndarray, int]:
    """Depthwise 3x3 convolution of ``x`` (C, H, W) int8 with ``w`` (C, 3, 3) int8 on a
    ``rows`` x ``cols`` rotating mesh, move by move. Returns the int32 output (C, OH, OW),
    wrapping like the accumulators, and the beats the tiles took (:func:`tile_cycles` each,
    less one for every tile after the first: its first fill beat is its predecessor's last tap
    beat, :func:`strip_step_cycles`)."""
    _check(x, w, stride, pad, rows, cols)
    channels, h, wd = x.shape
    tiles = plan_tiles(channels, h, wd, stride=stride, pad=pad, rows=rows, cols=cols)
    padded = padded_input(x, pad)
    out = np.zeros((channels, out_size(h, pad, stride), out_size(wd, pad, stride)), np.int64)
    beats = []
    for tile in tiles:
        patches = tile_patches(tile, padded, stride=stride, rows=rows, cols=cols)
        acc, tile_beats = run_tile(tile, patches, tile_weights(tile, w), stride=stride)
        beats.append(tile_beats)
        scatter_results(tile, acc, out, stride=stride)
    wrapped = ((out + (1 << 31)) % (1 << 32) - (1 << 31)).astype(np.int32)
    return wrapped, _back_to_back(beats)


def _back_to_back(beats: list[int]) -> int:
    """Beats of tiles run back to back: each tile after the first makes its first fill beat in
    its predecessor's last tap beat (that tap multiplies the registers the fill then shifts),
    so it takes one beat less than it would alone."""
    return sum(beats) - max(0, len(beats) - 1)


@dataclass(frozen=True)
class BlockLoad:
    """A block load into one buffer, as the load engines do it: word ``k`` (``k < words``) of
    group ``g`` (``g < groups``) is the ``nbytes`` bytes at ``addr + g * gaddr + k * stride``,
    written to buffer word ``g * gwords + k``; no other word is loaded. The word's lanes from
    ``nbytes`` on are undefined (the hardware zeroes them, but for the first of two groups,
    which it loads whole: the feeder puts the pad value there, :attr:`StripTile.cols`). (One
    group but for the row phases of stride 2, :func:`row_phases`.)

    With ``dwords`` (row and column phases, :func:`col_phases`) the load *deinterleaves*: each
    of its words is two port beats, ``2 L`` bytes for ``L``-byte buffer words (``nbytes`` up
    to ``2 L``), whose even bytes go to buffer word ``g * gwords + k`` and odd bytes to word
    ``g * gwords + k + dwords`` (:meth:`word_bytes`)."""
    addr: int
    stride: int
    words: int
    nbytes: int
    groups: int = 1
    gaddr: int = 0
    gwords: int = 0
    dwords: int = 0

    @property
    def beats(self) -> int:
        """Port beats of the load: a word of every group (two if it deinterleaves)."""
        return self.words * self.groups * (2 if self.dwords else 1)

    def placements(self) -> list[tuple[int, int]]:
        """``(buffer word, memory address)`` of every word the load brings."""
        return [(g * self.gwords + k, self.addr + g * self.gaddr + k * self.stride)
                for g in range(self.groups) for k in range(self.words)]

    def word_bytes(self, mem: np.ndarray) -> list[tuple[int, np.ndarray]]:
        """``(buffer word, its loaded bytes)`` of every word the load writes from the byte
        memory ``mem``: the ``nbytes`` bytes of each placement, or with ``dwords`` their even
        bytes and, ``dwords`` words on, their odd ones. A word's lanes past its bytes are
        undefined."""
        out = []
        for word, addr in self.placements():
            data = mem[addr:addr + self.nbytes]
            out += ([(word, data[0::2]), (word + self.dwords, data[1::2])] if self.dwords
                    else [(word, data)])
        return out

    def spans(self) -> list[tuple[int, int]]:
        """``(first byte, end)`` of the memory each group reads (none without words)."""
        return [(self.addr + g * self.gaddr,
                 self.addr + g * self.gaddr + (self.words - 1) * self.stride + self.nbytes)
                for g in range(self.groups)] if self.words else []


@dataclass(frozen=True)
class StripTile:
    """One mesh tile of a strip step, as the compute engine issues it to the feeder.

    Fill word ``k`` (``0 <= k < rows / 2``) reads buffer-A word ``a_base + k`` and buffer-B
    word ``b_base + k``; an A word with ``k < a_lo`` or ``k >= a_hi`` and a B word with
    ``k < b_lo`` or ``k >= b_hi`` enter the mesh as padding (the map's top and bottom pads; ``a_base`` may
    then be -1, a word never read), and so do a word's lanes from ``cols`` on (the right pad,
    and in a layer's first strip the left one). The padding is the layer's pad value (its
    input zero point). With ``swap`` (a channel that starts at an odd row of the step's
    stacked maps, odd ``h``) the buffers trade places: the even patch rows come from buffer-B
    words ``b_base + k`` and the odd ones from buffer-A words ``a_base + k``; the masks stay
    with the rows (``a_lo`` / ``a_hi`` for the even ones, ``b_lo`` / ``b_hi`` for the odd
    ones). ``pre_right``: the patch rotated right by that many columns (0, or the map's left
    pad in a layer's first strip: 1 for 3x3, 2 for 5x5, 3 for 7x7), as that many ``RIGHT``
    moves after the fills would; the feeder rotates every fill row as it enters instead, so it
    costs no beat. ``kernel``: the window the tile walks (:func:`serpentine`; a 5x5 or 7x7
    tile is a whole-mesh stride-1 tile: no ``halves`` or ``quads``, and ``phase1`` only in row
    passes, below, or in a 5x5 layer's stride-2 row phases: window rows 0, 2, 4, then 1, 3). ``channel`` (in the layer) selects the weights; the tile's
    results land in accumulator rows ``acc_row .. acc_row + rows - 1`` (mesh row ``i`` in
    ``acc_row + i``; rows past ``th`` are overwritten by the next tile).

    With ``halves`` (maps of ``h <= rows / 2 - 1`` rows, or stride 2's row phases of maps
    :func:`phase_halves` takes: two channels a tile) the mesh's top
    half holds this tile's channel and the bottom half ``pair``'s, each half filled as that
    tile alone would fill the top half (``rows / 4`` fill words each: ``pair``'s bases and
    masks count its fill words from the half's first), each half multiplying by its own
    channel's weights: the bottom half's top pad row is the top map's bottom pad, and the
    column ring brings the top half's first row (a pad row) below the bottom map. Without a
    ``pair`` (a step's last, odd channel) the bottom half holds the pad value and takes this
    tile's weights. The results (:func:`strip_tile_writes`): the top half's rows ``0 .. th -
    1`` in ``acc_row + i``, the bottom half's ``rows / 2 + i`` in ``pair.acc_row + i`` (``=
    acc_row + th``); the tile writes rows ``acc_row .. acc_row + th + rows / 2 - 1`` (bottom
    row first, the top half's rows from ``th`` on all into ``acc_row + th - 1``, which its row
    ``th - 1`` then overwrites), the ones past its results overwritten by the next tile.

    With ``phase1`` (stride 2's row phases, :func:`row_phases`) the tile is two fills and the
    stride-2 walk (:data:`PHASE_TAPS`): the fields above fill the mesh with the even padded
    rows ``2 oy0 + 2 i`` (mesh row ``i``) for the taps with ``dy`` = 0 and 2, then
    ``phase1``'s (``a_base``, ``a_hi``, ``b_base``, ``b_hi``, ``swap``; ``a_lo`` 0) with the
    odd ones for the taps with ``dy = 1``; mesh row ``i`` column ``2 j`` is then stride-2
    output ``(oy0 + i, ox0 / 2 + j)``, and the tile writes every mesh row ``i`` into
    ``acc_row + i`` (``th`` up to ``rows - 1``); with ``halves`` too (:func:`phase_halves`)
    each fill is in halves, ``phase1`` a halves tile whose ``pair`` is ``pair.phase1``, and the
    tile writes as a halves tile does (``th = h / 2``). A 5x5 tile with ``phase1`` is in row passes
    (:func:`row_passes`): the fields above fill the mesh from patch row ``oy0 - 2`` for the
    window rows 0 to 2, then ``phase1``'s (:func:`kernel_tile` three rows on: the other
    buffer's words, ``swap`` flipped, no top pad) for rows 3 and 4 (:func:`walks` with
    ``passes``); mesh row ``i`` is output row ``oy0 + i`` (``th`` up to ``rows - 2``). A 7x7
    tile in row passes has three: the window rows 0 to 2 from patch row ``oy0 - 3``, rows 3
    to 5 from ``phase1`` (three rows on) and row 6 from ``phase2`` (:func:`kernel_tile` six
    rows on: the same buffers, three words on, no top pad).

    With ``pairs`` (a 5x5 or 7x7 tile with ``halves``, maps of ``h <= rows / 2 - 1`` rows,
    stride 1 or the decimating store's stride 2; session 41) the window's rows are walked two
    at a time (:func:`walks` with ``pairs``: 0 and 1, 2 and 3, .., the last alone), each pair
    from its own fill in halves: pass ``q``'s fill word ``k`` of either half is word ``q + k``
    of that half's tile (the same bases and masks, two padded rows further down a pass), so
    half row ``i`` holds padded row ``i + 2 q`` and output row ``i`` reads its rows ``i`` and
    ``i + 1``. ``ceil(k / 2)`` fills of ``rows / 2`` beats and the ``k^2`` taps, two channels
    a tile where a whole-mesh tile took one (:func:`pair_fill`).

    With ``quads`` (1 to 4: the quadrant mode, :func:`quad_mode`: maps of ``n = rows / 2 - 1``
    rows and columns) the tile holds channels ``channel .. channel + quads - 1``,
    one a quadrant (top left, top right, bottom left, bottom right), each with its own
    weights, a quadrant without a channel all padding. The step's loads put two stacked rows
    in a word (buffer-A word ``j`` rows ``2 j + 1`` and ``2 j + 2``, buffer-B word ``j`` rows
    ``2 j`` and ``2 j + 1``, ``2 n`` bytes); fill beat ``k`` of half ``hf = k // (rows / 4)``,
    ``kk = k % (rows / 4)``, with ``base = a_base + hf n`` (``a_base = b_base``: half the
    stacked row of the half's left channel, which is even) reads, with ``kk = 0``, B word
    ``base`` and A word ``base + rows / 4 - 1``, and fills the even mesh row with padding and
    the odd one with ``[pad, B.lo, pad, A.lo]``; with ``kk > 0`` A word ``base + kk - 1`` and B
    word ``base + rows / 4 - 1 + kk``, the even row ``[pad, A.lo, pad, B.lo]`` and the odd one
    ``[pad, A.hi, pad, B.hi]`` (``X.lo`` a word's bytes ``0 .. n - 1``, ``X.hi`` its bytes
    ``n .. 2 n - 1``: a fixed lane shuffle). Its results are packed two output rows an
    accumulator row (:func:`strip_tile_acc`): quadrant ``q``'s output rows ``2 k`` and ``2 k +
    1`` in accumulator row ``acc_row + (rows / 4) q + k``, lanes ``0 .. n - 1`` and ``n .. 2 n -
    1``.

    With ``cphases`` (stride 2 in row and column phases, :func:`col_phases`; session 42) the
    tile is four fills, this one and ``phase1`` .. ``phase3``, the row and column phases of
    :data:`CPHASE_FILLS`: fill ``(r, c)`` holds in mesh row ``i`` lane ``j`` the input at row
    phase ``r``'s row ``i`` (as :attr:`phase1` for the row phases) and column ``X0 + 2 j +
    c``, ``X0 = 2 ox0 - p`` the strip's (``ox0`` its first output column), read from the
    deinterleaved words of the step's loads; each fill has its own bases, masks, ``swap``,
    ``cols`` and ``pre_right`` (a layer's first strip loads from column 0, so the fills
    whose first lane is a pad column are rotated right). Fill ``(r, c)`` walks the window's
    rows of phase ``r`` and columns ``c, c + 2, ..`` (:func:`walks` with ``cphases``); mesh
    row ``i`` lane ``j`` is then output ``(oy0 + i, ox0 + j)``, every lane an output up to
    ``cols - p`` of them, and the tile writes every mesh row ``i`` into ``acc_row + i``."""
    channel: int
    oy0: int
    th: int
    a_base: int
    a_lo: int
    a_hi: int
    b_base: int
    b_hi: int
    pre_right: int
    acc_row: int
    cols: int
    swap: bool = False
    b_lo: int = 0
    kernel: int = 3
    halves: bool = False
    pair: StripTile | None = None
    phase1: StripTile | None = None
    phase2: StripTile | None = None
    passes: bool = False
    quads: int = 0
    pairs: bool = False
    phase3: StripTile | None = None
    cphases: bool = False


@dataclass(frozen=True)
class StripStep:
    """A sequencer step of a depthwise layer (pad 1): the stride-1 results of columns ``[ox0,
    ox0 + tw)`` of channels ``c0 .. c0 + channels - 1``, every row, and the store of the
    layer's outputs among them.

    ``a_load`` / ``b_load`` bring the odd / even input rows of those channels' column strip
    into buffers A and B; ``tiles`` run in order on the mesh (accumulator row ``c h + y`` holds
    stride-1 output row ``y`` of the step's channel ``c``, lane ``j`` its column ``ox0 + j``).
    In row phases (:func:`row_phases`) the loads take four classes of rows, two groups each,
    and accumulator row ``c h / 2 + p`` holds stride-2 output row ``p``, lane ``2 j`` its
    column ``ox0 / 2 + j`` (:func:`strip_steps`);
    then one store writes ``out_rows`` rows: store row ``r`` is accumulator row ``r *
    acc_rstride``, its ``out_tw`` elements lanes ``0, lane_step, 2 lane_step, ..``, written at
    ``out_addr + r * out_row_stride``; the requantiser's channel advances every ``ch_rows``
    rows. With stride 1 that is every row and lane (``ch_rows = h``); with stride 2 the even
    rows and the even lanes (``acc_rstride = lane_step = 2``, ``ch_rows = ceil(h / 2)``): a
    stride-2, pad-1 output is the stride-1 output at even rows and columns; in row phases
    (:func:`row_phases`) every row and the even lanes (``acc_rstride`` 1, ``lane_step`` 2).
    ``row0`` / ``lane0`` (1 for a layer with :func:`spec.desc.depthwise_odd` rows / columns,
    else 0): the store's first accumulator row and lane, so such a stride-2 store keeps the odd
    rows / lanes instead.
    In the quadrant mode (:func:`quad_mode`, ``half_last``) a store row is two output rows of a
    channel (``ch_rows = rows / 4`` of them a channel, ``out_tw = 2 w`` elements, ``out_row_stride
    = 2 w``), and a channel's last row is its map's last output row alone: ``out_tw / 2``
    elements, the next row ``out_row_stride / 2`` after it (:meth:`store_rows`)."""
    c0: int
    channels: int
    ox0: int
    tw: int
    a_load: BlockLoad
    b_load: BlockLoad
    tiles: tuple[StripTile, ...]
    out_addr: int
    out_row_stride: int
    out_rows: int
    out_tw: int
    ch_rows: int
    acc_rstride: int = 1
    lane_step: int = 1
    half_last: bool = False
    row0: int = 0
    lane0: int = 0

    def store_rows(self) -> list[tuple[int, int, int]]:
        """``(accumulator row, address, elements)`` of each row the store writes, in order:
        elements ``lane0, lane0 + lane_step, lane0 + 2 lane_step, ..`` of the accumulator row,
        at consecutive addresses (:class:`StripStep`)."""
        rows, addr = [], self.out_addr
        for r in range(self.out_rows):
            short = self.half_last and r % self.ch_rows == self.ch_rows - 1
            rows.append((self.row0 + r * self.acc_rstride, addr,
                         self.out_tw // 2 if short else self.out_tw))
            addr += self.out_row_stride // 2 if short else self.out_row_stride
        return rows


def strip_channels(h: int, *, w: int, rows: int, buf_words: int, acc_rows: int,
                   channels: int, stride: int = 1, kernel: int = 3) -> int:
    """Channels one strip step of ``h x w`` maps takes: as many as the buffer half
    (``buf_words`` words for ``ceil(h / 2)`` rows each) and the accumulator half (``acc_rows``:
    ``h`` rows each, plus
    the last tile's ``rows`` written past them) hold, up to ``channels``. A step's maps are
    one stacked map of ``G h`` rows, ``(G h + 1) // 2`` of them in buffer B; with ``h`` odd and
    ``stride`` 2 one channel a step (its even output rows would not be every other
    accumulator row); in row phases two channels a tile (:func:`phase_halves`) buffer A
    holds ``2 ceil(G h / 4)`` words; in row and column phases (:func:`col_phases` of ``h x
    w`` maps) each buffer ``G h``."""
    if h % 2 and stride == 2:
        return 1
    by_buf = buf_words // ((h + 1) // 2) if h % 2 == 0 else (2 * buf_words - 1) // h
    if col_phases(h, w, rows=rows, cols=rows, stride=stride, kernel=kernel):
        by_buf = buf_words // h
    if phase_halves(h, rows=rows, stride=stride, kernel=kernel):
        while by_buf > 1 and 2 * -(-by_buf * h // 4) > buf_words:
            by_buf -= 1
    by_acc = (acc_rows - rows) // h
    return max(1, min(channels, by_buf, by_acc))


def row_phases(h: int, *, rows: int, stride: int, kernel: int = 3) -> bool:
    """A stride-2 layer of ``h``-row maps runs in row phases (:attr:`StripTile.phase1`): with
    ``h`` a multiple of 4 (so that a step's stacked maps split into four equal classes of rows
    by their index mod 4, two a buffer) and taller than a stride-1 tile's ``rows - 2`` output
    rows, where a ``rows + 8``-beat phase tile giving ``rows - 1`` stride-2 output rows beats
    the stride-1 tiles (``rows - 2`` rows each, half of them kept); and the even maps of
    ``rows / 2`` to ``rows - 2`` rows of a 3x3 or 5x5 layer, two channels a tile
    (:func:`phase_halves`, session 41). Otherwise stride 2 runs as stride 1 with a
    decimating store. A 5x5 layer (``kernel`` 5, session 39) the same above a
    whole-mesh tile's ``rows - 4`` rows: ``rows + 24``-beat phase tiles of ``rows - 2``
    stride-2 output rows; a 7x7 layer (session 40) the same in three fills (the window rows 0,
    2, 4, then 1, 3, 5, then 6: :data:`PHASE_ROWS`), ``3 rows / 2 + 47``-beat tiles of ``rows -
    2`` stride-2 output rows, above ``rows - 3`` rows. Never a map :func:`one_tile` takes
    but those of :func:`phase_halves`."""
    return ((stride == 2 and kernel in PHASE_ROWS and h % 4 == 0 and h > rows - kernel + 1
             and not one_tile(h, rows=rows, kernel=kernel))
            or phase_halves(h, rows=rows, stride=stride, kernel=kernel))


def pass_tile_beats(kernel: int, rows: int) -> int:
    """Beats of a tile in row passes alone (:func:`strip_tile_cycles`): ``rows / 2`` fill beats
    a pass, a beat a tap, each pass after the first making its first fill beat in the last
    tap beat of the one before."""
    passes = len(PASS_ROWS[kernel])
    return passes * (rows // 2) + kernel * kernel - (passes - 1)


def _pass_better(h: int, rows: int, kernel: int) -> bool:
    # a channel's tiles back to back (each after the first a beat shorter: strip_step_cycles):
    # in row passes rows - 2 output rows a tile, whole-mesh tiles rows - 2 pad
    a, b = pass_tile_beats(kernel, rows) - 1, rows // 2 + kernel * kernel - 1
    return -(-h // (rows - 2)) * a < -(-h // (rows - kernel + 1)) * b


@functools.lru_cache(maxsize=None)
def row_pass_ranges(rows: int, kernel: int) -> tuple[tuple[int, int], ...]:
    """The map heights :func:`row_passes` takes for a ``kernel`` x ``kernel`` layer on a mesh
    of ``rows`` rows, as ``(lo, hi)`` ranges ``lo < h <= hi`` (the RTL compares with them),
    ``hi`` up to ``2 ** DIM_BITS - 1``: for 5x5 on the 16x16 ``(24, 28)``, ``(36, 42)``,
    ``(48, 56)``, ``(96, 98)``, ``(108, 112)``, ``(120, 126)`` and ``(180, 182)``; for 7x7
    ``(13, 14)``, ``(20, 28)``, ``(30, 42)``, ``(50, 56)``, ``(60, 98)`` and ``(100, 2 ** 24 -
    1)``. Never a height :func:`one_tile` takes (one tile without passes: 14 and 13 rows
    and less; ``(12, 14)`` and ``(10, 14)`` until session 40).
    A pass tile costs ``A = pass_tile_beats - 1`` beats for ``rows - 2`` output rows, a
    whole-mesh tile ``B = rows / 2 + k^2 - 1`` for ``rows - 2 p``; the tile counts' rounding
    decides up to a height past which the per-row costs do: passes never win again above
    ``B / (A / (rows - 2) - B / (rows - 2 p))`` where ``A / (rows - 2)`` is the larger, and
    always win above ``A / (B / (rows - 2 p) - A / (rows - 2))`` where it is the smaller
    (the last range then open to the largest height)."""
    if kernel not in PASS_ROWS or rows % 2 or rows < depthwise_mesh_side(kernel):
        return ()
    a = fractions.Fraction(pass_tile_beats(kernel, rows) - 1, rows - 2)
    b = fractions.Fraction(rows // 2 + kernel * kernel - 1, rows - kernel + 1)
    top, last = (1 << DIM_BITS) - 1, None
    if a > b:                                    # passes lose for good above this
        top = min(top, int(b * (rows - kernel + 1) / (a - b)) + 1)
    elif a < b:                                  # ... win for good above this
        top = min(top, int(a * (rows - 2) / (b - a)) + 1)
        last = (1 << DIM_BITS) - 1
    ranges, start = [], None
    for h in range(1, top + 2):
        if h <= top and _pass_better(h, rows, kernel) and not one_tile(h, rows=rows,
                                                                       kernel=kernel):
            start = h - 1 if start is None else start
        elif start is not None:
            ranges.append((start, h - 1))
            start = None
    if last is not None and ranges and ranges[-1][1] == top:
        ranges[-1] = (ranges[-1][0], last)
    return tuple(ranges)


def row_passes(h: int, *, rows: int, kernel: int) -> bool:
    """A layer of ``h``-row maps and a ``kernel`` of :data:`PASS_ROWS` runs in row passes
    (:attr:`StripTile.phase1`, and :attr:`StripTile.phase2` for 7x7): each tile fills the mesh
    once a pass, from its first padded row for the window rows 0 to 2 and then three rows
    further down for rows 3 and 4 (5x5), or for rows 3 to 5 and six rows down for row 6
    (7x7), the accumulators carrying the sum across, so a tile gives ``rows - 2`` output rows
    in :func:`pass_tile_beats` (``rows + 24`` and ``3 rows / 2 + 47``) instead of ``rows - 2
    p`` in ``rows / 2 + k^2``. Taken where that needs fewer beats a channel
    (:func:`row_pass_ranges`): a 28 x 28 5x5 map on the 16x16 is two tiles a strip instead of
    three (maps of 14 rows and less are one tile without passes, :func:`one_tile`). Stride 2
    too (its tiles are the stride-1 ones, the store keeping every other row)."""
    return any(lo < h <= hi for lo, hi in row_pass_ranges(rows, kernel))


def one_strip(w: int, *, cols: int, kernel: int) -> bool:
    """A layer of ``w``-column maps runs in one strip of ``w`` output columns, not strips of
    ``cols - 2 pad``: its maps are at most ``cols - pad`` columns wide (14 for 5x5 on the
    16x16, 13 for 7x7, 15 for 3x3). The first strip's patch is the map's columns with its
    left pad rotated in from the lanes past them (``pre_right``); every row of the mesh is a
    ring, so the pad lanes also lie right of the map's last column, and with at least ``pad``
    of them (``cols - w >= pad``) the windows of the last ``pad`` output columns, which leave
    the map on the right, read only those: the left pad is the right pad too. (Session 40: a
    14 x 14 5x5 map, EfficientNet-B0's, was two strips of 12 and 2 columns.)"""
    return _ring_fits(w, cols, kernel)


def one_tile(h: int, *, rows: int, kernel: int) -> bool:
    """A channel of ``h``-row maps is one whole-mesh tile of ``h`` output rows (one fill, the
    whole walk: ``rows / 2 + kernel^2`` beats), not tiles of ``rows - 2 pad`` rows or row
    passes: its maps are at most ``rows - pad`` rows tall (14 for 5x5 on the 16x16, 13 for
    7x7, 15 for 3x3). As :func:`one_strip` for columns: the fill masks the rows above and
    below the map (``a_lo`` / ``b_lo``, ``a_hi`` / ``b_hi``), every column of the mesh is a
    ring, so the ``pad`` masked rows on top are below the map's last row too. (Outside the
    halves and quadrant modes, which hold two and four such maps a tile, and the stride-2
    maps :func:`phase_halves` takes into row phases.) :func:`row_passes` never takes such a
    map, :func:`row_phases` only those of :func:`phase_halves`.
    (Session 40: a 14 x 14 5x5 map, EfficientNet-B0's, was a 40-beat tile in row passes.)"""
    return _ring_fits(h, rows, kernel)


def row_pairs(h: int, *, rows: int, kernel: int) -> bool:
    """A 5x5 or 7x7 layer of ``h``-row maps runs two channels a tile, the window's rows two a
    fill (:attr:`StripTile.pairs`, session 41): maps of at most ``rows / 2 - 1`` rows (one
    :func:`one_tile` each, so never in row passes or phases) on a mesh of a multiple of 4 rows,
    where two channels take ``ceil(k / 2)`` fills and ``k^2`` taps instead of a whole-mesh
    tile each."""
    return kernel != 3 and rows % 4 == 0 and 2 * h + 2 <= rows


def _ring_fits(side: int, mesh: int, kernel: int) -> bool:
    # a map side one mesh ring holds with its pads: the pad lanes / rows before the map are
    # its pads after it too, round the ring
    return side <= mesh - strip_pad(kernel)


def quad_mode(h: int, w: int, *, rows: int, cols: int, stride: int) -> bool:
    """A layer runs in the quadrant mode (:attr:`StripTile.quads`: four channels a tile, two
    output rows a store beat): stride 1, maps of exactly ``rows / 2 - 1`` rows and columns (7 x
    7 on the 16x16; two rows of a map then fill ``2 (rows / 2 - 1)`` bytes of a word) on a
    square mesh of a multiple of 4 rows, at least 8 (a 1 x 1 map's row would sit in a word
    that reads past the maps). Two output rows of a channel fit a store beat in either output
    format (``2 (cols / 2 - 1)`` int32 elements are less than an accumulator row)."""
    return (stride == 1 and rows == cols and rows % 4 == 0 and rows >= 8
            and h == w == rows // 2 - 1)


def strip_steps(channels: int, h: int, w: int, *, x_addr: int, out_addr: int,
                rows: int = 16, cols: int = 16, group: int = 1,
                stride: int = 1, kernel: int = 3, odd_rows: bool = False,
                odd_cols: bool = False) -> list[StripStep]:
    """The steps of a pad-1 depthwise 3x3 layer (or, with ``kernel``, a 5x5 or 7x7 one: below)
    of ``stride`` 1 or 2 on an ``rows`` x
    ``cols`` mesh, for a dense NCHW int8 input at ``x_addr`` (channel ``c``, row ``y``, column
    ``x`` at ``x_addr + (c * h + y) * w + x``: no padding in memory) and a dense NCHW output at
    ``out_addr`` (``out_size(h, 1, stride)`` x ``out_size(w, 1, stride)`` maps, addresses in
    elements): the contract between the planner and the sequencer's depthwise steps.
    ``group``: channels per step (:func:`strip_channels`).

    Stride 2 computes what stride 1 does and stores the even rows and columns of it
    (:class:`StripStep`): four times the MACs a stride-2 layer needs, on the same loads, with a
    quarter of the stores (docs/architecture.md); but maps :func:`row_phases` takes (below)
    compute only the stride-2 output rows, still every column.

    A step takes ``group`` channels and one column strip. Its patches are the padded map's
    rows ``14 ty .. 14 ty + 15`` (for ``rows = 16``) and columns ``ox0 - 1 .. ox0 + cols - 2``:
    padded row ``pr`` is input row ``pr - 1``, so the even padded rows are the odd input rows
    (buffer A: ``h // 2`` words a channel, one load of every channel's rows, because with ``h``
    even channel ``c + 1``'s row 1 is ``2 w`` bytes after channel ``c``'s row ``h - 1``) and the
    odd padded rows the even input rows (buffer B). The pads are never read from memory: the
    top and bottom ones are fill words the feeder zeroes (``a_lo``, ``a_hi``, ``b_hi``), the
    right one is the lanes past the load's bytes, and the left one, in the first strip, is the
    patch's last column (the strip's loads start at input column 0 and take ``cols - 1``
    bytes), rotated into column 0 by ``pre_right``: the feeder puts the pad value into those
    lanes (:attr:`StripTile.cols`), whatever the buffer holds there.

    A step of two or more channels of ``h <= rows / 2 - 1`` rows (``rows`` a multiple of 4)
    runs them two a tile, one in each half of the mesh (:attr:`StripTile.halves`); so does a
    stride-2 step in row phases of even maps of ``rows / 2`` to ``rows - 2`` rows
    (:func:`phase_halves`: both fills of a tile in halves, its ``phase1`` a halves tile whose
    ``pair`` is the bottom channel's ``phase1``; buffer B's loads then a word shorter a group
    than A's when ``G h / 2`` is odd, its second group at the same word as A's).

    Stride 2 with :func:`row_phases` (maps of ``h`` a multiple of 4 taller than ``rows - 2``)
    computes only the stride-2 outputs, ``rows - 1`` rows a tile (:attr:`StripTile.phase1`).
    The step's stacked rows ``s`` fall into four classes by ``s mod 4``, ``G h / 4`` rows each:
    buffer A takes classes 0 and 1 (words ``0 ..`` and ``G h / 4 ..``), buffer B classes 2
    and 3, each one load of two groups (:class:`BlockLoad`: every input row read once, as with
    stride 1); phase 0's rows (padded rows ``2 oy0 + 2 i``: odd classes) come from the second
    groups, phase 1's (even classes) from the first ones, the buffers trading places
    (``swap``) by the class of the tile's first row. Accumulator row ``c P + p`` holds output
    row ``p`` of the step's channel ``c`` (``P = h / 2``), every other lane of it an output, and
    the store writes the ``G P`` rows (``acc_rstride`` 1, ``lane_step`` 2).

    Maps of ``rows / 2 - 1`` rows and columns run in the quadrant
    mode (:func:`quad_mode`, :attr:`StripTile.quads`: four channels a tile, two rows a word,
    two output rows a store row).

    ``kernel = 5`` or ``7``: a depthwise 5x5 (pad 2) or 7x7 (pad 3) layer, in whole-mesh
    tiles of the 25- or 49-tap :func:`serpentine` walk, ``rows - 2 pad`` x ``cols - 2 pad``
    outputs a tile (stride 2: the stride-1 results, the decimating store keeping the even rows
    and columns; no quadrants, halves only for maps of up to ``rows / 2 - 1`` rows with the
    window's rows two a fill, :attr:`StripTile.pairs`, and row phases, :func:`row_phases`,
    ``_phase_tiles``: 7x7 in three fills since session 40). The loads are the 3x3 layer's (odd input
    rows in A, even ones in B); patch row ``r`` is input row ``oy0 - pad + r``
    (:func:`kernel_tile`: with pad 2 the even patch rows are the even input rows, ``swap`` for
    a channel starting at an even stacked row, and both of the first tile's first fill words
    are the top pad, ``a_lo = b_lo = 1``; with pad 3 ``a_lo = 2``, ``b_lo = 1``); a 5x5 layer
    of a height :func:`row_passes` takes has tiles of ``rows - 2`` output rows in two row
    passes (:attr:`StripTile.phase1`, the same loads; a 7x7 layer three, with
    :attr:`StripTile.phase2`); the first
    strip loads ``cols - pad`` bytes from column 0 and its tiles are rotated right by ``pad``
    (``pre_right``), later strips start their loads ``pad`` columns left of their outputs.
    A map of at most ``cols - pad`` columns is one strip of all its columns
    (:func:`one_strip`), and one of at most ``rows - pad`` rows one whole-mesh tile a channel
    of all its rows (:func:`one_tile`; not in row phases): their pads round the mesh's rings.

    ``odd_rows`` / ``odd_cols`` (stride 2, an even ``h`` / ``w``: :data:`spec.desc.B_MODE_ODD_ROWS`,
    :data:`spec.desc.B_MODE_ODD_COLS`): the layer's top / left pad is ``pad - 1`` (TF "SAME"),
    so its outputs are the stride-1 results' odd rows / columns: the steps are the stride-1
    ones and the store keeps those (``row0`` / ``lane0`` 1); in row phases the fills take the
    rows one further down instead (``_phase_tiles``), the store every row."""
    if kernel not in KERNELS:
        raise ValueError(f"strip_steps: kernel={kernel!r} must be one of {KERNELS}")
    if h < 1 or w < 1 or channels < 1:
        raise ValueError(f"strip_steps: channels={channels}, h={h}, w={w} must be >= 1")
    if rows < 4 or rows % 2 or cols < 4:
        raise ValueError(f"strip_steps: a {rows}x{cols} mesh must have even rows >= 4 and "
                         f"cols >= 4")
    if stride not in (1, 2):
        raise ValueError(f"strip_steps: stride={stride} must be 1 or 2")
    if group < 1 or (h % 2 and stride == 2 and group != 1):
        raise ValueError(f"strip_steps: group={group} must be >= 1, and 1 when h={h} is odd "
                         f"with stride 2")
    if (odd_rows or odd_cols) and (stride != 2 or (odd_rows and h % 2) or
                                   (odd_cols and w % 2)):
        raise ValueError(f"strip_steps: odd_rows={odd_rows}, odd_cols={odd_cols} need stride 2 "
                         f"(not {stride}) and an even side (h={h}, w={w})")
    pad = strip_pad(kernel)
    th_max, tw_max = rows - 2 * pad, cols - 2 * pad
    # (a strip after the first starts its loads pad columns left of its outputs: at column 0
    # or later, so a strip is at least pad columns wide)
    if min(rows, cols) < depthwise_mesh_side(kernel):
        raise ValueError(f"strip_steps: a {rows}x{cols} mesh is too small for {kernel}x{kernel} "
                         f"tiles (it needs at least {depthwise_mesh_side(kernel)} rows and "
                         f"columns)")
    oh, ow = out_size(h, pad, stride, kernel), out_size(w, pad, stride, kernel)
    modes = kernel == 3        # halves of stride-1 tiles, quadrants: 3x3 (5x5, 7x7: pairs)
    phases = row_phases(h, rows=rows, stride=stride, kernel=kernel)
    pairs = row_pairs(h, rows=rows, kernel=kernel)
    # two channels a tile: 3x3 maps of up to rows / 2 - 1 rows, 5x5 and 7x7 ones in pairs of
    # window rows (row_pairs), stride 2's row phases of phase_halves' maps
    two = ((modes and 2 * h + 2 <= rows and rows % 4 == 0) or pairs
           or phase_halves(h, rows=rows, stride=stride, kernel=kernel))
    # (never with passes; phase_halves' maps are one tile too, but take the phases path)
    single = one_tile(h, rows=rows, kernel=kernel)
    passes = not phases and row_passes(h, rows=rows, kernel=kernel)
    if single:                                   # a channel one tile (one_tile)
        th_max = h
    if passes:                                   # 5x5 row passes: rows - 2 output rows a tile
        th_max = rows - 2
    if modes and quad_mode(h, w, rows=rows, cols=cols, stride=stride):
        return _quad_steps(channels, h, x_addr, out_addr, rows, group)
    if col_phases(h, w, rows=rows, cols=cols, stride=stride, kernel=kernel):
        return _col_phase_steps(channels, h, w, x_addr, out_addr, rows, cols, group, kernel,
                                odd_rows, odd_cols)
    # a map of at most cols - pad columns is one strip (one_strip)
    strip = w if one_strip(w, cols=cols, kernel=kernel) else tw_max
    steps = []
    for c0 in range(0, channels, group):
        g_count = min(group, channels - c0)
        for ox0 in range(0, w, strip):
            first = ox0 == 0
            xs = 0 if first else ox0 - pad      # the patch's first loaded input column
            nbytes = min(cols - pad, w) if first else min(cols, w - xs)
            base = x_addr + c0 * h * w + xs
            # the channels' maps stacked: row s of the step at base + s w, the odd rows in A
            # (word (s - 1) / 2), the even ones in B (word s / 2)
            a_load = BlockLoad(base + w, 2 * w, (g_count * h) // 2, nbytes)
            b_load = BlockLoad(base, 2 * w, (g_count * h + 1) // 2, nbytes)
            tiles = []
            if phases:
                a_load, b_load, tiles = _phase_tiles(c0, g_count, h, base, w, nbytes, first,
                                                     rows, odd_rows, kernel)
            for g in range(0 if phases else g_count):
                for oy0 in range(0, h, th_max):
                    common = dict(channel=c0 + g, oy0=oy0, th=min(th_max, h - oy0),
                                  pre_right=pad if first else 0, acc_row=g * h + oy0,
                                  cols=nbytes, kernel=kernel)
                    # row passes: pass n's patch starts PASS_ROWS[kernel][n][0] rows down
                    later = [StripTile(**common, **kernel_tile(g, h, oy0 + dys[0], pad=pad,
                                                               rows=rows))
                             for dys in PASS_ROWS[kernel][1:]] if passes else []
                    later += [None] * (2 - len(later))
                    tiles.append(StripTile(**common, phase1=later[0], phase2=later[1],
                                           passes=passes,
                                           **kernel_tile(g, h, oy0, pad=pad, rows=rows)))
            if two and g_count > 1:
                # two channels a tile, one in each half of the mesh (StripTile.halves)
                tiles = [_two_a_tile(top, bottom, pairs) for top, bottom
                         in itertools.zip_longest(tiles[0::2], tiles[1::2])]
            tw = min(strip, w - ox0)
            steps.append(StripStep(c0, g_count, ox0, tw, a_load, b_load, tuple(tiles),
                                   out_addr + c0 * oh * ow + ox0 // stride, ow,
                                   out_rows=g_count * oh,
                                   out_tw=tw // 2 if odd_cols else -(-tw // stride), ch_rows=oh,
                                   acc_rstride=1 if phases else stride, lane_step=stride,
                                   row0=int(odd_rows and not phases), lane0=int(odd_cols)))
    return steps


def _two_a_tile(top: StripTile, bottom: StripTile | None, pairs: bool) -> StripTile:
    """``top``'s tile with ``bottom``'s channel in the mesh's bottom half (None: a lone last
    channel), :attr:`StripTile.halves`; with ``pairs`` a 5x5 or 7x7 tile in pairs of window
    rows; a row-phase tile's second fill in halves too."""
    phase1 = top.phase1 and dataclasses.replace(top.phase1, halves=True,
                                                pair=bottom and bottom.phase1)
    return dataclasses.replace(top, halves=True, pair=bottom, pairs=pairs, phase1=phase1)


def kernel_tile(g: int, h: int, oy0: int, *, pad: int, rows: int) -> dict:
    """The fill fields of the whole-mesh stride-1 tile of output rows ``oy0 ..`` of a step's
    channel ``g`` (its map's stacked rows from ``g h``) for a layer of ``pad``: patch row ``r``
    is input row ``oy0 - pad + r``, stacked row ``S0 + r`` with ``S0 = g h + oy0 - pad``; odd
    stacked rows are in buffer A (word ``(s - 1) / 2``), even ones in B (word ``s / 2``); the
    masks keep the patch rows inside the map (:class:`StripTile`)."""
    half = rows // 2
    s0 = g * h + oy0 - pad
    if s0 % 2:                                   # even patch rows odd stacked rows: A
        a_base, b_base, swap = (s0 - 1) // 2, (s0 + 1) // 2, False
    else:                                        # even patch rows even stacked rows: B
        a_base, b_base, swap = s0 // 2, s0 // 2, True

    def words(first_row):                        # fill words k whose row first_row + 2 k
        lo = max(0, -(first_row // 2))           # lies in [0, h)
        return min(half, lo), max(0, min(half, -(-(h - first_row) // 2)))

    (a_lo, a_hi), (b_lo, b_hi) = words(oy0 - pad), words(oy0 - pad + 1)
    return dict(a_base=a_base, a_lo=a_lo, a_hi=a_hi, b_base=b_base, b_lo=b_lo, b_hi=b_hi,
                swap=swap)


def _phase_tiles(c0: int, g_count: int, h: int, base: int, w: int, nbytes: int, first: bool,
                 rows: int, odd_rows: bool = False,
                 kernel: int = 3) -> tuple[BlockLoad, BlockLoad, list[StripTile]]:
    """A row-phase step's loads and tiles (:func:`strip_steps`, :attr:`StripTile.phase1`).
    Output row ``oy`` of a ``kernel`` x ``kernel`` window (pad ``p``) reads the input rows
    ``2 oy - p + dy``; a fill of the window rows ``dy0, dy0 + 2, ..`` (:data:`PHASE_ROWS`)
    holds, in mesh row ``i``, the input row ``2 oy0 - p + dy0 + 2 i``: fill word ``k`` the
    rows ``p0 + d + 4 k`` and ``p0 + d + 2 + 4 k`` with ``p0 = 2 oy0`` and ``d = dy0 - p``
    (:func:`_phase_fill`: the buffers, words, swap and masks of those rows). For 3x3 the
    phases are the input rows ``p0 - 1 + 2 i`` (window rows 0, 2) and ``p0 + 2 i`` (row 1),
    ``rows - 1`` output rows a tile; for 5x5 ``p0 - 2 + 2 i`` (rows 0, 2, 4) and ``p0 - 1 +
    2 i`` (1, 3); for 7x7 ``p0 - 3 + 2 i`` (0, 2, 4), ``p0 - 2 + 2 i`` (1, 3, 5) and ``p0 + 3
    + 2 i`` (6: :attr:`StripTile.phase2`); ``rows - 2`` output rows a tile for both. With
    ``odd_rows`` (TF "SAME": a pad one less above, so output row ``oy`` reads input rows ``2
    oy - p + 1 + dy``) every fill a row further down."""
    half, oh = rows // 2, h // 2
    # (G h is even: with G h / 2 odd, classes 0 and 1 a row more than 2 and 3, phase_halves)
    words, b_words = -(-g_count * h // 4), g_count * h // 4
    pad = strip_pad(kernel)
    th_max = rows - 1 if kernel == 3 else rows - 2
    # classes 0, 1 of the stacked rows into A, classes 2, 3 into B: row 4 j + c in word j of
    # its group (the second groups at word `words` of both buffers)
    a_load = BlockLoad(base, 4 * w, words, nbytes, groups=2, gaddr=w, gwords=words)
    b_load = BlockLoad(base + 2 * w, 4 * w, b_words, nbytes, groups=2, gaddr=w, gwords=words)
    tiles = []
    for g in range(g_count):
        for oy0 in range(0, oh, th_max):
            p0 = 2 * oy0
            fills = [StripTile(channel=c0 + g, oy0=oy0, th=min(th_max, oh - oy0),
                               pre_right=pad if first else 0, acc_row=g * oh + oy0,
                               cols=nbytes, kernel=kernel,
                               **_phase_fill(g * h + p0, p0, dys[0] - pad + odd_rows, h,
                                             words, half))
                     for dys in PHASE_ROWS[kernel]]
            fills += [None] * (3 - len(fills))
            tiles.append(dataclasses.replace(fills[0], phase1=fills[1], phase2=fills[2]))
    return a_load, b_load, tiles


def _phase_fill(q: int, p0: int, d: int, h: int, words: int, half: int,
                parity: int | None = None) -> dict:
    """The fill fields of a row-phase fill whose word ``k`` holds the input rows ``p0 + d + 4
    k`` (the even mesh row) and ``p0 + d + 2 + 4 k`` (the odd one) of the channel whose row
    ``p0`` is the step's stacked row ``q`` (:func:`_phase_tiles`' loads: stacked row ``s`` in
    buffer A for ``s mod 4`` 0 or 1, else B, word ``s // 4`` of the first group for even ``s``,
    of the second, ``words`` on, for odd ``s``); rows outside the map masked. With ``parity``
    (0 or 1: row and column phases, :func:`_col_phase_steps`' deinterleaving loads) a group
    is ``2 words`` words, the rows' even-byte words first and their odd-byte words ``words``
    on: the fill reads the words of that ``parity``."""
    s0 = q + d
    swap = s0 % 4 >= 2                           # the even rows in B
    a_row, b_row = (s0 + 2, s0) if swap else (s0, s0 + 2)
    group, extra = (words, 0) if parity is None else (2 * words, parity * words)

    def word(s):
        return (s >> 2) + (group if s & 1 else 0) + extra

    def lo(r):                                   # fill words whose row r + 4 k is above the map
        return min(half, max(0, -(-(-r) // 4)))

    def hi(r):                                   # ... is in the map or above it
        return max(0, min(half, -(-(h - r) // 4)))

    return dict(a_base=word(a_row), a_lo=lo(p0 + d), a_hi=hi(p0 + d), b_base=word(b_row),
                b_lo=lo(p0 + d + 2), b_hi=hi(p0 + d + 2), swap=swap)


def _col_phase_steps(channels: int, h: int, w: int, x_addr: int, out_addr: int, rows: int,
                     cols: int, group: int, kernel: int, odd_rows: bool,
                     odd_cols: bool) -> list[StripStep]:
    """The steps of a layer in row and column phases (:func:`col_phases`,
    :attr:`StripTile.cphases`): strips of ``cols - p`` output columns, ``group`` channels a
    step. Strip ``ox0`` (its first output column) needs the input columns from ``X0 = 2 ox0 -
    p`` (``+ 1`` with ``odd_cols``, TF "SAME"), ``2 cols`` of them: its loads read them from
    ``xs = max(0, X0)`` (``nbytes`` up to ``2 cols``, the map's right edge), the rows in the
    row phases' four classes, each row deinterleaved into an even-byte and an odd-byte word
    (:attr:`BlockLoad.dwords`; a buffer's two classes at words ``0`` and ``2 G h / 4``, each
    class's odd-byte words ``G h / 4`` after its even-byte ones). Column phase ``c``'s lane
    ``j`` is column ``X0 + 2 j + c``: the word of parity ``(X0 - xs + c) mod 2``, rotated right
    by ``(xs - X0 + parity - c) / 2`` (0 but in a first strip) and masked from its loaded
    lanes on (and from ``cols`` less that rotation: the lanes it brings round to the left are
    the left pad)."""
    pad = strip_pad(kernel)
    half, oh, ow = rows // 2, h // 2, -(-w // 2)
    th_max = rows - 1 if kernel == 3 else rows - 2
    n_out = cols - pad
    steps = []
    for c0 in range(0, channels, group):
        g_count = min(group, channels - c0)
        words = g_count * h // 4
        for ox0 in range(0, ow, n_out):
            x0 = 2 * ox0 - pad + odd_cols           # column phase 0's lane 0
            xs = max(0, x0)
            nbytes = min(2 * cols, w - xs)
            base = x_addr + c0 * h * w + xs
            a_load = BlockLoad(base, 4 * w, words, nbytes, groups=2, gaddr=w, gwords=2 * words,
                               dwords=words)
            b_load = BlockLoad(base + 2 * w, 4 * w, words, nbytes, groups=2, gaddr=w,
                               gwords=2 * words, dwords=words)
            tiles = []
            for g in range(g_count):
                for oy0 in range(0, oh, th_max):
                    p0 = 2 * oy0
                    fills = []
                    for r, c in CPHASE_FILLS:
                        parity = (x0 - xs + c) % 2
                        right = (xs - x0 + parity - c) // 2
                        d = PHASE_ROWS[kernel][r][0] - pad + odd_rows
                        fills.append(StripTile(
                            channel=c0 + g, oy0=oy0, th=min(th_max, oh - oy0), pre_right=right,
                            acc_row=g * oh + oy0,
                            cols=min(cols - right, (nbytes - parity + 1) // 2),
                            kernel=kernel, cphases=True,
                            **_phase_fill(g * h + p0, p0, d,
                                          h, words, half, parity)))
                    tiles.append(dataclasses.replace(fills[0], phase1=fills[1], phase2=fills[2],
                                                     phase3=fills[3]))
            tw = min(n_out, ow - ox0)
            steps.append(StripStep(c0, g_count, 2 * ox0, 2 * tw, a_load, b_load, tuple(tiles),
                                   out_addr + c0 * oh * ow + ox0, ow, out_rows=g_count * oh,
                                   out_tw=tw, ch_rows=oh))
    return steps


def _quad_steps(channels: int, n: int, x_addr: int, out_addr: int, rows: int,
                group: int) -> list[StripStep]:
    """The quadrant mode's steps (:func:`strip_steps`, :attr:`StripTile.quads`): one column
    strip, ``group`` channels a step, four a tile."""
    steps = []
    pairs = rows // 4                             # accumulator rows a channel
    for c0 in range(0, channels, group):
        g_count = min(group, channels - c0)
        base, s_rows = x_addr + c0 * n * n, g_count * n
        tiles = tuple(StripTile(channel=c0 + g, oy0=0, th=n, a_base=g * n // 2, a_lo=0, a_hi=0,
                                b_base=g * n // 2, b_hi=0, pre_right=False, acc_row=pairs * g,
                                cols=2 * n, quads=min(4, g_count - g))
                      for g in range(0, g_count, 4))
        steps.append(StripStep(c0, g_count, 0, n,
                               BlockLoad(base + n, 2 * n, (s_rows - 1) // 2, 2 * n),
                               BlockLoad(base, 2 * n, s_rows // 2, 2 * n), tiles,
                               out_addr + c0 * n * n, 2 * n, out_rows=g_count * pairs,
                               out_tw=2 * n, ch_rows=pairs, half_last=True))
    return steps


def _quad_patch(tile: StripTile, a_words: np.ndarray, b_words: np.ndarray, rows: int,
                pad: int) -> np.ndarray:
    """A quadrant tile's patch (:attr:`StripTile.quads`); only its channels' words are read."""
    n, quarter, half = rows // 2 - 1, rows // 4, rows // 2
    patch = np.full((rows, rows), pad, np.int64)
    for k in range(half):
        hf, kk = divmod(k, quarter)
        base = tile.a_base + hf * n
        left, right = 2 * hf < tile.quads, 2 * hf + 1 < tile.quads
        if kk == 0:
            parts = [(2 * k + 1, b_words, base, a_words, base + quarter - 1, 0)]
        else:
            parts = [(2 * k + d, a_words, base + kk - 1, b_words, base + quarter - 1 + kk, n * d)
                     for d in (0, 1)]
        for row, lw, li, rw, ri, off in parts:
            if left:
                patch[row, 1:half] = lw[li, off:off + n]
            if right:
                patch[row, half + 1:] = rw[ri, off:off + n]
    return patch


def _half_patch(tile: StripTile, a_words: np.ndarray, b_words: np.ndarray, rows: int,
                pad: int) -> np.ndarray:
    """The ``rows`` x ``cols`` patch of ``tile``'s fill words alone, before any rotation."""
    cols = a_words.shape[1]
    patch = np.full((rows, cols), pad, np.int64)
    even, odd = ((b_words, tile.b_base), (a_words, tile.a_base)) if tile.swap else \
        ((a_words, tile.a_base), (b_words, tile.b_base))
    for k in range(rows // 2):
        if tile.a_lo <= k < tile.a_hi:
            patch[2 * k, :tile.cols] = even[0][even[1] + k, :tile.cols]
        if tile.b_lo <= k < tile.b_hi:
            patch[2 * k + 1, :tile.cols] = odd[0][odd[1] + k, :tile.cols]
    return patch


def strip_patch(tile: StripTile, a_words: np.ndarray, b_words: np.ndarray,
                rows: int, pad: int = 0) -> np.ndarray:
    """The patch ``tile`` puts in a ``rows``-row mesh before its first tap: the fill words
    (``a_words`` / ``b_words``: buffer words x ``cols``, int8 values), the masked words and
    the lanes from ``tile.cols`` on ``pad``, rotated right ``pre_right`` times; with
    ``halves`` the top half of the tile's own patch above the top half of its ``pair``'s
    (pad without one); with ``quads`` the quadrant fill (:attr:`StripTile.quads`). Only words
    inside the masks are read."""
    if tile.quads:
        return _quad_patch(tile, a_words, b_words, rows, pad)
    patch = _half_patch(tile, a_words, b_words, rows, pad)
    if tile.halves:
        half = rows // 2
        if tile.pair is None:
            patch[half:] = pad
        else:
            patch[half:] = _half_patch(tile.pair, a_words, b_words, rows, pad)[:half]
    for _ in range(int(tile.pre_right)):
        patch = _rotate(patch, "RIGHT")
    return patch


def pair_fill(tile: StripTile, q: int) -> StripTile:
    """Pass ``q``'s fill of a :attr:`StripTile.pairs` tile: fill word ``k`` is the tile's word
    ``q + k`` (its bases ``q`` words on, its masks ``q`` words earlier), in both halves."""
    def shift(t):
        return dataclasses.replace(t, a_base=t.a_base + q, b_base=t.b_base + q,
                                   a_lo=max(0, t.a_lo - q), a_hi=max(0, t.a_hi - q),
                                   b_lo=max(0, t.b_lo - q), b_hi=max(0, t.b_hi - q))
    return dataclasses.replace(shift(tile), pair=tile.pair and shift(tile.pair))


def strip_tile_cycles(tile: StripTile, rows: int) -> int:
    """Beats of one strip tile: ``rows / 2`` fills (rotated as they enter with ``pre_right``)
    a row phase, a beat a tap (``kernel ** 2``); phase 1's first fill beat is phase 0's last
    tap beat."""
    fills = 1 + (tile.phase1 is not None) + (tile.phase2 is not None) + (tile.phase3 is not None)
    if tile.pairs:
        fills = (tile.kernel + 1) // 2
    return fills * (rows // 2) + tile.kernel ** 2 - (fills - 1)


def run_strip_tile(tile: StripTile, a_words: np.ndarray, b_words: np.ndarray,
                   weights: np.ndarray, rows: int, pad: int = 0) -> np.ndarray:
    """One strip tile on the mesh, move by move after its fill (:func:`strip_patch`): the
    serpentine taps with the channel's weights (``weights``: the layer's, (channels, k, k) for
    the tile's ``kernel`` k, indexed by :attr:`StripTile.channel`; with ``halves`` the bottom
    half takes ``pair``'s).
    With ``phase1``, the two fills and the stride-2 walk (:attr:`StripTile.phase1`).
    With ``quads`` each quadrant takes its channel's weights. Returns the accumulators (rows x
    cols, exact int64); mesh row ``i`` column ``j`` is output ``(oy0 + i, ox0 + j)`` of the top
    half's channel (:func:`strip_tile_writes`, :func:`strip_tile_acc`)."""
    k = tile.kernel
    if weights.shape[1:] != (k, k):
        raise ValueError(f"run_strip_tile: a {k}x{k} tile needs weights (channels, {k}, {k}), "
                         f"not {weights.shape}")
    w = np.zeros((rows, a_words.shape[1], k, k), np.int64)
    w[:] = weights[tile.channel]
    if tile.halves and tile.pair is not None:
        w[rows // 2:] = weights[tile.pair.channel]
    half = rows // 2
    for q in range(1, tile.quads):              # the quadrant mode: a channel a quadrant
        qi, qj = divmod(q, 2)
        w[qi * half:(qi + 1) * half, qj * half:(qj + 1) * half] = weights[tile.channel + q]
    if tile.pairs:                              # two window rows a fill, in halves
        phases = [(pair_fill(tile, q), walk)
                  for q, walk in enumerate(walks(1, k, pairs=True))]
    elif tile.cphases:                          # stride 2 in row and column phases
        phases = list(zip((tile, tile.phase1, tile.phase2, tile.phase3),
                          walks(2, k, cphases=True)))
    elif tile.phase1 is None:
        phases = [(tile, serpentine(k))]
    else:                                       # stride 2's row phases or the row passes
        fills = [f for f in (tile, tile.phase1, tile.phase2) if f is not None]
        phases = list(zip(fills, walks(1, k, passes=True) if tile.passes else walks(2, k)))
    acc = np.zeros((rows, a_words.shape[1]), np.int64)
    for fill, walk in phases:
        mesh = strip_patch(fill, a_words, b_words, rows, pad)
        for (dy, dx), move in walk:
            acc = acc + mesh * w[:, :, dy, dx]
            if move is not None:
                mesh = _rotate(mesh, move)
    return acc


def strip_tile_writes(tile: StripTile, rows: int) -> list[tuple[int, int]]:
    """``(mesh row, accumulator row)`` of each row ``tile`` writes, in the order the array
    drains them (bottom row first): mesh row ``i`` into ``acc_row + i``; with ``halves`` the
    bottom half's row ``rows / 2 + i`` into ``acc_row + th + i`` (``pair.acc_row + i``) and the
    top half's rows from ``th`` on into ``acc_row + th - 1``, which its row ``th - 1`` then
    overwrites (:class:`StripTile`). The rows past the tile's results hold nothing of use."""
    half = rows // 2
    if not tile.halves:
        return [(i, tile.acc_row + i) for i in reversed(range(rows))]
    return [(i, tile.acc_row + tile.th + i - half if i >= half
             else tile.acc_row + min(i, tile.th - 1)) for i in reversed(range(rows))]


def strip_tile_acc(tile: StripTile, acc: np.ndarray) -> list[tuple[int, np.ndarray]]:
    """``(accumulator row, its lanes)`` of each row of results ``tile`` leaves in the
    accumulator, from :func:`run_strip_tile`'s ``acc`` (rows x cols): the rows
    :func:`strip_tile_writes` states, or in the quadrant mode (:attr:`StripTile.quads`) its
    channels' packed rows: quadrant ``q``'s output rows ``2 k`` and ``2 k + 1`` in row
    ``acc_row + (rows / 4) q + k``, lanes ``0 .. n - 1`` and ``n .. 2 n - 1`` (``n = rows / 2 -
    1``; with ``k = rows / 4 - 1`` the second part is the quadrant's last mesh row, not an
    output), lanes from ``2 n`` on zero. (A quadrant without a channel leaves rows of no
    use.)"""
    rows, cols = acc.shape
    if not tile.quads:
        return [(acc_row, acc[row]) for row, acc_row in strip_tile_writes(tile, rows)]
    n, half = rows // 2 - 1, rows // 2
    out = []
    for q in range(tile.quads):
        qi, qj = divmod(q, 2)
        for k in range(rows // 4):
            lanes = np.zeros(cols, np.int64)
            for d in (0, 1):
                lanes[n * d:n * (d + 1)] = acc[qi * half + 2 * k + d, qj * half:qj * half + n]
            out.append((tile.acc_row + rows // 4 * q + k, lanes))
    return out


def strip_step_cycles(step: StripStep, rows: int) -> int:
    """Beats of a strip step's tiles, back to back: one less than :func:`strip_tile_cycles`
    for each tile after the first (its first fill beat is its predecessor's last tap beat)."""
    return _back_to_back([strip_tile_cycles(t, rows) for t in step.tiles])


def store_beats(tile: MeshTile, rows: int = 16) -> int:
    """C-port beats of one tile's results on a ``rows``-row mesh: one store per channel, a beat
    per output row; in the quadrant mode (split (2, 2) and maps :func:`quad_mode` takes) two
    output rows a beat (:attr:`StripStep.half_last`)."""
    two = tile.split == (2, 2) and quad_mode(tile.th, tile.tw, rows=rows, cols=rows, stride=1)
    return len(tile.channels) * (-(-tile.th // 2) if two else tile.th)


def mac_utilisation(channels: int, h: int, w: int, *, stride: int, pad: int = 1,
                    rows: int = 16, cols: int = 16) -> float:
    """MACs over ``rows * cols`` times the cycles of the tiles, each the larger of its beats
    (one less after the first tile: :func:`strip_step_cycles`) and its stores' C-port beats (a
    tile's stores overlap the next tile's beats, one beat per cycle): the mesh's bound for a
    layer."""
    tiles = plan_tiles(channels, h, w, stride=stride, pad=pad, rows=rows, cols=cols)
    macs = channels * out_size(h, pad, stride) * out_size(w, pad, stride) * 9
    cycles = sum(max(tile_cycles(t, stride, rows) - (i > 0), store_beats(t, rows))
                 for i, t in enumerate(tiles))
    return macs / (cycles * rows * cols)


def input_bound(h: int, w: int, *, stride: int, bytes_per_cycle: float, rows: int = 16,
                cols: int = 16) -> float:
    """The most MAC utilisation any dataflow can give a pad-1 depthwise 3x3 layer of ``h x w``
    maps whose input comes from memory at ``bytes_per_cycle`` (the operand ports together):
    every input byte read once (the pads are never read: the feeder makes them), nine MACs
    an output, on ``rows * cols`` multipliers, at most 1. Independent of the channel count.
    With stride 2 and even maps it is ``9 * bytes_per_cycle / (4 * rows * cols)``: 28.1% for
    the 16x16's two 16 B/cycle ports, whatever the map size."""
    if h < 1 or w < 1 or stride not in (1, 2) or bytes_per_cycle <= 0:
        raise ValueError(f"input_bound: h={h}, w={w} must be >= 1, stride={stride} 1 or 2, "
                         f"bytes_per_cycle={bytes_per_cycle} > 0")
    macs = 9 * out_size(h, 1, stride) * out_size(w, 1, stride)
    return min(1.0, macs * bytes_per_cycle / (h * w * rows * cols))
