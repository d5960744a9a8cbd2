"""``python -m planner``: plan and report."""

import json
from pathlib import Path

from planner.__main__ import main, parse_conv
from planner.shapes import ConvShape


def test_cli_plan_gemm_json(capsys):
    assert main(["plan", "--gemm", "64,64,64", "--preset", "tiny", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    layer = out["layers"][0]
    assert layer["plan"]["m"] == 64 and layer["gap"] >= 0
    assert layer["counters"]["total_cycles"] == layer["plan"]["predicted_cycles"] == \
        layer["cycles"] == out["total_cycles"]


def test_cli_plan_conv_table(capsys):
    assert main(["plan", "--conv", "N=1,C=16,H=8,W=8,K=8,R=3,S=3,pad=1", "--preset", "tiny",
                 "--strategy", "seed"]) == 0
    out = capsys.readouterr().out
    assert "8x144x64" in out and "gap to oracle" in out


def test_cli_plan_depthwise_on_the_mesh_says_so(capsys):
    """A depthwise layer the mesh runs (stride 1 or 2): its cycles are the mesh model's, and
    the table says ``mesh`` where a GEMM's strategy goes."""
    from planner import layer_cost
    from spec.config import PRESETS

    for stride, h in ((1, 56), (2, 112)):
        spec = f"N=1,C=96,H={h},W={h},K=96,R=3,S=3,stride={stride},pad=1,groups=96"
        assert main(["plan", "--conv", spec, "--preset", "default"]) == 0
        row = capsys.readouterr().out.splitlines()[3]
        cost = layer_cost(parse_conv(spec), PRESETS["default"])
        assert cost.mesh and row.split()[-1] == "mesh"
        assert str(cost.cycles) in row.split()


def test_cli_parse_conv_expands_aliases():
    c = parse_conv("N=2,C=8,H=9,W=9,K=4,R=3,S=3,stride=2,pad=1,dilation=1,groups=2")
    assert (c.stride_h, c.stride_w, c.pad_top, c.pad_right, c.groups) == (2, 2, 1, 1, 2)


def test_cli_db_that_is_a_directory(tmp_path, capsys):
    """(sqlite3.OperationalError, uncaught.)"""
    assert main(["plan", "--gemm", "8,8,8", "--strategy", "db", "--db", str(tmp_path)]) == 2
    assert f"{tmp_path}: is a directory, not a tuning database file" in capsys.readouterr().err


def test_cli_bad_shape_is_a_clear_error(capsys):
    assert main(["plan", "--gemm", "0,1,1"]) == 2
    assert "GemmShape.m must be an int in [1, 16777215]" in capsys.readouterr().err
    assert main(["plan", "--conv", "N=1,C=3"]) == 2
    assert "--conv misses" in capsys.readouterr().err


def test_cli_plan_workload_weights_counts(tmp_path, capsys):
    wl = tmp_path / "w.json"
    wl.write_text(json.dumps({"network": "t", "layers": [
        {"name": "a", "kind": "gemm", "M": 8, "K": 8, "N": 8, "count": 3}]}))
    assert main(["plan", "--workload", str(wl), "--preset", "tiny", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["total_cycles"] == 3 * out["layers"][0]["plan"]["predicted_cycles"]


def test_cli_workload_costs_convolutions_with_the_conv_model(capsys):
    """One cost entry point: ``plan --workload`` predicts every ResNet-50 convolution exactly as
    the convolution compiler does (its tables and planner.convcost), which is what ``bench``
    and the network compiler use; the GEMM model alone is up to 25% optimistic there."""
    from planner.conv import compile_conv
    from planner.workload import load_workload
    from spec.config import PRESETS

    path = Path(__file__).resolve().parents[2] / "planner" / "workloads" / "resnet50.json"
    assert main(["plan", "--workload", str(path), "--preset", "default", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    cfg = PRESETS["default"]
    layers = {layer.name: layer for layer in load_workload(path).layers}
    convs = 0
    for row in out["layers"]:
        shape = layers[row["name"]].shape
        if isinstance(shape, ConvShape):
            convs += 1
            assert row["cycles"] == compile_conv(shape, "NCHW", cfg).predict(cfg).total_cycles, \
                row["name"]
    assert convs >= 20
    assert out["total_cycles"] == sum(r["cycles"] * r["count"] for r in out["layers"])


def test_cli_refuses_a_layer_the_config_cannot_address(capsys):
    """A VGG-class FC layer fits default's 2 GiB; a 65536 x 32768 x 1024 GEMM (2 GiB of
    weights) does not: the planner says so, naming the sizes, and prints no cycles (issue 18).
    The 16 MiB ``fpga`` preset refuses the 4096 x 4096 FC that default plans."""
    assert main(["plan", "--gemm", "4096,25088,1", "--preset", "default"]) == 0
    capsys.readouterr()
    assert main(["plan", "--gemm", "65536,32768,1024", "--preset", "default"]) == 2
    out = capsys.readouterr()
    assert out.out == ""
    assert ("its operands need 2,449,473,536 bytes of device memory (A 2,147,483,648, "
            "B 33,554,432, C 268,435,456 as int32), more than dram_bytes=2,147,483,648 "
            "(dram_addr_bits=31)") in out.err
    assert main(["plan", "--gemm", "4096,4096,1", "--preset", "fpga", "--json"]) == 2
    assert capsys.readouterr().out == ""
    assert main(["plan", "--gemm", "4096,4096,1", "--preset", "default"]) == 0


def test_cli_plans_a_conv_with_more_taps_than_the_offset_table_in_k_parts(capsys):
    """ResNet-50's 512-channel 3x3s have 4,608 taps, more than fpga's 4,096 offset entries:
    no band of rows changes that, so the planner costs it as the compiler runs it, two
    convolutions of 256 input channels each (planner.conv.k_parts), and says so in the ``by``
    column and the JSON. A kernel with more taps than the table holds cannot run at all: no
    cycles. On tiny, a first layer whose runs do not fit is planned in bands."""
    from planner import ConvShape, layer_cost
    from planner.conv import k_part_shape
    from spec.config import PRESETS

    spec = "N=1,C=512,H=14,W=14,K=512,R=3,S=3,stride=2,pad=1"
    assert main(["plan", "--conv", spec, "--preset", "fpga"]) == 0
    out = capsys.readouterr().out
    assert "512x4608x49" in out and "2 K parts" in out
    assert main(["plan", "--conv", spec, "--preset", "fpga", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["layers"]
    shape = ConvShape(batch=1, in_channels=512, height=14, width=14, out_channels=512,
                      kernel_h=3, kernel_w=3, stride_h=2, stride_w=2, pad_top=1, pad_left=1,
                      pad_bottom=1, pad_right=1)
    half = layer_cost(k_part_shape(shape, (0, 256)), PRESETS["fpga"])
    assert row["k_parts"] == 2 and row["cycles"] == 2 * half.cycles
    assert main(["plan", "--conv", "N=1,C=1,H=40,W=40,K=4,R=33,S=33", "--preset", "tiny"]) == 2
    out = capsys.readouterr()
    assert out.out == ""
    assert "one input channel's 1089 taps exceed conv_offset_entries=1024" in out.err
    assert main(["plan", "--conv", "N=1,C=3,H=224,W=224,K=64,R=3,S=3,stride=2",
                 "--preset", "tiny"]) == 0


def test_cli_names_every_layer_of_a_workload_that_cannot_run(tmp_path, capsys):
    """A workload with several layers the configuration cannot run names them all in one
    error (it stopped at the first), and prints no cycles, table or JSON."""
    conv = dict(kind="conv", N=1, C=1, H=40, W=40, K=4, R=33, S=33)
    path = tmp_path / "w.json"
    path.write_text(json.dumps({"network": "w", "layers": [
        {"name": "ok", **conv, "R": 3, "S": 3},
        {"name": "deep_a", **conv},
        {"name": "deep_b", **conv, "stride_h": 2, "stride_w": 2}]}))
    for extra in ([], ["--json"]):
        assert main(["plan", "--workload", str(path), "--preset", "tiny", *extra]) == 2
        out = capsys.readouterr()
        assert out.out == ""
        assert out.err.startswith("error: 2 layers cannot run on this configuration:\n")
        assert "  layer deep_a: ConvShape(" in out.err and "  layer deep_b: ConvShape(" in out.err
        assert "layer ok" not in out.err


def test_cli_refuses_malformed_workloads_naming_the_file(tmp_path, capsys):
    layer = {"kind": "gemm", "M": 8, "K": 8, "N": 8}
    wl = tmp_path / "w.json"
    for doc, message in [
        ({"layers": []}, "workload has no layers"),
        ({"layers": [{**layer, "name": None}]}, "layer 0: name must be a non-empty string"),
        ({"layers": [{**layer, "name": " "}]}, "layer 0: name must be a non-empty string"),
        ({"layers": [{**layer, "count": 10**30}]}, "count must be an int in [1, 2147483647]"),
    ]:
        wl.write_text(json.dumps(doc))
        assert main(["plan", "--workload", str(wl), "--preset", "tiny"]) == 2, doc
        assert f"{wl}: " in (err := capsys.readouterr().err) and message in err, err
    wl.write_text("{")
    assert main(["plan", "--workload", str(wl)]) == 2
    assert f"{wl}: not a workload JSON file (Expecting" in capsys.readouterr().err
    wl.write_bytes(b"PK\x03\x04\x80\x81")                   # (a .tsr given by mistake)
    assert main(["plan", "--workload", str(wl)]) == 2
    assert f"{wl}: not a workload JSON file (not UTF-8 text: " in capsys.readouterr().err
    wl.write_bytes(b"\xef\xbb\xbf" + json.dumps({"layers": [layer]}).encode())   # BOM: fine
    assert main(["plan", "--workload", str(wl), "--preset", "tiny"]) == 0


def test_cli_post_costs_the_layer_as_the_compiler_builds_it(capsys):
    """``--post``: bias and int8 requantisation on every record, and one record per
    quant_entries output channels (layer_cost(..., post=...)); the default is the raw layer,
    and the header says which."""
    from planner import GemmShape, PostLoad, layer_cost
    from spec.config import PRESETS

    for extra, want in (([], layer_cost(GemmShape(513, 147, 2), PRESETS["tiny"])),
                        (["--post"], layer_cost(GemmShape(513, 147, 2), PRESETS["tiny"],
                                                post=PostLoad(True, True)))):
        assert main(["plan", "--gemm", "513,147,2", "--preset", "tiny", *extra]) == 0
        out = capsys.readouterr().out
        assert ("post-processed layers: bias, int8 requantisation" in out) == bool(extra)
        assert ("raw layers: int32 output, no post-processing" in out) != bool(extra)
        assert main(["plan", "--gemm", "513,147,2", "--preset", "tiny", "--json", *extra]) == 0
        doc = json.loads(capsys.readouterr().out)
        assert doc["post"] == bool(extra) and doc["total_cycles"] == want.cycles
