"""RTL regressions on Verilator (and a smoke subset on Icarus) through cocotb_tools.runner."""

import dataclasses
import json
import os
import random

import pytest

from spec.config import PRESETS
from spec.regmap import COUNTERS
from tb import coverage

WAVES = os.getenv("WAVES") == "1"


def run(rtl_build, sim, preset, module, tmp_path, plusargs=(), poison_collisions=False,
        **env):
    runner, out = rtl_build(sim, preset, poison_collisions)
    extra = {"ACCEL_BUILD": str(out), **{k: str(v) for k, v in env.items()}}
    results = runner.test(hdl_toplevel="sim_top", test_module=module, test_dir=tmp_path,
                          extra_env=extra, waves=WAVES, results_xml=str(tmp_path / "results.xml"),
                          plusargs=list(plusargs))
    from cocotb_tools.runner import get_results
    tests, fails = get_results(results)
    assert tests > 0 and fails == 0, f"{fails} of {tests} cocotb tests failed (see log above)"
    return tmp_path


def cover_gemm(records, preset):
    cfg = PRESETS[preset]
    coverage.record("gemm", records, R=cfg.array_rows, C=cfg.array_cols)


def seed_for(request) -> int:
    seed = int(os.getenv("TESSERA_SEED", random.randrange(1 << 30)))
    print(f"\n{request.node.name}: TESSERA_SEED={seed} reproduces this run")
    return seed


#: Random cases per preset and run: ragged m, n; k from 1 to 2051; both loop orders; split-K on
#: and off (tb.cases.random_cases).
CASES = 32
#: Issue 3 asks for the model within 5% of the RTL; it is calibrated to reproduce every counter
#: exactly, so any difference is a regression of the RTL or the model.
MODEL_TOLERANCE = 0.0


def model_errors(records):
    return [(r["predicted"]["total_cycles"] - r["total_cycles"]) / r["total_cycles"]
            for r in records]


@pytest.mark.rtl
@pytest.mark.parametrize("preset", ["tiny", "default"])
def test_rtl_gemm_random_verilator(rtl_build, preset, tmp_path, request):
    seed = seed_for(request)
    out = run(rtl_build, "verilator", preset, "tb.gemm", tmp_path,
              TESSERA_SEED=seed, TESSERA_CASES=CASES)
    records = json.loads((out / "gemm_results.json").read_text())
    assert len(records) == CASES
    cover_gemm(records, preset)
    # issue 3: the cycle model against the RTL counters, on every measured GEMM
    errors = model_errors(records)
    worst = max(range(len(errors)), key=lambda i: abs(errors[i]))
    print(f"{preset}: model error on {len(errors)} GEMMs: worst {errors[worst]:+.2%} "
          f"({records[worst]['case']}), mean |error| "
          f"{sum(map(abs, errors)) / len(errors):.2%}")
    assert abs(errors[worst]) <= MODEL_TOLERANCE, records[worst]
    for r in records:
        for name in COUNTERS:
            assert r["predicted"][name] == r[name], (r["case"], name, r["predicted"], r)


#: Icarus runs ~100x slower than Verilator: a smoke subset of small ragged shapes, both loop
#: orders and split-K (GemmCase rotation), k up to 2 * 64.
ICARUS_SHAPES = "5x1x7,9x70x6,13x33x17,3x130x2"


@pytest.mark.rtl
def test_rtl_gemm_smoke_icarus(rtl_build, tmp_path, request):
    """A smaller subset on Icarus: same testbench, same checks."""
    seed = seed_for(request)
    out = run(rtl_build, "icarus", "tiny", "tb.gemm", tmp_path,
              TESSERA_SEED=seed, TESSERA_SHAPES=ICARUS_SHAPES)
    assert len(json.loads((out / "gemm_results.json").read_text())) == 4


