"""Seed 000 branches with hand-computed expectations, legalisation and inner tiles."""

import dataclasses

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from spec.config import PRESETS, AccelConfig
from spec.desc import check
from planner import GemmShape, seed_decision, seed_plan, to_descriptor
from planner.tiling import _splitk_loads, acc_bytes_for, inner_tiles
from planner.tiling import TILING_FIELDS
from tb.placement import descriptor, place
from tests.spec.test_config import configs

# default: R = C = 16, buffer halves 64 KiB, accumulator half 32 KiB (8192 int32), ports 16 B/cycle,
# hw_power 256 MACs/cycle, d_s = 1.
CFG = PRESETS["default"]


def test_tiling_fits_m_lt_n_keeps_a_resident_outer_m():
    d = seed_decision(GemmShape(64, 256, 1024), CFG)
    # size_a = 16384 <= 65536: partition_m = m, partition_n = min(65536/256, 1024) = 256, flag 1
    assert (d.branch, d.partition_m, d.partition_n, d.partition_k, d.outer_m) == \
        ("fits", 64, 256, 256, 1)
    assert (d.loads_a, d.loads_b, d.need_splitk, d.acc_buffer_needed) == (1, 1, 0, 0)
    assert d.util == 1.0  # min(1, 1024*16/256, 64*16/256)


def test_tiling_fits_m_ge_n_keeps_b_resident_outer_n():
    d = seed_decision(GemmShape(1024, 256, 64), CFG)
    assert (d.branch, d.partition_m, d.partition_n, d.outer_m) == ("fits", 256, 64, 0)


def test_tiling_fits_utilisation_is_bandwidth_bound():
    d = seed_decision(GemmShape(1024, 256, 8), CFG)
    # gemm = 1024*256*8/256 = 8192 cycles; one load of A = 262144/16 = 16384 -> 0.5 = n*bw_a/hw
    assert d.util == pytest.approx(8 * 16 / 256)


def test_tiling_fits_keeps_the_operand_that_fits_when_seed_choice_overflows():
    cfg = dataclasses.replace(CFG, buf_b_bytes=1 << 20)  # bs_b = 512 KiB
    d = seed_decision(GemmShape(512, 256, 1024), cfg)
    # m < n but size_a = 131072 > 65536: the seed's partition_m = m would overflow; B resident.
    assert (d.branch, d.partition_m, d.partition_n, d.outer_m) == ("fits", 256, 1024, 0)


def test_tiling_fits_legalised_shrinks_streamed_dim_to_accumulator():
    p = seed_plan(GemmShape(64, 256, 1024), CFG)
    # 64 x 256 int32 = 64 KiB > 32 KiB: n (streamed, inner loop) shrinks to 8192 // 64 = 128
    assert (p.partition_m, p.partition_n, p.partition_k, p.outer_m, p.need_splitk) == \
        (64, 128, 256, 1, 0)
    assert p.acc_buffer_needed == 32768
    assert (p.loads_a, p.loads_b) == (1, 1)


def test_tiling_nosplit_equal_bandwidth_reloads_a():
    d = seed_decision(GemmShape(1024, 1024, 128), CFG)
    # gemm = 524288; one load of A 65536, of B 8192; pm = pn = 65536/1024 = 64;
    # order 1: max(524288, 65536, 8192*16) ; order 0: max(524288, 65536*2, 8192) -> util 1 both.
    # split-K at 32 KiB: P = 1024*128*4/32768 = 16; ra/rb = lb/la -> ra = 2, rb = 8; util 1.
    # util_nosplit >= util_splitk -> no split; bw_a >= bw_b -> flag 0, A reloaded n/pn = 2 times.
    assert (d.branch, d.partition_m, d.partition_n, d.partition_k) == ("nosplit", 64, 64, 1024)
    assert (d.outer_m, d.loads_a, d.loads_b, d.util) == (0, 2, 1, 1.0)
    p = seed_plan(GemmShape(1024, 1024, 128), CFG)
    assert (p.partition_m, p.partition_n, p.partition_k, p.outer_m) == (64, 64, 1024, 0)
    assert (p.loads_a, p.loads_b) == (2, 1)


