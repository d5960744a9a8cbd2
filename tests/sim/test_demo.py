"""``python -m tb.demo`` (``make sim``): its arguments are checked before anything is built."""

import re

import pytest

import tb.demo
from spec.config import PRESETS
from tb.cases import planned_cases


@pytest.mark.parametrize("shapes, message", [
    ("0x1x1", r"shape '0x1x1': GemmShape.m must be an int in \[1, 16777215\], not 0"),
    ("10x10", r"shape '10x10' must be MxKxN"),
    ("8x8x8,axbxc", r"shape 'axbxc' must be MxKxN"),
    ("4096x4096x4096", r"shape '4096x4096x4096': .* more than dram_bytes=4,194,304"),
])
def test_demo_refuses_bad_shapes_before_building(shapes, message, monkeypatch, capsys):
    """A typo used to cost a Verilog generation and a simulator build before the run failed
    inside cocotb with only "FAIL: see <dir>"."""
    monkeypatch.setattr(tb.demo, "emit", lambda *a: pytest.fail("built before checking"))
    assert tb.demo.main(["--preset", "tiny", "--shapes", shapes]) == 2
    err = capsys.readouterr().err
    assert err.startswith("python -m tb.demo: error: ")
    assert re.search(message, err), err


def test_demo_refuses_a_negative_seed_before_building(monkeypatch, capsys):
    """``--seed -5`` used to build the model and then end in "FAIL: see <dir>": numpy's
    generator refused the seed inside cocotb."""
    monkeypatch.setattr(tb.demo, "emit", lambda *a: pytest.fail("built before checking"))
    assert tb.demo.main(["--preset", "tiny", "--shapes", "8x8x8", "--seed", "-5"]) == 2
    assert "seed must be a non-negative integer" in capsys.readouterr().err


def test_demo_refuses_an_unknown_strategy(capsys):
    with pytest.raises(SystemExit):
        tb.demo.main(["--preset", "tiny", "--strategy", "db"])
    assert "invalid choice: 'db'" in capsys.readouterr().err


def test_planned_cases_are_what_the_run_executes():
    """The planner's tiling per shape and a seed per shape, as tb.planned runs them."""
    cfg = PRESETS["tiny"]
    cases = planned_cases("20x30x40, 7x5x3", cfg, "seed", 11)
    assert [(c.m, c.k, c.n, c.seed) for c, _, _ in cases] == [(20, 30, 40, 11), (7, 5, 3, 12)]
    for case, tiling, by in cases:
        assert tiling["partition_m"] % cfg.array_rows == 0 and by.startswith("seed")
