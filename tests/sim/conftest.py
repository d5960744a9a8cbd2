"""Launchers for the cocotb testbenches: build once per (simulator, preset) per session."""

import os

import pytest

from hw.build import emit
from spec.config import PRESETS, AccelConfig
from tb.tools import build, missing_tool


@pytest.fixture(scope="session")
def rtl_build():
    """``rtl_build(sim, preset) -> (runner, build_dir)``, ``preset`` a preset name or an
    AccelConfig; skips naming a missing simulator."""
    cache = {}

    def get(sim: str, preset: str | AccelConfig):
        cfg = PRESETS[preset] if isinstance(preset, str) else preset
        key = (sim, cfg)
        if key not in cache:
            reason = missing_tool(sim)
            if reason:
                pytest.skip(reason)
            out = emit(cfg)
            cache[key] = (build(sim, out, waves=os.getenv("WAVES") == "1"), out)
        return cache[key]

    return get
