"""Image runner: executes a whole firmware image (every layer, back to back) from device memory."""

from amaranth import *
from amaranth.lib import wiring
from amaranth.lib.crc import catalog
from amaranth.lib.wiring import In, Out

from spec.config import FORMAT_VERSION, AccelConfig
from spec.desc import ErrorCode
from spec.layouts import COUNTERS, HEADER_WORDS, IMAGE_MAGIC, STATS_BYTES, STATS_WORDS, SectionKind
from spec.record import HEADER_BYTES, LAYER_RECORD_BYTES, SECTION_ALIGN_BYTES, record_fetch_beats

from .bits import log2
from .crc import CrcState, crc_data_term
from .ports import ReadPort, WritePort, named_members
from .sequencer import CATEGORIES

__all__ = ["ImageRunner", "RECORD_BEATS"]

#: The CRC the image header carries: CRC-32 as zlib computes it (ISO-HDLC / IEEE 802.3).
CRC_ALGORITHM = catalog.CRC32_ISO_HDLC
#: Counters an image run accumulates from its run-pass layers (the rest count the image's
#: own cycles and beats).
_LAYER_SUMMED = CATEGORIES


#: B-port beats of one layer record fetch (the named words only).
RECORD_BEATS = record_fetch_beats


class ImageRunner(wiring.Component):
    """Runs the image at ``image_addr`` with no host involvement between layers.

    1. Fetch the header; check it (:func:`spec.record.check_header`: magic, format version,
       ``config_id``, structure).
    2. Read the image up to its weights section (``section_weights_offset`` bytes: header,
       records, tables, parameters) once through a CRC-32 (:data:`CRC_ALGORITHM`; the ``crc32``
       word reads as 0) and compare with the header's (``BAD_CRC``). The weights are checked as
       the layers load them: the sequencer's CRC of each layer's A beats against the record's
       ``a_crc`` (``seq_a_bad``).
    3. *Check pass*: fetch every layer record into the record registers and run the sequencer
       ``dry`` (all of :func:`spec.record.check_record`, parameter arrays included). The first
       failing layer ends the run with its code; nothing has been written.
    4. *Run pass*: fetch each record again, run it, check its A loads (``BAD_WEIGHTS``: the run
       ends after the layer's writes, before its statistics), then write its statistics record
       (:data:`spec.layouts.STATS_WORDS`, :data:`spec.layouts.STATS_BYTES` bytes) at its
       ``stats_addr``.

    The header and record fetches and the CRC read use the B read port (while the sequencer is
    idle); statistics go out on the C write port. Image-run counters: ``total_cycles`` counts
    every busy cycle; the MAC and stall categories are the sums of the run-pass layers';
    ``stall_ctrl_cycles`` is the rest (header, CRC, check pass, record fetches, statistics), so
    the categories still add up to the total; byte counters count every beat on the ports
    (``*_fire`` inputs).

    Members
    -------
    start : ``In(1)``; image_addr : ``In(dram_addr_bits)``
    busy, done : ``Out(1)``; error : ``Out(8)``; layer_index : ``Out(32)``
    busy_next : ``Out(1)``: the value ``busy`` takes in the next cycle (for registered copies)
    rd : ``Out(ReadPort.Signature)`` (B width); wr : ``Out(WritePort.Signature)`` (C width)
    crc_term, crc_word_term : ``In(32)``: :meth:`crc_terms` of ``rd.rdata``'s beat, from
        registers of their own (given in the cycle ``rd.rdata`` is: the CRC's data network sits in
        front of those registers, see :class:`~hw.crc.CrcState`)
    rec_we : ``Out(1)``; rec_sel : ``Out(RECORD_BEATS)`` (one-hot: the record beat arriving,
        a register); rec_data : ``Out(b beat)``
    seq_start, seq_dry : ``Out(1)``; seq_busy, seq_a_bad : ``In(1)``; seq_error : ``In(8)``;
    seq_failed : ``In(1)`` (``seq_error != 0``, the sequencer's flag)
    stats_addr : ``In(32)`` the current record's ``stats_addr`` word
    img_lo, img_hi, img_wt : ``Out(dram_addr_bits + 1)`` (the image, its weights section)
    s_<counter> : ``In(32)`` the sequencer's counters (for the statistics records);
    s_cat_<counter> : ``In(1)`` for the MAC and stall categories: the sequencer counted the
    previous cycle in that counter; c_<counter> : ``Out(32)`` the image's
    a_fire, b_fire, c_fire : ``In(1)`` accepted beats on the three ports
    """

    #: Byte offset of the header's ``crc32`` word (read as 0 by the image's CRC).
    CRC_BYTE = 4 * HEADER_WORDS["crc32"]

    @classmethod
    def crc_terms(cls, rdata: Value) -> tuple[Value, Value]:
        """``(crc_term, crc_word_term)`` of a B beat ``rdata``: the beat's contribution to the
        image CRC's state (:func:`hw.crc.crc_data_term`) and that of its ``crc32`` word's lane
        alone (the lane the header's crc32 word takes in its beat; the other lanes zero)."""
        bb = len(rdata) // 8
        lane = (cls.CRC_BYTE % bb) // 4
        word_only = Cat(Const(0, 32 * lane), rdata[32 * lane:32 * (lane + 1)],
                        Const(0, 8 * bb - 32 * (lane + 1)))
        return crc_data_term(CRC_ALGORITHM, rdata), crc_data_term(CRC_ALGORITHM, word_only)

    def __init__(self, cfg: AccelConfig):
        self._cfg = cfg
        ab = cfg.dram_addr_bits
        members = {
            "start": In(1),
            "image_addr": In(ab),
            "busy": Out(1),
            "busy_next": Out(1),
            "done": Out(1),
            "error": Out(8),
            "layer_index": Out(32),
            "rd": Out(ReadPort.Signature(addr_bits=ab, data_bytes=cfg.b_beat_bytes,
                                         strided=True)),
            "wr": Out(WritePort.Signature(addr_bits=ab, data_bytes=cfg.c_beat_bytes)),
            "crc_term": In(CRC_ALGORITHM.crc_width),
            "crc_word_term": In(CRC_ALGORITHM.crc_width),
            "rec_we": Out(1),
            "rec_sel": Out(RECORD_BEATS(cfg)),
            "rec_data": Out(8 * cfg.b_beat_bytes),
            "seq_start": Out(1),
            "seq_dry": Out(1),
            "seq_busy": In(1),
            "seq_error": In(8),
            "seq_failed": In(1),
            "seq_a_bad": In(1),
            "stats_addr": In(32),
            "img_lo": Out(ab + 1),
            "img_hi": Out(ab + 1),
            "img_wt": Out(ab + 1),
            "a_fire": In(1),
            "b_fire": In(1),
            "c_fire": In(1),
        }
        super().__init__({**members, **named_members("s_", COUNTERS, In(32)),
                          **named_members("c_", COUNTERS, Out(32)),
                          **named_members("s_cat_", _LAYER_SUMMED, In(1))})

    def elaborate(self, platform):
        m = Module()
        cfg = self._cfg
        ab = cfg.dram_addr_bits
        bb = cfg.b_beat_bytes
        wpb = bb // 4

        # -- beat fetcher: `f_beats` consecutive B beats from `f_addr` ---------------------------
        f_start = Signal()
        f_addr_in = Signal(ab + 1)
        f_beats_in = Signal(32)
        fetching = Signal()
        rq_addr = Signal(ab)
        rq_left = Signal(32)
        rs_left = Signal(32)
        # `rq_left != 0` as a flip-flop kept with it (the 32-bit compare into the port's valid
        # was a 9.72 ns path of the whole 8x8, 3f2a346 seed 3, session 26)
        rq_more = Signal()
        m.d.comb += [self.rd.addr.eq(rq_addr), self.rd.valid.eq(fetching & rq_more),
                     self.rd.stride.eq(1)]
        with m.If(f_start):
            m.d.sync += [fetching.eq(1), rq_addr.eq(f_addr_in), rq_left.eq(f_beats_in),
                         rq_more.eq(f_beats_in != 0), rs_left.eq(f_beats_in)]
        with m.Else():
            with m.If(self.rd.valid & self.rd.ready):
                m.d.sync += [rq_addr.eq(rq_addr + bb), rq_left.eq(rq_left - 1),
                             rq_more.eq(rq_left != 1)]
            with m.If(fetching & self.rd.rvalid):
                m.d.sync += rs_left.eq(rs_left - 1)
                with m.If(rs_left == 1):
                    m.d.sync += fetching.eq(0)
        beat_in = fetching & self.rd.rvalid

        # -- header words -------------------------------------------------------------------------
        hdr_beats = HEADER_BYTES // bb
        hdr = [Signal(32, name=f"hdr_{i}") for i in range(HEADER_BYTES // 4)]
        to_hdr, to_rec, to_crc = Signal(), Signal(), Signal()
        # The header and record beat arriving, one-hot in registers (bit i: the fetch's beat
        # i), so each word register's load enable is one AND of flip-flops, not a compare of
        # a beat index (`Switch(rs_idx)`, then a 32-bit count, in front of the header words'
        # enables was 10.85 ns of the whole 8x8, 32 endpoints, 3d09a99 seed 2, session 25).
        # `keep` on both: they hold the same bits, and merged one would drive both fan-outs.
        hdr_hot = Signal(hdr_beats, attrs={"keep": 1})
        rec_hot = Signal(RECORD_BEATS(cfg), attrs={"keep": 1})
        with m.If(f_start):
            m.d.sync += [hdr_hot.eq(1), rec_hot.eq(1)]
        with m.Elif(beat_in):
            m.d.sync += [hdr_hot.eq(hdr_hot << 1), rec_hot.eq(rec_hot << 1)]
        for b in range(hdr_beats):
            with m.If(beat_in & to_hdr & hdr_hot[b]):
                m.d.sync += [hdr[b * wpb + j].eq(self.rd.rdata[32 * j:32 * (j + 1)])
                             for j in range(wpb)]
        H = {name: hdr[index] for name, index in HEADER_WORDS.items()}
        m.d.comb += [self.rec_we.eq(beat_in & to_rec), self.rec_sel.eq(rec_hot),
                     self.rec_data.eq(self.rd.rdata)]

        # -- CRC over the whole image, the crc32 word read as zero --------------------------------
        # restarted in the first HEADER cycle (it takes data only in CRC), from a flip-flop set
        # with the start (the FSM's decode into the CRC's flip-flops was a 10.9 ns path)
        crc_restart = Signal()
        m.submodules.crc = crc = CrcState(CRC_ALGORITHM, 8 * bb)
        # whether the beat arriving is the one holding the crc32 word (a header beat): a flag
        # kept with hdr_hot (a compare in front of the CRC's XOR network was a 11.85 ns path
        # of the whole 8x8, session 18: the record index -> the CRC register); that beat's
        # word term cancels the word's share of the beat's term (the CRC is linear in the word)
        crc_index = self.CRC_BYTE // bb
        assert crc_index < hdr_beats
        crc_beat = Signal(name="crc_beat", init=crc_index == 0)     # beat crc_index
        with m.If(f_start):
            m.d.sync += crc_beat.eq(crc_index == 0)
        with m.Elif(fetching & self.rd.rvalid):
            m.d.sync += crc_beat.eq(hdr_hot[crc_index - 1] if crc_index else 0)
        m.d.comb += [crc.term.eq(self.crc_term ^ Mux(crc_beat, self.crc_word_term, 0)),
                     crc.valid.eq(beat_in & to_crc), crc.restart.eq(crc_restart)]
        crc_bad = Signal()
        m.d.sync += crc_bad.eq(crc.crc != H["crc32"])

        # -- header checks (same rules and priority as spec.record.check_header) ---------------------
        # A free-running pipeline of three register stages: (1) the sums, and every compare that
        # reads header words only; (2) the compares of the sums, and a copy of the stage-1 bits;
        # (3) `bad_any`, their OR. The header words are final in HEADER's last cycle (the fetch
        # clears `fetching` with the last beat), three cycles before HEADER_CHECK reads stage 3
        # (HEADER_SUM and HEADER_CMP are those cycles). Each stage is one compare or one OR: the
        # 64-bit `l_end > total` compare behind an OR of fifteen compares into `bad_any` was
        # 10.06 ns of the whole 8x8 (session 24).
        img = Signal(ab)
        total, count = H["total_bytes"], H["layer_count"]
        l_off = H[f"section_{SectionKind.LAYERS.name.lower()}_offset"]
        l_size = H[f"section_{SectionKind.LAYERS.name.lower()}_bytes"]
        w_off = H[f"section_{SectionKind.WEIGHTS.name.lower()}_offset"]
        img_end = Signal(max(ab, 32) + 1)
        img_wt = Signal(max(ab, 32) + 1)
        l_end = Signal(33)
        rec_base = Signal(ab)                        # the first layer record's address
        m.d.sync += [img_end.eq(img + total), img_wt.eq(img + w_off),
                     l_end.eq(l_off + l_size), rec_base.eq(img + l_off)]
        align = log2(SECTION_ALIGN_BYTES)
        l_need = count << log2(LAYER_RECORD_BYTES)

        def early(name, compare):
            """A compare of header words alone, registered in stage 1."""
            flag = Signal(name=f"early_{name}")
            m.d.sync += flag.eq(compare)
            return flag
        # stage 2 registers these: stage-1 flags, and the compares of the sums
        structure = [
            early("base_addr", H["base_addr"] != img), early("image_align", img[:align] != 0),
            early("total_align", total[:align] != 0), early("total_small", total < HEADER_BYTES),
            img_end > cfg.dram_bytes, early("count_zero", count == 0),
            early("layers_size", l_size != l_need), early("layers_align", l_off[:align] != 0),
            early("layers_small", l_off < HEADER_BYTES), l_end > total,
            early("weights_align", w_off[:align] != 0), w_off < l_end,
            early("weights_past", w_off > total)]
        early_format = early("format", (H["magic"] != IMAGE_MAGIC)
                             | (H["format_version"] != FORMAT_VERSION))
        early_config = early("config", H["config_id"] != cfg.config_id)
        bad_format, bad_config = Signal(), Signal()
        bad_structure = Signal(len(structure))
        # whether any check failed, registered after the checks: HEADER_CHECK's branch (which
        # starts the CRC fetch, resetting the fetcher's counters) reads one flip-flop, not an OR
        bad_any = Signal()
        m.d.sync += [bad_format.eq(early_format), bad_config.eq(early_config),
                     bad_structure.eq(Cat(*structure)),
                     bad_any.eq(bad_format | bad_config | bad_structure.any())]
        hdr_code = Mux(bad_format, ErrorCode.BAD_IMAGE,
                       Mux(bad_config, ErrorCode.CONFIG_MISMATCH,
                           Mux(bad_structure.any(), ErrorCode.BAD_IMAGE, 0)))
        m.d.comb += [self.img_lo.eq(Mux(self.busy, img, 0)),
                     self.img_hi.eq(Mux(self.busy, img_end, 0)),
                     self.img_wt.eq(Mux(self.busy, img_wt, 0))]

        # -- statistics writer ---------------------------------------------------------------------
        W = cfg.c_beat_bytes
        st_beats = -(-STATS_BYTES // W)
        stats_words = [Const(0, 32)] * (st_beats * W // 4)
        for name, index in STATS_WORDS.items():
            stats_words[index] = (self.layer_index if name == "layer_index"
                                  else getattr(self, f"s_{name}"))
        stats_addr = Signal(ab)
        st_issue = Signal(range(st_beats + 1))
        st_ack = Signal(range(st_beats + 1))
        st_active = Signal()
        beat_data = Array(Cat(*stats_words[b * W // 4:(b + 1) * W // 4]) for b in range(st_beats))
        beat_strb = Array(Const((1 << min(W, STATS_BYTES - b * W)) - 1, W)
                          for b in range(st_beats))
        m.d.comb += [
            self.wr.valid.eq(st_active & (st_issue != st_beats)),
            self.wr.addr.eq(stats_addr + st_issue * W),
            self.wr.data.eq(beat_data[st_issue]),
            self.wr.strb.eq(beat_strb[st_issue]),
        ]
        with m.If(self.wr.valid & self.wr.ready):
            m.d.sync += st_issue.eq(st_issue + 1)
        with m.If(st_active & self.wr.bvalid):
            m.d.sync += st_ack.eq(st_ack + 1)

        # -- image counters --------------------------------------------------------------------------
        # Each category counts the run-pass cycles the sequencer spends in it (the sum of the
        # run-pass layers' own counters); stall_ctrl_cycles counts every other busy cycle.
        ctr = {name: Signal(32, name=f"img_{name}") for name in COUNTERS}
        for name in COUNTERS:
            m.d.comb += getattr(self, f"c_{name}").eq(ctr[name])
        # Like the sequencer's (hw/counters.py), a cycle is counted a cycle later, from
        # registered conditions: the sequencer's `s_cat_*` already name its previous cycle.
        # The counters are final the cycle after `busy` falls, when `done` rises.
        run_pass = Signal()
        busy_q, layer_cycle = Signal(), Signal()    # layer_cycle: a run-pass cycle the
        m.d.sync += [busy_q.eq(self.busy),          # sequencer counts (a cycle ago)
                     layer_cycle.eq(run_pass & self.seq_busy)]
        fires = []
        for port, beat in (("a", cfg.a_beat_bytes), ("b", bb), ("c", W)):
            fire = Signal(name=f"{port}_fire_q")
            m.d.sync += fire.eq(self.busy & getattr(self, f"{port}_fire"))
            fires.append((fire, f"{'wr' if port == 'c' else 'rd'}_{port}_bytes", beat))
        with m.If(busy_q):
            m.d.sync += ctr["total_cycles"].eq(ctr["total_cycles"] + 1)
            in_layer = Cat(*(getattr(self, f"s_cat_{name}") for name in _LAYER_SUMMED)).any()
            with m.If(~(layer_cycle & in_layer)):
                m.d.sync += ctr["stall_ctrl_cycles"].eq(ctr["stall_ctrl_cycles"] + 1)
            for name in _LAYER_SUMMED:
                with m.If(layer_cycle & getattr(self, f"s_cat_{name}")):
                    m.d.sync += ctr[name].eq(ctr[name] + 1)
            for fire, name, beat in fires:
                with m.If(fire):
                    m.d.sync += ctr[name].eq(ctr[name] + beat)

        # -- control -------------------------------------------------------------------------------
        layer = self.layer_index

        # The fetcher's start, from flip-flops: the FSM's state decode and its branch conditions
        # -> the fetch start -> the fetcher's address select was a 10.24 ns path of the whole
        # 8x8 (session 24: fsm_state -> rq_addr, rec_sel, rq_left; 13 endpoints). Each `at_*`
        # flag is set by the FSM's move into the state that starts a fetch; the fetch's address
        # and length wait in `nf_addr` / `nf_beats`, set ahead of it:
        #   IDLE and `start`:             the header (from `image_addr`, `busy` is low only in IDLE);
        #   HEADER_CHECK, no bad header:  the CRC read (from `img`, `w_off` beats);
        #   CRC_CHECK, CRC good, NEXT:    a layer record (`rec_base` plus the layer's offset,
        #                                 kept with the layer index).
        at_hcheck, at_ccheck, at_next = Signal(), Signal(), Signal()
        nf_addr = Signal(ab)
        nf_beats = Signal(32)
        m.d.sync += [at_hcheck.eq(0), at_ccheck.eq(0), at_next.eq(0)]
        m.d.comb += [
            f_start.eq((self.start & ~self.busy) | (at_hcheck & ~bad_any) |
                       (at_ccheck & ~crc_bad) | at_next),
            f_addr_in.eq(Mux(self.busy, nf_addr, self.image_addr)),
            f_beats_in.eq(Mux(self.busy, nf_beats, hdr_beats)),
        ]

        def fetch_record():                 # (the fetch itself starts from `at_*`, above)
            m.d.sync += [to_hdr.eq(0), to_rec.eq(1), to_crc.eq(0), in_record.eq(1)]
            m.next = "RECORD"

        def next_layer(first):
            """Move to the next layer (the first one if ``first``) and its record's fetch."""
            if first:
                m.d.sync += [layer.eq(0), nf_addr.eq(rec_base)]
            else:
                m.d.sync += [layer.eq(layer + 1), nf_addr.eq(nf_addr + LAYER_RECORD_BYTES)]
            m.d.sync += at_next.eq(1)
            m.next = "NEXT"

        # The sequencer's start: RECORD's fetch done, from a flag set on entering RECORD (the
        # FSM's state decode -> the sequencer's start -> its counters' clear was a 10.8 ns path
        # of the whole 8x8, session 19, ~170 endpoints)
        in_record = Signal()
        seq_go = Signal()
        m.d.comb += [seq_go.eq(in_record & ~fetching),
                     self.seq_start.eq(seq_go), self.seq_dry.eq(seq_go & ~run_pass)]

        # `layer + 1 == count`, a register: read in LAYER and STATS, at least three cycles after
        # `layer` or `count` last changed (the 32-bit compare into `layer`'s select was a
        # 11.2 ns path of the whole 8x8, 46 endpoints, session 22), as an equality with
        # `count - 1` (a register of its own; its 33 bits never equal `layer` when the count is
        # 0): `layer + 1 == count` was a carry chain (9.50 ns, session 24)
        layer_last = Signal()
        count_m1 = Signal(33)
        m.d.sync += [count_m1.eq(count - 1), layer_last.eq(layer == count_m1)]

        # `busy_next` from flip-flops: IDLE is `~busy`, FINISH is `at_finish` (set with every
        # move into FINISH, its one cycle), so no decode of the state sits in front of the
        # top's registered copies (fsm_state -> runner_port / any_busy: 10.4-10.7 ns, 7
        # endpoints of the whole 8x8 at 53bb396 seed 2, session 26)
        at_finish = Signal()
        m.d.comb += self.busy_next.eq(Mux(self.busy, ~at_finish, self.start))
        m.d.sync += self.busy.eq(self.busy_next)
        m.d.sync += crc_restart.eq(0)

        def finish(code=None):
            """Move to FINISH (with error ``code``, where given)."""
            m.d.sync += at_finish.eq(1)
            if code is not None:
                m.d.sync += self.error.eq(code)
            m.next = "FINISH"
        with m.FSM():
            with m.State("IDLE"):
                with m.If(self.start):
                    m.d.sync += crc_restart.eq(1)
                    m.d.sync += [self.done.eq(0), self.error.eq(0),
                                 layer.eq(0), run_pass.eq(0), img.eq(self.image_addr),
                                 to_hdr.eq(1), to_rec.eq(0), to_crc.eq(0),
                                 nf_addr.eq(self.image_addr)]
                    m.d.sync += [c.eq(0) for c in ctr.values()]
                    m.next = "HEADER"
            with m.State("HEADER"):
                with m.If(~fetching):
                    m.next = "HEADER_SUM"
            with m.State("HEADER_SUM"):            # (the header checks' pipeline, above)
                m.next = "HEADER_CMP"
            with m.State("HEADER_CMP"):
                m.d.sync += [at_hcheck.eq(1), nf_beats.eq(w_off >> log2(bb))]
                m.next = "HEADER_CHECK"
            with m.State("HEADER_CHECK"):
                with m.If(bad_any):
                    finish(hdr_code)
                with m.Else():
                    m.d.sync += [to_hdr.eq(0), to_crc.eq(1),
                                 nf_addr.eq(rec_base), nf_beats.eq(RECORD_BEATS(cfg))]
                    m.next = "CRC"
            with m.State("CRC"):
                with m.If(~fetching):
                    m.d.sync += at_ccheck.eq(1)
                    m.next = "CRC_CHECK"
            with m.State("CRC_CHECK"):             # the compare, registered in CRC's last cycle
                with m.If(crc_bad):
                    finish(ErrorCode.BAD_CRC)
                with m.Else():
                    fetch_record()
            with m.State("RECORD"):
                with m.If(~fetching):
                    m.d.sync += in_record.eq(0)
                    m.next = "LAYER"
            with m.State("LAYER"):
                with m.If(~self.seq_busy):
                    with m.If(self.seq_failed):
                        finish(self.seq_error)
                    with m.Elif(run_pass & self.seq_a_bad):
                        finish(ErrorCode.BAD_WEIGHTS)
                    with m.Elif(run_pass):
                        m.d.sync += [st_active.eq(1), st_issue.eq(0), st_ack.eq(0),
                                     stats_addr.eq(self.stats_addr)]
                        m.next = "STATS"
                    with m.Elif(layer_last):
                        m.d.sync += run_pass.eq(1)
                        next_layer(first=True)
                    with m.Else():
                        next_layer(first=False)
            with m.State("STATS"):
                with m.If(st_ack == st_beats):
                    m.d.sync += st_active.eq(0)
                    with m.If(layer_last):
                        finish()
                    with m.Else():
                        next_layer(first=False)
            with m.State("NEXT"):
                fetch_record()
            with m.State("FINISH"):
                m.d.sync += [self.done.eq(1), at_finish.eq(0)]
                m.next = "IDLE"
        return m
