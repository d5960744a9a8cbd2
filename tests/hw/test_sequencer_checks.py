"""The RTL record checks agree with spec.record.check_record (spec.desc.check for the descriptor
words), and a refused record touches no memory port. Amaranth simulation of the Sequencer alone
(no memory model needed)."""

import dataclasses
import os
import random

from amaranth import *
from amaranth.sim import Simulator

from spec.config import PRESETS
from spec.desc import DESC_FIELDS, MAX_DIM, ErrorCode, GemmDescriptor
from spec.record import check_record, layer_record
from hw.checker import LAYER_FIELDS, RecordChecker
from hw.sequencer import Sequencer


def drive_record(ctx, dut, rec, image, weights_at):
    """Put layer record ``rec`` (u32 words by name) and the image range on ``dut``'s
    :func:`hw.checker.record_members` (a Sequencer or a RecordChecker)."""
    for name in DESC_FIELDS:
        ctx.set(getattr(dut, f"d_{name}"), rec[f"desc_{name}"])
    for name in LAYER_FIELDS:
        ctx.set(getattr(dut, f"l_{name}"), rec[name])
    ctx.set(dut.img_lo, image[0] if image else 0)
    ctx.set(dut.img_hi, image[1] if image else 0)
    ctx.set(dut.img_wt, weights_at if image else 0)


