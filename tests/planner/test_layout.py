"""planner.layout: padded NCHW/NHWC images, element addresses, group bases, k-major weights."""

import numpy as np
import pytest

from planner.layout import (Layout, element_address, group_base_bytes, padded_bytes, padded_dims,
                            to_padded, weights_k_major)
from planner.shapes import ConvShape

SHAPE = ConvShape(batch=2, in_channels=6, height=4, width=5, out_channels=4, kernel_h=3,
                  kernel_w=2, pad_top=1, pad_left=0, pad_bottom=2, pad_right=1, groups=2)


def test_layout_padded_dims_and_bytes():
    assert padded_dims(SHAPE) == (7, 6)
    for layout in ("NCHW", "NHWC", Layout.NHWC):
        assert padded_bytes(SHAPE, layout) == 2 * 6 * 7 * 6


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_layout_to_padded_places_every_element_and_zero_halo(layout):
    rng = np.random.default_rng(3)
    x = rng.integers(-128, 128, size=(2, 6, 4, 5), dtype=np.int8)
    x[x == 0] = 1                                   # so the halo is the only zeros
    img = to_padded(x, SHAPE, layout)
    assert img.dtype == np.int8 and img.shape == (padded_bytes(SHAPE, layout),)
    b, c, h, w = np.meshgrid(*(np.arange(d) for d in x.shape), indexing="ij")
    addr = element_address(SHAPE, layout, b, c, h + SHAPE.pad_top, w + SHAPE.pad_left)
    assert np.array_equal(img[addr], x)
    halo = np.ones(img.size, dtype=bool)
    halo[addr.reshape(-1)] = False
    assert np.count_nonzero(img[halo]) == 0
    assert halo.sum() == img.size - x.size


def test_layout_element_address_formulas_by_hand():
    hp, wp = 7, 6
    assert element_address(SHAPE, "NCHW", 1, 2, 3, 4) == ((1 * 6 + 2) * hp + 3) * wp + 4
    assert element_address(SHAPE, "NHWC", 1, 2, 3, 4) == ((1 * hp + 3) * wp + 4) * 6 + 2


def test_layout_group_base_bytes():
    assert group_base_bytes(SHAPE, "NCHW", 1) == 3 * 7 * 6
    assert group_base_bytes(SHAPE, "NHWC", 1) == 3
    assert group_base_bytes(SHAPE, "NHWC", 0) == 0
    with pytest.raises(ValueError, match="group"):
        group_base_bytes(SHAPE, "NCHW", 2)


def test_layout_weights_k_major_rows_are_taps():
    rng = np.random.default_rng(4)
    w = rng.integers(-128, 128, size=(4, 3, 3, 2), dtype=np.int8)
    for g in range(2):
        a_t = weights_k_major(w, SHAPE, g)
        assert a_t.shape == (3 * 3 * 2, 2) and a_t.flags.c_contiguous
        for m in range(2):
            for c in range(3):
                for r in range(3):
                    for s in range(2):
                        assert a_t[(c * 3 + r) * 2 + s, m] == w[g * 2 + m, c, r, s]


def test_layout_rejects_bad_input():
    with pytest.raises(ValueError, match="layout"):
        padded_bytes(SHAPE, "NHCW")
    with pytest.raises(ValueError, match="x_nchw"):
        to_padded(np.zeros((2, 6, 4, 5), np.int16), SHAPE, "NCHW")
    with pytest.raises(ValueError, match="x_nchw"):
        to_padded(np.zeros((2, 6, 5, 4), np.int8), SHAPE, "NCHW")
    with pytest.raises(ValueError, match="w must"):
        weights_k_major(np.zeros((4, 6, 3, 2), np.int8), SHAPE, 0)
    with pytest.raises(ValueError, match="group"):
        weights_k_major(np.zeros((4, 3, 3, 2), np.int8), SHAPE, -1)
