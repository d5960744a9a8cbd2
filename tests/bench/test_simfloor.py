"""bench.simfloor: the self-driving wrappers observe every output bit (so Verilator cannot drop
logic from the measured model), and a floor measurement runs end to end on Verilator."""

import dataclasses

import pytest
from amaranth import *
from amaranth.sim import Simulator

from bench.simfloor import PARTS, ArrayFloor, PostProcFloor, fold, measure_floor
from spec.config import PRESETS
from tb.tools import missing_tool


def _fold_int(value: int, bits: int, width: int = 32) -> int:
    out = 0
    for i in range(0, bits, width):
        out ^= (value >> i) & ((1 << width) - 1)
    return out


def test_fold_reaches_every_bit():
    v, out = Signal(70), Signal(32)
    m = Module()
    m.d.comb += out.eq(fold(v))
    sim = Simulator(m)

    async def bench(ctx):
        for bit in range(70):
            ctx.set(v, 1 << bit)
            assert ctx.get(out) == 1 << (bit % 32)
        value = 0x2A_1234_5678_9ABC_DEF0 & ((1 << 70) - 1)
        ctx.set(v, value)
        assert ctx.get(out) == _fold_int(value, 70)

    sim.add_testbench(bench)
    sim.run()


#: tiny with the depthwise mesh (default's array is built with it)
_TINY_MESH = dataclasses.replace(PRESETS["tiny"], dw_mesh=1)


@pytest.mark.parametrize("wrapper, cfg", [(ArrayFloor, PRESETS["tiny"]), (ArrayFloor, _TINY_MESH),
                                          (PostProcFloor, PRESETS["tiny"])],
                         ids=["array", "array-mesh", "postproc"])
def test_signature_is_the_running_fold_of_every_output(wrapper, cfg):
    """``sig`` is the XOR over cycles of every output bit of the block, and the outputs carry
    real, changing results (the LFSR drives work through the block, with the mesh also mesh
    tiles)."""
    top = wrapper(cfg)
    sim = Simulator(top)
    sim.add_clock(1e-8)
    mesh_cycles = 0

    async def bench(ctx):
        nonlocal mesh_cycles
        expect, values = 0, set()
        for _ in range(400 if cfg.dw_mesh else 80):
            if cfg.dw_mesh:
                mesh_cycles += ctx.get(top.block.i_mesh)
            assert ctx.get(top.sig) == expect
            outs = [getattr(top.block, o) for o in wrapper.OUTPUTS]
            word = 0
            for sig in reversed(outs):
                word = (word << len(sig)) | (ctx.get(sig) & ((1 << len(sig)) - 1))
            bits = sum(len(s) for s in outs)
            values.add(word)
            expect ^= _fold_int(word, bits)
            await ctx.tick()
        assert len(values) > 20

    sim.add_testbench(bench)
    sim.run()
    if wrapper is ArrayFloor:
        assert top.mesh == bool(cfg.dw_mesh)
        assert (mesh_cycles > 0) == top.mesh        # mesh tiles run where the mesh is built


@pytest.mark.rtl
def test_floor_measures_each_part_on_verilator(tmp_path):
    reason = missing_tool("verilator")
    if reason:
        pytest.skip(reason)
    for part in ("array", "postproc"):
        row = measure_floor(part, "tiny", tmp_path, cycles=20_000)
        assert (row["part"], row["preset"], row["array"]) == (part, "tiny", "4x4")
        assert row["cycles_per_s"] > 0
    with pytest.raises(ValueError, match="part='nope': must be one of array"):
        measure_floor("nope", "tiny", tmp_path)
    assert PARTS == ("array", "postproc", "accel_idle")
