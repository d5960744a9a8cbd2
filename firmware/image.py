"""Firmware image format v1: encoder, decoder, validator and a readable dump.

An image is what the host places in device memory at ``base_addr`` and points the sequencer at:
a 16-word header (:data:`spec.layouts.HEADER_WORDS`), then the sections in :class:`SectionKind`
order, each starting on a :data:`SECTION_ALIGN_BYTES` boundary:

* ``LAYERS``: ``layer_count`` records of :data:`LAYER_RECORD_WORDS` words
  (:data:`spec.layouts.LAYER_WORDS`), generated from :attr:`Image.layers`;
* ``TABLES``, ``QUANT``, ``WEIGHTS``: opaque blobs (convolution tables; bias, multiplier and
  shift arrays; k-major weights). Their device address is ``base_addr + section offset``; layer
  records hold absolute device addresses into them.

Every word is a little-endian u32; signed fields are stored as two's complement. The CRC32
(:func:`zlib.crc32`, the IEEE 802.3 polynomial) covers the image up to its WEIGHTS section
(header, records, tables, parameters) with the ``crc32`` word read as 0; the weights are checked
as they stream in: each record's ``a_crc`` is the CRC-32 of the A beats its layer loads
(:func:`spec.schedule.a_load_crc`), set by :func:`with_a_crcs`. ``base_addr`` is the header's ``base_addr`` word (see :data:`BASE_ADDR_WORD`).
docs/firmware.md describes the bytes; its tables are :func:`format_tables_markdown`'s output.
"""

from __future__ import annotations

import dataclasses
import struct
import zlib

from spec.config import FORMAT_VERSION, PRESETS, AccelConfig
from spec.desc import DEPTHWISE_STRIDES, DESC_FIELDS, GemmDescriptor, groups_n, tensor_extents
from spec.schedule import a_load_crc
from spec.record import (HEADER_BYTES, LAYER_RECORD_BYTES, SECTION_ALIGN_BYTES, check_record)
from spec.layouts import (HEADER_WORDS, IMAGE_HEADER_WORDS, IMAGE_MAGIC, LAYER_RECORD_WORDS,
                          LAYER_WORDS, OpKind, OutFormat, PostMode, SectionKind)

__all__ = ["ImageError", "Layer", "Image", "encode", "decode", "validate", "inspect", "reseal",
           "with_a_crcs",
           "format_tables_markdown", "section_layout", "image_bytes", "SECTION_ALIGN_BYTES",
           "HEADER_BYTES", "LAYER_RECORD_BYTES", "BASE_ADDR_WORD", "SIGNED_LAYER_FIELDS"]

#: The header word that carries :attr:`Image.base_addr`.
BASE_ADDR_FIELD = "base_addr"
BASE_ADDR_WORD = HEADER_WORDS[BASE_ADDR_FIELD]
#: Layer record fields stored as sign-extended two's complement.
SIGNED_LAYER_FIELDS = frozenset({"out_zero_point", "act_min", "act_max", "pad_value"})
#: Sections carried as opaque blobs (LAYERS is generated from the layer records).
BLOB_SECTIONS = (SectionKind.TABLES, SectionKind.QUANT, SectionKind.WEIGHTS)
INT8_MIN, INT8_MAX = -128, 127

_ENUM_FIELDS = {"op_kind": OpKind, "out_format": OutFormat, "post_mode": PostMode}


class ImageError(ValueError):
    """A blob is not a decodable image, or an :class:`Image` field is out of range."""


