"""``python -m planner`` and ``python -m firmware`` argument errors: exit status 2 and a message
naming the option and its allowed values; never a traceback."""

import json

import pytest

import firmware.__main__ as fw_cli
import planner.__main__ as pl_cli
from spec.config import PRESETS

PRESET_NAMES = list(PRESETS)


def planner(capsys, *argv) -> str:
    """Run ``python -m planner`` in-process; return stderr (exit status 2 asserted)."""
    try:
        status = pl_cli.main(list(argv))
    except SystemExit as exc:        # argparse errors
        status = exc.code
    assert status == 2
    return capsys.readouterr().err


def firmware(capsys, *argv) -> str:
    try:
        status = fw_cli.main(list(argv))
    except SystemExit as exc:
        status = exc.code
    assert status == 2
    return capsys.readouterr().err


# -- planner: shapes given on the command line -------------------------------------------------

@pytest.mark.parametrize("text", ["1,2", "1,2,3,4", "a,b,c", "-1,2,3", "1.5,2,3", ""])
def test_planner_gemm_syntax(capsys, text):
    err = planner(capsys, "plan", f"--gemm={text}")
    assert f"error: --gemm takes M,K,N (three positive integers), not {text!r}" in err


@pytest.mark.parametrize("text, field", [("0,4,4", "m"), ("4,16777216,4", "k")])
def test_planner_gemm_range(capsys, text, field):
    err = planner(capsys, "plan", "--gemm", text)
    assert f"error: GemmShape.{field} must be an int in [1, 16777215]" in err


@pytest.mark.parametrize("item", ["X=1", "N", "N=a", "stride=-1", "pads=1", ""])
def test_planner_conv_items(capsys, item):
    err = planner(capsys, "plan", "--conv", f"N=1,C=4,H=6,W=6,K=4,R=3,S=3,{item}")
    assert f"error: --conv item {item!r} must be KEY=INT with KEY one of N, C, H, W, K, R, S, " \
           f"stride, stride_h" in err
    assert "dilation_w, groups" in err


@pytest.mark.parametrize("text, missing", [("N=1,C=3", "H, W, K, R, S"),
                                           ("C=4,H=6,W=6,K=4,R=3,S=3", "N"),
                                           ("stride=2", "N, C, H, W, K, R, S")])
def test_planner_conv_missing(capsys, text, missing):
    err = planner(capsys, "plan", "--conv", text)
    assert f"error: --conv misses {missing} (N, C, H, W, K, R and S are required)" in err


@pytest.mark.parametrize("extra, message", [
    ("pad=2", "ConvShape.pad_top must be an int in [0, 1], not 2"),
    ("groups=3", "ConvShape.groups must be an int in [1, 2], not 3"),
    ("stride=0", "ConvShape.stride_h must be an int in [1, 4096], not 0"),
])
def test_planner_conv_shape_range(capsys, extra, message):
    err = planner(capsys, "plan", "--conv", f"N=1,C=2,H=6,W=6,K=4,R=2,S=2,{extra}")
    assert f"error: {message}" in err


# -- planner: options --------------------------------------------------------------------------

@pytest.mark.parametrize("preset", ["huge", "Tiny", ""])
def test_planner_preset(capsys, preset):
    err = planner(capsys, "plan", "--gemm", "8,8,8", "--preset", preset)
    assert f"error: --preset must be one of {', '.join(PRESET_NAMES)}, not {preset!r}" in err


@pytest.mark.parametrize("cmd", ["plan", "report"])
def test_planner_config_file_range(capsys, tmp_path, cmd):
    cfg = tmp_path / "cfg.json"
    cfg.write_text(json.dumps({**PRESETS["tiny"].to_dict(), "array_rows": 3}))
    args = ["--gemm", "8,8,8"] if cmd == "plan" else []
    err = planner(capsys, cmd, "--config", str(cfg), *args)
    assert f"error: --config {cfg}: AccelConfig.array_rows must be a power of two in [2, 64], " \
           f"not 3" in err


