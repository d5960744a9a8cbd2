"""Quantisation helpers (planner.requant, planner.zero_points) and the golden models' argument checks:
every refusal names the parameter and states the allowed range or set."""

import math

import numpy as np
import pytest

from spec.golden import conv2d_int8, gemm_int8, requantize
from planner.zero_points import (exact_int, exact_int8, fold_conv_float, fold_conv_integer,
                           fold_matmul_integer, resolve_conv_pads)
from planner.requant import activation_bounds, quantize_multiplier

from .util import refused

I8 = np.int8


# -- planner.requant ---------------------------------------------------------------------------

@pytest.mark.parametrize("scale", [0, -1.0, math.inf, math.nan, "0.5", None])
def test_quantize_multiplier_scale(scale):
    with refused(ValueError, f"scale must be a finite positive number, not {scale!r}"):
        quantize_multiplier(scale)


@pytest.mark.parametrize("scale, shift", [(2.0 ** -33, 32), (2.0 ** 31, -32), (1e300, -997)])
def test_quantize_multiplier_shift(scale, shift):
    with refused(ValueError, f"scale={scale!r} needs shift={shift}, outside [-31, 31]: scale "
                             f"must be in [2**-32, 2**31)"):
        quantize_multiplier(scale)


@pytest.mark.parametrize("zp", [-129, 128, 1000])
def test_activation_zero_point(zp):
    with refused(ValueError, f"zero_point must be in [-128, 127], not {zp}"):
        activation_bounds("relu", zp, 0.1)


@pytest.mark.parametrize("out_scale", [0.0, -0.5, math.inf, math.nan])
def test_activation_out_scale(out_scale):
    with refused(ValueError, f"out_scale must be a finite positive number, not {out_scale!r}"):
        activation_bounds("relu6", 0, out_scale)


@pytest.mark.parametrize("kind", ["RELU", "sigmoid", "", None])
def test_activation_kind(kind):
    with refused(ValueError, f"kind must be one of none, relu, relu6, not {kind!r}"):
        activation_bounds(kind, 0, 0.1)


# -- planner.zero_points -----------------------------------------------------------------------------

@pytest.mark.parametrize("values", [[0.5], [1.0, math.nan], [math.inf]])
def test_exact_int_integral(values):
    with refused(ValueError, "X: float values must be integral to run on the int8 datapath "
                             "exactly; non-integral values"):
        exact_int8("X", np.array(values))


@pytest.mark.parametrize("arr", [np.array(["a"]), np.array([1j]), np.array([None])])
def test_exact_int_dtype(arr):
    with refused(ValueError, f"X: dtype {arr.dtype} is not numeric (bool, int, uint or float)"):
        exact_int("X", arr)


@pytest.mark.parametrize("values, got", [([-129, 0], "[-129, 0]"), ([3, 128], "[3, 128]"),
                                         ([300.0], "[300, 300]")])
def test_exact_int_range(values, got):
    with refused(ValueError, f"W: values must be in [-128, 127], got range {got}"):
        exact_int8("W", np.array(values))


@pytest.mark.parametrize("pads", [[0, 0, 0], [0, 0, 0, -1], [1, 1, 1, 1, 1, 1]])
def test_conv_pads(pads):
    with refused(ValueError, f"Conv pads must be 4 ints >= 0 for a 2-D conv, not {pads!r}"):
        resolve_conv_pads("NOTSET", pads, (4, 4), (3, 3), (1, 1), (1, 1))


@pytest.mark.parametrize("auto_pad", ["SAME", "same_upper", b"FULL"])
def test_conv_auto_pad(auto_pad):
    shown = auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad
    with refused(ValueError, f"Conv auto_pad {shown!r} is not NOTSET, SAME_UPPER, SAME_LOWER "
                             f"or VALID"):
        resolve_conv_pads(auto_pad, None, (4, 4), (3, 3), (1, 1), (1, 1))


@pytest.mark.parametrize("bias", [np.zeros(3), np.zeros((4, 1)), np.zeros(())])
def test_conv_bias_shape(bias):
    with refused(ValueError, f"Conv bias B must have shape (4,), not {np.asarray(bias).shape}"):
        fold_conv_float(np.zeros((1, 2, 4, 4)), np.zeros((4, 2, 3, 3)), bias)


@pytest.mark.parametrize("dtype", [np.int16, np.float32, np.uint16])
def test_conv_integer_x_dtype(dtype):
    with refused(ValueError, f"ConvInteger x must be uint8 or int8, not {np.dtype(dtype)}"):
        fold_conv_integer(np.zeros((1, 2, 4, 4), dtype), np.zeros((4, 2, 3, 3), I8))


@pytest.mark.parametrize("dtype", [np.int16, np.float64])
def test_conv_integer_w_dtype(dtype):
    with refused(ValueError, f"ConvInteger w must be uint8 or int8, not {np.dtype(dtype)}"):
        fold_conv_integer(np.zeros((1, 2, 4, 4), I8), np.zeros((4, 2, 3, 3), dtype))


