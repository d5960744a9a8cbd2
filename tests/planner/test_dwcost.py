"""The depthwise mesh's cost through the one cost entry point (planner.layer_cost) and the
descriptor the planner and the builder share (planner.dwcost)."""

import dataclasses

import pytest

from planner import layer_cost
from planner.cost import CycleBreakdown
from planner.cost import DEFAULT_CONSTANTS, PostLoad, _Timing, image_overhead_cycles, \
    param_load_cycles
from planner.dwcost import (depthwise_b_mode, depthwise_blocks, depthwise_descriptor,
                            depthwise_macs, is_depthwise, mesh_odd, mesh_pads, mesh_refusal,
                            mesh_shape, port_bound, predict_depthwise)
from planner.shapes import ConvShape
from spec.config import PRESETS
from spec.desc import (col_phases, B_MODE_DEPTHWISE, B_MODE_DEPTHWISE5, B_MODE_DEPTHWISE5_S2,
                       B_MODE_DEPTHWISE_S2, B_MODE_ODD_ROWS, check, depthwise_arrays,
                       depthwise_odd)
from spec.dwmesh import input_bound, row_passes, row_phases, strip_steps

MESH = PRESETS["default"]
PLAIN = dataclasses.replace(MESH, dw_mesh=0)


def dw(c, h, stride=1, batch=1, pad=1, kernel=3, groups=None):
    return ConvShape(batch=batch, in_channels=c, height=h, width=h, out_channels=c,
                     kernel_h=kernel, kernel_w=kernel, stride_h=stride, stride_w=stride,
                     pad_top=pad, pad_left=pad, pad_bottom=pad, pad_right=pad,
                     groups=c if groups is None else groups)


def test_mesh_shape_is_depthwise_kxk_pad_half_k_stride_1_or_2():
    assert mesh_shape(dw(32, 112))
    assert mesh_shape(dw(32, 112, stride=2))
    assert not mesh_shape(dw(32, 112, stride=3))
    assert not mesh_shape(dw(32, 112, pad=0))
    assert mesh_shape(dw(32, 112, kernel=5, pad=2))
    assert mesh_shape(dw(32, 112, kernel=5, pad=2, stride=2))
    assert not mesh_shape(dw(32, 112, kernel=5, pad=1))
    assert not mesh_shape(dw(32, 112, kernel=3, pad=2))
    assert mesh_shape(dw(32, 112, kernel=7, pad=3))
    assert mesh_shape(dw(32, 112, kernel=7, pad=3, stride=2))
    assert not mesh_shape(dw(32, 112, kernel=7, pad=2))
    assert not mesh_shape(dw(32, 112, kernel=9, pad=4))
    assert not mesh_shape(dw(32, 112, kernel=5, pad=2, stride=3))
    assert not mesh_shape(dw(32, 112, groups=8))
    assert not mesh_shape(dw(32, 112).gemm)


@pytest.mark.parametrize("batch", [1, 3])
def test_layer_cost_takes_the_mesh_model_on_a_mesh_config(batch):
    shape = dw(144, 56, batch=batch)
    cost = layer_cost(shape, MESH)
    d = depthwise_descriptor(144, 56, 56, MESH, out_bytes=4, b_addr=1 << 20, c_addr=1 << 24)
    assert check(d, MESH, out_bytes=4) == []
    one = predict_depthwise(d, MESH)
    assert cost.mesh and cost.counters == CycleBreakdown(
        **{k: v * batch for k, v in one.as_dict().items()})
    assert cost.macs == 9 * 144 * 56 * 56 * batch
    # off the mesh: dense blocks of 16 channels, 7.7x slower here
    plain = layer_cost(shape, PLAIN)
    assert not plain.mesh and plain.cycles > 7 * cost.cycles
    # stride 2: row and column phases (every lane an output: half the strips of the stride-1
    # layer, half their rows)
    s2 = layer_cost(dw(144, 56, stride=2, batch=batch), MESH)
    d2 = depthwise_descriptor(144, 56, 56, MESH, out_bytes=4, b_addr=1 << 20, c_addr=1 << 24,
                              stride=2)
    assert check(d2, MESH, out_bytes=4) == [] and d2.c_stride == 4 * 28 * 28
    assert s2.mesh and s2.counters == CycleBreakdown(
        **{k: v * batch for k, v in predict_depthwise(d2, MESH).as_dict().items()})
    assert s2.macs == 9 * 144 * 28 * 28 * batch
    assert s2.counters.wr_c_bytes * 4 == cost.counters.wr_c_bytes


#: MobileNet-V2's stride-1 depthwise layers (channels, map) on the 16x16 default with the mesh:
#: the model's MAC utilisation, at least the 25% of issue 18 (the 7x7 one in the quadrant mode,
#: four channels a tile, docs/architecture.md; 17.4% with two channels a tile, 8.7% with one,
#: 2.7% with one channel a step).
@pytest.mark.parametrize("c, h, at_least", [(32, 112, 0.41), (144, 56, 0.41), (192, 28, 0.38),
                                            (384, 14, 0.35), (576, 14, 0.36), (960, 7, 0.27)])
