"""``tessera explain``: where each operation of an ONNX model runs, and why (seed 004).

::

    tessera explain MODEL.onnx [--input-shape NAME=1,3,224,224 ...] [--config PRESET|FILE.json]
                    [--seeded-weights SEED]
                    [--th1 1.5] [--th2 50000] [--host-timings FILE.json] [--json]

Prints one row per operation: its cost ``c`` (microseconds) and benefit ``p`` on the host and
on the accelerator, the decision, the rule that made it (threshold, fused with the previous
op, minimum cost) and the reason; then totals and the scalar work tiling created. ``--json``
prints the rows as JSON instead.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import re
import sys
import tempfile
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from flow.argtypes import SEED
from flow.compile import (COMPILE_STRATEGIES, CompiledNetwork, CompileError, OnProgress,
                          check_strategy, compile_network, planning_progress, progress)
from flow.execute import compare_outputs, layer_rows, run_network
from flow.outputs import check_directory, check_writable
from flow.report import html_report
from planner.conv import k_parts
from planner.dwcost import is_depthwise
from planner.net.assign import (FunctionLibrary, Thresholds, explain, host_timings_path,
                                load_host_timings)
from planner.net.graph import ModelError
from planner.net.onnx_import import graph_from_model, import_onnx, load_model, parse_input_shapes
from planner.net.lower import (conv_transpose_as_conv, fold_batchnorm, fold_pad, lower,
                               normalise_gemm, quantize_qdq, seeded_weights)
from planner.net.reference import _output_scale, onnxruntime_outputs
from spec.config import PRESETS, AccelConfig
from tb.tools import check_icarus_memory

__all__ = ["main"]


def _config(value: str) -> AccelConfig:
    if value in PRESETS:
        return PRESETS[value]
    path = Path(value)
    if path.suffix == ".json" and path.is_file():
        return AccelConfig.from_json(path.read_text())
    raise ValueError(f"--config must be a preset ({', '.join(PRESETS)}) or an AccelConfig JSON "
                     f"file, not {value!r}")


def _fmt(v) -> str:
    return "-" if v is None else f"{v:.1f}" if v >= 100 else f"{v:.2f}"


def _results_console(width: int) -> Console:
    """stdout for a results table: a terminal's own width (rich fits the columns to it; at a
    fixed width an 80-column terminal wrapped every row), else ``width`` (logs and pipes keep
    whole rows)."""
    try:
        terminal = sys.stdout.isatty()      # (not rich's is_terminal, which FORCE_COLOR sets)
    except (AttributeError, ValueError):
        terminal = False
    return Console() if terminal else Console(width=width)


def _table(rows: list[dict], title: str) -> None:

    table = Table(title=title, show_lines=False)
    for col in ("op", "type", "cat", "c host us", "p host", "c accel us", "p accel", "on",
                "rule", "reason"):
        table.add_column(col, overflow="fold")
    for r in rows:
        table.add_row(r["op"], r["op_type"], r["category"], _fmt(r["c_host_us"]),
                      _fmt(r["p_host"]), _fmt(r["c_accel_us"]), _fmt(r["p_accel"]),
                      r["decision"], r["rule"], r["reason"])
    _results_console(200).print(table)


def _summary(rows: list[dict]) -> dict:
    out = {"ops": len(rows), "host": 0, "accel": 0, "fused": 0, "min_cost": 0,
           "tiling_scalar_exprs": 0, "tiling_scalar_runtime_exprs": 0}
    for r in rows:
        out[r["decision"]] += 1
        out["fused"] += r["rule"] == "fused"
        out["min_cost"] += r["rule"] == "min-cost"
        ts = r.get("tiling_scalars")
        if ts:
            out["tiling_scalar_exprs"] += ts["loop_counts"] + ts["address_exprs"] + \
                ts["table_entries"]
            out["tiling_scalar_runtime_exprs"] += ts["runtime_exprs"]
    return out


def _assignment_options(parser: argparse.ArgumentParser) -> None:
    """Seed 004's options, the same for ``tessera explain`` and ``tessera compile``."""
    parser.add_argument("--th1", type=float, default=None,
                        help="minimum benefit p (default 0: every layer the accelerator "
                             "supports runs there; seed 004's example is 1.5)")
    parser.add_argument("--th2", type=float, default=None,
                        help="maximum cost c in us (default: no limit; seed 004's example is "
                             "50000)")
    parser.add_argument("--host-timings", default=None,
                        help="host timings JSON (measured and written on first use; default: "
                             "this machine's, cached)")


