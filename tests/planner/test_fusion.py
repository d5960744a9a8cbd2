"""planner.fusion: chain detection, dependency derivation (against brute force, conv halos
included), capacity refusal, candidate choice. The RTL runs are in tests/sim/test_fusion.py."""

import dataclasses
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spec.config import PRESETS
from spec.golden import conv2d_int8
from firmware.chains import build_image, fusion_plan
from planner.fusion import (Block, Chain, ConvOp, Deps, FusionError, GemmOp, Node, blocks_of,
                            conv_input_range, dependencies, find_chains, fusible, local_bytes,
                            plan_fusion)
from planner.shapes import ConvShape

TINY = PRESETS["tiny"]


def conv(name, c, h, w, k, r=1, stride=1, pad=0, dil=1):
    return ConvOp(name, ConvShape(batch=1, in_channels=c, height=h, width=w, out_channels=k,
                                  kernel_h=r, kernel_w=r, stride_h=stride, stride_w=stride,
                                  pad_top=pad, pad_left=pad, pad_bottom=pad, pad_right=pad,
                                  dilation_h=dil, dilation_w=dil))


def bottleneck():
    """ResNet-50 res2 bottleneck: 1x1 -> 3x3 -> 1x1, and the residual add reading x."""
    a = conv("2a", 256, 56, 56, 64)
    b = conv("2b", 64, 56, 56, 64, r=3, pad=1)
    c = conv("2c", 64, 56, 56, 256)
    return [Node(a, "x", "ya"), Node(b, "ya", "yb"), Node(c, "yb", "yc")], (a, b, c)


# -- chains ----------------------------------------------------------------------------------------

def test_find_chains_fuses_3x3_into_1x1_and_refuses_1x1_into_3x3_with_reason():
    nodes, (a, b, c) = bottleneck()
    chains, refused = find_chains(nodes)
    assert chains == [Chain(b, c)]
    assert [(r.producer, r.consumer) for r in refused] == [("2a", "2b")]
    assert "gathers its B through tables" in refused[0].reason
    assert "dense B operands only" in refused[0].reason


def test_find_chains_gemm_pairs_and_pointwise_pairs():
    up, down = GemmOp("up", 3072, 768, 128), GemmOp("down", 768, 3072, 128)
    p1, p2 = conv("p1", 32, 7, 7, 64), conv("p2", 64, 7, 7, 16)
    chains, refused = find_chains([Node(up, "x", "h"), Node(down, "h", "y"),
                                   Node(p1, "y2", "z"), Node(p2, "z", "out")])
    assert chains == [Chain(up, down), Chain(p1, p2)] and refused == []


def test_find_chains_refuses_a_tensor_with_two_readers():
    up = GemmOp("up", 64, 32, 16)
    d1, d2 = GemmOp("d1", 8, 64, 16), GemmOp("d2", 8, 64, 16)
    chains, refused = find_chains([Node(up, "x", "h"), Node(d1, "h", "y1"),
                                   Node(d2, "h", "y2")])
    assert chains == []
    assert refused[0].producer == "up" and "feeds 2 layers (d1, d2)" in refused[0].reason


def test_find_chains_does_not_fuse_a_layer_twice():
    a, b, c = (GemmOp(n, 16, 16, 16) for n in "abc")
    chains, refused = find_chains([Node(a, "x", "t1"), Node(b, "t1", "t2"),
                                   Node(c, "t2", "y")])
    assert chains == [Chain(a, b)]
    assert refused[0].reason == "a layer of this pair is already fused with a neighbour"


