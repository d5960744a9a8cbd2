"""GemmDescriptor: word validation, check() rule by rule and its priority, tensor extents."""

import dataclasses

import pytest
from hypothesis import given, settings, strategies as st

from spec.config import PRESETS, AccelConfig
from spec.desc import DESC_FIELDS, MAX_DIM, ErrorCode, GemmDescriptor, check, tensor_extents

CFG = PRESETS["tiny"]   # 4x4 array, 2 KiB A/B halves, 1 KiB accumulator half, 4 MiB memory

#: A legal descriptor on the tiny preset; A [0, 0x80), B [0x1000, 0x1080), C [0x2000, 0x2100).
BASE = GemmDescriptor(
    m=8, k=16, n=8, partition_m=8, partition_n=8, partition_k=16, tile_m=4, tile_n=4,
    outer_m=1, need_splitk=0, acc_buffer_needed=8 * 8 * 4,
    a_addr=0, a_stride=8, b_addr=0x1000, b_stride=8, c_addr=0x2000, c_stride=32)


def codes(d, cfg=CFG):
    return [code for code, _ in check(d, cfg)]


def test_desc_base_is_legal():
    assert check(BASE, CFG) == []


# -- field validation ----------------------------------------------------------------------------

@pytest.mark.parametrize("name", DESC_FIELDS)
@pytest.mark.parametrize("bad", [-1, 1 << 32, 2.0, True, "1", None])
def test_desc_field_outside_u32_rejected(name, bad):
    with pytest.raises(ValueError, match=rf"GemmDescriptor\.{name} must be an int in \[0, 2\*\*32\)"):
        dataclasses.replace(BASE, **{name: bad})


@pytest.mark.parametrize("name", DESC_FIELDS)
def test_desc_field_u32_bounds_accepted(name):
    for value in (0, (1 << 32) - 1):
        assert getattr(dataclasses.replace(BASE, **{name: value}), name) == value


def test_desc_fields_order_matches_dataclass_and_abi():
    assert DESC_FIELDS == tuple(f.name for f in dataclasses.fields(GemmDescriptor))
    # the register order is firmware ABI: pin it
    assert DESC_FIELDS == (
        "m", "k", "n", "partition_m", "partition_n", "partition_k", "tile_m", "tile_n",
        "outer_m", "need_splitk", "acc_buffer_needed",
        "a_addr", "a_stride", "b_addr", "b_stride", "c_addr", "c_stride",
        "b_mode", "off_addr", "run_addr", "grp_addr", "run_count",
        "c_rows", "c_row_elems", "c_row_pitch")


def test_desc_words_follow_desc_fields():
    d = GemmDescriptor(**{name: i + 100 for i, name in enumerate(DESC_FIELDS)})
    assert d.words() == [i + 100 for i in range(len(DESC_FIELDS))]
    assert BASE.words() == [getattr(BASE, name) for name in DESC_FIELDS]


def test_desc_error_codes_are_stable():
    assert [(c.name, c.value) for c in ErrorCode] == [
        ("NONE", 0), ("BAD_SHAPE", 1), ("BAD_PARTITION_M", 2), ("BAD_PARTITION_N", 3),
        ("BAD_PARTITION_K", 4), ("BAD_TILE", 5), ("BUF_A_OVERFLOW", 6), ("BUF_B_OVERFLOW", 7),
        ("ACC_OVERFLOW", 8), ("BAD_ADDRESS", 9), ("BAD_FLAGS", 10),
        ("BAD_TABLE", 11), ("BAD_LAYER", 12), ("BAD_WINDOW", 13), ("BAD_QUANT", 14),
        ("BAD_IMAGE", 15), ("CONFIG_MISMATCH", 16), ("BAD_CRC", 17),
        ("BAD_WEIGHTS", 18)]


# -- check(): one rule broken at a time ----------------------------------------------------------

