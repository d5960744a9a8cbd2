"""AccelConfig: range validation and its messages, JSON I/O, config_id, derived numbers, presets."""

import dataclasses
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from spec.config import FORMAT_VERSION, PRESETS, AccelConfig, ConfigError

FIELDS = tuple(f.name for f in dataclasses.fields(AccelConfig))
ROOT = Path(__file__).resolve().parents[2]


def _pow2s(lo, hi):
    return [1 << e for e in range(lo.bit_length() - 1, hi.bit_length()) if lo <= 1 << e <= hi]


@st.composite
def configs(draw):
    """Valid configurations across the whole allowed space."""
    rows = draw(st.sampled_from(_pow2s(2, 64)))
    cols = draw(st.sampled_from(_pow2s(4, 64)))
    a_beat, b_beat, c_beat = rows, cols, 4 * cols
    dram_bits = draw(st.integers(16, 32))
    buf_a = draw(st.sampled_from(_pow2s(max(64, 2 * a_beat), 1 << 24)))
    buf_b = draw(st.sampled_from(_pow2s(max(64, 2 * b_beat), 1 << 24)))
    acc = draw(st.sampled_from(_pow2s(max(64, 2 * c_beat * rows), 1 << 24)))
    # one block_m x block_n block fits: int32 sums in an accumulator half, a k step in each
    # operand half (an array tile always does)
    block_m = rows * draw(st.integers(1, min(1 << 16, buf_a // 2, acc // 8 // cols) // rows))
    block_n = cols * draw(st.integers(1, min(1 << 16, buf_b // 2, acc // 8 // block_m) // cols))
    return AccelConfig(
        array_rows=rows, array_cols=cols,
        buf_a_bytes=buf_a, buf_b_bytes=buf_b, acc_buf_bytes=acc,
        a_port_bytes_per_cycle=draw(st.integers(1, a_beat)),
        b_port_bytes_per_cycle=draw(st.integers(1, b_beat)),
        c_port_bytes_per_cycle=draw(st.integers(1, c_beat)),
        a_port_latency_cycles=draw(st.integers(1, 256)),
        b_port_latency_cycles=draw(st.integers(1, 256)),
        c_port_latency_cycles=draw(st.integers(1, 256)),
        block_m=block_m, block_n=block_n,
        sync_bytes=draw(st.integers(1, 1 << 24)),
        dram_addr_bits=dram_bits,
        local_buf_bytes=draw(st.sampled_from(_pow2s(2 * b_beat, 1 << dram_bits))),
        # a parameter array (quant_entries int32) loads into buffer B in one command
        quant_entries=draw(st.sampled_from(_pow2s(16, min(1 << 16, buf_b // 4)))),
    )


# -- validation messages -----------------------------------------------------------------------

#: (field, bad value, range text the message must state), on top of the default config.
RANGE_CASES = [
    ("array_rows", 3, "a power of two in [2, 64]"),
    ("array_rows", 1, "a power of two in [2, 64]"),
    ("array_rows", 128, "a power of two in [2, 64]"),
    ("array_cols", 0, "a power of two in [4, 64]"),
    ("array_cols", 24, "a power of two in [4, 64]"),
    ("operand_bits", 4, "8 (the only supported value)"),
    ("operand_bits", 16, "8 (the only supported value)"),
    ("acc_bits", 16, "32 (the only supported value)"),
    ("acc_bits", 64, "32 (the only supported value)"),
    ("buf_a_bytes", 32, "a power of two in [64, 16777216]"),
    ("buf_a_bytes", 3 << 10, "a power of two in [64, 16777216]"),
    ("buf_a_bytes", 1 << 25, "a power of two in [64, 16777216]"),
    ("buf_b_bytes", 100, "a power of two in [64, 16777216]"),
    ("acc_buf_bytes", 0, "a power of two in [64, 16777216]"),
    ("acc_buf_bytes", -64, "a power of two in [64, 16777216]"),
    ("dram_addr_bits", 15, "in [16, 32]"),
    ("dram_addr_bits", 33, "in [16, 32]"),
    ("conv_offset_entries", 8, "a power of two in [16, 65536]"),
    ("conv_offset_entries", 100, "a power of two in [16, 65536]"),
    ("conv_run_entries", 1 << 17, "a power of two in [16, 65536]"),
    ("conv_group_entries", 0, "a power of two in [16, 65536]"),
    ("quant_entries", 8, "a power of two in [16, 65536]"),
    ("a_port_bytes_per_cycle", 0, "in [1, 16]"),
    ("a_port_bytes_per_cycle", 17, "in [1, 16]"),
    ("b_port_bytes_per_cycle", 17, "in [1, 16]"),
    ("c_port_bytes_per_cycle", 65, "in [1, 64]"),
    ("c_port_bytes_per_cycle", -1, "in [1, 64]"),
    ("a_port_latency_cycles", 0, "in [1, 256]"),
    ("b_port_latency_cycles", 257, "in [1, 256]"),
    ("c_port_latency_cycles", 1000, "in [1, 256]"),
    ("block_m", 8, "a multiple of 16 in [16, 65536]"),
    ("block_m", 24, "a multiple of 16 in [16, 65536]"),
    ("block_m", 1 << 17, "a multiple of 16 in [16, 65536]"),
    ("block_n", 0, "a multiple of 16 in [16, 65536]"),
    ("sync_bytes", 0, "in [1, 16777216]"),
    ("local_buf_bytes", 16, "a power of two in [32, 2147483648]"),
    ("requant_lanes", 3, "0 (one lane per column) or a power of two in [1, array_cols=16]"),
    ("requant_lanes", 32, "0 (one lane per column) or a power of two in [1, array_cols=16]"),
    ("requant_lanes", -1, "0 (one lane per column) or a power of two in [1, array_cols=16]"),
    ("local_buf_bytes", 3 << 10, "a power of two in [32, 2147483648]"),
    ("dw_mesh", 2, "in [0, 1]"),
    ("dw_mesh", -1, "in [0, 1]"),
    ("row_store", 2, "in [0, 1]"),
    ("row_store", -1, "in [0, 1]"),
    ("local_buf_bytes", 1 << 32, "a power of two in [32, 2147483648]"),
    ("sync_bytes", (1 << 24) + 1, "in [1, 16777216]"),
]


@pytest.mark.parametrize("name, value, rng", RANGE_CASES,
                         ids=[f"{n}={v}" for n, v, _ in RANGE_CASES])
def test_config_range_error_names_field_value_and_range(name, value, rng):
    msg = f"AccelConfig.{name} must be {rng}, not {value!r}"
    with pytest.raises(ConfigError, match=re.escape(msg)):
        AccelConfig(**{name: value})


def test_config_every_range_checked_field_has_a_case():
    assert {n for n, _, _ in RANGE_CASES} == set(FIELDS)


@pytest.mark.parametrize("name, kwargs, minimum", [
    # one buffer row per half: 2 * a_beat_bytes with a 64-wide array is 128 > the 64 pow2 floor
    ("buf_a_bytes", dict(array_rows=64, block_m=64, buf_a_bytes=64), 128),
    ("buf_b_bytes", dict(array_cols=64, block_n=64, buf_b_bytes=64, quant_entries=16), 128),
    # accumulator halves hold one array tile of int32: 2 * 16 * 16 * 4
    ("acc_buf_bytes", dict(acc_buf_bytes=1024), 2048),
])
def test_config_buffer_below_two_halves_is_refused(name, kwargs, minimum):
    msg = f"AccelConfig.{name} must be at least {minimum}"
    with pytest.raises(ConfigError, match=re.escape(msg)) as info:
        AccelConfig(**kwargs)
    assert f"not {kwargs[name]!r}" in str(info.value)
    # exactly the minimum is accepted
    AccelConfig(**{**kwargs, name: minimum})


def test_config_port_range_follows_the_beat_size():
    # the per-port bandwidth ceiling is one beat, which scales with the array
    AccelConfig(array_rows=32, block_m=32, a_port_bytes_per_cycle=32)
    with pytest.raises(ConfigError, match=re.escape("a_port_bytes_per_cycle must be in [1, 8]")):
        AccelConfig(array_rows=8, a_port_bytes_per_cycle=16)


@pytest.mark.parametrize("name", FIELDS)
@pytest.mark.parametrize("bad", [16.0, "16", True, None], ids=["float", "str", "bool", "none"])
def test_config_non_int_rejected(name, bad):
    with pytest.raises(ConfigError, match=rf"AccelConfig\.{name} must be an int, not "
                                          rf"{type(bad).__name__}"):
        AccelConfig(**{name: bad})


def test_config_error_is_a_value_error():
    assert issubclass(ConfigError, ValueError)


def test_config_is_frozen():
    cfg = PRESETS["tiny"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.array_rows = 8


# -- JSON ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_config_json_round_trip_of_every_preset(preset):
    cfg = PRESETS[preset]
    text = cfg.to_json()
    assert AccelConfig.from_json(text) == cfg
    assert AccelConfig.from_dict(cfg.to_dict()) == cfg
    assert set(json.loads(text)) == set(FIELDS)
    assert text.endswith("\n")


@settings(max_examples=100, deadline=None)
@given(configs())
def test_config_json_round_trip_of_any_valid_config(cfg):
    back = AccelConfig.from_json(cfg.to_json())
    assert back == cfg
    assert back.config_id == cfg.config_id


def test_config_from_json_partial_object_uses_defaults():
    assert AccelConfig.from_json("{}") == AccelConfig()
    assert AccelConfig.from_json('{"sync_bytes": 7}') == AccelConfig(sync_bytes=7)


def test_config_from_json_refuses_unknown_keys():
    with pytest.raises(ConfigError, match=r"unknown AccelConfig field\(s\) bogus, zzz"):
        AccelConfig.from_json('{"array_rows": 16, "zzz": 1, "bogus": 2}')
    with pytest.raises(ConfigError, match="unknown"):
        AccelConfig.from_dict({"arrayrows": 16})


@pytest.mark.parametrize("text", [
    '{"array_rows": 16, "array_rows": 16}',          # duplicate, same value
    '{"array_rows": 8, "array_cols": 8, "array_rows": 16}',  # duplicate, different value
])
def test_config_from_json_refuses_duplicate_keys(text):
    with pytest.raises(ConfigError, match="duplicate AccelConfig field 'array_rows'"):
        AccelConfig.from_json(text)


@pytest.mark.parametrize("text", ["[]", "[{}]", "16", '"array_rows"', "null", "true"])
def test_config_from_json_refuses_non_objects(text):
    with pytest.raises(ConfigError, match="must be an object"):
        AccelConfig.from_json(text)


@pytest.mark.parametrize("text", ['{"array_rows": 16.0}', '{"array_rows": "16"}',
                                  '{"array_rows": true}', '{"array_rows": {"x": 1}}'])
def test_config_from_json_refuses_non_int_values(text):
    with pytest.raises(ConfigError, match="array_rows must be an int"):
        AccelConfig.from_json(text)


def test_config_from_json_validates_ranges():
    with pytest.raises(ConfigError, match=re.escape("array_rows must be a power of two")):
        AccelConfig.from_json('{"array_rows": 12}')


# -- config_id -----------------------------------------------------------------------------------

def test_config_id_is_32_bit_and_differs_across_presets():
    ids = {name: cfg.config_id for name, cfg in PRESETS.items()}
    assert all(type(i) is int and 0 <= i < 1 << 32 for i in ids.values())
    assert len(set(ids.values())) == len(ids)


def test_config_id_equal_for_equal_configs():
    for name, cfg in PRESETS.items():
        twin = AccelConfig(**cfg.to_dict())
        assert twin is not cfg and twin.config_id == cfg.config_id


def test_config_id_is_stable_across_interpreters():
    # a fresh interpreter with a different hash seed computes the same id for every preset
    code = ("import json; from spec.config import PRESETS; "
            "print(json.dumps({k: v.config_id for k, v in PRESETS.items()}))")
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, check=True,
                         capture_output=True, text=True).stdout
    assert json.loads(out) == {k: v.config_id for k, v in PRESETS.items()}


#: A base whose every variable field can change alone (blocks and ports fit any array size).
_FLEX = AccelConfig(block_m=64, block_n=64, a_port_bytes_per_cycle=1, b_port_bytes_per_cycle=1,
                    c_port_bytes_per_cycle=1)


@pytest.mark.parametrize("name", [f for f in FIELDS if f not in AccelConfig._FIXED])
def test_config_id_changes_when_any_single_field_changes(name):
    value = getattr(_FLEX, name)
    changed = 0
    for new in (value * 2, value // 2, value + 1, value - 1):
        if new == value:
            continue
        try:
            other = dataclasses.replace(_FLEX, **{name: new})
        except ConfigError:
            continue
        assert other.config_id != _FLEX.config_id, (name, new)
        changed += 1
    assert changed, f"no single-field change of {name} is valid"


@settings(max_examples=60, deadline=None)
@given(configs(), configs())
def test_config_id_distinguishes_distinct_configs(a, b):
    assert (a.config_id == b.config_id) == (a == b)


def test_config_format_version_is_positive_int():
    assert type(FORMAT_VERSION) is int and FORMAT_VERSION >= 1


# -- derived numbers -----------------------------------------------------------------------------

def _check_derived(cfg):
    assert cfg.operand_bytes == 1 and cfg.acc_bytes == 4
    assert cfg.a_beat_bytes == cfg.array_rows
    assert cfg.b_beat_bytes == cfg.array_cols
    assert cfg.c_beat_bytes == 4 * cfg.array_cols
    assert cfg.buf_a_depth * cfg.a_beat_bytes == cfg.buf_a_bytes
    assert cfg.buf_b_depth * cfg.b_beat_bytes == cfg.buf_b_bytes
    assert cfg.acc_depth * cfg.c_beat_bytes == cfg.acc_buf_bytes
    assert 2 * cfg.buf_a_half_bytes == cfg.buf_a_bytes
    assert 2 * cfg.buf_b_half_bytes == cfg.buf_b_bytes
    assert 2 * cfg.acc_half_bytes == cfg.acc_buf_bytes
    # each half holds at least one row (A, B) or one array tile of int32 (accumulator)
    assert cfg.buf_a_depth >= 2 and cfg.buf_a_depth % 2 == 0
    assert cfg.buf_b_depth >= 2 and cfg.buf_b_depth % 2 == 0
    assert cfg.acc_depth >= 2 * cfg.array_rows and cfg.acc_depth % 2 == 0
    assert cfg.dram_bytes == 2 ** cfg.dram_addr_bits
    assert cfg.macs_per_cycle == cfg.array_rows * cfg.array_cols


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_config_derived_numbers_consistent_for_presets(preset):
    _check_derived(PRESETS[preset])


@settings(max_examples=100, deadline=None)
@given(configs())
def test_config_derived_numbers_consistent_for_any_config(cfg):
    _check_derived(cfg)


def test_config_default_derived_numbers():
    cfg = PRESETS["default"]
    assert (cfg.a_beat_bytes, cfg.b_beat_bytes, cfg.c_beat_bytes) == (16, 16, 64)
    assert (cfg.buf_a_depth, cfg.buf_b_depth, cfg.acc_depth) == (8192, 8192, 1024)
    assert (cfg.buf_a_half_bytes, cfg.acc_half_bytes) == (64 << 10, 32 << 10)
    assert cfg.macs_per_cycle == 256
    # 2 GiB of DRAM, the local buffer above it: 32-bit device addresses
    assert (cfg.dram_addr_bits, cfg.dram_bytes) == (31, 2 << 30)
    assert (cfg.local_base, cfg.local_buf_bytes, cfg.local_depth) == (1 << 31, 512 << 10, 32768)
    assert cfg.is_local(1 << 31, (1 << 31) + (512 << 10))
    assert not cfg.is_local((1 << 31) - 1, 1 << 31)
    assert not cfg.is_local(1 << 31, (1 << 31) + (512 << 10) + 1)
    assert cfg.local_base + cfg.local_buf_bytes <= 1 << 32 and cfg.local_unreachable() is None


# -- presets -------------------------------------------------------------------------------------

def test_config_presets_sizes():
    assert set(PRESETS) >= {"tiny", "small", "default"}
    dims = {k: (PRESETS[k].array_rows, PRESETS[k].array_cols) for k in ("tiny", "small", "default")}
    assert dims == {"tiny": (4, 4), "small": (8, 8), "default": (16, 16)}
    d = PRESETS["default"]
    assert d == AccelConfig(dw_mesh=1, row_store=1)
    assert {k: c.dw_mesh for k, c in PRESETS.items()} == {"tiny": 0, "small": 0, "default": 1,
                                                         "fpga": 0}
    assert {k: c.row_store for k, c in PRESETS.items()} == {"tiny": 0, "small": 0,
                                                           "default": 1, "fpga": 0}
    assert (d.buf_a_bytes, d.buf_b_bytes, d.acc_buf_bytes) == (128 << 10, 128 << 10, 64 << 10)
    for cfg in PRESETS.values():
        assert isinstance(cfg, AccelConfig)
        assert (cfg.operand_bits, cfg.acc_bits) == (8, 32)


def test_config_fpga_preset_is_default_with_smaller_memories():
    """`fpga` keeps default's array, ports and latencies and shrinks the on-chip memories, to a
    total an ECP5-85k's block RAM can hold; its requantiser shares 4 lanes (12 MULT18X18D), and
    it keeps a 16 MiB device memory (24-bit addresses) where default has 2 GiB, and it has no
    depthwise mesh (an ECP5-85k cannot take its area, docs/architecture.md) and no row store
    (not yet placed on the ECP5)."""
    d, f = PRESETS["default"], PRESETS["fpga"]
    memories = ("buf_a_bytes", "buf_b_bytes", "acc_buf_bytes", "local_buf_bytes",
                "conv_offset_entries", "conv_run_entries", "conv_group_entries", "quant_entries")
    assert (d.dw_mesh, f.dw_mesh, d.row_store, f.row_store) == (1, 0, 1, 0)
    for field in FIELDS:
        if field not in (*memories, "requant_lanes", "dram_addr_bits", "dw_mesh", "row_store"):
            assert getattr(f, field) == getattr(d, field), field
    assert (d.post_lanes, f.post_lanes, f.post_row_cycles) == (16, 4, 4)
    assert (d.dram_addr_bits, f.dram_addr_bits) == (31, 24)
    assert all(getattr(f, m) < getattr(d, m) for m in memories)
    assert f.buf_a_bytes + f.buf_b_bytes + f.acc_buf_bytes + f.local_buf_bytes == 224 << 10


@pytest.mark.parametrize("text", ["", "{", '{"array_rows": }', "{'array_rows': 16}"])
def test_config_from_json_refuses_malformed_text(text):
    with pytest.raises(ConfigError, match="AccelConfig JSON is not valid JSON: "):
        AccelConfig.from_json(text)


def test_config_from_json_names_the_defaults_a_broken_rule_may_come_from():
    """A field left out of the JSON takes its default; when the result breaks a rule, the
    message says which fields were defaulted (the rule itself may name another one)."""
    values = json.loads(PRESETS["tiny"].to_json())
    del values["array_rows"]
    with pytest.raises(ConfigError, match=r"block_m must be .* \(fields not given take their "
                                          r"defaults: array_rows\)"):
        AccelConfig.from_dict(values)
    with pytest.raises(ConfigError, match=r"array_rows must be a power of two.*, not 12$"):
        AccelConfig.from_dict({**json.loads(PRESETS["tiny"].to_json()), "array_rows": 12})


def test_config_local_buffer_must_fit_below_a_small_dram():
    # the 512 KiB default is more than a 256 KiB DRAM's worth: the message says what to set
    with pytest.raises(ConfigError, match=re.escape(
            "AccelConfig.local_buf_bytes must be a power of two in [32, 262144], not 524288 "
            "(at most dram_bytes: with dram_addr_bits=18, set it to 262144 or less)")):
        AccelConfig(dram_addr_bits=18)
    assert AccelConfig(dram_addr_bits=18, local_buf_bytes=1 << 18).local_base == 1 << 18
