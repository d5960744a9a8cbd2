"""Depthwise feeder: one depthwise tile's beats for the array's mesh mode (issue 18)."""

from amaranth import *
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from spec.config import AccelConfig
from spec.desc import col_phase_kernels, depthwise_mesh_side
from spec.dwmesh import walks

from .array import SystolicArray

__all__ = ["DwFeeder", "tile_program"]


def tile_program(rows: int, stride: int, kernel: int = 3, *, passes: bool = False,
                 pairs: bool = False,
                 cphases: bool = False) -> list[tuple[str, int, int | None, bool, bool]]:
    """The beats of one depthwise tile on a mesh of ``rows`` rows, from :mod:`spec.dwmesh`'s
    walks: ``(move, word, tap, first, last)`` per beat. A fill beat (``move == "FILL"``) reads
    buffer word ``word`` of the tile's A and B rows; a tap beat (``tap = kernel * dy + dx``,
    None for a beat that does not tap) multiplies, then makes ``move``. A row phase's first
    fill beat is the previous phase's last tap beat (a tap multiplies the registers the fill
    then shifts), so a stride-2 tile is ``rows + 8`` beats; a 5x5 or 7x7 tile (stride 1) is
    ``rows / 2 + 25`` or ``rows / 2 + 49``; a 5x5 tile in row passes (``passes``,
    :func:`spec.dwmesh.row_passes`) two fills like a stride-2 one, ``rows + 24``, a 7x7 one
    three (fill words ``0 .. 3 rows / 2 - 1``), ``3 rows / 2 + 47``. With ``pairs`` (a 5x5 or
    7x7 tile two channels a tile, :attr:`spec.dwmesh.StripTile.pairs`) a fill per pair of
    window rows, pass ``q``'s top-half beats reading words ``q ..`` and its bottom-half ones
    words ``rows / 2 + q ..`` (the second parameter set's, as a stride-2 tile's second fill
    reads them). With ``cphases`` (stride 2 in row and column phases,
    :attr:`spec.dwmesh.StripTile.cphases`) four fills, fill ``f``'s words ``f rows / 2 ..``:
    ``2 rows + k^2 - 3`` beats."""
    beats, taps, count = [], 0, kernel * kernel
    quarter, half = rows // 4, rows // 2
    for phase, walk in enumerate(walks(stride, kernel, passes=passes, pairs=pairs,
                                       cphases=cphases)):
        # (a pass's top-half words stay below R/2, its bottom-half ones below R: the feeder
        # tells the halves and the third fill's words by them)
        assert not pairs or (rows % 4 == 0 and phase <= quarter)
        fills = [("FILL", (phase + b if b < quarter else half + phase + b - quarter) if pairs
                  else phase * half + b, None, False, False) for b in range(half)]
        if phase:                               # its first fill beat in the last tap beat
            move, _, tap, first, last = beats.pop()
            assert move == "HOLD" and not last
            fills[0] = ("FILL", fills[0][1], tap, first, last)
        beats += fills
        for (dy, dx), move in walk:
            taps += 1
            beats.append((move or "HOLD", 0, kernel * dy + dx, taps == 1, taps == count))
    return beats


