"""Address generator for implicit-im2col convolution (seed 002): base/offset tables on chip."""

from amaranth import *
from amaranth.lib import data, wiring
from amaranth.lib.fifo import SyncFIFO, SyncFIFOBuffered
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from spec.config import AccelConfig
from spec.desc import DIM_BITS
from spec.tables import RUN_ENTRY_BITS, RUN_ENTRY_FIELDS, run_field_bits

from .collide import read_data
from .ports import ReadPort

__all__ = ["AddrGen", "RUN_ENTRY", "GATHER_QUEUE"]

#: A run-table entry as an Amaranth layout, from spec.tables's field list (bit 0 up).
RUN_ENTRY = data.StructLayout(dict(RUN_ENTRY_FIELDS))

#: Places in the gather's request queue: enough for one request per cycle through the walker's
#: table reads, their register stage and the queue's own latency.
GATHER_QUEUE = 8


class AddrGen(wiring.Component):
    """Loads a layer's convolution tables on chip, then gathers B blocks through them.

    Table formats are in ``docs/conv_tables.md``. ``tables_start`` (only while ``tables_busy``
    is low: the parameters are taken in that cycle) reads the offset table
    (``p_k`` u32), the run table (``p_runs`` u64, as pairs of u32 words) and the group table
    (``p_groups`` u32) through the B port, one 32-bit word per request, into three on-chip
    memories of ``conv_offset_entries``, ``conv_run_entries`` and ``conv_group_entries`` entries.

    ``gather_start`` loads one B block: for tap ``kk`` in ``0 .. p_rows-1`` (table index
    ``p_k0 + kk``) and each lane group ``g`` in ``0 .. p_gn-1`` (table group ``p_g0 + g``), one
    memory request per run of that group: ``array_cols`` bytes at element stride ``stride`` from
    ``p_b_addr + base + off[p_k0 + kk]`` (``p_b_addr`` as sampled on ``tables_start``: the
    offsets are stored with it added), written to lanes ``lane_lo .. lane_lo+lane_cnt-1`` of
    buffer row ``p_buf_base + g*p_buf_gstride + kk``. The first request reaches the port 7 cycles
    after ``gather_start``; then requests issue at up to one per cycle with no pause between
    taps, each when the port accepts it (``planner.convcost.gather_cycles`` is the exact
    timing); between requests the port is shown stride 1. ``gather_busy`` falls in the cycle
    after the last response was written.

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
        # A group entry is a run index, 0 .. run_count <= conv_run_entries (planner.offsets.
        # gather_b's rule): stored and read as wide as that, not 32 bits, so the walker's
        # compares on the entries read come from one block RAM per read port (the BRAM output
        # -> compare path was among the 8x8's worst in sessions 18-22, ~11.1 ns, with the bits
        # spread over two). A corrupt entry is read modulo 2 ** that width; the walk stays
        # bounded.
        ridx_shape = range(cfg.conv_run_entries + 1)
        m.submodules.grp_mem = grp_mem = Memory(shape=ridx_shape, depth=cfg.conv_group_entries,
                                                init=[])
        # The run range's low end is read from a copy of the group table that also holds each
        # entry plus one (written beside it at the table load), so the walker's "one run"
        # flag is an equality of two table reads, `lo + 1 == hi`, with no adder behind the
        # block RAM (the add and compare there were 10.4 and 10.9 ns of the whole 8x8, 0c732f5
        # seeds 3 and 2, session 25; 11.0-11.3 ns in sessions 22-23).
        ridx_bits = Shape.cast(ridx_shape).width
        m.submodules.grp_lo_mem = grp_lo_mem = Memory(shape=2 * ridx_bits + 1,
                                                      depth=cfg.conv_group_entries, init=[])
        off_w, grp_w = off_mem.write_port(), grp_mem.write_port()
        grp_lo_w = grp_lo_mem.write_port()
        run_w = run_mem.write_port(granularity=32)
        # The gather only runs after the table load has finished: no read whose data is used
        # sees a write (hw.collide: poisoned in a collision-checking build).
        off_r = off_mem.read_port(transparent_for=())
        run_r = run_mem.read_port(transparent_for=())
        grp_lo_r = grp_lo_mem.read_port(transparent_for=())
        grp_hi_r = grp_mem.read_port(transparent_for=())
        off_rd, run_rd = read_data(m, off_r, [off_w]), read_data(m, run_r, [run_w])
        grp_lo_rd, grp_hi_rd = read_data(m, grp_lo_r, [grp_lo_w]), read_data(m, grp_hi_r, [grp_w])

        # -- table loader ------------------------------------------------------------------------
        t_issue = Signal()
        t_phase, r_phase = Signal(2), Signal(2)       # 0 offsets, 1 runs (2 words each), 2 groups
        t_left, r_left = Signal(DIM_BITS + 1), Signal(DIM_BITS + 1)
        t_addr = Signal(ab)
        r_idx = Signal(DIM_BITS + 1)
        run_words, grp_words = (Signal(DIM_BITS + 1, name=n) for n in ("run_words", "grp_words"))
        run_addr, grp_addr = Signal(ab), Signal(ab)
        b_addr = Signal(ab)
        # `t_left == 1` / `r_left == 1`, registered with the counters (their compares were on
        # the path into the counters and the table writes: 11.0 ns of the whole 8x8, session 21)
        t_one, r_one = Signal(), Signal()
        # While idle the loader's registers follow their parameters, and from `tables_start` on
        # they hold or count: the same values as sampling on the start, but the start (the
        # sequencer's launch, decoded from its state and the checker's done flag) only sets the
        # two flags below. Its fan-out into ~190 flip-flops was the whole 8x8's worst path
        # (11.6 ns, 87 endpoints over 10 ns, session 21).
        with m.If(~self.tables_busy):
            m.d.sync += [
                t_phase.eq(0), t_left.eq(self.p_k), t_one.eq(self.p_k == 1),
                t_addr.eq(self.p_off_addr),
                r_phase.eq(0), r_left.eq(self.p_k), r_one.eq(self.p_k == 1), r_idx.eq(0),
                run_words.eq(self.p_runs << 1),
                grp_words.eq(self.p_groups),
                run_addr.eq(self.p_run_addr), grp_addr.eq(self.p_grp_addr),
                b_addr.eq(self.p_b_addr),
            ]
        with m.If(self.tables_start):
            m.d.sync += [self.tables_busy.eq(1), t_issue.eq(1)]
        t_accept = Signal()
        m.d.comb += t_accept.eq(t_issue & self.mem.ready)
        with m.If(t_accept):
            with m.If(t_one):
                with m.Switch(t_phase):
                    with m.Case(0):
                        m.d.sync += [t_phase.eq(1), t_left.eq(run_words),
                                     t_one.eq(run_words == 1), t_addr.eq(run_addr)]
                    with m.Case(1):
                        m.d.sync += [t_phase.eq(2), t_left.eq(grp_words),
                                     t_one.eq(grp_words == 1), t_addr.eq(grp_addr)]
                    with m.Default():
                        m.d.sync += t_issue.eq(0)
            with m.Else():
                m.d.sync += [t_left.eq(t_left - 1), t_one.eq(t_left == 2), t_addr.eq(t_addr + 4)]
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
            grp_lo_w.addr.eq(r_idx), grp_lo_w.en.eq(grp_w.en),
            grp_lo_w.data.eq(Cat(word[:ridx_bits], word[:ridx_bits] + 1)),
        ]
        with m.If(t_resp):
            with m.If(r_one):
                m.d.sync += r_idx.eq(0)
                with m.Switch(r_phase):
                    with m.Case(0):
                        m.d.sync += [r_phase.eq(1), r_left.eq(run_words),
                                     r_one.eq(run_words == 1)]
                    with m.Case(1):
                        m.d.sync += [r_phase.eq(2), r_left.eq(grp_words),
                                     r_one.eq(grp_words == 1)]
                    with m.Default():
                        m.d.sync += self.tables_busy.eq(0)
            with m.Else():
                m.d.sync += [r_left.eq(r_left - 1), r_one.eq(r_left == 2), r_idx.eq(r_idx + 1)]

        # -- gather: a walker, two table-read stages and a request queue -------------------------
        # The walker steps through (tap, run) pairs without a pause between taps, one table read
        # per cycle, as long as the request queue has room for every entry in flight (`room`
        # counts free places: queue places not holding or promised to an entry). The tables'
        # outputs are registered (stage Q) before the address is summed into the queue, so no
        # block-RAM output feeds an adder, and the port's `ready` only reaches the queue's read
        # side and the counters, never the table reads.
        k0, rows = Signal(DIM_BITS, name="g_k0"), Signal(DIM_BITS, name="g_rows")
        buf_base = Signal.like(self.p_buf_base)
        gstride = Signal(DIM_BITS)
        # the tables' read registers hold no state of their own (each is loaded before it is
        # used): without a reset, an ECP5 flow can keep them in the block RAM's output register
        # (bench.outreg). Run indices are as wide as the group table's entries.
        run_lo, run_hi = Signal(ridx_shape, reset_less=True), Signal(ridx_shape, reset_less=True)
        run_lo1 = Signal(ridx_bits + 1, reset_less=True)       # run_lo + 1

        walking = Signal()                              # (tap, run) pairs left to read
        w_go = Signal()                                 # read the pair this cycle
        w_kk = Signal(DIM_BITS)                         # tap
        w_kaddr = Signal(DIM_BITS)                      # k0 + tap: the offset table's address
        w_ridx = Signal(ridx_shape)                     # run
        w_first, w_rlast, w_klast = Signal(), Signal(), Signal()
        one_run = Signal()                              # the block's groups have one run
        room = Signal(range(GATHER_QUEUE + 1), init=GATHER_QUEUE)

        m.d.comb += [
            w_go.eq(walking & (room != 0)),
            off_r.addr.eq(w_kaddr), run_r.addr.eq(w_ridx),
        ]
        with m.If(w_go):
            with m.If(w_rlast):                         # the tap's last run: next tap
                m.d.sync += [w_ridx.eq(run_lo), w_rlast.eq(one_run), w_first.eq(1)]
                with m.If(w_klast):
                    m.d.sync += walking.eq(0)
                with m.Else():
                    m.d.sync += [w_kk.eq(w_kk + 1), w_kaddr.eq(w_kaddr + 1),
                                 w_klast.eq(w_kk + 2 == rows)]
            with m.Else():
                m.d.sync += [w_ridx.eq(w_ridx + 1), w_rlast.eq(w_ridx + 2 == run_hi),
                             w_first.eq(0)]

        # stage D: the tables' outputs; stage Q: registered
        d_valid, d_first = Signal(), Signal()
        d_kk = Signal(DIM_BITS)
        q_valid, q_first = Signal(), Signal()
        q_off = Signal(32, reset_less=True)
        q_run = Signal(RUN_ENTRY, reset_less=True)
        q_krow = Signal(range(cfg.buf_b_depth))        # buf_base + tap: the tap's first row
        m.d.sync += [
            d_valid.eq(w_go), d_first.eq(w_first), d_kk.eq(w_kk),
            q_valid.eq(d_valid), q_first.eq(d_first), q_krow.eq(buf_base + d_kk),
            q_off.eq(off_rd), q_run.eq(run_rd),
        ]
        # into the queue: the request's address, and its buffer row buf_base + g*gstride + tap
        req_layout = data.StructLayout({
            "addr": ab, "stride": run_field_bits("stride"), "lo": lanes_bits,
            "cnt": lanes_bits + 1, "row": range(cfg.buf_b_depth)})
        m.submodules.req = req = SyncFIFOBuffered(width=req_layout.size, depth=GATHER_QUEUE)
        grow = Signal(range(cfg.buf_b_depth))          # the row of the next run of this tap
        row = Signal(range(cfg.buf_b_depth))
        w_req = data.View(req_layout, req.w_data)
        m.d.comb += [
            row.eq(Mux(q_first, q_krow, grow)),
            w_req.addr.eq(q_off + q_run.base), w_req.stride.eq(q_run.stride),
            w_req.lo.eq(q_run.lane_lo), w_req.cnt.eq(q_run.lane_cnt), w_req.row.eq(row),
            req.w_en.eq(q_valid),
        ]
        with m.If(q_valid):
            m.d.sync += grow.eq(row + Mux(q_run.last, gstride, 0))

        # one entry per request in flight, read by its response. With a port latency of 2 or
        # more a buffered FIFO: an entry written in cycle x is readable in x + 2, before its
        # response, and it comes from a register (the queue's LUT-RAM read in front of buffer
        # B's write enables and the lane shift was a 11.4-12.0 ns path of the whole 8x8,
        # sessions 18 and 21). With a one-cycle port an unbuffered one (readable in x + 1).
        # The entry holds the lanes' write mask, not (lo, cnt): the FIFO's read -> mask decode
        # -> buffer B write enables was the whole 8x8's worst path (11.4 ns, session 18).
        r_req = data.View(req_layout, req.r_data)
        meta_fifo = SyncFIFOBuffered if cfg.b_port_latency_cycles >= 2 else SyncFIFO
        m.submodules.meta = meta = meta_fifo(
            width=len(r_req.row) + lanes_bits + C,
            depth=cfg.b_port_latency_cycles + 4)
        outstanding = Signal(range(cfg.b_port_latency_cycles + 6))
        g_accept = Signal()
        g_resp = Signal()
        m.d.comb += [
            g_accept.eq(self.gather_busy & req.r_rdy & meta.w_rdy & self.mem.ready),
            req.r_en.eq(g_accept),
            meta.w_data.eq(Cat(r_req.row, r_req.lo, (((1 << r_req.cnt) - 1) << r_req.lo)[:C])),
            meta.w_en.eq(g_accept),
        ]
        with m.If(w_go & ~g_accept):
            m.d.sync += room.eq(room - 1)
        with m.Elif(~w_go & g_accept):
            m.d.sync += room.eq(room + 1)
        with m.If(g_accept & ~g_resp):
            m.d.sync += outstanding.eq(outstanding + 1)
        with m.Elif(~g_accept & g_resp):
            m.d.sync += outstanding.eq(outstanding - 1)

        with m.FSM(name="gather"):
            with m.State("IDLE"):
                # the run range of the block's groups is read in the start cycle
                m.d.comb += [grp_lo_r.addr.eq(self.p_g0),
                             grp_hi_r.addr.eq(self.p_g0 + self.p_gn)]
                with m.If(self.gather_start):
                    m.d.sync += [
                        self.gather_busy.eq(1),
                        k0.eq(self.p_k0), rows.eq(self.p_rows),
                        buf_base.eq(self.p_buf_base), gstride.eq(self.p_buf_gstride),
                    ]
                    m.next = "GROUPS"
            with m.State("GROUPS"):            # the run range, registered
                m.d.sync += [run_lo.eq(grp_lo_rd[:ridx_bits]), run_lo1.eq(grp_lo_rd[ridx_bits:]),
                             run_hi.eq(grp_hi_rd)]
                m.next = "SETUP"
            with m.State("SETUP"):             # the walker's start and its flags, from registers
                m.d.sync += [
                    walking.eq(run_lo != run_hi),       # no runs (empty or corrupt): no reads
                    w_kk.eq(0), w_kaddr.eq(k0), w_ridx.eq(run_lo), w_first.eq(1),
                    one_run.eq(run_lo1 == run_hi), w_rlast.eq(run_lo1 == run_hi),
                    w_klast.eq(rows == 1),
                ]
                m.next = "WALK"
            with m.State("WALK"):              # until every request is answered
                with m.If(~walking & (room == GATHER_QUEUE) &
                          ((outstanding == 0) | ((outstanding == 1) & g_resp))):
                    m.d.sync += self.gather_busy.eq(0)
                    m.next = "IDLE"

        # -- the B port: the table loader and the gather never run at the same time -------------
        # Without a request, the port is shown stride 1 (a dense beat's cost), so the memory's
        # credit never banks for a stale strided request: every request of the gather costs
        # exactly its own beats (planner.convcost.gather_cycles).
        with m.If(self.tables_busy):
            m.d.comb += [self.mem.addr.eq(t_addr), self.mem.valid.eq(t_issue),
                         self.mem.stride.eq(1)]
        with m.Else():
            m.d.comb += [self.mem.addr.eq(r_req.addr),
                         self.mem.valid.eq(self.gather_busy & req.r_rdy & meta.w_rdy),
                         self.mem.stride.eq(Mux(req.r_rdy, r_req.stride, 1))]

        # -- gather: response side ---------------------------------------------------------------
        nrow = len(r_req.row)
        r_row = meta.r_data[:nrow]
        r_lo = meta.r_data[nrow:nrow + lanes_bits]
        r_mask = meta.r_data[nrow + lanes_bits:]
        m.d.comb += [
            g_resp.eq(self.gather_busy & self.mem.rvalid),
            meta.r_en.eq(g_resp),
            self.w_addr.eq(r_row),
            self.w_data.eq(self.mem.rdata << (r_lo * 8)),
            self.w_en.eq(Mux(g_resp, r_mask, 0)),
        ]
        return m
