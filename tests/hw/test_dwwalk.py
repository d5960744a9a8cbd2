# amaranth: UnusedElaboratable=no
"""The depthwise walk (hw/dwwalk.py) states spec.dwmesh.strip_steps' steps, in order."""

import pytest

from hw.dwwalk import DwWalker
from spec.config import PRESETS
from spec.dwmesh import strip_steps

from .util import run_sim


@pytest.mark.parametrize("preset,channels,h,w,group,int8", [
    ("default", 3, 20, 31, 1, 1), ("default", 8, 14, 14, 3, 1), ("default", 5, 28, 30, 2, 0),
    ("default", 1, 7, 7, 1, 1), ("default", 3, 9, 5, 1, 0), ("default", 2, 1, 1, 1, 1),
    ("default", 960, 14, 14, 35, 1), ("default", 4, 4, 15, 4, 0), ("default", 2, 6, 16, 2, 1),
    ("default", 2, 6, 17, 2, 1), ("default", 1, 15, 3, 1, 1), ("small", 3, 12, 13, 2, 1),
    ("small", 2, 13, 6, 1, 0), ("small", 1, 6, 7, 1, 1), ("tiny", 2, 5, 6, 1, 1),
    ("tiny", 3, 4, 3, 2, 0), ("default", 5, 7, 7, 3, 1), ("small", 4, 13, 6, 3, 0),
    ("default", 960, 7, 7, 70, 1), ("default", 96, 112, 112, 4, 1), ("default", 7, 56, 30, 3, 0),
    ("small", 5, 8, 9, 2, 1), ("small", 3, 12, 20, 3, 0), ("small", 6, 3, 3, 4, 1),
    ("small", 6, 3, 3, 4, 0), ("small", 2, 5, 7, 2, 1), ("small", 2, 5, 8, 2, 0)])
@pytest.mark.parametrize("stride", [1, 2])
def test_walk_states_the_models_steps(preset, channels, h, w, group, int8, stride):
    _walk(preset, channels, h, w, group, int8, stride, kernel=3)


@pytest.mark.parametrize("preset,channels,h,w,group,int8", [
    ("default", 3, 20, 31, 1, 1), ("default", 8, 14, 14, 3, 1), ("default", 5, 28, 30, 2, 0),
    ("default", 1, 7, 7, 1, 1), ("default", 2, 1, 1, 1, 1), ("default", 672, 14, 14, 35, 1),
    ("default", 2, 12, 12, 2, 0), ("default", 2, 13, 25, 2, 1), ("default", 3, 56, 30, 3, 0),
    ("small", 3, 12, 13, 2, 1), ("small", 2, 13, 6, 1, 0), ("small", 4, 5, 5, 3, 1),
    ("default", 2, 9, 15, 2, 0), ("small", 2, 9, 7, 2, 1)])
@pytest.mark.parametrize("stride", [1, 2])
def test_walk_states_the_models_5x5_steps(preset, channels, h, w, group, int8, stride):
    """Depthwise 5x5 (p_kernel 1): strips of C - 4 columns, tiles of R - 4 rows (R - 2 in row
    passes: 28 and 56 rows on the 16x16, 9, 12 and 13 on the 8x8), the loads two columns left of
    a later strip's outputs; maps of up to C - 2 columns one strip (14 and 13 on the 16x16, 6
    and 5 on the 8x8; 15 and 7 two strips), of up to R - 2 rows one tile (14, 13, 12 and 9 on
    the 16x16, 5 on the 8x8)."""
    _walk(preset, channels, h, w, group, int8, stride, kernel=5)


@pytest.mark.parametrize("channels,h,w,group,int8", [
    (3, 20, 31, 1, 1), (8, 14, 14, 3, 1), (5, 28, 30, 2, 0), (1, 7, 7, 1, 1), (2, 1, 1, 1, 1),
    (768, 7, 7, 40, 1), (2, 10, 11, 2, 0), (3, 56, 56, 3, 0), (2, 9, 13, 2, 1),
    (2, 9, 14, 2, 0), (3, 13, 13, 3, 1), (3, 14, 13, 3, 0)])
@pytest.mark.parametrize("stride", [1, 2])
def test_walk_states_the_models_7x7_steps(channels, h, w, group, int8, stride):
    """Depthwise 7x7 (p_kernel 2) on the 16x16: strips of C - 6 columns, tiles of R - 6
    rows, the loads three columns left of a later strip's outputs."""
    _walk("default", channels, h, w, group, int8, stride, kernel=7)


@pytest.mark.parametrize("kernel,channels,h,w,group,int8,odd_cols,odd_rows", [
    # row and column phases (session 42): MobileNet-V2's and EfficientNet-B0's stride-2
    # layers, ragged last strips, odd widths, TF "SAME" columns and rows
    *((k, *case) for k in (3, 5) for case in (
        (96, 112, 112, 4, 1, 0, 0), (144, 56, 56, 4, 0, 0, 0), (5, 28, 28, 2, 1, 0, 0),
        (3, 32, 61, 2, 1, 0, 0), (3, 32, 60, 3, 0, 1, 1), (2, 16, 17, 2, 1, 0, 1),
        (2, 20, 46, 1, 1, 1, 0))),
    (3, 96, 112, 112, 4, 1, 1, 1), (3, 7, 56, 30, 3, 0, 1, 1), (3, 4, 28, 28, 4, 1, 1, 1),
    (3, 2, 6, 16, 2, 1, 1, 1), (3, 3, 20, 31, 1, 1, 0, 1), (5, 3, 56, 30, 3, 0, 1, 1),
    (5, 2, 12, 12, 2, 0, 1, 1), (7, 3, 56, 56, 3, 0, 1, 1), (7, 2, 10, 11, 2, 0, 0, 1)])
