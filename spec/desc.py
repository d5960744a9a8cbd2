"""The GEMM descriptor the sequencer executes, its error codes, and their legality rules.

Imports nothing from Amaranth. The descriptor carries exactly seed 000's tiling outputs plus the
tensor addresses; :func:`check` states, in Python, the same rules the RTL checks before it runs a
descriptor (the RTL test-suite asserts that both agree), so the planner can only emit what the
hardware accepts.

Memory layouts (element addresses, in bytes from the start of the memory):

* A (``m`` x ``k``, int8) is stored *k-major* (as A transposed): ``A[i, kk]`` is at
  ``a_addr + kk * a_stride + i``. Weights are static, so the compiler lays them out once.
* B (``k`` x ``n``, int8) is row-major: ``B[kk, j]`` is at ``b_addr + kk * b_stride + j``.
* C (``m`` x ``n``, int32, little-endian) is row-major: ``C[i, j]`` is at
  ``c_addr + i * c_stride + 4 * j``.
* With ``b_mode = 1`` (implicit-im2col convolution, docs/conv_tables.md) B is not a matrix in
  memory: ``B[kk, j]`` is at ``b_addr + base[j] + off[kk]``, read through three tables at
  ``off_addr`` (``k`` u32 offsets), ``run_addr`` (``run_count`` u64 runs) and ``grp_addr``
  (``ceil(n / array_cols) + 1`` u32 run indices). ``b_stride`` is then the size in bytes of
  the input tensor region at ``b_addr`` that the tables address.

Loop nest (seed 000 step 5): outer partitions (``m`` outside ``n`` when ``outer_m`` is 1, else
``n`` outside ``m``) -> split-K partitions -> inner tiles (``tile_m`` x ``tile_n``) -> array tiles
(``array_rows`` x ``array_cols``).
"""

from __future__ import annotations

import dataclasses
import enum

from .config import AccelConfig

__all__ = ["ErrorCode", "Tiling", "Operands", "GemmDescriptor", "DESC_FIELDS", "check",
           "DIM_BITS", "MAX_DIM", "tensor_extents", "groups_n", "local_problem"]

#: Bits of a dimension (m, k, n, partitions): the width of the hardware's length and count
#: registers, and MAX_DIM the largest value the 32-bit descriptor fields may carry.
DIM_BITS = 24
MAX_DIM = (1 << DIM_BITS) - 1


class ErrorCode(enum.IntEnum):
    """Values of the ERROR register; 0 means success. Reaches C headers as ``ACCEL_ERR_*``."""

    NONE = 0
    BAD_SHAPE = 1           # m, k or n is 0 or larger than MAX_DIM
    BAD_PARTITION_M = 2     # partition_m is 0 or not a multiple of array_rows
    BAD_PARTITION_N = 3     # partition_n is 0 or not a multiple of array_cols
    BAD_PARTITION_K = 4     # partition_k is 0, or < k without need_splitk
    BAD_TILE = 5            # tile_m / tile_n not an array multiple in [array, partition]
    BUF_A_OVERFLOW = 6      # partition_m * partition_k > buf_a_half_bytes
    BUF_B_OVERFLOW = 7      # partition_k * partition_n > buf_b_half_bytes
    ACC_OVERFLOW = 8        # partition_m * partition_n * 4 > acc_buffer_needed, or
                            # acc_buffer_needed > acc_half_bytes
    BAD_ADDRESS = 9         # a tensor reaches outside the memory, or C overlaps A or B; a B
                            # or C in the local buffer that it cannot serve (local_problem)
    BAD_FLAGS = 10          # outer_m, need_splitk or b_mode is neither 0 nor 1
    BAD_TABLE = 11          # convolution tables larger than the on-chip table memories
    # layer record rules (spec.record.check_record)
    BAD_LAYER = 12          # op_kind / out_format / post_mode / bias_present / int8 fields,
                            # or more output channels than quant_entries with post-processing
    BAD_WINDOW = 13         # output window, written range, statistics or parameter addresses
    BAD_QUANT = 14          # a multiplier outside [1, 2**31) or a shift outside [-31, 31]
    # image rules (spec.record.check_header), image runs only
    BAD_IMAGE = 15          # magic, format version or the image structure
    CONFIG_MISMATCH = 16    # the image's config_id is not this accelerator's
    BAD_CRC = 17            # the image's CRC-32 does not match its bytes
    BAD_WEIGHTS = 18        # a layer's A loads do not match its record's a_crc (after it ran)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Tiling:
    """A GEMM shape with seed 000's tiling of it: the descriptor fields from ``m`` to
    ``acc_buffer_needed``, in descriptor order (base of :class:`GemmDescriptor` and of
    :class:`planner.tiling.TilingPlan`)."""

    m: int
    k: int
    n: int
    partition_m: int
    partition_n: int
    partition_k: int
    tile_m: int
    tile_n: int
    outer_m: int          # seed 000 outer loop flag: 1 = m partitions outside n partitions
    need_splitk: int
    acc_buffer_needed: int  # bytes of one accumulator half the plan uses


