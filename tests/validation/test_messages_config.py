"""spec.config, spec.desc, spec.record: every refusal names the field and states its allowed range."""

import dataclasses
import json

import pytest

from firmware.builder import ImageBuilder
from flow.compile import compile_network
from planner import ConvShape, GemmShape, layer_cost, plan_conv, plan_gemm, predict
from planner.conv import compile_conv
from spec.config import PRESETS, AccelConfig, ConfigError, require_config
from spec.desc import DESC_FIELDS, GemmDescriptor, depthwise_weight_words
from spec.layouts import LAYER_WORDS
from spec.record import check_record, layer_record

from .util import refused

FIELDS = tuple(f.name for f in dataclasses.fields(AccelConfig))
DEFAULT = PRESETS["default"]
POW2 = {"array_rows": (2, 64), "array_cols": (4, 64),
        **{name: (16, 1 << 16) for name in ("conv_offset_entries", "conv_run_entries",
                                            "conv_group_entries", "quant_entries")},
        **{name: (64, 1 << 24) for name in ("buf_a_bytes", "buf_b_bytes", "acc_buf_bytes")}}


def cfg(**changes) -> AccelConfig:
    return dataclasses.replace(DEFAULT, **changes)


# -- AccelConfig -------------------------------------------------------------------------------

@pytest.mark.parametrize("name", FIELDS)
@pytest.mark.parametrize("bad", ["8", 8.0, True, None])
def test_config_field_must_be_int(name, bad):
    with refused(ConfigError, f"AccelConfig.{name} must be an int, not {type(bad).__name__} "
                              f"{bad!r}"):
        cfg(**{name: bad})


@pytest.mark.parametrize("name, only, bad", [("operand_bits", 8, 4), ("operand_bits", 8, 16),
                                             ("acc_bits", 32, 16), ("acc_bits", 32, 64)])
def test_config_fixed_fields(name, only, bad):
    with refused(ConfigError, f"AccelConfig.{name} must be {only} (the only supported value), "
                              f"not {bad}"):
        cfg(**{name: bad})


