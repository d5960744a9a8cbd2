"""cocotb tests: implicit-im2col convolutions on sim_top against the numpy golden conv.

Each case compiles the layer's tables (planner.offsets), places the input in its padded layout,
the weights k-major per group, and runs one descriptor per group (``b_mode = 1``). The golden
model (spec.golden.conv2d_int8) is a direct convolution, independent of the tables.

Environment: ACCEL_BUILD; TESSERA_SEED, TESSERA_CASES (random cases); or TESSERA_CONVS, a JSON
list of ConvShape field dicts (+ "layout"), run with the planner's tiling.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time

import cocotb
import numpy as np

from spec.desc import ErrorCode, table_problems
from spec.golden import conv2d_int8
from spec.regmap import COUNTERS
from spec.schedule import traffic
from planner.conv import TILING_FIELDS, compile_conv
from planner.convcost import predict_conv
from planner.layout import to_padded, weights_k_major
from planner.offsets import compile_tables
from planner.shapes import ConvShape

from .cases import register_budget_cycles
from .harness import Harness, c_from_bytes
from .placement import align as _align
from .placement import random_tiling

GUARD = 0xA5


def random_conv(rng: np.random.Generator, cfg, i: int) -> tuple[ConvShape, str]:
    """Case ``i``: kernels 1, 3, 5, 7 and non-square, strides 1-2, dilation 1-2, asymmetric pads
    0-3, groups 1, 2 and depthwise, batch 1-2, odd sizes, NCHW and NHWC in rotation; drawn
    again (at most 64 times) until its tables fit ``cfg``'s table memories, which every preset's
    first draw does (a custom config with small tables got layers one record cannot run)."""
    for _ in range(64):
        shape, layout = _draw_conv(rng, cfg, i)
        tables = compile_tables(shape, layout, cfg)
        if not table_problems(cfg, k=shape.gemm.k, run_count=tables.run_count, n=tables.n):
            break
    return shape, layout


def _draw_conv(rng: np.random.Generator, cfg, i: int) -> tuple[ConvShape, str]:
    kernels = [(1, 1), (3, 3), (5, 5), (7, 7), (1, 3), (3, 1), (3, 3), (2, 3)]
    kh, kw = kernels[i % len(kernels)]
    groups_kind = ("one", "two", "depthwise")[i % 3]
    c = int(rng.integers(1, 3 * cfg.array_cols))
    k = int(rng.integers(1, 3 * cfg.array_rows))
    if groups_kind == "two":
        c, k = 2 * max(1, c // 2), 2 * max(1, k // 2)
        groups = 2
    elif groups_kind == "depthwise":
        c = int(rng.integers(1, 7))
        k, groups = c, c
    else:
        groups = 1
    stride = (1 + (i // 2) % 2, 1 + (i // 5) % 2)
    dil = (1 + (i // 7) % 2, 1 + (i // 3) % 2) if kh * kw > 1 else (1, 1)
    span_h, span_w = (kh - 1) * dil[0] + 1, (kw - 1) * dil[1] + 1
    # pads 0-3, below the kernel span (planner.shapes.ConvShape's rule)
    pads = tuple(int(rng.integers(0, min(4, span))) for span in (span_h, span_w, span_h, span_w))
    h = int(rng.integers(max(1, span_h - pads[0] - pads[2]), span_h + 12))
    w = int(rng.integers(max(1, span_w - pads[1] - pads[3]), span_w + 12))
    shape = ConvShape(batch=1 + i % 2, in_channels=c, height=h, width=w, out_channels=k,
                      kernel_h=kh, kernel_w=kw, stride_h=stride[0], stride_w=stride[1],
                      pad_top=pads[0], pad_left=pads[1], pad_bottom=pads[2], pad_right=pads[3],
                      dilation_h=dil[0], dilation_w=dil[1], groups=groups)
    return shape, ("NCHW", "NHWC")[(i // 4) % 2]


async def run_conv(h: Harness, shape: ConvShape, layout: str, seed: int, *,
                   planned: bool) -> dict:
    """One random convolution (full-range int8, seeded), checked bit-exactly against the golden
    conv; returns counters summed over groups."""
    rng = np.random.default_rng(seed)
    x = rng.integers(-128, 128, size=(shape.batch, shape.in_channels, shape.height, shape.width),
                     dtype=np.int8)
    w = rng.integers(-128, 128, size=(shape.out_channels, shape.in_channels // shape.groups,
                                      shape.kernel_h, shape.kernel_w), dtype=np.int8)
    x.flat[0] = -128
    w.flat[0] = -128
    want = conv2d_int8(x, w, stride=(shape.stride_h, shape.stride_w),
                       pads=(shape.pad_top, shape.pad_left, shape.pad_bottom, shape.pad_right),
                       dilation=(shape.dilation_h, shape.dilation_w), groups=shape.groups)
    record, got = await conv_on_rtl(h, shape, layout, x, w, seed=seed, planned=planned)
    ctx = f"conv {shape} {layout} seed={seed}"
    if not np.array_equal(got, want):
        bad = np.argwhere(got != want)
        raise AssertionError(f"{ctx}: {len(bad)} wrong outputs, first at {tuple(bad[0])}: "
                             f"{got[tuple(bad[0])]} != {want[tuple(bad[0])]}")
    return record


async def conv_on_rtl(h: Harness, shape: ConvShape, layout: str, x: np.ndarray, w: np.ndarray,
                      *, seed: int = 0, planned: bool = True,
                      halo: int = 0) -> tuple[dict, np.ndarray]:
    """Run the convolution of int8 ``x`` (NCHW) by int8 ``w`` on the RTL, one descriptor per
    group; return (counters summed over groups and facts of the run, the int32 NCHW output).

    ``halo`` is the int8 value stored in the padded layout's halo (0 for plain zero padding; a
    zero point's int8 image when the compiler folds one, docs/conv.md). Asserts that nothing
    outside C was written, that the counters add up and match spec.schedule.traffic.
    """
    cfg = h.cfg
    rng = np.random.default_rng(seed)
    program = compile_conv(shape, layout, cfg)
    tables = program.tables
    img = tables.to_bytes()
    gemm = shape.gemm                       # one group's GEMM: m = K/groups, k = (C/g)*R*S
    m, k, n = gemm.m, gemm.k, gemm.n
    # memory: input | tables | weights of every group | guard | C of every group | guard
    x_addr = 0
    x_img = _padded_image(x, shape, layout, halo)
    off_addr = _align(x_addr + len(x_img))
    run_addr = _align(off_addr + len(img["off"]) + cfg.b_beat_bytes)
    grp_addr = _align(run_addr + len(img["run"]) + cfg.b_beat_bytes)
    a_addr = _align(grp_addr + len(img["grp"]) + cfg.b_beat_bytes)
    a_group_bytes = _align(k * m + cfg.array_rows)
    guard = 64
    c_stride = 4 * n
    c_addr = _align(a_addr + shape.groups * a_group_bytes + guard)
    c_group_bytes = m * c_stride
    c_end = c_addr + shape.groups * c_group_bytes + cfg.c_beat_bytes
    regions = [(x_addr, x_img), (off_addr, img["off"]), (run_addr, img["run"]),
               (grp_addr, img["grp"])]
    for g in range(shape.groups):
        regions.append((a_addr + g * a_group_bytes, weights_k_major(w, shape, g).tobytes()))
    regions.append((c_addr - guard, bytes([GUARD]) * (c_end + guard - (c_addr - guard))))
    await h.load(regions)

    if planned:
        tiling = {name: getattr(program.plan, name) for name in TILING_FIELDS}
    else:
        tiling = random_tiling(m, k, n, cfg, rng)
    totals = dict.fromkeys(COUNTERS, 0)
    predicted = dict.fromkeys(COUNTERS, 0)
    run_wall_s = 0.0
    ctx = f"conv {shape} {layout} seed={seed} tiling {tiling}"
    for g in range(shape.groups):
        d = program.descriptor(g, cfg, x_addr=x_addr, a_addr=a_addr + g * a_group_bytes,
                               c_addr=c_addr + g * c_group_bytes, off_addr=off_addr,
                               run_addr=run_addr, grp_addr=grp_addr, c_stride=c_stride,
                               tiling=tiling)
        started = time.perf_counter()
        result = await h.run(d, budget_cycles=register_budget_cycles(d, cfg, tables.groups))
        run_wall_s += time.perf_counter() - started
        assert result.error == ErrorCode.NONE, f"{ctx}: error {ErrorCode(result.error).name}"
        ctr = result.counters
        parts = sum(ctr[name] for name in COUNTERS
                    if name.endswith("_cycles") and name != "total_cycles")
        assert ctr["total_cycles"] == parts, f"{ctx}: total != sum of categories"
        for name, value in traffic(d, cfg, tables.groups).items():
            assert ctr[name] == value, f"{ctx}: counter {name} = {ctr[name]}, expected {value}"
        pred = predict_conv(d, tables, cfg).as_dict()
        for name in COUNTERS:
            totals[name] += ctr[name]
            predicted[name] += pred[name]

    raw = await h.dump(c_addr - guard, c_end + guard - (c_addr - guard))
    out = c_from_bytes(raw[guard:], shape.groups * m, n, c_stride)     # [K][batch*P*Q]
    got = out.reshape(shape.out_channels, shape.batch, shape.out_h, shape.out_w)
    got = got.transpose(1, 0, 2, 3)
    touched = np.zeros(len(raw), dtype=bool)
    touched[guard:guard + shape.groups * c_group_bytes] = True
    assert np.all(np.frombuffer(raw, dtype=np.uint8)[~touched] == GUARD), \
        f"{ctx}: bytes outside C were written"
    assert predicted == program.predict(cfg, tiling).as_dict(), f"{ctx}: ConvProgram.predict"
    macs = shape.batch * shape.out_h * shape.out_w * shape.out_channels * k
    return {"shape": dataclasses.asdict(shape), "layout": layout, "seed": seed, **tiling,
            **totals, "macs": macs, "table_bytes": tables.size_bytes,
            "run_count": tables.run_count, "run_wall_s": run_wall_s, "predicted": predicted,
            "utilisation": macs / (cfg.macs_per_cycle * totals["total_cycles"])}, got


def _padded_image(x: np.ndarray, shape: ConvShape, layout: str, halo: int) -> bytes:
    """The padded-layout image of ``x`` with every halo byte set to ``halo``."""
    img = to_padded(x, shape, layout)
    if halo:
        ones = to_padded(np.ones_like(x), shape, layout)      # 1 inside, 0 in the halo
        img = np.where(ones == 1, img, np.int8(halo)).astype(np.int8)
    return img.tobytes()


@cocotb.test()
async def conv_cases_match_golden(dut):
    h = await Harness.start(dut)
    seed = int(os.environ.get("TESSERA_SEED", "1"))
    records = []
    if "TESSERA_CONVS" in os.environ:
        for i, spec in enumerate(json.loads(os.environ["TESSERA_CONVS"])):
            spec = dict(spec)
            layout = spec.pop("layout", "NCHW")
            shape = ConvShape(**spec)
            dut._log.info("conv %s %s", shape, layout)
            records.append(await run_conv(h, shape, layout, seed + i, planned=True))
    else:
        rng = np.random.default_rng(seed)
        for i in range(int(os.environ.get("TESSERA_CASES", "10"))):
            shape, layout = random_conv(rng, h.cfg, i)
            case_seed = int(rng.integers(0, 2**31))
            dut._log.info("conv case %d: %s %s seed=%d", i, shape, layout, case_seed)
            records.append(await run_conv(h, shape, layout, case_seed, planned=i % 2 == 1))
    with open(os.path.join(os.getcwd(), "conv_results.json"), "w") as f:
        json.dump(records, f, indent=1)
