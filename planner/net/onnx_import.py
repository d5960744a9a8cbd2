"""ONNX models into the graph IR: validation, opset upgrade, constant folding of weight subgraphs,
symbolic dimensions resolved for given input shapes, and shape inference (seed 004, BRIEF §2.5:
shape derivation before tiling and assignment).

::

    graph = import_onnx("light_resnet50.onnx", {"gpu_0/data_0": (1, 3, 224, 224)})
    model = load_model(path, input_shapes)   # the cleaned ModelProto (for onnxruntime)

What :func:`load_model` does, in order:

1. **Parse and check.** Unreadable bytes, a missing default-domain opset, nodes whose inputs
   are never defined, duplicate outputs, cycles and ``onnx.checker`` failures raise
   :class:`~planner.net.graph.ModelError` (a ``ValueError``) naming the node and field. A model
   older than :data:`MIN_OPSET` (e.g. the opset-6 PyTorch-converted models in the ``onnx``
   wheel's test data) is first converted to :data:`UPGRADE_OPSET` with
   ``onnx.version_converter``; when the converter cannot lift a node, the error names it.
2. **Inputs.** Initialisers listed as graph inputs (old exporters) become plain constants. Each
   given input shape is checked against the declared rank and fixed dimensions; symbolic
   dimensions (``dim_param``) are bound to the given values everywhere in the model.
3. **Constant folding.** Every node of the default domain whose inputs are all constant (and
   ``Shape``/``Size`` of a tensor of known shape) is evaluated with ``onnx.reference`` (numpy)
   and replaced by an initialiser, repeated with shape inference until nothing changes.
   ``ConstantOfShape`` weight generators fold this way. Quantize/DequantizeLinear are kept:
   they carry the quantisation of the weights they read.
4. **Upgrade.** Models older than opset 11 (the ``onnx`` wheel's ``light_*`` models are opset
   9) are converted to :data:`UPGRADE_OPSET` with ``onnx.version_converter``, after folding
   (the converter handles the folded graph more reliably), and folded again.
5. **Shape inference** (``onnx.shape_inference``, strict, with data propagation).

Operators the accelerator cannot run are kept as ordinary nodes (they run on the host); an
operator of an unknown domain is kept with unknown output shapes.
"""

from __future__ import annotations

import heapq
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from .graph import Graph, ModelError, Node, Tensor

__all__ = ["MIN_OPSET", "UPGRADE_OPSET", "load_model", "import_onnx", "graph_from_model",
           "parse_input_shapes"]

#: Oldest default-domain opset read as it is; older models are converted first (step 1).
MIN_OPSET = 7
#: Opset models older than 11 are upgraded to.
UPGRADE_OPSET = 13
#: Operators never folded: random sources, and Q/DQ (they carry the weights' quantisation).
NO_FOLD = frozenset({"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear",
                     "RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike",
                     "Multinomial", "Bernoulli", "If", "Loop", "Scan"})

InputShapes = Mapping[str, Sequence[int]]


def parse_input_shapes(specs: Sequence[str]) -> dict[str, tuple[int, ...]]:
    """``["name=1,3,224,224", ...]`` -> ``{"name": (1, 3, 224, 224)}`` (the CLI syntax)."""
    shapes: dict[str, tuple[int, ...]] = {}
    for spec in specs:
        name, sep, dims = spec.rpartition("=")
        try:
            shape = tuple(int(d) for d in dims.split(","))
        except ValueError:
            shape = ()
        if not sep or not name or not shape or min(shape) < 1:
            raise ValueError(f"--input-shape must be NAME=D0,D1,... with dims >= 1, not {spec!r}")
        shapes[name] = shape
    return shapes


def _load_proto(src):
    import onnx

    if isinstance(src, onnx.ModelProto):
        model = onnx.ModelProto()
        model.CopyFrom(src)
        return model
    if isinstance(src, (bytes, bytearray)):
        data, where = bytes(src), "model bytes"
    else:
        path = Path(os.fspath(src))
        if not path.is_file():
            raise ModelError(f"model file {str(path)!r} does not exist")
        data, where = path.read_bytes(), str(path)
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except Exception as e:  # protobuf DecodeError
        raise ModelError(f"{where}: not an ONNX model ({e})") from None
    if not model.HasField("graph") or not model.graph.node:
        raise ModelError(f"{where}: the ONNX model has no graph nodes")
    return model


