"""Float scales to the hardware's fixed-point requantisation parameters (TFLite convention).

A real multiplier ``scale = s_in * s_w / s_out`` is represented as ``mult * 2**(-31 - shift)``
with ``mult`` a Q31 integer in ``[2**30, 2**31)`` and ``shift`` the right shift applied after the
rounding doubling high multiply (negative: a left shift before it). :func:`spec.golden.requantize`
is the exact integer arithmetic the hardware implements with these parameters.
"""

from __future__ import annotations

import math

__all__ = ["quantize_multiplier", "activation_bounds"]


def quantize_multiplier(scale: float) -> tuple[int, int]:
    """``(mult, shift)`` for a positive real ``scale`` (TFLite ``QuantizeMultiplier``):
    ``frexp`` gives ``scale = q * 2**e`` with ``q`` in ``[0.5, 1)``; ``mult = round(q * 2**31)``
    (a ``mult`` of exactly ``2**31`` is halved and ``e`` incremented); ``shift = -e``.

    Raises ``ValueError`` for a scale that is not finite and positive, or whose shift falls
    outside ``[-31, 31]`` (below ``2**-32`` or at least ``2**31``).
    """
    if not (isinstance(scale, (int, float)) and math.isfinite(scale) and scale > 0):
        raise ValueError(f"scale must be a finite positive number, not {scale!r}")
    q, e = math.frexp(scale)
    mult = round(q * (1 << 31))
    if mult == 1 << 31:
        mult //= 2
        e += 1
    shift = -e
    if not -31 <= shift <= 31:
        raise ValueError(f"scale={scale!r} needs shift={shift}, outside [-31, 31]: scale must "
                         f"be in [2**-32, 2**31)")
    return mult, shift


def activation_bounds(kind: str, zero_point: int, out_scale: float) -> tuple[int, int]:
    """int8 ``(act_min, act_max)`` of an activation on the quantised output: ``none``, ``relu``
    (real 0 = the zero point) or ``relu6`` (real 6 = ``zero_point + round(6 / out_scale)``),
    clamped to int8."""
    if not -128 <= zero_point <= 127:
        raise ValueError(f"zero_point must be in [-128, 127], not {zero_point!r}")
    if kind == "none":
        return -128, 127
    if kind == "relu":
        return zero_point, 127
    if kind == "relu6":
        if not (math.isfinite(out_scale) and out_scale > 0):
            raise ValueError(f"out_scale must be a finite positive number, not {out_scale!r}")
        return zero_point, min(127, zero_point + round(6.0 / out_scale))
    raise ValueError(f"kind must be one of none, relu, relu6, not {kind!r}")