def _section_field(kind: SectionKind, what: str) -> str:
    return f"section_{kind.name.lower()}_{what}"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Layer:
    """One layer record: the descriptor the sequencer runs plus post-processing and the window.

    Addresses are absolute device byte addresses. ``out_window_lo``/``out_window_hi`` bound the
    only bytes the layer may write: ``[lo, hi)``; an image run also writes the layer's
    statistics record (:data:`spec.layouts.STATS_BYTES` bytes) at ``stats_addr``.
    """

    op_kind: OpKind
    desc: GemmDescriptor
    out_window_lo: int
    out_window_hi: int
    out_format: OutFormat = OutFormat.INT32
    post_mode: PostMode = PostMode.NONE
    out_zero_point: int = 0
    act_min: int = INT8_MIN
    act_max: int = INT8_MAX
    bias_addr: int = 0
    bias_present: int = 0
    mult_addr: int = 0
    shift_addr: int = 0
    stats_addr: int = 0
    a_crc: int = 0
    pad_value: int = 0

    def __post_init__(self):
        if not isinstance(self.desc, GemmDescriptor):
            raise ImageError(f"Layer.desc must be a GemmDescriptor, not {self.desc!r}")
        for name, enum_cls in _ENUM_FIELDS.items():
            value = getattr(self, name)
            try:
                object.__setattr__(self, name, enum_cls(value))
            except ValueError:
                raise ImageError(f"Layer.{name}={value!r} is not a {enum_cls.__name__} "
                                 f"({', '.join(f'{e.name}={e.value}' for e in enum_cls)})"
                                 ) from None
        for name in _record_fields():
            if name in _ENUM_FIELDS or name.startswith("desc_"):
                continue
            value = getattr(self, name)
            lo, hi = (-(1 << 31), 1 << 31) if name in SIGNED_LAYER_FIELDS else (0, 1 << 32)
            if type(value) is not int or not lo <= value < hi:
                raise ImageError(f"Layer.{name} must be an int in [{lo}, {hi}), not {value!r}")

    def record_words(self) -> list[int]:
        """The :data:`LAYER_RECORD_WORDS` u32 words of this record (reserved words 0)."""
        words = [0] * LAYER_RECORD_WORDS
        for name, index in LAYER_WORDS.items():
            if name.startswith("desc_"):
                value = getattr(self.desc, name[len("desc_"):])
            else:
                value = int(getattr(self, name))
            words[index] = value & 0xFFFF_FFFF
        return words


@dataclasses.dataclass(frozen=True, kw_only=True)
class Image:
    """A firmware image: layer records plus the TABLES/QUANT/WEIGHTS blobs.

    ``base_addr`` is the device address the image is placed at; a blob section's payload is at
    ``base_addr + section offset``. Missing blob sections are normalised to ``b""``.
    """

    config_id: int
    layers: tuple[Layer, ...]
    sections: dict[SectionKind, bytes] = dataclasses.field(default_factory=dict)
    base_addr: int = 0

    def __post_init__(self):
        for name in ("config_id", "base_addr"):
            value = getattr(self, name)
            if type(value) is not int or not 0 <= value < (1 << 32):
                raise ImageError(f"Image.{name} must be an int in [0, 2**32), not {value!r}")
        object.__setattr__(self, "layers", tuple(self.layers))
        for i, layer in enumerate(self.layers):
            if not isinstance(layer, Layer):
                raise ImageError(f"Image.layers[{i}] must be a Layer, not {layer!r}")
        sections = {}
        for kind, payload in self.sections.items():
            kind = SectionKind(kind)
            if kind not in BLOB_SECTIONS:
                raise ImageError(f"Image.sections[{kind.name}]: only "
                                 f"{', '.join(k.name for k in BLOB_SECTIONS)} are blobs; "
                                 "LAYERS is generated from Image.layers")
            sections[kind] = bytes(payload)
        object.__setattr__(self, "sections",
                           {kind: sections.get(kind, b"") for kind in BLOB_SECTIONS})

    def section_offsets(self) -> dict[SectionKind, tuple[int, int]]:
        """``(offset, bytes)`` of every section as :func:`encode` lays them out."""
        return section_layout(len(self.layers),
                              {kind: len(self.sections[kind]) for kind in BLOB_SECTIONS})

    def section_addr(self, kind: SectionKind) -> int:
        """Device address of a section's first byte."""
        return self.base_addr + self.section_offsets()[SectionKind(kind)][0]


def section_layout(layer_count: int, blob_bytes: dict[SectionKind, int]
                   ) -> dict[SectionKind, tuple[int, int]]:
    """``(offset, bytes)`` of every section of an image with ``layer_count`` records and blob
    sections of ``blob_bytes`` (missing ones empty), as :func:`encode` lays them out."""
    sizes = {SectionKind.LAYERS: layer_count * LAYER_RECORD_BYTES}
    sizes.update({kind: blob_bytes.get(kind, 0) for kind in BLOB_SECTIONS})
    out, pos = {}, HEADER_BYTES
    for kind in SectionKind:
        pos = _align(pos)
        out[kind] = (pos, sizes[kind])
        pos += sizes[kind]
    return out