def _default_opset(model) -> int:
    """The default domain's opset; one newer than the installed ``onnx`` knows is refused
    (onnxruntime refuses it too; the checker does not)."""
    import onnx.defs

    for imp in model.opset_import:
        if imp.domain in ("", "ai.onnx"):
            newest = onnx.defs.onnx_opset_version()
            if imp.version > newest:
                raise ModelError(f"opset {imp.version} is newer than the installed onnx "
                                 f"{onnx.__version__} knows (at most {newest})")
            return imp.version
    raise ModelError("model has no opset_import for the default ONNX domain")


def _node_label(node, i: int) -> str:
    return f"{node.op_type} node {node.name or f'#{i}'!r}"


def _check_structure(model) -> None:
    """Inputs defined before use (after a topological sort), one producer per tensor, graph
    outputs produced; the nodes are reordered topologically in place."""
    g = model.graph
    inits = {t.name for t in g.initializer}
    defined = inits | {i.name for i in g.input}
    producers: dict[str, int] = {}
    for i, node in enumerate(g.node):
        if not node.op_type:
            raise ModelError(f"node #{i} ({node.name!r}) has an empty op_type")
        for out in node.output:
            if not out:
                continue
            if out in producers or out in defined:
                raise ModelError(f"{_node_label(node, i)}: output {out!r} is defined twice")
            producers[out] = i
    for i, node in enumerate(g.node):
        for j, name in enumerate(node.input):
            if name and name not in defined and name not in producers:
                raise ModelError(f"{_node_label(node, i)}: input {j} {name!r} is not a graph "
                                 f"input, an initializer or an output of any node")
    # topological order (Kahn), refusing cycles
    deps = [{producers[n] for n in node.input if n in producers} for node in g.node]
    users: dict[int, list[int]] = {}
    for i, d in enumerate(deps):
        for p in d:
            users.setdefault(p, []).append(i)
    pending = [len(d) for d in deps]
    ready = [i for i, p in enumerate(pending) if p == 0]
    heapq.heapify(ready)
    order = []
    while ready:                 # lowest index first: an already sorted model keeps its order
        i = heapq.heappop(ready)
        order.append(i)
        for u in users.get(i, ()):
            pending[u] -= 1
            if pending[u] == 0:
                heapq.heappush(ready, u)
    if len(order) != len(g.node):
        stuck = next(i for i in range(len(g.node)) if i not in set(order))
        raise ModelError(f"{_node_label(g.node[stuck], stuck)} is part of a cycle")
    nodes = [g.node[i] for i in order]
    del g.node[:]
    g.node.extend(nodes)
    for out in g.output:
        if out.name not in producers and out.name not in defined:
            raise ModelError(f"graph output {out.name!r} is not produced by any node")


def _name_nodes(model) -> None:
    seen: set[str] = set()
    for i, node in enumerate(model.graph.node):
        name = node.name or f"{node.op_type}_{i}"
        while name in seen:
            name = f"{name}_{i}"
        seen.add(name)
        node.name = name


def _bind_inputs(model, input_shapes: InputShapes | None) -> dict[str, int]:
    """Drop initialisers from the graph inputs; apply the given shapes and bind symbols."""
    g = model.graph
    inits = {t.name for t in g.initializer}
    real = [i for i in g.input if i.name not in inits]
    # IR >= 4 lets initialisers stay out of the graph inputs (IR 3 tools ignore them otherwise)
    model.ir_version = max(model.ir_version, 7)
    del g.input[:]
    g.input.extend(real)
    shapes = dict(input_shapes or {})
    names = [i.name for i in real]
    for name in shapes:
        if name not in names:
            raise ModelError(f"input shape given for {name!r}, which is not a graph input; "
                             f"inputs are {', '.join(map(repr, names))}")
    symbols: dict[str, int] = {}
    for inp in real:
        if inp.name not in shapes:
            continue
        given = [int(d) for d in shapes[inp.name]]
        if not inp.type.HasField("tensor_type"):
            raise ModelError(f"graph input {inp.name!r} is not a tensor")
        tt = inp.type.tensor_type
        if tt.HasField("shape"):
            dims = tt.shape.dim
            if len(dims) != len(given):
                raise ModelError(f"graph input {inp.name!r} has rank {len(dims)}; the given "
                                 f"shape {tuple(given)} has rank {len(given)}")
            for k, (dim, value) in enumerate(zip(dims, given)):
                if value < 1:
                    raise ModelError(f"graph input {inp.name!r} dim {k} must be >= 1, not "
                                     f"{value}")
                if dim.HasField("dim_value") and dim.dim_value != value:
                    raise ModelError(f"graph input {inp.name!r} dim {k} is fixed at "
                                     f"{dim.dim_value}; the given shape says {value}")
                if dim.HasField("dim_param") and dim.dim_param:
                    old = symbols.setdefault(dim.dim_param, value)
                    if old != value:
                        raise ModelError(f"symbolic dim {dim.dim_param!r} is bound to {old} and "
                                         f"to {value} (graph input {inp.name!r} dim {k})")
        del tt.shape.dim[:]
        for value in given:
            tt.shape.dim.add().dim_value = value

    def substitute(value_infos):
        for vi in value_infos:
            if vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape"):
                for dim in vi.type.tensor_type.shape.dim:
                    if dim.HasField("dim_param") and dim.dim_param in symbols:
                        dim.dim_value = symbols[dim.dim_param]

    substitute(g.input)
    substitute(g.output)
    del g.value_info[:]          # recomputed by shape inference with the bound symbols
    return symbols


