"""Cycle model: grouped predict equals the step walk; counters add up; hand-computed one-step."""

import dataclasses

from hypothesis import given, settings, strategies as st

from spec.config import PRESETS
from planner import (COUNTER_FIELDS, CycleBreakdown, GemmShape, ModelConstants, predict,
                     predict_reference)
from planner.cost import lower_bound_cycles
from planner.tiling import make_plan

TINY = PRESETS["tiny"]


def _plan(cfg, m, k, n, pm, pn, pk, outer):
    return make_plan(GemmShape(m, k, n), cfg, pm, pn, pk, outer, "test")


def test_cost_counter_names_match_rtl():
    assert COUNTER_FIELDS == ("total_cycles", "mac_active_cycles", "stall_drain_cycles",
                              "stall_load_a_cycles", "stall_load_b_cycles",
                              "stall_store_cycles", "stall_ctrl_cycles", "rd_a_bytes",
                              "rd_b_bytes", "wr_c_bytes")


def test_cost_single_step_by_hand():
    cfg = PRESETS["default"]  # R = C = 16, ports 16/16/64 B per cycle, latency 32
    k = ModelConstants()
    bd = predict(_plan(cfg, 16, 32, 16, 16, 16, 32, 1), cfg)
    # prologue: A 32 beats of 16 B at 16 B/cycle = 32 cycles + 32 latency; B the same
    load = 31 + 1 + 32
    # the array drains after the last beat while the sequencer hands over to the epilogue (2
    # control cycles); the store waits for the rest of the drain
    drain = 2 * 16 + 16 + k.drain_extra_cycles - k.step_ctrl_cycles
    store = (15 * 64 + 63) // 64 + 1 + 32 + k.store_extra_cycles   # 16 rows of 64 B at 64 B/c
    assert bd.mac_active_cycles == 32
    assert bd.stall_drain_cycles == drain
    assert bd.stall_load_a_cycles == load and bd.stall_load_b_cycles == 0
    assert bd.stall_store_cycles == store
    assert bd.stall_ctrl_cycles == k.start_cycles + k.step_ctrl_cycles + k.finish_cycles
    assert bd.total_cycles == 32 + drain + load + store + bd.stall_ctrl_cycles
    assert (bd.rd_a_bytes, bd.rd_b_bytes, bd.wr_c_bytes) == (512, 512, 1024)


def test_cost_padding_beats_count_as_drain():
    cfg = PRESETS["default"]
    bd = predict(_plan(cfg, 16, 5, 16, 16, 16, 5, 1), cfg)
    assert bd.mac_active_cycles == 5
    k = ModelConstants()
    assert bd.stall_drain_cycles == 11 + 2 * 16 + 16 + k.drain_extra_cycles - k.step_ctrl_cycles


@st.composite
def tilings(draw):
    cfg = draw(st.sampled_from([PRESETS["tiny"], PRESETS["small"]]))
    r, c = cfg.array_rows, cfg.array_cols
    m, k, n = (draw(st.integers(1, 200)) for _ in range(3))
    pm = r * draw(st.integers(1, -(-m // r) + 1))
    pn = c * draw(st.integers(1, -(-n // c) + 1))
    pk = draw(st.integers(1, k + 3))
    return cfg, m, k, n, pm, pn, pk, draw(st.integers(0, 1))


consts = st.builds(ModelConstants, drain_extra_cycles=st.integers(0, 9),
                   step_ctrl_cycles=st.integers(0, 5), start_cycles=st.integers(0, 9),
                   finish_cycles=st.integers(0, 9), load_extra_cycles=st.integers(0, 5),
                   store_extra_cycles=st.integers(0, 5), store_waits_latency=st.integers(0, 1))


@settings(max_examples=300, deadline=None)
@given(tilings(), consts)
def test_cost_grouped_equals_step_walk(t, k):
    cfg, m, kk, n, pm, pn, pk, outer = t
    plan = dataclasses.replace(_plan(cfg, m, kk, n, pm, pn, pk, outer), outer_m=outer)
    got, want = predict(plan, cfg, k), predict_reference(plan, cfg, k)
    assert got == want
    cycles = (got.mac_active_cycles + got.stall_drain_cycles + got.stall_load_a_cycles
              + got.stall_load_b_cycles + got.stall_store_cycles + got.stall_ctrl_cycles)
    assert cycles == got.total_cycles
    assert got.wr_c_bytes == m * -(-n // cfg.array_cols) * cfg.c_beat_bytes
    assert lower_bound_cycles(m, kk, n, pm, pn, pk, cfg, k) <= got.total_cycles


def test_cost_mac_active_counts_real_beats():
    cfg = TINY
    bd = predict(_plan(cfg, 10, 9, 7, 8, 4, 4, 1), cfg)
    # gm over m: ceil(8/4)+ceil(2/4) = 3 tiles, gn over n: 2 tiles, k beats 9
    assert bd.mac_active_cycles == 3 * 2 * 9
    assert isinstance(bd, CycleBreakdown)
