"""Seed 004 (BRIEF §2.5): assign each operation of a network to the host CPU or the accelerator
by an explicit cost/benefit evaluation, and say why.

**Operation analysis.** :func:`analyse` turns a lowered network (:func:`planner.net.lower.lower`
of a quantised graph; shapes static — give ``input_shapes`` for symbolic dims) into :class:`Op`
records, in execution order: one per accelerator layer, with the Q/DQ, bias, activation and
requantisation nodes the lowering fused into it (the post-processor's part of seed 004's
fusion), and one per host op. Ops are *tensor* ops (convolutions, matrix products,
element-wise, pooling, normalisation, layout) or *scalar* ops (shape arithmetic left after
folding, control flow). An accelerator layer the configuration cannot run
(:func:`accel_reason`, or operands beyond the device memory) and a convolution or matrix product
no accelerator pattern matched carry the reason as :attr:`Op.refusal`. Tiling creates scalar work too: loop counts and
the per-tile addresses of every accelerator layer, and the base/offset tables of a conv. With
static shapes all of it is computed on the host at compile time and constant propagation turns
it into literals of the layer descriptor and tables (the hardware sequencer walks the tiles),
so nothing of it is left at run time; dead-code elimination drops the shape expressions
nothing reads any more. Each accelerator-capable op carries one *scalar* companion row that
reports this honestly (:class:`TilingScalars`: expressions generated, runtime expressions left:
0).

**Function library** (:class:`FunctionLibrary`). Accelerator cycles from the planner's one
cost entry point (:func:`planner.layer_cost`, the ``best`` plan: the convolution model for
convolutions) at ``accel_clock_hz``; host time from measured numpy timings per op
class (:func:`measure_host_timings`, cached in a JSON file; tests inject fixed
:class:`HostTimings`); transfer cost from the bytes crossing the host/device link. All times
are microseconds. Tensors are counted at 1 byte per element (int8 after quantisation).

**Evaluation** of op ``i`` on processor ``j``:

* cost ``c = t + a``: ``t`` = transfer time of the inputs that live on the other processor
  (plus outputs that are graph outputs, which must end on the host; a scalar op placed on the
  accelerator adds ``control_roundtrip_us``, the kernel stop / host compute / resume round trip
  of seed 004); ``a`` = the op's execution time on ``j`` (accumulated over all its tiles).
  An accelerator run that leaves host work (:attr:`Op.host_elements`: K parts' partial sums,
  an activation x activation GEMM's zero-point correction; each requantised on the host) adds
  it to ``a`` at the host's quantise rate, and its int32 read-back
  (:attr:`Op.host_readback_bytes`) to ``t``.
* benefit ``p = s + o``: ``s`` = speed-up over the host (``host time / time on j``; 1 on the
  host), ``o`` = complexity reduction looked up by op class and processor
  (:data:`DEFAULT_COMPLEXITY`): e.g. float MACs become int8 MACs on the accelerator, transcendental
  functions and scalar/control work are simpler on the host.

**Decision** (in topological order; candidates: accelerator first for tensor ops, host first
for scalar ops): assign to the first candidate with ``p >= th1`` and ``c <= th2``; otherwise
*fuse with the previous op* (the producer of this op's first input) when it runs on the host
(on the accelerator, the lowering has already fused into each layer the Relu, Clip, folded
BatchNormalization and Quantize/DequantizeLinear nodes its post-processor applies). The fused group is
re-evaluated (``t`` of the intermediate disappears, ``a`` and the speed-up are the group's)
and accepted under the same thresholds; otherwise the op goes to the supported processor of
minimum cost. The assignments are recorded so the next op's ``t`` and fusion see them.

**One decision point.** ``flow.compile.compile_network`` calls :func:`decide` and runs on the
host every layer decided ``host`` (the image builder refusing a layer is the one later
override, recorded as such); ``tessera explain`` prints the rows of the same call. The default
:class:`Thresholds` accept the first candidate that can run an op, so by default every layer
the accelerator supports runs there whatever the host's speed; :data:`SEED_EXAMPLE` trades
cost against benefit.

Deviation from the seed: one accelerator (no per-core choice); ``a`` accumulates over the tiles
of one op, not over a run queue.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Literal

import numpy as np

from planner import PostLoad, layer_cost
from planner.zero_points import activation_gemm_k
from spec.config import AccelConfig

from .graph import Graph, ModelError, Node
from .lower import AccelLayer, Lowered, lower

__all__ = ["Processor", "Op", "TilingScalars", "HostTimings", "FunctionLibrary", "Thresholds",
           "Evaluation", "Decision", "analyse", "assign", "decide", "explain",
           "measure_host_timings", "load_host_timings", "host_timings_path", "DEFAULT_COMPLEXITY",
           "OP_CLASSES", "NOMINAL_HOST", "SEED_EXAMPLE", "accel_reason", "one_line"]

Processor = Literal["host", "accel"]
PROCESSORS: tuple[str, ...] = ("host", "accel")

#: Operator -> op class (the key of the function library). Unlisted operators are "other".
OP_CLASSES: dict[str, str] = {
    **dict.fromkeys(["Conv", "QLinearConv", "ConvInteger"], "conv"),
    **dict.fromkeys(["Gemm", "MatMul", "QLinearMatMul", "MatMulInteger"], "gemm"),
    **dict.fromkeys(["Relu", "Clip", "LeakyRelu", "Sigmoid", "Tanh", "HardSigmoid"],
                    "activation"),
    **dict.fromkeys(["Add", "Sub", "Mul", "Div", "Sum", "Max", "Min", "Neg", "Abs", "Sqrt",
                     "Pow"], "elementwise"),
    **dict.fromkeys(["Softmax", "LayerNormalization", "Erf", "Exp", "Log", "Gelu", "LRN",
                     "Reciprocal", "ReduceMean", "ReduceSum"], "nonlinear"),
    **dict.fromkeys(["MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool"], "pool"),
    **dict.fromkeys(["Reshape", "Flatten", "Transpose", "Concat", "Squeeze", "Unsqueeze",
                     "Identity", "Dropout", "Split", "Slice", "Gather", "Pad"], "layout"),
    **dict.fromkeys(["QuantizeLinear", "DequantizeLinear"], "quant"),
    "BatchNormalization": "batchnorm",
    **dict.fromkeys(["Shape", "Size", "Range", "ConstantOfShape", "NonZero"], "scalar"),
    **dict.fromkeys(["If", "Loop", "Scan"], "control"),
}
#: What the accelerator lacks to run an op of each class on its own (``Op.refusal``): it
#: applies a layer's bias, requantisation, zero point and ReLU / ReLU6 / clamp on chip, and
#: nothing else.
ACCEL_LACKS: dict[str, str] = {
    "activation": "it applies ReLU, ReLU6 and clamps only to a layer's own output",
    "elementwise": "it has no element-wise unit (a layer's bias is added in its "
                   "post-processing)",
    "nonlinear": "it has no unit for transcendental functions or reductions",
    "pool": "it has no pooling unit",
    "layout": "a layout op: the host moves the bytes",
    "batchnorm": "BatchNormalization runs on the accelerator only folded into the Conv "
                 "before it",
    "quant": "its layers quantise and dequantise their own inputs and outputs",
}
#: Complexity reduction ``o`` by (op class, processor). The accelerator's gain is int8 MACs in
#: place of float ones; the host's is scalar/control code and float transcendental functions
#: it runs natively; layout changes are views on the host.
DEFAULT_COMPLEXITY: dict[tuple[str, str], float] = {
    ("conv", "accel"): 1.0, ("gemm", "accel"): 1.0,
    ("nonlinear", "host"): 1.0, ("scalar", "host"): 1.0, ("control", "host"): 1.0,
    ("layout", "host"): 1.0, ("elementwise", "host"): 0.5, ("pool", "host"): 0.5,
    ("quant", "host"): 0.5, ("other", "host"): 0.5,
}


@dataclasses.dataclass(frozen=True)
class TilingScalars:
    """Scalar work the tiling of one accelerator layer creates (seed 004, figure 3)."""

    loop_counts: int          # tile-loop trip counts (3 per GEMM, per group)
    address_exprs: int        # a/b/c address expressions, one per tile and operand
    table_entries: int        # conv base/offset table entries (offsets + runs + groups)
    runtime_exprs: int        # left after constant propagation / DCE (0 with static shapes)

    @property
    def generated(self) -> int:
        return self.loop_counts + self.address_exprs + self.table_entries


@dataclasses.dataclass(frozen=True)
class Op:
    """One operation to assign."""

    name: str
    op_type: str
    op_class: str
    category: Literal["tensor", "scalar"]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    input_bytes: tuple[int, ...]        # per input (0 for constants: resident where used)
    output_bytes: int
    macs: int = 0
    elements: int = 0                   # output elements
    accel_cycles: int | None = None     # None: the accelerator cannot run it standalone
    tiling: TilingScalars | None = None
    graph_output: bool = False
    refusal: str | None = None          # why the accelerator cannot run it (accel_cycles None)
    #: Host work an accelerator run of the op still needs, in output-sized element passes:
    #: a layer in K parts adds its ``parts`` int32 partial sums and requantises (``parts + 1``
    #: per output); an activation x activation GEMM corrects for the zero points and
    #: requantises (2 per output). 0 for a layer the accelerator finishes.
    host_elements: int = 0
    #: Bytes such a run reads back to the host besides its output: the int32 partial sums of
    #: K parts, the int32 output of an activation x activation GEMM.
    host_readback_bytes: int = 0


@dataclasses.dataclass(frozen=True)
class HostTimings:
    """Measured host (numpy) speeds, nanoseconds per unit."""

    ns_per_mac: float
    ns_per_element: dict[str, float]    # op class -> ns per output element
    op_overhead_ns: float               # fixed cost of dispatching one op

    def __post_init__(self):
        def time_ns(value, field: str) -> None:
            if isinstance(value, bool) or not isinstance(value, (int, float)) \
                    or not 0 <= value < math.inf:
                raise ValueError(f"HostTimings.{field} must be a finite number of ns >= 0, "
                                 f"not {value!r}")
        time_ns(self.ns_per_mac, "ns_per_mac")
        time_ns(self.op_overhead_ns, "op_overhead_ns")
        if not isinstance(self.ns_per_element, Mapping):
            raise ValueError(f"HostTimings.ns_per_element must be an object of op class -> ns "
                             f"per element, not {self.ns_per_element!r}")
        for op_class, value in self.ns_per_element.items():
            time_ns(value, f"ns_per_element[{op_class!r}]")

    def op_ns(self, op: Op) -> float:
        if op.op_class in ("conv", "gemm"):
            return self.op_overhead_ns + op.macs * self.ns_per_mac
        per = self.ns_per_element.get(op.op_class, self.ns_per_element.get("other", 1.0))
        return self.op_overhead_ns + max(op.elements, 1) * per

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


#: A nominal numpy host (about 20 GMAC/s, 1 us per op dispatched), for the reported costs when
#: no measured timings are given (:func:`decide`); ``load_host_timings`` measures this machine.
NOMINAL_HOST = HostTimings(
    ns_per_mac=0.05,
    ns_per_element={"elementwise": 0.5, "activation": 0.5, "nonlinear": 2.0, "pool": 1.0,
                    "layout": 0.5, "quant": 1.0, "batchnorm": 1.0, "scalar": 10.0,
                    "other": 1.0},
    op_overhead_ns=1000.0)


@dataclasses.dataclass(frozen=True)
class FunctionLibrary:
    """Seed 004's function library: where ``t``, ``a``, ``s`` and ``o`` come from."""

    host: HostTimings
    accel_clock_hz: float = 200e6          # assumed accelerator clock (FPGA-class)
    link_bytes_per_s: float = 1e9          # host <-> device transfers
    link_latency_us: float = 5.0           # per transfer
    control_roundtrip_us: float = 50.0     # a scalar/control op evaluated from the accelerator
    complexity: Mapping[tuple[str, str], float] = dataclasses.field(
        default_factory=lambda: dict(DEFAULT_COMPLEXITY))

    def __post_init__(self):
        for name in ("accel_clock_hz", "link_bytes_per_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"FunctionLibrary.{name} must be > 0, not "
                                 f"{getattr(self, name)!r}")
        for name in ("link_latency_us", "control_roundtrip_us"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"FunctionLibrary.{name} must be >= 0, not "
                                 f"{getattr(self, name)!r}")

    def exec_us(self, op: Op, proc: str) -> float:
        """``a``: execution time of ``op`` on ``proc`` (inf when it cannot run there)."""
        if proc == "host":
            return self.host.op_ns(op) / 1e3
        if op.accel_cycles is None:
            return math.inf
        host = op.host_elements * self.host.ns_per_element.get(
            "quant", self.host.ns_per_element.get("other", 1.0)) / 1e3
        return op.accel_cycles / self.accel_clock_hz * 1e6 + host

    def transfer_us(self, nbytes: int) -> float:
        return 0.0 if nbytes <= 0 else self.link_latency_us + nbytes / self.link_bytes_per_s * 1e6

    def o(self, op: Op, proc: str) -> float:
        return float(self.complexity.get((op.op_class, proc), 0.0))