def test_tiling_nosplit_lower_bandwidth_operand_is_resident():
    cfg = dataclasses.replace(CFG, a_port_bytes_per_cycle=8)
    d = seed_decision(GemmShape(1024, 1024, 128), cfg)
    # one load of A = 131072 cycles; order 1: max(524288, 131072, 8192*16) = gemm -> util 1
    assert (d.branch, d.outer_m, d.loads_a, d.loads_b) == ("nosplit", 1, 1, 16)


def test_tiling_nosplit_uses_all_three_terms_not_formula_8():
    # Order 1 (B reloaded 16x) is load-bound only through the non-reloaded A term.
    cfg = dataclasses.replace(CFG, a_port_bytes_per_cycle=1)
    d = seed_decision(GemmShape(1024, 1024, 128), cfg)
    # one load of A = 1048576 cycles > gemm = 524288. Order 1: max(gemm, 1048576, 8192*16);
    # order 0: max(gemm, 1048576*2, 8192). Formula (8) would say gemm/max(gemm, min(2097152,
    # 131072)) = 1; with all three terms it is 0.5.
    assert d.util_nosplit == 0.5
    assert (d.branch, d.outer_m, d.util) == ("nosplit", 1, 0.5)


def test_tiling_splitk_halves_accumulator_to_smallest_equal_utilisation():
    d = seed_decision(GemmShape(1024, 8192, 1024), CFG)
    # no split: pm = 65536/8192 = 8 -> B reloaded 128x -> util 0.5. Split-K keeps util 1 down to
    # acc = 1024 B (one 16x16 int32 array tile, the floor): P = 4096 -> ra = rb = 64.
    assert (d.branch, d.need_splitk, d.util_nosplit, d.util) == ("splitk", 1, 0.5, 1.0)
    assert (d.acc_buffer_needed, d.loads_a, d.loads_b) == (1024, 64, 64)
    assert (d.partition_m, d.partition_n, d.partition_k) == (16, 16, 4096)
    p = seed_plan(GemmShape(1024, 8192, 1024), CFG)
    assert (p.partition_m, p.partition_n, p.partition_k, p.need_splitk) == (16, 16, 4096, 1)
    assert p.acc_buffer_needed == 1024


def test_tiling_splitk_balances_load_cycles():
    # la = 4 (A four times slower), lb = 1, P = 64: ra/rb = lb/la -> ra = 4, rb = 16, equal loads
    assert _splitk_loads(64, 64, 64 * 64 * 4 / 64, 4.0, 1.0, 4) == (4, 16)


@pytest.mark.parametrize("la,lb,p", [(1.0, 1.0, 7), (3.0, 1.0, 100), (1.0, 50.0, 33),
                                     (1.0, 1000.0, 5), (2.0, 2.0, 1)])
def test_tiling_splitk_loads_positive_cover_and_ratio(la, lb, p):
    ra, rb = _splitk_loads(p, 1, 4 / 1.0, la, lb, 4)  # m*n*4/acc = p
    assert ra >= 1 and rb >= 1 and ra * rb >= p
    ratio = la * ra / (lb * rb)
    assert 0.5 <= ratio <= 2 or ra == 1 or rb == 1


def test_tiling_inner_tiles_from_sync_granularity():
    # sync = 4096 / (16*16) = 16 blocks -> 8 blocks per tile; partition 64x64 = 4x4 blocks
    assert inner_tiles(64, 64, CFG) == (64, 32)
    assert inner_tiles(256, 32, CFG) == (128, 16)
    assert inner_tiles(16, 16, CFG) == (16, 16)


