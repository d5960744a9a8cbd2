"""hw.dma._byte_mask: bit b set when b < the value, for every width, sign and beat size."""

import pytest
from amaranth import Module, Signal, signed, unsigned
from amaranth.sim import Simulator

from hw.dma import _byte_mask


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
