"""planner.conv.compile_conv: plan + tables + descriptors + prediction of one conv layer."""

import dataclasses

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


# -- a layer whose tables do not fit: bands of output rows ----------------------------------------

TINY = PRESETS["tiny"]
#: 3 -> 8 channels, 3x3 stride 2 on 224 x 224: 12,321 output pixels, 3,164 runs, far more than
#: tiny's 1,024 run and group entries (squeezenet's first layer)
WIDE = ConvShape(batch=1, in_channels=3, height=224, width=224, out_channels=8, kernel_h=3,
                 kernel_w=3, stride_h=2, stride_w=2)


def _fits(shape, cfg, rows):
    from planner.offsets import compile_tables
    from spec.desc import table_problems

    t = compile_tables(shape, "NCHW", cfg, pixels=rows * shape.out_w)
    return not table_problems(cfg, k=shape.gemm.k, run_count=t.run_count, n=t.n)


def test_row_bands_whole_layer_when_its_tables_fit():
    from planner.conv import row_bands

    assert row_bands(SHAPE, "NCHW", CFG) == [(0, 56)]
    assert row_bands(WIDE, "NCHW", PRESETS["small"]) == [(0, 111)]


def test_row_bands_are_the_most_rows_whose_tables_fit():
    from planner.conv import row_bands

    bands = row_bands(WIDE, "NCHW", TINY)
    assert len(bands) > 1 and bands[0][0] == 0 and bands[-1][1] == WIDE.out_h
    assert all(a[1] == b[0] for a, b in zip(bands, bands[1:]))          # contiguous, in order
    rows = bands[0][1] - bands[0][0]
    assert all(p1 - p0 == rows for p0, p1 in bands[:-1]) and bands[-1][1] - bands[-1][0] <= rows
    assert _fits(WIDE, TINY, rows) and not _fits(WIDE, TINY, rows + 1)


def test_program_predict_refuses_tables_that_do_not_fit():
    """One record cannot run a layer whose tables exceed the table memories: its program gets
    no cycle count (it used to give one); layer_cost costs the bands."""
    program = compile_conv(WIDE, "NCHW", TINY)
    with pytest.raises(ValueError, match="tables do not fit this configuration's table "
                                         "memories .*: one record cannot run it"):
        program.predict(TINY)
    assert compile_conv(WIDE, "NCHW", PRESETS["small"]).predict(PRESETS["small"]).total_cycles


def test_row_bands_refuse_what_no_band_makes_fit():
    from planner.conv import row_bands

    deep = ConvShape(batch=1, in_channels=512, height=14, width=14, out_channels=8, kernel_h=3,
                     kernel_w=3, pad_top=1, pad_left=1, pad_bottom=1, pad_right=1)
    with pytest.raises(ValueError, match="even for one output row .*k=4608 offsets exceed "
                                         "conv_offset_entries=4096"):
        row_bands(deep, "NCHW", PRESETS["fpga"])
    with pytest.raises(ValueError, match="batch 1"):
        row_bands(GROUPED, "NCHW", TINY)


def test_layer_cost_of_a_banded_layer_is_its_bands_and_refuses_what_cannot_run():
    from planner import layer_cost
    from planner.conv import block_plan, row_bands
    from planner.convplan import conv_descriptor
    from planner.offsets import compile_tables
    from planner.tiling import TILING_FIELDS

    total = 0
    for p0, p1 in row_bands(WIDE, "NCHW", TINY):
        pixels = (p1 - p0) * WIDE.out_w
        t = compile_tables(WIDE, "NCHW", TINY, pixels=pixels)
        plan = block_plan(WIDE, "NCHW", TINY, pixels)
        d = conv_descriptor(WIDE, "NCHW", t, {f: getattr(plan, f) for f in TILING_FIELDS})
        total += predict_conv(d, t, TINY).total_cycles
    assert layer_cost(WIDE, TINY).cycles == total
    batched = dataclasses.replace(WIDE, batch=3)
    assert layer_cost(batched, TINY).cycles == 3 * total
    huge = ConvShape(batch=1, in_channels=1, height=40, width=40, out_channels=4,
                     kernel_h=33, kernel_w=33)
    with pytest.raises(ValueError, match="one input channel's 1089 taps exceed "
                                         "conv_offset_entries=1024: it cannot run on this "
                                         "configuration"):
        layer_cost(huge, TINY)


#: ResNet-50's res5 3x3 (stride 2): 4,608 taps, more than fpga's and small's 4,096 offsets
DEEP = ConvShape(batch=1, in_channels=512, height=14, width=14, out_channels=512, kernel_h=3,
                 kernel_w=3, stride_h=2, stride_w=2, pad_top=1, pad_left=1, pad_bottom=1,
                 pad_right=1)