def test_tiling_acc_bytes_is_power_of_two_fraction():
    assert acc_bytes_for(64, 64, CFG) == 16384
    assert acc_bytes_for(16, 16, CFG) == 1024
    assert acc_bytes_for(16, 16, CFG, at_least=5000) == 8192


def test_tiling_descriptor_default_strides_and_check():
    shape = GemmShape(100, 70, 50)
    p = seed_plan(shape, CFG)
    d = to_descriptor(p, shape, CFG, 0, 1 << 16, 1 << 17)
    assert (d.a_stride, d.b_stride, d.c_stride) == (100, 50, 200)
    assert check(d, CFG) == []


def test_tiling_descriptor_refuses_other_shape_and_bad_address():
    p = seed_plan(GemmShape(100, 70, 50), CFG)
    with pytest.raises(ValueError, match="plan is for shape"):
        to_descriptor(p, GemmShape(100, 70, 51), CFG, 0, 1 << 16, 1 << 17)
    with pytest.raises(ValueError, match="overlaps"):
        to_descriptor(p, GemmShape(100, 70, 50), CFG, 0, 1 << 16, 0)


def test_tiling_fields_are_the_plans_and_the_descriptors():
    """TILING_FIELDS is derived from the descriptor (typed once): every one is a TilingPlan
    field, and they are exactly the descriptor's decided fields, in order."""
    import dataclasses

    from planner.tiling import TILING_FIELDS, TilingPlan

    assert TILING_FIELDS == ("partition_m", "partition_n", "partition_k", "tile_m", "tile_n",
                             "outer_m", "need_splitk", "acc_buffer_needed")
    plan_fields = {f.name for f in dataclasses.fields(TilingPlan)}
    assert set(TILING_FIELDS) <= plan_fields


NARROW = [  # an operand half smaller than the partition the seed rounds to (config fuzz)
    AccelConfig(array_rows=4, array_cols=16, buf_a_bytes=4096, buf_b_bytes=64,
                acc_buf_bytes=8192, a_port_bytes_per_cycle=1, b_port_bytes_per_cycle=2,
                block_m=4, block_n=16, dram_addr_bits=24, conv_offset_entries=1024,
                conv_run_entries=1024, conv_group_entries=1024, quant_entries=16,
                local_buf_bytes=4096),
    AccelConfig(buf_a_bytes=64, block_m=32, a_port_bytes_per_cycle=8, b_port_bytes_per_cycle=12),
]


@pytest.mark.parametrize("cfg", NARROW)
@pytest.mark.parametrize("strategy", ["seed", "best", "greedy", "search"])
def test_tiling_partitions_fit_the_operand_halves(cfg, strategy):
    """legalise shrank partitions to the accumulator only: here buffer B's 32-byte half
    against a partition_n rounded to 64, so cap_k was 0, hidden by max(1, ...), and the
    descriptor check refused the seed's and best's plans."""
    from planner import plan_gemm

    shape = GemmShape(37, 195, 55)
    plan = plan_gemm(shape, cfg, strategy)
    to_descriptor(plan, shape, cfg, 0, 1 << 16, 1 << 17)      # raises on a broken rule


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cfg=configs(), m=st.integers(1, 300), k=st.integers(1, 300), n=st.integers(1, 300))
def test_tiling_every_legal_config_gets_legal_plans(cfg, m, k, n):
    """Any configuration AccelConfig accepts, any shape that fits its memory: the planner's
    shape strategies give descriptors spec.desc.check accepts."""
    from planner import plan_gemm

    shape = GemmShape(m, k, n)
    where = place(m, k, n, cfg)             # A, B, C one after another, beat-aligned
    assume(where.end <= cfg.dram_bytes)
    for strategy in ("seed", "best", "greedy"):
        tiling = {f: getattr(plan_gemm(shape, cfg, strategy), f) for f in TILING_FIELDS}
        descriptor(m, k, n, tiling, where, cfg)                     # raises on a broken rule
