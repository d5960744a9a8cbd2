"""tb.coverage: records fold into bins; uncovered bins are listed and fail the report."""

import json

import pytest

from tb import coverage


def test_coverage_folds_records_and_lists_misses(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TESSERA_COVERAGE_DIR", str(tmp_path))
    coverage.record("post", [{"int8": True, "bias": False, "mode": "RELU", "shift_min": -2,
                              "shift_max": 3}])
    coverage.record("error", [{"error": "BAD_CRC"}, {"error": "BAD_CRC"}])
    hits, missing = coverage.report(tmp_path)
    assert hits["post"]["clamp RELU"] == 1 and hits["post"]["left shift (shift < 0)"] == 1
    assert hits["post"]["clamp CLAMP"] == 0 and "post: clamp CLAMP" in missing
    assert hits["error"]["outcome BAD_CRC"] == 2
    assert coverage.main([str(tmp_path), "--json", str(tmp_path / "c.json")]) == 1
    out = capsys.readouterr().out
    assert "MISS" in out and "uncovered bins:" in out
    assert json.loads((tmp_path / "c.json").read_text())["missing"] == missing
    assert coverage.main([str(tmp_path), "--reset"]) == 0
    assert not list(tmp_path.glob("*.jsonl"))


def test_coverage_unknown_kind_is_refused():
    with pytest.raises(ValueError, match="coverage kind must be one of"):
        coverage.record("nonsense", [])


def test_every_error_code_has_a_bin():
    from spec.desc import ErrorCode

    assert {f"outcome {c.name}" for c in ErrorCode} == set(coverage.BINS["error"])


def test_coverage_report_names_a_missing_directory_and_skips_broken_lines(tmp_path, capsys):
    """A missing directory said "0/74 bins hit"; a truncated line (a killed worker) or a record
    without a field ended in a traceback. Broken lines count for no bin and are named."""
    assert coverage.main([str(tmp_path / "none")]) == 2
    assert "no such directory" in capsys.readouterr().err
    (tmp_path / "error-1.jsonl").write_text('{"error": "BAD_CRC"}\n{"err\n{"erro": 1}\n')
    skipped = []
    hits, _ = coverage.report(tmp_path, skipped)
    assert hits["error"]["outcome BAD_CRC"] == 1
    assert [s.split(": ")[0] for s in skipped] == ["error-1.jsonl:2", "error-1.jsonl:3"]
    coverage.main([str(tmp_path)])
    assert "warning: skipped error-1.jsonl:2: JSONDecodeError" in capsys.readouterr().err
