"""ImageBuilder.depthwise: the image a depthwise layer on the mesh builds, validated, run by the
emulator bit-exactly against spec.golden, its prediction the cycle model's."""

import dataclasses

import numpy as np
import pytest

from firmware.builder import ImageBuilder, Requant, image_overhead
from firmware.emulator import run_image
from firmware.image import decode, encode, validate
from planner.cost import PostLoad
from planner.dwcost import predict_depthwise
from spec.config import PRESETS
from spec.desc import B_MODE_DEPTHWISE, ErrorCode
from spec.golden import conv2d_int8, requantize
from spec.layouts import OpKind

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
