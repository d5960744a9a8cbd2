"""Issue 3 acceptance on ResNet-50 and BERT-base/large (seq 128), preset ``default``."""

from pathlib import Path

import pytest

import planner
from spec.config import PRESETS
from planner.report import evaluate, gap

WORKLOADS = Path(planner.__file__).parent / "workloads"


@pytest.fixture(scope="module")
def results():
    cfg = PRESETS["default"]
    out = []
    for name in ("resnet50", "bert_base_seq128", "bert_large_seq128"):
        out += evaluate(planner.load_workload(WORKLOADS / f"{name}.json"), cfg,
                        ("best", "search"))
    return out


def test_acceptance_best_within_1pct_on_95pct_and_5pct_on_all(results):
    gaps = [gap(r.plans["best"], r.plans["search"]) for r in results]
    assert min(gaps) >= 0
    assert sum(g <= 0.01 for g in gaps) >= 0.95 * len(gaps)
    assert max(gaps) <= 0.05
