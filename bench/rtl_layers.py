"""cocotb test module: run a list of GEMM and convolution layers in one simulation.

Launched by :func:`bench.network.run_on_rtl`; not collected by pytest. Environment:
``ACCEL_BUILD``; ``TESSERA_BENCH_JOB``, a JSON file ``{"strategy", "seed", "layers": [{"kind":
"gemm", "m", "k", "n"} | {"kind": "conv", "shape": {ConvShape fields}, "layout"}]}``.

Each layer is checked bit-exactly against the golden model by the project testbenches
(``tb.gemm.run_case``, ``tb.conv.run_conv``), with the planner's tiling for ``strategy``. After
each layer the records so far are rewritten to ``bench_results.json`` in the test directory,
which the host polls for its progress bar.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
from pathlib import Path

import cocotb

import planner
import planner.conv
import tb.conv
from planner import GemmShape
from planner.shapes import ConvShape
from planner.tiling import TILING_FIELDS
from tb.cases import GemmCase
from tb.gemm import run_case
from tb.harness import Harness

RESULTS_NAME = "bench_results.json"


@contextlib.contextmanager
def _conv_strategy(strategy: str):
    """``tb.conv.run_conv`` tiles with ``compile_conv``'s default strategy (``best``); for another
    strategy, bind it for the duration (tb.conv takes no strategy argument)."""
    if strategy == "best":
        yield
        return
    original = tb.conv.compile_conv
    tb.conv.compile_conv = functools.partial(planner.conv.compile_conv, strategy=strategy)
    try:
        yield
    finally:
        tb.conv.compile_conv = original


async def run_layer(h: Harness, layer: dict, strategy: str, seed: int) -> dict:
    if layer["kind"] == "gemm":
        m, k, n = layer["m"], layer["k"], layer["n"]
        plan = planner.plan_gemm(GemmShape(m, k, n), h.cfg, strategy)
        tiling = {name: getattr(plan, name) for name in TILING_FIELDS}
        case = GemmCase(m=m, k=k, n=n, seed=seed, outer_m=plan.outer_m,
                        splitk=bool(plan.need_splitk))
        record = await run_case(h, case, tiling, dense=True)
        record["planner_predicted_cycles"] = plan.predicted_cycles
        return record
    shape = ConvShape(**layer["shape"])
    with _conv_strategy(strategy):
        record = await tb.conv.run_conv(h, shape, layer["layout"], seed, planned=True)
    plan, _ = planner.plan_conv(shape, h.cfg, strategy)
    record["planner_predicted_cycles"] = plan.predicted_cycles * shape.groups
    return record


@cocotb.test()
async def bench_layers(dut):
    """Every layer of the job, bit-exact, counters recorded."""
    job = json.loads(Path(os.environ["TESSERA_BENCH_JOB"]).read_text())
    h = await Harness.start(dut)
    out = Path.cwd() / RESULTS_NAME
    records = []
    for i, layer in enumerate(job["layers"]):
        dut._log.info("bench layer %d: %s", i, layer)
        record = await run_layer(h, layer, job["strategy"], job["seed"] + i)
        record["strategy"] = job["strategy"]
        records.append(record)
        tmp = out.with_suffix(".tmp")
        tmp.write_text(json.dumps(records, indent=1))
        os.replace(tmp, out)