@dataclasses.dataclass(frozen=True)
class Thresholds:
    """``th1``: minimum benefit p; ``th2``: maximum cost c (microseconds).

    The defaults (``th1 = 0``, no cost limit) accept every op on the first candidate that can
    run it: each layer the accelerator supports goes there, everything else to the host. That
    is what ``tessera compile`` and ``tessera explain`` do unless given thresholds, and it does
    not depend on the host's measured speed. :data:`SEED_EXAMPLE` (1.5, 50,000 us) trades cost
    against benefit as seed 004 describes."""

    th1: float = 0.0
    th2: float = math.inf

    def __post_init__(self):
        for name in ("th1", "th2"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or math.isnan(v) or v < 0:
                raise ValueError(f"Thresholds.{name} must be a number >= 0 (a benefit ratio, a "
                                 f"cost in microseconds), not {v!r}")

    def accepts(self, ev: "Evaluation") -> bool:
        return ev.supported and ev.p >= self.th1 and ev.c <= self.th2


#: Seed 004's cost/benefit thresholds (its example values): ``tessera explain|compile --th1 1.5
#: --th2 50000``.
SEED_EXAMPLE = Thresholds(th1=1.5, th2=50_000.0)


@dataclasses.dataclass(frozen=True)
class Evaluation:
    """``c = t + a`` and ``p = s + o`` of one op (or fused pair) on one processor."""

    processor: str
    t: float
    a: float
    s: float
    o: float
    host_us: float = 0.0          # host time of the op (or fused group): the speed-up's base
    refusal: str | None = None    # why the processor cannot run the op (``a`` is inf)

    @property
    def c(self) -> float:
        return self.t + self.a

    @property
    def p(self) -> float:
        return self.s + self.o

    @property
    def supported(self) -> bool:
        return math.isfinite(self.a)


@dataclasses.dataclass(frozen=True)
class Decision:
    """Where one op goes and why."""

    op: Op
    evaluations: dict[str, Evaluation]
    processor: str
    rule: Literal["threshold", "fused", "min-cost"]
    reason: str
    fused_with: str | None = None
    fused_evaluation: Evaluation | None = None

    def row(self) -> dict:
        """One row of :func:`explain`."""
        row = {"op": self.op.name, "op_type": self.op.op_type, "category": self.op.category,
               "op_class": self.op.op_class}
        for proc in PROCESSORS:
            ev = self.evaluations[proc]
            row[f"c_{proc}_us"] = ev.c if ev.supported else None
            row[f"p_{proc}"] = ev.p if ev.supported else None
        row.update({"decision": self.processor, "rule": self.rule, "reason": self.reason,
                    "fused_with": self.fused_with})
        if self.op.tiling is not None:
            row["tiling_scalars"] = dataclasses.asdict(self.op.tiling)
        return row


# -- host timings ----------------------------------------------------------------------------------

def measure_host_timings(repeats: int = 3) -> HostTimings:
    """Time numpy on this machine: a float32 matmul (ns per MAC), element-wise, nonlinear
    (exp), pooling-like reduction and layout (transpose copy) passes (ns per element)."""
    rng = np.random.default_rng(0)

    def best(fn) -> float:
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter_ns()
            fn()
            times.append(time.perf_counter_ns() - t0)
        return float(min(times))

    a = rng.standard_normal((256, 256), np.float32)
    x = rng.standard_normal((1 << 18,), np.float32)
    img = x.reshape(64, 64, 64)
    n = x.size
    per = {
        "elementwise": best(lambda: x + x) / n,
        "activation": best(lambda: np.maximum(x, 0)) / n,
        "nonlinear": best(lambda: np.exp(x)) / n * 3,            # exp + sum + divide
        "pool": best(lambda: img.reshape(64, 32, 2, 32, 2).max(axis=(2, 4))) / (n / 4),
        "layout": best(lambda: np.ascontiguousarray(img.transpose(2, 0, 1))) / n,
        "quant": best(lambda: np.clip(np.rint(x / 0.1), -128, 127).astype(np.int8)) / n,
        "batchnorm": best(lambda: x * 0.5 + 0.1) / n,
    }
    per["other"] = float(np.median(list(per.values())))
    return HostTimings(ns_per_mac=best(lambda: a @ a) / 256 ** 3, ns_per_element=per,
                       op_overhead_ns=best(lambda: np.add(a[:1, :1], 1)))


def host_timings_path(path: str | os.PathLike | None = None) -> Path:
    """``path``, or where :func:`load_host_timings` keeps this machine's timings by default:
    ``$XDG_CACHE_HOME/tessera/host_timings.json`` (``~/.cache`` without it)."""
    if path is not None:
        return Path(path)
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "tessera" / "host_timings.json"


def load_host_timings(path: str | os.PathLike | None = None, *, refresh: bool = False
                      ) -> HostTimings:
    """Host timings from ``path`` (default ``$XDG_CACHE_HOME/tessera/host_timings.json``),
    measured and written there on first use (or when ``refresh``)."""
    cache = path is None
    path = host_timings_path(path)
    if path.is_file() and not refresh:
        try:
            data = json.loads(path.read_text())
            if not isinstance(data, dict):
                raise TypeError(f"a JSON {type(data).__name__}, not an object")
            return HostTimings(**data)
        except (TypeError, ValueError) as e:     # (JSON and UTF-8 errors are ValueErrors)
            what = ("delete it to measure this machine again" if cache else
                    "--host-timings takes a file tessera wrote, or a new path to measure into")
            raise ValueError(f"{path}: not a host timings file ({e}); {what}") from None
    if path.exists() and not path.is_file():
        kind = "directory" if path.is_dir() else "special file"
        raise ValueError(f"{path}: the host timings file is a {kind}")
    if not cache and not path.parent.is_dir():
        raise ValueError(f"{path}: no directory {str(path.parent)!r} to write the measured host "
                         f"timings to")
    timings = measure_host_timings()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(timings.as_dict(), indent=1, sort_keys=True))
    os.replace(tmp, path)
    return timings


