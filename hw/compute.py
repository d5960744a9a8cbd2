"""Compute engine: walks one partition's inner and array tiles through the systolic array."""

from amaranth import *
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from spec.config import AccelConfig
from spec.desc import DIM_BITS

from .array import SystolicArray
from .bits import log2
from .dwfeed import DwFeeder
from .params import WEIGHT_TAPS

__all__ = ["FEED_CYCLES", "MESH_START_CYCLES", "MESH_HALVES_START_CYCLES",
           "MESH_QUAD_START_CYCLES", "ComputeEngine",
           "array_tag_bits",
           "drain_cycles", "mesh_drain_cycles"]


#: Cycles from a beat's issue (its buffer read address) to the array's input: the buffer's
#: synchronous read, then the operand register (block-RAM output and the padding mux are a
#: register away from the first PE's multiplier; on the ECP5 that path alone limited the whole
#: design to 52.6 MHz).
FEED_CYCLES = 2


def drain_cycles(cfg: AccelConfig) -> int:
    """Cycles the compute engine stays busy after the cycle that issues a partition's last beat:
    :data:`FEED_CYCLES` (buffer read, operand register) + the array latency ``R + C`` + ``R - 1``
    further result rows + 1 (accumulator write) = ``2R + C + 2``."""
    return FEED_CYCLES + 2 * cfg.array_rows + cfg.array_cols


#: Cycles from a depthwise step's ``m_start`` to its first beat (a GEMM partition's first beat
#: is the cycle after ``start``): the walk's counters, then the first tile's parameters and
#: weights, registered, then the feeder's start.
MESH_START_CYCLES = 3

#: Further cycles before the first beat of a depthwise step whose tiles take two channels each
#: (:attr:`spec.dwmesh.StripTile.halves`): the top half's parameters and weights are kept, then
#: the walk moves to the bottom half's channel and reads its weights.
MESH_HALVES_START_CYCLES = 2

#: Further cycles before the first beat of a depthwise step in the quadrant mode
#: (:attr:`spec.dwmesh.StripTile.quads`) whose first tile takes four channels: their weight
#: words are read one a cycle, the first with ``m_start``; one cycle less for each channel fewer.
MESH_QUAD_START_CYCLES = 3


def mesh_drain_cycles(cfg: AccelConfig) -> int:
    """Cycles the compute engine stays busy after the cycle that issues a depthwise step's
    last beat: :data:`FEED_CYCLES` + :attr:`SystolicArray.mesh_latency` to the first result
    row, ``R - 1`` further rows, + 1 (accumulator write) = ``R + 5``."""
    return FEED_CYCLES + SystolicArray.mesh_latency + cfg.array_rows


def array_tag_bits(cfg: AccelConfig, *, mesh: bool = False) -> int:
    """Width of the tag the compute engine sends through its array with each beat: an
    accumulator row address and the accumulate flag, and with the depthwise ``mesh`` a
    two-channel tile's flag (:data:`HALVES_TAG_BIT`), so that the tile's drain keeps the
    mode it was computed in while the next step starts."""
    return _bits(cfg.acc_depth) + 1 + int(mesh)


#: The bit of a mesh tile's tag that marks a tile of two channels, one in each half of the
#: mesh (spec.dwmesh.StripTile.halves): its drain holds the top half's rows past the map
#: (``mesh_hold``). It travels with the tile because a step's last tiles drain while the next
#: step starts, and that step may be of one channel (a group's lone last channel), whose tiles
#: are not halves.
HALVES_TAG_BIT = -1