def _seeded_weights_option(parser) -> None:
    """``--seeded-weights``, the same for ``tessera explain`` and ``tessera compile``."""
    parser.add_argument("--seeded-weights", type=SEED, default=None, metavar="SEED",
                        help="replace every float weight by seeded random values first (e.g. "
                             "the onnx wheel's light_* models, whose weights are constant)")


@contextlib.contextmanager
def _progress_display(prog: str,
                      console: Console | None = None) -> Iterator[OnProgress | None]:
    """A progress line on stderr for the steps of ``tessera explain`` / ``compile`` that take
    a while (quantisation, planning each layer, building the images), fed with
    :func:`flow.compile.progress` events: the stage, its parts done (when counted) and the
    elapsed time. Transient, and drawn only on a terminal: a log or a pipe gets nothing, and
    stdout only the results: what the command prints meanwhile is held back until the line is
    gone (:func:`_held_stdout`). ``console``: where to draw (default: stderr)."""
    console = console or Console(stderr=True)
    if not console.is_terminal:
        yield None                                  # (rich would still end with a newline)
        return
    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[n]}"),
                  TimeElapsedColumn(), console=console, transient=True,
                  redirect_stdout=False) as bar:          # stdout is the results' alone
        task = [bar.add_task(prog, total=None, n="")]

        def on_event(ev: dict) -> None:
            what, total = f"{prog}: {ev['what']}", ev["total"]
            n = "" if total is None else f"{ev['done']}/{total}"
            if bar.tasks[0].description != what:          # a new stage: its own bar and time
                bar.remove_task(task[0])
                task[0] = bar.add_task(what, total=total, n=n)
            bar.update(task[0], completed=ev["done"], total=total, n=n)
            bar.refresh()                           # every event drawn (at most a few hundred)

        yield on_event


@contextlib.contextmanager
def _held_stdout() -> Iterator[None]:
    """What is printed to stdout inside, printed when it ends (also on an exception): beside a
    progress line on the terminal, results written meanwhile would be drawn over."""
    held = io.StringIO()
    try:
        with contextlib.redirect_stdout(held):
            yield
    finally:
        sys.stdout.write(held.getvalue())


def _assignment(args) -> tuple[FunctionLibrary, Thresholds]:
    defaults = Thresholds()
    try:
        th = Thresholds(th1=defaults.th1 if args.th1 is None else args.th1,
                        th2=defaults.th2 if args.th2 is None else args.th2)
    except ValueError as e:             # ("Thresholds.th1 must be ...": the option's name)
        raise ValueError(re.sub(r"Thresholds\.(th[12])", r"--\1", str(e))) from None
    return FunctionLibrary(host=load_host_timings(args.host_timings)), th


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tessera explain", description=__doc__.split("\n")[0])
    parser.add_argument("model", help="ONNX model file")
    parser.add_argument("--input-shape", action="append", default=[], metavar="NAME=D0,D1,...",
                        help="shape of a graph input (resolves symbolic dims); repeatable")
    parser.add_argument("--config", default="default",
                        help=f"accelerator preset ({', '.join(PRESETS)}) or AccelConfig JSON")
    _seeded_weights_option(parser)
    _assignment_options(parser)
    parser.add_argument("--json", action="store_true", help="print JSON rows")
    args = parser.parse_args(argv)

    try:
        cfg = _config(args.config)
        shapes = parse_input_shapes(args.input_shape)
        lib, th = _assignment(args)
        with _progress_display("tessera explain") as on_event:
            _, lowered = prepare_model(args.model, shapes, seed=args.seeded_weights,
                                       on_event=on_event)
            rows = explain(lowered, cfg, lib, th, on_layer=planning_progress(on_event))
    except (ModelError, ValueError, OSError, MemoryError) as e:
        print(f"tessera explain: {e}", file=sys.stderr)
        return 2
    summary = _summary(rows)
    th2 = th.th2 if math.isfinite(th.th2) else None
    if args.json:
        print(json.dumps({"model": str(args.model), "th1": th.th1, "th2": th2,
                          "host_timings": str(host_timings_path(args.host_timings)),
                          "summary": summary, "ops": rows}, indent=1))
        return 0
    limit = f"{th.th2:g}us" if th2 is not None else "no limit"
    _table(rows, f"{Path(args.model).name}: th1={th.th1:g}, th2={limit}, config={args.config}")
    timings = host_timings_path(args.host_timings)
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(timings.stat().st_mtime))
    print(f"Host costs from {timings} (written {when}; --host-timings FILE for others, or "
          f"delete it to measure this machine again).")
    print(f"{summary['ops']} ops: {summary['accel']} on the accelerator, {summary['host']} on the "
          f"host ({summary['fused']} fused with their producer, {summary['min_cost']} by minimum "
          f"cost). Tiling created {summary['tiling_scalar_exprs']} scalar expressions (loop "
          f"counts, tile addresses, conv table entries), all constant-folded at compile time "
          f"on the host: {summary['tiling_scalar_runtime_exprs']} left at run time.")
    return 0


