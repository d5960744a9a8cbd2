"""A functional model of the accelerator running an image: what the hardware does to memory.

:func:`run_image` takes device memory (a bytearray) and an image address and does what an image
run does, in the same order, from the same rules: the header checks
(:func:`spec.record.check_header`), the CRC of the image up to its weights, the check pass (:func:`spec.record.check_record` on
every record, parameters included), then each layer: A and B read from memory (B through the
convolution tables for CONV layers), ``spec.golden`` arithmetic (int32 wrapping accumulation,
bias, requantisation), C written row by row, the check of the layer's A loads against its
``a_crc`` (a mismatch ends the run with BAD_WEIGHTS after the layer's writes, before its
statistics), and the statistics record (its ``layer_index``
word; the counter words are cycle counts this model does not know, written as 0 and listed in
:attr:`EmulationResult.counter_words` so comparisons can skip them; a later layer that reads
one, before anything overwrites it, has an output the model cannot know either: the result
says so, ``defined = False``).

It is the reference the RTL is fuzzed against (tb/fuzz.py) and, as :class:`EmulatorDevice`, the
``golden`` backend of the host runtime (the one functional model of the device). One thing it cannot predict: a convolution whose tables are malformed (a lane filled
twice or never, a read outside the tensor); the hardware's output is then defined by its
implementation, not by the spec, and the result says so (``defined = False``).
"""

from __future__ import annotations

import dataclasses
import mmap
import struct
import zlib

import numpy as np

from planner.offsets import ConvTables, gather_b
from spec.config import AccelConfig
from spec.desc import (DEPTHWISE_KERNELS, DEPTHWISE_STRIDES, DESC_FIELDS, depthwise_arrays,
                       depthwise_odd, depthwise_out, ErrorCode, GemmDescriptor,
                       groups_n, row_store)
from spec.golden import conv2d_int8, gemm_int8, requantize
from spec.layouts import (HEADER_WORDS, IMAGE_HEADER_WORDS, LAYER_WORDS, STATS_BYTES, STATS_WORDS,
                          OutFormat)
from spec.record import LAYER_RECORD_BYTES, check_header, check_record, out_bytes, signed32
from spec.regmap import CTRL_BITS, REG, STATUS_BITS
from spec.schedule import a_load_crc

from .runtime import DeviceError

__all__ = ["EmulationResult", "run_image", "EmulatorDevice", "DeviceMemory", "zeroed_memory"]


def zeroed_memory(size: int) -> mmap.mmap:
    """``size`` writable zero bytes that cost memory only where they are written: an anonymous
    mapping, whose pages the kernel supplies (zeroed) on first touch. A device address space of
    2 GiB (``default``) therefore costs the pages of its image and tensors, where
    ``bytearray(size)`` would fill all of it. The mapping is private (``MAP_PRIVATE`` where the
    platform has it): reading a page never written maps the kernel's shared zero page and
    costs nothing, where a shared anonymous mapping would allocate it. It indexes (ints),
    slices (``bytes``), assigns and exposes the buffer protocol as a ``bytearray`` does, but
    cannot change size, and iterating it yields 1-byte ``bytes`` (``mmap``'s rule): test it with
    ``np.frombuffer(mem, np.uint8).any()``, not ``any(mem)``."""
    if not (isinstance(size, int) and size > 0):
        raise ValueError(f"zeroed_memory: size={size!r} must be a positive int")
    private = getattr(mmap, "MAP_PRIVATE", None)
    return mmap.mmap(-1, size) if private is None else mmap.mmap(-1, size, flags=private)


@dataclasses.dataclass
class EmulationResult:
    error: ErrorCode
    layer_index: int
    defined: bool = True
    #: (addr, size) of every byte range the run wrote, in order
    writes: list[tuple[int, int]] = dataclasses.field(default_factory=list)
    #: device addresses of the statistics records' counter words (cycle counts, not modelled)
    counter_words: list[int] = dataclasses.field(default_factory=list)
    #: (addr, size) byte ranges the layers' results depend on (A, B or the convolution input
    #: tensor, the parameter arrays), merged; tables and records are in the image
    reads: list[tuple[int, int]] = dataclasses.field(default_factory=list)


