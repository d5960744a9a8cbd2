"""spec.headers: the generated C headers compile with gcc and carry the Python values."""

import dataclasses
import shutil
import subprocess

import pytest

from spec.headers import CTRL_BITS, HEADERS, STATUS_BITS, image_header, regs_header
from spec.config import FORMAT_VERSION, PRESETS
from spec.desc import DESC_FIELDS, MAX_DIM, ErrorCode
from spec.layouts import (HEADER_WORDS, IMAGE_HEADER_WORDS, IMAGE_MAGIC, LAYER_RECORD_WORDS,
                          LAYER_WORDS, STATS_BYTES, STATS_WORDS, OpKind, OutFormat, PostMode,
                          SectionKind)
from spec.regmap import COUNTERS, CSR_ADDR_BITS, REG, REGISTERS

GCC = shutil.which("gcc")
needs_gcc = pytest.mark.skipif(GCC is None, reason="gcc: `gcc` not on PATH; C headers not "
                               "compiled")
PRESET_NAMES = ["tiny", "default"]


def _expected(cfg) -> dict[str, int]:
    """Every C name the headers must define, with its value from the Python sources."""
    want = {"ACCEL_CONFIG_ID": cfg.config_id, "ACCEL_FORMAT_VERSION": FORMAT_VERSION,
            "ACCEL_REG_COUNT": len(REGISTERS), "ACCEL_CSR_ADDR_BITS": CSR_ADDR_BITS,
            "ACCEL_DESC_WORDS": len(DESC_FIELDS), "ACCEL_COUNTER_COUNT": len(COUNTERS),
            "ACCEL_MAX_DIM": MAX_DIM,
            "ACCEL_IMAGE_MAGIC": IMAGE_MAGIC, "ACCEL_IMAGE_FORMAT_VERSION": FORMAT_VERSION,
            "ACCEL_IMAGE_CONFIG_ID": cfg.config_id,
            "ACCEL_IMAGE_HEADER_WORDS": IMAGE_HEADER_WORDS,
            "ACCEL_LAYER_RECORD_WORDS": LAYER_RECORD_WORDS,
            "ACCEL_LAYER_DESC_WORDS": len(DESC_FIELDS),
            "sizeof(accel_layer_t)": 4 * LAYER_RECORD_WORDS,
            "sizeof(accel_image_header_t)": 4 * IMAGE_HEADER_WORDS,
            "ACCEL_STATS_BYTES": STATS_BYTES, "sizeof(accel_layer_stats_t)": STATS_BYTES}
    for name, word in STATS_WORDS.items():
        want[f"offsetof(accel_layer_stats_t, {name})"] = 4 * word
    for field in dataclasses.fields(cfg):
        want[f"ACCEL_CFG_{field.name.upper()}"] = getattr(cfg, field.name)
    want["ACCEL_LOCAL_BASE"] = cfg.local_base
    for reg in REGISTERS:
        want[f"ACCEL_REG_{reg.name}"] = 4 * reg.offset
        want[f"ACCEL_REG_{reg.name}_WORD"] = reg.offset
    for prefix, kind in (("ACCEL_ERR", ErrorCode), ("ACCEL_OP", OpKind), ("ACCEL_POST", PostMode),
                         ("ACCEL_OUT", OutFormat), ("ACCEL_SECTION", SectionKind)):
        for member in kind:
            want[f"{prefix}_{member.name}"] = int(member)
    for name, bit in CTRL_BITS.items():
        want[f"ACCEL_CTRL_{name}"] = 1 << bit
    for name, bit in STATUS_BITS.items():
        want[f"ACCEL_STATUS_{name}"] = 1 << bit
    for name, word in LAYER_WORDS.items():
        want[f"offsetof(accel_layer_t, {name})"] = 4 * word
    for name, word in HEADER_WORDS.items():
        want[f"offsetof(accel_image_header_t, {name})"] = 4 * word
    return want


def _program(names) -> str:
    lines = ['#include <stdio.h>', '#include "accel_regs.h"', '#include "accel_image.h"', "",
             "int main(void)", "{"]
    for name in names:
        lines.append(f'    printf("%s=%llu\\n", "{name}", (unsigned long long)({name}));')
    lines += ["    return 0;", "}"]
    return "\n".join(lines) + "\n"


def _write_headers(cfg, path):
    for name, header in HEADERS.items():
        (path / name).write_text(header(cfg))


def _compile_and_run(cfg, tmp_path, source: str) -> str:
    _write_headers(cfg, tmp_path)
    (tmp_path / "main.c").write_text(source)
    exe = tmp_path / "main"
    build = subprocess.run([GCC, "-std=c11", "-Wall", "-Wextra", "-Werror", "-pedantic",
                            "-I", str(tmp_path), str(tmp_path / "main.c"), "-o", str(exe)],
                           capture_output=True, text=True)
    assert build.returncode == 0, build.stderr
    return subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout


