"""The RTL record checks of a depthwise record (b_mode 2 to 7 on a dw_mesh config) agree with
spec.record.check_record, as do a GEMM's on the same config (its rules are masked, not
replaced). Amaranth simulation of the RecordChecker alone."""

import dataclasses
import os
import random

from amaranth.sim import Simulator

from spec.config import PRESETS
import pytest

from spec.desc import (B_MODE_DEPTHWISE, B_MODE_DEPTHWISE5, B_MODE_DEPTHWISE5_S2,
                       B_MODE_DEPTHWISE7, B_MODE_DEPTHWISE7_S2, B_MODE_DEPTHWISE_S2,
                       DEPTHWISE_KERNELS, DEPTHWISE_UNUSED, DESC_FIELDS, MAX_DIM, ErrorCode,
                       GemmDescriptor, col_phase_ranges, depthwise_kernels)
from spec.layouts import LAYER_WORDS, OpKind
from spec.record import check_record, layer_record
from hw.checker import LAYER_FIELDS, RecordChecker

from .test_sequencer_checks import adversarial_descriptors, drive_record

CFG = dataclasses.replace(PRESETS["tiny"], dw_mesh=1)
#: The meshes of the test: 4x4 (3x3 kernels only), 8x8 (3x3, 5x5), 16x16 (all three).
CONFIGS = {"tiny": CFG, "small": dataclasses.replace(PRESETS["small"], dw_mesh=1),
           "default": PRESETS["default"]}


