"""Load and store engines: 2-D strided transfers between memory ports and on-chip buffers."""

from amaranth import *
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from spec.config import AccelConfig
from spec.desc import DIM_BITS

from .ports import ReadPort, WritePort
from .postproc import PostProc

__all__ = ["load_command_members", "LoadEngine", "StoreEngine"]


def _grid_members(ab: int) -> dict:
    """The members both engines share: ``start``/``busy`` and a ``rows`` x ``groups`` grid of
    beats from ``addr`` (``stride`` bytes per row, ``elems`` valid elements per row)."""
    return {"start": In(1), "busy": Out(1), "p_addr": In(ab), "p_stride": In(32),
            "p_rows": In(DIM_BITS), "p_groups": In(DIM_BITS), "p_elems": In(DIM_BITS)}


def load_command_members(ab: int, depth: int) -> dict:
    """A :class:`LoadEngine` command as the engine sees it (``start``, ``busy`` and the
    ``p_*`` parameters, ``depth`` rows in its buffer); ``In(Signature(...))`` drives one."""
    return {**_grid_members(ab), "p_buf_base": In(range(depth)), "p_buf_gstride": In(DIM_BITS)}


def _byte_mask_parts(valid_bytes: Value, beat_bytes: int) -> tuple:
    """:func:`_byte_mask` up to its per-byte step: ``(negative, big, low)``, which a pipeline
    can register between the steps (:func:`_byte_mask_from_parts` finishes it).

    ``negative``: the sign; ``big``: ``valid_bytes >= 2**low_bits`` (every byte: one shared test
    of the bits above the beat); ``low``: the low ``low_bits`` bits, the bits of a byte index."""
    low_bits = (beat_bytes - 1).bit_length()          # the low bits hold 0 .. 2**low_bits - 1
    value = Value.cast(valid_bytes)
    if len(value) < low_bits + 2:                      # narrow: widened by its sign (or 0)
        pad = low_bits + 2 - len(value)
        value = (Cat(value, value[-1].replicate(pad)).as_signed() if value.shape().signed
                 else Cat(value, Const(0, pad)))
    negative = value[-1] if value.shape().signed else Const(0, 1)
    big = ~negative & value[low_bits:].any()           # >= 2**low_bits >= beat_bytes
    return negative, big, value[:low_bits]


def _byte_mask_from_parts(negative: Value, big: Value, low: Value, beat_bytes: int) -> Value:
    """The byte mask from :func:`_byte_mask_parts`: byte ``b`` is set when ``big``, or when
    not ``negative`` and ``low > b``. (With ``big`` a constant 0, the mask of the low bits
    alone: ``big`` can join it later, as an OR into every byte.)"""
    top = (1 << len(low)) - 1                          # no low value exceeds it: only `big`
    return Cat(*(~negative & (big | (low > b)) if b < top else big for b in range(beat_bytes)))


def _byte_mask(valid_bytes: Value, beat_bytes: int) -> Value:
    """Bit ``b`` set when ``b < valid_bytes`` (``valid_bytes`` may be negative or > beat).

    Built as one shared test of the bits above the beat (negative, or at least the next power
    of two) and a compare of the low bits per byte (:func:`_byte_mask_parts`, then
    :func:`_byte_mask_from_parts`), rather than ``beat_bytes`` compares of the whole value
    (which synthesis turns into as many carry chains)."""
    return _byte_mask_from_parts(*_byte_mask_parts(valid_bytes, beat_bytes), beat_bytes)


def _count_down_flags(high: Value) -> tuple[Value, Value]:
    """``(negative, big)`` (:func:`_byte_mask_parts`) of a byte count a beat less than one whose
    bits from the beat's index bits up are ``high`` (signed: the count in whole beats, ``H``):
    negative when ``H <= 0``, big when ``H >= 2``. Kept as flip-flops beside a count that steps
    down by a beat, they make its next mask a select of registers (:func:`_mask_select`)."""
    return high[-1] | (high == 0), ~high[-1] & high[1:].any()


def _mask_select(negative: Value, big: Value, tail: Value) -> Value:
    """The byte mask of a count from its flags and ``tail`` (the mask of its low bits alone,
    ``_byte_mask_from_parts(0, 0, low, beat)``): none, every byte, or the tail."""
    return Mux(negative, 0, Mux(big, (1 << len(tail)) - 1, tail))


