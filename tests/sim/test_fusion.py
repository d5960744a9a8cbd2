"""Fused chains on the RTL (planner.fusion, docs/fusion.md): the producer's requantised output
kept in the local buffer for its consumer, against the same chain unfused and against the numpy
golden model, with the planner's predictions checked against the RTL counters.

The default tier runs small chains on ``tiny`` (several block partitions each, conv halos
included); the slow tier runs the acceptance chains on ``default``: a BERT-base FFN block (seq
128) and a ResNet-50 bottleneck's 3x3 -> 1x1 pair."""

from __future__ import annotations

import os
import random

import numpy as np
import pytest

from spec.config import PRESETS
from spec.layouts import COUNTERS
from firmware.chains import fusion_plan
from planner.fusion import Chain, GemmOp, conv_op, intermediate_bytes
from tb.fusion import CHAINS, random_data, run_chain
from tb.tools import missing_tool

pytestmark = pytest.mark.rtl

DRAM = ("rd_a_bytes", "rd_b_bytes", "wr_c_bytes")


def needs(sim: str):
    reason = missing_tool(sim)
    if reason:
        pytest.skip(reason)


def seed() -> int:
    value = int(os.getenv("TESSERA_SEED", random.randrange(1 << 30)))
    print(f"TESSERA_SEED={value}")
    return value


def check_runs(chain, cfg, golden, runs):
    """Every variant bit-exact; counters add up; every layer and image total as predicted."""
    for run in runs:
        assert run.error_name == "NONE", (run.block, run.error_name)
        assert np.array_equal(run.output, golden), f"block {run.block}: output differs"
        c = run.counters
        assert c["total_cycles"] == sum(c[n] for n in COUNTERS
                                        if n.endswith("_cycles") and n != "total_cycles")
        assert len(run.layers) == len(run.built.layers)
        for got, built in zip(run.layers, run.built.layers):
            assert got["total_cycles"] == built.predicted_cycles, (run.block, built.name)
            assert sum(got[n] for n in DRAM) == built.predicted_dram_bytes, built.name
        assert c["total_cycles"] == run.built.predicted_cycles, run.block


def cover(chain, runs, cfg, *, stalls=False):
    """Functional coverage samples (tb.coverage "fusion") of the runs."""
    from tb import coverage

    kind = "gemm" if isinstance(chain.producer, GemmOp) else "conv"
    coverage.record("fusion", [{
        "chain": kind, "stalls": stalls,
        "local_c": sum(b.layer.desc.c_addr >= cfg.local_base for b in r.built.layers),
        "local_b": sum(b.layer.desc.b_addr >= cfg.local_base for b in r.built.layers)}
        for r in runs])


def layer_dram(run) -> int:
    return sum(layer[n] for layer in run.layers for n in DRAM)


TINY_CHAINS = {
    # an MLP / FFN pair with ragged sizes (nothing a multiple of the 4x4 array)
    "gemm": Chain(GemmOp("up", 45, 37, 29), GemmOp("down", 23, 45, 29)),
    # a 3x3 (pad 1) producer into a 1x1 consumer: row blocks with the producer's halo
    "conv3x3-1x1": Chain(conv_op("c3", 6, 9, 11, 10, r=3, pad=1), conv_op("c1", 10, 9, 11, 7)),
    # 1x1 -> 1x1
    "conv1x1-1x1": Chain(conv_op("p1", 13, 7, 6, 9), conv_op("p2", 9, 7, 6, 5)),
}


@pytest.mark.parametrize("name", list(TINY_CHAINS))
def test_fused_chain_tiny_bit_exact_and_predicted(name, tmp_path):
    needs("verilator")
    cfg = PRESETS["tiny"]
    chain = TINY_CHAINS[name]
    plan = fusion_plan(chain, cfg)
    fits = [c.block for c in plan.candidates if not c.refused]
    # unfused, the planner's choice, and two multi-block partitions
    blocks = [None, plan.block] + [b for b in fits if b != plan.block][:2]
    golden, runs = run_chain(chain, random_data(chain, np.random.default_rng(seed())), cfg,
                             blocks, workdir=tmp_path)
    check_runs(chain, cfg, golden, runs)
    cover(chain, runs, cfg)
    unfused, chosen = runs[0], runs[1]
    # the planner's choice keeps the whole intermediate on chip here: the memory ports carry
    # at least its write and its read fewer, and it takes no more cycles
    saved = layer_dram(unfused) - layer_dram(chosen)
    assert saved >= 2 * intermediate_bytes(chain)
    assert chosen.counters["total_cycles"] <= unfused.counters["total_cycles"]
    assert chosen.counters["total_cycles"] == plan.chosen.predicted_cycles
    assert unfused.counters["total_cycles"] == plan.unfused_cycles


@pytest.mark.parametrize("profile", ["mixed", "random"])
def test_fused_chain_under_memory_stalls(profile, tmp_path, request):
    """The memory refusing requests and holding responses at random while the local buffer
    answers at once (parameter loads, A and the producer's B still cross the ports): every
    variant still bit-exact and its counters still add up."""
    from tests.sim.test_rtl import seed_for, stall_plusargs

    needs("verilator")
    cfg = PRESETS["tiny"]
    chain = TINY_CHAINS["conv3x3-1x1"]
    value = seed_for(request)
    golden, runs = run_chain(chain, random_data(chain, np.random.default_rng(value)), cfg,
                             [None, 9, 3], workdir=tmp_path,
                             plusargs=stall_plusargs(profile, value), budget_scale=8)
    for run in runs:
        assert run.error_name == "NONE" and np.array_equal(run.output, golden), run.block
        c = run.counters
        assert c["total_cycles"] == sum(c[n] for n in COUNTERS
                                        if n.endswith("_cycles") and n != "total_cycles")
        assert c["total_cycles"] >= run.built.predicted_cycles
    cover(chain, runs, cfg, stalls=True)


def test_fused_chain_icarus(tmp_path):
    needs("icarus")
    cfg = PRESETS["tiny"]
    chain = TINY_CHAINS["conv3x3-1x1"]
    golden, runs = run_chain(chain, random_data(chain, np.random.default_rng(seed())), cfg,
                             [None, 3], workdir=tmp_path, sim="icarus")
    check_runs(chain, cfg, golden, runs)


# -- acceptance (slow): the default configuration ---------------------------------------------------

ACCEPTANCE = ["bert_base_ffn_seq128", "resnet50_res2_3x3_1x1"]


@pytest.mark.slow
@pytest.mark.parametrize("name", ACCEPTANCE)
def test_fused_chain_default_acceptance(name, tmp_path):
    needs("verilator")
    cfg = PRESETS["default"]
    chain = CHAINS[name]
    plan = fusion_plan(chain, cfg)
    golden, runs = run_chain(chain, random_data(chain, np.random.default_rng(seed())), cfg,
                             [None, plan.block], workdir=tmp_path)
    check_runs(chain, cfg, golden, runs)
    unfused, fused = runs
    assert layer_dram(unfused) - layer_dram(fused) >= 2 * intermediate_bytes(chain)
    assert fused.counters["total_cycles"] <= unfused.counters["total_cycles"]
    image = sum(fused.counters[n] for n in DRAM), sum(unfused.counters[n] for n in DRAM)
    assert image[1] - image[0] >= 2 * intermediate_bytes(chain)