if __name__ == "__main__":
    sys.exit(main())


# -- tessera compile / tessera run -----------------------------------------------------------------

_QUANT_OPS = {"QuantizeLinear", "DequantizeLinear", "QLinearConv", "QLinearMatMul",
              "ConvInteger", "MatMulInteger"}


def _calibration(path: str | None, names: list[str]) -> dict[str, dict] | None:
    """Feeds from ``--calib DIR`` by file (``--calib DIR/FILE``): each ``*.npz`` (arrays by
    input name) or ``*.npy`` (the one input of a single-input model) file is one sample."""

    if path is None:
        return None
    files = sorted(p for p in Path(path).iterdir() if p.suffix in (".npy", ".npz")) \
        if Path(path).is_dir() else []
    if not files:
        raise ValueError(f"--calib {path}: not a directory with .npy / .npz samples")
    feeds = {}
    for f in files:
        if f.suffix == ".npy" and len(names) != 1:
            raise ValueError(f"--calib {f}: a .npy sample needs a single-input model; the model "
                             f"has inputs {names} (use .npz)")
        try:
            if f.suffix == ".npz":
                with np.load(f, allow_pickle=False) as z:
                    feeds[f"--calib {f}"] = {k: z[k] for k in z.files}
            else:
                feeds[f"--calib {f}"] = {names[0]: np.load(f, allow_pickle=False)}
        except (ValueError, EOFError, zipfile.BadZipFile) as e:
            raise ValueError(f"--calib {f}: {_not_numpy(f) or e}") from None
    return feeds


def prepare_model(model_path, shapes: dict, *, calib_dir: str | None = None,
                  seed: int | None = None, samples: int = 4,
                  on_event: OnProgress | None = None):
    """ONNX file -> ``(quantised model, lowered network)``, the front end of ``tessera
    explain`` and ``tessera compile``: load and fold, optionally replace the weights by seeded
    values; for a float model fold BatchNormalization and zero Pads into the Conv after them,
    make non-overlapping ConvTransposes Convs, normalise its Gemms (alpha, beta, transA, the
    bias's shape) and quantise (onnxruntime QDQ;
    calibration from ``calib_dir`` or generated); lower. ``on_event`` gets a
    :func:`flow.compile.progress` event as each of these stages starts."""
    progress(on_event, f"loading {Path(str(model_path)).name}")
    model = load_model(model_path, shapes)
    if seed is not None:
        progress(on_event, "seeding the weights")
        model = seeded_weights(model, seed)
    if not {n.op_type for n in model.graph.node} & _QUANT_OPS:
        progress(on_event, "folding")
        model = normalise_gemm(conv_transpose_as_conv(fold_pad(fold_batchnorm(model))))
        inits = {i.name for i in model.graph.initializer}
        names = [i.name for i in model.graph.input if i.name not in inits]
        calib = _calibration(calib_dir, names)
        progress(on_event, f"quantising with onnxruntime "
                           f"({samples if calib is None else len(calib)} calibration samples)")
        model = quantize_qdq(model, None if calib is None else list(calib.values()),
                             samples=samples, labels=None if calib is None else list(calib))
        progress(on_event, "importing the quantised model")
        graph = import_onnx(model)
    else:
        graph = graph_from_model(model)
    progress(on_event, "lowering")
    return model, lower(graph)


