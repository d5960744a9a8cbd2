"""PerfCounters (Amaranth simulator): one category per busy cycle, by priority; bytes per
accepted beat; a start clears; each cycle counts a cycle later."""

from hw.counters import CATEGORIES, PerfCounters
from spec.config import PRESETS
from spec.regmap import COUNTERS

from .util import run_sim


def test_counters_priority_bytes_and_clear(tmp_path):
    cfg = PRESETS["tiny"]
    dut = PerfCounters(cfg)
    # (busy, categories whose condition holds, a_fire, b_fire, c_fire)
    cycles = [(1, {"mac_active_cycles", "stall_store_cycles"}, 1, 0, 0),
              (1, {"stall_load_b_cycles", "stall_store_cycles"}, 0, 1, 1),
              (1, set(), 1, 1, 1),
              (0, {"mac_active_cycles"}, 1, 0, 0),           # not busy: nothing counts
              (1, {"stall_drain_cycles", "stall_load_a_cycles"}, 0, 0, 0)]
    seen = {}

    async def bench(ctx):
        ctx.set(dut.start, 1)
        await ctx.tick()
        ctx.set(dut.start, 0)
        for busy, conds, a, b, c in cycles:
            ctx.set(dut.busy, busy)
            for name in CATEGORIES:
                ctx.set(getattr(dut, f"in_{name}"), name in conds)
            for port, v in ((dut.a_fire, a), (dut.b_fire, b), (dut.c_fire, c)):
                ctx.set(port, v)
            won = next((n for n in CATEGORIES if n in conds), None)
            await ctx.tick()
            # the cycle's category is named (and counted) a cycle later
            for name in CATEGORIES:
                assert ctx.get(getattr(dut, f"cat_{name}")) == (busy and name == won)
        ctx.set(dut.busy, 0)
        # the last busy cycle is not counted yet: it is the cycle after busy falls
        seen["early"] = ctx.get(dut.c_total_cycles)
        await ctx.tick()
        seen.update({name: ctx.get(getattr(dut, f"c_{name}")) for name in COUNTERS})
        ctx.set(dut.start, 1)
        await ctx.tick()
        seen["cleared"] = [ctx.get(getattr(dut, f"c_{name}")) for name in COUNTERS]

    run_sim(dut, bench, tmp_path=tmp_path, name="counters")
    assert seen["early"] == 3
    assert seen["total_cycles"] == 4 and seen["stall_ctrl_cycles"] == 1
    assert (seen["mac_active_cycles"], seen["stall_load_b_cycles"], seen["stall_drain_cycles"],
            seen["stall_load_a_cycles"], seen["stall_store_cycles"]) == (1, 1, 1, 0, 0)
    assert seen["rd_a_bytes"] == 2 * cfg.a_beat_bytes
    assert seen["rd_b_bytes"] == 2 * cfg.b_beat_bytes
    assert seen["wr_c_bytes"] == 2 * cfg.c_beat_bytes
    assert seen["cleared"] == [0] * len(COUNTERS)
