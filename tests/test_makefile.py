"""The Makefile's housekeeping targets (the build targets are exercised by CI itself)."""

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(not (shutil.which("git") and shutil.which("make")), reason="needs git and make")
def test_make_clean_keeps_the_committed_bench_results(tmp_path):
    """bench/results is git-ignored, but the results the docs cite are committed there:
    `make clean` removes what the benches wrote and the build products, not those."""
    shutil.copy(ROOT / "Makefile", tmp_path / "Makefile")
    (tmp_path / ".gitignore").write_text("bench/results/\nbuild/\n")
    results = tmp_path / "bench" / "results"
    results.mkdir(parents=True)
    (results / "cited.json").write_text("{}")
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-f", ".gitignore", "Makefile", "bench/results/cited.json"],
                   check=True)
    subprocess.run([*git, "commit", "-qm", "x"], check=True)
    (results / "written.json").write_text("{}")
    (tmp_path / "build").mkdir()
    subprocess.run(["make", "-s", "clean"], cwd=tmp_path, check=True, capture_output=True)
    assert sorted(p.name for p in results.iterdir()) == ["cited.json"]
    assert not (tmp_path / "build").exists()