class DwFeeder(wiring.Component):
    """Issues a depthwise tile to :class:`hw.array.SystolicArray`'s mesh mode.

    A tile (``start``, parameters sampled with it) is :func:`tile_program`'s beats: ``R/2``
    fill beats per row phase (one with stride 1, two with stride 2), each reading word
    ``p_a_base + w`` of buffer A and ``p_b_base + w`` of buffer B (the patch's even and odd
    rows, as the load engines put them there), and the taps, each with its four regions'
    weights from ``p_w`` (region ``q``'s tap ``t`` in bits ``8 (9 q + t)``). A fill beat's
    A word enters the mesh as zeros when its index (``0 .. R/2 - 1`` in a stride-1 tile) is
    below ``p_a_lo`` or at least ``p_a_hi``, its B word when at least ``p_b_hi`` (a strip
    tile's zero pads, :class:`spec.dwmesh.StripTile`; ``0, R, R`` mask nothing), and also when
    below ``p_b_lo`` (a 5x5 tile's second top pad row; 0 in every other tile);
    with ``p_pre_right`` (0 to 3) every fill row enters rotated right by that many lanes
    (lane ``j`` from lane ``j - p_pre_right``, modulo ``C``): the patch that many ``RIGHT``
    moves after the fills would give (a strip tile's left pad,
    :attr:`spec.dwmesh.StripTile.pre_right`), without the beats. With ``p_kernel`` 1 or 2
    the tile is a depthwise 5x5 or 7x7 one (:attr:`spec.dwmesh.StripTile.kernel`; 0: 3x3):
    the 25- or 49-tap walk, its taps' weights region 0's (tap ``t`` in bits ``8t`` of
    ``p_w``), the whole mesh one region (but in halves: below). With ``p_swap`` the fill's
    buffers trade places: the B word
    enters the even row (``p_a_lo`` / ``p_a_hi`` its mask), the A word the odd one (``p_b_hi``)
    (:attr:`spec.dwmesh.StripTile.swap`). With ``p_halves`` (two channels a tile,
    :attr:`spec.dwmesh.StripTile.halves`) the fill words from ``R/4`` on are the bottom half's:
    word ``R/4 + k`` is word ``k`` of the tile ``p_a_base1``, ``p_b_base1``, ``p_a_lo1``,
    ``p_a_hi1``, ``p_b_hi1``, ``p_swap1`` describe (the driver sets ``p_split`` to the halves
    and the bottom half's weights as region 1's). With ``p_stride2`` the second row phase's
    fill words (``R/2 .. R - 1`` of the program) are read with the same ``*1`` parameters:
    word ``R/2 + k`` is word ``k`` of ``p_a_base1`` .. ``p_swap1`` (a strip tile's
    :attr:`spec.dwmesh.StripTile.phase1`; ``p_a_base + R/2`` etc. for the patches of
    :func:`spec.dwmesh.tile_patches` stored phase after phase); so does a 5x5 tile with
    ``p_passes`` (row passes, :func:`spec.dwmesh.row_passes`: two fills, the window rows 0 to 2
    from the first, 3 and 4 from the second), and a 7x7 tile with ``p_passes`` the same with a
    third fill (window row 6) whose words (``R .. 3 R / 2 - 1`` of the program) are read with
    the ``*2`` parameters (:attr:`spec.dwmesh.StripTile.phase2`; no low mask); a 5x5 tile with
    ``p_stride2`` is in row phases (window rows 0, 2, 4, then 1, 3), and a 7x7 one in three
    (0, 2, 4, then 1, 3, 5, then 6 with the ``*2`` parameters; session 40). With both
    ``p_halves`` and ``p_stride2`` (a 3x3 tile in row phases two channels a tile,
    :func:`spec.dwmesh.phase_halves`; session 41) each phase's fill is in halves: its words
    ``0 .. R/4 - 1`` the top half's and ``R/4 ..`` the bottom half's, phase 0's with the
    parameters without a digit and the ``*1`` ones, phase 1's with the ``*2`` and ``*3``
    ones (``p_a_lo2`` their low mask: a 5x5 tile's top pad row); a 5x5 tile so too (session
    41; the 5x5 row-phase program, its bottom half's weights ``p_w``'s from tap 49 on). With
    ``p_pairs`` (a 5x5 or 7x7 tile two channels a tile,
    :attr:`spec.dwmesh.StripTile.pairs`; session 41; the driver sets ``p_split`` to the halves,
    ``p_halves`` to 0) the tile is a fill per pair of window rows, each in halves: pass
    ``q``'s fill word ``k`` is the top half's word ``q + k`` (the parameters without a digit)
    and then the bottom half's (the ``*1`` ones, ``p_b_lo1`` its B words' low mask), and the
    bottom half's taps' weights are ``p_w``'s from tap 49 on. With ``p_quads``
    (1 to 4: the quadrant mode, :attr:`spec.dwmesh.StripTile.quads`; the driver sets
    ``p_split`` to the quadrants and region ``q``'s weights as channel ``q``'s) fill word ``k`` of half ``hf = k //
    (R/4)``, ``kk = k % (R/4)``, reads A word ``base + (kk - 1) mod (R/4)`` and B word ``base``
    (``kk = 0``) or ``base + R/4 - 1 + kk``, with ``base = p_a_base + hf n`` (``p_b_base`` for
    B; ``n = R/2 - 1``), and the fixed lane shuffle of the two-row words makes the quadrants'
    rows: lanes 0 and ``R/2`` and the quadrants from ``p_quads`` on enter as the pad value, as
    does the even row of a beat with ``kk = 0`` (the quadrants' top pads); ``p_a_lo`` ..
    ``p_swap1``, ``p_pre_right`` and ``p_pad_mask`` are not used. Beats reach the
    array :attr:`FEED_CYCLES` cycles after their issue (the buffers' synchronous
    read, then the operand register), as the compute engine's do. ``ready`` is high when a
    ``start`` is taken: idle, or in a tile's last beat, so tiles follow each other with no
    bubble; a tile taken in its predecessor's last beat (a tap, whose move would be a hold)
    makes its first fill beat in that beat, so it takes one beat less
    (:func:`spec.dwmesh.strip_step_cycles`): the tap multiplies the ``x`` the fill then
    shifts. ``p_tag`` is the tile's tag, sampled with its last tap by the array.

    Members
    -------
    start : ``In(1)``; ready, running : ``Out(1)``; issue_tap : ``Out(1)``: a tap beat issues
    in this cycle (it reaches the array as ``o_tap`` :attr:`FEED_CYCLES` later)
    p_stride2, p_passes : ``In(1)``; p_split : ``In(2)`` (:data:`SystolicArray.SPLITS`)
    p_a_lo, p_a_hi, p_b_lo, p_b_hi : ``In(range(R + 1))``; p_pre_right, p_kernel : ``In(2)``;
    p_swap : ``In(1)``
    p_a_base, p_b_base : buffer rows; p_w : ``In(98 * 8)`` (four regions' nine taps, region
    ``q``'s tap ``t`` in bits ``8 (9 q + t)``; or a 5x5 / 7x7 tile's taps, region 1's from
    tap 49 on); p_tag :
    ``In(tag_bits)``
    p_halves, p_swap1 : ``In(1)``; p_a_base1, p_b_base1, p_a_lo1, p_a_hi1, p_b_hi1, p_b_lo1
    (0 but with ``p_pairs``): the bottom half's (with ``p_halves``), or the second fill's
    p_pairs : ``In(1)``: a 5x5 or 7x7 tile two channels a tile (``p_halves`` 0)
    p_swap2 : ``In(1)``; p_a_base2, p_b_base2, p_a_hi2, p_b_hi2: a 7x7 pass tile's third fill,
    or with ``p_halves`` and ``p_stride2`` the top half's second
    p_swap3 : ``In(1)``; p_a_base3, p_b_base3, p_a_hi3, p_b_hi3: with ``p_halves`` and
    ``p_stride2`` the bottom half's second fill
    p_a_lo2 : the second fill's A-word low mask in both halves (0 but in a 5x5 row-phase
    tile in halves)
    p_quads : ``In(3)``: the quadrant mode's channels (0: not a quadrant tile)
    p_cphases : ``In(1)``: a stride-2 3x3 or 5x5 tile in row and column phases
    (:attr:`spec.dwmesh.StripTile.cphases`; session 42): four fills, fill ``f`` (the row and
    column phases of :data:`spec.dwmesh.CPHASE_FILLS`) read with parameter set ``f`` (the
    parameters without a digit, then the ``*1``, ``*2`` and ``*3`` ones; the low masks
    ``p_a_lo``, ``p_a_lo1`` and ``p_a_lo2`` for the last two), the second column phase's fills
    (sets 1 and 3) rotated by ``p_pre_right1`` and padded in the lanes of ``p_pad_mask1``
    p_pad : ``In(8)``, p_pad_mask : ``In(C)``: the tile's pad value, and the lanes of its fill
    words that hold padding (a masked word is padding in every lane)
    rd_en, a_raddr, b_raddr : ``Out``; a_rdata, b_rdata : ``In`` (synchronous read ports)
    o_mesh, o_move, o_split, o_fill, o_w, o_tap, o_first, o_last, o_tag : ``Out``, the array's
    ``i_mesh`` .. ``i_tag``
    """

    #: Cycles from a beat's issue to the array's input: the buffers' synchronous read, then the
    #: operand register (the compute engine's :data:`hw.compute.FEED_CYCLES`, which it checks).
    FEED_CYCLES = 2
    #: Taps ``p_w`` holds: four regions' nine (3x3), or two regions' 7x7 kernels (49 each: a
    #: 5x5 or 7x7 tile's, and with ``p_pairs`` the bottom half's from tap 49 on).
    W_TAPS = 98
    #: Taps of one region of a 5x5 or 7x7 tile in ``p_w``.
    BIG_TAPS = 49
    #: The tile programs' kernels, by ``p_kernel`` (after 3x3's two: stride 1, stride 2).
    KERNELS = (3, 5, 7)

    def __init__(self, cfg: AccelConfig, *, tag_bits: int):
        if cfg.array_rows != cfg.array_cols:
            raise ValueError(f"DwFeeder: the mesh fills whole rows from buffer-A words, so the "
                             f"array must be square, not {cfg.array_rows}x{cfg.array_cols}")
        self._cfg = cfg
        C, ob = cfg.array_cols, cfg.operand_bits
        super().__init__({
            "start": In(1), "ready": Out(1), "running": Out(1),
            "p_stride2": In(1), "p_split": In(2), "p_pre_right": In(2), "p_swap": In(1),
            "p_kernel": In(2), "p_passes": In(1),
            "p_a_lo": In(range(cfg.array_rows + 1)), "p_a_hi": In(range(cfg.array_rows + 1)),
            "p_b_lo": In(range(cfg.array_rows + 1)), "p_b_hi": In(range(cfg.array_rows + 1)),
            "p_a_base": In(range(cfg.buf_a_depth)), "p_b_base": In(range(cfg.buf_b_depth)),
            "p_halves": In(1), "p_swap1": In(1),
            "p_a_lo1": In(range(cfg.array_rows + 1)), "p_a_hi1": In(range(cfg.array_rows + 1)),
            "p_b_lo1": In(range(cfg.array_rows + 1)), "p_pairs": In(1),
            "p_a_lo2": In(range(cfg.array_rows + 1)),
            "p_b_hi1": In(range(cfg.array_rows + 1)),
            "p_a_base1": In(range(cfg.buf_a_depth)), "p_b_base1": In(range(cfg.buf_b_depth)),
            "p_swap2": In(1), "p_a_hi2": In(range(cfg.array_rows + 1)),
            "p_b_hi2": In(range(cfg.array_rows + 1)),
            "p_a_base2": In(range(cfg.buf_a_depth)), "p_b_base2": In(range(cfg.buf_b_depth)),
            "p_swap3": In(1), "p_a_hi3": In(range(cfg.array_rows + 1)),
            "p_b_hi3": In(range(cfg.array_rows + 1)),
            "p_a_base3": In(range(cfg.buf_a_depth)), "p_b_base3": In(range(cfg.buf_b_depth)),
            "p_w": In(self.W_TAPS * ob), "p_tag": In(tag_bits), "p_quads": In(3),
            "p_pad": In(ob), "p_pad_mask": In(C),
            "p_cphases": In(1), "p_pre_right1": In(2), "p_pad_mask1": In(C),
            "rd_en": Out(1),
            "a_raddr": Out(range(cfg.buf_a_depth)), "a_rdata": In(8 * cfg.a_beat_bytes),
            "b_raddr": Out(range(cfg.buf_b_depth)), "b_rdata": In(8 * cfg.b_beat_bytes),
            "o_mesh": Out(1), "o_move": Out(3), "o_split": Out(2), "o_fill": Out(2 * C * ob),
            "o_w": Out(4 * ob), "o_tap": Out(1), "o_first": Out(1), "o_last": Out(1),
            "o_tag": Out(tag_bits), "issue_tap": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self._cfg
        R, C, ob = cfg.array_rows, cfg.array_cols, cfg.operand_bits
        n, quarter = R // 2 - 1, R // 4          # the quadrant mode's maps, fill words a half
        assert self.FEED_CYCLES == 2     # the two stages below
        programs = [tile_program(R, 1), tile_program(R, 2), tile_program(R, 1, kernel=5),
                    tile_program(R, 1, kernel=7), tile_program(R, 1, kernel=5, passes=True),
                    tile_program(R, 1, kernel=7, passes=True), tile_program(R, 2, kernel=5),
                    tile_program(R, 2, kernel=7)]
        # 5x5 and 7x7 two channels a tile (on meshes of a multiple of 4 rows that walk them):
        # top-half words below R/2, bottom-half ones from R/2 and below R
        pair_kernels = [k for k in (5, 7) if R % 4 == 0 and R >= depthwise_mesh_side(k)]
        for k in pair_kernels:
            programs.append(tile_program(R, 1, kernel=k, pairs=True))
        # stride 2 in row and column phases, 3x3 and 5x5 (four fills: words up to 2 R - 1)
        cph_kernels = list(col_phase_kernels(R, C))
        for k in cph_kernels:
            programs.append(tile_program(R, 2, kernel=k, cphases=True))
        rom = [beat for program in programs for beat in program]
        starts = [sum(len(p) for p in programs[:i]) for i in range(len(programs))]
        # stride 2, 5x5, 7x7, then the 5x5 and 7x7 passes, 5x5 and 7x7 stride 2's row phases,
        # then 5x5 and 7x7 in pairs of window rows (those the mesh walks)
        start2, start5, start7, start5p, start7p, start5s2, start7s2 = starts[1:8]
        start_pairs = dict(zip(pair_kernels, starts[8:]))
        start_cph = dict(zip(cph_kernels, starts[8 + len(pair_kernels):]))
        moves = SystolicArray.MOVES
        # one ROM entry per beat: move, word, tap, whether it taps, first, last, program end,
        # packed into one word and read once a cycle (one select of the program counter, not
        # one for every use of a field: a smaller model to compile)
        wb = (2 * R - 1 if cph_kernels else 3 * R // 2 - 1).bit_length()
        tb = (self.BIG_TAPS - 1).bit_length()
        widths = (3, wb, tb, 1, 1, 1, 1)
        ends = set(starts[1:] + [len(rom)])

        def packed(i, b):
            values = (moves[b[0]], b[1], b[2] or 0, b[2] is not None, b[3], b[4], i + 1 in ends)
            word, shift = 0, 0
            for v, width in zip(values, widths):
                assert 0 <= int(v) < (1 << width)
                word, shift = word | (int(v) << shift), shift + width
            return word
        rom_t = Array(Const(packed(i, b), sum(widths)) for i, b in enumerate(rom))
        entry = Signal(sum(widths), name="dw_rom")
        fields, at = [], 0
        for width in widths:
            fields.append(entry[at:at + width])
            at += width
        e_move, e_word, e_tap, e_taps, e_first, e_last, e_end = fields

        pc = Signal(range(len(rom)))
        m.d.comb += entry.eq(rom_t[pc])
        split, a_base, b_base = Signal(2), Signal.like(self.p_a_base), Signal.like(self.p_b_base)
        a_lo, a_hi, b_lo, b_hi = (Signal.like(self.p_a_lo, name=n)
                                  for n in ("a_lo", "a_hi", "b_lo", "b_hi"))
        w, tag = Signal.like(self.p_w), Signal.like(self.p_tag)
        pad, pad_mask = Signal.like(self.p_pad), Signal.like(self.p_pad_mask)
        swap = Signal(name="dw_swap")
        rot = Signal(2, name="dw_rot")                  # fill rows rotated right (pre_right)
        big = Signal(name="dw_big")                     # a 5x5 or 7x7 tile: region 0's taps
        halves, swap1 = Signal(name="dw_halves"), Signal(name="dw_swap1")
        a_base1, b_base1 = Signal.like(a_base, name="a_base1"), Signal.like(b_base, name="b_base1")
        a_lo1, a_hi1, b_hi1 = (Signal.like(self.p_a_lo, name=n) for n in ("a_lo1", "a_hi1",
                                                                         "b_hi1"))
        b_lo1 = Signal.like(self.p_b_lo, name="b_lo1")
        a_lo2 = Signal.like(self.p_a_lo, name="a_lo2")
        # a 7x7 pass tile's third fill
        swap2 = Signal(name="dw_swap2")
        a_base2, b_base2 = Signal.like(a_base, name="a_base2"), Signal.like(b_base, name="b_base2")
        a_hi2, b_hi2 = (Signal.like(self.p_a_lo, name=n) for n in ("a_hi2", "b_hi2"))
        # a row-phase tile in halves: the bottom half's second fill
        swap3 = Signal(name="dw_swap3")
        a_base3, b_base3 = Signal.like(a_base, name="a_base3"), Signal.like(b_base, name="b_base3")
        a_hi3, b_hi3 = (Signal.like(self.p_a_lo, name=n) for n in ("a_hi3", "b_hi3"))
        quads = Signal(3, name="dw_quads")          # the quadrant mode's channels (0: off)
        # row and column phases: the second column phase's rotation and pad lanes
        cph = Signal(name="dw_cphases")
        rot1 = Signal(2, name="dw_rot1")
        pad_mask1 = Signal.like(self.p_pad_mask, name="dw_pad_mask1")
        quad = Signal(name="dw_quad")
        m.d.comb += quad.eq(quads != 0)
        at_end = Signal()
        take, merge = Signal(name="dw_take"), Signal(name="dw_merge")
        m.d.comb += [at_end.eq(self.running & e_end),
                     self.ready.eq(~self.running | at_end),
                     take.eq(self.start & self.ready),
                     # the next tile's first fill beat is this tile's last (tap) beat
                     merge.eq(take & at_end)]
        with m.If(self.running):
            m.d.sync += pc.eq(pc + 1)
            with m.If(at_end):
                m.d.sync += self.running.eq(0)
        with m.If(take):
            m.d.sync += [self.running.eq(1),
                         # (the column-phase programs the mesh has: the compute engine
                         # sets p_cphases for no other kernel)
                         pc.eq(Mux(self.p_cphases,
                                   Mux(self.p_kernel[0], start_cph.get(5, start_cph.get(3, 0)),
                                       start_cph.get(3, 0)),
                                   Mux(self.p_kernel[1],
                                   Mux(self.p_pairs, start_pairs.get(7, start7),
                                       Mux(self.p_passes, start7p,
                                           Mux(self.p_stride2, start7s2, start7))),
                                   Mux(self.p_kernel[0],
                                       Mux(self.p_pairs, start_pairs.get(5, start5),
                                           Mux(self.p_passes, start5p,
                                               Mux(self.p_stride2, start5s2, start5))),
                                       Mux(self.p_stride2, start2, 0)))) + merge),
                         cph.eq(self.p_cphases), rot1.eq(self.p_pre_right1),
                         pad_mask1.eq(self.p_pad_mask1),
                         rot.eq(self.p_pre_right), big.eq(self.p_kernel != 0),
                         a_lo.eq(self.p_a_lo), a_hi.eq(self.p_a_hi), b_lo.eq(self.p_b_lo),
                         b_hi.eq(self.p_b_hi),
                         split.eq(self.p_split), a_base.eq(self.p_a_base),
                         b_base.eq(self.p_b_base), w.eq(self.p_w), tag.eq(self.p_tag),
                         pad.eq(self.p_pad), pad_mask.eq(self.p_pad_mask),
                         swap.eq(self.p_swap), halves.eq(self.p_halves),
                         swap1.eq(self.p_swap1), a_base1.eq(self.p_a_base1),
                         b_base1.eq(self.p_b_base1), a_lo1.eq(self.p_a_lo1),
                         a_hi1.eq(self.p_a_hi1), b_hi1.eq(self.p_b_hi1), quads.eq(self.p_quads),
                         swap2.eq(self.p_swap2), a_base2.eq(self.p_a_base2),
                         b_base2.eq(self.p_b_base2), a_hi2.eq(self.p_a_hi2),
                         b_hi2.eq(self.p_b_hi2), swap3.eq(self.p_swap3),
                         a_base3.eq(self.p_a_base3), b_base3.eq(self.p_b_base3),
                         a_hi3.eq(self.p_a_hi3), b_hi3.eq(self.p_b_hi3),
                         b_lo1.eq(self.p_b_lo1), a_lo2.eq(self.p_a_lo2)]
            # the quadrant mode's bottom half: its left channel's rows n words on
            with m.If(self.p_quads != 0):
                m.d.sync += [a_base1.eq(self.p_a_base + n), b_base1.eq(self.p_b_base + n)]

        # the fill word within its row phase and its half: in a stride-2 or pass program
        # words from R/2 on are the second fill's (ph1), and in a 7x7 one words from R on the
        # third's; with halves (or quadrants) a fill's words from R/4 on are the bottom half's
        # (bh). The parameter set (`sel`): 0 the first fill's top half, 1 its bottom half or
        # the second fill, 2 the third fill or the second's top half, 3 the second's bottom
        # half (halves in row phases)
        fill = Signal()
        stride2, third = Signal(name="dw_stride2"), Signal(name="dw_third")
        fourth = Signal(name="dw_fourth")
        ph1, bh = Signal(name="dw_ph1"), Signal(name="dw_bh")
        wi = Signal(range(R), name="dw_wi")
        word = Signal(range(R), name="dw_word")
        sel = Signal(2, name="dw_sel")
        m.d.comb += [
            fill.eq(self.running & (e_move == moves["FILL"])),
            # (the 5x5 and 7x7 after stride 2's; every program from the passes' on reads its
            # words from R/2 on with the *1 parameters: the passes, the row phases and the
            # pair programs, whose bottom-half words those are)
            stride2.eq(((pc >= start2) & (pc < start5)) | (pc >= start5p)),
            # (only the 7x7 programs' third fills have words from R on)
            third.eq(e_word >= R),
            # (and only the column-phase programs' fourth fills from 3 R / 2)
            fourth.eq(e_word >= 3 * R // 2),
            ph1.eq(stride2 & (e_word >= R // 2)),
            wi.eq(e_word - Mux(fourth, 3 * R // 2, Mux(third, R, Mux(ph1, R // 2, 0)))),
            bh.eq((halves | quad) & (wi >= R // 4)),
            word.eq(wi - Mux(bh, R // 4, 0)),
            # (halves in row phases are 3x3 and 5x5 only: a 7x7 tile's third fill never
            # comes with halves, which the compute engine ensures)
            sel.eq(Mux(halves & ph1, Cat(bh, 1), Mux(fourth, 3, Mux(third, 2, bh | ph1)))),
            self.rd_en.eq(fill | merge),
        ]
        bottom = sel != 0
        # the quadrant mode's words: A at (kk - 1) mod R/4, B at 0 or R/4 - 1 + kk
        a_off, b_off = Signal(range(R), name="dw_a_off"), Signal(range(R), name="dw_b_off")
        m.d.comb += [a_off.eq(Mux(quad, Mux(word == 0, quarter - 1, word - 1), word)),
                     b_off.eq(Mux(quad & (word != 0), quarter - 1 + word, Mux(quad, 0, word)))]
        m.d.comb += [
            # a merged first fill beat reads the new tile's word 0
            self.a_raddr.eq(Mux(merge, self.p_a_base + Mux(self.p_quads != 0, quarter - 1, 0),
                                Array([a_base, a_base1, a_base2, a_base3])[sel] + a_off)),
            self.b_raddr.eq(Mux(merge, self.p_b_base,
                                Array([b_base, b_base1, b_base2, b_base3])[sel] + b_off)),
        ]
        # the tap's weights, one per region (a 5x5 or 7x7 tile: region 0's, tap t at bits 8t)
        tap_w3 = Cat(Array(w[ob * (9 * q + t):ob * (9 * q + t + 1)] for t in range(9))[e_tap]
                     for q in range(4))
        tap_big = Cat(Array(w[ob * (self.BIG_TAPS * q + t):ob * (self.BIG_TAPS * q + t + 1)]
                            for t in range(self.BIG_TAPS))[e_tap] for q in range(2))
        tap_w = Mux(big, tap_big, tap_w3)
        # stage 1: the buffers' read is in flight; stage 2: the operand register
        s1 = [Signal(n, name=f"dw_s1_{name}") for name, n in
              (("mesh", 1), ("move", 3), ("split", 2), ("w", 4 * ob), ("tap", 1), ("first", 1),
               ("last", 1), ("tag", len(tag)))]
        is_tap = self.running & e_taps
        m.d.comb += self.issue_tap.eq(is_tap)
        m.d.sync += [d.eq(v) for d, v in zip(s1, (
            self.running,
            Mux(self.running, Mux(merge, moves["FILL"], e_move), moves["HOLD"]), split,
            s1[3], is_tap,
            is_tap & e_first, is_tap & e_last, tag))]
        # (the taps' weights only while a tile runs: a tap comes with them, and a GEMM's
        # cycles then cost the simulator nothing here)
        with m.If(self.running):
            m.d.sync += s1[3].eq(tap_w)
        outs = (self.o_mesh, self.o_move, self.o_split, self.o_w, self.o_tap, self.o_first,
                self.o_last, self.o_tag)
        m.d.sync += [o.eq(d) for o, d in zip(outs, s1)]
        # the fill words' masks, decided at the read and applied where the words arrive: a
        # masked word, and every lane of the tile's pad mask, enter as the pad value
        zero_a, zero_b = Signal(name="dw_s1_zero_a"), Signal(name="dw_s1_zero_b")
        s1_pad, s1_mask = Signal.like(pad, name="dw_s1_pad"), Signal.like(pad_mask,
                                                                          name="dw_s1_pad_mask")
        s1_swap, s1_rot = Signal(name="dw_s1_swap"), Signal(2, name="dw_s1_rot")
        # the quadrant mode: the beat reads its half's first words (the quadrants' top pads
        # and first rows: the words trade places, the odd row takes their low bytes)
        s1_quad, s1_kk0 = Signal(name="dw_s1_quad"), Signal(name="dw_s1_kk0")

        def quad_mask(count, bottom_half):
            """The pad lanes of a quadrant beat: 0 and R/2, and the quadrants without a channel."""
            left = Mux(bottom_half, count < 3, 0)
            right = Mux(bottom_half, count < 4, count < 2)
            return Cat(Const(1, 1), left.replicate(n), Const(1, 1), right.replicate(n))
        with m.If(merge):                    # the new tile's word 0, from its parameters
            m.d.sync += [zero_a.eq((self.p_a_lo != 0) | (self.p_a_hi == 0) | (self.p_quads != 0)),
                         zero_b.eq(((self.p_b_hi == 0) | (self.p_b_lo != 0)) &
                                   (self.p_quads == 0)),
                         s1_pad.eq(self.p_pad),
                         s1_mask.eq(Mux(self.p_quads != 0, quad_mask(self.p_quads, 0),
                                        self.p_pad_mask)),
                         s1_swap.eq(self.p_swap & (self.p_quads == 0)),
                         s1_rot.eq(Mux(self.p_quads == 0, self.p_pre_right, 0)),
                         s1_quad.eq(self.p_quads != 0), s1_kk0.eq(1)]
        with m.Elif(self.running):          # (read only after a running beat's rd_en)
            # (low masks in the first fill and its bottom half or the second fill, and in a
            # 5x5 halves tile's second fill, both halves)
            m.d.sync += [zero_a.eq(Mux(quad, word == 0,
                                       (word < Array([a_lo, a_lo1, a_lo2, a_lo2])[sel]) |
                                       (word >= Array([a_hi, a_hi1, a_hi2, a_hi3])[sel]))),
                         zero_b.eq(~quad & ((word >= Array([b_hi, b_hi1, b_hi2, b_hi3])[sel]) |
                                            (word < Array([b_lo, b_lo1, 0, 0])[sel]))),
                         s1_pad.eq(pad),
                         # (row and column phases: the second column phase's, sets 1 and 3)
                         s1_mask.eq(Mux(quad, quad_mask(quads, bottom),
                                        Mux(cph & sel[0], pad_mask1, pad_mask))),
                         s1_swap.eq(~quad & Array([swap, swap1, swap2, swap3])[sel]),
                         s1_rot.eq(Mux(quad, 0, Mux(cph & sel[0], rot1, rot))),
                         s1_quad.eq(quad), s1_kk0.eq(word == 0)]

        def lanes(masked, data):
            vals = [Mux(masked | s1_mask[j], s1_pad, data[ob * j:ob * (j + 1)])
                    for j in range(C)]
            # rotated right by s1_rot lanes: lane j from lane j - s1_rot (modulo C)
            return Cat(*(Array(vals[j - r] for r in range(4))[s1_rot] for j in range(C)))

        a_row, b_row = self.a_rdata[:C * ob], self.b_rdata[:C * ob]
        # the quadrant mode's rows from the two-row words: [pad, left, pad, right], the left
        # quadrant's bytes from the A word (the B word in a half's first beat), the right's
        # from the other; the even row their low bytes, the odd one their high bytes (the low
        # ones in a half's first beat). Lanes 0 and R/2 are masked (the pads).
        q_left, q_right = Mux(s1_kk0, b_row, a_row), Mux(s1_kk0, a_row, b_row)
        lo, hi = slice(0, n * ob), slice(n * ob, 2 * n * ob)
        q_even = Cat(Const(0, ob), q_left[lo], Const(0, ob), q_right[lo])
        q_odd = Cat(Const(0, ob), Mux(s1_kk0, q_left[lo], q_left[hi]), Const(0, ob),
                    Mux(s1_kk0, q_right[lo], q_right[hi]))
        even_row = Mux(s1_quad, q_even, Mux(s1_swap, b_row, a_row))
        odd_row = Mux(s1_quad, q_odd, Mux(s1_swap, a_row, b_row))
        # (only when fill words arrive: the array takes i_fill only with a FILL move, which
        # comes with these words, and a GEMM's buffer words, read every cycle, then cost the
        # simulator nothing here)
        s1_read = Signal(name="dw_s1_read")
        m.d.sync += s1_read.eq(self.rd_en)
        with m.If(s1_read):
            m.d.sync += self.o_fill.eq(Cat(lanes(zero_a, even_row), lanes(zero_b, odd_row)))
        return m