#: Initializers of more bytes than this go through shape inference without their data (it reads
#: their type and dims; ``data_prop`` reads the values of shape tensors, which are small and
#: integer, so integer initializers always keep theirs): ONNX serialises the model for every
#: inference, 2.8 s for VGG-19's 575 MB of weights, and load_model infers up to 18 times.
_INFER_KEEPS_DATA_BELOW = 4096


def _without_large_data(model, transform):
    """``transform(model)`` (a function returning a new model) applied to ``model`` with the
    data of its large non-integer initialisers (:data:`_INFER_KEEPS_DATA_BELOW`) set aside, and
    put back into the result's initialisers of the same name, type and dims; ``model`` is left
    as it was. ONNX's shape inference and version converter serialise the whole model (VGG-19's
    575 MB of weights) and read nothing of such tensors but their type and dims. Returns
    ``None`` if the result changed one of them (a transform that needed the data: the caller
    runs it with the data)."""
    import onnx

    integer = {onnx.TensorProto.INT32, onnx.TensorProto.INT64}
    moved = {t.name: (t.raw_data, t.data_type, tuple(t.dims)) for t in model.graph.initializer
             if len(t.raw_data) > _INFER_KEEPS_DATA_BELOW and t.data_type not in integer}
    for t in model.graph.initializer:
        if t.name in moved:
            t.ClearField("raw_data")
    try:
        out = transform(model)
    finally:
        for t in model.graph.initializer:
            if t.name in moved:
                t.raw_data = moved[t.name][0]
    back = {t.name: t for t in out.graph.initializer if t.name in moved}
    if set(back) != set(moved) or any(
            t.HasField("raw_data") or t.data_location != onnx.TensorProto.DEFAULT
            or (t.data_type, tuple(t.dims)) != moved[n][1:] for n, t in back.items()):
        return None
    for name, t in back.items():
        t.raw_data = moved[name][0]
    return out


def _infer(model):
    """``model`` shape-inferred (strict, types checked, data propagated): a new model; ``model``
    is left as it was."""
    import onnx

    def infer(m):
        try:
            return onnx.shape_inference.infer_shapes(m, check_type=True, strict_mode=True,
                                                     data_prop=True)
        except Exception as e:   # onnx.shape_inference.InferenceError and friends
            raise ModelError(f"shape inference failed: {e}") from None

    out = _without_large_data(model, infer)
    return infer(model) if out is None else out


def _convert_version(model, opset: int):
    """``onnx.version_converter.convert_version(model, opset)``, without the large weights'
    data when the conversion does not touch them (:func:`_without_large_data`)."""
    from onnx import version_converter

    out = _without_large_data(model, lambda m: version_converter.convert_version(m, opset))
    return version_converter.convert_version(model, opset) if out is None else out


def _static_shape(vi) -> tuple[int, ...] | None:
    if not vi.type.HasField("tensor_type") or not vi.type.tensor_type.HasField("shape"):
        return None
    dims = vi.type.tensor_type.shape.dim
    if not all(d.HasField("dim_value") for d in dims):
        return None
    return tuple(d.dim_value for d in dims)


