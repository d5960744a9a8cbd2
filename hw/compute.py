"""Compute engine: walks one partition's inner and array tiles through the systolic array."""

from amaranth import *
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .array import SystolicArray
from .config import AccelConfig
from .dma import DIM_BITS

__all__ = ["ComputeEngine", "drain_cycles"]


def drain_cycles(cfg: AccelConfig) -> int:
    """Cycles the compute engine stays busy after the cycle that issues a partition's last beat:
    1 (buffer read) + the array latency ``R + C`` + ``R - 1`` further result rows + 1
    (accumulator write) = ``2R + C + 1``."""
    return 2 * cfg.array_rows + cfg.array_cols + 1


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

    Latency: ``busy`` stays high :attr:`drain_cycles` cycles after the last beat is issued, so
    that when it falls every result is in the accumulator. ``beat_real`` is high in cycles where
    a non-padding beat is issued (the MAC-active counter).

    Parameters
    ----------
    cfg : AccelConfig
        Uses ``array_rows``, ``array_cols``, buffer and accumulator depths.

    Members
    -------
    start : ``In(1)``; busy, beat_real : ``Out(1)``
    p_* : ``In(...)`` partition parameters, sampled on ``start``
    rd_en, a_raddr, b_raddr : ``Out(...)``; a_rdata, b_rdata : ``In(...)`` (synchronous read
    ports; ``rd_en`` is low for padding beats, which read nothing)
    acc_raddr : ``Out``; acc_rdata : ``In``; acc_waddr, acc_wdata, acc_wen : ``Out``
    """

    def __init__(self, cfg: AccelConfig):
        self._cfg = cfg
        self.array = SystolicArray(cfg, tag_bits=_bits(cfg.acc_depth) + 1)
        super().__init__({
            "start": In(1),
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
        assert drain_cycles(self._cfg) == 1 + self.array.latency + self._cfg.array_rows
        return drain_cycles(self._cfg)

    def elaborate(self, platform):
        m = Module()
        cfg = self._cfg
        R, C = cfg.array_rows, cfg.array_cols
        m.submodules.array = arr = self.array

        # parameters, sampled on start
        a_base = Signal.like(self.p_a_base)
        b_base = Signal.like(self.p_b_base)
        acc_base = Signal.like(self.p_acc_base)
        rstride = Signal.like(self.p_acc_rstride)
        gm, gn = Signal(DIM_BITS), Signal(DIM_BITS)
        tmg, tng = Signal(DIM_BITS), Signal(DIM_BITS)
        pk, keff, span = Signal(DIM_BITS), Signal(DIM_BITS), Signal(DIM_BITS)
        accum = Signal()
        # loop counters: inner-tile origin (im, in_), array tile (tm, tn), beat k
        im, in_, tm, tn, k = (Signal(DIM_BITS, name=n) for n in ("im", "in_", "tm", "tn", "k"))
        running = Signal()
        drain = Signal(range(self.drain_cycles + 1))

        with m.If(self.start):
            m.d.sync += [
                a_base.eq(self.p_a_base), b_base.eq(self.p_b_base),
                acc_base.eq(self.p_acc_base), rstride.eq(self.p_acc_rstride),
                gm.eq(self.p_gm), gn.eq(self.p_gn), tmg.eq(self.p_tile_mg),
                tng.eq(self.p_tile_ng), pk.eq(self.p_pk), keff.eq(self.p_keff),
                span.eq(Mux(self.p_keff > R, self.p_keff, R)), accum.eq(self.p_accum),
                im.eq(0), in_.eq(0), tm.eq(0), tn.eq(0), k.eq(0),
                running.eq(1), self.busy.eq(1),
            ]

        tm_end = Signal(DIM_BITS)
        tn_end = Signal(DIM_BITS)
        m.d.comb += [
            tm_end.eq(Mux(im + tmg < gm, im + tmg, gm)),
            tn_end.eq(Mux(in_ + tng < gn, in_ + tng, gn)),
        ]
        last_beat = Signal()
        m.d.comb += last_beat.eq(k + 1 == span)
        with m.If(running):
            with m.If(~last_beat):
                m.d.sync += k.eq(k + 1)
            with m.Else():
                m.d.sync += k.eq(0)
                with m.If(tn + 1 < tn_end):
                    m.d.sync += tn.eq(tn + 1)
                with m.Elif(tm + 1 < tm_end):
                    m.d.sync += [tn.eq(in_), tm.eq(tm + 1)]
                with m.Elif(in_ + tng < gn):                  # next inner tile along n
                    m.d.sync += [in_.eq(in_ + tng), tn.eq(in_ + tng), tm.eq(im)]
                with m.Elif(im + tmg < gm):                   # next inner-tile row along m
                    m.d.sync += [in_.eq(0), tn.eq(0), im.eq(im + tmg), tm.eq(im + tmg)]
                with m.Else():
                    m.d.sync += [running.eq(0), drain.eq(self.drain_cycles - 1)]
        with m.If(~running & self.busy & ~self.start):
            with m.If(drain == 0):
                m.d.sync += self.busy.eq(0)
            with m.Else():
                m.d.sync += drain.eq(drain - 1)

        # beat issue: synchronous buffer reads, flags delayed one cycle to meet the data
        real = Signal()
        m.d.comb += [
            real.eq(running & (k < keff)),
            self.beat_real.eq(real),
            self.rd_en.eq(real),
            self.a_raddr.eq(a_base + tm * pk + k),
            self.b_raddr.eq(b_base + tn * pk + k),
        ]
        tile_addr = Signal(range(cfg.acc_depth))
        m.d.comb += tile_addr.eq(acc_base + tm * (R * rstride) + tn)
        d_valid, d_real, d_first, d_last = Signal(), Signal(), Signal(), Signal()
        d_tag = Signal(len(arr.i_tag))
        m.d.sync += [
            d_valid.eq(running), d_real.eq(real), d_first.eq(k == 0), d_last.eq(last_beat),
            d_tag.eq(Cat(tile_addr, accum)),
        ]
        m.d.comb += [
            arr.i_valid.eq(d_valid),
            arr.i_first.eq(d_first),
            arr.i_last.eq(d_last),
            arr.i_a.eq(Mux(d_real, self.a_rdata, 0)),
            arr.i_b.eq(Mux(d_real, self.b_rdata, 0)),
            arr.i_tag.eq(d_tag),
        ]

        # accumulator read-modify-write: read in the result cycle, write one cycle later
        ab = len(tile_addr)
        row_addr = Signal(range(cfg.acc_depth))
        m.d.comb += [
            row_addr.eq(arr.o_tag[:ab] + arr.o_r * rstride),
            self.acc_raddr.eq(row_addr),
        ]
        w_valid, w_accum = Signal(), Signal()
        w_addr = Signal(range(cfg.acc_depth))
        w_row = Signal(len(arr.o_row))
        m.d.sync += [w_valid.eq(arr.o_valid), w_addr.eq(row_addr), w_row.eq(arr.o_row),
                     w_accum.eq(arr.o_tag[ab])]
        lanes = []
        for j in range(C):
            old = self.acc_rdata[32 * j:32 * (j + 1)]
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
