"""Shared fixtures of the network tests: small models, fixed host timings (deterministic)."""

import json
from pathlib import Path

import pytest

onnx = pytest.importorskip("onnx")

from planner.net.assign import NOMINAL_HOST, FunctionLibrary  # noqa: E402

LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"

#: Fixed host timings (the library's nominal host): tests never depend on the machine's speed.
FIXED_TIMINGS = NOMINAL_HOST


@pytest.fixture
def lib() -> FunctionLibrary:
    return FunctionLibrary(host=FIXED_TIMINGS)


@pytest.fixture
def timings_file(tmp_path) -> Path:
    path = tmp_path / "host_timings.json"
    path.write_text(json.dumps(FIXED_TIMINGS.as_dict()))
    return path