# -- analysis --------------------------------------------------------------------------------------

def _bytes(g: Graph, name: str) -> int:
    """Runtime bytes of tensor ``name`` at 1 byte per element (0 for constants)."""
    t = g.tensors.get(name) if name else None
    if t is None or t.is_const or not t.is_static:
        return 0
    return int(t.elements)


def one_line(text: str) -> str:
    """A multi-line message as one line for a table or a report: ``"head:\n  a\n  b"`` ->
    ``"head: a; b"`` (the first line alone can be just ``"...rules:"``, which says nothing)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return ""
    head, rest = lines[0], "; ".join(lines[1:])
    if not rest:
        return head
    return f"{head} {rest}" if head.endswith(":") else f"{head}; {rest}"


def _layer_model(layer: AccelLayer, cfg: AccelConfig):
    """``(accel cycles, tiling scalars, refusal, host share)`` of one accelerator layer: the
    cycles and scalars come from the one cost entry point (:func:`planner.layer_cost`,
    post-processed as the compiler builds the layer); ``refusal`` says why ``cfg`` cannot run
    the layer (then there are no cycles); the host share is :func:`_host_share`'s."""
    reason = accel_reason(layer, cfg)
    if reason is None:
        shape = layer.shape
        if layer.kind == "gemm":
            # run with K extended to fold the left operand's zero point (build_gemm_image)
            shape = dataclasses.replace(shape, k=activation_gemm_k(shape.k,
                                                                   layer.in_zero_point))
        try:
            # as the compiler builds it: a bias and int8 requantisation on every record
            cost = layer_cost(shape, cfg, post=PostLoad(bias=True, requant=True))
        except ValueError as e:
            reason = one_line(str(e))
    if reason is not None:
        return None, None, reason, (0, 0)
    plan, groups = cost.plan, cost.groups * layer.batch
    tiles = math.ceil(plan.m / plan.partition_m) * math.ceil(plan.n / plan.partition_n) * \
        math.ceil(plan.k / plan.partition_k)
    scalars = TilingScalars(loop_counts=3 * groups, address_exprs=3 * tiles * groups,
                            table_entries=cost.table_entries, runtime_exprs=0)
    return cost.cycles * layer.batch, scalars, None, _host_share(layer, cost.k_parts)