class DeviceMemory:
    """Device memory: the caller's DRAM and the accelerator's local buffer above it
    (``[dram_bytes, dram_bytes + local_buf_bytes)``, zero at the start of an image run). Local
    bytes no layer of this run has written are *unwritten*: a layer reading one has no output
    the spec defines (the hardware's buffer keeps whatever an earlier run left there)."""

    def __init__(self, mem: bytearray, cfg: AccelConfig):
        if len(mem) != cfg.dram_bytes:
            raise ValueError(f"memory is {len(mem)} bytes, the device has dram_bytes="
                             f"{cfg.dram_bytes}")
        self.mem = mem
        self.view = np.frombuffer(mem, dtype=np.uint8)
        self.size = len(mem)
        self.local = np.zeros(cfg.local_buf_bytes, np.uint8)
        self.local_written = np.zeros(cfg.local_buf_bytes, bool)
        #: ``[lo, hi)`` DRAM byte ranges whose contents the model does not know (statistics
        #: counter words) and nothing has overwritten since; ``unknown_read``: a read met one
        self.unknown: list[tuple[int, int]] = []
        self.unknown_read = False

    def set_unknown(self, lo: int, hi: int) -> None:
        """Bytes ``[lo, hi)`` of DRAM now hold values the model does not know."""
        self.unknown.append((lo, hi))

    def _known(self, lo: int, hi: int) -> None:
        """Bytes ``[lo, hi)`` were written with known values."""
        self.unknown = [part for a, b in self.unknown
                        for part in ((a, min(b, lo)), (max(a, hi), b)) if part[0] < part[1]]

    def touch_range(self, addr: int, n: int) -> None:
        """:meth:`_touch` for the ``n`` bytes from ``addr`` (not wrapping)."""
        if any(a < addr + n and addr < b for a, b in self.unknown):
            self.unknown_read = True

    def _touch(self, idx: np.ndarray) -> None:
        """Note whether DRAM bytes ``idx`` (wrapped to the memory) include an unknown one."""
        if not self.unknown or self.unknown_read or idx.size == 0:
            return
        lo, hi = int(idx.min()), int(idx.max()) + 1
        for a, b in self.unknown:
            if a < hi and lo < b and np.any((idx >= a) & (idx < b)):
                self.unknown_read = True
                return

    def is_local(self, idx: np.ndarray) -> np.ndarray:
        return (idx >= self.size) & (idx < self.size + self.local.size)

    def local_defined(self, idx: np.ndarray) -> bool:
        """Every local byte among ``idx`` was written earlier in this run."""
        idx = np.asarray(idx, np.int64)
        loc = idx[self.is_local(idx)] - self.size
        return bool(self.local_written[loc].all())

    def write(self, addr: int, data: bytes) -> None:
        if addr >= self.size:
            lo = addr - self.size
            self.local[lo:lo + len(data)] = np.frombuffer(data, np.uint8)
            self.local_written[lo:lo + len(data)] = True
        else:
            self.mem[addr:addr + len(data)] = data
            self._known(addr, addr + len(data))

    def words(self, addr: int, count: int) -> list[int]:
        idx = (addr + 4 * np.arange(count, dtype=np.int64)[:, None]
               + np.arange(4)[None, :]) % self.size
        self._touch(idx)
        raw = self.view[idx].astype(np.uint32)
        return (raw[:, 0] | raw[:, 1] << 8 | raw[:, 2] << 16 | raw[:, 3] << 24).tolist()

    def gather(self, idx: np.ndarray) -> np.ndarray:
        idx = np.asarray(idx, np.int64)
        loc = self.is_local(idx)
        self._touch(idx[~loc] % self.size if loc.any() else idx % self.size)
        if not loc.any():
            return self.view[idx % self.size].view(np.int8)
        out = self.view[np.where(loc, 0, idx) % self.size].copy()
        out[loc] = self.local[idx[loc] - self.size]
        return out.view(np.int8)


