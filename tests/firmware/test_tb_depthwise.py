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
                       depthwise_arrays)
from spec.record import check_record
from tb.depthwise import FILL, GUARD, build_case, parse_cases

SMALL = dataclasses.replace(PRESETS["small"], dw_mesh=1)
DEFAULT = PRESETS["default"]


def test_cases_parse_kernels_strides_and_groups():
    assert parse_cases("3x12x13, 5x6x20/2:2,4x10x7/3:2@5,9x3x3@5,2x7x9:1@3") == [
        (3, 12, 13, None, 1, 3), (5, 6, 20, 2, 2, 3), (4, 10, 7, 3, 2, 5), (9, 3, 3, None, 1, 5),
        (2, 7, 9, None, 1, 3)]


@pytest.mark.parametrize("cfg, cases", [
    (SMALL, "3x12x13@5,2x7x9:2@5,5x6x20/2@5,1x1x5@5,4x10x7/3:2@5,9x3x3@5,2x16x20:2@5,"
            "3x12x13,2x7x9:2"),
    (DEFAULT, "20x29x23@5,13x30x45:2@5,11x7x7@5,5x14x14:2@5,7x5x11@5,144x18x17/7:2@5,"
              "9x23x17@7,5x12x30:2@7,3x1x1@7,40x7x7/9@7"),
], ids=["small", "default"])
def test_depthwise_cases_build_records_the_golden_layer_runs(cfg, cases):
    rng = np.random.default_rng(11)
    for idx, (c, h, w, group, stride, kernel) in enumerate(parse_cases(cases)):
        case = build_case(cfg, idx, c, h, w, group, stride, kernel, rng)
        d = case.desc
        assert check_record(case.rec, cfg) == [], case.ctx
        assert DEPTHWISE_KERNELS[d.b_mode] == kernel
        if kernel == 5:
            assert d.b_mode == (B_MODE_DEPTHWISE5 if stride == 1 else B_MODE_DEPTHWISE5_S2)
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