def compile_model(model_path, shapes: dict, cfg: AccelConfig, *, calib_dir: str | None = None,
                  seed: int | None = None, samples: int = 4, strategy: str = "best",
                  fuse: bool = False, lib: FunctionLibrary | None = None,
                  th: Thresholds = Thresholds(), on_event: OnProgress | None = None):
    """ONNX file -> :class:`~flow.compile.CompiledNetwork` (``tessera compile``):
    :func:`prepare_model`, then :func:`~flow.compile.compile_network` with seed 004's ``lib``
    and ``th`` deciding where each layer runs; ``on_event`` gets both's progress events."""
    check_strategy(strategy)        # before the quantisation, which takes a while
    model, lowered = prepare_model(model_path, shapes, calib_dir=calib_dir, seed=seed,
                                   samples=samples, on_event=on_event)
    return compile_network(lowered, cfg, strategy=strategy, qmodel=model,
                           name=Path(str(model_path)).stem, fuse=fuse, lib=lib, th=th,
                           on_event=on_event)


def compile_main(argv: list[str] | None = None) -> int:
    """``tessera compile MODEL.onnx -o MODEL.tsr [--config P] [--calib DIR] [--input-shape ..]``"""
    parser = argparse.ArgumentParser(
        prog="tessera compile",
        description="Compile an ONNX model into accelerator images and host steps (.tsr).")
    parser.add_argument("model", help="ONNX model file (float: quantised here; or QDQ/QLinear)")
    parser.add_argument("-o", "--output", required=True, help="compiled network (.tsr) to write")
    parser.add_argument("--config", default="default",
                        help=f"accelerator preset ({', '.join(PRESETS)}) or AccelConfig JSON")
    parser.add_argument("--calib", default=None, metavar="DIR",
                        help="calibration samples (*.npz by input name, or *.npy for a "
                             "single-input model); default: seeded generated inputs")
    parser.add_argument("--input-shape", action="append", default=[], metavar="NAME=D0,D1,...",
                        help="shape of a graph input (resolves symbolic dims); repeatable")
    _seeded_weights_option(parser)
    parser.add_argument("--strategy", default="best", choices=COMPILE_STRATEGIES,
                        help="planner strategy of every layer (default: %(default)s)")
    parser.add_argument("--fuse", action="store_true",
                        help="keep the intermediate of every fusible producer/consumer pair in "
                             "the accelerator's local buffer (docs/fusion.md)")
    _assignment_options(parser)
    args = parser.parse_args(argv)

    try:
        check_writable("-o", args.output)           # before the compilation, which may be long
        cfg = _config(args.config)
        shapes = parse_input_shapes(args.input_shape)
        lib, th = _assignment(args)
        with _progress_display("tessera compile") as on_event:
            net = compile_model(args.model, shapes, cfg, calib_dir=args.calib,
                                seed=args.seeded_weights, strategy=args.strategy,
                                fuse=args.fuse, lib=lib, th=th, on_event=on_event)
            progress(on_event, f"writing {args.output}")
            net.save(args.output)
    except (ModelError, CompileError, ValueError, OSError, MemoryError) as e:
        print(f"tessera compile: {e}", file=sys.stderr)
        return 2
    s = net.summary()
    print(f"{args.output}: {s['segments']} image segments ({s['records']} layer records, "
          f"{s['image_bytes']} image bytes, {s['predicted_cycles']} predicted cycles), "
          f"{s['gemm_steps']} run-time GEMMs"
          + (f" ({s['gemm_predicted_cycles']} predicted cycles)" if s["gemm_steps"] else "")
          + (f", {s['ksplit_steps']} convolutions in K parts ({s['ksplit_predicted_cycles']} "
             f"predicted cycles)" if s["ksplit_steps"] else "")
          + f", {s['host_ops']} host ops, "
          f"{len(s['host_layers'])} layers on the host; config {args.config} "
          f"(config_id {cfg.config_id:#010x})")
    for layer, reason in s["host_layers"].items():
        print(f"  host: {layer}: {reason}")
    for node, reason in s["unmatched"].items():     # (a Conv3d, an asymmetric weight, ...)
        print(f"  host op: {node}: not an accelerator layer: {reason}")
    for step in net.steps:
        if step.kind == "ksplit":
            sh = net.layers[step.layer].shape
            parts = len(k_parts(sh, cfg))
            print(f"  K parts: {step.layer}: K={sh.gemm.k} taps > conv_offset_entries="
                  f"{cfg.conv_offset_entries}: {parts} parts (slices of its input channels) "
                  f"per group and image, {parts * sh.groups * sh.batch} convolutions in "
                  f"{sh.batch} image run{'s' if sh.batch > 1 else ''}, int32 partial sums "
                  f"added and requantised on the host")
    placed = net.depthwise_placement()
    # (a convolution with a channel multiplier is not depthwise: one convolution per group)
    per_group = [(layer, why) for layer, why in placed
                 if not is_depthwise(net.layers[layer].shape)]
    blocks = len(placed) - len(per_group)
    if placed and not cfg.dw_mesh:
        if blocks:
            print(f"  depthwise: {blocks} layer{'s' if blocks > 1 else ''} as dense "
                  f"channel blocks (the config has no depthwise mesh, dw_mesh=0)")
    elif placed:
        mesh = sum(why is None for _, why in placed)
        print(f"  depthwise: {mesh} of {len(placed)} layers on the mesh")
        for layer, why in placed:
            if why is not None and (layer, why) not in per_group:
                print(f"  depthwise: {layer}: dense channel blocks: {why}")
    for layer, why in per_group:
        print(f"  depthwise: {layer}: one convolution per group: {why}")
    for seg in net.segments:
        for producer, consumer, tensor in seg.fused:
            print(f"  fused: {producer} -> {consumer} ({tensor!r} stays on chip)")
        for producer, consumer, why in seg.unfused:
            print(f"  not fused: {producer} -> {consumer}: {why}")
    return 0


