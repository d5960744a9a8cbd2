"""Simulated cycles per second of ``AccelTop`` in Amaranth's Python simulator.

The cocotb runs (Verilator, Icarus) simulate ``sim_top``, whose memory model is the Verilog
``tessera_dram`` (``tb/hdl/dram_model.sv``), which Amaranth's simulator cannot run. Here the
three memory ports are answered by Python processes instead: every request is accepted at once
and its data (a fixed non-zero pattern) returned on the next cycle; each store is acknowledged on
the next cycle. The accelerator runs a planner-tiled GEMM descriptor written through the CSR bus
(as ``tb.harness`` does) for at most ``max_cycles`` cycles, and the rate is the cycles simulated
divided by the wall time of that run (elaboration and simulator set-up excluded). The results are
not checked: this measures the simulator, not the arithmetic.
"""

from __future__ import annotations

import time

from amaranth.sim import Simulator

import planner
from hw.top import AccelTop
from planner.shapes import GemmShape
from planner.tiling import TILING_FIELDS
from spec.config import PRESETS
from spec.layouts import LAYER_WORDS
from spec.record import layer_record
from spec.regmap import CTRL_BITS, REG, record_register
from tb.placement import descriptor, place

__all__ = ["measure_amaranth"]


def measure_amaranth(preset: str, gemm: str, max_cycles: int) -> dict:
    """Run ``gemm`` ("MxKxN") on ``preset`` for at most ``max_cycles``; return the rate."""


    cfg = PRESETS[preset]
    m, k, n = (int(x) for x in gemm.lower().split("x"))
    plan = planner.plan_gemm(GemmShape(m, k, n), cfg)
    tiling = {name: getattr(plan, name) for name in TILING_FIELDS}
    rec = layer_record(descriptor(m, k, n, tiling, place(m, k, n, cfg), cfg))
    writes = [(REG[record_register(name)].offset, rec[name]) for name in LAYER_WORDS]
    writes.append((REG["CTRL"].offset, 1 << CTRL_BITS["START"]))

    dut = AccelTop(cfg)
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    result = {}

    def responder(port, pattern):
        async def process(ctx):
            ctx.set(port.ready, 1)
            pending = False
            async for clk_edge, rst, valid in ctx.tick().sample(port.valid):
                ctx.set(port.rvalid, pending)
                if pending:
                    ctx.set(port.rdata, pattern)
                pending = bool(valid)
        return process

    async def store(ctx):
        ctx.set(dut.c_wr.ready, 1)
        async for clk_edge, rst, valid in ctx.tick().sample(dut.c_wr.valid):
            ctx.set(dut.c_wr.bvalid, valid)

    async def bench(ctx):
        for addr, value in writes:
            ctx.set(dut.csr.addr, addr)
            ctx.set(dut.csr.wdata, value & 0xFFFF_FFFF)
            ctx.set(dut.csr.we, 1)
            await ctx.tick()
        ctx.set(dut.csr.we, 0)
        started = time.perf_counter()
        cycles = 0
        while cycles < max_cycles:
            await ctx.tick()
            cycles += 1
            if ctx.get(dut.done):
                break
        result["wall_s"] = time.perf_counter() - started
        result["cycles"] = cycles
        result["finished"] = bool(ctx.get(dut.done))

    a_bits = len(dut.a_rd.rdata)
    b_bits = len(dut.b_rd.rdata)
    sim.add_process(responder(dut.a_rd, int("5a" * (a_bits // 8), 16)))
    sim.add_process(responder(dut.b_rd, int("3c" * (b_bits // 8), 16)))
    sim.add_process(store)
    sim.add_testbench(bench)
    sim.run()
    return {"simulator": "amaranth", "preset": preset,
            "array": f"{cfg.array_rows}x{cfg.array_cols}", "gemm": gemm,
            "total_cycles": result["cycles"], "run_wall_s": round(result["wall_s"], 3),
            "cycles_per_s": round(result["cycles"] / result["wall_s"]),
            "finished": result["finished"], "build_s": None}
