# amaranth: UnusedElaboratable=no
"""The compute engine's depthwise steps (ComputeEngine(mesh=True)): a strip step of
spec.dwmesh.strip_steps from buffers loaded as its loads load them, into the accumulator,
against spec.dwmesh.run_strip_tile, with the step's cycle count and drain."""

import numpy as np
import pytest
from amaranth import Elaboratable, Module, unsigned
from amaranth.lib.memory import Memory

from hw.compute import (MESH_HALVES_START_CYCLES, MESH_QUAD_START_CYCLES, MESH_START_CYCLES,
                        ComputeEngine, mesh_drain_cycles)
from hw.params import WEIGHT_TAPS
from spec.config import PRESETS
from spec.dwmesh import (one_tile, run_strip_tile, strip_step_cycles, strip_steps,
                         strip_tile_acc)

from .test_array import pack
from .util import run_sim


class _Harness(Elaboratable):
    """Buffers A and B and the weight memory (initialised), the accumulator, the engine."""

    def __init__(self, cfg, a_words, b_words, weights):
        self.ce = ComputeEngine(cfg, mesh=True)
        self._cfg, self._a, self._b, self._w = cfg, a_words, b_words, weights
        self.acc = Memory(shape=unsigned(8 * cfg.c_beat_bytes), depth=cfg.acc_depth, init=[])

    def elaborate(self, platform):
        m = Module()
        cfg, ce = self._cfg, self.ce
        m.submodules.ce = ce
        m.submodules.acc = acc = self.acc
        mems = {}
        for name, words, width in (("a", self._a, 8 * cfg.a_beat_bytes),
                                   ("b", self._b, 8 * cfg.b_beat_bytes),
                                   ("w", self._w, 8 * WEIGHT_TAPS)):
            mems[name] = Memory(shape=unsigned(width), depth=len(words), init=words)
            m.submodules[f"mem_{name}"] = mems[name]
        ra, rb, rw = (mems[n].read_port() for n in "abw")
        m.d.comb += [ra.addr.eq(ce.a_raddr), ra.en.eq(ce.rd_en), ce.a_rdata.eq(ra.data),
                     rb.addr.eq(ce.b_raddr), rb.en.eq(ce.rd_en), ce.b_rdata.eq(rb.data),
                     rw.addr.eq(ce.w_raddr), ce.w_rdata.eq(rw.data)]
        acc_w, acc_r = acc.write_port(), acc.read_port(transparent_for=())
        m.d.comb += [acc_w.addr.eq(ce.acc_waddr), acc_w.data.eq(ce.acc_wdata),
                     acc_w.en.eq(ce.acc_wen), acc_r.addr.eq(ce.acc_raddr),
                     ce.acc_rdata.eq(acc_r.data)]
        return m


def _unpack_row(word, cols):
    vals = [(word >> (32 * j)) & 0xFFFFFFFF for j in range(cols)]
    return np.array([v - (1 << 32) if v >> 31 else v for v in vals], np.int64)