@pytest.mark.rtl
@pytest.mark.parametrize("preset", ["default", "tiny-4gib"])
def test_rtl_gemm_at_the_top_of_the_memory(rtl_build, preset, tmp_path, request):
    """default's 31-bit DRAM (32-bit device addresses), and a 4 GiB DRAM where a config asks
    for it (``tiny`` with ``dram_addr_bits = 32``): operands laid out from 3 MiB below the end
    of the memory, so the top address bit is set in every address the engines issue (the image
    is loaded at the full addresses: an engine that dropped the bit would read zeros). Bit-exact,
    guards untouched, counters equal to the model; the paged memory model holds only the pages
    written."""
    cfg = (PRESETS["default"] if preset == "default"
           else dataclasses.replace(PRESETS["tiny"], dram_addr_bits=32))
    assert cfg.dram_addr_bits == (31 if preset == "default" else 32)
    base = cfg.dram_bytes - (3 << 20)
    out = run(rtl_build, "verilator", cfg, "tb.gemm", tmp_path, TESSERA_SEED=seed_for(request),
              TESSERA_SHAPES="37x300x45,100x17x260,16x1000x16", TESSERA_BASE=hex(base))
    records = json.loads((out / "gemm_results.json").read_text())
    assert len(records) == 3
    for r in records:
        for name in COUNTERS:
            assert r["predicted"][name] == r[name], (r["case"], name)


def test_icarus_refuses_an_address_space_its_dense_model_cannot_hold(tmp_path):
    """The Icarus model is a dense byte array: a 2 GiB config is refused before any build,
    naming the field; Verilator's paged model takes it."""
    from tb.tools import ICARUS_MAX_ADDR_BITS, build
    (tmp_path / "config.json").write_text(PRESETS["default"].to_json())
    with pytest.raises(ValueError, match=rf"AccelConfig.dram_addr_bits=31: the Icarus memory "
                                         rf"model is a dense array and holds at most "
                                         rf"{ICARUS_MAX_ADDR_BITS} address bits .*Verilator"):
        build("icarus", tmp_path)


@pytest.mark.rtl
@pytest.mark.parametrize("sim", ["verilator", "icarus"])
def test_rtl_errors_refused(rtl_build, sim, tmp_path):
    run(rtl_build, sim, "tiny", "tb.errors", tmp_path)
    # tb.errors asserts it reached every register-mode code
    from spec.desc import ErrorCode
    coverage.record("error", [{"error": c.name} for c in ErrorCode
                              if ErrorCode.NONE < c < ErrorCode.BAD_IMAGE])


@pytest.mark.rtl
@pytest.mark.slow
@pytest.mark.parametrize("preset", ["tiny", "small", "default"])
def test_rtl_gemm_random_long(rtl_build, preset, tmp_path, request):
    """make test-full: 300 random cases per preset, same checks (exact model included)."""
    seed = seed_for(request)
    out = run(rtl_build, "verilator", preset, "tb.gemm", tmp_path,
              TESSERA_SEED=seed, TESSERA_CASES=300)
    records = json.loads((out / "gemm_results.json").read_text())
    assert len(records) == 300
    cover_gemm(records, preset)
    for r in records:
        for name in COUNTERS:
            assert r["predicted"][name] == r[name], (r["case"], name)


#: Random convolution cases per run (tb.conv.random_conv): kernels 1-7 and non-square, strides
#: 1-2, dilation 1-2, asymmetric pads 0-3, groups 1/2/depthwise, batch 1-2, NCHW and NHWC.
CONV_CASES = 32


@pytest.mark.rtl
@pytest.mark.parametrize("preset, cases", [("tiny", CONV_CASES), ("default", 8)])
def test_rtl_conv_random_verilator(rtl_build, preset, cases, tmp_path, request):
    seed = seed_for(request)
    out = run(rtl_build, "verilator", preset, "tb.conv", tmp_path,
              TESSERA_SEED=seed, TESSERA_CASES=cases)
    records = json.loads((out / "conv_results.json").read_text())
    assert len(records) == cases
    assert {r["layout"] for r in records} == {"NCHW", "NHWC"}
    coverage.record("conv", records)
    # planner.convcost: every counter, the gathers' stalls and so the total included, is exact
    for r in records:
        for name in COUNTERS:
            assert r["predicted"][name] == r[name], (r["shape"], name, r["predicted"][name],
                                                     r[name])


def test_random_convs_fit_the_table_memories_of_small_configs():
    """tb.conv's random cases are drawn again until their tables fit (a custom config with
    1,024 offset entries got a 35-channel 7x7 case, 1,715 offsets, and the run stopped)."""
    import numpy as np

    from planner.offsets import compile_tables
    from spec.desc import table_problems
    from tb.conv import random_conv

    cfg = dataclasses.replace(PRESETS["small"], array_cols=16, block_n=16,
                              conv_offset_entries=1024, conv_run_entries=64,
                              conv_group_entries=64)
    rng = np.random.default_rng(5)
    for i in range(100):
        shape, layout = random_conv(rng, cfg, i)
        tables = compile_tables(shape, layout, cfg)
        assert not table_problems(cfg, k=shape.gemm.k, run_count=tables.run_count,
                                  n=tables.n), (i, shape)


