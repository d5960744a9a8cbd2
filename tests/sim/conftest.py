"""Launchers for the cocotb testbenches: build once per (simulator, preset) per session."""

import os

import pytest

from hw.build import emit
from spec.config import PRESETS, AccelConfig
from tb.tools import build, missing_tool


@pytest.fixture(scope="session")
def rtl_build():
    """``rtl_build(sim, preset, poison_collisions=False) -> (runner, build_dir)``, ``preset``
    a preset name or an AccelConfig (``poison_collisions``: the build of
    ``hw.build.emit(cfg, poison_collisions=True)``); skips naming a missing simulator."""
    cache = {}

    def get(sim: str, preset: str | AccelConfig, poison_collisions: bool = False):
        cfg = PRESETS[preset] if isinstance(preset, str) else preset
        key = (sim, cfg, poison_collisions)
        if key not in cache:
            reason = missing_tool(sim)
            if reason:
                pytest.skip(reason)
            out = emit(cfg, poison_collisions=poison_collisions)
            cache[key] = (build(sim, out, waves=os.getenv("WAVES") == "1"), out)
        return cache[key]

    return get
