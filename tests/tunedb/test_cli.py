"""``tessera tunedb``: build (model dry run), query, stats, export, clear errors."""

import json

import pytest

from planner.__main__ import main as planner_main
from flow.tessera import main as tessera_main
from flow.tunedb_cli import main, random_shapes, workload_shapes

from .conftest import CFG


@pytest.fixture
def built(tmp_path, capsys):
    path = tmp_path / "m.tunedb"
    report = tmp_path / "build.json"
    assert main(["build", "--db", str(path), "--preset", "small", "--gemm", "256,64,256",
                 "--gemm", "64,64,1", "--random", "2", "--measure", "model", "--scheduler",
                 "serial", "--top", "1", "--report", str(report)]) == 0
    return path, json.loads(report.read_text()), capsys.readouterr().out


def test_cli_build_prints_boundary_shapes_with_evidence(built):
    _, report, out = built
    assert report["boundary"] and report["rejected"][0]["shape"] == [64, 64, 8]
    assert "boundary shapes (linear tolerance 2%" in out
    first = report["boundary"][0]
    shape = "x".join(map(str, first["shape"]))
    line = next(l for l in out.splitlines() if l.strip().startswith(shape))
    assert f"ratio {first['parent']['ratio']:.4f}" in line
    for f in first["failed_halvings"]:
        assert f"{f['dim']}/2 -> {f['ratio']:.3f}" in line


def test_cli_query_stats_export(built, capsys, tmp_path):
    path, _, _ = built
    assert main(["query", "--db", str(path), "--gemm", "512,64,512", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["rule"] == "multiple-initial" and res["record"]["shape"] == [256, 64, 256]
    assert main(["query", "--db", str(path), "--gemm", "5,3,7"]) == 0
    assert "rule analytic" in capsys.readouterr().out
    assert main(["stats", "--db", str(path)]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["config_id"] == f"{CFG.config_id:08x}" and stats["records"]["initial/gemm"] == 3
    out = tmp_path / "export.json"
    assert main(["export", "--db", str(path), "--out", str(out)]) == 0
    exported = json.loads(out.read_text())
    assert len(exported["records"]) == sum(stats["records"].values())
    assert exported["config"]["array_rows"] == 8


def test_cli_refuses_a_database_of_another_config(built, capsys):
    path, _, _ = built
    assert main(["query", "--db", str(path), "--preset", "tiny", "--gemm", "8,8,8"]) == 2
    assert "tuning database is for config_id" in capsys.readouterr().err
    assert main(["stats", "--db", str(path) + ".missing"]) == 2
    assert "no such tuning database" in capsys.readouterr().err


def test_cli_tessera_dispatch_and_planner_strategy_db(built, capsys):
    path, _, _ = built
    assert tessera_main(["tunedb", "stats", "--db", str(path)]) == 0
    assert json.loads(capsys.readouterr().out)["schema_version"] == 1
    assert planner_main(["plan", "--gemm", "512,64,512", "--preset", "small", "--strategy",
                         "db", "--db", str(path), "--json"]) == 0
    layer = json.loads(capsys.readouterr().out)["layers"][0]
    assert layer["plan"]["strategy"] == "db:multiple-initial" and layer["gap"] >= 0
    # a convolution run in bands of rows (25,600 outputs, more than small's group table
    # holds) plans its bands from the database too
    from planner import layer_cost
    from planner.__main__ import parse_conv

    spec = "N=1,C=3,H=160,W=160,K=8,R=3,S=3,pad=1"
    assert planner_main(["plan", "--conv", spec, "--preset", "small", "--strategy", "db",
                         "--db", str(path), "--json"]) == 0
    cost = layer_cost(parse_conv(spec), CFG, "db", path)
    assert cost.bands > 1
    assert json.loads(capsys.readouterr().out)["layers"][0]["cycles"] == cost.cycles


def test_cli_shape_sources():
    shapes = dict(workload_shapes("planner/workloads/resnet50.json"))
    g = shapes["resnet50:conv1"]                       # implicit GEMM of the 7x7 stem
    assert (g.m, g.k, g.n) == (64, 147, 12544)
    rnd = random_shapes(CFG, 5, 3)
    assert rnd == random_shapes(CFG, 5, 3) and len({s for _, s in rnd}) == 5
    assert all(s.m % 8 == 0 and s.n % 8 == 0 for _, s in rnd)


@pytest.mark.parametrize("args, message", [
    (["build", "--random", "-5"], "argument --random: must be >= 0, not -5"),
    (["build", "--workers", "0"], "argument --workers: must be >= 1, not 0"),
    (["build", "--seed", "-1"], "argument --seed: must be >= 0, not -1"),
    (["build", "--util-floor", "x"], "argument --util-floor: 'x' is not float"),
    (["query", "--gemm", "8,8,8", "--max-pad", "-1"], "argument --max-pad: must be >= 0"),
    (["query", "--gemm", "8,8,8", "--max-pad", "nan"], "argument --max-pad: must be >= 0"),
])
def test_cli_refuses_out_of_range_numbers(args, message, tmp_path, capsys):
    """--random -5 said "nothing to build", --max-pad -1 was taken: each now names the option."""
    with pytest.raises(SystemExit):
        main([args[0], "--db", str(tmp_path / "t.db"), *args[1:]])
    assert message in capsys.readouterr().err
    assert not (tmp_path / "t.db").exists()


def test_cli_file_errors_are_messages_and_come_first(tmp_path, capsys):
    """--report/--out that cannot be written are refused before the build (the report's
    traceback came after the whole build); a missing workload is a message; a bad scheduler
    leaves no empty database behind."""
    db = tmp_path / "t.db"
    for args, message in [
        (["build", "--gemm", "8,8,8", "--measure", "model", "--report", str(tmp_path)],
         f"--report {tmp_path}: is a directory"),
        (["build", "--workload", str(tmp_path / "none.json"), "--measure", "model"],
         "No such file or directory"),
        (["build", "--gemm", "8,8,8", "--measure", "model", "--scheduler", "bogus"],
         "scheduler must be 'serial', 'local'"),
    ]:
        assert main([args[0], "--db", str(db), *args[1:]]) == 2
        assert message in capsys.readouterr().err
        assert not db.exists()
    assert main(["build", "--db", str(db), "--gemm", "8,8,8", "--measure", "model",
                 "--scheduler", "serial"]) == 0
    capsys.readouterr()
    assert main(["export", "--db", str(db), "--out", str(tmp_path / "no" / "x.json")]) == 2
    assert "directory" in capsys.readouterr().err