@pytest.mark.parametrize("option", ["--config", "--workload"])
def test_planner_unreadable_file(capsys, tmp_path, option):
    missing = str(tmp_path / "missing.json")
    args = ["plan", option, missing] + (["--gemm", "8,8,8"] if option == "--config" else [])
    err = planner(capsys, *args)
    assert f"error: cannot read {missing!r}: No such file or directory" in err
    assert "Traceback" not in err


def test_planner_bad_workload_file(capsys, tmp_path):
    wl = tmp_path / "w.json"
    wl.write_text(json.dumps({"layers": [{"kind": "gemm", "M": 8, "K": 8, "N": 8, "count": 0}]}))
    err = planner(capsys, "plan", "--workload", str(wl))
    assert (f"error: {wl}: workload layer 0 (layer0): count must be an int in [1, 2147483647], "
            f"not 0") in err


@pytest.mark.parametrize("strategy", ["fastest", "BEST"])
def test_planner_strategy_choice(capsys, strategy):
    from planner import STRATEGIES
    err = planner(capsys, "plan", "--gemm", "8,8,8", "--strategy", strategy)
    assert f"argument --strategy: invalid choice: {strategy!r}" in err
    assert all(repr(s) in err for s in STRATEGIES)


def test_planner_plan_needs_one_workload(capsys):
    err = planner(capsys, "plan")
    assert "one of the arguments --gemm --conv --workload is required" in err
    err = planner(capsys, "plan", "--gemm", "8,8,8", "--conv", "N=1")
    assert "argument --conv: not allowed with argument --gemm" in err


@pytest.mark.parametrize("argv, fragment", [
    ([], "the following arguments are required: cmd"),
    (["simulate"], "argument cmd: invalid choice: 'simulate' (choose from 'plan', 'report')"),
])
def test_planner_subcommand(capsys, argv, fragment):
    assert fragment in planner(capsys, *argv)


@pytest.mark.parametrize("item, field", [("R=5", "kernel_h"), ("stride_w=1", "stride_w")])
def test_planner_conv_field_twice(capsys, item, field):
    """(``R=3,...,R=5`` planned R=5 silently; an alias and its field are one field.)"""
    err = planner(capsys, "plan", "--conv", f"N=1,C=4,H=8,W=8,K=4,R=3,S=3,stride=2,{item}")
    assert f"error: --conv sets {field} twice (item {item!r})" in err


def test_planner_report_out_directory(capsys, tmp_path):
    """Refused before the report is computed (it said "cannot read" after it)."""
    err = planner(capsys, "report", "--preset", "tiny", "--out", str(tmp_path))
    assert f"error: --out {tmp_path}: is a directory, not a file" in err


def test_planner_config_not_utf8(capsys, tmp_path):
    (tmp_path / "cfg.json").write_bytes(b"\xff\xfe{}")
    err = planner(capsys, "plan", "--gemm", "8,8,8", "--config", str(tmp_path / "cfg.json"))
    assert f"error: --config {tmp_path}/cfg.json: 'utf-8' codec can't decode" in err