def _fold_once(model) -> int:
    """Fold every foldable node once; returns how many were folded."""
    from onnx import numpy_helper
    from onnx.reference import ReferenceEvaluator

    g = model.graph
    opset = _default_opset(model)
    consts = _Constants(g.initializer)
    shapes = {vi.name: _static_shape(vi) for vi in list(g.value_info) + list(g.input)}
    keep, folded = [], 0
    for node in g.node:
        value = None
        if node.domain in ("", "ai.onnx") and node.op_type not in NO_FOLD:
            if node.op_type in ("Shape", "Size") and node.input[0] not in consts \
                    and shapes.get(node.input[0]) is not None:
                x = np.zeros(shapes[node.input[0]], np.float32)
                value = _evaluate(ReferenceEvaluator, node, opset, {node.input[0]: x})
            elif node.op_type == "ConstantOfShape" and node.input[0] in consts:
                value = [_constant_of_shape(node, consts[node.input[0]])]
            elif all(not n or n in consts for n in node.input):
                value = _evaluate(ReferenceEvaluator, node, opset,
                                  {n: consts[n] for n in node.input if n})
        if value is None or len(value) != len([n for n in node.output if n]):
            keep.append(node)
            continue
        folded += 1
        for name, arr in zip(node.output, value):
            if name:
                consts.add(name, np.asarray(arr))
                g.initializer.append(numpy_helper.from_array(np.asarray(arr), name))
    if folded:
        del g.node[:]
        g.node.extend(keep)
        used = {n for node in keep for n in node.input} | {o.name for o in g.output}
        for i in reversed(range(len(g.initializer))):      # in place: no copy of the others
            if g.initializer[i].name not in used:
                del g.initializer[i]
    return folded


class _Constants:
    """The initialisers of a graph by name, each converted to numpy when first read (a fold
    reads few of them: VGG-19's weights are 575 MB)."""

    def __init__(self, initializers):
        self._protos = {t.name: t for t in initializers}
        self._arrays: dict[str, np.ndarray] = {}

    def __contains__(self, name) -> bool:
        return name in self._arrays or name in self._protos

    def __getitem__(self, name) -> np.ndarray:
        if name not in self._arrays:
            from onnx import numpy_helper

            self._arrays[name] = numpy_helper.to_array(self._protos[name])
        return self._arrays[name]

    def add(self, name: str, value: np.ndarray) -> None:
        self._arrays[name] = value


def _constant_of_shape(node, shape) -> np.ndarray:
    """ConstantOfShape without the reference evaluator (weight generators are numerous)."""
    from onnx import numpy_helper

    fill = np.zeros(1, np.float32)
    for a in node.attribute:
        if a.name == "value":
            fill = numpy_helper.to_array(a.t).reshape(-1)
    return np.full(tuple(int(d) for d in np.asarray(shape).reshape(-1)), fill[0], fill.dtype)


def _evaluate(evaluator, node, opset, feeds):
    """Outputs of ``node`` on constant ``feeds`` (a one-node model at the model's opset), or
    ``None`` when the reference cannot evaluate it (the node then stays a runtime op)."""
    from onnx import helper

    inputs = [helper.make_tensor_value_info(
        n, helper.np_dtype_to_tensor_dtype(np.asarray(v).dtype), np.asarray(v).shape)
        for n, v in feeds.items()]
    outputs = [helper.make_empty_tensor_value_info(n) for n in node.output if n]
    model = helper.make_model(helper.make_graph([node], "fold", inputs, outputs),
                              opset_imports=[helper.make_opsetid("", opset)])
    try:
        return evaluator(model).run(None, feeds)
    except Exception:
        return None


def load_model(src, input_shapes: InputShapes | None = None):
    """A cleaned, folded, shape-inferred ``onnx.ModelProto`` (module docstring, steps 1-5).

    ``src`` is a path, the model's bytes or a ``ModelProto`` (copied, never modified)."""
    import onnx

    model = _load_proto(src)
    opset = _default_opset(model)
    _name_nodes(model)
    if opset < MIN_OPSET:
        model, opset = _lift(model, opset), UPGRADE_OPSET
    _check_structure(model)
    try:
        onnx.checker.check_model(model)
    except onnx.checker.ValidationError as e:
        first = str(e).strip().splitlines()[0]
        # the checker names no tensor for a value without a shape: find them
        bare = [f"{kind} {vi.name!r}" for kind, infos in (("graph input", model.graph.input),
                                                          ("graph output", model.graph.output))
                for vi in infos if vi.type.HasField("tensor_type")
                and not vi.type.tensor_type.HasField("shape")]
        if "shape" in first and bare:
            first += (f" ({', '.join(bare)} without a shape: give each one, symbolic "
                      f"dimensions allowed)")
        raise ModelError(f"onnx.checker: {first}") from None
    symbols = _bind_inputs(model, input_shapes)
    model = _infer(model)
    for _ in range(16):
        if not _fold_once(model):
            break
        del model.graph.value_info[:]
        model = _infer(model)
    if opset < 11:
        try:
            model = _convert_version(model, UPGRADE_OPSET)
        except Exception as e:
            raise ModelError(f"upgrading opset {opset} to {UPGRADE_OPSET} failed: {e}") from None
        _name_nodes(model)      # the converter adds unnamed nodes
        del model.graph.value_info[:]
        model = _infer(model)
        _fold_once(model)       # constants the converter introduced (e.g. Unsqueeze axes)
        del model.graph.value_info[:]
        model = _infer(model)
    model.metadata_props.add(key="tessera.symbols",
                             value=",".join(f"{k}={v}" for k, v in sorted(symbols.items())))
    return model


