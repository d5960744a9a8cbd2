"""The bench command lines check their arguments before the work (bench.fpga's run for an hour
per preset), and ``bench.fpga --collect`` never replaces the results with an empty table."""

import shutil
from pathlib import Path

import pytest

import bench.fpga as fpga


@pytest.mark.parametrize("args, message", [
    (["--presets", "small,bogus"], "--presets: 'bogus' not among tiny, small, default, fpga"),
    (["--dsp-rows", "abc"], "--dsp-rows must be auto, all or a number, not 'abc'"),
    (["--presets", "small", "--dsp-rows", "9"], "--dsp-rows 9: small has 8 array rows"),
])
def test_fpga_refuses_bad_arguments_before_running_anything(args, message, monkeypatch,
                                                              capsys):
    monkeypatch.setattr(fpga, "run_preset", lambda *a, **k: pytest.fail("ran"))
    with pytest.raises(SystemExit):
        fpga.main(args)
    assert message in capsys.readouterr().err


def test_fpga_collect_with_nothing_to_collect_keeps_the_results(tmp_path, monkeypatch, capsys):
    """A typo in --presets with --collect used to rewrite fpga.md as an empty table and drop
    fpga.json's untagged rows."""
    monkeypatch.setattr(fpga, "ROOT", tmp_path)
    out = tmp_path / "results"
    out.mkdir()
    (out / "fpga.json").write_text('{"rows": [{"preset": "small"}]}\n')
    (out / "fpga.md").write_text("| the table |\n")
    assert fpga.main(["--collect", "--presets", "tiny", "--out", str(out)]) == 1
    assert "nothing to collect" in capsys.readouterr().err
    assert (out / "fpga.md").read_text() == "| the table |\n"
    assert (out / "fpga.json").read_text() == '{"rows": [{"preset": "small"}]}\n'


@pytest.mark.parametrize("module, args, message", [
    ("bench.simspeed", ["--simulators", "verilator,bogus"],
     "--simulators: 'bogus' not among verilator, icarus, amaranth"),
    ("bench.simspeed", ["--presets", "small,huge"], "--presets: 'huge' not among"),
    ("bench.__main__", ["--workload", "{tmp}/none.json"], "No such file or directory"),
    ("bench.__main__", ["--from-json", "{tmp}/none.json"], "No such file or directory"),
    ("bench.__main__", ["--from-json", "{readme}"], "README.md: not a bench report (not JSON"),
    ("bench.__main__", ["--from-json", "{results}/fpga.json"],
     "fpga.json: not a bench report (no network, preset, config_id, config, layers, totals, "
     "peers;"),
    ("bench.conv_resnet50", ["--only", "res2_0_branch2b,typo"],
     "--only: no ResNet-50 convolution named typo"),
])
def test_bench_clis_check_arguments_before_any_run(module, args, message, tmp_path, capsys):
    """Each failed only after a build or a first RTL run (or divided by zero cycles)."""
    import importlib

    main = importlib.import_module(module).main
    root = Path(__file__).resolve().parents[2]
    with pytest.raises(SystemExit):
        main([a.format(tmp=tmp_path, readme=root / "README.md",
                       results=root / "bench" / "results") for a in args])
    assert message in capsys.readouterr().err


def test_bench_rerender_keeps_the_summary_rows_of_the_other_reports(tmp_path, monkeypatch,
                                                                  capsys):
    """Re-rendering one report (the docs' command) rewrote the summary with that report's
    row alone, dropping the committed BERT-base row."""
    import bench.__main__ as bench_main

    results = Path(__file__).resolve().parents[2] / "bench" / "results"
    for f in results.glob("bench-*-default.json"):
        shutil.copy(f, tmp_path)
    (tmp_path / "bench-other-default.json").write_text('{"a": 1}')    # not a report: no row
    monkeypatch.setattr(bench_main, "write_report",     # (the plots need matplotlib)
                        lambda rep, out: out / f"bench-{rep['network']}-{rep['preset']}.md")
    assert bench_main.main(["--from-json", str(tmp_path / "bench-resnet50-default.json"),
                            "--out", str(tmp_path)]) == 0
    assert (tmp_path / "bench-summary-default.md").read_text() == \
        (results / "bench-summary-default.md").read_text()
    assert "summary: skipped " in capsys.readouterr().err


@pytest.mark.parametrize("module, args, message", [
    ("bench.conv_tables", ["--repeat", "0"], "--repeat: must be >= 1, not 0"),
    ("bench.conv_tables", ["--batch", "-2"], "--batch: must be >= 1, not -2"),
    ("bench.tunedb_eval", ["--db", "x.db", "--count", "-5"], "--count: must be >= 1, not -5"),
    ("bench.tunedb_eval", ["--db", "x.db", "--seed", "-1"], "--seed: must be >= 0, not -1"),
    ("bench.tunedb_eval", ["--db", "x.db", "--workers", "0"], "--workers: must be >= 1, not 0"),
    ("bench.tunedb_eval", ["--db", "x.db", "--batch", "abc"], "--batch: 'abc' is not int"),
    ("bench.sta", ["x.sdf", "--top", "0"], "--top: must be >= 1, not 0"),
    ("examples.run", ["cnn", "--seed", "-1"], "--seed: must be >= 0, not -1"),
])
def test_counts_and_seeds_are_range_checked(module, args, message, capsys):
    """``--repeat 0`` ended in an UnboundLocalError, ``--count -5`` evaluated no shapes, a
    negative seed ended in numpy's ValueError after the work had started."""
    import importlib

    main = importlib.import_module(module).main
    with pytest.raises(SystemExit) as info:
        main(args)
    assert info.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("args, message", [
    (["--db", "{tmp}/none.db"], "none.db: no such tuning database"),
    (["--db", "{tmp}/empty.db", "--scheduler", "bogus"], "scheduler must be 'serial'"),
    (["--db", "{tmp}/none.db", "--out", "{tmp}"], "--out {tmp}: is a directory"),
])
def test_tunedb_eval_errors_are_usage_errors(args, message, tmp_path, capsys):
    """They were tracebacks (TuneDBError, ValueError) or, for --out, came after the run."""
    from bench.tunedb_eval import main
    from planner.tunedb.store import TuneDB
    from spec.config import PRESETS

    TuneDB.open(tmp_path / "empty.db", PRESETS["tiny"]).close()   # an empty database
    with pytest.raises(SystemExit) as info:
        main([a.format(tmp=tmp_path) for a in args])
    assert info.value.code == 2
    assert message.format(tmp=tmp_path) in capsys.readouterr().err
