"""Compiling lowered networks into image segments (.tsr) and running them on the golden device
(a numpy accelerator that executes the image records): bit-exact against the int8 reference."""

import asyncio
import re
import dataclasses
import json
import zipfile

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

pytest.importorskip("onnxruntime")

from firmware.image import decode, encode, with_a_crcs  # noqa: E402
from firmware.runtime import Runtime  # noqa: E402
from spec.config import PRESETS  # noqa: E402
from planner.net import reference  # noqa: E402
from flow.cli import compile_main, compile_model, run_main  # noqa: E402
from flow.compile import (TSR_READS, TSR_VERSION, CompiledNetwork,  # noqa: E402
                          CompileError, TensorBuffer, build_gemm_image, compile_network)
from flow.tsr_onnx import SHARE_MIN_BYTES  # noqa: E402
from firmware.emulator import EmulatorDevice  # noqa: E402
from flow.execute import execute, run_network  # noqa: E402
from planner.net.models import bottleneck, small_cnn  # noqa: E402
from planner.net.onnx_import import import_onnx, load_model  # noqa: E402
from planner.net.lower import (AccelLayer, fold_batchnorm, generated_inputs,  # noqa: E402
                                  lower, quantize_qdq)
from planner.net.graph import ModelError  # noqa: E402
from planner.net.reference import HostOpError  # noqa: E402
from planner.shapes import GemmShape  # noqa: E402
from planner.zero_points import activation_gemm_k  # noqa: E402

SMALL = PRESETS["small"]


def _lowered(model, seed=1):
    q = quantize_qdq(fold_batchnorm(load_model(model)), samples=2, seed=seed)
    return q, lower(import_onnx(q))


def _golden_env(net, feeds):
    rt = Runtime(EmulatorDevice(net.cfg), net.cfg)
    env, steps = asyncio.run(execute(net, rt, feeds))
    return env, steps


@pytest.fixture(scope="module")
def cnn():
    q, low = _lowered(small_cnn(height=16, width=16))
    return q, low, compile_network(low, SMALL, qmodel=q)


def _x(shape, seed=5):
    return {"x": np.random.default_rng(seed).standard_normal(shape).astype(np.float32)}


def test_compile_network_reports_progress_per_layer_and_per_run(cnn):
    """``on_event`` hears each accelerator layer planned and each run of the network built,
    in order, ending at its total; the result is the network compiled without it."""
    _, low, net = cnn
    events = []
    again = compile_network(low, SMALL, on_event=events.append)
    assert all(set(e) == {"event", "what", "done", "total"} and e["event"] == "progress"
               for e in events)
    planned = [(e["done"], e["total"]) for e in events if e["what"] == "planning layers"]
    n = len(low.layers)
    assert planned == [(i, n) for i in range(1, n + 1)]
    built = [(e["done"], e["total"]) for e in events if e["what"] == "building images"]
    runs = built[-1][1]
    assert built == [(i, runs) for i in range(runs + 1)] and 0 < runs <= len(net.steps)
    assert [e["what"] for e in events] == ["planning layers"] * n + ["building images"] * \
        (runs + 1)
    assert [s.image for s in again.segments] == [s.image for s in net.segments]


def test_compile_small_cnn_keeps_the_conv_chain_in_one_image(cnn):
    _, low, net = cnn
    kinds = [(s.kind, s.layer_names) for s in net.steps if s.kind != "host"]
    assert kinds == [("segment", ["conv0", "conv1", "conv2", "conv3"]), ("segment", ["fc"])]
    seg = net.segments[0]
    # inside the segment the convs write straight into the next one's padded buffer, whose
    # halo (the zero point) the host fills; only the first input and the last output cross
    assert [b.tensor for b in seg.inputs] == [low.layers[0].input]
    assert [b.tensor for b in seg.fills] == [layer.output for layer in low.layers[:3]]
    assert all(b.halo == layer.halo for b, layer in zip(seg.fills, low.layers[1:4]))
    assert [b.tensor for b in seg.outputs] == [low.layers[3].output]
    assert len(decode(seg.image).layers) == len(seg.records)


def test_golden_device_matches_the_int8_reference_on_every_layer(cnn):
    _, low, net = cnn
    feeds = _x((1, 3, 16, 16))
    ref = reference.run(low, feeds)
    env, steps = _golden_env(net, feeds)
    read_back = {b.tensor for s in net.segments for b in s.outputs}
    for layer in low.layers:
        if layer.output in read_back:
            assert np.array_equal(env[layer.output], ref[layer.output]), layer.name
    assert np.array_equal(env["logits"], ref["logits"])
    assert sum(len(s.get("records", [])) for s in steps) == sum(len(s.records)
                                                                 for s in net.segments)


def test_golden_device_executes_the_image_not_the_layer_description(cnn):
    """Corrupt one weight in the sealed image: the golden device's output changes."""
    _, low, net = cnn
    feeds = _x((1, 3, 16, 16))
    seg = net.segments[1]                          # the fc head
    image = decode(seg.image)
    weights = bytearray(image.sections[4])
    weights[0] = (weights[0] + 64) % 256
    # a consistent image (its records' a_crc follow the weights), so it is run, not refused
    bad = encode(with_a_crcs(type(image)(config_id=image.config_id, layers=image.layers,
                                         sections={**image.sections, 4: bytes(weights)},
                                         base_addr=image.base_addr), net.cfg))
    good = run_network(net, feeds).outputs["logits"]
    seg.image, saved = bad, seg.image
    try:
        worse = run_network(net, feeds).outputs["logits"]
    finally:
        seg.image = saved
    assert not np.array_equal(good, worse)



def test_tsr_keeps_scalar_constants_scalar(tmp_path):
    """A 0-D constant (a Gather's scalar index: PyTorch's ``x[:, 0]``, ViT's class token)
    came back from the .tsr as shape (1,): the Gather then gave (1, 1, 48) instead of (1, 48),
    and the run failed at the accelerator layer after it ("shape (1, 1, 48) != (1, 48)")."""
    rng = np.random.default_rng(4)
    nodes = [helper.make_node("Gather", ["x", "idx"], ["cls"], axis=1, name="cls"),
             helper.make_node("MatMul", ["cls", "w"], ["y"], name="head")]
    inits = [onnx.numpy_helper.from_array(np.array(0, np.int64), "idx"),
             onnx.numpy_helper.from_array(rng.standard_normal((48, 10)).astype(np.float32),
                                          "w")]
    model = helper.make_model(helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 17, 48))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, (1, 10))], inits),
        opset_imports=[helper.make_opsetid("", 13)])
    onnx.save(model, tmp_path / "cls.onnx")
    net = compile_model(tmp_path / "cls.onnx", {}, SMALL)
    assert [l.name for l in net.layers.values()] == ["head"]
    back = CompiledNetwork.load(net.save(tmp_path / "cls.tsr"))
    feeds = _x((1, 17, 48))
    want = run_network(net, feeds).outputs["y"]
    got = run_network(back, feeds).outputs["y"]
    assert want.shape == got.shape == (1, 10) and np.array_equal(got, want)

def test_tsr_round_trip_and_bad_files(cnn, tmp_path):
    q, low, net = cnn
    path = net.save(tmp_path / "cnn.tsr")
    back = CompiledNetwork.load(path)
    assert [s.image for s in back.segments] == [s.image for s in net.segments]
    assert back.cfg == net.cfg and back.outputs == net.outputs and back.qmodel == net.qmodel
    for name, layer in net.layers.items():
        other = back.layers[name]
        assert other.shape == layer.shape and np.array_equal(other.weights, layer.weights)
        assert np.array_equal(other.multiplier, layer.multiplier)
    feeds = _x((1, 3, 16, 16), seed=8)
    assert np.array_equal(run_network(back, feeds).outputs["logits"],
                          reference.run(low, feeds)["logits"])
    junk = tmp_path / "junk.tsr"
    junk.write_bytes(b"not a zip")
    with pytest.raises(CompileError, match="not a compiled network"):
        CompiledNetwork.load(junk)
    with zipfile.ZipFile(path) as z:
        plan = json.loads(z.read("plan.json"))
    plan["version"] = 99
    old = tmp_path / "old.tsr"
    with zipfile.ZipFile(old, "w") as z:
        z.writestr("plan.json", json.dumps(plan))
    with pytest.raises(CompileError, match="version 99"):
        CompiledNetwork.load(old)
    # a member or a field missing: the file named and what is missing, not a KeyError
    with zipfile.ZipFile(path) as z:
        members = {name: z.read(name) for name in z.namelist()}
    image = next(name for name in members if name.startswith("images/"))
    plan = json.loads(members["plan.json"])
    del plan["constants"]
    for name, drop, message in [("no_image.tsr", image, f"There is no item named '{image}'"),
                                ("no_field.tsr", None, "no field 'constants'")]:
        damaged = tmp_path / name
        with zipfile.ZipFile(damaged, "w") as z:
            for member, data in members.items():
                if member != drop:
                    z.writestr(member, json.dumps(plan) if drop is None and
                               member == "plan.json" else data)
        with pytest.raises(CompileError, match=f"{name}: damaged compiled network "
                                               f"\\({message}"):
            CompiledNetwork.load(damaged)
    # plan.json not an object; a member whose compressed bytes are corrupt
    listed = tmp_path / "list.tsr"
    with zipfile.ZipFile(listed, "w") as z:
        z.writestr("plan.json", "[]")
    with pytest.raises(CompileError, match="plan.json is a list, not an object"):
        CompiledNetwork.load(listed)
    corrupt = tmp_path / "corrupt.tsr"
    with zipfile.ZipFile(corrupt, "w", zipfile.ZIP_DEFLATED) as z:
        for member, data in members.items():
            z.writestr(member, data)
    with zipfile.ZipFile(corrupt) as z:
        info = z.getinfo(image)
    raw = bytearray(corrupt.read_bytes())
    start = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)
    for i in range(start + 8, start + 24):
        raw[i] ^= 0x5A
    corrupt.write_bytes(bytes(raw))
    with pytest.raises(CompileError, match="corrupt.tsr: damaged compiled network"):
        CompiledNetwork.load(corrupt)


def _members(path):
    with zipfile.ZipFile(path) as z:
        return {name: z.read(name) for name in z.namelist()}


def _rezip(path, members):
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in members.items():
            z.writestr(name, data)
    return path


def _first_input_buffer(plan):
    return next(st["segment"] for st in plan["steps"] if st["kind"] == "segment")["inputs"][0]


@pytest.mark.parametrize("edit, message", [
    (lambda p: _first_input_buffer(p).update(layout="bogus"),
     "layout must be one of nchw, fm, rowmajor, not 'bogus'"),
    (lambda p: _first_input_buffer(p).update(nbytes=10), r"nbytes=10, but its layout nchw"),
    (lambda p: _first_input_buffer(p).update(pads=[1, 1]), r"pads must be 4 ints"),
    (lambda p: _first_input_buffer(p).update(halo=1000), r"halo must be ints in \[-128, 127\]"),
    (lambda p: _first_input_buffer(p).update(tensor="nope"),
     "step 'segment0' reads 'nope', which no graph input, constant or earlier step defines"),
    (lambda p: p.update(outputs=["nope"]), "graph output 'nope' is defined by no step"),
    (lambda p: p.update(steps=[]), "graph output 'logits' is defined by no step"),
    (lambda p: p["inputs"]["x"].update(dtype="foo"), "graph input 'x': dtype must be a numeric"),
    (lambda p: p["inputs"]["x"].pop("dtype"), "graph input 'x': dtype must be a numeric numpy "
                                              "type, not None"),     # (np.dtype(None): float64)
    (lambda p: p["inputs"]["x"].update(shape=[1, 3, -16, 16]),
     r"graph input 'x': shape must be a list of ints >= 0"),
    (lambda p: p.update(inputs=["x"]), "inputs must be an object"),
], ids=["layout", "nbytes", "pads", "halo", "tensor", "output", "no-steps", "dtype",
        "no-dtype", "shape", "inputs-list"])
