"""Sequencer: runs one tiled GEMM descriptor with lock-step double buffering."""

from amaranth import *
from amaranth.lib import wiring
from amaranth.lib.crc import catalog
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from spec.config import AccelConfig
from spec.desc import B_MODE_DEPTHWISE, DESC_FIELDS, DIM_BITS, ErrorCode, depthwise_arrays
from spec.layouts import OutFormat
from spec.regmap import COUNTERS

from .addrgen import AddrGen
from .bits import log2
from .checker import (LAYER_FIELDS, PARAM_ARRAYS, RecordChecker, depthwise_mode,
                      record_members, times)
from .collide import read_data
from .compute import ComputeEngine, drain_cycles, mesh_drain_cycles
from .counters import CATEGORIES, PerfCounters
from .crc import restartable_crc
from .dma import LoadEngine, StoreEngine
from .dwwalk import DwWalker
from .params import WEIGHT_ARRAYS, ParamLoader, ParamMemories
from .stepper import StepWalker, step_layout
from .ports import ReadPort, WritePort, named_members

__all__ = ["Sequencer", "LAYER_FIELDS", "CATEGORIES", "LOCAL_READ_LATENCY", "PHASE_CTRL_CYCLES",
           "store_wait_cycles", "mesh_store_wait_cycles"]

#: The CRC of the A beats a layer loads (the record's ``a_crc``): CRC-32 as zlib computes it,
#: over each beat's bytes in address order.
A_CRC_ALGORITHM = catalog.CRC32_ISO_HDLC

#: Control cycles between two phases: the cycle ``WAIT`` sees every engine idle, then
#: ``ISSUE`` (``planner.cost.ModelConstants.step_ctrl_cycles``).
PHASE_CTRL_CYCLES = 2

#: Cycles from a local-buffer read request to its data at the B load engine: the block RAM's
#: synchronous read, then two registers (``planner.cost.ModelConstants``
#: ``local_read_latency_cycles``).
LOCAL_READ_LATENCY = 3


def store_wait_cycles(cfg: AccelConfig) -> int:
    """Cycles a phase's store waits after ``ISSUE`` before it starts: the rest of the previous
    step's drain. That step issued its last beat :data:`PHASE_CTRL_CYCLES` before this
    ``ISSUE`` at the earliest, and its last result is in the accumulator
    :func:`~hw.compute.drain_cycles` after that beat; the store reads the accumulator from the
    cycle after its start."""
    return drain_cycles(cfg) - PHASE_CTRL_CYCLES


def mesh_store_wait_cycles(cfg: AccelConfig) -> int:
    """:func:`store_wait_cycles` of a depthwise step: the rest of the mesh's drain
    (:func:`~hw.compute.mesh_drain_cycles`)."""
    return mesh_drain_cycles(cfg) - PHASE_CTRL_CYCLES


