"""gemm_int8: bit-exact against a naive int32 model, wrap-around, input validation."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.extra.numpy import arrays

from spec.golden import gemm_int8


def _wrap32(x: int) -> int:
    x &= 0xFFFF_FFFF
    return x - (1 << 32) if x >> 31 else x


def naive(a, b):
    m, k = a.shape
    n = b.shape[1]
    return [[_wrap32(sum(int(a[i, kk]) * int(b[kk, j]) for kk in range(k))) for j in range(n)]
            for i in range(m)]


@st.composite
def operands(draw):
    m, k, n = (draw(st.integers(1, 6)) for _ in range(3))
    elems = st.integers(-128, 127)
    a = draw(arrays(np.int8, (m, k), elements=elems))
    b = draw(arrays(np.int8, (k, n), elements=elems))
    return a, b


@settings(max_examples=200, deadline=None)
@given(operands())
def test_golden_gemm_matches_naive_loop(ab):
    a, b = ab
    c = gemm_int8(a, b)
    assert c.dtype == np.int32 and c.shape == (a.shape[0], b.shape[1])
    assert c.tolist() == naive(a, b)


def test_golden_gemm_random_seeded():
    rng = np.random.default_rng(7)
    for m, k, n in [(1, 1, 1), (3, 1, 5), (4, 7, 4), (9, 13, 2)]:
        a = rng.integers(-128, 128, size=(m, k), dtype=np.int8)
        b = rng.integers(-128, 128, size=(k, n), dtype=np.int8)
        assert gemm_int8(a, b).tolist() == naive(a, b)


def test_golden_gemm_extremes_k1():
    a = np.array([[-128], [127], [-128], [0]], dtype=np.int8)
    b = np.array([[-128, 127, -1]], dtype=np.int8)
    assert gemm_int8(a, b).tolist() == [
        [16384, -16256, 128],
        [-16256, 16129, -127],
        [16384, -16256, 128],
        [0, 0, 0]]


@pytest.mark.parametrize("k, a_val, b_val", [
    ((1 << 17) + 5, -128, -128),    # 16384 * k just past 2**31: wraps negative
    (1 << 17, -128, -128),          # exactly 2**31 -> -2**31
    ((1 << 18) + 3, -128, 127),     # far below -2**31: wraps positive
    ((1 << 18) + 1, 127, 127),
])
def test_golden_gemm_wraps_like_int32(k, a_val, b_val):
    a = np.full((2, k), a_val, dtype=np.int8)
    b = np.full((k, 3), b_val, dtype=np.int8)
    exact = k * a_val * b_val
    assert not -(1 << 31) <= exact < 1 << 31      # the case really overflows
    expected = (exact + (1 << 31)) % (1 << 32) - (1 << 31)
    c = gemm_int8(a, b)
    assert c.dtype == np.int32
    assert (c == expected).all(), (c[0, 0], expected)


def test_golden_gemm_wrap_is_order_independent():
    # partial sums overflow and come back: the final value is exact
    k = 1 << 18
    a = np.full((1, 2 * k), -128, dtype=np.int8)
    b = np.concatenate([np.full((k, 1), -128), np.full((k, 1), 127)]).astype(np.int8)
    assert gemm_int8(a, b).tolist() == [[_wrap32(k * 16384 - k * 16256)]]


def test_golden_gemm_does_not_modify_inputs():
    a = np.array([[1, -2]], dtype=np.int8)
    b = np.array([[3], [-128]], dtype=np.int8)
    a0, b0 = a.copy(), b.copy()
    gemm_int8(a, b)
    assert (a == a0).all() and (b == b0).all()


def test_golden_gemm_empty_k_gives_zeros():
    c = gemm_int8(np.zeros((2, 0), np.int8), np.zeros((0, 3), np.int8))
    assert c.dtype == np.int32 and c.shape == (2, 3) and not c.any()


@pytest.mark.parametrize("dtype", [np.int16, np.int32, np.int64, np.uint8, np.float32, bool])
def test_golden_gemm_rejects_non_int8(dtype):
    good = np.ones((2, 2), np.int8)
    bad = np.ones((2, 2), dtype)
    with pytest.raises(ValueError, match="A must be int8"):
        gemm_int8(bad, good)
    with pytest.raises(ValueError, match="B must be int8"):
        gemm_int8(good, bad)


def test_golden_gemm_rejects_python_lists():
    # lists become int64: the caller must say int8
    with pytest.raises(ValueError, match="must be int8"):
        gemm_int8([[1]], [[1]])


@pytest.mark.parametrize("a_shape, b_shape", [
    ((2, 3), (2, 3)),        # inner dimensions differ
    ((2, 3), (4, 2)),
    ((3,), (3, 2)),          # 1-D A
    ((2, 3), (3,)),          # 1-D B
    ((1, 2, 3), (3, 2)),     # 3-D A
    ((2, 3), (1, 3, 2)),     # 3-D B
    ((), (1, 1)),            # scalar
])
def test_golden_gemm_rejects_bad_shapes(a_shape, b_shape):
    with pytest.raises(ValueError, match="gemm_int8 needs A"):
        gemm_int8(np.zeros(a_shape, np.int8), np.zeros(b_shape, np.int8))


@pytest.mark.parametrize("shape", [(7, 300, 5), (3, (1 << 17) + 9, 2), (1, 1, 1)])
def test_golden_gemm_float64_path_equals_the_int64_path(shape, monkeypatch):
    """The float64 (BLAS) sum is the exact int64 sum, wrapped the same way: random full-range
    operands, and a k long enough to wrap; the int64 path is what k past 2**39 takes."""
    import spec.golden

    m, k, n = shape
    rng = np.random.default_rng(k)
    a = rng.integers(-128, 128, size=(m, k), dtype=np.int8)
    b = rng.integers(-128, 128, size=(k, n), dtype=np.int8)
    a[0, :] = -128                                   # a row whose sums are all large
    b[:, 0] = -128
    fast = gemm_int8(a, b)
    monkeypatch.setattr(spec.golden, "_EXACT_F64_K", 0)
    slow = gemm_int8(a, b)
    assert fast.dtype == slow.dtype == np.int32
    assert (fast == slow).all()
    exact = (a.astype(np.int64) @ b.astype(np.int64))[0, 0]
    assert fast[0, 0] == (exact + (1 << 31)) % (1 << 32) - (1 << 31)