def test_a_hand_edited_plan_is_refused_on_load(cnn, tmp_path, edit, message):
    """Fields that the executor would fail on half-way (KeyError, OverflowError) or, worse, run
    with silently (a wrong layout reorders the tensor, a short nbytes writes past the buffer):
    found by a helper's mutation of plan.json, session 46."""
    _, _, net = cnn
    members = _members(net.save(tmp_path / "cnn.tsr"))
    plan = json.loads(members["plan.json"])
    edit(plan)
    bad = _rezip(tmp_path / "bad.tsr", {**members, "plan.json": json.dumps(plan)})
    with pytest.raises(CompileError, match=f"bad.tsr: damaged compiled network \\(.*{message}"):
        CompiledNetwork.load(bad)


def test_tsr_model_onnx_refers_to_the_arrays_for_its_weights(cnn, tmp_path):
    """``model.onnx`` in a .tsr keeps no second copy of the weights: its large initialisers are
    ONNX external-data references to the ``arrays/I.npy`` members with the same bytes, which
    ``load`` puts back (the model as compiled, byte for byte) and which ``onnx.load`` of the
    unzipped file resolves too."""
    _, _, net = cnn
    path = net.save(tmp_path / "cnn.tsr")
    members = _members(path)
    stored = onnx.load_from_string(members["model.onnx"])
    original = onnx.load_from_string(net.qmodel)
    assert [i.name for i in stored.graph.initializer] == \
        [i.name for i in original.graph.initializer]
    refs = [i for i in stored.graph.initializer
            if i.data_location == TensorProto.EXTERNAL]
    # every weight tensor is an array's bytes (the biases' are not: zero points fold into them)
    assert {i.name for i in refs} == {i.name for i in original.graph.initializer
                                      if i.name.endswith("_w_quantized")}
    big = [i for i in original.graph.initializer if i.name in {r.name for r in refs}]
    assert all(len(i.raw_data) >= SHARE_MIN_BYTES for i in big)
    for init in refs:
        ref = {e.key: e.value for e in init.external_data}
        assert re.fullmatch(r"arrays/[0-9]+\.npy", ref["location"]) and not init.raw_data
        data = members[ref["location"]]
        assert int(ref["offset"]) + int(ref["length"]) == len(data)      # the .npy's data
    shared = sum(len(i.raw_data) for i in big)
    assert len(members["model.onnx"]) < len(net.qmodel) - shared + 64 * len(refs)
    assert CompiledNetwork.load(path).qmodel == net.qmodel
    # unzipped, the model is a plain ONNX model with external data
    out = tmp_path / "unzipped"
    with zipfile.ZipFile(path) as z:
        z.extractall(out)
    loaded = onnx.load(str(out / "model.onnx"))
    assert {i.name: onnx.numpy_helper.to_array(i).tobytes() for i in loaded.graph.initializer} \
        == {i.name: onnx.numpy_helper.to_array(i).tobytes() for i in original.graph.initializer}


def test_tsr_version_1_files_still_load(cnn, tmp_path):
    """A version 1 file (``model.onnx`` with its own data) loads, its model unchanged."""
    _, _, net = cnn
    members = _members(net.save(tmp_path / "cnn.tsr"))
    plan = json.loads(members["plan.json"])
    assert plan["version"] == TSR_VERSION == 2 and TSR_READS == (1, 2)
    plan["version"] = 1
    members["plan.json"] = json.dumps(plan).encode()
    members["model.onnx"] = net.qmodel
    old = CompiledNetwork.load(_rezip(tmp_path / "v1.tsr", members))
    assert old.qmodel == net.qmodel
    assert [s.image for s in old.segments] == [s.image for s in net.segments]


@pytest.mark.parametrize("edit, message", [
    (lambda ref: ref.update(location="../../etc/passwd"), "not a reference to an arrays/I.npy"),
    (lambda ref: ref.update(offset="x"), "offset 'x' and length '.*' must be integers >= 0"),
    (lambda ref: ref.update(offset="-1"), "offset '-1' and length '.*' must be integers >= 0"),
    (lambda ref: ref.update(offset="1_0"), "offset '1_0' and length '.*' must be integers"),
    (lambda ref: ref.update(offset=str(1 << 40)), "bytes .* of arrays/[0-9]+.npy, which has"),
    (lambda ref: ref.update(length=str(int(ref["length"]) - 1)),
     "length [0-9]+, but \\[.*\\] elements of 1 bytes are"),
    (lambda ref: ref.update(location="arrays/99999.npy"),
     "refers to arrays/99999.npy, which the archive does not hold"),
    (lambda ref: ref.update(checksum="0"), "not a reference to an arrays/I.npy"),
])
def test_tsr_model_references_that_do_not_resolve_are_refused(cnn, tmp_path, edit, message):
    """A reference out of the archive's arrays, past its member or malformed: a CompileError
    naming the file and the initialiser, never a read outside the archive."""
    _, _, net = cnn
    members = _members(net.save(tmp_path / "cnn.tsr"))
    model = onnx.load_from_string(members["model.onnx"])
    init = next(i for i in model.graph.initializer if i.data_location == TensorProto.EXTERNAL)
    ref = {e.key: e.value for e in init.external_data}
    edit(ref)
    del init.external_data[:]
    for key, value in ref.items():
        entry = init.external_data.add()
        entry.key, entry.value = key, value
    members["model.onnx"] = model.SerializeToString()
    bad = _rezip(tmp_path / "bad.tsr", members)
    with pytest.raises(CompileError, match=f"bad.tsr: damaged compiled network \\(.*{message}"):
        CompiledNetwork.load(bad)
    members["model.onnx"] = b"\xff\xff not a protobuf"
    with pytest.raises(CompileError, match="damaged compiled network \\(model.onnx is not an "
                                           "ONNX model"):
        CompiledNetwork.load(_rezip(tmp_path / "junk.tsr", members))


def test_tsr_model_external_data_outside_the_initialisers_is_refused(cnn, tmp_path):
    """External data in a Constant node's tensor (which onnxruntime would read from a file
    beside the process) is refused: a reference may only be a top-graph initialiser's."""
    _, _, net = cnn
    members = _members(net.save(tmp_path / "cnn.tsr"))
    model = onnx.load_from_string(members["model.onnx"])
    value = helper.make_tensor("secret", TensorProto.INT8, [4], b"\0" * 4, raw=True)
    value.ClearField("raw_data")
    entry = value.external_data.add()
    entry.key, entry.value = "location", "secret.bin"
    value.data_location = TensorProto.EXTERNAL
    model.graph.node.append(helper.make_node("Constant", [], ["unused"], name="leak",
                                             value=value))
    members["model.onnx"] = model.SerializeToString()
    with pytest.raises(CompileError, match="model.onnx tensor 'secret': external data outside "
                                           "the graph's initialisers"):
        CompiledNetwork.load(_rezip(tmp_path / "leak.tsr", members))


def test_tsr_shares_only_what_it_gives_back_byte_for_byte(cnn, tmp_path):
    """An initialiser with ``data_location`` set to DEFAULT explicitly (``onnx.load`` of a model
    saved with external data leaves that) is not shared, so the model loaded back is the one
    compiled, byte for byte; nor is a model whose serialisation this one does not reproduce."""
    q, low, _ = cnn
    model = onnx.ModelProto.FromString(q.SerializeToString())
    weights = [i for i in model.graph.initializer if i.name.endswith("_w_quantized")]
    weights[0].data_location = TensorProto.DEFAULT
    net = compile_network(low, SMALL, qmodel=model)
    path = net.save(tmp_path / "explicit.tsr")
    stored = onnx.load_from_string(_members(path)["model.onnx"])
    external = {i.name for i in stored.graph.initializer
                if i.data_location == TensorProto.EXTERNAL}
    assert weights[0].name not in external and {w.name for w in weights[1:]} <= external
    assert CompiledNetwork.load(path).qmodel == net.qmodel
    # fields out of order: the same model, but not the bytes a parse and serialise give back
    unordered = net.qmodel + onnx.ModelProto(producer_name="again").SerializeToString()
    assert onnx.ModelProto.FromString(unordered).SerializeToString() != unordered
    odd = dataclasses.replace(net, qmodel=unordered)
    path = odd.save(tmp_path / "odd.tsr")
    assert _members(path)["model.onnx"] == unordered
    assert CompiledNetwork.load(path).qmodel == unordered


def _model(nodes, inits, x_shape, y_shape, opsets=(("", 17),)):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, list(y_shape))
    graph = helper.make_graph(nodes, "g", [x], [y],
                              [onnx.numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets])
    model.ir_version = 8
    return model


def _conv_model(nodes, inits, out_ch):
    return _model(nodes, inits, (1, 4, 8, 8), (1, out_ch, 8, 8))


