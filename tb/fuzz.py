"""Firmware fuzzing on the RTL: mutated images against the functional model.

:func:`fuzz_cases` mutates valid seed images (bit flips, record words set to edge or random
values, word swaps, header changes, truncation, random descriptors, corrupted quantisation
parameters and tables), resealing the CRC most of the time so the mutation reaches the checks
behind it. :func:`firmware.emulator.run_image` says what each must do: which error code (and
layer), or exactly which bytes the run writes. :func:`run_fuzz` runs them all in one simulation
through the shipped runtime and compares: error code and layer index, and every byte of the
image, the data region and each range the model writes (plus a guard band around it), with only
the statistics records' cycle-count words excluded. A run that does not finish within its cycle
budget fails the run (a hang).
"""

from __future__ import annotations

import collections
import dataclasses
import struct
from pathlib import Path

import numpy as np

from firmware.demos import build_mlp
from firmware.builder import ImageBuilder, Requant
from firmware.emulator import DeviceMemory, run_image, zeroed_memory
from firmware.image import reseal
from spec.config import AccelConfig
from spec.desc import DESC_FIELDS, GemmDescriptor, MAX_DIM
from spec.layouts import HEADER_WORDS, LAYER_WORDS, OpKind
from spec.record import LAYER_RECORD_BYTES
from planner.layout import padded_bytes
from planner.shapes import ConvShape

from .cases import register_budget_cycles
from .jobs import ImageRun, run_jobs

__all__ = ["Seed", "FuzzCase", "seeds", "fuzz_cases", "run_fuzz", "GUARD"]

#: Bytes checked on each side of every range the model writes.
GUARD = 64


@dataclasses.dataclass
class Seed:
    name: str
    blob: bytes
    load: list[tuple[int, bytes]]
    data: tuple[int, int]            # the data region [lo, hi) the seed's buffers live in


@dataclasses.dataclass
class FuzzCase:
    seed: str
    mutation: str
    blob: bytes
    expect_error: int
    expect_layer: int
    budget_cycles: int
    reads: list[tuple[str, int, int]]
    expected: dict[str, bytes]
    masked: dict[str, list[int]]      # per read: byte offsets not compared (counter words)
    load: list[tuple[int, bytes]]     # memory before the run, the image aside


def _conv_seed(cfg: AccelConfig, rng) -> Seed:
    """A convolution (with bias, int8 ReLU output) feeding an int32 fully connected layer."""
    b = ImageBuilder(cfg)
    shape = ConvShape(batch=1, in_channels=3, height=6, width=7, out_channels=5, kernel_h=3,
                      kernel_w=3, stride_h=1, stride_w=2, pad_top=1, pad_left=1, pad_bottom=1,
                      pad_right=0)
    x = b.buffer("x", padded_bytes(shape, "NCHW"))
    pq = shape.out_h * shape.out_w
    y = b.buffer("y", 5 * pq)
    z = b.buffer("z", 4 * 3)
    w = rng.integers(-128, 128, (5, 3, 3, 3)).astype(np.int8)
    rq = Requant(multiplier=np.full(5, 1 << 30, np.int32), shift=np.full(5, 7, np.int32),
                 zero_point=3, act_min=3, act_max=127)
    b.conv("conv", shape=shape, weights=w, x_addr=x, out_addr=y, out_chan_stride=pq,
           bias=rng.integers(-500, 500, 5).astype(np.int32), requant=rq)
    b.gemm("fc", weights=rng.integers(-128, 128, (3, 5 * pq)).astype(np.int8), n=1, b_addr=y,
           b_stride=1, out_addr=z, out_stride=4, op_kind=OpKind.FC)
    blob, _ = b.build()
    xin = rng.integers(-128, 128, padded_bytes(shape, "NCHW")).astype(np.int8).tobytes()
    return Seed("conv", blob, [(x, xin)], (b.data_addr, b._data_top))


