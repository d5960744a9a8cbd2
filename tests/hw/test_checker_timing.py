"""The RecordChecker's record-only rules (registered long before the ``compares`` stage) give
their exact code with ``done`` exactly :attr:`RecordChecker.latency` cycles after ``start``,
on records back to back without a reset (a rule's early flip-flops hold the record before
until the new one is copied). Amaranth simulation of the RecordChecker alone."""

import dataclasses

from spec.config import PRESETS
from spec.desc import ErrorCode, GemmDescriptor
from spec.layouts import OpKind
from spec.record import check_record, layer_record
from hw.checker import RecordChecker

from .test_sequencer_checks import drive_record
from .util import run_sim

CFG = PRESETS["tiny"]


def cases(cfg):
    """(id, record, the code check_record reports first): a legal GEMM and convolution, and
    each record-only rule broken alone (the table rules at their boundaries)."""
    D, R, C = cfg.dram_bytes, cfg.array_rows, cfg.array_cols
    gemm = GemmDescriptor(m=8, k=8, n=8, partition_m=2 * R, partition_n=2 * C, partition_k=8,
                          tile_m=R, tile_n=C, outer_m=1, need_splitk=0,
                          acc_buffer_needed=4 * R * C * 4, a_addr=D // 16, a_stride=8,
                          b_addr=D // 8, b_stride=8, c_addr=D // 2, c_stride=8)
    int8 = dict(out_format=1, mult_addr=D // 32, shift_addr=D // 32 + 1024)
    e_off, e_run, e_grp = cfg.conv_offset_entries, cfg.conv_run_entries, cfg.conv_group_entries

    def conv(**over):
        n = over.get("n", 8)
        values = dict(m=8, k=8, n=n, partition_m=2 * R, partition_n=2 * C, partition_k=16,
                      tile_m=R, tile_n=C, outer_m=1, need_splitk=1,
                      acc_buffer_needed=4 * R * C * 4, a_addr=D // 16, a_stride=8 * e_off,
                      b_addr=D // 8, b_stride=64, c_addr=D // 2, c_stride=4 * n, b_mode=1,
                      off_addr=D // 4, run_addr=D // 4 + 4 * e_off + 64,
                      grp_addr=D // 4 + 4 * e_off + 8 * e_run + 128, run_count=2)
        values.update(over)
        return layer_record(GemmDescriptor(**values), op_kind=int(OpKind.CONV))

    return [
        ("gemm", layer_record(gemm, **int8), 0),
        ("conv", conv(), 0),
        ("zero_point_128", layer_record(gemm, **int8, out_zero_point=128), ErrorCode.BAD_LAYER),
        ("act_min_-129", layer_record(gemm, **int8, act_min=-129 & 0xFFFF_FFFF),
         ErrorCode.BAD_LAYER),
        ("groups_full", conv(n=C * (e_grp - 1)), 0),            # e_grp - 1 groups, + 1 entry
        ("groups_over", conv(n=C * (e_grp - 1) + 1), ErrorCode.BAD_TABLE),
        ("offsets_over", conv(k=e_off + 1), ErrorCode.BAD_TABLE),
        ("no_runs", conv(run_count=0), ErrorCode.BAD_TABLE),
        ("runs_over", conv(run_count=e_run + 1), ErrorCode.BAD_TABLE),
        ("m0", layer_record(dataclasses.replace(gemm, m=0), **int8), ErrorCode.BAD_SHAPE),
        ("tile_m_over", layer_record(dataclasses.replace(gemm, tile_m=3 * R), **int8),
         ErrorCode.BAD_TILE),
        ("outer_m_2", layer_record(dataclasses.replace(gemm, outer_m=2), **int8),
         ErrorCode.BAD_FLAGS),
        ("window_empty", layer_record(gemm, **int8, out_window_lo=D // 2 + 64,
                                      out_window_hi=D // 2 + 64), ErrorCode.BAD_WINDOW),
    ]


def test_record_only_rules_exact_code_and_cycle():
    records = cases(CFG)
    for name, rec, want in records:
        errs = check_record(rec, CFG)
        assert (int(errs[0][0]) if errs else 0) == want, (name, errs)
    # each case after a legal record and before one (the early flip-flops change with the
    # record, the code must not)
    legal = records[0]
    order = [case for case in records[1:] for case in (case, legal)]
    dut = RecordChecker(CFG)
    got = []

    async def bench(ctx):
        for name, rec, want in order:
            drive_record(ctx, dut, rec, None, None)
            ctx.set(dut.start, 1)
            await ctx.tick()
            ctx.set(dut.start, 0)
            for cycle in range(1, RecordChecker.latency + 1):
                if ctx.get(dut.done):
                    got.append((name, cycle, ctx.get(dut.code), ctx.get(dut.failed)))
                if cycle < RecordChecker.latency:
                    await ctx.tick()
            await ctx.tick()

    run_sim(dut, bench)
    assert got == [(name, RecordChecker.latency, int(want), int(want != 0))
                   for name, _, want in order]