def test_conv_integer_zero_point_dtype():
    with refused(ValueError, "ConvInteger x_zero_point dtype int8 must match its operand's "
                             "uint8"):
        fold_conv_integer(np.zeros((1, 2, 4, 4), np.uint8), np.zeros((4, 2, 3, 3), I8),
                          x_zp=np.int8(3))


@pytest.mark.parametrize("x_zp, w_zp, name, want, got", [
    (np.zeros(2, I8), None, "ConvInteger x_zero_point", "()", "(2,)"),
    (None, np.zeros(3, I8), "ConvInteger w_zero_point", "(4,)", "(3,)"),
    (None, np.zeros((4, 1), I8), "ConvInteger w_zero_point", "(4,)", "(4, 1)"),
])
def test_conv_integer_zero_point_shape(x_zp, w_zp, name, want, got):
    with refused(ValueError, f"{name} must be a scalar or have shape {want}, not {got}"):
        fold_conv_integer(np.zeros((1, 2, 4, 4), I8), np.zeros((4, 2, 3, 3), I8), x_zp, w_zp)


@pytest.mark.parametrize("w_zp, span", [(np.int8(-128), "[128, 128]"), (np.int8(1), "[-1, -1]")])
def test_conv_integer_weight_span(w_zp, span):
    w = np.zeros((4, 2, 3, 3), I8)
    if span == "[-1, -1]":
        w = np.full((4, 2, 3, 3), -128, I8)
        span = "[-129, -129]"
    with refused(ValueError, f"ConvInteger: w - w_zero_point spans {span}, outside int8 "
                             f"[-128, 127]"):
        fold_conv_integer(np.zeros((1, 2, 4, 4), I8), w, None, w_zp)


@pytest.mark.parametrize("a, b", [(np.zeros((2, 3), I8), np.zeros((4, 2), I8)),
                                  (np.zeros((2, 3, 1), I8), np.zeros((3, 2), I8)),
                                  (np.zeros(3, I8), np.zeros((3, 2), I8))])
def test_matmul_integer_shapes(a, b):
    with refused(ValueError, f"MatMulInteger: only 2-D A (M x K) @ B (K x N) is supported, got "
                             f"{a.shape} and {b.shape}"):
        fold_matmul_integer(a, b)


@pytest.mark.parametrize("which", ["A", "B"])
def test_matmul_integer_dtype(which):
    a, b = np.zeros((2, 3), I8), np.zeros((3, 2), I8)
    if which == "A":
        a = a.astype(np.int32)
    else:
        b = b.astype(np.float32)
    bad = (a if which == "A" else b).dtype
    with refused(ValueError, f"MatMulInteger {which} must be uint8 or int8, not {bad}"):
        fold_matmul_integer(a, b)


@pytest.mark.parametrize("a_zp, b_zp, name, want, got", [
    (np.zeros(3, I8), None, "MatMulInteger a_zero_point", "(2,)", "(3,)"),
    (None, np.zeros(5, I8), "MatMulInteger b_zero_point", "(4,)", "(5,)"),
])
def test_matmul_integer_zero_point_shape(a_zp, b_zp, name, want, got):
    with refused(ValueError, f"{name} must be a scalar or have shape {want}, not {got}"):
        fold_matmul_integer(np.zeros((2, 3), I8), np.zeros((3, 4), I8), a_zp, b_zp)


# -- spec.golden ---------------------------------------------------------------------------------

@pytest.mark.parametrize("a, b", [(np.zeros((2, 3), I8), np.zeros((2, 3), I8)),
                                  (np.zeros(3, I8), np.zeros((3, 1), I8))])
def test_gemm_int8_shapes(a, b):
    with refused(ValueError, f"gemm_int8 needs A (m x k) and B (k x n), got {a.shape} and "
                             f"{b.shape}"):
        gemm_int8(a, b)


@pytest.mark.parametrize("which", ["A", "B"])
def test_gemm_int8_dtype(which):
    a, b = np.zeros((2, 3), I8), np.zeros((3, 2), I8)
    args = (a.astype(np.int16), b) if which == "A" else (a, b.astype(np.uint8))
    with refused(ValueError, f"gemm_int8: {which} must be int8, not "
                             f"{'int16' if which == 'A' else 'uint8'}"):
        gemm_int8(*args)


X = np.zeros((1, 2, 5, 5), I8)
W = np.zeros((4, 2, 3, 3), I8)


@pytest.mark.parametrize("name, arr, other", [("x", X.astype(np.int32), W),
                                              ("w", W.astype(np.uint8), X)])
def test_conv2d_dtype(name, arr, other):
    x, w = (arr, other) if name == "x" else (other, arr)
    with refused(ValueError, f"conv2d_int8: {name} must be int8, not {arr.dtype}"):
        conv2d_int8(x, w)


@pytest.mark.parametrize("name, arr", [("x", X[0]), ("w", W[None])])
def test_conv2d_rank(name, arr):
    x, w = (arr, W) if name == "x" else (X, arr)
    with refused(ValueError, f"conv2d_int8: {name} must be 4-D, not shape {arr.shape}"):
        conv2d_int8(x, w)


