"""Exact base-2 logarithms of the power-of-two sizes the RTL shifts by."""

__all__ = ["log2"]


def log2(value: int) -> int:
    """``log2(value)`` of a power of two ``value`` (array sides, beat bytes, alignments)."""
    if value <= 0 or value & (value - 1):
        raise ValueError(f"log2: {value!r} is not a power of two")
    return value.bit_length() - 1
