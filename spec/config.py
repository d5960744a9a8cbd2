"""The one source of truth for every hardware number of a Tessera accelerator instance.

This module imports nothing from Amaranth, so the planner, the firmware encoder and the
testbenches can load it cheaply. RTL, planner, firmware and tests all read :class:`AccelConfig`;
no hardware number is typed anywhere else.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any, Callable, ClassVar

__all__ = ["FORMAT_VERSION", "AccelConfig", "PRESETS", "ConfigError", "loads_unique",
           "require_config"]

#: Bumped whenever RTL or image semantics change; it is hashed into :attr:`AccelConfig.config_id`.
FORMAT_VERSION = 3


class ConfigError(ValueError):
    """An :class:`AccelConfig` field is outside its allowed range."""


def loads_unique(text: str, duplicate: Callable[[str], Exception]) -> Any:
    """``json.loads(text)``, but an object that repeats a key raises ``duplicate(key)`` instead
    of keeping the last value."""
    def no_duplicates(pairs):
        seen = {}
        for key, value in pairs:
            if key in seen:
                raise duplicate(key)
            seen[key] = value
        return seen
    return json.loads(text, object_pairs_hook=no_duplicates)


def _is_pow2(value: int) -> bool:
    return value >= 1 and value & (value - 1) == 0


@dataclasses.dataclass(frozen=True, kw_only=True)
class AccelConfig:
    """Parameters of one accelerator instance. Every field name carries its unit.

    The matrix unit is an ``array_rows`` x ``array_cols`` output-stationary systolic array; one
    array row owns one output row ``m``, one array column one output column ``n``.

    Memory ports (seed 000 lets A and B live in memories of different bandwidth): each of the
    three ports (A loads, B loads, C stores) moves one *beat* per accepted request. A beat is one
    buffer row: ``array_rows`` int8 for A, ``array_cols`` int8 for B and ``array_cols`` int32 for
    C. ``*_port_bytes_per_cycle`` is the sustained bandwidth the memory grants the port (at most
    one beat per cycle; the cycle model is exact when it divides the beat, and over-predicts by a
    few cycles otherwise: docs/bench.md, "Ports slower than a beat"), ``*_port_latency_cycles``
    the cycles from an accepted read request to its data.

    Raises
    ------
    ConfigError
        When a field is outside its allowed range; the message names the field, echoes the value
        and states the range.
    """

    array_rows: int = 16
    array_cols: int = 16
    operand_bits: int = 8
    acc_bits: int = 32
    buf_a_bytes: int = 128 << 10
    buf_b_bytes: int = 128 << 10
    acc_buf_bytes: int = 64 << 10
    a_port_bytes_per_cycle: int = 16
    b_port_bytes_per_cycle: int = 16
    c_port_bytes_per_cycle: int = 64
    a_port_latency_cycles: int = 32
    b_port_latency_cycles: int = 32
    c_port_latency_cycles: int = 32
    block_m: int = 16
    block_n: int = 16
    sync_bytes: int = 4096
    #: DRAM is ``2**dram_addr_bits`` bytes and the on-chip local buffer sits just above it, so
    #: device addresses are ``dram_addr_bits + 1`` bits: 31 (``default``) gives 2 GiB of DRAM in
    #: a 32-bit device address space. 32 is allowed too, without the local buffer
    #: (:meth:`local_unreachable`).
    dram_addr_bits: int = 31
    #: On-chip convolution table capacities (entries; docs/conv_tables.md): offsets (one per
    #: k), runs (B-load segments) and lane groups (+1).
    conv_offset_entries: int = 8192
    conv_run_entries: int = 4096
    conv_group_entries: int = 4096
    #: On-chip post-processing parameter capacity: output channels (rows of C) whose bias,
    #: multiplier and shift a layer may use (docs/firmware.md).
    quant_entries: int = 4096
    #: On-chip local buffer (bytes) that keeps a producer layer's int8 output for its consumer
    #: (operator fusion, seed 003; docs/fusion.md). It is addressed at device addresses
    #: ``[dram_bytes, dram_bytes + local_buf_bytes)``: a layer whose C lies there writes it on
    #: chip, a layer whose B lies there reads it on chip; neither crosses a memory port.
    local_buf_bytes: int = 512 << 10
    #: Requantiser lanes (hw.postproc.PostProc; three MULT18X18D each on an ECP5). 0: one lane
    #: per array column, a post-processed row per cycle. Fewer lanes share their multipliers
    #: over the row: a post-processed store then moves one accumulator row every
    #: ``array_cols / requant_lanes`` cycles (:attr:`post_row_cycles`), which the cycle model
    #: charges; a layer's compute usually hides it (docs/bench.md "FPGA").
    requant_lanes: int = 0
    #: 1: the matrix unit is built with its depthwise *mesh* mode (docs/architecture.md
    #: "Depthwise convolution"), and layer records with ``b_mode`` 2 or 3 (a depthwise 3x3
    #: convolution, pad 1, stride 1 or 2) are legal; 0: it is not, and such records fail
    #: ``BAD_FLAGS``. The mesh needs a square array of at least 4 x 4.
    dw_mesh: int = 0
    #: 1: the sequencer is built with the *row store* (docs/architecture.md "Row store"): a
    #: record may lay its output out as rows of pixels at a pitch of its own (``c_rows``,
    #: ``c_row_elems``, ``c_row_pitch``), so a convolution writes the interior of the next
    #: convolution's padded input in one record; 0: those fields must be 0 (``BAD_FLAGS``).
    row_store: int = 0

    #: Fields the hardware supports a single value of (the datapath is int8 x int8 -> int32).
    _FIXED: ClassVar[dict[str, int]] = {"operand_bits": 8, "acc_bits": 32}

    def __post_init__(self):
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if type(value) is not int:
                raise ConfigError(
                    f"AccelConfig.{field.name} must be an int, not {type(value).__name__} "
                    f"{value!r}")
        for name, only in self._FIXED.items():
            if getattr(self, name) != only:
                raise ConfigError(f"AccelConfig.{name} must be {only} (the only supported value), "
                                  f"not {getattr(self, name)!r}")
        self._check_pow2("array_rows", 2, 64)
        # the B port also carries the 32-bit words of the convolution tables
        self._check_pow2("array_cols", 4, 64)
        for name in ("conv_offset_entries", "conv_run_entries", "conv_group_entries",
                     "quant_entries"):
            self._check_pow2(name, 16, 1 << 16)
        for name in ("buf_a_bytes", "buf_b_bytes", "acc_buf_bytes"):
            self._check_pow2(name, 64, 1 << 24)
        self._check_range("dram_addr_bits", 16, 32)
        self._check_range("dw_mesh", 0, 1)
        self._check_range("row_store", 0, 1)
        if self.requant_lanes != 0 and not (_is_pow2(self.requant_lanes)
                                            and self.requant_lanes <= self.array_cols):
            raise ConfigError(f"AccelConfig.requant_lanes must be 0 (one lane per column) or a "
                              f"power of two in [1, array_cols={self.array_cols}], not "
                              f"{self.requant_lanes!r}")
        # rows of one B beat; the buffer lives above the DRAM in the device address space, and
        # its offsets must fit the engines' dram_addr_bits-wide addresses
        if not (_is_pow2(self.local_buf_bytes) and
                2 * self.b_beat_bytes <= self.local_buf_bytes <= self.dram_bytes):
            raise ConfigError(
                f"AccelConfig.local_buf_bytes must be a power of two in [{2 * self.b_beat_bytes}, "
                f"{self.dram_bytes}], not {self.local_buf_bytes!r} (at most dram_bytes: with "
                f"dram_addr_bits={self.dram_addr_bits}, set it to {self.dram_bytes} or less)")
        beats = {"a": self.a_beat_bytes, "b": self.b_beat_bytes, "c": self.c_beat_bytes}
        for port, beat in beats.items():
            self._check_range(f"{port}_port_bytes_per_cycle", 1, beat)
            self._check_range(f"{port}_port_latency_cycles", 1, 256)
        self._check_multiple("block_m", self.array_rows, 1 << 16)
        self._check_multiple("block_n", self.array_cols, 1 << 16)
        self._check_range("sync_bytes", 1, 1 << 24)
        # Each operand buffer is double-buffered; one half must hold at least one k step of one
        # array tile, and the accumulator half at least one array tile of int32.
        for name, half_min in (("buf_a_bytes", self.a_beat_bytes),
                               ("buf_b_bytes", self.b_beat_bytes),
                               ("acc_buf_bytes", self.c_beat_bytes * self.array_rows)):
            if getattr(self, name) < 2 * half_min:
                raise ConfigError(f"AccelConfig.{name} must be at least {2 * half_min} (two "
                                  f"halves of {half_min} bytes), not {getattr(self, name)!r}")
        # the planner's smallest partition, one block_m x block_n block, must fit: its int32
        # sums in an accumulator half, one k step of it in each operand buffer half
        for what, need, name, half in (
                ("block_m * block_n int32 sums", self.block_m * self.block_n * self.acc_bytes,
                 "acc_buf_bytes", self.acc_half_bytes),
                ("one k step of block_m int8", self.block_m, "buf_a_bytes",
                 self.buf_a_half_bytes),
                ("one k step of block_n int8", self.block_n, "buf_b_bytes",
                 self.buf_b_half_bytes)):
            if need > half:
                raise ConfigError(
                    f"AccelConfig.block_m={self.block_m}, block_n={self.block_n}: {what} "
                    f"({need} bytes) must fit half of {name}={getattr(self, name)} ({half} "
                    f"bytes); lower block_m/block_n or raise {name}")
        # a mesh tile (R/2 fill beats and 9 taps, its first fill in the previous tile's last
        # tap) must span the R cycles the array takes to drain a tile's rows
        if self.dw_mesh and not (self.array_rows == self.array_cols and
                                 4 <= self.array_rows <= 16):
            raise ConfigError(f"AccelConfig.dw_mesh=1 needs a square array of 4 x 4 to 16 x 16, "
                              f"not array_rows={self.array_rows} x array_cols={self.array_cols}")
        # a parameter array (quant_entries int32 words) is one load command into buffer rows
        # 0 .. (the parameter memories' write addresses): buffer B must hold it, and with the
        # mesh buffer A too (its weight arrays load through A); hw.params.ParamMemories
        param_bytes = 4 * self.quant_entries
        for name in ("buf_b_bytes",) + (("buf_a_bytes",) if self.dw_mesh else ()):
            if getattr(self, name) < param_bytes:
                port = " through A with dw_mesh=1" if name == "buf_a_bytes" else ""
                raise ConfigError(
                    f"AccelConfig.{name}={getattr(self, name)} must hold a whole parameter "
                    f"array, quant_entries={self.quant_entries} int32 words ({param_bytes} "
                    f"bytes, loaded in one command{port}): raise {name} to {param_bytes} or "
                    f"more, or lower quant_entries")

    def _check_range(self, name: str, lo: int, hi: int):
        value = getattr(self, name)
        if not lo <= value <= hi:
            raise ConfigError(f"AccelConfig.{name} must be in [{lo}, {hi}], not {value!r}")

    def _check_pow2(self, name: str, lo: int, hi: int):
        value = getattr(self, name)
        if not (_is_pow2(value) and lo <= value <= hi):
            raise ConfigError(f"AccelConfig.{name} must be a power of two in [{lo}, {hi}], "
                              f"not {value!r}")

    def _check_multiple(self, name: str, of: int, hi: int):
        value = getattr(self, name)
        if not (of <= value <= hi and value % of == 0):
            raise ConfigError(f"AccelConfig.{name} must be a multiple of {of} in [{of}, {hi}], "
                              f"not {value!r}")

    # -- derived numbers (never recomputed elsewhere) -------------------------------------------

    @property
    def operand_bytes(self) -> int:
        return self.operand_bits // 8

    @property
    def acc_bytes(self) -> int:
        return self.acc_bits // 8

    @property
    def a_beat_bytes(self) -> int:
        """Bytes of one A buffer row / A port beat: one int8 per array row."""
        return self.array_rows * self.operand_bits // 8

    @property
    def b_beat_bytes(self) -> int:
        """Bytes of one B buffer row / B port beat: one int8 per array column."""
        return self.array_cols * self.operand_bits // 8

    @property
    def c_beat_bytes(self) -> int:
        """Bytes of one accumulator row / C port beat: one int32 per array column."""
        return self.array_cols * self.acc_bits // 8

    @property
    def buf_a_depth(self) -> int:
        """Rows of buffer A (both halves)."""
        return self.buf_a_bytes // self.a_beat_bytes

    @property
    def buf_b_depth(self) -> int:
        """Rows of buffer B (both halves)."""
        return self.buf_b_bytes // self.b_beat_bytes

    @property
    def acc_depth(self) -> int:
        """Rows of the accumulator buffer (both halves); one row is ``array_cols`` int32."""
        return self.acc_buf_bytes // self.c_beat_bytes

    @property
    def buf_a_half_bytes(self) -> int:
        """Bytes of one double-buffer half of A: the most one A partition may occupy."""
        return self.buf_a_bytes // 2

    @property
    def buf_b_half_bytes(self) -> int:
        """Bytes of one double-buffer half of B: the most one B partition may occupy."""
        return self.buf_b_bytes // 2

    @property
    def acc_half_bytes(self) -> int:
        """Bytes of one accumulator half: the most ``acc_buffer_needed`` may be."""
        return self.acc_buf_bytes // 2

    @property
    def dram_bytes(self) -> int:
        """Size of the address space the memory ports reach."""
        return 1 << self.dram_addr_bits

    @property
    def local_base(self) -> int:
        """Device address of the first byte of the on-chip local buffer (= ``dram_bytes``)."""
        return self.dram_bytes

    @property
    def local_depth(self) -> int:
        """Rows of the local buffer; one row is one B beat (``array_cols`` int8)."""
        return self.local_buf_bytes // self.b_beat_bytes

    def local_unreachable(self) -> str | None:
        """Why descriptors cannot address the local buffer (None when they can): its addresses
        must fit the 32-bit descriptor words, which ``dram_addr_bits = 32`` leaves no room for."""
        if self.local_base + self.local_buf_bytes <= 1 << 32:
            return None
        return (f"the local buffer at {self.local_base:#x} is past the 32-bit addresses "
                f"descriptors hold (dram_addr_bits={self.dram_addr_bits}; fusion needs at most 31)")

    def is_local(self, lo: int, hi: int) -> bool:
        """``[lo, hi)`` lies inside the on-chip local buffer."""
        return self.local_base <= lo and hi <= self.local_base + self.local_buf_bytes

    @property
    def post_lanes(self) -> int:
        """Requantiser lanes actually built: ``requant_lanes``, or ``array_cols`` for 0."""
        return self.requant_lanes or self.array_cols

    @property
    def post_row_cycles(self) -> int:
        """Cycles the requantiser spends on one accumulator row: ``array_cols / post_lanes``."""
        return self.array_cols // self.post_lanes

    @property
    def macs_per_cycle(self) -> int:
        """Peak multiply-accumulates per cycle (seed 000 ``hw_power``)."""
        return self.array_rows * self.array_cols

    @property
    def config_id(self) -> int:
        """32-bit identity, readable from the CONFIG_ID register and stored in every image."""
        blob = json.dumps([FORMAT_VERSION, self.to_dict()], sort_keys=True).encode()
        return int.from_bytes(hashlib.blake2s(blob, digest_size=4).digest(), "little")

    # -- serialisation ---------------------------------------------------------------------------

    def to_dict(self) -> dict[str, int]:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_dict(cls, values: dict) -> "AccelConfig":
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ConfigError(f"unknown AccelConfig field(s) {', '.join(unknown)}; "
                              f"known fields are {', '.join(sorted(known))}")
        try:
            return cls(**values)
        except ConfigError as err:
            missing = sorted(known - set(values))
            if not missing:
                raise
            # a field left out takes its default, which may be what breaks a rule
            named = ", ".join(missing[:6]) + (f" and {len(missing) - 6} more"
                                              if len(missing) > 6 else "")
            raise ConfigError(f"{err} (fields not given take their defaults: {named})") from None

    @classmethod
    def from_json(cls, text: str) -> "AccelConfig":
        """Parse a JSON object; duplicate or unknown keys are refused, never merged."""
        try:
            values = loads_unique(
                text, lambda key: ConfigError(f"duplicate AccelConfig field {key!r} in JSON"))
        except json.JSONDecodeError as err:
            raise ConfigError(f"AccelConfig JSON is not valid JSON: {err}") from None
        if not isinstance(values, dict):
            raise ConfigError(f"AccelConfig JSON must be an object of fields, not "
                              f"{type(values).__name__}")
        return cls.from_dict(values)


PRESETS: dict[str, AccelConfig] = {
    # 4x4 array, small buffers: fast to simulate, exercises split-K and reloads at small sizes.
    "tiny": AccelConfig(
        array_rows=4, array_cols=4,
        buf_a_bytes=4 << 10, buf_b_bytes=4 << 10, acc_buf_bytes=2 << 10,
        a_port_bytes_per_cycle=4, b_port_bytes_per_cycle=4, c_port_bytes_per_cycle=16,
        a_port_latency_cycles=8, b_port_latency_cycles=8, c_port_latency_cycles=8,
        block_m=4, block_n=4, sync_bytes=256, dram_addr_bits=22,
        conv_offset_entries=1024, conv_run_entries=1024, conv_group_entries=1024,
        quant_entries=256, local_buf_bytes=16 << 10),
    "small": AccelConfig(
        array_rows=8, array_cols=8,
        buf_a_bytes=32 << 10, buf_b_bytes=32 << 10, acc_buf_bytes=16 << 10,
        a_port_bytes_per_cycle=8, b_port_bytes_per_cycle=8, c_port_bytes_per_cycle=32,
        a_port_latency_cycles=16, b_port_latency_cycles=16, c_port_latency_cycles=16,
        block_m=8, block_n=8, sync_bytes=1024, dram_addr_bits=23,
        conv_offset_entries=4096, conv_run_entries=2048, conv_group_entries=2048,
        quant_entries=1024, local_buf_bytes=64 << 10),
    # 16x16 array; 256 KiB scratchpad (A + B) and a 64 KiB accumulator, as Gemmini's default;
    # the depthwise mesh (docs/architecture.md "Depthwise convolution") and the row store.
    "default": AccelConfig(dw_mesh=1, row_store=1),
    # default's array and ports with on-chip memories an ECP5-85k's 208 block RAMs can hold
    # (default's 832 KiB cannot; docs/bench.md "FPGA"): 128 KiB scratchpad, 32 KiB accumulator,
    # 64 KiB local buffer, small's table and parameter capacities, and a requantiser of 4
    # shared lanes.
    "fpga": AccelConfig(
        buf_a_bytes=64 << 10, buf_b_bytes=64 << 10, acc_buf_bytes=32 << 10,
        conv_offset_entries=4096, conv_run_entries=2048, conv_group_entries=2048,
        quant_entries=1024, local_buf_bytes=64 << 10, dram_addr_bits=24,
        # 4 requantiser lanes (12 MULT18X18D, a row every 4 cycles) leave the DSPs to the array
        requant_lanes=4),
}


def require_config(cfg: Any, name: str = "cfg") -> AccelConfig:
    """Return ``cfg`` if it is an :class:`AccelConfig`; otherwise raise ``TypeError`` naming
    the argument (a preset's name is the common mistake: ``PRESETS["tiny"]``, not ``"tiny"``).
    The planner's and the builder's entry points call it, so a wrong argument fails there and
    not as an ``AttributeError`` deep inside a cost model."""
    if isinstance(cfg, AccelConfig):
        return cfg
    hint = (f" (the preset: PRESETS[{cfg!r}])" if isinstance(cfg, str) and cfg in PRESETS
            else "")
    raise TypeError(f"{name} must be an AccelConfig{hint}, not {type(cfg).__name__} "
                    f"{cfg!r:.60}")
