"""Workload shapes the planner accepts: a GEMM and a 2-D convolution (seed 000, convolution part).

Both are frozen and validated at construction: a bad field raises :class:`ValueError` naming the
field, echoing the value and stating the allowed range.

Convolution mapping (seed 000, convolution embodiment; BRIEF §2.1): weights are the A operand and
activations the B operand of ``C[M x N] = A[M x K] * B[K x N]`` with ``M`` = out channels per
group, ``K`` = (in channels per group) * R * S, ``N`` = batch * P * Q. ``groups`` > 1 gives
``groups`` independent GEMMs of that shape. The seed's analytic B load cost counts the input
tensor once (the R*S windows reuse it), not the im2col matrix: :attr:`ConvShape.b_tensor_bytes`.
"""

from __future__ import annotations

import dataclasses
import operator

from spec.desc import MAX_DIM

__all__ = ["GemmShape", "ConvShape", "MAX_DIM"]


def _check_int(owner: str, name: str, value: object, lo: int, hi: int) -> None:
    if type(value) is not int or not lo <= value <= hi:
        raise ValueError(f"{owner}.{name} must be an int in [{lo}, {hi}], not {value!r}")


def _plain_ints(shape, names) -> None:
    """Store integers of other types (numpy's, what array shapes give: anything with
    ``__index__`` that is not an int or a bool) in ``shape``'s ``names`` as Python ints, so
    that shapes compare, hash and print alike; anything else is left for the range check."""
    for name in names:
        value = getattr(shape, name)
        if not isinstance(value, int) and hasattr(type(value), "__index__"):
            object.__setattr__(shape, name, operator.index(value))


@dataclasses.dataclass(frozen=True)
class GemmShape:
    """``C[m x n] = A[m x k] * B[k x n]``, int8 operands, int32 result; dims in [1, MAX_DIM]."""

    m: int
    k: int
    n: int

    def __post_init__(self):
        _plain_ints(self, ("m", "k", "n"))
        for name in ("m", "k", "n"):
            _check_int("GemmShape", name, getattr(self, name), 1, MAX_DIM)

    @property
    def macs(self) -> int:
        return self.m * self.k * self.n

    def __str__(self) -> str:
        return f"{self.m}x{self.k}x{self.n}"


@dataclasses.dataclass(frozen=True, kw_only=True)
class ConvShape:
    """A 2-D convolution, input ``batch x in_channels x height x width`` (NCHW naming only).

    Weights are ``out_channels x (in_channels / groups) x kernel_h x kernel_w``. Pads may be
    asymmetric; each pad is in ``[0, dilation * (kernel - 1)]`` so every output window touches at
    least one real input pixel.
    """

    batch: int
    in_channels: int
    height: int
    width: int
    out_channels: int
    kernel_h: int
    kernel_w: int
    stride_h: int = 1
    stride_w: int = 1
    pad_top: int = 0
    pad_left: int = 0
    pad_bottom: int = 0
    pad_right: int = 0
    dilation_h: int = 1
    dilation_w: int = 1
    groups: int = 1

    def __post_init__(self):
        _plain_ints(self, [f.name for f in dataclasses.fields(self)])
        for name in ("batch", "in_channels", "height", "width", "out_channels"):
            _check_int("ConvShape", name, getattr(self, name), 1, MAX_DIM)
        for name in ("kernel_h", "kernel_w", "stride_h", "stride_w", "dilation_h", "dilation_w"):
            _check_int("ConvShape", name, getattr(self, name), 1, 4096)
        for pad, kern, dil in (("pad_top", "kernel_h", "dilation_h"),
                               ("pad_bottom", "kernel_h", "dilation_h"),
                               ("pad_left", "kernel_w", "dilation_w"),
                               ("pad_right", "kernel_w", "dilation_w")):
            _check_int("ConvShape", pad, getattr(self, pad), 0,
                       getattr(self, dil) * (getattr(self, kern) - 1))
        _check_int("ConvShape", "groups", self.groups, 1, self.in_channels)
        for name in ("in_channels", "out_channels"):
            if getattr(self, name) % self.groups:
                raise ValueError(f"ConvShape.groups={self.groups} must divide {name}="
                                 f"{getattr(self, name)}")
        for axis, size, lo_pad, hi_pad, kern, dil in (
                ("h", self.height, self.pad_top, self.pad_bottom, self.kernel_h, self.dilation_h),
                ("w", self.width, self.pad_left, self.pad_right, self.kernel_w, self.dilation_w)):
            span = dil * (kern - 1) + 1
            if size + lo_pad + hi_pad < span:
                raise ValueError(
                    f"ConvShape.kernel_{axis}={kern} (dilated span {span}) must fit the padded "
                    f"input {size}+{lo_pad}+{hi_pad}={size + lo_pad + hi_pad}")
        gemm = self.gemm  # the GEMM dims must be in range too
        del gemm

    @property
    def out_h(self) -> int:
        """P = floor((H + pads - dilation*(R-1) - 1) / stride) + 1."""
        span = self.dilation_h * (self.kernel_h - 1) + 1
        return (self.height + self.pad_top + self.pad_bottom - span) // self.stride_h + 1

    @property
    def out_w(self) -> int:
        """Q = floor((W + pads - dilation*(S-1) - 1) / stride) + 1."""
        span = self.dilation_w * (self.kernel_w - 1) + 1
        return (self.width + self.pad_left + self.pad_right - span) // self.stride_w + 1

    @property
    def gemm(self) -> GemmShape:
        """The GEMM of one group: M = out/groups, K = (C/groups)*R*S, N = batch*P*Q."""
        k = (self.in_channels // self.groups) * self.kernel_h * self.kernel_w
        n = self.batch * self.out_h * self.out_w
        m = self.out_channels // self.groups
        for name, value in (("M (out_channels/groups)", m), ("K ((C/groups)*R*S)", k),
                            ("N (batch*P*Q)", n)):
            if value > MAX_DIM:
                raise ValueError(f"ConvShape GEMM {name}={value} must be in [1, {MAX_DIM}]")
        return GemmShape(m, k, n)

    @property
    def b_tensor_bytes(self) -> int:
        """Bytes of one group's input tensor (int8): what seed 000 counts as one load of B."""
        return self.batch * (self.in_channels // self.groups) * self.height * self.width

    @property
    def macs(self) -> int:
        return self.groups * self.gemm.macs
