"""tb.depthwise without a simulator: the records and memory it builds for the RTL test
(tests/sim/test_depthwise.py), 3x3 and 5x5 layers, pass the hardware's rules, and the golden
device's layer model, run on that memory, writes exactly the output the test expects and
nothing around it."""

import dataclasses

import numpy as np
import pytest

from firmware.emulator import DeviceMemory, EmulationResult, _run_layer, zeroed_memory
from spec.config import PRESETS
from spec.desc import (B_MODE_DEPTHWISE5, B_MODE_DEPTHWISE5_S2, DEPTHWISE_KERNELS, ErrorCode,
                       depthwise_arrays, depthwise_odd)
from spec.record import check_record
from spec.golden import conv2d_int8
from tb.depthwise import FILL, GUARD, build_case, odd_sides, parse_cases

SMALL = dataclasses.replace(PRESETS["small"], dw_mesh=1)
DEFAULT = PRESETS["default"]


def test_cases_parse_kernels_strides_and_groups():
    assert parse_cases("3x12x13, 5x6x20/2:2,4x10x7/3:2@5,9x3x3@5,2x7x9:1@3") == [
        (3, 12, 13, None, 1, 3, ""), (5, 6, 20, 2, 2, 3, ""), (4, 10, 7, 3, 2, 5, ""),
        (9, 3, 3, None, 1, 5, ""), (2, 7, 9, None, 1, 3, "")]


def test_cases_parse_tf_same_stride_2():
    """``:2s``: stride 2 with TF "SAME" padding (odd rows / columns on each even side); any
    other stride text is refused naming the case."""
    cases = parse_cases("24x28x15:2s@5, 3x6x6/3:2S,2x7x9:2,4x16x16:2c,4x16x16:2r@7")
    assert cases == [(24, 28, 15, None, 2, 5, "s"), (3, 6, 6, 3, 2, 3, "s"),
                     (2, 7, 9, None, 2, 3, ""), (4, 16, 16, None, 2, 3, "c"),
                     (4, 16, 16, None, 2, 7, "r")]
    assert cases[0].same and cases[0].kernel == 5 and not cases[2].same
    assert [odd_sides(c.h, c.w, c.same) for c in cases] == [
        (True, False), (True, True), (False, False), (False, True), (True, False)]
    assert odd_sides(6, 6, True) == (True, True)
    for text, bad in (("2x8x8:1s", "1s"), ("2x8x8:3", "3"), ("2x8x8:s2@5", "s2"),
                      ("2x8x8:2x", "2x")):
        with pytest.raises(ValueError, match=f"TESSERA_DW_CASES: '2x8x8': the stride must be "
                                             f"1, 2 or 2s .*, not '{bad}'"):
            parse_cases(text)


@pytest.mark.parametrize("cfg, cases", [
    (SMALL, "3x12x13@5,2x7x9:2@5,5x6x20/2@5,1x1x5@5,4x10x7/3:2@5,9x3x3@5,2x16x20:2@5,"
            "3x12x13,2x7x9:2"),
    (DEFAULT, "20x29x23@5,13x30x45:2@5,11x7x7@5,5x14x14:2@5,7x5x11@5,144x18x17/7:2@5,"
              "9x23x17@7,5x12x30:2@7,3x1x1@7,40x7x7/9@7"),
    # TF "SAME" stride 2: odd rows / columns on each even side (b_mode plus 8 / 16)
    (SMALL, "3x12x14:2s,9x12x9:2s,4x7x10:2s@5,2x16x20:2s@5,5x9x9:2s,1x2x2:2s"),
    (DEFAULT, "20x28x28:2s,13x30x45:2s@5,6x14x14:2s@7,5x9x20:2s@7,144x56x56/7:2s"),
], ids=["small", "default", "small-same", "default-same"])
def test_depthwise_cases_build_records_the_golden_layer_runs(cfg, cases):
    rng = np.random.default_rng(11)
    for idx, (c, h, w, group, stride, kernel, same) in enumerate(parse_cases(cases)):
        case = build_case(cfg, idx, c, h, w, group, stride, kernel, rng, same=same)
        d = case.desc
        assert check_record(case.rec, cfg) == [], case.ctx
        assert DEPTHWISE_KERNELS[d.b_mode] == kernel
        odd = odd_sides(h, w, same)
        assert depthwise_odd(d.b_mode) == odd == (case.odd_rows, case.odd_cols), case.ctx
        assert d.b_mode == (2 + kernel - 3 + stride - 1) + 8 * odd[0] + 16 * odd[1], case.ctx
        if kernel == 5:
            assert d.b_mode & 7 == (B_MODE_DEPTHWISE5 if stride == 1 else B_MODE_DEPTHWISE5_S2)
        assert len(case.loads[0][1]) == depthwise_arrays(d.b_mode) * d.a_stride
        if group is not None:
            assert d.partition_m == group
        mem = zeroed_memory(cfg.dram_bytes)
        for addr, data in case.loads:
            mem[addr:addr + len(data)] = data
        result = EmulationResult(ErrorCode.NONE, 0)
        assert _run_layer(DeviceMemory(mem, cfg), case.rec, cfg, result, False), case.ctx
        raw = bytes(mem[case.lo:case.lo + case.span + 2 * GUARD])
        got = np.frombuffer(raw[GUARD:GUARD + case.span], case.want.dtype).reshape(c, -1)
        np.testing.assert_array_equal(got, case.want, err_msg=case.ctx)
        assert raw[:GUARD] + raw[GUARD + case.span:] == bytes([FILL]) * (2 * GUARD), case.ctx


def test_tf_same_case_expects_the_stride_1_results_odd_rows_and_columns():
    """A ``:2s`` case's expected output (int32, no bias) is the symmetric stride-1 convolution's
    odd rows on an even height, its even columns on an odd width, and its input padding is the
    case's pad value."""
    rng = np.random.default_rng(4)
    while True:
        case = build_case(DEFAULT, 2, 3, 10, 7, None, 2, 3, rng, same=True)
        if not case.with_bias and case.pad:
            break
    x = np.frombuffer(case.loads[1][1], np.int8).reshape(3, 10, 7)
    words = np.frombuffer(case.loads[0][1], "<u4").reshape(3, -1)[:, :3]
    wt = np.ascontiguousarray(words.T).view(np.int8).reshape(3, 12)[:, :9].reshape(3, 1, 3, 3)
    padded = np.pad(x, ((0, 0), (1, 1), (1, 1)), constant_values=case.pad)
    one = conv2d_int8(padded[None], wt, groups=3)[0]
    assert (case.odd_rows, case.odd_cols) == (True, False) and case.desc.b_mode == 3 + 8
    np.testing.assert_array_equal(case.want.reshape(3, 5, 4), one[:, 1::2, 0::2])
