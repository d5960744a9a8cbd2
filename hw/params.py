"""The per-channel post-processing parameters (docs/firmware.md, "Post-processing"): their
memories, and the loader that fills them through the B load engine and checks every word (and,
on ``dw_mesh`` configs, a depthwise layer's weight arrays through the A load engine beside
them)."""

from amaranth import *
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from spec.config import AccelConfig
from spec.desc import depthwise_weight_words

from .bits import log2
from .checker import PARAM_ARRAYS
from .collide import read_data
from .dma import _byte_mask, load_command_members

__all__ = ["ParamMemories", "ParamLoader", "WEIGHT_ARRAYS", "weight_word"]

#: A depthwise layer's weights as more parameter arrays (issue 18): array ``t`` holds a u32 per
#: channel whose bytes ``b`` (little-endian) are taps ``4t + b`` (``tap = k dy + dx`` of a k x
#: k kernel); a 3x3 layer uses the first three (taps 9 .. 11 do not exist and are ignored), a
#: 5x5 layer seven (taps 0 .. 24), a 7x7 layer all thirteen (:func:`spec.desc.depthwise_arrays`).
WEIGHT_ARRAYS: tuple[str, ...] = tuple(f"w{t}" for t in range(13))
#: Taps of the widest kernel the weight word holds (7x7).
WEIGHT_TAPS = 49


def weight_word(taps) -> int:
    """The weight word of one channel (tap ``t`` in bits ``8t .. 8t + 7``, ``8 *``
    :data:`WEIGHT_TAPS` bits) from its 9, 25 or 49 int8 taps: what :class:`ParamMemories` gives on
    ``weights``, the arrays' words (:func:`spec.desc.depthwise_weight_words`) side by side."""
    word = 0
    for t, w in enumerate(depthwise_weight_words(taps)):
        word |= w << 32 * t
    return word & ((1 << 8 * WEIGHT_TAPS) - 1)