#: ``tiny`` with every port slower than a beat per cycle at a rate that divides the beat (A 2
#: of 4 bytes, B 1 of 4, C 4 of 16): the memory model's credit then never overshoots a
#: request's cost, and the cycle model stays exact (every preset's ports run a beat per cycle;
#: rates that do not divide the beat: docs/bench.md, "Ports slower than a beat").
SLOW_PORTS = dataclasses.replace(PRESETS["tiny"], a_port_bytes_per_cycle=2,
                                 b_port_bytes_per_cycle=1, c_port_bytes_per_cycle=4)


@pytest.mark.rtl
@pytest.mark.parametrize("module, cases", [("tb.gemm", 12), ("tb.conv", 12)])
def test_rtl_slow_ports_whose_rate_divides_the_beat_are_exact(rtl_build, module, cases,
                                                              tmp_path, request):
    """Every counter equal to the model's (with B at 3 and C at 7 bytes a cycle, rates that
    do not divide the beats, the same test fails: 164 predicted against 162 measured)."""
    seed = seed_for(request)
    out = run(rtl_build, "verilator", SLOW_PORTS, module, tmp_path, TESSERA_SEED=seed,
              TESSERA_CASES=cases)
    records = json.loads((out / f"{module[3:]}_results.json").read_text())
    assert len(records) == cases
    for r in records:
        for name in COUNTERS:
            assert r["predicted"][name] == r[name], (r.get("case", r.get("shape")), name,
                                                     r["predicted"][name], r[name])
    assert sum(r["stall_load_b_cycles"] for r in records) > 0     # the ports did throttle


#: Icarus conv smoke: a padded stride-2 3x3 in NCHW and a dilated depthwise in NHWC.
ICARUS_CONVS = json.dumps([
    dict(batch=1, in_channels=3, height=7, width=6, out_channels=5, kernel_h=3, kernel_w=3,
         stride_h=2, stride_w=2, pad_top=1, pad_left=0, pad_bottom=2, pad_right=1,
         layout="NCHW"),
    dict(batch=2, in_channels=3, height=6, width=5, out_channels=3, kernel_h=3, kernel_w=2,
         dilation_h=2, dilation_w=1, pad_top=1, pad_left=1, groups=3, layout="NHWC"),
])


@pytest.mark.rtl
def test_rtl_conv_smoke_icarus(rtl_build, tmp_path, request):
    seed = seed_for(request)
    out = run(rtl_build, "icarus", "tiny", "tb.conv", tmp_path,
              TESSERA_SEED=seed, TESSERA_CONVS=ICARUS_CONVS)
    assert len(json.loads((out / "conv_results.json").read_text())) == 2


@pytest.mark.rtl
@pytest.mark.slow
def test_rtl_conv_resnet50_every_layer(rtl_build, tmp_path):
    """make test-full: every ResNet-50 conv layer shape on the default config, bit-exact."""
    from bench.conv_resnet50 import conv_layers, run_layers

    rtl_build("verilator", "default")        # skips naming Verilator when it is missing
    layers = conv_layers()
    records = run_layers("default", "NCHW", layers, tmp_path)
    assert [r["name"] for r in records] == [layer.name for layer in layers]
    for r in records:                       # the convolution model is exact on every layer
        for name in COUNTERS:
            assert r["predicted"][name] == r[name], (r["name"], name)


