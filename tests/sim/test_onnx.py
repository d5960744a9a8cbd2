"""ONNX operator conformance on the RTL: the Conv / ConvInteger / MatMulInteger node tests that
ship inside the ``onnx`` wheel, bit-exact against their expected outputs (tb.onnx_cases)."""

import json

import pytest

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