#: (id, overrides of BASE, the one code check() must report)
VIOLATIONS = [
    ("m0", dict(m=0), ErrorCode.BAD_SHAPE),
    ("k0", dict(k=0), ErrorCode.BAD_SHAPE),
    ("n0", dict(n=0), ErrorCode.BAD_SHAPE),
    ("m_huge", dict(m=MAX_DIM + 1), ErrorCode.BAD_SHAPE),
    ("n_huge", dict(n=MAX_DIM + 1), ErrorCode.BAD_SHAPE),
    ("pm0", dict(partition_m=0), ErrorCode.BAD_PARTITION_M),
    ("pm_not_mult", dict(partition_m=6), ErrorCode.BAD_PARTITION_M),
    ("pn0", dict(partition_n=0), ErrorCode.BAD_PARTITION_N),
    ("pn_not_mult", dict(partition_n=10, acc_buffer_needed=8 * 10 * 4), ErrorCode.BAD_PARTITION_N),
    ("pk0", dict(partition_k=0), ErrorCode.BAD_PARTITION_K),
    ("pk_lt_k_no_splitk", dict(partition_k=8), ErrorCode.BAD_PARTITION_K),
    ("tm0", dict(tile_m=0), ErrorCode.BAD_TILE),
    ("tm_not_mult", dict(tile_m=6), ErrorCode.BAD_TILE),
    ("tm_gt_partition", dict(tile_m=12), ErrorCode.BAD_TILE),
    ("tn0", dict(tile_n=0), ErrorCode.BAD_TILE),
    ("tn_not_mult", dict(tile_n=5), ErrorCode.BAD_TILE),
    ("tn_gt_partition", dict(tile_n=12), ErrorCode.BAD_TILE),
    # 8 * 300 = 2400 > 2048 for A only (B 4 * 300 = 1200)
    ("buf_a", dict(partition_n=4, partition_k=300, acc_buffer_needed=128), ErrorCode.BUF_A_OVERFLOW),
    ("buf_b", dict(partition_m=4, partition_k=300, acc_buffer_needed=128), ErrorCode.BUF_B_OVERFLOW),
    ("acc_needed_too_small", dict(acc_buffer_needed=8 * 8 * 4 - 1), ErrorCode.ACC_OVERFLOW),
    ("acc_needed_over_half", dict(acc_buffer_needed=1024 + 1), ErrorCode.ACC_OVERFLOW),
    # 16 x 16 x 4 = 1024 fits the half exactly (legal); 16 x 20 does not
    ("acc_partition_over_half", dict(m=16, n=20, partition_m=16, partition_n=20, partition_k=16,
                                     acc_buffer_needed=16 * 20 * 4, c_stride=80),
     ErrorCode.ACC_OVERFLOW),
    ("outer_m_2", dict(outer_m=2), ErrorCode.BAD_FLAGS),
    ("b_mode_2", dict(b_mode=2), ErrorCode.BAD_FLAGS),
    ("conv_no_runs", dict(b_mode=1, off_addr=0x3000, run_addr=0x3100, grp_addr=0x3200,
                          run_count=0), ErrorCode.BAD_TABLE),
    ("conv_too_many_offsets", dict(b_mode=1, k=2000, partition_k=16, need_splitk=1,
                                   off_addr=0x3000, run_addr=0x5000, grp_addr=0x5100,
                                   run_count=2, a_addr=0x10000, b_addr=0x20000,
                                   b_stride=64, c_addr=0x30000), ErrorCode.BAD_TABLE),
    ("conv_table_overlaps_c", dict(b_mode=1, off_addr=0x2000, run_addr=0x3100, grp_addr=0x3200,
                                   run_count=2), ErrorCode.BAD_ADDRESS),
    ("need_splitk_2", dict(need_splitk=2), ErrorCode.BAD_FLAGS),
    ("a_past_memory", dict(a_addr=(4 << 20) - 127), ErrorCode.BAD_ADDRESS),
    ("b_past_memory", dict(b_addr=(4 << 20) - 127), ErrorCode.BAD_ADDRESS),
    ("c_past_memory", dict(c_addr=(4 << 20) - 0xff), ErrorCode.BAD_ADDRESS),
    ("c_rows_overlap", dict(c_stride=31), ErrorCode.BAD_ADDRESS),
    ("c_overlaps_a", dict(c_addr=0x7f), ErrorCode.BAD_ADDRESS),
    ("c_overlaps_b", dict(c_addr=0x1000 - 0xff), ErrorCode.BAD_ADDRESS),
    ("c_inside_b", dict(b_stride=0x1000), ErrorCode.BAD_ADDRESS),
]


