# amaranth: UnusedElaboratable=no
"""StoreEngine.pending_limit: with a memory that accepts every beat and holds its
acknowledgements, the store sends exactly that many beats, then one per acknowledgement (in
the acknowledgement's own cycle when the port is ready, else as soon as it is)."""

import numpy as np
import pytest

from hw.dma import StoreEngine

from .test_store_channels import CFG, _Harness, set_params
from .util import run_sim


def test_store_waits_at_the_pending_limit():
    C, limit = CFG.array_cols, StoreEngine.pending_limit(CFG)
    rows = limit + 6
    rng = np.random.default_rng(7)
    acc = rng.integers(-1000, 1000, (rows, C))
    words = [sum((int(v) & 0xFFFFFFFF) << (32 * j) for j, v in enumerate(row)) for row in acc]
    dut = _Harness(words, [0] * 16)
    se = dut.se
    hold = 40           # cycles 0 .. hold-1: no acknowledgement
    refuse = hold       # one acknowledgement while the port refuses beats
    idle = hold + 10    # cycles refuse+1 .. idle-1: ready, no acknowledgement; then one a cycle
    sent, acks, peak = [], 0, 0

    async def bench(ctx):
        nonlocal acks, peak
        set_params(ctx, se, rows=rows, post=0, bias=0, ch0=0, ch_rows=1)
        ctx.set(se.mem.ready, 1)
        ctx.set(se.start, 1)
        await ctx.tick()
        ctx.set(se.start, 0)
        for cycle in range(idle + 3 * rows):
            ack = cycle == refuse or (cycle >= idle and len(sent) > acks)
            ctx.set(se.mem.bvalid, ack)
            ctx.set(se.mem.ready, cycle != refuse)
            if ctx.get(se.mem.valid) and cycle != refuse:
                sent.append((cycle, ctx.get(se.mem.addr)))
            acks += ack
            peak = max(peak, len(sent) - acks)
            await ctx.tick()
        ctx.set(se.mem.bvalid, 0)

    run_sim(dut, bench)
    assert [a for _, a in sent] == [0x100 + 4 * C * r for r in range(rows)]
    first = sent[0][0]
    # limit beats back to back; one more after the refused cycle's acknowledgement; then one in
    # every acknowledgement's cycle
    want = [*range(first, first + limit), refuse + 1, *range(idle, idle + rows - limit - 1)]
    assert [c for c, _ in sent] == want
    assert peak == limit


def _store_beats(post, refusals, seed=3):
    """(addr, data, strobes) of every beat the port accepts, with the port refusing in the
    cycles where ``refusals`` (a function of the cycle) is true; acknowledgements on time."""
    C = CFG.array_cols
    rows = 9
    rng = np.random.default_rng(seed)
    acc = rng.integers(-(1 << 20), 1 << 20, (rows, C))
    words = [sum((int(v) & 0xFFFFFFFF) << (32 * j) for j, v in enumerate(row)) for row in acc]
    biases = [int(b) & 0xFFFFFFFF for b in rng.integers(-1000, 1000, 16)]
    dut = _Harness(words, biases)
    se = dut.se
    taken = []

    async def bench(ctx):
        set_params(ctx, se, rows=rows, post=post, bias=post, ch0=1, ch_rows=2)
        ctx.set(se.start, 1)
        await ctx.tick()
        ctx.set(se.start, 0)
        pending = []
        for cycle in range(400):
            ready = not refusals(cycle)
            ctx.set(se.mem.ready, ready)
            ctx.set(se.mem.bvalid, bool(pending) and pending[0] <= cycle)
            if pending and pending[0] <= cycle:
                pending.pop(0)
            if ready and ctx.get(se.mem.valid):
                taken.append((ctx.get(se.mem.addr), ctx.get(se.mem.data), ctx.get(se.mem.strb)))
                pending.append(cycle + 3)
            await ctx.tick()

    run_sim(dut, bench)
    assert len(taken) == rows
    return taken


@pytest.mark.parametrize("post", [0, 1])
def test_store_beats_unchanged_by_back_pressure(post):
    """Refusals at random cycles (the skid register and every copy of its flag holding the
    pipeline) change when beats leave, never which beats: the same addresses, data and strobes
    as with a port that is always ready, with and without the requantiser's pipeline."""
    rng = np.random.default_rng(11)
    refuse = set(int(c) for c in rng.choice(200, 90, replace=False))
    assert _store_beats(post, lambda c: c in refuse) == _store_beats(post, lambda c: False)
