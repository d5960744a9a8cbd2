"""SimTop: AccelTop plus the HDL memory model and clock. Simulation only, never synthesized."""

from amaranth import *
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from spec.config import AccelConfig
from spec.regmap import CSR_ADDR_BITS

from ..ports import CsrBus
from ..top import AccelTop

__all__ = ["SimTop"]


class SimTop(wiring.Component):
    """:class:`~hw.top.AccelTop` wired to ``tessera_dram`` and ``tessera_clock`` (both in
    ``tb/hdl/dram_model.sv``).

    The clock is generated in HDL, so a testbench only loads memory (``dram_load``), writes
    registers, and waits for ``done``; it never steps the clock. Memory bandwidth and latency of
    every port come from the config.

    The memory model holds every ``dram_addr_bits`` up to 32: under Verilator it allocates only
    the pages written; under Icarus it is a dense array (``tb.tools.ICARUS_MAX_ADDR_BITS``).

    Members
    -------
    clk : ``Out(1)`` the generated clock (for the testbench to synchronise register writes)
    rst : ``In(1)`` synchronous, active high; it reaches the design (and the memory model) through
        a register, one edge later
    csr : ``In(CsrBus.Signature)``
    busy, done : ``Out(1)``
    dram_load, dram_dump : ``In(1)``; dram_dump_lo, dram_dump_hi : ``In(dram_addr_bits)``
    """

    def __init__(self, cfg: AccelConfig):
        self._cfg = cfg
        super().__init__({
            "clk": Out(1),
            "rst": In(1),
            "csr": In(CsrBus.Signature(addr_bits=CSR_ADDR_BITS)),
            "busy": Out(1),
            "done": Out(1),
            "dram_load": In(1),
            "dram_dump": In(1),
            "dram_dump_lo": In(cfg.dram_addr_bits),
            "dram_dump_hi": In(cfg.dram_addr_bits),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self._cfg
        m.domains.sync = cd = ClockDomain("sync")
        clk = Signal()
        m.submodules.clock = Instance("tessera_clock", o_clk=clk)
        # The reset reaches the design through a register: a top-level input that feeds logic
        # combinationally makes Verilator evaluate that logic on every eval, twice a cycle
        # (its "ico" region), and the reset feeds every register's next state.
        rst = Signal(init=1, reset_less=True)
        m.d.sync += rst.eq(self.rst)
        m.d.comb += [cd.clk.eq(clk), cd.rst.eq(rst), self.clk.eq(clk)]

        m.submodules.accel = top = AccelTop(cfg)
        wiring.connect(m, wiring.flipped(self.csr), top.csr)
        m.d.comb += [self.busy.eq(top.busy), self.done.eq(top.done)]
        m.submodules.dram = Instance(
            "tessera_dram",
            p_ADDR_BITS=cfg.dram_addr_bits,
            p_A_BYTES=cfg.a_beat_bytes, p_A_BPC=cfg.a_port_bytes_per_cycle,
            p_A_LAT=cfg.a_port_latency_cycles,
            p_B_BYTES=cfg.b_beat_bytes, p_B_BPC=cfg.b_port_bytes_per_cycle,
            p_B_LAT=cfg.b_port_latency_cycles,
            p_C_BYTES=cfg.c_beat_bytes, p_C_BPC=cfg.c_port_bytes_per_cycle,
            p_C_LAT=cfg.c_port_latency_cycles,
            i_clk=clk, i_rst=rst,
            i_a_addr=top.a_rd.addr, i_a_valid=top.a_rd.valid, o_a_ready=top.a_rd.ready,
            o_a_rdata=top.a_rd.rdata, o_a_rvalid=top.a_rd.rvalid,
            i_b_addr=top.b_rd.addr, i_b_stride=top.b_rd.stride, i_b_valid=top.b_rd.valid,
            o_b_ready=top.b_rd.ready,
            o_b_rdata=top.b_rd.rdata, o_b_rvalid=top.b_rd.rvalid,
            i_c_addr=top.c_wr.addr, i_c_data=top.c_wr.data, i_c_strb=top.c_wr.strb,
            i_c_valid=top.c_wr.valid, o_c_ready=top.c_wr.ready, o_c_bvalid=top.c_wr.bvalid,
            i_load=self.dram_load, i_dump=self.dram_dump,
            i_dump_lo=self.dram_dump_lo, i_dump_hi=self.dram_dump_hi,
        )
        return m