def _lift(model, opset: int):
    """``model`` (default-domain opset older than :data:`MIN_OPSET`) converted to
    :data:`UPGRADE_OPSET`; a :class:`ModelError` names the node the converter cannot lift."""
    from onnx import version_converter

    try:
        lifted = version_converter.convert_version(model, UPGRADE_OPSET)
    except Exception as e:                  # the converter raises RuntimeError from C++ asserts
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        types = sorted({n.op_type for n in model.graph.node}, key=len, reverse=True)
        culprit = next((t for t in types if t in msg), None)
        where = ""
        if culprit is not None:
            node = next(n for n in model.graph.node if n.op_type == culprit)
            where = f" at node {node.name!r} ({culprit})"
        raise ModelError(f"default-domain opset {opset} is older than {MIN_OPSET} and "
                         f"onnx.version_converter cannot lift it to {UPGRADE_OPSET}{where}: "
                         f"{msg}") from None
    _name_nodes(lifted)                     # the converter adds unnamed nodes
    return lifted


def _dims(vi) -> tuple | None:
    if not vi.type.HasField("tensor_type") or not vi.type.tensor_type.HasField("shape"):
        return None
    out = []
    for i, d in enumerate(vi.type.tensor_type.shape.dim):
        if d.HasField("dim_value"):
            out.append(int(d.dim_value))
        else:
            out.append(d.dim_param or f"{vi.name}:{i}")
    return tuple(out)


def _dtype(elem_type: int) -> np.dtype | None:
    from onnx import helper

    try:
        return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type))
    except (KeyError, TypeError):
        return None


def graph_from_model(model) -> Graph:
    """The IR of a model already cleaned by :func:`load_model`."""
    from onnx import helper, numpy_helper

    g = model.graph
    tensors: dict[str, Tensor] = {}
    for t in g.initializer:
        arr = numpy_helper.to_array(t)
        tensors[t.name] = Tensor(t.name, tuple(arr.shape), arr.dtype, arr)
    for vi in list(g.input) + list(g.value_info) + list(g.output):
        if vi.name in tensors:
            continue
        elem = vi.type.tensor_type.elem_type if vi.type.HasField("tensor_type") else 0
        tensors[vi.name] = Tensor(vi.name, _dims(vi), _dtype(elem) if elem else None)
    nodes = []
    for node in g.node:
        for out in node.output:
            if out and out not in tensors:
                tensors[out] = Tensor(out, None, None)
        attrs = {}
        for a in node.attribute:
            v = helper.get_attribute_value(a)
            if isinstance(v, bytes):
                v = v.decode()
            elif a.type == a.TENSOR:
                v = numpy_helper.to_array(v)
            elif isinstance(v, list):
                v = [x.decode() if isinstance(x, bytes) else x for x in v]
            attrs[a.name] = v
        nodes.append(Node(node.name, node.op_type, list(node.input), list(node.output), attrs,
                          node.domain if node.domain != "ai.onnx" else ""))
    symbols = {}
    for prop in model.metadata_props:
        if prop.key == "tessera.symbols" and prop.value:
            symbols = {k: int(v) for k, v in (kv.split("=") for kv in prop.value.split(","))}
    return Graph(nodes=nodes, tensors=tensors, inputs=[i.name for i in g.input],
                 outputs=[o.name for o in g.output], opset=_default_opset(model),
                 symbols=symbols, name=g.name or "network")


def import_onnx(src, input_shapes: InputShapes | None = None) -> Graph:
    """Load, clean and fold an ONNX model (:func:`load_model`) into the graph IR."""
    return graph_from_model(load_model(src, input_shapes))