def adversarial_descriptors(cfg, rng, count):
    R, C = cfg.array_rows, cfg.array_cols
    D = cfg.dram_bytes
    edges = [0, 1, 2, 3, R - 1, R, R + 1, 2 * R, 64, 255, 256, 1023, 1024, MAX_DIM, MAX_DIM + 1,
             1 << 31, (1 << 32) - 1, (1 << 32) - R, D - 1, D, D - 64, D // 2]
    L = cfg.local_buf_bytes                     # the local buffer is at [D, D + L)
    edges += [D + C, D + 1, D + L - C, D + L, D + L // 2, 2 * D]
    edges = [e for e in edges if e < 1 << 32]   # (default's 2 GiB memory: 2 D is 2**32)

    def wild():
        if rng.random() < 0.5:
            return rng.choice(edges)
        return rng.randrange(0, 1 << rng.choice([2, 4, 8, 12, 16, 22, 24, 32]))

    for _ in range(count):
        m, k, n = rng.randrange(1, 40), rng.randrange(1, 40), rng.randrange(1, 40)
        pm, pn = R * rng.randrange(1, 5), C * rng.randrange(1, 5)
        values = dict(m=m, k=k, n=n, partition_m=pm, partition_n=pn,
                      partition_k=rng.randrange(1, 60), tile_m=R, tile_n=C,
                      outer_m=rng.randrange(2), need_splitk=1, acc_buffer_needed=pm * pn * 4,
                      a_addr=0, a_stride=m, b_addr=D // 4, b_stride=n, c_addr=D // 2,
                      c_stride=4 * n)
        for name in rng.sample(DESC_FIELDS, rng.randrange(0, 4)):
            values[name] = wild()
        local_c = rng.random() < 0.25
        if rng.random() < 0.25:              # B in the local buffer (whole rows or not)
            values.update(b_addr=D + C * rng.randrange(0, 8) + rng.choice([0, 0, 0, 1]),
                          b_stride=rng.choice([C * -(-n // C), n, 2 * C * -(-n // C)]))
        if local_c:                          # C in the local buffer, its window there too
            values.update(c_addr=D + L // 2 + rng.choice([0, 0, 0, 4]),
                          c_stride=rng.choice([C * -(-n // C), n, 4 * n]))
        desc = GemmDescriptor(**values)
        fields = {}
        if local_c or rng.random() < 0.3:
            fields.update(out_format=1, mult_addr=D // 8, shift_addr=D // 8 + 4096)
        if rng.random() < 0.3:
            fields.update(bias_present=1, bias_addr=D // 8 + 8192)
        for name in rng.sample(LAYER_FIELDS, rng.randrange(0, 3)):
            fields[name] = rng.choice([wild(), rng.randrange(-130, 130) & 0xFFFF_FFFF])
        # images: the image range the runner passes (0, 0 in register mode) and where its
        # weights part starts; A, B and the parameters sometimes placed in either part
        image, weights_at = None, None
        if rng.random() < 0.3:
            lo = rng.choice([0, D // 8, D // 2 - 4096, D - 4096])
            image = (lo, lo + rng.choice([64, 4096, 16384]))
            weights_at = rng.choice([image[1], lo + 64, (lo + image[1]) // 2 & ~63])
            if rng.random() < 0.5:
                desc = dataclasses.replace(desc, a_addr=rng.choice([lo, weights_at]))
            if rng.random() < 0.3:
                desc = dataclasses.replace(desc, b_addr=rng.choice([lo, max(weights_at - 8, 0)]))
            if rng.random() < 0.3:
                fields.update(out_format=1, mult_addr=lo, shift_addr=lo + 256)
        rec = layer_record(desc, **fields)
        yield rec, image, weights_at


def image_rule_records(cfg):
    """A legal image-run record, then each image placement rule broken alone (A outside the
    image, B reading its weights part, a parameter array in its weights part)."""
    D = cfg.dram_bytes
    lo, hi, wt = D // 8, D // 8 + 16384, D // 8 + 2048
    R, C = cfg.array_rows, cfg.array_cols
    desc = GemmDescriptor(m=8, k=8, n=8, partition_m=2 * R, partition_n=2 * C, partition_k=8,
                          tile_m=R, tile_n=C, outer_m=1, need_splitk=0,
                          acc_buffer_needed=4 * R * C * 4, a_addr=wt + 64, a_stride=8,
                          b_addr=D // 4, b_stride=8, c_addr=D // 2, c_stride=8)
    fields = dict(out_format=1, mult_addr=lo + 64, shift_addr=lo + 1024, stats_addr=D // 2 + 4096)
    out = [(layer_record(desc, **fields), (lo, hi), wt)]
    out.append((layer_record(dataclasses.replace(desc, a_addr=lo - 4096), **fields), (lo, hi), wt))
    out.append((layer_record(dataclasses.replace(desc, b_addr=wt + 1024), **fields), (lo, hi), wt))
    out.append((layer_record(desc, **{**fields, "shift_addr": wt + 256}), (lo, hi), wt))
    want = [check_record(rec, cfg, image=image, weights_at=w) for rec, image, w in out]
    assert want[0] == [] and all([c for c, _ in e] == [ErrorCode.BAD_WINDOW] for e in want[1:])
    return out


def check_on_rtl(cfg, records):
    """Run each ``(record, image, weights_at)`` through the Sequencer's checks (a dry run,
    reset between records): ``(mismatches with check_record, records that used a memory port
    though refused, codes seen)``."""
    rst = Signal()
    seq = Sequencer(cfg)
    dut = ResetInserter(rst)(seq)
    mismatches, port_activity = [], []
    seen = set()

    async def bench(ctx):
        for d, image, weights_at in records:
            ctx.set(rst, 1)
            await ctx.tick()
            ctx.set(rst, 0)
            drive_record(ctx, seq, d, image, weights_at)
            ctx.set(seq.dry, 1)          # never start the engines: only the checks matter here
            ctx.set(seq.start, 1)
            await ctx.tick()
            ctx.set(seq.start, 0)
            errs = check_record(d, cfg, image=image, weights_at=weights_at)
            want = int(errs[0][0]) if errs else 0
            seen.add(want)
            # CHECK_START, the checker's pipeline, CHECK, then FINISH for a refused record
            for _ in range(RecordChecker.latency + 3):
                if want and (ctx.get(seq.a_rd.valid) or ctx.get(seq.b_rd.valid) or
                             ctx.get(seq.c_wr.valid)):
                    port_activity.append(d)
                await ctx.tick()
            # `failed` is the code's `!= 0`, as a flip-flop of its own (the image runner's branch)
            if ctx.get(seq.error) != want or ctx.get(seq.failed) != (want != 0):
                mismatches.append((d, ctx.get(seq.error), ctx.get(seq.failed), want, errs[:2]))
            if want:
                assert ctx.get(seq.done) and not ctx.get(seq.busy), d

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    return mismatches, port_activity, seen


def test_sequencer_checks_match_python_rules():
    cfg = PRESETS["tiny"]
    seed = int(os.getenv("TESSERA_SEED", random.randrange(1 << 30)))
    print(f"TESSERA_SEED={seed}")
    rng = random.Random(seed)
    records = list(adversarial_descriptors(cfg, rng, 600)) + image_rule_records(cfg)
    mismatches, port_activity, seen = check_on_rtl(cfg, records)
    assert not mismatches, f"seed {seed}: RTL vs check(): {mismatches[:3]}"
    assert not port_activity, f"seed {seed}: refused records used a memory port"
    # the generator reaches most codes; the full set is covered by tests/spec/test_desc.py and
    # tests/hw/test_record.py
    assert len(seen) >= 8, f"seed {seed}: only codes {sorted(seen)} exercised"
    assert {ErrorCode.BAD_LAYER, ErrorCode.BAD_WINDOW} <= seen, sorted(seen)


def row_store_descriptors(cfg, rng, count):
    """Row store records (spec.desc.row_store) around their rules' boundaries: C as c_rows rows
    of c_row_elems pixels, the partitions, pitches, channel strides, C in memory or not, and the
    written range against the window, one or two fields off at a time."""
    R, C, D = cfg.array_rows, cfg.array_cols, cfg.dram_bytes
    for _ in range(count):
        rows, pn = rng.randrange(1, 6), C * rng.randrange(1, 3)
        elems = rng.randrange(1, pn + 1)
        e = rng.choice([1, 4])
        pitch = e * elems + rng.choice([0, 0, 1, 5, 64])
        span = (rows - 1) * pitch + e * elems
        m, k = rng.randrange(1, 20), rng.randrange(1, 20)
        values = dict(m=m, k=k, n=rows * pn, partition_m=R, partition_n=pn, partition_k=k,
                      tile_m=R, tile_n=C, outer_m=rng.randrange(2), need_splitk=0,
                      acc_buffer_needed=R * pn * 4, a_addr=0, a_stride=m, b_addr=D // 4,
                      b_stride=rows * pn, c_addr=D // 2, c_stride=span + rng.choice([0, 0, 3]),
                      c_rows=rows, c_row_elems=elems, c_row_pitch=pitch)
        for name, value in rng.sample([
                ("c_rows", rows + 1), ("c_rows", 0), ("c_rows", MAX_DIM + 1 + rows),
                ("c_row_elems", 0), ("c_row_elems", pn + 1), ("c_row_pitch", e * elems - 1),
                ("c_row_pitch", 0), ("c_stride", span - 1), ("c_addr", D - 8),
                ("c_addr", D + 64), ("n", rows * pn + 1), ("partition_n", pn + C),
                ("c_rows", 1 << 31), ("c_row_pitch", (1 << 32) - 1)],
                rng.choice([0, 0, 0, 1, 1, 2])):
            values[name] = value
        fields = {}
        if e == 1:
            fields.update(out_format=1, mult_addr=D // 8, shift_addr=D // 8 + 4096)
        rec = layer_record(GemmDescriptor(**values), **fields)
        if rng.random() < 0.3:               # the window a byte short of the written range
            rec["out_window_hi"] = max(rec["out_window_hi"] - rng.choice([1, 4]), 0)
        yield rec, None, None


def test_sequencer_row_store_checks_match_python_rules():
    """On a config with the row store the RTL applies spec.desc.check's row store rules (the
    partitions, the pitches, memory only, the written range) exactly as Python does."""
    cfg = dataclasses.replace(PRESETS["tiny"], row_store=1)
    seed = int(os.getenv("TESSERA_SEED", random.randrange(1 << 30)))
    print(f"TESSERA_SEED={seed}")
    rng = random.Random(seed)
    records = list(row_store_descriptors(cfg, rng, 300)) + \
        list(adversarial_descriptors(cfg, rng, 100))
    mismatches, port_activity, seen = check_on_rtl(cfg, records)
    assert not mismatches, f"seed {seed}: RTL vs check(): {mismatches[:2]}"
    assert not port_activity, f"seed {seed}: refused records used a memory port"
    assert {0, ErrorCode.BAD_PARTITION_N, ErrorCode.BAD_FLAGS, ErrorCode.BAD_ADDRESS,
            ErrorCode.BAD_WINDOW} <= seen, sorted(seen)


def test_sequencer_row_store_checks_on_default_with_conv_and_depthwise_records():
    """On ``default`` (the depthwise mesh and the row store built together): row store
    records as convolutions (b_mode 1, tables apart from C or not) and depthwise records
    (b_mode 2, 3) with row fields set, which must fail BAD_FLAGS there; the RTL agrees with
    check_record on each."""
    from planner.dwcost import depthwise_descriptor
    from spec.layouts import OpKind

    cfg = PRESETS["default"]
    seed = int(os.getenv("TESSERA_SEED", random.randrange(1 << 30)))
    print(f"TESSERA_SEED={seed}")
    rng = random.Random(seed)
    D = cfg.dram_bytes
    records = []
    for rec, image, weights_at in row_store_descriptors(cfg, rng, 60):
        if rng.random() < 0.5:
            rec = {**rec, "desc_b_mode": 1, "desc_off_addr": D // 16,
                   "desc_run_addr": D // 16 + 65536, "desc_grp_addr": D // 16 + 2 * 65536,
                   "desc_run_count": rng.randrange(1, 40), "op_kind": int(OpKind.CONV),
                   "desc_b_stride": rng.randrange(1, 4096)}
        records.append((rec, image, weights_at))
    for _ in range(30):
        d = depthwise_descriptor(rng.randrange(1, 20), rng.randrange(3, 20),
                                 rng.randrange(3, 20), cfg, a_addr=D // 8, b_addr=D // 4,
                                 c_addr=D // 2, out_bytes=1, stride=rng.choice([1, 2]))
        values = dataclasses.asdict(d)
        for name in rng.sample(["c_rows", "c_row_elems", "c_row_pitch"], rng.randrange(0, 4)):
            values[name] = rng.choice([1, 2, 16, 1 << 31, MAX_DIM + 1])
        records.append((layer_record(GemmDescriptor(**values), op_kind=int(OpKind.DEPTHWISE),
                                     out_format=1, mult_addr=D // 8 + 8192,
                                     shift_addr=D // 8 + 16384), None, None))
    mismatches, port_activity, seen = check_on_rtl(cfg, records)
    assert not mismatches, f"seed {seed}: RTL vs check(): {mismatches[:2]}"
    assert not port_activity, f"seed {seed}: refused records used a memory port"
    assert {ErrorCode.BAD_FLAGS, ErrorCode.BAD_PARTITION_N} <= seen, sorted(seen)
