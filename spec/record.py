"""The rules the hardware applies to a layer record and to an image header, in Python.

No Amaranth import. :func:`check_record` and :func:`check_header` list every rule a record or a
header breaks, in the priority order the RTL reports them (the first entry's code is the ERROR
register's value); the RTL test-suites assert that both agree. The firmware validator builds on
them, so an image the validator accepts is one the hardware runs.

A *record* here is the dict of raw u32 words by :data:`spec.layouts.LAYER_WORDS` name, exactly as
the sequencer fetches it (signed fields still two's complement), so garbage can be judged too.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from .config import FORMAT_VERSION, AccelConfig
from .desc import (DEPTHWISE_STRIDES, DESC_FIELDS, ErrorCode, GemmDescriptor, c_span, check,
                   tensor_extents)
from .layouts import (IMAGE_HEADER_WORDS, IMAGE_MAGIC, LAYER_RECORD_WORDS, LAYER_USED_WORDS,
                      LAYER_WORDS, STATS_BYTES, OpKind, OutFormat, PostMode, SectionKind)

__all__ = ["record_fetch_beats", "layer_record", "check_record", "check_header", "written_range", "out_bytes", "uses_post",
           "signed32", "is_int8_word", "PARAM_ALIGN", "SECTION_ALIGN_BYTES", "HEADER_BYTES",
           "LAYER_RECORD_BYTES"]

#: Bias / multiplier / shift arrays are int32 arrays on 4-byte boundaries.
PARAM_ALIGN = 4
#: Images, their sections and statistics records sit on this boundary.
SECTION_ALIGN_BYTES = 64
HEADER_BYTES = 4 * IMAGE_HEADER_WORDS
LAYER_RECORD_BYTES = 4 * LAYER_RECORD_WORDS
#: The ``b_mode`` values each ``op_kind`` allows.
_B_MODES = {OpKind.GEMM: (0,), OpKind.CONV: (1,), OpKind.FC: (0,),
            OpKind.DEPTHWISE: tuple(DEPTHWISE_STRIDES)}
_OP_KIND = {0: OpKind.GEMM, 1: OpKind.CONV, **{b: OpKind.DEPTHWISE for b in DEPTHWISE_STRIDES}}


def record_fetch_beats(cfg: AccelConfig) -> int:
    """B-port beats the image runner fetches per layer record (the named words only)."""
    return -(-4 * LAYER_USED_WORDS // cfg.b_beat_bytes)


def signed32(word: int) -> int:
    return word - (1 << 32) if word & 0x8000_0000 else word


def is_int8_word(word: int) -> bool:
    """``word`` is a sign-extended int8 (what the int8 record fields must hold)."""
    return -128 <= signed32(word) <= 127


def out_bytes(rec: Mapping[str, int]) -> int:
    """Bytes of one C element: 1 for int8 output, else 4."""
    return 1 if rec["out_format"] == OutFormat.INT8 else 4


def uses_post(rec: Mapping[str, int]) -> bool:
    """The store goes through the post-processor (a bias is added or the output is int8)."""
    return rec["bias_present"] == 1 or rec["out_format"] == OutFormat.INT8


def _desc(rec: Mapping[str, int]) -> GemmDescriptor:
    return GemmDescriptor(**{name: rec[f"desc_{name}"] for name in DESC_FIELDS})


def written_range(rec: Mapping[str, int]) -> tuple[int, int]:
    """[first, last+1) bytes the layer writes: m rows of n elements at ``c_stride`` (with the
    row store: of ``c_rows`` rows of ``c_row_elems`` pixels, :func:`spec.desc.c_span`; a
    depthwise layer: its ``m`` output channels at ``c_stride``, their channel pitch)."""
    m = rec["desc_m"]
    if rec["desc_b_mode"] in DEPTHWISE_STRIDES:
        return rec["desc_c_addr"], rec["desc_c_addr"] + m * rec["desc_c_stride"]
    return rec["desc_c_addr"], rec["desc_c_addr"] + (m - 1) * rec["desc_c_stride"] + \
        c_span(_desc(rec), out_bytes(rec))


def layer_record(desc: GemmDescriptor, **fields: int) -> dict[str, int]:
    """A complete record (u32 words by name) for ``desc``: int32 output, no bias, ``op_kind``
    from ``b_mode``, the output window exactly the written range, ``stats_addr`` and ``a_crc``
    0; ``fields``
    override any of them (signed values are stored as two's complement)."""
    rec = {f"desc_{name}": getattr(desc, name) for name in DESC_FIELDS}
    rec.update(op_kind=int(_OP_KIND.get(desc.b_mode, OpKind.GEMM)),
               out_format=int(OutFormat.INT32), post_mode=int(PostMode.NONE), out_zero_point=0,
               act_min=-128, act_max=127, bias_addr=0, bias_present=0, mult_addr=0,
               shift_addr=0, stats_addr=0, a_crc=0, pad_value=0)
    unknown = set(fields) - set(LAYER_WORDS)
    if unknown:
        raise KeyError(f"not layer record fields: {', '.join(sorted(unknown))}; the fields are "
                       f"{', '.join(LAYER_WORDS)}")
    rec.update({k: int(v) for k, v in fields.items()})
    w_lo, w_hi = written_range(rec)
    rec.setdefault("out_window_lo", min(max(w_lo, 0), (1 << 32) - 1))
    rec.setdefault("out_window_hi", min(max(w_hi, 0), (1 << 32) - 1))
    return {name: rec[name] & 0xFFFF_FFFF for name in LAYER_WORDS}


def _params(rec: Mapping[str, int]) -> list[str]:
    names = ["bias_addr"] if rec["bias_present"] == 1 else []
    if rec["out_format"] == OutFormat.INT8:
        names += ["mult_addr", "shift_addr"]
    return names


def check_record(rec: Mapping[str, int], cfg: AccelConfig, *,
                 image: tuple[int, int] | None = None, weights_at: int | None = None,
                 read_words: Callable[[int, int], list[int]] | None = None,
                 ) -> list[tuple[ErrorCode, str]]:
    """Every rule the layer record ``rec`` breaks on ``cfg``, in RTL priority order.

    ``image`` is the ``[lo, hi)`` device range of the image in an image run (``None``: a
    register-mode run, which has no image and writes no statistics record). ``weights_at`` is
    the device address of the image's weights section: the header's CRC covers ``[lo,
    weights_at)``, the rest of the image is checked only as A loads it (``a_crc``); so in an image
    run A lies inside the image, B and the tables outside ``[weights_at, hi)`` and the parameter
    arrays inside ``[lo, weights_at)`` (default ``hi``: no weights part). ``read_words(addr,
    count)`` returns device memory as u32 words; given it, the multiplier and shift arrays are
    checked too (the hardware checks them while loading them, after every other rule passed).
    """
    missing = [name for name in LAYER_WORDS if name not in rec]
    if missing:
        raise KeyError(f"record lacks {', '.join(missing)}")
    for name in LAYER_WORDS:
        if type(rec[name]) is not int or not 0 <= rec[name] < (1 << 32):
            raise ValueError(f"record word {name}={rec[name]!r} must be a u32 (an int in "
                             f"[0, 2**32))")
    errs: list[tuple[ErrorCode, str]] = []
    ob = out_bytes(rec)
    errs += check(_desc(rec), cfg, out_bytes=ob)

    def bad(code: ErrorCode, msg: str):
        errs.append((code, msg))

    # -- BAD_LAYER -------------------------------------------------------------------------------
    for name, enum_cls in (("op_kind", OpKind), ("out_format", OutFormat),
                           ("post_mode", PostMode)):
        if rec[name] not in {e.value for e in enum_cls}:
            bad(ErrorCode.BAD_LAYER, f"{name}={rec[name]} is not a {enum_cls.__name__} "
                                     f"({', '.join(f'{e.name}={e.value}' for e in enum_cls)})")
    if rec["bias_present"] > 1:
        bad(ErrorCode.BAD_LAYER, f"bias_present={rec['bias_present']} must be 0 or 1")
    for name in ("out_zero_point", "act_min", "act_max", "pad_value"):
        if not is_int8_word(rec[name]):
            bad(ErrorCode.BAD_LAYER, f"{name}={signed32(rec[name])} is outside int8 [-128, 127]")
    if rec["pad_value"] and rec["desc_b_mode"] not in DEPTHWISE_STRIDES:
        bad(ErrorCode.BAD_LAYER, f"pad_value={signed32(rec['pad_value'])} must be 0: only a "
                                 "depthwise layer (b_mode 2 to 7, or a stride-2 one plus 8 "
                                 "or 16) pads its input")
    if signed32(rec["act_min"]) > signed32(rec["act_max"]):
        bad(ErrorCode.BAD_LAYER, f"act_min={signed32(rec['act_min'])} > "
                                 f"act_max={signed32(rec['act_max'])}")
    if rec["op_kind"] in {e.value for e in OpKind}:
        need = _B_MODES[OpKind(rec["op_kind"])]
        if rec["desc_b_mode"] not in need:
            bad(ErrorCode.BAD_LAYER, f"desc_b_mode={rec['desc_b_mode']} is inconsistent with "
                                     f"op_kind={OpKind(rec['op_kind']).name} (needs b_mode="
                                     f"{' or '.join(map(str, need))})")
    depthwise = rec["desc_b_mode"] in DEPTHWISE_STRIDES and cfg.dw_mesh
    if (uses_post(rec) or depthwise) and rec["desc_m"] > cfg.quant_entries:
        what = "weights" if depthwise else "bias / requantisation parameters"
        bad(ErrorCode.BAD_LAYER, f"m={rec['desc_m']} output channels exceed quant_entries="
                                 f"{cfg.quant_entries} ({what})")
    if errs:
        return errs

    # -- BAD_WINDOW ------------------------------------------------------------------------------
    mem = cfg.dram_bytes
    lo, hi = rec["out_window_lo"], rec["out_window_hi"]
    if lo >= hi:
        bad(ErrorCode.BAD_WINDOW, f"out_window_lo={lo:#x} >= out_window_hi={hi:#x}: empty window")
    if hi > mem and not cfg.is_local(lo, hi):
        bad(ErrorCode.BAD_WINDOW, f"out_window_hi={hi:#x} reaches past dram_bytes={mem:#x} "
                                  f"and the window [{lo:#x}, {hi:#x}) is not inside the local "
                                  f"buffer [{cfg.local_base:#x}, "
                                  f"{cfg.local_base + cfg.local_buf_bytes:#x})")
    w_lo, w_hi = written_range(rec)
    if not (lo <= w_lo and w_hi <= hi):
        bad(ErrorCode.BAD_WINDOW,
            f"written C range [{w_lo:#x}, {w_hi:#x}) (desc_c_addr={rec['desc_c_addr']:#x}, "
            f"m={rec['desc_m']}, n={rec['desc_n']}, desc_c_stride={rec['desc_c_stride']}"
            + (f", c_rows={rec['desc_c_rows']}, c_row_elems={rec['desc_c_row_elems']}, "
               f"c_row_pitch={rec['desc_c_row_pitch']}" if rec["desc_c_rows"] else "")
            + f") is not inside the output window [out_window_lo={lo:#x}, out_window_hi={hi:#x})")
    if image is not None:
        i_lo, i_hi = image
        w_at = i_hi if weights_at is None else weights_at
        ext = tensor_extents(_desc(rec), cfg, out_bytes=ob)
        a_lo, a_hi = ext["a"]
        if depthwise and not (i_lo <= a_lo and a_hi <= w_at):
            bad(ErrorCode.BAD_WINDOW, f"depthwise weights [{a_lo:#x}, {a_hi:#x}) are not inside "
                                      f"the image's CRC-checked part [{i_lo:#x}, {w_at:#x}): "
                                      "the A port reads activations in a depthwise layer, so "
                                      "its a_crc is not checked")
        elif not depthwise and not (i_lo <= a_lo and a_hi <= i_hi):
            bad(ErrorCode.BAD_WINDOW, f"A operand [{a_lo:#x}, {a_hi:#x}) is not inside the image "
                                      f"[{i_lo:#x}, {i_hi:#x}): an image run checks every A "
                                      "load against the record's a_crc")
        for name, (e_lo, e_hi) in ext.items():
            if name not in ("a", "c") and e_lo < i_hi and w_at < e_hi:
                bad(ErrorCode.BAD_WINDOW,
                    f"{'B operand' if name == 'b' else name + ' table'} [{e_lo:#x}, {e_hi:#x}) "
                    f"reads the image's weights part [{w_at:#x}, {i_hi:#x}), which only A loads "
                    "are checked in")
        if lo < i_hi and i_lo < hi:
            bad(ErrorCode.BAD_WINDOW, f"output window [{lo:#x}, {hi:#x}) overlaps the image "
                                      f"[{i_lo:#x}, {i_hi:#x})")
        s = rec["stats_addr"]
        if s % SECTION_ALIGN_BYTES or s + STATS_BYTES > mem or (s < i_hi and i_lo < s + STATS_BYTES):
            bad(ErrorCode.BAD_WINDOW,
                f"stats_addr={s:#x}: the {STATS_BYTES}-byte statistics record must be "
                f"{SECTION_ALIGN_BYTES}-byte aligned, inside dram_bytes={mem:#x} and outside the "
                f"image [{i_lo:#x}, {i_hi:#x})")
    for name in _params(rec):
        p_lo = rec[name]
        p_hi = p_lo + 4 * rec["desc_m"]
        p_end = None if image is None else (image[1] if weights_at is None else weights_at)
        inside = image is None or (image[0] <= p_lo and p_hi <= p_end)
        if p_lo % PARAM_ALIGN or p_hi > mem or not inside:
            where = ("" if image is None else
                     f" and inside the image's CRC-checked part [{image[0]:#x}, {p_end:#x})")
            bad(ErrorCode.BAD_WINDOW,
                f"{name}={p_lo:#x}: m={rec['desc_m']} int32 [{p_lo:#x}, {p_hi:#x}) must be "
                f"{PARAM_ALIGN}-byte aligned, inside dram_bytes={mem:#x}{where}")
    if errs or read_words is None:
        return errs

    # -- BAD_QUANT (checked while the parameters load) -------------------------------------------
    if rec["out_format"] == OutFormat.INT8:
        m = rec["desc_m"]
        mults = [signed32(w) for w in read_words(rec["mult_addr"], m)]
        shifts = [signed32(w) for w in read_words(rec["shift_addr"], m)]
        bad_m = [(j, v) for j, v in enumerate(mults) if v <= 0]
        bad_s = [(j, v) for j, v in enumerate(shifts) if not -31 <= v <= 31]
        if bad_m:
            bad(ErrorCode.BAD_QUANT, f"mult_addr={rec['mult_addr']:#x}: multiplier[{bad_m[0][0]}]"
                                     f"={bad_m[0][1]} not in [1, 2**31) ({len(bad_m)} bad)")
        if bad_s:
            bad(ErrorCode.BAD_QUANT, f"shift_addr={rec['shift_addr']:#x}: shift[{bad_s[0][0]}]="
                                     f"{bad_s[0][1]} not in [-31, 31] ({len(bad_s)} bad)")
    return errs


def _section(kind: SectionKind, what: str) -> str:
    return f"section_{kind.name.lower()}_{what}"


def check_header(header: Mapping[str, int], cfg: AccelConfig, *,
                 image_addr: int) -> list[tuple[ErrorCode, str]]:
    """Every rule the hardware applies to an image header before it reads the rest, in RTL
    priority order (the CRC is checked after these pass, over the image's first
    ``section_weights_offset`` bytes: everything before its weights section).

    ``header`` maps :data:`spec.layouts.HEADER_WORDS` names to u32 words; ``image_addr`` is the
    IMAGE_ADDR register (where the host placed the image).
    """
    errs: list[tuple[ErrorCode, str]] = []

    def bad(code: ErrorCode, msg: str):
        errs.append((code, msg))

    if header["magic"] != IMAGE_MAGIC:
        bad(ErrorCode.BAD_IMAGE, f"magic={header['magic']:#010x}, expected {IMAGE_MAGIC:#010x}")
    if header["format_version"] != FORMAT_VERSION:
        bad(ErrorCode.BAD_IMAGE, f"format_version={header['format_version']}, this hardware runs "
                                 f"{FORMAT_VERSION}")
    if errs:
        return errs
    if header["config_id"] != cfg.config_id:
        bad(ErrorCode.CONFIG_MISMATCH, f"config_id={header['config_id']:#010x} does not match "
                                       f"the accelerator's CONFIG_ID={cfg.config_id:#010x}")
        return errs
    total, count = header["total_bytes"], header["layer_count"]
    l_off, l_size = header[_section(SectionKind.LAYERS, "offset")], \
        header[_section(SectionKind.LAYERS, "bytes")]
    w_off = header[_section(SectionKind.WEIGHTS, "offset")]
    rules = [
        (header["base_addr"] != image_addr,
         f"base_addr={header['base_addr']:#x} but the image was placed at IMAGE_ADDR="
         f"{image_addr:#x}"),
        (image_addr % SECTION_ALIGN_BYTES != 0,
         f"IMAGE_ADDR={image_addr:#x} is not {SECTION_ALIGN_BYTES}-byte aligned"),
        (total % SECTION_ALIGN_BYTES != 0 or total < HEADER_BYTES,
         f"total_bytes={total} must be a multiple of {SECTION_ALIGN_BYTES}, at least "
         f"{HEADER_BYTES}"),
        (image_addr + total > cfg.dram_bytes,
         f"image [{image_addr:#x}, {image_addr + total:#x}) reaches past dram_bytes="
         f"{cfg.dram_bytes:#x}"),
        (count == 0, "layer_count=0: nothing to run"),
        (l_size != count * LAYER_RECORD_BYTES,
         f"section_layers_bytes={l_size} != layer_count={count} * {LAYER_RECORD_BYTES}"),
        (l_off % SECTION_ALIGN_BYTES != 0 or l_off < HEADER_BYTES or l_off + l_size > total,
         f"section_layers_offset={l_off:#x} (+{l_size} bytes) must be {SECTION_ALIGN_BYTES}-byte "
         f"aligned, past the header and inside total_bytes={total}"),
        (w_off % SECTION_ALIGN_BYTES != 0 or w_off < l_off + l_size or w_off > total,
         f"section_weights_offset={w_off:#x} (the end of the CRC-checked part) must be "
         f"{SECTION_ALIGN_BYTES}-byte aligned, past the layer records (which end at "
         f"{l_off + l_size:#x}) and inside total_bytes={total}"),
    ]
    for broken, msg in rules:
        if broken:
            bad(ErrorCode.BAD_IMAGE, msg)
    return errs
