"""``python -m firmware``: inspect and validate from the command line."""

import subprocess
import sys
import zipfile

import pytest

from firmware.__main__ import main
from firmware.image import encode

from .test_image import CFG, legal_image, patch_header, patch_layer


@pytest.fixture
def image_file(tmp_path):
    path = tmp_path / "net.img"
    path.write_bytes(encode(legal_image()))
    return path


def test_cli_inspect_prints_dump(image_file, capsys):
    assert main(["inspect", str(image_file)]) == 0
    out = capsys.readouterr().out
    assert "magic" in out and "layer 0" in out and "GEMM" in out


def test_cli_validate_valid(image_file, capsys):
    assert main(["validate", str(image_file), "--preset", "tiny"]) == 0
    size = image_file.stat().st_size
    assert capsys.readouterr().out == f"{image_file}: firmware image, {size} bytes\nvalid\n"


def test_cli_refuses_a_zip_archive_and_says_what_it_is(tmp_path, capsys):
    """A .tsr compiled network is a zip archive: the image commands say so instead of reading
    its bytes as a header."""
    path = tmp_path / "net.tsr"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("plan.json", "{}")
    for command in ("validate", "inspect"):
        assert main([command, str(path)]) == 2
        err = capsys.readouterr().err
        assert "is a zip archive (a compiled network .tsr?), not a firmware image" in err
        assert f"tessera firmware validate|inspect {path}" in err


def test_cli_validate_config_file(image_file, tmp_path, capsys):
    cfg = tmp_path / "cfg.json"
    cfg.write_text(CFG.to_json())
    assert main(["validate", str(image_file), "--config", str(cfg)]) == 0
    assert "valid" in capsys.readouterr().out


def test_cli_validate_prints_every_problem(image_file, capsys):
    blob = patch_layer(patch_header(image_file.read_bytes(), "format_version", 4), "act_max", 999)
    image_file.write_bytes(blob)
    assert main(["validate", str(image_file), "--preset", "tiny"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert any("format_version=4" in line for line in out)
    assert any("layer 0: BAD_LAYER: act_max=999" in line for line in out)


def test_cli_validate_wrong_preset_names_config_id(image_file, capsys):
    assert main(["validate", str(image_file)]) == 1
    assert f"config_id={CFG.config_id:#010x}" in capsys.readouterr().out


def test_cli_unreadable_files_are_clean_errors(tmp_path, image_file, capsys):
    assert main(["inspect", str(tmp_path / "missing.img")]) == 2
    assert "cannot read image" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text('{"array_rows": 3}')
    assert main(["validate", str(image_file), "--config", str(bad)]) == 2
    assert "array_rows" in capsys.readouterr().err


def test_cli_module_entry_point(image_file):
    run = subprocess.run([sys.executable, "-m", "firmware", "validate", str(image_file),
                          "--preset", "tiny"], capture_output=True, text=True, check=False)
    assert run.returncode == 0 and run.stdout.endswith("bytes\nvalid\n"), run.stderr
