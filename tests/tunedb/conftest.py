"""Fixtures of the tuning-database tests: synthetic records and deterministic measure functions."""

import pytest

from spec.config import PRESETS
from planner.shapes import GemmShape
from planner.tiling import make_plan
from planner.tunedb import Record

CFG = PRESETS["small"]


def record(kind, dims, pm, pn, pk, cycles, outer_m=1, linear=True):
    """A record of ``dims`` with partitions ``(pm, pn, pk)`` and ``cycles``."""
    plan = make_plan(GemmShape(*dims), CFG, pm, pn, pk, outer_m, "test")
    return Record(kind=kind, op="gemm", m=dims[0], k=dims[1], n=dims[2], tiling=plan.key,
                  cycles=cycles, counters={"total_cycles": cycles}, util=0.9, source="test",
                  evidence={"linear": linear})


@pytest.fixture
def cfg():
    return CFG
