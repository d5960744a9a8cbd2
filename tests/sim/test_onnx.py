"""ONNX operator conformance on the RTL: the Conv / ConvInteger / MatMulInteger node tests that
ship inside the ``onnx`` wheel, bit-exact against their expected outputs (tb.onnx_cases)."""

import json

import numpy as np

import pytest

from spec.config import PRESETS

from .test_rtl import run

#: Icarus smoke: a plain padded conv and the zero-point conv (the halo holds the zero point).
ICARUS_CASES = ("test_conv_with_strides_and_asymmetric_padding", "test_convinteger_with_padding")


def _specs(tmp_path, names=None):
    pytest.importorskip("onnx", reason="onnx (the dev extra) provides the conformance cases")
    from tb.onnx_cases import collect_specs

    specs = collect_specs()
    if names is not None:
        specs = [s for s in specs if s["name"] in names]
    path = tmp_path / "onnx_specs.json"
    path.write_text(json.dumps(specs))
    return specs, path


@pytest.mark.rtl
def test_onnx_conformance_verilator(rtl_build, tmp_path):
    specs, path = _specs(tmp_path)
    names = [s["name"] for s in specs]
    print("\nONNX cases:", ", ".join(names))
    assert len(specs) >= 6
    assert {"test_convinteger_with_padding", "test_convinteger_without_padding",
            "test_matmulinteger", "test_basic_conv_with_padding",
            "test_conv_with_strides_and_asymmetric_padding",
            "test_conv_with_autopad_same"} <= set(names)
    out = run(rtl_build, "verilator", "tiny", "tb.onnx_cases", tmp_path,
              TESSERA_ONNX_SPECS=path)
    records = json.loads((out / "onnx_results.json").read_text())
    assert [r["name"] for r in records] == names
    for r in records:
        print(f"{r['name']:48s} {r['op']:14s} {'pass' if r['pass'] else 'FAIL'} "
              f"{r['cycles']} cycles")
    assert all(r["pass"] for r in records)


@pytest.mark.rtl
def test_onnx_conformance_smoke_icarus(rtl_build, tmp_path):
    specs, path = _specs(tmp_path, ICARUS_CASES)
    assert sorted(s["name"] for s in specs) == sorted(ICARUS_CASES)
    out = run(rtl_build, "icarus", "tiny", "tb.onnx_cases", tmp_path, TESSERA_ONNX_SPECS=path)
    records = json.loads((out / "onnx_results.json").read_text())
    assert len(records) == len(ICARUS_CASES) and all(r["pass"] for r in records)


# -- QLinearConv / QLinearMatMul: requantised by the hardware ------------------------------------

def _qcases():
    pytest.importorskip("onnx", reason="onnx (the dev extra) provides the conformance cases")
    from tb.qlinear import collect_qlinear_cases

    return collect_qlinear_cases()


def test_onnx_qlinear_cases_are_all_collected():
    names = {c.name for c in _qcases()}
    assert "test_qlinearconv" in names
    for kind in ("int8", "uint8"):
        for dims in ("2D", "3D"):
            for scale in ("float16", "float32"):
                assert f"test_qlinearmatmul_{dims}_{kind}_{scale}" in names


def test_onnx_qlinear_golden_matches_onnx():
    """Our integer pipeline (zero-point fold + gemmlowp requantisation) against ONNX's expected
    outputs, element by element; any difference is listed."""
    from tb.qlinear import compare, lower

    cfg = PRESETS["tiny"]
    diffs = {c.name: compare(c, lower(c, cfg).golden) for c in _qcases()}
    assert all(not d for d in diffs.values()), {k: v for k, v in diffs.items() if v}


@pytest.mark.rtl
def test_onnx_qlinear_on_rtl(tmp_path):
    """Every QLinearConv / QLinearMatMul node test as a one-image run on the RTL (bias,
    requantisation and zero point applied by the post-processor), matching ONNX exactly."""
    from tb.jobs import ImageRun, run_jobs
    from tb.qlinear import compare, lower
    from tb.tools import missing_tool

    reason = missing_tool("verilator")
    if reason:
        pytest.skip(reason)
    cfg = PRESETS["tiny"]
    cases = _qcases()
    lowered = [lower(c, cfg) for c in cases]
    runs = [ImageRun(lw.blob, budget_cycles=lw.budget_cycles, load=lw.load, read=lw.read)
            for lw in lowered]
    results = run_jobs(runs, cfg, workdir=tmp_path)
    for case, lw, result in zip(cases, lowered, results):
        assert result.error == 0, (case.name, result.error_name)
        got = lw.decode(result.reads)
        assert np.array_equal(got, lw.golden), f"{case.name}: RTL differs from the golden model"
        diffs = compare(case, got)
        print(f"{case.name:40s} {result.counters['total_cycles']:6d} cycles, "
              f"{len(diffs)} elements differ from ONNX")
        assert not diffs, (case.name, diffs)