def _host_share(layer: AccelLayer, parts: int) -> tuple[int, int]:
    """``(host elements, read-back bytes)`` of an accelerator run of ``layer``
    (:attr:`Op.host_elements`, :attr:`Op.host_readback_bytes`); ``parts``: its K parts."""
    outputs = math.prod(layer.out_shape)
    if parts > 1:
        return (parts + 1) * outputs, 4 * parts * outputs
    if layer.host_correction:
        return 2 * outputs, 4 * outputs
    return 0, 0


def _node_category(g: Graph, node: Node, outs: tuple[str, ...]) -> tuple[str, str]:
    """``(op class, category)`` of a node left to the host."""
    cls = OP_CLASSES.get(node.op_type, "other")
    small_int = all((t := g.tensors.get(o)) is not None and t.dtype is not None
                    and np.dtype(t.dtype).kind in "iu" and (t.elements or 0) <= 8
                    for o in outs)
    category = "scalar" if cls in ("scalar", "control") or (small_int and cls in (
        "layout", "elementwise", "other")) else "tensor"
    if category == "scalar" and cls not in ("scalar", "control"):
        cls = "scalar"
    return cls, category


#: ``on_layer(done, total)``: called after each accelerator layer is costed (the long part)
LayerProgress = Callable[[int, int], None]