def _vs_onnxruntime(net, outputs: dict, feeds: dict, report: dict,
                    on_event: OnProgress | None = None) -> int:
    """``tessera run --compare``: ``outputs`` against onnxruntime on the stored quantised
    model, into ``report``; returns 1 when onnxruntime cannot run it at all, else 0.

    The comparison runs onnxruntime with its default graph optimisations, so the documented
    LSB figures stay comparable. Its fused kernels are not always the operators' definitions,
    so an output more than 1 LSB off is compared with the optimisations off too
    (``vs_onnxruntime_unoptimised``); and a model whose optimised session fails (an int8
    QLinearConv is rewritten into com.microsoft.QLinearConv, which has no int8 kernel) is
    compared with them off only. ``on_event`` hears each onnxruntime session start."""
    import onnx

    model = onnx.load_from_string(net.qmodel)
    g = net.graph()
    scales = {n: _output_scale(g, n) for n in net.outputs}

    def against(optimise: bool) -> dict:
        progress(on_event, "onnxruntime" + ("" if optimise else ", its graph optimisations off"))
        ort = onnxruntime_outputs(model, feeds, optimise=optimise)
        return compare_outputs(outputs, {n: ort[n] for n in net.outputs}, scales)

    def why(e: Exception) -> str:
        return f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"

    cmp, plain = {}, {}
    try:
        cmp = report["vs_onnxruntime"] = against(True)
    except Exception as e:          # a legal model onnxruntime has no kernel for
        report["vs_onnxruntime"] = {"error": why(e)}
        try:
            plain = against(False)
        except Exception as e2:
            report["vs_onnxruntime_unoptimised"] = {"error": why(e2)}
            print(f"tessera run: --compare: onnxruntime cannot run the stored model "
                  f"({why(e)}); no comparison", file=sys.stderr)
            return 1
        print(f"tessera run: --compare: onnxruntime cannot run the stored model with its "
              f"graph optimisations ({why(e)}); compared with them off", file=sys.stderr)
    else:
        if any((c.get("max_abs_diff_lsb") or 0) > 1 for c in cmp.values()):
            try:
                plain = against(False)
            except Exception as e:      # the optimised session ran; report what it gave
                report["vs_onnxruntime_unoptimised"] = {"error": why(e)}
                print(f"tessera run: --compare: onnxruntime cannot run the stored model with "
                      f"its graph optimisations off ({why(e)}); compared with them on only",
                      file=sys.stderr)
    if plain:
        report["vs_onnxruntime_unoptimised"] = plain
    for name in net.outputs:
        for label, table in (("", cmp), (" with its graph optimisations off", plain)):
            if name in table:
                c = table[name]
                lsb = c.get("max_abs_diff_lsb")
                step = (" (no LSB figure: the output does not come from a per-tensor "
                        "DequantizeLinear, so it has no quantisation step)" if lsb is None
                        else f" ({lsb:g} LSB)")
                print(f"  {name}: vs onnxruntime{label}: max abs diff {c['max_abs_diff']:g}"
                      + step + f", {c['pct_equal']:.1f}% exactly equal")
    return 0


