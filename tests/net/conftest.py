"""Shared fixtures of the network tests: small models, fixed host timings (deterministic)."""

import json
from pathlib import Path

import pytest

onnx = pytest.importorskip("onnx")

from planner.net.assign import FunctionLibrary, HostTimings  # noqa: E402

LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"

#: Fixed host timings: tests never depend on the machine's speed.
FIXED_TIMINGS = HostTimings(
    ns_per_mac=0.05,
    ns_per_element={"elementwise": 0.5, "activation": 0.5, "nonlinear": 2.0, "pool": 1.0,
                    "layout": 0.5, "quant": 1.0, "batchnorm": 1.0, "scalar": 10.0,
                    "other": 1.0},
    op_overhead_ns=1000.0)


@pytest.fixture
def lib() -> FunctionLibrary:
    return FunctionLibrary(host=FIXED_TIMINGS)


@pytest.fixture
def timings_file(tmp_path) -> Path:
    path = tmp_path / "host_timings.json"
    path.write_text(json.dumps(FIXED_TIMINGS.as_dict()))
    return path
