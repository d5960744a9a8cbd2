"""RecordChecker: the sequencer's descriptor and layer-record checks, pipelined for the clock."""

from amaranth import *
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from spec.config import AccelConfig
from spec.desc import (B_MODE_DEPTHWISE, B_MODE_DEPTHWISE5, B_MODE_DEPTHWISE7,
                       B_MODE_ODD_COLS, B_MODE_ODD_ROWS, DEPTHWISE_KERNELS, DEPTHWISE_UNUSED,
                       DESC_FIELDS, DIM_BITS, MAX_DIM, ROW_FIELDS, ErrorCode, col_phase_kernels,
                       col_phase_ranges, depthwise_arrays, depthwise_kernels)
from spec.layouts import LAYER_WORDS, STATS_BYTES, OpKind, OutFormat, PostMode
from spec.record import PARAM_ALIGN, SECTION_ALIGN_BYTES

from .bits import log2
from .ports import named_members

#: Layer-record fields beyond the GEMM descriptor (post-processing, window, statistics).
LAYER_FIELDS: tuple[str, ...] = tuple(n for n in LAYER_WORDS if not n.startswith("desc_"))
#: The post-processing parameter arrays, in load order.
PARAM_ARRAYS: tuple[str, ...] = ("bias", "mult", "shift")
#: Width of the multiplier operand of every product the checks need: the descriptor dimensions
#: (``m - 1``, ``k - 1``, partitions). A larger value fails ``BAD_SHAPE`` or ``BAD_PARTITION_*``
#: first, which outranks every check that uses a product.
FACTOR_BITS = MAX_DIM.bit_length()
#: Radix-4 digits of a factor: cycles of the bit-serial multiply.
DIGITS = (FACTOR_BITS + 1) // 2
#: Register stages after ``start`` of the deepest record-only term (a rule's part that reads
#: neither a product nor an extent): the record copy ``rec_*`` (phase 1), a bound registered
#: from it such as ``tile_m_max`` or ``dw_a_hi`` (phase 2), the bound's compare (phase 3).
EARLY_STAGES = 3
# The rules' registers load in phase DIGITS + 2 (the ``compares`` stage): a record-only term
# registered on its own is final by then only while its chain is no longer (a margin of
# DIGITS + 2 - EARLY_STAGES = 11 cycles with 24-bit dimensions).
assert EARLY_STAGES <= DIGITS + 2, "a record-only term is not final at the compares stage"

__all__ = ["RecordChecker", "LAYER_FIELDS", "PARAM_ARRAYS", "record_members",
           "depthwise_mode", "times", "col_phases_expr", "value_in_ranges"]


def depthwise_mode(b_mode):
    """``(is_dw, stride2, kernel, odd_rows, odd_cols)`` of a descriptor's ``b_mode`` value, as
    the sequencer and the checker decode it: a depthwise record
    (:data:`spec.desc.DEPTHWISE_KERNELS`: ``2 + 2 kernel + stride2`` in bits 0-2, 2 to 7, and
    for stride 2 :data:`spec.desc.B_MODE_ODD_ROWS` and :data:`spec.desc.B_MODE_ODD_COLS` in
    bits 3 and 4, no higher bit), its stride 2 (bit 0), its kernel code (``(b_mode[:3] - 2)
    >> 1``: 0 3x3, 1 5x5, 2 7x7) and the store's odd rows and columns
    (:func:`spec.desc.depthwise_odd`)."""
    base, odd = b_mode[:3], b_mode[3:5]
    assert (B_MODE_ODD_ROWS, B_MODE_ODD_COLS) == (1 << 3, 1 << 4)
    is_dw = (b_mode[5:] == 0) & (base >= B_MODE_DEPTHWISE) & ((odd == 0) | base[0])
    return (is_dw, base[0] & is_dw, (base - B_MODE_DEPTHWISE) >> 1, odd[0] & is_dw,
            odd[1] & is_dw)


def value_in_ranges(value: Value, ranges) -> Value:
    """``value`` lies in one of ``ranges``, ``(lo, hi)`` pairs meaning ``lo < value <= hi``
    (a ``hi`` of ``2 ** DIM_BITS - 1`` needs no upper comparison: a dimension has
    ``DIM_BITS`` bits; none for no range)."""
    return Cat(Const(0, 1), *((value > lo) & ((value <= hi) if hi < (1 << DIM_BITS) - 1 else 1)
                              for lo, hi in ranges)).any()