def _not_numpy(path: Path) -> str | None:
    """Why ``path`` is no NumPy file at all (numpy's own message for such a file is that it
    holds pickled data), or ``None``."""
    try:
        with open(path, "rb") as f:
            head = f.read(6)
    except OSError:
        return None
    if head.startswith((b"\x93NUMPY", b"PK")):
        return None
    return f"not a NumPy .npy or .npz file (it starts with {head!r})"


def _feeds(path: str, net) -> dict:
    """The graph inputs in ``path`` (``--input``): every input the network has, no other
    array, each of its compiled shape and finite."""
    p = Path(path)
    try:
        if p.suffix == ".npz":
            with np.load(p, allow_pickle=False) as z:
                feeds = {k: z[k] for k in z.files}
        else:
            names = list(net.inputs)
            if len(names) != 1:
                raise ValueError(f"the network has inputs {names}; give an .npz")
            feeds = {names[0]: np.load(p, allow_pickle=False)}
    except OSError as e:
        raise ValueError(f"--input {path}: {e.strerror or e}") from None
    except (ValueError, EOFError, zipfile.BadZipFile) as e:   # pickled objects, not numpy
        raise ValueError(f"--input {path}: {_not_numpy(p) or e}") from None
    extra = sorted(set(feeds) - set(net.inputs))
    if extra:
        raise ValueError(f"--input {path}: arrays {extra} are not graph inputs (the network's "
                         f"inputs are {list(net.inputs)})")
    for name, spec in net.inputs.items():
        if name not in feeds:
            raise ValueError(f"--input {path}: no array for graph input {name!r}")
        x = feeds[name]
        if list(x.shape) != list(spec["shape"]):
            raise ValueError(f"--input {path}: {name!r} has shape {list(x.shape)}, the network "
                             f"was compiled for {spec['shape']}")
        x = _converted(x, np.dtype(spec["dtype"]), f"--input {path}: {name!r}")
        if x.dtype.kind in "fc" and not np.isfinite(x).all():
            bad = int(x.size - np.isfinite(x).sum())
            raise ValueError(f"--input {path}: {name!r} has {bad} non-finite values (NaN or "
                             f"infinity, after conversion to {x.dtype}); the quantiser needs "
                             f"finite inputs")
        feeds[name] = x
    return feeds


def _converted(x: np.ndarray, dtype: np.dtype, what: str) -> np.ndarray:
    """``x`` as the graph input's ``dtype`` when no value changes but by float rounding:
    an integer input takes integers (or integral floats) in its range, a bool input bools (or
    0 and 1), a float input real numbers. ``astype`` used to wrap 321 to 65 for a uint8 input,
    -7 to 249, and truncate 0.47 to 0, and the run reported success."""
    if x.dtype.kind not in "iuf" and not (x.dtype.kind == "b" and dtype.kind == "b"):
        raise ValueError(f"{what} is {x.dtype}; the network's input is {dtype}")
    if dtype.kind in "iub" and x.dtype.kind in "iuf":
        lo, hi = (0, 1) if dtype.kind == "b" else (np.iinfo(dtype).min, np.iinfo(dtype).max)
        if x.dtype.kind == "f" and not np.array_equal(x, np.round(x)):
            raise ValueError(f"{what} is {x.dtype} with non-integral values; the network's "
                             f"input is {dtype}")
        # Python scalars compare exactly: float32(2**31) is above int32's maximum
        if x.size and (x.min().item() < lo or x.max().item() > hi):
            raise ValueError(f"{what} has values in [{x.min()}, {x.max()}], outside {dtype}'s "
                             f"[{lo}, {hi}]")
    with np.errstate(over="ignore", invalid="ignore"):   # checked by the caller: 1e300 -> inf
        return x.astype(dtype, copy=False)


