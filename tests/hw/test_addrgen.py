"""AddrGen alone (Amaranth simulator, Python memory): tables load, then a gather writes exactly the
buffer rows and lanes the runs describe."""

import numpy as np
import pytest
from amaranth.sim import Simulator

from hw.addrgen import AddrGen
from spec.config import PRESETS
from planner.offsets import base_offsets, compile_tables
from planner.shapes import ConvShape

OFF, RUN, GRP, XB, MEM = 1024, 2048, 3072, 4096, 8192


def simulate(cfg, tables, x_img, *, rows, g0, gn, k0=0, buf_base=100, gstride=7, latency=5,
             timing=None):
    """Tables load, then one gather; ``timing`` (a dict) receives the gather's busy cycles.

    The port is the memory model's credit limiter (tb/hdl/dram_model.sv): ``b_port_bytes_per_cycle``
    of credit per cycle while the credit is below the presented request's cost, a request
    accepted when its cost is there."""
    img = tables.to_bytes()
    mem = bytearray(MEM)
    mem[XB:XB + len(x_img)] = x_img
    for addr, blob in ((OFF, img["off"]), (RUN, img["run"]), (GRP, img["grp"])):
        mem[addr:addr + len(blob)] = blob
    dut = AddrGen(cfg)
    C = cfg.array_cols
    buf = {}

    async def bench(ctx):
        ctx.set(dut.p_off_addr, OFF)
        ctx.set(dut.p_run_addr, RUN)
        ctx.set(dut.p_grp_addr, GRP)
        ctx.set(dut.p_k, tables.k)
        ctx.set(dut.p_runs, tables.run_count)
        ctx.set(dut.p_groups, len(tables.groups))
        ctx.set(dut.p_b_addr, XB)           # sampled with the tables (added to the offsets)
        beat, bpc = cfg.b_beat_bytes, cfg.b_port_bytes_per_cycle
        credit = beat
        pending = []
        for phase in ("tables", "gather"):
            if phase == "tables":
                ctx.set(dut.tables_start, 1)
            else:
                for port, value in ((dut.p_b_addr, 0), (dut.p_k0, k0), (dut.p_rows, rows),
                                    (dut.p_g0, g0), (dut.p_gn, gn), (dut.p_buf_base, buf_base),
                                    (dut.p_buf_gstride, gstride)):
                    ctx.set(port, value)
                ctx.set(dut.gather_start, 1)
            await ctx.tick()
            ctx.set(dut.tables_start, 0)
            ctx.set(dut.gather_start, 0)
            busy = dut.tables_busy if phase == "tables" else dut.gather_busy
            busy_cycles = 0
            for cycle in range(2000):
                stride = max(1, ctx.get(dut.mem.stride))
                need = min(-(-((C - 1) * stride + 1) // beat), C) * beat
                ctx.set(dut.mem.ready, credit >= need)
                take = ctx.get(dut.mem.valid) and credit >= need
                if pending and pending[0][0] == cycle:
                    ctx.set(dut.mem.rvalid, 1)
                    ctx.set(dut.mem.rdata, pending.pop(0)[1])
                else:
                    ctx.set(dut.mem.rvalid, 0)
                if take:
                    addr = ctx.get(dut.mem.addr)
                    data = bytes(mem[(addr + i * stride) % MEM] for i in range(C))
                    pending.append((cycle + latency, int.from_bytes(data, "little")))
                en = ctx.get(dut.w_en)
                if en:
                    row = buf.setdefault(ctx.get(dut.w_addr), [None] * C)
                    data = ctx.get(dut.w_data)
                    for lane in range(C):
                        if en >> lane & 1:
                            assert row[lane] is None, "lane written twice"
                            row[lane] = (data >> (8 * lane)) & 0xFF
                if take:
                    credit += bpc - need
                elif credit < need:
                    credit += bpc
                if not ctx.get(busy) and not pending:
                    break
                busy_cycles += 1
                await ctx.tick()
            else:
                raise AssertionError(f"{phase} did not finish")
            if timing is not None:
                timing[phase] = busy_cycles

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    return buf


@pytest.mark.parametrize("layout, latency", [("NCHW", 5), ("NHWC", 5), ("NCHW", 1),
                                             ("NCHW", 2)])
def test_addrgen_gathers_the_blocks_the_tables_describe(layout, latency):
    """Buffer B's rows and lanes as the tables say; with port latencies 1 (the response queue
    unbuffered) and 2 or more (buffered: its entry readable two cycles after the request)."""
    import dataclasses

    cfg = dataclasses.replace(PRESETS["tiny"], b_port_latency_cycles=latency)
    C = cfg.array_cols
    # 3x3 stride 2, pads, 7 output columns: runs cross rows and some groups need 2-3 runs
    shape = ConvShape(batch=1, in_channels=2, height=7, width=13, out_channels=1, kernel_h=3,
                      kernel_w=3, stride_h=2, stride_w=2, pad_top=1, pad_left=1, pad_bottom=0,
                      pad_right=2)
    tables = compile_tables(shape, layout, cfg)
    rng = np.random.default_rng(0)
    x_img = rng.integers(1, 256, size=1000, dtype=np.uint8).tobytes()
    g0, gn, k0, rows, gstride, buf_base = 1, 3, 2, 5, 7, 100
    buf = simulate(cfg, tables, x_img, rows=rows, g0=g0, gn=gn, k0=k0, gstride=gstride,
                   buf_base=buf_base, latency=latency)
    base = [int(b) for b in base_offsets(shape, layout)]
    off = [int(o) for o in tables.offsets]
    n = len(base)
    expect = {}
    for g in range(gn):
        for kk in range(rows):
            row = [None] * C
            for lane in range(C):
                pixel = (g0 + g) * C + lane
                if pixel < n:
                    row[lane] = x_img[base[pixel] + off[k0 + kk]]
            expect[buf_base + g * gstride + kk] = row
    assert buf == expect


@pytest.mark.parametrize("stride", [1, 2, 3])
@pytest.mark.parametrize("g0, gn, k0, rows", [(0, 1, 0, 1), (1, 3, 2, 5), (0, 4, 0, 9),
                                              (2, 0, 0, 3)])
def test_addrgen_gather_takes_the_modelled_cycles(stride, g0, gn, k0, rows):
    """A gather's busy cycles behind the memory model's credit limiter equal
    planner.convcost.gather_cycles exactly: no pause between taps, each request waits for the
    credit of its own span only (the port is shown stride 1 between requests)."""
    from planner.convcost import GATHER_EMPTY_CYCLES, gather_cycles, run_beats

    cfg = PRESETS["tiny"]
    shape = ConvShape(batch=1, in_channels=2, height=9, width=13, out_channels=1, kernel_h=3,
                      kernel_w=3, stride_h=stride, stride_w=stride, pad_top=1, pad_left=1,
                      pad_bottom=0, pad_right=2)
    tables = compile_tables(shape, "NCHW", cfg)
    timing = {}
    simulate(cfg, tables, bytes(1024), rows=rows, g0=g0, gn=gn, k0=k0, gstride=max(rows, 7),
             latency=cfg.b_port_latency_cycles, timing=timing)
    lo, hi = int(tables.groups[g0]), int(tables.groups[g0 + gn])
    beats = run_beats(tables.runs()["stride"], cfg)[lo:hi]
    assert timing["gather"] == gather_cycles(beats, rows, cfg)
    if gn == 0:
        assert timing["gather"] == GATHER_EMPTY_CYCLES
    elif stride > 1:
        assert beats.max() > 1          # strided runs cost more than a beat: the credit matters


@pytest.mark.parametrize("bpc", [1, 3])
def test_addrgen_gather_on_a_port_slower_than_a_beat(bpc):
    """With a B port that earns less than a beat per cycle, the credit left over from the
    table load can let a gather finish one cycle before the model says, never later (the
    model's documented bound)."""
    import dataclasses

    from planner.convcost import gather_cycles, run_beats

    cfg = dataclasses.replace(PRESETS["tiny"], b_port_bytes_per_cycle=bpc)
    for stride in (1, 2):
        shape = ConvShape(batch=1, in_channels=2, height=9, width=13, out_channels=1,
                          kernel_h=3, kernel_w=3, stride_h=stride, stride_w=stride, pad_top=1,
                          pad_left=1, pad_bottom=0, pad_right=2)
        tables = compile_tables(shape, "NCHW", cfg)
        for g0, gn, rows in ((0, 1, 1), (1, 3, 5)):
            timing = {}
            simulate(cfg, tables, bytes(1024), rows=rows, g0=g0, gn=gn, gstride=7,
                     latency=cfg.b_port_latency_cycles, timing=timing)
            lo, hi = int(tables.groups[g0]), int(tables.groups[g0 + gn])
            beats = run_beats(tables.runs()["stride"], cfg)[lo:hi]
            assert 0 <= gather_cycles(beats, rows, cfg) - timing["gather"] <= 1
