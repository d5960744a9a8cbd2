"""ParamLoader (Amaranth simulator): every word of an array up to ``rows`` is checked as it
arrives, and none past it (the last beat's padding holds whatever memory holds)."""

import pytest

from hw.checker import PARAM_ARRAYS
from hw.params import ParamLoader
from spec.config import PRESETS

from .util import run_sim

MULT = PARAM_ARRAYS.index("mult")


def _load(cfg, rows, words_of):
    """Run the loader over the multiplier array alone, answering its load command as the B load
    engine does (beats in order from buffer row 0, ``busy`` falling a cycle after the last);
    return ``bad`` at ``done``."""
    dut = ParamLoader(cfg)
    words = cfg.b_beat_bytes // 4
    beats = -(-rows // words)
    seen = {}

    async def bench(ctx):
        ctx.set(dut.rows, rows)
        ctx.set(dut.need, 1 << MULT)
        await ctx.tick()                    # rows stable a cycle before start (documented)
        ctx.set(dut.start, 1)
        await ctx.tick()
        ctx.set(dut.start, 0)
        while not ctx.get(dut.lb.start):
            await ctx.tick()
        assert ctx.get(dut.lb.p_groups) == beats
        assert ctx.get(dut.lb.p_elems) == 4 * rows
        await ctx.tick()
        ctx.set(dut.lb.busy, 1)
        for b in range(beats):
            await ctx.tick()                # a response every other cycle
            ctx.set(dut.w_en, 1)
            ctx.set(dut.w_addr, b)
            ctx.set(dut.w_data, sum((words_of(b * words + j) & 0xFFFF_FFFF) << (32 * j)
                                    for j in range(words)))
            await ctx.tick()
            ctx.set(dut.w_en, 0)
        ctx.set(dut.lb.busy, 0)
        for _ in range(20):
            if ctx.get(dut.done):
                seen["bad"] = ctx.get(dut.bad)
                return
            await ctx.tick()

    run_sim(dut, bench)
    return seen["bad"]


@pytest.mark.parametrize("rows", [1, 5, 8, 13])
def test_words_up_to_rows_checked_and_none_past(rows):
    cfg = PRESETS["small"]
    words = cfg.b_beat_bytes // 4
    assert words > 1, "the padding case needs several words per beat"
    beats = -(-rows // words)
    assert _load(cfg, rows, lambda w: 7) == 0
    for bad_at in range(beats * words):
        # a zero multiplier is illegal: flagged at any word below rows, ignored past it
        flagged = _load(cfg, rows, lambda w: 0 if w == bad_at else 7)
        assert flagged == (bad_at < rows), (rows, bad_at)