def _generated(shape, dtype: np.dtype, rng) -> np.ndarray:
    """A generated input: uniform over the whole range for an 8-bit integer input (a
    quantised activation: normal values cast to uint8 were only 0, 1, 2, 254 and 255), else
    standard normal, rounded for a wider integer input (indices, shapes: small values stay
    valid ones) and compared with 0 for a bool one."""
    if dtype.kind in "iu" and dtype.itemsize == 1:
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, shape, endpoint=True).astype(dtype)
    x = rng.normal(0, 1, shape)
    if dtype.kind in "iu":
        return np.rint(np.abs(x) if dtype.kind == "u" else x).astype(dtype)
    return (x > 0) if dtype.kind == "b" else x.astype(dtype)


def _report_table(rows: list[dict], title: str, measured: bool) -> None:

    table = Table(title=title)
    for col in ("step", "layer", "where", "records", "MACs", "cycles", "predicted", "meas/pred",
                "MAC util", "DRAM rd B", "DRAM wr B"):
        table.add_column(col, justify="left" if col in ("layer", "where") else "right")
    for r in rows:
        if r["where"] == "host":
            table.add_row(str(r["step"]), r["layer"], f"host ({r['op_type']})", "", "", "", "",
                          "", "", "", "")
            continue
        cyc = r["cycles"]
        table.add_row(str(r["step"]), r["layer"], r["where"], str(r["records"]),
                      f"{r['macs']:,}", "-" if cyc is None else f"{cyc:,}",
                      f"{r['predicted_cycles']:,}",
                      "-" if not cyc else f"{cyc / r['predicted_cycles']:.2f}",
                      "-" if r["mac_util"] is None else f"{100 * r['mac_util']:.1f}%",
                      "-" if cyc is None else f"{r['dram_rd_bytes']:,}",
                      "-" if cyc is None else f"{r['dram_wr_bytes']:,}")
    _results_console(160).print(table)


def _described(feeds: dict) -> str:
    """``x float32 (1, 3, 8, 8), ...``: the inputs a run takes, for its ``input:`` line."""
    return ", ".join(f"{n} {f.dtype} {tuple(f.shape)}" for n, f in feeds.items())


