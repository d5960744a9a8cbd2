"""The committed bench results (bench/results/bench-<network>-default.json, which the README's
benchmark table and docs/bench.md quote) still describe this code: measured on the current
``default`` config, every layer's cycles what the planner predicts today for its own tiling and
for the greedy peer's, and the README's table the JSON's totals. A change to the planner, the
cycle model or the config fails here until ``python -m bench`` is re-run and its results and
the README's table are committed with it."""

import json
from pathlib import Path

import pytest

import planner
from planner import GemmShape
from planner.shapes import ConvShape
from spec.config import PRESETS

ROOT = Path(__file__).resolve().parents[2]
#: network -> the README table's first cell
NETWORKS = {"resnet50": "ResNet-50", "bert_base_seq128": "BERT-base seq 128"}


def _results(network: str) -> dict:
    return json.loads((ROOT / "bench" / "results" / f"bench-{network}-default.json").read_text())


def _shape(layer: dict):
    if layer["kind"] == "conv":
        return ConvShape(**layer["shape"])
    return GemmShape(**layer["shape"])


@pytest.mark.parametrize("network", sorted(NETWORKS))
def test_committed_bench_results_are_this_codes_predictions(network):
    report = _results(network)
    cfg = PRESETS["default"]
    assert report["config_id"] == f"{cfg.config_id:08x}", \
        "bench results of another default config: re-run python -m bench"
    greedy = report["peers"]["greedy"]["layers"]
    assert len(greedy) == len(report["layers"])
    for layer, peer in zip(report["layers"], greedy):
        shape = _shape(layer)
        assert planner.layer_cost(shape, cfg, report["strategy"]).cycles == \
            layer["predicted_cycles"] == layer["cycles"], layer["name"]
        assert planner.layer_cost(shape, cfg, "greedy").cycles == \
            peer["predicted_cycles"] == peer["cycles"], layer["name"]
    totals = report["totals"]
    assert totals["cycles"] == sum(l["cycles"] * l["count"] for l in report["layers"])


@pytest.mark.parametrize("network", sorted(NETWORKS))
def test_readme_benchmark_table_is_the_committed_results(network):
    report = _results(network)
    rows = [line for line in (ROOT / "README.md").read_text().splitlines()
            if line.startswith(f"| {NETWORKS[network]} |")]
    assert len(rows) == 1, rows
    cells = [c.strip() for c in rows[0].strip("|").split("|")]
    totals, peers = report["totals"], report["peers"]
    macs = totals["macs"]
    cfg = PRESETS["default"]

    def util(cycles: int) -> str:
        return f"{100 * macs / (cfg.macs_per_cycle * cycles):.1f}%"

    assert all(l["predicted_cycles"] == l["cycles"] for l in report["layers"])
    assert cells[1:] == [util(totals["cycles"]), f"{totals['cycles']:,}", "exact (every layer)",
                         util(peers["greedy"]["total_cycles"]),
                         util(peers["scalesim_os_stall_free"]["total_cycles"])]
