"""Tuning-database measurements on the RTL (seed 001): :func:`measure_rtl`, a measure function
for :class:`planner.tunedb.measure.Executor` and :func:`planner.tunedb.build.build_db` that
builds the configuration's simulator and runs the cases through ``tb/tunedb_measure.py``."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Sequence

from hw.build import emit
from planner.tunedb.measure import Case
from spec.config import AccelConfig
from tb import tunedb_measure
from tb.tools import build, missing_tool
from tb.tunedb_measure import CASES_ENV, RESULTS_FILE

__all__ = ["measure_rtl"]


def measure_rtl(cases: Sequence[Case], cfg: AccelConfig, workdir: str | Path | None = None
                ) -> list[dict]:
    """Run ``cases`` on Verilator in one simulator process; their RTL counters, in order.

    Emits and builds the configuration if needed (``hw.build.emit`` and ``tb.tools.build`` cache
    and lock both). Raises ``RuntimeError`` when the simulator is missing or a case fails (wrong
    result, error code, timeout), naming the test directory with the log.
    """
    from cocotb_tools.runner import get_results  # dev extra (cocotb)

    if not cases:
        return []
    reason = missing_tool("verilator")
    if reason:
        raise RuntimeError(reason)
    out = emit(cfg)
    runner = build("verilator", out)
    test_dir = Path(tempfile.mkdtemp(prefix="tunedb-", dir=workdir))
    case_file = test_dir / "cases.json"
    case_file.write_text(json.dumps([c.to_json() for c in cases]))
    results_xml = test_dir / "results.xml"
    runner.test(hdl_toplevel="sim_top", test_module=tunedb_measure.__name__, test_dir=test_dir,
                extra_env={"ACCEL_BUILD": str(out), CASES_ENV: str(case_file)},
                results_xml=str(results_xml))
    tests, fails = get_results(results_xml)
    result_file = test_dir / RESULTS_FILE
    if tests == 0 or fails or not result_file.exists():
        raise RuntimeError(f"RTL measurement failed ({fails} of {tests} cocotb tests); "
                           f"log and cases in {test_dir}")
    records = json.loads(result_file.read_text())
    if len(records) != len(cases):
        raise RuntimeError(f"RTL measurement returned {len(records)} results for {len(cases)} "
                           f"cases ({test_dir})")
    counters = []
    for case, rec in zip(cases, records):
        if (rec["m"], rec["k"], rec["n"]) != case.dims:
            raise RuntimeError(f"RTL result for {rec['m']}x{rec['k']}x{rec['n']} in place of "
                               f"{case.m}x{case.k}x{case.n} ({test_dir})")
        counters.append(rec["counters"])
    for child in test_dir.iterdir():  # keep the directory small: images are large
        if child.suffix == ".hex":
            child.unlink()
    return counters
