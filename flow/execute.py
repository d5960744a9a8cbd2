"""Run a :class:`~flow.compile.CompiledNetwork` on a backend.

One executor (:func:`execute`, async) drives every backend through the shipped host runtime
(:class:`firmware.runtime.Runtime`): per step it runs a host op in numpy, or writes a segment's
inputs and halo fills, loads its image, runs it (one start, one done), reads the statistics
records and the tensors later steps need. Backends:

* ``golden``: :class:`firmware.emulator.EmulatorDevice`, the functional model of the device
  (the image's header, CRC and record checks, then each layer *record* exactly as the hardware
  computes it: A k-major, B dense or gathered through the convolution tables in memory,
  :mod:`spec.golden` arithmetic, C written at ``c_addr``/``c_stride``). It has no clock: its
  statistics records hold zero counters, and reports show predicted cycles only. This is the
  int8 reference of the compiled network (layouts, addresses and records included).
* ``verilator`` / ``icarus``: the RTL. The whole network runs in **one simulation process**:
  the cocotb module ``flow.net_run`` imports this executor and runs it with the cocotb backend,
  host ops executing in the simulator's Python between segments (the simulation does not advance
  while the host works). Progress events go to a file the launching process follows.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np

from firmware.emulator import EmulatorDevice
from firmware.runtime import DeviceError, Runtime
from flow.compile import (CompiledNetwork, Segment, build_gemm_image, build_ksplit_image,
                          ksplit_accumulators)
from hw.build import emit
from planner.net.reference import HostExecutor, _to_int8, requantise_conv, run_layer
from spec.config import AccelConfig
from tb.tools import build, heartbeat, missing_tool

__all__ = ["execute", "run_network", "NetworkRun", "SIMS", "layer_rows",
           "compare_outputs"]

SIMS = ("golden", "verilator", "icarus")


# -- the executor ----------------------------------------------------------------------------------

Event = Callable[[dict], None]


async def _run_segment(rt, seg: Segment, env: dict, loads=()) -> dict:

    t0 = time.perf_counter()
    for buf in seg.fills:
        await rt.write(buf.addr, buf.fill())
    for buf in seg.inputs:
        await rt.write(buf.addr, buf.encode(env[buf.tensor]))
    for addr, data in loads:
        await rt.write(addr, data)
    addr = await rt.load_image(seg.image)
    report = await rt.run_image(addr, budget_cycles=seg.budget_cycles)
    try:
        report.raise_for_error()
    except DeviceError as e:
        where = seg.records[report.layer_index].name if report.layer_index < len(
            seg.records) else "?"
        raise DeviceError(f"segment {seg.index} ({', '.join(seg.layers)}): {e} (record "
                          f"{where!r})") from None
    outs = {}
    for buf in seg.outputs:
        outs[buf.tensor] = buf.decode(await rt.read(buf.addr, buf.nbytes))
    records = []
    for rec, stats in zip(seg.records, report.layers):
        records.append({"layer": rec.layer, "record": rec.name, "m": rec.m, "k": rec.k,
                        "n": rec.n, "macs": rec.macs, "predicted_cycles": rec.predicted_cycles,
                        "counters": dict(stats.counters)})
    return {"outputs": outs, "records": records, "image_bytes": len(seg.image),
            "overhead_predicted": seg.overhead_cycles,
            "run_counters": dict(report.counters), "wall_s": time.perf_counter() - t0}


async def execute(net: CompiledNetwork, rt, feeds: Mapping[str, np.ndarray], *,
                  on_event: Event | None = None) -> tuple[dict[str, np.ndarray], list[dict]]:
    """Run ``net`` with runtime ``rt`` (opened here); returns every tensor by name and one
    report per step (kind, name, layers, wall time, and for images every record's prediction
    and statistics)."""

    missing = [n for n in net.inputs if n not in feeds]
    if missing:
        raise ValueError(f"feeds lack graph inputs {missing}")
    await rt.open()
    env: dict[str, np.ndarray] = dict(net.constants)
    env.update({k: np.asarray(v) for k, v in feeds.items()})
    host = HostExecutor(net.graph())
    reports = []
    emit = on_event or (lambda ev: None)
    emit({"event": "start", "steps": len(net.steps)})
    for i, step in enumerate(net.steps):
        t0 = time.perf_counter()
        rep = {"index": i, "kind": step.kind, "name": step.name, "layers": step.layer_names}
        if step.kind == "host":
            outs = host(step.node, env)
            for name, value in zip(step.node.outputs, outs):
                if name:
                    env[name] = np.asarray(value)
            rep["op_type"] = step.node.op_type
        elif step.kind == "host_layer":
            layer = net.layers[step.layer]
            env[layer.output] = run_layer(layer, env)
            rep["reason"] = step.reason
            rep["macs"] = layer.macs
        elif step.kind == "segment":
            res = await _run_segment(rt, step.segment, env)
            env.update(res.pop("outputs"))
            rep.update(res)
        elif step.kind == "gemm":

            layer = net.layers[step.layer]
            a = _to_int8(np.asarray(env[layer.input]), layer.in_offset,
                         f"layer {layer.name!r}'s input {layer.input!r}")
            b = _to_int8(np.asarray(env[layer.input_b]), 0,
                         f"layer {layer.name!r}'s input {layer.input_b!r}")
            seg, loads, out_shape = build_gemm_image(layer, a, b, net.cfg, net.strategy)
            res = await _run_segment(rt, seg, env, loads)
            outs = res.pop("outputs")
            y = np.stack([outs[f"{layer.output}[{t}]"] for t in range(len(seg.outputs))])
            env[layer.output] = y.reshape(out_shape)
            rep.update(res)
        elif step.kind == "ksplit":
            # one image run per input image; the parts' int32 partial sums are added and
            # requantised here (flow.compile)
            layer = net.layers[step.layer]
            x = _to_int8(np.asarray(env[layer.input]), layer.in_offset,
                         f"layer {layer.name!r}'s input {layer.input!r}")
            raw, runs = [], []
            for n in range(layer.shape.batch):
                seg, loads, partials = build_ksplit_image(layer, x[n:n + 1], net.cfg,
                                                          net.strategy, image=n)
                runs.append(await _run_segment(rt, seg, env, loads))
                raw += [(n, g, await rt.read(addr, nbytes)) for g, addr, nbytes in partials]
            env[layer.output] = requantise_conv(layer, ksplit_accumulators(layer, raw))
            rep.update(_merged(runs))
        else:
            raise ValueError(f"step {step.name!r}: unknown kind {step.kind!r}")
        rep.setdefault("wall_s", time.perf_counter() - t0)
        reports.append(rep)
        emit({"event": "step", **{k: v for k, v in rep.items() if k != "records"},
              "cycles": _cycles(rep)})
    emit({"event": "done"})
    return env, reports


def _merged(runs: list[dict]) -> dict:
    """One step's report of several image runs (:func:`_run_segment`'s): records in run
    order, counters, predicted overheads, image bytes and wall times summed."""
    counters: dict = {}
    for run in runs:
        for k, v in run["run_counters"].items():
            counters[k] = counters.get(k, 0) + v
    return {"records": [r for run in runs for r in run["records"]],
            "image_bytes": sum(run["image_bytes"] for run in runs),
            "overhead_predicted": sum(run["overhead_predicted"] for run in runs),
            "run_counters": counters, "wall_s": sum(run["wall_s"] for run in runs)}


def _cycles(rep: dict) -> int | None:
    rc = rep.get("run_counters")
    return None if rc is None else rc.get("total_cycles")


# -- one call per run ------------------------------------------------------------------------------

@dataclasses.dataclass
class NetworkRun:
    """The outcome of one run: graph ``outputs``, per-step ``steps`` reports, the backend and
    the wall time of the whole run (seconds, simulator start-up included); on the RTL backends
    also the simulator process's peak resident memory (bytes)."""

    sim: str
    outputs: dict[str, np.ndarray]
    steps: list[dict]
    wall_s: float
    sim_peak_rss_bytes: int | None = None

    @property
    def measured(self) -> bool:
        return self.sim != "golden"

    @property
    def total_cycles(self) -> int | None:
        """Sum of the image runs' cycles (``None`` on the golden backend)."""
        if not self.measured:
            return None
        return sum(_cycles(s) or 0 for s in self.steps)

    @property
    def predicted_cycles(self) -> int:
        """Every record's prediction plus each image run's own (predicted) cycles."""
        return sum(r["predicted_cycles"] for s in self.steps for r in s.get("records", [])) + \
            sum(s.get("overhead_predicted", 0) for s in self.steps)


