"""Firmware image v1: encode/decode round trip, the validator rule by rule, the doc tables."""

import dataclasses
import struct
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from spec.config import FORMAT_VERSION, PRESETS
from spec.desc import DESC_FIELDS, GemmDescriptor, check
from spec.layouts import (HEADER_WORDS, IMAGE_MAGIC, LAYER_WORDS, OpKind, OutFormat, PostMode,
                          SectionKind)
from firmware.image import (HEADER_BYTES, LAYER_RECORD_BYTES, SECTION_ALIGN_BYTES, Image,
                            ImageError, Layer, decode, encode, format_tables_markdown, inspect,
                            reseal, validate, with_a_crcs)

CFG = PRESETS["tiny"]
BASE = 0x10000
DOC = Path(__file__).resolve().parents[2] / "docs" / "firmware.md"

#: An 8x16x12 GEMM with a legal tiling on the tiny preset (addresses patched by legal_image()).
DESC = GemmDescriptor(
    m=8, k=16, n=12, partition_m=8, partition_n=12, partition_k=16, tile_m=4, tile_n=4,
    outer_m=1, need_splitk=0, acc_buffer_needed=8 * 12 * 4,
    a_addr=0, a_stride=8, b_addr=0x20000, b_stride=12, c_addr=0x30000, c_stride=48)


def legal_image(out_format=OutFormat.INT8) -> Image:
    """One GEMM layer: weights in WEIGHTS, bias/mult/shift in QUANT, output outside the image."""
    m = DESC.m
    quant = (struct.pack(f"<{m}i", *range(m)) + struct.pack(f"<{m}i", *[1 << 30] * m)
             + struct.pack(f"<{m}i", *[7] * m))
    weights = bytes(range(DESC.k * DESC.a_stride))
    sections = {SectionKind.QUANT: quant, SectionKind.WEIGHTS: weights}
    probe = Image(config_id=CFG.config_id, layers=(), sections=sections, base_addr=BASE)
    # one layer record shifts the blob sections by LAYER_RECORD_BYTES
    offsets = probe.section_offsets()
    quant_addr = BASE + offsets[SectionKind.QUANT][0] + LAYER_RECORD_BYTES
    weights_addr = BASE + offsets[SectionKind.WEIGHTS][0] + LAYER_RECORD_BYTES
    desc = dataclasses.replace(DESC, a_addr=weights_addr)
    layer = Layer(op_kind=OpKind.GEMM, desc=desc, out_format=out_format,
                  post_mode=PostMode.RELU, out_zero_point=-3, act_min=-3, act_max=127,
                  bias_addr=quant_addr, bias_present=1, mult_addr=quant_addr + 4 * m,
                  shift_addr=quant_addr + 8 * m,
                  out_window_lo=0x30000, out_window_hi=0x30000 + 8 * 48)
    image = with_a_crcs(Image(config_id=CFG.config_id, layers=(layer,), sections=sections,
                              base_addr=BASE), CFG)
    assert image.section_addr(SectionKind.QUANT) == quant_addr
    assert image.section_addr(SectionKind.WEIGHTS) == weights_addr
    return image


def patch(blob: bytes, byte_offset: int, value: int, *, seal=True) -> bytes:
    out = bytearray(blob)
    struct.pack_into("<I", out, byte_offset, value & 0xFFFF_FFFF)
    return reseal(bytes(out)) if seal else bytes(out)


def patch_header(blob, name, value, **kw):
    return patch(blob, 4 * HEADER_WORDS[name], value, **kw)


def patch_layer(blob, name, value, layer=0):
    h = struct.unpack_from("<16I", blob)
    off = h[HEADER_WORDS["section_layers_offset"]] + layer * LAYER_RECORD_BYTES
    return patch(blob, off + 4 * LAYER_WORDS[name], value)


def problems_of(blob, **kw):
    return validate(blob, CFG, **kw)


def assert_one(blob, *fragments, **kw):
    found = problems_of(blob, **kw)
    assert any(all(f in p for f in fragments) for p in found), found


# -- round trip -----------------------------------------------------------------------------------

def test_image_legal_gemm_descriptor_passes_check():
    assert check(legal_image().layers[0].desc, CFG) == []


