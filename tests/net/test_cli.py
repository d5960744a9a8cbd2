"""``tessera explain``."""

import json

import onnx

from flow import tessera
from planner.net.models import encoder_block, small_cnn


def test_explain_json_lists_every_op(tmp_path, timings_file, capsys):
    path = tmp_path / "cnn.onnx"
    onnx.save(small_cnn(), path)
    rc = tessera.main(["explain", str(path), "--host-timings", str(timings_file), "--json"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out["ops"]) == 12
    assert out["summary"]["accel"] + out["summary"]["host"] == 12
    assert out["summary"]["fused"] >= 4
    assert out["summary"]["tiling_scalar_exprs"] > 0
    assert out["summary"]["tiling_scalar_runtime_exprs"] == 0


def test_explain_table_and_thresholds(tmp_path, timings_file, capsys):
    path = tmp_path / "cnn.onnx"
    onnx.save(small_cnn(), path)
    assert tessera.main(["explain", str(path), "--host-timings", str(timings_file),
                         "--th1", "1.0", "--config", "tiny"]) == 0
    text = capsys.readouterr().out
    assert "th1=1" in text and "conv0" in text and "relu0" in text
    assert "on the accelerator" in text


def test_explain_resolves_symbolic_dims_from_input_shape(tmp_path, timings_file, capsys):
    path = tmp_path / "enc.onnx"
    onnx.save(encoder_block(seq=None, hidden=64, heads=4, ffn=128), path)
    args = ["explain", str(path), "--host-timings", str(timings_file), "--json"]
    assert tessera.main(args) == 2
    assert "--input-shape x=" in capsys.readouterr().err
    assert tessera.main(args + ["--input-shape", "x=1,8,64"]) == 0
    rows = json.loads(capsys.readouterr().out)["ops"]
    assert {r["op_type"] for r in rows} >= {"MatMul", "Softmax", "LayerNormalization"}


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
