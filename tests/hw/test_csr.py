"""The register block's read latency is exactly spec.regmap.CSR_READ_LATENCY clock edges
(Amaranth simulation of the tiny AccelTop)."""

from amaranth.sim import Simulator

from hw.top import AccelTop
from spec.config import PRESETS
from spec.regmap import CSR_READ_LATENCY, REG


def test_csr_read_latency_is_the_regmap_constant():
    cfg = PRESETS["tiny"]
    top = AccelTop(cfg)
    seen = []

    async def bench(ctx):
        ctx.set(top.csr.addr, REG["STATUS"].offset)
        for _ in range(CSR_READ_LATENCY + 1):
            await ctx.tick()
        assert ctx.get(top.csr.rdata) == 0                  # idle: not busy, not done
        ctx.set(top.csr.addr, REG["CONFIG_ID"].offset)
        for _ in range(CSR_READ_LATENCY + 1):
            seen.append(ctx.get(top.csr.rdata))
            await ctx.tick()

    sim = Simulator(top)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    # the address changed before edge 0: rdata shows it from edge CSR_READ_LATENCY on
    assert seen[:CSR_READ_LATENCY] == [0] * CSR_READ_LATENCY
    assert seen[CSR_READ_LATENCY] == cfg.config_id
