"""bench.fusion without a simulator: the report from results, and argument errors. The runs
themselves are tests/sim/test_fusion.py; docs/fusion_results holds a real report."""

import json
from pathlib import Path

import pytest

from bench.fusion import main, markdown

RESULTS = Path(__file__).resolve().parents[2] / "docs" / "fusion_results" / "fusion-default.json"


def test_markdown_of_the_committed_results_has_every_variant():
    results = json.loads(RESULTS.read_text())
    text = markdown(results)
    for r in results:
        assert f"### {r['chain']} ({r['producer']} -> {r['consumer']})" in text
        for v in r["variants"]:
            assert f"| {v['cycles']:,} | {v['predicted_cycles']:,} |" in text
    assert text.count("| unfused | — |") == len(results)
    assert "| NO |" not in text


def test_committed_results_meet_the_acceptance_claims():
    """docs/fusion.md quotes these: every variant bit-exact and exactly predicted, and the
    planned fusion saves at least the intermediate's write + read without more cycles."""
    for r in json.loads(RESULTS.read_text()):
        base, planned = r["variants"][0], r["variants"][1]
        assert base["variant"] == "unfused" and planned["variant"] == "fused (planned)"
        assert all(v["bit_exact"] and v["cycles"] == v["predicted_cycles"]
                   for v in r["variants"])
        assert planned["dram_saved_bytes"] >= 2 * r["intermediate_bytes"]
        assert planned["cycles"] <= base["cycles"]


def test_unknown_chain_is_refused_with_the_known_ones(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--chains", "resnet50_res9"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "unknown chain(s) resnet50_res9; known: bert_base_ffn_seq128" in err