def run_main(argv: list[str] | None = None) -> int:
    """``tessera run MODEL.tsr [--input x.npy] [--sim verilator|icarus|golden] [--json OUT]
    [--html OUT]``"""
    parser = argparse.ArgumentParser(
        prog="tessera run",
        description="Run a compiled network (.tsr) on the golden device or the RTL.")
    parser.add_argument("network", help="compiled network (.tsr, from tessera compile)")
    parser.add_argument("--input", default=None,
                        help="input tensor (.npy for a single-input network, else .npz by "
                             "name); default: generated from --seed (8-bit integer inputs "
                             "uniform over their range, others standard normal)")
    parser.add_argument("--seed", type=SEED, default=None,
                        help="seed of the generated input (default 0); not with --input")
    parser.add_argument("--sim", default="golden", choices=("golden", "verilator", "icarus"),
                        help="where the images run: the functional device model (golden, the "
                             "default) or the RTL on Verilator or Icarus")
    parser.add_argument("--workdir", default=None,
                        help="simulation directory (default: a temporary one)")
    parser.add_argument("--compare", action="store_true",
                        help="RTL: also run the golden device and require bit-exact outputs; "
                             "and compare with onnxruntime on the stored quantised model")
    parser.add_argument("--json", default=None, metavar="OUT", help="write the report as JSON")
    parser.add_argument("--html", default=None, metavar="OUT.html",
                        help="write the report as a self-contained HTML page (table and a "
                             "chart of each layer's cycles)")
    parser.add_argument("--output", default=None, metavar="OUT.npz",
                        help="write the graph outputs (.npz appended if missing)")
    args = parser.parse_args(argv)
    if args.output and not args.output.endswith(".npz"):
        args.output += ".npz"                           # what np.savez writes
    try:
        for option in ("json", "html", "output"):       # before the run, which may be long
            check_writable(f"--{option}", getattr(args, option))
        net = CompiledNetwork.load(args.network)
        if args.sim == "icarus":
            check_icarus_memory(net.cfg)                # before generating any Verilog
        if args.workdir is not None:
            check_directory("--workdir", args.workdir)
        if args.input is None:
            seed = 0 if args.seed is None else args.seed
            rng = np.random.default_rng(seed)
            feeds = {name: _generated(spec["shape"], np.dtype(spec["dtype"]), rng)
                     for name, spec in net.inputs.items()}
            print(f"input: generated (8-bit integer: uniform over its range; else standard "
                  f"normal), seed {seed} ({_described(feeds)})")
        elif args.seed is not None:         # (it was ignored without a word)
            raise ValueError(f"--seed {args.seed} seeds generated inputs; --input {args.input} "
                             f"gives them: use one of the two")
        else:
            feeds = _feeds(args.input, net)
            print(f"input: {args.input} ({_described(feeds)})")
    except (CompileError, ValueError, OSError) as e:
        print(f"tessera run: {e}", file=sys.stderr)
        return 2
    layers_total = sum(len(s.layer_names) or 1 for s in net.steps)
    # on stderr, like compile's line: stdout is the results' alone (a log of it too)
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=Console(stderr=True), transient=False) as bar:
        task = bar.add_task(f"{net.name} on {args.sim}", total=layers_total)

        def on_event(ev: dict) -> None:
            if ev.get("event") == "build":
                bar.update(task, description=f"{net.name} on {args.sim}: {ev['what']} "
                                             f"({ev['elapsed_s']:.0f} s)")
            elif ev.get("event") == "built" and ev["elapsed_s"] >= 1:
                bar.console.print(f"{ev['what']}: {ev['elapsed_s']:.0f} s")
            elif ev.get("event") == "step":
                what = ev["name"] if ev["kind"] == "host" else \
                    f"{ev['name']} ({', '.join(ev['layers'])})"
                bar.update(task, advance=len(ev["layers"]) or 1,
                           description=f"{net.name} on {args.sim}: {what[:60]}")

        try:
            with tempfile.TemporaryDirectory(prefix="tessera-run-") as tmp:
                run = run_network(net, feeds, sim=args.sim, workdir=args.workdir or tmp,
                                  tsr=args.network, on_event=on_event)
        except (RuntimeError, ValueError) as e:
            print(f"tessera run: {e}", file=sys.stderr)
            return 1
    rows = layer_rows(run, net.cfg)
    _report_table(rows, f"{net.name}: {args.sim}", run.measured)
    report = {"network": str(args.network), "sim": args.sim, "wall_s": run.wall_s,
              "total_cycles": run.total_cycles, "predicted_cycles": run.predicted_cycles,
              "layers": rows}
    status = 0
    print(f"wall time {run.wall_s:.1f} s; predicted {run.predicted_cycles:,} cycles"
          + ("" if run.total_cycles is None else f"; measured {run.total_cycles:,} cycles "
             f"(image runs, header/CRC/check passes included)"))
    if args.compare:
        with _held_stdout(), _progress_display("tessera run --compare") as on_progress:
            if run.measured:
                done = 0

                def on_step(ev: dict) -> None:
                    nonlocal done
                    if ev.get("event") == "step":
                        done += len(ev["layers"]) or 1
                        progress(on_progress, "the golden device", done, layers_total)

                progress(on_progress, "the golden device", 0, layers_total)
                gold = run_network(net, feeds, sim="golden", on_event=on_step)
                cmp = compare_outputs(run.outputs, gold.outputs)
                report["vs_golden"] = cmp
                for name, c in cmp.items():
                    print(f"  {name}: vs golden device: "
                          f"{'bit-exact' if c['bit_exact'] else 'DIFFERS'} (max abs diff "
                          f"{c['max_abs_diff']:g}, {c['pct_equal']:.1f}% equal)")
                    status |= 0 if c["bit_exact"] else 1
            if net.qmodel is not None:
                status |= _vs_onnxruntime(net, run.outputs, feeds, report, on_progress)
    if args.output:
        np.savez(args.output, **run.outputs)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1) + "\n")
    if args.html:
        Path(args.html).write_text(html_report(report))
    return status
