"""Binary layouts shared by the RTL, the firmware encoder and the C headers. No Amaranth import.

A firmware *layer record* is 64 little-endian u32 words (256 bytes). Its first words are the
:class:`spec.desc.GemmDescriptor` in :data:`spec.desc.DESC_FIELDS` order, so the sequencer's
descriptor fetch is a straight copy; post-processing and the output window follow at fixed word
offsets given by :data:`LAYER_WORDS`. Every consumer (RTL fetch, ``firmware`` encoder/decoder,
generated C headers) reads the offsets from here; none is typed twice.
"""

from __future__ import annotations

import enum

from .desc import DESC_FIELDS

__all__ = ["COUNTERS", "STATS_WORDS", "STATS_BYTES", "LAYER_USED_WORDS", "OpKind", "PostMode", "OutFormat", "LAYER_RECORD_WORDS", "LAYER_WORDS",
           "IMAGE_MAGIC", "IMAGE_HEADER_WORDS", "HEADER_WORDS", "SectionKind"]


class OpKind(enum.IntEnum):
    """What a layer record computes (``ACCEL_OP_*`` in C)."""

    GEMM = 0          # C = A @ B, B a dense matrix (b_mode = 0)
    CONV = 1          # implicit-im2col convolution through the tables (b_mode = 1)
    FC = 2            # fully connected: a GEMM whose B is the activations (b_mode = 0)
    DEPTHWISE = 3     # depthwise convolution on the mesh (spec.desc.DEPTHWISE_STRIDES)


class PostMode(enum.IntEnum):
    """Activation applied after requantisation (``ACCEL_POST_*``)."""

    NONE = 0          # clamp to the output type's range only
    RELU = 1          # clamp below at the output zero point
    RELU6 = 2         # clamp to [zero point, quantised 6.0] (act_max carries quantised 6.0)
    CLAMP = 3         # clamp to [act_min, act_max]


class OutFormat(enum.IntEnum):
    """Element type of the layer's output tensor (``ACCEL_OUT_*``)."""

    INT32 = 0         # raw accumulators (bias added), no requantisation
    INT8 = 1          # requantised, zero point added, activation clamped


#: Performance counters, in register order. These names are also the planner's
#: ``CycleBreakdown`` fields and the benchmark JSON keys. 32 bits each, wrapping.
#:
#: Every cycle from the one after ``start`` up to and including the one that raises ``done``
#: counts in ``total_cycles`` and in exactly one of the six ``*_cycles`` categories, tested in
#: this priority order: a real (non-padding) beat is issued to the array (``mac_active``); a
#: padding beat is issued, or a store waits for the array to drain the step before it
#: (``stall_drain``: the drain itself overlaps the next step's beats); the A load
#: is busy (``stall_load_a``); the B load is busy (``stall_load_b``); the store is busy
#: (``stall_store``); none of them: descriptor checks and per-step control (``stall_ctrl``).
#: Byte counters count whole beats accepted by each memory port.
COUNTERS: tuple[str, ...] = (
    "total_cycles",
    "mac_active_cycles",
    "stall_drain_cycles",
    "stall_load_a_cycles",
    "stall_load_b_cycles",
    "stall_store_cycles",
    "stall_ctrl_cycles",
    "rd_a_bytes",
    "rd_b_bytes",
    "wr_c_bytes",
)

#: Words of one layer record.
LAYER_RECORD_WORDS = 64


def _layer_words() -> dict[str, int]:
    names = [f"desc_{name}" for name in DESC_FIELDS] + [
        "op_kind",          # OpKind
        "out_format",       # OutFormat
        "post_mode",        # PostMode
        "out_zero_point",   # int8 output zero point, sign-extended to 32 bits
        "act_min",          # int8 clamp bounds (sign-extended), used by RELU6 / CLAMP
        "act_max",
        "bias_addr",        # m x int32 per-output-channel bias (0 words when bias_present = 0)
        "bias_present",
        "mult_addr",        # m x int32 requantisation multipliers (Q31, in [1, 2**31))
        "shift_addr",       # m x int32 shifts in [-31, 31]: > 0 right after the multiply,
                            # < 0 left before it (spec.golden.requantize, TFLite convention)
        "out_window_lo",    # the only bytes this layer may write: [lo, hi)
        "out_window_hi",
        "stats_addr",       # image runs: the layer's STATS_BYTES counter record goes here
        "a_crc",            # image runs: CRC-32 of the A beats the layer loads, in load order
                            # (spec.schedule.a_load_crc); checked when the layer ends
        "pad_value",        # int8 (sign-extended) a depthwise layer's padding holds: its input
                            # zero point; 0 for every other layer
    ]
    if len(names) > LAYER_RECORD_WORDS:
        raise AssertionError("layer record overflows its words")
    return {name: i for i, name in enumerate(names)}


#: Word offset of every named field of a layer record (the rest are reserved, zero).
LAYER_WORDS: dict[str, int] = _layer_words()
#: Words of a record the hardware fetches (the named ones; reserved words are never read).
LAYER_USED_WORDS = max(LAYER_WORDS.values()) + 1


def _stats_words() -> dict[str, int]:
    names = list(COUNTERS) + ["layer_index"]
    return {name: i for i, name in enumerate(names)}


#: Bytes of the per-layer statistics record an image run writes at each layer's ``stats_addr``
#: (64-byte aligned): the layer's counters, then its index; the remaining words are written 0.
STATS_BYTES = 64
#: Word offset of every field of a statistics record.
STATS_WORDS: dict[str, int] = _stats_words()
if len(STATS_WORDS) > STATS_BYTES // 4:
    raise AssertionError("statistics record overflows its words")


class SectionKind(enum.IntEnum):
    """Sections of a firmware image (``ACCEL_SECTION_*``)."""

    LAYERS = 1        # layer_count layer records
    TABLES = 2        # convolution tables (offset/run/group) of every conv layer
    QUANT = 3         # bias, multiplier and shift arrays
    WEIGHTS = 4       # k-major weight matrices


#: ``'TSRA'`` little-endian: the first word of every image.
IMAGE_MAGIC = 0x41525354

#: Words of the image header (the section table included).
IMAGE_HEADER_WORDS = 16


def _header_words() -> dict[str, int]:
    names = ["magic", "format_version", "config_id", "total_bytes", "crc32", "layer_count",
             "section_count", "base_addr"]
    words = {name: i for i, name in enumerate(names)}
    # then up to 4 sections of (kind, offset, bytes)... 8 + 4 * 2 = 16: offset and size only,
    # the kind is the section's index + 1 (SectionKind)
    for kind in SectionKind:
        words[f"section_{kind.name.lower()}_offset"] = len(words)
        words[f"section_{kind.name.lower()}_bytes"] = len(words)
    if len(words) > IMAGE_HEADER_WORDS:
        raise AssertionError("image header overflows its words")
    return words


#: Word offset of every field of the image header.
HEADER_WORDS: dict[str, int] = _header_words()
