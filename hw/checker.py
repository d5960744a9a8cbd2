"""RecordChecker: the sequencer's descriptor and layer-record checks, pipelined for the clock."""

from amaranth import *
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from spec.config import AccelConfig
from spec.desc import B_MODE_DEPTHWISE, DEPTHWISE_UNUSED, DESC_FIELDS, MAX_DIM, ErrorCode
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

__all__ = ["RecordChecker", "LAYER_FIELDS", "PARAM_ARRAYS", "record_members"]


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
                               one 56-bit add per cycle each (most significant digit first)
    DIGITS + 1                 extents: ``base + product``, the bases registered meanwhile
    DIGITS + 2                 every rule's compares, each in its own register
    DIGITS + 3                 one bit per error code (the OR of its compares)
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

        def reg(expr, width=64, name=None):
            """``expr`` registered every cycle: valid from the second cycle after ``start``,
            long before the products (the inputs hold still)."""
            sig = Signal(width, name=name)
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
        def product(factor, value, name):
            """``factor x value``, final from cycle DIGITS + 1 until the next ``start``. The
            multiplier register follows ``factor`` while the checker is idle and the first step
            starts the sum from 0, so ``start`` (decoded from the sequencer's state) reaches
            only flags, not the products' ~1,000 flip-flops."""
            mr = Signal(2 * DIGITS, name=f"{name}_mr")
            acc = Signal(2 * DIGITS + 32, name=name)
            x3 = reg(value + (value << 1), 34, name=f"{name}_x3")
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
        p_mk = product(pm, pk, "p_mk")
        p_kn = product(pk, pn, "p_kn")
        p_mn = product(pm, pn, "p_mn")
        dw = bool(cfg.dw_mesh)                  # the depthwise rules (b_mode 2) are built
        if dw:
            p_dgk = product(pm, K, "p_dgk")         # G h: the strip step's rows
            p_dkn = product(K, N, "p_dkn")          # h w: a channel's map
            p_dmb = product(M, d["b_stride"], "p_dmb")
            p_dmc = product(M, d["c_stride"], "p_dmc")
        ab = cfg.dram_addr_bits
        m.d.comb += [self.a_kstep.eq(p_ak[:ab]), self.b_kstep.eq(p_bk[:ab]),
                     self.c_mstep.eq(p_cm[:ab])]

        # -- bases (registered while the products run) ----------------------------------------
        is_conv = reg(d["b_mode"] == 1, 1)
        is_dw = reg(d["b_mode"] == B_MODE_DEPTHWISE, 1, name="is_dw") if dw else Const(0, 1)

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
        beat_b = cfg.b_beat_bytes
        tables = [(d["off_addr"], reg(d["off_addr"] + ((K - 1) << 2) + beat_b)),
                  (d["run_addr"], reg(d["run_addr"] + ((d["run_count"] - 1) << 3) + 4 + beat_b)),
                  (d["grp_addr"], reg(d["grp_addr"] + (gn_all << 2) + beat_b))]
        stats = L["stats_addr"]
        stats_hi = reg(stats + STATS_BYTES)
        param_hi = [reg(L[f"{name}_addr"] + (M << 2), name=f"{name}_hi") for name in PARAM_ARRAYS]

        # -- the record, copied: from here on (the extents and the rules, DIGITS + 1 cycles
        # after `start` and later) every field is read from a register of the checker's own,
        # loaded every cycle. The sequencer's record latch is placed for its other readers; a
        # compare of a latched field into a rule's register was a 12.3 ns path of the whole 8x8
        # (session 21, 5d65dd2 seed 2). Unread copies are removed by synthesis.
        d = {name: reg(v, len(v), name=f"rec_{name}") for name, v in d.items()}
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
        with m.If(extents):
            m.d.sync += [a_hi.eq(a_base + p_a), b_hi.eq(Mux(is_conv, b_conv_hi, b_base + p_b)),
                         c_hi.eq(c_base + p_c), w_hi.eq(w_base + p_c)]
            if cfg.acc_bytes & (cfg.acc_bytes - 1) == 0:
                m.d.sync += acc_need.eq(p_mn << log2(cfg.acc_bytes))
            else:
                m.d.sync += acc_need.eq(p_mn * cfg.acc_bytes)

        if dw:
            dw_a_hi = reg(d["a_addr"] + (d["a_stride"] << 1) + (M << 2), name="dw_a_hi")
            dw_b_hi, dw_c_hi = Signal(64, name="dw_b_hi"), Signal(64, name="dw_c_hi")
            dw_words_a, dw_words_b, dw_acc_need = (Signal(64, name=f"dw_{n}")
                                                   for n in ("words_a", "words_b", "acc_need"))
            with m.If(extents):
                m.d.sync += [dw_b_hi.eq(d["b_addr"] + p_dmb), dw_c_hi.eq(d["c_addr"] + p_dmc),
                             dw_words_a.eq(p_dgk >> 1), dw_words_b.eq((p_dgk + 1) >> 1),
                             dw_acc_need.eq((p_dgk + R) << log2(cfg.c_beat_bytes))]
            dw_c_pitch = reg(Mux(int8_out, p_dkn, p_dkn << 2), name="dw_c_pitch")
            dw_unused = reg(Cat(*(d[name] != 0 for name in DEPTHWISE_UNUSED)).any(), 1,
                            name="dw_unused")

        # -- rules: every compare registered on its own ---------------------------------------
        compares = stage(DIGITS + 2, DIGITS + 2, "compares")
        bits = {code: [] for code in ErrorCode}

        def rule(code, cond):
            bit = Signal(name=f"bad_{code.name.lower()}_{len(bits[code])}")
            with m.If(compares):
                m.d.sync += bit.eq(cond)
            bits[code].append(bit)

        def in_dim(v):
            return (v >= 1) & (v <= MAX_DIM)

        def int8_word(w):
            return (w[7:] == 0) | (w[7:] == (1 << 25) - 1)

        def in_image(lo, hi):
            return (img_lo <= lo) & (hi <= img_hi)

        def overlaps_image(lo, hi):
            return (lo < img_hi) & (img_lo < hi)

        def reads_weights(lo, hi):
            """[lo, hi) overlaps the image's weights part [img_wt, img_hi)."""
            return (lo < img_hi) & (img_wt < hi)

        dram, loc_end = cfg.dram_bytes, cfg.local_base + cfg.local_buf_bytes
        b_loc, c_loc = d["b_addr"] >= dram, d["c_addr"] >= dram
        imaged = img_hi != 0
        win_lo, win_hi = L["out_window_lo"], L["out_window_hi"]

        rule(ErrorCode.BAD_SHAPE, ~(in_dim(M) & in_dim(K) & in_dim(N)))
        rule(ErrorCode.BAD_PARTITION_M, gemm(~(in_dim(pm) & (pm[:lr] == 0))))
        rule(ErrorCode.BAD_PARTITION_N, gemm(~(in_dim(pn) & (pn[:lc] == 0))))
        rule(ErrorCode.BAD_PARTITION_K, gemm(~in_dim(pk) | ((d["need_splitk"] == 0) & (pk < K))))
        # (the bounds registered first: a compare, a select and a compare in one cycle were a
        # 12.1 ns path on the ECP5)
        tile_m_max = reg(Mux(pm > R, pm, R), 32, name="tile_m_max")
        tile_n_max = reg(Mux(pn > C, pn, C), 32, name="tile_n_max")
        rule(ErrorCode.BAD_TILE, gemm((d["tile_m"] < R) | (d["tile_m"] > tile_m_max) |
                                      (d["tile_m"][:lr] != 0)))
        rule(ErrorCode.BAD_TILE, gemm((d["tile_n"] < C) | (d["tile_n"] > tile_n_max) |
                                      (d["tile_n"][:lc] != 0)))
        rule(ErrorCode.BUF_A_OVERFLOW, gemm(p_mk > cfg.buf_a_half_bytes))
        rule(ErrorCode.BUF_B_OVERFLOW, gemm(p_kn > cfg.buf_b_half_bytes))
        rule(ErrorCode.ACC_OVERFLOW, gemm(acc_need > d["acc_buffer_needed"]))
        rule(ErrorCode.ACC_OVERFLOW, d["acc_buffer_needed"] > cfg.acc_half_bytes)
        rule(ErrorCode.BAD_FLAGS, gemm((d["outer_m"] > 1) | (d["need_splitk"] > 1)) |
             (d["b_mode"] > (B_MODE_DEPTHWISE if dw else 1)))
        if dw:
            # spec.desc._check_depthwise: G, the buffer and accumulator halves, unused fields
            rule(ErrorCode.BAD_PARTITION_M, is_dw & ~(in_dim(pm) & (~K[0] | (pm == 1))))
            rule(ErrorCode.BUF_A_OVERFLOW, is_dw & (dw_words_a > cfg.buf_a_depth // 2))
            rule(ErrorCode.BUF_B_OVERFLOW, is_dw & (dw_words_b > cfg.buf_b_depth // 2))
            rule(ErrorCode.ACC_OVERFLOW, is_dw & (dw_acc_need > d["acc_buffer_needed"]))
            rule(ErrorCode.BAD_FLAGS, is_dw & dw_unused)
        rule(ErrorCode.BAD_TABLE, is_conv & ((K > cfg.conv_offset_entries) |
                                             (d["run_count"] == 0) |
                                             (d["run_count"] > cfg.conv_run_entries) |
                                             (gn_all + 1 > cfg.conv_group_entries)))
        # B / C in the local buffer (spec.desc.local_problem): whole rows, dense B, int8 C
        rule(ErrorCode.BAD_ADDRESS, gemm(a_hi > dram))
        rule(ErrorCode.BAD_ADDRESS, gemm((b_hi > dram) & ~(
            b_loc & (b_hi <= loc_end) & ~is_conv & (d["b_addr"][:lc] == 0) &
            (d["b_stride"][:lc] == 0))))
        rule(ErrorCode.BAD_ADDRESS, gemm((c_hi > dram) & ~(
            c_loc & (c_hi <= loc_end) & int8_out & (d["c_addr"][:lc] == 0) &
            (d["c_stride"][:lc] == 0))))
        rule(ErrorCode.BAD_ADDRESS, gemm(d["c_stride"] < n_bytes))
        rule(ErrorCode.BAD_ADDRESS, gemm((d["a_addr"] < c_hi) & (d["c_addr"] < a_hi)))
        rule(ErrorCode.BAD_ADDRESS, gemm((d["b_addr"] < c_hi) & (d["c_addr"] < b_hi)))
        if dw:
            # dense NCHW maps, the weight arrays, everything in memory, C apart from A and B
            rule(ErrorCode.BAD_ADDRESS, is_dw & ((d["b_stride"] != p_dkn) |
                                                 (d["c_stride"] != dw_c_pitch)))
            rule(ErrorCode.BAD_ADDRESS, is_dw & ((d["a_addr"][:2] != 0) |
                                                 (d["a_stride"][:2] != 0) |
                                                 (d["a_stride"] < (M << 2))))
            rule(ErrorCode.BAD_ADDRESS, is_dw & ((dw_a_hi > dram) | (dw_b_hi > dram) |
                                                 (dw_c_hi > dram)))
            rule(ErrorCode.BAD_ADDRESS, is_dw & (d["a_addr"] < dw_c_hi) &
                 (d["c_addr"] < dw_a_hi))
            rule(ErrorCode.BAD_ADDRESS, is_dw & (d["b_addr"] < dw_c_hi) &
                 (d["c_addr"] < dw_b_hi))
        for lo, hi in tables:
            rule(ErrorCode.BAD_ADDRESS, is_conv & ((hi > dram) |
                                                   ((lo < c_hi) & (d["c_addr"] < hi))))
        # layer record rules (spec.record.check_record)
        rule(ErrorCode.BAD_LAYER, (L["op_kind"] >= len(OpKind)) |
             (L["out_format"] >= len(OutFormat)) | (L["post_mode"] >= len(PostMode)) |
             (L["bias_present"] > 1))
        rule(ErrorCode.BAD_LAYER, ~int8_word(L["out_zero_point"]) | ~int8_word(L["act_min"]) |
             ~int8_word(L["act_max"]) | ~int8_word(L["pad_value"]))
        rule(ErrorCode.BAD_LAYER, (L["pad_value"] != 0) & ~is_dw)
        rule(ErrorCode.BAD_LAYER,
             L["act_min"][:8].as_signed() > L["act_max"][:8].as_signed())
        rule(ErrorCode.BAD_LAYER, ((L["op_kind"] == OpKind.CONV) != is_conv) |
             ((L["op_kind"] == OpKind.DEPTHWISE) != is_dw) |
             ((post | is_dw) & (M > cfg.quant_entries)))
        rule(ErrorCode.BAD_WINDOW, win_lo >= win_hi)
        rule(ErrorCode.BAD_WINDOW, (win_hi > dram) & ~((win_lo >= dram) & (win_hi <= loc_end)))
        rule(ErrorCode.BAD_WINDOW, d["c_addr"] < win_lo)
        rule(ErrorCode.BAD_WINDOW, gemm(w_hi > win_hi))
        if dw:
            rule(ErrorCode.BAD_WINDOW, is_dw & (dw_c_hi > win_hi))
        rule(ErrorCode.BAD_WINDOW, overlaps_image(win_lo, win_hi))
        rule(ErrorCode.BAD_WINDOW, imaged & ((stats[:log2(SECTION_ALIGN_BYTES)] != 0) |
                                             (stats_hi > dram)))
        rule(ErrorCode.BAD_WINDOW, imaged & overlaps_image(stats, stats_hi))
        # image runs: A inside the image (its loads are checked against a_crc), B and the
        # tables outside its weights part (the header's CRC covers [img_lo, img_wt))
        rule(ErrorCode.BAD_WINDOW, gemm(imaged & ~in_image(d["a_addr"], a_hi)))
        rule(ErrorCode.BAD_WINDOW, gemm(imaged & reads_weights(d["b_addr"], b_hi)))
        if dw:
            # a depthwise layer's weights are parameter arrays, under the header's CRC
            rule(ErrorCode.BAD_WINDOW, is_dw & imaged & ~((img_lo <= d["a_addr"]) &
                                                          (dw_a_hi <= img_wt)))
            rule(ErrorCode.BAD_WINDOW, is_dw & imaged & reads_weights(d["b_addr"], dw_b_hi))
        for lo, hi in tables:
            rule(ErrorCode.BAD_WINDOW, imaged & is_conv & reads_weights(lo, hi))
        for i, name in enumerate(PARAM_ARRAYS):
            lo, hi = L[f"{name}_addr"], param_hi[i]
            rule(ErrorCode.BAD_WINDOW, q_need[i] & ((lo[:log2(PARAM_ALIGN)] != 0) | (hi > dram)))
            rule(ErrorCode.BAD_WINDOW, q_need[i] & imaged & ~((img_lo <= lo) & (hi <= img_wt)))

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