def analyse(net: Lowered | Graph, cfg: AccelConfig, *,
            on_layer: LayerProgress | None = None) -> list[Op]:
    """The ops of a lowered network to assign, in execution order (module docstring): one per
    accelerator layer (its fused Q/DQ, bias, activation and requantisation included) and one
    per host op. A :class:`Graph` is lowered first (a float graph lowers to host ops only).
    Raises :class:`ModelError` when a runtime tensor's shape is not static (name the symbolic
    input dims with input shapes). ``on_layer(done, total)`` is called after each accelerator
    layer's cost (planning its tiling), for progress displays."""
    g = net.graph if isinstance(net, Lowered) else net
    for name in g.inputs:
        t = g.tensors[name]
        if not t.is_static:
            raise ModelError(f"graph input {name!r} has symbolic shape {t.shape}; give its "
                             f"shape (--input-shape {name}=...) to analyse the network")
    lowered = net if isinstance(net, Lowered) else lower(net)
    ops = []
    total, done = sum(isinstance(step, AccelLayer) for step in lowered.steps), 0
    for step in lowered.steps:
        outs = tuple(o for o in step.outputs if o)
        out_bytes = sum(_bytes(g, o) for o in outs)
        common = dict(name=step.name, op_type=step.op_type, inputs=tuple(step.inputs),
                      outputs=outs, input_bytes=tuple(_bytes(g, i) for i in step.inputs),
                      output_bytes=out_bytes, elements=out_bytes,
                      graph_output=any(o in g.outputs for o in outs))
        if isinstance(step, AccelLayer):
            cycles, scalars, refusal, (elements, readback) = _layer_model(step, cfg)
            ops.append(Op(op_class="conv" if step.kind == "conv" else "gemm",
                          category="tensor", macs=step.macs, accel_cycles=cycles,
                          tiling=scalars, refusal=refusal, host_elements=elements,
                          host_readback_bytes=readback, **common))
            done += 1
            if on_layer is not None:
                on_layer(done, total)
            continue
        cls, category = _node_category(g, step.node, outs)
        refusal = lowered.unmatched.get(step.name)
        ops.append(Op(op_class=cls, category=category,
                      macs=out_bytes if cls in ("conv", "gemm") else 0,
                      refusal=f"no accelerator pattern matched: {refusal}" if refusal else
                      f"the accelerator runs no standalone {step.op_type}"
                      + (f": {ACCEL_LACKS[cls]}" if cls in ACCEL_LACKS else ""), **common))
    return ops


