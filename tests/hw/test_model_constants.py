"""The planner's model constants follow the RTL they describe."""

import pytest

from hw.compute import drain_cycles
from hw.config import PRESETS
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


def test_model_start_and_dry_run_follow_the_checker_latency():
    from hw.checker import RecordChecker

    # one control cycle replaced the checks before they had a pipeline of their own
    assert K.start_cycles == 4 + RecordChecker.latency
    assert K.dry_run_cycles == 2 + RecordChecker.latency