@needs_gcc
@pytest.mark.parametrize("preset", PRESET_NAMES)
def test_headers_compile_and_constants_match_python(preset, tmp_path):
    cfg = PRESETS[preset]
    want = _expected(cfg)
    out = _compile_and_run(cfg, tmp_path, _program(want))
    got = {}
    for line in out.splitlines():
        name, _, value = line.rpartition("=")
        got[name] = int(value)
    assert got == want


@needs_gcc
def test_headers_accessors_address_word_registers(tmp_path):
    """accel_write / accel_read index a word array by the byte offsets ACCEL_REG_*."""
    source = "\n".join([
        '#include <stdio.h>', '#include "accel_regs.h"', '#include "accel_image.h"',
        "int main(void)", "{",
        "    uint32_t regs[ACCEL_REG_COUNT] = {0};",
        "    accel_write(regs, ACCEL_REG_DESC_N, 77u);",
        "    accel_write(regs, ACCEL_REG_CTRL, ACCEL_CTRL_START);",
        '    printf("%u %u %u\\n", (unsigned)regs[ACCEL_REG_DESC_N_WORD],',
        "           (unsigned)accel_read(regs, ACCEL_REG_DESC_N), (unsigned)regs[0]);",
        "    accel_layer_t layer = {0};",
        "    layer.op_kind = ACCEL_OP_CONV;",
        '    printf("%u\\n", (unsigned)((const uint32_t *)&layer)[ACCEL_LAYER_DESC_WORDS]);',
        "    return 0;", "}", ""])
    out = _compile_and_run(PRESETS["tiny"], tmp_path, source)
    assert out.split() == ["77", "77", "1", str(int(OpKind.CONV))]
    assert LAYER_WORDS["op_kind"] == len(DESC_FIELDS)


@needs_gcc
def test_headers_static_asserts_catch_a_wrong_layout(tmp_path):
    """The offsetof asserts are live: a header whose struct disagrees fails to compile."""
    cfg = PRESETS["tiny"]
    _write_headers(cfg, tmp_path)
    text = (tmp_path / "accel_image.h").read_text()
    broken = text.replace("    uint32_t op_kind;", "    uint32_t extra;\n    uint32_t op_kind;", 1)
    assert broken != text
    (tmp_path / "accel_image.h").write_text(broken)
    (tmp_path / "main.c").write_text('#include "accel_image.h"\nint main(void) { return 0; }\n')
    build = subprocess.run([GCC, "-std=c11", "-Wall", "-Werror", "-I", str(tmp_path),
                            str(tmp_path / "main.c"), "-o", str(tmp_path / "main")],
                           capture_output=True, text=True)
    assert build.returncode != 0
    assert "accel_layer_t.op_kind offset" in build.stderr


@pytest.mark.parametrize("preset", PRESET_NAMES)
def test_headers_generation_is_deterministic(preset):
    cfg = PRESETS[preset]
    # an equal but distinct config object gives the same text
    again = dataclasses.replace(cfg)
    assert regs_header(cfg) == regs_header(again)
    assert image_header(cfg) == image_header(again)


def test_headers_banner_names_config_id():
    cfg = PRESETS["tiny"]
    for header in HEADERS.values():
        head = header(cfg)[:400]
        assert f"0x{cfg.config_id:08x}" in head
        assert "do not edit" in head


def test_headers_differ_between_configs():
    tiny, default = PRESETS["tiny"], PRESETS["default"]
    assert regs_header(tiny) != regs_header(default)
    assert f"0x{default.config_id:08x}u" in regs_header(default)


def test_headers_layer_struct_follows_layer_words_order():
    text = image_header(PRESETS["tiny"])
    body = text[text.index("typedef struct {", text.index("accel_image_header_t;")):
                text.index("accel_layer_t;")]
    members = [line.split()[1].rstrip(";").split("[")[0] for line in body.splitlines()[1:]
               if line.startswith("    uint32_t ")]
    assert members == list(LAYER_WORDS) + ["reserved"]


def test_headers_status_bits_match_register_docs():
    assert STATUS_BITS == {"BUSY": 0, "DONE": 1, "IMAGE": 2}
    assert CTRL_BITS == {"START": 0, "RUN_IMAGE": 1}
    assert "bit 0 busy, bit 1 done" in REG["STATUS"].doc and "bit 2" in REG["STATUS"].doc
    assert "bit 0 START" in REG["CTRL"].doc and "bit 1 RUN_IMAGE" in REG["CTRL"].doc


def test_headers_emit_writes_both_headers(tmp_path):
    from hw.build import OUTPUTS, emit

    cfg = PRESETS["tiny"]
    path = emit(cfg, tmp_path)
    assert {"accel_regs.h", "accel_image.h"} <= set(OUTPUTS)
    assert (path / "accel_regs.h").read_text() == regs_header(cfg)
    assert (path / "accel_image.h").read_text() == image_header(cfg)