def _grouped_model(groups: int, in_ch: int = 4, mid: int = 8, stride: int = 1, batch: int = 1):
    rng = np.random.default_rng(groups)
    inits = {"w0": rng.normal(0, .3, (mid, in_ch // groups, 3, 3)).astype(np.float32),
             "w1": rng.normal(0, .3, (8, mid, 3, 3)).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w0"], ["a"], name="grouped", group=groups,
                              pads=[1, 1, 1, 1], strides=[stride, stride]),
             helper.make_node("Relu", ["a"], ["r"], name="relu"),
             helper.make_node("Conv", ["r", "w1"], ["y"], name="plain", pads=[1, 1, 1, 1])]
    side = -(-8 // stride)
    return _model(nodes, inits, (batch, in_ch, 8, 8), (batch, 8, side, side))


@pytest.mark.parametrize("groups, in_ch, mid, stride", [
    (2, 4, 8, 1),            # grouped: two groups of 2 -> 4 channels
    (4, 4, 4, 1),            # depthwise (group == C)
    (4, 4, 8, 2),            # depthwise with a channel multiplier of 2, stride 2
], ids=["grouped", "depthwise", "depthwise-x2-stride2"])
def test_grouped_and_depthwise_convs_run_on_the_accelerator(groups, in_ch, mid, stride):
    """One ungrouped convolution record per group (its channels are slices of the padded input
    and output tensors), a depthwise layer one dense record per block of array_rows channels
    (diagonal weights), bit-exact against the int8 reference."""
    q, low = _lowered(_grouped_model(groups, in_ch, mid, stride))
    net = compile_network(low, SMALL)
    assert net.summary()["host_layers"] == {}
    (seg,) = net.segments
    assert seg.layers == ["grouped", "plain"]
    grouped = [r for r in seg.records if r.layer == "grouped"]
    # the output goes to the next conv's padded buffer: one record per group (block) and
    # output row
    side = -(-8 // stride)
    if groups == in_ch == mid:          # depthwise: the 4 channels are one block
        assert [r.name for r in grouped] == [f"grouped[ch 0:4][row {p}]" for p in range(side)]
        assert {(r.m, r.k, r.n) for r in grouped} == {(4, 4 * 9, side)}
        assert sum(r.macs for r in grouped) == 4 * side * side * 9
    else:
        assert [r.name for r in grouped] == [f"grouped[g{g}][row {p}]" for g in range(groups)
                                             for p in range(side)]
        assert {(r.m, r.k, r.n) for r in grouped} == {(mid // groups, in_ch // groups * 9, side)}
    feeds = _x((1, in_ch, 8, 8))
    assert np.array_equal(run_network(net, feeds).outputs["y"], reference.run(low, feeds)["y"])


def test_batched_convs_run_one_record_set_per_image():
    """Batch 3: each image's channels are a contiguous block of the padded NCHW tensors; every
    conv runs once per image (and group), bit-exact."""
    q, low = _lowered(_grouped_model(2, 4, 8, batch=3))
    net = compile_network(low, SMALL)
    assert net.summary()["host_layers"] == {}
    (seg,) = net.segments
    plain = [r.name for r in seg.records if r.layer == "plain"]
    assert plain == ["plain[n0]", "plain[n1]", "plain[n2]"]
    grouped = {r.name.split("[row")[0] for r in seg.records if r.layer == "grouped"}
    assert grouped == {f"grouped[n{n}][g{g}]" for n in range(3) for g in range(2)}
    feeds = _x((3, 4, 8, 8))
    assert np.array_equal(run_network(net, feeds).outputs["y"], reference.run(low, feeds)["y"])


def test_grouped_conv_wider_than_the_parameter_memories_splits_each_group():
    """``quant_entries`` output channels at most per record: each group is chunked on its own."""
    q, low = _lowered(_grouped_model(2, 4, 64))
    cfg = dataclasses.replace(SMALL, quant_entries=16)
    net = compile_network(low, cfg)
    names = [r.name for r in net.segments[0].records if r.layer == "grouped"]
    assert [n.split("[row")[0] for n in names[::8]] == [
        "grouped[g0][ch 0:16]", "grouped[g0][ch 16:32]", "grouped[g1][ch 32:48]",
        "grouped[g1][ch 48:64]"]
    feeds = _x((1, 4, 8, 8))
    assert np.array_equal(run_network(net, feeds).outputs["y"], reference.run(low, feeds)["y"])


def test_different_padding_of_one_tensor_ends_the_segment():
    """conv0's output feeds a 3x3 (pad 1) and a 1x1 (pad 0) conv: the padded layouts differ, so
    the second consumer gets the tensor from the host in a new image."""
    rng = np.random.default_rng(1)
    inits = {"w0": rng.normal(0, .3, (8, 4, 3, 3)).astype(np.float32),
             "w1": rng.normal(0, .3, (8, 8, 3, 3)).astype(np.float32),
             "w2": rng.normal(0, .3, (8, 8, 1, 1)).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w0"], ["a"], name="conv0", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["a"], ["r"], name="relu"),
             helper.make_node("Conv", ["r", "w1"], ["b"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["r", "w2"], ["c"], name="conv2"),
             helper.make_node("Add", ["b", "c"], ["y"], name="add")]
    q, low = _lowered(_conv_model(nodes, inits, 8))
    net = compile_network(low, SMALL)
    assert [s.layer_names for s in net.steps if s.kind == "segment"] == \
        [["conv0", "conv1"], ["conv2"]]
    first = net.segments[0]
    assert [b.tensor for b in first.outputs] == [low.layers[0].output, low.layers[1].output]
    feeds = _x((1, 4, 8, 8))
    assert np.array_equal(run_network(net, feeds).outputs["y"], reference.run(low, feeds)["y"])


def test_layer_wider_than_quant_entries_becomes_channel_ranges():
    cfg = PRESETS["tiny"]                      # quant_entries = 256
    rng = np.random.default_rng(2)
    model = _model([helper.make_node("MatMul", ["x", "w"], ["y"], name="wide")],
                   {"w": rng.normal(0, .2, (24, 300)).astype(np.float32)}, (5, 24), (5, 300))
    q, low = _lowered(model)
    net = compile_network(low, cfg)
    (seg,) = net.segments
    assert [(r.name, r.m) for r in seg.records] == [("wide[ch 0:256]", 256),
                                                    ("wide[ch 256:300]", 44)]
    feeds = {"x": rng.standard_normal((5, 24)).astype(np.float32)}
    assert np.array_equal(run_network(net, feeds).outputs["y"], reference.run(low, feeds)["y"])


@pytest.mark.parametrize("za,zb", [(0, 0), (-128, 17), (127, -128), (-3, 0)])
def test_activation_gemm_image_folds_zero_points_exactly(za, zb):
    rng = np.random.default_rng(za + 300)
    shape, batch = GemmShape(6, 10, 7), 3
    layer = AccelLayer(name="mm", kind="gemm", op_type="MatMul", input="a", output="y",
                       shape=shape, weights=None, bias=np.zeros(6, np.int32),
                       multiplier=np.full(6, 1 << 30, np.int32), shift=np.full(6, 8, np.int32),
                       in_scale=1.0, in_zero_point=za, weight_scale=np.ones(6), out_scale=1.0,
                       out_zero_point=-5, act_min=-128, act_max=127, input_b="b",
                       b_zero_point=zb, batch=batch, host_correction=True,
                       in_shape=(batch, 6, 10), out_shape=(batch, 6, 7))
    a = rng.integers(-128, 128, (batch, 6, 10)).astype(np.int8)
    b = rng.integers(-128, 128, (batch, 10, 7)).astype(np.int8)
    cfg = PRESETS["tiny"]
    seg, loads, out_shape = build_gemm_image(layer, a, b, cfg)
    dev = EmulatorDevice(cfg)

    async def go():
        rt = Runtime(dev, cfg)
        await rt.open()
        for addr, data in loads:
            await rt.write(addr, data)
        (await rt.run_image(await rt.load_image(seg.image), budget_cycles=1)).raise_for_error()
        return [buf.decode(await rt.read(buf.addr, buf.nbytes)) for buf in seg.outputs]

    got = np.stack(asyncio.run(go())).reshape(out_shape)
    want = reference.run_layer(layer, {"a": a, "b": b})
    assert np.array_equal(got, want)
    assert len(seg.records) == batch and seg.records[0].k == 10 * (1 + len(
        [p for p in ([-za] if -za <= 127 else [127, -za - 127]) if p]))



def test_cli_compile_names_a_calibration_sample_of_the_wrong_shape(tmp_path, capsys):
    """A --calib sample of the wrong rank or size was blamed on the model ("onnxruntime's
    quantiser failed on this float model (... Invalid rank for input ...); give a quantised
    model"); the file, the input and the shape wanted are named, and nothing is written."""
    onnx.save(small_cnn(height=8, width=8), tmp_path / "cnn.onnx")
    for i, (bad, got) in enumerate([((3, 8, 8), "(3, 8, 8)"), ((1, 3, 8, 9), "(1, 3, 8, 9)")]):
        calib = tmp_path / f"calib{i}"
        calib.mkdir()
        np.save(calib / "0.npy", _x((1, 3, 8, 8))["x"])
        np.save(calib / "1.npy", _x(bad)["x"])
        assert compile_main([str(tmp_path / "cnn.onnx"), "-o", str(tmp_path / "c.tsr"),
                             "--config", "tiny", "--calib", str(calib)]) == 2
        err = capsys.readouterr().err
        assert f"--calib {calib / '1.npy'}: input 'x' has shape {got}, the model needs " \
               f"(1, 3, 8, 8)" in err
    calib = tmp_path / "calib_npz"
    calib.mkdir()
    np.savez(calib / "a.npz", image=_x((1, 3, 8, 8))["x"])
    assert compile_main([str(tmp_path / "cnn.onnx"), "-o", str(tmp_path / "c.tsr"),
                         "--config", "tiny", "--calib", str(calib)]) == 2
    assert f"--calib {calib / 'a.npz'} has inputs ['image'], the model needs ['x']" in \
        capsys.readouterr().err
    assert not (tmp_path / "c.tsr").exists()


def test_run_compare_says_why_a_float_output_has_no_lsb_figure(tmp_path, capsys):
    """A graph output onnxruntime's quantiser leaves in float (here after a PRelu) is compared
    in absolute terms only; the line says why there is no LSB figure (it had none, unsaid)."""
    rng = np.random.default_rng(3)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1] * 4),
             helper.make_node("PRelu", ["c", "slope"], ["y"], name="prelu")]
    inits = [onnx.numpy_helper.from_array(rng.standard_normal((4, 2, 3, 3)).astype(np.float32),
                                          "w"),
             onnx.numpy_helper.from_array(np.full((4, 1, 1), 0.25, np.float32), "slope")]
    model = helper.make_model(helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 2, 6, 6))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, (1, 4, 6, 6))], inits),
        opset_imports=[helper.make_opsetid("", 13)])
    onnx.save(model, tmp_path / "p.onnx")
    assert compile_main([str(tmp_path / "p.onnx"), "-o", str(tmp_path / "p.tsr")]) == 0
    assert run_main([str(tmp_path / "p.tsr"), "--compare"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"y: vs onnxruntime: max abs diff \S+ \(no LSB figure: the output does "
                     r"not come from a per-tensor DequantizeLinear", out), out

def test_cli_compile_and_golden_run(tmp_path, capsys):
    onnx.save(small_cnn(height=8, width=8), tmp_path / "cnn.onnx")
    np.save(tmp_path / "x.npy", _x((1, 3, 8, 8))["x"])
    calib = tmp_path / "calib"
    calib.mkdir()
    for i in range(2):
        np.save(calib / f"{i}.npy", _x((1, 3, 8, 8), seed=i)["x"])
    assert compile_main([str(tmp_path / "cnn.onnx"), "-o", str(tmp_path / "cnn.tsr"),
                         "--config", "tiny", "--calib", str(calib)]) == 0
    assert "2 image segments" in capsys.readouterr().out
    assert run_main([str(tmp_path / "cnn.tsr"), "--input", str(tmp_path / "x.npy"),
                     "--compare", "--json", str(tmp_path / "r.json")]) == 0
    captured = capsys.readouterr()
    out = captured.out
    assert "vs onnxruntime" in out and "conv0" in out
    # the progress bar is stderr's: a log of stdout holds the results alone
    assert "cnn on golden" in captured.err and "cnn on golden" not in out
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["sim"] == "golden" and report["total_cycles"] is None
    accel = [r for r in report["layers"] if r["where"] != "host"]
    assert [r["layer"] for r in accel] == ["conv0", "conv1", "conv2", "conv3", "fc"]
    assert all(r["predicted_cycles"] > 0 and r["cycles"] is None for r in accel)
    # wrong input shape, missing file, not a .tsr: clear errors, exit 2
    np.save(tmp_path / "bad.npy", np.zeros((1, 3, 9, 9), np.float32))
    assert run_main([str(tmp_path / "cnn.tsr"), "--input", str(tmp_path / "bad.npy")]) == 2
    assert "compiled for [1, 3, 8, 8]" in capsys.readouterr().err
    assert run_main([str(tmp_path / "x.npy"), "--input", str(tmp_path / "x.npy")]) == 2
    assert "not a compiled network" in capsys.readouterr().err


def test_cli_run_generates_its_input_and_writes_an_html_report(tmp_path, capsys):
    onnx.save(small_cnn(height=8, width=8), tmp_path / "cnn.onnx")
    assert compile_main([str(tmp_path / "cnn.onnx"), "-o", str(tmp_path / "cnn.tsr"),
                         "--config", "tiny"]) == 0
    capsys.readouterr()
    page = tmp_path / "r.html"
    assert run_main([str(tmp_path / "cnn.tsr"), "--seed", "3", "--html", str(page),
                     "--output", str(tmp_path / "gen.npz")]) == 0
    assert ("input: generated (8-bit integer: uniform over its range; else standard normal), "
            "seed 3 (x float32 (1, 3, 8, 8))") in capsys.readouterr().out
    # the same values given explicitly: the same outputs
    np.save(tmp_path / "x.npy", np.random.default_rng(3).normal(0, 1, (1, 3, 8, 8))
            .astype(np.float32))
    assert run_main([str(tmp_path / "cnn.tsr"), "--input", str(tmp_path / "x.npy"),
                     "--output", str(tmp_path / "given.npz")]) == 0
    assert f"input: {tmp_path}/x.npy (x float32 (1, 3, 8, 8))" in capsys.readouterr().out
    assert run_main([str(tmp_path / "cnn.tsr"), "--input", str(tmp_path / "x.npy"),
                     "--seed", "3"]) == 2
    assert "--seed 3 seeds generated inputs; --input" in capsys.readouterr().err
    with np.load(tmp_path / "gen.npz") as a, np.load(tmp_path / "given.npz") as b:
        assert set(a.files) == set(b.files) and all(np.array_equal(a[k], b[k]) for k in a.files)
    text = page.read_text()
    assert text.startswith("<!DOCTYPE html>") and text.count("<svg") == 1
    assert all(f">{name}</text>" in text for name in ("conv0", "conv1", "conv2", "conv3", "fc"))
    assert "predicted" in text and "<table>" in text


def test_cli_run_refuses_bad_inputs_and_output_paths_before_running(tmp_path, capsys,
                                                                      monkeypatch):
    """Checked before the run, which on the RTL may take minutes: an output path whose
    directory does not exist, a directory, NaN/infinite inputs, arrays that are not inputs."""
    import flow.cli

    onnx.save(small_cnn(height=8, width=8), tmp_path / "cnn.onnx")
    assert compile_main([str(tmp_path / "cnn.onnx"), "-o", str(tmp_path / "cnn.tsr"),
                         "--config", "tiny"]) == 0
    capsys.readouterr()
    monkeypatch.setattr(flow.cli, "run_network", lambda *a, **k: pytest.fail("ran"))
    x = np.zeros((1, 3, 8, 8), np.float32)
    nan = x.copy()
    nan[0, 1, 2, :3] = [np.nan, np.inf, -np.inf]
    np.save(tmp_path / "nan.npy", nan)
    big = x.astype(np.float64)
    big[0, 0, 0, 0] = 1e300                         # finite, but not as the float32 input
    np.save(tmp_path / "big.npy", big)
    (tmp_path / "out.npz").mkdir()
    np.savez(tmp_path / "extra.npz", x=x, y=x)
    tsr = str(tmp_path / "cnn.tsr")
    for args, message in [
        (["--html", str(tmp_path / "no" / "r.html")], f"--html {tmp_path}/no/r.html: directory "
                                                       f"{tmp_path}/no does not exist"),
        (["--json", str(tmp_path)], f"--json {tmp_path}: is a directory"),
        (["--output", str(tmp_path / "no" / "o.npz")], "--output"),
        (["--input", str(tmp_path / "nan.npy")], "'x' has 3 non-finite values (NaN or infinity"),
        (["--input", str(tmp_path / "big.npy")], "'x' has 1 non-finite values"),
        (["--output", str(tmp_path / "out")], f"--output {tmp_path}/out.npz: is a directory"),
        (["--input", str(tmp_path / "extra.npz")], "arrays ['y'] are not graph inputs"),
        (["--input", str(tmp_path / "none.npy")], f"--input {tmp_path}/none.npy: No such file"),
        (["--input", str(tmp_path / "none.npz")], f"--input {tmp_path}/none.npz: No such file"),
        (["--workdir", str(tmp_path / "nan.npy")], f"--workdir {tmp_path}/nan.npy: exists and "
                                                    f"is not a directory"),
        (["--workdir", str(tmp_path / "nan.npy" / "w")], f"--workdir {tmp_path}/nan.npy/w: "
                                                          f"cannot create it (Not a directory)"),
    ]:
        assert run_main([tsr, *args]) == 2, args
        assert message in capsys.readouterr().err
    # a config whose memory the Icarus model cannot hold: refused before any Verilog
    assert compile_main([str(tmp_path / "cnn.onnx"), "-o", str(tmp_path / "d.tsr")]) == 0
    capsys.readouterr()
    assert run_main([str(tmp_path / "d.tsr"), "--sim", "icarus"]) == 2
    assert "AccelConfig.dram_addr_bits=31: the Icarus memory model" in capsys.readouterr().err


def test_cli_compile_refuses_an_output_path_before_compiling(tmp_path, capsys, monkeypatch):
    """``-o`` into a directory that does not exist, or a directory: refused before the
    compilation (a minute on a large model), naming the option; and ``run`` given the ONNX
    model instead of its ``.tsr`` says to compile it first."""
    import flow.cli

    onnx.save(small_cnn(height=8, width=8), tmp_path / "cnn.onnx")
    monkeypatch.setattr(flow.cli, "compile_model", lambda *a, **k: pytest.fail("compiled"))
    for out, message in [(tmp_path / "no" / "cnn.tsr", f"-o {tmp_path}/no/cnn.tsr: directory "
                                                       f"{tmp_path}/no does not exist"),
                         (tmp_path, f"-o {tmp_path}: is a directory, not a file")]:
        assert compile_main([str(tmp_path / "cnn.onnx"), "-o", str(out)]) == 2
        assert capsys.readouterr().err == f"tessera compile: {message}\n"
    assert run_main([str(tmp_path / "cnn.onnx")]) == 2
    assert capsys.readouterr().err.rstrip().endswith(
        f"not a compiled network (.tsr zip): File is not a zip file; an ONNX model is compiled "
        f"first: tessera compile {tmp_path}/cnn.onnx -o cnn.tsr")  # (not beside a package's)
    assert run_main([str(tmp_path / "none.onnx")]) == 2       # no such file: no hint
    assert capsys.readouterr().err == f"tessera run: compiled network '{tmp_path}/none.onnx' " \
                                      f"does not exist\n"


def _qlinear_conv_model(rng, xz, c: int, k: int, hw: int, then=(), domains=()):
    """A QLinearConv (3x3, pad 1; input int8 or uint8 by ``xz``'s type, output int8) from
    graph input ``x`` to ``c`` (to ``y`` when ``then``, nodes reading ``c``, is empty)."""
    x_type = TensorProto.UINT8 if np.asarray(xz).dtype == np.uint8 else TensorProto.INT8
    x = helper.make_tensor_value_info("x", x_type, [1, c, hw, hw])
    y = helper.make_tensor_value_info("y", TensorProto.INT8, [1, k, hw, hw])
    consts = {"xs": np.array(0.05, np.float32), "xz": np.asarray(xz),
              "w": rng.integers(-90, 90, (k, c, 3, 3)).astype(np.int8),
              "ws": np.array(0.01, np.float32), "wz": np.array(0, np.int8),
              "ys": np.array(0.1, np.float32), "yz": np.array(-2, np.int8)}
    nodes = [helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"],
                              ["c" if then else "y"], name="conv", pads=[1, 1, 1, 1]),
             *then]
    model = helper.make_model(
        helper.make_graph(nodes, "g", [x], [y], [onnx.numpy_helper.from_array(v, n)
                                                 for n, v in consts.items()]),
        opset_imports=[helper.make_opsetid("", 17),
                       *(helper.make_opsetid(d, 1) for d in domains)])
    model.ir_version = 8
    return model