def test_mobilenet_v2_depthwise_utilisation(c, h, at_least):
    cost = layer_cost(dw(c, h), MESH)
    util = cost.macs / (MESH.macs_per_cycle * cost.cycles)
    assert at_least <= util < at_least + 0.01


#: The stride-2 ones (the model; tests/sim/test_depthwise.py measures them on the RTL): in row
#: and column phases (spec.desc.col_phases: 15 x 15 outputs a 37-beat tile back to back,
#: session 42) from 28 x 28 up, 13.4-14.6% in row phases (15 x 7 outputs a 23-beat tile),
#: 10.0-10.5% before; the 14 x 14 one in row phases two channels a tile
#: (spec.dwmesh.phase_halves: 2 x 7 x 7 outputs a 23-beat tile, session 41; 9.x% as stride 1
#: with a decimating store before). As channel blocks they ran at 0.8-2.6%.
@pytest.mark.parametrize("c, h, at_least", [(96, 112, 0.18), (144, 56, 0.17), (192, 28, 0.16),
                                            (576, 14, 0.12)])
def test_mobilenet_v2_stride_2_depthwise_utilisation(c, h, at_least):
    cost = layer_cost(dw(c, h, stride=2), MESH)
    assert cost.mesh
    util = cost.macs / (MESH.macs_per_cycle * cost.cycles)
    assert at_least <= util < at_least + 0.01


def test_depthwise_blocks_cover_every_channel_and_image():
    assert is_depthwise(dw(40, 14, stride=2)) and not is_depthwise(dw(40, 14, groups=8))
    blocks = depthwise_blocks(dw(40, 14, stride=2, batch=2), MESH)
    assert [(s.in_channels, s.out_channels, s.groups, s.batch, n) for s, n in blocks] == \
        [(16, 16, 1, 1, 4), (8, 8, 1, 1, 2)]
    assert all(s.stride_h == 2 and s.height == 14 for s, _ in blocks)
    assert [n for _, n in depthwise_blocks(dw(32, 14, stride=2), MESH)] == [2]
    with pytest.raises(ValueError, match="needs a depthwise convolution"):
        depthwise_blocks(dw(32, 14, groups=8), MESH)


def test_layer_cost_of_a_depthwise_layer_off_the_mesh_is_its_blocks():
    shape = dw(40, 14, stride=2, batch=2)
    cost = layer_cost(shape, PLAIN)
    parts = [(layer_cost(s, PLAIN), n) for s, n in depthwise_blocks(shape, PLAIN)]
    assert not cost.mesh
    assert cost.cycles == sum(c.cycles * n for c, n in parts)
    assert cost.macs == shape.macs == 2 * 40 * 7 * 7 * 9


def test_mesh_fits_only_maps_its_halves_hold():
    from planner.dwcost import mesh_fits

    assert mesh_fits(dw(32, 112), MESH) and mesh_fits(dw(960, 7), MESH)
    assert not mesh_fits(dw(32, 112), PLAIN)                 # no mesh built
    assert mesh_fits(dw(32, 112, stride=2), MESH)
    assert not mesh_fits(dw(32, 112, stride=3), MESH)
    # 497 rows: one channel's h + R accumulator rows no longer fit a half (ACC_OVERFLOW); the
    # layer runs as channel blocks (in bands of rows: 247,009 outputs a channel are more than
    # the group table holds), and layer_cost says so
    assert mesh_fits(dw(2, 496), MESH) and not mesh_fits(dw(2, 497), MESH)
    assert not layer_cost(dw(2, 497), MESH).mesh