def run_image(mem: bytearray, image_addr: int, cfg: AccelConfig, *,
              track: bool = True) -> EmulationResult:
    """Run the image at ``image_addr`` on ``mem`` (``cfg.dram_bytes`` long, modified in place).
    ``track``: record the byte ranges read and written (:attr:`EmulationResult.reads` /
    ``writes``; the fuzzer compares them with the RTL's), which costs a sort per operand."""
    m = DeviceMemory(mem, cfg)
    header = dict(zip(HEADER_WORDS, m.words(image_addr, IMAGE_HEADER_WORDS)))
    errs = check_header(header, cfg, image_addr=image_addr)
    if errs:
        return EmulationResult(errs[0][0], 0)
    total = header["total_bytes"]
    # the CRC of the image up to its weights with the crc32 word as zeros, read in place
    at = image_addr + 4 * HEADER_WORDS["crc32"]
    weights_at = image_addr + header["section_weights_offset"]
    view = memoryview(mem)
    crc = zlib.crc32(view[image_addr:at])
    crc = zlib.crc32(view[at + 4:weights_at], zlib.crc32(b"\0\0\0\0", crc))
    view.release()
    if crc != header["crc32"]:
        return EmulationResult(ErrorCode.BAD_CRC, 0)
    image = (image_addr, image_addr + total)
    first = image_addr + header["section_layers_offset"]
    records = []
    for i in range(header["layer_count"]):
        words = m.words(first + i * LAYER_RECORD_BYTES, len(LAYER_WORDS))
        rec = dict(zip(LAYER_WORDS, words))
        errs = check_record(rec, cfg, image=image, weights_at=weights_at, read_words=m.words)
        if errs:
            return EmulationResult(errs[0][0], i)
        records.append(rec)
    result = EmulationResult(ErrorCode.NONE, len(records) - 1)
    for i, rec in enumerate(records):
        d = GemmDescriptor(**{name: rec[f"desc_{name}"] for name in DESC_FIELDS})
        # the A beats as the layer loads them (the check pass put A inside the image, which no
        # layer writes): their CRC is known before the layer runs, compared when it ends (not
        # for a depthwise layer: its A port reads activations)
        depthwise = d.b_mode in DEPTHWISE_STRIDES

        def read(addr, n):
            m.touch_range(addr, n)
            return bytes(mem[addr:addr + n])

        a_crc = 0 if depthwise else a_load_crc(d, cfg, read)
        if result.defined:
            result.defined = _run_layer(m, rec, cfg, result, track)
        # a layer that read a counter word an earlier layer's statistics left has an output
        # this model cannot know
        result.defined = result.defined and not m.unknown_read
        if not depthwise and a_crc != rec["a_crc"]:
            result.error, result.layer_index = ErrorCode.BAD_WEIGHTS, i
            return result
        stats = rec["stats_addr"]
        words = [0] * (STATS_BYTES // 4)
        words[STATS_WORDS["layer_index"]] = i
        m.write(stats, struct.pack(f"<{len(words)}I", *words))
        counters = [stats + 4 * STATS_WORDS[name] for name in STATS_WORDS
                    if name != "layer_index"]
        for at in counters:
            m.set_unknown(at, at + 4)
        if track:
            result.writes.append((stats, STATS_BYTES))
        result.counter_words += counters
    return result


def _run_layer(m: DeviceMemory, rec: dict, cfg: AccelConfig, result: EmulationResult,
               track: bool) -> bool:
    """One layer; False when its output is not defined by the spec (malformed tables)."""
    d = GemmDescriptor(**{name: rec[f"desc_{name}"] for name in DESC_FIELDS})
    if d.b_mode in DEPTHWISE_STRIDES:
        return _run_depthwise(m, rec, d, result, track)
    kk = np.arange(d.k, dtype=np.int64)
    a = m.gather(d.a_addr + kk[None, :] * d.a_stride + np.arange(d.m)[:, None])    # m x k
    if d.b_mode == 0:
        b_idx = d.b_addr + kk[:, None] * d.b_stride + np.arange(d.n)[None, :]
        if not m.local_defined(b_idx):
            return False
        b = m.gather(b_idx)                                                         # k x n
    else:
        b = _gather_conv(m, d, cfg)
        if b is None:
            return False
    if track:
        result.reads += _ranges(d.a_addr + kk[None, :] * d.a_stride
                                + np.arange(d.m)[:, None], m.size)
        if d.b_mode == 0:
            if d.b_addr < m.size:                # a local B is on chip, not in memory
                result.reads += _ranges(d.b_addr + kk[:, None] * d.b_stride
                                        + np.arange(d.n)[None, :], m.size)
        else:
            result.reads += _ranges(d.b_addr + np.arange(d.b_stride, dtype=np.int64), m.size)
        for name in ("bias_addr", "mult_addr", "shift_addr"):
            result.reads += _ranges(rec[name] + np.arange(4 * d.m, dtype=np.int64), m.size)
    acc = gemm_int8(np.ascontiguousarray(a), np.ascontiguousarray(b))
    return _post_and_store(m, rec, d, acc, result, track)


def _run_depthwise(m: DeviceMemory, rec: dict, d: GemmDescriptor, result: EmulationResult,
                   track: bool) -> bool:
    """A depthwise layer (:data:`spec.desc.DEPTHWISE_STRIDES`: a ``K`` x ``K`` kernel,
    :data:`spec.desc.DEPTHWISE_KERNELS`, 3, 5 or 7, stride 1 or 2): ``m`` channels of ``k x n``
    maps, dense NCHW, padded by ``p = (K - 1) / 2`` (1, 2 or 3) with ``pad_value`` (on the top
    and the left ``p - 1`` with :func:`spec.desc.depthwise_odd`'s odd rows and columns: pads
    ``(p - odd_rows, p - odd_cols, p, p)``, top, left, bottom, right), convolved with
    each channel's ``K * K`` weights (the :func:`spec.desc.depthwise_arrays` u32 arrays at
    ``a_addr + t a_stride``, taps ``4t .. 4t + 3`` in array ``t``) at the stride; the output is
    dense NCHW, channel ``c`` a row of ``P Q`` (:func:`spec.desc.depthwise_out`)."""
    c, h, w = d.m, d.k, d.n
    s, kernel, arrays = DEPTHWISE_STRIDES[d.b_mode], DEPTHWISE_KERNELS[d.b_mode], \
        depthwise_arrays(d.b_mode)
    pad = (kernel - 1) // 2
    oh, ow = depthwise_out(d)
    x = m.gather(d.b_addr + np.arange(c * h * w, dtype=np.int64)).reshape(c, h, w)
    words = np.array([m.words(d.a_addr + t * d.a_stride, c) for t in range(arrays)], "<u4")
    taps = np.ascontiguousarray(words.T).view(np.int8).reshape(c, 4 * arrays)[:, :kernel ** 2]
    if track:
        result.reads += _ranges(d.b_addr + np.arange(c * h * w, dtype=np.int64), m.size)
        for t in range(arrays):
            result.reads += _ranges(d.a_addr + t * d.a_stride + np.arange(4 * c,
                                                                          dtype=np.int64), m.size)
        for name in ("bias_addr", "mult_addr", "shift_addr"):
            result.reads += _ranges(rec[name] + np.arange(4 * c, dtype=np.int64), m.size)
    odd_rows, odd_cols = depthwise_odd(d.b_mode)
    padded = np.pad(x, ((0, 0), (pad - odd_rows, pad), (pad - odd_cols, pad)),
                    constant_values=signed32(rec["pad_value"]))
    acc = conv2d_int8(padded[None], taps.reshape(c, 1, kernel, kernel), stride=(s, s),
                      groups=c)[0].reshape(c, oh * ow)
    flat = dataclasses.replace(d, n=oh * ow, c_stride=out_bytes(rec) * oh * ow)
    return _post_and_store(m, rec, flat, acc, result, track)


def _post_and_store(m: DeviceMemory, rec: dict, d: GemmDescriptor, acc: np.ndarray,
                    result: EmulationResult, track: bool) -> bool:
    """Bias and requantisation of the int32 ``acc`` (``m x n``) as the record says, then row
    ``i`` written at ``c_addr + i c_stride``."""
    bias = None
    if rec["bias_present"] == 1:
        bias = np.array([signed32(w) for w in m.words(rec["bias_addr"], d.m)], np.int64)
    if rec["out_format"] == OutFormat.INT8:
        out = requantize(acc, multiplier=[signed32(w) for w in m.words(rec["mult_addr"], d.m)],
                         shift=[signed32(w) for w in m.words(rec["shift_addr"], d.m)],
                         bias=bias, zero_point=signed32(rec["out_zero_point"]),
                         act_min=signed32(rec["act_min"]), act_max=signed32(rec["act_max"]))
    else:
        wide = acc.astype(np.int64) + (0 if bias is None else bias[:, None])
        out = (((wide + 2**31) % 2**32) - 2**31).astype("<i4")
    e = out_bytes(rec)
    raw = np.ascontiguousarray(out).view(np.uint8).reshape(d.m, e * d.n)
    # C row i at c_addr + i c_stride: n elements, or with the row store (spec.desc.row_store)
    # c_rows rows of pixels, row r the first c_row_elems of partition r, at r c_row_pitch
    pieces = ([(r * d.c_row_pitch, e * r * d.partition_n, e * d.c_row_elems)
               for r in range(d.c_rows)] if row_store(d) else [(0, 0, e * d.n)])
    for i in range(d.m):
        for at, src, size in pieces:
            lo = d.c_addr + i * d.c_stride + at
            m.write(lo, raw[i, src:src + size].tobytes())
            if track and lo < m.size:            # local writes stay on chip
                result.writes.append((lo, size))
    return True


def _ranges(idx: np.ndarray, size: int, gap: int = 256) -> list[tuple[int, int]]:
    """Byte indices (wrapped to the memory) as ``(addr, size)`` ranges, merging gaps up to
    ``gap`` bytes (a superset of the bytes read, in few ranges)."""
    flat = np.unique(np.asarray(idx, dtype=np.int64).reshape(-1) % size)
    if flat.size == 0:
        return []
    cut = np.flatnonzero(np.diff(flat) > gap)
    starts = np.concatenate(([flat[0]], flat[cut + 1]))
    ends = np.concatenate((flat[cut], [flat[-1]])) + 1
    return [(int(a), int(b - a)) for a, b in zip(starts, ends)]


def _gather_conv(m: DeviceMemory, d: GemmDescriptor, cfg: AccelConfig) -> np.ndarray | None:
    grp_words = groups_n(d, cfg) + 1
    off = bytes(m.gather(d.off_addr + np.arange(4 * d.k)).view(np.uint8))
    run = bytes(m.gather(d.run_addr + np.arange(8 * d.run_count)).view(np.uint8))
    grp = bytes(m.gather(d.grp_addr + np.arange(4 * grp_words)).view(np.uint8))
    tables = dataclasses.replace(
        ConvTables.from_bytes(None, "NCHW", cfg.array_cols, off, run, grp), pixels=d.n,
        row_lanes=(d.partition_n, d.c_row_elems) if row_store(d) else None)
    tensor = m.gather(d.b_addr + np.arange(d.b_stride, dtype=np.int64))
    try:
        return gather_b(tables, tensor)
    except ValueError:
        return None


class EmulatorDevice:
    """:func:`run_image` as a :class:`firmware.runtime.Backend`: the host runtime's ``golden``
    device. Memory is ``dram_bytes`` (the local buffer is the emulator's, per run); a write to
    ``CTRL.RUN_IMAGE`` runs the image at ``IMAGE_ADDR`` at once and sets ``ERROR`` and
    ``LAYER_INDEX`` as the hardware would. It has no clock: the counter registers and the
    statistics records' counter words read 0. Register-mode runs (``CTRL.START``) are refused,
    and so is an image whose output the spec does not define (:attr:`EmulationResult.defined`).
    """

    def __init__(self, cfg: AccelConfig):
        self.cfg = cfg
        self.mem = zeroed_memory(cfg.dram_bytes)
        self._regs: dict[int, int] = {}
        self._error = 0
        self._layer_index = 0

    def _range(self, addr: int, size: int) -> slice:
        if not (0 <= addr and size >= 0 and addr + size <= len(self.mem)):
            raise DeviceError(f"memory access [{addr:#x}, {addr + size:#x}) outside the "
                              f"device's dram_bytes={len(self.mem):#x}")
        return slice(addr, addr + size)

    async def write_memory(self, addr: int, data: bytes) -> None:
        self.mem[self._range(addr, len(data))] = data

    async def read_memory(self, addr: int, size: int) -> bytes:
        return bytes(self.mem[self._range(addr, size)])

    async def write_register(self, offset: int, value: int) -> None:
        self._regs[offset] = value
        if offset == REG["CTRL"].offset:
            if value & (1 << CTRL_BITS["START"]):
                raise DeviceError("the golden device runs images only (CTRL.RUN_IMAGE); a "
                                  "register-mode CTRL.START needs the RTL backends")
            if value & (1 << CTRL_BITS["RUN_IMAGE"]):
                addr = self._regs.get(REG["IMAGE_ADDR"].offset, 0)
                result = run_image(self.mem, addr, self.cfg, track=False)
                if not result.defined:
                    raise DeviceError(f"the image at {addr:#x} reads on-chip bytes no layer of "
                                      f"its run wrote, or has malformed convolution tables: "
                                      f"its output is not defined by the spec")
                self._error, self._layer_index = int(result.error), result.layer_index

    async def read_register(self, offset: int) -> int:
        if offset == REG["CONFIG_ID"].offset:
            return self.cfg.config_id
        if offset == REG["STATUS"].offset:
            return (1 << STATUS_BITS["DONE"]) | (1 << STATUS_BITS["IMAGE"])
        if offset == REG["ERROR"].offset:
            return self._error
        if offset == REG["LAYER_INDEX"].offset:
            return self._layer_index
        return 0          # PERF_*: no clock

    async def wait_done(self, budget_cycles: int) -> None:
        return None
