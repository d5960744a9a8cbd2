"""cocotb test: GEMMs tiled by the planner, measured against the planner's cycle model.

Environment: ACCEL_BUILD; TESSERA_PLANNED "MxKxN,..."; TESSERA_STRATEGY (planner strategy,
default "best"); TESSERA_SEED. Writes ``planned_results.json`` in the test directory.
"""

from __future__ import annotations

import json
import os

import cocotb

from .cases import planned_cases
from .gemm import run_case
from .harness import Harness


@cocotb.test()
async def gemm_planned_shapes(dut):
    """Each shape with the planner's tiling: bit-exact, and counters next to predictions."""
    h = await Harness.start(dut)
    seed = int(os.environ.get("TESSERA_SEED", "1"))
    strategy = os.environ.get("TESSERA_STRATEGY", "best")
    records = []
    for case, tiling, planned_by in planned_cases(os.environ["TESSERA_PLANNED"], h.cfg,
                                                  strategy, seed):
        dut._log.info("planned %s: %s", case, tiling)
        record = await run_case(h, case, tiling, dense=True)
        record["strategy"] = planned_by
        records.append(record)
    with open(os.path.join(os.getcwd(), "planned_results.json"), "w") as f:
        json.dump(records, f, indent=1)