def image_bytes(layout: dict[SectionKind, tuple[int, int]]) -> int:
    """Total bytes of an image laid out as ``layout`` (:func:`section_layout`)."""
    return _align(max(off + size for off, size in layout.values()))


def _align(value: int) -> int:
    return -(-value // SECTION_ALIGN_BYTES) * SECTION_ALIGN_BYTES


def _record_fields() -> list[str]:
    return list(LAYER_WORDS)


def _words(blob: bytes, offset: int, count: int) -> list[int]:
    return list(struct.unpack_from(f"<{count}I", blob, offset))


def _signed(value: int) -> int:
    return value - (1 << 32) if value & 0x8000_0000 else value


def _crc(blob: bytes) -> int:
    """The header's CRC: bytes ``[0, section_weights_offset)`` (clipped to the blob) with the
    ``crc32`` word as zeros."""
    at = 4 * HEADER_WORDS["crc32"]
    end = struct.unpack_from("<I", blob, 4 * HEADER_WORDS[_section_field(SectionKind.WEIGHTS,
                                                                         "offset")])[0]
    end = max(min(end, len(blob)), at + 4)
    return zlib.crc32(blob[at + 4:end], zlib.crc32(b"\0\0\0\0", zlib.crc32(blob[:at])))


def reseal(blob: bytes) -> bytes:
    """``blob`` with its crc32 word recomputed (for tools and tests that patch an image). The
    records' ``a_crc`` words are left as they are (:func:`with_a_crcs` computes them)."""
    at = 4 * HEADER_WORDS["crc32"]
    return blob[:at] + struct.pack("<I", _crc(blob)) + blob[at + 4:]


def _a_crc(blob: bytes, base: int, d: GemmDescriptor, cfg: AccelConfig) -> int | None:
    """The CRC-32 of ``d``'s A loads (:func:`spec.schedule.a_load_crc`) from the image ``blob``
    placed at ``base``; ``None`` when A does not lie inside the image; 0 for a depthwise
    layer, whose A port reads activations (the hardware does not check its ``a_crc``)."""
    if d.b_mode in DEPTHWISE_STRIDES:
        return 0
    lo, hi = tensor_extents(d, cfg)["a"]
    if not (base <= lo and hi <= base + len(blob)):
        return None
    return a_load_crc(d, cfg, lambda addr, n: blob[addr - base:addr - base + n])


def with_a_crcs(image: Image, cfg: AccelConfig) -> Image:
    """``image`` with every layer's ``a_crc`` computed: the CRC-32 of the A beats the layer
    loads on ``cfg`` (:func:`spec.schedule.a_load_crc`), from the image's own bytes. Raises
    :class:`ImageError` when a layer's A does not lie inside the image (an image run refuses
    such a record: BAD_WINDOW)."""
    if image.config_id != cfg.config_id:
        raise ImageError(f"Image.config_id={image.config_id:#010x} is not cfg's "
                         f"{cfg.config_id:#010x}")
    blob = encode(image, seal=False)
    start = image.base_addr
    layers = []
    for i, layer in enumerate(image.layers):
        crc = _a_crc(blob, start, layer.desc, cfg)
        if crc is None:
            lo, hi = tensor_extents(layer.desc, cfg)["a"]
            raise ImageError(f"layer {i}: A operand [{lo:#x}, {hi:#x}) (desc_a_addr="
                             f"{layer.desc.a_addr:#x}) is not inside the image [{start:#x}, "
                             f"{start + len(blob):#x}): its a_crc cannot be known")
        layers.append(dataclasses.replace(layer, a_crc=crc))
    return dataclasses.replace(image, layers=tuple(layers))


def encode(image: Image, *, seal: bool = True) -> bytes:
    """The bytes of ``image``: header, then each section 64-byte aligned, zero padded, the
    crc32 word computed (``seal=False``: left 0). The records' ``a_crc`` words are the layers'
    own (:func:`with_a_crcs`)."""
    layout = image.section_offsets()
    total = image_bytes(layout)
    out = bytearray(total)
    header = [0] * IMAGE_HEADER_WORDS
    header[HEADER_WORDS["magic"]] = IMAGE_MAGIC
    header[HEADER_WORDS["format_version"]] = FORMAT_VERSION
    header[HEADER_WORDS["config_id"]] = image.config_id
    header[HEADER_WORDS["total_bytes"]] = total
    header[HEADER_WORDS["layer_count"]] = len(image.layers)
    header[HEADER_WORDS["section_count"]] = len(SectionKind)
    header[BASE_ADDR_WORD] = image.base_addr
    for kind, (offset, size) in layout.items():
        header[HEADER_WORDS[_section_field(kind, "offset")]] = offset
        header[HEADER_WORDS[_section_field(kind, "bytes")]] = size
    struct.pack_into(f"<{IMAGE_HEADER_WORDS}I", out, 0, *header)
    offset = layout[SectionKind.LAYERS][0]
    for i, layer in enumerate(image.layers):
        struct.pack_into(f"<{LAYER_RECORD_WORDS}I", out, offset + i * LAYER_RECORD_BYTES,
                         *layer.record_words())
    for kind in BLOB_SECTIONS:
        offset, size = layout[kind]
        out[offset:offset + size] = image.sections[kind]
    return reseal(bytes(out)) if seal else bytes(out)


def _header(blob: bytes) -> dict[str, int]:
    words = _words(blob, 0, IMAGE_HEADER_WORDS)
    return {name: words[index] for name, index in HEADER_WORDS.items()}


def _record(blob: bytes, offset: int) -> dict[str, int]:
    words = _words(blob, offset, LAYER_RECORD_WORDS)
    out = {name: words[index] for name, index in LAYER_WORDS.items()}
    for name in SIGNED_LAYER_FIELDS:
        out[name] = _signed(out[name])
    used = set(LAYER_WORDS.values())
    out["_reserved"] = {i: w for i, w in enumerate(words) if i not in used and w}
    return out


def _desc(record: dict[str, int]) -> GemmDescriptor:
    return GemmDescriptor(**{name: record[f"desc_{name}"] for name in DESC_FIELDS})


def decode(blob: bytes) -> Image:
    """Parse an image. Raises :class:`ImageError` naming the field when the blob is malformed.

    Structural problems only (truncation, magic, version, CRC, section table, enum values);
    hardware legality is :func:`validate`'s job.
    """
    blob = bytes(blob)
    if len(blob) < HEADER_BYTES:
        raise ImageError(f"image is {len(blob)} bytes, truncated: the header alone is "
                         f"{HEADER_BYTES} bytes")
    h = _header(blob)
    if h["magic"] != IMAGE_MAGIC:
        raise ImageError(f"magic={h['magic']:#010x}, expected {IMAGE_MAGIC:#010x} ('TSRA')")
    if h["format_version"] != FORMAT_VERSION:
        raise ImageError(f"format_version={h['format_version']} is not supported "
                         f"(this decoder reads {FORMAT_VERSION})")
    if h["total_bytes"] != len(blob):
        raise ImageError(f"total_bytes={h['total_bytes']} but the image is {len(blob)} bytes "
                         "(truncated or padded)")
    if h["crc32"] != _crc(blob):
        raise ImageError(f"crc32={h['crc32']:#010x} does not match the computed "
                         f"{_crc(blob):#010x}")
    payloads = {}
    for kind in SectionKind:
        offset = h[_section_field(kind, "offset")]
        size = h[_section_field(kind, "bytes")]
        if offset + size > len(blob):
            raise ImageError(f"{_section_field(kind, 'offset')}={offset} + "
                             f"{_section_field(kind, 'bytes')}={size} reaches past the "
                             f"{len(blob)}-byte image")
        payloads[kind] = blob[offset:offset + size]
    count = h["layer_count"]
    if len(payloads[SectionKind.LAYERS]) != count * LAYER_RECORD_BYTES:
        raise ImageError(f"layer_count={count} needs {count * LAYER_RECORD_BYTES} bytes but "
                         f"section_layers_bytes={len(payloads[SectionKind.LAYERS])}")
    layers = []
    for i in range(count):
        rec = _record(blob, h[_section_field(SectionKind.LAYERS, "offset")]
                      + i * LAYER_RECORD_BYTES)
        fields = {name: rec[name] for name in LAYER_WORDS if not name.startswith("desc_")}
        try:
            layers.append(Layer(desc=_desc(rec), **fields))
        except ImageError as exc:
            raise ImageError(f"layer {i}: {exc}") from None
    return Image(config_id=h["config_id"], layers=tuple(layers),
                 sections={kind: payloads[kind] for kind in BLOB_SECTIONS},
                 base_addr=h[BASE_ADDR_FIELD])


def validate(blob: bytes, cfg: AccelConfig, *, device_bytes: int | None = None) -> list[str]:
    """Every problem of ``blob`` as an image for ``cfg``; an empty list means it is valid.

    Each message names the field and echoes its value. ``device_bytes`` (default
    ``cfg.dram_bytes``) is the size of the device memory the image and outputs live in.
    """
    blob = bytes(blob)
    mem = cfg.dram_bytes if device_bytes is None else device_bytes
    problems: list[str] = []
    if len(blob) < HEADER_BYTES:
        return [f"image is {len(blob)} bytes, truncated: the header alone is {HEADER_BYTES} "
                "bytes"]
    h = _header(blob)
    if h["magic"] != IMAGE_MAGIC:
        problems.append(f"magic={h['magic']:#010x}, expected {IMAGE_MAGIC:#010x} ('TSRA')")
    if h["format_version"] != FORMAT_VERSION:
        problems.append(f"format_version={h['format_version']} is not supported (expected "
                        f"{FORMAT_VERSION})")
    if h["crc32"] != _crc(blob):
        problems.append(f"crc32={h['crc32']:#010x} does not match the computed "
                        f"{_crc(blob):#010x}")
    if h["config_id"] != cfg.config_id:
        problems.append(f"config_id={h['config_id']:#010x} does not match the accelerator's "
                        f"config_id={cfg.config_id:#010x}")
    if h["total_bytes"] != len(blob):
        problems.append(f"total_bytes={h['total_bytes']} but the image is {len(blob)} bytes")
    if len(blob) % SECTION_ALIGN_BYTES:
        problems.append(f"image length {len(blob)} is not a multiple of {SECTION_ALIGN_BYTES}")
    if h["section_count"] != len(SectionKind):
        problems.append(f"section_count={h['section_count']}, expected {len(SectionKind)}")
    base = h[BASE_ADDR_FIELD]
    if base % SECTION_ALIGN_BYTES:
        problems.append(f"base_addr={base:#x} (header word reserved) is not "
                        f"{SECTION_ALIGN_BYTES}-byte aligned")
    if base + len(blob) > mem:
        problems.append(f"image [{base:#x}, {base + len(blob):#x}) at base_addr={base:#x} "
                        f"reaches past device memory of {mem:#x} bytes")

    # -- section table ---------------------------------------------------------------------------
    good: dict[SectionKind, tuple[int, int]] = {}
    for kind in SectionKind:
        off_name, size_name = _section_field(kind, "offset"), _section_field(kind, "bytes")
        offset, size = h[off_name], h[size_name]
        ok = True
        if offset % SECTION_ALIGN_BYTES:
            problems.append(f"{off_name}={offset:#x} is not {SECTION_ALIGN_BYTES}-byte aligned")
            ok = False
        if offset < HEADER_BYTES:
            problems.append(f"{off_name}={offset:#x} overlaps the {HEADER_BYTES}-byte header")
            ok = False
        if offset + size > len(blob):
            problems.append(f"{off_name}={offset:#x} + {size_name}={size} = "
                            f"{offset + size:#x} reaches past the {len(blob)}-byte image")
            ok = False
        if ok:
            good[kind] = (offset, size)
    kinds = [k for k in good if good[k][1]]
    for i, ka in enumerate(kinds):
        for kb in kinds[i + 1:]:
            (oa, sa), (ob, sb) = good[ka], good[kb]
            if oa < ob + sb and ob < oa + sa:
                problems.append(f"section {ka.name} [{oa:#x}, {oa + sa:#x}) overlaps section "
                                f"{kb.name} [{ob:#x}, {ob + sb:#x})")
    w_off = h[_section_field(SectionKind.WEIGHTS, "offset")]
    l_end = h[_section_field(SectionKind.LAYERS, "offset")] + \
        h[_section_field(SectionKind.LAYERS, "bytes")]
    if w_off < l_end:
        problems.append(f"section_weights_offset={w_off:#x} is before the end of the layer "
                        f"records ({l_end:#x}): the CRC covers only the bytes before it")
    count = h["layer_count"]
    layers_size = h[_section_field(SectionKind.LAYERS, "bytes")]
    if layers_size != count * LAYER_RECORD_BYTES:
        problems.append(f"layer_count={count} needs {count * LAYER_RECORD_BYTES} bytes but "
                        f"section_layers_bytes={layers_size}")
    if SectionKind.LAYERS not in good:
        return problems
    image_range = (base, base + len(blob))
    # (a weights offset past the image is a problem above; the records are checked as if the
    # image had no weights part, so no check reads past its end)
    weights_at = base + min(h[_section_field(SectionKind.WEIGHTS, "offset")], len(blob))

    def dev_range(kind: SectionKind) -> tuple[int, int] | None:
        if kind not in good:
            return None
        return base + good[kind][0], base + good[kind][0] + good[kind][1]

    # -- layers ----------------------------------------------------------------------------------
    layers_off = good[SectionKind.LAYERS][0]
    n_records = min(count, good[SectionKind.LAYERS][1] // LAYER_RECORD_BYTES)
    for i in range(n_records):
        rec = _record(blob, layers_off + i * LAYER_RECORD_BYTES)
        problems += [f"layer {i}: {msg}" for msg in _layer_problems(
            rec, cfg, blob, good, dev_range, mem, image_range, weights_at)]
    return problems


def _layer_problems(rec, cfg, blob, good, dev_range, mem, image_range, weights_at) -> list[str]:
    out: list[str] = []
    d = _desc(rec)
    words = {name: rec[name] & 0xFFFF_FFFF for name in LAYER_WORDS}

    def read_words(addr: int, count: int) -> list[int]:
        at = addr - image_range[0]          # check_record only asks for arrays in the image
        return list(struct.unpack_from(f"<{count}I", blob, at))

    # the hardware's rules, in its priority order (spec.record.check_record)
    out += [f"{code.name}: {msg}" for code, msg in
            check_record(words, cfg, image=image_range, weights_at=weights_at,
                         read_words=read_words)]
    if not out:
        crc = _a_crc(blob, image_range[0], d, cfg)
        if crc is not None and crc != rec["a_crc"] and d.b_mode not in DEPTHWISE_STRIDES:
            out.append(f"BAD_WEIGHTS: a_crc={rec['a_crc']:#010x} does not match the CRC-32 of "
                       f"the layer's A loads, {crc:#010x} (firmware.image.with_a_crcs)")
    for word, value in sorted(rec["_reserved"].items()):
        out.append(f"reserved word {word}={value:#x} must be 0")

    # quantisation arrays (m int32 each) must lie in the QUANT section
    quant = dev_range(SectionKind.QUANT)
    arrays = []
    if rec["bias_present"] == 1:
        arrays.append("bias_addr")
    if rec["out_format"] == OutFormat.INT8:
        arrays += ["mult_addr", "shift_addr"]
    for name in arrays:
        lo = rec[name]
        hi = lo + 4 * d.m
        if lo % 4:
            out.append(f"{name}={lo:#x} is not 4-byte aligned")
        if quant is None or not (quant[0] <= lo and hi <= quant[1]):
            where = "missing" if quant is None else f"[{quant[0]:#x}, {quant[1]:#x})"
            out.append(f"{name}={lo:#x}: m={d.m} int32 [{lo:#x}, {hi:#x}) lies outside the "
                       f"QUANT section {where}")

    # convolution tables must lie in the TABLES section
    if d.b_mode == 1 and d.k and d.n:
        tables = dev_range(SectionKind.TABLES)
        for name, size in (("off_addr", 4 * d.k), ("run_addr", 8 * d.run_count),
                           ("grp_addr", 4 * (groups_n(d, cfg) + 1))):
            lo = getattr(d, name)
            if tables is None or not (tables[0] <= lo and lo + size <= tables[1]):
                where = "missing" if tables is None else f"[{tables[0]:#x}, {tables[1]:#x})"
                out.append(f"desc_{name}={lo:#x}: table [{lo:#x}, {lo + size:#x}) lies outside "
                           f"the TABLES section {where}")

    # the device the host has may be smaller than the address space the hardware checks
    lo_w, hi_w = rec["out_window_lo"], rec["out_window_hi"]
    if mem < cfg.dram_bytes and hi_w > mem and not cfg.is_local(lo_w, hi_w):
        out.append(f"out_window_hi={hi_w:#x} reaches past device memory of {mem:#x} bytes")
    return out


def _enum_name(enum_cls, value: int) -> str:
    try:
        return enum_cls(value).name
    except ValueError:
        return f"?({value})"


def inspect(blob: bytes, cfg: AccelConfig | None = None) -> str:
    """A readable dump: header fields in hex, the section table, every layer field by name.
    B / C addresses and windows in the local buffer (a fused intermediate, docs/fusion.md) are
    marked; ``cfg`` gives its address, by default the preset whose ``config_id`` the image
    carries (none: not marked)."""
    blob = bytes(blob)
    if len(blob) < HEADER_BYTES:
        return f"image is {len(blob)} bytes, truncated: the header alone is {HEADER_BYTES} bytes"
    h = _header(blob)
    if cfg is None:
        cfg = next((p for p in PRESETS.values() if p.config_id == h["config_id"]), None)
    local_base = cfg.local_base if cfg is not None else None
    lines = [f"Tessera firmware image, {len(blob)} bytes", "header:"]
    for name, index in HEADER_WORDS.items():
        if name.startswith("section_") and name != "section_count":
            continue
        label = name
        note = ""
        if name == "magic":
            note = "  ('TSRA')" if h[name] == IMAGE_MAGIC else "  (bad magic)"
        if name == "crc32":
            note = "  (ok)" if h[name] == _crc(blob) else f"  (computed {_crc(blob):#010x})"
        lines.append(f"  +{4 * index:#04x} {label:<22} {h[name]:#010x}{note}")
    lines.append("sections:")
    for kind in SectionKind:
        offset, size = h[_section_field(kind, "offset")], h[_section_field(kind, "bytes")]
        lines.append(f"  {kind.value} {kind.name:<8} offset {offset:#08x}  bytes {size:>8}  "
                     f"device {h[BASE_ADDR_FIELD] + offset:#010x}")
    offset = h[_section_field(SectionKind.LAYERS, "offset")]
    for i in range(h["layer_count"]):
        at = offset + i * LAYER_RECORD_BYTES
        if at + LAYER_RECORD_BYTES > len(blob):
            lines.append(f"layer {i}: record at {at:#x} is past the end of the image")
            break
        rec = _record(blob, at)
        lines.append(f"layer {i} (record at {at:#x}):")
        for name in LAYER_WORDS:
            value = rec[name]
            if name in _ENUM_FIELDS:
                text = _enum_name(_ENUM_FIELDS[name], value)
            elif name in SIGNED_LAYER_FIELDS:
                text = str(value)
            elif name.endswith(("_addr", "_lo", "_hi")):
                text = f"{value:#010x}"
                if local_base is not None and value >= local_base and \
                        name in ("desc_b_addr", "desc_c_addr", "out_window_lo", "out_window_hi"):
                    text += f"  (local buffer +{value - local_base:#x})"
            else:
                text = str(value)
            lines.append(f"  {name:<24} {text}")
        for word, value in sorted(rec["_reserved"].items()):
            lines.append(f"  reserved word {word:<10} {value:#010x}  (must be 0)")
    return "\n".join(lines) + "\n"


# -- documentation tables -------------------------------------------------------------------------

_HEADER_DOC = {
    "magic": f"`{IMAGE_MAGIC:#010x}`, the bytes `TSRA`",
    "format_version": "`spec.config.FORMAT_VERSION` the image was written for",
    "config_id": "`AccelConfig.config_id` of the accelerator it targets (the CONFIG_ID register)",
    "total_bytes": "length of the image in bytes, a multiple of 64",
    "crc32": "CRC-32 (zlib / IEEE 802.3) of the image's first `section_weights_offset` bytes "
             "(everything before the weights) with this word read as 0",
    "layer_count": "number of layer records in the LAYERS section",
    "section_count": "number of sections in the table (always 4 in v1)",
    "base_addr": "device address the image is placed at, 64-byte aligned",
}

_LAYER_DOC = {
    "op_kind": "`OpKind`: " + ", ".join(f"{k.value} {k.name}" for k in OpKind),
    "out_format": "`OutFormat`: 0 INT32 (raw accumulators + bias), 1 INT8 (requantised)",
    "post_mode": "`PostMode`: 0 NONE, 1 RELU, 2 RELU6, 3 CLAMP",
    "out_zero_point": "int8 output zero point (two's complement, sign-extended)",
    "act_min": "int8 lower clamp (RELU6 / CLAMP), sign-extended",
    "act_max": "int8 upper clamp (RELU6: quantised 6.0), sign-extended",
    "bias_addr": "device address of m int32 biases in QUANT (when bias_present = 1)",
    "bias_present": "1 when a bias is added, else 0",
    "mult_addr": "device address of m int32 Q31 multipliers in [1, 2**31) in QUANT (INT8 output)",
    "shift_addr": "device address of m int32 shifts in [-31, 31] in QUANT (> 0 right after the "
                  "multiply, < 0 left before it; INT8 output)",
    "out_window_lo": "first device byte the layer may write",
    "out_window_hi": "one past the last device byte the layer may write",
    "stats_addr": "image runs: device address (64-byte aligned, outside the image) of the "
                  "layer's 64-byte statistics record (its counters, then its index)",
    "a_crc": "image runs: CRC-32 (zlib) of the A beats the layer loads, in load order, bytes "
             "past `m` as zeros (`spec.schedule.a_load_crc`); a mismatch when the layer ends "
             "stops the run with BAD_WEIGHTS",
    "pad_value": "int8 value (sign-extended) of a depthwise layer's padding, its input zero "
                 "point; 0 for other layers",
}

_DESC_DOC = "`GemmDescriptor.{}` (spec/desc.py)"


def format_tables_markdown() -> str:
    """The byte-offset tables of docs/firmware.md, generated from spec.layouts (never retyped)."""
    rows = ["| Byte | Word | Field | Meaning |", "|---:|---:|---|---|"]
    for name, index in HEADER_WORDS.items():
        if name.startswith("section_") and name != "section_count":
            kind = SectionKind[name.split("_")[1].upper()]
            what = "offset from the image start" if name.endswith("_offset") else "length"
            meaning = f"{kind.name} section (kind {kind.value}): {what} in bytes"
        else:
            meaning = _HEADER_DOC[name]
        rows.append(f"| {4 * index} | {index} | `{name}` | {meaning} |")
    header = "\n".join(rows)
    rows = ["| Byte | Word | Field | Meaning |", "|---:|---:|---|---|"]
    for name, index in LAYER_WORDS.items():
        if name.startswith("desc_"):
            meaning = _DESC_DOC.format(name[len("desc_"):])
        else:
            meaning = _LAYER_DOC[name]
        rows.append(f"| {4 * index} | {index} | `{name}` | {meaning} |")
    last = max(LAYER_WORDS.values())
    if last + 1 < LAYER_RECORD_WORDS:
        rows.append(f"| {4 * (last + 1)}..{LAYER_RECORD_BYTES - 1} | {last + 1}..."
                    f"{LAYER_RECORD_WORDS - 1} | reserved | 0 |")
    layer = "\n".join(rows)
    sections = ["| Kind | Section | Contents |", "|---:|---|---|"]
    contents = {SectionKind.LAYERS: f"`layer_count` records of {LAYER_RECORD_BYTES} bytes",
                SectionKind.TABLES: "convolution tables (offsets, runs, groups) of conv layers",
                SectionKind.QUANT: "bias, multiplier and shift int32 arrays; a depthwise "
                                   "layer's u32 weight arrays (3 for 3x3, 7 for 5x5, 13 for 7x7)",
                SectionKind.WEIGHTS: "k-major int8 weight matrices (A operands)"}
    for kind in SectionKind:
        sections.append(f"| {kind.value} | {kind.name} | {contents[kind]} |")
    return (f"### Header ({HEADER_BYTES} bytes)\n\n{header}\n\n"
            f"### Sections\n\n" + "\n".join(sections) + "\n\n"
            f"### Layer record ({LAYER_RECORD_BYTES} bytes)\n\n{layer}\n")
