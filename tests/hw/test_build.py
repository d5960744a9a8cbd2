"""hw.build.emit: outputs, reproducibility, reuse, metadata; Amaranth-free imports."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hw.build import OUTPUTS, build_dir, emit
from spec.config import PRESETS, AccelConfig
from spec.regmap import REGISTERS

ROOT = Path(__file__).resolve().parents[2]
CFG = PRESETS["tiny"]


@pytest.fixture(scope="module")
def emitted(tmp_path_factory):
    """One emit of the tiny preset (about 5 s) shared by the module."""
    out = tmp_path_factory.mktemp("build")
    return out, emit(CFG, out)


def _snapshot(path):
    return {name: (path / name).read_bytes() for name in OUTPUTS}


def test_build_emit_writes_every_output(emitted):
    out, path = emitted
    assert path == build_dir(CFG, out) == out / f"cfg-{CFG.config_id:08x}"
    assert path.is_dir()
    for name in ("accel_top.v", "sim_top.v", "config.json", "accel_top.json", "regs.json",
                 "accel_regs.h", "accel_image.h"):
        assert (path / name).is_file() and (path / name).stat().st_size > 0, name
    # no temporary directories are left next to it (only the per-config lock file)
    assert sorted(p.name for p in out.iterdir()) == [path.name, path.name + ".lock"]


def test_build_emit_without_force_reuses_directory(emitted):
    out, path = emitted
    before = {name: (path / name).stat().st_mtime_ns for name in OUTPUTS}
    assert emit(CFG, out) == path
    assert {name: (path / name).stat().st_mtime_ns for name in OUTPUTS} == before


def test_build_emit_force_is_byte_identical(emitted):
    out, path = emitted
    first = _snapshot(path)
    assert emit(CFG, out, force=True) == path
    assert _snapshot(path) == first
    assert sorted(p.name for p in out.iterdir()) == [path.name, path.name + ".lock"]


def test_build_config_json_round_trips(emitted):
    _, path = emitted
    assert AccelConfig.from_json((path / "config.json").read_text()) == CFG


def test_build_verilog_has_top_and_config_id(emitted):
    _, path = emitted
    v = (path / "accel_top.v").read_text()
    assert "module accel_top(" in v
    cid = CFG.config_id
    # Amaranth writes the CONFIG_ID register's constant as a sized literal
    assert f"32'd{cid}" in v or f"32'h{cid:08x}" in v.lower()
    assert "module sim_top(" in (path / "sim_top.v").read_text()


def test_build_verilog_has_no_source_locations(emitted):
    _, path = emitted
    for name in ("accel_top.v", "sim_top.v"):
        text = (path / name).read_text()
        assert str(ROOT) not in text and ".py:" not in text, name


def test_build_regs_json_matches_register_map(emitted):
    _, path = emitted
    regs = json.loads((path / "regs.json").read_text())
    assert regs["config_id"] == CFG.config_id
    assert [(r["name"], r["offset"], r["access"]) for r in regs["registers"]] == \
        [(r.name, r.offset, r.access) for r in REGISTERS]


def test_build_port_metadata_is_json(emitted):
    _, path = emitted
    assert isinstance(json.loads((path / "accel_top.json").read_text()), dict)


def test_build_light_modules_do_not_import_amaranth():
    code = ("import sys\n"
            "import spec.config, spec.desc, spec.regmap, spec.golden, spec.schedule, planner\n"
            "bad = sorted(m for m in sys.modules if m == 'amaranth' or m.startswith('amaranth.'))\n"
            "assert not bad, bad\n")
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True,
                   env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_build_stamp_is_the_imported_sources_not_the_files_now(monkeypatch):
    """A process stamps what it generates with the sources it imported: editing hw/ while a
    test run is going must not label the old code's Verilog with the new files' hash."""
    import hw.build as build

    before = build._source_hash(CFG)

    def edited(self):
        raise AssertionError(f"{self} read again after import")

    monkeypatch.setattr(Path, "read_bytes", edited)
    assert build._source_hash(CFG) == before
    assert build._sources_digest.__doc__ and build._SOURCES == _fresh_digest()


def _fresh_digest():
    out = subprocess.run([sys.executable, "-c", "import hw.build as b; print(b._SOURCES.hex())"],
                         cwd=ROOT, capture_output=True, text=True, check=True)
    return bytes.fromhex(out.stdout.strip())


def test_build_emit_in_one_process_is_byte_identical(tmp_path, monkeypatch):
    """emit converts sim_top in a second process where it has two CPUs; the files are the same
    as from one process."""
    import hw.build as build

    monkeypatch.setattr(build, "_parallel", lambda: True)
    two = _snapshot(emit(CFG, tmp_path / "two"))
    monkeypatch.setattr(build, "_parallel", lambda: False)
    assert _snapshot(emit(CFG, tmp_path / "one")) == two


def test_build_emit_with_edited_sources_converts_in_this_process(tmp_path, monkeypatch):
    """The second process checks it imported the same hw/spec sources as the first; if not
    (the files were edited since this process started), it writes nothing and this process
    converts sim_top with the code its stamp describes."""
    import hw.build as build

    monkeypatch.setattr(build, "_parallel", lambda: True)
    monkeypatch.setattr(build, "_SOURCES", bytes(32))
    calls = []
    convert = build._convert
    monkeypatch.setattr(build, "_convert", lambda top, name, *a: (calls.append(name),
                                                                  convert(top, name, *a)))
    path = emit(CFG, tmp_path)
    assert calls == ["accel_top", "sim_top"]
    assert "module sim_top(" in (path / "sim_top.v").read_text()
    assert sorted(p.name for p in path.iterdir() if p.name.startswith(".")) == [".stamp"]


def test_build_emit_reports_a_failed_second_process(tmp_path, monkeypatch):
    """A second process that fails makes emit raise with its output and leave nothing."""
    import hw.build as build

    def failing(name, tmp, poison):
        with open(tmp / f".{name}.log", "w") as log:
            return subprocess.Popen(
                [sys.executable, "-c", "import sys; print('no luck'); sys.exit(2)", name],
                stdout=log, stderr=subprocess.STDOUT)

    monkeypatch.setattr(build, "_parallel", lambda: True)
    monkeypatch.setattr(build, "_start_convert", failing)
    with pytest.raises(RuntimeError, match="(?s)sim_top.v failed .exit status 2.*no luck"):
        emit(CFG, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [build_dir(CFG, tmp_path).name + ".lock"]


def test_build_emit_accepts_a_relative_directory(tmp_path, monkeypatch):
    """The second process runs in the project's directory: a relative ``out`` still works."""
    import hw.build as build

    monkeypatch.setattr(build, "_parallel", lambda: True)
    monkeypatch.chdir(tmp_path)
    assert (emit(CFG, "out") / "sim_top.v").is_file()


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads process states from /proc")
def test_build_second_process_exits_when_its_parent_is_killed(tmp_path):
    """A parent killed by SIGKILL runs no cleanup; the second process notices it is orphaned and
    exits without writing (before, it converted on for tens of seconds into a directory no one
    would read)."""
    (tmp_path / "config.json").write_text(CFG.to_json())
    parent = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time; from pathlib import Path; from hw.build import _start_convert\n"
         "child = _start_convert('sim_top', Path(sys.argv[1]), False)\n"
         "print(child.pid, flush=True); time.sleep(600)", str(tmp_path)],
        stdout=subprocess.PIPE, text=True, cwd=ROOT)
    with parent:
        child = int(parent.stdout.readline())
        parent.kill()

    deadline = 120          # generous: the check is that it ends, not how fast
    while not _gone(child) and deadline > 0:
        time.sleep(0.25)
        deadline -= 0.25
    assert _gone(child), "the second process outlived its killed parent"
    assert not (tmp_path / "sim_top.v").exists()