def _uint8_qlinear_conv(tmp_path):
    """A compiled QLinearConv network whose input is uint8 (``.tsr`` path)."""
    model = _qlinear_conv_model(np.random.default_rng(4), np.uint8(130), 2, 4, 6)
    onnx.save(model, tmp_path / "q.onnx")
    assert compile_main([str(tmp_path / "q.onnx"), "-o", str(tmp_path / "q.tsr"),
                         "--config", "tiny"]) == 0
    return str(tmp_path / "q.tsr")


def test_cli_run_refuses_inputs_its_dtype_cannot_hold(tmp_path, capsys, monkeypatch):
    """An input array is converted to the graph input's type only when no value changes:
    ``astype`` used to wrap 321 to 65 and -7 to 249 for a uint8 input, truncate 0.47 to 0,
    and take complex and bool arrays, each run "succeeding" with wrong outputs."""
    import flow.cli

    tsr = _uint8_qlinear_conv(tmp_path)
    capsys.readouterr()
    shape = (1, 2, 6, 6)
    cases = [
        (np.full(shape, 321, np.int64), "has values in [321, 321], outside uint8's [0, 255]"),
        (np.full(shape, -7, np.int8), "has values in [-7, -7], outside uint8's [0, 255]"),
        (np.full(shape, 0.47, np.float32), "is float32 with non-integral values; the "
                                           "network's input is uint8"),
        (np.ones(shape, np.complex64), "is complex64; the network's input is uint8"),
        (np.ones(shape, bool), "is bool; the network's input is uint8"),
        (np.full(shape, "a"), "is <U1; the network's input is uint8"),
    ]
    real = flow.cli.run_network
    monkeypatch.setattr(flow.cli, "run_network", lambda *a, **k: pytest.fail("ran"))
    for i, (x, message) in enumerate(cases):
        np.save(tmp_path / f"{i}.npy", x)
        assert run_main([tsr, "--input", str(tmp_path / f"{i}.npy")]) == 2, message
        assert message in capsys.readouterr().err
    (tmp_path / "obj.npy").write_bytes(b"not numpy")
    assert run_main([tsr, "--input", str(tmp_path / "obj.npy")]) == 2
    assert f"--input {tmp_path}/obj.npy: not a NumPy .npy or .npz file (it starts with " \
           f"b'not nu')" in capsys.readouterr().err    # (numpy: "contains pickled data")
    # what is accepted: integers in range of any integer type, integral floats
    monkeypatch.setattr(flow.cli, "run_network", real)
    for i, x in enumerate([np.full(shape, 200, np.int64), np.full(shape, 7.0)]):
        np.save(tmp_path / f"ok{i}.npy", x)
        assert run_main([tsr, "--input", str(tmp_path / f"ok{i}.npy"),
                         "--output", str(tmp_path / f"ok{i}.npz")]) == 0
    # a generated 8-bit input covers the type's range (it was normal values cast: 0, 1, 2,
    # 254, 255); wider integers (indices, shapes) stay small, uint64 included
    rng = np.random.default_rng(0)
    x = flow.cli._generated((64, 64), np.dtype(np.uint8), rng)
    assert x.dtype == np.uint8 and x.min() == 0 and x.max() == 255 and len(np.unique(x)) == 256
    for dtype in (np.int64, np.uint64, np.int32):
        x = flow.cli._generated((64, 64), np.dtype(dtype), rng)
        assert x.dtype == dtype and np.abs(x.astype(np.int64)).max() <= 6
    assert flow.cli._generated((8,), np.dtype(bool), rng).dtype == bool


@pytest.mark.parametrize("x, dtype, message", [
    (np.float32([2**31]), np.int32, "has values in [2147483648.0, 2147483648.0], outside "
                                    "int32's [-2147483648, 2147483647]"),
    (np.float64([2**63]), np.int64, "outside int64's"),
    (np.float32([2**32]), np.uint32, "outside uint32's"),
    (np.int64([0, 2, 1]), np.bool_, "has values in [0, 2], outside bool's [0, 1]"),
    (np.float32([0.5]), np.bool_, "non-integral values"),
])
def test_cli_input_conversion_compares_ranges_exactly(x, dtype, message):
    """float32(2**31) compared with int32's maximum in float32 rounds it up to 2**31, and was
    taken and wrapped to -2**31; an int64 2 went into a bool input as True."""
    import flow.cli

    with pytest.raises(ValueError, match=re.escape(message)):
        flow.cli._converted(x, np.dtype(dtype), "x")


