"""The register block's read latency is exactly spec.regmap.CSR_READ_LATENCY clock edges
(Amaranth simulation of the tiny AccelTop)."""

from hw.top import AccelTop
from spec.config import PRESETS
from spec.regmap import CSR_READ_LATENCY, CSR_WRITE_LATENCY, REG

from .util import run_sim


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

    run_sim(top, bench)
    # the address changed before edge 0: rdata shows it from edge CSR_READ_LATENCY on
    assert seen[:CSR_READ_LATENCY] == [0] * CSR_READ_LATENCY
    assert seen[CSR_READ_LATENCY] == cfg.config_id


def test_csr_write_latency_is_the_regmap_constant():
    """A write taken at edge 1 is in its register from edge 1 + CSR_WRITE_LATENCY on, so a read of
    it (address held since before) shows it CSR_READ_LATENCY - 1 edges after that."""
    cfg = PRESETS["tiny"]
    top = AccelTop(cfg)
    seen = []
    value = 0x1234_5678

    async def bench(ctx):
        ctx.set(top.csr.addr, REG["IMAGE_ADDR"].offset)
        for _ in range(CSR_READ_LATENCY + 1):
            await ctx.tick()
        assert ctx.get(top.csr.rdata) == 0
        ctx.set(top.csr.wdata, value)
        ctx.set(top.csr.we, 1)
        await ctx.tick()                                    # edge 1 takes the write
        ctx.set(top.csr.we, 0)
        ctx.set(top.csr.wdata, 0)
        seen.append(ctx.get(top.csr.rdata))                 # after edge 1
        for _ in range(CSR_WRITE_LATENCY + CSR_READ_LATENCY + 2):
            await ctx.tick()
            seen.append(ctx.get(top.csr.rdata))

    run_sim(top, bench)
    first = CSR_WRITE_LATENCY + CSR_READ_LATENCY           # the first edge showing the value
    assert seen[:first - 1] == [0] * (first - 1)
    assert seen[first - 1:] == [value] * (len(seen) - first + 1)


def test_csr_reads_every_register_back_to_back():
    """Every readable register, read with a new address in every cycle, shows its own value
    CSR_READ_LATENCY edges later: the writable ones hold distinct values written before, the
    rest their idle values (a select decoded for the wrong offset, or a group's terms mixed up,
    shows another register's value)."""
    cfg = PRESETS["tiny"]
    top = AccelTop(cfg)
    mask = (1 << 32) - 1
    written = {r.offset: (0x9E37_79B9 * (r.offset + 1)) & mask
               for r in REG.values() if r.access == "rw"}
    readable = [r for r in REG.values() if "r" in r.access]
    expect = {r.offset: written.get(r.offset, 0) for r in readable}
    expect[REG["CONFIG_ID"].offset] = cfg.config_id
    seen = []

    async def bench(ctx):
        for offset, value in written.items():
            ctx.set(top.csr.addr, offset)
            ctx.set(top.csr.wdata, value)
            ctx.set(top.csr.we, 1)
            await ctx.tick()
        ctx.set(top.csr.we, 0)
        for r in readable:
            ctx.set(top.csr.addr, r.offset)
            await ctx.tick()
            seen.append(ctx.get(top.csr.rdata))
        for _ in range(CSR_READ_LATENCY):
            await ctx.tick()
            seen.append(ctx.get(top.csr.rdata))

    run_sim(top, bench)
    # the read of readable[i] was taken at edge i (counted from 0): its value is seen after
    # edge i + CSR_READ_LATENCY - 1
    got = {r.offset: seen[i + CSR_READ_LATENCY - 1] for i, r in enumerate(readable)}
    assert got == expect
