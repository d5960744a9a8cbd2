"""cocotb test: run a compiled network (``.tsr``) through the shipped host runtime, host ops in
between, in one simulation (launched by :func:`flow.execute.run_network`).

``$TESSERA_NET_JOB/net_job.json`` names the ``.tsr``, the feeds (``.npz``), the progress-event
file (JSON lines, followed by the launching process) and where the results go: ``result.json``
(per-step reports, or the error) and ``outputs.npz`` (the graph outputs). Checking is the
caller's job. The result also holds the simulator process's peak resident memory
(``peak_rss_bytes``: the model, its memory and this Python), which the large-layer tests bound.
"""

from __future__ import annotations

import json
import os
import traceback
from pathlib import Path

import cocotb
import numpy as np

from firmware.runtime import Runtime
from flow.compile import CompiledNetwork
from flow.execute import execute
from tb.backend import CocotbBackend
from tb.harness import Harness


@cocotb.test()
async def run_network(dut):

    job_dir = Path(os.environ["TESSERA_NET_JOB"])
    job = json.loads((job_dir / "net_job.json").read_text())
    net = CompiledNetwork.load(job["tsr"])
    with np.load(job_dir / job["feeds"], allow_pickle=False) as z:
        feeds = {k: z[k] for k in z.files}
    events = (job_dir / job["events"]).open("a", buffering=1)

    def on_event(ev: dict) -> None:
        events.write(json.dumps(ev) + "\n")

    h = await Harness.start(dut)
    rt = Runtime(CocotbBackend(h), h.cfg)
    try:
        env, steps = await execute(net, rt, feeds, on_event=on_event)
    except Exception as e:
        (job_dir / job["result"]).write_text(json.dumps(
            {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()}) + "\n")
        raise
    finally:
        events.close()
    np.savez(job_dir / job["outputs"], **{n: env[n] for n in net.outputs})
    (job_dir / job["result"]).write_text(json.dumps(
        {"steps": steps, "peak_rss_bytes": peak_rss_bytes()}, indent=1) + "\n")


def peak_rss_bytes() -> int | None:
    """This process's peak resident memory in bytes: ``VmHWM`` of ``/proc/self/status``, the
    high-water mark of the simulator's own address space. (``getrusage``'s ``ru_maxrss`` would
    not do: Linux carries it across ``exec``, so it includes the launching Python's.) ``None``
    where ``/proc`` is not available."""
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return None
