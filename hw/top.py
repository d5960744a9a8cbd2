"""AccelTop: the synthesizable accelerator (sequencer, engines, buffers, registers)."""

from amaranth import *
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .config import AccelConfig
from .desc import DESC_FIELDS
from .ports import CsrBus, ReadPort, WritePort
from .regmap import COUNTERS, CSR_ADDR_BITS, CTRL_BITS, REG, STATUS_BITS
from .sequencer import Sequencer

__all__ = ["AccelTop"]


class AccelTop(wiring.Component):
    """The accelerator: a register block in front of the :class:`~hw.sequencer.Sequencer`.

    The host writes the descriptor registers, writes 1 to ``CTRL`` and waits for ``done`` (also
    a top-level output, for an interrupt line) or polls ``STATUS``. Descriptor registers may be
    rewritten while a run is busy: the sequencer latched them at start. A start while busy is
    ignored. Register offsets come from :data:`hw.regmap.REGISTERS`.

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
        m.submodules.seq = seq = Sequencer(self._cfg)
        wiring.connect(m, wiring.flipped(self.a_rd), seq.a_rd)
        wiring.connect(m, wiring.flipped(self.b_rd), seq.b_rd)
        wiring.connect(m, wiring.flipped(self.c_wr), seq.c_wr)
        m.d.comb += [self.busy.eq(seq.busy), self.done.eq(seq.done)]

        status = Signal(32)
        m.d.comb += [status[STATUS_BITS["BUSY"]].eq(seq.busy),
                     status[STATUS_BITS["DONE"]].eq(seq.done)]
        readable = {
            REG["STATUS"].offset: status,
            REG["ERROR"].offset: seq.error,
            REG["CONFIG_ID"].offset: Const(self._cfg.config_id, 32),
        }
        for name in DESC_FIELDS:
            reg = Signal(32, name=f"desc_{name}")
            offset = REG[f"DESC_{name.upper()}"].offset
            m.d.comb += getattr(seq, f"d_{name}").eq(reg)
            with m.If(self.csr.we & (self.csr.addr == offset)):
                m.d.sync += reg.eq(self.csr.wdata)
            readable[offset] = reg
        for name in COUNTERS:
            readable[REG[f"PERF_{name.upper()}"].offset] = getattr(seq, f"c_{name}")
        m.d.comb += seq.start.eq(self.csr.we & (self.csr.addr == REG["CTRL"].offset) &
                                 self.csr.wdata[CTRL_BITS["START"]])

        with m.Switch(self.csr.addr):
            for offset, value in readable.items():
                with m.Case(offset):
                    m.d.sync += self.csr.rdata.eq(value)
            with m.Default():
                m.d.sync += self.csr.rdata.eq(0)
        return m
