"""cocotb test: depthwise 3x3 layers (pad 1, stride 1 or 2; ``b_mode`` 2 or 3) and 5x5 / 7x7 layers
(pad 2 / 3; ``b_mode`` 4 to 7, seven / thirteen weight arrays) on the mesh, and stride-2 ones with
TF/Keras "SAME" padding (the top / left pad one less on an even side: ``b_mode`` 3, 5 or 7 plus 8
/ 16), in register mode, bit-exact against ``spec.golden.conv2d_int8(groups=C)`` and
``requantize``; every byte around the output keeps its fill.

Environment (set by the launcher, tests/sim/test_depthwise.py):
  ACCEL_BUILD       the emitted config directory (its config has ``dw_mesh = 1``)
  TESSERA_SEED      seed of the data and of the cases' output formats
  TESSERA_DW_CASES  the layers, ``CxHxW[/G][:S][@K]`` separated by commas (``G``: channels a
                    strip step, default :func:`spec.dwmesh.strip_channels`' choice; ``S``: the
                    stride, 1 or 2, default 1, or ``2s``: stride 2 with TF/Keras "SAME"
                    padding, ``p - 1`` before and ``p`` after each even side, whose outputs
                    are the stride-1 results' odd rows / columns, ``(p, p)`` on an odd one,
                    ``2r`` / ``2c``: that padding on the rows / columns alone;
                    ``K``: the kernel, 3, 5 or 7, default 3). E.g. ``24x28x15:2s@5``: a 5x5
                    layer keeping the odd rows (``b_mode`` 5 + 8 = 13) and the even columns.

Results (case, counters) go to ``depthwise_results.json``. :func:`build_case` builds a case's
record, memory and expected output without a simulator.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import NamedTuple

import cocotb
import numpy as np

from spec.desc import ErrorCode, GemmDescriptor, depthwise_arrays, depthwise_weight_words
from spec.golden import conv2d_int8, requantize
from spec.layouts import OutFormat, PostMode
from spec.record import check_record, layer_record
from planner.cost import PostLoad
from planner.dwcost import depthwise_descriptor, predict_depthwise

from .harness import Harness

FILL = 0x5A
GUARD = 64


class DwCase(NamedTuple):
    """One case of ``$TESSERA_DW_CASES`` (:func:`parse_cases`)."""

    channels: int
    h: int
    w: int
    group: int | None
    stride: int
    kernel: int
    same: str = ""              # ``:2s`` / ``:2r`` / ``:2c``: TF "SAME" (:func:`odd_sides`)


def parse_cases(text: str) -> list[DwCase]:
    """``CxHxW[/G][:S][@K],..`` -> :class:`DwCase` (channels, h, w, G or None, stride, kernel,
    same); ``S`` is 1, 2 or ``2s`` (stride 2, TF "SAME" padding), ``2r`` or ``2c`` (the same
    on the rows or the columns alone, the other axis symmetric: a layer no TF export has, which
    the planner takes too). Raises ``ValueError`` naming a stride that is none of them."""
    out = []
    for item in text.split(","):
        item, _, kernel = item.strip().partition("@")
        item, _, stride = item.partition(":")
        shape, _, group = item.partition("/")
        c, h, w = (int(v) for v in shape.lower().split("x"))
        stride = stride.strip().lower() or "1"
        if stride not in ("1", "2", "2s", "2r", "2c"):
            raise ValueError(f"TESSERA_DW_CASES: {item.strip()!r}: the stride must be 1, 2 or 2s "
                             f"(stride 2 with TF \"SAME\" padding; 2r, 2c: on the rows, the "
                             f"columns alone), not {stride!r}")
        out.append(DwCase(c, h, w, int(group) if group else None, int(stride[0]),
                          int(kernel or 3), stride[1:]))
    return out


#: The strides :func:`random_cases` draws, as ``$TESSERA_DW_CASES`` writes them (plain
#: stride 2 twice as often: it has the most dataflows, row and column phases among them).
RANDOM_STRIDES = ("1", "2", "2", "2s", "2r", "2c")


def random_cases(cfg, rng: np.random.Generator, count: int, *, channels: int, rows: int,
                 cols: int) -> str:
    """``count`` random layers as ``$TESSERA_DW_CASES`` text: 1 .. ``channels`` channels, maps
    of 1 .. ``rows`` x 1 .. ``cols`` (the rows a multiple of 4 in two draws of five: the row
    and column phases need one), every kernel and stride form of :data:`RANDOM_STRIDES`, and
    in three draws of ten a channel group of the test's own (1 .. the channels) instead of
    :func:`spec.dwmesh.strip_channels`' choice. Draws whose record the rules refuse on ``cfg``
    (a group the buffers or the accumulator cannot hold, a group above 1 on an odd map with
    stride 2) are drawn again: the point is layers the hardware must run."""
    for name, value in (("count", count), ("channels", channels), ("rows", rows),
                        ("cols", cols)):
        if type(value) is not int or value < 1:
            raise ValueError(f"random_cases: {name} must be an int >= 1, not {value!r}")
    out: list[str] = []
    for _ in range(100 * count):
        if len(out) == count:
            return ",".join(out)
        c, h, w = (int(rng.integers(1, top + 1)) for top in (channels, rows, cols))
        if rng.random() < 0.4 and rows >= 4:
            h = 4 * int(rng.integers(1, rows // 4 + 1))
        kernel = int(rng.choice([3, 5, 7]))
        stride = str(rng.choice(RANDOM_STRIDES))
        group = f"/{int(rng.integers(1, c + 1))}" if rng.random() < 0.3 else ""
        text = f"{c}x{h}x{w}{group}:{stride}@{kernel}"
        (case,) = parse_cases(text)
        odd_rows, odd_cols = odd_sides(h, w, case.same)
        d, _ = layer(cfg, c, h, w, case.group, int8=True, stride=case.stride, kernel=kernel,
                     odd_rows=odd_rows, odd_cols=odd_cols)
        if not check_record(layer_record(d, out_format=int(OutFormat.INT8)), cfg):
            out.append(text)
    if len(out) == count:
        return ",".join(out)
    raise ValueError(f"random_cases: {len(out)} of {count} layers in {100 * count} draws: the "
                     f"config {cfg.config_id:08x} refuses nearly every layer of this size")


def odd_sides(h: int, w: int, same: bool | str) -> tuple[bool, bool]:
    """``(odd_rows, odd_cols)`` of a stride-2 case with TF "SAME" padding (``same``: ``"s"`` or
    True): each even side is padded ``p - 1`` before and ``p`` after
    (:func:`spec.desc.depthwise_odd`), an odd one ``(p, p)``; ``"r"`` / ``"c"``: the rows /
    the columns only; ``(False, False)`` without ``same``."""
    rows, cols = (True, True) if same is True else (same in ("s", "r"), same in ("s", "c"))
    return bool(same) and rows and h % 2 == 0, bool(same) and cols and w % 2 == 0


def layer(cfg, c: int, h: int, w: int, group: int | None, *, int8: bool,
          base: int = 0x1000, stride: int = 1, kernel: int = 3, odd_rows: bool = False,
          odd_cols: bool = False):
    """The descriptor and where everything lies: the weight arrays (three, seven for 5x5, thirteen for 7x7;
    64-byte aligned rows), the input, the parameter arrays, the output (with ``GUARD`` bytes of
    fill on each side, at an odd address: the store's byte lanes). ``odd_rows`` / ``odd_cols``:
    the top / left pad one less (stride 2, :func:`planner.dwcost.depthwise_descriptor`)."""
    a_stride = -(-4 * c // 64) * 64
    d = depthwise_descriptor(c, h, w, cfg, out_bytes=1 if int8 else 4, a_addr=base,
                             a_stride=a_stride, group=group, stride=stride, kernel=kernel,
                             odd_rows=odd_rows, odd_cols=odd_cols)
    x_addr = base + depthwise_arrays(d.b_mode) * a_stride + 64
    params = -(-(x_addr + c * h * w) // 64) * 64 + 64
    c_addr = params + 3 * a_stride + GUARD + 3      # (bias, multipliers, shifts)
    return dataclasses.replace(d, b_addr=x_addr, c_addr=c_addr), params


@dataclasses.dataclass(frozen=True)
class Case:
    """One layer of the test: its record, the memory it needs (``loads``: ``(address, bytes)``,
    the output's fill included), the expected output (``want``: channels x pixels, int8 or
    int32) at ``lo + GUARD`` (``span`` bytes), and what it was drawn with."""

    ctx: str
    desc: GemmDescriptor
    rec: dict
    loads: list
    want: np.ndarray
    lo: int
    span: int
    int8: bool
    with_bias: bool
    pad: int
    stride: int
    kernel: int
    odd_rows: bool = False
    odd_cols: bool = False


def build_case(cfg, idx: int, c: int, h: int, w: int, group: int | None, stride: int,
               kernel: int, rng: np.random.Generator, *, same: bool = False) -> Case:
    """Case ``idx`` (its output format from the index: int32 for every third) with its data
    drawn from ``rng``, in the order the cases always drew it; ``same`` (stride 2): TF "SAME"
    padding, the odd rows / columns of each even side (:func:`odd_sides`)."""
    int8, with_bias = bool(idx % 3 != 2), bool(rng.integers(0, 2))
    odd_rows, odd_cols = odd_sides(h, w, same)
    d, params = layer(cfg, c, h, w, group, int8=int8, stride=stride, kernel=kernel,
                      odd_rows=odd_rows, odd_cols=odd_cols)
    oh, ow = -(-h // stride), -(-w // stride)
    x = rng.integers(-128, 128, (c, h, w)).astype(np.int8)
    wt = rng.integers(-128, 128, (c, kernel, kernel)).astype(np.int8)
    x.flat[0], wt.flat[0] = -128, -128
    words = np.array([depthwise_weight_words(wt[ch].reshape(-1)) for ch in range(c)],
                     np.uint32)
    bias = rng.integers(-2**31, 2**31, c, dtype=np.int64).astype(np.int32)
    mult = rng.integers(1 << 29, 2**31, c, dtype=np.int64).astype(np.int32)
    shift = rng.integers(-2, 14, c).astype(np.int32)
    zp, act_min, act_max = int(rng.integers(-20, 20)), -128, 127
    pad = int(rng.integers(-128, 128)) if idx % 4 else 0    # the input zero point
    fields = dict(out_format=int(OutFormat.INT8 if int8 else OutFormat.INT32),
                  post_mode=int(PostMode.NONE), out_zero_point=zp if int8 else 0,
                  act_min=act_min, act_max=act_max, pad_value=pad & 0xFFFF_FFFF)
    arrays = []
    if with_bias:
        fields.update(bias_present=1, bias_addr=params)
        arrays.append(bias)
    if int8:
        fields.update(mult_addr=params + 4 * c * len(arrays),
                      shift_addr=params + 4 * c * (len(arrays) + 1))
        arrays += [mult, shift]
    rec = layer_record(d, **fields)
    ctx = (f"case {idx}: {c}x{h}x{w} {kernel}x{kernel} stride {stride}"
           f"{' SAME' if same else ''} (b_mode {d.b_mode}) G={d.partition_m} "
           f"int8={int8} bias={with_bias} pad={pad}")
    out_bytes = 1 if int8 else 4
    span = c * oh * ow * out_bytes
    lo = d.c_addr - GUARD
    weights = b"".join(np.ascontiguousarray(words[:, t]).astype("<u4").tobytes().ljust(
        d.a_stride, b"\0") for t in range(depthwise_arrays(d.b_mode)))
    loads = [(d.a_addr, weights), (d.b_addr, x.tobytes()),
             (params, b"".join(np.asarray(v, "<i4").tobytes() for v in arrays)),
             (lo, bytes([FILL]) * (span + 2 * GUARD))]
    p = (kernel - 1) // 2
    padded = np.pad(x, ((0, 0), (p - odd_rows, p), (p - odd_cols, p)), constant_values=pad)
    acc = conv2d_int8(padded[None], wt[:, None], stride=(stride, stride), groups=c)[0]
    acc = acc.reshape(c, oh * ow)
    if int8:
        want = requantize(acc, multiplier=mult, shift=shift,
                          bias=bias if with_bias else None, zero_point=zp,
                          act_min=act_min, act_max=act_max).astype(np.int8)
    else:
        wide = acc.astype(np.int64) + (bias.astype(np.int64)[:, None] if with_bias else 0)
        want = (((wide + 2**31) % 2**32) - 2**31).astype("<i4")
    return Case(ctx=ctx, desc=d, rec=rec, loads=loads, want=want, lo=lo, span=span, int8=int8,
                with_bias=with_bias, pad=pad, stride=stride, kernel=kernel, odd_rows=odd_rows,
                odd_cols=odd_cols)


@cocotb.test()
async def depthwise_layers_match_golden(dut):
    await run_cases(dut)


async def run_cases(dut) -> list[dict]:
    """Run ``$TESSERA_DW_CASES`` and check each; returns (and writes) their records."""
    h_ = await Harness.start(dut)
    cfg = h_.cfg
    seed = int(os.environ.get("TESSERA_SEED", "1"))
    rng = np.random.default_rng(seed)
    records = []
    cases = parse_cases(os.environ["TESSERA_DW_CASES"])
    for idx, (c, h, w, group, stride, kernel, same) in enumerate(cases):
        case = build_case(cfg, idx, c, h, w, group, stride, kernel, rng, same=same)
        d, ctx, span, lo = case.desc, case.ctx, case.span, case.lo
        assert check_record(case.rec, cfg) == [], f"{ctx}: {check_record(case.rec, cfg)}"
        await h_.load(case.loads)
        predicted = predict_depthwise(d, cfg, post=PostLoad(bias=case.with_bias,
                                                            requant=case.int8))
        result = await h_.run(case.rec, budget_cycles=2 * predicted.total_cycles + 10_000)
        assert result.error == ErrorCode.NONE, f"{ctx}: {ErrorCode(result.error).name}"
        ow = -(-w // stride)
        raw = await h_.dump(lo, span + 2 * GUARD)
        got = np.frombuffer(raw[GUARD:GUARD + span],
                            np.int8 if case.int8 else "<i4").reshape(c, -1)
        want = case.want
        if not np.array_equal(got, want):
            bad = np.argwhere(got != want)
            ch, p = bad[0]
            raise AssertionError(f"{ctx}: {len(bad)} wrong elements, first channel {ch} "
                                 f"({p // ow}, {p % ow}) = {got[ch, p]} != {want[ch, p]}")
        guard = raw[:GUARD] + raw[GUARD + span:]
        assert guard == bytes([FILL]) * (2 * GUARD), f"{ctx}: bytes outside the output written"
        records.append({"channels": c, "h": h, "w": w, "stride": stride, "kernel": kernel,
                        "odd_rows": case.odd_rows, "odd_cols": case.odd_cols,
                        "group": d.partition_m, "int8": case.int8,
                        "bias": case.with_bias, "pad": case.pad,
                        "predicted": predicted.as_dict(), **result.counters})
    with open(os.path.join(os.getcwd(), "depthwise_results.json"), "w") as f:
        json.dump(records, f, indent=1)
    return records
