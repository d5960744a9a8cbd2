"""cocotb test: random post-processed GEMMs in register mode, bit-exact against
spec.golden.requantize. Every case draws its output format, bias, per-channel multipliers and
shifts (left and right, the full ranges), zero point and clamp (NONE / RELU / RELU6 / CLAMP),
a random legal tiling and ragged shapes; accumulators come from full-range int8 operands, with
some cases scaled to saturate the left shift.

Results (case parameters, counters and the cycle model's prediction) go to
``post_results.json`` for the launcher.
"""

from __future__ import annotations

import dataclasses
import json
import os

import cocotb
import numpy as np

from spec.desc import ErrorCode
from spec.golden import gemm_int8, requantize
from spec.layouts import OutFormat, PostMode
from spec.record import layer_record
from spec.schedule import steps
from planner.cost import DEFAULT_CONSTANTS, PostLoad, post_consts, predict_tiling, with_post

from .cases import register_budget_cycles
from .harness import Harness, a_image, b_image
from .placement import descriptor, place, random_tiling

FILL = 0x6B


def _case(rng, cfg):
    R, C = cfg.array_rows, cfg.array_cols
    m = int(rng.integers(1, min(cfg.quant_entries, 5 * R)))
    n = int(rng.integers(1, 5 * C))
    k = int(rng.integers(1, 300))
    int8 = bool(rng.integers(0, 4))              # 3 in 4 cases requantise
    bias = rng.integers(-2**31, 2**31, m, dtype=np.int64).astype(np.int32) \
        if rng.integers(0, 2) else None
    if bias is not None and rng.integers(0, 2):
        bias = (bias // 4096).astype(np.int32)   # small biases too
    mode = PostMode(int(rng.integers(0, len(PostMode))))
    zp = int(rng.integers(-128, 128))
    lo, hi = -128, 127
    if mode == PostMode.RELU:
        lo = zp
    elif mode == PostMode.RELU6:
        lo, hi = zp, int(min(127, zp + rng.integers(1, 120)))
        lo = min(lo, hi)
    elif mode == PostMode.CLAMP:
        lo, hi = sorted(int(v) for v in rng.integers(-128, 128, 2))
    mult = rng.integers(1, 2**31, m, dtype=np.int64)
    mult[rng.random(m) < 0.3] = rng.choice([1, 2**30, 2**31 - 1])
    shift = rng.integers(-31, 32, m)
    if rng.integers(0, 2):
        shift = rng.integers(-2, 12, m)          # the range real layers use
    return dict(m=m, k=k, n=n, int8=int8, bias=bias, mode=mode, zp=zp, lo=lo, hi=hi,
                mult=mult.astype(np.int32), shift=shift.astype(np.int32))


@cocotb.test()
async def post_processed_gemms_match_golden(dut):
    h = await Harness.start(dut)
    cfg = h.cfg
    seed = int(os.environ.get("TESSERA_SEED", "1"))
    count = int(os.environ.get("TESSERA_CASES", "20"))
    rng = np.random.default_rng(seed)
    records = []
    for i in range(count):
        c = _case(rng, cfg)
        m, k, n = c["m"], c["k"], c["n"]
        a = rng.integers(-128, 128, (m, k)).astype(np.int8)
        b = rng.integers(-128, 128, (k, n)).astype(np.int8)
        where = place(m, k, n, cfg, rng=rng)
        d = descriptor(m, k, n, random_tiling(m, k, n, cfg, rng), where, cfg)
        elem = 1 if c["int8"] else 4
        params = where.end + 64
        fields = dict(out_format=OutFormat.INT8 if c["int8"] else OutFormat.INT32)
        arrays = []
        if c["bias"] is not None:
            fields.update(bias_present=1, bias_addr=params)
            arrays.append(c["bias"])
        if c["int8"]:
            fields.update(mult_addr=params + 4 * m * len(arrays),
                          shift_addr=params + 4 * m * (len(arrays) + 1),
                          post_mode=c["mode"], out_zero_point=c["zp"], act_min=c["lo"],
                          act_max=c["hi"])
            arrays += [c["mult"], c["shift"]]
        # int8 rows: a tighter C stride (the descriptor's 4n stride also works; use both)
        c_stride = d.c_stride if rng.integers(0, 2) else max(elem * n, 1)
        d = dataclasses.replace(d, c_stride=c_stride)
        rec = layer_record(d, **fields)
        c_span = (m - 1) * c_stride + 4 * n + 64
        await h.load([(where.a_addr, a_image(a, where.a_stride)),
                      (where.b_addr, b_image(b, where.b_stride)),
                      (where.c_addr - 64, bytes([FILL]) * (c_span + 64)),
                      (params, b"".join(np.asarray(x, "<i4").tobytes() for x in arrays))])
        budget = register_budget_cycles(d, cfg) + 3 * (4 * m // cfg.b_beat_bytes + 64) + 1000
        result = await h.run(rec, budget_cycles=budget)
        ctx = f"case {i}: {m}x{k}x{n} int8={c['int8']} bias={c['bias'] is not None} " \
              f"mode={c['mode'].name}"
        assert result.error == ErrorCode.NONE, f"{ctx}: {ErrorCode(result.error).name}"
        acc = gemm_int8(a, b)
        if c["int8"]:
            want = requantize(acc, multiplier=c["mult"], shift=c["shift"], bias=c["bias"],
                              zero_point=c["zp"], act_min=c["lo"], act_max=c["hi"])
        else:
            wide = acc.astype(np.int64) + (0 if c["bias"] is None else
                                           c["bias"].astype(np.int64)[:, None])
            want = (((wide + 2**31) % 2**32) - 2**31).astype("<i4")
        raw = np.frombuffer(await h.dump(where.c_addr - 64, c_span + 64), np.uint8)
        body = raw[64:]
        got = np.stack([body[r * c_stride:r * c_stride + elem * n] for r in range(m)])
        got = got.copy().view(np.int8 if c["int8"] else "<i4").reshape(m, n)
        if not np.array_equal(got, want):
            bad = np.argwhere(got != want)
            r, j = bad[0]
            raise AssertionError(f"{ctx}: {len(bad)} wrong, first [{r},{j}] = {got[r, j]} != "
                                 f"{want[r, j]}")
        written = np.zeros(raw.size, bool)
        for r in range(m):
            written[64 + r * c_stride:64 + r * c_stride + elem * n] = True
        assert np.all(raw[~written] == FILL), f"{ctx}: bytes outside C written"
        post = PostLoad(bias=c["bias"] is not None, requant=c["int8"])
        consts = post_consts(DEFAULT_CONSTANTS, cfg) if post.active else DEFAULT_CONSTANTS
        predicted = with_post(predict_tiling(m, k, n, d.partition_m, d.partition_n,
                                             d.partition_k, d.outer_m, cfg, consts), m, post, cfg)
        records.append({"m": m, "k": k, "n": n, "int8": c["int8"],
                        "predicted_cycles": predicted.total_cycles,
                        "bias": c["bias"] is not None, "mode": c["mode"].name,
                        "shift_min": int(c["shift"].min()), "shift_max": int(c["shift"].max()),
                        "outer_m": d.outer_m, "need_splitk": d.need_splitk,
                        "partition_k": d.partition_k,
                        "stores": sum(step.last_k for step in steps(d, cfg)),
                        **result.counters})
    with open(os.path.join(os.getcwd(), "post_results.json"), "w") as f:
        json.dump(records, f, indent=1)