@pytest.mark.parametrize("name, value, lo", [("stride", (0, 1), 1), ("stride", 2, 1),
                                             ("dilation", (1, 1, 1), 1), ("dilation", (1.0, 1), 1)])
def test_conv2d_pairs(name, value, lo):
    with refused(ValueError, f"conv2d_int8: {name} must be two ints >= {lo}, not {value!r}"):
        conv2d_int8(X, W, **{name: value})


@pytest.mark.parametrize("pads", [(0, 0, 0), (0, 0, 0, -1), 1, (0.0, 0, 0, 0)])
def test_conv2d_pads(pads):
    shown = tuple(pads) if isinstance(pads, tuple) else ()
    with refused(ValueError, "conv2d_int8: pads must be four ints >= 0 (top, left, bottom, "
                             f"right), not {shown!r}"):
        conv2d_int8(X, W, pads=pads)


@pytest.mark.parametrize("groups", [0, 3, 1.0])
def test_conv2d_groups(groups):
    with refused(ValueError, f"conv2d_int8: groups={groups!r} must be an int >= 1 dividing C=2 "
                             f"and K=4"):
        conv2d_int8(X, W, groups=groups)


def test_conv2d_channels_per_group():
    with refused(ValueError, "conv2d_int8: w has 1 input channels per group; x has C=2 and "
                             "groups=1, so it needs 2"):
        conv2d_int8(X, np.zeros((4, 1, 3, 3), I8))


@pytest.mark.parametrize("x, w", [(np.zeros((0, 2, 5, 5), I8), W),
                                  (X, np.zeros((4, 2, 0, 3), I8))])
def test_conv2d_empty(x, w):
    with refused(ValueError, f"conv2d_int8: every dim of x and w must be >= 1, not x {x.shape} "
                             f"and w {w.shape}"):
        conv2d_int8(x, w)


@pytest.mark.parametrize("kw, fragment", [
    (dict(), "kernel 7x3 (dilation 1x1) does not fit the padded input 5x5"),
    (dict(dilation=(2, 1)), "kernel 7x3 (dilation 2x1) does not fit the padded input 5x5"),
])
def test_conv2d_kernel_fit(kw, fragment):
    with refused(ValueError, f"conv2d_int8: dilated {fragment}"):
        conv2d_int8(X, np.zeros((4, 2, 7, 3), I8), **kw)


ACC = np.zeros((2, 3), np.int32)


@pytest.mark.parametrize("acc", [np.zeros(3, np.int32), np.zeros((2, 3), np.int64)])
def test_requantize_acc(acc):
    with refused(ValueError, f"requantize: acc must be a 2-D int32 array, not {acc.dtype} "
                             f"{acc.shape}"):
        requantize(acc, multiplier=1 << 30, shift=0)


@pytest.mark.parametrize("name, bad, lo, hi", [
    ("multiplier", 0, 1, 2**31 - 1), ("multiplier", 2**31, 1, 2**31 - 1),
    ("shift", 32, -31, 31), ("shift", [0, -32], -31, 31),
    ("bias", 2**31, -2**31, 2**31 - 1), ("bias", [-2**31 - 1, 0], -2**31, 2**31 - 1)])
def test_requantize_per_row(name, bad, lo, hi):
    kw = {"multiplier": 1 << 30, "shift": 0, name: bad}
    with refused(ValueError, f"requantize: {name} must be in [{lo}, {hi}]"):
        requantize(ACC, **kw)


@pytest.mark.parametrize("name", ["zero_point", "act_min", "act_max"])
@pytest.mark.parametrize("bad", [-129, 128])
def test_requantize_int8_params(name, bad):
    with refused(ValueError, f"requantize: {name} must be in [-128, 127], not {bad}"):
        requantize(ACC, multiplier=1 << 30, shift=0, **{name: bad})


@pytest.mark.parametrize("name, bad, message", [
    ("shift", 1.9, "shift must be integers, not float64 1.9"),
    ("bias", np.array([0.9, 0.1]), "bias must be integers, not float64"),
    ("multiplier", "x", "multiplier must be integers, not <U1 'x'"),
    ("multiplier", np.full(3, 1 << 30), "multiplier must be a scalar or one per output row, "
                                         "shape (2,), not shape (3,)"),
])
def test_requantize_per_row_kind(name, bad, message):
    """(A float shift of 1.9 acted as 1, silently; a wrong length was numpy's broadcast
    error, naming no parameter.)"""
    kw = {"multiplier": 1 << 30, "shift": 0, name: bad}
    with refused(ValueError, f"requantize: {message}"):
        requantize(ACC, **kw)


@pytest.mark.parametrize("name", ["zero_point", "act_min", "act_max"])
def test_requantize_int8_param_kind(name):
    with refused(ValueError, f"requantize: {name} must be an int, not 1.5"):
        requantize(ACC, multiplier=1 << 30, shift=0, **{name: 1.5})


def test_requantize_act_order():
    with refused(ValueError, "requantize: act_min=5 > act_max=1; act_min must be <= act_max"):
        requantize(ACC, multiplier=1 << 30, shift=0, act_min=5, act_max=1)
