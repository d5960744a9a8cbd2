"""AccelTop: the synthesizable accelerator (sequencer, engines, buffers, registers)."""

import functools
import operator

from amaranth import *
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from spec.config import AccelConfig
from spec.layouts import LAYER_WORDS
from spec.regmap import (COUNTERS, CSR_ADDR_BITS, CSR_READ_LATENCY, CSR_WRITE_LATENCY,
                         CTRL_BITS, REG, STATUS_BITS, record_register)

from .ports import CsrBus, ReadPort, WritePort
from .runner import ImageRunner
from .sequencer import CATEGORIES, Sequencer

__all__ = ["AccelTop", "RUNNER_READ_LATENCY"]

#: Cycles the image runner's read responses spend in the register between the B port and the
#: runner (``planner.cost.ModelConstants.runner_read_extra_cycles``).
RUNNER_READ_LATENCY = 1

#: Readable registers per CSR read group (the AND-OR of 8 x 32 bits with one-hot selects: two
#: LUT levels per bit).
_CSR_GROUP = 8


class AccelTop(wiring.Component):
    """The accelerator: a register block in front of the :class:`~hw.sequencer.Sequencer`.

    Two ways to run. *Register mode*: the host writes the layer record registers (``DESC_*``,
    ``LAYER_*``), writes ``CTRL.START`` and waits for ``done`` (also a top-level output, for an
    interrupt line) or polls ``STATUS``. *Image mode*: the host places a firmware image in
    memory, writes ``IMAGE_ADDR`` and ``CTRL.RUN_IMAGE``; the :class:`~hw.runner.ImageRunner`
    runs every layer. Register writes while busy are ignored (so is a start). Register offsets
    come from :data:`spec.regmap.REGISTERS`.

    Parameters
    ----------
    cfg : AccelConfig
        Every field; ``CONFIG_ID`` reads ``cfg.config_id``.

    Members
    -------
    csr : ``In(CsrBus.Signature)``
    a_rd, b_rd : ``Out(ReadPort.Signature)``; c_wr : ``Out(WritePort.Signature)``
    busy, done : ``Out(1)``
    """

    def __init__(self, cfg: AccelConfig):
        self._cfg = cfg
        ab = cfg.dram_addr_bits
        super().__init__({
            "csr": In(CsrBus.Signature(addr_bits=CSR_ADDR_BITS)),
            "a_rd": Out(ReadPort.Signature(addr_bits=ab, data_bytes=cfg.a_beat_bytes)),
            "b_rd": Out(ReadPort.Signature(addr_bits=ab, data_bytes=cfg.b_beat_bytes,
                                           strided=True)),
            "c_wr": Out(WritePort.Signature(addr_bits=ab, data_bytes=cfg.c_beat_bytes)),
            "busy": Out(1),
            "done": Out(1),
        })

    @property
    def cfg(self) -> AccelConfig:
        return self._cfg

    def elaborate(self, platform):
        m = Module()
        cfg = self._cfg
        m.submodules.seq = seq = Sequencer(cfg)
        m.submodules.runner = run = ImageRunner(cfg)
        image_mode = Signal()                        # the last run was an image run
        wiring.connect(m, wiring.flipped(self.a_rd), seq.a_rd)

        # The runner uses the B port while the sequencer is idle, and the C port for the
        # statistics records (also while the sequencer is idle). Who owns the ports, and
        # whether anything is busy (which stops CSR writes), are registers computed from the
        # blocks' busy_next, so each equals its combinational form in every cycle; on the ECP5
        # runner.busy -> port select / CSR write enable into ~1,000 flip-flops were 10.6-11.5
        # ns paths. Copies (keep) for the port multiplexers, the blocks' handshakes, the CSR
        # write enables.
        def flag(name, value, copies):
            regs = [Signal(name=f"{name}{i}", attrs={"keep": 1}) for i in range(copies)]
            m.d.sync += [r.eq(value) for r in regs]
            return regs
        # The C port's data select has a copy per 128 bits (one copy for all of it, with the
        # write port's other outputs, was a 10.9 ns path of the 8x8 in session 18).
        # The handshakes have a copy per side: one for the runner's, one for the sequencer's
        # B port (into load B and the gather: a 13.2 ns path of the whole 8x8 in session 21,
        # 11.8 ns of it routing, to buffer B's write enables), one for its C port.
        chunks = range(0, len(self.c_wr.data), 128)
        port_mux, run_hs, seq_b_hs, seq_c_hs, *port_data = flag(
            "runner_port", run.busy_next & ~seq.busy_next, 4 + len(chunks))
        # (the starts' own copy: with the record registers' write enables, spread over the
        # chip, any_busy -> CTRL's start -> busy_next -> runner_port was a 10.7 ns path of the
        # whole 8x8 at 598b87c)
        busy_csr, busy_out, busy_start = flag("any_busy", run.busy_next | seq.busy_next, 3)
        with m.If(port_mux):
            m.d.comb += [
                self.b_rd.addr.eq(run.rd.addr), self.b_rd.valid.eq(run.rd.valid),
                self.b_rd.stride.eq(run.rd.stride),
                self.c_wr.addr.eq(run.wr.addr), self.c_wr.valid.eq(run.wr.valid),
                self.c_wr.strb.eq(run.wr.strb),
            ]
        with m.Else():
            m.d.comb += [
                self.b_rd.addr.eq(seq.b_rd.addr), self.b_rd.valid.eq(seq.b_rd.valid),
                self.b_rd.stride.eq(seq.b_rd.stride),
                self.c_wr.addr.eq(seq.c_wr.addr), self.c_wr.valid.eq(seq.c_wr.valid),
                self.c_wr.strb.eq(seq.c_wr.strb),
            ]
        for sel, lo in zip(port_data, chunks):
            part = slice(lo, lo + 128)
            m.d.comb += self.c_wr.data[part].eq(
                Mux(sel, run.wr.data[part], seq.c_wr.data[part]))
        # The runner's read responses pass a register (RUNNER_READ_LATENCY): the B port's
        # rvalid straight into the runner's fetch counters and record-beat one-hot was the whole
        # 8x8's worst path in session 17 (11.75 ns, 9.6 ns of it routing, 158 endpoints).
        # The image CRC's data network sits in front of that register instead of behind it:
        # registers of their own take the beat's CRC terms (ImageRunner.crc_terms, `keep`).
        # The network behind a data register (a copy of its own since session 22) was a 10.9 ns
        # path of the whole 8x8 at 598b87c (hw/crc.py: CrcState).
        run_rdata = Signal.like(self.b_rd.rdata, name="runner_rdata", reset_less=True)
        crc_term, crc_word_term = (Signal.like(run.crc_term, name=n, reset_less=True,
                                               attrs={"keep": 1})
                                   for n in ("runner_crc_term", "runner_crc_word_term"))
        run_rvalid = Signal(name="runner_rvalid")
        terms = ImageRunner.crc_terms(self.b_rd.rdata)
        m.d.sync += [run_rdata.eq(self.b_rd.rdata), crc_term.eq(terms[0]),
                     crc_word_term.eq(terms[1]), run_rvalid.eq(self.b_rd.rvalid & run_hs)]
        m.d.comb += [
            run.rd.ready.eq(self.b_rd.ready & run_hs), run.rd.rdata.eq(run_rdata),
            run.crc_term.eq(crc_term), run.crc_word_term.eq(crc_word_term),
            run.rd.rvalid.eq(run_rvalid),
            seq.b_rd.ready.eq(self.b_rd.ready & ~seq_b_hs),
            seq.b_rd.rdata.eq(self.b_rd.rdata),
            seq.b_rd.rvalid.eq(self.b_rd.rvalid & ~seq_b_hs),
            run.wr.ready.eq(self.c_wr.ready & run_hs),
            run.wr.bvalid.eq(self.c_wr.bvalid & run_hs),
            seq.c_wr.ready.eq(self.c_wr.ready & ~seq_c_hs),
            seq.c_wr.bvalid.eq(self.c_wr.bvalid & ~seq_c_hs),
            run.a_fire.eq(self.a_rd.valid & self.a_rd.ready),
            run.b_fire.eq(self.b_rd.valid & self.b_rd.ready),
            run.c_fire.eq(self.c_wr.valid & self.c_wr.ready),
            run.seq_busy.eq(seq.busy), run.seq_error.eq(seq.error),
            run.seq_failed.eq(seq.failed),
            seq.dry.eq(run.seq_dry), seq.img_lo.eq(run.img_lo), seq.img_hi.eq(run.img_hi),
            seq.img_wt.eq(run.img_wt), run.seq_a_bad.eq(seq.a_bad),
        ]
        for name in COUNTERS:
            m.d.comb += getattr(run, f"s_{name}").eq(getattr(seq, f"c_{name}"))
        for name in CATEGORIES:
            m.d.comb += getattr(run, f"s_cat_{name}").eq(getattr(seq, f"cat_{name}"))

        busy = busy_out
        done = Mux(image_mode, run.done, seq.done)
        m.d.comb += [self.busy.eq(busy), self.done.eq(done)]
        status = Signal(32)
        m.d.comb += [status[STATUS_BITS["BUSY"]].eq(busy),
                     status[STATUS_BITS["DONE"]].eq(done),
                     status[STATUS_BITS["IMAGE"]].eq(image_mode)]
        image_addr = Signal(32)
        readable = {
            REG["STATUS"].offset: status,
            REG["ERROR"].offset: Mux(image_mode, run.error, seq.error),
            REG["CONFIG_ID"].offset: Const(cfg.config_id, 32),
            REG["IMAGE_ADDR"].offset: image_addr,
            REG["LAYER_INDEX"].offset: run.layer_index,
        }
        # CSR writes take effect CSR_WRITE_LATENCY = 1 edge late: the bus's write, decoded
        # into one strobe per writable register, and its data are registered here first. The
        # bus inputs -> address compare -> start -> every counter's reset was a 11.1 ns path of
        # the whole 8x8 (session 18, 170 endpoints); now it starts at a strobe register.
        assert CSR_WRITE_LATENCY == 1
        wdata = Signal(32, name="csr_wdata_r", reset_less=True)
        m.d.sync += wdata.eq(self.csr.wdata)

        def written(offset, bit=None, clear=None, busy_now=busy_csr):
            """The bus wrote ``offset`` one edge ago (with data bit ``bit`` set and ``clear``
            clear, where given), and nothing is busy now (``busy_now``, a copy of any_busy:
            writes while busy are ignored)."""
            hit = self.csr.we & (self.csr.addr == offset)
            if bit is not None:
                hit &= self.csr.wdata[bit]
            if clear is not None:
                hit &= ~self.csr.wdata[clear]
            strobe = Signal(name=f"csr_we_{offset}" + ("" if bit is None else f"_{bit}"))
            m.d.sync += strobe.eq(hit)
            return strobe & ~busy_now
        with m.If(written(REG["IMAGE_ADDR"].offset)):
            m.d.sync += image_addr.eq(wdata)
        m.d.comb += run.image_addr.eq(image_addr)

        # The layer record registers: written by the host between runs, or by the runner's
        # record fetch (one B beat of words at a time) during an image run.
        wpb = cfg.b_beat_bytes // 4
        for name, word in LAYER_WORDS.items():
            reg = Signal(32, name=f"rec_{name}")
            offset = REG[record_register(name)].offset
            host_write = written(offset)
            with m.If(run.rec_we & run.rec_sel[word // wpb]):
                lane = word % wpb
                m.d.sync += reg.eq(run.rec_data[32 * lane:32 * (lane + 1)])
            with m.Elif(host_write):
                m.d.sync += reg.eq(wdata)
            readable[offset] = reg
            if name.startswith("desc_"):
                m.d.comb += getattr(seq, f"d_{name[len('desc_'):]}").eq(reg)
            else:
                m.d.comb += getattr(seq, f"l_{name}").eq(reg)
            if name == "stats_addr":
                m.d.comb += run.stats_addr.eq(reg)
        for name in COUNTERS:
            readable[REG[f"PERF_{name.upper()}"].offset] = Mux(
                image_mode, getattr(run, f"c_{name}"), getattr(seq, f"c_{name}"))

        ctrl = REG["CTRL"].offset
        start_layer = written(ctrl, bit=CTRL_BITS["START"], busy_now=busy_start)
        start_image = written(ctrl, bit=CTRL_BITS["RUN_IMAGE"], clear=CTRL_BITS["START"],
                              busy_now=busy_start)
        m.d.comb += [seq.start.eq(start_layer | run.seq_start), run.start.eq(start_image)]
        with m.If(start_layer):
            m.d.sync += image_mode.eq(0)
        with m.If(start_image):
            m.d.sync += image_mode.eq(1)

        # CSR reads in CSR_READ_LATENCY = 3 registered stages: the address decoded into one
        # select flip-flop per readable register; per group of registers (in offset order) the
        # AND-OR of the group's values with their selects; the OR of the groups. (Until session
        # 23 the first stage registered the address and the second compared it: the compare and
        # the value multiplexer, 6 LUTs deep between registers spread over the chip, was the
        # 11.2 ns worst path of the whole 8x8 at 598b87c.)
        assert CSR_READ_LATENCY == 3
        items = sorted(readable.items())
        parts = []
        for g in range(0, len(items), _CSR_GROUP):
            part = Signal(32, name=f"csr_part{g // _CSR_GROUP}")
            terms = []
            for offset, value in items[g:g + _CSR_GROUP]:
                sel = Signal(name=f"csr_sel_{offset:#x}")
                m.d.sync += sel.eq(self.csr.addr == offset)
                terms.append(Mux(sel, value, 0))
            m.d.sync += part.eq(functools.reduce(operator.or_, terms))
            parts.append(part)
        m.d.sync += self.csr.rdata.eq(functools.reduce(operator.or_, parts))
        return m