@pytest.mark.parametrize("over, code", [v[1:] for v in VIOLATIONS], ids=[v[0] for v in VIOLATIONS])
def test_desc_check_reports_each_rule(over, code):
    errs = check(dataclasses.replace(BASE, **over), CFG)
    assert [c for c, _ in errs] == [code]
    assert all(isinstance(msg, str) and msg for _, msg in errs)


def test_desc_check_covers_every_error_code():
    # the descriptor's own codes; the record and image codes: tests/hw/test_record.py
    assert {v[2] for v in VIOLATIONS} == {c for c in ErrorCode if 1 <= c <= ErrorCode.BAD_TABLE}


#: Legal neighbours of the violations: boundary values that must pass.
LEGAL = [
    ("splitk", dict(partition_k=8, need_splitk=1)),
    ("splitk_flag_without_split", dict(need_splitk=1)),
    ("partition_k_gt_k", dict(partition_k=64)),
    ("partition_gt_shape", dict(partition_m=16, partition_n=16, acc_buffer_needed=1024)),
    ("tile_eq_partition", dict(tile_m=8, tile_n=8)),
    ("buf_a_exactly_full", dict(partition_n=4, partition_k=256, acc_buffer_needed=128)),
    ("acc_exactly_half", dict(acc_buffer_needed=1024)),
    ("outer_n", dict(outer_m=0)),
    ("a_at_memory_end", dict(a_addr=(4 << 20) - 128)),
    ("c_at_memory_end", dict(c_addr=(4 << 20) - 0x100)),
    ("c_adjacent_after_a", dict(c_addr=0x80)),
    ("c_adjacent_before_b", dict(c_addr=0x1000 - 0x100)),
    ("c_row_padding", dict(c_stride=64)),
    ("a_b_overlap_reads", dict(b_addr=0)),
]


@pytest.mark.parametrize("over", [v[1] for v in LEGAL], ids=[v[0] for v in LEGAL])
def test_desc_check_accepts_boundary_cases(over):
    assert check(dataclasses.replace(BASE, **over), CFG) == []


def test_desc_check_c_fills_memory_exactly():
    # A [0, m), B [m, m + 4), C of m rows of 16 bytes ends exactly at the end of memory: legal;
    # one more row of C is not
    m = 0x3C000
    d = dataclasses.replace(BASE, m=m, n=4, partition_n=4, acc_buffer_needed=128, a_stride=0,
                            b_addr=m, b_stride=0, c_addr=CFG.dram_bytes - 16 * m, c_stride=16)
    assert tensor_extents(d, CFG)["c"] == (CFG.dram_bytes - 16 * m, CFG.dram_bytes)
    assert check(d, CFG) == []
    assert codes(dataclasses.replace(d, m=m + 1)) == [ErrorCode.BAD_ADDRESS]


def test_desc_check_accepts_max_dims():
    cfg = AccelConfig(dram_addr_bits=32)
    # m = k = MAX_DIM, n = 1: A k-major rows overlap (stride 0), C is 4 * MAX_DIM bytes
    d = GemmDescriptor(
        m=MAX_DIM, k=MAX_DIM, n=1, partition_m=16, partition_n=16, partition_k=16, tile_m=16,
        tile_n=16, outer_m=1, need_splitk=1, acc_buffer_needed=1024,
        a_addr=0, a_stride=0, b_addr=1 << 24, b_stride=0, c_addr=1 << 25, c_stride=4)
    assert check(d, cfg) == []
    assert codes(dataclasses.replace(d, m=MAX_DIM + 1), cfg) == [ErrorCode.BAD_SHAPE]
    assert codes(dataclasses.replace(d, k=MAX_DIM + 1), cfg) == [ErrorCode.BAD_SHAPE]
    assert codes(dataclasses.replace(d, partition_k=MAX_DIM + 1), cfg)[0] == \
        ErrorCode.BAD_PARTITION_K
    assert codes(dataclasses.replace(d, partition_m=1 << 24), cfg)[0] == \
        ErrorCode.BAD_PARTITION_M


@pytest.mark.parametrize("field", ["need_splitk", "outer_m"])
@pytest.mark.parametrize("value", [2, 3, 1 << 31])
def test_desc_check_refuses_flags_outside_0_1(field, value):
    # The RTL compares the whole word (BAD_FLAGS), so no flag value means different things to
    # the hardware and to spec.schedule.
    d = dataclasses.replace(BASE, **{field: value})
    assert codes(d)[0] == ErrorCode.BAD_FLAGS


