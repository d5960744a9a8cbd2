# amaranth: UnusedElaboratable=no
"""ParamLoader (Amaranth simulator): every word of an array up to ``rows`` is checked as it
arrives, and none past it (the last beat's padding holds whatever memory holds)."""

import pytest

from hw.checker import PARAM_ARRAYS
from hw.params import WEIGHT_ARRAYS, ParamLoader
from spec.config import PRESETS, ConfigError

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


async def _write_arrays(ctx, dut, arrays, words, *, first_sel, port=("load", "sel", "w_")):
    """Write ``arrays[i]`` (32-bit words, ``words`` per beat) into ParamMemories array
    ``first_sel + i``, one beat per cycle, as the B load engine does while ``load`` is high
    (``port``: the load flag, select and write-port prefix; the A load engine's for the
    weight arrays); then one more cycle, in which the last beat lands (the write is
    registered)."""
    load, sel, w = getattr(dut, port[0]), getattr(dut, port[1]), port[2]
    ctx.set(load, 1)
    for i in range(arrays.shape[0]):
        ctx.set(sel, first_sel + i)
        for beat in range(arrays.shape[1] // words):
            ctx.set(getattr(dut, f"{w}addr"), beat)
            ctx.set(getattr(dut, f"{w}data"), sum(int(arrays[i, beat * words + j]) << (32 * j)
                                                  for j in range(words)))
            ctx.set(getattr(dut, f"{w}en"), 1)
            await ctx.tick()
    ctx.set(getattr(dut, f"{w}en"), 0)
    ctx.set(load, 0)
    await ctx.tick()


def test_weight_arrays_load_and_read_as_one_word_per_channel():
    """ParamMemories(weights=True): words written into the thirteen weight arrays (through the
    A load engine's port, ``wsel`` 0 .. 12) read back as each channel's 49 taps (a 7x7 kernel;
    a 5x5 one's 25 and a 3x3 one's nine are the low bits) in one word, at the weight port."""
    import numpy as np

    from hw.params import ParamMemories, weight_word

    cfg = PRESETS["small"]
    words = cfg.b_beat_bytes // 4
    rng = np.random.default_rng(5)
    channels = 11
    taps = rng.integers(-128, 128, (channels, 49))
    arrays = np.zeros((len(WEIGHT_ARRAYS), -(-channels // words) * words), np.int64)
    for c in range(channels):
        padded = list(taps[c]) + [int(x) for x in rng.integers(-128, 128, 3)]  # 49 .. 51 junk
        for t in range(13):
            arrays[t, c] = sum((int(b) & 0xFF) << (8 * i)
                               for i, b in enumerate(padded[4 * t:4 * t + 4]))
    dut = ParamMemories(cfg, weights=True)
    got = {}

    async def bench(ctx):
        await _write_arrays(ctx, dut, arrays, words, first_sel=0,
                            port=("wload", "wsel", "wa_"))
        for c in reversed(range(channels)):
            ctx.set(dut.w_ch, c)
            ctx.set(dut.w_ren, 1)
            await ctx.tick()
            ctx.set(dut.w_ren, 0)
            await ctx.tick()                # held while w_ren is low
            got[c] = ctx.get(dut.weights)

    run_sim(dut, bench)
    assert got == {c: weight_word(taps[c]) for c in range(channels)}
    assert weight_word(list(range(9))) == int.from_bytes(bytes(range(9)), "little")
    assert weight_word(list(range(25))) == int.from_bytes(bytes(range(25)), "little")
    with pytest.raises(ValueError, match="9, 25 or 49 int8 taps"):
        weight_word([0] * 8)


@pytest.mark.parametrize("need,busy_a,busy_b", [
    (0b111010, 5, 5), (0b111111, 3, 3), (0b111110, 4, 4), (0b000011, 6, 6), (0b111000, 2, 2),
    (0b000111, 2, 2), (0b111111, 9, 3), (0b111111, 2, 7), (0b111010, 5, 2), (0b111110, 3, 8),
    # a 5x5 layer's seven weight arrays, a 7x7 one's thirteen
    (0b1111111010, 5, 5), (0b1111111111, 2, 9), (0b1111111000, 3, 3), (0b1111111110, 9, 2),
    (0xFFFA, 4, 6), (0xFFF8, 2, 2), (0xFFFF, 7, 3)])
def test_loader_runs_the_weight_arrays_on_a_beside_the_others_on_b(need, busy_a, busy_b):
    """ParamLoader(weights=True): the post-processing arrays go through the B load engine and
    the depthwise weight arrays through the A one at the same time, each chain in order (A's
    up to the last array it needs: three for 3x3, seven for 5x5, thirteen for 7x7; one skipped
    slot for none); with
    engines that stay busy ``busy_a`` / ``busy_b`` cycles after each start (different, as the
    ports' latencies may be), each engine's busy cycles and ``done`` come where
    planner.cost.param_load_cycles puts them (its chain timing, the counters' A-before-B
    attribution)."""
    from planner.cost import param_load_timeline

    cfg = PRESETS["small"]
    dut = ParamLoader(cfg, weights=True)
    issued = {"a": [], "b": []}
    cycles = {"a": 0, "b": 0, "both": 0, "total": 0}

    async def bench(ctx):
        ctx.set(dut.rows, 4)
        for i, name in enumerate(PARAM_ARRAYS + WEIGHT_ARRAYS):
            ctx.set(getattr(dut, f"addr_{name}"), 0x100 * (i + 1))
        ctx.set(dut.need, need)
        await ctx.tick()
        ctx.set(dut.start, 1)
        await ctx.tick()
        ctx.set(dut.start, 0)
        left = {"a": 0, "b": 0}
        for t in range(1, 260):
            cycles["total"] = t
            on = {e: left[e] > 0 for e in "ab"}
            cycles["a"] += on["a"]
            cycles["b"] += on["b"] and not on["a"]
            if ctx.get(dut.done):
                break
            started = {}
            for e, cmd, sel in (("a", dut.la, dut.wsel), ("b", dut.lb, dut.sel)):
                started[e] = ctx.get(cmd.start)
                if started[e]:
                    issued[e].append((ctx.get(sel), ctx.get(cmd.p_addr)))
            await ctx.tick()
            for e, busy in (("a", busy_a), ("b", busy_b)):
                left[e] = busy if started[e] else max(0, left[e] - 1)
            # the engines' busy: high from the cycle after their start, busy_a / busy_b cycles
            ctx.set(dut.la.busy, left["a"] > 0)
            ctx.set(dut.lb.busy, left["b"] > 0)

    run_sim(dut, bench)
    want_b = [(i, 0x100 * (i + 1)) for i in range(3) if need >> i & 1]
    want_a = [(t, 0x400 + 0x100 * t) for t in range(13) if need >> (3 + t) & 1]
    assert issued == {"a": want_a, "b": want_b}
    slots_a = [bool(need >> (3 + t) & 1) for t in range(13)]
    # (the A chain walks at least a 3x3 layer's three slots, then ends after the last needed)
    slots_a = slots_a[:max([t + 1 for t, on in enumerate(slots_a) if on] + [3])]
    load_a, load_b, ctrl = param_load_timeline(slots_a,
                                               [bool(need >> i & 1) for i in range(3)],
                                               busy_a, busy_b)
    assert (cycles["a"], cycles["b"], cycles["total"]) == (load_a, load_b,
                                                           load_a + load_b + ctrl)


@pytest.mark.parametrize("preset", ["tiny", "small", "default"])
def test_parameter_arrays_read_as_words_and_as_rows_with_their_lane(preset):
    """ParamMemories: channel ``ch`` of each array reads back on ``bias`` / ``mult`` /
    ``shift`` a cycle after ``ren``, and as lane ``lane`` of ``bias_row`` / ``mult_row`` (the
    rows the store registers before selecting the word), for channels in any order."""
    import numpy as np

    from hw.params import ParamMemories

    cfg = PRESETS[preset]
    words = cfg.b_beat_bytes // 4
    rng = np.random.default_rng(words)
    channels = 4 * words + 3
    arrays = rng.integers(0, 1 << 32, (len(PARAM_ARRAYS), -(-channels // words) * words))
    dut = ParamMemories(cfg)
    got = []

    async def bench(ctx):
        await _write_arrays(ctx, dut, arrays, words, first_sel=0)
        for c in rng.permutation(channels):
            ctx.set(dut.ch, int(c))
            ctx.set(dut.ren, 1)
            await ctx.tick()
            ctx.set(dut.ren, 0)
            lane = ctx.get(dut.lane)
            got.append((int(c), ctx.get(dut.bias), ctx.get(dut.mult), ctx.get(dut.shift),
                        (ctx.get(dut.bias_row) >> (32 * lane)) & 0xFFFFFFFF,
                        (ctx.get(dut.mult_row) >> (32 * lane)) & 0xFFFFFFFF))

    run_sim(dut, bench)
    assert len(got) == channels
    for c, bias, mult, shift, bias_w, mult_w in got:
        want = [int(arrays[a, c]) for a in range(len(PARAM_ARRAYS))]
        assert [bias, mult, shift] == want, c
        assert [bias_w, mult_w] == want[:2], c


def test_memories_refuse_arrays_longer_than_the_load_buffers():
    """A parameter array loads as one command into buffer rows 0 .. (their numbers are the
    memories' write addresses): a buffer with fewer rows than an array's beats is refused,
    B's always, A's with the depthwise weight arrays."""
    import dataclasses

    from hw.params import ParamMemories

    cfg = PRESETS["small"]                  # 1024 entries: 512 beats of 8 bytes
    ParamMemories(dataclasses.replace(cfg, buf_a_bytes=8 * 256))       # A not used
    with pytest.raises(ValueError, match="512 beats through the A load engine, more than its "
                                         "buffer's 256 rows"):
        ParamMemories(dataclasses.replace(cfg, buf_a_bytes=8 * 256), weights=True)
    # B's (and, with the mesh, A's) the config itself refuses since session 46: only RTL
    # generation refused it before, after compile and the golden device had run the config
    with pytest.raises(ConfigError, match="buf_b_bytes=2048 must hold a whole parameter array"):
        dataclasses.replace(cfg, buf_b_bytes=8 * 256)


@pytest.mark.parametrize("need", [0b000, 0b001, 0b111])
def test_loader_a_chain_walks_a_3x3_layers_slots_without_weights(need):
    """A record without weight arrays (a GEMM on a dw_mesh config) walks the A chain's first
    three slots, skipped, as it did before the 5x5 and 7x7 arrays existed (what
    planner.cost.param_load_cycles models): ``phase_a`` is high three cycles."""
    from planner.cost import DEFAULT_CONSTANTS

    dut = ParamLoader(PRESETS["small"], weights=True)
    high = []

    async def bench(ctx):
        ctx.set(dut.rows, 4)
        ctx.set(dut.need, need)
        await ctx.tick()
        ctx.set(dut.start, 1)
        await ctx.tick()
        ctx.set(dut.start, 0)
        for _ in range(40):
            high.append(ctx.get(dut.phase_a))
            if ctx.get(dut.done):
                break
            ctx.set(dut.lb.busy, 0)
            await ctx.tick()

    run_sim(dut, bench)
    assert sum(high) == 3 * DEFAULT_CONSTANTS.param_skip_cycles
