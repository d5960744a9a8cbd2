"""Lookup rules of seed 001: exact / multiple, initial before boundary, estimates, auto-padding."""

import pytest

from spec.desc import check
from planner import plan_gemm
from planner.shapes import GemmShape
from planner.tiling import to_descriptor
from planner.tunedb import TuneDB, estimate, lookup
from planner.tunedb.lookup import match, tile_count

from .conftest import CFG, record


def test_lookup_exact_initial_wins_over_everything():
    recs = [record("boundary", (64, 64, 64), 32, 32, 64, 5000),
            record("initial", (128, 64, 64), 32, 32, 64, 9000),
            record("boundary", (128, 64, 64), 64, 64, 64, 8000)]
    res = lookup(recs, GemmShape(128, 64, 64), CFG)
    assert res.rule == "exact-initial" and res.record is recs[1]
    assert res.estimated_cycles == 9000 and res.padding == "none"


def test_lookup_exact_boundary_before_multiple_initial():
    recs = [record("initial", (64, 64, 64), 32, 32, 64, 4000),
            record("boundary", (128, 64, 64), 32, 32, 64, 9000)]
    res = lookup(recs, GemmShape(128, 64, 64), CFG)
    # 128x64x64 is also a multiple of the initial 64x64x64 (estimate 8000 < 9000): order wins
    assert res.rule == "exact-boundary" and res.estimated_cycles == 9000


def test_lookup_multiple_initial_before_multiple_boundary():
    recs = [record("initial", (64, 64, 64), 32, 32, 64, 5000),
            record("boundary", (32, 32, 32), 32, 32, 32, 100)]
    res = lookup(recs, GemmShape(128, 64, 128), CFG)
    assert res.rule == "multiple-initial" and res.estimated_cycles == 4 * 5000


def test_lookup_multiple_boundary_is_the_last_rule():
    recs = [record("initial", (64, 64, 64), 32, 32, 64, 5000),
            record("boundary", (32, 32, 32), 32, 32, 32, 800)]
    res = lookup(recs, GemmShape(96, 32, 32), CFG, auto_pad=False)
    assert res.rule == "multiple-boundary" and res.estimated_cycles == 3 * 800
    assert res.run_shape == (96, 32, 32)


def test_lookup_several_matches_pick_the_lowest_estimate():
    # both are divisors of 256x64x256; the larger reference amortises more (lower estimate)
    small = record("boundary", (64, 64, 64), 32, 32, 64, 4400)      # x16 -> 70400
    large = record("boundary", (128, 64, 128), 32, 32, 64, 17000)   # x4  -> 68000
    rule, scored = match([small, large], (256, 64, 256))
    assert rule == "multiple-boundary" and [r for _, r in scored] == [large, small]
    res = lookup([small, large], GemmShape(256, 64, 256), CFG)
    assert res.record is large and res.estimated_cycles == 68000 and res.matches == 2


def test_lookup_multiple_needs_every_dim_a_multiple():
    recs = [record("initial", (64, 64, 64), 32, 32, 64, 5000)]
    assert match(recs, (128, 96, 64)) is None            # k = 1.5 x 64
    assert match(recs, (128, 128, 64))[0] == "multiple-initial"


def test_estimate_is_the_tile_count_ratio_with_ceil_per_dim():
    r = record("boundary", (64, 64, 64), 32, 32, 64, 1000)
    assert tile_count((64, 64, 64), (32, 64, 32)) == 4
    assert estimate(r, (128, 128, 64)) == 1000 * (4 * 2 * 2) // 4
    # ceil per dim: 70 rows need 3 partitions of 32
    assert estimate(r, (70, 64, 64)) == round(1000 * 3 * 2 / 4)


def test_lookup_auto_pads_to_blocks_to_find_a_match():
    recs = [record("initial", (64, 64, 64), 32, 32, 64, 5000)]
    res = lookup(recs, GemmShape(124, 64, 61), CFG)   # blocks: 128 x 64 x 64
    assert res.padding == "blocks" and res.run_shape == (128, 64, 64)
    assert res.rule == "multiple-initial" and res.estimated_cycles == 10000
    assert lookup(recs, GemmShape(124, 64, 61), CFG, auto_pad=False).rule == "analytic"


def test_lookup_auto_pads_to_a_record_multiple_within_max_pad():
    recs = [record("boundary", (64, 64, 64), 32, 32, 64, 5000)]
    res = lookup(recs, GemmShape(120, 60, 128), CFG)     # -> 128 x 64 x 128
    assert res.padding == "record" and res.run_shape == (128, 64, 128)
    assert res.rule == "multiple-boundary" and res.estimated_cycles == 20000
    # 70 rows would pad to 128: 83% more work than asked, over max_pad
    assert lookup(recs, GemmShape(70, 64, 64), CFG).rule == "analytic"
    assert lookup(recs, GemmShape(70, 64, 64), CFG, max_pad=1.0).padding == "record"


def test_lookup_falls_back_to_the_analytic_planner():
    res = lookup([], GemmShape(100, 70, 30), CFG)
    best = plan_gemm(GemmShape(100, 70, 30), CFG, "best")
    assert res.rule == "analytic" and res.record is None
    assert res.tiling == best.key and res.estimated_cycles == best.predicted_cycles


@pytest.mark.parametrize("shape", [(128, 192, 64), (96, 32, 32), (124, 64, 61)])
def test_lookup_run_tiling_is_a_legal_descriptor(shape):
    recs = [record("initial", (64, 64, 64), 32, 32, 64, 5000),
            record("boundary", (32, 32, 32), 32, 32, 32, 800)]
    res = lookup(recs, GemmShape(*shape), CFG)
    t = res.tiling_dict
    assert t["need_splitk"] == int(t["partition_k"] < res.run_shape[1])
    from planner.tiling import make_plan
    plan = make_plan(GemmShape(*res.run_shape), CFG, t["partition_m"], t["partition_n"],
                     t["partition_k"], t["outer_m"], "x", tiles=(t["tile_m"], t["tile_n"]))
    desc = to_descriptor(plan, plan.shape, CFG, 0, 1 << 20, 1 << 21)
    assert check(desc, CFG) == []


def test_plan_gemm_strategy_db_uses_the_database(tmp_path):
    path = tmp_path / "t.tunedb"
    with TuneDB.open(path, CFG) as db:
        db.put_records([record("initial", (64, 64, 64), 32, 32, 64, 5000)])
    plan = plan_gemm(GemmShape(128, 64, 60), CFG, "db", db=path)
    assert plan.strategy == "db:multiple-initial"
    assert (plan.partition_m, plan.partition_n, plan.partition_k) == (32, 32, 64)
    assert (plan.m, plan.k, plan.n) == (128, 64, 60)
    assert plan_gemm(GemmShape(8, 3, 8), CFG, "db", db=path).strategy == "db:analytic"
    with pytest.raises(ValueError, match="needs a tuning database"):
        plan_gemm(GemmShape(8, 3, 8), CFG, "db")
