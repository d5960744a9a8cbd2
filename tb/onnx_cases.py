"""cocotb test: ONNX operator conformance cases (the node tests shipped in the ``onnx`` wheel) on
sim_top, bit-exact against the ONNX expected outputs.

The launcher (tests/sim/test_onnx.py) calls :func:`collect_specs`, which reads every node test
whose single node is ``Conv``, ``ConvInteger`` or ``MatMulInteger`` from
``onnx.backend.test.case.node.collect_testcases`` and turns it into a JSON-serialisable spec
(attributes resolved, arrays as nested lists with their dtypes). The cocotb side needs no
``onnx``: it reads the specs from the file named by ``TESSERA_ONNX_SPECS``, folds zero points
with :mod:`planner.zero_points`, runs convolutions through :func:`tb.conv.conv_on_rtl` (NCHW, planned
tiling) and MatMulInteger on the GEMM path (:func:`gemm_on_rtl`), applies the host corrections
and compares with the expected output exactly. Results go to ``onnx_results.json``.
"""

from __future__ import annotations

import copy
import functools
import json
import os
import time

import cocotb
import numpy as np

from spec.desc import ErrorCode
from spec.regmap import COUNTERS
from spec.schedule import traffic
from planner import plan_gemm
from planner.zero_points import (exact_int, finish, fold_conv_float, fold_conv_integer,
                           fold_matmul_integer, resolve_conv_pads)
from planner.shapes import ConvShape, GemmShape

from .cases import register_budget_cycles
from .conv import TILING_FIELDS, conv_on_rtl
from .harness import Harness, a_image, b_image, c_from_bytes
from .onnx_nodes import node_tests
from .placement import descriptor, place

#: The operators this module runs.
OPS = ("Conv", "ConvInteger", "MatMulInteger")
#: Input roles by position in the node's inputs, per operator (ONNX operator specs).
ROLES = {"Conv": ("x", "w", "b"),
         "ConvInteger": ("x", "w", "x_zero_point", "w_zero_point"),
         "MatMulInteger": ("a", "b", "a_zero_point", "b_zero_point")}
GUARD = 0xA5


# -- specs (host side, needs onnx) ---------------------------------------------------------------

def _array(a: np.ndarray) -> dict:
    a = np.asarray(a)
    return {"dtype": str(a.dtype), "shape": list(a.shape), "data": a.tolist()}


def spec_array(entry: dict | None) -> np.ndarray | None:
    """The numpy array of a spec entry (``None`` for an absent optional input)."""
    if entry is None:
        return None
    return np.array(entry["data"], dtype=entry["dtype"]).reshape(entry["shape"])


def conv_attrs(attrs: dict, x_shape, w_shape) -> dict:
    """ONNX Conv/ConvInteger attributes resolved for a 2-D conv: kernel_shape (from W when
    absent), strides, dilations, group and explicit pads (auto_pad resolved)."""
    if len(x_shape) != 4 or len(w_shape) != 4:
        raise ValueError(f"only 2-D convolutions (4-D X and W) are supported, got X {x_shape} "
                         f"and W {w_shape}")
    kernel = [int(v) for v in attrs.get("kernel_shape", w_shape[2:])]
    if kernel != list(w_shape[2:]):
        raise ValueError(f"kernel_shape {kernel} does not match W {w_shape}")
    strides = [int(v) for v in attrs.get("strides", [1, 1])]
    dilations = [int(v) for v in attrs.get("dilations", [1, 1])]
    pads = resolve_conv_pads(attrs.get("auto_pad", "NOTSET"), attrs.get("pads"), x_shape[2:],
                             kernel, strides, dilations)
    return {"kernel_shape": kernel, "strides": strides, "dilations": dilations,
            "group": int(attrs.get("group", 1)), "pads": list(pads)}


def collect_specs() -> list[dict]:
    """Every ONNX node test of :data:`OPS` (one spec per data set), sorted by name.

    Collecting imports and runs every node-test generator of the wheel (~10 s), so the result
    is cached per process; each call returns a fresh copy."""
    return copy.deepcopy(_collect_specs())


@functools.cache
def _collect_specs() -> list[dict]:
    specs = []
    for name, node, raw_attrs, by_name, expected in node_tests(OPS):
        attrs = {k: v.decode() if isinstance(v, bytes) else v for k, v in raw_attrs.items()}
        arrays = {role: (by_name[input_name] if input_name else None)
                  for role, input_name in zip(ROLES[node.op_type], node.input)}
        if node.op_type == "MatMulInteger":
            resolved = {}
        else:
            resolved = conv_attrs(attrs, arrays["x"].shape, arrays["w"].shape)
        specs.append({
            "name": name, "op": node.op_type, "onnx_attrs": attrs,
            "attrs": resolved,
            "inputs": {k: (None if v is None else _array(v)) for k, v in arrays.items()},
            "expected": _array(expected)})
    return specs


# -- folding and golden (no onnx, no RTL) ---------------------------------------------------------

def conv_shape(spec: dict, x: np.ndarray, w: np.ndarray) -> ConvShape:
    a = spec["attrs"]
    top, left, bottom, right = a["pads"]
    return ConvShape(batch=x.shape[0], in_channels=x.shape[1], height=x.shape[2],
                     width=x.shape[3], out_channels=w.shape[0], kernel_h=w.shape[2],
                     kernel_w=w.shape[3], stride_h=a["strides"][0], stride_w=a["strides"][1],
                     pad_top=top, pad_left=left, pad_bottom=bottom, pad_right=right,
                     dilation_h=a["dilations"][0], dilation_w=a["dilations"][1],
                     groups=a["group"])