class ComputeEngine(wiring.Component):
    """Multiplies one buffered A partition by one buffered B partition into the accumulator.

    Loop nest (seed 000 step 5, inner part): inner tiles of ``tile_m`` x ``tile_n`` (given in
    array tiles: ``p_tile_mg`` x ``p_tile_ng``), and inside each inner tile its array tiles, ``n``
    fastest. Each array tile ``(tm, tn)`` streams ``L = max(p_keff, array_rows)`` beats: first
    ``pad = L - p_keff`` padding beats (so a tile is never shorter than the array's drain), then
    the real beats ``k = 0 .. p_keff - 1``, beat ``k`` reading A buffer row ``a_base + tm*pk + k``
    and B buffer row ``b_base + tn*pk + k``. The padding beats come first and carry no data:
    whatever they add to a PE's sum is dropped by the first real beat, which restarts it (the
    ``first`` flag), so neither operand needs a zero in front of its register (``p_keff >= 1``,
    as every partition has).
    Beats of consecutive array tiles follow each other with no bubble.

    Results of tile ``(tm, tn)``, row ``r``, go to accumulator row ``acc_base + (tm*array_rows +
    r)*acc_rstride + tn``; they overwrite it, or add to it when ``p_accum`` is set (split-K).

    Latency: ``running`` is high in the cycles that issue beats; ``busy`` stays high
    :attr:`drain_cycles` cycles after the last beat is issued, so that when it falls every
    result is in the accumulator. A new ``start`` may come while the engine drains (``busy`` and
    not ``running``): the next partition's beats then follow the previous partition's through
    the array like consecutive tiles of one partition, and their results, tagged with their own
    accumulator rows, follow the previous results out. ``beat_real`` is high in cycles where a
    non-padding beat is issued (the MAC-active counter).

    With ``mesh`` the engine also runs *depthwise steps* on the array's mesh mode (issue 18;
    the contract is :func:`spec.dwmesh.strip_steps`): ``m_start`` (instead of ``start``)
    walks ``p_m_channels`` channels of ``p_m_tiles`` tiles each through a
    :class:`~hw.dwfeed.DwFeeder`, the first beat :data:`MESH_START_CYCLES` after ``m_start``,
    the tiles back to back. Channel ``g``'s
    fill words start at buffer-A word ``p_a_base + g * p_m_na`` and buffer-B word ``p_b_base + g
    * p_m_nb`` (its odd and even input rows), tile ``ty`` ``(R - 2) / 2`` words further per
    tile, with the masks of :class:`spec.dwmesh.StripTile`; its weights are word ``p_m_c0 + g``
    of the weight memory (``w_raddr`` / ``w_rdata``: nine int8, tap ``3 dy + dx`` in bits
    ``8 (3 dy + dx)``, a synchronous read); its results overwrite accumulator rows from
    ``p_acc_base + g * p_m_h + (R - 2) * ty`` (mesh row ``i`` in that plus ``i``).
    With ``p_m_h <= R/2 - 1`` and two or more channels a tile takes two channels, one in each
    half of the mesh (:attr:`spec.dwmesh.StripTile.halves`, results as
    :func:`spec.dwmesh.strip_tile_writes` states), the first beat
    :data:`MESH_HALVES_START_CYCLES` later; a 5x5 or 7x7 one walks the window's rows two a
    fill (:attr:`spec.dwmesh.StripTile.pairs`: the feeder's ``p_pairs`` programs, both
    halves' 49-tap weights in ``p_w``).
    With ``p_m_phases`` (stride 2's row phases, :func:`spec.dwmesh.row_phases`; ``h`` even)
    each tile is a two-phase stride-2 tile (:attr:`spec.dwmesh.StripTile.phase1`)
    of ``R - 1`` output rows: its fill words from the four classes of the step's stacked rows,
    the second of each buffer's two from word ``p_m_words`` (buffer A: classes 0 and 1 from
    ``p_a_base``, B: 2 and 3 from ``p_b_base``), bases and swaps from a running count of the
    tile's first stacked row, its
    results in accumulator rows ``p_acc_base + g * h / 2 + (R - 1) * ty``; with
    ``p_m_odd_rows`` (stride 2 keeping the odd rows, TF "SAME": no top pad) phase 0 the even
    input rows, phase 1 the odd ones (:func:`spec.dwmesh.strip_steps` ``odd_rows``). A 5x5
    layer's row phases (``p_m_kernel`` 1) take the window rows 0, 2, 4, then 1, 3, ``R - 2``
    output rows a tile, a top pad row in each phase of a channel's first tile (with the odd
    rows, the 3x3 layer's two phases in order); a 7x7 layer's (``p_m_kernel`` 2, session 40)
    the window rows 0, 2, 4, then 1, 3, 5, then 6 (the feeder's ``*2`` parameters), ``R - 2``
    output rows a tile (:func:`spec.dwmesh._phase_fill` states every fill's words, swap and
    masks). With ``p_m_h <= R - 2`` too (:func:`spec.dwmesh.phase_halves`, session 41) and two
    or more channels a tile takes two channels in both fills, the top half's second fill the
    feeder's ``*2`` parameters and the bottom half's the ``*3`` ones.
    With ``p_m_cphases`` too (stride 2 in row and column phases,
    :attr:`spec.dwmesh.StripTile.cphases`; session 42) each tile is four fills: the row phases'
    two, each read from the step's even-byte and odd-byte words (the deinterleaving loads'),
    a buffer's second class of rows ``2 p_m_words`` words on and a row's odd-byte word
    ``p_m_words`` after its even-byte one; column phase 0 reads the odd-byte words with
    ``p_m_ce0`` (a layer's first strip whose phase-0 columns start at an odd input column);
    ``p_m_pre_right`` and ``p_m_pre_right1`` rotate column phase 0's and 1's fill rows by one
    lane, ``p_m_cols`` and ``p_m_cols1`` are their loaded lanes.
    With ``p_m_quad`` (the quadrant mode, :func:`spec.dwmesh.quad_mode`: maps of ``R/2 - 1``
    rows and columns) each tile takes four channels, one a quadrant
    (:attr:`spec.dwmesh.StripTile.quads`): tile ``t``'s fill words from buffer-A word
    ``p_a_base + (R - 2) t`` and buffer-B word ``p_b_base + (R - 2) t`` (two rows a word), the
    four channels' weight words read one a cycle before it issues (the first beat
    :data:`MESH_QUAD_START_CYCLES` later), and its results packed two output rows
    an accumulator row from ``p_acc_base + R t`` (:func:`spec.dwmesh.strip_tile_acc`): the
    drain writes one row a cycle, each from the array's row of this cycle and the two before,
    the last one a cycle after the array's last row (``busy`` a cycle longer).
    With ``p_m_kernel`` 1 or 2 (a depthwise 5x5 or 7x7 layer, pad ``p`` = 2 or 3:
    :func:`spec.dwmesh.strip_steps` with ``kernel`` 5 or 7; 0 is 3x3) every tile is a
    whole-mesh tile of that kernel (its 25- or 49-tap walk, the weight word's taps), ``R/2 - p``
    words and ``R - 2 p`` accumulator rows further per tile, its bases and masks those of
    :func:`spec.dwmesh.kernel_tile` (no quadrants; halves in pairs of window rows for maps of
    up to ``R/2 - 1`` rows, :attr:`spec.dwmesh.StripTile.pairs`); a 5x5 layer with
    ``p_m_passes`` (row passes, :func:`spec.dwmesh.row_passes`) fills each tile twice, the
    second time from the patch three rows further down (:attr:`spec.dwmesh.StripTile.phase1`),
    a 7x7 one three times, the third from six rows down (``phase2``), ``R/2 - 1`` words and
    ``R - 2`` accumulator rows further per tile.
    ``p_m_pre_right`` gives every tile the left pad's rotation (``p`` lanes); the fill words' lanes from
    ``p_m_cols`` on, and the masked words, enter as ``p_m_pad`` (the layer's pad value, its
    input zero point). ``busy`` stays high
    :func:`mesh_drain_cycles` after the last beat. A depthwise step and a GEMM partition must
    not overlap: the driver starts either only while the engine is not busy (which covers the
    array's rules for switching between its modes, :class:`~hw.array.SystolicArray`).

    Parameters
    ----------
    cfg : AccelConfig
        Uses ``array_rows``, ``array_cols``, buffer and accumulator depths.
    mesh : bool
        Build the depthwise mode (the array's mesh, the feeder).

    Members
    -------
    start : ``In(1)``; running, busy, beat_real : ``Out(1)``
    p_* : ``In(...)`` partition parameters, sampled on ``start``
    rd_en, a_raddr, b_raddr : ``Out(...)``; a_rdata, b_rdata : ``In(...)`` (synchronous read
    ports; ``rd_en`` is low for padding beats, which read nothing)
    acc_raddr : ``Out``; acc_rdata : ``In``; acc_waddr, acc_wdata, acc_wen : ``Out``
    m_start, p_m_pre_right, p_m_phases, p_m_quad, p_m_odd_rows, p_m_passes, p_m_cphases,
    p_m_ce0, p_m_pre_right1 : ``In(1)``; p_m_cols1 : ``In(range(C + 1))``;
    p_m_kernel :
    ``In(2)``;
    p_m_channels, p_m_tiles, p_m_h, p_m_na,
    p_m_nb, p_m_words : ``In(DIM_BITS)``; p_m_c0 : ``In(range(quant_entries))``;
    p_m_pad : ``In(8)``; p_m_cols :
    ``In(range(C + 1))``; w_raddr : ``Out``; w_rdata : ``In(392)`` (49 taps, tap ``t`` in bits
    ``8t``; a 3x3 layer's nine in the low 72; only with ``mesh``)
    """

    def __init__(self, cfg: AccelConfig, *, mesh: bool = False):
        self._cfg = cfg
        self._mesh = mesh
        self.array = SystolicArray(cfg, tag_bits=array_tag_bits(cfg, mesh=mesh), mesh=mesh)
        ob = cfg.operand_bits
        extra = {"m_start": In(1), "p_m_pre_right": In(1), "p_m_phases": In(1), "p_m_quad": In(1),
                 "p_m_cphases": In(1), "p_m_ce0": In(1), "p_m_pre_right1": In(1),
                 "p_m_cols1": In(range(cfg.array_cols + 1)),
                 "p_m_kernel": In(2), "p_m_odd_rows": In(1), "p_m_passes": In(1),
                 **{f"p_m_{n}": In(DIM_BITS) for n in ("channels", "tiles", "h", "na", "nb",
                                                      "words")},
                 "p_m_pad": In(ob), "p_m_cols": In(range(cfg.array_cols + 1)),
                 "p_m_c0": In(range(cfg.quant_entries)),
                 "w_raddr": Out(range(cfg.quant_entries)), "w_rdata": In(WEIGHT_TAPS * ob),
                 } if mesh else {}
        super().__init__({**extra,
            "start": In(1),
            "running": Out(1),
            "busy": Out(1),
            "beat_real": Out(1),
            "p_a_base": In(range(cfg.buf_a_depth)),
            "p_b_base": In(range(cfg.buf_b_depth)),
            "p_acc_base": In(range(cfg.acc_depth)),
            "p_acc_rstride": In(range(cfg.acc_depth + 1)),
            "p_gm": In(DIM_BITS),
            "p_gn": In(DIM_BITS),
            "p_tile_mg": In(DIM_BITS),
            "p_tile_ng": In(DIM_BITS),
            "p_pk": In(DIM_BITS),
            "p_keff": In(DIM_BITS),
            "p_accum": In(1),
            "rd_en": Out(1),
            "a_raddr": Out(range(cfg.buf_a_depth)),
            "a_rdata": In(8 * cfg.a_beat_bytes),
            "b_raddr": Out(range(cfg.buf_b_depth)),
            "b_rdata": In(8 * cfg.b_beat_bytes),
            "acc_raddr": Out(range(cfg.acc_depth)),
            "acc_rdata": In(8 * cfg.c_beat_bytes),
            "acc_waddr": Out(range(cfg.acc_depth)),
            "acc_wdata": Out(8 * cfg.c_beat_bytes),
            "acc_wen": Out(1),
        })

    @property
    def drain_cycles(self) -> int:
        """See :func:`drain_cycles`; checked against the array's latency at elaboration."""
        assert drain_cycles(self._cfg) == FEED_CYCLES + self.array.latency + self._cfg.array_rows
        return drain_cycles(self._cfg)

    def elaborate(self, platform):
        m = Module()
        cfg = self._cfg
        R, C = cfg.array_rows, cfg.array_cols
        m.submodules.array = arr = self.array

        # parameters, sampled on start
        a_base = Signal.like(self.p_a_base)
        b_base = Signal.like(self.p_b_base)
        rstride = Signal.like(self.p_acc_rstride)
        gm, gn = Signal(DIM_BITS), Signal(DIM_BITS)
        tmg, tng = Signal(DIM_BITS), Signal(DIM_BITS)
        pk, last_k = Signal(DIM_BITS), Signal(DIM_BITS)
        pad = Signal(range(R + 1))                     # the tile's padding beats, R - keff or 0
        accum = Signal()
        # loop counters: inner-tile origin (im, in_), array tile (tm, tn), beat k
        im, in_, tm, tn, k = (Signal(DIM_BITS, name=n) for n in ("im", "in_", "tm", "tn", "k"))
        last_beat = Signal()
        drain = Signal(range(self.drain_cycles + 1))
        # Addresses kept as running sums instead of products (no multiplier, one add deep):
        # a_row = a_base + tm*pk, a_im = a_base + im*pk, b_row = b_base + tn*pk,
        # b_in = b_base + in_*pk, acc_row = acc_base + (R-1)*rstride + tm*R*rstride, acc_im
        # likewise for im. The accumulator tag carries the tile's *last* row's address: rows
        # leave the array bottom row first (below).
        # the GEMM's beats (`running` is also high while a depthwise step issues beats)
        running = Signal(name="gemm_running") if self._mesh else self.running
        # a depthwise step is issuing beats (set by _mesh_steps)
        mesh_run = Signal(name="mesh_running")
        # The beat's buffer rows `a_row + k` and `b_row + k` as registers of their own, moved
        # with `k` (the add in front of the block RAMs' read address was a 10.9 ns path of the
        # whole 8x8, session 15)
        a_ptr = Signal.like(self.a_raddr, name="a_ptr")
        b_ptr = Signal.like(self.b_raddr, name="b_ptr")
        a_row, a_im = Signal.like(self.a_raddr), Signal.like(self.a_raddr)
        b_row, b_in = Signal.like(self.b_raddr), Signal.like(self.b_raddr)
        acc_row, acc_im = Signal.like(self.acc_raddr), Signal.like(self.acc_raddr)
        tile_rows = Signal.like(self.acc_raddr)        # R * rstride
        lr = log2(R)

        with m.If(self.start):
            acc0 = self.p_acc_base + (self.p_acc_rstride << lr) - self.p_acc_rstride
            m.d.sync += [
                a_base.eq(self.p_a_base), b_base.eq(self.p_b_base),
                rstride.eq(self.p_acc_rstride), tile_rows.eq(self.p_acc_rstride << lr),
                gm.eq(self.p_gm), gn.eq(self.p_gn), tmg.eq(self.p_tile_mg),
                tng.eq(self.p_tile_ng), pk.eq(self.p_pk),
                last_k.eq(Mux(self.p_keff > R, self.p_keff, R) - 1), accum.eq(self.p_accum),
                pad.eq(Mux(self.p_keff > R, 0, R - self.p_keff)),
                im.eq(0), in_.eq(0), tm.eq(0), tn.eq(0), k.eq(0), last_beat.eq(0),
                a_row.eq(self.p_a_base), a_im.eq(self.p_a_base),
                b_row.eq(self.p_b_base), b_in.eq(self.p_b_base),
                a_ptr.eq(self.p_a_base), b_ptr.eq(self.p_b_base),
                acc_row.eq(acc0), acc_im.eq(acc0),
                running.eq(1), self.busy.eq(1),
            ]

        # The loop conditions, registered every cycle from the counters: they change only at a
        # tile's last beat, and the next last beat is at least array_rows >= 2 cycles later.
        more_tn, more_tm, more_in, more_im = (Signal(name=n) for n in
                                              ("more_tn", "more_tm", "more_in", "more_im"))
        m.d.sync += [
            more_tn.eq((tn + 1 < in_ + tng) & (tn + 1 < gn)),    # tn + 1 < min(in_ + tng, gn)
            more_tm.eq((tm + 1 < im + tmg) & (tm + 1 < gm)),
            more_in.eq(in_ + tng < gn),
            more_im.eq(im + tmg < gm),
        ]
        # last beat of the array tile (k == last_k), a register: it enables every loop and
        # address register, so no compare sits in front of that fan-out (last_k >= 1)
        # (the pointers stay on the tile's first rows through its padding beats)
        padding = Signal()
        m.d.comb += padding.eq(k < pad)
        with m.If(running):
            with m.If(~last_beat):
                m.d.sync += [k.eq(k + 1), last_beat.eq(k + 1 == last_k)]
                with m.If(~padding):
                    m.d.sync += [a_ptr.eq(a_ptr + 1), b_ptr.eq(b_ptr + 1)]
            with m.Else():
                m.d.sync += [k.eq(0), last_beat.eq(0)]
                with m.If(more_tn):
                    m.d.sync += [tn.eq(tn + 1), b_row.eq(b_row + pk),
                                 a_ptr.eq(a_row), b_ptr.eq(b_row + pk)]
                with m.Elif(more_tm):
                    m.d.sync += [tn.eq(in_), tm.eq(tm + 1), b_row.eq(b_in),
                                 a_row.eq(a_row + pk), acc_row.eq(acc_row + tile_rows),
                                 a_ptr.eq(a_row + pk), b_ptr.eq(b_in)]
                with m.Elif(more_in):                  # next inner tile along n; here
                    # tn = in_ + tng - 1, so b_row + pk is the new inner tile's first B row
                    m.d.sync += [in_.eq(in_ + tng), tn.eq(in_ + tng), tm.eq(im),
                                 b_in.eq(b_row + pk), b_row.eq(b_row + pk),
                                 a_row.eq(a_im), acc_row.eq(acc_im),
                                 a_ptr.eq(a_im), b_ptr.eq(b_row + pk)]
                with m.Elif(more_im):                  # next inner-tile row along m; here
                    # tm = im + tmg - 1, so a_row + pk / acc_row + R*rstride are its first
                    m.d.sync += [in_.eq(0), tn.eq(0), im.eq(im + tmg), tm.eq(im + tmg),
                                 b_in.eq(b_base), b_row.eq(b_base),
                                 a_im.eq(a_row + pk), a_row.eq(a_row + pk),
                                 acc_im.eq(acc_row + tile_rows),
                                 acc_row.eq(acc_row + tile_rows),
                                 a_ptr.eq(a_row + pk), b_ptr.eq(b_base)]
                with m.Else():
                    m.d.sync += [running.eq(0), drain.eq(self.drain_cycles - 1)]
        idle = ~running & ~mesh_run if self._mesh else ~running
        with m.If(idle & self.busy & ~self.start):
            with m.If(drain == 0):
                m.d.sync += self.busy.eq(0)
            with m.Else():
                m.d.sync += drain.eq(drain - 1)

        # beat issue: synchronous buffer reads, then the operand register; the flags and the
        # tag follow the data through both stages (FEED_CYCLES)
        real = Signal()
        m.d.comb += [
            real.eq(running & ~padding),
            self.beat_real.eq(real),
            self.rd_en.eq(real),
            self.a_raddr.eq(a_ptr),
            self.b_raddr.eq(b_ptr),
        ]
        tile_addr = Signal(range(cfg.acc_depth))       # the tile's last row in the accumulator
        m.d.comb += tile_addr.eq(acc_row + tn)
        d_valid, d_first, d_last = Signal(), Signal(), Signal()
        d_tag = Signal(len(arr.i_tag))
        m.d.sync += [
            d_valid.eq(running), d_first.eq(k == pad), d_last.eq(last_beat),
            d_tag.eq(Cat(tile_addr, accum)),
        ]
        # The operand registers: the buffers' words as read, without reset (flags and tag
        # reset), so each is the block RAM's own output register on an FPGA
        # (bench.outreg). The padding beats need no zero (they come first: above), and the
        # depthwise mesh's operands come from the feeder. (With the padding last, A's register
        # took a zero in front, as a synchronous reset: buf_a -> op_a 10.66 ns of the whole
        # 8x8, 3d09a99 seed 2, session 25; B's the same before, 9.8 ns, session 24.)
        op_a = Signal.like(arr.i_a, reset_less=True)
        op_b = Signal.like(arr.i_b, reset_less=True)
        a_in = self.a_rdata
        b_in = self.b_rdata
        # with the mesh, the beat's flags and tag meet the feeder's (registered there) in a
        # select: the GEMM's registers are then their own
        i_first, i_last, i_tag = ((Signal.like(arr.i_first, name="beat_first"),
                                   Signal.like(arr.i_last, name="beat_last"),
                                   Signal.like(arr.i_tag, name="beat_tag")) if self._mesh
                                  else (arr.i_first, arr.i_last, arr.i_tag))
        m.d.sync += [
            arr.i_valid.eq(d_valid),
            i_first.eq(d_first),
            i_last.eq(d_last),
            op_a.eq(a_in),
            op_b.eq(b_in),
            i_tag.eq(d_tag),
        ]
        # row 0 / column 0 again for PE (0, 0)'s multiplier (SystolicArray.i_a00): a register
        # of its own, loaded with op_a's, so it can sit beside that DSP while op_a feeds the
        # rest of the row
        ob = cfg.operand_bits
        op_a00 = Signal(ob, reset_less=True, attrs={"keep": 1})
        op_b00 = Signal(ob, reset_less=True, attrs={"keep": 1})
        m.d.sync += [op_a00.eq(a_in[:ob]), op_b00.eq(b_in[:ob])]
        m.d.comb += [arr.i_a.eq(op_a), arr.i_b.eq(op_b), arr.i_a00.eq(op_a00),
                     arr.i_b00.eq(op_b00)]
        mesh_hold = Signal(name="mesh_hold")
        quad = Signal(name="mesh_quad")        # the quadrant mode, through the step's drain
        if self._mesh:
            self._mesh_steps(m, rstride=rstride, drain=drain, mesh_run=mesh_run,
                             beat=(i_first, i_last, i_tag), hold=mesh_hold, quad=quad)
            m.d.comb += self.running.eq(running | mesh_run)

        # accumulator read-modify-write: read two cycles before a row leaves the array (the
        # array's f_* outputs), so the old value is registered when the row arrives; the sum is
        # registered and written the cycle after the row. A tile's rows leave bottom first on
        # consecutive cycles: the first (o_r = R - 1) at the tag's address, each next one
        # rstride below the previous. (Adding in the cycle of the write, old value -> adder ->
        # both accumulator copies' data inputs was a 10.9 ns path of the whole 8x8, session 18,
        # 107 endpoints.)
        ab = len(tile_addr)
        row_addr = Signal(range(cfg.acc_depth))
        next_row = Signal(range(cfg.acc_depth))
        m.d.comb += [
            # (the tile's first row from the array's tag register: through f_r's compare and
            # f_tag's select, the array's row counter into the accumulator's read address was
            # a 10.5 ns path of the whole 8x8 at 598b87c)
            row_addr.eq(Mux(arr.f_first, arr.f_first_tag[:ab], next_row)),
            self.acc_raddr.eq(row_addr),
        ]
        if self._mesh:
            # a depthwise tile of two channels: the top half's rows from h on all go where its
            # row h - 1 then goes (spec.dwmesh.strip_tile_writes)
            with m.If(arr.f_valid):
                m.d.sync += next_row.eq(row_addr - Mux(mesh_hold, 0, rstride))
        else:
            with m.If(arr.f_valid):
                m.d.sync += next_row.eq(row_addr - rstride)
        read_addr = Signal(range(cfg.acc_depth))      # the address read in the previous cycle
        old_addr = Signal(range(cfg.acc_depth))       # ... and the one before
        w_valid = Signal()
        w_addr = Signal(range(cfg.acc_depth))
        w_old = Signal(len(self.acc_rdata), reset_less=True)
        if self._mesh:                  # (w_addr, w_valid: _quad_writes)
            m.d.sync += [read_addr.eq(row_addr), old_addr.eq(read_addr),
                         w_old.eq(self.acc_rdata)]
        else:
            m.d.sync += [read_addr.eq(row_addr), old_addr.eq(read_addr), w_addr.eq(old_addr),
                         w_valid.eq(arr.o_valid), w_old.eq(self.acc_rdata)]
        accum = arr.o_tag[ab]
        packed = self._quad_writes(m, quad, w_valid, w_addr, old_addr) if self._mesh else None
        lanes = []
        for j in range(C):
            old = w_old[32 * j:32 * (j + 1)]
            new = arr.o_row[32 * j:32 * (j + 1)]
            lane = Signal(32, name=f"acc_sum{j}", reset_less=True)
            if packed is None:
                m.d.sync += lane.eq((Mux(accum, old, 0) + new)[:32])
            else:
                # (as an if, not a select: the simulator then forms only one of the two)
                with m.If(quad):
                    m.d.sync += lane.eq(packed[j])
                with m.Else():
                    m.d.sync += lane.eq((Mux(accum, old, 0) + new)[:32])
            lanes.append(lane)
        m.d.comb += [
            self.acc_waddr.eq(w_addr),
            self.acc_wdata.eq(Cat(*lanes)),
            self.acc_wen.eq(w_valid),
        ]
        return m


    def _quad_writes(self, m, quad, w_valid, w_addr, old_addr):
        """The accumulator writes (``w_valid``, ``w_addr``; a GEMM's or a depthwise step's,
        and in the quadrant mode the packed rows, whose lanes it returns).

        A quadrant tile's rows leave bottom first, a half's last mesh row (not an output)
        first, then its output rows ``y = n - 1 .. 0`` (``n = R/2 - 1``); row ``y`` even writes
        the left quadrant's rows ``y`` and ``y + 1`` (this cycle's row and the last), row ``y``
        odd the right quadrant's rows ``y + 1`` and ``y + 2`` (the last two rows), and the
        cycle after row 0 the right quadrant's rows 0 and 1 (the half's last mesh row, or no
        row, arrives then): one write a cycle (:func:`spec.dwmesh.strip_tile_acc`)."""
        cfg = self._cfg
        R, C = cfg.array_rows, cfg.array_cols
        arr = self.array
        ab = _bits(cfg.acc_depth)
        half, n, pairs = R // 2, R // 2 - 1, R // 4
        y, bot = arr.o_r[:log2(half)], arr.o_r[log2(half)]
        tag = arr.o_tag[:ab]
        # the last two rows' quadrant lanes (the left quadrant's of the last, the right's of
        # both), kept only in the quadrant mode: a GEMM's rows leave them alone (so the
        # simulator copies nothing there in a GEMM)
        def quadrant(row, q):
            return row[32 * q * half:32 * (q * half + n)]
        r1_left = Signal(32 * n, name="quad_r1_left", reset_less=True)
        r1_right = Signal(32 * n, name="quad_r1_right", reset_less=True)
        r2_right = Signal(32 * n, name="quad_r2_right", reset_less=True)
        with m.If(quad):
            m.d.sync += [r1_left.eq(quadrant(arr.o_row, 0)), r1_right.eq(quadrant(arr.o_row, 1)),
                         r2_right.eq(r1_right)]
        left = Signal(name="quad_left")             # an even output row: the left quadrant
        right = Signal(name="quad_right")           # an odd one: the right quadrant
        spill = Signal(name="quad_spill")           # the right quadrant's first rows
        spill_addr = Signal(ab, name="quad_spill_addr")
        m.d.comb += [left.eq(quad & arr.o_valid & ~y[0]),
                     right.eq(quad & arr.o_valid & y[0] & (y != half - 1))]
        m.d.sync += [spill.eq(quad & arr.o_valid & (y == 0)),
                     spill_addr.eq(tag + pairs * (2 * bot + 1))]
        ch_base = tag + Mux(bot, 2 * pairs, 0)
        q_addr = Mux(left, ch_base + (y >> 1),
                     Mux(right, ch_base + pairs + ((y + 1) >> 1), spill_addr))
        m.d.sync += [w_valid.eq(Mux(quad, left | right | spill, arr.o_valid)),
                     w_addr.eq(Mux(quad, q_addr, old_addr))]

        def lane(row, j):
            return row[32 * j:32 * (j + 1)]
        packed = []
        for j in range(C):
            if j >= 2 * n:
                packed.append(Const(0, 32))
                continue
            first, jj = j < n, j % n
            packed.append(Mux(left, lane(arr.o_row, jj) if first else lane(r1_left, jj),
                              lane(r1_right, jj) if first else lane(r2_right, jj)))
        return packed

    def _mesh_steps(self, m, *, rstride, drain, mesh_run, beat, hold, quad):
        """The depthwise steps: the tile walk, the feeder, the array's mesh inputs."""
        assert DwFeeder.FEED_CYCLES == FEED_CYCLES      # its beats meet the GEMM path's timing
        cfg = self._cfg
        R, ob = cfg.array_rows, cfg.operand_bits
        arr = self.array
        half = R // 2
        # the kernel: 0 3x3, 1 5x5, 2 7x7 (pad kern + 1)
        kern = Signal(2, name="mesh_kernel")
        k5, k7, big = kern == 1, kern == 2, kern != 0
        # row passes (spec.dwmesh.row_passes): two fills a 5x5 tile, three a 7x7 one, R - 2
        # output rows
        passes = Signal(name="mesh_passes")
        # fill words from one tile's patch to the next's: R/2 - pad (R/2 - 1 in row passes)
        tstep = Mux(passes, half - 1, half - 1 - kern)
        m.submodules.feed = feed = DwFeeder(cfg, tag_bits=len(arr.i_tag))
        m.d.comb += [arr.i_mesh.eq(feed.o_mesh), arr.i_move.eq(feed.o_move),
                     arr.i_split.eq(feed.o_split), arr.i_fill.eq(feed.o_fill),
                     arr.i_w.eq(feed.o_w), arr.i_tap.eq(feed.o_tap)]
        # the feeder's tap flags reach the array where the GEMM's beat flags do, selected by
        # the mesh's mode (the GEMM's flags are not qualified by i_valid here)
        b_first, b_last, b_tag = beat
        m.d.comb += [arr.i_first.eq(Mux(feed.o_mesh, feed.o_first, b_first)),
                     arr.i_last.eq(Mux(feed.o_mesh, feed.o_last, b_last)),
                     arr.i_tag.eq(Mux(feed.o_mesh, feed.o_tag, b_tag))]
        with m.If(feed.running):
            m.d.comb += [self.rd_en.eq(feed.rd_en), self.a_raddr.eq(feed.a_raddr),
                         self.b_raddr.eq(feed.b_raddr)]
        # a tap is MAC-active in the cycle it issues, as a GEMM beat is (its products reach
        # the array FEED_CYCLES later, while the sequencer may already be in its next phase)
        with m.If(feed.issue_tap):
            m.d.comb += self.beat_real.eq(1)
        m.d.comb += [feed.a_rdata.eq(self.a_rdata), feed.b_rdata.eq(self.b_rdata)]

        # the step's parameters and the walk: the tile the counters describe is issued when
        # the feeder takes a tile and its parameters (registered from the counters, with the
        # weight word read at the counters' channel) are a cycle old
        tiles, na, nb, hh = (Signal(DIM_BITS, name=f"mesh_{n}") for n in ("tiles", "na", "nb",
                                                                          "h"))
        pre_right = Signal(name="mesh_pre_right")
        pad = Signal.like(self.p_m_pad, name="mesh_pad")
        pad_mask = Signal(cfg.array_cols, name="mesh_pad_mask")
        # row and column phases: the second column phase's rotation and pad lanes, and each
        # column phase's offset to its words (a row's odd-byte word p_m_words after its
        # even-byte one)
        cph = Signal(name="mesh_cphases")
        pre_right1 = Signal(name="mesh_pre_right1")
        pad_mask1 = Signal(cfg.array_cols, name="mesh_pad_mask1")
        cw0, cw1 = (Signal.like(self.a_raddr, name=f"mesh_cw{c}") for c in (0, 1))
        t_left, g_left = Signal(DIM_BITS, name="mesh_t_left"), Signal(DIM_BITS, name="mesh_g_left")
        a_ch, a_pos = Signal.like(self.a_raddr, name="mesh_a_ch"), Signal.like(self.a_raddr,
                                                                               name="mesh_a_pos")
        b_ch, b_pos = Signal.like(self.b_raddr, name="mesh_b_ch"), Signal.like(self.b_raddr,
                                                                               name="mesh_b_pos")
        acc_ch = Signal.like(self.acc_raddr, name="mesh_acc_ch")
        acc_pos = Signal.like(self.acc_raddr, name="mesh_acc_pos")
        a_left = Signal(signed(DIM_BITS + 1), name="mesh_a_left")     # words of A still in
        b_left = Signal(signed(DIM_BITS + 1), name="mesh_b_left")     # the channel, from here
        first = Signal(name="mesh_first_tile")
        # the channel starts at an odd row of the step's stacked maps (odd h): its even patch
        # rows are in buffer B, its odd ones in A (spec.dwmesh.StripTile.swap)
        par = Signal(name="mesh_odd_start")
        ch = Signal.like(self.w_raddr, name="mesh_ch")
        have, fresh = Signal(name="mesh_have"), Signal(name="mesh_fresh")
        m.d.comb += self.w_raddr.eq(Mux(self.m_start, self.p_m_c0, ch))

        def clamp(v):
            return Mux(v < 0, 0, Mux(v > half, half, v[:len(feed.p_a_hi)]))

        n_a_base, n_b_base = Signal.like(feed.p_a_base), Signal.like(feed.p_b_base)
        n_a_lo, n_a_hi, n_b_lo, n_b_hi = (Signal.like(feed.p_a_hi, name=f"mesh_n_{n}")
                                          for n in ("a_lo", "a_hi", "b_lo", "b_hi"))
        n_tag = Signal.like(feed.p_tag)
        n_swap = Signal(name="mesh_n_swap")
        # Row phases (stride 2, spec.dwmesh.StripTile.phase1): `pq` is the tile's first padded
        # row's stacked row + 1 (even), `prem` the channel's rows from the tile's first padded
        # row on (h - p0); with u = pq / 4 and odd = bit 1 of pq, phase 0 reads the classes'
        # second groups from A word words + u and B word words + u - 1 + odd (swapped unless
        # odd), phase 1 the first groups from A word u + odd and B word u (swapped if odd)
        phases = Signal(name="mesh_phases")
        pq, pq_ch = Signal(DIM_BITS + 1, name="mesh_pq"), Signal(DIM_BITS + 1, name="mesh_pq_ch")
        prem = Signal(signed(DIM_BITS + 2), name="mesh_prem")
        ph_a0, ph_b0 = Signal.like(feed.p_a_base, name="mesh_ph_a0"), Signal.like(
            feed.p_b_base, name="mesh_ph_b0")
        ph_a1, ph_b1 = Signal.like(feed.p_a_base, name="mesh_ph_a1"), Signal.like(
            feed.p_b_base, name="mesh_ph_b1")
        n_a_base1, n_b_base1 = Signal.like(feed.p_a_base1), Signal.like(feed.p_b_base1)
        n_a_hi1, n_b_hi1 = (Signal.like(feed.p_a_hi, name=f"mesh_n_{n}1") for n in ("a_hi",
                                                                                  "b_hi"))
        u, odd = pq[2:], pq[1]
        n_a_base2, n_b_base2 = Signal.like(feed.p_a_base2), Signal.like(feed.p_b_base2)
        n_a_hi2, n_b_hi2 = (Signal.like(feed.p_a_hi2, name=f"mesh_n_{n}2") for n in ("a_hi",
                                                                                  "b_hi"))

        def hi(r):                  # fill words whose padded row p0 + 4 k + r is a map row
            return clamp(((prem - r) >> 2) + 1)

        # With the odd rows (TF "SAME", the top pad 0) phase 0 takes the even input rows, the
        # first groups at the offsets above, and phase 1 the odd ones, the second groups at
        # the same offsets; both swapped if odd (spec.dwmesh._phase_tiles)
        orow = Signal(name="mesh_odd_rows")
        # A 5x5 layer's row phases (spec.dwmesh._phase_tiles): phase 0 the window rows 0, 2, 4,
        # phase 1 rows 1, 3. Symmetric: phase 0 the first groups at the 3x3 phase 0's offsets
        # (input rows p0 - 2 + 2 i), phase 1 the 3x3 phase 0 (second groups), both with the
        # top pad; with the odd rows phase 0 the 3x3 phase 0, phase 1 the 3x3 phase 1
        n_a_lo1 = Signal.like(feed.p_a_lo1, name="mesh_n_a_lo1")

        def swap1(swap):
            """A row-phase tile's second fill's swap from its first's (a 5x5 layer's: the
            same, traded with the odd rows; 3x3: traded unless odd rows)."""
            return Mux(k5, swap ^ orow, swap ^ ~orow)
        m.d.sync += n_a_lo1.eq(first & ((k5 & ~orow) | k7))
        # A 7x7 layer's row phases (session 40, spec.dwmesh._phase_fill): the window rows 0, 2,
        # 4 (input rows p0 - 3 + 2 i), 1, 3, 5 (p0 - 2 + 2 i: the 5x5 phase 0) and 6 (p0 + 3 +
        # 2 i, with the *2 parameters); with the odd rows each a row further down (p0 - 2,
        # p0 - 1: the 3x3 phase 0, p0 + 4)
        with m.If(phases & k7 & orow):
            m.d.sync += [n_a_base.eq(ph_a1 + u), n_b_base.eq(ph_b1 + u - 1 + odd),
                         n_a_hi.eq(hi(-1)), n_b_hi.eq(hi(1)), n_swap.eq(~odd),
                         n_a_base1.eq(ph_a0 + u), n_b_base1.eq(ph_b0 + u - 1 + odd),
                         n_a_hi1.eq(hi(0)), n_b_hi1.eq(hi(2)),
                         n_a_base2.eq(ph_a1 + u + 1 + odd), n_b_base2.eq(ph_b1 + u + 1),
                         n_a_hi2.eq(hi(5)), n_b_hi2.eq(hi(7))]
        with m.Elif(phases & k7):
            m.d.sync += [n_a_base.eq(ph_a0 + u - 1 + odd), n_b_base.eq(ph_b0 + u - 1),
                         n_a_hi.eq(hi(-2)), n_b_hi.eq(hi(0)), n_swap.eq(odd),
                         n_a_base1.eq(ph_a1 + u), n_b_base1.eq(ph_b1 + u - 1 + odd),
                         n_a_hi1.eq(hi(-1)), n_b_hi1.eq(hi(1)),
                         n_a_base2.eq(ph_a0 + u + 1), n_b_base2.eq(ph_b0 + u + odd),
                         n_a_hi2.eq(hi(4)), n_b_hi2.eq(hi(6))]
        with m.Elif(phases & k5 & orow):
            m.d.sync += [n_a_base.eq(ph_a0 + u), n_b_base.eq(ph_b0 + u - 1 + odd),
                         n_a_hi.eq(hi(0)), n_b_hi.eq(hi(2)), n_swap.eq(~odd),
                         n_a_base1.eq(ph_a1 + u + odd), n_b_base1.eq(ph_b1 + u),
                         n_a_hi1.eq(hi(1)), n_b_hi1.eq(hi(3))]
        with m.Elif(phases & k5):
            m.d.sync += [n_a_base.eq(ph_a1 + u), n_b_base.eq(ph_b1 + u - 1 + odd),
                         n_a_hi.eq(hi(-1)), n_b_hi.eq(hi(1)), n_swap.eq(~odd),
                         n_a_base1.eq(ph_a0 + u), n_b_base1.eq(ph_b0 + u - 1 + odd),
                         n_a_hi1.eq(hi(0)), n_b_hi1.eq(hi(2))]
        with m.Elif(phases & orow):
            m.d.sync += [n_a_base.eq(ph_a1 + u + odd), n_b_base.eq(ph_b1 + u),
                         n_a_hi.eq(hi(1)), n_b_hi.eq(hi(3)), n_swap.eq(odd),
                         n_a_base1.eq(ph_a0 + u + odd), n_b_base1.eq(ph_b0 + u),
                         n_a_hi1.eq(hi(2)), n_b_hi1.eq(hi(4))]
        with m.Elif(phases):
            m.d.sync += [n_a_base.eq(ph_a0 + u), n_b_base.eq(ph_b0 + u - 1 + odd),
                         n_a_hi.eq(hi(0)), n_b_hi.eq(hi(2)), n_swap.eq(~odd),
                         n_a_base1.eq(ph_a1 + u + odd), n_b_base1.eq(ph_b1 + u),
                         n_a_hi1.eq(hi(1)), n_b_hi1.eq(hi(3))]
        with m.Else():
            # (a 5x5 channel's even patch rows are in B when it starts at an even stacked row)
            sw = par ^ k5
            m.d.sync += [n_a_base.eq(a_pos), n_b_base.eq(b_pos), n_a_hi.eq(clamp(a_left)),
                         n_b_hi.eq(clamp(b_left)), n_swap.eq(sw)]
            # row passes: pass 1's patch three rows down (kernel_tile at oy0 + 3): its even
            # rows are the odd-row source's a word on, its odd rows the even-row source's two
            # on, the buffers traded (with swap the even rows are in B)
            m.d.sync += [n_a_base1.eq(a_pos + 2 - sw), n_b_base1.eq(b_pos + 1 + sw),
                         n_a_hi1.eq(clamp(b_left - 1)), n_b_hi1.eq(clamp(a_left - 2)),
                         # a 7x7 tile's third pass six rows down: the same buffers three
                         # words on
                         n_a_base2.eq(a_pos + 3), n_b_base2.eq(b_pos + 3),
                         n_a_hi2.eq(clamp(a_left - 3)), n_b_hi2.eq(clamp(b_left - 3))]
        # (a 5x5 tile's first two patch rows are the top pads: both first fill words)
        # (and a 7x7 tile's first three: two even fill words, one odd)
        # (no top pad row in odd-row phases)
        # (a 5x5 layer's row phases: the top pad row in phase 0's even rows, whether odd rows
        # or not, and none in its odd rows)
        # (a 7x7 layer's row phases: one top pad row in phase 0's even rows, and its odd ones
        # without the odd rows)
        m.d.sync += [n_a_lo.eq(Mux(first & ~(phases & orow & ~big), Mux(phases, 1, 1 + k7), 0)),
                     n_b_lo.eq(first & big & (~phases | (k7 & ~orow))),
                     n_tag.eq(acc_pos), fresh.eq(0)]
        # Two channels a tile (maps of h <= R/2 - 1 rows, spec.dwmesh.StripTile.halves): the
        # walk first *keeps* the top half's tile (its parameters, weights and tag), moves on
        # to the next channel, and issues that as the bottom half's; a step's last, odd
        # channel goes alone (`lone`: the bottom half all padding, this channel's weights).
        halves = Signal(name="mesh_halves")
        captured, lone = Signal(name="mesh_captured"), Signal(name="mesh_lone")
        t_a_base, t_b_base = (Signal.like(feed.p_a_base, name="mesh_t_a_base"),
                              Signal.like(feed.p_b_base, name="mesh_t_b_base"))
        t_a_lo, t_a_hi, t_b_hi, t_b_lo = (Signal.like(feed.p_a_hi, name=f"mesh_t_{n}")
                                          for n in ("a_lo", "a_hi", "b_hi", "b_lo"))
        t_swap = Signal(name="mesh_t_swap")
        # (a 3x3 channel's nine taps, or a 5x5 / 7x7 one's: StripTile.pairs)
        t_w = Signal(DwFeeder.BIG_TAPS * ob, name="mesh_t_w")
        # (in row phases, spec.dwmesh.phase_halves, also the top half's second fill)
        t_a_base1, t_b_base1 = (Signal.like(feed.p_a_base, name="mesh_t_a_base1"),
                                Signal.like(feed.p_b_base, name="mesh_t_b_base1"))
        t_a_hi1, t_b_hi1 = (Signal.like(feed.p_a_hi, name=f"mesh_t_{n}1")
                            for n in ("a_hi", "b_hi"))
        # a channel's output rows: h, or h / 2 in row phases
        oh = Signal(DIM_BITS, name="mesh_oh")
        m.d.comb += oh.eq(Mux(phases, hh >> 1, hh))
        t_tag = Signal.like(feed.p_tag, name="mesh_t_tag")
        # The quadrant mode (maps of R/2 - 1 rows and columns, four channels a tile,
        # spec.dwmesh.StripTile.quads): the tile's four weight words are read one a cycle into
        # `q_w` (a word in flight with `q_rd`), then the tile issues with its fill-word bases
        # and accumulator base, and the next tile's reads follow.
        q_left = Signal(DIM_BITS, name="quad_channels_left")   # from this tile on
        q_n = Signal(3, name="quad_n")                          # the tile's channels
        q_ri = Signal(3, name="quad_reads")
        q_rd, q_slot = Signal(name="quad_rd"), Signal(2, name="quad_slot")
        q_w = [Signal(9 * ob, name=f"quad_w{q}") for q in range(4)]   # (3x3 channels)
        q_a, q_b = Signal.like(feed.p_a_base, name="quad_a"), Signal.like(feed.p_b_base,
                                                                           name="quad_b")
        q_tag = Signal.like(acc_pos, name="quad_tag")
        q_read, q_issue = Signal(name="quad_read"), Signal(name="quad_issue")
        m.d.comb += [q_n.eq(Mux(q_left >= 4, 4, q_left[:3])),
                     q_read.eq(quad & have & mesh_run & (q_ri != q_n) & ~self.m_start),
                     q_issue.eq(quad & have & (q_ri == q_n) & ~q_rd & feed.ready)]
        # (the first word is read with m_start, at the step's first channel)
        q_first = Signal(name="quad_first_read")
        m.d.comb += q_first.eq(self.m_start & self.p_m_quad)
        m.d.sync += [q_rd.eq(q_read | q_first), q_slot.eq(Mux(self.m_start, 0, q_ri))]
        with m.If(q_read):
            m.d.sync += [ch.eq(ch + 1), q_ri.eq(q_ri + 1)]
        for q in range(4):
            with m.If(q_rd & (q_slot == q)):
                m.d.sync += q_w[q].eq(self.w_rdata)
        with m.If(q_issue):
            m.d.sync += [q_left.eq(q_left - 4), q_ri.eq(0), q_a.eq(q_a + R - 2),
                         q_b.eq(q_b + R - 2), q_tag.eq(q_tag + R)]
            with m.If(q_left <= 4):
                m.d.sync += have.eq(0)
        issue, capture, advance = Signal(), Signal(name="mesh_capture"), Signal()
        ab = len(acc_pos)
        m.d.comb += [
            capture.eq(halves & have & ~fresh & ~captured),
            issue.eq(have & ~fresh & feed.ready & (~halves | captured) & ~quad),
            advance.eq(capture | (issue & ~(halves & lone))),
            # (the tile's own flag, not `halves`: the step after may be of one channel and
            # start while this tile drains)
            hold.eq(arr.f_tag[HALVES_TAG_BIT] & (arr.f_r >= oh) & (arr.f_r < half)),
            feed.start.eq(issue | q_issue), feed.p_stride2.eq(phases),
            feed.p_split.eq(Mux(halves, SystolicArray.SPLITS[(2, 1)], 0)),
            feed.p_pre_right.eq(Mux(pre_right, kern + 1, 0)), feed.p_kernel.eq(kern),
            feed.p_passes.eq(passes),
            feed.p_pad.eq(pad), feed.p_pad_mask.eq(pad_mask),
            # (5x5 and 7x7 halves, StripTile.pairs: the feeder's two-row pass programs)
            # (a 5x5 layer's row phases in halves: the feeder's halves and its row-phase
            # program)
            feed.p_halves.eq(halves & (~big | phases)), feed.p_pairs.eq(halves & big & ~phases),
            feed.p_b_lo1.eq(Mux(halves & big, n_b_lo, 0)),
            # the bottom half: the walk's current tile (all padding when lone)
            feed.p_a_base1.eq(n_a_base), feed.p_b_base1.eq(n_b_base),
            feed.p_a_lo1.eq(n_a_lo), feed.p_a_hi1.eq(Mux(lone, 0, n_a_hi)),
            feed.p_b_hi1.eq(Mux(lone, 0, n_b_hi)), feed.p_swap1.eq(n_swap),
        ]
        with m.If(halves):
            m.d.comb += [
                feed.p_a_base.eq(t_a_base), feed.p_b_base.eq(t_b_base), feed.p_a_lo.eq(t_a_lo),
                feed.p_a_hi.eq(t_a_hi), feed.p_b_hi.eq(t_b_hi), feed.p_swap.eq(t_swap),
                feed.p_tag.eq(Cat(t_tag[:ab], Const(0, 1), Const(1, 1))),
                feed.p_b_lo.eq(t_b_lo),
                feed.p_w.eq(Mux(big, Cat(t_w, self.w_rdata[:DwFeeder.BIG_TAPS * ob]),
                                Cat(t_w[:9 * ob], self.w_rdata))),
            ]
        with m.Else():
            m.d.comb += [
                feed.p_a_base.eq(n_a_base), feed.p_b_base.eq(n_b_base), feed.p_a_lo.eq(n_a_lo),
                feed.p_a_hi.eq(n_a_hi), feed.p_b_lo.eq(n_b_lo), feed.p_b_hi.eq(n_b_hi),
                feed.p_swap.eq(n_swap), feed.p_tag.eq(n_tag),
                feed.p_w.eq(self.w_rdata),      # region 0's taps; the other regions unused
            ]
        with m.If(phases & ~halves):            # the second row phase
            # (a 5x5 layer's: the same swap as phase 0, traded with the odd rows)
            m.d.comb += [feed.p_a_base1.eq(n_a_base1), feed.p_b_base1.eq(n_b_base1),
                         feed.p_a_lo1.eq(n_a_lo1), feed.p_a_hi1.eq(n_a_hi1),
                         feed.p_b_hi1.eq(n_b_hi1),
                         feed.p_swap1.eq(swap1(n_swap))]
        with m.If(phases & k7):                 # a 7x7 layer's third row phase (window row 6)
            m.d.comb += [feed.p_a_base2.eq(n_a_base2), feed.p_b_base2.eq(n_b_base2),
                         feed.p_a_hi2.eq(n_a_hi2), feed.p_b_hi2.eq(n_b_hi2),
                         feed.p_swap2.eq(~n_swap)]
        with m.If(phases & halves):             # row phases in halves: the second fills
            # (swapped as a lone tile's second fill; both halves' channels start their first
            # tile, so one low mask: a 5x5 layer's top pad row)
            m.d.comb += [feed.p_a_base2.eq(t_a_base1), feed.p_b_base2.eq(t_b_base1),
                         feed.p_a_hi2.eq(t_a_hi1), feed.p_b_hi2.eq(t_b_hi1),
                         feed.p_swap2.eq(swap1(t_swap)),
                         feed.p_a_base3.eq(n_a_base1), feed.p_b_base3.eq(n_b_base1),
                         feed.p_a_hi3.eq(Mux(lone, 0, n_a_hi1)),
                         feed.p_b_hi3.eq(Mux(lone, 0, n_b_hi1)),
                         feed.p_swap3.eq(swap1(n_swap)),
                         feed.p_a_lo2.eq(n_a_lo1)]
        with m.If(passes):                      # the second row pass (and a 7x7's third)
            m.d.comb += [feed.p_a_base1.eq(n_a_base1), feed.p_b_base1.eq(n_b_base1),
                         feed.p_a_lo1.eq(0), feed.p_a_hi1.eq(n_a_hi1),
                         feed.p_b_hi1.eq(n_b_hi1), feed.p_swap1.eq(~n_swap),
                         feed.p_a_base2.eq(n_a_base2), feed.p_b_base2.eq(n_b_base2),
                         feed.p_a_hi2.eq(n_a_hi2), feed.p_b_hi2.eq(n_b_hi2),
                         feed.p_swap2.eq(n_swap)]
        with m.If(cph):                         # row and column phases: four fills
            # (fill (r, c) the row phase r's words of the column phase c's parity; the
            # second column phase's rotation and pad lanes)
            m.d.comb += [feed.p_cphases.eq(1), feed.p_pre_right.eq(pre_right),
                         feed.p_pre_right1.eq(pre_right1), feed.p_pad_mask1.eq(pad_mask1),
                         feed.p_a_base.eq(n_a_base + cw0), feed.p_b_base.eq(n_b_base + cw0),
                         feed.p_a_base1.eq(n_a_base + cw1), feed.p_b_base1.eq(n_b_base + cw1),
                         feed.p_a_lo1.eq(n_a_lo), feed.p_a_hi1.eq(n_a_hi),
                         feed.p_b_hi1.eq(n_b_hi), feed.p_b_lo1.eq(n_b_lo),
                         feed.p_swap1.eq(n_swap),
                         feed.p_a_base2.eq(n_a_base1 + cw0), feed.p_b_base2.eq(n_b_base1 + cw0),
                         feed.p_a_base3.eq(n_a_base1 + cw1), feed.p_b_base3.eq(n_b_base1 + cw1),
                         feed.p_a_lo2.eq(n_a_lo1), feed.p_a_hi2.eq(n_a_hi1),
                         feed.p_b_hi2.eq(n_b_hi1), feed.p_a_hi3.eq(n_a_hi1),
                         feed.p_b_hi3.eq(n_b_hi1), feed.p_swap2.eq(swap1(n_swap)),
                         feed.p_swap3.eq(swap1(n_swap))]
        with m.If(quad):                        # the quadrant mode's tile
            m.d.comb += [feed.p_quads.eq(q_n), feed.p_split.eq(SystolicArray.SPLITS[(2, 2)]),
                         feed.p_a_base.eq(q_a), feed.p_b_base.eq(q_b), feed.p_tag.eq(q_tag),
                         feed.p_w.eq(Cat(*q_w)), feed.p_pre_right.eq(0), feed.p_halves.eq(0),
                         feed.p_stride2.eq(0)]
        with m.If(self.start):                  # a GEMM's drain holds no rows
            m.d.sync += [halves.eq(0), quad.eq(0)]
        with m.If(capture):
            # the tag, the drain's first row (mesh row R - 1): the tile's row h + R/2 - 1, so
            # that the bottom half's row 0 lands in its row h
            m.d.sync += [captured.eq(1), fresh.eq(1), t_a_base.eq(n_a_base),
                         t_b_base.eq(n_b_base), t_a_lo.eq(n_a_lo), t_a_hi.eq(n_a_hi),
                         t_b_hi.eq(n_b_hi), t_b_lo.eq(n_b_lo), t_swap.eq(n_swap),
                         t_w.eq(self.w_rdata),
                         t_a_base1.eq(n_a_base1), t_b_base1.eq(n_b_base1),
                         t_a_hi1.eq(n_a_hi1), t_b_hi1.eq(n_b_hi1),
                         t_tag.eq((n_tag[:ab] + oh - half)[:ab])]
        # the buffers' second class of rows in row phases: a class's words on (two a row in
        # row and column phases)
        class_words = Mux(self.p_m_cphases, self.p_m_words << 1, self.p_m_words)

        def pad_lanes(cols):
            """The lanes of a fill word from ``cols`` on (the pad value enters there)."""
            return Cat(*(cols <= j for j in range(cfg.array_cols)))
        with m.If(self.m_start):
            m.d.sync += [
                tiles.eq(self.p_m_tiles), na.eq(self.p_m_na), nb.eq(self.p_m_nb),
                hh.eq(self.p_m_h), pre_right.eq(self.p_m_pre_right), pad.eq(self.p_m_pad),
                pad_mask.eq(pad_lanes(self.p_m_cols)),
                t_left.eq(self.p_m_tiles - 1), g_left.eq(self.p_m_channels - 1),
                # (kernel_tile with pad 1, 2 or 3, the channel at an even stacked row)
                a_ch.eq(self.p_a_base),
                a_pos.eq(self.p_a_base - 1 - (self.p_m_kernel == 2)),
                a_left.eq(Mux(self.p_m_kernel == 1, self.p_m_nb, self.p_m_na) + 1 +
                          (self.p_m_kernel == 2)),
                b_ch.eq(self.p_b_base), b_pos.eq(self.p_b_base - (self.p_m_kernel != 0)),
                b_left.eq(Mux(self.p_m_kernel == 1, self.p_m_na + 1,
                              self.p_m_nb + (self.p_m_kernel == 2))),
                acc_ch.eq(self.p_acc_base), kern.eq(self.p_m_kernel),
                acc_pos.eq(self.p_acc_base + R - 1), first.eq(1), ch.eq(self.p_m_c0), par.eq(0),
                have.eq(1), fresh.eq(1), mesh_run.eq(1), self.busy.eq(1), rstride.eq(1),
                # (and in row phases maps of at most R - 2 rows: spec.dwmesh.phase_halves; 5x5
                # and 7x7 layers' maps of at most R/2 - 1 rows in pairs of window rows,
                # StripTile.pairs: the feeder has their programs for every kernel the mesh
                # walks, and the checker refuses the others)
                halves.eq(((self.p_m_h <= half - 1) |
                           (self.p_m_phases & (self.p_m_h <= R - 2) &
                            (self.p_m_kernel != 2))) &
                          (self.p_m_channels >= 2) & ~self.p_m_quad if R % 4 == 0 else 0),
                captured.eq(0), lone.eq(0),
                phases.eq(self.p_m_phases), orow.eq(self.p_m_odd_rows), pq.eq(0), pq_ch.eq(0),
                passes.eq(self.p_m_passes),
                prem.eq(self.p_m_h),
                # (row and column phases: a class's rows two words each)
                ph_a0.eq(self.p_a_base + class_words), ph_b0.eq(self.p_b_base + class_words),
                cph.eq(self.p_m_cphases), pre_right1.eq(self.p_m_pre_right1),
                pad_mask1.eq(pad_lanes(self.p_m_cols1)),
                cw0.eq(Mux(self.p_m_ce0, self.p_m_words, 0)),
                cw1.eq(Mux(self.p_m_ce0, 0, self.p_m_words)),
                ph_a1.eq(self.p_a_base), ph_b1.eq(self.p_b_base),
                quad.eq(self.p_m_quad if R % 4 == 0 else 0), q_left.eq(self.p_m_channels),
                q_ri.eq(0), q_a.eq(self.p_a_base), q_b.eq(self.p_b_base),
                q_tag.eq(self.p_acc_base),
            ]
            with m.If(self.p_m_quad):
                m.d.sync += [ch.eq(self.p_m_c0 + 1), q_ri.eq(1)]
        with m.If(issue):
            m.d.sync += [fresh.eq(1), captured.eq(0)]
            with m.If(halves & lone):
                m.d.sync += [have.eq(0), lone.eq(0)]
        with m.If(advance):
            with m.If(t_left != 0):                 # the channel's next tile
                m.d.sync += [t_left.eq(t_left - 1), first.eq(0), a_pos.eq(a_pos + tstep),
                             a_left.eq(a_left - tstep), b_pos.eq(b_pos + tstep),
                             b_left.eq(b_left - tstep),
                             acc_pos.eq(acc_pos + Mux(phases, Mux(big, R - 2, R - 1),
                                                      Mux(passes, R - 2, R - 2 - (kern << 1)))),
                             # (a phase tile's stride-2 rows: R - 1, R - 2 for 5x5 and 7x7)
                             pq.eq(pq + Mux(big, 2 * (R - 2), 2 * (R - 1))),
                             prem.eq(prem - Mux(big, 2 * (R - 2), 2 * (R - 1)))]
            with m.Elif(g_left != 0):               # the next channel's first tile
                # its first stacked row is h further: half of that, rounded by the parity
                # (h even: na = nb = h / 2; h odd: na from an even start, nb from an odd one)
                step = Mux(par, nb, na)
                # a channel's accumulator rows: h, or h / 2 in row phases
                acc_step = Mux(phases, hh >> 1, hh)
                # (kernel_tile: with the channel's half row hr and parity, A from hr - ceil(p
                # / 2) plus the parity for odd p, B from hr - floor(p / 2) plus the parity for
                # even p)
                par_next = par ^ hh[0]
                m.d.sync += [g_left.eq(g_left - 1), t_left.eq(tiles - 1), first.eq(1),
                             a_ch.eq(a_ch + step),
                             a_pos.eq(a_ch + step - 1 - k7 + Mux(k5, 0, par_next)),
                             a_left.eq(Mux(k5, nb, na) + 1 + k7), par.eq(par_next),
                             b_ch.eq(b_ch + step),
                             b_pos.eq(b_ch + step - big + Mux(k5, par_next, 0)),
                             b_left.eq(Mux(k5, na + 1, nb + k7)),
                             acc_ch.eq(acc_ch + acc_step),
                             acc_pos.eq(acc_ch + acc_step + R - 1),
                             pq_ch.eq(pq_ch + hh), pq.eq(pq_ch + hh), prem.eq(hh),
                             ch.eq(ch + 1)]
            with m.Elif(capture):
                m.d.sync += lone.eq(1)
            with m.Else():
                m.d.sync += have.eq(0)
        # the step's last beat: the feeder ends its program with no tile waiting
        with m.If(mesh_run & ~have & feed.ready & ~(self.m_start)):
            # (the quadrant mode's last write is a cycle after the array's last row)
            m.d.sync += [mesh_run.eq(0), drain.eq(mesh_drain_cycles(cfg) - 1 + quad)]


def _bits(depth: int) -> int:
    return max(1, (depth - 1).bit_length())
