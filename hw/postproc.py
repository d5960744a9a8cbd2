"""Post-processor: int32 accumulator rows to requantised int8 (gemmlowp / TFLite arithmetic)."""

from amaranth import *
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .config import AccelConfig

__all__ = ["PostProc"]

_I32_MIN, _I32_MAX = -(1 << 31), (1 << 31) - 1


class PostProc(wiring.Component):
    """Requantises one accumulator row (``array_cols`` int32 lanes) per cycle.

    Per lane, exactly :func:`hw.golden.requantize` (the parameters are the row's output
    channel's):

    1. ``x = acc + bias`` (int32, wrapping);
    2. a negative ``shift`` shifts ``x`` left (saturating to int32);
    3. ``SRDHM(x, mult)``: ``x * mult / 2**31`` rounded to nearest, ties toward +infinity;
    4. a positive ``shift`` is a rounding right shift (ties away from zero);
    5. ``+ zero_point``, clamped to ``[act_min, act_max]``, as int8.

    Latency: :attr:`latency` cycles from ``i_valid`` to ``o_valid``. The pipeline advances only
    in cycles where ``en`` is high (a stalled memory port holds it); parameters are sampled
    with the row. :class:`hw.dma.StoreEngine` runs every post-processed store through it.

    Parameters
    ----------
    cfg : AccelConfig
        Uses ``array_cols``, ``acc_bits``.

    Members
    -------
    en, i_valid : ``In(1)``; i_data : ``In(array_cols * 32)``
    i_bias : ``In(signed(32))``; i_mult : ``In(unsigned(31))`` (1 .. 2**31 - 1)
    i_shift : ``In(signed(6))`` (-31 .. 31); i_zero_point, i_act_min, i_act_max : ``In(signed(8))``
    o_valid : ``Out(1)``; o_data : ``Out(array_cols * 8)``; o_sum : ``Out(array_cols * 32)``,
    step 1's ``acc + bias`` per lane (the int32 output with a bias), aligned with ``o_data``
    """

    latency = 3

    def __init__(self, cfg: AccelConfig):
        self._cfg = cfg
        cols = cfg.array_cols
        super().__init__({
            "en": In(1),
            "i_valid": In(1),
            "i_data": In(cols * cfg.acc_bits),
            "i_bias": In(signed(32)),
            "i_mult": In(unsigned(31)),
            "i_shift": In(signed(6)),
            "i_zero_point": In(signed(8)),
            "i_act_min": In(signed(8)),
            "i_act_max": In(signed(8)),
            "o_valid": Out(1),
            "o_data": Out(cols * 8),
            "o_sum": Out(cols * cfg.acc_bits),
        })

    def elaborate(self, platform):
        m = Module()
        cols = self._cfg.array_cols

        def stage(name, value):
            reg = Signal.like(value, name=name)
            with m.If(self.en):
                m.d.sync += reg.eq(value)
            return reg

        # parameters travel with their row
        right = Signal(5)
        left = Signal(5)
        m.d.comb += [right.eq(Mux(self.i_shift > 0, self.i_shift, 0)),
                     left.eq(Mux(self.i_shift < 0, -self.i_shift, 0))]
        v1 = stage("v1", self.i_valid)
        mult1, right1, left1 = stage("mult1", self.i_mult), stage("right1", right), \
            stage("left1", left)
        zp1, lo1, hi1 = (stage(f"{n}1", s) for n, s in (("zp", self.i_zero_point),
                                                        ("lo", self.i_act_min),
                                                        ("hi", self.i_act_max)))
        v2 = stage("v2", v1)
        right2, zp2, lo2, hi2 = (stage(f"{n}2", s) for n, s in (("right", right1), ("zp", zp1),
                                                               ("lo", lo1), ("hi", hi1)))
        v3 = stage("v3", v2)
        m.d.comb += self.o_valid.eq(v3)

        out_lanes, sum_lanes = [], []
        for j in range(cols):
            acc = self.i_data[32 * j:32 * (j + 1)].as_signed()
            # stage 1: bias (wrapping), saturating left shift
            x = Signal(signed(32), name=f"x{j}")
            m.d.comb += x.eq((acc + self.i_bias)[:32].as_signed())
            wide = Signal(signed(64), name=f"xl{j}")
            m.d.comb += wide.eq(x << left)
            sat = Signal(signed(32), name=f"sat{j}")
            m.d.comb += sat.eq(Mux(wide > _I32_MAX, _I32_MAX, Mux(wide < _I32_MIN, _I32_MIN, wide)))
            x1 = stage(f"x1_{j}", sat)
            sum_lanes.append(stage(f"s3_{j}", stage(f"s2_{j}", stage(f"s1_{j}", x))))
            # stage 2: rounding doubling high multiply, truncating division by 2**31
            prod = Signal(signed(64), name=f"prod{j}")
            m.d.comb += prod.eq(x1 * mult1)
            nudged = Signal(signed(65), name=f"nudged{j}")
            m.d.comb += nudged.eq(prod + Mux(prod >= 0, 1 << 30, 1 - (1 << 30)))
            floor = Signal(signed(34), name=f"floor{j}")
            m.d.comb += floor.eq(nudged >> 31)
            high = Signal(signed(33), name=f"high{j}")
            m.d.comb += high.eq(floor + ((nudged < 0) & (nudged[:31] != 0)))
            h2 = stage(f"h2_{j}", high)
            # stage 3: rounding right shift, zero point, clamp
            mask = Signal(32, name=f"mask{j}")
            m.d.comb += mask.eq((Const(1, 33) << right2) - 1)
            rem = Signal(32, name=f"rem{j}")
            m.d.comb += rem.eq(h2[:32] & mask)
            thr = Signal(32, name=f"thr{j}")
            m.d.comb += thr.eq((mask >> 1) + (h2 < 0))
            y = Signal(signed(34), name=f"y{j}")
            m.d.comb += y.eq((h2 >> right2) + (rem > thr) + zp2)
            clamped = Signal(signed(8), name=f"q{j}")
            m.d.comb += clamped.eq(Mux(y < lo2, lo2, Mux(y > hi2, hi2, y)))
            out_lanes.append(stage(f"out{j}", clamped))
        m.d.comb += [self.o_data.eq(Cat(*out_lanes)), self.o_sum.eq(Cat(*sum_lanes))]
        return m
