"""ImageBuilder.depthwise: the image a depthwise layer on the mesh builds, validated, run by the
emulator bit-exactly against spec.golden, its prediction the cycle model's."""

import dataclasses

import numpy as np
import pytest

from firmware.builder import ImageBuilder, Requant, image_overhead
from firmware.emulator import run_image, zeroed_memory
from firmware.image import decode, encode, reseal, validate
from planner.cost import PostLoad, image_overhead_cycles
from planner.dwcost import depthwise_b_mode, predict_depthwise
from spec.config import PRESETS
from spec.desc import (B_MODE_DEPTHWISE, B_MODE_DEPTHWISE5, B_MODE_DEPTHWISE5_S2, ErrorCode,
                       depthwise_odd, depthwise_weight_words)
from spec.golden import conv2d_int8, requantize
from spec.layouts import LAYER_WORDS, OpKind, SectionKind

CFG = dataclasses.replace(PRESETS["small"], dw_mesh=1)


@pytest.mark.parametrize("c,h,w,pad,int8", [(5, 12, 13, -128, True), (3, 7, 9, 3, False),
                                            (2, 1, 4, 0, True)])
def test_depthwise_image_runs_on_the_emulator(c, h, w, pad, int8):
    rng = np.random.default_rng(c * 100 + h + w)
    x = rng.integers(-128, 128, (c, h, w)).astype(np.int8)
    wt = rng.integers(-128, 128, (c, 1, 3, 3)).astype(np.int8)
    bias = rng.integers(-5000, 5000, c).astype(np.int32)
    rq = Requant(multiplier=rng.integers(1 << 29, 1 << 31, c).astype(np.int32),
                 shift=rng.integers(0, 12, c).astype(np.int32), zero_point=-7) if int8 else None
    b = ImageBuilder(CFG, image_addr=0x1000, data_addr=CFG.dram_bytes // 2)
    ob = 1 if int8 else 4
    x_addr, y_addr = b.buffer("x", c * h * w), b.buffer("y", ob * c * h * w)
    b.depthwise("dw", weights=wt, h=h, w=w, x_addr=x_addr, out_addr=y_addr, pad_value=pad,
                bias=bias, requant=rq)
    blob, built = b.build()
    assert validate(blob, CFG) == []
    layer = decode(blob).layers[0]
    assert layer.op_kind == OpKind.DEPTHWISE and layer.desc.b_mode == B_MODE_DEPTHWISE
    assert layer.pad_value == pad and layer.a_crc == 0
    predicted = predict_depthwise(layer.desc, CFG, post=PostLoad(bias=True, requant=int8))
    assert built[0].predicted_cycles == predicted.total_cycles
    assert image_overhead(blob, CFG) > 0
    mem = bytearray(CFG.dram_bytes)
    mem[0x1000:0x1000 + len(blob)] = blob
    mem[x_addr:x_addr + x.size] = x.tobytes()
    result = run_image(mem, 0x1000, CFG)
    assert result.error == ErrorCode.NONE
    padded = np.pad(x, ((0, 0), (1, 1), (1, 1)), constant_values=pad)
    acc = conv2d_int8(padded[None], wt, groups=c)[0].reshape(c, h * w)
    if int8:
        want = requantize(acc, multiplier=rq.multiplier, shift=rq.shift, bias=bias,
                          zero_point=-7).astype(np.int8)
        got = np.frombuffer(bytes(mem[y_addr:y_addr + c * h * w]), np.int8).reshape(c, -1)
    else:
        want = (acc.astype(np.int64) + bias[:, None]).astype(np.int32)
        got = np.frombuffer(bytes(mem[y_addr:y_addr + 4 * c * h * w]), "<i4").reshape(c, -1)
    np.testing.assert_array_equal(got, want)


def test_depthwise_a_crc_is_not_checked():
    # the hardware does not check a depthwise layer's a_crc; neither do the validator and the
    # emulator
    b = ImageBuilder(CFG, image_addr=0x1000, data_addr=CFG.dram_bytes // 2)
    b.depthwise("dw", weights=np.ones((2, 3, 3), np.int8), h=4, w=4,
                x_addr=b.buffer("x", 32), out_addr=b.buffer("y", 128))
    blob, _ = b.build()
    image = decode(blob)
    patched = encode(dataclasses.replace(image, layers=(dataclasses.replace(
        image.layers[0], a_crc=0x1234),)))
    assert validate(patched, CFG) == []


def _taps_reference(x, wt, pad_value, stride):
    """The depthwise convolution as a sum of shifted maps, one a tap (independent of
    conv2d_int8): ``x`` (C, h, w), ``wt`` (C, k, k), pad ``(k - 1) / 2`` of ``pad_value``."""
    c, h, w = x.shape
    k = wt.shape[-1]
    p = (k - 1) // 2
    xp = np.full((c, h + 2 * p, w + 2 * p), pad_value, np.int64)
    xp[:, p:p + h, p:p + w] = x
    oh, ow = -(-h // stride), -(-w // stride)
    acc = np.zeros((c, oh, ow), np.int64)
    for dy in range(k):
        for dx in range(k):
            acc += wt[:, dy, dx, None, None].astype(np.int64) * \
                xp[:, dy:dy + stride * oh:stride, dx:dx + stride * ow:stride]
    assert np.abs(acc).max(initial=0) <= k * k * 128 * 128      # no int32 wrap
    return acc.reshape(c, oh * ow).astype(np.int32)


MESH_SMALL = CFG
DEFAULT = PRESETS["default"]


@pytest.mark.parametrize("cfg, c, h, w, stride, pad, int8, groups, kernel", [
    (MESH_SMALL, 11, 30, 21, 1, -128, True, 2, 5),      # 8 channels a step, 6 column strips
    (MESH_SMALL, 9, 29, 13, 2, 3, False, 9, 5),         # odd h, stride 2: a channel a step
    (MESH_SMALL, 20, 14, 9, 2, -5, True, 2, 5),
    (DEFAULT, 40, 29, 23, 1, 7, False, 3, 5),           # odd h, channels stacked
    (DEFAULT, 37, 30, 45, 2, -128, True, 3, 5),
    (DEFAULT, 6, 7, 7, 1, 100, True, 1, 5),
    (DEFAULT, 3, 1, 5, 1, 0, False, 1, 5),              # a one-row map
    (DEFAULT, 2, 3, 2, 2, 127, True, 2, 5),
    # 7x7 kernels (pad 3, thirteen arrays; a mesh of at least 9 x 9: default)
    (DEFAULT, 40, 29, 23, 1, 7, False, 3, 7),
    (DEFAULT, 37, 30, 45, 2, -128, True, 3, 7),
    (DEFAULT, 6, 7, 7, 1, 100, True, 1, 7),
    (DEFAULT, 3, 1, 5, 2, 0, False, 3, 7),               # odd h, stride 2: a channel a step
], ids=["small-s1", "small-s2-odd", "small-s2", "default-s1-odd", "default-s2",
        "default-7x7", "one-row", "tiny-s2", "k7-s1-odd", "k7-s2", "k7-7x7", "k7-one-row-s2"])
def test_big_kernel_depthwise_image_runs_bit_exactly(cfg, c, h, w, stride, pad, int8, groups,
                                                     kernel):
    """ImageBuilder.depthwise with 5x5 or 7x7 weights: b_mode 4 or 6 (5 or 7 with stride 2),
    seven or thirteen weight arrays of taps 4t .. 4t + 3 in the QUANT section, the image valid
    and predicted by the cycle model; the golden device's output equals the grouped
    convolution with pad 2 or 3 of the pad value (full-range int8 data, int8 and int32
    outputs, several channel groups)."""
    rng = np.random.default_rng(c * 1000 + h * 10 + w + stride)
    x = rng.integers(-128, 128, (c, h, w)).astype(np.int8)
    wt = rng.integers(-128, 128, (c, 1, kernel, kernel)).astype(np.int8)
    x.flat[0], wt.flat[0], wt.flat[-1] = -128, -128, 127
    bias = rng.integers(-2**31, 2**31, c, dtype=np.int64).astype(np.int32)
    rq = Requant(multiplier=rng.integers(1 << 29, 1 << 31, c).astype(np.int32),
                 shift=rng.integers(-2, 14, c).astype(np.int32), zero_point=-7) if int8 else None
    image_addr = 0x1000
    b = ImageBuilder(cfg, image_addr=image_addr, data_addr=cfg.dram_bytes // 2)
    oh, ow = -(-h // stride), -(-w // stride)
    ob = 1 if int8 else 4
    x_addr, y_addr = b.buffer("x", c * h * w), b.buffer("y", ob * c * oh * ow)
    b.depthwise("dw", weights=wt, h=h, w=w, x_addr=x_addr, out_addr=y_addr, pad_value=pad,
                bias=bias, requant=rq, stride=stride)
    blob, built = b.build()
    assert validate(blob, cfg) == []
    image = decode(blob)
    layer = image.layers[0]
    d = layer.desc
    assert layer.op_kind == OpKind.DEPTHWISE and layer.pad_value == pad and layer.a_crc == 0
    assert d.b_mode == (B_MODE_DEPTHWISE5 if stride == 1 else B_MODE_DEPTHWISE5_S2) + \
        (kernel - 5)
    assert -(-c // d.partition_m) == groups
    # seven or thirteen u32 arrays of one word a channel, array t at a_addr + t a_stride
    n_arrays = -(-kernel * kernel // 4)
    quant = image.sections[SectionKind.QUANT]
    at = d.a_addr - image_addr - image.section_offsets()[SectionKind.QUANT][0]
    arrays = np.frombuffer(quant[at:at + n_arrays * d.a_stride],
                           "<u4").reshape(n_arrays, -1)[:, :c]
    want_words = np.array([depthwise_weight_words(wt[ch].reshape(-1)) for ch in range(c)])
    np.testing.assert_array_equal(arrays.T, want_words)
    predicted = predict_depthwise(d, cfg, post=PostLoad(bias=True, requant=int8))
    assert built[0].predicted_cycles == predicted.total_cycles
    assert built[0].macs == kernel * kernel * c * oh * ow
    crc_bytes = image.section_offsets()[SectionKind.WEIGHTS][0]
    assert image_overhead(blob, cfg) == image_overhead_cycles(
        crc_bytes, [(c, PostLoad(bias=True, requant=int8), n_arrays)], cfg)
    mem = zeroed_memory(cfg.dram_bytes)
    mem[image_addr:image_addr + len(blob)] = blob
    mem[x_addr:x_addr + x.size] = x.tobytes()
    result = run_image(mem, image_addr, cfg)
    assert result.error == ErrorCode.NONE
    acc = _taps_reference(x, wt[:, 0], pad, stride)
    p = kernel // 2
    padded = np.pad(x, ((0, 0), (p, p), (p, p)), constant_values=pad)
    np.testing.assert_array_equal(
        acc, conv2d_int8(padded[None], wt, stride=(stride, stride), groups=c)[0].reshape(c, -1))
    if int8:
        want = requantize(acc, multiplier=rq.multiplier, shift=rq.shift, bias=bias,
                          zero_point=-7).astype(np.int8)
        got = np.frombuffer(bytes(mem[y_addr:y_addr + c * oh * ow]), np.int8).reshape(c, -1)
    else:
        wide = acc + bias.astype(np.int64)[:, None]
        want = (((wide + 2**31) % 2**32) - 2**31).astype(np.int32)
        got = np.frombuffer(bytes(mem[y_addr:y_addr + 4 * c * oh * ow]), "<i4").reshape(c, -1)
    np.testing.assert_array_equal(got, want)
    # nothing written past the output
    assert not np.frombuffer(bytes(mem[y_addr + ob * c * oh * ow:y_addr + ob * c * oh * ow
                                       + 256]), np.uint8).any()


def test_5x5_weight_arrays_must_lie_in_the_crc_checked_part():
    """The validator and the golden device take a 5x5 layer's seven weight arrays
    (spec.desc.depthwise_arrays): a 3x3 image's record patched to b_mode 4 reaches four arrays
    further, past the part of the image its CRC covers, and is refused (BAD_WINDOW), as the
    3x3 record whose three arrays lie inside is not."""
    b = ImageBuilder(CFG, image_addr=0x1000, data_addr=CFG.dram_bytes // 2)
    c = 16
    b.depthwise("dw", weights=np.ones((c, 3, 3), np.int8), h=6, w=6,
                x_addr=b.buffer("x", c * 36), out_addr=b.buffer("y", 4 * c * 36))
    b.gemm("g", weights=np.ones((16, 16), np.int8), n=16, b_addr=b.buffer("gx", 256),
           b_stride=16, out_addr=b.buffer("gy", 4 * 256), out_stride=64)
    blob, _ = b.build()
    assert validate(blob, CFG) == []
    image = decode(blob)
    assert image.layers[0].desc.b_mode == B_MODE_DEPTHWISE
    rec = image.section_offsets()[SectionKind.LAYERS][0]
    at = rec + 4 * LAYER_WORDS["desc_b_mode"]
    patched = bytearray(blob)
    patched[at:at + 4] = (B_MODE_DEPTHWISE5).to_bytes(4, "little")
    patched = reseal(bytes(patched))
    problems = validate(patched, CFG)
    assert any("BAD_WINDOW: depthwise weights" in p and "CRC-checked part" in p
               for p in problems), problems
    mem = bytearray(CFG.dram_bytes)
    mem[0x1000:0x1000 + len(patched)] = patched
    assert run_image(mem, 0x1000, CFG).error == ErrorCode.BAD_WINDOW


@pytest.mark.parametrize("cfg, c, h, w, kernel, odd_rows, odd_cols, pad, int8", [
    (MESH_SMALL, 5, 12, 14, 3, True, True, -128, True),    # TF "SAME": pads (p - 1, p)
    (MESH_SMALL, 9, 12, 9, 3, True, False, 0, False),      # odd rows only (an odd width)
    (MESH_SMALL, 4, 7, 10, 5, False, True, 3, True),       # odd columns only (an odd height)
    (DEFAULT, 20, 28, 28, 3, True, True, 0, True),         # (symmetric: in row phases)
    (DEFAULT, 13, 30, 45, 5, True, False, 100, False),
    (DEFAULT, 6, 14, 14, 7, True, True, -7, True),
    (DEFAULT, 3, 2, 2, 7, True, True, 0, False),
    (DEFAULT, 5, 9, 20, 7, False, True, 0, True),
], ids=["3x3", "3x3-rows", "5x5-cols", "3x3-28", "5x5-rows", "7x7", "7x7-2x2", "7x7-cols"])
def test_tf_same_stride_2_depthwise_image_runs_bit_exactly(cfg, c, h, w, kernel, odd_rows,
                                                           odd_cols, pad, int8):
    """ImageBuilder.depthwise with odd_rows / odd_cols (stride 2, the top / left pad p - 1 on
    an even side, TF "SAME"): b_mode 3, 5 or 7 plus 8 / 16, the image valid and predicted by
    the cycle model of those strips; the golden device's output equals conv2d_int8 with pads
    (p - odd_rows, p - odd_cols, p, p) of the pad value (the input zero point), which with a
    nonzero pad value is the input padded with it, then convolved unpadded."""
    rng = np.random.default_rng(c * 1000 + h * 10 + w + kernel)
    x = rng.integers(-128, 128, (c, h, w)).astype(np.int8)
    wt = rng.integers(-128, 128, (c, 1, kernel, kernel)).astype(np.int8)
    x.flat[0], wt.flat[0], wt.flat[-1] = -128, -128, 127
    # (int8: scales that keep most outputs off the clamps, so that they tell the pads apart)
    bias = rng.integers(-5000, 5000, c).astype(np.int32)
    rq = Requant(multiplier=rng.integers(1 << 29, 1 << 31, c).astype(np.int32),
                 shift=rng.integers(11, 15, c).astype(np.int32), zero_point=-7) if int8 else None
    image_addr = 0x1000
    b = ImageBuilder(cfg, image_addr=image_addr, data_addr=cfg.dram_bytes // 2)
    oh, ow = -(-h // 2), -(-w // 2)
    ob = 1 if int8 else 4
    x_addr, y_addr = b.buffer("x", c * h * w), b.buffer("y", ob * c * oh * ow)
    b.depthwise("dw", weights=wt, h=h, w=w, x_addr=x_addr, out_addr=y_addr, pad_value=pad,
                bias=bias, requant=rq, stride=2, odd_rows=odd_rows, odd_cols=odd_cols)
    blob, built = b.build()
    assert validate(blob, cfg) == []
    d = decode(blob).layers[0].desc
    assert d.b_mode == depthwise_b_mode(kernel, 2) + 8 * odd_rows + 16 * odd_cols
    assert depthwise_odd(d.b_mode) == (odd_rows, odd_cols)
    predicted = predict_depthwise(d, cfg, post=PostLoad(bias=True, requant=int8))
    assert built[0].predicted_cycles == predicted.total_cycles
    assert built[0].macs == kernel * kernel * c * oh * ow
    mem = zeroed_memory(cfg.dram_bytes)
    mem[image_addr:image_addr + len(blob)] = blob
    mem[x_addr:x_addr + x.size] = x.tobytes()
    result = run_image(mem, image_addr, cfg)
    assert result.error == ErrorCode.NONE
    p = kernel // 2
    pads = (p - odd_rows, p - odd_cols, p, p)
    if pad == 0:
        acc = conv2d_int8(x[None], wt, stride=(2, 2), pads=pads, groups=c)[0]
    else:
        padded = np.pad(x, ((0, 0), (pads[0], p), (pads[1], p)), constant_values=pad)
        acc = conv2d_int8(padded[None], wt, stride=(2, 2), groups=c)[0]
    assert acc.shape == (c, oh, ow)
    acc = acc.reshape(c, -1)
    if int8:
        want = requantize(acc, multiplier=rq.multiplier, shift=rq.shift, bias=bias,
                          zero_point=-7).astype(np.int8)
        assert (np.abs(want.astype(np.int32)) < 127).mean() > 0.8
        got = np.frombuffer(bytes(mem[y_addr:y_addr + c * oh * ow]), np.int8).reshape(c, -1)
    else:
        want = acc + bias[:, None]
        got = np.frombuffer(bytes(mem[y_addr:y_addr + 4 * c * oh * ow]), "<i4").reshape(c, -1)
    np.testing.assert_array_equal(got, want)
    # the stride-1 results' odd rows / columns (the even ones are the symmetric layer's)
    full = np.pad(x, ((0, 0), (p, p), (p, p)), constant_values=pad)
    one = conv2d_int8(full[None], wt, groups=c)[0][:, odd_rows::2, odd_cols::2]
    np.testing.assert_array_equal(acc, one.reshape(c, -1))
    assert not np.frombuffer(bytes(mem[y_addr + ob * c * oh * ow:y_addr + ob * c * oh * ow
                                       + 256]), np.uint8).any()