@pytest.mark.parametrize("out_format", list(OutFormat))
def test_image_legal_validates_clean(out_format):
    blob = encode(legal_image(out_format))
    assert validate(blob, CFG) == []
    assert len(blob) % SECTION_ALIGN_BYTES == 0


def test_image_encode_layout_header_and_alignment():
    image = legal_image()
    blob = encode(image)
    h = struct.unpack_from("<16I", blob)
    assert h[HEADER_WORDS["magic"]] == IMAGE_MAGIC and blob[:4] == b"TSRA"
    assert h[HEADER_WORDS["format_version"]] == FORMAT_VERSION
    assert h[HEADER_WORDS["total_bytes"]] == len(blob)
    assert h[HEADER_WORDS["layer_count"]] == 1
    assert h[HEADER_WORDS["section_layers_offset"]] == HEADER_BYTES
    for kind in SectionKind:
        assert h[HEADER_WORDS[f"section_{kind.name.lower()}_offset"]] % SECTION_ALIGN_BYTES == 0
    assert decode(blob) == image


descs = st.builds(GemmDescriptor, **{name: st.integers(0, (1 << 32) - 1) for name in DESC_FIELDS})
u32 = st.integers(0, (1 << 32) - 1)
s32 = st.integers(-(1 << 31), (1 << 31) - 1)
layers = st.builds(Layer, op_kind=st.sampled_from(OpKind), desc=descs,
                   out_format=st.sampled_from(OutFormat), post_mode=st.sampled_from(PostMode),
                   out_zero_point=s32, act_min=st.integers(-128, 127), act_max=s32,
                   bias_addr=u32, bias_present=st.integers(0, 1), mult_addr=u32, shift_addr=u32,
                   out_window_lo=u32, out_window_hi=u32, stats_addr=u32)
images = st.builds(Image, config_id=u32, layers=st.lists(layers, max_size=4).map(tuple),
                   sections=st.dictionaries(st.sampled_from([SectionKind.TABLES,
                                                             SectionKind.QUANT,
                                                             SectionKind.WEIGHTS]),
                                            st.binary(max_size=200)),
                   base_addr=u32)


@settings(max_examples=150, deadline=None)
@given(images)
def test_image_round_trip_is_lossless(image):
    blob = encode(image)
    assert decode(blob) == image
    assert encode(decode(blob)) == blob


def test_image_missing_sections_normalise_to_empty():
    a = Image(config_id=1, layers=())
    b = Image(config_id=1, layers=(), sections={SectionKind.TABLES: b""})
    assert a == b and decode(encode(a)) == a


def test_image_refuses_layers_blob_and_bad_fields():
    with pytest.raises(ImageError, match="LAYERS is generated"):
        Image(config_id=1, layers=(), sections={SectionKind.LAYERS: b"x"})
    with pytest.raises(ImageError, match=r"Layer.out_zero_point must be an int"):
        dataclasses.replace(legal_image().layers[0], out_zero_point=1 << 31)
    with pytest.raises(ImageError, match=r"Layer.op_kind=9 is not a OpKind"):
        dataclasses.replace(legal_image().layers[0], op_kind=9)
    with pytest.raises(ImageError, match=r"Image.base_addr must be"):
        Image(config_id=1, layers=(), base_addr=-1)


# -- decode errors --------------------------------------------------------------------------------

def test_decode_truncated():
    blob = encode(legal_image())
    with pytest.raises(ImageError, match="truncated"):
        decode(blob[:10])
    with pytest.raises(ImageError, match=rf"total_bytes={len(blob)} but the image is"):
        decode(blob[:-64])


def test_decode_bad_magic_version_crc():
    blob = encode(legal_image())
    with pytest.raises(ImageError, match="magic=0xdeadbeef"):
        decode(patch_header(blob, "magic", 0xDEADBEEF))
    with pytest.raises(ImageError, match="format_version=99"):
        decode(patch_header(blob, "format_version", 99))
    quant = struct.unpack_from("<I", blob, 4 * HEADER_WORDS["section_quant_offset"])[0]
    with pytest.raises(ImageError, match="crc32="):      # the parameters are under the CRC
        decode(blob[:quant] + bytes([blob[quant] ^ 1]) + blob[quant + 1:])


