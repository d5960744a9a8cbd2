"""Compute engine: walks one partition's inner and array tiles through the systolic array."""

from amaranth import *
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from spec.config import AccelConfig
from spec.desc import DIM_BITS

from .array import SystolicArray
from .bits import log2

__all__ = ["FEED_CYCLES", "ComputeEngine", "array_tag_bits", "drain_cycles"]


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


def array_tag_bits(cfg: AccelConfig) -> int:
    """Width of the tag the compute engine sends through its array with each beat: an
    accumulator row address and the accumulate flag."""
    return _bits(cfg.acc_depth) + 1


class ComputeEngine(wiring.Component):
    """Multiplies one buffered A partition by one buffered B partition into the accumulator.

    Loop nest (seed 000 step 5, inner part): inner tiles of ``tile_m`` x ``tile_n`` (given in
    array tiles: ``p_tile_mg`` x ``p_tile_ng``), and inside each inner tile its array tiles, ``n``
    fastest. Each array tile ``(tm, tn)`` streams ``L = max(p_keff, array_rows)`` beats; beat
    ``k`` reads A buffer row ``a_base + tm*pk + k`` and B buffer row ``b_base + tn*pk + k`` (beats
    with ``k >= p_keff`` are zero padding, so a tile is never shorter than the array's drain).
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

    Parameters
    ----------
    cfg : AccelConfig
        Uses ``array_rows``, ``array_cols``, buffer and accumulator depths.

    Members
    -------
    start : ``In(1)``; running, busy, beat_real : ``Out(1)``
    p_* : ``In(...)`` partition parameters, sampled on ``start``
    rd_en, a_raddr, b_raddr : ``Out(...)``; a_rdata, b_rdata : ``In(...)`` (synchronous read
    ports; ``rd_en`` is low for padding beats, which read nothing)
    acc_raddr : ``Out``; acc_rdata : ``In``; acc_waddr, acc_wdata, acc_wen : ``Out``
    """

    def __init__(self, cfg: AccelConfig):
        self._cfg = cfg
        self.array = SystolicArray(cfg, tag_bits=array_tag_bits(cfg))
        super().__init__({
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
        pk, keff, last_k = Signal(DIM_BITS), Signal(DIM_BITS), Signal(DIM_BITS)
        accum = Signal()
        # loop counters: inner-tile origin (im, in_), array tile (tm, tn), beat k
        im, in_, tm, tn, k = (Signal(DIM_BITS, name=n) for n in ("im", "in_", "tm", "tn", "k"))
        running = self.running
        last_beat = Signal()
        drain = Signal(range(self.drain_cycles + 1))
        # Addresses kept as running sums instead of products (no multiplier, one add deep):
        # a_row = a_base + tm*pk, a_im = a_base + im*pk, b_row = b_base + tn*pk,
        # b_in = b_base + in_*pk, acc_row = acc_base + (R-1)*rstride + tm*R*rstride, acc_im
        # likewise for im. The accumulator tag carries the tile's *last* row's address: rows
        # leave the array bottom row first (below).
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
                tng.eq(self.p_tile_ng), pk.eq(self.p_pk), keff.eq(self.p_keff),
                last_k.eq(Mux(self.p_keff > R, self.p_keff, R) - 1), accum.eq(self.p_accum),
                im.eq(0), in_.eq(0), tm.eq(0), tn.eq(0), k.eq(0), last_beat.eq(0),
                a_row.eq(self.p_a_base), a_im.eq(self.p_a_base),
                b_row.eq(self.p_b_base), b_in.eq(self.p_b_base),
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
        with m.If(running):
            with m.If(~last_beat):
                m.d.sync += [k.eq(k + 1), last_beat.eq(k + 1 == last_k)]
            with m.Else():
                m.d.sync += [k.eq(0), last_beat.eq(0)]
                with m.If(more_tn):
                    m.d.sync += [tn.eq(tn + 1), b_row.eq(b_row + pk)]
                with m.Elif(more_tm):
                    m.d.sync += [tn.eq(in_), tm.eq(tm + 1), b_row.eq(b_in),
                                 a_row.eq(a_row + pk), acc_row.eq(acc_row + tile_rows)]
                with m.Elif(more_in):                  # next inner tile along n; here
                    # tn = in_ + tng - 1, so b_row + pk is the new inner tile's first B row
                    m.d.sync += [in_.eq(in_ + tng), tn.eq(in_ + tng), tm.eq(im),
                                 b_in.eq(b_row + pk), b_row.eq(b_row + pk),
                                 a_row.eq(a_im), acc_row.eq(acc_im)]
                with m.Elif(more_im):                  # next inner-tile row along m; here
                    # tm = im + tmg - 1, so a_row + pk / acc_row + R*rstride are its first
                    m.d.sync += [in_.eq(0), tn.eq(0), im.eq(im + tmg), tm.eq(im + tmg),
                                 b_in.eq(b_base), b_row.eq(b_base),
                                 a_im.eq(a_row + pk), a_row.eq(a_row + pk),
                                 acc_im.eq(acc_row + tile_rows),
                                 acc_row.eq(acc_row + tile_rows)]
                with m.Else():
                    m.d.sync += [running.eq(0), drain.eq(self.drain_cycles - 1)]
        with m.If(~running & self.busy & ~self.start):
            with m.If(drain == 0):
                m.d.sync += self.busy.eq(0)
            with m.Else():
                m.d.sync += drain.eq(drain - 1)

        # beat issue: synchronous buffer reads, then the operand register; the flags and the
        # tag follow the data through both stages (FEED_CYCLES)
        real = Signal()
        m.d.comb += [
            real.eq(running & (k < keff)),
            self.beat_real.eq(real),
            self.rd_en.eq(real),
            self.a_raddr.eq(a_row + k),
            self.b_raddr.eq(b_row + k),
        ]
        tile_addr = Signal(range(cfg.acc_depth))       # the tile's last row in the accumulator
        m.d.comb += tile_addr.eq(acc_row + tn)
        d_valid, d_real, d_first, d_last = Signal(), Signal(), Signal(), Signal()
        d_tag = Signal(len(arr.i_tag))
        m.d.sync += [
            d_valid.eq(running), d_real.eq(real), d_first.eq(k == 0), d_last.eq(last_beat),
            d_tag.eq(Cat(tile_addr, accum)),
        ]
        # The operand register: data without reset (flags and tag reset), the padding beats'
        # zeros selected in front of it.
        op_a = Signal.like(arr.i_a, reset_less=True)
        op_b = Signal.like(arr.i_b, reset_less=True)
        a_in = Mux(d_real, self.a_rdata, 0)
        b_in = Mux(d_real, self.b_rdata, 0)
        m.d.sync += [
            arr.i_valid.eq(d_valid),
            arr.i_first.eq(d_first),
            arr.i_last.eq(d_last),
            op_a.eq(a_in),
            op_b.eq(b_in),
            arr.i_tag.eq(d_tag),
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

        # accumulator read-modify-write: read the cycle before a row leaves the array (the
        # array's e_* outputs), register the old value with the row, write one cycle after the
        # row. A tile's rows leave bottom first on consecutive cycles: the first (o_r = R - 1)
        # at the tag's address, each next one rstride below the previous.
        ab = len(tile_addr)
        row_addr = Signal(range(cfg.acc_depth))
        next_row = Signal(range(cfg.acc_depth))
        read_addr = Signal(range(cfg.acc_depth))      # the address read in the previous cycle
        m.d.comb += [
            row_addr.eq(Mux(arr.e_r == R - 1, arr.e_tag[:ab], next_row)),
            self.acc_raddr.eq(row_addr),
        ]
        with m.If(arr.e_valid):
            m.d.sync += next_row.eq(row_addr - rstride)
        m.d.sync += read_addr.eq(row_addr)
        w_valid, w_accum = Signal(), Signal()
        w_addr = Signal(range(cfg.acc_depth))
        w_row = Signal(len(arr.o_row), reset_less=True)
        w_old = Signal(len(self.acc_rdata), reset_less=True)
        m.d.sync += [w_valid.eq(arr.o_valid), w_addr.eq(read_addr), w_row.eq(arr.o_row),
                     w_accum.eq(arr.o_tag[ab]), w_old.eq(self.acc_rdata)]
        lanes = []
        for j in range(C):
            old = w_old[32 * j:32 * (j + 1)]
            new = w_row[32 * j:32 * (j + 1)]
            lanes.append((Mux(w_accum, old, 0) + new)[:32])
        m.d.comb += [
            self.acc_waddr.eq(w_addr),
            self.acc_wdata.eq(Cat(*lanes)),
            self.acc_wen.eq(w_valid),
        ]
        return m


def _bits(depth: int) -> int:
    return max(1, (depth - 1).bit_length())
