"""The depthwise walk: a layer's strip steps (spec.dwmesh.strip_steps) in hardware (issue 18)."""

from amaranth import *
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from spec.config import AccelConfig
from spec.desc import DIM_BITS
from spec.dwmesh import row_pass_ranges

from .bits import log2
from .checker import col_phases_expr, value_in_ranges

__all__ = ["DwWalker"]


class DwWalker(wiring.Component):
    """Walks the strip steps of a pad-1 depthwise 3x3 layer (stride 1, or 2 with ``p_s2``), in
    :func:`spec.dwmesh.strip_steps`' order (channel groups outside, column strips inside), and
    states each step's loads, tiles and store, every value a register.

    ``start`` samples the layer: ``p_channels`` maps of ``p_h`` x ``p_w`` int8 at ``p_x_addr``
    (dense NCHW), ``p_group`` channels a step, outputs at ``p_out_addr`` (dense NCHW, int8 or,
    without ``p_int8``, int32 elements; ``P`` x ``Q`` maps, ``h`` x ``w`` with stride 1 and
    ``ceil(h / 2)`` x ``ceil(w / 2)`` with stride 2). It first forms the products it needs
    (``G h``, ``C h``, ``G h w``, ``G P Q``; serially, one bit a cycle, so no multiplier), then
    presents the first step with
    ``valid``; ``advance`` (while ``valid``) moves to the next step, whose values are valid
    again :attr:`ADVANCE_LATENCY` cycles later. ``last`` marks the layer's last step. The
    sizes must be legal (``1 <= G``, ``G = 1`` for odd ``h`` with stride 2, every size at
    least 1: the
    record checks' job, as for the GEMM walk); the walk does not check them.

    ``tiles`` (valid with the first step, constant for the layer): the mesh tiles of a
    channel, ``ceil(h / (R - 2))``, formed serially beside the products (a restoring division
    of ``h - 1`` by ``R - 2``, one bit a cycle); in row phases (``phases``, set at ``start``
    for a stride-2 layer whose ``h`` :func:`spec.dwmesh.row_phases` takes: a multiple of 4
    above ``R - p``, or for 3x3 an even ``h`` from ``R/2`` to ``R - 2``,
    :func:`spec.dwmesh.phase_halves`) ``ceil((h / 2) / (R - 1))``, ``ceil((h / 2) / (R -
    2))`` for 5x5 and
    7x7; one for a map of at most ``R - p`` rows outside row phases
    (:func:`spec.dwmesh.one_tile`: the division by ``R - 1``).

    With ``p_kernel`` 1 or 2 (a depthwise 5x5 or 7x7 layer, pad ``p`` = 2 or 3:
    :func:`spec.dwmesh.strip_steps` with ``kernel`` 5 or 7; 0 is 3x3) the strips are ``C - 2
    p`` columns wide, a channel's tiles ``ceil(h / (R - 2 p))``, the first strip's loads ``C -
    p`` bytes from column 0 and a later strip's start ``p`` columns left of its outputs (no
    quadrant mode); maps of at most ``C - p`` columns (any kernel: pad 1 for 3x3) are one
    strip of ``w`` columns (:func:`spec.dwmesh.one_strip`, set at ``start``), and maps of at
    most ``R - p`` rows one tile a channel (:func:`spec.dwmesh.one_tile`); a 5x5 or 7x7
    layer whose ``h`` :func:`spec.dwmesh.row_passes`
    takes runs in row passes (``passes``, set at ``start``): ``ceil(h / (R - 2))`` tiles a
    channel.

    ``cphases`` (set at ``start``): a stride-2 3x3 or 5x5 layer runs in row and column phases
    (:func:`spec.desc.col_phases`: ``h`` a multiple of 4 above ``R - 2``, ``w`` in
    :func:`spec.desc.col_phase_ranges`; session 42): strips of ``C - p`` output columns
    (``ox0`` and ``tw`` count stride-1 columns, twice the outputs; ``tw`` even), its loads
    ``min(2 C, ..)`` bytes from column ``max(0, 2 ox' - p + o)`` (``o`` = 1 with
    ``p_odd_cols``, the TF "SAME" columns), each row's bytes deinterleaved (the sequencer's
    job: :attr:`spec.dwmesh.BlockLoad.dwords`). Per step the fills' column-phase values
    (:attr:`spec.dwmesh.StripTile.cphases`): ``ce0`` (column phase 0 reads the odd-byte
    words: a first strip whose phase-0 columns start at an odd input column), ``rot0`` /
    ``rot1`` (column phase 0's / 1's fill rows rotated right a lane: a first strip's left
    pad), ``cols0`` / ``cols1`` (their loaded lanes). Outside column phases ``rot0`` is
    ``first_strip`` and ``cols0`` is ``nbytes`` (the other modes' rotation flag and lanes),
    ``ce0``, ``rot1`` and ``cols1`` 0.

    ``quad`` (set at ``start``): the layer runs in the quadrant mode
    (:func:`spec.dwmesh.quad_mode`: stride 1, ``h = w = R/2 - 1``): its loads
    take two rows a word (``nbytes = 2 w``, ``(G h - 1) // 2`` A words, ``G h // 2`` B words)
    and its store ``R/4`` rows of ``2 w`` elements a channel.

    Per step (the names of :class:`spec.dwmesh.StripStep`): ``c0``, ``channels`` (``G``, or
    fewer in the last group), ``ox0``, ``tw``, ``first_strip`` (``ox0 == 0``: the tiles'
    pre-rotation), the A load (``a_addr``, ``a_words``), the B load (``b_addr``, ``b_words``),
    both ``nbytes`` wide at a stride of ``2 w`` (in row phases each two groups ``w`` apart, its
    ``words`` a group, at a stride of ``4 w``: rows ``4 j`` and ``4 j + 1`` of the stacked
    maps into A, ``ceil(G h / 4)`` words a group, ``4 j + 2`` and ``4 j + 3`` into B,
    ``floor(G h / 4)``; both second groups from word ``a_words``), and the store
    (``st_addr``: ``out_addr``
    plus ``(c0 P Q + ox0 / s)`` elements for stride ``s``; ``st_rows`` = ``channels * P``
    rows of ``st_elems`` = ``ceil(tw / s)`` elements: :attr:`spec.dwmesh.StripStep.out_rows`
    and ``out_tw``).

    Members
    -------
    start, advance : ``In(1)``; valid, last : ``Out(1)``
    p_channels, p_h, p_w, p_group : ``In(DIM_BITS)``; p_x_addr, p_out_addr :
    ``In(dram_addr_bits + 1)``; p_int8, p_s2, p_odd_cols : ``In(1)``; p_kernel : ``In(2)``
    c0, channels, ox0, tw, a_words, b_words, nbytes, st_rows, st_elems, tiles, cols0, cols1 :
    ``Out(DIM_BITS)``;
    first_strip, phases, quad, passes, cphases, ce0, rot0, rot1 : ``Out(1)``; a_addr,
    b_addr, st_addr : ``Out(dram_addr_bits + 1)``
    """

    #: Cycles from ``advance`` to the next step's ``valid``.
    ADVANCE_LATENCY = 2
    #: Cycles from ``start`` to the first step's ``valid``: the two serial products, then the
    #: walk's first values (``planner.cost.ModelConstants.dw_walk_cycles``).
    START_LATENCY = 2 * DIM_BITS + ADVANCE_LATENCY + 1
    #: Width of the serial products' first factor (``G``, ``C``, ``G h``).
    FACTOR_BITS = DIM_BITS

    def __init__(self, cfg: AccelConfig):
        self._cfg = cfg
        aw = cfg.dram_addr_bits + 1
        super().__init__({
            "start": In(1), "advance": In(1), "valid": Out(1), "last": Out(1),
            **{f"p_{n}": In(DIM_BITS) for n in ("channels", "h", "w", "group")},
            "p_x_addr": In(aw), "p_out_addr": In(aw), "p_int8": In(1), "p_s2": In(1),
            "p_kernel": In(2), "p_odd_cols": In(1),
            **{n: Out(DIM_BITS) for n in ("c0", "channels", "ox0", "tw", "a_words", "b_words",
                                          "nbytes", "st_rows", "st_elems", "tiles", "cols0",
                                          "cols1")},
            "first_strip": Out(1), "phases": Out(1), "quad": Out(1), "passes": Out(1),
            "cphases": Out(1), "ce0": Out(1), "rot0": Out(1), "rot1": Out(1),
            **{n: Out(aw) for n in ("a_addr", "b_addr", "st_addr")},
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self._cfg
        aw = cfg.dram_addr_bits + 1
        # a strip's output columns: C - 2 pad, the pad 1, 2 or 3 (3x3, 5x5, 7x7); in row and
        # column phases C - pad outputs, 2 (C - pad) stride-1 columns
        kern = Signal(2, name="dw_kernel")
        pad = kern + 1
        cph, ocol = Signal(name="dw_cphases"), Signal(name="dw_odd_cols")
        m.d.comb += self.cphases.eq(cph)
        tw_max = Mux(cph, 2 * cfg.array_cols - 2 - (kern << 1),
                     cfg.array_cols - 2 - (kern << 1))
        pw = 2 * DIM_BITS + 2                          # product width

        C, h, w, G = (Signal(DIM_BITS, name=n) for n in ("dw_c", "dw_h", "dw_w", "dw_g"))
        x_addr, out_addr = Signal(aw), Signal(aw)
        int8, s2 = Signal(), Signal(name="dw_s2")
        # -- the serial products: G h, C h, then (G h) w and G P Q; one multiplier bit a cycle --
        gh, ch, ghw = (Signal(pw, name=n) for n in ("dw_gh", "dw_ch", "dw_ghw"))
        gpq = Signal(pw, name="dw_gpq")                 # G P Q: a channel group's output
        acc1, acc2 = Signal(pw), Signal(pw)
        bit = Signal(range(DIM_BITS + 1))
        phase = Signal(2)                               # 0 idle, 1 G h and C h, 2 (G h) w
        mult_by = Signal(DIM_BITS)                      # the remaining multiplier bits
        mult_q = Signal(DIM_BITS, name="dw_mult_q")     # the same of Q, beside w's in phase 2
        # G P: G h, or with stride 2 G ceil(h / 2) = (G h + 1) >> 1 (G is 1 for odd h)
        gp = Signal(pw, name="dw_gp")
        m.d.comb += gp.eq(Mux(s2, (gh + 1) >> 1, gh))
        # -- tiles a channel: ceil(h / (R - 2)) = (h - 1) // (R - 2) + 1, beside G h and C h;
        # in row phases ceil((h / 2) / (R - 1)); 1 for one tile (h / (R - 1)) --
        R = cfg.array_rows
        # (spec.dwmesh.row_phases: h > R - k + 1 and not one tile, h > R - p; the second
        # implies the first for every kernel)
        phases_in = self.p_s2 & (self.p_h[:2] == 0) & (self.p_h >= R - self.p_kernel)
        if R % 4 == 0:
            # (spec.dwmesh.phase_halves: 3x3 and 5x5, an even h from R/2 to R - 2, two
            # channels a tile)
            phases_in |= (self.p_s2 & (self.p_kernel != 2) & ~self.p_h[0] &
                          (self.p_h >= R // 2) & (self.p_h <= R - 2))
        # the quadrant mode (spec.dwmesh.quad_mode; the mesh is square)
        quad_in = ((self.p_kernel == 0) & ~self.p_s2 & (self.p_h == R // 2 - 1) &
                   (self.p_w == R // 2 - 1)
                   if R % 4 == 0 and R >= 8 and R == cfg.array_cols else Const(0))
        # row passes (spec.dwmesh.row_passes): the heights of row_pass_ranges
        passes_in = ~phases_in & (
            ((self.p_kernel == 1) & value_in_ranges(self.p_h, row_pass_ranges(R, 5))) |
            ((self.p_kernel == 2) & value_in_ranges(self.p_h, row_pass_ranges(R, 7))))
        cph_in = col_phases_expr(self.p_h, self.p_w, self.p_s2, self.p_kernel, cfg)
        # one strip (spec.dwmesh.one_strip): maps of at most C - pad columns
        one = Signal(name="dw_one_strip")
        # one tile a channel (spec.dwmesh.one_tile): maps of at most R - pad rows, not in
        # row phases (row passes never take them)
        # (row phases take precedence: phase_halves' maps are one phase tile a channel too)
        one_tile_in = self.p_h < R - self.p_kernel
        tile_rows = Signal(range(R), name="dw_tile_rows")
        num = Signal(DIM_BITS, name="dw_div_num")        # the dividend's remaining bits
        rem = Signal(range(2 * R), name="dw_div_rem")
        quo = Signal(DIM_BITS, name="dw_div_quo")
        trial = Signal(range(2 * R), name="dw_div_trial")
        m.d.comb += trial.eq(Cat(num[-1], rem))
        with m.If(self.start):
            m.d.sync += [num.eq(Mux(phases_in, (self.p_h >> 1) - 1, self.p_h - 1)), rem.eq(0),
                         quo.eq(0),
                         tile_rows.eq(Mux(phases_in, Mux(self.p_kernel == 0, R - 1, R - 2),
                                          Mux(one_tile_in, R - 1,
                                              Mux(passes_in, R - 2,
                                                  R - 2 - (self.p_kernel << 1))))),
                         kern.eq(self.p_kernel), self.passes.eq(passes_in),
                         cph.eq(cph_in), ocol.eq(self.p_odd_cols),
                         one.eq(self.p_w < cfg.array_cols - self.p_kernel),
                         self.phases.eq(phases_in), self.quad.eq(quad_in)]
        with m.Elif(phase == 1):
            m.d.sync += [num.eq(num << 1),
                         rem.eq(Mux(trial >= tile_rows, trial - tile_rows, trial)),
                         quo.eq(Cat(trial >= tile_rows, quo))]
            with m.If(bit == 1):
                m.d.sync += self.tiles.eq(Cat(trial >= tile_rows, quo) + 1)

        with m.If(self.start):
            m.d.sync += [C.eq(self.p_channels), h.eq(self.p_h), w.eq(self.p_w),
                         G.eq(self.p_group), x_addr.eq(self.p_x_addr),
                         out_addr.eq(self.p_out_addr), int8.eq(self.p_int8), s2.eq(self.p_s2),
                         acc1.eq(0), acc2.eq(0), bit.eq(DIM_BITS), mult_by.eq(self.p_h),
                         phase.eq(1), self.valid.eq(0)]
        with m.Elif(phase != 0):
            # acc = 2 acc + factor * (top bit of the multiplier), most significant bit first
            top = mult_by[-1]
            with m.If(phase == 1):
                m.d.sync += [acc1.eq((acc1 << 1) + Mux(top, G, 0)),
                             acc2.eq((acc2 << 1) + Mux(top, C, 0))]
            with m.Else():
                m.d.sync += [acc1.eq((acc1 << 1) + Mux(top, gh, 0)),
                             acc2.eq((acc2 << 1) + Mux(mult_q[-1], gp, 0))]
            m.d.sync += [mult_by.eq(mult_by << 1), mult_q.eq(mult_q << 1), bit.eq(bit - 1)]
            with m.If(bit == 1):
                with m.If(phase == 1):
                    m.d.sync += [phase.eq(2), bit.eq(DIM_BITS), mult_by.eq(w), acc1.eq(0),
                                 mult_q.eq(Mux(s2, (w + 1) >> 1, w)), acc2.eq(0),
                                 gh.eq((acc1 << 1) + Mux(top, G, 0)),
                                 ch.eq((acc2 << 1) + Mux(top, C, 0))]
                with m.Else():
                    m.d.sync += [phase.eq(0), ghw.eq((acc1 << 1) + Mux(top, gh, 0)),
                                 gpq.eq((acc2 << 1) + Mux(mult_q[-1], gp, 0))]

        # -- the walk ---------------------------------------------------------------------------
        c0, ox0 = Signal(DIM_BITS, name="dw_c0"), Signal(DIM_BITS, name="dw_ox0")
        rows_done = Signal(pw, name="dw_rows_done")      # c0 * h
        chan_x = Signal(aw, name="dw_chan_x")             # x_addr + c0 h w
        chan_o = Signal(aw + 2, name="dw_chan_o")         # c0 P Q (elements of the output)
        more_strips, more_groups = Signal(), Signal()
        walking = Signal()
        settle = Signal(range(self.ADVANCE_LATENCY + 1))
        launch = Signal()                                 # the products are done: first step
        m.d.comb += launch.eq((phase == 2) & (bit == 1))
        with m.If(launch):
            m.d.sync += [c0.eq(0), ox0.eq(0), rows_done.eq(0), chan_x.eq(x_addr),
                         chan_o.eq(0), walking.eq(1), settle.eq(self.ADVANCE_LATENCY)]
        with m.If(walking & self.advance & self.valid):
            m.d.sync += [self.valid.eq(0), settle.eq(self.ADVANCE_LATENCY - 1)]
            with m.If(more_strips):
                m.d.sync += ox0.eq(ox0 + tw_max)
            with m.Elif(more_groups):
                m.d.sync += [ox0.eq(0), c0.eq(c0 + G), rows_done.eq(rows_done + gh),
                             chan_x.eq(chan_x + ghw), chan_o.eq(chan_o + gpq)]
            with m.Else():
                m.d.sync += walking.eq(0)
        with m.Elif(walking & (settle != 0)):
            m.d.sync += settle.eq(settle - 1)
            with m.If(settle == 1):
                m.d.sync += self.valid.eq(1)

        # -- the step's values, registered from the walk's registers (one cycle behind) --------
        left = Signal(signed(DIM_BITS + 2))               # w - ox0
        m.d.comb += left.eq(w - ox0)
        first = ox0 == 0
        last_group = Signal()
        m.d.comb += [more_strips.eq((left > tw_max) & (~one | cph)), more_groups.eq(c0 + G < C),
                     last_group.eq(~(c0 + G < C))]
        rows = Mux(last_group, ch - rows_done, gh)
        # the patch's first loaded column (row and column phases: max(0, ox0 - pad + odd))
        xs = Mux(first, 0, ox0 - pad + (cph & ocol))
        # (row and column phases: whole outputs, an even count of stride-1 columns)
        tw = Mux(more_strips, tw_max, Mux(cph, (left + 1) & ~1, left))
        nbytes = Signal(DIM_BITS, name="dw_nbytes")
        two_c = 2 * cfg.array_cols
        m.d.comb += nbytes.eq(
            Mux(cph, Mux(first, Mux(w < two_c, w, two_c),
                          Mux(left + pad - ocol > two_c, two_c, left + pad - ocol)),
                Mux(self.quad, w << 1,
                    Mux(first, Mux(w < tw_max + pad, w, tw_max + pad),
                        Mux(left + pad > tw_max + 2 * pad, tw_max + 2 * pad, left + pad)))))
        # the column phases' words, rotations and lanes (spec.dwmesh._col_phase_steps): a
        # first strip's phase-0 columns start at -pad + odd, an odd column when the pad and
        # odd differ in parity (then phase 0 reads the odd-byte words), a pad column when the
        # pad exceeds odd (rotated a lane), and phase 1's too when pad - odd >= 2 (5x5
        # symmetric)
        e0 = Signal(name="dw_ce0")
        rot0, rot1 = Signal(name="dw_rot0"), Signal(name="dw_rot1")
        m.d.comb += [e0.eq(cph & first & (kern[0] == ocol)),
                     rot0.eq(Mux(cph, first & ~((kern == 0) & ocol), first)),
                     rot1.eq(cph & first & (kern == 1) & ~ocol)]

        def lanes(parity, rot):
            v = (nbytes + 1 - parity) >> 1
            return Mux(v > cfg.array_cols - rot, cfg.array_cols - rot, v)
        # the store's column: ox0 / s (ox0 is a multiple of R - 2, even)
        col = chan_o + Mux(s2, ox0 >> 1, ox0)
        q = self.quad
        group_channels = Mux(last_group, C - c0, G)
        m.d.sync += [
            self.c0.eq(c0), self.ox0.eq(ox0), self.first_strip.eq(first),
            self.channels.eq(group_channels),
            self.tw.eq(tw), self.st_elems.eq(Mux(q, tw << 1, Mux(s2, (tw + 1) >> 1, tw))),
            # (the quadrant mode: two rows a word)
            self.nbytes.eq(nbytes),
            self.ce0.eq(e0), self.rot0.eq(rot0), self.rot1.eq(rot1),
            self.cols0.eq(Mux(cph, lanes(e0, rot0), nbytes)),
            self.cols1.eq(Mux(cph, lanes(~e0, rot1), 0)),
            # row phases: classes 0 and 1 of the stacked rows into A, 2 and 3 into B
            self.a_addr.eq(chan_x + Mux(self.phases, 0, w) + xs),
            self.b_addr.eq(chan_x + Mux(self.phases, w << 1, 0) + xs),
            # stride 2: ceil(h / 2) rows a channel; G h / 2 for even h, (h + 1) / 2 for odd
            # (the quadrant mode: R/4 store rows a channel)
            self.st_rows.eq(Mux(q, group_channels << log2(max(R // 4, 1)),
                                Mux(s2, (rows + 1) >> 1, rows))),
            # the channels' maps stacked: the odd rows in A, the even ones in B; in row phases
            # rows 4 j and 4 j + 1 in A, 4 j + 2 and 4 j + 3 in B, a group each; in the
            # quadrant mode rows 2 j + 1 and 2 j + 2 in A word j, 2 j and 2 j + 1 in B word j
            # (G h is even in row phases; with G h / 2 odd, classes 0 and 1 a row more than
            # 2 and 3: spec.dwmesh.phase_halves)
            self.a_words.eq(Mux(self.phases, (rows + 2) >> 2,
                                Mux(q, (rows - 1) >> 1, rows >> 1))),
            self.b_words.eq(Mux(self.phases, rows >> 2, Mux(q, rows >> 1, (rows + 1) >> 1))),
            self.st_addr.eq(out_addr + Mux(int8, col, col << 2)),
            self.last.eq(~more_strips & last_group),
        ]
        return m