def test_walk_states_the_models_odd_row_steps(kernel, channels, h, w, group, int8, odd_cols,
                                             odd_rows):
    """Stride 2 keeping the odd rows and columns (TF "SAME"): the model's steps are the
    symmetric layer's, row phases included (112 x 112, 56 x 30, 28 x 28 3x3), so the walk
    needs no term of its own; the store's elements the same (``out_tw``: the odd columns of a
    strip of even width). In row and column phases (session 42) the odd columns move the
    loads a column right, and a first strip's words and rotations (``p_odd_cols``); the
    symmetric layers of those shapes too."""
    _walk("default", channels, h, w, group, int8, 2, kernel=kernel, odd_rows=bool(odd_rows),
          odd_cols=bool(odd_cols))


def _walk(preset, channels, h, w, group, int8, stride, *, kernel, odd_rows=False,
          odd_cols=False):
    cfg = PRESETS[preset]
    if h % 2 and stride == 2:
        group = 1                 # odd maps with stride 2: one channel a step
    x_addr, out_addr = 0x1234, 0x40_0001
    expect = strip_steps(channels, h, w, x_addr=x_addr, out_addr=0, rows=cfg.array_rows,
                         cols=cfg.array_cols, group=group, stride=stride, kernel=kernel,
                         odd_rows=odd_rows, odd_cols=odd_cols)
    dut = DwWalker(cfg)
    got = []

    async def bench(ctx):
        for name, value in (("p_channels", channels), ("p_h", h), ("p_w", w),
                            ("p_group", group), ("p_x_addr", x_addr),
                            ("p_out_addr", out_addr), ("p_int8", int8),
                            ("p_s2", int(stride == 2)), ("p_kernel", (kernel - 3) // 2),
                            ("p_odd_cols", int(odd_cols))):
            ctx.set(getattr(dut, name), value)
        ctx.set(dut.start, 1)
        await ctx.tick()
        ctx.set(dut.start, 0)
        waited = 1
        while not ctx.get(dut.valid):
            assert waited < DwWalker.START_LATENCY
            await ctx.tick()
            waited += 1
        assert waited == DwWalker.START_LATENCY
        while True:
            assert ctx.get(dut.valid)
            got.append({n: ctx.get(getattr(dut, n)) for n in (
                "c0", "channels", "ox0", "tw", "first_strip", "a_addr", "a_words", "b_addr",
                "b_words", "nbytes", "st_addr", "st_rows", "st_elems", "last", "tiles",
                "phases", "quad", "passes", "cphases", "ce0", "rot0", "rot1", "cols0",
                "cols1")})
            if got[-1]["last"]:
                break
            ctx.set(dut.advance, 1)
            await ctx.tick()
            ctx.set(dut.advance, 0)
            for _ in range(DwWalker.ADVANCE_LATENCY - 1):
                assert not ctx.get(dut.valid)
                await ctx.tick()

    run_sim(dut, bench)
    size = 1 if int8 else 4
    assert len(got) == len(expect)
    for step, g in zip(expect, got):
        # row and column phases (session 42): the fills' words of either parity, rotations
        # and lanes, from the first tile's fill 0 (column phase 0) and fill 1 (phase 1)
        t0 = step.tiles[0]
        cph = t0.cphases
        assert g == {
            "c0": step.c0, "channels": step.channels, "ox0": step.ox0, "tw": step.tw,
            "first_strip": int(step.ox0 == 0), "a_addr": step.a_load.addr,
            "a_words": step.a_load.words, "b_addr": step.b_load.addr,
            "b_words": step.b_load.words, "nbytes": step.a_load.nbytes,
            "st_addr": out_addr + size * step.out_addr, "st_rows": step.out_rows,
            "st_elems": step.out_tw,
            "last": int(step is expect[-1]),
            "tiles": sum(t.channel == step.c0 for t in step.tiles),     # a channel's tiles
            # (two fills a tile: stride 2's row phases on 3x3, the row passes on 5x5)
            "phases": int(step.tiles[0].phase1 is not None and not step.tiles[0].passes),
            "passes": int(step.tiles[0].passes),
            "quad": int(bool(step.tiles[0].quads)),
            "cphases": int(cph), "ce0": int(cph and t0.a_base > t0.phase1.a_base),
            "rot0": int(t0.pre_right != 0) if cph else int(step.ox0 == 0),
            "rot1": int(cph and t0.phase1.pre_right != 0),
            "cols0": t0.cols if cph else step.a_load.nbytes,
            "cols1": t0.phase1.cols if cph else 0}
        assert step.a_load.nbytes == step.b_load.nbytes
        phases = step.tiles[0].phase1 is not None and not step.tiles[0].passes
        assert step.a_load.stride == step.b_load.stride == (4 if phases else 2) * w
        # (row and column phases: a class's rows two words each, the sequencer's group stride
        # twice the words and its deinterleaving offset the words)
        gwords = (2 if cph else 1) * step.a_load.words
        assert (step.a_load.groups, step.a_load.gaddr, step.a_load.gwords) == \
            ((2, w, gwords) if phases else (1, 0, 0))
        # (B's second group at A's words: its classes a row shorter with G h / 2 odd,
        # spec.dwmesh.phase_halves; the sequencer's group stride for both loads)
        assert (step.b_load.groups, step.b_load.gaddr, step.b_load.gwords) == \
            ((2, w, gwords) if phases else (1, 0, 0))
        assert step.a_load.dwords == step.b_load.dwords == (step.a_load.words if cph else 0)