@pytest.mark.parametrize("producer, consumer, text", [
    (GemmOp("p", 64, 32, 16), GemmOp("c", 8, 60, 16), "does not consume p's 64x16 output"),
    (conv("p", 3, 8, 8, 4), conv("c", 5, 8, 8, 2), "is not p's output 4x8x8"),
    (conv("p", 3, 8, 8, 4), conv("c", 4, 8, 8, 2, stride=2), "stride 2"),
    (GemmOp("p", 4, 4, 64), conv("c", 4, 8, 8, 2), "the layouts differ"),
    (ConvOp("p", ConvShape(batch=2, in_channels=3, height=8, width=8, out_channels=4,
                           kernel_h=1, kernel_w=1)), conv("c", 4, 8, 8, 2), "batch=2"),
])
def test_fusible_names_the_reason(producer, consumer, text):
    assert text in fusible(producer, consumer)


# -- dependencies against brute force --------------------------------------------------------------

def brute_rows(shape: ConvShape, lo: int, hi: int) -> set[int]:
    """Input rows output rows [lo, hi) touch: every tap of every output pixel, enumerated."""
    rows = set()
    for p in range(lo, hi):
        for r in range(shape.kernel_h):
            y = p * shape.stride_h - shape.pad_top + r * shape.dilation_h
            if 0 <= y < shape.height:
                rows.add(y)
    return rows


def _shape_or_none(h, r, stride, pad, dil):
    try:
        return ConvShape(batch=1, in_channels=2, height=h, width=5, out_channels=2, kernel_h=r,
                         kernel_w=1, stride_h=stride, pad_top=pad, pad_bottom=pad,
                         dilation_h=dil)
    except ValueError:                      # padding wider than the kernel, kernel too tall
        return None


conv_shapes = st.builds(_shape_or_none, st.integers(7, 40), st.sampled_from([1, 2, 3, 5, 7]),
                        st.integers(1, 3), st.integers(0, 3),
                        st.integers(1, 2)).filter(lambda s: s is not None)


@settings(max_examples=300, deadline=None)
@given(conv_shapes, st.data())
def test_conv_input_range_is_the_brute_force_bounding_box(shape, data):
    lo = data.draw(st.integers(0, shape.out_h - 1))
    hi = data.draw(st.integers(lo + 1, shape.out_h))
    touched = brute_rows(shape, lo, hi)
    first, last = conv_input_range(shape, lo, hi)
    if touched:
        assert (first, last) == (min(touched), max(touched) + 1)
    else:                                   # every tap lands in the padding
        assert first >= last


def test_dependencies_of_a_3x3_producer_carry_its_halo():
    nodes, (a, b, c) = bottleneck()
    chain = Chain(b, c)
    # the 1x1 consumer's rows 10..19 need the same producer rows, which read input rows 9..20
    assert dependencies(chain, Block(10, 20)) == Deps((10, 20), (9, 21))
    assert dependencies(chain, Block(0, 8)) == Deps((0, 8), (0, 9))       # top edge: the halo
    assert dependencies(chain, Block(50, 56)) == Deps((50, 56), (49, 56))


def test_dependencies_of_a_gemm_chain_are_the_block_tokens():
    chain = Chain(GemmOp("up", 3072, 768, 128), GemmOp("down", 768, 3072, 128))
    assert dependencies(chain, Block(32, 64)) == Deps((32, 64), (32, 64))


def test_dependencies_hold_under_perturbation():
    """Brute force on data: change every producer output row a consumer block does not depend
    on (and every input row outside the derived range); the block's output is unchanged."""
    rng = np.random.default_rng(0)
    p = conv("p", 3, 13, 6, 4, r=3, pad=1, stride=1)
    for consumer in (conv("c", 4, 13, 6, 2, r=3, pad=1), conv("c", 4, 13, 6, 2, r=3, stride=2),
                     conv("c", 4, 13, 6, 2)):
        chain = Chain(p, consumer)
        s1, s2 = p.shape, consumer.shape
        x = rng.integers(-128, 128, (1, 3, 13, 6)).astype(np.int8)
        w1 = rng.integers(-128, 128, (4, 3, 3, 3)).astype(np.int8)
        w2 = rng.integers(-128, 128, (2, 4, s2.kernel_h, s2.kernel_w)).astype(np.int8)

        def run(xx):
            h = conv2d_int8(xx, w1, pads=(1, 1, 1, 1))
            h8 = (h % 256 - 128).astype(np.int8)            # any int8 map of the producer
            return conv2d_int8(h8, w2, stride=(s2.stride_h, s2.stride_w),
                               pads=(s2.pad_top, s2.pad_left, s2.pad_bottom, s2.pad_right))

        base = run(x)
        for blk in blocks_of(chain, 2):
            deps = dependencies(chain, blk)
            y = x.copy()
            outside = [r for r in range(s1.height)
                       if not deps.producer_in[0] <= r < deps.producer_in[1]]
            y[:, :, outside, :] = rng.integers(-128, 128, y[:, :, outside, :].shape)
            got = run(y)
            assert np.array_equal(got[:, :, blk.lo:blk.hi], base[:, :, blk.lo:blk.hi]), blk


