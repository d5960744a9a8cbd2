"""The planner's model constants follow the RTL they describe."""

import pytest

from hw.compute import drain_cycles
from spec.config import PRESETS
from planner.cost import DEFAULT_CONSTANTS as K


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_model_drain_equals_rtl_drain(preset):
    cfg = PRESETS[preset]
    model = (K.drain_rows_factor * cfg.array_rows + K.drain_cols_factor * cfg.array_cols +
             K.drain_extra_cycles)
    assert model == drain_cycles(cfg)


def test_model_post_latency_equals_postproc_latency():
    from hw.postproc import PostProc

    assert K.post_store_extra_cycles == PostProc.latency


@pytest.mark.parametrize("preset, lanes", [("tiny", 0), ("tiny", 1), ("small", 2),
                                           ("default", 4), ("fpga", 0)])
def test_model_post_store_follows_the_requantiser_lanes(preset, lanes):
    """post_consts charges the requantiser's whole row latency and its row rate."""
    import dataclasses

    from hw.postproc import PostProc
    from planner.cost import _port_cycles, post_consts

    cfg = dataclasses.replace(PRESETS[preset], requant_lanes=lanes)
    post = post_consts(K, cfg)
    assert post.store_extra_cycles - K.store_extra_cycles == PostProc.row_latency_of(cfg)
    assert post.store_beat_cycles == cfg.post_row_cycles
    # beats a requantiser row apart unless the port is slower
    beat, bw = cfg.c_beat_bytes, cfg.c_port_bytes_per_cycle
    assert _port_cycles(5, beat, bw, 0, 0, post.store_beat_cycles) == \
        max(4 * cfg.post_row_cycles, -(-4 * beat // bw)) + 1


def test_model_start_and_dry_run_follow_the_checker_latency():
    from hw.checker import RecordChecker

    # one control cycle replaced the checks before they had a pipeline of their own
    assert K.start_cycles == 4 + RecordChecker.latency
    assert K.dry_run_cycles == 2 + RecordChecker.latency


def test_model_local_read_latency_equals_the_sequencers():
    from hw.sequencer import LOCAL_READ_LATENCY

    assert K.local_read_latency_cycles == LOCAL_READ_LATENCY


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_model_store_wait_equals_the_sequencers(preset):
    """The store of a partition waits for the drain of its last step (the drain overlaps the
    next step's compute): the model's wait and phase control cycles are the sequencer's."""
    from hw.sequencer import PHASE_CTRL_CYCLES, store_wait_cycles
    from planner.cost import _Timing

    cfg = PRESETS[preset]
    assert K.step_ctrl_cycles == PHASE_CTRL_CYCLES
    assert _Timing(cfg, K).wait == store_wait_cycles(cfg)


@pytest.mark.parametrize("preset", ["tiny", "small", "default"])
def test_model_depthwise_constants_follow_the_rtl(preset):
    from hw.compute import (MESH_HALVES_START_CYCLES, MESH_QUAD_START_CYCLES, MESH_START_CYCLES,
                            mesh_drain_cycles)
    from hw.dwwalk import DwWalker
    from hw.sequencer import PHASE_CTRL_CYCLES, mesh_store_wait_cycles

    cfg = PRESETS[preset]
    assert K.mesh_start_cycles == MESH_START_CYCLES - 1      # running from the cycle after m_start
    assert K.mesh_halves_start_cycles == MESH_HALVES_START_CYCLES
    assert K.mesh_quad_start_cycles == MESH_QUAD_START_CYCLES
    assert cfg.array_rows + K.mesh_drain_extra_cycles == mesh_drain_cycles(cfg)
    assert mesh_store_wait_cycles(cfg) == mesh_drain_cycles(cfg) - PHASE_CTRL_CYCLES
    assert K.step_ctrl_cycles == PHASE_CTRL_CYCLES
    assert K.dw_walk_cycles == DwWalker.START_LATENCY


def test_model_runner_read_latency_equals_the_tops():
    from hw.top import RUNNER_READ_LATENCY

    assert K.runner_read_extra_cycles == RUNNER_READ_LATENCY