def test_planner_report_doc_markers(capsys, tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text("# no markers\n")
    wl = tmp_path / "w.json"
    wl.write_text(json.dumps({"layers": [{"kind": "gemm", "M": 8, "K": 8, "N": 8}]}))
    err = planner(capsys, "report", "--preset", "tiny", "--workloads", str(wl), "--doc",
                  str(doc))
    assert f"error: {doc} has no {pl_cli.REPORT_BEGIN} ... {pl_cli.REPORT_END} section" in err
    assert doc.read_text() == "# no markers\n"


# -- firmware ----------------------------------------------------------------------------------

@pytest.fixture
def image_file(tmp_path):
    path = tmp_path / "x.img"
    path.write_bytes(bytes(64))
    return path


@pytest.mark.parametrize("command", ["inspect", "validate"])
def test_firmware_unreadable_image(capsys, tmp_path, command):
    missing = str(tmp_path / "nope.img")
    err = firmware(capsys, command, missing)
    assert f"error: cannot read image {missing!r}: No such file or directory" in err


@pytest.mark.parametrize("command", ["inspect", "validate"])
@pytest.mark.parametrize("content, fragment", [
    (b"# README\n" * 40, "is not a firmware image: it starts with 23205245, not the magic "
                         "54535241"),
    (b"", "is not a firmware image: it starts with nothing"),
    (b"TSRA" + bytes(20), "is truncated: 24 bytes, less than the 64-byte header"),
])
def test_firmware_not_an_image(capsys, tmp_path, command, content, fragment):
    """A text file used to be listed as a "firmware image" with 19 problems (exit 1), and a
    truncated one was inspected with exit 0: both are not images (exit 2)."""
    path = tmp_path / "x.img"
    path.write_bytes(content)
    err = firmware(capsys, command, str(path))
    assert f"error: {path} {fragment}" in err


def test_firmware_options_are_not_abbreviated(capsys, tmp_path):
    """`--pre small` was taken as --preset by argparse while `tessera firmware` checked for the
    literal --preset, and validated against the image's own config."""
    with pytest.raises(SystemExit):
        fw_cli.main(["validate", str(tmp_path / "x.img"), "--pre", "small"])
    assert "unrecognized arguments: --pre small" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["inspect", "validate"])
def test_firmware_tsr_archive(capsys, tmp_path, command):
    path = tmp_path / "net.tsr"
    path.write_bytes(fw_cli.ZIP_MAGIC + bytes(60))
    err = firmware(capsys, command, str(path))
    assert f"error: {path} is a zip archive (a compiled network .tsr?), not a firmware image" \
        in err


def test_firmware_unreadable_config(capsys, tmp_path, image_file):
    missing = str(tmp_path / "cfg.json")
    err = firmware(capsys, "validate", str(image_file), "--config", missing)
    assert f"error: cannot read config {missing!r}: No such file or directory" in err


@pytest.mark.parametrize("content, fragment", [
    (json.dumps({"array_rows": 3}), "AccelConfig.array_rows must be a power of two in [2, 64], "
                                    "not 3"),
    (json.dumps({"bogus": 1}), "unknown AccelConfig field(s) bogus; known fields are "),
    ("[1]", "AccelConfig JSON must be an object of fields, not list"),
    ('{"array_rows": 8, "array_rows": 8}', "duplicate AccelConfig field 'array_rows' in JSON"),
])
def test_firmware_bad_config(capsys, tmp_path, image_file, content, fragment):
    cfg = tmp_path / "cfg.json"
    cfg.write_text(content)
    err = firmware(capsys, "validate", str(image_file), "--config", str(cfg))
    assert f"error: bad config {str(cfg)!r}: {fragment}" in err


@pytest.mark.parametrize("preset", ["huge", "Default"])
def test_firmware_preset_choice(capsys, image_file, preset):
    err = firmware(capsys, "validate", str(image_file), "--preset", preset)
    assert f"argument --preset: invalid choice: {preset!r}" in err
    assert all(repr(name) in err for name in PRESET_NAMES)


@pytest.mark.parametrize("value", ["abc", "0", "-4", "1.5", "0xZZ", ""])
def test_firmware_device_bytes(capsys, image_file, value):
    err = firmware(capsys, "validate", str(image_file), "--device-bytes", value)
    assert f"argument --device-bytes: must be a positive int (decimal or 0x hex), not " \
           f"{value!r}" in err


@pytest.mark.parametrize("argv, fragment", [
    ([], "the following arguments are required: command"),
    (["dump"], "argument command: invalid choice: 'dump' (choose from 'inspect', 'validate')"),
    (["validate"], "the following arguments are required: image"),
])
def test_firmware_subcommand(capsys, argv, fragment):
    assert fragment in firmware(capsys, *argv)


def test_firmware_preset_and_config_exclusive(capsys, image_file):
    err = firmware(capsys, "validate", str(image_file), "--preset", "tiny", "--config", "c.json")
    assert "argument --config: not allowed with argument --preset" in err


def test_firmware_device_bytes_hex_accepted(capsys, image_file):
    assert fw_cli._device_bytes("0x400000") == 0x400000
    assert fw_cli._device_bytes("4096") == 4096