@pytest.mark.parametrize("shape, preset, parts", [
    (DEEP, "fpga", [(0, 256), (256, 512)]),
    (DEEP, "default", [(0, 512)]),                      # 8,192 entries: one part
    (dataclasses.replace(DEEP, in_channels=1000, out_channels=10, groups=2), "fpga",
     [(0, 250), (250, 500)]),                           # per group: 500 channels, 4,500 taps
    (dataclasses.replace(DEEP, in_channels=1025, out_channels=4, kernel_h=2, kernel_w=1,
                         pad_top=0, pad_bottom=0, pad_left=0, pad_right=0), "tiny",
     [(0, 342), (342, 684), (684, 1025)]),              # 512 channels a part at most
])
def test_k_parts_are_the_fewest_equal_slices_of_channels_whose_taps_fit(shape, preset, parts):
    from planner.conv import k_parts

    cfg = PRESETS[preset]
    assert k_parts(shape, cfg) == parts
    taps = shape.kernel_h * shape.kernel_w
    assert all((c1 - c0) * taps <= cfg.conv_offset_entries for c0, c1 in parts)


def test_layer_cost_of_a_conv_in_k_parts_is_its_parts_per_group():
    """The compiler runs a convolution whose taps exceed the offset table as one convolution
    per K part and group (flow.compile's ksplit steps); the cost entry point costs the same
    records: each part's own convolution, int32 out, times the groups and images."""
    from planner import layer_cost
    from planner.conv import k_part_shape

    fpga = PRESETS["fpga"]
    whole = layer_cost(DEEP, fpga)
    halves = [layer_cost(k_part_shape(DEEP, p), fpga) for p in [(0, 256), (256, 512)]]
    assert whole.k_parts == 2 and whole.macs == DEEP.macs
    assert whole.counters.as_dict() == {k: sum(h.counters.as_dict()[k] for h in halves)
                                        for k in whole.counters.as_dict()}
    grouped = dataclasses.replace(DEEP, batch=2, in_channels=1024, out_channels=64, groups=2)
    g = layer_cost(grouped, fpga)
    part = layer_cost(k_part_shape(grouped, (0, 256)), fpga)
    assert g.k_parts == 2 and g.cycles == 2 * 2 * 2 * part.cycles
    with pytest.raises(ValueError, match="only an NCHW input is split into K parts"):
        layer_cost(DEEP, fpga, layout="NHWC")
    assert layer_cost(DEEP, PRESETS["default"]).k_parts == 1


#: two groups on a 40 x 40 map, whose tables fit tiny's whole
GROUPED_ONE = ConvShape(batch=1, in_channels=8, height=40, width=40, out_channels=6,
                        kernel_h=3, kernel_w=3, pad_top=1, pad_left=1, pad_bottom=1,
                        pad_right=1, groups=2)


def test_layer_cost_of_a_batch_is_one_record_set_per_image():
    """The compiler runs a batched convolution image by image (flow.compile); the cost entry
    point costs it the same way, not as one record over batch * P * Q pixels."""
    from planner import layer_cost

    one = layer_cost(GROUPED_ONE, TINY)
    three = layer_cost(dataclasses.replace(GROUPED_ONE, batch=3), TINY)
    assert three.counters.as_dict() == {k: 3 * v for k, v in one.counters.as_dict().items()}
    assert three.macs == 3 * one.macs and three.groups == 2
    # what it used to say: one record over the whole batch, whose tables do not even fit
    whole = compile_conv(dataclasses.replace(GROUPED_ONE, batch=3), "NCHW", TINY)
    with pytest.raises(ValueError, match="one record cannot run it"):
        whole.predict(TINY)


def test_device_memory_checks_count_what_the_compiler_places():
    """A requantised layer's output is int8, not int32 (a 1024x256x1024 FC fits tiny's 4 MiB
    post-processed); a layer in K parts runs an image at a time, so its batch does not add up
    (four 65 x 65 images of 130 channels were refused on the memory of all four); and a
    grouped convolution's whole input counts, not one group's."""
    from planner import GemmShape, PostLoad, check_addressable, layer_cost

    fc = GemmShape(1024, 256, 1024)
    with pytest.raises(ValueError, match=r"C 4,194,304 as int32\), more than dram_bytes"):
        layer_cost(fc, TINY)
    assert layer_cost(fc, TINY, post=PostLoad(True, True)).cycles > 0
    one = ConvShape(batch=1, in_channels=130, height=65, width=65, out_channels=32, kernel_h=3,
                    kernel_w=3, pad_top=1, pad_left=1, pad_bottom=1, pad_right=1)
    four = dataclasses.replace(one, batch=4)
    assert layer_cost(four, TINY).k_parts == 2
    assert layer_cost(four, TINY).cycles == 4 * layer_cost(one, TINY).cycles
    grouped = ConvShape(batch=1, in_channels=64, height=128, width=128, out_channels=8,
                        kernel_h=1, kernel_w=1, groups=8)
    with pytest.raises(ValueError, match=r"B 1,048,576"):
        check_addressable(grouped, dataclasses.replace(TINY, dram_addr_bits=20))
