"""cocotb tests: tiled int8 GEMMs on sim_top against the numpy golden model.

Environment (set by the pytest launcher, tests/sim/test_rtl.py):
  ACCEL_BUILD     the emitted config directory (config.json)
  TESSERA_SEED    seed of the random cases; TESSERA_CASES their number
  TESSERA_SHAPES  optional explicit shapes "MxKxN,..." run with a random legal tiling
"""

from __future__ import annotations

import json
import os
import time

import cocotb
import numpy as np

from spec.desc import ErrorCode
from spec.golden import gemm_int8
from spec.regmap import COUNTERS
from spec.schedule import traffic
from planner.cost import predict_tiling

from .cases import GemmCase, random_cases, register_budget_cycles
from .harness import Harness, a_image, b_image, c_from_bytes
from .placement import descriptor, place, random_tiling

GUARD = 0xA5      # byte pattern of C and its guard regions before a run


async def run_case(h: Harness, case: GemmCase, tiling: dict | None = None, *,
                   dense: bool = False, base: int = 0) -> dict:
    """Run one case end to end; assert bit-exact C, untouched guards and counter identities.

    ``tiling`` defaults to a random legal one; ``dense`` places tensors without row padding;
    ``base`` is the device address the operands are laid out from.
    """
    cfg = h.cfg
    rng = np.random.default_rng(case.seed)
    a = rng.integers(-128, 128, size=(case.m, case.k), dtype=np.int8)
    b = rng.integers(-128, 128, size=(case.k, case.n), dtype=np.int8)
    a.flat[0] = -128
    b.flat[0] = -128
    if tiling is None:
        tiling = random_tiling(case.m, case.k, case.n, cfg, rng, outer_m=case.outer_m,
                               splitk=case.splitk)
    where = place(case.m, case.k, case.n, cfg, rng=None if dense else rng, base=base)
    d = descriptor(case.m, case.k, case.n, tiling, where, cfg)
    c_lo = where.c_addr - where.guard_bytes
    c_hi = where.end
    await h.load([(where.a_addr, a_image(a, where.a_stride)),
                  (where.b_addr, b_image(b, where.b_stride)),
                  (c_lo, bytes([GUARD]) * (c_hi - c_lo))])
    started = time.perf_counter()
    result = await h.run(d, budget_cycles=register_budget_cycles(d, cfg))
    run_wall_s = time.perf_counter() - started
    ctx = f"case {case} tiling {tiling}"
    assert result.error == ErrorCode.NONE, f"{ctx}: error {ErrorCode(result.error).name}"
    raw = await h.dump(c_lo, c_hi - c_lo)
    g = where.guard_bytes
    got = c_from_bytes(raw[g:], case.m, case.n, where.c_stride)
    want = gemm_int8(a, b)
    if not np.array_equal(got, want):
        bad = np.argwhere(got != want)
        i, j = bad[0]
        raise AssertionError(f"{ctx}: {len(bad)} wrong elements, first C[{i},{j}] = "
                             f"{got[i, j]} != {want[i, j]}")
    # everything in [c_lo, c_hi) that is not an element of C keeps the guard pattern
    touched = np.zeros(c_hi - c_lo, dtype=bool)
    for i in range(case.m):
        start = g + i * where.c_stride
        touched[start:start + 4 * case.n] = True
    untouched = np.frombuffer(raw, dtype=np.uint8)[~touched]
    assert np.all(untouched == GUARD), f"{ctx}: bytes outside C were written"
    ctr = result.counters
    parts = sum(ctr[name] for name in COUNTERS if name.endswith("_cycles") and
                name != "total_cycles")
    assert ctr["total_cycles"] == parts, f"{ctx}: total {ctr['total_cycles']} != sum {parts}"
    for name, value in traffic(d, cfg).items():
        assert ctr[name] == value, f"{ctx}: counter {name} = {ctr[name]}, expected {value}"
    predicted = predict_tiling(case.m, case.k, case.n, d.partition_m, d.partition_n,
                               d.partition_k, d.outer_m, cfg)
    return {"case": str(case), "m": case.m, "k": case.k, "n": case.n, **tiling, **ctr,
            "predicted": predicted.as_dict(), "run_wall_s": run_wall_s}


def _results_path():
    return os.path.join(os.getcwd(), "gemm_results.json")


@cocotb.test()
async def gemm_random_cases_match_golden(dut):
    """Random shapes and random legal tilings, bit-exact against numpy; operands laid out from
    device address ``$TESSERA_BASE`` (default 0; decimal or 0x hex)."""
    h = await Harness.start(dut)
    seed = int(os.environ.get("TESSERA_SEED", "1"))
    count = int(os.environ.get("TESSERA_CASES", "10"))
    base = int(os.environ.get("TESSERA_BASE", "0"), 0)
    records = []
    shapes = os.environ.get("TESSERA_SHAPES")
    if shapes:
        cases = []
        for idx, text in enumerate(shapes.split(",")):
            m, k, n = (int(x) for x in text.lower().split("x"))
            cases.append(GemmCase(m=m, k=k, n=n, seed=seed + idx, outer_m=idx % 2,
                                  splitk=bool((idx // 2) % 2)))
    else:
        cases = random_cases(h.cfg, seed, count)
    for case in cases:
        dut._log.info("case %s", case)
        records.append(await run_case(h, case, base=base))
    with open(_results_path(), "w") as f:
        json.dump(records, f, indent=1)