def _row_store_seed(cfg: AccelConfig, rng) -> Seed:
    """A convolution writing the interior of the next one's padded input through the row store
    (one record; configs with ``row_store``), the next one's output dense."""
    b = ImageBuilder(cfg)
    first = ConvShape(batch=1, in_channels=3, height=5, width=7, out_channels=4, kernel_h=3,
                      kernel_w=3, stride_h=1, stride_w=1, pad_top=1, pad_left=1, pad_bottom=1,
                      pad_right=1)
    second = dataclasses.replace(first, in_channels=4, out_channels=3, stride_w=2)
    hp, wp = first.height + 2, first.width + 2
    x = b.buffer("x", padded_bytes(first, "NCHW"))
    y = b.buffer("y", padded_bytes(second, "NCHW"))
    z = b.buffer("z", 3 * second.out_h * second.out_w)
    rq = Requant(multiplier=np.full(4, 1 << 30, np.int32), shift=np.full(4, 7, np.int32),
                 zero_point=-2, act_min=-2, act_max=127)
    b.conv("conv0", shape=first, weights=rng.integers(-128, 128, (4, 3, 3, 3)).astype(np.int8),
           x_addr=x, out_addr=y + wp + 1, out_chan_stride=hp * wp, out_row_stride=wp,
           bias=rng.integers(-500, 500, 4).astype(np.int32), requant=rq)
    b.conv("conv1", shape=second, weights=rng.integers(-128, 128, (3, 4, 3, 3)).astype(np.int8),
           x_addr=y, out_addr=z, out_chan_stride=second.out_h * second.out_w,
           requant=dataclasses.replace(rq, multiplier=np.full(3, 1 << 30, np.int32),
                                       shift=np.full(3, 8, np.int32)))
    blob, _ = b.build()
    xin = rng.integers(-128, 128, padded_bytes(first, "NCHW")).astype(np.int8).tobytes()
    halo = np.full(padded_bytes(second, "NCHW"), -2, np.int8).tobytes()
    return Seed("row_store", blob, [(x, xin), (y, halo)], (b.data_addr, b._data_top))


