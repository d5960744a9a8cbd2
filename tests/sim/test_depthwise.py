"""Depthwise 3x3 layers on the mesh (issue 18), end to end on Verilator: tb.depthwise."""

import dataclasses
import json

import pytest

from spec.config import PRESETS

from .test_rtl import run, seed_for

#: Ragged maps (not multiples of the mesh's 6 x 6 or 14 x 14 output tiles), odd heights (one
#: channel a step), a one-row map, several strips and channel groups, the last group short.
CASES = {
    "small": "3x12x13,2x7x9,5x6x20/2,1x1x5,4x10x7/3,2x9x15",
}


@pytest.mark.rtl
@pytest.mark.parametrize("preset", ["small"])
def test_rtl_depthwise_verilator(rtl_build, preset, tmp_path, request):
    cfg = dataclasses.replace(PRESETS[preset], dw_mesh=1)
    out = run(rtl_build, "verilator", cfg, "tb.depthwise", tmp_path,
              TESSERA_SEED=seed_for(request), TESSERA_DW_CASES=CASES[preset])
    records = json.loads((out / "depthwise_results.json").read_text())
    assert len(records) == len(CASES[preset].split(","))
    # the cycle model (planner.dwcost) reproduces every counter of every layer
    for r in records:
        for name, value in r["predicted"].items():
            assert r[name] == value, (r["channels"], r["h"], r["w"], name, value, r[name])
