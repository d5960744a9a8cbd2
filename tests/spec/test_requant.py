"""Requantisation golden model against an independent scalar reference of gemmlowp's integer
arithmetic, and the float-scale conversion."""

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from spec.golden import requantize
from planner.requant import activation_bounds, quantize_multiplier

I32_MIN, I32_MAX = -(1 << 31), (1 << 31) - 1


def ref_srdhm(a: int, b: int) -> int:
    """gemmlowp SaturatingRoundingDoublingHighMul, transcribed with Python ints."""
    if a == b == I32_MIN:
        return I32_MAX
    ab = a * b
    nudge = (1 << 30) if ab >= 0 else (1 - (1 << 30))
    total = ab + nudge
    return int(total / (1 << 31)) if abs(total) < (1 << 52) else (
        total // (1 << 31) if total >= 0 else -((-total) // (1 << 31)))


def ref_rdbp(x: int, exponent: int) -> int:
    mask = (1 << exponent) - 1
    remainder = x & mask
    threshold = (mask >> 1) + (1 if x < 0 else 0)
    return (x >> exponent) + (1 if remainder > threshold else 0)


def ref_requant(acc, bias, mult, shift, zp, lo, hi):
    x = acc + bias
    x = (x + (1 << 31)) % (1 << 32) - (1 << 31)
    if shift < 0:
        x = max(I32_MIN, min(I32_MAX, x << -shift))
    y = ref_rdbp(ref_srdhm(x, mult), max(shift, 0)) + zp
    return max(lo, min(hi, y))


def test_requant_srdhm_reference_is_exact_division():
    # the reference itself: truncating division of exact integers
    for a, b in [(I32_MIN, I32_MIN), (I32_MAX, I32_MAX), (-7, 3 << 29), (5, -(1 << 30))]:
        total = a * b + ((1 << 30) if a * b >= 0 else 1 - (1 << 30))
        want = I32_MAX if a == b == I32_MIN else math.trunc(total / (1 << 31)) \
            if abs(total) < 1 << 52 else None
        if want is not None:
            assert ref_srdhm(a, b) == want


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), zp=st.integers(-128, 127))
def test_requant_matches_scalar_reference(seed, zp):
    rng = np.random.default_rng(seed)
    m, n = 5, 7
    edges = np.array([I32_MIN, I32_MAX, 0, -1, 1, 1 << 30, -(1 << 30)], dtype=np.int64)
    acc = rng.integers(I32_MIN, I32_MAX, size=(m, n), endpoint=True, dtype=np.int64)
    acc.flat[:len(edges)] = edges
    acc = acc.astype(np.int32)
    bias = rng.integers(-(1 << 20), 1 << 20, size=m)
    mult = rng.integers(1 << 30, 1 << 31, size=m)
    mult[0] = I32_MAX
    shift = rng.integers(-3, 32, size=m)
    lo, hi = sorted(int(v) for v in rng.integers(-128, 128, size=2))
    got = requantize(acc, multiplier=mult, shift=shift, bias=bias, zero_point=zp,
                     act_min=lo, act_max=hi)
    for i in range(m):
        for j in range(n):
            want = ref_requant(int(acc[i, j]), int(bias[i]), int(mult[i]), int(shift[i]), zp,
                               lo, hi)
            assert got[i, j] == want, (i, j, int(acc[i, j]), int(mult[i]), int(shift[i]))


@settings(max_examples=40, deadline=None)
@given(scale=st.floats(2.0**-24, 0.99), seed=st.integers(0, 2**32 - 1))
def test_requant_is_within_one_lsb_of_the_real_product(scale, seed):
    rng = np.random.default_rng(seed)
    mult, shift = quantize_multiplier(scale)
    acc = rng.integers(-(1 << 24), 1 << 24, size=(3, 50)).astype(np.int32)
    got = requantize(acc, multiplier=mult, shift=shift, act_min=-128, act_max=127)
    real = np.clip(acc.astype(np.float64) * scale, -128, 127)
    assert np.all(np.abs(got.astype(np.float64) - real) <= 1.0)


def test_requant_ties_follow_gemmlowp():
    # scale 0.5 with shift 0: the high multiply rounds ties toward +infinity
    mult, shift = quantize_multiplier(0.5)
    assert (mult, shift) == (1 << 30, 0)
    acc = np.array([[3, -3, 1, -1, 5, -5]], dtype=np.int32)
    assert requantize(acc, multiplier=mult, shift=shift).tolist() == [[2, -1, 1, 0, 3, -2]]
    # scale 0.25 = 0.5 * 2**-1: the multiply is exact (x/2), the shift rounds ties away from 0
    mult, shift = quantize_multiplier(0.25)
    acc = np.array([[4, -4, 6, -6, 2, -2]], dtype=np.int32)
    assert requantize(acc, multiplier=mult, shift=shift).tolist() == [[1, -1, 2, -2, 1, -1]]


def test_requant_refuses_out_of_range_parameters():
    acc = np.zeros((2, 2), dtype=np.int32)
    with pytest.raises(ValueError, match=r"shift must be in \[-31, 31\]"):
        requantize(acc, multiplier=1 << 30, shift=40)
    with pytest.raises(ValueError, match=r"zero_point must be in \[-128, 127\], not 200"):
        requantize(acc, multiplier=1 << 30, shift=0, zero_point=200)
    with pytest.raises(ValueError, match="act_min=5 > act_max=1"):
        requantize(acc, multiplier=1 << 30, shift=0, act_min=5, act_max=1)
    with pytest.raises(ValueError, match="2-D int32"):
        requantize(acc.astype(np.int64), multiplier=1 << 30, shift=0)


@pytest.mark.parametrize("scale, want", [
    (0.5, (1 << 30, 0)), (1.0, (1 << 30, -1)), (0.25, (1 << 30, 1)),
    (0.75, (3 << 29, 0)), (2.0 ** -20, (1 << 30, 19))])
def test_requant_quantize_multiplier_known_values(scale, want):
    assert quantize_multiplier(scale) == want


@given(scale=st.floats(2.0**-31, 2.0**30))
def test_requant_quantize_multiplier_represents_the_scale(scale):
    mult, shift = quantize_multiplier(scale)
    assert (1 << 30) <= mult < (1 << 31)
    assert math.isclose(mult * 2.0 ** (-31 - shift), scale, rel_tol=2.0 ** -30)


@pytest.mark.parametrize("bad", [0.0, -1.0, float("inf"), float("nan"), 2.0 ** 40, 2.0 ** -40])
def test_requant_quantize_multiplier_refuses(bad):
    with pytest.raises(ValueError, match="scale"):
        quantize_multiplier(bad)


def test_requant_activation_bounds():
    assert activation_bounds("none", 3, 0.1) == (-128, 127)
    assert activation_bounds("relu", -5, 0.1) == (-5, 127)
    assert activation_bounds("relu6", -128, 0.05) == (-128, -8)
    assert activation_bounds("relu6", 100, 0.01) == (100, 127)
    with pytest.raises(ValueError, match="kind must be one of"):
        activation_bounds("gelu", 0, 0.1)