def seeds(cfg: AccelConfig, rng) -> list[Seed]:
    mlp = build_mlp(cfg, seed=int(rng.integers(1 << 30)))
    builder_top = max(addr + size for _, addr, size in mlp.read) + 4096
    out = [Seed("mlp", mlp.blob, mlp.load, (cfg.dram_bytes // 2, builder_top)),
           _conv_seed(cfg, rng)]
    if cfg.row_store:
        out.append(_row_store_seed(cfg, rng))
    return out


# -- mutations ------------------------------------------------------------------------------------

def _record_at(blob: bytes, layer: int, field: str) -> int:
    off = struct.unpack_from("<I", blob, 4 * HEADER_WORDS["section_layers_offset"])[0]
    return off + layer * LAYER_RECORD_BYTES + 4 * LAYER_WORDS[field]


def _set_word(blob: bytearray, at: int, value: int):
    if 0 <= at and at + 4 <= len(blob):
        struct.pack_into("<I", blob, at, value & 0xFFFF_FFFF)


def _interesting(rng, current: int, cfg: AccelConfig) -> int:
    choices = [0, 1, 2, 3, 4, 7, 8, 64, 127, 128, 255, 256, MAX_DIM, MAX_DIM + 1, 1 << 31,
               (1 << 32) - 1, (1 << 32) - 128, cfg.dram_bytes, cfg.dram_bytes - 64,
               cfg.dram_bytes // 2, current + 1, current - 1, current + 64, current ^ 1,
               current ^ (1 << int(rng.integers(0, 32))), int(rng.integers(0, 1 << 32))]
    return choices[int(rng.integers(0, len(choices)))] & 0xFFFF_FFFF


def _layers(blob: bytes) -> int:
    return struct.unpack_from("<I", blob, 4 * HEADER_WORDS["layer_count"])[0]


def mutate(blob: bytes, rng, cfg: AccelConfig) -> tuple[str, bytes]:
    """One random mutation of ``blob``: (name, mutated image)."""
    out = bytearray(blob)
    n_layers = max(1, _layers(blob))
    kinds = ["bitflip", "record_word", "swap", "header", "truncate", "descriptor", "quant",
             "tables", "capacity"]
    kind = kinds[int(rng.integers(0, len(kinds)))]
    layer = int(rng.integers(0, n_layers))
    if kind == "bitflip":
        for _ in range(int(rng.integers(1, 9))):
            bit = int(rng.integers(0, 8 * len(out)))
            out[bit // 8] ^= 1 << (bit % 8)
    elif kind == "record_word":
        field = list(LAYER_WORDS)[int(rng.integers(0, len(LAYER_WORDS)))]
        at = _record_at(blob, layer, field)
        _set_word(out, at, _interesting(rng, struct.unpack_from("<I", blob, at)[0], cfg))
        kind = f"record_word:{field}"
    elif kind == "swap":
        names = list(LAYER_WORDS)
        f1, f2 = (names[int(i)] for i in rng.integers(0, len(names), 2))
        l2 = int(rng.integers(0, n_layers))
        a1, a2 = _record_at(blob, layer, f1), _record_at(blob, l2, f2)
        w1, w2 = blob[a1:a1 + 4], blob[a2:a2 + 4]
        out[a1:a1 + 4], out[a2:a2 + 4] = w2, w1
        kind = f"swap:{f1}/{f2}"
    elif kind == "header":
        field = list(HEADER_WORDS)[int(rng.integers(0, len(HEADER_WORDS)))]
        at = 4 * HEADER_WORDS[field]
        _set_word(out, at, _interesting(rng, struct.unpack_from("<I", blob, at)[0], cfg))
        kind = f"header:{field}"
    elif kind == "truncate":
        cut = 64 * int(rng.integers(1, max(2, len(blob) // 64)))
        out = out[:len(out) - cut]
        _set_word(out, 4 * HEADER_WORDS["total_bytes"], len(out))
    elif kind == "descriptor":
        # a random, mostly plausible descriptor: reaches the descriptor rules one by one
        fields = {name: struct.unpack_from("<I", blob, _record_at(blob, layer, f"desc_{name}"))[0]
                  for name in DESC_FIELDS}
        for name in rng.choice(list(DESC_FIELDS), int(rng.integers(1, 4)), replace=False):
            fields[name] = _interesting(rng, fields[name], cfg)
        for name, value in fields.items():
            _set_word(out, _record_at(blob, layer, f"desc_{name}"), value)
    elif kind == "capacity":
        # past an on-chip capacity: convolution runs, or output channels with post-processing
        if struct.unpack_from("<I", blob, _record_at(blob, layer, "desc_b_mode"))[0] == 1:
            at = _record_at(blob, layer, "desc_run_count")
            _set_word(out, at, cfg.conv_run_entries + int(rng.integers(1, 1000)))
        else:
            at = _record_at(blob, layer, "desc_m")
            _set_word(out, at, cfg.quant_entries + int(rng.integers(1, 1000)))
    elif kind in ("quant", "tables"):
        section = "quant" if kind == "quant" else "tables"
        off = struct.unpack_from("<I", blob, 4 * HEADER_WORDS[f"section_{section}_offset"])[0]
        size = struct.unpack_from("<I", blob, 4 * HEADER_WORDS[f"section_{section}_bytes"])[0]
        if size >= 4:
            for _ in range(int(rng.integers(1, 4))):
                at = off + 4 * int(rng.integers(0, size // 4))
                _set_word(out, at, _interesting(rng, struct.unpack_from("<I", blob, at)[0],
                                                cfg))
    if rng.random() < 0.9:
        if len(out) >= 64:
            out = bytearray(reseal(bytes(out)))
    else:
        kind += "+stale_crc"
    return kind, bytes(out)


# -- cases ----------------------------------------------------------------------------------------

def _merge(ranges):
    out = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1]:
            out[-1][1] = max(out[-1][1], hi)
        else:
            out.append([lo, hi])
    return [(lo, hi) for lo, hi in out]


def _budget(mem: bytearray, blob: bytes, cfg: AccelConfig) -> int | None:
    """A cycle budget for an image the model runs to completion, or None when a layer is too
    large to simulate quickly (the mutant is dropped)."""
    m = DeviceMemory(mem, cfg)
    total = 64 + 4 * len(blob) // cfg.b_beat_bytes
    first = struct.unpack_from("<I", blob, 4 * HEADER_WORDS["section_layers_offset"])[0]
    for i in range(_layers(blob)):
        words = m.words(first + i * LAYER_RECORD_BYTES, len(LAYER_WORDS))
        rec = dict(zip(LAYER_WORDS, words))
        d = GemmDescriptor(**{name: rec[f"desc_{name}"] for name in DESC_FIELDS})
        if d.m * d.n * d.k > 2_000_000:
            return None
        grp = None
        if d.b_mode == 1:
            grp = np.array(m.words(d.grp_addr, -(-d.n // cfg.array_cols) + 1), np.int64)
            if np.any(np.diff(grp) < 0) or grp[-1] > 1 << 20:
                return None
        total += register_budget_cycles(d, cfg, grp) + 3 * (4 * d.m // cfg.b_beat_bytes + 64) + 2000
    return 2 * total


def _error_budget(blob: bytes, cfg: AccelConfig) -> int:
    """Cycles an image may take to be refused: the header, a CRC pass over the ``total_bytes``
    its header claims (up to the whole memory), and a check pass over its records (each at
    most a record fetch and ``quant_entries`` words of parameters per array)."""
    total = struct.unpack_from("<I", blob, 4 * HEADER_WORDS["total_bytes"])[0] \
        if len(blob) >= 64 else 0
    total = min(total, cfg.dram_bytes)
    records = min(_layers(blob) if len(blob) >= 64 else 0, total // LAYER_RECORD_BYTES + 1)
    per_record = 200 + 3 * (4 * cfg.quant_entries // cfg.b_beat_bytes + 64)
    return 4096 + 4 * max(total, len(blob)) // cfg.b_beat_bytes + records * per_record


def fuzz_cases(cfg: AccelConfig, count: int, seed: int) -> tuple[list[FuzzCase], dict]:
    """``count`` mutants with their expected outcome; also returns a summary (mutations and
    expected codes)."""
    rng = np.random.default_rng(seed)
    bases = seeds(cfg, rng)
    loads = {base.name: _initial(base) for base in bases}
    image_span = max(len(base.blob) for base in bases) + GUARD
    cases: list[FuzzCase] = []
    while len(cases) < count:
        base = bases[len(cases) % len(bases)]
        kind, blob = mutate(base.blob, rng, cfg)
        mem = zeroed_memory(cfg.dram_bytes)
        for addr, data in [*loads[base.name], (0, blob)]:
            mem[addr:addr + len(data)] = data
        result = run_image(mem, 0, cfg)
        if not result.defined:
            continue                       # malformed tables: output not fixed by the spec
        budget = _error_budget(blob, cfg)
        if result.error == 0:
            full = _budget(mem, blob, cfg)
            if full is None:
                continue
            budget = full
        regions = [(0, len(blob) + GUARD), base.data]
        regions += [(max(0, lo - GUARD), min(cfg.dram_bytes, lo + size + GUARD))
                    for lo, size in result.writes]
        reads, expected, masked = [], {}, {}
        for j, (lo, hi) in enumerate(_merge(regions)):
            name = f"r{j}"
            reads.append((name, lo, hi - lo))
            expected[name] = bytes(mem[lo:hi])
            masked[name] = [a - lo + b for a in result.counter_words if lo <= a < hi
                            for b in range(4)]
        # runs share one simulation: every checked range, and the longest seed image's bytes
        # (a truncated image's layers may read past its end), start zeroed as in the model
        # the bytes the layers read too: a mutant may point an operand anywhere in memory,
        # where earlier runs of the shared simulation left data
        clear_ranges = _merge([(0, image_span)] + [(lo, lo + size) for _, lo, size in reads] +
                              [(lo, lo + size) for lo, size in result.reads])
        clear = [(lo, bytes(hi - lo)) for lo, hi in clear_ranges]
        cases.append(FuzzCase(base.name, kind, blob, int(result.error), result.layer_index,
                              budget, reads, expected, masked, clear + loads[base.name]))
    summary = {"mutations": collections.Counter(c.mutation.split(":")[0].split("+")[0]
                                                for c in cases),
               "expected_errors": collections.Counter(c.expect_error for c in cases)}
    return cases, summary


def _initial(base: Seed) -> list[tuple[int, bytes]]:
    """Memory before the run (the image aside): a fill pattern over the data region, then the
    seed's inputs."""
    lo, hi = base.data
    fill = ((np.arange(hi - lo) * 13 + 0x3C) & 0xFF).astype(np.uint8).tobytes()
    return [(lo, fill), *base.load]


def run_fuzz(cases: list[FuzzCase], cfg: AccelConfig, *, workdir: Path,
             sim: str = "verilator") -> list[dict]:
    """Run every case on the RTL in one simulation; return one record per case with what
    differs (an empty ``problems`` list: the RTL did exactly what the model says)."""
    runs = [ImageRun(case.blob, budget_cycles=case.budget_cycles, load=case.load,
                     read=case.reads, check=False, addr=0) for case in cases]
    results = run_jobs(runs, cfg, workdir=workdir, sim=sim)
    out = []
    for case, result in zip(cases, results):
        problems = []
        if result.error != case.expect_error:
            problems.append(f"error {result.error_name} ({result.error}), model says "
                            f"{case.expect_error}")
        elif result.error and result.error < 15 and result.layer_index != case.expect_layer:
            problems.append(f"layer_index {result.layer_index}, model says {case.expect_layer}")
        for name, lo, size in case.reads:
            got = np.frombuffer(result.reads[name], np.uint8).copy()
            want = np.frombuffer(case.expected[name], np.uint8).copy()
            got[case.masked[name]] = 0
            want[case.masked[name]] = 0
            bad = np.flatnonzero(got != want)
            if bad.size:
                problems.append(f"{bad.size} bytes differ in [{lo:#x}, {lo + size:#x}), first "
                                f"at {lo + int(bad[0]):#x}")
        out.append({"seed": case.seed, "mutation": case.mutation, "error": result.error_name,
                    "expected_error": case.expect_error, "cycles":
                    result.counters["total_cycles"], "problems": problems})
    return out
