"""``tessera explain``, and ``tessera compile`` taking its decisions."""

import contextlib
import io
import itertools
import json
import re
import subprocess
import sys
import threading
import zipfile

import numpy as np
import onnx
import pytest
from onnx import numpy_helper
from rich.console import Console

from flow import cli, tessera
from flow.cli import _held_stdout, _progress_display, prepare_model
from flow.compile import progress
from planner.net.models import encoder_block, small_cnn
from spec.config import PRESETS
from tb.tools import heartbeat, missing_tool

from .conftest import LIGHT


def test_explain_json_lists_every_op(tmp_path, timings_file, capsys):
    path = tmp_path / "cnn.onnx"
    onnx.save(small_cnn(), path)
    rc = tessera.main(["explain", str(path), "--host-timings", str(timings_file), "--json"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    # the lowered network: Q/DQ and Relu nodes fused into the four conv layers and the fc
    assert len(out["ops"]) == 13
    assert (out["summary"]["accel"], out["summary"]["host"]) == (5, 8)
    assert {r["op"] for r in out["ops"] if r["decision"] == "accel"} == \
        {"conv0", "conv1", "conv2", "conv3", "fc"}
    assert (out["th1"], out["th2"]) == (0.0, None)
    assert out["summary"]["tiling_scalar_exprs"] > 0
    assert out["summary"]["tiling_scalar_runtime_exprs"] == 0
    assert out["host_timings"] == str(timings_file)


def test_explain_table_and_thresholds(tmp_path, timings_file, capsys):
    path = tmp_path / "cnn.onnx"
    onnx.save(small_cnn(), path)
    assert tessera.main(["explain", str(path), "--host-timings", str(timings_file),
                         "--th1", "1.5", "--th2", "50000", "--config", "tiny"]) == 0
    text = capsys.readouterr().out
    assert "th1=1.5, th2=50000us" in text and "conv0" in text and "gap" in text
    assert "on the accelerator" in text
    # which host timings decided (a stale cache moves layers: say which file, how old)
    assert re.search(rf"Host costs from {re.escape(str(timings_file))} \(written "
                     r"\d{4}-\d\d-\d\d \d\d:\d\d; ", " ".join(text.split()))


def test_compile_takes_the_decisions_explain_prints(tmp_path, timings_file, capsys):
    """Same model, thresholds and host timings: the layers ``tessera explain`` puts on the host
    are the layers ``tessera compile`` runs on the host, with the same reasons."""
    path = tmp_path / "cnn.onnx"
    onnx.save(small_cnn(), path)
    fast = json.loads(timings_file.read_text())
    fast["ns_per_mac"] = 0.01             # convs go to the host on small, the fc does not
    timings_file.write_text(json.dumps(fast))
    opts = ["--host-timings", str(timings_file), "--th1", "1.5", "--th2", "50000",
            "--config", "small"]
    assert tessera.main(["explain", str(path), "--json"] + opts) == 0
    rows = json.loads(capsys.readouterr().out)["ops"]
    assert tessera.main(["compile", str(path), "-o", str(tmp_path / "cnn.tsr")] + opts) == 0
    host = dict(line.strip()[len("host: "):].split(": ", 1)
                for line in capsys.readouterr().out.splitlines()
                if line.startswith("  host: "))
    layers = {"conv0", "conv1", "conv2", "conv3", "fc"}
    assert host == {r["op"]: r["reason"] for r in rows
                    if r["op"] in layers and r["decision"] == "host"}
    assert set(host) == {"conv0", "conv1", "conv2", "conv3"}


def test_explain_resolves_symbolic_dims_from_input_shape(tmp_path, timings_file, capsys):
    path = tmp_path / "enc.onnx"
    onnx.save(encoder_block(seq=None, hidden=64, heads=4, ffn=128), path)
    args = ["explain", str(path), "--host-timings", str(timings_file), "--json"]
    assert tessera.main(args) == 2
    assert "--input-shape x=" in capsys.readouterr().err
    assert tessera.main(args + ["--input-shape", "x=1,8,64"]) == 0
    rows = json.loads(capsys.readouterr().out)["ops"]
    assert {r["op_type"] for r in rows} >= {"MatMul", "Softmax", "LayerNormalization"}
    # calibration inputs larger than the machine's memory: refused before they are generated
    # (numpy's MemoryError, 298 GiB, for a 4 x 100000 x 100000 input); the input may be larger
    # than the device memory (a host op can shrink it first)
    assert tessera.main(args + ["--input-shape", "x=1,100000000000,64"]) == 2
    assert re.search(r"graph input 'x' of shape \[1, 100000000000, 64\]: 4 generated "
                     r"calibration samples of it need 190,734.9 GiB, more than this "
                     r"machine's [\d,.]+ GiB \(give --calib samples",
                     capsys.readouterr().err)


def test_explain_errors_name_the_problem(tmp_path, timings_file, capsys):
    path = tmp_path / "cnn.onnx"
    onnx.save(small_cnn(), path)
    base = ["explain", str(path), "--host-timings", str(timings_file)]
    assert tessera.main(base + ["--config", "huge"]) == 2
    assert "--config must be a preset" in capsys.readouterr().err
    assert tessera.main(base + ["--input-shape", "x"]) == 2
    assert "NAME=D0,D1" in capsys.readouterr().err
    assert tessera.main(["explain", str(tmp_path / "nope.onnx")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert tessera.main(base + ["--th1", "-1"]) == 2            # the option named, not the
    assert "tessera explain: --th1 must be a number >= 0" in capsys.readouterr().err  # class


#: Opset-6 models of the onnx wheel's PyTorch-converted test data (batch 2: every image runs
#: on the accelerator).
OPSET6 = ["test_Conv2d", "test_Conv2d_depthwise_strided", "test_Conv2d_groups",
          "test_Conv2d_dilated", "test_Linear", "test_Linear_no_bias"]


@pytest.mark.rtl
@pytest.mark.parametrize("name", OPSET6)
def test_opset6_models_explain_compile_and_run_on_the_rtl_bit_exact(name, tmp_path, capsys,
                                                                    monkeypatch):
    reason = missing_tool("verilator")
    if reason:
        pytest.skip(reason)
    shown = []          # what a terminal's progress line would show (--compare's golden run)

    @contextlib.contextmanager
    def display(prog, console=None):
        yield lambda ev: shown.append((prog, ev["what"], ev["done"], ev["total"]))

    monkeypatch.setattr(cli, "_progress_display", display)
    model = LIGHT.parent / "pytorch-converted" / name / "model.onnx"
    assert onnx.load(model).opset_import[0].version == 6
    tensor = onnx.TensorProto()
    tensor.ParseFromString((model.parent / "test_data_set_0" / "input_0.pb").read_bytes())
    np.save(tmp_path / "x.npy", numpy_helper.to_array(tensor))
    assert tessera.main(["explain", str(model), "--config", "small", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["ops"]
    accel = {r["op"] for r in rows if r["decision"] == "accel"}
    assert len(accel) == 1
    tsr = tmp_path / "m.tsr"
    assert tessera.main(["compile", str(model), "-o", str(tsr), "--config", "small"]) == 0
    capsys.readouterr()
    report = tmp_path / "run.json"
    assert tessera.main(["run", str(tsr), "--input", str(tmp_path / "x.npy"), "--sim",
                         "verilator", "--compare", "--json", str(report),
                         "--workdir", str(tmp_path / "sim")]) == 0
    out = json.loads(report.read_text())
    assert all(c["bit_exact"] for c in out["vs_golden"].values())
    golden = [e for e in shown if e[1] == "the golden device"]
    total = golden[0][3]
    assert golden[0] == ("tessera run --compare", "the golden device", 0, total)
    assert golden[-1][2] == total > 0 and [e[2] for e in golden] == sorted(e[2] for e in golden)
    assert ("tessera run --compare", "onnxruntime", 0, None) in shown
    layers = [r for r in out["layers"] if r["where"] != "host"]
    assert {r["layer"] for r in layers} == accel and all(r["cycles"] > 0 for r in layers)


def test_firmware_validate_and_inspect_read_every_image_of_a_tsr(tmp_path, capsys):
    path, tsr = tmp_path / "cnn.onnx", tmp_path / "cnn.tsr"
    onnx.save(small_cnn(), path)
    assert tessera.main(["compile", str(path), "-o", str(tsr), "--config", "small"]) == 0
    capsys.readouterr()
    assert tessera.main(["firmware", "validate", str(tsr)]) == 0
    out = capsys.readouterr().out.splitlines()
    cid = PRESETS["small"].config_id
    assert out[0] == f"{tsr}: compiled network 'cnn' for small ({cid:#010x}), 2 images"
    assert out[1].startswith("segment0 (conv0, conv1, conv2, conv3), ")
    assert out[1].endswith(" bytes: valid") and out[2].startswith("segment1 (fc), ")
    # another configuration: refused once, with both presets named (every image's three to six
    # problems that follow from the mismatch buried it)
    assert tessera.main(["firmware", "validate", str(tsr), "--preset", "tiny"]) == 1
    tiny = PRESETS["tiny"].config_id
    assert capsys.readouterr().out.splitlines()[1:] == [
        f"not for tiny ({tiny:#010x}): the images are small ({cid:#010x})'s (every image's "
        f"config_id differs; compile the model for tiny ({tiny:#010x}) to run it there)"]
    assert tessera.main(["firmware", "inspect", str(tsr)]) == 0
    out = capsys.readouterr().out
    assert out.count("Tessera firmware image") == 2 and "== segment1 (fc)" in out
    # a corrupted image inside the archive: its problems, indented under it
    with zipfile.ZipFile(tsr) as z:
        members = {n: z.read(n) for n in z.namelist()}
    blob = bytearray(members["images/segment1.bin"])
    blob[64] ^= 0xFF                        # its first record, under the header's CRC
    members["images/segment1.bin"] = bytes(blob)
    with zipfile.ZipFile(tsr, "w") as z:
        for n, data in members.items():
            z.writestr(n, data)
    assert tessera.main(["firmware", "validate", str(tsr)]) == 1
    captured = capsys.readouterr()
    out = captured.out.splitlines()
    assert out[1].endswith(": valid") and "problem(s)" in out[2]
    assert captured.err.rstrip().endswith(" problem(s) found in 1 of 2 images")
    assert any(line.startswith("  ") and "crc" in line.lower() for line in out[3:])
    # python -m firmware itself says what a .tsr is
    assert tessera.main(["firmware", "validate", str(tmp_path / "missing.tsr")]) == 2
    assert "cannot read image" in capsys.readouterr().err


def test_long_silent_steps_report_their_progress():
    """Verilog generation and the simulator build say what they do, every ``every_s`` seconds,
    and when they end (``tessera run`` shows it on its progress line). ``elapsed_s`` comes from
    the clock given, here a counter of its own reads (1, 2, 3, ...), not time: what is asserted
    is that every event reads the injected clock once, never the machine's clock."""
    ticks = itertools.count()
    lock = threading.Lock()

    def clock() -> float:
        with lock:
            return float(next(ticks))

    events, two_beats = [], threading.Event()

    def listen(event: dict) -> None:
        events.append(event)
        if sum(e["event"] == "build" for e in events) >= 3:
            two_beats.set()

    with heartbeat(listen, "building", every_s=0.01, clock=clock):
        assert two_beats.wait(timeout=60), "no periodic beat arrived"
    assert events[0] == {"event": "build", "what": "building", "elapsed_s": 1.0}
    assert [e["event"] for e in events[1:-1]] == ["build"] * (len(events) - 2)
    assert events[-1]["event"] == "built"
    clock_reads = [e["elapsed_s"] for e in events]      # the counter's values, not seconds
    assert clock_reads == [float(n) for n in range(1, len(events) + 1)]   # one read each
    silent = []
    with heartbeat(None, "nothing", every_s=0.01, clock=clock):  # no listener: no events
        silent.append("ran")
    assert silent == ["ran"] and len(events) == len(clock_reads)


def test_tessera_stops_quietly_when_its_reader_goes_away(tmp_path):
    """``tessera firmware inspect NET.tsr | head -1``: no BrokenPipeError traceback, exit 0.
    The dump of the small CNN's two images is about 80 kB, more than a pipe's 64 kB buffer,
    so the writer does meet the closed pipe."""
    path, tsr = tmp_path / "cnn.onnx", tmp_path / "cnn.tsr"
    onnx.save(small_cnn(), path)
    assert tessera.main(["compile", str(path), "-o", str(tsr), "--config", "small"]) == 0
    proc = subprocess.Popen([sys.executable, "-m", "flow.tessera", "firmware", "inspect",
                             str(tsr)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout.readline().startswith(str(tsr).encode())
    proc.stdout.close()
    with proc.stderr:
        err = proc.stderr.read()
    assert proc.wait(timeout=60) == 0
    assert b"Traceback" not in err and b"BrokenPipe" not in err, err


def test_explain_takes_seeded_weights_as_compile_does(tmp_path, timings_file, capsys):
    """``--seeded-weights`` is part of the front end both commands share: explain's rows
    for the seeded model equal those of the model seeded by hand (an invalid seed is refused
    as compile refuses it)."""
    from planner.net.lower import seeded_weights

    path, seeded = tmp_path / "cnn.onnx", tmp_path / "seeded.onnx"
    onnx.save(small_cnn(), path)
    onnx.save(seeded_weights(small_cnn(), 4), seeded)
    opts = ["--host-timings", str(timings_file), "--json"]
    assert tessera.main(["explain", str(path), "--seeded-weights", "4"] + opts) == 0
    rows = json.loads(capsys.readouterr().out)["ops"]
    assert tessera.main(["explain", str(seeded)] + opts) == 0
    assert rows == json.loads(capsys.readouterr().out)["ops"]
    with pytest.raises(SystemExit):
        tessera.main(["explain", str(path), "--seeded-weights", "-1"])


def test_prepare_model_reports_each_stage(tmp_path):
    """The front end's stages, in order, as each starts (the quantisation is the long one)."""
    path = tmp_path / "cnn.onnx"
    onnx.save(small_cnn(), path)
    events = []
    prepare_model(path, {}, seed=3, samples=2, on_event=events.append)
    assert [e["what"] for e in events] == [
        "loading cnn.onnx", "seeding the weights", "folding",
        "quantising with onnxruntime (2 calibration samples)", "importing the quantised model",
        "lowering"]
    assert all(e["total"] is None and e["done"] == 0 for e in events)


def test_progress_display_draws_each_stage_on_a_terminal_and_nothing_elsewhere(tmp_path,
                                                                               capsys):
    """On a terminal the line shows the stage, its parts done and the time; it is transient
    (gone when the command prints its results), and without a terminal (a log, a pipe, these
    tests) ``tessera compile`` writes nothing but its results."""
    out = io.StringIO()
    term = Console(file=out, force_terminal=True, width=100, color_system=None)
    with _progress_display("tessera compile", console=term) as on_event:
        progress(on_event, "quantising with onnxruntime (4 calibration samples)")
        assert "tessera compile: quantising with onnxruntime (4 calibration samples)" in \
            out.getvalue()
        for i in range(1, 4):
            progress(on_event, "planning layers", i, 3)
            assert "tessera compile: planning layers" in out.getvalue().splitlines()[-1]
            # parts done, then the stage's elapsed time (whatever it is: h:mm:ss)
            assert re.search(f" {i}/3 \\d+:\\d\\d:\\d\\d", out.getvalue())
    with _progress_display("tessera compile", console=Console(file=io.StringIO())) as on_event:
        assert on_event is None                     # no terminal: nothing to draw
    # a redrawn total (the compiler rebuilds its runs when the builder refuses a layer)
    with _progress_display("tessera compile", console=term) as on_event:
        progress(on_event, "building images", 5, 9)
        progress(on_event, "building images", 0, 7)
        assert re.search(r" 0/7 \d+:\d\d:\d\d", out.getvalue().splitlines()[-1])
    # what the command prints beside the line waits until it is gone, also on an error
    capsys.readouterr()
    with pytest.raises(RuntimeError):
        with _held_stdout():
            print("vs golden device: bit-exact")
            assert capsys.readouterr().out == ""
            raise RuntimeError
    assert capsys.readouterr().out == "vs golden device: bit-exact\n"
    path, tsr = tmp_path / "cnn.onnx", tmp_path / "cnn.tsr"
    onnx.save(small_cnn(), path)
    assert tessera.main(["compile", str(path), "-o", str(tsr), "--config", "small"]) == 0
    captured = capsys.readouterr()
    assert captured.err == "" and captured.out.startswith(f"{tsr}: 2 image segments")


def test_results_tables_fit_a_terminal_and_keep_whole_rows_in_a_log(monkeypatch):
    """On a terminal the table takes its width (a fixed 200 columns wrapped every row of an
    80-column one); in a log or a pipe it keeps the fixed width, whole rows."""
    assert cli._results_console(200).width == 200            # (pytest's stdout: not a tty)
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True, raising=False)
    monkeypatch.setenv("COLUMNS", "80")
    assert cli._results_console(200).width == 80
