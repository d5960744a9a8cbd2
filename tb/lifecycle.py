"""cocotb tests: the accelerator's lifecycle. A start or register writes while busy are ignored,
counters can be read while a run is going (they only grow), reset in the middle of a run leaves
a device that runs the next job exactly, and int32 accumulation wraps modulo 2**32 at the
boundary (no saturation), as spec.golden.gemm_int8 does.

Python drives registers and the reset line and awaits edges of the HDL clock; it never steps the
clock.
"""

from __future__ import annotations

import cocotb
import numpy as np
from cocotb.triggers import ClockCycles, RisingEdge, with_timeout

from spec.desc import ErrorCode
from spec.golden import gemm_int8
from spec.record import layer_record
from spec.regmap import CTRL_BITS, REG, STATUS_BITS, record_register

from .cases import register_budget_cycles
from .harness import CLOCK_NS, Harness, a_image, b_image, c_from_bytes
from .placement import descriptor, place, random_tiling


async def _setup(h: Harness, m: int, k: int, n: int, rng, *, a=None, b=None):
    cfg = h.cfg
    a = rng.integers(-128, 128, (m, k)).astype(np.int8) if a is None else a
    b = rng.integers(-128, 128, (k, n)).astype(np.int8) if b is None else b
    where = place(m, k, n, cfg)
    d = descriptor(m, k, n, random_tiling(m, k, n, cfg, rng, splitk=True), where, cfg)
    await h.load([(where.a_addr, a_image(a, where.a_stride)),
                  (where.b_addr, b_image(b, where.b_stride)),
                  (where.c_addr, bytes(where.end - where.c_addr))])
    return d, where, gemm_int8(a, b)


async def _start(h: Harness, d):
    """Program ``d``'s whole record and start it, without waiting."""
    for name, word in layer_record(d).items():
        await h.csr_write(REG[record_register(name)].offset, word)
    await h.csr_write(REG["CTRL"].offset, 1 << CTRL_BITS["START"])


async def _start_job(dut, seed: int, m: int, k: int, n: int):
    """A fresh harness on ``dut`` running an ``m x k x n`` job of random data (not waited for):
    ``(harness, rng for later jobs, descriptor, placement, expected C)``."""
    h = await Harness.start(dut)
    rng = np.random.default_rng(seed)
    d, where, want = await _setup(h, m, k, n, rng)
    await _start(h, d)
    return h, rng, d, where, want


async def _result(h: Harness, d, where, m, n):
    raw = await h.dump(where.c_addr, (m - 1) * where.c_stride + 4 * n)
    return c_from_bytes(raw, m, n, where.c_stride)


@cocotb.test()
async def start_and_writes_while_busy_are_ignored(dut):
    m, k, n = 9, 300, 11
    h, _, d, where, want = await _start_job(dut, 11, m, k, n)
    await ClockCycles(dut.clk, 50)
    # mid-run: a second start, a run-image start and rewritten descriptor registers
    await h.csr_write(REG["CTRL"].offset, 1 << CTRL_BITS["START"])
    await h.csr_write(REG["CTRL"].offset, 1 << CTRL_BITS["RUN_IMAGE"])
    await h.csr_write(REG["DESC_M"].offset, 1)
    await h.csr_write(REG["DESC_C_ADDR"].offset, 0)
    assert await h.csr_read(REG["DESC_M"].offset) == m, "a register write while busy landed"
    await with_timeout(RisingEdge(dut.done), register_budget_cycles(d, h.cfg) * CLOCK_NS, "ns")
    await RisingEdge(dut.clk)
    status = await h.csr_read(REG["STATUS"].offset)
    assert status & (1 << STATUS_BITS["DONE"]) and not status & (1 << STATUS_BITS["BUSY"])
    assert not status & (1 << STATUS_BITS["IMAGE"])
    assert await h.csr_read(REG["ERROR"].offset) == ErrorCode.NONE
    assert np.array_equal(await _result(h, d, where, m, n), want)