@pytest.mark.parametrize("preset,c,h,w,group,stride", [
    *(("small", *case) for case in (
        (3, 10, 13, 3, 1), (2, 5, 4, 1, 1), (4, 4, 20, 2, 1), (4, 5, 4, 3, 1), (3, 7, 9, 3, 1),
        (2, 1, 6, 2, 1), (5, 3, 9, 5, 1), (4, 2, 5, 4, 1), (3, 3, 4, 1, 1), (3, 12, 13, 3, 1),
        # stride 2's row phases (h a multiple of 4 above R - 2): two tiles a channel (the
        # second starting at padded row 14, 2 mod 4: swapped phases), a last smaller group;
        # maps of up to 7 columns (wider ones in column phases, session 42: four fills, the
        # deinterleaved words, the second column phase's rotation and pad lanes)
        (3, 16, 5, 3, 2), (3, 12, 7, 2, 2), (2, 12, 7, 2, "2r"),
        (3, 16, 13, 3, 2), (3, 12, 9, 2, 2), (1, 8, 20, 1, 2), (2, 20, 6, 2, 2),
        # ... keeping the odd rows (TF "SAME", "2r"): phase 0 the even input rows, no top pad
        (3, 16, 13, 3, "2r"), (3, 12, 9, 2, "2r"), (1, 8, 20, 1, "2r"), (2, 20, 6, 2, "2r"),
        (5, 12, 4, 5, "2r"),
        # ... two channels a tile (4 and 6 rows on the 8x8, spec.dwmesh.phase_halves): a
        # lone last channel, 18 stacked rows (classes 0 and 1 a row longer), a step of one
        # channel (a whole-mesh phase tile), the odd rows
        (3, 6, 9, 3, 2), (4, 4, 7, 4, 2), (5, 6, 5, 2, 2), (3, 6, 9, 3, "2r"),
        (4, 4, 6, 3, "2r"),
        # the quadrant mode (3 x 3 maps on the 8x8): four channels a tile, 1 to 4 in a
        # step's last, packed rows
        (9, 3, 3, 9, "quad"), (7, 3, 3, 7, "quad"), (6, 3, 3, 3, "quad"),
        (8, 3, 3, 8, "quad"), (1, 3, 3, 1, "quad"),
        # depthwise 5x5 (pad 2): 4 x 4 outputs a tile on the 8x8, channels at odd and even
        # stacked rows, ragged tiles, a one-pixel map; in row passes (10 and 9 rows: 6 x
        # 4 outputs a tile, two fills) several tiles a channel, the last ragged; 5 rows one
        # tile (spec.dwmesh.one_tile)
        (3, 10, 13, 3, "k5"), (2, 5, 4, 2, "k5"), (3, 7, 9, 3, "k5"), (2, 1, 1, 2, "k5"),
        (4, 9, 5, 3, "k5"))),
    # (14 and 13 rows on the 16x16: one tile a channel, spec.dwmesh.one_tile; a 14-column
    # map one strip, one_strip)
    ("default", 3, 14, 14, 3, "k5"), ("default", 2, 13, 20, 2, "k5"),
    # (row passes on the 16x16: 14 x 12 outputs a tile, 28 rows two tiles; 16 rows none)
    ("default", 2, 28, 13, 2, "k5"), ("default", 2, 16, 9, 2, "k5"),
    # depthwise 7x7 (pad 3): 10 x 10 outputs a tile on the 16x16
    ("default", 3, 12, 13, 3, "k7"), ("default", 2, 7, 7, 2, "k7"), ("default", 3, 21, 5, 2, "k7"),
    # (row passes, three fills a tile: 12 and 21 rows above; 28 rows two tiles a channel)
    ("default", 2, 28, 12, 2, "k7"),
    # 5x5 and 7x7 on maps of up to R/2 - 1 rows two channels a tile, the window's rows two a
    # fill in halves (session 41, StripTile.pairs): EfficientNet-B0's and a lone last channel
    ("default", 3, 7, 7, 3, "k5"), ("default", 4, 6, 9, 4, "k7"), ("default", 3, 7, 7, 3, "k7"),
    ("small", 3, 3, 6, 3, "k5"), ("default", 5, 7, 7, 4, "k5"),
    # depthwise 5x5 stride 2 in row phases (maps of a multiple of 4 rows above R - 4): the
    # window rows 0, 2, 4 then 1, 3, a top pad row in each phase of a channel's first tile;
    # keeping the odd rows (TF "SAME", "k5s2r"); 8 x 8 and 16 x 16, several tiles a channel
    ("small", 3, 12, 13, 3, "k5s2"), ("small", 2, 8, 9, 2, "k5s2"), ("small", 3, 16, 6, 2, "k5s2"),
    ("small", 3, 12, 13, 3, "k5s2r"), ("small", 2, 16, 9, 2, "k5s2r"),
    ("default", 2, 32, 13, 2, "k5s2"), ("default", 2, 32, 13, 2, "k5s2r"),
    # ... two channels a tile (phase_halves, session 41: 4 and 6 rows on the 8x8, 14 on the
    # 16x16, EfficientNet-B0's stride-2 14 x 14 5x5 layer; a lone last channel)
    ("small", 3, 6, 9, 3, "k5s2"), ("small", 2, 4, 7, 2, "k5s2r"),
    ("default", 3, 14, 14, 3, "k5s2"), ("default", 2, 14, 9, 2, "k5s2r"),
    # depthwise 7x7 stride 2 in row phases (session 40; maps of a multiple of 4 rows above R
    # - 3): the window rows 0, 2, 4, then 1, 3, 5, then 6; keeping the odd rows ("k7s2r")
    ("default", 2, 32, 13, 2, "k7s2"), ("default", 3, 16, 9, 3, "k7s2"),
    ("default", 2, 32, 13, 2, "k7s2r"), ("default", 3, 16, 9, 2, "k7s2r"),
    # row and column phases on the 16x16 (session 42): MobileNet-V2's 28 x 28 map, a strip
    # of 15 output columns, a second strip, 5x5 (14 output columns a strip)
    ("default", 1, 28, 28, 1, 2), ("default", 1, 32, 30, 1, 2), ("default", 1, 16, 45, 1, "2r"),
    ("default", 1, 32, 20, 1, "k5s2"), ("default", 2, 16, 31, 2, "k5s2r"),
    # row phases two channels a tile on the 16x16 (MobileNet-V2's 14 x 14 maps; 10 rows)
    ("default", 3, 14, 14, 3, 2), ("default", 2, 14, 9, 2, "2r"), ("default", 3, 10, 13, 3, 2),
    # ... and on the 16x16 (7 x 7 maps, four fill words a half)
    ("default", 9, 7, 7, 9, "quad"), ("default", 6, 7, 7, 6, "quad")])
