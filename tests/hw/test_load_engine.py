# amaranth: UnusedElaboratable=no
"""LoadEngine alone (Amaranth simulation): every beat lands in its buffer row with the bytes
at or past ``elems`` zeroed, for ports answering one cycle after a request (the fastest the
config allows, which the engine's first-mask timing relies on) or later, with and without
back-pressure, for one group / one row and ragged grids."""

import numpy as np
import pytest

from spec.config import PRESETS
from hw.dma import LoadEngine

from .util import run_sim

CFG = PRESETS["small"]
BEAT = CFG.b_beat_bytes
DEPTH = 256
MEM_BYTES = 1 << 12


def run_load(*, rows, groups, elems, addr, stride, buf_base, gstride, latency, ready_rng,
             mem, gaddr=None, dstride=None, dil_built=False, cfg=CFG):
    """One load, started with ``start`` high for one cycle; the port answers each accepted
    request ``latency`` cycles later. Returns the buffer writes as {row: bytes} and the
    cycle the engine's ``busy`` fell, counted from the start. ``gaddr``: the groups' address
    step (an engine built with ``group_addr``); ``dstride``: a deinterleaving load's odd-byte
    rows' offset (``p_dil``; ``dil_built``: an engine built with ``deinterleave`` anyway);
    ``cfg``: the config (its address width)."""
    dil = dstride is not None
    dut = LoadEngine(cfg, beat_bytes=BEAT, depth=DEPTH, group_addr=gaddr is not None,
                     deinterleave=dil or dil_built)
    writes, done = {}, []

    async def bench(ctx):
        for name, v in (("p_addr", addr), ("p_stride", stride), ("p_rows", rows),
                        ("p_groups", groups), ("p_elems", elems), ("p_buf_base", buf_base),
                        ("p_buf_gstride", gstride)) + ((("p_gaddr", gaddr),) if gaddr else ()) \
                + ((("p_dil", 1), ("p_buf_dstride", dstride)) if dil else ()):
            ctx.set(getattr(dut, name), v)
        ctx.set(dut.start, 1)
        await ctx.tick()
        ctx.set(dut.start, 0)
        due = []                                # (cycle, address) of requests in flight
        for cycle in range(1, 2000):
            ready = int(ready_rng.random() < 0.7) if ready_rng is not None else 1
            ctx.set(dut.mem.ready, ready)
            hit = [a for c, a in due if c == cycle]
            due = [(c, a) for c, a in due if c != cycle]
            ctx.set(dut.mem.rvalid, int(bool(hit)))
            if hit:
                a = hit[0]
                ctx.set(dut.mem.rdata, int.from_bytes(bytes(mem[a:a + BEAT]), "little"))
            if ctx.get(dut.w_en):
                row = ctx.get(dut.w_addr)
                assert row not in writes, f"row {row} written twice"
                writes[row] = ctx.get(dut.w_data).to_bytes(BEAT, "little")
            if ctx.get(dut.mem.valid) and ready:
                due.append((cycle + latency, ctx.get(dut.mem.addr)))
            await ctx.tick()
            if not ctx.get(dut.busy):
                done.append(cycle)
                break
        assert done, "load never finished"

    run_sim(dut, bench)
    return writes, done[0]


@pytest.mark.parametrize("latency", [1, 2, 5])
@pytest.mark.parametrize("backpressure", [False, True])
def test_load_engine_masks_and_places_every_beat(latency, backpressure):
    rng = np.random.default_rng(latency * 2 + backpressure)
    mem = rng.integers(0, 256, MEM_BYTES, dtype=np.uint8)
    shapes = [(1, 1, BEAT), (1, 1, 3), (1, 3, 2 * BEAT + 5), (4, 1, BEAT - 1), (3, 2, BEAT + 1),
              (5, 3, 3 * BEAT), (2, 4, BEAT), (3, 2, 0), (2, 4, BEAT + 3), (1, 5, 5)]
    for rows, groups, elems in shapes:
        stride = groups * BEAT + int(rng.integers(0, 3)) * BEAT + int(rng.integers(0, BEAT))
        addr = int(rng.integers(0, 64))
        buf_base, gstride = int(rng.integers(0, 8)), rows + int(rng.integers(0, 3))
        writes, _ = run_load(rows=rows, groups=groups, elems=elems, addr=addr, stride=stride,
                             buf_base=buf_base, gstride=gstride, latency=latency,
                             ready_rng=rng if backpressure else None, mem=mem)
        want = {}
        for r in range(rows):
            for g in range(groups):
                a = addr + r * stride + g * BEAT
                beat = bytes(b if g * BEAT + i < elems else 0
                             for i, b in enumerate(mem[a:a + BEAT]))
                want[buf_base + g * gstride + r] = beat
        assert writes == want, (rows, groups, elems)