@dataclasses.dataclass(frozen=True, kw_only=True)
class Operands:
    """Where A (k-major), B and C live, with their row strides in bytes: the descriptor fields
    from ``a_addr`` to ``c_stride``, in descriptor order (base of :class:`GemmDescriptor` and of
    :class:`tb.placement.Placement`)."""

    a_addr: int
    a_stride: int
    b_addr: int
    b_stride: int
    c_addr: int
    c_stride: int


@dataclasses.dataclass(frozen=True, kw_only=True)
class GemmDescriptor(Operands, Tiling):
    """One tiled GEMM as the sequencer executes it. Every field is an unsigned 32-bit word.

    Fields, in register order: :class:`Tiling`'s, then :class:`Operands`', then the
    convolution ones below (dataclass fields follow the bases in reverse MRO order)."""

    b_mode: int = 0       # 0: B dense row-major; 1: B through the convolution tables
    off_addr: int = 0
    run_addr: int = 0
    grp_addr: int = 0
    run_count: int = 0

    def __post_init__(self):
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if type(value) is not int or not 0 <= value < (1 << 32):
                raise ValueError(f"GemmDescriptor.{field.name} must be an int in [0, 2**32), "
                                 f"not {value!r}")

    def words(self) -> list[int]:
        """The descriptor as register words, in :data:`DESC_FIELDS` order."""
        return [getattr(self, name) for name in DESC_FIELDS]


#: Register order of the descriptor fields (the CSR map and the firmware image use it).
DESC_FIELDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(GemmDescriptor))


def _extent(addr: int, rows: int, stride: int, row_bytes: int) -> tuple[int, int]:
    """[first, last+1) byte range touched by ``rows`` rows of ``row_bytes`` at ``stride``."""
    return addr, addr + (rows - 1) * stride + row_bytes