def run_network(net: CompiledNetwork, feeds: Mapping[str, np.ndarray], *, sim: str = "golden",
                workdir: str | Path | None = None, tsr: str | Path | None = None,
                on_event: Event | None = None) -> NetworkRun:
    """Run ``net`` on ``sim`` (``golden``, ``verilator``, ``icarus``). The RTL backends need a
    ``workdir`` and the ``.tsr`` path ``tsr`` (saved there when not given) and run the whole
    network in one simulation process."""
    if sim not in SIMS:
        raise ValueError(f"sim must be one of {', '.join(SIMS)}, not {sim!r}")
    t0 = time.perf_counter()
    if sim == "golden":

        rt = Runtime(EmulatorDevice(net.cfg), net.cfg)
        env, steps = asyncio.run(execute(net, rt, feeds, on_event=on_event))
        outputs = {n: env[n] for n in net.outputs}
        return NetworkRun(sim, outputs, steps, time.perf_counter() - t0)
    if workdir is None:
        raise ValueError("the RTL backends need a workdir")
    outputs, steps, rss = _run_rtl(net, feeds, sim, Path(workdir), tsr, on_event)
    return NetworkRun(sim, outputs, steps, time.perf_counter() - t0, rss)


def _run_rtl(net, feeds, sim, workdir: Path, tsr, on_event):

    reason = missing_tool(sim)
    if reason:
        raise RuntimeError(reason)
    workdir = workdir.resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    if tsr is None:
        tsr = net.save(workdir / "network.tsr")
    np.savez(workdir / "feeds.npz", **{k: np.asarray(v) for k, v in feeds.items()})
    events = workdir / "events.jsonl"
    result = workdir / "result.json"
    for f in (events, result, workdir / "outputs.npz"):
        f.unlink(missing_ok=True)
    job = {"tsr": str(Path(tsr).resolve()), "feeds": "feeds.npz", "events": events.name,
           "result": result.name, "outputs": "outputs.npz"}
    (workdir / "net_job.json").write_text(json.dumps(job, indent=1) + "\n")
    with heartbeat(on_event, "generating Verilog"):
        out = emit(net.cfg)
    with heartbeat(on_event, f"building the {sim} model (cached after the first use)"):
        runner = build(sim, out, waves=os.getenv("WAVES") == "1")
    log = workdir / "sim.log"
    error: list[BaseException] = []

    def target():
        try:
            runner.test(hdl_toplevel="sim_top", test_module="flow.net_run", test_dir=workdir,
                        # no pytest assertion rewriting of the modules the host ops import
                        # (onnx.reference's operator classes break under it)
                        extra_env={"ACCEL_BUILD": str(out), "TESSERA_NET_JOB": str(workdir),
                                   "COCOTB_REWRITE_ASSERTION_FILES": ""},
                        waves=os.getenv("WAVES") == "1", results_xml=str(workdir / "results.xml"),
                        log_file=log)
        except BaseException as e:        # noqa: BLE001 -- re-raised in the caller's thread
            error.append(e)

    thread = threading.Thread(target=target, name="tessera-sim", daemon=True)
    thread.start()
    seen = 0
    while True:
        alive = thread.is_alive()
        if on_event is not None and events.exists():
            lines = events.read_text().splitlines()
            for line in lines[seen:]:
                try:
                    on_event(json.loads(line))
                except ValueError:
                    break               # a line being written: read it next time
                seen += 1
        if not alive:
            break
        thread.join(0.2)
    if error:
        raise RuntimeError(f"the simulation failed: {error[0]} (log: {log})")
    if not result.exists():
        tail = log.read_text().splitlines()[-30:] if log.exists() else []
        raise RuntimeError(f"the simulation wrote no results (log: {log}):\n" + "\n".join(tail))
    raw = json.loads(result.read_text())
    if raw.get("error"):
        raise RuntimeError(f"the network run failed in the simulation: {raw['error']} "
                           f"(log: {log})")
    with np.load(workdir / "outputs.npz", allow_pickle=False) as z:
        outputs = {n: z[n] for n in net.outputs}
    return outputs, raw["steps"], raw.get("peak_rss_bytes")


