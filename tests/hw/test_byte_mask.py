"""hw.dma._byte_mask: bit b set when b < the value, for every width, sign and beat size."""

import pytest
from amaranth import Const, Module, Signal, signed, unsigned
from amaranth.sim import Simulator

from hw.dma import _byte_mask, _byte_mask_from_parts, _byte_mask_parts


@pytest.mark.parametrize("shape,beat", [(signed(34), 32), (signed(34), 64), (signed(17), 8),
                                        (unsigned(6), 16), (signed(5), 16), (unsigned(12), 64)])
def test_byte_mask_matches_the_compare(shape, beat):
    x = Signal(shape)
    out = Signal(beat)
    m = Module()
    m.d.comb += out.eq(_byte_mask(x, beat))
    lo = -(1 << (shape.width - 1)) if shape.signed else 0
    hi = (1 << (shape.width - 1)) if shape.signed else (1 << shape.width)
    values = sorted({v for v in range(-300, 300)} | {lo, hi - 1, 1 << 10, (1 << 10) + 5}
                    | {2 ** k + d for k in range(shape.width) for d in (-1, 0, 1)})
    values = [v for v in values if lo <= v < hi]

    async def bench(ctx):
        for v in values:
            ctx.set(x, v)
            assert ctx.get(out) == sum(1 << b for b in range(beat) if b < v), v

    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()


def _values(shape):
    lo = -(1 << (shape.width - 1)) if shape.signed else 0
    hi = (1 << (shape.width - 1)) if shape.signed else (1 << shape.width)
    return lo, hi


@pytest.mark.parametrize("beat", [1, 2, 4, 8, 16, 32, 64, 12])
@pytest.mark.parametrize("shape", [signed(1), signed(2), signed(4), signed(6), signed(7),
                                   signed(8), signed(9), unsigned(1), unsigned(3),
                                   unsigned(6), unsigned(7), unsigned(8)])
def test_byte_mask_parts_registered_exhaustive(shape, beat):
    """_byte_mask_parts, each part through its own signal (a pipeline register's stand-in),
    then _byte_mask_from_parts: the plain definition for every value of the shape; so is the
    split StoreEngine registers (`big`, and the mask from the sign and low bits without it,
    ORed a stage later); and _byte_mask itself agrees."""
    x = Signal(shape)
    parts = _byte_mask_parts(x, beat)
    regs = [Signal(len(p)) for p in parts]
    out, plain, low, late = Signal(beat), Signal(beat), Signal(beat), Signal(beat)
    m = Module()
    m.d.comb += [r.eq(p) for r, p in zip(regs, parts)]
    m.d.comb += [out.eq(_byte_mask_from_parts(*regs, beat)), plain.eq(_byte_mask(x, beat)),
                 low.eq(_byte_mask_from_parts(parts[0], Const(0, 1), parts[2], beat)),
                 late.eq(regs[1].replicate(beat) | low)]
    lo, hi = _values(shape)

    async def bench(ctx):
        for v in range(lo, hi):
            ctx.set(x, v)
            want = sum(1 << b for b in range(beat) if b < v)
            assert ctx.get(out) == want, v
            assert ctx.get(plain) == want, v
            assert ctx.get(late) == want, v

    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()