# -- priority ------------------------------------------------------------------------------------

def test_desc_check_reports_in_priority_order():
    # breaks every rule before BAD_ADDRESS at once
    d = dataclasses.replace(BASE, m=0, partition_m=3, partition_n=3, k=2000, partition_k=1000,
                            tile_m=0, tile_n=0, acc_buffer_needed=0)
    got = codes(d)
    assert got[0] == ErrorCode.BAD_SHAPE
    assert got == sorted(got)
    assert set(got) == {c for c in ErrorCode if 1 <= c < ErrorCode.BAD_ADDRESS}


def test_desc_check_address_rules_only_after_the_others():
    # C overlaps A, but a shape error is what the RTL reports, and the address rule is not run
    d = dataclasses.replace(BASE, c_addr=0, m=0)
    assert codes(d) == [ErrorCode.BAD_SHAPE]
    d = dataclasses.replace(BASE, c_addr=0, acc_buffer_needed=0)
    assert codes(d) == [ErrorCode.ACC_OVERFLOW]


@pytest.mark.parametrize("first, second", [
    (dict(m=0), dict(partition_m=6)),
    (dict(partition_m=6), dict(partition_n=6, acc_buffer_needed=8 * 6 * 4)),
    (dict(partition_n=6, acc_buffer_needed=8 * 6 * 4), dict(partition_k=0)),
    (dict(partition_k=0), dict(tile_m=0)),
    (dict(tile_m=0), dict(partition_n=4, partition_k=300, acc_buffer_needed=128)),
    (dict(partition_k=300), dict(acc_buffer_needed=0)),
    (dict(acc_buffer_needed=0), dict(c_stride=1)),
])
def test_desc_check_first_code_follows_priority(first, second):
    a = codes(dataclasses.replace(BASE, **first))[0]
    b = codes(dataclasses.replace(BASE, **second))[0]
    assert a < b
    both = codes(dataclasses.replace(BASE, **second, **{k: v for k, v in first.items()
                                                         if k not in second}))
    assert both[0] == a


small = st.integers(0, 40)


@settings(max_examples=300, deadline=None)
@given(st.fixed_dictionaries({
    "m": small, "k": small, "n": small, "partition_m": small, "partition_n": small,
    "partition_k": small, "tile_m": small, "tile_n": small, "outer_m": st.integers(0, 1),
    "need_splitk": st.integers(0, 1), "acc_buffer_needed": st.integers(0, 2048),
    "a_addr": st.integers(0, 1 << 23), "a_stride": st.integers(0, 64),
    "b_addr": st.integers(0, 1 << 23), "b_stride": st.integers(0, 64),
    "c_addr": st.integers(0, 1 << 23), "c_stride": st.integers(0, 256)}))
def test_desc_check_codes_are_sorted_and_address_last(fields):
    got = codes(GemmDescriptor(**fields))
    assert got == sorted(got)
    assert ErrorCode.NONE not in got
    if ErrorCode.BAD_ADDRESS in got:
        assert set(got) == {ErrorCode.BAD_ADDRESS}


# -- tensor extents ------------------------------------------------------------------------------

def test_desc_tensor_extents_of_base():
    assert tensor_extents(BASE, CFG) == {"a": (0, 0x80), "b": (0x1000, 0x1080),
                                         "c": (0x2000, 0x2100)}


def test_desc_tensor_extents_round_reads_up_to_beats():
    # m=6, n=5 on a 4x4 array: A and B reads cover 8 bytes per row, C beats 8 int32 per row
    d = dataclasses.replace(BASE, m=6, n=5, k=3, a_addr=0x10, a_stride=100, b_addr=0x400,
                            b_stride=9, c_addr=0x800, c_stride=24)
    assert tensor_extents(d, CFG) == {
        "a": (0x10, 0x10 + 2 * 100 + 8),
        "b": (0x400, 0x400 + 2 * 9 + 8),
        "c": (0x800, 0x800 + 5 * 24 + 32),
    }