@pytest.mark.parametrize("name", sorted(POW2))
@pytest.mark.parametrize("where", ["below", "above", "not_pow2"])
def test_config_power_of_two_fields(name, where):
    lo, hi = POW2[name]
    bad = {"below": lo // 2, "above": hi * 2, "not_pow2": 3 * lo}[where]
    with refused(ConfigError, f"AccelConfig.{name} must be a power of two in [{lo}, {hi}], "
                              f"not {bad}"):
        cfg(**{name: bad})


def _range_cases():
    yield "dram_addr_bits", 16, 32
    yield "sync_bytes", 1, 1 << 24
    beats = {"a": DEFAULT.a_beat_bytes, "b": DEFAULT.b_beat_bytes, "c": DEFAULT.c_beat_bytes}
    for port, beat in beats.items():
        yield f"{port}_port_bytes_per_cycle", 1, beat
        yield f"{port}_port_latency_cycles", 1, 256


@pytest.mark.parametrize("name, lo, hi", list(_range_cases()))
@pytest.mark.parametrize("side", ["low", "high"])
def test_config_range_fields(name, lo, hi, side):
    bad = lo - 1 if side == "low" else hi + 1
    with refused(ConfigError, f"AccelConfig.{name} must be in [{lo}, {hi}], not {bad}"):
        cfg(**{name: bad})


@pytest.mark.parametrize("name, of", [("block_m", DEFAULT.array_rows),
                                      ("block_n", DEFAULT.array_cols)])
@pytest.mark.parametrize("bad", ["half", "odd", "zero", "huge"])
def test_config_block_multiple(name, of, bad):
    value = {"half": of // 2, "odd": of + 1, "zero": 0, "huge": (1 << 16) + of}[bad]
    with refused(ConfigError, f"AccelConfig.{name} must be a multiple of {of} in "
                              f"[{of}, {1 << 16}], not {value}"):
        cfg(**{name: value})


@pytest.mark.parametrize("name, changes, need, half", [
    ("buf_a_bytes", dict(array_rows=64, block_m=64, buf_a_bytes=64), 128, 64),
    ("buf_b_bytes", dict(array_cols=64, block_n=64, buf_b_bytes=64, quant_entries=16), 128, 64),
    ("acc_buf_bytes", dict(acc_buf_bytes=1024), 2048, 1024),
])
def test_config_buffers_hold_two_halves(name, changes, need, half):
    with refused(ConfigError, f"AccelConfig.{name} must be at least {need} (two halves of "
                              f"{half} bytes), not {changes[name]}"):
        cfg(**changes)


@pytest.mark.parametrize("bits, local", [(18, 512 << 10), (20, 3 << 10), (20, 16)])
def test_config_local_buffer_range(bits, local):
    dram = 1 << bits
    with refused(ConfigError, f"AccelConfig.local_buf_bytes must be a power of two in [32, "
                              f"{dram}], not {local} (at most dram_bytes: with dram_addr_bits="
                              f"{bits}, set it to {dram} or less)"):
        AccelConfig(dram_addr_bits=bits, local_buf_bytes=local)


@pytest.mark.parametrize("cols, lanes", [(16, 3), (8, 16), (4, -2)])
def test_config_requant_lanes_range(cols, lanes):
    with refused(ConfigError, f"AccelConfig.requant_lanes must be 0 (one lane per column) or a "
                              f"power of two in [1, array_cols={cols}], not {lanes}"):
        AccelConfig(array_cols=cols, block_n=16, requant_lanes=lanes)


@pytest.mark.parametrize("rows, cols", [(8, 16), (2, 4), (16, 8), (32, 32)])
def test_config_dw_mesh_square(rows, cols):
    """A 32 x 32 mesh's 24-beat tiles would overlap their 32-cycle drains."""
    with refused(ConfigError, f"AccelConfig.dw_mesh=1 needs a square array of 4 x 4 to 16 x 16, "
                              f"not array_rows={rows} x array_cols={cols}"):
        AccelConfig(array_rows=rows, array_cols=cols, block_m=max(16, rows),
                    block_n=max(16, cols), dw_mesh=1,
                    a_port_bytes_per_cycle=rows, b_port_bytes_per_cycle=cols,
                    c_port_bytes_per_cycle=4 * cols)


@pytest.mark.parametrize("taps", [[1] * 8, [0] * 8 + [128], [-129] + [0] * 8])
def test_depthwise_weight_words_taps(taps):
    with refused(ValueError, "depthwise_weight_words: 9, 25 or 49 int8 taps (3x3, 5x5, 7x7), "
                             f"not {taps!r}"):
        depthwise_weight_words(taps)


@pytest.mark.parametrize("unknown", [["bogus"], ["zzz", "aaa"]])
def test_config_from_dict_unknown_fields(unknown):
    with refused(ConfigError, f"unknown AccelConfig field(s) {', '.join(sorted(unknown))}; "
                              f"known fields are {', '.join(sorted(FIELDS))}"):
        AccelConfig.from_dict({**DEFAULT.to_dict(), **{k: 1 for k in unknown}})


@pytest.mark.parametrize("key", ["array_rows", "dram_addr_bits"])
def test_config_from_json_duplicate_field(key):
    with refused(ConfigError, f"duplicate AccelConfig field {key!r} in JSON"):
        AccelConfig.from_json(f'{{"{key}": 8, "{key}": 16}}')


@pytest.mark.parametrize("text, kind", [("[]", "list"), ("3", "int"), ('"x"', "str"),
                                        ("null", "NoneType")])
def test_config_from_json_must_be_object(text, kind):
    with refused(ConfigError, f"AccelConfig JSON must be an object of fields, not {kind}"):
        AccelConfig.from_json(text)


@pytest.mark.parametrize("text", ["", "{", "nojson"])
def test_config_from_json_must_be_json(text):
    with refused(ConfigError, "AccelConfig JSON is not valid JSON: "):
        AccelConfig.from_json(text)


_GEMM = GemmShape(8, 8, 8)
_CONV = ConvShape(batch=1, in_channels=4, height=6, width=6, out_channels=4, kernel_h=3,
                  kernel_w=3, pad_top=1, pad_left=1, pad_bottom=1, pad_right=1)
ENTRY_POINTS = {
    "plan_gemm": lambda c: plan_gemm(_GEMM, c),
    "plan_conv": lambda c: plan_conv(_CONV, c),
    "layer_cost": lambda c: layer_cost(_CONV, c),
    "predict": lambda c: predict(plan_gemm(_GEMM, PRESETS["tiny"]), c),
    "compile_conv": lambda c: compile_conv(_CONV, "NCHW", c),
    "ImageBuilder": lambda c: ImageBuilder(c),
    "compile_network": lambda c: compile_network(None, c),
}


@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
@pytest.mark.parametrize("bad, hint", [("tiny", "AccelConfig (the preset: PRESETS['tiny']), "
                                                "not str 'tiny'"),
                                       (None, "AccelConfig, not NoneType None"),
                                       ({"array_rows": 4}, "AccelConfig, not dict")])
def test_config_entry_points_need_an_accel_config(entry, bad, hint):
    """A preset's name (or anything else) where a config belongs is a TypeError naming ``cfg``
    at the entry point, not an AttributeError inside a cost model."""
    with refused(TypeError, f"cfg must be an {hint}"):
        ENTRY_POINTS[entry](bad)
    assert require_config(PRESETS["tiny"]) is PRESETS["tiny"]


def test_config_from_dict_names_the_defaulted_fields():
    values = DEFAULT.to_dict()
    del values["array_rows"], values["sync_bytes"]
    with refused(ConfigError, "AccelConfig.array_cols must be", "(fields not given take their "
                                                                 "defaults: array_rows, sync_bytes)"):
        AccelConfig.from_dict({**values, "array_cols": 3})
    with refused(ConfigError, "AccelConfig.array_rows must be a power of two in [2, 64], not 3"):
        AccelConfig.from_dict({**DEFAULT.to_dict(), "array_rows": 3})


@pytest.mark.parametrize("changes, what, name, half", [
    (dict(block_m=512), "block_m * block_n int32 sums (8192 bytes)", "acc_buf_bytes=2048",
     1024),
    (dict(block_n=4096, acc_buf_bytes=1 << 20), "one k step of block_n int8 (4096 bytes)",
     "buf_b_bytes=4096", 2048),
])
def test_config_block_fits_the_buffers(changes, what, name, half):
    """block_m=512 on tiny was accepted; the planner then costed plans no descriptor allows."""
    tiny = PRESETS["tiny"].to_dict()
    with refused(ConfigError, f"{what} must fit half of {name} ({half} bytes); lower "
                              f"block_m/block_n or raise {name.split('=')[0]}"):
        AccelConfig(**{**tiny, **changes})


def test_config_from_json_range_errors_pass_through():
    with refused(ConfigError, "AccelConfig.array_rows must be a power of two in [2, 64], not 3"):
        AccelConfig.from_json(json.dumps({**DEFAULT.to_dict(), "array_rows": 3}))


# -- GemmDescriptor ----------------------------------------------------------------------------

DESC = dict(m=8, k=16, n=12, partition_m=8, partition_n=12, partition_k=16, tile_m=4, tile_n=4,
            outer_m=1, need_splitk=0, acc_buffer_needed=384, a_addr=0, a_stride=8,
            b_addr=0x2000, b_stride=12, c_addr=0x3000, c_stride=48)


@pytest.mark.parametrize("name", DESC_FIELDS)
@pytest.mark.parametrize("bad", [-1, 1 << 32, "1", 1.0, None])
def test_descriptor_field_u32(name, bad):
    with refused(ValueError, f"GemmDescriptor.{name} must be an int in [0, 2**32), not "
                             f"{bad!r}"):
        GemmDescriptor(**{**DESC, name: bad})


# -- layer records -----------------------------------------------------------------------------

@pytest.mark.parametrize("unknown", [["bogus"], ["m", "desc_zz"]])
def test_layer_record_unknown_fields(unknown):
    with refused(KeyError, f"not layer record fields: {', '.join(sorted(unknown))}; the fields "
                           f"are {', '.join(LAYER_WORDS)}"):
        layer_record(GemmDescriptor(**DESC), **{k: 0 for k in unknown})


@pytest.mark.parametrize("name", ["desc_m", "op_kind", "stats_addr"])
def test_check_record_missing_word(name):
    rec = layer_record(GemmDescriptor(**DESC))
    del rec[name]
    with refused(KeyError, f"record lacks {name}"):
        check_record(rec, PRESETS["tiny"])


@pytest.mark.parametrize("name", ["desc_k", "act_min", "out_window_hi"])
@pytest.mark.parametrize("bad", [-1, 1 << 32, 1.5])
def test_check_record_word_u32(name, bad):
    rec = {**layer_record(GemmDescriptor(**DESC)), name: bad}
    with refused(ValueError, f"record word {name}={bad!r} must be a u32 (an int in "
                             f"[0, 2**32))"):
        check_record(rec, PRESETS["tiny"])


@pytest.mark.parametrize("name, mesh", [("buf_b_bytes", 0), ("buf_a_bytes", 1)])
def test_config_buffer_holds_a_parameter_array(name, mesh):
    """A parameter array loads in one command into a buffer's rows; only RTL generation
    refused a smaller buffer (a traceback from hw.params), after compile and the golden device
    had run the config."""
    cfg = dataclasses.replace(PRESETS["small"], dw_mesh=mesh)
    with refused(ConfigError, f"AccelConfig.{name}=2048 must hold a whole parameter array, "
                              f"quant_entries=1024 int32 words (4096 bytes, loaded in one "
                              f"command{' through A with dw_mesh=1' if mesh else ''}): raise "
                              f"{name} to 4096 or more, or lower quant_entries"):
        dataclasses.replace(cfg, **{name: 2048})