def col_phases_expr(h: Value, w: Value, s2: Value, kernel: Value, cfg: AccelConfig) -> Value:
    """:func:`spec.desc.col_phases` of a depthwise layer of ``h x w`` maps (``s2``: stride 2;
    ``kernel`` the kernel code of :func:`depthwise_mode`) on ``cfg``'s mesh, as logic: ``h`` a
    multiple of 4 above ``R - 2`` and ``w`` in :func:`spec.desc.col_phase_ranges` (the
    checker's buffer rule and the walk share it)."""
    R, C = cfg.array_rows, cfg.array_cols
    kernels = col_phase_kernels(R, C)
    return (s2 & (h[:2] == 0) & (h > R - 2) &
            Cat(Const(0, 1), *((kernel == (k - 3) // 2) &
                               value_in_ranges(w, col_phase_ranges(C, k))
                               for k in kernels)).any())


def times(value, n: int):
    """``value * n`` for a constant ``n >= 0`` as the shifts of ``n``'s bits added (no
    multiplier)."""
    return sum((value << b for b in range(n.bit_length()) if n >> b & 1), start=Const(0))


def record_members(cfg: AccelConfig) -> dict:
    """The signature members of a layer record: ``d_<field>`` (``In(32)``) for every descriptor
    field, ``l_<field>`` (``In(32)``) for every :data:`LAYER_FIELDS` name, and ``img_lo``,
    ``img_hi`` (``In(dram_addr_bits + 1)``: the image an image run executes, 0 otherwise) and
    ``img_wt`` (the address of its weights section: the header's CRC covers ``[img_lo,
    img_wt)``, A loads check the rest; 0 otherwise)."""
    members = {f"d_{name}": In(32) for name in DESC_FIELDS}
    members.update({f"l_{name}": In(32) for name in LAYER_FIELDS})
    members["img_lo"] = In(cfg.dram_addr_bits + 1)
    members["img_hi"] = In(cfg.dram_addr_bits + 1)
    members["img_wt"] = In(cfg.dram_addr_bits + 1)
    return members


class RecordChecker(wiring.Component):
    """Checks a latched layer record with the rules of :func:`spec.record.check_record`.

    One ``start`` pulse while idle (not in the ``done`` cycle), with ``d_*``, ``l_*``,
    ``img_lo``, ``img_hi`` already holding the record (they must hold still until ``done``),
    runs the checks in :attr:`latency` cycles:
    ``done`` is high for one cycle ``latency`` cycles after ``start``, with ``code`` the first
    failing rule's :class:`spec.desc.ErrorCode` in the priority order of :func:`spec.desc.check`
    (0 when the record is legal) and ``a_kstep``, ``b_kstep``, ``c_mstep`` the sequencer's
    per-partition address steps.

    Pipeline (no multiplier cells: the checks would otherwise take about 30 MULT18X18D, and
    one cycle of multiply, 64-bit sums, compares and a 13-way priority was the full design's
    slowest path):

    ========================  ========================================================
    cycles 1 .. DIGITS         nine products ``factor x value`` (24 x 32 bits), radix 4,
                               one 56-bit add per cycle each (most significant digit first);
                               meanwhile the record copied (cycle 1), the bases registered,
                               and every record-only compare in a flip-flop of its own
                               (cycles 2 .. ``EARLY_STAGES``)
    DIGITS + 1                 extents: ``base + product``
    DIGITS + 2                 every rule in its own register: the compares of products and
                               extents, ANDed / ORed with registered record-only compares
    DIGITS + 3                 one bit per error code (the OR of its rules)
    DIGITS + 4 (``done``)      ``code``: the priority of the registered bits
    ========================  ========================================================

    Parameters
    ----------
    cfg : AccelConfig
        Array size, buffer sizes, memory size, table capacities.

    Members
    -------
    start : ``In(1)``; done : ``Out(1)``; code : ``Out(8)``; failed : ``Out(1)``: ``code != 0``
    (a register, for the sequencer's launch decision)
    d_<field> : ``In(32)`` for every descriptor field; l_<field> : ``In(32)`` for every
    :data:`LAYER_FIELDS` name; img_lo, img_hi : ``In(dram_addr_bits + 1)``
    a_kstep, b_kstep, c_mstep : ``Out(dram_addr_bits)``
    """

    #: Cycles from ``start`` to ``done``.
    latency = DIGITS + 4

    def __init__(self, cfg: AccelConfig):
        self._cfg = cfg
        ab = cfg.dram_addr_bits
        super().__init__({"start": In(1), "done": Out(1), "code": Out(8), "failed": Out(1),
                          **record_members(cfg),
                          **named_members("", ("a_kstep", "b_kstep", "c_mstep"), Out(ab))})

    def elaborate(self, platform):
        m = Module()
        cfg = self._cfg
        R, C = cfg.array_rows, cfg.array_cols
        lr, lc = log2(R), log2(C)
        d = {name: getattr(self, f"d_{name}") for name in DESC_FIELDS}
        L = {name: getattr(self, f"l_{name}") for name in LAYER_FIELDS}
        img_lo, img_hi, img_wt = self.img_lo, self.img_hi, self.img_wt
        M, K, N = d["m"], d["k"], d["n"]
        pm, pn, pk = d["partition_m"], d["partition_n"], d["partition_k"]

        def reg(expr, width=64, name=None, keep=False):
            """``expr`` registered every cycle: valid from the second cycle after ``start``,
            long before the products (the inputs hold still). ``keep``: a deliberate copy, not
            merged with an equal register elsewhere."""
            sig = Signal(width, name=name, attrs={"keep": 1} if keep else {})
            m.d.sync += sig.eq(expr)
            return sig

        # -- phase counter -------------------------------------------------------------------
        phase = Signal(range(self.latency + 1))
        with m.If(self.start):
            m.d.sync += phase.eq(1)
        with m.Elif(phase == self.latency):
            m.d.sync += phase.eq(0)
        with m.Elif(phase != 0):
            m.d.sync += phase.eq(phase + 1)

        def stage(lo, hi, name, keep=False):
            """A register that is high exactly while ``lo <= phase <= hi``, set from the
            phase before (every stage's enable was a compare of ``phase`` fanned out to hundreds of
            flip-flops: 10.8 ns paths of the whole 8x8, session 18); ``keep``: a copy of its
            own, not merged with equal ones."""
            flag = Signal(name=name, attrs={"keep": 1} if keep else {})
            # the next phase is in [lo, hi]: after a start, 1; else phase + 1 (while counting,
            # not at the end). The compare reads only `phase`; `start` (the sequencer's state
            # decode, fanned out) meets it in the last select.
            counting = (phase >= max(lo - 1, 1)) & (phase <= min(hi - 1, self.latency - 1))
            m.d.sync += flag.eq(Mux(self.start, int(lo <= 1 <= hi), counting))
            return flag
        m.d.comb += self.done.eq(stage(self.latency, self.latency, "done_stage"))

        # -- products: radix 4, most significant digit first -----------------------------------
        def product(factor, value, name, *, dim=False):
            """``factor x value``, final from cycle DIGITS + 1 until the next ``start``. The
            multiplier register follows ``factor`` while the checker is idle and the first step
            starts the sum from 0, so ``start`` (decoded from the sequencer's state) reaches
            only flags, not the products' ~1,000 flip-flops. ``dim``: ``value`` is a dimension
            too (its low FACTOR_BITS bits are used: a larger one fails a rule that outranks
            every rule using the product), so the sum is 8 bits narrower: the 56-bit carry chain
            of ``p_kn`` was a 9.80 ns path of the whole 8x8 (14dda7d seed 3, session 24)."""
            value_bits = FACTOR_BITS if dim else 32
            value = value[:value_bits]
            mr = Signal(2 * DIGITS, name=f"{name}_mr")
            acc = Signal(2 * DIGITS + value_bits, name=name)
            x3 = reg(value + (value << 1), value_bits + 2, name=f"{name}_x3")
            digit = mr[-2:]
            pick = Mux(digit[1], Mux(digit[0], x3, value << 1), Mux(digit[0], value, 0))
            step = stage(1, DIGITS, f"{name}_step", keep=True)
            first = stage(1, 1, f"{name}_first", keep=True)
            idle = Signal(name=f"{name}_idle", init=1, attrs={"keep": 1})   # phase == 0
            m.d.sync += idle.eq(~self.start & ((phase == 0) | (phase == self.latency)))
            with m.If(idle):
                m.d.sync += mr.eq(factor[:FACTOR_BITS])
            with m.Elif(step):
                m.d.sync += [mr.eq(mr << 2), acc.eq(Mux(first, 0, acc << 2) + pick)]
            return acc

        p_a = product(K - 1, d["a_stride"], "p_a")
        p_b = product(K - 1, d["b_stride"], "p_b")
        p_c = product(M - 1, d["c_stride"], "p_c")
        p_ak = product(pk, d["a_stride"], "p_ak")
        p_bk = product(pk, d["b_stride"], "p_bk")
        p_cm = product(pm, d["c_stride"], "p_cm")
        p_mk = product(pm, pk, "p_mk", dim=True)
        p_kn = product(pk, pn, "p_kn", dim=True)
        p_mn = product(pm, pn, "p_mn", dim=True)
        dw = bool(cfg.dw_mesh)                  # the depthwise rules (b_mode 2, 3) are built
        if dw:
            p_dgk = product(pm, K, "p_dgk", dim=True)       # G h: the strip step's rows
            p_dkn = product(K, N, "p_dkn", dim=True)        # h w: a channel's map
            # ceil(h / 2) ceil(w / 2): a channel's output map with stride 2
            p_dpq = product((K + 1) >> 1, (N + 1) >> 1, "p_dpq", dim=True)
            p_dmb = product(M, d["b_stride"], "p_dmb")
            p_dmc = product(M, d["c_stride"], "p_dmc")
        rows_built = bool(cfg.row_store)        # the row store's rules (spec.desc.check)
        if rows_built:
            p_rpn = product(d["c_rows"], pn, "p_rpn", dim=True)     # c_rows partitions of n
            # (c_rows - 1) * c_row_pitch: the last row's offset in a C row (c_rows >= 1 when
            # it is used)
            p_cr = product(d["c_rows"] - 1, d["c_row_pitch"], "p_cr")
        ab = cfg.dram_addr_bits
        m.d.comb += [self.a_kstep.eq(p_ak[:ab]), self.b_kstep.eq(p_bk[:ab]),
                     self.c_mstep.eq(p_cm[:ab])]

        # -- bases (registered while the products run) ----------------------------------------
        is_conv = reg(d["b_mode"] == 1, 1)
        # the largest kernel code the mesh runs (spec.desc.depthwise_kernels: 7x7 needs a
        # mesh of at least 9 rows and columns)
        max_kern = max(((k - 3) // 2 for k in depthwise_kernels(cfg)), default=0)
        # a depthwise record: b_mode 2 + 2 kernel (0 3x3, 1 5x5, 2 7x7), + 1 with stride 2,
        # + 8 / 16 for the odd rows / columns of stride 2
        mode = depthwise_mode(d["b_mode"])
        is_dw = reg(mode[0], 1, name="is_dw") if dw else Const(0, 1)
        dw_s2 = reg(mode[1], 1, name="dw_s2") if dw else None
        dw_kern = reg(mode[2], 2, name="dw_kernel") if dw else None
        dw_odd = reg(Cat(mode[3], mode[4]), 2, name="dw_odd") if dw else None
        # row and column phases (spec.desc.col_phases): every row in both buffers, two words
        dw_cph = reg(col_phases_expr(K, N, dw_s2, dw_kern, cfg), 1, name="dw_cph") if dw else None

        def gemm(cond):
            """A GEMM / convolution rule: off for a depthwise record."""
            return (~is_dw & cond) if dw else cond
        int8_out = reg(L["out_format"] == OutFormat.INT8, 1)
        bias_on = reg(L["bias_present"] == 1, 1)
        post = bias_on | int8_out
        q_need = (bias_on, int8_out, int8_out)      # PARAM_ARRAYS order
        gn_all = reg((N + C - 1) >> lc, 32)
        round_m = reg(((M + R - 1) >> lr) << lr, 32)
        n_bytes = reg(Mux(L["out_format"] == OutFormat.INT8, N, N << 2), 34)
        c_row = Mux(int8_out, gn_all << lc, gn_all << (lc + 2))
        a_base = reg(d["a_addr"] + round_m)
        b_base = reg(d["b_addr"] + (gn_all << lc))
        b_conv_hi = reg(d["b_addr"] + d["b_stride"])
        c_base = reg(d["c_addr"] + c_row)
        w_base = reg(d["c_addr"] + n_bytes)
        if rows_built:
            # the row store: a C row's last row of pixels, its c_row_elems elements (whole
            # beats for the extent, the elements for the written range)
            row_on = reg(d["c_rows"] != 0, 1, name="row_on")
            elems = d["c_row_elems"]
            q_bytes = reg(Mux(int8_out, elems, elems << 2), 34, name="row_q_bytes")
            q_beats = reg(((elems + C - 1) >> lc) << lc, 32, name="row_q_lanes")
            c_base_r = reg(d["c_addr"] + Mux(int8_out, q_beats, q_beats << 2), name="row_c_base")
            w_base_r = reg(d["c_addr"] + q_bytes, name="row_w_base")
        beat_b = cfg.b_beat_bytes
        # a table's end: its address plus its bytes, the bytes' sum registered first (one carry
        # chain a cycle: `off_addr + ((K - 1) << 2) + beat_b` in one cycle was a 9.8 ns path
        # of the whole 8x8 at e2de91f seed 3); a bound of phase 2, like gn_all's
        off_bytes = reg((K << 2) + (beat_b - 4), 36, name="off_bytes")
        run_bytes = reg((d["run_count"] << 3) + (beat_b - 4), 37, name="run_bytes")
        tables = [(d["off_addr"], reg(d["off_addr"] + off_bytes)),
                  (d["run_addr"], reg(d["run_addr"] + run_bytes)),
                  (d["grp_addr"], reg(d["grp_addr"] + (gn_all << 2) + beat_b))]
        stats = L["stats_addr"]
        stats_hi = reg(stats + STATS_BYTES)
        param_hi = [reg(L[f"{name}_addr"] + (M << 2), name=f"{name}_hi") for name in PARAM_ARRAYS]

        # -- the record, copied: from here on (the extents and the rules, DIGITS + 1 cycles
        # after `start` and later) every field is read from a register of the checker's own,
        # loaded every cycle. The sequencer's record latch is placed for its other readers; a
        # compare of a latched field into a rule's register was a 12.3 ns path of the whole 8x8
        # (session 21, 5d65dd2 seed 2). Unread copies are removed by synthesis. The sizes the
        # step walker also copies are `keep` on both sides: one copy, merged by synthesis, sat
        # between the checker and the walker's flags (10.14 ns, 0c732f5 seed 3, session 25);
        # with `keep` on the walker's alone, the checker's merged into it.
        walker_copies = {"m", "n", "k", "partition_m", "partition_n", "partition_k"}
        d = {name: reg(v, len(v), name=f"rec_{name}", keep=name in walker_copies)
             for name, v in d.items()}
        L = {name: reg(v, len(v), name=f"rec_{name}") for name, v in L.items()}
        img_lo, img_hi, img_wt = (reg(v, len(v), name=f"rec_{name}") for name, v in
                                  (("img_lo", img_lo), ("img_hi", img_hi), ("img_wt", img_wt)))
        M, K, N = d["m"], d["k"], d["n"]
        pm, pn, pk = d["partition_m"], d["partition_n"], d["partition_k"]
        stats = L["stats_addr"]
        tables = [(d[name], hi) for name, (_, hi) in zip(("off_addr", "run_addr", "grp_addr"),
                                                          tables)]

        # -- extents -------------------------------------------------------------------------
        extents = stage(DIGITS + 1, DIGITS + 1, "extents")
        a_hi, b_hi, c_hi, w_hi = (Signal(64, name=n) for n in ("a_hi", "b_hi", "c_hi", "w_hi"))
        acc_need = Signal(64)
        if rows_built:
            row_span = Signal(64, name="row_span")      # (c_rows - 1) * pitch + the last row
        with m.If(extents):
            m.d.sync += [a_hi.eq(a_base + p_a), b_hi.eq(Mux(is_conv, b_conv_hi, b_base + p_b))]
            if rows_built:
                m.d.sync += [c_hi.eq(Mux(row_on, c_base_r + p_cr, c_base) + p_c),
                             w_hi.eq(Mux(row_on, w_base_r + p_cr, w_base) + p_c),
                             row_span.eq(p_cr + q_bytes)]
            else:
                m.d.sync += [c_hi.eq(c_base + p_c), w_hi.eq(w_base + p_c)]
            if cfg.acc_bytes & (cfg.acc_bytes - 1) == 0:
                m.d.sync += acc_need.eq(p_mn << log2(cfg.acc_bytes))
            else:
                m.d.sync += acc_need.eq(p_mn * cfg.acc_bytes)

        if dw:
            # the last weight array's end: a_addr + (arrays - 1) a_stride + 4 m (3, 7 or 13
            # arrays: 2, 6 or 12 strides)
            spans = [times(d["a_stride"], depthwise_arrays(b) - 1)
                     for b in (B_MODE_DEPTHWISE, B_MODE_DEPTHWISE5, B_MODE_DEPTHWISE7)]
            dw_a_hi = reg(d["a_addr"] + Array(spans + [0])[dw_kern] + (M << 2), name="dw_a_hi")
            dw_b_hi, dw_c_hi = Signal(64, name="dw_b_hi"), Signal(64, name="dw_c_hi")
            dw_words_a, dw_words_b, dw_acc_need = (Signal(64, name=f"dw_{n}")
                                                   for n in ("words_a", "words_b", "acc_need"))
            # (in row phases two channels a tile buffer A holds G h / 2 + 1 words when G h / 2
            # is odd, spec.desc.depthwise_words: never more than a power-of-two half that
            # holds G h / 2, so the rule needs no term of its own; in row and column phases
            # G h words in each)
            with m.If(extents):
                m.d.sync += [dw_b_hi.eq(d["b_addr"] + p_dmb), dw_c_hi.eq(d["c_addr"] + p_dmc),
                             dw_words_a.eq(Mux(dw_cph, p_dgk, p_dgk >> 1)),
                             dw_words_b.eq(Mux(dw_cph, p_dgk, (p_dgk + 1) >> 1)),
                             dw_acc_need.eq((p_dgk + R) << log2(cfg.c_beat_bytes))]
            # the output's channel pitch: its map (stride 1: the input's) times the element size
            dw_c_pitch = reg(Mux(dw_s2, Mux(int8_out, p_dpq, p_dpq << 2),
                                 Mux(int8_out, p_dkn, p_dkn << 2)), name="dw_c_pitch")
            dw_unused = reg(Cat(*(d[name] != 0 for name in DEPTHWISE_UNUSED)).any(), 1,
                            name="dw_unused")

        # -- rules: each in its own register, their record-only compares registered before ---
        compares = stage(DIGITS + 2, DIGITS + 2, "compares")
        bits = {code: [] for code in ErrorCode}

        def rule(code, cond):
            bit = Signal(name=f"bad_{code.name.lower()}_{len(bits[code])}")
            with m.If(compares):
                m.d.sync += bit.eq(cond)
            bits[code].append(bit)

        def early(expr, name):
            """A record-only term (``rec_*`` and bounds registered from them: no product, no
            extent) in a flip-flop of its own, loaded every cycle: final from phase
            :data:`EARLY_STAGES` at the latest, long before the ``compares`` stage, so a rule's
            register ORs a few flip-flops instead of the record's compares (eight 25-bit
            compares ORed into BAD_LAYER's register: the whole 8x8 route, session 24:
            rec_out_zero_point -> bad_layer 10.67 ns; gn_all -> its carry chain -> bad_table
            10 ns; about 8 ns of either routing)."""
            return reg(expr, 1, name=f"early_{name}")

        def in_dim(v):
            return (v >= 1) & (v <= MAX_DIM)

        def int8_word(w):
            return (w[7:] == 0) | (w[7:] == (1 << 25) - 1)

        dram, loc_end = cfg.dram_bytes, cfg.local_base + cfg.local_buf_bytes
        win_lo, win_hi = L["out_window_lo"], L["out_window_hi"]
        imaged = early(img_hi != 0, "imaged")
        dim_ok = {name: early(in_dim(d[name]), f"{name}_ok")
                  for name in ("m", "k", "n", "partition_m", "partition_n", "partition_k")}

        rule(ErrorCode.BAD_SHAPE, ~(dim_ok["m"] & dim_ok["k"] & dim_ok["n"]))
        rule(ErrorCode.BAD_PARTITION_M, gemm(~(dim_ok["partition_m"] &
                                               early(pm[:lr] == 0, "pm_whole"))))
        rule(ErrorCode.BAD_PARTITION_N, gemm(~(dim_ok["partition_n"] &
                                               early(pn[:lc] == 0, "pn_whole"))))
        if rows_built:
            # each n partition is one row of pixels: n = c_rows * partition_n, and
            # c_row_elems in [max(1, pn - C + 1), pn]: the row ends in the partition's last
            # lane group (the store writes every lane group of a partition)
            rule(ErrorCode.BAD_PARTITION_N, gemm(row_on & (
                (p_rpn != N) | early((d["c_row_elems"] == 0) | (d["c_row_elems"] > pn) |
                                     (d["c_row_elems"] + C <= pn) |
                                     (d["c_rows"] > MAX_DIM), "row_elems"))))
        rule(ErrorCode.BAD_PARTITION_K, gemm(~dim_ok["partition_k"] |
                                             (early(d["need_splitk"] == 0, "no_splitk") &
                                              early(pk < K, "pk_short"))))
        # (the bounds registered first: a compare, a select and a compare in one cycle were a
        # 12.1 ns path on the ECP5)
        tile_m_max = reg(Mux(pm > R, pm, R), 32, name="tile_m_max")
        tile_n_max = reg(Mux(pn > C, pn, C), 32, name="tile_n_max")
        for name, low, top, lt in (("tile_m", R, tile_m_max, lr), ("tile_n", C, tile_n_max, lc)):
            tile = d[name]
            rule(ErrorCode.BAD_TILE, gemm(early(tile < low, f"{name}_small") |
                                          early(tile > top, f"{name}_big") |
                                          early(tile[:lt] != 0, f"{name}_odd")))
        rule(ErrorCode.BUF_A_OVERFLOW, gemm(p_mk > cfg.buf_a_half_bytes))
        rule(ErrorCode.BUF_B_OVERFLOW, gemm(p_kn > cfg.buf_b_half_bytes))
        rule(ErrorCode.ACC_OVERFLOW, gemm(acc_need > d["acc_buffer_needed"]))
        rule(ErrorCode.ACC_OVERFLOW, early(d["acc_buffer_needed"] > cfg.acc_half_bytes,
                                           "acc_half"))
        rule(ErrorCode.BAD_FLAGS, gemm(early(d["outer_m"] > 1, "outer_m") |
                                       early(d["need_splitk"] > 1, "need_splitk")) |
             early((d["b_mode"] > 1) & ~(is_dw & (dw_kern <= max_kern)) if dw else
                   d["b_mode"] > 1, "b_mode"))
        row_any = early(Cat(*(d[name] != 0 for name in ROW_FIELDS)).any(), "row_any")
        if rows_built:
            # (a depthwise record's are in its unused fields)
            rule(ErrorCode.BAD_FLAGS, gemm(~row_on & row_any))
        else:
            rule(ErrorCode.BAD_FLAGS, row_any)
        if dw:
            # spec.desc._check_depthwise: G, the buffer and accumulator halves, unused fields
            rule(ErrorCode.BAD_PARTITION_M, is_dw & ~(dim_ok["partition_m"] &
                                                      early(~K[0] | (pm == 1) |
                                                            ~dw_s2,
                                                            "dw_groups")))
            rule(ErrorCode.BUF_A_OVERFLOW, is_dw & (dw_words_a > cfg.buf_a_depth // 2))
            rule(ErrorCode.BUF_B_OVERFLOW, is_dw & (dw_words_b > cfg.buf_b_depth // 2))
            rule(ErrorCode.ACC_OVERFLOW, is_dw & (dw_acc_need > d["acc_buffer_needed"]))
            rule(ErrorCode.BAD_FLAGS, is_dw & dw_unused)
            # the odd rows / columns of an even side only (spec.desc._check_depthwise)
            rule(ErrorCode.BAD_FLAGS, is_dw & early((dw_odd[0] & K[0]) | (dw_odd[1] & N[0]),
                                                    "dw_odd_side"))
        # (gn_all + 1 > entries as gn_all >= entries: no adder before the compare)
        rule(ErrorCode.BAD_TABLE, is_conv & (
            early(K > cfg.conv_offset_entries, "k_offsets") |
            early(d["run_count"] == 0, "no_runs") |
            early(d["run_count"] > cfg.conv_run_entries, "runs") |
            early(gn_all >= cfg.conv_group_entries, "groups")))
        # B / C in the local buffer (spec.desc.local_problem): whole rows, dense B, int8 C
        b_local = early((d["b_addr"] >= dram) & (d["b_addr"][:lc] == 0) &
                        (d["b_stride"][:lc] == 0), "b_local")
        c_local = early((d["c_addr"] >= dram) & (d["c_addr"][:lc] == 0) &
                        (d["c_stride"][:lc] == 0), "c_local")
        rule(ErrorCode.BAD_ADDRESS, gemm(a_hi > dram))
        rule(ErrorCode.BAD_ADDRESS, gemm((b_hi > dram) & ~(
            b_local & (b_hi <= loc_end) & ~is_conv)))
        rule(ErrorCode.BAD_ADDRESS, gemm((c_hi > dram) & ~(
            c_local & (c_hi <= loc_end) & int8_out)))
        if rows_built:
            rule(ErrorCode.BAD_ADDRESS, gemm(~row_on & early(d["c_stride"] < n_bytes,
                                                             "c_stride")))
            # the row store: memory only, rows and C rows apart
            rule(ErrorCode.BAD_ADDRESS, gemm(row_on & (
                (c_hi > dram) | (d["c_stride"] < row_span) |
                early(d["c_row_pitch"] < q_bytes, "row_pitch"))))
        else:
            rule(ErrorCode.BAD_ADDRESS, gemm(early(d["c_stride"] < n_bytes, "c_stride")))
        rule(ErrorCode.BAD_ADDRESS, gemm((d["a_addr"] < c_hi) & (d["c_addr"] < a_hi)))
        rule(ErrorCode.BAD_ADDRESS, gemm((d["b_addr"] < c_hi) & (d["c_addr"] < b_hi)))
        if dw:
            # dense NCHW maps, the weight arrays, everything in memory, C apart from A and B
            rule(ErrorCode.BAD_ADDRESS, is_dw & ((d["b_stride"] != p_dkn) |
                                                 (d["c_stride"] != dw_c_pitch)))
            rule(ErrorCode.BAD_ADDRESS, is_dw & (
                early((d["a_addr"][:2] != 0) | (d["a_stride"][:2] != 0), "dw_a_odd") |
                early(d["a_stride"] < (M << 2), "dw_a_stride")))
            rule(ErrorCode.BAD_ADDRESS, is_dw & (early(dw_a_hi > dram, "dw_a_hi") |
                                                 (dw_b_hi > dram) | (dw_c_hi > dram)))
            rule(ErrorCode.BAD_ADDRESS, is_dw & (d["a_addr"] < dw_c_hi) &
                 early(d["c_addr"] < dw_a_hi, "dw_c_under_a"))
            rule(ErrorCode.BAD_ADDRESS, is_dw & (d["b_addr"] < dw_c_hi) &
                 (d["c_addr"] < dw_b_hi))
        for (lo, hi), name in zip(tables, ("off", "run", "grp")):
            rule(ErrorCode.BAD_ADDRESS, is_conv & (early(hi > dram, f"{name}_hi") | (
                (lo < c_hi) & early(d["c_addr"] < hi, f"c_under_{name}"))))
        # layer record rules (spec.record.check_record)
        rule(ErrorCode.BAD_LAYER, early(L["op_kind"] >= len(OpKind), "op_kind") |
             early(L["out_format"] >= len(OutFormat), "out_format") |
             early(L["post_mode"] >= len(PostMode), "post_mode") |
             early(L["bias_present"] > 1, "bias_present"))
        rule(ErrorCode.BAD_LAYER, ~early(int8_word(L["out_zero_point"]), "zero_point_int8") |
             ~early(int8_word(L["act_min"]), "act_min_int8") |
             ~early(int8_word(L["act_max"]), "act_max_int8") |
             ~early(int8_word(L["pad_value"]), "pad_value_int8"))
        rule(ErrorCode.BAD_LAYER, early(L["pad_value"] != 0, "padded") & ~is_dw)
        rule(ErrorCode.BAD_LAYER, early(L["act_min"][:8].as_signed() >
                                        L["act_max"][:8].as_signed(), "act_range"))
        rule(ErrorCode.BAD_LAYER, (early(L["op_kind"] == OpKind.CONV, "op_conv") != is_conv) |
             (early(L["op_kind"] == OpKind.DEPTHWISE, "op_dw") != is_dw) |
             ((post | is_dw) & early(M > cfg.quant_entries, "m_quant")))
        rule(ErrorCode.BAD_WINDOW, early(win_lo >= win_hi, "win_empty"))
        rule(ErrorCode.BAD_WINDOW, early(win_hi > dram, "win_hi") &
             ~early((win_lo >= dram) & (win_hi <= loc_end), "win_local"))
        rule(ErrorCode.BAD_WINDOW, early(d["c_addr"] < win_lo, "c_under_win"))
        rule(ErrorCode.BAD_WINDOW, gemm(w_hi > win_hi))
        if dw:
            rule(ErrorCode.BAD_WINDOW, is_dw & (dw_c_hi > win_hi))
        # [lo, hi) overlaps the image: lo < img_hi and img_lo < hi
        rule(ErrorCode.BAD_WINDOW, early(win_lo < img_hi, "win_lo_image") &
             early(img_lo < win_hi, "win_hi_image"))
        rule(ErrorCode.BAD_WINDOW, imaged & (
            early(stats[:log2(SECTION_ALIGN_BYTES)] != 0, "stats_odd") |
            early(stats_hi > dram, "stats_hi")))
        rule(ErrorCode.BAD_WINDOW, imaged & early(stats < img_hi, "stats_lo_image") &
             early(img_lo < stats_hi, "stats_hi_image"))
        # image runs: A inside the image (its loads are checked against a_crc), B and the
        # tables outside its weights part [img_wt, img_hi) (the header's CRC covers [img_lo,
        # img_wt)): [lo, hi) reads it when lo < img_hi and img_wt < hi
        a_from_image = early(img_lo <= d["a_addr"], "a_image")
        b_under_image = early(d["b_addr"] < img_hi, "b_image")
        rule(ErrorCode.BAD_WINDOW, gemm(imaged & ~(a_from_image & (a_hi <= img_hi))))
        rule(ErrorCode.BAD_WINDOW, gemm(imaged & b_under_image & (img_wt < b_hi)))
        if dw:
            # a depthwise layer's weights are parameter arrays, under the header's CRC
            rule(ErrorCode.BAD_WINDOW, is_dw & imaged & ~(
                a_from_image & early(dw_a_hi <= img_wt, "dw_a_hi_weights")))
            rule(ErrorCode.BAD_WINDOW, is_dw & imaged & b_under_image & (img_wt < dw_b_hi))
        for (lo, hi), name in zip(tables, ("off", "run", "grp")):
            rule(ErrorCode.BAD_WINDOW, imaged & is_conv & early(lo < img_hi, f"{name}_image") &
                 early(img_wt < hi, f"{name}_weights"))
        for i, name in enumerate(PARAM_ARRAYS):
            lo, hi = L[f"{name}_addr"], param_hi[i]
            rule(ErrorCode.BAD_WINDOW, q_need[i] & (
                early(lo[:log2(PARAM_ALIGN)] != 0, f"{name}_odd") |
                early(hi > dram, f"{name}_hi")))
            rule(ErrorCode.BAD_WINDOW, q_need[i] & imaged & ~(
                early(img_lo <= lo, f"{name}_image") & early(hi <= img_wt, f"{name}_weights")))

        # -- one bit per code, then the priority of spec.desc.check -----------------------------
        order = [ErrorCode.BAD_SHAPE, ErrorCode.BAD_PARTITION_M, ErrorCode.BAD_PARTITION_N,
                 ErrorCode.BAD_PARTITION_K, ErrorCode.BAD_TILE, ErrorCode.BUF_A_OVERFLOW,
                 ErrorCode.BUF_B_OVERFLOW, ErrorCode.ACC_OVERFLOW, ErrorCode.BAD_FLAGS,
                 ErrorCode.BAD_TABLE, ErrorCode.BAD_ADDRESS, ErrorCode.BAD_LAYER,
                 ErrorCode.BAD_WINDOW]
        assert set(order) == {code for code, got in bits.items() if got}, "a rule has no order"
        failing = Signal(len(order))
        failed = Signal()                   # their OR, registered too (the launch decision)
        with m.If(stage(DIGITS + 3, DIGITS + 3, "codes")):
            per_code = [Cat(*bits[code]).any() for code in order]
            m.d.sync += [failing.eq(Cat(*per_code)), failed.eq(Cat(*per_code).any())]
        code = Const(0, 8)
        for i, err in reversed(list(enumerate(order))):
            code = Mux(failing[i], err.value, code)
        m.d.comb += [self.code.eq(code), self.failed.eq(failed)]
        return m