@pytest.mark.parametrize("x, dtype", [
    (np.array([True, False]), np.bool_), (np.int64([1, 0]), np.bool_),
    (np.float32([2**31 - 128]), np.int32), (np.uint64([2**63 - 1]), np.int64)])
def test_cli_input_conversion_takes_what_it_can_hold(x, dtype):
    """A bool array for a bool input was refused (every bool input model was unusable)."""
    import flow.cli

    y = flow.cli._converted(x, np.dtype(dtype), "x")
    assert y.dtype == dtype and np.array_equal(y.astype(x.dtype), x)


def test_cli_run_compare_says_when_onnxruntime_cannot_run_the_model(tmp_path, capsys):
    """onnxruntime has no QLinearConv kernel for uint8 input and int8 output (legal ONNX):
    ``--compare`` ended in its traceback after the run. Now the run's outputs and report are
    kept, the comparison is named as missing, and the exit status is 1."""
    tsr = _uint8_qlinear_conv(tmp_path)
    capsys.readouterr()
    assert run_main([tsr, "--compare", "--json", str(tmp_path / "r.json"),
                     "--output", str(tmp_path / "y.npz")]) == 1
    err = capsys.readouterr().err
    assert "--compare: onnxruntime cannot run the stored model (" in err
    assert "no comparison" in err
    assert "error" in json.loads((tmp_path / "r.json").read_text())["vs_onnxruntime"]
    with np.load(tmp_path / "y.npz") as y:
        assert y["y"].shape == (1, 4, 6, 6)


def _float_model(op, opset, tmp_path, bias_shape=(4,)):
    """A float Conv (1, 2, 6, 6) -> (1, 4, 6, 6) or Gemm (3, 6) -> (3, 4) model file."""
    rng = np.random.default_rng(2)
    if op == "Conv":
        x, y = [1, 2, 6, 6], [1, 4, 6, 6]
        consts = {"w": rng.standard_normal((4, 2, 3, 3)).astype(np.float32),
                  "b": rng.standard_normal(bias_shape).astype(np.float32)}
        node = helper.make_node("Conv", ["x", "w", "b"], ["y"], name="conv", pads=[1, 1, 1, 1])
    else:
        x, y = [3, 6], [3, 4]
        consts = {"w": rng.standard_normal((6, 4)).astype(np.float32),
                  "b": rng.standard_normal(bias_shape).astype(np.float32)}
        node = helper.make_node("Gemm", ["x", "w", "b"], ["y"], name="fc")
    model = helper.make_model(
        helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, y)],
                          [onnx.numpy_helper.from_array(v, k) for k, v in consts.items()]),
        opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 7
    path = tmp_path / f"{op}{opset}.onnx"
    onnx.save(model, path)
    return path


@pytest.mark.parametrize("opset", [11, 12])
def test_float_models_of_opset_11_and_12_are_quantised_at_opset_13(opset, tmp_path, caplog):
    """Per-channel quantisation writes DequantizeLinear with an axis, which needs opset 13:
    such models failed with "Unrecognized attribute: axis for operator DequantizeLinear", a
    node of tessera's own. (onnxruntime's advice to pre-process, printed on every compile of
    a float model, is dropped: the model is already shape-inferred and folded.)"""
    net = compile_model(_float_model("Conv", opset, tmp_path), {}, SMALL)
    assert not [r for r in caplog.records if "pre-processing" in r.getMessage()]
    assert [s.layer_names for s in net.steps if s.kind == "segment"] == [["conv"]]
    feeds = _x((1, 2, 6, 6))
    ours = run_network(net, feeds).outputs["y"]
    want = reference.onnxruntime_outputs(onnx.load_from_string(net.qmodel), feeds)["y"]
    assert np.abs(ours - want).max() <= 1.001 * float(reference._output_scale(net.graph(), "y"))


def test_cli_compile_names_quantiser_failures_and_unknown_opsets(tmp_path, capsys):
    """onnxruntime's quantiser failing (here its calibration run, on a Conv bias of shape (1,),
    which onnx.checker lets through; a (1,) Gemm bias, the case this test used to take, is now
    normalised away) was its traceback; an opset newer than onnx knows (40) was compiled and
    run, though onnxruntime refuses it."""
    path = _float_model("Conv", 17, tmp_path, bias_shape=(1,))
    assert compile_main([str(path), "-o", str(tmp_path / "g.tsr")]) == 2
    err = capsys.readouterr().err
    assert "tessera compile: onnxruntime's quantiser failed on this float model (" in err
    assert "bias must be a 1D tensor of size output_channels" in err
    model = onnx.load(_float_model("Conv", 17, tmp_path))
    model.opset_import[0].version = 40
    onnx.save(model, tmp_path / "new.onnx")
    assert compile_main([str(tmp_path / "new.onnx"), "-o", str(tmp_path / "n.tsr")]) == 2
    assert f"opset 40 is newer than the installed onnx {onnx.__version__} knows" in \
        capsys.readouterr().err
    assert not (tmp_path / "g.tsr").exists() and not (tmp_path / "n.tsr").exists()


def test_run_time_gemms_are_predicted_at_compile_time(capsys, tmp_path):
    """Activation x activation GEMMs get their images at run time; the compiled network now
    predicts them too (``summary()["gemm_predicted_cycles"]``, printed by compile), equal to
    what the run predicts for those steps (it used to report the segments only)."""
    from planner import PostLoad, layer_cost
    from planner.net.models import encoder_block

    q, low = _lowered(encoder_block(seq=8, hidden=64, heads=4, ffn=128))
    net = compile_network(low, SMALL, qmodel=q)
    s = net.summary()
    assert s["gemm_steps"] == 2 and s["gemm_predicted_cycles"] > 0
    feeds = {n: np.random.default_rng(0).standard_normal(v["shape"]).astype(np.float32)
             for n, v in net.inputs.items()}
    run = run_network(net, feeds)
    gemm = [st for st in run.steps if st["kind"] == "gemm"]
    assert len(gemm) == 2
    assert sum(r["predicted_cycles"] for st in gemm for r in st["records"]) + \
        sum(st["overhead_predicted"] for st in gemm) == s["gemm_predicted_cycles"]
    assert run.predicted_cycles == s["predicted_cycles"] + s["gemm_predicted_cycles"]
    # the copies of b that fold a zero point extend K; the MACs counted are the layer's
    for st in gemm:
        layer = net.layers[st["layers"][0]]
        sh = layer.shape
        assert len(st["records"]) == layer.batch        # one record per head
        k = activation_gemm_k(sh.k, layer.in_zero_point)
        for rec in st["records"]:
            assert rec["macs"] == sh.m * sh.k * sh.n
            assert rec["k"] == k > sh.k
            # the cost entry point, post-processed, is the record's prediction
            assert rec["predicted_cycles"] == layer_cost(
                GemmShape(sh.m, k, sh.n), SMALL, post=PostLoad(True, True)).cycles


def test_seed_004_costs_an_activation_gemm_with_its_extended_k():
    """The assignment's accelerator cost of an attention GEMM is the GEMM the image runs, K
    extended by the copies of b that fold the left zero point (it costed the plain K: about
    half the cycles)."""
    from planner import GemmShape, PostLoad, layer_cost
    from planner.net.assign import analyse
    from planner.net.models import encoder_block

    _, low = _lowered(encoder_block(seq=8, hidden=64, heads=4, ffn=128))
    ops = {op.name: op for op in analyse(low, SMALL)}
    for layer in low.layers:
        if layer.kind == "gemm":
            s = layer.shape
            k = activation_gemm_k(s.k, layer.in_zero_point)
            assert k > s.k
            assert ops[layer.name].accel_cycles == layer_cost(
                GemmShape(s.m, k, s.n), SMALL, post=PostLoad(True, True)).cycles * layer.batch


def test_cli_compile_refuses_malformed_models(tmp_path, capsys):
    (tmp_path / "junk.onnx").write_bytes(b"\x00garbage")
    assert compile_main([str(tmp_path / "junk.onnx"), "-o", str(tmp_path / "j.tsr")]) == 2
    assert "tessera compile:" in capsys.readouterr().err
    assert not (tmp_path / "j.tsr").exists()


@pytest.mark.parametrize("strategy", ["bogus", "db"])
def test_compile_refuses_an_unknown_strategy_before_any_work(cnn, tmp_path, capsys, strategy):
    """An unknown strategy used to put every layer on the host (each record refused) and exit
    0; ``db`` needs a tuning database, which compile does not take."""
    q, low, _ = cnn
    with pytest.raises(CompileError, match=f"strategy must be one of seed, greedy, search, "
                                           f"best, not '{strategy}'"):
        compile_network(low, SMALL, strategy=strategy)
    with pytest.raises(SystemExit):
        compile_main([str(tmp_path / "missing.onnx"), "-o", str(tmp_path / "m.tsr"),
                      "--strategy", strategy])
    assert "invalid choice" in capsys.readouterr().err
    assert not (tmp_path / "m.tsr").exists()


@pytest.mark.parametrize("main, args", [
    (compile_main, ["{tmp}/missing.onnx", "-o", "{tmp}/m.tsr", "--seeded-weights", "-1"]),
    (run_main, ["{tmp}/missing.tsr", "--seed", "-3"]),
])
def test_cli_seeds_must_be_non_negative(main, args, tmp_path, capsys):
    """numpy's generators refuse negative seeds: the run ended in their ValueError."""
    with pytest.raises(SystemExit) as info:
        main([a.format(tmp=tmp_path) for a in args])
    assert info.value.code == 2
    assert "must be >= 0, not -" in capsys.readouterr().err


def test_unknown_op_compiles_to_the_host_and_fails_naming_it_when_run():
    """A quantised model (QLinearConv) followed by an operator of an unknown domain."""
    rng = np.random.default_rng(3)
    model = _qlinear_conv_model(
        rng, np.int8(3), 4, 8, 8, domains=["com.example"],
        then=[helper.make_node("Swizzle", ["c"], ["y"], name="swz", domain="com.example")])
    net = compile_network(lower(import_onnx(model)), SMALL)
    assert [s.node.op_type for s in net.steps if s.kind == "host"] == ["Swizzle"]
    assert [s.layer_names for s in net.steps if s.kind == "segment"] == [["conv"]]
    feeds = {"x": rng.integers(-128, 128, (1, 4, 8, 8)).astype(np.int8)}
    with pytest.raises(HostOpError, match="com.example.Swizzle"):
        run_network(net, feeds)


def test_compile_model_accepts_an_already_quantised_model(cnn, tmp_path):
    q, low, net = cnn
    onnx.save(q, tmp_path / "q.onnx")
    again = compile_model(tmp_path / "q.onnx", {}, SMALL)
    assert [s.image for s in again.segments] == [s.image for s in net.segments]
    assert generated_inputs(q, 1)[0].keys() == {"x"}


def test_golden_device_refuses_register_mode_start():
    import asyncio

    from firmware.runtime import DeviceError
    from spec.config import PRESETS
    from spec.regmap import CTRL_BITS, REG
    from firmware.emulator import EmulatorDevice

    dev = EmulatorDevice(PRESETS["tiny"])
    with pytest.raises(DeviceError, match="runs images only"):
        asyncio.run(dev.write_register(REG["CTRL"].offset, 1 << CTRL_BITS["START"]))


