"""No read of an on-chip memory whose data the design uses collides with a write of the same
address (what the ECP5 flow's ``no_rw_check`` relies on, docs/bench.md "Block RAM reads"):
the usual testbenches on builds where every such read returns wrong data (:mod:`hw.collide`,
``hw.build.emit(cfg, poison_collisions=True)``) stay bit-exact, with the same cycle counts.

Each memory is exercised: the operand buffers and the accumulator (GEMMs with split-K and both
loop orders; convolutions through the gather), the convolution tables (convolutions), the
parameter memories (requantised GEMMs and convolutions, image runs), the local buffer (fused
chains) and, on a config with the mesh, the depthwise weights and the buffers' fill words.
"""

import dataclasses
import json

import numpy as np
import pytest

from firmware.chains import fusion_plan
from spec.config import PRESETS
from spec.regmap import COUNTERS
from tb.fusion import random_data, run_chain
from tb.tools import missing_tool

from .test_depthwise import CASES as DEPTHWISE_CASES
from .test_fusion import TINY_CHAINS
from .test_rtl import run, seed_for

POISON = {"poison_collisions": True}


def _exact(records, key):
    for r in records:
        for name in COUNTERS:
            assert r["predicted"][name] == r[name], (r[key], name)


@pytest.mark.rtl
def test_gemms_never_use_a_colliding_read(rtl_build, tmp_path, request):
    out = run(rtl_build, "verilator", "tiny", "tb.gemm", tmp_path, TESSERA_SEED=seed_for(request),
              TESSERA_CASES=16, **POISON)
    records = json.loads((out / "gemm_results.json").read_text())
    assert len(records) == 16          # tb.gemm compares every element with the golden model
    _exact(records, "case")


@pytest.mark.rtl
def test_convolutions_never_use_a_colliding_read(rtl_build, tmp_path, request):
    out = run(rtl_build, "verilator", "tiny", "tb.conv", tmp_path, TESSERA_SEED=seed_for(request),
              TESSERA_CASES=16, **POISON)
    records = json.loads((out / "conv_results.json").read_text())
    assert len(records) == 16
    _exact(records, "shape")


@pytest.mark.rtl
def test_depthwise_layers_never_use_a_colliding_read(rtl_build, tmp_path, request):
    cfg = dataclasses.replace(PRESETS["small"], dw_mesh=1)
    out = run(rtl_build, "verilator", cfg, "tb.depthwise", tmp_path,
              TESSERA_SEED=seed_for(request), TESSERA_DW_CASES=DEPTHWISE_CASES["small"],
              **POISON)
    records = json.loads((out / "depthwise_results.json").read_text())
    assert len(records) == len(DEPTHWISE_CASES["small"].split(","))
    for r in records:
        for name, value in r["predicted"].items():
            assert r[name] == value, (r["channels"], r["h"], r["w"], name)


@pytest.mark.rtl
def test_fused_chains_never_use_a_colliding_read(tmp_path, request):
    """Image runs (the runner, parameter loads) with the intermediate in the local buffer."""
    reason = missing_tool("verilator")
    if reason:
        pytest.skip(reason)
    cfg = PRESETS["tiny"]
    chain = TINY_CHAINS["conv3x3-1x1"]
    plan = fusion_plan(chain, cfg)
    data = random_data(chain, np.random.default_rng(seed_for(request)))
    golden, runs = run_chain(chain, data, cfg, [None, plan.block], workdir=tmp_path, **POISON)
    for r in runs:
        assert r.error_name == "NONE" and np.array_equal(r.output, golden), r.block
    assert runs[1].counters["total_cycles"] == plan.chosen.predicted_cycles
    assert runs[0].counters["total_cycles"] == plan.unfused_cycles