class ParamMemories(wiring.Component):
    """One memory per parameter array (:data:`hw.checker.PARAM_ARRAYS`: bias, multiplier,
    shift) of ``quant_entries`` 32-bit words, one B beat (``b_beat_bytes / 4`` words) per row.

    Loading: the B load engine's buffer writes (``w_addr``, ``w_data``, ``w_en``) go to the
    array ``sel`` while ``load`` is high, registered on the way (a word lands in its memory a
    cycle after the B load engine gives it: the engine's response handshake straight into the
    block RAMs' write enables was a 9.6-9.7 ns path of the whole 8x8, 14dda7d, session 24;
    nothing reads a parameter until :class:`ParamLoader` is ``done``, at least a cycle after
    the last word landed). Reading: ``ch`` with ``ren`` reads channel ``ch`` of
    every array; its words are on ``bias``, ``mult`` and ``shift`` in the next cycle (and held
    until the next read), and the rows holding them on ``bias_row``, ``mult_row``,
    ``shift_row``, the word at
    lane ``lane`` (a driver that registers the rows as they leave the block RAMs and selects
    the word after its register takes the RAMs' read straight into a register, which
    ``bench.outreg`` can fold into the RAMs; through the select it was the RAMs' 5.8 ns
    unregistered clock-to-out, 10.5 ns of the whole 8x8, 94a525d seed 3, session 24).

    With ``weights`` there are thirteen more arrays (:data:`WEIGHT_ARRAYS`), loaded through the A
    load engine (``wa_addr``, ``wa_data``, ``wa_en`` go to the array ``wsel`` while ``wload``
    is high, registered on the way as B's writes are) and read at their own port: ``w_ch`` with
    ``w_ren`` puts channel ``w_ch``'s taps (49; a 3x3 layer's nine in the low 72 bits) on
    ``weights`` in the next cycle (tap ``t`` in bits ``8t ..``, :func:`weight_word`).
    (Seven of the arrays' words make a 5x5 channel's 25 taps, thirteen a 7x7 one's 49.)

    Parameters
    ----------
    cfg : AccelConfig
        Uses ``b_beat_bytes``, ``quant_entries``.
    weights : bool
        Build the depthwise weight arrays.

    Members
    -------
    load : ``In(1)``; sel : ``In(range(3))``; w_addr :
    ``In(range(quant_entries // words))``
    w_data : ``In(8 * b_beat_bytes)``; w_en : ``In(1)``
    ch : ``In(range(quant_entries))``; ren : ``In(1)``; bias, mult, shift : ``Out(32)``;
    bias_row, mult_row, shift_row : ``Out(8 * b_beat_bytes)``; lane : ``Out(range(max(words, 2)))``
    w_ch : ``In(range(quant_entries))``; w_ren : ``In(1)``; weights : ``Out(392)``; wload :
    ``In(1)``; wsel : ``In(range(13))``; wa_addr : ``In(range(quant_entries // words))``; wa_data :
    ``In(8 * b_beat_bytes)``; wa_en : ``In(1)`` (only with ``weights``)
    """

    def __init__(self, cfg: AccelConfig, *, weights: bool = False):
        self._cfg = cfg
        self._weights = weights
        words = cfg.b_beat_bytes // 4
        if weights and cfg.a_beat_bytes != cfg.b_beat_bytes:
            raise ValueError(f"ParamMemories: the weight arrays load through the A port, so its "
                             f"beat ({cfg.a_beat_bytes} bytes) must be B's "
                             f"({cfg.b_beat_bytes})")
        # a whole array is one load engine command into buffer rows 0 .., whose row numbers
        # are the memories' write addresses
        for port, depth in (("B", cfg.buf_b_depth),) + ((("A", cfg.buf_a_depth),) if weights
                                                        else ()):
            if depth < cfg.quant_entries // words:
                raise ValueError(f"ParamMemories: an array of quant_entries="
                                 f"{cfg.quant_entries} words is {cfg.quant_entries // words} "
                                 f"beats through the {port} load engine, more than its "
                                 f"buffer's {depth} rows")
        arrays = len(PARAM_ARRAYS)
        extra = {"w_ch": In(range(cfg.quant_entries)), "w_ren": In(1),
                 "weights": Out(8 * WEIGHT_TAPS), "wload": In(1),
                 "wsel": In(range(len(WEIGHT_ARRAYS))),
                 "wa_addr": In(range(cfg.quant_entries // words)),
                 "wa_data": In(8 * cfg.b_beat_bytes), "wa_en": In(1)} if weights else {}
        super().__init__({
            **extra,
            "load": In(1), "sel": In(range(arrays)),
            "w_addr": In(range(cfg.quant_entries // words)), "w_data": In(8 * cfg.b_beat_bytes),
            "w_en": In(1),
            "ch": In(range(cfg.quant_entries)), "ren": In(1),
            **{name: Out(32) for name in PARAM_ARRAYS},
            "bias_row": Out(8 * cfg.b_beat_bytes), "mult_row": Out(8 * cfg.b_beat_bytes),
            "shift_row": Out(8 * cfg.b_beat_bytes),
            "lane": Out(range(max(words, 2))),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self._cfg
        words = cfg.b_beat_bytes // 4
        lw = log2(words)
        lane = Signal(max(lw, 1))
        with m.If(self.ren):
            m.d.sync += lane.eq(self.ch[:lw] if lw else 0)
        m.d.comb += self.lane.eq(lane)
        arrays = len(PARAM_ARRAYS)
        # the write, registered: one enable per array, the row and the data shared
        wq_addr = Signal.like(self.w_addr, name="wq_addr", reset_less=True)
        wq_data = Signal.like(self.w_data, name="wq_data", reset_less=True)
        wq_en = Signal(arrays, name="wq_en")
        m.d.sync += [wq_addr.eq(self.w_addr), wq_data.eq(self.w_data),
                     wq_en.eq(Cat(self.w_en & self.load & (self.sel == i)
                                  for i in range(arrays)))]
        for i, name in enumerate(PARAM_ARRAYS):
            mem = Memory(shape=8 * cfg.b_beat_bytes, depth=cfg.quant_entries // words, init=[])
            # submodule names as before the split (q_bias, ...): bench.fpga's breakdown keys
            m.submodules[f"q_{name}"] = mem
            w, r = mem.write_port(), mem.read_port(transparent_for=())
            rd = read_data(m, r, [w])        # written only while the store and compute are idle
            m.d.comb += [w.addr.eq(wq_addr), w.data.eq(wq_data), w.en.eq(wq_en[i]),
                         r.addr.eq(self.ch >> lw), r.en.eq(self.ren),
                         getattr(self, name).eq(rd.word_select(lane, 32) if lw else rd)]
            if name in ("bias", "mult", "shift"):
                m.d.comb += getattr(self, f"{name}_row").eq(rd)
        if self._weights:
            w_lane = Signal(max(lw, 1))
            with m.If(self.w_ren):
                m.d.sync += w_lane.eq(self.w_ch[:lw] if lw else 0)
            # the A load engine's writes, registered as B's are
            wa_addr = Signal.like(self.wa_addr, name="wa_addr_q", reset_less=True)
            wa_data = Signal.like(self.wa_data, name="wa_data_q", reset_less=True)
            wa_en = Signal(len(WEIGHT_ARRAYS), name="wa_en_q")
            m.d.sync += [wa_addr.eq(self.wa_addr), wa_data.eq(self.wa_data),
                         wa_en.eq(Cat(self.wa_en & self.wload & (self.wsel == i)
                                      for i in range(len(WEIGHT_ARRAYS))))]
            taps = []
            for t, name in enumerate(WEIGHT_ARRAYS):
                mem = Memory(shape=8 * cfg.b_beat_bytes, depth=cfg.quant_entries // words,
                             init=[])
                m.submodules[f"q_{name}"] = mem
                w, r = mem.write_port(), mem.read_port(transparent_for=())
                rd = read_data(m, r, [w])
                m.d.comb += [w.addr.eq(wa_addr), w.data.eq(wa_data), w.en.eq(wa_en[t]),
                             r.addr.eq(self.w_ch >> lw), r.en.eq(self.w_ren)]
                taps.append(rd.word_select(w_lane, 32) if lw else rd)
            m.d.comb += self.weights.eq(Cat(*taps)[:8 * WEIGHT_TAPS])
        return m


class ParamLoader(wiring.Component):
    """Loads the parameter arrays a layer uses, in :data:`hw.checker.PARAM_ARRAYS` order, each
    with one B load engine command (a row of ``4 * rows`` bytes from ``addr_<array>`` into the
    memory ``sel``), and checks every word as it arrives: a multiplier must be positive, a
    shift in [-31, 31].

    ``start`` (one cycle, with the record latched) clears ``bad``; from the next cycle each
    array takes one cycle, plus its load (until the engine's ``busy`` falls) when ``need`` has
    its bit. Then ``done`` is high for one cycle, with ``bad`` final: a word is checked the cycle
    after it is written, and the load's ``busy`` falls a cycle after its last word. While an
    array loads, ``phase`` is high: the B load engine runs ``lb``'s command and its buffer
    writes (``w_addr``, ``w_data``, ``w_en``) belong to the parameter memories.

    With ``weights`` the depthwise weight arrays (:data:`WEIGHT_ARRAYS`) load at the same time
    through the A load engine (``la``; ``phase_a`` and its copies ``phase_la``, ``wsel`` the
    array), the same way, one after another, and are not checked (any byte is a weight);
    ``done`` comes when both engines' arrays are loaded (``need`` bits 3 .. 15 are theirs; the
    A chain ends after the last array whose bit is set, so a 3x3 layer's three arrays take
    what they took before the 5x5 and 7x7 layers' ten more existed).

    Parameters
    ----------
    cfg : AccelConfig
        Uses ``b_beat_bytes``, ``dram_addr_bits``, ``buf_b_depth``.
    weights : bool
        Also load the depthwise weight arrays.

    Members
    -------
    start : ``In(1)``; need : ``In(3)`` (16 with ``weights``; stable from ``start`` on: the
    engine's start is registered from it); addr_<array> : ``In(32)``;
    rows : ``In(32)`` (stable
    from the cycle before ``start``: the command's sizes are registered from it)
    lb : ``In(Signature(load_command_members))`` the B load engine command it drives (its
    ``start`` a register)
    w_addr, w_data, w_en : ``In(...)`` the B load engine's buffer writes
    phase : ``Out(1)``; phase_lb : ``Out(2 + len(LB_FIELDS))``, copies of ``phase`` (registers
    of their own, equal to it in every cycle): bit 0 for the B load engine's local-read flag,
    bit 1 for buffer B's write enables, bit ``2 + i`` for the select of command field
    ``LB_FIELDS[i]``;
    sel : ``Out(range(3))`` (valid while ``phase``; ``phase``, ``phase_lb`` and ``sel`` are
    registers set with the state moves); done : ``Out(1)``; bad : ``Out(1)``
    la : ``In(Signature(load_command_members))``, the A load engine command; phase_a :
    ``Out(1)``; phase_la : ``Out(2 + len(LB_FIELDS))`` (bit 0 unused, bit 1 for buffer A's write
    enables, bit ``2 + i`` for command field ``LB_FIELDS[i]``); wsel : ``Out(range(13))`` (only with
    ``weights``)
    """

    #: The B load engine's command fields (``p_*``), each selected by a copy of ``phase``.
    LB_FIELDS = tuple(name for name in load_command_members(1, 2) if name.startswith("p_"))

    def __init__(self, cfg: AccelConfig, *, weights: bool = False):
        self._cfg = cfg
        self._weights = weights
        self._arrays = PARAM_ARRAYS + (WEIGHT_ARRAYS if weights else ())
        extra = {"la": In(wiring.Signature(load_command_members(cfg.dram_addr_bits,
                                                                cfg.buf_a_depth))),
                 "phase_a": Out(1), "phase_la": Out(2 + len(self.LB_FIELDS)),
                 "wsel": Out(range(len(WEIGHT_ARRAYS)))} if weights else {}
        super().__init__({**extra,
            "start": In(1), "need": In(len(self._arrays)), "rows": In(32),
            **{f"addr_{name}": In(32) for name in self._arrays},
            "lb": In(wiring.Signature(load_command_members(cfg.dram_addr_bits,
                                                           cfg.buf_b_depth))),
            "w_addr": In(range(cfg.buf_b_depth)), "w_data": In(8 * cfg.b_beat_bytes),
            "w_en": In(1),
            "phase": Out(1), "phase_lb": Out(2 + len(self.LB_FIELDS)),
            "sel": Out(range(len(PARAM_ARRAYS))), "done": Out(1),
            "bad": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        words = self._cfg.b_beat_bytes // 4
        lw = log2(words)
        rows = self.rows
        arrays = PARAM_ARRAYS if self._weights else self._arrays     # (B's; A's below)
        a_end = Signal(name="pl_a_end") if self._weights else None
        addrs = Array(getattr(self, f"addr_{name}") for name in arrays)
        # the command's sizes, registered (`rows` is the latched record, stable long before
        # `start`): the add and the load engine's compares at its start were a 12 ns path
        groups, elems = Signal(32), Signal(34)
        m.d.sync += [groups.eq((rows + words - 1) >> lw), elems.eq(rows << 2)]
        m.d.comb += [self.lb.p_addr.eq(addrs[self.sel]), self.lb.p_stride.eq(0),
                     self.lb.p_rows.eq(1), self.lb.p_groups.eq(groups),
                     self.lb.p_elems.eq(elems), self.lb.p_buf_base.eq(0),
                     self.lb.p_buf_gstride.eq(1)]

        # every written word checked a cycle later (registered first)
        c_en, c_sel = Signal(), Signal.like(self.sel)
        c_data = Signal.like(self.w_data)
        m.d.sync += [c_en.eq(self.w_en & self.phase), c_sel.eq(self.sel),
                     c_data.eq(self.w_data)]
        # words of the array still to check, from this beat's first: the beats of an array
        # arrive in order from its buffer row 0 (rows less the words before it, kept as a running count
        # so that the per-word tests are the load engine's byte-mask compares, no carry chains)
        left = Signal(signed(len(rows) + 2))
        with m.If(self.lb.start):
            m.d.sync += left.eq(rows)
        with m.Elif(c_en):
            m.d.sync += left.eq(left - words)
        live_words = _byte_mask(left, words)
        for j in range(words):
            word = c_data[32 * j:32 * (j + 1)]
            live = c_en & live_words[j]
            bad_mult = (c_sel == 1) & ((word == 0) | word[31])
            bad_shift = (c_sel == 2) & ~((word.as_signed() >= -31) & (word.as_signed() <= 31))
            with m.If(live & (bad_mult | bad_shift)):
                m.d.sync += self.bad.eq(1)

        # `phase` and `sel` are registers set with the state moves, not decodes of the state:
        # `phase` selects the B load engine's command, and its decode in front of the engine's
        # start mask was a 10.9 ns path of the whole 8x8 (session 21)
        # (`phase_lb`, copies of `phase` for the B load engine's command select alone: from
        # `phase` that select was still a 11.3 ns path, session 22; from one copy, into the
        # engine's start registers, a 10.4 ns path at 598b87c: now a copy per field)
        # (`keep` on `phase` too, or Yosys merges it into one of its equal copies)
        phase, sel = Signal(name="phase", attrs={"keep": 1}), Signal.like(self.sel)
        lb_copies = [Signal(name=f"phase_lb{i}", attrs={"keep": 1})
                     for i in range(len(self.phase_lb))]
        m.d.comb += [self.phase.eq(phase), self.phase_lb.eq(Cat(*lb_copies)), self.sel.eq(sel)]

        # The engine's start, a register set with the move into an array's state when `need`
        # has its bit (what the state decode and `need` gave before): from the decode, through
        # the sequencer's OR into the engine's start registers' enables, it was a 10.9 ns path
        # of the whole 8x8 at e2de91f (session 26)
        lb_start = Signal(name="pl_lb_start")
        m.d.sync += lb_start.eq(0)
        m.d.comb += self.lb.start.eq(lb_start)

        def enter(i):
            """Move into array ``i``'s first state."""
            m.d.sync += [sel.eq(i), lb_start.eq(self.need[i])]
            m.next = arrays[i]

        def leave(i):
            """Leave array ``i``'s states for the next array's, or END after the last."""
            if i + 1 < len(arrays):
                enter(i + 1)
            else:
                m.d.sync += [phase.eq(0), *(c.eq(0) for c in lb_copies)]
                m.next = "END"

        with m.FSM():
            with m.State("IDLE"):
                with m.If(self.start):
                    m.d.sync += [self.bad.eq(0), phase.eq(1), *(c.eq(1) for c in lb_copies)]
                    enter(0)
            _array_states(m, arrays, self.need, self.lb.busy, leave)
            with m.State("END"):
                if self._weights:
                    # both engines' arrays loaded (the A chain waits in its own end state)
                    m.d.comb += self.done.eq(a_end)
                    with m.If(a_end):
                        m.next = "IDLE"
                else:
                    m.d.comb += self.done.eq(1)
                    m.next = "IDLE"
        if self._weights:
            self._a_chain(m, groups, elems, a_end)
        return m

    def _a_chain(self, m, groups, elems, a_end):
        """The depthwise weight arrays through the A load engine, beside the B chain, with the
        same states (one cycle an array, plus its load while the engine is busy); ``a_end``:
        the A chain is in its end state (it leaves it with ``done``)."""
        need = self.need[len(PARAM_ARRAYS):]
        addrs = Array(getattr(self, f"addr_{name}") for name in WEIGHT_ARRAYS)
        wsel = Signal.like(self.wsel)
        phase = Signal(name="phase_a", attrs={"keep": 1})
        copies = [Signal(name=f"phase_la{i}", attrs={"keep": 1})
                  for i in range(len(self.phase_la))]
        la_start = Signal(name="pl_la_start")
        m.d.sync += la_start.eq(0)
        m.d.comb += [self.phase_a.eq(phase), self.phase_la.eq(Cat(*copies)), self.wsel.eq(wsel),
                     self.la.start.eq(la_start),
                     self.la.p_addr.eq(addrs[wsel]), self.la.p_stride.eq(0),
                     self.la.p_rows.eq(1), self.la.p_groups.eq(groups),
                     self.la.p_elems.eq(elems), self.la.p_buf_base.eq(0),
                     self.la.p_buf_gstride.eq(1)]

        # (the B chain's enter / leave, for this chain's registers: folding both into one
        # helper renames a wire of the B chain in every preset's Verilog, so `fpga` and
        # `small`, whose FPGA results docs/bench.md records, would no longer be byte-identical)
        def enter(i):
            m.d.sync += [wsel.eq(i), la_start.eq(need[i])]
            m.next = f"a_{WEIGHT_ARRAYS[i]}"

        def leave(i):
            def end():
                m.d.sync += [phase.eq(0), *(c.eq(0) for c in copies)]
                m.next = "A_END"
            if i + 1 < len(WEIGHT_ARRAYS):
                # on to the next array while a later one is needed (3x3 layers and GEMMs
                # end after the first three, as before the 5x5 arrays existed)
                with m.If(need[i + 1:].any() if i >= 2 else 1):
                    enter(i + 1)
                with m.Else():
                    end()
            else:
                end()

        with m.FSM(name="a_chain"):
            with m.State("A_IDLE"):
                with m.If(self.start):
                    m.d.sync += [phase.eq(1), *(c.eq(1) for c in copies)]
                    enter(0)
            _array_states(m, [f"a_{name}" for name in WEIGHT_ARRAYS], need, self.la.busy, leave)
            with m.State("A_END"):
                m.d.comb += a_end.eq(1)
                with m.If(self.done):
                    m.next = "A_IDLE"


def _array_states(m, names, need, busy, leave):
    """A parameter loader chain's states, in its FSM: each array's first state (its engine's
    start is high there when ``need`` has its bit; ``leave(i)`` moves on at once otherwise),
    then the wait for the engine's ``busy`` to fall."""
    for i, name in enumerate(names):
        with m.State(name):
            with m.If(need[i]):          # (the engine's start is high)
                m.next = f"{name}_wait"
            with m.Else():
                leave(i)
        with m.State(f"{name}_wait"):
            with m.If(~busy):
                leave(i)