def _dw_chain(second_kernel: int, stride: int = 1, kernel: int = 3, h: int = 12, w: int = 12,
              channels: int = 8, multiplier: int = 1):
    """x (1 x 3 x ``h`` x ``w``) -> 1x1 conv to ``channels`` channels -> ReLU -> depthwise
    ``kernel`` x ``kernel`` (pad ``kernel // 2``, ``stride``; ``multiplier`` output channels
    an input channel) -> ReLU -> ``second_kernel`` conv (pad k // 2) to 4 channels -> y."""
    rng = np.random.default_rng(3)
    c = channels
    inits = {"w0": rng.normal(0, 0.5, (c, 3, 1, 1)),
             "w1": rng.normal(0, 0.5 * 3 / kernel, (multiplier * c, 1, kernel, kernel)),
             "w2": rng.normal(0, 0.5, (4, multiplier * c, second_kernel, second_kernel))}
    nodes = [helper.make_node("Conv", ["x", "w0"], ["a"], name="c0", kernel_shape=[1, 1]),
             helper.make_node("Relu", ["a"], ["ar"], name="r0"),
             helper.make_node("Conv", ["ar", "w1"], ["b"], name="dw",
                              kernel_shape=[kernel, kernel], pads=[kernel // 2] * 4, group=c,
                              strides=[stride] * 2),
             helper.make_node("Relu", ["b"], ["br"], name="r1"),
             helper.make_node("Conv", ["br", "w2"], ["y"], name="c2",
                              kernel_shape=[second_kernel] * 2,
                              pads=[second_kernel // 2] * 4)]
    graph = helper.make_graph(
        nodes, "dw_chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, h, w])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                       [1, 4, -(-h // stride), -(-w // stride)])],
        [onnx.numpy_helper.from_array(v.astype(np.float32), k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("second_kernel, on_mesh", [(1, True), (3, False)])
def test_depthwise_on_the_mesh_unless_its_reader_needs_padding(second_kernel, on_mesh, stride):
    """On a dw_mesh config a 3x3 depthwise layer of stride 1 or 2 runs on the mesh (one record,
    dense NCHW in and out) unless a reader of its output is a padded convolution (the mesh
    writes dense maps only); a config without the mesh never marks it. Golden runs are exact
    (the dense blocks' diagonal weights included)."""
    q, lowered = _lowered(_dw_chain(second_kernel, stride))
    feeds = {"x": np.random.default_rng(0).normal(0, 1, (1, 3, 12, 12)).astype(np.float32)}
    cfg = dataclasses.replace(SMALL, dw_mesh=1)
    net = compile_network(lowered, cfg, qmodel=q)
    assert net.layers["dw"].mesh is on_mesh
    assert not compile_network(lowered, SMALL, qmodel=q).layers["dw"].mesh
    dw_records = [r for s in net.segments for r in s.records if r.layer == "dw"]
    # off the mesh: one dense block of the 8 channels (diagonal weights), a record per output
    # row of the padded buffer it writes
    out = 12 // stride
    assert len(dw_records) == (1 if on_mesh else out)
    assert sum(r.macs for r in dw_records) == 8 * out * out * 9     # useful MACs only
    golden = run_network(net, feeds, sim="golden")
    want = reference.run(lowered, feeds)
    np.testing.assert_array_equal(golden.outputs["y"], want["y"])
    assert net.depthwise_placement() == [("dw", None if on_mesh else (
        "a convolution off the mesh reads its output padded, and the mesh writes dense NCHW "
        "only"))]
    assert compile_network(lowered, SMALL, qmodel=q).depthwise_placement() == [
        ("dw", "the config has no depthwise mesh (dw_mesh=0)")]


@pytest.mark.parametrize("kernel, stride, h, w", [
    (5, 1, 13, 19), (5, 2, 13, 19), (5, 2, 18, 10), (5, 1, 30, 7),
    (7, 1, 13, 19), (7, 2, 18, 10), (7, 1, 22, 7)])
def test_big_depthwise_kernels_run_on_the_mesh_of_default(kernel, stride, h, w):
    """A depthwise 5x5 or 7x7 Conv (group == C, pads 2 or 3, stride 1 or 2; maps not
    multiples of the mesh's tiles, odd and even heights) compiles onto the mesh of
    ``default``: one record of b_mode 4 or 6 (5 or 7 with stride 2) with seven or thirteen
    weight arrays, 25 or 49 useful MACs an output, predicted by layer_cost; the golden device
    runs the network bit-exactly against the integer reference. On ``small`` (no mesh) it runs
    as a dense channel block, bit-exact too."""
    from firmware.image import decode
    from planner import PostLoad, layer_cost
    from spec.desc import depthwise_arrays

    q, lowered = _lowered(_dw_chain(1, stride, kernel=kernel, h=h, w=w, channels=40))
    feeds = {"x": np.random.default_rng(h + w).normal(0, 1, (1, 3, h, w)).astype(np.float32)}
    want = reference.run(lowered, feeds)
    cfg = PRESETS["default"]
    net = compile_network(lowered, cfg, qmodel=q)
    assert net.layers["dw"].mesh and net.depthwise_placement() == [("dw", None)]
    (rec,) = [r for s in net.segments for r in s.records if r.layer == "dw"]
    oh, ow = -(-h // stride), -(-w // stride)
    assert rec.macs == kernel * kernel * 40 * oh * ow
    b_mode = 2 + (kernel - 3) + (stride - 1)
    layers = [layer for s in net.segments for layer in decode(s.image).layers
              if layer.desc.b_mode >= 4]
    assert [(layer.desc.b_mode, depthwise_arrays(layer.desc.b_mode), layer.desc.m)
            for layer in layers] == [(b_mode, -(-kernel * kernel // 4), 40)]
    shape = net.layers["dw"].shape
    assert (shape.kernel_h, shape.pad_top, shape.stride_h) == (kernel, kernel // 2, stride)
    assert rec.predicted_cycles == layer_cost(shape, cfg,
                                              post=PostLoad(bias=True, requant=True)).cycles
    golden = run_network(net, feeds, sim="golden")
    np.testing.assert_array_equal(golden.outputs["y"], want["y"])
    off = compile_network(lowered, SMALL, qmodel=q)
    assert not off.layers["dw"].mesh
    np.testing.assert_array_equal(run_network(off, feeds, sim="golden").outputs["y"], want["y"])


def test_compile_says_where_each_depthwise_layer_runs(tmp_path, capsys):
    """tessera compile prints how many depthwise layers run on the mesh and why each other one
    runs as dense channel blocks; on a config without the mesh, one line says so."""
    path = tmp_path / "dw.onnx"
    onnx.save(_dw_chain(3, 1), path)
    assert compile_main([str(path), "-o", str(tmp_path / "a.tsr"), "--config", "default"]) == 0
    out = capsys.readouterr().out
    assert "  depthwise: 0 of 1 layers on the mesh\n" in out
    assert "  depthwise: dw: dense channel blocks: a convolution off the mesh reads its " \
           "output padded" in out
    onnx.save(_dw_chain(1, 2), path)
    assert compile_main([str(path), "-o", str(tmp_path / "b.tsr"), "--config", "default"]) == 0
    out = capsys.readouterr().out
    assert "  depthwise: 1 of 1 layers on the mesh\n" in out and "dense channel" not in out
    assert compile_main([str(path), "-o", str(tmp_path / "c.tsr"), "--config", "small"]) == 0
    assert "  depthwise: 1 layer as dense channel blocks (the config has no depthwise mesh, " \
           "dw_mesh=0)" in capsys.readouterr().out
    onnx.save(_dw_chain(1, 2, kernel=5), path)       # 5x5 on the mesh too
    assert compile_main([str(path), "-o", str(tmp_path / "d.tsr"), "--config", "default"]) == 0
    out = capsys.readouterr().out
    assert "  depthwise: 1 of 1 layers on the mesh\n" in out and "dense channel" not in out
    onnx.save(_dw_chain(1, 1, kernel=7), path)       # 7x7 too, on the 16x16
    assert compile_main([str(path), "-o", str(tmp_path / "e.tsr"), "--config", "default"]) == 0
    out = capsys.readouterr().out
    assert "  depthwise: 1 of 1 layers on the mesh\n" in out and "dense channel" not in out
    onnx.save(_dw_chain(1, 1, kernel=9), path)       # 9x9 is not
    assert compile_main([str(path), "-o", str(tmp_path / "f.tsr"), "--config", "default"]) == 0
    out = capsys.readouterr().out
    assert "  depthwise: 0 of 1 layers on the mesh\n" in out
    assert ("  depthwise: dw: dense channel blocks: 9x9 kernel; the mesh walks 3x3 or 5x5 or "
            "7x7") in out
    # a channel multiplier (group == C, 2 C outputs) is not depthwise: one conv per group
    onnx.save(_dw_chain(1, 2, kernel=5, multiplier=2), path)
    for config in ("default", "small"):
        assert compile_main([str(path), "-o", str(tmp_path / "g.tsr"), "--config",
                             config]) == 0
        out = capsys.readouterr().out
        assert "dense channel" not in out
        assert ("  depthwise: dw: one convolution per group: channel multiplier 2 "
                "(out_channels=16 of groups=8); the mesh runs one output channel per input "
                "channel") in out
    assert "  depthwise: 0 of 1 layers on the mesh\n" not in out      # (small: no mesh line)


def test_conv_with_more_taps_than_the_offset_table_runs_in_k_parts(tmp_path, capsys):
    """A uint8 QLinearConv of 120 input channels (1,080 taps; tiny's offset table holds 1,024)
    compiles to a ksplit step: two convolutions of 60 channels with int32 output, whose
    partial sums the host adds and requantises. The halo is the input zero point (130 - 128
    in the int8 domain), so padded taps are not zeros. Bit-exact with the int8 reference on
    the golden device, through the .tsr and the CLI; the prediction at compile time is the
    run's."""
    from flow.compile import build_ksplit_image, k_split

    model = _qlinear_conv_model(np.random.default_rng(8), np.uint8(130), 120, 6, 7)
    onnx.save(model, tmp_path / "q.onnx")
    assert compile_main([str(tmp_path / "q.onnx"), "-o", str(tmp_path / "q.tsr"),
                         "--config", "tiny"]) == 0
    out = capsys.readouterr().out
    assert "1 convolutions in K parts" in out
    assert ("  K parts: conv: K=1080 taps > conv_offset_entries=1024: 2 parts (slices of its "
            "input channels) per group and image, 2 convolutions in 1 image run, int32 partial "
            "sums added and requantised on the host") in out
    net = CompiledNetwork.load(tmp_path / "q.tsr")
    (step,) = [s for s in net.steps if s.kind == "ksplit"]
    layer = net.layers[step.layer]
    assert k_split(layer, net.cfg) and layer.halo == 2
    x = np.random.default_rng(3).integers(0, 256, (1, 120, 7, 7), dtype=np.uint8)
    low = lower(import_onnx(model))
    run = run_network(net, {"x": x})
    assert np.array_equal(run.outputs["y"], reference.run(low, {"x": x})["y"])
    (rep,) = [s for s in run.steps if s["kind"] == "ksplit"]
    assert [r["record"] for r in rep["records"]] == ["conv[K 0:60]", "conv[K 60:120]"]
    assert run.predicted_cycles == net.summary()["ksplit_predicted_cycles"]
    with pytest.raises(ValueError, match=r"conv: input must be one int8 image of shape "
                                         r"\(1, 120, 7, 7\)"):
        build_ksplit_image(layer, x, net.cfg)
    # the same layer on small (4,096 entries) is one convolution
    assert not k_split(layer, SMALL)


def test_a_kernel_larger_than_the_offset_table_stays_on_the_host():
    """33 x 33 taps of one channel exceed tiny's 1,024 offset entries: no K part fits, so the
    layer runs on the host, and says why."""
    rng = np.random.default_rng(2)
    model = _model([helper.make_node("Conv", ["x", "w"], ["y"], name="huge")],
                   {"w": rng.normal(0, .1, (2, 1, 33, 33)).astype(np.float32)},
                   (1, 1, 40, 40), (1, 2, 8, 8))
    q, low = _lowered(model)
    net = compile_network(low, PRESETS["tiny"])
    assert net.summary()["ksplit_steps"] == 0
    assert "one input channel's 1089 taps exceed conv_offset_entries=1024" in \
        net.summary()["host_layers"]["huge"]
    feeds = {"x": np.random.default_rng(5).standard_normal((1, 1, 40, 40)).astype(np.float32)}
    assert np.array_equal(run_network(net, feeds).outputs["y"], reference.run(low, feeds)["y"])


def test_cli_run_compare_falls_back_to_onnxruntime_without_its_optimisations(tmp_path,
                                                                            capsys):
    """onnxruntime's graph optimisations rewrite an int8 QLinearConv into
    com.microsoft.QLinearConv, which has no int8 kernel, so ``--compare`` said "no comparison"
    and exited 1 for every such model, while the same model runs with them off. Now it
    compares with them off, says so, and exits 0."""
    model = _qlinear_conv_model(np.random.default_rng(6), np.int8(5), 8, 8, 7)
    onnx.save(model, tmp_path / "q.onnx")
    assert compile_main([str(tmp_path / "q.onnx"), "-o", str(tmp_path / "q.tsr"),
                         "--config", "tiny"]) == 0
    capsys.readouterr()
    assert run_main([str(tmp_path / "q.tsr"), "--compare", "--json",
                     str(tmp_path / "r.json")]) == 0
    captured = capsys.readouterr()
    assert ("onnxruntime cannot run the stored model with its graph optimisations ("
            in captured.err and "compared with them off" in captured.err)
    assert "y: vs onnxruntime with its graph optimisations off: max abs diff" in captured.out
    report = json.loads((tmp_path / "r.json").read_text())
    assert "error" in report["vs_onnxruntime"]
    assert report["vs_onnxruntime_unoptimised"]["y"]["max_abs_diff"] <= 1      # int8 units


@pytest.mark.parametrize("w_shape, attrs, message", [
    ((8, 1, 5, 5), dict(group=8, kernel_shape=[3, 3]),
     "kernel_shape [3, 3] does not match its weights of shape (8, 1, 5, 5)"),
    ((8, 2, 3, 3), dict(group=8),
     "group=8 with weights of shape (8, 2, 3, 3) does not fit its input's 8 channels"),
    ((9, 1, 3, 3), dict(group=8),
     "group=8 with weights of shape (9, 1, 3, 3) does not fit its input's 8 channels"),
], ids=["kernel-shape", "weight-channels", "out-channels"])
def test_compile_refuses_a_conv_whose_weights_contradict_its_attributes(w_shape, attrs,
                                                                       message, tmp_path,
                                                                       capsys):
    """ONNX requires kernel_shape to be the weights' and C = group x their dim 1;
    onnx.checker does not check it and onnxruntime refuses such a node. Compiled, the layer
    went to the host and the run wrote an output of another shape (1 x 8 x 5 x 5 for a
    declared 1 x 8 x 7 x 7), exit 0, or failed at run time; now compile names the node."""
    rng = np.random.default_rng(0)
    consts = {"xs": np.array(0.05, np.float32), "xz": np.array(3, np.int8),
              "w": rng.integers(-127, 128, w_shape).astype(np.int8),
              "ws": np.full(w_shape[0], 0.01, np.float32), "wz": np.zeros(w_shape[0], np.int8),
              "ys": np.array(0.1, np.float32), "yz": np.array(0, np.int8)}
    node = helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"],
                            ["y"], name="bad", pads=[1, 1, 1, 1], **attrs)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.INT8, [1, 8, 7, 7])],
        [helper.make_tensor_value_info("y", TensorProto.INT8, [1, w_shape[0], 7, 7])],
        [onnx.numpy_helper.from_array(v, n) for n, v in consts.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, tmp_path / "bad.onnx")
    assert compile_main([str(tmp_path / "bad.onnx"), "-o", str(tmp_path / "bad.tsr")]) == 2
    err = capsys.readouterr().err
    assert f"QLinearConv node 'bad': {message}" in err
    assert not (tmp_path / "bad.tsr").exists()


def test_large_kernel_depthwise_runs_in_blocks_whose_taps_fit():
    """A 31 x 31 depthwise layer (RepLKNet style) on fpga: 961 taps a channel, so blocks of 4
    channels (16 would need 15,376 offsets); it used to run on the host, while layer_cost
    gave it accelerator cycles. Bit-exact with the int8 reference."""
    rng = np.random.default_rng(3)
    model = _model([helper.make_node("Conv", ["x", "w"], ["y"], name="dw31", group=6,
                                     pads=[15, 15, 15, 15])],
                   {"w": rng.normal(0, .05, (6, 1, 31, 31)).astype(np.float32)},
                   (1, 6, 20, 20), (1, 6, 20, 20))
    q, low = _lowered(model)
    net = compile_network(low, PRESETS["fpga"])
    assert net.summary()["host_layers"] == {}
    (seg,) = net.segments
    assert sorted({r.name.split("[row")[0] for r in seg.records}) == ["dw31[ch 0:4]",
                                                                      "dw31[ch 4:6]"]
    feeds = _x((1, 6, 20, 20))
    assert np.array_equal(run_network(net, feeds).outputs["y"], reference.run(low, feeds)["y"])


@pytest.mark.parametrize("mid, groups, batch, stride", [
    (130, 1, 1, 1), (240, 2, 2, 1), (390, 3, 3, 2)], ids=["one", "2-groups-batch-2",
                                                          "3-groups-batch-3-stride-2"])
def test_k_parts_of_every_group_and_image_read_their_own_channels(mid, groups, batch, stride):
    """Each image's run and each group's parts read their own slice of the input (a record
    reading group 0's or image 0's channels would agree with the golden device only through
    an RTL run): bit-exact against the int8 reference, one image run per image, and the
    records' predictions (raw: int32 out, no post-processing) add up to layer_cost's."""
    from planner import layer_cost
    from planner.conv import k_parts

    from planner.net.models import deep_conv

    q, low = _lowered(deep_conv(mid, groups=groups, batch=batch, stride=stride,
                                seed=mid + groups + batch))
    cfg = PRESETS["tiny"]
    net = compile_network(low, cfg)
    assert [(s.kind, s.layer_names) for s in net.steps if s.kind != "host"] == [
        ("segment", ["wide"]), ("ksplit", ["deep"])]
    feeds = _x((batch, 4, 8, 8))
    run = run_network(net, feeds)
    assert np.array_equal(run.outputs["y"], reference.run(low, feeds)["y"])
    (step,) = [s for s in run.steps if s["kind"] == "ksplit"]
    deep = net.layers["deep"]
    parts = k_parts(deep.shape, cfg)
    assert len(parts) == 2
    label = [f"deep{f'[n{n}]' if batch > 1 else ''}{f'[g{g}]' if groups > 1 else ''}"
             f"[K {c0}:{c1}]" for n in range(batch) for g in range(groups) for c0, c1 in parts]
    assert [r["record"] for r in step["records"]] == label
    assert sum(r["predicted_cycles"] for r in step["records"]) == \
        layer_cost(deep.shape, cfg).cycles
    assert run.predicted_cycles == sum(net.summary()[k] for k in ("predicted_cycles",
                                                                 "ksplit_predicted_cycles"))


@pytest.mark.parametrize("c, side, out, reason", [
    # layer_cost's estimate fits; the builder's tables, alignment and statistics do not
    (120, 54, 26, "the image builder refused it: deep: its K parts' image: buffer 'part0.1'"),
    # beyond a run-time image's halves: layer_cost refuses it already
    (130, 40, 64, "the accelerator cannot run it (ConvShape("),
], ids=["image-layout", "device-memory"])
def test_k_parts_whose_image_does_not_fit_run_on_the_host(c, side, out, reason):
    """On a 1 MiB tiny, the K parts' int32 partial sums of one image do not fit the data
    region of a run-time image wherever it starts (planner.DATA_FRACTIONS): the compiler
    checks when it compiles, and the layer runs on the host with the reason (it used to fail
    when run)."""
    w = np.random.default_rng(1).normal(0, .05, (out, c, 3, 3)).astype(np.float32)
    model = _model([helper.make_node("Conv", ["x", "w"], ["y"], name="deep", pads=[1, 1, 1, 1])],
                   {"w": w}, (1, c, side, side), (1, out, side, side))
    q, low = _lowered(model)
    cfg = dataclasses.replace(PRESETS["tiny"], dram_addr_bits=20)
    net = compile_network(low, cfg)
    s = net.summary()
    assert s["ksplit_steps"] == 0
    assert s["host_layers"]["deep"].startswith(reason)
    assert "does not fit" in s["host_layers"]["deep"] or "an image run needs" in \
        s["host_layers"]["deep"]
    feeds = _x((1, c, side, side))
    assert np.array_equal(run_network(net, feeds).outputs["y"], reference.run(low, feeds)["y"])


def _one_layer(kind: str, c: int, k: int, side: int = 0, kernel: int = 3, stride: int = 1,
               groups: int = 1, rows: int = 2):
    """A one-layer float model: a Conv (``c`` -> ``k`` channels, ``side`` x ``side``, pad
    ``kernel // 2``) or a Gemm (``rows`` x ``c`` -> ``k`` features)."""
    rng = np.random.default_rng(c + k + side)
    if kind == "fc":
        node = helper.make_node("Gemm", ["x", "w"], ["y"], name="layer", transB=1)
        return _model([node], {"w": rng.normal(0, .1, (k, c)).astype(np.float32)},
                      (rows, c), (rows, k))
    p = kernel // 2
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="layer", group=groups,
                            pads=[p] * 4, strides=[stride, stride])
    out = (side + 2 * p - kernel) // stride + 1
    return _model([node], {"w": rng.normal(0, .1, (k, c // groups, kernel, kernel))
                           .astype(np.float32)}, (1, c, side, side), (1, k, out, out))


@pytest.mark.parametrize("preset, kind, args", [
    ("tiny", "fc", dict(c=147, k=513)),                         # 3 chunks of quant_entries
    ("fpga", "conv", dict(c=64, k=2048, side=7, kernel=1)),     # 2 chunks
    ("default", "conv", dict(c=8, k=16, side=10, groups=8)),    # many small records
    ("default", "conv", dict(c=17, k=17, side=13, stride=2, groups=17)),     # the mesh
    ("default", "conv", dict(c=960, k=960, side=7, groups=960)),             # quadrants
    ("default", "conv", dict(c=17, k=17, side=14, kernel=5, groups=17)),     # the mesh, 5x5
    ("default", "conv", dict(c=33, k=33, side=15, kernel=5, stride=2, groups=33)),
    ("default", "conv", dict(c=17, k=17, side=14, kernel=7, groups=17)),     # the mesh, 7x7
    ("default", "conv", dict(c=17, k=17, side=14, kernel=9, groups=17)),     # channel blocks
    ("tiny", "conv", dict(c=3, k=4, side=68)),                  # bands of rows
    ("tiny", "conv", dict(c=130, k=8, side=8)),                 # K parts: raw records
], ids=["fc-chunks", "conv-chunks", "grouped", "mesh-s2", "mesh-quad", "mesh-5x5",
        "mesh-5x5-s2", "mesh-7x7", "dw-blocks", "bands", "k-parts"])
def test_layer_cost_with_post_processing_is_the_compiled_layer(preset, kind, args):
    """layer_cost(..., post=PostLoad(bias, requant)) costs the records the compiler builds for
    the layer on its own (the compiled layer's predictions: the cost entry point and
    tessera compile agree; without ``post`` layer_cost is the raw layer's, up to 21% less on
    layers of many small records)."""
    from flow.compile import ksplit_predicted_cycles
    from planner import PostLoad, layer_cost

    cfg = PRESETS[preset]
    q, low = _lowered(_one_layer(kind, **args))
    (layer,) = low.layers
    net = compile_network(low, cfg)
    assert net.summary()["host_layers"] == {}
    post = layer_cost(layer.shape, cfg, post=PostLoad(bias=True, requant=True))
    if net.summary()["ksplit_steps"]:
        # K parts are raw records (the host requantises): post does not apply
        assert post.cycles == layer_cost(layer.shape, cfg).cycles
        assert ksplit_predicted_cycles(layer, cfg) > post.cycles      # + the image's own
        return
    records = [r.predicted_cycles for seg in net.segments for r in seg.records]
    assert post.cycles == sum(records)


def test_a_segment_with_large_tensors_moves_its_data_region_down():
    """A 3 -> 96 channel convolution on a 160 x 160 map has 2.5 MB of tensors, more than the
    upper half of tiny's 4 MiB: the data region may now start below the middle of the DRAM
    (planner.DATA_FRACTIONS), so it runs on the accelerator (it ran on the host: "does not
    fit device memory"). Bit-exact."""
    w = np.random.default_rng(2).normal(0, .3, (96, 3, 3, 3)).astype(np.float32)
    model = _model([helper.make_node("Conv", ["x", "w"], ["y"], name="big", pads=[1, 1, 1, 1])],
                   {"w": w}, (1, 3, 160, 160), (1, 96, 160, 160))
    q, low = _lowered(model)
    net = compile_network(low, PRESETS["tiny"])
    assert net.summary()["host_layers"] == {}
    feeds = _x((1, 3, 160, 160))
    assert np.array_equal(run_network(net, feeds).outputs["y"], reference.run(low, feeds)["y"])


def _tf_same_net(h: int = 40, w: int = 38, channels: int = 24):
    """x (1 x 3 x ``h`` x ``w``) -> 1x1 conv -> ReLU, then three stride-2 depthwise layers with
    TF/Keras "SAME" padding, each followed by ReLU and a 1x1 conv (-> ReLU): ``dw3`` 3x3 with
    explicit pads [0, 0, 1, 1] (ONNX order: top, left, bottom, right), ``dw5`` 5x5 with
    ``auto_pad=SAME_UPPER`` on a map of even height and odd width (pads (1, 2) on the rows,
    (2, 2) on the columns), ``dw7`` 7x7 behind a zero ``Pad`` of (2, 3) a side and pads 0 (the
    ``ZeroPadding2D`` + ``valid`` pair of Keras' EfficientNet; fold_pad makes it the Conv's
    padding) -> y."""
    rng = np.random.default_rng(7)
    c = channels
    inits = {"w0": rng.normal(0, 0.5, (c, 3, 1, 1))}
    nodes = [helper.make_node("Conv", ["x", "w0"], ["a0"], name="c0", kernel_shape=[1, 1]),
             helper.make_node("Relu", ["a0"], ["r0"], name="relu0")]
    x, hw = "r0", (h, w)
    for i, (k, how) in enumerate(((3, "pads"), (5, "same_upper"), (7, "pad_node"))):
        inits[f"wd{k}"] = rng.normal(0, 1.5 / k, (c, 1, k, k))
        inits[f"wp{k}"] = rng.normal(0, 0.4, (c, c, 1, 1))
        attrs = dict(kernel_shape=[k, k], group=c, strides=[2, 2])
        if how == "pads":
            attrs["pads"] = [k // 2 - 1, k // 2 - 1, k // 2, k // 2]
        elif how == "same_upper":
            attrs["auto_pad"] = "SAME_UPPER"
        else:
            inits[f"pads{k}"] = np.array([0, 0, k // 2 - 1, k // 2 - 1, 0, 0, k // 2, k // 2],
                                         np.int64)
            nodes.append(helper.make_node("Pad", [x, f"pads{k}"], [f"padded{k}"],
                                          name=f"pad{k}"))
            x, attrs["pads"] = f"padded{k}", [0, 0, 0, 0]
        nodes += [helper.make_node("Conv", [x, f"wd{k}"], [f"d{k}"], name=f"dw{k}", **attrs),
                  helper.make_node("Relu", [f"d{k}"], [f"rd{k}"], name=f"relu_d{k}"),
                  helper.make_node("Conv", [f"rd{k}", f"wp{k}"], [f"p{k}"], name=f"pw{k}",
                                   kernel_shape=[1, 1])]
        x = f"p{k}"
        if i < 2:
            nodes.append(helper.make_node("Relu", [x], [f"rp{k}"], name=f"relu_p{k}"))
            x = f"rp{k}"
        hw = (-(-hw[0] // 2), -(-hw[1] // 2))
    nodes[-1].output[0] = "y"
    graph = helper.make_graph(
        nodes, "tf_same", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, h, w])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c, *hw])],
        [onnx.numpy_helper.from_array(v if v.dtype == np.int64 else v.astype(np.float32), k)
         for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_tf_same_stride_2_depthwise_layers_run_on_the_mesh(tmp_path, capsys):
    """Stride-2 depthwise Convs padded one less before an even side (TF "SAME": explicit pads
    [p - 1, p - 1, p, p], auto_pad=SAME_UPPER, a zero Pad folded into the Conv) lower to
    shapes the mesh takes (planner.dwcost.mesh_shape), compile onto the mesh of default with
    b_mode 3, 5, 7 plus 8 / 16 where the side is even (dw5's 20 x 19 map: odd rows only), each
    record predicted by predict_depthwise (= layer_cost), and the golden device runs the
    network bit-exactly against the int8 reference, which is within 2 LSB of onnxruntime.
    tessera compile prints them on the mesh."""
    from firmware.image import decode
    from flow.cli import prepare_model
    from planner import PostLoad, layer_cost
    from planner.dwcost import mesh_odd, mesh_shape, predict_depthwise
    from planner.net.reference import compare_with_onnxruntime
    from spec.desc import DEPTHWISE_STRIDES

    path = tmp_path / "tf_same.onnx"
    onnx.save(_tf_same_net(), path)
    q, lowered = prepare_model(str(path), {})
    cfg = PRESETS["default"]
    net = compile_network(lowered, cfg, qmodel=q)
    # input map, pads (top, left, bottom, right), odd rows / columns, b_mode
    want = {"dw3": ((40, 38), (0, 0, 1, 1), (True, True), 3 | 8 | 16),
            "dw5": ((20, 19), (1, 2, 2, 2), (True, False), 5 | 8),
            "dw7": ((10, 10), (2, 2, 3, 3), (True, True), 7 | 8 | 16)}
    assert net.depthwise_placement() == [(name, None) for name in want]
    b_modes = {}
    for seg in net.segments:
        for rec, layer in zip(seg.records, decode(seg.image).layers):
            if layer.desc.b_mode in DEPTHWISE_STRIDES:
                b_modes[rec.layer] = layer.desc.b_mode
                assert rec.predicted_cycles == predict_depthwise(
                    layer.desc, cfg, post=PostLoad(bias=True, requant=True)).total_cycles
    for name, (in_hw, pads, odd, b_mode) in want.items():
        layer = net.layers[name]
        s = layer.shape
        assert layer.mesh and mesh_shape(s) and mesh_odd(s) == odd, name
        assert ((s.height, s.width), (s.pad_top, s.pad_left, s.pad_bottom, s.pad_right)) == \
            (in_hw, pads), name
        assert b_modes[name] == b_mode
        (rec,) = [r for seg in net.segments for r in seg.records if r.layer == name]
        assert rec.predicted_cycles == layer_cost(
            s, cfg, post=PostLoad(bias=True, requant=True)).cycles
    feeds = {"x": np.random.default_rng(11).normal(0, 1, (1, 3, 40, 38)).astype(np.float32)}
    ref = reference.run(lowered, feeds)
    assert np.unique(ref["y"]).size > 100           # (the three layers are one segment: y)
    np.testing.assert_array_equal(run_network(net, feeds, sim="golden").outputs["y"], ref["y"])
    (cmp,) = compare_with_onnxruntime(q, lowered, feeds)
    assert cmp.max_abs_diff_lsb <= 2 and cmp.pct_equal >= 50
    assert compile_main([str(path), "-o", str(tmp_path / "n.tsr"), "--config", "default"]) == 0
    out = capsys.readouterr().out
    assert "  depthwise: 3 of 3 layers on the mesh\n" in out and "dense channel" not in out


def test_compile_names_the_operators_left_on_the_host_and_why(tmp_path, capsys):
    """An operator of the accelerator's kinds that matches no layer runs on the host; compile
    said "0 layers on the host" and nothing else (explain alone said why). Saved in the .tsr."""
    model = _qlinear_conv_model(np.random.default_rng(4), np.int8(0), 2, 4, 6)
    ws = next(i for i in model.graph.initializer if i.name == "ws")
    ws.CopyFrom(onnx.numpy_helper.from_array(np.array(-0.01, np.float32), "ws"))
    onnx.save(model, tmp_path / "q.onnx")
    assert compile_main([str(tmp_path / "q.onnx"), "-o", str(tmp_path / "q.tsr"),
                         "--config", "tiny"]) == 0
    assert "  host op: conv: not an accelerator layer: scale 'ws' is negative (the " \
           "requantiser's multipliers are positive)" in capsys.readouterr().out
    assert CompiledNetwork.load(tmp_path / "q.tsr").unmatched == {
        "conv": "scale 'ws' is negative (the requantiser's multipliers are positive)"}


def test_a_tensor_of_the_wrong_type_is_named():
    """("expected an int8 tensor, got int32", naming no tensor: a host op's output of the
    wrong type, as a hand-edited zero point makes.)"""
    buf = TensorBuffer(tensor="x_q", addr=0, nbytes=4, layout="rowmajor", shape=(2, 2))
    with pytest.raises(ModelError, match="tensor 'x_q': expected an int8 tensor, got int32"):
        buf.encode(np.zeros((2, 2), np.int32))


def test_a_layer_too_large_for_the_device_memory_says_so_in_compiler_terms(tmp_path):
    """The image builder's "move data_addr up" (its API's option) reached `tessera compile`'s
    host reasons, where no option sets it (a helper's custom 64 KiB configuration)."""
    cfg = dataclasses.replace(PRESETS["small"], dram_addr_bits=16, local_buf_bytes=1024)
    onnx.save(bottleneck(channels=256, height=14, width=14), tmp_path / "b.onnx")
    reason = compile_model(tmp_path / "b.onnx", {}, cfg, seed=0).summary()["host_layers"]["c1"]
    assert "data_addr up" not in reason
    assert reason.endswith("overlaps the data region at data_addr=0x1000, in a device memory "
                           "of 65,536 bytes (dram_addr_bits=16))")