class Sequencer(wiring.Component):
    """Executes a :class:`spec.desc.GemmDescriptor` with no per-tile host help.

    On ``start`` the descriptor inputs are latched and checked (:func:`spec.desc.check` states
    the same rules; a failing descriptor ends at once with ``error`` set and no memory access).
    The GEMM is then cut into *steps*, one per (m partition, n partition, k partition), in the
    order outer partition loop -> inner partition loop -> split-K loop (seed 000 step 5).

    Schedule (lock-step double buffering): a prologue loads step 0's A and B blocks; then each
    *phase* runs, concurrently, the compute of step ``t``, the loads of step ``t+1`` into the
    other halves of the A and B buffers (skipped for an operand whose block does not change),
    and the store of the accumulator half finished at step ``t-1``; the phase ends when all of
    them are done. An epilogue stores the last partition. Each phase costs two control cycles.
    The compute of step ``t`` is done when its last beat is issued: the array's drain of that
    step overlaps the next phase (the next step's beats follow it through the array), and only
    the store of step ``t``'s results waits for it, :func:`store_wait_cycles` into the next
    phase.

    With ``b_mode = 1`` (convolution) the run first loads the layer's tables into the
    :class:`~hw.addrgen.AddrGen` (before the prologue), and every B load is a gather through
    them instead of a dense 2-D copy.

    With ``b_mode = 2`` (a depthwise 3x3 layer; built on configs with ``dw_mesh``) the steps
    are :func:`spec.dwmesh.strip_steps`' strips, stated by a :class:`~hw.dwwalk.DwWalker`: the
    run loads the layer's weights as three more parameter arrays, then runs the same phases
    (compute of strip ``t`` on the array's mesh, the A and B loads of strip ``t + 1``, each a
    block of its channels' odd or even input rows, the store of strip ``t - 1``, which waits
    :func:`mesh_store_wait_cycles` for the mesh's drain), every strip changing both buffer
    halves and the accumulator half. Its A loads read activations: ``a_bad`` means nothing.
    ``b_mode = 3`` (stride 2) runs the same steps; its stores take the even rows and lanes of
    the stride-1 results (:class:`spec.dwmesh.StripStep`), or, for maps
    :func:`spec.dwmesh.row_phases` takes, its tiles compute only the stride-2 rows (the row
    phases: each load two groups of rows, ``w`` bytes apart, the stores every row's even
    lanes), and for those :func:`spec.desc.col_phases` takes only the stride-2 outputs (row
    and column phases: each row of a group two beats, deinterleaved into an even-byte and an
    odd-byte word, the stores every lane). ``b_mode`` 4 and 5 (5x5, pad 2) and 6 and 7 (7x7, pad 3; meshes of at least 9 x
    9) run the same steps with that kernel's tiles (``p_kernel`` of the walk and the compute
    engine) and seven or thirteen weight arrays, stride 2 through the decimating store or in
    row phases (:func:`spec.dwmesh.row_phases`). A stride-2 ``b_mode`` plus
    :data:`spec.desc.B_MODE_ODD_ROWS` (8) /
    :data:`spec.desc.B_MODE_ODD_COLS` (16) (a top / left pad one less, TF "SAME") runs the
    stride-1 steps and its stores take the odd rows / lanes, from accumulator row 1 / lane 1
    (:attr:`spec.dwmesh.StripStep.row0`, ``lane0``); in row phases (odd rows: phase 0 the even
    input rows) every accumulator row and the odd lanes.

    The rest of the layer record (``l_<field>`` for :data:`LAYER_FIELDS`) selects the
    post-processing: with a bias or int8 output the run first loads the per-channel bias,
    multiplier and shift arrays it uses into on-chip parameter memories (through the B port),
    checking every multiplier and shift (``BAD_QUANT``), and each store then goes through the
    :class:`~hw.postproc.PostProc`. Every rule of :func:`spec.record.check_record` is checked in
    ``CHECK`` (``img_lo``/``img_hi``: the image an image run executes, both 0 otherwise;
    ``img_wt`` its weights section). With ``dry`` the run stops after the checks and the
    parameter load: it reads, never writes.

    Every A beat written into buffer A (not a depthwise layer's weight arrays, which the A load
    engine loads into the parameter memories) also goes through a CRC-32 (zlib's), restarted in the
    cycle after ``start`` (from the state register, not from ``start``'s logic): ``a_bad`` is high when it differs from the record's ``a_crc``
    (:func:`spec.schedule.a_load_crc`); an image run checks it when a run-pass layer ends.

    Parameters
    ----------
    cfg : AccelConfig
        Every field.

    Members
    -------
    start : ``In(1)``; busy, done : ``Out(1)``; error : ``Out(8)``; failed : ``Out(1)``
    (``error != 0``, a register set with ``error``)
    busy_next : ``Out(1)``: the value ``busy`` takes in the next cycle (for registered copies)
    d_<field> : ``In(32)`` for every descriptor field; l_<field> : ``In(32)`` for
    every :data:`LAYER_FIELDS` name; img_lo, img_hi, img_wt : ``In(dram_addr_bits + 1)``;
    dry : ``In(1)``; a_bad : ``Out(1)`` (registered; valid a few cycles after the last A load)
    c_<counter> : ``Out(32)`` for every :data:`spec.regmap.COUNTERS` name
    cat_<counter> : ``Out(1)`` for every :data:`CATEGORIES` name: the previous cycle counted there
    a_rd, b_rd : ``Out(ReadPort.Signature)``; c_wr : ``Out(WritePort.Signature)``
    """

    #: Record words (and image bounds) latched under one copy of the idle flag.
    LATCH_GROUP = 8

    def __init__(self, cfg: AccelConfig):
        self._cfg = cfg
        ab = cfg.dram_addr_bits
        members = {
            "start": In(1),
            "busy": Out(1),
            "busy_next": Out(1),
            "done": Out(1),
            "error": Out(8),
            "failed": Out(1),
            "a_rd": Out(ReadPort.Signature(addr_bits=ab, data_bytes=cfg.a_beat_bytes)),
            "b_rd": Out(ReadPort.Signature(addr_bits=ab, data_bytes=cfg.b_beat_bytes,
                                           strided=True)),
            "c_wr": Out(WritePort.Signature(addr_bits=ab, data_bytes=cfg.c_beat_bytes)),
            "a_bad": Out(1),
        }
        super().__init__({**members, **record_members(cfg), "dry": In(1),
                          **named_members("c_", COUNTERS, Out(32)),
                          **named_members("cat_", CATEGORIES, Out(1))})

    def elaborate(self, platform):
        m = Module()
        cfg = self._cfg
        R, C = cfg.array_rows, cfg.array_cols
        lr, lc = log2(R), log2(C)
        half_a, half_b, half_acc = cfg.buf_a_depth // 2, cfg.buf_b_depth // 2, cfg.acc_depth // 2
        assert half_acc % 2 == 0 or not cfg.dw_mesh     # (a depthwise store's odd rows: below)

        # -- on-chip memories --------------------------------------------------------------------
        m.submodules.buf_a = buf_a = Memory(shape=8 * cfg.a_beat_bytes, depth=cfg.buf_a_depth,
                                            init=[])
        m.submodules.buf_b = buf_b = Memory(shape=8 * cfg.b_beat_bytes, depth=cfg.buf_b_depth,
                                            init=[])
        m.submodules.acc = acc = Memory(shape=8 * cfg.c_beat_bytes, depth=cfg.acc_depth, init=[])
        # No read whose data is used hits an address written in the same cycle (writes target
        # the buffer half or accumulator rows not being read; docs/bench.md, "Block RAM
        # reads"): read_data makes any such use fail in a poisoned simulation build.
        a_w, a_r = buf_a.write_port(), buf_a.read_port(transparent_for=())
        b_w, b_r = buf_b.write_port(granularity=8), buf_b.read_port(transparent_for=())
        acc_w = acc.write_port()
        acc_rmw = acc.read_port(transparent_for=())
        acc_st = acc.read_port(transparent_for=())
        # The local buffer (operator fusion, docs/fusion.md): rows of one B beat at device
        # addresses [dram_bytes, dram_bytes + local_buf_bytes). A layer whose B lies there reads
        # it through `loc_r` instead of the B port, one whose C lies there writes it through
        # `loc_w` instead of the C port, at one beat per cycle. A write is acknowledged one cycle
        # after its request (and written to the block RAM in that cycle), a read answers
        # :data:`LOCAL_READ_LATENCY` cycles after it: the block RAM's output is registered
        # (twice, below) before the B buffer's write data (on the ECP5 that path, 6.5 ns of
        # logic and 7 ns of routing, limited the whole 8x8 to 72 MHz). A layer never reads and
        # writes the same local rows (checked like C vs B).
        m.submodules.local = loc = Memory(shape=8 * cfg.b_beat_bytes, depth=cfg.local_depth,
                                          init=[])
        loc_w = loc.write_port(granularity=8)
        loc_r = loc.read_port(transparent_for=())
        # the data the design uses (hw.collide: poisoned in a collision-checking build)
        a_rd, b_rd = read_data(m, a_r, [a_w]), read_data(m, b_r, [b_w])
        acc_rmw_rd, acc_st_rd = read_data(m, acc_rmw, [acc_w]), read_data(m, acc_st, [acc_w])
        loc_rd = read_data(m, loc_r, [loc_w])

        # -- engines -----------------------------------------------------------------------------
        dw = bool(cfg.dw_mesh)                  # the depthwise path is built
        # (with dw_mesh the groups' address step is a parameter: stride 2's row phases)
        # (with the mesh: the depthwise row phases' groups of rows, and the column phases'
        # deinterleaving loads)
        m.submodules.load_a = la = LoadEngine(cfg, beat_bytes=cfg.a_beat_bytes,
                                              depth=cfg.buf_a_depth, group_addr=dw,
                                              deinterleave=dw)
        m.submodules.load_b = lb = LoadEngine(cfg, beat_bytes=cfg.b_beat_bytes,
                                              depth=cfg.buf_b_depth, group_addr=dw,
                                              deinterleave=dw)
        m.submodules.compute = ce = ComputeEngine(cfg, mesh=dw)
        m.submodules.store = se = StoreEngine(cfg, channel_rows=dw)
        m.submodules.addrgen = ag = AddrGen(cfg)
        # per-channel post-processing parameters, loaded through the B load engine (and a
        # depthwise layer's weights, through the A one at the same time)
        m.submodules.params = qm = ParamMemories(cfg, weights=dw)
        m.submodules.param_loader = pl = ParamLoader(cfg, weights=dw)
        if dw:
            m.submodules.dwwalk = dww = DwWalker(cfg)
            m.d.comb += [qm.w_ch.eq(ce.w_raddr), qm.w_ren.eq(1), ce.w_rdata.eq(qm.weights)]
            # the weight arrays load through the A load engine, beside the others through B
            m.d.comb += [qm.wload.eq(pl.phase_a), qm.wsel.eq(pl.wsel), qm.wa_addr.eq(la.w_addr),
                         qm.wa_data.eq(la.w_data), qm.wa_en.eq(la.w_en)]
        q_phase = pl.phase                        # a parameter array is loading
        m.d.comb += [pl.w_addr.eq(lb.w_addr), pl.w_data.eq(lb.w_data), pl.w_en.eq(lb.w_en)]
        m.d.comb += [qm.load.eq(q_phase), qm.sel.eq(pl.sel), qm.w_addr.eq(lb.w_addr),
                     qm.w_data.eq(lb.w_data), qm.w_en.eq(lb.w_en),
                     qm.ch.eq(se.q_ch), qm.ren.eq(se.q_ren),
                     se.q_bias.eq(qm.bias_row), se.q_mult.eq(qm.mult_row), se.q_lane.eq(qm.lane),
                     se.q_shift.eq(qm.shift_row)]
        wiring.connect(m, wiring.flipped(self.a_rd), la.mem)
        # this layer's B / C lies in the local buffer
        b_loc, c_loc = Signal(), Signal(name="c_loc", attrs={"keep": 1})
        # copies of c_loc (`keep`, equal in every cycle) for the store's handshake (ready,
        # acknowledgements) and the local write: c_loc into the handshake, the store's valid
        # and the local write enables was a 11.7 ns path of the whole 8x8 (session 22). `keep`
        # on c_loc too: Yosys merges a flip-flop without it into an equal one with it, so c_loc's
        # own loads would land on a copy.
        c_loc_hs, c_loc_w = (Signal(name=n, attrs={"keep": 1}) for n in ("c_loc_hs", "c_loc_w"))
        # C: to memory, or into the local buffer (an int8 beat's low array_cols bytes)
        loc_ack = Signal()
        m.d.sync += loc_ack.eq(se.mem.valid & c_loc_w)
        # The local write itself is registered twice (it lands a cycle after its
        # acknowledgement): the store's handshake straight into the local block RAMs' byte
        # write enables was a 11.6 ns path of the whole 8x8 (session 19: skid_valid -> WEA);
        # registered once, the handshake into the registered enables' reset still was (10.5 and
        # 11.9 ns at 41fd93f and 60c3540, from the port's acknowledgement flag and the store's
        # final-stage select): the first stage now registers the beat as it is (its valid one
        # flip-flop), the second the byte enables. A later layer reads the rows only after this
        # layer's store is done, many cycles later.
        loc_v = Signal(name="loc_valid")
        loc_strb = Signal(cfg.b_beat_bytes, name="loc_strb", reset_less=True)
        loc_addr1 = Signal(len(loc_w.addr), name="loc_addr1", reset_less=True)
        loc_data1 = Signal(8 * cfg.b_beat_bytes, name="loc_data1", reset_less=True)
        m.d.sync += [loc_v.eq(se.mem.valid & c_loc_w), loc_strb.eq(se.mem.strb[:cfg.b_beat_bytes]),
                     loc_addr1.eq(se.mem.addr >> lc),
                     loc_data1.eq(se.mem.data[:8 * cfg.b_beat_bytes])]
        loc_waddr = Signal(len(loc_w.addr), name="loc_waddr")
        loc_wdata = Signal(8 * cfg.b_beat_bytes, name="loc_wdata", reset_less=True)
        loc_wen = Signal(cfg.b_beat_bytes, name="loc_wen")
        m.d.sync += [loc_waddr.eq(loc_addr1), loc_wdata.eq(loc_data1),
                     loc_wen.eq(Mux(loc_v, loc_strb, 0))]
        m.d.comb += [
            self.c_wr.addr.eq(se.mem.addr), self.c_wr.data.eq(se.mem.data),
            self.c_wr.strb.eq(se.mem.strb), self.c_wr.valid.eq(se.mem.valid & ~c_loc),
            se.mem.ready.eq(c_loc_hs | self.c_wr.ready),
            se.mem.bvalid.eq(Mux(c_loc_hs, loc_ack, self.c_wr.bvalid)),
            loc_w.addr.eq(loc_waddr), loc_w.data.eq(loc_wdata), loc_w.en.eq(loc_wen),
        ]
        # The B port and buffer B belong to the dense load engine or, in convolution mode, to
        # the address generator.
        conv = Signal()
        lb_loc = Signal()                         # the B load engine reads the local buffer
        m.d.comb += lb_loc.eq(b_loc & ~pl.phase_lb[0])
        # Buffer B's write is registered: a row lands a cycle after its engine gives it (its
        # readers, the compute engine and the mesh feeder, start on a partition only cycles
        # after its load is done; a poisoned build checks that no read meets the write). Into
        # the block RAMs' write enables and data straight, the engines' selects were 10.07-10.46
        # ns paths of the whole 8x8 (53bb396 seed 2 and bc58de8 seed 3, session 26).
        bw_addr, bw_data, bw_en = (Signal.like(p, name=f"buf_b_w{n}")
                                   for p, n in ((b_w.addr, "addr"), (b_w.data, "data"),
                                                (b_w.en, "en")))
        m.d.sync += [b_w.addr.eq(bw_addr), b_w.data.eq(bw_data), b_w.en.eq(bw_en)]
        with m.If(conv):
            m.d.comb += [
                self.b_rd.addr.eq(ag.mem.addr), self.b_rd.valid.eq(ag.mem.valid),
                self.b_rd.stride.eq(ag.mem.stride),
                bw_addr.eq(ag.w_addr), bw_data.eq(ag.w_data), bw_en.eq(ag.w_en),
            ]
        with m.Else():
            m.d.comb += [
                self.b_rd.addr.eq(lb.mem.addr), self.b_rd.valid.eq(lb.mem.valid & ~lb_loc),
                self.b_rd.stride.eq(1),
                bw_addr.eq(lb.w_addr), bw_data.eq(lb.w_data),
                bw_en.eq(Mux(lb.w_en & ~pl.phase_lb[1], (1 << cfg.b_beat_bytes) - 1,
                             0)),
            ]
        # local reads in flight: the block RAM's read, then its output register
        loc_rvalid = Signal(LOCAL_READ_LATENCY)
        # the block RAMs' word is registered twice: the first register has no other load, so it
        # can sit beside its block RAM (whose clock-to-out is 6.1 ns in nextpnr's model: one
        # register feeding the B path was the whole 8x8's worst path in session 16, 11.9 ns)
        loc_rdata0 = Signal(8 * cfg.b_beat_bytes, reset_less=True, attrs={"keep": 1})
        loc_rdata = Signal(8 * cfg.b_beat_bytes, reset_less=True)
        assert LOCAL_READ_LATENCY == 3          # the read, then the two registers
        m.d.sync += [loc_rvalid.eq(Cat(lb.mem.valid & lb_loc, loc_rvalid[:-1])),
                     loc_rdata0.eq(loc_rd), loc_rdata.eq(loc_rdata0)]
        m.d.comb += [
            loc_r.addr.eq(lb.mem.addr >> lc), loc_r.en.eq(lb.mem.valid & lb_loc),
            lb.mem.ready.eq(lb_loc | (self.b_rd.ready & ~conv)),
            lb.mem.rdata.eq(Mux(lb_loc, loc_rdata, self.b_rd.rdata)),
            lb.mem.rvalid.eq(Mux(lb_loc, loc_rvalid[-1], self.b_rd.rvalid & ~conv)),
            ag.mem.ready.eq(self.b_rd.ready & conv), ag.mem.rdata.eq(self.b_rd.rdata),
            ag.mem.rvalid.eq(self.b_rd.rvalid & conv),
        ]
        # buffer A's writes: the A load engine's, but while it loads a depthwise weight array
        # (its writes are then the parameter memories')
        a_written = la.w_en & ~pl.phase_la[1] if dw else la.w_en
        m.d.comb += [
            a_w.addr.eq(la.w_addr), a_w.data.eq(la.w_data), a_w.en.eq(a_written),
            # the operand buffers read every cycle (their ports' enable is 1), whatever the
            # compute engine's rd_en says: a tile's padding beats come first, their sums dropped, and a
            # mesh tile only takes fill words it read, so nothing uses a read's data held over
            # an idle cycle, and rd_en's fan-out to every block RAM's clock enable (32 on the
            # 8x8, 11.8 ns routed in session 18) leaves the FPGA's paths
            a_r.addr.eq(ce.a_raddr), ce.a_rdata.eq(a_rd),
            b_r.addr.eq(ce.b_raddr), ce.b_rdata.eq(b_rd),
            acc_rmw.addr.eq(ce.acc_raddr), ce.acc_rdata.eq(acc_rmw_rd),
            acc_w.addr.eq(ce.acc_waddr), acc_w.data.eq(ce.acc_wdata), acc_w.en.eq(ce.acc_wen),
            acc_st.addr.eq(se.acc_raddr), acc_st.en.eq(se.acc_ren), se.acc_rdata.eq(acc_st_rd),
        ]

        # -- latched descriptor ------------------------------------------------------------------
        d = {name: Signal(32, name=f"desc_{name}") for name in DESC_FIELDS}
        L = {name: Signal(32, name=f"layer_{name}") for name in LAYER_FIELDS}
        img_lo, img_hi, img_wt = (Signal(cfg.dram_addr_bits + 1) for _ in range(3))
        dry = Signal()
        # The latch follows its inputs in every idle cycle (the start's too, where `busy` is
        # still low) and holds while busy: what it holds from the start on is what a latch at
        # `start & ~busy` held, and nothing reads it while idle. Its enable is then a register,
        # in copies (`keep`) of `~busy` a group of words each: `start & ~busy` reached about
        # 1,250 flip-flops of the whole 8x8 through two LUTs, the net with the most routing
        # congestion (session 21).
        latched = [*((d[name], getattr(self, f"d_{name}")) for name in DESC_FIELDS),
                   *((L[name], getattr(self, f"l_{name}")) for name in LAYER_FIELDS),
                   (img_lo, self.img_lo), (img_hi, self.img_hi), (img_wt, self.img_wt),
                   (dry, self.dry)]
        for g in range(0, len(latched), self.LATCH_GROUP):
            idle = Signal(name=f"idle_latch{g // self.LATCH_GROUP}", init=1, attrs={"keep": 1})
            m.d.sync += idle.eq(~self.busy_next)
            with m.If(idle):
                m.d.sync += [reg.eq(value) for reg, value in latched[g:g + self.LATCH_GROUP]]
        # What the record decides for the whole run, registered from the latched record (valid
        # from CHECK on, a cycle after the latch), so no launch or engine parameter path starts
        # with a compare of record words.
        int8_out, bias_on, post, is_conv, outer_m = (Signal() for _ in range(5))
        is_int8, has_bias = L["out_format"] == OutFormat.INT8, L["bias_present"] == 1
        m.d.sync += [int8_out.eq(is_int8), bias_on.eq(has_bias), post.eq(is_int8 | has_bias),
                     is_conv.eq(d["b_mode"] == 1), outer_m.eq(d["outer_m"] != 0)]
        is_dw = Signal(name="is_dw") if dw else Const(0, 1)     # a depthwise layer
        dw_s2 = Signal(name="dw_s2")                  # ... with stride 2
        # ... its kernel: 0 3x3, 1 5x5, 2 7x7 (b_mode 2 + 2 kernel, + 1 with stride 2)
        dw_kern = Signal(2, name="dw_kernel")
        # ... and with stride 2 the store's odd rows and odd columns (spec.desc.depthwise_odd)
        dw_odd_rows, dw_odd_cols = Signal(name="dw_odd_rows"), Signal(name="dw_odd_cols")
        params_needed = post                          # the run loads parameter arrays
        # the arrays to load, in PARAM_ARRAYS order (a dry run, an image's check pass, loads
        # only the multipliers and shifts: the arrays with rules, BAD_QUANT; the bias and
        # weight arrays have none)
        q_need = Cat(bias_on & ~dry, int8_out, int8_out)
        if dw:
            m.d.sync += [reg.eq(v) for reg, v in zip((is_dw, dw_s2, dw_kern, dw_odd_rows,
                                                      dw_odd_cols),
                                                     depthwise_mode(d["b_mode"]))]
            # then WEIGHT_ARRAYS: a 3x3 layer's three, a 5x5 one's seven, a 7x7 one's thirteen
            arrays = [depthwise_arrays(B_MODE_DEPTHWISE + 2 * k) for k in range(3)]
            q_need = Cat(q_need, *((is_dw & ~dry & (dw_kern >= k)) if k else is_dw & ~dry
                                   for k, (lo, hi) in enumerate(zip([0] + arrays, arrays))
                                   for _ in range(hi - lo)))
            assert len(q_need) == 3 + len(WEIGHT_ARRAYS)
            params_needed = post | is_dw
        params_needed = Mux(dry, int8_out, params_needed)

        M, K, N = d["m"], d["k"], d["n"]
        pm, pn, pk = d["partition_m"], d["partition_n"], d["partition_k"]

        # -- record checks (spec.record.check_record), pipelined in their own component ----------
        m.submodules.checker = chk = RecordChecker(cfg)
        m.d.comb += [getattr(chk, f"d_{name}").eq(d[name]) for name in DESC_FIELDS]
        m.d.comb += [getattr(chk, f"l_{name}").eq(L[name]) for name in LAYER_FIELDS]
        m.d.comb += [chk.img_lo.eq(img_lo), chk.img_hi.eq(img_hi), chk.img_wt.eq(img_wt)]

        # -- the CRC of the A beats (the record's a_crc), a register stage after the buffer's
        # write port so it adds nothing to the load engine's paths
        # restarted in CHECK_START (long before the first A load), from a flip-flop set with
        # the start: the FSM's state decode into the CRC's 32 flip-flops was a 12.1 ns path
        crc_restart = Signal()
        a_crc, m.submodules.a_crc = restartable_crc(A_CRC_ALGORITHM, 8 * cfg.a_beat_bytes,
                                                    crc_restart)
        a_beat = Signal(8 * cfg.a_beat_bytes, reset_less=True)
        a_beat_valid = Signal()
        m.d.sync += [a_beat.eq(la.w_data), a_beat_valid.eq(a_written)]
        m.d.comb += [a_crc.data.eq(a_beat), a_crc.valid.eq(a_beat_valid)]
        # (a depthwise layer's A port reads activations: its a_crc means nothing)
        m.d.sync += self.a_bad.eq((a_crc.crc != L["a_crc"]) & ~is_dw)
        gn_all = Signal(DIM_BITS)                   # the matrix's array-tile columns
        ag_groups = Signal(DIM_BITS)                # gn_all + 1 (two cycles after the latch)
        m.d.sync += [gn_all.eq((N + C - 1) >> lc),  # (registered: read after the checks)
                     ag_groups.eq(gn_all + 1)]
        dram = cfg.dram_bytes
        c_local = d["c_addr"] >= dram
        m.d.sync += [b_loc.eq(d["b_addr"] >= dram), c_loc.eq(c_local), c_loc_hs.eq(c_local),
                     c_loc_w.eq(c_local)]
        # the output window in the store's addresses: a local window in the local buffer's own
        # addresses, like the store's (registered like the flags above)
        win_lo, win_hi = L["out_window_lo"], L["out_window_hi"]
        st_win_lo, st_win_hi = Signal(cfg.dram_addr_bits + 1), Signal(cfg.dram_addr_bits + 1)
        m.d.sync += [st_win_lo.eq(Mux(c_local, win_lo - dram, win_lo)),
                     st_win_hi.eq(Mux(c_local, win_hi - dram, win_hi))]

        # -- step state: current step, next step, pending store ----------------------------------
        ab = cfg.dram_addr_bits

        # the current and the next step (hw/stepper.py): their registers, and the walk
        layout = step_layout(cfg)
        cur, nxt = Signal(layout, name="cur"), Signal(layout, name="nxt")
        cur_valid, nxt_valid = Signal(), Signal()
        st = {"m0": Signal(DIM_BITS, name="st_m0"), "n0": Signal(DIM_BITS, name="st_n0"),
              "me": Signal(DIM_BITS, name="st_me"), "ne": Signal(DIM_BITS, name="st_ne"),
              "gne": Signal(DIM_BITS, name="st_gne"),
              "c_addr": Signal(ab, name="st_c_addr"), "slot": Signal(name="st_slot")}
        st_valid = Signal()
        a_slot, b_slot, acc_slot = Signal(), Signal(), Signal()
        need_a, need_b = Signal(), Signal()
        a_kstep, b_kstep, c_mstep = chk.a_kstep, chk.b_kstep, chk.c_mstep
        gn_max = Signal(DIM_BITS)
        # partition sizes in array tiles, and the whole matrix's (registered with the record)
        pmg, png, gm_all = Signal(DIM_BITS), Signal(DIM_BITS), Signal(DIM_BITS)
        m.d.sync += [pmg.eq(pm >> lr), png.eq(pn >> lc), gm_all.eq((M + R - 1) >> lr)]

        # the step after `nxt` in loop order (adv), and whether `nxt` is the last step
        m.submodules.walker = walk = StepWalker(cfg)
        adv, adv_last = walk.next, walk.last
        # The step registers move at the end of ISSUE (`cur <= nxt`, `nxt <= adv`, the pending
        # store's `st <= cur`), enabled by a flip-flop, not by the end of WAIT (whose condition
        # gathers every engine's busy flag: on the ECP5 that enable into ~1,000 flip-flops was
        # a 13.4 ns path). The valid flags and slots still move when WAIT ends, so in ISSUE
        # the engines take the step to compute from `nxt` and the step to load from `adv`:
        # what `cur` and `nxt` hold after the move. Before the first ISSUE the walker holds
        # `first` in `adv` (`restart`).
        shift = [Signal(name=f"step_shift{i}", attrs={"keep": 1}) for i in range(3)]
        # `shift` is high exactly in ISSUE (which lasts one cycle): two more copies start the
        # compute engine and the gather there, so no FSM state decode sits in front of their
        # parameter registers (a 10.9 ns path of the 8x8 into the compute engine's loop
        # counters, session 18)
        issuing = [Signal(name=f"issuing{i}", attrs={"keep": 1}) for i in range(2)]
        shift_all = [*shift, *issuing]
        comp, load = nxt, adv           # in ISSUE: the step to compute, the step to load
        # WAIT's first cycles: the walker's `adv` and `adv_last` for the `nxt` moved at the end
        # of ISSUE are valid from WAIT's third cycle (StepWalker.next_latency); a phase's
        # engines are busy longer anyway, so this guard never adds a cycle (the cycle-exact
        # tests show it)
        wait_early = Signal(2)
        # "in WAIT (or DW_WAIT) with wait_early == 0" as a flip-flop, set from what the state
        # and wait_early become: the phase's end is then `wait_ready & ~engines_busy`, kept as
        # one signal, with no state decode or compare between the engines' busy flags and the
        # registers the phase's end moves (compute's `running` -> those registers' enables was
        # a 10.8 ns path of the whole 8x8, 7 LUTs deep, at 598b87c)
        wait_ready = Signal()
        wait_go = Signal(attrs={"keep": 1})
        m.d.comb += [walk.step.eq(nxt), walk.m.eq(M), walk.n.eq(N), walk.k.eq(K),
                     walk.pm.eq(pm), walk.pn.eq(pn), walk.pk.eq(pk), walk.pmg.eq(pmg),
                     walk.png.eq(png), walk.gm_all.eq(gm_all), walk.gn_all.eq(gn_all),
                     walk.outer_m.eq(outer_m), walk.a_addr.eq(d["a_addr"]),
                     walk.b_addr.eq(d["b_addr"]), walk.c_addr.eq(d["c_addr"]),
                     walk.a_kstep.eq(a_kstep), walk.b_kstep.eq(b_kstep),
                     walk.c_mstep.eq(c_mstep)]
        # the row store (spec.desc.row_store): a step's C offset advances by c_row_pitch per n
        # partition (a row of pixels each), else by the partition's bytes (n0 * element size);
        # the store writes a row's c_row_elems elements
        rows = bool(cfg.row_store)
        if rows:
            row_on = Signal(name="row_on")
            c_nstep = Signal(ab, name="c_nstep")
            m.d.sync += [row_on.eq(d["c_rows"] != 0),
                         c_nstep.eq(Mux(d["c_rows"] != 0, d["c_row_pitch"],
                                        Mux(is_int8, pn, pn << 2)))]
            m.d.comb += walk.c_nstep.eq(c_nstep)
        # a GEMM / convolution store's elements a row
        st_elems = Mux(row_on, d["c_row_elems"], st["ne"]) if rows else st["ne"]

        # -- a depthwise layer's strips (hw/dwwalk.py): the strip loaded in this phase, the one
        # computed, the one stored; their values, and the layer's, registered
        if dw:
            # (row and column phases: the fills' word parity, rotations and lanes)
            lanes = (2 * cfg.array_cols).bit_length()     # (cols0: nbytes outside them)
            strip = {"c0": DIM_BITS, "channels": DIM_BITS, "nbytes": DIM_BITS,
                     "a_words": DIM_BITS, "ce0": 1, "rot0": 1, "rot1": 1, "cols0": lanes,
                     "cols1": lanes,
                     "st_addr": ab + 1, "st_rows": DIM_BITS, "st_elems": DIM_BITS}
            dw_ld, dw_cp, dw_st = ({n: Signal(w, name=f"dw_{tag}_{n}") for n, w in strip.items()}
                                   for tag in ("ld", "cp", "st"))
            dw_more, dw_loaded = Signal(name="dw_more"), Signal(name="dw_loaded")
            dw_cp_valid, dw_st_valid = Signal(name="dw_cp_valid"), Signal(name="dw_st_valid")
            dw_st_slot = Signal(name="dw_st_slot")
            dw_na, dw_nb = Signal(DIM_BITS, name="dw_na"), Signal(DIM_BITS, name="dw_nb")
            dw_row_bytes = Signal(DIM_BITS + 2, name="dw_row_bytes")
            # the output map's rows a channel and its row's elements: h and w, or with stride 2
            # ceil(h / 2) and ceil(w / 2)
            dw_oh, dw_ow = Signal(DIM_BITS, name="dw_oh"), Signal(DIM_BITS, name="dw_ow")
            m.d.sync += [dw_na.eq(K >> 1), dw_nb.eq((K + 1) >> 1),
                         dw_oh.eq(Mux(dw_s2, (K + 1) >> 1, K)),
                         dw_ow.eq(Mux(dw_s2, (N + 1) >> 1, N)),
                         dw_row_bytes.eq(Mux(int8_out, dw_ow, dw_ow << 2))]
            m.d.comb += [dww.p_channels.eq(M), dww.p_h.eq(K), dww.p_w.eq(N),
                         dww.p_group.eq(pm), dww.p_x_addr.eq(d["b_addr"]),
                         dww.p_out_addr.eq(d["c_addr"]), dww.p_int8.eq(int8_out),
                         dww.p_s2.eq(dw_s2), dww.p_kernel.eq(dw_kern),
                         dww.p_odd_cols.eq(dw_odd_cols)]
            m.d.comb += [
                ce.p_m_kernel.eq(dw_kern), ce.p_m_odd_rows.eq(dw_odd_rows),
                ce.p_m_channels.eq(dw_cp["channels"]), ce.p_m_tiles.eq(dww.tiles),
                ce.p_m_h.eq(K), ce.p_m_na.eq(dw_na), ce.p_m_nb.eq(dw_nb),
                ce.p_m_pre_right.eq(dw_cp["rot0"]), ce.p_m_c0.eq(dw_cp["c0"]),
                # stride 2's row phases: the classes' words (a group of each load)
                ce.p_m_phases.eq(dww.phases), ce.p_m_passes.eq(dww.passes),
                ce.p_m_words.eq(dw_cp["a_words"]),
                # the quadrant mode (7 x 7 maps: four channels a tile)
                ce.p_m_quad.eq(dww.quad),
                # the padding: the layer's pad value in the lanes past the strip's loaded bytes
                ce.p_m_pad.eq(L["pad_value"][:8]), ce.p_m_cols.eq(dw_cp["cols0"]),
                # stride 2 in row and column phases: the fills' parities, rotations, lanes
                ce.p_m_cphases.eq(dww.cphases), ce.p_m_ce0.eq(dw_cp["ce0"]),
                ce.p_m_pre_right1.eq(dw_cp["rot1"]), ce.p_m_cols1.eq(dw_cp["cols1"]),
            ]

        def by_mode(gemm_value, dw_value):
            """An engine parameter: the GEMM's, or the depthwise strip's."""
            return Mux(is_dw, dw_value, gemm_value) if dw else gemm_value

        # -- engine commands (parameters from the step registers; engines sample them on start) --
        def load_next(engine, addr, stride, groups, elems, slot, half, dw_block=None):
            """A load engine's command for the next step: its k rows into the free half (a
            depthwise strip: ``dw_block`` = (address, words), one beat a row at ``2 w``; in
            row phases two groups of ``words`` rows ``w`` apart, at ``4 w``)."""
            rows, gstride, beat = load.ke, pk, len(engine.w_data) // 8
            if dw:
                ph, cph = dww.phases, dww.cphases
                addr, rows = by_mode(addr, dw_block[0]), by_mode(rows, dw_block[1])
                stride = by_mode(stride, Mux(ph, N << 2, N << 1))
                # (row and column phases: two beats a row of each class, deinterleaved)
                groups = by_mode(groups, Mux(cph, 4, Mux(ph, 2, 1)))
                # the second group's byte mask counts a beat on from the row's start (the
                # second class's two beats past the first's)
                elems = by_mode(elems, dww.nbytes + Mux(cph, 2 * beat, Mux(ph, beat, 0)))
                # (the second groups at word `a_words` of both buffers: B's classes may
                # be a row shorter, spec.dwmesh.phase_halves; in column phases at twice
                # that, each class's odd-byte words `a_words` after its even-byte ones)
                gstride = by_mode(pk, Mux(cph, dww.a_words << 1, dww.a_words))
            cmds = [engine.p_addr.eq(addr), engine.p_stride.eq(stride),
                    engine.p_rows.eq(rows), engine.p_groups.eq(groups),
                    engine.p_elems.eq(elems), engine.p_buf_base.eq(Mux(slot, 0, half)),
                    engine.p_buf_gstride.eq(gstride)]
            if dw:                          # a GEMM's groups are a beat apart
                cmds += [engine.p_gaddr.eq(by_mode(beat, N)),
                         engine.p_dil.eq(is_dw & dww.cphases),
                         engine.p_buf_dstride.eq(dww.a_words)]
            return cmds

        dw_a_block = (dww.a_addr, dww.a_words) if dw else None
        dw_b_block = (dww.b_addr, dww.b_words) if dw else None

        m.d.comb += [
            ce.p_a_base.eq(Mux(a_slot, half_a, 0)),
            ce.p_b_base.eq(Mux(b_slot, half_b, 0)),
            ce.p_acc_base.eq(Mux(acc_slot, half_acc, 0)),
            ce.p_acc_rstride.eq(gn_max),
            ce.p_gm.eq(comp["gme"]),
            ce.p_gn.eq(comp["gne"]),
            ce.p_tile_mg.eq(d["tile_m"] >> lr),
            ce.p_tile_ng.eq(d["tile_n"] >> lc),
            ce.p_pk.eq(pk),
            ce.p_keff.eq(comp["ke"]),
            ce.p_accum.eq(comp["k0"] != 0),

            *load_next(la, load["a_kptr"] + load["m0"], d["a_stride"], load["gme"],
                       load["me"], a_slot, half_a, dw_a_block),
            *load_next(lb, load["b_kptr"] + load["n0"], d["b_stride"], load["gne"],
                       load["ne"], b_slot, half_b, dw_b_block),

            ag.p_off_addr.eq(d["off_addr"]), ag.p_run_addr.eq(d["run_addr"]),
            ag.p_grp_addr.eq(d["grp_addr"]), ag.p_k.eq(K), ag.p_runs.eq(d["run_count"]),
            ag.p_groups.eq(ag_groups),
            ag.p_b_addr.eq(d["b_addr"]),
            ag.p_k0.eq(load["k0"]),
            ag.p_rows.eq(load["ke"]),
            ag.p_g0.eq(load["n0"] >> lc),
            ag.p_gn.eq(load["gne"]),
            ag.p_buf_base.eq(Mux(b_slot, 0, half_b)),
            ag.p_buf_gstride.eq(pk),

            se.p_post.eq(post), se.p_int8.eq(int8_out), se.p_bias.eq(bias_on),
            se.p_zero_point.eq(L["out_zero_point"][:8]),
            se.p_act_min.eq(L["act_min"][:8]), se.p_act_max.eq(L["act_max"][:8]),
            se.p_win_lo.eq(st_win_lo), se.p_win_hi.eq(st_win_hi),
        ]
        if dw:
            # a strip's store: its channels' rows, tw elements each, at the output's row pitch
            m.d.comb += [
                se.p_addr.eq(by_mode(st["c_addr"], dw_st["st_addr"])),
                se.p_ch0.eq(by_mode(st["m0"], dw_st["c0"])),
                # (the quadrant mode: two output rows a store row, spec.dwmesh.StripStep)
                se.p_stride.eq(by_mode(d["c_stride"],
                                       Mux(dww.quad, dw_row_bytes << 1, dw_row_bytes))),
                se.p_rows.eq(by_mode(st["me"], dw_st["st_rows"])),
                se.p_groups.eq(by_mode(st["gne"], 1)),
                se.p_elems.eq(by_mode(st_elems, dw_st["st_elems"])),
                # (from row 1 for the odd rows, spec.dwmesh.StripStep.row0: the half's first
                # row is even; not in row phases, whose rows are the outputs')
                se.p_acc_base.eq(Mux(by_mode(st["slot"], dw_st_slot), half_acc, 0) |
                                 (is_dw & dw_odd_rows & ~dww.phases)),
                # stride 2: every other accumulator row (every row in row phases), its even
                # lanes, or its odd ones (StripStep.lane0)
                se.p_acc_rstride.eq(by_mode(gn_max, Mux(dw_s2 & ~dww.phases, 2, 1))),
                se.p_ch_rows.eq(by_mode(1, Mux(dww.quad, cfg.array_rows // 4, dw_oh))),
                # (row and column phases: every lane an output)
                se.p_even_lanes.eq(is_dw & dw_s2 & ~dww.cphases),
                se.p_half_last.eq(is_dw & dww.quad),
                se.p_odd_lanes.eq(is_dw & dw_odd_cols & ~dww.cphases),
            ]
        else:
            m.d.comb += [
                se.p_addr.eq(st["c_addr"]), se.p_ch0.eq(st["m0"]), se.p_stride.eq(d["c_stride"]),
                se.p_rows.eq(st["me"]), se.p_groups.eq(st["gne"]),
                se.p_elems.eq(st_elems),
                se.p_acc_base.eq(Mux(st["slot"], half_acc, 0)), se.p_acc_rstride.eq(gn_max),
            ]

        b_busy = Signal()
        m.d.comb += b_busy.eq(lb.busy | ag.gather_busy | ag.tables_busy)
        # the store of the previous step's results waits for its drain (store_wait_cycles)
        st_hold = Signal(range(store_wait_cycles(cfg) + 1))
        with m.If(st_hold != 0):
            m.d.sync += st_hold.eq(st_hold - 1)
        # `st_hold != 0` and `st_hold == 1` as flip-flops, set from what st_hold becomes (ISSUE
        # loads it, with st_hold == 0, see WAIT; otherwise it counts down): no compare between
        # the counter and the store's start or the end of WAIT
        wait_cycles = store_wait_cycles(cfg)
        assert wait_cycles >= 1
        st_holding, st_go = Signal(), Signal()
        st_load = Signal()                          # ISSUE loads st_hold this cycle
        st_pend = Signal()                          # a store is pending (GEMM or depthwise)
        m.d.comb += st_pend.eq(st_valid | dw_st_valid) if dw else st_pend.eq(st_valid)
        if dw:
            dw_wait = mesh_store_wait_cycles(cfg)
            assert 2 <= dw_wait <= wait_cycles
        m.d.sync += [st_holding.eq(Mux(st_load, st_pend, st_hold > 1)),
                     st_go.eq(Mux(st_load, st_pend & (wait_cycles == 1), st_hold == 2))]
        m.d.comb += se.start.eq(st_go)
        engines_busy = Signal()
        m.d.comb += engines_busy.eq(ce.running | la.busy | b_busy | se.busy | st_holding)
        m.d.comb += wait_go.eq(wait_ready & ~engines_busy)
        # `cur` is the step's last k partition: a register, valid from the cycle after `cur`
        # moves (the end of ISSUE), so from WAIT's second cycle, before wait_ready (the compare
        # in the phase's end was a 10.8 ns path of the whole 8x8 at 60c3540)
        cur_klast = Signal()
        m.d.sync += cur_klast.eq(cur["kl"] <= pk)
        error = Signal(8)
        m.d.comb += self.error.eq(error)
        # `failed` (error != 0) a flip-flop set with every nonzero code: the runner's LAYER
        # state decided from the code's 8-bit OR, into its fetch address enables, was a 10.1 ns
        # path of the whole 8x8 at e2de91f (session 26)
        failed = Signal()
        m.d.comb += self.failed.eq(failed)

        def fail(code):
            m.d.sync += [error.eq(code), failed.eq(1)]

        # The walker restarts (`adv` is the first step) in every state but ISSUE, WAIT and
        # FINISH: a flip-flop set at every transition from the state entered (goto), so the
        # walker's ~400 flip-flops take their reset from a register, not from a decode of the
        # state (a 10.4 ns path of the whole 8x8 at 598b87c)
        walk_restart = Signal(init=1)
        m.d.comb += walk.restart.eq(walk_restart)

        # FINISH, a flip-flop set with the move into it (every move is a goto): `busy_next`
        # below is then a select of flip-flops (IDLE is `~busy`), as in the image runner
        at_finish = Signal()

        def goto(state):
            m.next = state
            m.d.sync += [walk_restart.eq(state not in ("ISSUE", "WAIT", "FINISH")),
                         at_finish.eq(state == "FINISH")]

        def launch():
            """Leave the checks: tables first for a convolution, then the prologue."""
            m.d.sync += conv.eq(is_conv)
            m.d.comb += ag.tables_start.eq(is_conv)
            if dw:
                m.d.comb += dww.start.eq(is_dw)
            with m.If(is_conv):
                goto("TABLES")
            if dw:
                with m.Elif(is_dw):
                    goto("DW_FIRST")
            with m.Else():          # (the step to load is the first: nothing is held)
                issue_next(1, 1, 0)

        # While a parameter array loads, the loader runs the B load engine: it copies the
        # array (one row of 4*m bytes) into the parameter memory `pl.sel`, checking every word.
        m.d.comb += [pl.need.eq(q_need), pl.rows.eq(M)]
        m.d.comb += [getattr(pl, f"addr_{name}").eq(L[f"{name}_addr"]) for name in PARAM_ARRAYS]
        if dw:
            # the weight arrays at a_addr + t a_stride (registered: the loader reads them
            # long after the latch)
            w_a0, w_st = d["a_addr"], d["a_stride"]
            w_addrs = [Signal(32, name=f"dw_w{t}_addr") for t in range(len(WEIGHT_ARRAYS))]
            m.d.sync += [addr.eq(w_a0 + times(w_st, t)) for t, addr in enumerate(w_addrs)]
            m.d.comb += [getattr(pl, f"addr_{name}").eq(w_addrs[t])
                         for t, name in enumerate(WEIGHT_ARRAYS)]
        # ISSUE's load starts as registers, set with the move into ISSUE (with `shift_all`)
        # and clear in every other cycle: `go_a` / `go_b` = "the step to load needs its A / B
        # block" (nxt_valid & ~same_*, as ISSUE sees them), `lb_go` = go_b & ~conv, the B load
        # engine's start. The state decode and the step flags in front of the load engines'
        # start (each enables ~120 flip-flops) were 10.6 ns paths of the whole 8x8 at 60c3540.
        go_a, go_b, lb_go = Signal(name="go_a"), Signal(name="go_b"), Signal(name="lb_go")
        m.d.sync += [go_a.eq(0), go_b.eq(0), lb_go.eq(0)]

        def issue_next(a, b, conv_next):
            """Enter ISSUE next cycle with the loads' flags ``a``, ``b``; ``conv_next`` is
            ``conv`` then."""
            m.d.sync += [x.eq(1) for x in shift_all]
            m.d.sync += [go_a.eq(a), go_b.eq(b), lb_go.eq(b & ~conv_next)]
            goto("ISSUE")

        m.d.comb += [lb.start.eq(pl.lb.start | lb_go), pl.lb.busy.eq(lb.busy),
                     la.start.eq(go_a | pl.la.start if dw else go_a)]
        for i, name in enumerate(pl.LB_FIELDS):          # (a copy of the flag per field)
            with m.If(pl.phase_lb[2 + i]):
                m.d.comb += getattr(lb, name).eq(getattr(pl.lb, name))
        if dw:                                  # the parameter arrays' groups are beats
            with m.If(pl.phase_lb[2]):          # (never deinterleaved)
                m.d.comb += [lb.p_gaddr.eq(cfg.b_beat_bytes), lb.p_dil.eq(0)]
            # the weight arrays' commands to the A load engine
            m.d.comb += pl.la.busy.eq(la.busy)
            for i, name in enumerate(pl.LB_FIELDS):
                with m.If(pl.phase_la[2 + i]):
                    m.d.comb += getattr(la, name).eq(getattr(pl.la, name))
            with m.If(pl.phase_la[2]):
                m.d.comb += [la.p_gaddr.eq(cfg.a_beat_bytes), la.p_dil.eq(0)]

        # the step registers' move (see `shift`): each copy of the flag enables one group
        m.d.sync += [x.eq(0) for x in shift_all]
        # ISSUE's engine starts (the loads' from go_a / lb_go, above; the FSM starts them in
        # the depthwise states): the step to compute is `nxt`, the step to load `adv` (below)
        m.d.comb += [ce.start.eq(issuing[0] & cur_valid),
                     ag.gather_start.eq(go_b & conv)]
        with m.If(shift[0]):
            m.d.sync += cur.eq(nxt)
        with m.If(shift[1]):
            m.d.sync += nxt.eq(adv)
        with m.If(shift[2] & st_valid):         # the step computed in the phase just ended
            m.d.sync += [st["m0"].eq(cur["m0"]), st["n0"].eq(cur["n0"]),
                         st["me"].eq(cur["me"]), st["ne"].eq(cur["ne"]),
                         st["gne"].eq(cur["gne"]),
                         # the store's first address, summed here
                         st["c_addr"].eq(cur["c_mptr"] + (cur["c_nptr"] if rows else Mux(
                             int8_out, cur["n0"], cur["n0"] << 2))),
                         st["slot"].eq(~acc_slot)]      # (acc_slot moved with st_valid)

        m.d.comb += self.busy_next.eq(Mux(self.busy, ~at_finish, self.start))
        m.d.sync += self.busy.eq(self.busy_next)
        with m.FSM():
            with m.State("IDLE"):
                with m.If(self.start):
                    m.d.sync += [self.done.eq(0), error.eq(0), failed.eq(0), conv.eq(0),
                                 crc_restart.eq(1)]
                    goto("CHECK_START")
            with m.State("CHECK_START"):            # the record is latched: check it
                m.d.comb += chk.start.eq(1)
                m.d.sync += crc_restart.eq(0)
                goto("CHECK")
            with m.State("CHECK"):
                with m.If(chk.done):
                    m.d.sync += [
                        gn_max.eq(pn >> lc),
                        cur_valid.eq(0), nxt_valid.eq(1), st_valid.eq(0),
                        a_slot.eq(0), b_slot.eq(0), acc_slot.eq(0),
                    ]
                    with m.If(chk.failed):
                        fail(chk.code)
                        goto("FINISH")
                    with m.Elif(params_needed):
                        m.d.comb += pl.start.eq(1)
                        goto("PARAMS")
                    with m.Elif(dry):
                        goto("FINISH")
                    with m.Else():
                        launch()
            with m.State("PARAMS"):             # post-processing parameters (ParamLoader)
                with m.If(pl.done & pl.bad):
                    fail(ErrorCode.BAD_QUANT)
                    goto("FINISH")
                with m.Elif(pl.done & dry):
                    goto("FINISH")
                with m.Elif(pl.done):
                    launch()
            with m.State("TABLES"):             # convolution tables on chip before the prologue
                with m.If(~ag.tables_busy):
                    issue_next(1, 1, 1)
            with m.State("ISSUE"):
                m.d.sync += st_hold.eq(Mux(st_valid, wait_cycles, 0))
                m.d.comb += st_load.eq(1)
                m.d.sync += [need_a.eq(go_a), need_b.eq(go_b)]
                m.d.sync += wait_early.eq(0b11)
                goto("WAIT")
            with m.State("WAIT"):
                m.d.sync += [wait_early.eq(wait_early >> 1), wait_ready.eq(wait_early <= 1)]
                with m.If(wait_go):
                    m.d.sync += wait_ready.eq(0)
                    new_st = cur_valid & cur_klast
                    m.d.sync += [
                        st_valid.eq(new_st),
                        a_slot.eq(a_slot ^ need_a),
                        b_slot.eq(b_slot ^ need_b),
                        cur_valid.eq(nxt_valid),
                        nxt_valid.eq(nxt_valid & ~adv_last),
                    ]
                    with m.If(new_st):
                        m.d.sync += acc_slot.eq(~acc_slot)
                    with m.If(nxt_valid | new_st):
                        # what ISSUE sees: nxt_valid & ~adv_last, cur_valid = nxt_valid, and the
                        # walker's flags of the same `adv` (its `nxt` moves at ISSUE's end)
                        still = nxt_valid & ~adv_last
                        issue_next(still & ~adv["a_same"], still & ~adv["b_same"], conv)
                    with m.Else():
                        goto("FINISH")
            if dw:
                # a depthwise layer: the walk's first strip, then its phases, each computing
                # the strip loaded in the phase before and storing the one computed before that
                with m.State("DW_FIRST"):           # the walk's products, then its first strip
                    with m.If(dww.valid):
                        m.d.sync += [dw_more.eq(1), dw_cp_valid.eq(0), dw_st_valid.eq(0)]
                        goto("DW_ISSUE")
                with m.State("DW_ISSUE"):
                    m.d.comb += [
                        ce.m_start.eq(dw_cp_valid),
                        # (h = 1 has no odd rows: buffer A has nothing to load)
                        la.start.eq(dw_more & (dww.a_words != 0)),
                        lb.start.eq(dw_more),
                        dww.advance.eq(dw_more),
                        st_load.eq(1),
                    ]
                    m.d.sync += [dw_ld[name].eq(getattr(dww, name)) for name in dw_ld]
                    m.d.sync += [dw_loaded.eq(dw_more), wait_early.eq(0b11),
                                 st_hold.eq(Mux(dw_st_valid, dw_wait, 0))]
                    with m.If(dw_more & dww.last):
                        m.d.sync += dw_more.eq(0)
                    goto("DW_WAIT")
                with m.State("DW_WAIT"):
                    m.d.sync += [wait_early.eq(wait_early >> 1),
                                 wait_ready.eq(wait_early <= 1)]
                    with m.If(wait_go & (dww.valid | ~dw_more)):
                        m.d.sync += wait_ready.eq(0)
                        # both buffers' halves change with every strip loaded, the accumulator's
                        # with every strip computed
                        m.d.sync += [dw_st_valid.eq(dw_cp_valid), dw_cp_valid.eq(dw_loaded),
                                     a_slot.eq(a_slot ^ dw_loaded), b_slot.eq(b_slot ^ dw_loaded)]
                        with m.If(dw_cp_valid):
                            m.d.sync += [dw_st[name].eq(dw_cp[name]) for name in dw_st]
                            m.d.sync += [acc_slot.eq(~acc_slot), dw_st_slot.eq(acc_slot)]
                        with m.If(dw_loaded):
                            m.d.sync += [dw_cp[name].eq(dw_ld[name]) for name in dw_cp]
                        with m.If(dw_loaded | dw_cp_valid):
                            goto("DW_ISSUE")
                        with m.Else():
                            goto("FINISH")
            with m.State("FINISH"):
                m.d.sync += self.done.eq(1)
                goto("IDLE")

        # -- performance counters (busy covers the whole layer run) ------------------------------
        m.submodules.counters = pc = PerfCounters(cfg)
        # drain: padding beats, and the store's wait for the previous step's results
        for name, cond in (("mac_active_cycles", ce.beat_real),
                           ("stall_drain_cycles", ce.running | st_holding),
                           ("stall_load_a_cycles", la.busy), ("stall_load_b_cycles", b_busy),
                           ("stall_store_cycles", se.busy)):
            m.d.comb += [getattr(pc, f"in_{name}").eq(cond),
                         getattr(self, f"cat_{name}").eq(getattr(pc, f"cat_{name}"))]
        m.d.comb += [pc.start.eq(self.start), pc.busy.eq(self.busy),
                     pc.a_fire.eq(self.a_rd.valid & self.a_rd.ready),
                     pc.b_fire.eq(self.b_rd.valid & self.b_rd.ready),
                     pc.c_fire.eq(self.c_wr.valid & self.c_wr.ready)]
        m.d.comb += [getattr(self, f"c_{name}").eq(getattr(pc, f"c_{name}")) for name in COUNTERS]
        return m