# -- capacity and the choice -----------------------------------------------------------------------

FFN = Chain(GemmOp("ffn.up", 3072, 768, 128), GemmOp("ffn.down", 768, 3072, 128))


def test_local_bytes_counts_every_producer_channel_in_whole_rows():
    assert local_bytes(FFN, 128, PRESETS["default"]) == 3072 * 128
    assert local_bytes(FFN, 20, PRESETS["default"]) == 3072 * 32       # rounded to lane groups
    nodes, (a, b, c) = bottleneck()
    assert local_bytes(Chain(b, c), 3, PRESETS["default"]) == 64 * 176   # 3 rows x 56, rounded


def test_plan_refuses_when_even_the_minimum_block_does_not_fit():
    cfg = dataclasses.replace(PRESETS["default"], local_buf_bytes=32 << 10)
    with pytest.raises(FusionError, match=r"cannot fuse ffn.up -> ffn.down: even the minimum "
                                          r"block \(16\) needs 49152 bytes of intermediate on "
                                          r"chip, more than local_buf_bytes=32768"):
        fusion_plan(FFN, cfg)


def test_plan_refuses_unservable_pairs_and_too_many_channels():
    nodes, (a, b, c) = bottleneck()
    with pytest.raises(FusionError, match="cannot fuse 2a -> 2b: 2b is a 3x3 convolution"):
        fusion_plan(Chain(a, b), TINY)
    wide = Chain(GemmOp("up", 300, 8, 16), GemmOp("down", 8, 300, 16))
    with pytest.raises(FusionError, match="up has 300 output channels, more than "
                                          "quant_entries=256"):
        fusion_plan(wide, TINY)


def test_plan_refuses_a_chain_beyond_the_device_memory_before_costing_it(capsys):
    """Costing builds an image per candidate: a chain whose tensors cannot all lie in the
    memory is refused first (it allocated 4 GB of placeholder weights, or ended in the
    builder's traceback)."""
    from firmware.chains import main

    huge = Chain(GemmOp("up", 16, 16, 1_000_000), GemmOp("down", 16, 16, 1_000_000))
    with pytest.raises(FusionError, match=r"cannot run up -> down: its input, weights, "
                                          r"intermediate and output need at least 48,000,512 "
                                          r"bytes of device memory, more than "
                                          r"dram_bytes=4,194,304"):
        fusion_plan(huge, TINY)
    assert main(["--gemm-chain", "4000,1000000,1000:4000"]) == 1
    assert "more than dram_bytes=2,147,483,648" in capsys.readouterr().out