def test_mesh_steps_fill_the_accumulator_as_the_model_does(preset, c, h, w, group, stride):
    """Every write lands in the step's accumulator rows (``G h + R`` of them from its base),
    whatever a tile leaves of no use (a quadrant without a channel, rows past the results)."""
    cfg = PRESETS[preset]
    R, C = cfg.array_rows, cfg.array_cols
    rng = np.random.default_rng(c * 13 + h + w)
    x = rng.integers(-128, 128, (c, h, w), dtype=np.int8)
    kernel = {"k5": 5, "k7": 7, "k5s2": 5, "k5s2r": 5, "k7s2": 7, "k7s2r": 7}.get(stride, 3)
    wt = rng.integers(-128, 128, (c, kernel, kernel), dtype=np.int8)
    x_addr = 50
    mem = rng.integers(-128, 128, 3000).astype(np.int64)
    mem[x_addr:x_addr + x.size] = x.reshape(-1)
    quad, odd_rows = stride == "quad", stride in ("2r", "k5s2r", "k7s2r")
    stride = 1 if stride in ("quad", "k5", "k7") else 2 if odd_rows or stride in (
        "k5s2", "k7s2") else stride
    steps = strip_steps(c, h, w, x_addr=x_addr, out_addr=0, rows=R, cols=C, group=group,
                        stride=stride, kernel=kernel, odd_rows=odd_rows)
    assert all(bool(t.phase1) == odd_rows for s in steps for t in s.tiles) or not odd_rows
    assert all(bool(t.quads) == quad for s in steps for t in s.tiles)
    pad = int(rng.integers(-128, 128))
    depth, a0, b0, acc0 = 128, 21, 9, 17         # arbitrary buffer and accumulator bases
    weights = [pack(wt[ch].reshape(-1), 8) for ch in range(c)] + [0] * 4
    for step in steps:
        words = {}
        for name, block, base in (("a", step.a_load, a0), ("b", step.b_load, b0)):
            # stale words, and garbage past each load's bytes (the pad lanes replace it)
            got = rng.integers(-128, 128, (depth, C)).astype(np.int64)
            for word, data in block.word_bytes(mem):
                got[base + word, :len(data)] = data
            words[name] = got
        dut = _Harness(cfg, [pack(r, 8) for r in words["a"]], [pack(r, 8) for r in words["b"]],
                       weights)
        ce = dut.ce
        result, written = {}, []

        async def bench(ctx, step=step):
            # two fills a tile: stride 2's row phases (3x3) or the row passes (5x5)
            passes = step.tiles[0].passes
            phases = step.tiles[0].phase1 is not None and not passes
            # row and column phases: column phase 0 reads the odd-byte words when its words'
            # bases are the higher ones
            first = step.tiles[0]
            cph = {"p_m_cphases": first.cphases, "p_m_pre_right": first.pre_right != 0,
                   "p_m_pre_right1": first.phase1.pre_right != 0,
                   "p_m_ce0": first.a_base > first.phase1.a_base, "p_m_cols": first.cols,
                   "p_m_cols1": first.phase1.cols} if first.cphases else {}
            params = {"p_m_channels": step.channels,
                      "p_m_tiles": -(-(h // 2) // (R - 1 if kernel == 3 else R - 2))
                      if phases else
                      -(-h // (R - 2)) if passes else
                      1 if one_tile(h, rows=R, kernel=kernel) else
                      -(-h // (R - kernel + 1)), "p_m_kernel": (kernel - 3) // 2,
                      "p_m_phases": phases, "p_m_passes": passes,
                      "p_m_words": step.a_load.words, "p_m_quad": quad,
                      "p_m_h": h, "p_m_na": h // 2, "p_m_nb": (h + 1) // 2,
                      "p_m_pre_right": step.ox0 == 0, "p_m_c0": step.c0, "p_a_base": a0,
                      "p_b_base": b0, "p_acc_base": acc0, "p_m_pad": pad & 0xFF,
                      "p_m_cols": step.a_load.nbytes, "p_m_odd_rows": odd_rows, **cph}
            for name, value in params.items():
                ctx.set(getattr(ce, name), value)
            ctx.set(ce.m_start, 1)
            await ctx.tick()
            ctx.set(ce.m_start, 0)
            cycles, last_write = 1, None
            while ctx.get(ce.busy):
                if ctx.get(ce.acc_wen):
                    last_write = cycles
                    written.append(ctx.get(ce.acc_waddr))
                await ctx.tick()
                cycles += 1
            for _ in range(4 * R):                  # nothing is written after busy falls
                assert not ctx.get(ce.acc_wen)
                await ctx.tick()
            result["cycles"], result["last_write"] = cycles, last_write
            result["acc"] = [ctx.get(dut.acc.data[acc0 + r])
                             for r in range(step.channels * h + R)]

        run_sim(dut, bench)
        beats = strip_step_cycles(step, R)
        # m_start's cycle counts as cycle 0: busy falls in this cycle
        start = (MESH_START_CYCLES + MESH_HALVES_START_CYCLES * step.tiles[0].halves
                 + (MESH_QUAD_START_CYCLES - 4 + step.tiles[0].quads if quad else 0))
        # (the quadrant mode's last packed row a cycle after the array's last row)
        assert result["cycles"] == start + beats + mesh_drain_cycles(cfg) + quad
        assert result["last_write"] == result["cycles"] - 1
        assert acc0 <= min(written) and max(written) < acc0 + step.channels * h + R
        expect = np.zeros((step.channels * h + R, C), np.int64)
        a_words = np.roll(words["a"], -a0, axis=0)      # the model's words count from 0
        b_words = np.roll(words["b"], -b0, axis=0)
        for tile in step.tiles:
            acc = run_strip_tile(tile, a_words, b_words, wt, R, pad)
            for acc_row, lanes in strip_tile_acc(tile, acc):
                expect[acc_row] = lanes
        wrapped = (expect + (1 << 31)) % (1 << 32) - (1 << 31)
        got = np.stack([_unpack_row(v, C) for v in result["acc"]])
        # every row as the model writes it, the ones past the results too (rows never written
        # are zero in both); in the quadrant mode the step's channels' rows (a quadrant
        # without a channel leaves rows of no use)
        rows = step.channels * step.ch_rows if quad else len(got)
        np.testing.assert_array_equal(got[:rows], wrapped[:rows])
