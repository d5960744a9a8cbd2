# amaranth: UnusedElaboratable=no
"""StoreEngine.pending_limit: with a memory that accepts every beat and holds its
acknowledgements, the store sends exactly that many beats, then one per acknowledgement (in
the acknowledgement's own cycle when the port is ready, else as soon as it is)."""

import numpy as np

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
