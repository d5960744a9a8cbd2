"""Launchers for the cocotb testbenches: build once per (simulator, preset) per session."""

import os

import pytest

from hw.build import emit
from hw.config import PRESETS
from tb.tools import build, missing_tool


@pytest.fixture(scope="session")
def rtl_build():
    """``rtl_build(sim, preset) -> (runner, build_dir)``; skips naming a missing simulator."""
    cache = {}

    def get(sim: str, preset: str):
        key = (sim, preset)
        if key not in cache:
            reason = missing_tool(sim)
            if reason:
                pytest.skip(reason)
            out = emit(PRESETS[preset])
            cache[key] = (build(sim, out, waves=os.getenv("WAVES") == "1"), out)
        return cache[key]

    return get
