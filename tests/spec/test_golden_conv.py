"""conv2d_int8: bit-exact against a naive 7-loop model, wrap-around, input validation."""

import numpy as np
import pytest

from spec.golden import conv2d_int8


def _wrap32(v: int) -> int:
    v &= 0xFFFF_FFFF
    return v - (1 << 32) if v >> 31 else v


def naive_conv(x, w, stride, pads, dilation, groups):
    """Seven nested loops over (b, o, p, q, c, r, s); taps outside the input read zero."""
    n, c, h, wd = x.shape
    k, cg, r_, s_ = w.shape
    sh, sw = stride
    dh, dw = dilation
    top, left, bottom, right = pads
    p_ = (h + top + bottom - dh * (r_ - 1) - 1) // sh + 1
    q_ = (wd + left + right - dw * (s_ - 1) - 1) // sw + 1
    m = k // groups
    out = np.zeros((n, k, p_, q_), dtype=np.int64)
    xi, wi = x.astype(int).tolist(), w.astype(int).tolist()
    for b in range(n):
        for o in range(k):
            g = o // m
            for p in range(p_):
                for q in range(q_):
                    acc = 0
                    for cc in range(cg):
                        for r in range(r_):
                            for s in range(s_):
                                hh = p * sh + r * dh - top
                                ww = q * sw + s * dw - left
                                if 0 <= hh < h and 0 <= ww < wd:
                                    acc += xi[b][g * cg + cc][hh][ww] * wi[o][cc][r][s]
                    out[b, o, p, q] = _wrap32(acc)
    return out


CASES = [
    # (N, C, H, W, K, R, S, stride, pads(t,l,b,r), dilation, groups)
    (1, 3, 7, 6, 4, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 1),
    (2, 4, 8, 9, 6, 3, 3, (2, 2), (1, 0, 2, 1), (1, 1), 2),
    (1, 5, 9, 7, 5, 3, 3, (1, 2), (2, 2, 0, 1), (2, 2), 5),      # depthwise, dilated
    (2, 3, 6, 8, 2, 1, 3, (1, 1), (0, 1, 0, 2), (1, 1), 1),      # 1x3
    (1, 2, 8, 5, 3, 3, 1, (2, 1), (1, 0, 2, 0), (1, 1), 1),      # 3x1
    (1, 2, 11, 10, 2, 5, 5, (2, 2), (2, 3, 1, 2), (1, 1), 1),
    (1, 1, 12, 12, 2, 7, 7, (2, 2), (3, 3, 3, 3), (1, 1), 1),
    (2, 6, 5, 5, 9, 1, 1, (1, 1), (0, 0, 0, 0), (1, 1), 3),
    (1, 4, 9, 9, 4, 2, 3, (3, 2), (1, 2, 0, 0), (2, 1), 2),
]


@pytest.mark.parametrize("case", CASES)
def test_golden_conv_matches_naive_loops(case):
    n, c, h, wd, k, r, s, stride, pads, dil, groups = case
    rng = np.random.default_rng(hash(case) & 0xFFFF)
    x = rng.integers(-128, 128, size=(n, c, h, wd), dtype=np.int8)
    w = rng.integers(-128, 128, size=(k, c // groups, r, s), dtype=np.int8)
    got = conv2d_int8(x, w, stride=stride, pads=pads, dilation=dil, groups=groups)
    assert got.dtype == np.int32
    assert got.tolist() == naive_conv(x, w, stride, pads, dil, groups).tolist()


def test_golden_conv_wraps_like_int32():
    # 9 * 16384 * c just past 2**31: every output wraps negative, exactly as the 32-bit adders
    c = (1 << 31) // (9 * 16384) + 1
    x = np.full((1, c, 3, 3), -128, dtype=np.int8)
    w = np.full((1, c, 3, 3), -128, dtype=np.int8)
    got = conv2d_int8(x, w)
    assert got.shape == (1, 1, 1, 1)
    assert got[0, 0, 0, 0] == _wrap32(9 * 16384 * c) < 0


def test_golden_conv_resnet_layer_spot_checks():
    rng = np.random.default_rng(1)
    x = rng.integers(-128, 128, size=(1, 64, 56, 56), dtype=np.int8)
    w = rng.integers(-128, 128, size=(64, 64, 3, 3), dtype=np.int8)
    out = conv2d_int8(x, w, pads=(1, 1, 1, 1))
    assert out.shape == (1, 64, 56, 56)
    # spot-check one interior and one corner pixel against the definition
    for b, o, p, q in [(0, 5, 20, 31), (0, 63, 0, 55)]:
        acc = 0
        for r in range(3):
            for s in range(3):
                hh, ww = p + r - 1, q + s - 1
                if 0 <= hh < 56 and 0 <= ww < 56:
                    acc += int(np.dot(x[0, :, hh, ww].astype(np.int64), w[o, :, r, s]))
        assert out[b, o, p, q] == acc


@pytest.mark.parametrize("kwargs, word", [
    (dict(x=np.zeros((1, 2, 3, 3), np.int16)), "x"),
    (dict(w=np.zeros((1, 2, 3), np.int8)), "w"),
    (dict(stride=(0, 1)), "stride"),
    (dict(dilation=(1,)), "dilation"),
    (dict(pads=(1, 1, 1)), "pads"),
    (dict(pads=(-1, 0, 0, 0)), "pads"),
    (dict(groups=3), "groups"),
    (dict(w=np.zeros((2, 1, 3, 3), np.int8)), "groups"),
    (dict(w=np.zeros((2, 2, 5, 5), np.int8)), "fit"),
])
def test_golden_conv_rejects_bad_input(kwargs, word):
    args = dict(x=np.zeros((1, 2, 3, 3), np.int8), w=np.zeros((2, 2, 3, 3), np.int8))
    args.update(kwargs)
    x, w = args.pop("x"), args.pop("w")
    with pytest.raises(ValueError, match=word):
        conv2d_int8(x, w, **args)