@pytest.mark.parametrize("backpressure", [False, True])
def test_load_engine_groups_at_their_own_address_step(backpressure):
    """With ``group_addr`` the groups are ``p_gaddr`` bytes apart (a depthwise stride-2
    step's row classes: rows 4 j and 4 j + 1 of a map into two regions of one buffer); the
    byte mask still counts a beat a group."""
    rng = np.random.default_rng(7 + backpressure)
    mem = rng.integers(0, 256, MEM_BYTES, dtype=np.uint8)
    for rows, groups, elems, w in ((6, 2, BEAT + 5, 13), (3, 2, 2 * BEAT, 40), (1, 2, BEAT, 3),
                                   (4, 3, 3 * BEAT, 9)):
        addr, buf_base, gstride = int(rng.integers(0, 64)), int(rng.integers(0, 8)), rows + 2
        writes, _ = run_load(rows=rows, groups=groups, elems=elems, addr=addr, stride=4 * w,
                             buf_base=buf_base, gstride=gstride, latency=3,
                             ready_rng=rng if backpressure else None, mem=mem, gaddr=w)
        want = {}
        for r in range(rows):
            for g in range(groups):
                a = addr + r * 4 * w + g * w
                want[buf_base + g * gstride + r] = bytes(
                    b if g * BEAT + i < elems else 0 for i, b in enumerate(mem[a:a + BEAT]))
        assert writes == want, (rows, groups, elems, w)


@pytest.mark.parametrize("latency", [1, 3])
@pytest.mark.parametrize("backpressure", [False, True])
def test_load_engine_deinterleaves_cells_into_even_and_odd_byte_rows(latency, backpressure):
    """With ``p_dil`` (a depthwise layer in row and column phases,
    spec.dwmesh.BlockLoad.dwords) each cell of two beats, ``gaddr`` apart from the next, is
    split into its even bytes (row ``buf_base + c gstride + r``) and its odd bytes (that plus
    ``dstride``); the byte mask counts on across the row's beats; busy falls a cycle later
    than the same beats loaded plainly. Built with ``deinterleave``, a load without ``p_dil``
    is the plain one."""
    rng = np.random.default_rng(11 + latency + 2 * backpressure)
    mem = rng.integers(0, 256, MEM_BYTES, dtype=np.uint8)
    # (maps narrower than a beat: the next cell starts inside this one's second beat, a
    # negative address step)
    for rows, cells, elems, w in ((5, 2, 4 * BEAT, 40), (3, 2, 2 * BEAT + 3, 21),
                                  (4, 1, BEAT + 5, 9), (2, 2, 3, 17), (1, 1, 2 * BEAT, 3),
                                  (6, 2, 2 * BEAT, 13), (3, 2, 2 * BEAT, 5),
                                  (2, 2, 3 * BEAT, BEAT - 1)):
        addr, buf_base = int(rng.integers(0, 64)), int(rng.integers(0, 8))
        gstride, dstride = 2 * rows + 1, rows
        # (default's 31-bit addresses: a negative step must not wrap at the step's width)
        kw = dict(rows=rows, groups=2 * cells, elems=elems, addr=addr, stride=4 * w,
                  buf_base=buf_base, gstride=gstride, latency=latency,
                  ready_rng=rng if backpressure else None, mem=mem, gaddr=w,
                  cfg=PRESETS["default"])
        writes, done = run_load(**kw, dstride=dstride)
        want = {}
        for r in range(rows):
            for c in range(cells):
                a = addr + r * 4 * w + c * w
                cell = bytes(b if 2 * c * BEAT + i < elems else 0
                             for i, b in enumerate(mem[a:a + 2 * BEAT]))
                want[buf_base + c * gstride + r] = cell[0::2]
                want[buf_base + c * gstride + r + dstride] = cell[1::2]
        assert writes == want, (rows, cells, elems, w)
        if not backpressure:
            plain, plain_done = run_load(**kw, dil_built=True)
            assert len(plain) == 2 * rows * cells and done == plain_done + 1


def test_load_engine_deinterleave_needs_group_addr():
    with pytest.raises(ValueError, match="deinterleave needs group_addr"):
        LoadEngine(CFG, beat_bytes=BEAT, depth=DEPTH, deinterleave=True)
