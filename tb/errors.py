"""cocotb test: every register-mode error code (descriptor and layer record rules) on the RTL
ends within a few cycles, with the code spec.record.check_record predicts and no memory written.
(The image codes are tb.image's.)"""

from __future__ import annotations

import dataclasses

import cocotb
import numpy as np

from spec.desc import ErrorCode
from spec.record import check_record, layer_record
from planner.cost import DEFAULT_CONSTANTS

from .harness import Harness
from .placement import descriptor, place, random_tiling

FILL = 0x5A


def broken(d, cfg):
    """One descriptor per error code, each breaking one rule of a legal ``d``."""
    R, C = cfg.array_rows, cfg.array_cols
    yield dataclasses.replace(d, m=0)
    yield dataclasses.replace(d, partition_m=R + 1)
    yield dataclasses.replace(d, partition_n=0)
    yield dataclasses.replace(d, partition_k=d.k - 1, need_splitk=0)
    yield dataclasses.replace(d, tile_m=d.partition_m + R)
    yield dataclasses.replace(d, partition_m=R * (cfg.buf_a_half_bytes // R), partition_k=2,
                              need_splitk=1)
    yield dataclasses.replace(d, partition_n=C * (cfg.buf_b_half_bytes // C), partition_k=2,
                              need_splitk=1, tile_n=C)
    yield dataclasses.replace(d, acc_buffer_needed=cfg.acc_half_bytes + 4)
    yield dataclasses.replace(d, c_addr=cfg.dram_bytes - 4)
    yield dataclasses.replace(d, c_addr=d.a_addr)
    yield dataclasses.replace(d, outer_m=2)
    conv = dict(b_mode=1, b_stride=64, off_addr=d.b_addr + 64, run_addr=d.b_addr + 1024,
                grp_addr=d.b_addr + 2048, run_count=1)
    yield dataclasses.replace(d, **{**conv, "run_count": cfg.conv_run_entries + 1})  # BAD_TABLE
    yield dataclasses.replace(d, **{**conv, "run_addr": d.c_addr})               # BAD_ADDRESS


def broken_records(d, cfg, fill_addr):
    """Records breaking one layer-record rule each (``fill_addr``: FILL bytes in memory)."""
    yield layer_record(d, post_mode=4)                                          # BAD_LAYER
    yield layer_record(d, act_min=5, act_max=4)                                 # BAD_LAYER
    yield layer_record(d, out_window_hi=layer_record(d)["out_window_hi"] - 1)   # BAD_WINDOW
    yield layer_record(d, out_format=1, mult_addr=fill_addr + 2,
                       shift_addr=fill_addr)                                     # BAD_WINDOW
    # 0x5a5a5a5a is a legal multiplier but not a legal shift
    yield layer_record(d, out_format=1, mult_addr=fill_addr, shift_addr=fill_addr)  # BAD_QUANT


@cocotb.test()
async def errors_refused_without_memory_writes(dut):
    h = await Harness.start(dut)
    cfg = h.cfg
    rng = np.random.default_rng(7)
    m, k, n = 2 * cfg.array_rows + 1, 9, cfg.array_cols + 3
    where = place(m, k, n, cfg)
    d = descriptor(m, k, n, random_tiling(m, k, n, cfg, rng, splitk=False), where, cfg)
    size = where.end
    await h.load([(0, bytes([FILL]) * size)])
    seen = set()
    cases = [layer_record(bad) for bad in broken(d, cfg)]
    cases += list(broken_records(d, cfg, fill_addr=where.a_addr))
    for bad in cases:
        errs = check_record(bad, cfg, read_words=lambda addr, count: [0x5A5A5A5A] * count)
        assert errs, f"not an illegal record: {bad}"
        # a refused record costs what a dry run does (the checks, then FINISH); parameter
        # checks read m words per array first
        budget = 4 * DEFAULT_CONSTANTS.dry_run_cycles
        if errs[0][0] == ErrorCode.BAD_QUANT:
            budget += 8 * d.m
        result = await h.run(bad, budget_cycles=budget)
        assert result.error == errs[0][0], (
            f"{bad}: RTL error {result.error}, check() says {errs[0][0]!r}")
        seen.add(ErrorCode(result.error))
        if result.error != ErrorCode.BAD_QUANT:
            assert result.counters["rd_a_bytes"] == result.counters["rd_b_bytes"] == 0
        assert result.counters["wr_c_bytes"] == 0
    register_codes = {c for c in ErrorCode if ErrorCode.NONE < c < ErrorCode.BAD_IMAGE}
    assert seen == register_codes, f"codes not exercised: {register_codes - seen}"
    raw = await h.dump(0, size)
    assert raw == bytes([FILL]) * size, "memory changed by refused descriptors"
    # and a legal run afterwards still works (no state left behind by the errors)
    result = await h.run(d, budget_cycles=100_000)
    assert result.error == ErrorCode.NONE