# -- assignment ------------------------------------------------------------------------------------

def _evaluate(op: Op, proc: str, lib: FunctionLibrary, where: Mapping[str, str]) -> Evaluation:
    a = lib.exec_us(op, proc)
    refusal = op.refusal if proc == "accel" and not math.isfinite(a) else None
    moved = sum(b for name, b in zip(op.inputs, op.input_bytes)
                if name and where.get(name, "host") != proc)
    if proc == "accel" and op.graph_output:
        moved += op.output_bytes
    t = lib.transfer_us(moved)
    if proc == "accel" and op.host_readback_bytes and math.isfinite(a):
        t += lib.transfer_us(op.host_readback_bytes)
    if proc == "accel" and op.category == "scalar":
        t += lib.control_roundtrip_us
    host_us = lib.exec_us(op, "host")
    s = host_us / a if math.isfinite(a) and a > 0 else (1.0 if math.isfinite(a) else 0.0)
    return Evaluation(proc, t=t, a=a, s=s, o=lib.o(op, proc), host_us=host_us,
                      refusal=refusal)


def _evaluate_fused(prev: Decision, op: Op, lib: FunctionLibrary, where: Mapping[str, str]
                    ) -> Evaluation | None:
    """The pair (previous op, op) on the previous op's processor, or None when that processor
    cannot absorb ``op``: the accelerator absorbs nothing more, since the lowering already
    fused into each layer every node its post-processor can apply."""
    proc = prev.processor
    if proc == "accel":
        return None
    pe = prev.fused_evaluation or prev.evaluations[proc]
    inter = set(prev.op.outputs)
    moved = sum(b for name, b in zip(op.inputs, op.input_bytes)
                if name and name not in inter and where.get(name, "host") != proc)
    a = pe.a + lib.exec_us(op, "host")
    host_group = pe.host_us + lib.exec_us(op, "host")
    s = host_group / a if a > 0 else 1.0
    return Evaluation(proc, t=pe.t + lib.transfer_us(moved), a=a, s=s,
                      o=max(pe.o, lib.o(op, proc)), host_us=host_group)