def _gone(pid: int) -> bool:
    """Whether process ``pid`` has ended (a zombie counts: it runs nothing)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return True
    return state in ("Z", "X")


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads process states from /proc")
def test_build_second_process_watches_its_parent_while_it_works():
    """The watcher, not the start-up check: a process that has passed the check and is busy
    (here: sleeping 10 minutes) ends once its parent is killed."""
    code = ("import os, subprocess, sys, time\n"
            "child = subprocess.Popen([sys.executable, '-c', 'import os, time; "
            "from hw.build import _exit_with_parent; _exit_with_parent(os.getppid()); "
            "print(\"watching\", flush=True); time.sleep(600)'])\n"
            "print(child.pid, flush=True); time.sleep(600)")
    with subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                          cwd=ROOT) as parent:
        child = int(parent.stdout.readline())
        assert parent.stdout.readline().strip() == "watching"
        parent.kill()
    waited = 0.0
    while not _gone(child) and waited < 60:     # the check is that it ends, not how fast
        time.sleep(0.25)
        waited += 0.25
    assert _gone(child), "the watcher did not end the process"


def test_hw_cli_refuses_bad_config_files_and_outputs(tmp_path, capsys):
    """``python -m hw``: a config file that is not JSON, and an --out that is a file, are
    usage errors naming the problem (they were a JSONDecodeError and a FileExistsError
    traceback)."""
    from hw.__main__ import main

    bad = tmp_path / "c.json"
    bad.write_text("nojson")
    afile = tmp_path / "afile"
    afile.write_text("")
    for args, message in [(["--config", str(bad)], "AccelConfig JSON is not valid JSON"),
                          (["--preset", "tiny", "--out", str(afile)],
                           f"--out {afile}: exists and is not a directory")]:
        with pytest.raises(SystemExit) as exc:
            main(args)
        assert exc.value.code == 2 and message in capsys.readouterr().err