def test_mesh_refusal_names_the_first_reason():
    """Why a depthwise layer runs off the mesh, as tessera compile prints it."""
    from planner.dwcost import mesh_refusal

    assert mesh_refusal(dw(32, 112), MESH) is None
    assert mesh_refusal(dw(32, 112), PLAIN) == "the config has no depthwise mesh (dw_mesh=0)"
    assert mesh_refusal(dw(32, 112, kernel=5, pad=2), MESH) is None
    assert mesh_refusal(dw(32, 112, kernel=5, pad=2, stride=2), MESH) is None
    assert mesh_refusal(dw(32, 112, kernel=7, pad=3), MESH) is None
    assert mesh_refusal(dw(32, 112, kernel=9, pad=4), MESH) == \
        "9x9 kernel; the mesh walks 3x3 or 5x5 or 7x7"
    assert mesh_refusal(dataclasses.replace(dw(32, 112, kernel=5, pad=2), kernel_w=3), MESH) \
        == "5x3 kernel; the mesh walks 3x3 or 5x5 or 7x7"
    assert mesh_refusal(dw(32, 112, stride=3), MESH) == \
        "stride (3, 3); the mesh runs 1 or 2, the same on both axes"
    assert mesh_refusal(dw(32, 112, kernel=5, pad=2, stride=3), MESH) == \
        "stride (3, 3); the mesh runs 1 or 2, the same on both axes"
    assert mesh_refusal(dw(32, 112, pad=0), MESH) == \
        "padding (0, 0, 0, 0) (top, left, bottom, right) of a 112 x 112 map; the mesh pads a " \
        "3x3 kernel by 1 before and after, or with stride 2 by 0 before and 1 after an " \
        "even side (TF \"SAME\")"
    assert mesh_refusal(dw(32, 112, kernel=5, pad=1), MESH) == \
        "padding (1, 1, 1, 1) (top, left, bottom, right) of a 112 x 112 map; the mesh pads a " \
        "5x5 kernel by 2 before and after, or with stride 2 by 1 before and 2 after an " \
        "even side (TF \"SAME\")"
    assert mesh_refusal(dataclasses.replace(dw(32, 112, kernel=5, pad=2), pad_bottom=1,
                                            pad_right=1), MESH) == \
        "padding (2, 2, 1, 1) (top, left, bottom, right) of a 112 x 112 map; the mesh pads a " \
        "5x5 kernel by 2 before and after, or with stride 2 by 1 before and 2 after an " \
        "even side (TF \"SAME\")"
    assert mesh_refusal(dataclasses.replace(dw(32, 112, kernel=5, pad=4), dilation_h=2,
                                            dilation_w=2), MESH) == \
        "dilation (2, 2); the mesh runs 1"
    # a 5x5 tile needs a 6 x 6 mesh, a 7x7 one a 9 x 9 one (spec.desc.depthwise_kernels):
    # tiny's 4 x 4 runs 3x3 only, small's 8 x 8 3x3 and 5x5
    tiny = dataclasses.replace(PRESETS["tiny"], dw_mesh=1)
    assert mesh_refusal(dw(8, 12), tiny) is None
    assert mesh_refusal(dw(8, 12, kernel=5, pad=2), tiny) == \
        "5x5 kernel on a 4 x 4 mesh; its tiles and strips need at least 6 x 6 PEs"
    assert mesh_refusal(dw(8, 12, kernel=7, pad=3),
                        dataclasses.replace(PRESETS["small"], dw_mesh=1)) == \
        "7x7 kernel on a 8 x 8 mesh; its tiles and strips need at least 9 x 9 PEs"
    assert not layer_cost(dw(8, 12, kernel=5, pad=2), tiny).mesh
    with pytest.raises(ValueError, match="too small for 5x5 tiles"):
        strip_steps(1, 4, 4, x_addr=0, out_addr=0, rows=4, cols=4, kernel=5)
    assert mesh_refusal(dw(8, 12, kernel=5, pad=2),
                        dataclasses.replace(PRESETS["small"], dw_mesh=1)) is None
    # a channel multiplier is not depthwise: named
    assert mesh_refusal(dataclasses.replace(dw(32, 112), out_channels=64), MESH) == \
        "channel multiplier 2 (out_channels=64 of groups=32); the mesh runs one output channel " \
        "per input channel"
    from planner.dwcost import channel_multiplier
    assert channel_multiplier(dataclasses.replace(dw(32, 112), out_channels=96)) == 3
    assert channel_multiplier(dw(32, 112)) == 0 and channel_multiplier(dw(32, 112).gemm) == 0
    assert channel_multiplier(dataclasses.replace(dw(32, 112), groups=16, out_channels=64)) == 0
    assert mesh_refusal(dataclasses.replace(dw(32, 112), dilation_h=2, dilation_w=2,
                                            pad_top=2, pad_left=2, pad_bottom=2,
                                            pad_right=2), MESH) == \
        "dilation (2, 2); the mesh runs 1"
    assert mesh_refusal(dw(2, 497), MESH).startswith(
        "one channel's 497 x 497 map does not fit the mesh's buffers (ACC_OVERFLOW: ")
    assert mesh_refusal(dw(32, 112, groups=8), MESH) == "not a depthwise convolution"

def test_mesh_cost_is_one_record_per_chunk_of_quant_entries():
    from planner.dwcost import block_channels, channel_chunks

    cfg = dataclasses.replace(MESH, quant_entries=64)
    assert channel_chunks(144, cfg) == [(0, 64), (64, 128), (128, 144)]
    cost = layer_cost(dw(144, 14, batch=2), cfg)
    parts = [predict_depthwise(depthwise_descriptor(c1 - c0, 14, 14, cfg, out_bytes=4), cfg)
             for c0, c1 in channel_chunks(144, cfg)]
    assert cost.mesh and cost.cycles == 2 * sum(p.total_cycles for p in parts)
    # a block of a depthwise layer off the mesh is at most quant_entries channels too
    assert block_channels(dataclasses.replace(PLAIN, quant_entries=16, array_rows=32,
                                              array_cols=32, block_m=32, block_n=32,
                                              a_port_bytes_per_cycle=16,
                                              b_port_bytes_per_cycle=16,
                                              acc_buf_bytes=128 << 10)) == 16