@pytest.mark.rtl
def test_rtl_conv_gather_bound_layers_exact(rtl_build, tmp_path):
    """The layers whose B gathers the cycle model used to under-predict (issue 22): ResNet-50's
    stride-2 layers on 28x28-7x7 maps, a 3x3 128->32 conv on 14x14 and a 5x5 32->64 conv on
    28x28, on default, bit-exact, every counter equal to the model, tiled with the
    convolution model (planner.convplan)."""
    from bench.conv_resnet50 import conv_layers, run_layers
    from planner.shapes import ConvShape
    from planner.workload import Layer

    rtl_build("verilator", "default")
    layers = conv_layers({"res3_0_branch1", "res4_0_branch2b", "res5_0_branch2b",
                          "res5_0_branch1"}) + [
        Layer("3x3_128_32_14", ConvShape(batch=1, in_channels=128, height=14, width=14,
                                         out_channels=32, kernel_h=3, kernel_w=3, pad_top=1,
                                         pad_left=1, pad_bottom=1, pad_right=1)),
        Layer("5x5_32_64_28", ConvShape(batch=1, in_channels=32, height=28, width=28,
                                        out_channels=64, kernel_h=5, kernel_w=5, pad_top=2,
                                        pad_left=2, pad_bottom=2, pad_right=2))]
    records = {r["name"]: r for r in run_layers("default", "NCHW", layers, tmp_path)}
    for r in records.values():
        for name in COUNTERS:
            assert r["predicted"][name] == r[name], (r["name"], name)
        print(f"{r['name']}: {r['total_cycles']} cycles, {r['utilisation']:.1%}, B-load stall "
              f"{r['stall_load_b_cycles'] / r['total_cycles']:.2%}")
    # what the gather and the convolution planner bought (docs/conv.md): deterministic counts
    assert records["res5_0_branch2b"]["utilisation"] > 0.74        # 57.0% before session 11
    assert records["5x5_32_64_28"]["utilisation"] > 0.85
    assert records["3x3_128_32_14"]["utilisation"] > 0.85         # 83.4% in session 11


#: Degenerate convolutions: a fully connected layer (1x1 kernel on a 1x1 map, batch 3, lanes
#: C_in bytes apart) in both layouts, and a 1x1 conv.
DEGENERATE_CONVS = json.dumps([
    dict(batch=3, in_channels=20, height=1, width=1, out_channels=7, kernel_h=1, kernel_w=1,
         layout="NCHW"),
    dict(batch=3, in_channels=20, height=1, width=1, out_channels=7, kernel_h=1, kernel_w=1,
         layout="NHWC"),
    dict(batch=2, in_channels=9, height=5, width=6, out_channels=11, kernel_h=1, kernel_w=1,
         layout="NHWC"),
])


@pytest.mark.rtl
def test_rtl_conv_degenerate_cases(rtl_build, tmp_path, request):
    seed = seed_for(request)
    out = run(rtl_build, "verilator", "tiny", "tb.conv", tmp_path,
              TESSERA_SEED=seed, TESSERA_CONVS=DEGENERATE_CONVS)
    assert len(json.loads((out / "conv_results.json").read_text())) == 3


# -- memory stall injection (tb/hdl/dram_model.sv +STALL_* / +DELAY_*) ---------------------------

#: (name, request-refusal and response-hold probabilities /256 per port A, B, C)
STALL_PROFILES = {
    "requests": dict(STALL_A=96, STALL_B=96, STALL_C=96),
    "responses": dict(DELAY_A=96, DELAY_B=96, DELAY_C=160),
    "mixed": dict(STALL_A=40, STALL_B=120, STALL_C=20, DELAY_A=140, DELAY_B=30, DELAY_C=90),
    "random": None,          # drawn from the seed
}
#: Random GEMM cases per profile in the default tier (4 profiles: 200 cases).
STALL_CASES = 50


def stall_plusargs(profile: str, seed: int) -> list[str]:
    probs = STALL_PROFILES[profile]
    if probs is None:
        rng = random.Random(seed)
        probs = {f"{kind}_{port}": rng.randrange(0, 200) for kind in ("STALL", "DELAY")
                 for port in "ABC"}
    return [f"+STALL_SEED={seed}"] + [f"+{name}={value}" for name, value in probs.items()]


@pytest.mark.rtl
@pytest.mark.parametrize("profile", sorted(STALL_PROFILES))
def test_rtl_gemm_random_with_stalls(rtl_build, profile, tmp_path, request):
    """Random shapes and tilings with the memory refusing requests and holding responses at
    random: bit-exact, nothing outside C written, byte counters exact (checked per case in
    tb.gemm), and slower than the stall-free model (the injection is live)."""
    seed = seed_for(request)
    out = run(rtl_build, "verilator", "tiny", "tb.gemm", tmp_path,
              plusargs=stall_plusargs(profile, seed), TESSERA_SEED=seed,
              TESSERA_CASES=STALL_CASES, TESSERA_STALL_BUDGET=8)
    records = json.loads((out / "gemm_results.json").read_text())
    assert len(records) == STALL_CASES
    cover_gemm(records, "tiny")
    coverage.record("stall", [{"profile": profile}])
    slower = sum(r["total_cycles"] > r["predicted"]["total_cycles"] for r in records)
    print(f"{profile}: {slower}/{len(records)} cases slower than the stall-free model")
    assert slower >= len(records) // 2