def depthwise_records(cfg, rng, count):
    """Legal depthwise records, then one to three fields pushed to edges or garbage."""
    R, D = cfg.array_rows, cfg.dram_bytes
    half_a = cfg.buf_a_depth // 2
    edges = [0, 1, 2, 3, 4, R, 255, half_a, 2 * half_a + 1, MAX_DIM, MAX_DIM + 1, 1 << 31,
             (1 << 32) - 1, D - 1, D, D // 2, D // 4 + 1, D // 8 + 2]
    for _ in range(count):
        m, h, w = rng.randrange(1, 40), rng.randrange(1, 30), rng.randrange(1, 40)
        ob = rng.choice([1, 4])
        s, kernel = rng.choice([1, 2]), rng.choice([3, 3, 5, 7])
        g = 1 if h % 2 and s == 2 else rng.randrange(1, 8)
        values = dict(m=m, k=h, n=w, partition_m=g,
                      acc_buffer_needed=(g * h + R) * cfg.c_beat_bytes,
                      a_addr=D // 8, a_stride=4 * m, b_addr=D // 4, b_stride=h * w,
                      c_addr=D // 2, c_stride=ob * -(-h // s) * -(-w // s),
                      b_mode=B_MODE_DEPTHWISE + (kernel - 3) + (s - 1),
                      **{name: 0 for name in DEPTHWISE_UNUSED})
        if s == 2 and rng.random() < 0.5:
            # the odd rows and / or columns (TF "SAME"): legal on even sides, some odd ones
            values["b_mode"] |= rng.choice([8, 16, 24])
            if rng.random() < 0.7:
                values.update(k=h + h % 2, n=w + w % 2)
                values.update(b_stride=values["k"] * values["n"],
                              c_stride=ob * values["k"] // 2 * values["n"] // 2,
                              acc_buffer_needed=(g * values["k"] + R) * cfg.c_beat_bytes)
        for name in rng.sample(DESC_FIELDS, rng.randrange(0, 4)):
            values[name] = (rng.choice(edges) if rng.random() < 0.6 else
                            values[name] + rng.choice([-4, -1, 1, 4])) & 0xFFFF_FFFF
        desc = GemmDescriptor(**values)
        fields = dict(out_format=int(ob == 1), op_kind=int(OpKind.DEPTHWISE),
                      pad_value=rng.choice([0, 5, -128, 127, 128, -129, 1 << 31]) & 0xFFFF_FFFF)
        if ob == 1:
            fields.update(mult_addr=D // 16, shift_addr=D // 16 + 1024)
        if rng.random() < 0.2:
            fields["op_kind"] = rng.choice([0, 1, 2, 4])
        image, weights_at = None, None
        if rng.random() < 0.3:
            image = (D // 16, D // 8 + 8192)
            weights_at = rng.choice([D // 8 + 4096, D // 8, D // 8 + 64])
            fields["stats_addr"] = D // 2 + (1 << 16)
        yield layer_record(desc, **fields), image, weights_at


def depthwise_boundaries(cfg):
    """Each depthwise rule's boundary: a record just inside it and one just past it."""
    R, D, Q = cfg.array_rows, cfg.dram_bytes, cfg.quant_entries
    half_a, half_b = cfg.buf_a_depth // 2, cfg.buf_b_depth // 2

    def rec(m=5, h=6, w=7, g=2, ob=1, image=None, weights_at=None, fields=None, **over):
        values = dict(m=m, k=h, n=w, partition_m=g,
                      acc_buffer_needed=min((g * h + R) * cfg.c_beat_bytes, (1 << 32) - 1),
                      a_addr=D // 8, a_stride=4 * m, b_addr=D // 4, b_stride=h * w,
                      c_addr=D // 2, c_stride=ob * h * w, b_mode=B_MODE_DEPTHWISE,
                      **{name: 0 for name in DEPTHWISE_UNUSED})
        values.update(over)
        extra = dict(out_format=int(ob == 1))
        if ob == 1:
            extra.update(mult_addr=D // 16, shift_addr=D // 16 + 1024)
        if image:
            extra["stats_addr"] = D // 2 + (1 << 16)
        extra.update(fields or {})
        return layer_record(GemmDescriptor(**values), **extra), image, weights_at

    out = []
    for e in (0, 1):
        out += [rec(h=2, g=half_a + e, acc_buffer_needed=cfg.acc_half_bytes),
                rec(h=2 * half_b - 1 + 2 * e, g=1, acc_buffer_needed=cfg.acc_half_bytes),
                rec(acc_buffer_needed=(2 * 6 + R) * cfg.c_beat_bytes - e),
                rec(m=Q + e, a_stride=4 * (Q + 1), ob=4),
                rec(a_stride=4 * 5 - 4 * e),
                rec(fields=dict(out_window_hi=D // 2 + 5 * 6 * 7 - e)),
                rec(fields=dict(out_window_lo=D // 2 + e)),
                # C right after / right before the input and the weights, or one byte into them
                rec(c_addr=D // 4 + 5 * 42 - e),
                rec(c_addr=D // 4 - 5 * 42 + e),
                rec(c_addr=D // 8 + 3 * 20 - e),
                rec(c_addr=D // 8 - 5 * 42 + e),
                # image runs: the input ends at / past the weights part, the weights at / past
                # the CRC-checked part's end
                rec(b_addr=D // 8 + 4096 - 5 * 42 + e, image=(D // 16, D // 8 + 8192),
                    weights_at=D // 8 + 4096),
                rec(a_addr=D // 8 + 4096 - 60 + 4 * e, image=(D // 16, D // 8 + 8192),
                    weights_at=D // 8 + 4096),
                rec(a_addr=D // 16 - 4 * e, image=(D // 16, D // 8 + 8192),
                    weights_at=D // 8 + 4096),
                rec(fields=dict(pad_value=(127 + e) & 0xFFFF_FFFF)),
                rec(fields=dict(pad_value=(-128 - e) & 0xFFFF_FFFF)),
                # stride 2: the output's pitch ceil(h/2) ceil(w/2) (3 x 4 maps), not h w, and
                # its window's end
                rec(b_mode=B_MODE_DEPTHWISE_S2, c_stride=12 + e),
                rec(b_mode=B_MODE_DEPTHWISE_S2, c_stride=12 - e),
                rec(b_mode=B_MODE_DEPTHWISE_S2, ob=4, c_stride=48 + 4 * e),
                rec(b_mode=B_MODE_DEPTHWISE_S2, c_stride=42 * (1 - e) + 12 * e),
                rec(b_mode=B_MODE_DEPTHWISE_S2, c_stride=12,
                    fields=dict(out_window_hi=D // 2 + 5 * 12 - e)),
                rec(b_mode=B_MODE_DEPTHWISE_S2 + e, c_stride=12),
                rec(h=2, g=half_a + e, acc_buffer_needed=cfg.acc_half_bytes,
                    b_mode=B_MODE_DEPTHWISE_S2, c_stride=4),
                # odd maps: several channels a step with stride 1, one with stride 2
                rec(h=5, g=2, b_stride=35, c_stride=12 if e else 35,
                    b_mode=B_MODE_DEPTHWISE + e),
                rec(h=5, g=1 + e, b_stride=35, c_stride=12, b_mode=B_MODE_DEPTHWISE_S2),
                # partition_m's range, both strides (the random records reach it only
                # sometimes: a run of test_checker_depthwise_matches_python_rules without one
                # for b_mode 2 failed its coverage check, seed 350312276)
                rec(g=e * (MAX_DIM + 1) + (1 - e), b_mode=B_MODE_DEPTHWISE),
                rec(g=e * MAX_DIM, b_mode=B_MODE_DEPTHWISE_S2, c_stride=12),
                # 5x5 (b_mode 4, 5): seven weight arrays, their end against the output, the
                # weights part of an image, the memory's end; the modes' range
                rec(b_mode=B_MODE_DEPTHWISE5, c_addr=D // 8 + 7 * 20 - e),
                rec(b_mode=B_MODE_DEPTHWISE5, c_addr=D // 8 + 3 * 20 - e),
                rec(b_mode=B_MODE_DEPTHWISE5, a_addr=D - 7 * 20 + 4 * e),
                rec(b_mode=B_MODE_DEPTHWISE5, a_addr=D // 8 + 4096 - 140 + 4 * e,
                    image=(D // 16, D // 8 + 8192), weights_at=D // 8 + 4096),
                rec(b_mode=B_MODE_DEPTHWISE5, a_stride=4 * 5 - 4 * e),
                rec(b_mode=B_MODE_DEPTHWISE5_S2, c_stride=12 + e),
                rec(h=5, g=1 + e, b_stride=35, c_stride=12, b_mode=B_MODE_DEPTHWISE5_S2),
                rec(b_mode=B_MODE_DEPTHWISE5_S2 + e, c_stride=12),
                rec(g=e * (MAX_DIM + 1) + (1 - e), b_mode=B_MODE_DEPTHWISE5),
                rec(b_mode=B_MODE_DEPTHWISE5_S2, c_stride=12,
                    fields=dict(out_window_hi=D // 2 + 5 * 12 - e)),
                rec(b_mode=B_MODE_DEPTHWISE5, fields=dict(out_window_lo=D // 2 + e)),
                # 7x7 (b_mode 6, 7): thirteen weight arrays; refused on meshes under 9 x 9
                rec(b_mode=B_MODE_DEPTHWISE7, c_addr=D // 8 + 13 * 20 - e),
                rec(b_mode=B_MODE_DEPTHWISE7, a_addr=D - 13 * 20 + 4 * e),
                rec(b_mode=B_MODE_DEPTHWISE7, a_addr=D // 8 + 4096 - 260 + 4 * e,
                    image=(D // 16, D // 8 + 8192), weights_at=D // 8 + 4096),
                rec(b_mode=B_MODE_DEPTHWISE7_S2, c_stride=12 + e),
                rec(h=5, g=1 + e, b_stride=35, c_stride=12, b_mode=B_MODE_DEPTHWISE7_S2),
                rec(b_mode=B_MODE_DEPTHWISE7_S2 + e, c_stride=12),
                rec(g=e * (MAX_DIM + 1) + (1 - e), b_mode=B_MODE_DEPTHWISE7),
                rec(b_mode=B_MODE_DEPTHWISE7, fields=dict(out_window_hi=D // 2 + 5 * 42 - e)),
                rec(b_mode=B_MODE_DEPTHWISE7_S2, c_stride=12,
                    fields=dict(out_window_hi=D // 2 + 5 * 12 - e)),
                # the odd rows / columns (b_mode + 8 / 16, TF "SAME"): stride 2 only, no other
                # bit, an even side (6 x 8 maps: 3 x 4 outputs)
                rec(w=8, b_stride=48, c_stride=12, b_mode=B_MODE_DEPTHWISE_S2 + 8 - e),
                rec(w=8, b_stride=48, c_stride=12, b_mode=B_MODE_DEPTHWISE5_S2 + 16 - e),
                rec(w=8, b_stride=48, c_stride=12, b_mode=B_MODE_DEPTHWISE7_S2 + 24 - e),
                rec(w=8, b_stride=48, c_stride=12, b_mode=B_MODE_DEPTHWISE_S2 + 24 + 8 * e),
                rec(w=8, b_stride=48, c_stride=12, b_mode=B_MODE_DEPTHWISE_S2 + 24 + 32 * e),
                rec(w=8, b_stride=48, c_stride=12,
                    b_mode=B_MODE_DEPTHWISE5_S2 + 8 + (1 << 31) * e),
                rec(w=8, b_stride=48, c_stride=12, b_mode=B_MODE_DEPTHWISE_S2 + 8 + e),
                rec(w=8, b_stride=48, c_stride=12, b_mode=B_MODE_DEPTHWISE_S2 + 16 - e),
                rec(h=5 + e, g=1, w=8, b_stride=(5 + e) * 8, c_stride=12,
                    b_mode=B_MODE_DEPTHWISE_S2 + 8),
                rec(w=7 + e, b_stride=6 * (7 + e), c_stride=12, b_mode=B_MODE_DEPTHWISE5_S2 + 16),
                rec(w=7 + e, b_stride=6 * (7 + e), c_stride=12, b_mode=B_MODE_DEPTHWISE_S2 + 8),
                rec(w=8, b_stride=48, c_stride=12, b_mode=B_MODE_DEPTHWISE7_S2 + 24,
                    fields=dict(out_window_hi=D // 2 + 5 * 12 - e))]
    # row and column phases (spec.desc.col_phases, session 42): G h words in each buffer,
    # not G h / 2, for the widths of col_phase_ranges only (the range's edges on either
    # side), both kernels the mesh walks in them
    for kernel, b_mode in ((3, B_MODE_DEPTHWISE_S2), (5, B_MODE_DEPTHWISE5_S2)):
        ranges = col_phase_ranges(cfg.array_cols, kernel)
        if not ranges or R % 4:
            continue
        h = R
        g = half_a // h + 1
        for w in sorted({ranges[0][0], ranges[0][0] + 1, ranges[0][1], ranges[0][1] + 1}):
            if w < 1 or w > 1 << 16:
                continue
            out += [rec(h=h, w=w, g=g - e, b_stride=h * w, c_stride=h // 2 * -(-w // 2),
                        b_mode=b_mode, acc_buffer_needed=cfg.acc_half_bytes)
                    for e in (0, 1)]
    return out


@pytest.mark.parametrize("preset", list(CONFIGS))
def test_checker_depthwise_matches_python_rules(preset):
    """The checker alone on records back to back without a reset (as an image run issues
    them): each record's code, and for a legal one the address steps (``partition_k *
    a_stride``, ``partition_k * b_stride``, ``partition_m * c_stride``), are its own, whatever
    the record before left in the products."""
    seed = int(os.getenv("TESSERA_SEED", random.randrange(1 << 30)))
    print(f"TESSERA_SEED={seed}")
    rng = random.Random(seed)
    cfg = CONFIGS[preset]
    records = (depthwise_boundaries(cfg) + list(depthwise_records(cfg, rng, 500)) +
               list(adversarial_descriptors(cfg, rng, 150)))
    dut = RecordChecker(cfg)
    mask = (1 << cfg.dram_addr_bits) - 1
    mismatches, seen = [], set()

    async def bench(ctx):
        for rec, image, weights_at in records:
            drive_record(ctx, dut, rec, image, weights_at)
            ctx.set(dut.start, 1)
            await ctx.tick()
            ctx.set(dut.start, 0)
            await ctx.tick().until(dut.done)
            errs = check_record(rec, cfg, image=image, weights_at=weights_at)
            want = int(errs[0][0]) if errs else 0
            seen.add((rec["desc_b_mode"], want))
            if ctx.get(dut.code) != want:
                mismatches.append((rec, image, weights_at, ctx.get(dut.code), errs))
            pk, pm = rec["desc_partition_k"], rec["desc_partition_m"]
            steps = ((pk * rec["desc_a_stride"]) & mask, (pk * rec["desc_b_stride"]) & mask,
                     (pm * rec["desc_c_stride"]) & mask)
            got = (ctx.get(dut.a_kstep), ctx.get(dut.b_kstep), ctx.get(dut.c_mstep))
            if not want and got != steps:
                mismatches.append((rec, "steps", got, steps))
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert not mismatches, f"seed {seed}: RTL vs check_record: {mismatches[:2]}"
    want = {0, ErrorCode.BAD_PARTITION_M, ErrorCode.BUF_A_OVERFLOW, ErrorCode.ACC_OVERFLOW,
            ErrorCode.BAD_FLAGS, ErrorCode.BAD_ADDRESS, ErrorCode.BAD_LAYER,
            ErrorCode.BAD_WINDOW}
    for b_mode in (B_MODE_DEPTHWISE, B_MODE_DEPTHWISE_S2):
        dw_codes = {code for mode, code in seen if mode == b_mode}
        assert want <= dw_codes, f"seed {seed}: b_mode={b_mode} codes {sorted(dw_codes)}"
    for b_mode in (B_MODE_DEPTHWISE5, B_MODE_DEPTHWISE5_S2, B_MODE_DEPTHWISE7,
                   B_MODE_DEPTHWISE7_S2):
        dw_codes = {code for mode, code in seen if mode == b_mode}
        if DEPTHWISE_KERNELS[b_mode] in depthwise_kernels(cfg):
            assert {0, ErrorCode.BAD_PARTITION_M, ErrorCode.BAD_ADDRESS,
                    ErrorCode.BAD_WINDOW} <= dw_codes, \
                f"seed {seed}: b_mode={b_mode} codes {sorted(dw_codes)}"
        else:                   # a kernel the mesh cannot walk: refused (BAD_FLAGS at best)
            assert 0 not in dw_codes and ErrorCode.BAD_FLAGS in dw_codes, (b_mode, dw_codes)
    assert {code for mode, code in seen if mode == B_MODE_DEPTHWISE7_S2 + 1} - {0}


def test_layer_words_cover_the_checker():
    assert set(LAYER_FIELDS) | {f"desc_{n}" for n in DESC_FIELDS} == set(LAYER_WORDS)
