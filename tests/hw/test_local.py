"""The on-chip local buffer (operator fusion, docs/fusion.md): which B and C it may hold, the
window rule, and the functional model's view of it. The RTL agrees with these rules
(tests/hw/test_sequencer_checks.py fuzzes both) and runs fused images bit-exactly
(tests/sim/test_fusion.py)."""

import dataclasses

import numpy as np
import pytest

from firmware.emulator import DeviceMemory
from spec.config import PRESETS
from spec.desc import ErrorCode, GemmDescriptor, check, local_problem
from spec.record import check_record, layer_record

CFG = PRESETS["tiny"]
L0 = CFG.local_base                     # first local byte
C = CFG.array_cols
BASE = GemmDescriptor(m=8, k=8, n=8, partition_m=8, partition_n=8, partition_k=8, tile_m=4,
                      tile_n=4, outer_m=1, need_splitk=0, acc_buffer_needed=256, a_addr=0,
                      a_stride=8, b_addr=0x1000, b_stride=8, c_addr=0x2000, c_stride=8)


def codes(d, out_bytes=1):
    return [c for c, _ in check(d, CFG, out_bytes=out_bytes)]


def test_local_b_and_c_accepted():
    assert codes(dataclasses.replace(BASE, b_addr=L0, b_stride=8)) == []
    assert codes(dataclasses.replace(BASE, c_addr=L0 + 64, c_stride=8)) == []
    # a producer's output region read back by its consumer: C of one, B of the next
    assert codes(dataclasses.replace(BASE, b_addr=L0, c_addr=L0 + 64)) == []


@pytest.mark.parametrize("over, out_bytes, text", [
    (dict(b_addr=L0 + 1), 1, f"b_addr={L0 + 1:#x} and b_stride=8 must be multiples of its row "
                             f"of {C} bytes"),
    (dict(b_addr=L0, b_stride=10), 1, "must be multiples of its row"),
    (dict(b_addr=L0, b_mode=1, off_addr=0x3000, run_addr=0x3100, grp_addr=0x3200,
          run_count=1, b_stride=64), 1, "serves dense operands only: b_mode must be 0, not 1"),
    (dict(c_addr=L0, c_stride=32), 4, "holds int8 outputs only"),
    (dict(c_addr=L0 + 2, c_stride=8), 1, "c_addr=0x400002 and c_stride=8 must be multiples"),
    (dict(a_addr=L0), 1, "is not inside the local buffer [0x400000, 0x404000) (only B and C"),
    (dict(b_addr=L0 + CFG.local_buf_bytes - 8), 1, "beyond dram_bytes"),
    (dict(b_addr=L0 - 16), 1, "beyond dram_bytes"),            # straddles DRAM and local
    (dict(c_addr=L0, b_addr=L0), 1, "overlaps B"),              # C over B, on chip too
])
def test_local_operands_refused_with_reason(over, out_bytes, text):
    errs = check(dataclasses.replace(BASE, **over), CFG, out_bytes=out_bytes)
    assert [c for c, _ in errs][:1] == [ErrorCode.BAD_ADDRESS]
    assert any(text in msg for _, msg in errs), errs


def test_local_problem_is_none_for_dram_shapes_it_accepts():
    assert local_problem(dataclasses.replace(BASE, b_addr=L0), CFG, "b") is None
    assert local_problem(dataclasses.replace(BASE, c_addr=L0), CFG, "c", out_bytes=1) is None


def _rec(**fields):
    d = dataclasses.replace(BASE, c_addr=L0 + 64)
    return layer_record(d, out_format=1, **fields)


def test_local_window_inside_the_local_buffer():
    rec = _rec()
    assert (rec["out_window_lo"], rec["out_window_hi"]) == (L0 + 64, L0 + 64 + 7 * 8 + 8)
    assert check_record(rec, CFG) == []
    rec.update(out_window_lo=L0, out_window_hi=L0 + CFG.local_buf_bytes)
    assert check_record(rec, CFG) == []


@pytest.mark.parametrize("lo, hi", [(L0 - 64, L0 + 256), (L0 + 64, L0 + CFG.local_buf_bytes + 1)])
def test_local_window_may_not_leave_the_local_buffer(lo, hi):
    rec = _rec(out_window_lo=lo, out_window_hi=hi)
    errs = check_record(rec, CFG)
    assert [c for c, _ in errs][:1] == [ErrorCode.BAD_WINDOW]
    assert "is not inside the local buffer" in errs[0][1]


def test_emulator_memory_routes_local_addresses_and_tracks_written_bytes():
    mem = DeviceMemory(bytearray(CFG.dram_bytes), CFG)
    mem.write(16, b"\x05\x06")
    mem.write(L0 + 4, bytes([0xff, 0x7f]))
    idx = np.array([16, 17, L0 + 4, L0 + 5])
    assert mem.gather(idx).tolist() == [5, 6, -1, 127]
    assert mem.mem[16] == 5 and len(mem.mem) == CFG.dram_bytes     # DRAM untouched above
    assert mem.local_defined(idx)
    assert not mem.local_defined(np.array([L0 + 6]))                # never written this run
    assert mem.local_defined(np.array([0, 1, 2]))                   # DRAM bytes always are


def fused_pair_image():
    """An 8x8 GEMM writing its int8 output into the local buffer and a second one reading it:
    (builder, image, x address, local address)."""
    from firmware.builder import ImageBuilder, Requant

    b = ImageBuilder(CFG)
    x, y = b.buffer("x", 64), b.buffer("y", 64)
    h = b.local("h", 64)
    rq = Requant(multiplier=np.full(8, 1 << 30, np.int32), shift=np.zeros(8, np.int32))
    b.gemm("p", weights=np.ones((8, 8), np.int8), n=8, b_addr=x, b_stride=8, out_addr=h,
           out_stride=8, requant=rq)
    b.gemm("c", weights=np.ones((8, 8), np.int8), n=8, b_addr=h, b_stride=8, out_addr=y,
           out_stride=8, requant=rq)
    return b, b.build()[0], x, h


def test_emulator_lists_no_memory_read_for_a_local_b():
    from firmware.emulator import run_image

    b, blob, x, _ = fused_pair_image()
    mem = bytearray(CFG.dram_bytes)
    mem[:len(blob)] = blob
    result = run_image(mem, 0, CFG)
    assert result.error == ErrorCode.NONE and result.defined
    # the consumer's local B is on chip: the only data-region reads are x's
    data = [(lo, size) for lo, size in result.reads if lo >= b.data_addr]
    assert data == [(x, 64)]


def test_inspect_marks_local_buffer_addresses():
    from firmware.image import inspect

    _, blob, _, h = fused_pair_image()
    text = inspect(blob)
    assert text.count("(local buffer +0x0)") == 3       # C and window of p, B of c
    assert f"desc_b_addr              {h:#010x}  (local buffer +0x0)" in text
