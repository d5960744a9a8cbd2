"""cocotb test: run the image jobs in ``$TESSERA_JOB`` through the shipped host runtime.

A job directory holds ``job.json`` (written by :func:`tb.jobs.write_job`): memory regions to
load, runs to make (image runs or single register-mode records, each with a cycle budget), and
device ranges to read back after each run. Results go to ``result.json`` next to it: per run the
report (error code, layer index, counters, every layer's statistics) and the bytes read back.
Checking is the caller's job (in plain Python, outside the simulator).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import cocotb

from firmware.runtime import Runtime

from .backend import CocotbBackend
from .harness import Harness


@cocotb.test()
async def run_image_jobs(dut):
    job_dir = Path(os.environ["TESSERA_JOB"])
    job = json.loads((job_dir / "job.json").read_text())
    h = await Harness.start(dut)
    rt = Runtime(CocotbBackend(h), h.cfg)
    await rt.open()
    results = []
    try:
        await _run_all(job, job_dir, rt, results)
    finally:
        # written once (also when a run fails), so long job lists stay linear in time
        (job_dir / "result.json").write_text(json.dumps(results, indent=1) + "\n")


async def _run_all(job: dict, job_dir: Path, rt: Runtime, results: list) -> None:
    for run in job["runs"]:
        for addr, name in run.get("load", []):
            await rt.write(addr, (job_dir / name).read_bytes())
        for addr, name in run.get("load_image", []):
            await rt.load_image((job_dir / name).read_bytes(), check=run.get("check", True))
        if "image_addr" in run:
            report = await rt.run_image(run["image_addr"], budget_cycles=run["budget_cycles"])
        else:
            report = await rt.run_layer(run["record"], budget_cycles=run["budget_cycles"])
        reads = {}
        for name, addr, size in run.get("read", []):
            out = job_dir / f"{len(results)}-{name}.bin"
            out.write_bytes(await rt.read(addr, size))
            reads[name] = out.name
        results.append({
            "error": int(report.error), "error_name": report.error.name,
            "layer_index": report.layer_index, "counters": report.counters,
            "layers": [layer.counters for layer in report.layers], "reads": reads})
