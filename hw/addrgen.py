"""Address generator for implicit-im2col convolution (seed 002): base/offset tables on chip."""

from amaranth import *
from amaranth.lib import data, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from spec.config import AccelConfig
from spec.desc import DIM_BITS
from spec.tables import RUN_ENTRY_BITS, RUN_ENTRY_FIELDS, run_field_bits

from .ports import ReadPort

__all__ = ["AddrGen", "RUN_ENTRY"]

#: A run-table entry as an Amaranth layout, from spec.tables's field list (bit 0 up).
RUN_ENTRY = data.StructLayout(dict(RUN_ENTRY_FIELDS))


class AddrGen(wiring.Component):
    """Loads a layer's convolution tables on chip, then gathers B blocks through them.

    Table formats are in ``docs/conv_tables.md``. ``tables_start`` reads the offset table
    (``p_k`` u32), the run table (``p_runs`` u64, as pairs of u32 words) and the group table
    (``p_groups`` u32) through the B port, one 32-bit word per request, into three on-chip
    memories of ``conv_offset_entries``, ``conv_run_entries`` and ``conv_group_entries`` entries.

    ``gather_start`` loads one B block: for tap ``kk`` in ``0 .. p_rows-1`` (table index
    ``p_k0 + kk``) and each lane group ``g`` in ``0 .. p_gn-1`` (table group ``p_g0 + g``), one
    memory request per run of that group: ``array_cols`` bytes at element stride ``stride`` from
    ``p_b_addr + base + off[p_k0 + kk]`` (``p_b_addr`` as sampled on ``tables_start``: the
    offsets are stored with it added), written to lanes ``lane_lo .. lane_lo+lane_cnt-1`` of
    buffer row ``p_buf_base + g*p_buf_gstride + kk``. Requests issue at up to one per cycle, with
    two bubble cycles per tap; ``gather_busy`` falls in the cycle after the last response was
    written.

    Table contents are trusted (the compiler produces them, the firmware validator checks them):
    a corrupt table can only make wrong buffer contents, never a memory write, and every walk is
    bounded by the table sizes.

    Parameters
    ----------
    cfg : AccelConfig
        Uses ``array_cols``, ``b_beat_bytes``, ``buf_b_depth``, ``b_port_latency_cycles``,
        ``conv_*_entries``, ``dram_addr_bits``.

    Members
    -------
    tables_start, gather_start : ``In(1)``; tables_busy, gather_busy : ``Out(1)``
    p_* : ``In(...)`` parameters, sampled on the start pulses (``p_b_addr`` on
    ``tables_start``)
    mem : ``Out(ReadPort.Signature(strided=True))``
    w_addr, w_data, w_en : ``Out(...)`` buffer B write port (``w_en`` one bit per byte)
    """

    def __init__(self, cfg: AccelConfig):
        self._cfg = cfg
        ab = cfg.dram_addr_bits
        C = cfg.array_cols
        super().__init__({
            "tables_start": In(1),
            "tables_busy": Out(1),
            "p_off_addr": In(ab),
            "p_run_addr": In(ab),
            "p_grp_addr": In(ab),
            "p_k": In(DIM_BITS),
            "p_runs": In(DIM_BITS),
            "p_groups": In(DIM_BITS),
            "gather_start": In(1),
            "gather_busy": Out(1),
            "p_b_addr": In(ab),
            "p_k0": In(DIM_BITS),
            "p_rows": In(DIM_BITS),
            "p_g0": In(DIM_BITS),
            "p_gn": In(DIM_BITS),
            "p_buf_base": In(range(cfg.buf_b_depth)),
            "p_buf_gstride": In(DIM_BITS),
            "mem": Out(ReadPort.Signature(addr_bits=ab, data_bytes=cfg.b_beat_bytes,
                                          strided=True)),
            "w_addr": Out(range(cfg.buf_b_depth)),
            "w_data": Out(8 * cfg.b_beat_bytes),
            "w_en": Out(C),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self._cfg
        C = cfg.array_cols
        ab = cfg.dram_addr_bits
        lanes_bits = max(1, (C - 1).bit_length())

        m.submodules.off_mem = off_mem = Memory(shape=32, depth=cfg.conv_offset_entries, init=[])
        m.submodules.run_mem = run_mem = Memory(shape=RUN_ENTRY_BITS, depth=cfg.conv_run_entries,
                                                init=[])
        m.submodules.grp_mem = grp_mem = Memory(shape=32, depth=cfg.conv_group_entries, init=[])
        off_w, grp_w = off_mem.write_port(), grp_mem.write_port()
        run_w = run_mem.write_port(granularity=32)
        # The gather only runs after the table load has finished: no read sees a write.
        off_r = off_mem.read_port(transparent_for=())
        run_r = run_mem.read_port(transparent_for=())
        grp_lo_r = grp_mem.read_port(transparent_for=())
        grp_hi_r = grp_mem.read_port(transparent_for=())

        # -- table loader ------------------------------------------------------------------------
        t_issue = Signal()
        t_phase, r_phase = Signal(2), Signal(2)       # 0 offsets, 1 runs (2 words each), 2 groups
        t_left, r_left = Signal(DIM_BITS + 1), Signal(DIM_BITS + 1)
        t_addr = Signal(ab)
        r_idx = Signal(DIM_BITS + 1)
        k_words, run_words, grp_words = (Signal(DIM_BITS + 1, name=n)
                                         for n in ("k_words", "run_words", "grp_words"))
        run_addr, grp_addr = Signal(ab), Signal(ab)
        b_addr = Signal(ab)
        with m.If(self.tables_start):
            m.d.sync += [
                self.tables_busy.eq(1), t_issue.eq(1),
                t_phase.eq(0), t_left.eq(self.p_k), t_addr.eq(self.p_off_addr),
                r_phase.eq(0), r_left.eq(self.p_k), r_idx.eq(0),
                k_words.eq(self.p_k), run_words.eq(self.p_runs << 1),
                grp_words.eq(self.p_groups),
                run_addr.eq(self.p_run_addr), grp_addr.eq(self.p_grp_addr),
                b_addr.eq(self.p_b_addr),
            ]
        t_accept = Signal()
        m.d.comb += t_accept.eq(t_issue & self.mem.ready)
        with m.If(t_accept):
            with m.If(t_left == 1):
                with m.Switch(t_phase):
                    with m.Case(0):
                        m.d.sync += [t_phase.eq(1), t_left.eq(run_words), t_addr.eq(run_addr)]
                    with m.Case(1):
                        m.d.sync += [t_phase.eq(2), t_left.eq(grp_words), t_addr.eq(grp_addr)]
                    with m.Default():
                        m.d.sync += t_issue.eq(0)
            with m.Else():
                m.d.sync += [t_left.eq(t_left - 1), t_addr.eq(t_addr + 4)]
        word = self.mem.rdata[:32]
        t_resp = Signal()
        m.d.comb += [
            t_resp.eq(self.tables_busy & self.mem.rvalid),
            # offsets are stored with the layer's b_addr added: one adder less on the gather's
            # address path (table memory -> port)
            off_w.addr.eq(r_idx), off_w.data.eq(word + b_addr),
            off_w.en.eq(t_resp & (r_phase == 0)),
            run_w.addr.eq(r_idx >> 1), run_w.data.eq(Cat(word, word)),
            run_w.en.eq(Mux(t_resp & (r_phase == 1), Mux(r_idx[0], 0b10, 0b01), 0)),
            grp_w.addr.eq(r_idx), grp_w.data.eq(word), grp_w.en.eq(t_resp & (r_phase == 2)),
        ]
        with m.If(t_resp):
            with m.If(r_left == 1):
                m.d.sync += r_idx.eq(0)
                with m.Switch(r_phase):
                    with m.Case(0):
                        m.d.sync += [r_phase.eq(1), r_left.eq(run_words)]
                    with m.Case(1):
                        m.d.sync += [r_phase.eq(2), r_left.eq(grp_words)]
                    with m.Default():
                        m.d.sync += self.tables_busy.eq(0)
            with m.Else():
                m.d.sync += [r_left.eq(r_left - 1), r_idx.eq(r_idx + 1)]

        # -- gather: request side ----------------------------------------------------------------
        k0, rows = Signal(DIM_BITS, name="g_k0"), Signal(DIM_BITS, name="g_rows")
        buf_base = Signal.like(self.p_buf_base)
        gstride = Signal(DIM_BITS)
        kk = Signal(DIM_BITS)
        g = Signal(DIM_BITS)
        run_idx, run_hi, run_lo = Signal(32), Signal(32), Signal(32)
        row_base = Signal(range(cfg.buf_b_depth))      # buf_base + g * gstride
        issuing = Signal()

        meta_row = Signal(range(cfg.buf_b_depth))
        meta_lo = Signal(lanes_bits)
        meta_cnt = Signal(lanes_bits + 1)
        # one entry per request in flight; an unbuffered FIFO: an entry written in cycle x is
        # readable in x + 1, before its response (port latency >= 1)
        m.submodules.meta = meta = SyncFIFO(
            width=len(meta_row) + len(meta_lo) + len(meta_cnt),
            depth=cfg.b_port_latency_cycles + 4)
        outstanding = Signal(range(cfg.b_port_latency_cycles + 6))

        # The request in flight comes from registers (its address already summed); the run
        # table's read port always holds the *next* run entry, and the offset and a tap's first
        # run are read the cycle before the tap starts. So the port address is a register.
        run = data.View(RUN_ENTRY, run_r.data)
        cur_addr = Signal(ab)
        cur_stride = Signal(run_field_bits("stride"))
        cur_lane_lo = Signal(run_field_bits("lane_lo"))
        cur_lane_cnt = Signal(run_field_bits("lane_cnt"))
        cur_last = Signal()
        tap_off = Signal(32)

        def take_run(base_off):
            """The request registers from the run entry on the read port."""
            return [cur_addr.eq(base_off + run.base), cur_lane_lo.eq(run.lane_lo),
                    cur_lane_cnt.eq(run.lane_cnt), cur_stride.eq(run.stride),
                    cur_last.eq(run.last)]

        g_accept = Signal()
        g_resp = Signal()
        with m.If(g_accept & ~g_resp):
            m.d.sync += outstanding.eq(outstanding + 1)
        with m.Elif(~g_accept & g_resp):
            m.d.sync += outstanding.eq(outstanding - 1)
        # read enables: only where a state asks for a new entry (data otherwise holds)
        m.d.comb += [off_r.en.eq(0), run_r.en.eq(0)]

        with m.FSM(name="gather"):
            with m.State("IDLE"):
                # the run range of the block's groups is read in the start cycle
                m.d.comb += [grp_lo_r.addr.eq(self.p_g0),
                             grp_hi_r.addr.eq(self.p_g0 + self.p_gn)]
                with m.If(self.gather_start):
                    m.d.sync += [
                        self.gather_busy.eq(1), issuing.eq(1),
                        k0.eq(self.p_k0), rows.eq(self.p_rows),
                        buf_base.eq(self.p_buf_base),
                        gstride.eq(self.p_buf_gstride), kk.eq(0),
                    ]
                    m.next = "GROUPS"
            with m.State("GROUPS"):            # the run range, registered
                m.d.sync += [run_lo.eq(grp_lo_r.data), run_hi.eq(grp_hi_r.data)]
                m.next = "RANGE"
            with m.State("RANGE"):             # read the first tap's offset and first run
                m.d.comb += [off_r.addr.eq(k0), off_r.en.eq(1),
                             run_r.addr.eq(run_lo), run_r.en.eq(1)]
                m.next = "TAP"
            with m.State("TAP"):               # off[k0 + kk] and the first run are on the ports
                m.d.comb += [run_r.addr.eq(run_lo + 1), run_r.en.eq(1)]
                m.d.sync += [run_idx.eq(run_lo), g.eq(0), row_base.eq(buf_base),
                             tap_off.eq(off_r.data)]
                m.d.sync += take_run(off_r.data)
                with m.If(run_lo == run_hi):   # no runs (corrupt or empty table): skip the tap
                    m.next = "NEXT"
                with m.Else():
                    m.next = "RUN"
            with m.State("RUN"):
                m.d.comb += [
                    self.mem.valid.eq(meta.w_rdy),
                    g_accept.eq(meta.w_rdy & self.mem.ready),
                    run_r.addr.eq(run_idx + 2),
                    run_r.en.eq(g_accept),
                ]
                with m.If(g_accept):
                    m.d.sync += run_idx.eq(run_idx + 1)
                    m.d.sync += take_run(tap_off)
                    with m.If(cur_last):
                        m.d.sync += [g.eq(g + 1), row_base.eq(row_base + gstride)]
                    with m.If(run_idx + 1 == run_hi):
                        m.next = "NEXT"
            with m.State("NEXT"):
                with m.If(kk + 1 == rows):
                    m.d.sync += issuing.eq(0)
                    m.next = "DRAIN"
                with m.Else():
                    # the next tap's offset and first run, for TAP
                    m.d.comb += [off_r.addr.eq(k0 + kk + 1), off_r.en.eq(1),
                                 run_r.addr.eq(run_lo), run_r.en.eq(1)]
                    m.d.sync += kk.eq(kk + 1)
                    m.next = "TAP"
            with m.State("DRAIN"):
                with m.If((outstanding == 0) | ((outstanding == 1) & g_resp)):
                    m.d.sync += self.gather_busy.eq(0)
                    m.next = "IDLE"

        # -- the B port: the table loader and the gather never run at the same time -------------
        with m.If(self.tables_busy):
            m.d.comb += [self.mem.addr.eq(t_addr), self.mem.valid.eq(t_issue),
                         self.mem.stride.eq(1)]
        with m.Else():
            m.d.comb += [self.mem.addr.eq(cur_addr), self.mem.stride.eq(cur_stride)]
        m.d.comb += [
            meta.w_data.eq(Cat((row_base + kk)[:len(meta_row)], cur_lane_lo[:lanes_bits],
                               cur_lane_cnt[:lanes_bits + 1])),
            meta.w_en.eq(g_accept),
        ]

        # -- gather: response side ---------------------------------------------------------------
        r_row = meta.r_data[:len(meta_row)]
        r_lo = meta.r_data[len(meta_row):len(meta_row) + lanes_bits]
        r_cnt = meta.r_data[len(meta_row) + lanes_bits:]
        m.d.comb += [
            g_resp.eq(self.gather_busy & self.mem.rvalid),
            meta.r_en.eq(g_resp),
            self.w_addr.eq(r_row),
            self.w_data.eq(self.mem.rdata << (r_lo * 8)),
            self.w_en.eq(Mux(g_resp, (((1 << r_cnt) - 1) << r_lo)[:C], 0)),
        ]
        return m
