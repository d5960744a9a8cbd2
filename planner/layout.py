"""Padded activation layouts and the weight (A) image of a convolution (seed 002;
docs/conv_tables.md "Input tensor: padded layout").

An activation tensor lives in memory with its halo stored and zero, so every tap of every
output window is in bounds: ``Hp = H + pad_top + pad_bottom``, ``Wp = W + pad_left + pad_right``
and ``h``, ``w`` are *padded* coordinates. Byte address (int8 elements) of ``(b, c, h, w)``:

* NCHW: ``((b*C + c)*Hp + h)*Wp + w``
* NHWC: ``((b*Hp + h)*Wp + w)*C + c``

Group ``g`` of a grouped convolution starts at :func:`group_base_bytes` from the tensor start;
the convolution tables (:mod:`planner.offsets`) are relative to that.
"""

from __future__ import annotations

import enum

import numpy as np

from .shapes import ConvShape

__all__ = ["Layout", "padded_dims", "padded_bytes", "element_address", "group_base_bytes",
           "to_padded", "weights_k_major"]


class Layout(str, enum.Enum):
    """Memory order of an activation tensor; ``Layout("NHWC")`` accepts the plain string."""

    NCHW = "NCHW"
    NHWC = "NHWC"


def _layout(layout: Layout | str) -> Layout:
    try:
        return Layout(layout)
    except ValueError:
        raise ValueError(f"layout must be one of {[m.value for m in Layout]}, not {layout!r}") \
            from None


def padded_dims(shape: ConvShape) -> tuple[int, int]:
    """``(Hp, Wp)``: the stored height and width including the zero halo."""
    return (shape.height + shape.pad_top + shape.pad_bottom,
            shape.width + shape.pad_left + shape.pad_right)


def padded_bytes(shape: ConvShape, layout: Layout | str) -> int:
    """Bytes of the whole padded input tensor (all groups, all batches); same in both layouts."""
    _layout(layout)
    hp, wp = padded_dims(shape)
    return shape.batch * shape.in_channels * hp * wp


def element_address(shape: ConvShape, layout: Layout | str, b, c, h, w):
    """Byte offset of element ``(b, c, h, w)`` (``h``, ``w`` padded, ``c`` over all channels)
    from the tensor start. Works elementwise on numpy integer arrays too."""
    layout = _layout(layout)
    hp, wp = padded_dims(shape)
    cc = shape.in_channels
    if layout is Layout.NCHW:
        return ((b * cc + c) * hp + h) * wp + w
    return ((b * hp + h) * wp + w) * cc + c


def group_base_bytes(shape: ConvShape, layout: Layout | str, group: int) -> int:
    """Offset of group ``group``'s first channel, added to ``b_addr`` for that group's GEMM:
    ``g*(C/groups)*Hp*Wp`` in NCHW, ``g*(C/groups)`` in NHWC."""
    layout = _layout(layout)
    if type(group) is not int or not 0 <= group < shape.groups:
        raise ValueError(f"group must be an int in [0, {shape.groups - 1}], not {group!r}")
    hp, wp = padded_dims(shape)
    cg = shape.in_channels // shape.groups
    return group * cg * hp * wp if layout is Layout.NCHW else group * cg


def to_padded(x_nchw: np.ndarray, shape: ConvShape, layout: Layout | str) -> np.ndarray:
    """The flat int8 memory image (:func:`padded_bytes` long) of an int8 NCHW tensor placed in
    ``layout`` with a zero halo. ``.tobytes()`` of the result is what memory holds."""
    layout = _layout(layout)
    x = np.asarray(x_nchw)
    want = (shape.batch, shape.in_channels, shape.height, shape.width)
    if x.dtype != np.int8 or x.shape != want:
        raise ValueError(f"x_nchw must be int8 of shape {want}, not {x.dtype} {x.shape}")
    xp = np.pad(x, ((0, 0), (0, 0), (shape.pad_top, shape.pad_bottom),
                    (shape.pad_left, shape.pad_right)))
    if layout is Layout.NHWC:
        xp = xp.transpose(0, 2, 3, 1)
    return np.ascontiguousarray(xp).reshape(-1)


def weights_k_major(w: np.ndarray, shape: ConvShape, group: int) -> np.ndarray:
    """The A operand of group ``group``, stored k-major: a ``(K, M)`` int8 array whose row ``kk``
    is ``A[:, kk]``, so ``A[i, kk]`` is at ``a_addr + kk*a_stride + i`` with ``a_stride = M``.

    ``A[m, k] = w[group*M + m, c, r, s]`` with ``k = (c*R + r)*S + s`` (the tap order of the
    offset table), ``M = out_channels/groups``.
    """
    w = np.asarray(w)
    m = shape.out_channels // shape.groups
    want = (shape.out_channels, shape.in_channels // shape.groups, shape.kernel_h,
            shape.kernel_w)
    if w.dtype != np.int8 or w.shape != want:
        raise ValueError(f"w must be int8 of shape {want}, not {w.dtype} {w.shape}")
    if type(group) is not int or not 0 <= group < shape.groups:
        raise ValueError(f"group must be an int in [0, {shape.groups - 1}], not {group!r}")
    a = w[group * m:(group + 1) * m].reshape(m, -1)          # (M, K), k = (c*R + r)*S + s
    return np.ascontiguousarray(a.T)