# -- reports ---------------------------------------------------------------------------------------

def layer_rows(run: NetworkRun, cfg: AccelConfig) -> list[dict]:
    """One row per accelerator layer: records, MACs, predicted and (RTL) measured cycles, MAC
    utilisation of the measured cycles, DRAM bytes read and written; host steps as rows with
    their wall time."""
    rows = []
    peak = cfg.array_rows * cfg.array_cols
    for s in run.steps:
        if s["kind"] in ("segment", "gemm", "ksplit"):
            by_layer: dict[str, dict] = {}
            for r in s["records"]:
                row = by_layer.setdefault(r["layer"], {
                    "step": s["index"], "where": f"accel ({s['name']})", "layer": r["layer"],
                    "records": 0, "macs": 0, "predicted_cycles": 0, "cycles": 0,
                    "dram_rd_bytes": 0, "dram_wr_bytes": 0})
                c = r["counters"]
                row["records"] += 1
                row["macs"] += r["macs"]
                row["predicted_cycles"] += r["predicted_cycles"]
                row["cycles"] += c["total_cycles"]
                row["dram_rd_bytes"] += c["rd_a_bytes"] + c["rd_b_bytes"]
                row["dram_wr_bytes"] += c["wr_c_bytes"]
            for row in by_layer.values():
                if not run.measured:
                    row["cycles"] = row["dram_rd_bytes"] = row["dram_wr_bytes"] = None
                    row["mac_util"] = None
                else:
                    row["mac_util"] = row["macs"] / (peak * row["cycles"]) if row["cycles"] \
                        else 0.0
                rows.append(row)
        else:
            rows.append({"step": s["index"], "where": "host", "layer": s["name"],
                         "op_type": s.get("op_type", "layer"), "reason": s.get("reason", ""),
                         "wall_s": s["wall_s"]})
    return rows


def compare_outputs(a: Mapping[str, np.ndarray], b: Mapping[str, np.ndarray],
                    scales: Mapping[str, float] | None = None) -> dict[str, dict]:
    """Per output: elements, max abs difference (and in LSBs when a scale is given), % of
    exactly equal elements, and whether the two are bit-identical."""
    out = {}
    for name in a:
        x, y = np.asarray(a[name]), np.asarray(b[name])
        if x.shape != y.shape:
            raise ValueError(f"output {name!r}: shapes {x.shape} and {y.shape} differ")
        diff = np.abs(x.astype(np.float64) - y.astype(np.float64))
        row = {"elements": int(x.size), "max_abs_diff": float(diff.max()) if x.size else 0.0,
               "pct_equal": float(100 * np.mean(diff == 0)) if x.size else 100.0,
               "bit_exact": bool(x.dtype == y.dtype and np.array_equal(x, y))}
        s = (scales or {}).get(name)
        if s and s == s:
            row["max_abs_diff_lsb"] = round(row["max_abs_diff"] / abs(s), 3)   # (a step)
        out[name] = row
    return out