def test_weights_are_checked_by_a_crc_not_by_the_header_crc():
    """The header's CRC ends where the weights begin: a changed weight byte decodes, and
    validate() names the layer whose A loads no longer match its a_crc."""
    image = legal_image()
    blob = encode(image)
    at = struct.unpack_from("<I", blob, 4 * HEADER_WORDS["section_weights_offset"])[0]
    first = image.layers[0].desc.a_addr - BASE                # the first weight byte A loads
    assert first >= at
    bad = blob[:first] + bytes([blob[first] ^ 0x10]) + blob[first + 1:]
    assert decode(bad).layers == image.layers
    found = validate(bad, CFG)
    assert len(found) == 1 and found[0].startswith("layer 0: BAD_WEIGHTS: a_crc=")
    assert f"{image.layers[0].a_crc:#010x}" in found[0]
    # with_a_crcs is what makes the record right again
    fixed = with_a_crcs(decode(bad), CFG)
    assert validate(encode(fixed), CFG) == []



def test_decode_bad_enum_names_layer_and_field():
    blob = patch_layer(encode(legal_image()), "post_mode", 7)
    with pytest.raises(ImageError, match=r"layer 0: Layer.post_mode=7 is not a PostMode"):
        decode(blob)


# -- validator, one rule at a time ----------------------------------------------------------------

def test_validate_bad_magic():
    assert_one(patch_header(encode(legal_image()), "magic", 0x12345678), "magic=0x12345678")


def test_validate_bad_version():
    assert_one(patch_header(encode(legal_image()), "format_version", 7), "format_version=7")


def test_validate_bad_crc():
    blob = patch_header(encode(legal_image()), "crc32", 0xABCDEF01, seal=False)
    assert problems_of(blob) == [next(p for p in problems_of(blob) if "crc32=0xabcdef01" in p)]


def test_validate_config_id_mismatch_prints_both_in_hex():
    blob = encode(legal_image())
    other = dataclasses.replace(CFG, sync_bytes=512)   # same datapath, different identity
    found = validate(blob, other)
    assert found == [f"config_id={CFG.config_id:#010x} does not match the accelerator's "
                     f"config_id={other.config_id:#010x}"]


def test_validate_total_bytes_mismatch():
    assert_one(patch_header(encode(legal_image()), "total_bytes", 4096), "total_bytes=4096")


def test_validate_section_misaligned():
    assert_one(patch_header(encode(legal_image()), "section_weights_offset", 0x1C4),
               "section_weights_offset=0x1c4", "aligned")


def test_validate_section_out_of_image():
    assert_one(patch_header(encode(legal_image()), "section_weights_bytes", 1 << 20),
               "section_weights_bytes=1048576", "reaches past")


def test_validate_weights_offset_past_the_image_does_not_read_past_it():
    """With the weights part starting past the image, a parameter array there is reported,
    not read (a fuzzer's find: ``struct.error`` from the multiplier check, session 46)."""
    blob = patch_header(encode(legal_image()), "section_weights_offset", 0xFFFF_FFC0)
    blob = patch_layer(blob, "shift_addr", BASE + len(blob) + 0x1000)
    found = problems_of(blob)
    assert any("section_weights_offset=0xffffffc0" in p and "reaches past" in p for p in found)
    assert any(p.startswith("layer 0: BAD_WINDOW: shift_addr=") and "CRC-checked part" in p
               for p in found)


def test_validate_section_overlap():
    blob = encode(legal_image())
    quant = struct.unpack_from("<16I", blob)[HEADER_WORDS["section_quant_offset"]]
    assert_one(patch_header(blob, "section_weights_offset", quant),
               "section QUANT", "overlaps section WEIGHTS")


def test_validate_section_overlaps_header():
    assert_one(patch_header(encode(legal_image()), "section_tables_offset", 0),
               "section_tables_offset=0x0", "header")


def test_validate_layer_count_vs_section():
    assert_one(patch_header(encode(legal_image()), "layer_count", 2),
               "layer_count=2", "section_layers_bytes=256")


def test_validate_impossible_tiling():
    blob = patch_layer(encode(legal_image()), "desc_tile_m", 6)
    assert_one(blob, "layer 0: BAD_TILE", "tile_m=6")
    blob = patch_layer(encode(legal_image()), "desc_partition_k", 8)
    assert_one(blob, "layer 0: BAD_PARTITION_K", "partition_k=8")