@pytest.mark.rtl
@pytest.mark.parametrize("sim", ["verilator", "icarus"])
def test_rtl_lifecycle(rtl_build, sim, tmp_path):
    """tb.lifecycle: start / writes while busy ignored, counters read while running, reset
    mid-run then a clean run, int32 accumulation wrapping at the boundary."""
    run(rtl_build, sim, "tiny", "tb.lifecycle", tmp_path)


#: make test-full: random GEMM cases per stall profile (4 profiles: 10,000 cases).
STALL_CASES_FULL = 2500


@pytest.mark.rtl
@pytest.mark.slow
@pytest.mark.parametrize("profile", sorted(STALL_PROFILES))
def test_rtl_gemm_random_with_stalls_full(rtl_build, profile, tmp_path, request):
    seed = seed_for(request)
    out = run(rtl_build, "verilator", "tiny", "tb.gemm", tmp_path,
              plusargs=stall_plusargs(profile, seed), TESSERA_SEED=seed,
              TESSERA_CASES=STALL_CASES_FULL, TESSERA_STALL_BUDGET=8)
    records = json.loads((out / "gemm_results.json").read_text())
    assert len(records) == STALL_CASES_FULL
    cover_gemm(records, "tiny")
    coverage.record("stall", [{"profile": profile}])


#: Random post-processed GEMMs per run (tb.post): Verilator / Icarus smoke.
POST_CASES, POST_CASES_ICARUS, POST_CASES_SHARED = 80, 6, 30


@pytest.mark.rtl
@pytest.mark.parametrize("sim, cases, lanes, c_port", [
    ("verilator", POST_CASES, 0, None), ("icarus", POST_CASES_ICARUS, 0, None),
    ("verilator", POST_CASES_SHARED, 1, None), ("verilator", POST_CASES_SHARED, 2, None),
    ("verilator", POST_CASES_SHARED, 0, 5), ("verilator", POST_CASES_SHARED, 2, 5),
    ("verilator", POST_CASES_SHARED, 1, 6)])
def test_rtl_post_processing_random(rtl_build, sim, cases, lanes, c_port, tmp_path, request):
    """Bias, requantisation (every shift, multiplier edge values), zero point, every clamp mode,
    int8 and int32 output, tight and wide C strides: bit-exact, nothing else written, and the
    cycle model exact. ``lanes``: ``tiny``'s requantiser with a lane per column (0) or shared
    lanes (``AccelConfig.requant_lanes``: a row every 4 or 2 cycles); ``c_port``: a C port
    slower than a beat per cycle (5 B/cycle: slower than 2 lanes; 6: faster than 1 lane), where
    the model over-predicts a post-processed run by a few cycles (at most 4 seen;
    docs/bench.md)."""
    seed = seed_for(request)
    tiny = PRESETS["tiny"]
    cfg = dataclasses.replace(tiny, requant_lanes=lanes,
                              c_port_bytes_per_cycle=c_port or tiny.c_port_bytes_per_cycle)
    out = run(rtl_build, sim, cfg, "tb.post", tmp_path, TESSERA_SEED=seed,
              TESSERA_CASES=cases)
    records = json.loads((out / "post_results.json").read_text())
    assert len(records) == cases
    # a slow C port: the model over-predicts by a few cycles that grow with the stores (a known
    # inexactness, docs/bench.md; 9 over 20 stores the most seen): at most one cycle per store
    # is allowed, and never an under-prediction
    wrong = [(r["m"], r["k"], r["n"], r["total_cycles"], r["predicted_cycles"])
             for r in records
             if not 0 <= r["predicted_cycles"] - r["total_cycles"]
             <= (0 if c_port is None else r["stores"])]
    assert not wrong, f"cycle model off on {len(wrong)} cases (m, k, n, RTL, model): {wrong[:5]}"
    if lanes:
        return
    coverage.record("post", records)
    if sim == "verilator" and cases == POST_CASES:
        # the 80-case run covers every mode (a 30-case run misses one about once in 80 seeds)
        assert {r["mode"] for r in records if r["int8"]} == {"NONE", "RELU", "RELU6", "CLAMP"}
        assert any(r["shift_min"] < 0 for r in records) and any(r["bias"] for r in records)
        assert any(not r["int8"] and r["bias"] for r in records)
