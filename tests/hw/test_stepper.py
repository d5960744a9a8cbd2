"""StepWalker (Amaranth simulator) walks the same steps as spec.schedule.steps, with the same
pointers, for random legal tilings of ragged shapes in both loop orders."""

import dataclasses

import numpy as np
import pytest
from amaranth.sim import Simulator

from hw.stepper import StepWalker
from spec.config import PRESETS
from spec.schedule import steps
from tb.placement import descriptor, place, random_tiling


def c_nstep(d):
    """Any step of the C pointer per n partition (a row pitch with the row store)."""
    return 3 * d.partition_n + 7


@pytest.mark.parametrize("preset", ["tiny", "small", "tiny+row_store"])
def test_walker_follows_the_schedule(preset):
    """The walk, its extents and pointers; with the row store also ``c_nptr``, the step's n
    partition times ``c_nstep``."""
    cfg = PRESETS[preset.split("+")[0]]
    if preset.endswith("+row_store"):
        cfg = dataclasses.replace(cfg, row_store=1)
    R, C, ab = cfg.array_rows, cfg.array_cols, cfg.dram_addr_bits
    rng = np.random.default_rng(3)
    cases = []
    for _ in range(12):
        m, k, n = (int(x) for x in rng.integers(1, 6 * R, 3))
        d = descriptor(m, k, n, random_tiling(m, k, n, cfg, rng), place(m, k, n, cfg, rng=rng),
                       cfg)
        cases.append(d)
    dut = StepWalker(cfg)
    walks = []

    async def bench(ctx):
        for d in cases:
            pm, pn, pk = d.partition_m, d.partition_n, d.partition_k
            a_kstep = pk * d.a_stride
            b_kstep = pk * d.b_stride
            c_mstep = pm * d.c_stride
            for port, v in ((dut.m, d.m), (dut.n, d.n), (dut.k, d.k), (dut.pm, pm),
                            (dut.pn, pn), (dut.pk, pk), (dut.pmg, pm // R), (dut.png, pn // C),
                            (dut.gm_all, -(-d.m // R)), (dut.gn_all, -(-d.n // C)),
                            (dut.outer_m, d.outer_m), (dut.a_addr, d.a_addr),
                            (dut.b_addr, d.b_addr), (dut.c_addr, d.c_addr),
                            (dut.a_kstep, a_kstep % (1 << ab)), (dut.b_kstep, b_kstep % (1 << ab)),
                            (dut.c_mstep, c_mstep % (1 << ab))):
                ctx.set(port, v)
            if cfg.row_store:
                ctx.set(dut.c_nstep, c_nstep(d))
            ctx.set(dut.restart, 1)         # next: the first step, a cycle later
            await ctx.tick().repeat(StepWalker.first_latency + 1)
            step = ctx.get(dut.first)
            assert ctx.get(dut.next) == step
            ctx.set(dut.restart, 0)
            walk = []
            for _ in range(10_000):
                ctx.set(dut.step, step)
                await ctx.tick().repeat(StepWalker.next_latency)
                walk.append({name: int(getattr(step, name)) for name in
                             ("m0", "n0", "k0", "ml", "nl", "kl", "gml", "gnl", "me", "ne",
                              "ke", "gme", "gne", "a_kptr", "b_kptr", "c_mptr", "a_same",
                              "b_same", *(["c_nptr"] if cfg.row_store else []))})
                if ctx.get(dut.last):
                    break
                step = ctx.get(dut.next)
            walks.append(walk)

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    for d, walk in zip(cases, walks):
        pm, pn, pk = d.partition_m, d.partition_n, d.partition_k
        want = list(steps(d, cfg))
        assert [(w["m0"], w["n0"], w["k0"]) for w in walk] == [(s.m0, s.n0, s.k0) for s in want]
        # a_same / b_same: the step's A block (m0, k0) / B block (n0, k0) is the previous one's
        prev = [None] + walk[:-1]
        assert [w["a_same"] for w in walk] == [
            int(p is not None and (p["m0"], p["k0"]) == (w["m0"], w["k0"])) for p, w in
            zip(prev, walk)]
        assert [w["b_same"] for w in walk] == [
            int(p is not None and (p["n0"], p["k0"]) == (w["n0"], w["k0"])) for p, w in
            zip(prev, walk)]
        for w in walk:
            assert (w["ml"], w["nl"], w["kl"]) == (d.m - w["m0"], d.n - w["n0"], d.k - w["k0"])
            assert (w["gml"], w["gnl"]) == (-(-w["ml"] // R), -(-w["nl"] // C))
            # the partition's own extent, cut by the matrix's edge
            me, ne, ke = min(w["ml"], pm), min(w["nl"], pn), min(w["kl"], pk)
            assert (w["me"], w["ne"], w["ke"]) == (me, ne, ke)
            assert (w["gme"], w["gne"]) == (-(-me // R), -(-ne // C))
            assert w["a_kptr"] == (d.a_addr + w["k0"] * d.a_stride) % (1 << ab)
            assert w["b_kptr"] == (d.b_addr + w["k0"] * d.b_stride) % (1 << ab)
            assert w["c_mptr"] == (d.c_addr + w["m0"] * d.c_stride) % (1 << ab)
            if cfg.row_store:
                assert w["c_nptr"] == (w["n0"] // pn * c_nstep(d)) % (1 << ab)