def groups_n(d: GemmDescriptor, cfg: AccelConfig) -> int:
    """Lane groups of N: the group table has one more entry."""
    return -(-d.n // cfg.array_cols)


def tensor_extents(d: GemmDescriptor, cfg: AccelConfig, *,
                   out_bytes: int = 4) -> dict[str, tuple[int, int]]:
    """Byte ranges the memory ports may address for A, B and C (and the convolution tables),
    each row rounded up to whole lane groups. Reads past a row's end are masked; C elements past
    ``n`` carry cleared strobes, so the bytes *written* are exactly
    ``c_addr + i * c_stride + [0, out_bytes * n)``. A table word read fetches a whole B beat.
    ``out_bytes`` is the size of a C element: 4 (int32 output) or 1 (int8 output)."""
    r, c = cfg.array_rows, cfg.array_cols
    a_row = -(-d.m // r) * r
    b_row = -(-d.n // c) * c
    out = {
        "a": _extent(d.a_addr, d.k, d.a_stride, a_row),
        "b": _extent(d.b_addr, d.k, d.b_stride, b_row),
        "c": _extent(d.c_addr, d.m, d.c_stride, out_bytes * b_row),
    }
    if d.b_mode == 1:
        beat = cfg.b_beat_bytes
        out["b"] = (d.b_addr, d.b_addr + d.b_stride)
        out["off"] = (d.off_addr, d.off_addr + 4 * (d.k - 1) + beat)
        out["run"] = (d.run_addr, d.run_addr + 8 * (d.run_count - 1) + 4 + beat)
        out["grp"] = (d.grp_addr, d.grp_addr + 4 * groups_n(d, cfg) + beat)
    return out


def _local_text(cfg: AccelConfig) -> str:
    return f"[{cfg.local_base:#x}, {cfg.local_base + cfg.local_buf_bytes:#x})"


def local_problem(d: GemmDescriptor, cfg: AccelConfig, operand: str, *,
                  out_bytes: int = 4) -> str | None:
    """Why operand ``"b"`` or ``"c"`` of ``d``, lying in the on-chip local buffer, cannot be
    served there (None when it can). The local buffer holds rows of one B beat: a local B is a
    dense matrix (``b_mode`` 0), a local C is int8, and their address and row stride are whole
    rows (multiples of ``b_beat_bytes``)."""
    row = cfg.b_beat_bytes
    where = f"lies in the local buffer {_local_text(cfg)}"
    if operand == "b":
        if d.b_mode != 0:
            return f"B {where}, which serves dense operands only: b_mode must be 0, not {d.b_mode}"
        if d.b_addr % row or d.b_stride % row:
            return (f"B {where}: b_addr={d.b_addr:#x} and b_stride={d.b_stride} must be "
                    f"multiples of its row of {row} bytes")
        return None
    if out_bytes != 1:
        return f"C {where}, which holds int8 outputs only (out_format INT8)"
    if d.c_addr % row or d.c_stride % row:
        return (f"C {where}: c_addr={d.c_addr:#x} and c_stride={d.c_stride} must be multiples "
                f"of its row of {row} bytes")
    return None


def check(d: GemmDescriptor, cfg: AccelConfig, *,
          out_bytes: int = 4) -> list[tuple[ErrorCode, str]]:
    """Every rule ``d`` breaks on ``cfg``, in the priority order the RTL reports them.

    The RTL reports the first entry's code; an empty list means the hardware runs it.
    ``out_bytes`` is the C element size (4: int32 output, 1: int8 output; see
    :func:`spec.record.check_record` for the rest of a layer's rules).
    """
    r, c = cfg.array_rows, cfg.array_cols
    errs: list[tuple[ErrorCode, str]] = []

    def bad(code: ErrorCode, msg: str):
        errs.append((code, msg))

    for name in ("m", "k", "n"):
        if not 1 <= getattr(d, name) <= MAX_DIM:
            bad(ErrorCode.BAD_SHAPE, f"{name}={getattr(d, name)} must be in [1, {MAX_DIM}]")
    if not (1 <= d.partition_m <= MAX_DIM and d.partition_m % r == 0):
        bad(ErrorCode.BAD_PARTITION_M,
            f"partition_m={d.partition_m} must be a positive multiple of array_rows={r}")
    if not (1 <= d.partition_n <= MAX_DIM and d.partition_n % c == 0):
        bad(ErrorCode.BAD_PARTITION_N,
            f"partition_n={d.partition_n} must be a positive multiple of array_cols={c}")
    if not 1 <= d.partition_k <= MAX_DIM:
        bad(ErrorCode.BAD_PARTITION_K, f"partition_k={d.partition_k} must be in [1, {MAX_DIM}]")
    elif not d.need_splitk and d.partition_k < d.k:
        bad(ErrorCode.BAD_PARTITION_K,
            f"partition_k={d.partition_k} < k={d.k} needs need_splitk=1")
    if not (r <= d.tile_m <= max(d.partition_m, r) and d.tile_m % r == 0):
        bad(ErrorCode.BAD_TILE,
            f"tile_m={d.tile_m} must be a multiple of {r} in [{r}, partition_m]")
    if not (c <= d.tile_n <= max(d.partition_n, c) and d.tile_n % c == 0):
        bad(ErrorCode.BAD_TILE,
            f"tile_n={d.tile_n} must be a multiple of {c} in [{c}, partition_n]")
    if d.partition_m * d.partition_k > cfg.buf_a_half_bytes:
        bad(ErrorCode.BUF_A_OVERFLOW,
            f"partition_m*partition_k={d.partition_m * d.partition_k} exceeds "
            f"buf_a_half_bytes={cfg.buf_a_half_bytes}")
    if d.partition_k * d.partition_n > cfg.buf_b_half_bytes:
        bad(ErrorCode.BUF_B_OVERFLOW,
            f"partition_k*partition_n={d.partition_k * d.partition_n} exceeds "
            f"buf_b_half_bytes={cfg.buf_b_half_bytes}")
    acc_need = d.partition_m * d.partition_n * cfg.acc_bytes
    if acc_need > d.acc_buffer_needed or d.acc_buffer_needed > cfg.acc_half_bytes:
        bad(ErrorCode.ACC_OVERFLOW,
            f"need partition_m*partition_n*4={acc_need} <= acc_buffer_needed="
            f"{d.acc_buffer_needed} <= acc_half_bytes={cfg.acc_half_bytes}")
    for name in ("outer_m", "need_splitk", "b_mode"):
        if getattr(d, name) not in (0, 1):
            bad(ErrorCode.BAD_FLAGS, f"{name}={getattr(d, name)} must be 0 or 1")
    if d.b_mode == 1 and not errs:
        if d.k > cfg.conv_offset_entries:
            bad(ErrorCode.BAD_TABLE, f"k={d.k} offsets exceed conv_offset_entries="
                                     f"{cfg.conv_offset_entries}")
        if not 1 <= d.run_count <= cfg.conv_run_entries:
            bad(ErrorCode.BAD_TABLE, f"run_count={d.run_count} must be in [1, "
                                     f"conv_run_entries={cfg.conv_run_entries}]")
        if groups_n(d, cfg) + 1 > cfg.conv_group_entries:
            bad(ErrorCode.BAD_TABLE, f"n={d.n} needs {groups_n(d, cfg) + 1} group entries, "
                                     f"more than conv_group_entries={cfg.conv_group_entries}")
    if not errs:
        ext = tensor_extents(d, cfg, out_bytes=out_bytes)
        for name, (lo, hi) in ext.items():
            if hi <= cfg.dram_bytes:
                continue
            if name in ("b", "c") and cfg.is_local(lo, hi):
                problem = local_problem(d, cfg, name, out_bytes=out_bytes)
                if problem:
                    bad(ErrorCode.BAD_ADDRESS, problem)
                continue
            bad(ErrorCode.BAD_ADDRESS, f"{name.upper()} spans [{lo:#x}, {hi:#x}) beyond "
                                       f"dram_bytes={cfg.dram_bytes:#x} and is not inside the "
                                       f"local buffer {_local_text(cfg)} (only B and C may be)")
        if d.c_stride < out_bytes * d.n:
            bad(ErrorCode.BAD_ADDRESS, f"c_stride={d.c_stride} < {out_bytes}*n="
                                       f"{out_bytes * d.n}: C rows overlap")
        for name in [key for key in ext if key != "c"]:
            lo, hi = ext[name]
            if lo < ext["c"][1] and ext["c"][0] < hi:
                bad(ErrorCode.BAD_ADDRESS, f"C [{ext['c'][0]:#x}, {ext['c'][1]:#x}) overlaps "
                                           f"{name.upper()} [{lo:#x}, {hi:#x})")
    return errs