def assign(ops: Sequence[Op], lib: FunctionLibrary, th: Thresholds = Thresholds()
           ) -> list[Decision]:
    """Seed 004's decision for every op, in order (module docstring)."""
    where: dict[str, str] = {}
    decisions: list[Decision] = []
    by_output: dict[str, Decision] = {}
    for op in ops:
        evs = {proc: _evaluate(op, proc, lib, where) for proc in PROCESSORS}
        order = ("accel", "host") if op.category == "tensor" else ("host", "accel")
        chosen = None
        for proc in order:
            ev = evs[proc]
            if th.accepts(ev):
                earlier = [q for q in order if order.index(q) < order.index(proc)]
                # a processor that cannot run the op says why first: that is the cause
                names = {"accel": "accelerator", "host": "host"}
                cannot = [f"the {names[q]} cannot run it ({evs[q].refusal}); on the "
                          f"{names[proc]} " for q in earlier
                          if not evs[q].supported and evs[q].refusal]
                tried = [_why({q: evs[q]}, th) for q in earlier
                         if evs[q].supported or not evs[q].refusal]
                limit = f"<= th2={th.th2:g}us" if math.isfinite(th.th2) else "(no limit)"
                reason = ("".join(cannot)
                          + f"p={ev.p:.2f} >= th1={th.th1:g} and c={ev.c:.1f}us {limit}"
                          + (f" (failed first: {'; '.join(tried)})" if tried else ""))
                chosen = Decision(op, evs, proc, "threshold", reason)
                break
        first = next((i for i in op.inputs if i), "")
        prev = by_output.get(first)
        if chosen is None and prev is not None:
            fused = _evaluate_fused(prev, op, lib, where)
            if fused is not None and th.accepts(fused):
                chosen = Decision(
                    op, evs, prev.processor, "fused",
                    f"no processor passes alone ({_why(evs, th)}); fused with "
                    f"{prev.op.name!r} on {prev.processor}: p={fused.p:.2f}, "
                    f"c={fused.c:.1f}us", fused_with=prev.op.name, fused_evaluation=fused)
        if chosen is None:
            supported = [evs[p] for p in PROCESSORS if evs[p].supported]
            best = min(supported, key=lambda e: e.c)
            chosen = Decision(op, evs, best.processor, "min-cost",
                              f"no processor passes th1/th2 and no fusion does "
                              f"({_why(evs, th)}); minimum cost c={best.c:.1f}us")
        decisions.append(chosen)
        for o in op.outputs:
            where[o] = chosen.processor
            by_output[o] = chosen
    return decisions