def test_validate_bad_enum_values():
    blob = encode(legal_image())
    assert_one(patch_layer(blob, "op_kind", 5), "layer 0: BAD_LAYER: op_kind=5 is not a OpKind")
    assert_one(patch_layer(blob, "out_format", 2), "out_format=2 is not a OutFormat")
    assert_one(patch_layer(blob, "post_mode", 4), "post_mode=4 is not a PostMode")


def test_validate_b_mode_inconsistent_with_op_kind():
    blob = patch_layer(encode(legal_image()), "op_kind", OpKind.CONV)
    assert_one(blob, "desc_b_mode=0", "op_kind=CONV")


def test_validate_activation_bounds():
    blob = encode(legal_image())
    blob2 = patch_layer(patch_layer(blob, "act_min", 50), "act_max", 10)
    assert_one(blob2, "act_min=50 > act_max=10")
    assert_one(patch_layer(blob, "act_max", 300), "act_max=300 is outside int8")
    assert_one(patch_layer(blob, "act_min", -129), "act_min=-129 is outside int8")


def test_validate_zero_point_outside_int8():
    assert_one(patch_layer(encode(legal_image()), "out_zero_point", 128),
               "out_zero_point=128 is outside int8")


def test_validate_quant_arrays_in_quant_section():
    blob = encode(legal_image())
    assert_one(patch_layer(blob, "mult_addr", 0x100), "mult_addr=0x100", "QUANT section")
    assert_one(patch_layer(blob, "bias_addr", BASE + 2), "bias_addr=0x10002", "aligned")


def test_validate_conv_tables_in_tables_section():
    blob = patch_layer(patch_layer(encode(legal_image()), "op_kind", OpKind.CONV), "desc_b_mode", 1)
    blob = patch_layer(blob, "desc_run_count", 1)
    blob = patch_layer(blob, "desc_off_addr", 0x50000)
    assert_one(blob, "desc_off_addr=0x50000", "TABLES section")
    assert not any("b_mode" in p for p in problems_of(blob))


def test_validate_quant_values():
    image = legal_image()
    quant = bytearray(image.sections[SectionKind.QUANT])
    struct.pack_into("<i", quant, 4 * 8 * 2 + 4, 40)    # shift[1] = 40
    struct.pack_into("<i", quant, 4 * 8, 0)             # multiplier[0] = 0
    bad = dataclasses.replace(image, sections={**image.sections, SectionKind.QUANT: bytes(quant)})
    found = problems_of(encode(bad))
    assert any("shift[1]=40" in p for p in found) and any("multiplier[0]=0" in p for p in found)


def test_validate_written_range_outside_window():
    blob = patch_layer(encode(legal_image()), "out_window_hi", 0x30000 + 100)
    assert_one(blob, "written C range [0x30000, 0x3015c)", "out_window_hi=0x30064")


def test_validate_int8_written_range_is_n_bytes_per_row():
    # INT8 output writes 7 * 48 + 12 bytes, INT32 7 * 48 + 48
    image = legal_image(OutFormat.INT8)
    layer = dataclasses.replace(image.layers[0], out_window_hi=0x30000 + 7 * 48 + 12)
    assert validate(encode(dataclasses.replace(image, layers=(layer,))), CFG) == []
    image = legal_image(OutFormat.INT32)
    layer = dataclasses.replace(image.layers[0], out_window_hi=0x30000 + 7 * 48 + 12)
    assert_one(encode(dataclasses.replace(image, layers=(layer,))), "written C range",
               "0x30180")


def test_validate_window_overlaps_image():
    blob = patch_layer(encode(legal_image()), "out_window_lo", BASE)
    assert_one(blob, "output window [0x10000, 0x30180) overlaps the image")


def test_validate_window_beyond_device_memory():
    assert_one(encode(legal_image()), "out_window_hi=0x30180 reaches past device memory",
               device_bytes=0x30000)


def test_validate_empty_window():
    blob = patch_layer(encode(legal_image()), "out_window_lo", 0x40000)
    assert_one(blob, "out_window_lo=0x40000 >= out_window_hi=0x30180")