def test_desc_tensor_extents_exact_multiples_not_padded():
    d = dataclasses.replace(BASE, m=12, n=4, k=1)
    ext = tensor_extents(d, PRESETS["tiny"])
    assert ext["a"] == (0, 12) and ext["b"] == (0x1000, 0x1004)
    assert ext["c"] == (0x2000, 0x2000 + 11 * 32 + 16)
    # the same descriptor on the 8x8 preset reads whole 8-wide beats
    ext = tensor_extents(d, PRESETS["small"])
    assert ext["a"] == (0, 16) and ext["b"] == (0x1000, 0x1008)


# -- the row store (row_store=1 configs) ---------------------------------------------------------

ROWS_CFG = dataclasses.replace(CFG, row_store=1)
#: BASE with C as 2 rows of 3 pixels (n = 2 partitions of 4), rows 16 bytes apart, channels 32
ROWS = dataclasses.replace(BASE, partition_n=4, tile_n=4, acc_buffer_needed=8 * 4 * 4,
                           c_rows=2, c_row_elems=3, c_row_pitch=16)


def test_desc_row_store_is_legal_and_its_extent_is_its_rows():
    assert check(ROWS, ROWS_CFG) == []
    # 7 channels at 32, then the last row (16 on) of 3 elements rounded to a 4-lane beat
    assert tensor_extents(ROWS, ROWS_CFG)["c"] == (0x2000, 0x2000 + 7 * 32 + 16 + 4 * 4)
    assert tensor_extents(ROWS, ROWS_CFG, out_bytes=1)["c"] == (0x2000, 0x2000 + 7 * 32 + 16 + 4)
    # exactly at the bounds: rows of 12 bytes back to back, channels right after the last row
    tight = dataclasses.replace(ROWS, c_row_pitch=12, c_stride=24)
    assert check(tight, ROWS_CFG) == []
    assert check(dataclasses.replace(ROWS, c_row_elems=4), ROWS_CFG) == []
    assert check(dataclasses.replace(ROWS, partition_n=8, tile_n=8, n=16, acc_buffer_needed=256,
                                     c_row_elems=5, c_row_pitch=20, c_stride=64), ROWS_CFG) == []


@pytest.mark.parametrize("over, cfg, code, text", [
    (dict(), CFG, ErrorCode.BAD_FLAGS, "the row store needs a config with row_store=1"),
    (dict(c_rows=0), ROWS_CFG, ErrorCode.BAD_FLAGS, "must be 0 when c_rows=0"),
    (dict(c_rows=3), ROWS_CFG, ErrorCode.BAD_PARTITION_N, "n = c_rows*partition_n (8 != 3*4)"),
    (dict(c_row_elems=0), ROWS_CFG, ErrorCode.BAD_PARTITION_N, "c_row_elems=0 in [max(1, "),
    (dict(c_row_elems=5), ROWS_CFG, ErrorCode.BAD_PARTITION_N, "c_row_elems=5 in [max(1, "),
    # a row must end in its partition's last lane group: 4 pixels in 8 lanes leave a group
    # the store would still write (with no strobe)
    (dict(partition_n=8, tile_n=8, n=16, acc_buffer_needed=256, c_row_elems=4, c_stride=64),
     ROWS_CFG, ErrorCode.BAD_PARTITION_N, "in its last lane group"),
    (dict(c_row_pitch=11), ROWS_CFG, ErrorCode.BAD_ADDRESS, "c_row_pitch=11 < 4*c_row_elems=12"),
    (dict(c_stride=27), ROWS_CFG, ErrorCode.BAD_ADDRESS,
     "c_stride=27 < (c_rows-1)*c_row_pitch + 4*c_row_elems=28"),
    (dict(c_addr=ROWS_CFG.dram_bytes), ROWS_CFG, ErrorCode.BAD_ADDRESS,
     "the row store writes memory only"),
])
def test_desc_row_store_rules(over, cfg, code, text):
    errs = check(dataclasses.replace(ROWS, **over), cfg)
    assert errs and errs[0][0] == code and any(text in msg for _, msg in errs), errs


def test_desc_depthwise_descriptors_use_no_row_store_field():
    errs = check(dataclasses.replace(ROWS, b_mode=2), dataclasses.replace(ROWS_CFG, dw_mesh=1))
    assert any(code == ErrorCode.BAD_FLAGS and "c_rows=2, c_row_elems=3, c_row_pitch=16" in msg
               for code, msg in errs), errs