def test_plan_takes_the_cheapest_block_that_fits_or_says_fusion_does_not_pay():
    cfg = dataclasses.replace(PRESETS["default"], local_buf_bytes=128 << 10)
    # blocks of 32 tokens reload both 2.4 MB weight matrices four times: slower than unfused
    with pytest.raises(FusionError, match=r"fusing ffn.up -> ffn.down does not pay on this "
                                          r"configuration: the best partition that fits "
                                          r"local_buf_bytes=131072 \(blocks of 32\)"):
        fusion_plan(FFN, cfg)
    plan = fusion_plan(FFN, cfg, require_gain=False)
    assert plan.chosen.predicted_cycles > plan.unfused_cycles
    refused = [c for c in plan.candidates if c.refused]
    fits = [c for c in plan.candidates if not c.refused]
    assert [c.block for c in refused] == [128, 64]
    assert "more than local_buf_bytes=131072" in refused[0].refused
    assert plan.chosen == min(fits, key=lambda c: (c.predicted_cycles, c.predicted_dram_bytes))
    assert plan.block == 32 and plan.chosen.local_bytes == 3072 * 32


def test_plan_default_config_keeps_the_whole_ffn_intermediate_on_chip():
    plan = fusion_plan(FFN, PRESETS["default"])
    assert [c.block for c in plan.candidates] == [128, 64, 32, 16]
    assert plan.block == 128
    # predicted: no more cycles than unfused, and at least the intermediate's write + read
    # bytes fewer on the memory ports
    assert plan.chosen.predicted_cycles <= plan.unfused_cycles
    assert plan.unfused_dram_bytes - plan.chosen.predicted_dram_bytes >= 2 * 3072 * 128


def test_block_sizes_halve_down_to_the_minimum_block():
    nodes, (a, b, c) = bottleneck()
    plan = fusion_plan(Chain(b, c), TINY, require_gain=False)
    assert [x.block for x in plan.candidates] == [56, 28, 14, 7, 4, 2, 1]
    assert all(x.refused and "local_buf_bytes=16384" in x.refused for x in plan.candidates
               if x.local_bytes > TINY.local_buf_bytes)


def test_plan_predictions_equal_the_real_images_even_when_layers_look_alike():
    """Placeholder data must not make blobs identical that real data keeps apart (equal channel
    counts give equal-sized parameter arrays): the plan's numbers are the real image's."""
    from tb.fusion import random_data

    chain = Chain(GemmOp("up", 40, 24, 20), GemmOp("down", 40, 40, 20))
    plan = fusion_plan(chain, TINY)
    data = random_data(chain, np.random.default_rng(0))
    assert build_image(chain, data, TINY, None).predicted_cycles == plan.unfused_cycles
    assert build_image(chain, data, TINY, plan.block).predicted_cycles == \
        plan.chosen.predicted_cycles


def test_plan_chooses_with_the_cost_it_is_given():
    """The planner's choice needs no image: any cost function decides. Here the mid-sized
    block is cheapest; unfused costs more than every block (the gain check passes), and a cost
    that makes fusing lose is refused with both numbers."""
    calls = []

    def cost(block):
        calls.append(block)
        return (0 if block is None else 100 + abs(block - 64), 7)

    def cheap(block):
        return 1_000 + (block or 0), 7

    chain = Chain(GemmOp("up", 64, 32, 128), GemmOp("down", 32, 64, 128))
    plan = plan_fusion(chain, PRESETS["small"], lambda b: (10_000, 7) if b is None else cost(b))
    assert plan.block == 64 and plan.unfused_cycles == 10_000
    assert None not in calls and 64 in calls and plan.chosen.predicted_cycles == 100
    with pytest.raises(FusionError, match="does not pay"):
        plan_fusion(chain, PRESETS["small"], lambda b: (1, 7) if b is None else cheap(b))


def test_plan_refuses_a_local_buffer_past_32_bit_addresses():
    cfg = dataclasses.replace(TINY, dram_addr_bits=32)
    with pytest.raises(FusionError, match=r"the local buffer at 0x100000000 is past the 32-bit "
                                          r"addresses descriptors hold \(dram_addr_bits=32; "
                                          r"fusion needs at most 31\)"):
        fusion_plan(FFN_TINY, cfg)


FFN_TINY = Chain(GemmOp("up", 45, 37, 29), GemmOp("down", 23, 45, 29))