def test_validate_reports_every_problem():
    blob = encode(legal_image())
    blob = patch_header(blob, "format_version", 9)
    blob = patch_layer(blob, "act_max", -100)
    blob = patch_layer(blob, "out_zero_point", 500)
    blob = patch_header(blob, "magic", 0, seal=False)
    text = "\n".join(problems_of(blob))
    for fragment in ("magic=0x00000000", "format_version=9", "crc32=", "act_min=-3 > act_max=-100",
                     "out_zero_point=500"):
        assert fragment in text


def test_validate_truncated():
    assert problems_of(b"TSRA") == ["image is 4 bytes, truncated: the header alone is 64 bytes"]


# -- inspect and docs -----------------------------------------------------------------------------

def test_inspect_names_fields_and_enums():
    text = inspect(encode(legal_image()))
    assert "magic" in text and f"{IMAGE_MAGIC:#010x}" in text and "(ok)" in text
    assert "op_kind                  GEMM" in text and "post_mode                RELU" in text
    assert "out_zero_point           -3" in text and "WEIGHTS" in text
    assert "?(9)" in inspect(patch_layer(encode(legal_image()), "op_kind", 9))


def test_docs_contain_generated_tables():
    assert format_tables_markdown() in DOC.read_text(), \
        "docs/firmware.md is stale: paste firmware.image.format_tables_markdown()"


def test_docs_error_code_table_names_every_code():
    from spec.desc import ErrorCode

    text = (Path(__file__).parents[2] / "docs" / "firmware.md").read_text()
    table = text[text.index("### Error codes"):text.index("## Host runtime")]
    for code in ErrorCode:
        if code > ErrorCode.BAD_TABLE or code == ErrorCode.NONE:
            assert f"| {int(code)} | {code.name} |" in table, code.name


# -- image-run placement: what the header's CRC and the a_crc checks cover ----------------------

def _weights_at(blob):
    return BASE + struct.unpack_from("<I", blob, 4 * HEADER_WORDS["section_weights_offset"])[0]


def test_validate_a_outside_the_image():
    blob = patch_layer(encode(legal_image()), "desc_a_addr", 0x8000)
    assert_one(blob, "BAD_WINDOW: A operand [0x8000, ", "is not inside the image [0x10000, ",
               "a_crc")


def test_validate_b_reading_the_weights_part():
    blob = encode(legal_image())
    at = _weights_at(blob)
    assert_one(patch_layer(blob, "desc_b_addr", at), f"B operand [{at:#x}, ",
               f"reads the image's weights part [{at:#x}, ")


def test_validate_conv_table_reading_the_weights_part():
    blob = patch_layer(patch_layer(encode(legal_image()), "op_kind", OpKind.CONV), "desc_b_mode", 1)
    blob = patch_layer(blob, "desc_run_count", 1)
    at = _weights_at(blob)
    assert_one(patch_layer(blob, "desc_off_addr", at), f"off table [{at:#x}, ",
               "reads the image's weights part")


def test_validate_parameters_in_the_weights_part():
    blob = encode(legal_image())
    at = _weights_at(blob)
    assert_one(patch_layer(blob, "bias_addr", at), f"bias_addr={at:#x}",
               f"inside the image's CRC-checked part [0x10000, {at:#x})")


def test_header_weights_offset_before_the_records_is_refused():
    from spec.desc import ErrorCode
    from spec.record import check_header

    blob = encode(legal_image())
    header = dict(zip(HEADER_WORDS, struct.unpack_from(f"<{len(HEADER_WORDS)}I", blob)))
    assert check_header(header, CFG, image_addr=BASE) == []
    for bad in (HEADER_BYTES, header["section_weights_offset"] + 4,
                header["total_bytes"] + SECTION_ALIGN_BYTES):
        errs = check_header({**header, "section_weights_offset": bad}, CFG, image_addr=BASE)
        assert [code for code, _ in errs] == [ErrorCode.BAD_IMAGE], bad
        assert f"section_weights_offset={bad:#x} (the end of the CRC-checked part)" in errs[0][1]
    assert_one(patch_header(blob, "section_weights_offset", HEADER_BYTES),
               f"section_weights_offset={HEADER_BYTES:#x} is before the end of the layer records")