def _why(evs: Mapping[str, Evaluation], th: Thresholds) -> str:
    parts = []
    for proc, ev in evs.items():
        if not ev.supported:
            parts.append(f"{proc}: unsupported" + (f" ({ev.refusal})" if ev.refusal else ""))
        else:
            bad = []
            if ev.p < th.th1:
                bad.append(f"p={ev.p:.2f} < th1")
            if ev.c > th.th2:
                bad.append(f"c={ev.c:.1f}us > th2")
            parts.append(f"{proc}: " + (", ".join(bad) or "ok"))
    return "; ".join(parts)


def decide(net: Lowered | Graph, cfg: AccelConfig, lib: FunctionLibrary | None = None,
           th: Thresholds = Thresholds(), *,
           on_layer: LayerProgress | None = None) -> list[Decision]:
    """Seed 004 on a lowered network: :func:`assign` of its :func:`analyse` ops. This is the
    decision ``flow.compile.compile_network`` takes and ``tessera explain`` prints. Without
    ``lib`` the host is :data:`NOMINAL_HOST` (under the default thresholds the decisions do
    not depend on it; only the reported ``c`` and ``p`` do). ``on_layer``: as
    :func:`analyse`'s."""
    return assign(analyse(net, cfg, on_layer=on_layer), lib or FunctionLibrary(host=NOMINAL_HOST),
                  th)


def explain(net: Lowered | Graph, cfg: AccelConfig, lib: FunctionLibrary | None = None,
            th: Thresholds = Thresholds(), *,
            on_layer: LayerProgress | None = None) -> list[dict]:
    """Per-op rows of :func:`decide`: op, c and p on each processor, decision, rule, reason
    (plus the tiling scalars of accelerator layers). ``on_layer``: as :func:`analyse`'s."""
    return [d.row() for d in decide(net, cfg, lib, th, on_layer=on_layer)]


# -- what the hardware can run (the compiler's capability check) ---------------------------------

def accel_reason(layer: AccelLayer, cfg: AccelConfig) -> str | None:
    """Why ``layer`` cannot run on ``cfg`` (``None``: it can, as far as static checks tell;
    building its image is the final word)."""
    if layer.kind == "conv":
        if len(layer.in_shape) != 4:
            return f"input rank {len(layer.in_shape)} is not 4"
    elif layer.kind == "fc":
        if not layer.in_shape or layer.in_shape[-1] != layer.shape.k:
            return f"input shape {layer.in_shape} does not end in K={layer.shape.k}"
    elif layer.kind == "gemm":
        if layer.in_offset or layer.out_offset:
            return "uint8 activation x activation GEMM"
    else:
        return f"unknown layer kind {layer.kind!r}"
    if layer.kind == "gemm" and layer.shape.m > cfg.quant_entries:
        return (f"{layer.shape.m} rows > quant_entries={cfg.quant_entries} (the "
                f"post-processor's parameter memories)")
    return None
