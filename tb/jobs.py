"""Run image jobs on a simulator from plain Python: write the job, launch ``tb.run_image`` under
cocotb, read the results back. Used by the tests and by ``examples/``.

::

    results = run_jobs([ImageRun(blob, budget_cycles=..., load=[(x_addr, x_bytes)],
                                 read=[("y", y_addr, y_size)])], cfg, workdir=tmp)
    results[0].error, results[0].reads["y"], results[0].layers
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import struct
from pathlib import Path

from hw.build import emit
from spec.config import AccelConfig
from spec.layouts import HEADER_WORDS

from .tools import build, missing_tool

__all__ = ["ImageRun", "LayerRun", "RunResult", "run_jobs"]


@dataclasses.dataclass
class ImageRun:
    """Load ``load`` regions and the image ``blob`` (at its header's base_addr; validated by the
    runtime unless ``check`` is false), run it, read ``read`` = [(name, addr, size)]."""

    blob: bytes
    budget_cycles: int
    load: list[tuple[int, bytes]] = dataclasses.field(default_factory=list)
    read: list[tuple[str, int, int]] = dataclasses.field(default_factory=list)
    check: bool = True
    place: bool = True          # False: the image is already in memory (a later run)
    #: Place the blob as raw bytes here and run it from here, whatever its header says
    #: (fuzzing); None: the runtime places it at its base_addr.
    addr: int | None = None

    @property
    def image_addr(self) -> int:
        if self.addr is not None:
            return self.addr
        return struct.unpack_from("<I", self.blob, 4 * HEADER_WORDS["base_addr"])[0]


@dataclasses.dataclass
class LayerRun:
    """One register-mode layer record (u32 words by name)."""

    record: dict[str, int]
    budget_cycles: int
    load: list[tuple[int, bytes]] = dataclasses.field(default_factory=list)
    read: list[tuple[str, int, int]] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class RunResult:
    error: int
    error_name: str
    layer_index: int
    counters: dict[str, int]
    layers: list[dict[str, int]]
    reads: dict[str, bytes]


def run_jobs(runs: list[ImageRun | LayerRun], cfg: AccelConfig, *, workdir: Path,
             sim: str = "verilator", plusargs: list[str] | tuple = (),
             poison_collisions: bool = False) -> list[RunResult]:
    """Run ``runs`` in order in one simulation of ``cfg`` (no reset between runs).
    ``plusargs`` go to the simulator (e.g. the memory model's ``+STALL_*`` / ``+DELAY_*``
    stall injection, tb/hdl/dram_model.sv); ``poison_collisions`` simulates the build of
    ``hw.build.emit(cfg, poison_collisions=True)`` (:mod:`hw.collide`)."""

    reason = missing_tool(sim)
    if reason:
        raise RuntimeError(reason)
    workdir = Path(workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    spec = []
    written: dict[str, str] = {}

    def data_file(data: bytes) -> str:
        """One file per distinct content (runs often share inputs)."""
        key = hashlib.blake2s(data).hexdigest()
        if key not in written:
            written[key] = f"data-{len(written)}.bin"
            (workdir / written[key]).write_bytes(data)
        return written[key]

    for run in runs:
        entry: dict = {"budget_cycles": run.budget_cycles, "load": [], "read": run.read}
        for addr, data in run.load:
            entry["load"].append([addr, data_file(bytes(data))])
        if isinstance(run, ImageRun):
            entry["image_addr"] = run.image_addr
            entry["check"] = run.check
            if run.place and run.addr is not None:
                entry["load"].append([run.addr, data_file(run.blob)])
            elif run.place:
                entry["load_image"] = [[run.image_addr, data_file(run.blob)]]
        else:
            entry["record"] = run.record
        spec.append(entry)
    (workdir / "job.json").write_text(json.dumps({"runs": spec}, indent=1) + "\n")
    result_file = workdir / "result.json"
    result_file.unlink(missing_ok=True)
    out = emit(cfg, poison_collisions=poison_collisions)
    runner = build(sim, out, waves=os.getenv("WAVES") == "1")
    runner.test(hdl_toplevel="sim_top", test_module="tb.run_image", test_dir=workdir,
                extra_env={"ACCEL_BUILD": str(out), "TESSERA_JOB": str(workdir)},
                waves=os.getenv("WAVES") == "1", results_xml=str(workdir / "results.xml"),
                plusargs=list(plusargs))
    if not result_file.exists():
        raise RuntimeError(f"the simulation wrote no results (see {workdir})")
    raw = json.loads(result_file.read_text())
    if len(raw) != len(runs):
        raise RuntimeError(f"the simulation finished {len(raw)} of {len(runs)} runs "
                           f"(see the log above and {workdir})")
    return [RunResult(error=r["error"], error_name=r["error_name"],
                      layer_index=r["layer_index"], counters=r["counters"], layers=r["layers"],
                      reads={k: (workdir / v).read_bytes() for k, v in r["reads"].items()})
            for r in raw]