class LoadEngine(wiring.Component):
    """Copies a ``rows`` x ``groups`` grid of beats from memory into an operand buffer.

    Beat ``(r, g)`` is read from ``addr + r*stride + g*beat_bytes`` and written to buffer row
    ``buf_base + g*buf_gstride + r``; bytes at or past ``elems`` (counted from the start of row
    ``r``) are written as zero, which zero-fills the ragged edge of a matrix. Requests are issued
    back to back (one per cycle when the port allows); ``busy`` falls in the cycle after the last
    response was written. Parameters are sampled on ``start``. Built with ``group_addr``, the
    groups are ``p_gaddr`` bytes apart instead of ``beat_bytes`` (beat ``(r, g)`` at ``addr +
    r*stride + g*gaddr``; the byte mask still counts ``g*beat_bytes`` from the row's start):
    a depthwise stride-2 step's two classes of rows into one buffer
    (:class:`spec.dwmesh.BlockLoad`). Built with ``deinterleave``, a load with ``p_dil``
    *deinterleaves* (:attr:`spec.dwmesh.BlockLoad.dwords`, a depthwise layer in row and column
    phases): ``p_groups`` (even) counts beats a row, two a *cell*, cell ``c`` at ``addr +
    r*stride + c*gaddr`` (its second beat ``beat_bytes`` after its first; the byte mask counts
    on from the row's start, a beat a beat), and a cell's ``2 beat_bytes`` bytes go to two
    buffer rows, their even bytes to row ``buf_base + c*buf_gstride + r`` (written with the
    cell's second beat) and their odd bytes to that plus ``p_buf_dstride`` (a cycle later, when
    the next cell's first beat, which writes nothing, arrives): one write a cycle. ``busy`` then
    falls a cycle after the last odd-byte row is written.

    Parameters
    ----------
    cfg : AccelConfig
        Uses ``dram_addr_bits``.
    beat_bytes : int
        Bytes of one buffer row / port beat.
    depth : int
        Rows of the target buffer.
    group_addr : bool
        Build ``p_gaddr`` (configs with ``dw_mesh``).
    deinterleave : bool
        Build ``p_dil`` and ``p_buf_dstride`` (configs with ``dw_mesh``; with ``group_addr``).

    Members
    -------
    start : ``In(1)``; busy : ``Out(1)``
    p_addr, p_stride, p_rows, p_groups, p_elems, p_buf_base, p_buf_gstride : ``In(...)``
    p_gaddr : ``In(DIM_BITS)`` (only with ``group_addr``)
    p_dil : ``In(1)``, p_buf_dstride : ``In(DIM_BITS)`` (only with ``deinterleave``)
    mem : ``Out(ReadPort.Signature)``
    w_addr, w_data, w_en : ``Out(...)`` the buffer write port
    """

    def __init__(self, cfg: AccelConfig, *, beat_bytes: int, depth: int,
                 group_addr: bool = False, deinterleave: bool = False):
        if deinterleave and not group_addr:
            raise ValueError("LoadEngine: deinterleave needs group_addr (its cells are a "
                             "group's address step apart)")
        self._cfg = cfg
        self._beat = beat_bytes
        self._depth = depth
        self._group_addr = group_addr
        self._dil = deinterleave
        ab = cfg.dram_addr_bits
        super().__init__({
            **load_command_members(ab, depth),
            **({"p_gaddr": In(DIM_BITS)} if group_addr else {}),
            **({"p_dil": In(1), "p_buf_dstride": In(DIM_BITS)} if deinterleave else {}),
            "mem": Out(ReadPort.Signature(addr_bits=ab, data_bytes=beat_bytes)),
            "w_addr": Out(range(depth)),
            "w_data": Out(8 * beat_bytes),
            "w_en": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        W = self._beat
        ab = self._cfg.dram_addr_bits

        stride = Signal(32)
        gstride = Signal(DIM_BITS)
        # the address step from one group to the next
        gaddr = Signal(DIM_BITS, name="gaddr") if self._group_addr else W
        if self._group_addr:
            with m.If(self.start):
                m.d.sync += gaddr.eq(self.p_gaddr)
        # deinterleaving: a cell's second beat a beat on, the next cell gaddr - W further
        dil = Signal(name="dil") if self._dil else Const(0, 1)
        # (negative for maps narrower than a beat: the next cell starts inside this one)
        gaddr_mw = Signal(signed(DIM_BITS + 1), name="gaddr_mw")
        dstride = Signal(DIM_BITS, name="dil_dstride")
        if self._dil:
            with m.If(self.start):
                m.d.sync += [dil.eq(self.p_dil), gaddr_mw.eq(self.p_gaddr - W),
                             dstride.eq(self.p_buf_dstride)]
        # request side
        issuing = Signal()
        rq_row = Signal(DIM_BITS)
        rq_g = Signal(DIM_BITS)
        rq_row_addr = Signal(ab)
        rq_addr = Signal(ab)
        # response side
        rs_rem = Signal(DIM_BITS)                   # rows after the current one
        rs_g = Signal(DIM_BITS)
        # the buffer row written by the beat (its group's base + the row), kept as a register
        # (`rs_waddr`) with the next row's first group's (`rs_next_row`): the add in front of
        # the buffer's address and bank-select write enables was a 11.7 ns path of the whole
        # 8x8 (session 19, runner port select -> buffer B's WEA through that adder's outputs)
        rs_waddr = Signal(range(self._depth))
        rs_next_row = Signal(range(self._depth))
        # valid bytes from the next beat's first byte (this beat's less a beat), and a row's
        # second beat's: the next mask is a decode of a register, not of a subtract (from
        # this beat's count it was a 10.0 ns path of the whole 8x8, session 22)
        rs_next_left = Signal(signed(DIM_BITS + 2))
        elems_w = Signal(signed(DIM_BITS + 2))

        # "last group of the row" / "last row" flags, registered with the counters they describe
        # (so the counters' compares are not on the path to the address registers)
        one_group = Signal()
        rq_glast, rq_rlast, rs_glast, rs_rlast = (Signal(name=n) for n in
                                                  ("rq_glast", "rq_rlast", "rs_glast", "rs_rlast"))
        # `groups - 2` and `rows - 2`, registered at the start: "the next beat is the row's
        # last" is then an equality of two registers, `g == groups - 2`, not an add and a
        # compare (`rq_g + 2 == groups`, two carry chains: a 10.4 ns path of the whole 8x8,
        # ad670c5 seed 3, session 24). They wrap for one group / one row, where the flags come
        # from `one_group` / the start instead.
        groups_m2, rows_m2 = Signal(DIM_BITS, name="groups_m2"), Signal(DIM_BITS, name="rows_m2")
        with m.If(self.start):
            m.d.sync += [
                self.busy.eq(1), issuing.eq(1),
                groups_m2.eq(self.p_groups - 2), rows_m2.eq(self.p_rows - 2),
                stride.eq(self.p_stride),
                gstride.eq(self.p_buf_gstride), elems_w.eq(self.p_elems - W),
                rq_row.eq(0), rq_g.eq(0), rq_row_addr.eq(self.p_addr), rq_addr.eq(self.p_addr),
                rs_rem.eq(self.p_rows - 1), rs_g.eq(0), rs_waddr.eq(self.p_buf_base),
                rs_next_row.eq(self.p_buf_base + 1),
                rs_next_left.eq(self.p_elems - W),
                one_group.eq(self.p_groups == 1),
                rq_glast.eq(self.p_groups == 1), rs_glast.eq(self.p_groups == 1),
                rq_rlast.eq(self.p_rows == 1), rs_rlast.eq(self.p_rows == 1),
            ]

        m.d.comb += [self.mem.addr.eq(rq_addr), self.mem.valid.eq(issuing)]
        with m.If(issuing & self.mem.ready):
            with m.If(rq_glast):
                m.d.sync += [rq_g.eq(0), rq_row.eq(rq_row + 1), rq_glast.eq(one_group),
                             rq_rlast.eq(rq_row == rows_m2),
                             rq_row_addr.eq(rq_row_addr + stride),
                             rq_addr.eq(rq_row_addr + stride)]
                with m.If(rq_rlast):
                    m.d.sync += issuing.eq(0)
            with m.Else():
                m.d.sync += [rq_g.eq(rq_g + 1), rq_glast.eq(rq_g == groups_m2),
                             rq_addr.eq(rq_addr + (Mux(dil, Mux(rq_g[0], gaddr_mw, W), gaddr)
                                                   if self._dil else gaddr))]

        # The beat's byte mask, a register kept with the counts (the mask decoded from the
        # count in front of the buffer's write data was an 11.6 ns path of the whole 8x8, 107
        # endpoints in buffer B and the parameter loader's check register).
        #
        # The next beat's mask is _byte_mask(rs_next_left): byte b is set when the count is
        # not negative and either at least a beat (`big`) or its low bits exceed b. A beat is
        # a power of two bytes, so the low bits never change in a load (the count steps by a
        # beat; a row restarts it at elems - W): their per-byte compare is `tail`, decoded
        # once. The sign and `big` of the count are flip-flops kept with it (`nl_neg`,
        # `nl_big`; for the next value, compares of its high part H: H <= 0, H >= 2), so the
        # mask loads a select of registers (decoding the count there put a 20-bit OR tree
        # and the port's `rvalid` in one path: 11.6 ns of the whole 8x8, ad670c5 seed 3).
        #
        # The first masks are decoded in the cycle after the start, from `elems` registered
        # there: the first response comes two cycles after the start at the earliest (the
        # first request goes out in the next cycle, a port answers a cycle or more later).
        # Decoded from `p_elems` in the start cycle it was a 10.1 ns path of the whole 8x8
        # (the parameter loader's command select -> load B's first mask, ad670c5 seed 2).
        assert W & (W - 1) == 0, "a beat is a power of two bytes"
        low_bits = (W - 1).bit_length()
        mask, first_mask = Signal(W, name="rs_mask"), Signal(W, name="rs_first_mask")
        tail = Signal(W, name="rs_tail")
        nl_neg, nl_big = Signal(name="rs_nl_neg"), Signal(name="rs_nl_big")
        w_neg, w_big = Signal(name="rs_w_neg"), Signal(name="rs_w_big")     # elems_w's
        elems, started = Signal(DIM_BITS, name="rs_elems"), Signal(name="rs_started")
        m.d.sync += started.eq(self.start)
        with m.If(self.start):
            m.d.sync += elems.eq(self.p_elems)
        with m.If(started):
            start_mask = _byte_mask(elems, W)
            neg, big, _ = _byte_mask_parts(elems_w, W)
            m.d.sync += [mask.eq(start_mask), first_mask.eq(start_mask),
                         tail.eq(_byte_mask_from_parts(Const(0, 1), Const(0, 1),
                                                       elems[:low_bits], W)),
                         nl_neg.eq(neg), nl_big.eq(big), w_neg.eq(neg), w_big.eq(big)]
        masked = Signal(8 * W, name="rs_masked")
        m.d.comb += masked.eq(self.mem.rdata & Cat(*(b.replicate(8) for b in mask)))
        if self._dil:
            # a cell's first beat held; with its second, the even bytes written and the odd
            # ones held for the next cycle
            lo = Signal(8 * W, name="dil_lo")
            odd, odd_addr = Signal(8 * W, name="dil_odd"), Signal(range(self._depth),
                                                                   name="dil_odd_addr")
            odd_pend, odd_end = Signal(name="dil_odd_pend"), Signal(name="dil_odd_end")
            pair = [lo.word_select(b, 8) for b in range(W)] + [masked.word_select(b, 8)
                                                                for b in range(W)]
            first_beat = dil & ~rs_g[0]
            # (a select in front of the buffer's write address and data, where the plain
            # load has none: no preset that builds the mesh goes to an FPGA yet)
            m.d.comb += [
                self.w_addr.eq(Mux(odd_pend, odd_addr, rs_waddr)),
                self.w_data.eq(Mux(odd_pend, odd, Mux(dil, Cat(*pair[0::2]), masked))),
                self.w_en.eq((self.mem.rvalid & self.busy & ~first_beat) | odd_pend),
            ]
            m.d.sync += odd_pend.eq(0)
            with m.If(self.mem.rvalid & self.busy & dil):
                with m.If(first_beat):
                    m.d.sync += lo.eq(masked)
                with m.Else():
                    m.d.sync += [odd.eq(Cat(*pair[1::2])), odd_addr.eq(rs_waddr + dstride),
                                 odd_pend.eq(1), odd_end.eq(rs_glast & rs_rlast)]
            with m.If(odd_pend & odd_end):
                m.d.sync += [self.busy.eq(0), odd_end.eq(0)]
        else:
            m.d.comb += [
                self.w_addr.eq(rs_waddr),
                self.w_data.eq(masked),
                self.w_en.eq(self.mem.rvalid & self.busy),
            ]
        high = rs_next_left[low_bits:]                  # H (signed): the count in beats
        with m.If(self.mem.rvalid & self.busy):
            with m.If(rs_glast):
                m.d.sync += [rs_g.eq(0), rs_rem.eq(rs_rem - 1), rs_waddr.eq(rs_next_row),
                             rs_next_row.eq(rs_next_row + 1),
                             rs_next_left.eq(elems_w), nl_neg.eq(w_neg), nl_big.eq(w_big),
                             rs_glast.eq(one_group),
                             rs_rlast.eq(rs_rem == 1), mask.eq(first_mask)]
                with m.If(rs_rlast & ~dil):     # (deinterleaving: after the odd bytes' row)
                    m.d.sync += self.busy.eq(0)
            with m.Else():
                m.d.sync += [rs_g.eq(rs_g + 1),
                             # (deinterleaving: a cell's rows after its second beat)
                             rs_waddr.eq(Mux(dil & ~rs_g[0], rs_waddr, rs_waddr + gstride)),
                             rs_next_left.eq(rs_next_left - W),
                             # the count a beat less: negative when H <= 0, big when H >= 2
                             Cat(nl_neg, nl_big).eq(Cat(*_count_down_flags(high))),
                             rs_glast.eq(rs_g == groups_m2),
                             mask.eq(_mask_select(nl_neg, nl_big, tail))]
        return m


class StoreEngine(wiring.Component):
    """Writes a ``rows`` x ``groups`` grid of accumulator rows to memory, optionally through the
    :class:`~hw.postproc.PostProc` requantiser.

    Beat ``(r, g)`` reads accumulator row ``acc_base + r*acc_rstride + g`` (one row holds
    ``array_cols`` int32) and writes it to ``addr + r*stride + g*array_cols*E`` where ``E`` is
    the output element size (4, or 1 with ``p_int8``), with byte strobes cleared for elements at
    or past ``elems``: the ragged edge of C is never written. Int8 beats carry their
    ``array_cols`` bytes in the low lanes of the port.

    With ``p_post`` the rows go through the post-processor (bias, requantisation, zero point,
    clamp): row ``r`` is output channel ``ch0 + r`` (with ``channel_rows``, ``ch0 + r //
    p_ch_rows``: a depthwise step's rows are ``p_ch_rows`` output rows of each channel), whose
    bias / multiplier / shift the engine
    reads from the parameter memory (``q_ch``/``q_ren``; data on ``q_*`` one cycle later): one
    beat ahead of the accumulator read, so that they enter the requantiser from a register. The
    post-processed path is :meth:`PostProc.row_latency_of` cycles longer, and with shared
    requantiser lanes (``AccelConfig.post_row_cycles`` > 1) its beats issue that many cycles
    apart.

    Every byte strobe outside ``[win_lo, win_hi)`` is cleared at the port (the output window the
    layer declared; the sequencer's checks already keep the written range inside it, so this is
    a second, independent guard). The accumulator read port is synchronous and its word is
    registered before anything uses it (two cycles from read to port); a beat the port
    refuses waits in a one-beat skid register and the pipeline holds from the next cycle
    (``acc_ren`` low), so no pipeline enable depends on the port's ``ready``. ``busy`` falls in the cycle after the last beat was
    acknowledged (``mem.bvalid``). At most :meth:`pending_limit` beats are accepted and not yet
    acknowledged; a further beat waits for an acknowledgement (which may come in its cycle).

    Parameters
    ----------
    cfg : AccelConfig
        Uses ``dram_addr_bits``, ``c_beat_bytes``, ``acc_depth``, ``acc_bytes``,
        ``quant_entries``, ``post_row_cycles``.
    channel_rows : bool
        Build ``p_ch_rows`` (rows per output channel; 1 for a GEMM's store) and
        ``p_even_lanes`` (a stride-2 depthwise step's store: element ``j`` of a row is the
        accumulator row's lane ``2 j``, so with ``elems <= array_cols / 2`` the row's even
        lanes are written, packed; the lanes are selected as the accumulator word is
        registered; with ``p_odd_lanes`` too, lane ``2 j + 1``: the odd lanes,
        :attr:`spec.dwmesh.StripStep.lane0`), and ``p_half_last`` (the depthwise quadrant mode's store,
        :attr:`spec.dwmesh.StripStep.half_last`: a row holds two output rows of a channel, and
        a channel's last row, one output row, writes ``elems / 2`` elements, the next row
        starting ``stride / 2`` after it; only for rows of one beat, ``p_groups`` 1, as every
        depthwise store is: the short row's mask replaces every beat's).

    Members
    -------
    start : ``In(1)``; busy : ``Out(1)``
    p_addr, p_stride, p_rows, p_groups, p_elems, p_acc_base, p_acc_rstride : ``In(...)``
    p_ch_rows : ``In(DIM_BITS)``, p_even_lanes, p_odd_lanes, p_half_last : ``In(1)`` (only
    with ``channel_rows``;
    ``p_ch_rows`` at least 1)
    p_post, p_int8, p_bias, p_ch0, p_zero_point, p_act_min, p_act_max : ``In(...)``
    p_win_lo, p_win_hi : ``In(dram_addr_bits + 1)``
    acc_raddr, acc_ren : ``Out(...)``; acc_rdata : ``In(c_beat_bytes * 8)``
    q_ch : ``Out(range(quant_entries))``; q_ren : ``Out(1)``
    q_bias, q_mult, q_shift : ``In(8 * b_beat_bytes)``: the parameter memories' rows holding
    the channel's words, at lane ``q_lane`` (32 bits each; registered here as they leave the
    block RAMs, the word selected after the register)
    mem : ``Out(WritePort.Signature)``
    """

    def __init__(self, cfg: AccelConfig, *, channel_rows: bool = False):
        self._cfg = cfg
        self._channel_rows = channel_rows
        ab = cfg.dram_addr_bits
        super().__init__({
            **_grid_members(ab),
            **({"p_ch_rows": In(DIM_BITS), "p_even_lanes": In(1), "p_odd_lanes": In(1),
                "p_half_last": In(1)}
               if channel_rows else {}),
            "p_acc_base": In(range(cfg.acc_depth)),
            "p_acc_rstride": In(DIM_BITS),
            "p_post": In(1),
            "p_int8": In(1),
            "p_bias": In(1),
            "p_ch0": In(range(cfg.quant_entries)),
            "p_zero_point": In(signed(8)),
            "p_act_min": In(signed(8)),
            "p_act_max": In(signed(8)),
            "p_win_lo": In(ab + 1),
            "p_win_hi": In(ab + 1),
            "acc_raddr": Out(range(cfg.acc_depth)),
            "acc_ren": Out(1),
            "acc_rdata": In(8 * cfg.c_beat_bytes),
            "q_ch": Out(range(cfg.quant_entries)),
            "q_ren": Out(1),
            "q_bias": In(8 * cfg.b_beat_bytes),
            "q_mult": In(8 * cfg.b_beat_bytes),
            "q_lane": In(range(max(cfg.b_beat_bytes // 4, 2))),
            "q_shift": In(8 * cfg.b_beat_bytes),
            "mem": Out(WritePort.Signature(addr_bits=ab, data_bytes=cfg.c_beat_bytes)),
        })

    @staticmethod
    def pending_limit(cfg: AccelConfig) -> int:
        """Beats the engine lets be accepted and not yet acknowledged: two per cycle of the C
        port's latency (and one), so a memory that acknowledges on time never holds it up."""
        return 2 * (cfg.c_port_latency_cycles + 1)

    def elaborate(self, platform):
        m = Module()
        cfg = self._cfg
        W = cfg.c_beat_bytes
        E = cfg.acc_bytes
        cols = cfg.array_cols
        ab = cfg.dram_addr_bits

        stride = Signal(32)
        rows = Signal(DIM_BITS)
        # `groups - 2`, registered at the start: "the next beat is the row's last" is the
        # equality `g == groups - 2`, not an add and a compare (as in the load engines; signed,
        # so no group count makes it true where `g + 2 == groups` is not)
        groups_m2 = Signal(signed(DIM_BITS + 1), name="groups_m2")
        elems = Signal(DIM_BITS)
        rstride = Signal(DIM_BITS)
        # (`post_on`: `post` names the requantiser submodule)
        post, int8, bias = Signal(name="post_on"), Signal(name="int8"), Signal(name="bias")
        # copies of `post` (`keep`, equal to it) for the final stage's beat select and its data
        # select: from the one flag (~380 loads), the beat select into the port's valid and the
        # local buffer's write enables was a 11.2 ns path of the whole 8x8 (session 22)
        post_fin, post_data = (Signal(name=n, attrs={"keep": 1})
                               for n in ("post_fin", "post_data"))
        zp, act_min, act_max = Signal(signed(8)), Signal(signed(8)), Signal(signed(8))
        win_lo, win_hi = Signal(ab + 1), Signal(ab + 1)
        issuing = Signal()
        row_rem = Signal(DIM_BITS)          # rows after the current one
        g = Signal(DIM_BITS)
        row_addr = Signal(ab)
        addr = Signal(ab)
        ch = Signal(range(cfg.quant_entries))
        # ch + 1, a register moved with `ch`: the parameter memories' read address selects
        # between the two (an incrementer there was a 11.2 ns path of the whole 8x8, session 16)
        ch1 = Signal(range(cfg.quant_entries), name="ch_next")
        acc_row = Signal(range(cfg.acc_depth))
        acc_addr = Signal(range(cfg.acc_depth))
        left = Signal(signed(DIM_BITS + 1))          # valid elements from this beat's first one
        # win_lo - addr, win_hi - addr, and the same for the row's first beat
        below, above = Signal(signed(ab + 2)), Signal(signed(ab + 2))
        below_row, above_row = Signal(signed(ab + 2)), Signal(signed(ab + 2))
        one_group, glast, rlast = Signal(), Signal(), Signal()
        # stage 1: the accumulator (and parameter) read is in flight; data valid in this stage
        out_valid = Signal()
        out_addr = Signal(ab)
        # the beat's strobes in two parts, combined in stage 2: the row's valid elements and
        # the window guard (compares of registers, then one AND-select a stage later)
        out_emask = Signal(cols)
        # The guard is split across the two stages. Stage 1 registers, for `below` and for
        # `above`, its `big` flag (>= 2**low_bits: the shared test of the high bits, a tree
        # with one load) and the mask of its sign and low bits alone (_byte_mask_from_parts
        # with `big` 0: per byte a compare of the low bits, no high bits); stage 2 ORs `big`
        # into the masks and ANDs them into the strobes (per byte seven register inputs:
        # `int8_post`, two element-mask bits and the four guard bits). Registering the whole
        # guard put the high-bit test, its fan-out to every byte and the per-byte compares in
        # one cycle: the whole 8x8 route, session 24 (ad670c5 seed 2): above -> out_guard
        # 10.58 ns (8.4 ns of it routing, 9 cells), and $signal$128 (`below`) -> out_guard
        # 9.88 ns. Registering only the parts (sign, `big`, low bits) would leave stage 2 a
        # function of 16 of them per byte, as deep as what it replaces. Same strobes in the
        # same cycle.
        guard_parts = {}
        for side, diff in (("below", below), ("above", above)):
            negative, big, low = _byte_mask_parts(diff, W)
            guard_parts[side] = (big, _byte_mask_from_parts(negative, Const(0, 1), low, W))
        out_guard = {side: (Signal(name=f"out_{side}_big"), Signal(W, name=f"out_{side}_low"))
                     for side in guard_parts}
        # `int8 & post`, a register set with the start: stage 2's strobe select
        int8_post = Signal(name="int8_post")
        # stage 2: the accumulator word in a register (a block RAM's read port feeds no logic:
        # on the ECP5 its clock-to-out alone is 5.8 ns), with its beat and row parameters
        word_valid = Signal()
        word_addr = Signal(ab)
        word_strb = Signal(W)
        word = Signal(8 * W, reset_less=True)
        # stages 2..1+latency: the post-processor (only used with `post`)
        lat = PostProc.row_latency_of(cfg)
        # With shared requantiser lanes a post-processed beat occupies the requantiser for
        # `row_cycles` cycles: after each, `gap` holds the next one back that many cycles - 1.
        P = cfg.post_row_cycles
        gap = Signal(range(P), name="post_gap")
        go = Signal()
        m.d.comb += go.eq(issuing & ((gap == 0) | ~post) if P > 1 else issuing)
        d_valid = [Signal(name=f"pp_valid{i}") for i in range(lat)]
        d_addr = [Signal(ab, name=f"pp_addr{i}") for i in range(lat)]
        d_strb = [Signal(W, name=f"pp_strb{i}") for i in range(lat)]
        fin_valid = Signal()
        # beats accepted but not yet acknowledged: one per cycle of latency with a memory that
        # acknowledges on time; a slower memory holds further beats at `limit`
        limit = self.pending_limit(cfg)
        pending = Signal(range(limit + 1))
        # `pending < limit` as a register kept with the count (the compare in front of the
        # port's valid and the local buffer's write enables was a 11.1 ns path of the 8x8)
        under_limit = Signal(init=1)
        can_send = Signal()
        m.d.comb += can_send.eq(under_limit | self.mem.bvalid)
        accepted = self.mem.valid & self.mem.ready
        with m.If(accepted & ~self.mem.bvalid):
            m.d.sync += [pending.eq(pending + 1), under_limit.eq(pending < limit - 1)]
        with m.Elif(~accepted & self.mem.bvalid):
            m.d.sync += [pending.eq(pending - 1), under_limit.eq(1)]

        # Nothing left to issue, nothing waiting for the port, and the last acknowledgement
        # arrives now (or none is outstanding): done. A start in the same cycle takes precedence.
        all_acked = (pending == 0) | ((pending == 1) & self.mem.bvalid)
        # One-beat skid register at the port: when the port refuses the last stage's beat, the
        # beat waits here and the pipeline stops the cycle after. So `advance` (the enable of
        # every pipeline register, the accumulator and parameter reads) is a register, not a
        # function of the port's `ready`. The port still sees a beat every cycle one is there.
        # (The requantiser and the skid's data registers take copies of it: below.)
        skid_valid = Signal(attrs={"keep": 1})      # (keep: see the copies below)
        skid_addr, skid_data = Signal(ab, reset_less=True), Signal(8 * W, reset_less=True)
        skid_strb = Signal(W, reset_less=True)
        in_flight = Cat(out_valid, word_valid, *d_valid, skid_valid).any()
        with m.If(self.busy & ~issuing & ~in_flight & all_acked):
            m.d.sync += self.busy.eq(0)
        with m.If(self.start):
            m.d.sync += [
                self.busy.eq(1), issuing.eq(1),
                stride.eq(self.p_stride), rows.eq(self.p_rows),
                elems.eq(self.p_elems), rstride.eq(self.p_acc_rstride),
                post.eq(self.p_post), post_fin.eq(self.p_post), post_data.eq(self.p_post),
                int8.eq(self.p_int8), bias.eq(self.p_bias),
                zp.eq(self.p_zero_point), act_min.eq(self.p_act_min),
                act_max.eq(self.p_act_max), win_lo.eq(self.p_win_lo), win_hi.eq(self.p_win_hi),
                row_rem.eq(self.p_rows - 1), g.eq(0), row_addr.eq(self.p_addr),
                addr.eq(self.p_addr),
                ch.eq(self.p_ch0), ch1.eq(self.p_ch0 + 1),
                acc_row.eq(self.p_acc_base), acc_addr.eq(self.p_acc_base),
                left.eq(self.p_elems),
                below.eq(self.p_win_lo - self.p_addr), below_row.eq(self.p_win_lo - self.p_addr),
                above.eq(self.p_win_hi - self.p_addr), above_row.eq(self.p_win_hi - self.p_addr),
                one_group.eq(self.p_groups == 1), glast.eq(self.p_groups == 1),
                groups_m2.eq(self.p_groups - 2),
                rlast.eq(self.p_rows == 1),
            ]

        advance = Signal()
        acc_advance = Signal()                  # (advance, from the read addresses' copy)
        row_advance = Signal()                  # (advance, from the row registers' copy)
        # the channel's last row (always, without channel_rows): the row end moves `ch` on
        if self._channel_rows:
            ch_rows, ch_left = Signal(DIM_BITS), Signal(DIM_BITS)      # rows left after this
            ch_last, one_row = Signal(), Signal()
            with m.If(self.start):
                m.d.sync += [ch_rows.eq(self.p_ch_rows), ch_left.eq(self.p_ch_rows - 1),
                             ch_last.eq(self.p_ch_rows == 1), one_row.eq(self.p_ch_rows == 1)]
            with m.Elif(acc_advance & go & glast):
                with m.If(ch_last):
                    m.d.sync += [ch_left.eq(ch_rows - 1), ch_last.eq(one_row)]
                with m.Else():
                    m.d.sync += [ch_left.eq(ch_left - 1), ch_last.eq(ch_left == 1)]
        else:
            ch_last = None
        # the address step to the next row: `stride`, or after a channel's last row in the
        # quadrant mode's store (p_half_last) half of it, that row then writing half the elements
        rstep = stride
        if self._channel_rows:
            half_last, stride_half = Signal(name="half_last"), Signal(32, name="stride_half")
            half_mask = Signal(cols, name="half_mask")
            with m.If(self.start):
                m.d.sync += [half_last.eq(self.p_half_last), stride_half.eq(self.p_stride >> 1),
                             half_mask.eq(_byte_mask(self.p_elems >> 1, cols))]
            short = Signal(name="short_row")
            m.d.comb += short.eq(half_last & ch_last)
            rstep = Mux(short, stride_half, stride)

        # Copies of `skid_valid` (`keep`), equal to it in every cycle: the requantiser's lanes,
        # its per-row registers and the skid's data registers each take their own, so no
        # single net enables every pipeline register (one did: 7,884 flip-flops of the whole
        # 8x8, the net with the most routing congestion after the CSR writes', session 21)
        m.submodules.post = pp = PostProc(cfg, decoded_shift=True,
                                          en_copies=cfg.post_lanes + 1)
        skid_copies = []

        def skid_copy(name):
            copy = Signal(name=f"skid_valid_{name}", attrs={"keep": 1})
            skid_copies.append(copy)
            return copy
        post_en = [skid_copy(f"post{k}") for k in range(pp.en_copies)]
        skid_data_en = skid_copy("skid_data")
        # More copies select the port's outputs: one for `valid` (which also reaches the local
        # buffer's write enables: a 12.9 ns path of the 8x8 in session 21), one for the
        # address and strobes, one per 128 data bits.
        data_chunks = range(0, 8 * W, 128)
        sel_valid, sel_addr = skid_copy("sel_valid"), skid_copy("sel_addr")
        sel_data = [skid_copy(f"sel_data{k}") for k in range(len(data_chunks))]
        # And the store's own pipeline: stage 2 (the accumulator word, its parameters) and the
        # address/strobe registers beside the requantiser (with the raw flag, about 1,100
        # flip-flops of the 8x8 at 27d389e, session 22).
        word_hold, pipe_hold = skid_copy("word"), skid_copy("pipe")
        # and the accumulator's and parameter memories' read enables (the raw flag into the
        # accumulator's read address was a 11.4 ns path of the whole 8x8, session 22)
        read_hold = skid_copy("read")
        # and the issue side: `advance` for the beat's address, guard and mask registers, and
        # one for the accumulator and parameter read addresses (`acc_*`, `ch`). Every copy,
        # `skid_valid` too, is `keep`: Yosys merged `skid_valid` (then `advance`'s only source)
        # into the read copy, so one net enabled the read addresses and the whole issue side
        # (skid_valid_read -> acc_addr, acc_row, ch: 10.2-11.1 ns, 10 endpoints, dfa520f seed 3,
        # session 25).
        issue_hold, acc_hold = skid_copy("issue"), skid_copy("acc")
        # and the registers a row's end alone moves (`row_rem`, `row_addr`, the guard's row
        # differences, `rlast`, `issuing`): from the issue copy, beside the beat's ~300
        # flip-flops, skid_valid_issue -> row_rem / rlast was 9.97-10.29 ns of the whole 8x8
        # (bc58de8 seed 3, session 26)
        row_hold = skid_copy("row")
        # The bias and multiplier rows (the multipliers' low 31 bits) and the word's lane,
        # registered as they leave the parameter memories; stage 2 selects the word
        # (ParamMemories: through the select, the RAMs' unregistered read was 10.5 ns of the
        # whole 8x8, 94a525d seed 3, session 24). The row registers have no reset (each is
        # loaded before it is used), so bench.outreg may fold them into the block RAMs; at
        # 14dda7d they still had one and stayed in the fabric (q_mult: 9.2 ns, seed 2).
        words = cfg.b_beat_bytes // 4
        q_bias = Signal(32 * words, reset_less=True)
        q_mult = Signal(31 * words, reset_less=True)
        q_lane = Signal.like(self.q_lane, name="q_lane_r")
        # (the shift's row too, each word's 6 bits: through the select in front of its
        # register, the RAM's unregistered read was 9.6-9.7 ns on both of session 26's first
        # routes)
        q_shift = Signal(6 * words, reset_less=True)
        w_bias, w_mult = Signal(32), Signal(31)    # stage 2's
        # stage 2's shift, decoded here (PostProc.decode_shift) and registered, so the
        # requantiser's lanes take it from registers: the decode between this register and the
        # lanes' first stage was a 11.7 ns path (41 endpoints) of the whole 8x8 in session 16.
        # Only what stage 1 needs (37 bits: PostProc.SHIFT_DECODE); the rounding offsets are
        # decoded in the requantiser from `right` (all 106 bits here: 10.5-11.7 ns, sessions
        # 23 and 24). (Copies of `q_shift`, tried in session 23 against the decode's fan-out,
        # put the RAM's 6 ns clock-to-out in front of every copy: 12.09 ns at 60c3540.)
        q_dec = PostProc.decode_shift(
            m, (q_shift.word_select(q_lane, 6) if words > 1 else q_shift).as_signed())
        w_dec = {name: Signal(shape, name=f"w_{name}", reset_less=True)
                 for name, shape in PostProc.SHIFT_DECODE.items()}
        acc_word = self.acc_rdata
        if self._channel_rows:
            # a stride-2 depthwise store: the even lanes first (then the odd ones, past
            # `elems`, never written), or with p_odd_lanes the odd ones first; registers set
            # with the start select
            even_lanes, odd_lanes = Signal(name="even_lanes"), Signal(name="odd_lanes")
            with m.If(self.start):
                m.d.sync += [even_lanes.eq(self.p_even_lanes & ~self.p_odd_lanes),
                             odd_lanes.eq(self.p_even_lanes & self.p_odd_lanes)]
            lanes = [self.acc_rdata.word_select(j, 8 * E) for j in range(cols)]
            acc_word = Mux(even_lanes, Cat(*lanes[0::2], *lanes[1::2]),
                           Mux(odd_lanes, Cat(*lanes[1::2], *lanes[0::2]), self.acc_rdata))
        with m.If(~word_hold):
            m.d.sync += [w_dec[name].eq(q_dec[name]) for name in w_dec]
            m.d.sync += [q_bias.eq(self.q_bias[:32 * words]), q_lane.eq(self.q_lane),
                         q_mult.eq(Cat(*(self.q_mult[32 * i:32 * i + 31] for i in range(words)))),
                         q_shift.eq(Cat(*(self.q_shift[32 * i:32 * i + 6]
                                          for i in range(words)))),
                         word_valid.eq(out_valid), word_addr.eq(out_addr),
                         word_strb.eq(Mux(int8_post, Cat(out_emask, Const(0, W - cols)),
                                          Cat(*(b.replicate(E) for b in out_emask)))
                                      & ~(out_guard["below"][0].replicate(W)
                                          | out_guard["below"][1])
                                      & (out_guard["above"][0].replicate(W)
                                         | out_guard["above"][1])),
                         word.eq(acc_word),
                         w_bias.eq(q_bias.word_select(q_lane, 32) if words > 1 else q_bias),
                         w_mult.eq(q_mult.word_select(q_lane, 31) if words > 1 else q_mult)]
        fin_addr, fin_data, fin_strb = Signal(ab), Signal(8 * W), Signal(W)
        m.d.comb += [
            fin_valid.eq(Mux(post_fin, d_valid[-1], word_valid)),
            fin_addr.eq(Mux(post_fin, d_addr[-1], word_addr)),
            fin_data.eq(Mux(post_data, Mux(int8, pp.o_data, pp.o_sum), word)),
            fin_strb.eq(Mux(post_fin, d_strb[-1], word_strb)),
            advance.eq(~issue_hold), acc_advance.eq(~acc_hold), row_advance.eq(~row_hold),
            self.acc_ren.eq(~read_hold),
            self.acc_raddr.eq(acc_addr),
            # The parameter memories are read one beat ahead (the start cycle reads the first
            # beat's channel; each beat's read cycle reads the next beat's) and their words are
            # registered on the way in, so the requantiser's per-row inputs are registers.
            self.q_ren.eq(~read_hold),
            self.q_ch.eq(Mux(self.start, self.p_ch0,
                             Mux(go & glast if ch_last is None else go & glast & ch_last,
                                 ch1, ch))),
            pp.en.eq(Cat(~c for c in post_en)),
            pp.i_valid.eq(word_valid & post),
            pp.i_data.eq(word),
            pp.i_bias.eq(Mux(bias, w_bias, 0)),
            pp.i_mult.eq(w_mult),
            *(getattr(pp, f"i_{name}").eq(w_dec[name]) for name in w_dec),
            pp.i_zero_point.eq(zp),
            pp.i_act_min.eq(act_min),
            pp.i_act_max.eq(act_max),
            self.mem.valid.eq((sel_valid | fin_valid) & can_send),
            self.mem.addr.eq(Mux(sel_addr, skid_addr, fin_addr)),
            self.mem.strb.eq(Mux(sel_addr, skid_strb, fin_strb)),
            *(self.mem.data[lo:lo + 128].eq(Mux(sel, skid_data[lo:lo + 128],
                                                fin_data[lo:lo + 128]))
              for sel, lo in zip(sel_data, data_chunks)),
        ]
        # The skid register takes the last stage's beat in every cycle it is empty (its enable
        # is `~skid_valid`, a flip-flop, rather than a function of the port's handshake, which
        # would fan out to its 8 * W data bits); it holds a beat when the port refused it.
        with m.If(~skid_data_en):
            m.d.sync += [skid_addr.eq(fin_addr), skid_data.eq(fin_data), skid_strb.eq(fin_strb)]
        # The skid holds a beat after this cycle when one is here (in the skid, or the last
        # stage's) and the port does not take it: the port sees `valid` exactly when a beat is
        # here and it may send (`can_send`), so "not taken" is ~(can_send & ready). Written so,
        # with no enable, it is two LUT levels from registers and the port's handshake; as
        # "clear when accepted, set when refused" (an enable and a select behind the port's
        # valid) it was 10.5 ns of the whole 8x8 into the copies' enables (ad670c5 seed 3).
        here = skid_valid | fin_valid
        m.d.sync += [c.eq(here & ~(can_send & self.mem.ready))
                     for c in (skid_valid, *skid_copies)]
        with m.If(~pipe_hold):
            prev = (word_valid & post, word_addr, word_strb)
            for v, a, st in zip(d_valid, d_addr, d_strb):
                m.d.sync += [v.eq(prev[0]), a.eq(prev[1]), st.eq(prev[2])]
                prev = (v, a, st)

        # Byte strobes of the beat at `addr`: the row's valid elements, then the window guard
        # (byte b is in the window when win_lo - addr <= b < win_hi - addr). The differences
        # are kept as running registers beside `addr` (and `row_addr`), so the guard is compares
        # of registers, not a subtract first (and stage 1 takes only the guard's parts: above).
        # The row's valid elements (`_byte_mask(left, cols)`) as a select of registers, as
        # in the load engine: `cols` is a power of two, so `left`'s low bits never change in a
        # store (a beat steps it by `cols`, a row restarts it at `elems`) and their per-byte
        # compare is `tail`, decoded at the start; `left`'s sign and `big` are flip-flops kept
        # with it (from its high part's compares as it steps down; `elems`'s at a row's start).
        # The decode of `left` in front of `out_emask` was a 9.69 ns path of the whole 8x8
        # (14dda7d seed 2, session 24: 7.5 ns of it routing, 7 cells).
        assert cols & (cols - 1) == 0, "array_cols is a power of two"
        e_low = (cols - 1).bit_length()
        l_neg, l_big, e_big = (Signal(name=n) for n in ("left_neg", "left_big", "elems_big"))
        tail = Signal(cols, name="left_tail")
        with m.If(self.start):
            _, big, low = _byte_mask_parts(self.p_elems, cols)
            m.d.sync += [l_neg.eq(0), l_big.eq(big), e_big.eq(big),
                         tail.eq(_byte_mask_from_parts(Const(0, 1), Const(0, 1), low, cols))]
        elem_mask = _mask_select(l_neg, l_big, tail)
        # the bytes a beat covers, a register set with the start (the flags' AND in front of
        # the address and guard subtracts was a 10.9 ns path of the whole 8x8, session 22)
        step = Signal(range(W + 1), name="beat_step")
        with m.If(self.start):
            m.d.sync += [step.eq(Mux(self.p_int8 & self.p_post, cols, W)),
                         int8_post.eq(self.p_int8 & self.p_post)]
        with m.If(advance):
            m.d.sync += out_valid.eq(go)
            if P > 1:
                m.d.sync += gap.eq(Mux(go & post, P - 1, Mux(gap != 0, gap - 1, 0)))
            with m.If(go):
                m.d.sync += [
                    out_addr.eq(addr),
                    out_emask.eq(elem_mask if ch_last is None else Mux(short, half_mask,
                                                                         elem_mask)),
                    *(reg.eq(part) for side, parts in guard_parts.items()
                      for reg, part in zip(out_guard[side], parts)),
                ]
                with m.If(glast):
                    m.d.sync += [g.eq(0), addr.eq(row_addr + rstep), left.eq(elems),
                                 l_neg.eq(0), l_big.eq(e_big),
                                 below.eq(below_row - rstep), above.eq(above_row - rstep),
                                 glast.eq(one_group)]
                with m.Else():
                    m.d.sync += [g.eq(g + 1), addr.eq(addr + step),
                                 left.eq(left - cols),
                                 Cat(l_neg, l_big).eq(Cat(*_count_down_flags(left[e_low:]))),
                                 below.eq(below - step), above.eq(above - step),
                                 glast.eq(g == groups_m2)]
        # a row's end: the same moves, on their own copy of `advance`
        with m.If(row_advance & go & glast):
            m.d.sync += [row_rem.eq(row_rem - 1), row_addr.eq(row_addr + rstep),
                         below_row.eq(below_row - rstep), above_row.eq(above_row - rstep),
                         rlast.eq(row_rem == 1)]
            with m.If(rlast):
                m.d.sync += issuing.eq(0)
        # the read addresses: the same moves, on their own copy of `advance`
        with m.If(acc_advance & go):
            with m.If(glast):
                m.d.sync += [acc_row.eq(acc_row + rstride), acc_addr.eq(acc_row + rstride),
                             ch.eq(ch1 if ch_last is None else Mux(ch_last, ch1, ch)),
                             ch1.eq(ch1 + 1 if ch_last is None else Mux(ch_last, ch1 + 1, ch1))]
            with m.Else():
                m.d.sync += acc_addr.eq(acc_addr + 1)
        return m