def test_depthwise_blocks_hold_no_more_channels_than_the_offset_table_has_taps_for():
    """A block's K is its channels' taps: a 31 x 31 depthwise kernel (961 taps) takes blocks
    of 4 channels on fpga's 4,096 offsets (16 gave 15,376: layer_cost K-split the blocks,
    which the compiler does not, so the layer got cycles and ran on the host); a kernel whose
    own taps exceed the table cannot run."""
    from planner.dwcost import block_channels, depthwise_blocks

    fpga = PRESETS["fpga"]
    assert block_channels(fpga) == 16 and block_channels(fpga, 961) == 4
    big = ConvShape(batch=2, in_channels=18, height=20, width=20, out_channels=18, kernel_h=31,
                    kernel_w=31, pad_top=15, pad_left=15, pad_bottom=15, pad_right=15,
                    groups=18)
    blocks = depthwise_blocks(big, fpga)
    assert [(b.in_channels, n) for b, n in blocks] == [(4, 8), (2, 2)]
    cost = layer_cost(big, fpga)
    assert cost.k_parts == 1 and cost.cycles == sum(layer_cost(b, fpga).cycles * n
                                                    for b, n in blocks)
    tiny = PRESETS["tiny"]
    huge = dataclasses.replace(big, kernel_h=33, kernel_w=33, pad_top=16, pad_left=16,
                               pad_bottom=16, pad_right=16, height=40, width=40)
    with pytest.raises(ValueError, match="one channel's 1089 taps exceed "
                                         "conv_offset_entries=1024"):
        layer_cost(huge, tiny)


def test_depthwise_b_modes_of_kernels_and_strides():
    assert [depthwise_b_mode(k, s) for k in (3, 5, 7) for s in (1, 2)] == [
        B_MODE_DEPTHWISE, B_MODE_DEPTHWISE_S2, B_MODE_DEPTHWISE5, B_MODE_DEPTHWISE5_S2, 6, 7]
    with pytest.raises(ValueError, match="kernel=9, stride=1: the mesh runs kernels"):
        depthwise_b_mode(9, 1)
    with pytest.raises(ValueError, match="kernel=9 must be one of"):
        depthwise_descriptor(4, 8, 8, MESH, out_bytes=4, kernel=9)


@pytest.mark.parametrize("c, h, w, stride", [(144, 56, 56, 1), (40, 29, 23, 1),
                                             (40, 29, 23, 2), (144, 56, 56, 2), (1152, 7, 7, 1),
                                             (3, 1, 5, 1)])
