"""cocotb test: measure a list of (shape, tiling) GEMM cases in one simulator process.

Environment: ACCEL_BUILD; TESSERA_TUNEDB_CASES, a JSON file ``[{"m", "k", "n", "tiling":
{TILING_FIELDS...}}, ...]`` (written by :func:`flow.measure.measure_rtl`). Each case runs
through :func:`tb.gemm.run_case` (bit-exact C, untouched guards, counter identities; dense
tensors), the memory model reloaded per case. Writes ``tunedb_results.json`` in the test directory:
one ``{"m", "k", "n", "tiling", "counters", "predicted"}`` per case, in input order.
"""

from __future__ import annotations

import json
import os

import cocotb

from spec.regmap import COUNTERS
from planner.tiling import TILING_FIELDS

from .cases import GemmCase
from .gemm import run_case
from .harness import Harness

#: The environment variable naming the cases file, and the results file's name.
CASES_ENV = "TESSERA_TUNEDB_CASES"
RESULTS_FILE = "tunedb_results.json"


@cocotb.test()
async def tunedb_measure_cases(dut):
    """Every case of the file, in order; counters out."""
    h = await Harness.start(dut)
    with open(os.environ[CASES_ENV]) as f:
        cases = json.load(f)
    records = []
    for idx, raw in enumerate(cases):
        tiling = {name: int(raw["tiling"][name]) for name in TILING_FIELDS}
        case = GemmCase(m=raw["m"], k=raw["k"], n=raw["n"], seed=idx + 1,
                        outer_m=tiling["outer_m"], splitk=bool(tiling["need_splitk"]))
        dut._log.info("tunedb case %d/%d: %s %s", idx + 1, len(cases), case, tiling)
        rec = await run_case(h, case, tiling, dense=True)
        records.append({"m": case.m, "k": case.k, "n": case.n, "tiling": tiling,
                        "counters": {name: rec[name] for name in COUNTERS},
                        "predicted": rec["predicted"]})
    with open(os.path.join(os.getcwd(), RESULTS_FILE), "w") as f:
        json.dump(records, f, indent=1)