def fold(spec: dict):
    """The :mod:`planner.zero_points` fold of a spec: a ConvFold or a GemmFold."""
    arr = {k: spec_array(v) for k, v in spec["inputs"].items()}
    if spec["op"] == "Conv":
        return fold_conv_float(arr["x"], arr["w"], arr.get("b"))
    if spec["op"] == "ConvInteger":
        return fold_conv_integer(arr["x"], arr["w"], arr.get("x_zero_point"),
                                 arr.get("w_zero_point"))
    if spec["op"] == "MatMulInteger":
        return fold_matmul_integer(arr["a"], arr["b"], arr.get("a_zero_point"),
                                   arr.get("b_zero_point"))
    raise ValueError(f"unsupported op {spec['op']!r}")


def expected(spec: dict) -> np.ndarray:
    """The ONNX expected output as int64, refused unless integral and within int32."""
    return exact_int(f"{spec['name']} expected output", spec_array(spec["expected"]),
                     -2**31, 2**31 - 1)


# -- RTL ------------------------------------------------------------------------------------------

async def gemm_on_rtl(h: Harness, a: np.ndarray, b: np.ndarray) -> tuple[dict, np.ndarray]:
    """``a @ b`` (int8) on the GEMM path with the planner's tiling; returns (counters, int32 C).
    Asserts no error, untouched guards and the counters of spec.schedule.traffic."""
    cfg = h.cfg
    m, k = a.shape
    n = b.shape[1]
    plan = plan_gemm(GemmShape(m, k, n), cfg)
    tiling = {name: getattr(plan, name) for name in TILING_FIELDS}
    where = place(m, k, n, cfg)
    d = descriptor(m, k, n, tiling, where, cfg)
    c_lo, c_hi = where.c_addr - where.guard_bytes, where.end
    await h.load([(where.a_addr, a_image(a, where.a_stride)),
                  (where.b_addr, b_image(b, where.b_stride)),
                  (c_lo, bytes([GUARD]) * (c_hi - c_lo))])
    result = await h.run(d, budget_cycles=register_budget_cycles(d, cfg))
    ctx = f"gemm {m}x{k}x{n} tiling {tiling}"
    assert result.error == ErrorCode.NONE, f"{ctx}: error {ErrorCode(result.error).name}"
    raw = await h.dump(c_lo, c_hi - c_lo)
    g = where.guard_bytes
    got = c_from_bytes(raw[g:], m, n, where.c_stride)
    touched = np.zeros(c_hi - c_lo, dtype=bool)
    for i in range(m):
        touched[g + i * where.c_stride:g + i * where.c_stride + 4 * n] = True
    assert np.all(np.frombuffer(raw, dtype=np.uint8)[~touched] == GUARD), \
        f"{ctx}: bytes outside C were written"
    ctr = result.counters
    for name, value in traffic(d, cfg).items():
        assert ctr[name] == value, f"{ctx}: counter {name} = {ctr[name]}, expected {value}"
    return {**tiling, **ctr}, got


async def run_spec(h: Harness, spec: dict, seed: int) -> dict:
    """Run one spec on the RTL, apply the host corrections and compare exactly."""
    want = expected(spec)
    f = fold(spec)
    started = time.perf_counter()
    if spec["op"] == "MatMulInteger":
        record, acc = await gemm_on_rtl(h, f.a8, f.b8)
        got = finish(acc, f.correction)
    else:
        shape = conv_shape(spec, f.x8, f.w8)
        record, acc = await conv_on_rtl(h, shape, "NCHW", f.x8, f.w8, seed=seed, planned=True,
                                        halo=f.halo)
        got = finish(acc, f.correction.reshape(1, -1, 1, 1))
        record = {k: record[k] for k in (*TILING_FIELDS, *COUNTERS, "run_count", "table_bytes")}
    ok = got.shape == want.shape and np.array_equal(got, want)
    return {"name": spec["name"], "op": spec["op"], "pass": bool(ok),
            "cycles": int(record["total_cycles"]), "got": got.tolist(),
            "expected": want.tolist(), "wall_s": time.perf_counter() - started, **record}


@cocotb.test()
async def onnx_cases_match_expected(dut):
    h = await Harness.start(dut)
    with open(os.environ["TESSERA_ONNX_SPECS"]) as f:
        specs = json.load(f)
    records = []
    for i, spec in enumerate(specs):
        dut._log.info("onnx case %s (%s)", spec["name"], spec["op"])
        rec = await run_spec(h, spec, seed=i)
        dut._log.info("onnx case %s: %s, %d cycles", spec["name"],
                      "pass" if rec["pass"] else "FAIL", rec["cycles"])
        records.append(rec)
    with open(os.path.join(os.getcwd(), "onnx_results.json"), "w") as f:
        json.dump(records, f, indent=1)
    failed = [r for r in records if not r["pass"]]
    assert not failed, "ONNX cases differ from their expected outputs: " + "; ".join(
        f"{r['name']}: got {r['got']} expected {r['expected']}" for r in failed)
