"""planner.conv.compile_conv: plan + tables + descriptors + prediction of one conv layer."""

import pytest

from spec.config import PRESETS
from spec.desc import check
from planner import plan_conv
from planner.conv import compile_conv
from planner.convcost import predict_conv
from planner.layout import group_base_bytes, padded_bytes
from planner.shapes import ConvShape

CFG = PRESETS["default"]
SHAPE = ConvShape(batch=1, in_channels=64, height=56, width=56, out_channels=64, kernel_h=3,
                  kernel_w=3, pad_top=1, pad_left=1, pad_bottom=1, pad_right=1)
GROUPED = ConvShape(batch=2, in_channels=8, height=9, width=7, out_channels=6, kernel_h=3,
                    kernel_w=3, stride_h=2, pad_top=1, groups=2)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_conv_program_plans_with_the_seed_conv_mapping(layout):
    program = compile_conv(SHAPE, layout, CFG)
    plan, groups = plan_conv(SHAPE, CFG, layout=layout)
    assert program.plan == plan and program.groups == groups == 1
    assert (program.plan.m, program.plan.k, program.plan.n) == (64, 576, 3136)
    assert program.tables.k == 576 and program.tables.n == 3136


def test_conv_program_descriptors_are_legal_and_offset_per_group():
    program = compile_conv(GROUPED, "NCHW", PRESETS["tiny"])
    cfg = PRESETS["tiny"]
    descs = [program.descriptor(g, cfg, x_addr=0, a_addr=0x8000 + g * 0x400,
                                c_addr=0x10000 + g * 0x1000, off_addr=0x4000, run_addr=0x5000,
                                grp_addr=0x6000) for g in range(2)]
    for g, d in enumerate(descs):
        assert check(d, cfg) == []
        assert d.b_mode == 1 and d.run_count == program.tables.run_count
        assert d.b_addr == group_base_bytes(GROUPED, "NCHW", g)
        assert d.b_addr + d.b_stride == padded_bytes(GROUPED, "NCHW")
    assert descs[0].b_addr != descs[1].b_addr


def test_conv_program_predict_sums_groups():
    cfg = PRESETS["tiny"]
    program = compile_conv(GROUPED, "NHWC", cfg)
    d = program.descriptor(0, cfg, x_addr=0, a_addr=0x8000, c_addr=0x10000, off_addr=0x4000,
                           run_addr=0x5000, grp_addr=0x6000)
    one = predict_conv(d, program.tables, cfg)
    assert program.predict(cfg).total_cycles == 2 * one.total_cycles


def test_conv_program_refuses_bad_group_and_overlaps():
    cfg = PRESETS["tiny"]
    program = compile_conv(GROUPED, "NCHW", cfg)
    with pytest.raises(ValueError, match=r"group must be in \[0, 1\], not 2"):
        program.descriptor(2, cfg, x_addr=0, a_addr=0x8000, c_addr=0x10000, off_addr=0x4000,
                           run_addr=0x5000, grp_addr=0x6000)
    with pytest.raises(ValueError, match="overlaps"):
        program.descriptor(0, cfg, x_addr=0, a_addr=0x8000, c_addr=0x4000, off_addr=0x4000,
                           run_addr=0x5000, grp_addr=0x6000)