@cocotb.test()
async def counters_read_while_running_only_grow(dut):
    m, k, n = 13, 700, 9
    h, _, d, where, want = await _start_job(dut, 12, m, k, n)
    seen = []
    while True:
        status = await h.csr_read(REG["STATUS"].offset)
        if not status & (1 << STATUS_BITS["BUSY"]):
            break
        seen.append((await h.csr_read(REG["PERF_TOTAL_CYCLES"].offset),
                     await h.csr_read(REG["PERF_MAC_ACTIVE_CYCLES"].offset)))
        assert len(seen) < 100_000, "run never finished"
    final = await h.csr_read(REG["PERF_TOTAL_CYCLES"].offset)
    assert len(seen) >= 3, "the run ended before the counters could be sampled"
    totals = [t for t, _ in seen]
    macs = [c for _, c in seen]
    # strictly growing while busy; the run may end between the status read and the counter
    # read of the last sample, so the final value is only no smaller than that sample
    assert totals == sorted(totals) and len(set(totals)) == len(totals), totals[:10]
    assert final >= totals[-1]
    assert macs == sorted(macs)
    assert np.array_equal(await _result(h, d, where, m, n), want)


@cocotb.test()
async def reset_mid_run_then_a_clean_run(dut):
    m, k, n = 10, 500, 14
    h, rng, *_ = await _start_job(dut, 13, m, k, n)
    await ClockCycles(dut.clk, 400)
    assert await h.csr_read(REG["STATUS"].offset) & (1 << STATUS_BITS["BUSY"])
    dut.rst.value = 1
    await ClockCycles(dut.clk, 3)
    dut.rst.value = 0
    await RisingEdge(dut.clk)
    assert await h.csr_read(REG["STATUS"].offset) == 0, "reset left the device busy or done"
    assert await h.csr_read(REG["CONFIG_ID"].offset) == h.cfg.config_id
    # a new job on fresh memory runs exactly, counters from zero
    d2, where2, want2 = await _setup(h, 7, 33, 5, rng)
    result = await h.run(d2, budget_cycles=register_budget_cycles(d2, h.cfg))
    assert result.error == ErrorCode.NONE
    assert np.array_equal(await _result(h, d2, where2, 7, 5), want2)
    assert result.counters["total_cycles"] == sum(
        v for name, v in result.counters.items()
        if name.endswith("_cycles") and name != "total_cycles")


@cocotb.skipif(cocotb.SIM_NAME.lower().startswith("icarus"),
               reason="2**17 reduction steps: Verilator only (about 100x slower on Icarus)")
@cocotb.test()
async def accumulator_wraps_at_int32(dut):
    """A = B = -128 everywhere: every product is 2**14, so k = 2**17 + 3 sums to
    2**31 + 3 * 2**14, past INT32_MAX: the accumulator wraps to a negative value, exactly as
    spec.golden.gemm_int8 says (and as int32 two's complement arithmetic does)."""
    h = await Harness.start(dut)
    rng = np.random.default_rng(14)
    m, n = 3, 2
    k = (1 << 17) + 3
    a = np.full((m, k), -128, np.int8)
    b = np.full((k, n), -128, np.int8)
    b[-4:, 1] = 0                        # column 1 sums to 2**31 - 2**14: just inside
    d, where, want = await _setup(h, m, k, n, rng, a=a, b=b)
    assert want[0, 0] == -(1 << 31) + 3 * (1 << 14)
    assert want[0, 1] == (1 << 31) - (1 << 14)
    result = await h.run(d, budget_cycles=register_budget_cycles(d, h.cfg))
    assert result.error == ErrorCode.NONE
    got = await _result(h, d, where, m, n)
    assert np.array_equal(got, want), (got, want)
    exact = a[0].astype(np.int64) @ b.astype(np.int64)
    assert exact[0] > np.iinfo(np.int32).max and got[0, 0] == exact[0] - (1 << 32)
    assert exact[1] <= np.iinfo(np.int32).max and got[0, 1] == exact[1]