def test_5x5_layer_cost_is_the_strip_model_of_5x5_tiles(c, h, w, stride):
    """A 5x5 pad-2 depthwise layer on the mesh: b_mode 4 (5 with stride 2), its MAC-active
    cycles 25 taps a tile of spec.dwmesh.strip_steps(kernel=5) (whole-mesh tiles of 12 x 12
    outputs on the 16x16, 14 x 12 in row passes at 56 x 56; stride 2 the same
    tiles and a quarter of the outputs stored), its
    loads the strips' rows plus seven weight arrays through the A port; layer_cost is that
    prediction, its MACs 25 per output."""
    shape = dataclasses.replace(dw(c, h, stride=stride, kernel=5, pad=2), width=w)
    d = depthwise_descriptor(c, h, w, MESH, out_bytes=4, b_addr=1 << 20, c_addr=1 << 24,
                             stride=stride, kernel=5)
    assert d.b_mode == (B_MODE_DEPTHWISE5 if stride == 1 else B_MODE_DEPTHWISE5_S2)
    assert check(d, MESH, out_bytes=4) == []
    p = predict_depthwise(d, MESH)
    cost = layer_cost(shape, MESH)
    assert cost.mesh and cost.counters == p
    oh, ow = -(-h // stride), -(-w // stride)
    assert cost.macs == depthwise_macs(d) == 25 * c * oh * ow
    steps = strip_steps(c, h, w, x_addr=0, out_addr=0, rows=16, cols=16,
                        group=d.partition_m, stride=stride, kernel=5)
    tiles = [t for s in steps for t in s.tiles]
    # (in row passes, maps of the heights spec.dwmesh.row_passes takes: 14 output rows)
    # (stride 2 on maps of a multiple of 4 rows above 12: row phases, 14 stride-2 rows a tile;
    # 56 x 56: row and column phases, four fills a tile)
    phases = row_phases(h, rows=16, stride=stride, kernel=5)
    cph = col_phases(h, w, rows=16, cols=16, stride=stride, kernel=5)
    passes = not phases and row_passes(h, rows=16, kernel=5)
    assert all(t.kernel == 5 and t.th <= (14 if passes or phases else 12)
               and bool(t.phase1) == (passes or phases) and t.passes == passes
               and t.cphases == cph for t in tiles)
    assert p.mac_active_cycles == 25 * len(tiles)
    weights = 7 * -(-4 * c // MESH.a_beat_bytes) * MESH.a_beat_bytes
    assert p.rd_a_bytes == sum(s.a_load.beats for s in steps) * MESH.a_beat_bytes + weights
    assert p.rd_b_bytes == sum(s.b_load.beats for s in steps) * MESH.b_beat_bytes
    assert p.wr_c_bytes == sum(s.out_rows for s in steps) * MESH.c_beat_bytes
    # stride 2 computes the stride-1 tiles and stores a quarter, or in row phases only the
    # stride-2 rows (half the taps), in row and column phases only the stride-2 outputs (a
    # quarter of the taps, 144 x 56 x 56)
    if stride == 2:
        one = predict_depthwise(dataclasses.replace(d, b_mode=B_MODE_DEPTHWISE5,
                                                    c_stride=4 * h * w), MESH)
        assert (4 * p.mac_active_cycles <= one.mac_active_cycles if cph else
                2 * p.mac_active_cycles == one.mac_active_cycles if phases else
                one.mac_active_cycles == p.mac_active_cycles)
        assert p.wr_c_bytes < one.wr_c_bytes


def test_5x5_layers_load_seven_weight_arrays():
    """The parameter loads of a 5x5 layer: seven weight arrays through the A port where a 3x3
    layer loads three (spec.desc.depthwise_arrays), each a burst of 4 m bytes and its control
    cycles; the image's dry run loads none of them (since session 42: it loads only the
    multipliers and shifts, the arrays the check pass has rules for)."""
    m, cfg = 100, MESH
    t = _Timing(cfg, DEFAULT_CONSTANTS)
    beats = -(-4 * m // cfg.a_beat_bytes)
    none = PostLoad(bias=False, requant=False)
    three = param_load_cycles(m, none, cfg, weight_arrays=3)
    seven = param_load_cycles(m, none, cfg, weight_arrays=7)
    assert seven.total - three.total == 4 * (t.load_a(beats) + DEFAULT_CONSTANTS.param_ctrl_cycles)
    assert (three.read_a, seven.read_a) == (3 * beats * cfg.a_beat_bytes,
                                            7 * beats * cfg.a_beat_bytes)
    assert seven.load_a - three.load_a == 4 * t.load_a(beats)
    full = PostLoad(bias=True, requant=True)
    assert param_load_cycles(m, full, cfg, weight_arrays=7).total > \
        param_load_cycles(m, full, cfg, weight_arrays=3).total
    # a record without weights skips a 3x3 layer's three slots, as before the 5x5 and 7x7
    # arrays existed (hw.params.ParamLoader walks at least three): on a config whose B
    # chain is shorter than that (no post-processing) the A chain's skips are the loads
    none_gemm = param_load_cycles(m, none, cfg)
    assert none_gemm.total == 3 * DEFAULT_CONSTANTS.param_skip_cycles + \
        DEFAULT_CONSTANTS.param_end_cycles
    assert image_overhead_cycles(0, [(m, full, 7)], cfg) == \
        image_overhead_cycles(0, [(m, full, 3)], cfg) == \
        image_overhead_cycles(0, [(m, full)], cfg) == \
        image_overhead_cycles(0, [(m, None)], cfg) + \
        param_load_cycles(m, PostLoad(bias=False, requant=True), cfg).total
    # (an int32 layer's check pass loads nothing, bias or not)
    assert image_overhead_cycles(0, [(m, PostLoad(bias=True, requant=False), 3)], cfg) == \
        image_overhead_cycles(0, [(m, None)], cfg)
    d3 = depthwise_descriptor(m, 20, 20, cfg, out_bytes=4)
    d5 = depthwise_descriptor(m, 20, 20, cfg, out_bytes=4, kernel=5)
    assert [depthwise_arrays(d.b_mode) for d in (d3, d5)] == [3, 7]
    assert predict_depthwise(d5, cfg).rd_a_bytes - predict_depthwise(d3, cfg).rd_a_bytes == \
        seven.read_a - three.read_a
    with pytest.raises(ValueError, match="weight_arrays=7 must be 0, or one of \\[3, 7, 13\\]"):
        param_load_cycles(m, none, PLAIN, weight_arrays=7)
    with pytest.raises(ValueError, match="weight_arrays=4 must be 0, or one of"):
        param_load_cycles(m, none, cfg, weight_arrays=4)


#: EfficientNet-B0 / MobileNet-V3-shaped 5x5 and ConvNeXt-T-shaped 7x7 depthwise layers
#: (kernel, channels, map, stride) on the 16x16 default with the mesh: the model's MAC
#: utilisation (whole-mesh tiles of 12 x 12 outputs in 33 beats for 5x5, 10 x 10 in 57 for
#: 7x7; 56-, 28- and 14-row maps in row passes, spec.dwmesh.row_passes: 14 x 12 outputs a
#: 40-beat tile, 14 x 10 a 71-beat one; stride 2 the stride-1 tiles, a quarter stored, or a
#: 5x5 one of 56 rows in row phases: 14 stride-2 rows a 40-beat tile; a 14 x 14 5x5 map one
#: 33-beat tile a channel, spec.dwmesh.one_strip and one_tile: 23.5% and 5.9% in two strips
#: of 40-beat tiles in row passes until session 40; a stride-2 7x7 one of a multiple of 4 rows
#: above 13 in row phases, 14 stride-2 rows a 71-beat tile, 8.7% before session 40; 7 x 7
#: maps two channels a 47- or 78-beat tile, the window's rows two a fill, StripTile.pairs:
#: 13.8% and 15.4% one channel a tile until session 41; a stride-2 14 x 14 5x5 map in row
#: phases two channels a 40-beat tile, phase_halves: 13.6% as the stride-1 tile until session
#: 41; a stride-2 56 x 56 5x5 map in row and column phases, spec.desc.col_phases: 14 x 14
#: outputs a 53-beat tile back to back, 19.1% in row phases until session 42). As
#: channel blocks they ran at 0.9-5.2%; without the row passes (session 37) at 37.7%, 25.9%,
#: 14.6%, 13.8%, 9.4%, 3.7% (5x5) and 29.5%, 29.2%, 16.2%, 15.4%, 7.3% (7x7).
@pytest.mark.parametrize("kernel, c, h, stride, at_least", [
    (5, 144, 56, 1, 0.38), (5, 240, 28, 1, 0.31), (5, 672, 14, 1, 0.53), (5, 1152, 7, 1, 0.18),
    (5, 144, 56, 2, 0.34), (5, 672, 14, 2, 0.20),
    (7, 96, 56, 1, 0.35), (7, 192, 28, 1, 0.34), (7, 384, 14, 1, 0.25), (7, 768, 7, 1, 0.21),
    (7, 192, 28, 2, 0.17)])
def test_big_kernel_depthwise_utilisation(kernel, c, h, stride, at_least):
    shape = dw(c, h, stride=stride, kernel=kernel, pad=kernel // 2)
    cost = layer_cost(shape, MESH)
    assert cost.mesh
    util = cost.macs / (MESH.macs_per_cycle * cost.cycles)
    assert at_least <= util < at_least + 0.01
    plain = layer_cost(shape, PLAIN)
    assert not plain.mesh and plain.cycles > 3 * cost.cycles
    group = depthwise_descriptor(c, h, h, MESH, out_bytes=4, stride=stride,
                                 kernel=kernel).partition_m
    tiles = [t for s in strip_steps(c, h, h, x_addr=0, out_addr=0, stride=stride,
                                    kernel=kernel, group=group) for t in s.tiles]
    # (every map but the 7 x 7 ones and the 14 x 14 5x5 ones, one tile a channel, in row
    # passes: a second fill, a third for 7x7; and the stride-2 14 x 14 5x5 one in row phases)
    two = h != 7 and ((h, kernel) != (14, 5) or stride == 2)
    # (the stride-2 56 x 56 5x5 one in row and column phases: four fills)
    cph = col_phases(h, h, rows=16, cols=16, stride=stride, kernel=kernel)
    assert cph == ((kernel, h, stride) == (5, 56, 2))
    assert all(t.cphases == cph and bool(t.phase3) == cph for t in tiles)
    assert all(bool(t.phase1) == two and bool(t.phase2) == (two and (kernel == 7 or cph))
               for t in tiles)


def test_kernel_refusal_names_kernels_and_mesh_sizes():
    """The mesh walks 3x3, 5x5 and 7x7 windows; a 5x5 tile needs a 6 x 6 mesh and a 7x7 one
    a 9 x 9 mesh (spec.desc.depthwise_kernels), so tiny's 4 x 4 with dw_mesh runs 3x3 only."""
    from planner.dwcost import kernel_refusal

    tiny = dataclasses.replace(PRESETS["tiny"], dw_mesh=1)
    assert kernel_refusal(3, MESH) is None and kernel_refusal(5, MESH) is None
    assert kernel_refusal(3, tiny) is None
    assert kernel_refusal(5, tiny) == "5x5 kernel on a 4 x 4 mesh; its tiles and strips need " \
        "at least 6 x 6 PEs"
    assert kernel_refusal(7, MESH) is None
    assert kernel_refusal(9, MESH) == "9x9 kernel; the mesh walks 3x3 or 5x5 or 7x7"
    assert kernel_refusal(3, PLAIN) == "the config has no depthwise mesh (dw_mesh=0)"
    with pytest.raises(ValueError, match="too small for 5x5 tiles"):
        strip_steps(1, 4, 4, x_addr=0, out_addr=0, rows=4, cols=4, kernel=5)
    strip_steps(1, 4, 4, x_addr=0, out_addr=0, rows=6, cols=6, kernel=5)


def test_odd_b_modes_of_depthwise_b_mode_and_depthwise_descriptor():
    """Stride 2 plus B_MODE_ODD_ROWS (8) / B_MODE_ODD_COLS (16) (the top / left pad one less,
    TF "SAME"); refused with stride 1. predict_depthwise lists the depthwise b_modes, no longer
    a range."""
    assert [depthwise_b_mode(k, 2, odd_rows=r, odd_cols=c) for k in (3, 5, 7)
            for r, c in ((True, False), (False, True), (True, True))] == [
        11, 19, 27, 13, 21, 29, 15, 23, 31]
    assert depthwise_b_mode(5, 2, odd_rows=False, odd_cols=False) == B_MODE_DEPTHWISE5_S2
    for kwargs in (dict(odd_rows=True), dict(odd_cols=True)):
        with pytest.raises(ValueError, match=r"depthwise_b_mode: odd_rows=\w+, odd_cols=\w+ "
                                             r"need stride 2, not stride=1"):
            depthwise_b_mode(3, 1, **kwargs)
        with pytest.raises(ValueError, match="need stride 2, not stride=1"):
            depthwise_descriptor(4, 8, 8, MESH, out_bytes=4, **kwargs)
    d = depthwise_descriptor(40, 28, 15, MESH, out_bytes=1, stride=2, kernel=5, odd_rows=True,
                             b_addr=1 << 20, c_addr=1 << 24)
    assert d.b_mode == B_MODE_DEPTHWISE5_S2 | B_MODE_ODD_ROWS and depthwise_odd(d.b_mode) == \
        (True, False)
    assert d.c_stride == 14 * 8 and check(d, MESH, out_bytes=1) == []
    with pytest.raises(ValueError, match=r"b_mode one of \[2, 3, 4, 5, 6, 7, 11, 13, 15, 19, "
                                         r"21, 23, 27, 29, 31\]\), not b_mode=1"):
        predict_depthwise(dataclasses.replace(d, b_mode=1), MESH)


def tf_same(c, h, w, kernel=3, stride=2):
    """A depthwise layer with TF/Keras "SAME" padding: of stride 2, ``p - 1`` before and ``p``
    after an even side, ``(p, p)`` on an odd one; of stride 1, ``(p, p)``."""
    p = (kernel - 1) // 2
    top = p - 1 if stride == 2 and h % 2 == 0 else p
    left = p - 1 if stride == 2 and w % 2 == 0 else p
    return ConvShape(batch=1, in_channels=c, height=h, width=w, out_channels=c, kernel_h=kernel,
                     kernel_w=kernel, stride_h=stride, stride_w=stride, pad_top=top,
                     pad_left=left, pad_bottom=p, pad_right=p, groups=c)


@pytest.mark.parametrize("kernel", [3, 5, 7])
def test_mesh_shape_takes_tf_same_padding_of_stride_2_on_even_sides(kernel):
    """Per axis the mesh takes (p, p), or with stride 2 on an even side (p - 1, p) (TF "SAME":
    the stride-1 results' odd rows / columns); mesh_odd says which axes."""
    p = (kernel - 1) // 2
    for h, w, odd in ((56, 56, (True, True)), (56, 15, (True, False)), (15, 56, (False, True)),
                      (15, 15, (False, False))):
        shape = tf_same(8, h, w, kernel)
        assert mesh_shape(shape) and mesh_odd(shape) == odd, (h, w)
        assert mesh_refusal(shape, MESH) is None
        assert (shape.out_h, shape.out_w) == (-(-h // 2), -(-w // 2))
    assert mesh_pads(kernel, 2, 56) == ((p, p), (p - 1, p))
    assert mesh_pads(kernel, 2, 15) == mesh_pads(kernel, 1, 56) == ((p, p),)
    assert mesh_odd(tf_same(8, 56, 56, kernel, stride=1)) == (False, False)
    refused = [
        dataclasses.replace(tf_same(8, 56, 56, kernel), stride_h=1, stride_w=1),   # stride 1
        dataclasses.replace(tf_same(8, 56, 56, kernel), pad_top=p, pad_bottom=p - 1),
        dataclasses.replace(tf_same(8, 56, 56, kernel), pad_left=p, pad_right=p - 1),
        dataclasses.replace(tf_same(8, 56, 55, kernel), pad_left=p - 1),           # odd width
        dataclasses.replace(tf_same(8, 55, 56, kernel), pad_top=p - 1),            # odd height
    ]
    for shape in refused:
        assert not mesh_shape(shape)
        assert mesh_refusal(shape, MESH).startswith(
            f"padding ({shape.pad_top}, {shape.pad_left}, {shape.pad_bottom}, "
            f"{shape.pad_right}) (top, left, bottom, right) of a {shape.height} x "
            f"{shape.width} map; the mesh pads a {kernel}x{kernel} kernel by {p} before and "
            f"after, or with stride 2 by {p - 1} before and {p} after an even side")
        with pytest.raises(ValueError, match="mesh_odd needs a convolution the depthwise mesh"):
            mesh_odd(shape)


#: EfficientNet-shaped stride-2 layers with Keras "SAME" padding (and one of an odd width: odd
#: columns kept only); the test prints the cycles on the mesh and as channel blocks.
@pytest.mark.parametrize("c, h, w, kernel", [(144, 56, 56, 3), (96, 112, 112, 3),
                                             (672, 14, 14, 3), (40, 28, 15, 3),
                                             (144, 56, 56, 5), (96, 56, 56, 7)])
def test_tf_same_stride_2_costs_the_odd_strip_model(c, h, w, kernel):
    """A TF "SAME" stride-2 layer costs predict_depthwise of its odd b_mode: the strips of
    strip_steps(odd_rows=, odd_cols=) (for 3x3 on a tall map in row phases, as the symmetric
    layer: the same cycles as its symmetric twin), at least twice as cheap as the dense
    channel blocks the planner ran it as when it refused the padding."""
    shape = tf_same(c, h, w, kernel)
    odd_rows, odd_cols = mesh_odd(shape)
    cost = layer_cost(shape, MESH)
    d = depthwise_descriptor(c, h, w, MESH, out_bytes=4, b_addr=1 << 20, c_addr=1 << 24,
                             stride=2, kernel=kernel, odd_rows=odd_rows, odd_cols=odd_cols)
    assert check(d, MESH, out_bytes=4) == []
    p = predict_depthwise(d, MESH)
    assert cost.mesh and cost.counters == p
    assert cost.macs == kernel ** 2 * c * shape.out_h * shape.out_w
    steps = strip_steps(c, h, w, x_addr=0, out_addr=0, rows=16, cols=16, group=d.partition_m,
                        stride=2, kernel=kernel, odd_rows=odd_rows, odd_cols=odd_cols)
    tiles = [t for s in steps for t in s.tiles]
    assert p.mac_active_cycles == kernel ** 2 * len(tiles)
    phases = row_phases(h, rows=16, stride=2, kernel=kernel)
    # (two fills a tile or more: 3x3 and 5x5 row phases, or the row passes)
    two = phases or row_passes(h, rows=16, kernel=kernel)
    assert all(bool(t.phase1) == two for t in tiles) and (phases or h < 28 or kernel > 3)
    twin = depthwise_descriptor(c, h, w, MESH, out_bytes=4, b_addr=1 << 20, c_addr=1 << 24,
                                stride=2, kernel=kernel)
    assert p == predict_depthwise(twin, MESH)
    assert p.rd_b_bytes == sum(s.b_load.beats for s in steps) * MESH.b_beat_bytes
    assert p.wr_c_bytes == sum(s.out_rows for s in steps) * MESH.c_beat_bytes
    blocks = sum(layer_cost(sub, MESH).cycles * n for sub, n in depthwise_blocks(shape, MESH))
    print(f"{c}x{h}x{w} {kernel}x{kernel} TF SAME stride 2: {cost.cycles} cycles on the mesh, "
          f"{blocks} as channel blocks ({blocks / cost.cycles:.2f}x)")
    assert 2 * cost.cycles <= blocks


#: MobileNet-V2's depthwise layers (channels, map, stride), requantised with bias as a network
#: runs them.
MOBILENET_V2_DW = ((32, 112, 1), (96, 112, 2), (144, 56, 1), (144, 56, 2), (192, 28, 1),
                   (192, 28, 2), (384, 14, 1), (576, 14, 1), (576, 14, 2), (960, 7, 1))
REQUANT = PostLoad(bias=True, requant=True)


def test_port_bound_counts_every_input_and_parameter_byte_once():
    """Issue 18's "stride 2 >= 25%": on default's two 16 B/cycle ports no dataflow passes
    25.06% on the 576 x 14 x 14 layer once its 24 parameter bytes a channel are read, and a
    7 x 7 map's stride-2 layer cannot reach 25% at all (docs/architecture.md)."""
    d = depthwise_descriptor(576, 14, 14, MESH, out_bytes=1, stride=2)
    ports = MESH.a_port_bytes_per_cycle + MESH.b_port_bytes_per_cycle
    assert port_bound(d, MESH, post=REQUANT) == 576 * 441 / (256 * 576 * (196 + 24) / ports)
    assert 0.25 < port_bound(d, MESH, post=REQUANT) < 0.2507
    assert port_bound(d, MESH) == 576 * 441 / (256 * 576 * (196 + 12) / ports)
    d7 = depthwise_descriptor(960, 7, 7, MESH, out_bytes=1, stride=2)
    assert port_bound(d7, MESH, post=REQUANT) < 0.25
    # without the parameter bytes it is spec.dwmesh.input_bound; stride 1 is compute-bound
    for c, h, s in MOBILENET_V2_DW:
        d = depthwise_descriptor(c, h, h, MESH, out_bytes=1, stride=s)
        assert port_bound(d, MESH) < input_bound(h, h, stride=s, bytes_per_cycle=ports) or \
            port_bound(d, MESH) == 1.0
    assert port_bound(depthwise_descriptor(32, 112, 112, MESH, out_bytes=1), MESH) == 1.0


@pytest.mark.parametrize("c, h, stride", MOBILENET_V2_DW)
def test_port_bound_is_above_the_mesh_model(c, h, stride):
    d = depthwise_descriptor(c, h, h, MESH, out_bytes=1, stride=stride)
    cost = predict_depthwise(d, MESH, post=REQUANT)
    assert depthwise_macs(d) / (MESH.macs_per_cycle * cost.total_cycles) < \
        port_bound(d, MESH, post=REQUANT)


def test_port_bound_refuses_a_gemm_descriptor():
    d = dataclasses.replace(depthwise_descriptor(8, 8, 8, MESH, out_bytes=1), b_mode=0)
    with pytest.raises(ValueError, match="port_bound needs a depthwise descriptor"):
        port_bound(d, MESH)
