"""Firmware images (firmware.image), the image builder and the host runtime: every refusal
names the field and states the allowed range or value set."""

import asyncio
import dataclasses
import struct

import numpy as np
import pytest

from firmware.builder import ImageBuilder, Requant
from firmware.image import (BASE_ADDR_WORD, HEADER_BYTES, LAYER_RECORD_BYTES, Image, ImageError,
                            Layer, decode, encode, reseal, with_a_crcs)
from firmware.runtime import DeviceError, RunReport, Runtime
from spec.config import FORMAT_VERSION, PRESETS
from spec.desc import ErrorCode, GemmDescriptor
from spec.layouts import (HEADER_WORDS, IMAGE_MAGIC, LAYER_WORDS, STATS_BYTES, STATS_WORDS,
                          OpKind, OutFormat, PostMode, SectionKind)
from spec.record import layer_record
from spec.regmap import REG, STATUS_BITS

from .util import refused

CFG = PRESETS["tiny"]
DESC = GemmDescriptor(
    m=8, k=16, n=12, partition_m=8, partition_n=12, partition_k=16, tile_m=4, tile_n=4,
    outer_m=1, need_splitk=0, acc_buffer_needed=384, a_addr=0x1000, a_stride=8,
    b_addr=0x20000, b_stride=12, c_addr=0x30000, c_stride=48)
LAYER = dict(op_kind=OpKind.GEMM, desc=DESC, out_window_lo=0x30000, out_window_hi=0x30180)


def blob() -> bytes:
    return encode(Image(config_id=CFG.config_id, layers=(Layer(**LAYER),),
                        sections={SectionKind.WEIGHTS: bytes(128)}, base_addr=0x10000))


def patch(data: bytes, word: int, value: int, *, seal: bool = True) -> bytes:
    out = bytearray(data)
    struct.pack_into("<I", out, 4 * word, value & 0xFFFF_FFFF)
    return reseal(bytes(out)) if seal else bytes(out)


def layer_word(name: str) -> int:
    return (_header(blob())["section_layers_offset"] // 4) + LAYER_WORDS[name]


def _header(data: bytes) -> dict[str, int]:
    words = struct.unpack_from(f"<{len(HEADER_WORDS)}I", data)
    return {name: words[i] for name, i in HEADER_WORDS.items()}


# -- Layer / Image construction ----------------------------------------------------------------

@pytest.mark.parametrize("desc", [None, dataclasses.asdict(DESC), (1, 2)])
def test_layer_desc_type(desc):
    with refused(ImageError, f"Layer.desc must be a GemmDescriptor, not {desc!r}"):
        Layer(**{**LAYER, "desc": desc})


@pytest.mark.parametrize("name, cls, bad", [("op_kind", OpKind, 9), ("op_kind", OpKind, "GEMM"),
                                            ("out_format", OutFormat, 5),
                                            ("post_mode", PostMode, -1)])
def test_layer_enum_fields(name, cls, bad):
    allowed = ", ".join(f"{e.name}={e.value}" for e in cls)
    with refused(ImageError, f"Layer.{name}={bad!r} is not a {cls.__name__} ({allowed})"):
        Layer(**{**LAYER, name: bad})


@pytest.mark.parametrize("name", ["out_zero_point", "act_min", "act_max"])
@pytest.mark.parametrize("bad", [-(1 << 31) - 1, 1 << 31, 1.0])
def test_layer_signed_fields(name, bad):
    with refused(ImageError, f"Layer.{name} must be an int in [{-(1 << 31)}, {1 << 31}), not "
                             f"{bad!r}"):
        Layer(**{**LAYER, name: bad})


@pytest.mark.parametrize("name", ["out_window_lo", "out_window_hi", "bias_addr", "bias_present",
                                  "mult_addr", "shift_addr", "stats_addr"])
@pytest.mark.parametrize("bad", [-1, 1 << 32, "0"])
def test_layer_unsigned_fields(name, bad):
    with refused(ImageError, f"Layer.{name} must be an int in [0, {1 << 32}), not {bad!r}"):
        Layer(**{**LAYER, name: bad})


@pytest.mark.parametrize("name", ["config_id", "base_addr"])
@pytest.mark.parametrize("bad", [-1, 1 << 32, 0.0])
def test_image_header_fields(name, bad):
    kw = {"config_id": 1, "layers": (), "base_addr": 0, name: bad}
    with refused(ImageError, f"Image.{name} must be an int in [0, 2**32), not {bad!r}"):
        Image(**kw)


@pytest.mark.parametrize("bad", [None, DESC, dataclasses.asdict(DESC)])
def test_image_layers_type(bad):
    with refused(ImageError, f"Image.layers[1] must be a Layer, not {bad!r}"):
        Image(config_id=1, layers=(Layer(**LAYER), bad))


@pytest.mark.parametrize("kind", [SectionKind.LAYERS, int(SectionKind.LAYERS)])
def test_image_sections_blob_kinds(kind):
    with refused(ImageError, "Image.sections[LAYERS]: only TABLES, QUANT, WEIGHTS are blobs; "
                             "LAYERS is generated from Image.layers"):
        Image(config_id=1, layers=(), sections={kind: b""})


# -- decode ------------------------------------------------------------------------------------

@pytest.mark.parametrize("size", [0, 1, HEADER_BYTES - 1])
def test_decode_truncated_header(size):
    with refused(ImageError, f"image is {size} bytes, truncated: the header alone is "
                             f"{HEADER_BYTES} bytes"):
        decode(blob()[:size])


@pytest.mark.parametrize("magic", [0, 0xDEADBEEF, IMAGE_MAGIC ^ 1])
def test_decode_magic(magic):
    with refused(ImageError, f"magic={magic:#010x}, expected {IMAGE_MAGIC:#010x} ('TSRA')"):
        decode(patch(blob(), HEADER_WORDS["magic"], magic))


@pytest.mark.parametrize("version", [0, FORMAT_VERSION + 1, 0xFFFF_FFFF])
def test_decode_format_version(version):
    with refused(ImageError, f"format_version={version} is not supported (this decoder reads "
                             f"{FORMAT_VERSION})"):
        decode(patch(blob(), HEADER_WORDS["format_version"], version))


@pytest.mark.parametrize("edit", ["truncate", "pad", "field"])
def test_decode_total_bytes(edit):
    data = blob()
    if edit == "truncate":
        data, size = data[:-64], len(data) - 64
    elif edit == "pad":
        data, size = data + bytes(64), len(data) + 64
    else:
        data, size = patch(data, HEADER_WORDS["total_bytes"], len(data) + 4), len(data)
    total = _header(data)["total_bytes"]
    with refused(ImageError, f"total_bytes={total} but the image is {size} bytes (truncated or "
                             f"padded)"):
        decode(data)


@pytest.mark.parametrize("word", [HEADER_WORDS["layer_count"], 40, -1])
def test_decode_crc(word):
    """A byte of the header, a record, or the last byte the CRC covers (before the weights)."""
    data = bytearray(blob())
    last = _header(bytes(data))["section_weights_offset"] - 1
    data[4 * word if word >= 0 else last] ^= 0x40
    data = bytes(data)
    crc = _header(data)["crc32"]
    with refused(ImageError, f"crc32={crc:#010x} does not match the computed "):
        decode(data)


@pytest.mark.parametrize("kind", list(SectionKind))
def test_decode_section_reaches_past_image(kind):
    data = blob()
    field = f"section_{kind.name.lower()}"
    size = len(data) - _header(data)[f"{field}_offset"] + 4
    with refused(ImageError, f"{field}_offset=", f"{field}_bytes={size} reaches past the "
                             f"{len(data)}-byte image"):
        decode(patch(data, HEADER_WORDS[f"{field}_bytes"], size))


@pytest.mark.parametrize("count", [0, 2, 7])
def test_decode_layer_count(count):
    with refused(ImageError, f"layer_count={count} needs {count * LAYER_RECORD_BYTES} bytes but "
                             f"section_layers_bytes={LAYER_RECORD_BYTES}"):
        decode(patch(blob(), HEADER_WORDS["layer_count"], count))


@pytest.mark.parametrize("name, value, fragment", [
    ("op_kind", 9, "Layer.op_kind=9 is not a OpKind (GEMM="),
    ("out_format", 7, "Layer.out_format=7 is not a OutFormat ("),
    ("post_mode", 0xFFFF_FFFF, "Layer.post_mode=4294967295 is not a PostMode ("),
])
def test_decode_layer_fields(name, value, fragment):
    with refused(ImageError, f"layer 0: {fragment}"):
        decode(patch(blob(), layer_word(name), value))


# -- ImageBuilder ------------------------------------------------------------------------------

def builder(**kw) -> ImageBuilder:
    return ImageBuilder(CFG, **kw)


@pytest.mark.parametrize("addr", [-64, 1, 63, CFG.dram_bytes])
def test_builder_image_addr(addr):
    with refused(ValueError, f"image_addr={addr!r} must be 64-byte aligned in [0, dram_bytes="
                             f"{CFG.dram_bytes:#x})"):
        builder(image_addr=addr)


@pytest.mark.parametrize("addr", [0, 32, CFG.dram_bytes, 64])
def test_builder_data_addr(addr):
    with refused(ValueError, f"data_addr={addr!r} must be 64-byte aligned in (image_addr, "
                             f"dram_bytes={CFG.dram_bytes:#x})"):
        builder(image_addr=64, data_addr=addr)


def test_builder_buffer_name_unique():
    b = builder()
    b.buffer("x", 64)
    with refused(ValueError, "buffer 'x' already exists"):
        b.buffer("x", 64)


@pytest.mark.parametrize("nbytes", [0, -1, 1.5, "8"])
def test_builder_buffer_nbytes(nbytes):
    with refused(ValueError, f"buffer 'x': nbytes must be a positive int, not {nbytes!r}"):
        builder().buffer("x", nbytes)


def test_builder_buffer_fits():
    b = builder()
    with refused(ValueError, f"buffer 'big' of {CFG.dram_bytes} bytes does not fit: data region "
                             f"ends at dram_bytes={CFG.dram_bytes:#x}, {b.data_addr:#x} is in use"):
        b.buffer("big", CFG.dram_bytes)


def test_builder_local_name_unique():
    b = builder()
    b.buffer("x", 64)
    with refused(ValueError, "buffer 'x' already exists"):
        b.local("x", 64)


@pytest.mark.parametrize("nbytes", [0, -1, 1.5, "8"])
def test_builder_local_nbytes(nbytes):
    with refused(ValueError, f"local buffer 'h': nbytes must be a positive int, not "
                             f"{nbytes!r}"):
        builder().local("h", nbytes)


def test_builder_local_fits():
    b = builder()
    b.local("h0", 64)
    with refused(ValueError, f"local buffer 'h' of {CFG.local_buf_bytes} bytes does not fit: "
                             f"local_buf_bytes={CFG.local_buf_bytes}, 64 bytes are in use"):
        b.local("h", CFG.local_buf_bytes)


def test_builder_local_past_32_bit_addresses():
    import dataclasses

    cfg = dataclasses.replace(CFG, dram_addr_bits=32)
    with refused(ValueError, "local buffer 'h': the local buffer at 0x100000000 is past the "
                             "32-bit addresses descriptors hold (dram_addr_bits=32; fusion needs "
                             "at most 31)"):
        ImageBuilder(cfg).local("h", 64)


def _gemm(b=None, **kw):
    b = b or builder()
    x, y = b.buffer("x", 64), b.buffer("y", 256)
    args = dict(weights=np.ones((8, 8), np.int8), n=4, b_addr=x, b_stride=4, out_addr=y,
                out_stride=4)
    b.gemm(kw.pop("name", "g"), **{**args, **kw})
    return b


@pytest.mark.parametrize("w", [np.ones((8, 8), np.int16), np.ones(8, np.int8),
                               np.ones((2, 8, 8), np.int8)])
def test_builder_gemm_weights(w):
    with refused(ValueError, f"g: weights must be a 2-D int8 array (m x k), not {w.dtype} "
                             f"{w.shape}"):
        _gemm(weights=w)


def test_builder_gemm_op_kind():
    with refused(ValueError, "g: op_kind CONV needs ImageBuilder.conv"):
        _gemm(op_kind=OpKind.CONV)
    with refused(ValueError, "g: op_kind must be one of GEMM (0), CONV (1), FC (2), "
                             "DEPTHWISE (3), not 7"):          # ("7 is not a valid OpKind")
        _gemm(op_kind=7)


def test_builder_requant_post_mode():
    from firmware.builder import Requant
    with refused(ValueError, "Requant.post_mode must be one of NONE (0), RELU (1), RELU6 (2), "
                             "CLAMP (3), not 9"):
        Requant(multiplier=np.ones(1, np.int32), shift=np.zeros(1, np.int32), post_mode=9)


@pytest.mark.parametrize("name", ["", None, 3])
def test_builder_layer_name(name):
    with refused(ValueError, f"layer name must be a non-empty str, not {name!r}"):
        _gemm(name=name)


def test_builder_layer_name_unique():
    b = _gemm()
    with refused(ValueError, "layer name 'g' is already used"):
        b.gemm("g", weights=np.ones((8, 8), np.int8), n=4, b_addr=0, b_stride=4, out_addr=0,
               out_stride=4)


@pytest.mark.parametrize("share_blobs", [False, True])
@pytest.mark.parametrize("kind", ["gemm", "conv", "depthwise"])
def test_builder_refused_layer_leaves_nothing_behind(kind, share_blobs):
    """A layer call that raises after it has stored its weights (here: a bias that does not
    fit int32) leaves the builder as it was: the name is free again and the image is byte for
    byte the one built without the failed call. The name used to stay claimed and the
    weights stayed in the image."""
    from planner.shapes import ConvShape

    cfg = dataclasses.replace(CFG, dw_mesh=1)
    shape = ConvShape(batch=1, in_channels=2, height=6, width=6, out_channels=4, kernel_h=3,
                      kernel_w=3)
    calls = {
        "gemm": lambda b, x, y, **kw: b.gemm("L", weights=np.full((8, 8), 3, np.int8), n=4,
                                             b_addr=x, b_stride=4, out_addr=y, out_stride=16,
                                             **kw),
        "conv": lambda b, x, y, **kw: b.conv("L", shape=shape,
                                             weights=np.full((4, 2, 3, 3), 3, np.int8),
                                             x_addr=x, out_addr=y, out_chan_stride=64, **kw),
        "depthwise": lambda b, x, y, **kw: b.depthwise("L", weights=np.full((8, 3, 3), 3,
                                                                            np.int8),
                                                       h=4, w=4, x_addr=x, out_addr=y, **kw),
    }

    def image(fail: bool) -> bytes:
        b = ImageBuilder(cfg, share_blobs=share_blobs)
        x, y, z = b.buffer("x", 512), b.buffer("y", 1024), b.buffer("z", 128)
        b.gemm("first", weights=np.ones((8, 8), np.int8), n=4, b_addr=x, b_stride=4,
               out_addr=z, out_stride=16)
        if fail:
            with refused(ValueError, "bias values must be in [-2147483648, 2147483647]"):
                calls[kind](b, x, y, bias=np.full(8 if kind != "conv" else 4, 2**31))
        calls[kind](b, x, y)                # the same name, accepted now
        return b.build()[0]

    assert image(fail=True) == image(fail=False)


def _rq(mult=1 << 30, shift=5):
    return Requant(multiplier=np.full(8, mult, np.int64), shift=np.full(8, shift, np.int64))


@pytest.mark.parametrize("kw, name, lo, hi, got", [
    (dict(bias=np.full(8, 2**31)), "bias", -2**31, 2**31 - 1, f"[{2**31}, {2**31}]"),
    (dict(requant=_rq(mult=0)), "multiplier", 1, 2**31 - 1, "[0, 0]"),
    (dict(requant=_rq(shift=-32)), "shift", -31, 31, "[-32, -32]"),
    (dict(requant=_rq(shift=40)), "shift", -31, 31, "[40, 40]"),
])
def test_builder_quant_values(kw, name, lo, hi, got):
    with refused(ValueError, f"{name} values must be in [{lo}, {hi}], got range {got}"):
        _gemm(**kw)


@pytest.mark.parametrize("kw, name, shown", [
    (dict(bias=np.zeros(7, np.int32)), "bias", "int32 (7,)"),
    (dict(bias=np.zeros(8)), "bias", "float64 (8,)"),
    (dict(requant=Requant(multiplier=np.ones((8, 1), np.int32), shift=np.zeros(8, np.int32))),
     "multiplier", "int32 (8, 1)"),
])
def test_builder_quant_shapes(kw, name, shown):
    with refused(ValueError, f"{name} must be an integer array of shape (8,), not {shown}"):
        _gemm(**kw)


def _conv_shape(**kw):
    from planner.shapes import ConvShape
    return ConvShape(**{**dict(batch=1, in_channels=2, height=6, width=6, out_channels=4,
                               kernel_h=3, kernel_w=3), **kw})


def _conv(b=None, shape=None, **kw):
    b = b or builder()
    shape = shape or _conv_shape()
    x, y = b.buffer("x", 256), b.buffer("y", 256)
    args = dict(shape=shape, weights=np.ones((shape.out_channels, shape.in_channels,
                                              shape.kernel_h, shape.kernel_w), np.int8),
                x_addr=x, out_addr=y, out_chan_stride=64)
    b.conv("c", **{**args, **kw})


@pytest.mark.parametrize("kw", [dict(batch=2), dict(groups=2)])
def test_builder_conv_batch_groups(kw):
    shape = _conv_shape(**kw)
    with refused(ValueError, f"c: the builder handles batch 1, one group (got batch="
                             f"{shape.batch}, groups={shape.groups})"):
        _conv(shape=shape)


def test_builder_conv_shape_type():
    """(A dict: AttributeError 'dict' object has no attribute 'groups'.)"""
    with refused(ValueError, "c: shape must be a planner.ConvShape, not dict"):
        builder().conv("c", shape={"batch": 1}, weights=np.ones((1, 1, 1, 1), np.int8),
                       x_addr=0, out_addr=0, out_chan_stride=1)


@pytest.mark.parametrize("w", [np.ones((4, 2, 3, 3), np.uint8), np.ones((4, 2, 3, 2), np.int8)])
def test_builder_conv_weights(w):
    with refused(ValueError, f"c: weights must be int8 of shape (K, C, R, S) = (4, 2, 3, 3), "
                             f"not {w.dtype} {w.shape}"):
        _conv(weights=w)


def _depthwise(cfg=None, **over):
    cfg = cfg or dataclasses.replace(PRESETS["tiny"], dw_mesh=1)
    b = ImageBuilder(cfg)
    args = dict(weights=np.zeros((4, 3, 3), np.int8), h=6, w=5, x_addr=b.buffer("x", 120),
                out_addr=b.buffer("y", 480), pad_value=0)
    args.update(over)
    b.depthwise("d", **args)
    return b


def test_builder_depthwise_needs_the_mesh():
    with refused(ValueError, "d: a depthwise layer on the mesh needs a config with dw_mesh=1; "
                             "this one has none"):
        _depthwise(PRESETS["tiny"])


@pytest.mark.parametrize("w", [np.zeros((4, 3, 3), np.int16), np.zeros((4, 2, 3, 3), np.int8),
                               np.zeros((4, 3, 2), np.int8), np.zeros((4, 9), np.int8),
                               np.zeros((4, 5, 3), np.int8), np.zeros((4, 9, 9), np.int8),
                               np.zeros((4, 1, 4, 4), np.int8), np.zeros((4, 2, 5, 5), np.int8),
                               np.zeros((0, 3, 3), np.int8)])
def test_builder_depthwise_weights(w):
    with refused(ValueError, f"d: weights must be int8 of shape (C, k, k) or (C, 1, k, k) with "
                             f"C >= 1 and k in [3, 5, 7] (the mesh's kernels), not {w.dtype} "
                             f"{w.shape}"):
        _depthwise(weights=w)


@pytest.mark.parametrize("kernel, side", [(5, 6), (7, 9)])
def test_builder_depthwise_mesh_size(kernel, side):
    with refused(ValueError, f"d: {kernel}x{kernel} kernel on a 4 x 4 mesh; its tiles and "
                             f"strips need at least {side} x {side} PEs"):
        _depthwise(weights=np.zeros((4, kernel, kernel), np.int8))


@pytest.mark.parametrize("pad", [-129, 128])
def test_builder_depthwise_pad_value(pad):
    with refused(ValueError, f"d: pad_value={pad} must be an int8 in [-128, 127]"):
        _depthwise(pad_value=pad)


@pytest.mark.parametrize("stride", [0, 3])
def test_builder_depthwise_stride(stride):
    with refused(ValueError, f"d: stride={stride} must be 1 or 2 (a depthwise layer on the "
                             "mesh)"):
        _depthwise(stride=stride)


@pytest.mark.parametrize("over, got", [
    (dict(odd_rows=True), "odd_rows=True, odd_cols=False"),
    (dict(stride=2, odd_cols=True), "odd_rows=False, odd_cols=True"),
    (dict(stride=2, odd_rows=True, h=7, w=6), "odd_rows=True, odd_cols=False")])
def test_builder_depthwise_odd(over, got):
    """A top / left pad one less (TF "SAME") needs stride 2 and an even side (w=5 and h=7 are
    odd)."""
    stride, h, w = over.get("stride", 1), over.get("h", 6), over.get("w", 5)
    with refused(ValueError, f"d: {got} (a top / left pad one less, TF \"SAME\") need stride 2 "
                             f"and an even h / w, not stride={stride}, h={h}, w={w}"):
        _depthwise(**over)


@pytest.mark.parametrize("h, w", [(0, 4), (4, -1)])
def test_builder_depthwise_map_size(h, w):
    with refused(ValueError, f"d: h={h}, w={w}: the map must be at least 1 x 1"):
        _depthwise(h=h, w=w)


@pytest.mark.parametrize("call, message", [
    (lambda: builder(data_addr=2.0 ** 21), "ImageBuilder: data_addr must be an int, not "
                                           "2097152.0"),
    (lambda: _gemm(n=True), "g: n must be an int, not True"),
    (lambda: _gemm(b_stride=4.5), "g: b_stride must be an int, not 4.5"),
    (lambda: _gemm(requant=Requant(np.full(8, 1 << 30, np.int32), np.zeros(8, np.int32),
                                   zero_point=-3.9)),
     "g: requant: zero_point must be an int, not -3.9"),
    (lambda: _conv(out_chan_stride=64.0), "c: out_chan_stride must be an int, not 64.0"),
    (lambda: _depthwise(pad_value=1.5), "d: pad_value must be an int, not 1.5"),
])
def test_builder_integer_arguments(call, message):
    """Addresses, sizes and requantisation scalars that are not integers were truncated into
    the image without a word (b_addr=x+0.9 wrote x)."""
    with refused(ValueError, message):
        call()


def test_builder_conv_diagonal():
    with refused(ValueError, "c: diagonal weights need in_channels == out_channels (not 2, 4) "
                             "and zeros off the diagonal (output channel o reads input channel "
                             "o only)"):
        _conv(diagonal=True)


@pytest.mark.parametrize("stride", [0, 3])
def test_builder_conv_row_stride(stride):
    with refused(ValueError, f"c: out_row_stride={stride} < out_w=4"):
        _conv(out_row_stride=stride)


@pytest.mark.parametrize("rows, extra", [((2, 2), {}), ((0, 5), {}), ((-1, 2), {}), ([0, 2], {}),
                                         ((0, 2), {"out_row_stride": 8})])
def test_builder_conv_rows(rows, extra):
    with refused(ValueError, f"c: rows={rows!r} must be (p0, p1) with 0 <= p0 < p1 <= "
                             f"out_h=4, and out_row_stride left at out_w"):
        _conv(rows=rows, **extra)


def test_builder_needs_layers():
    with refused(ImageError, "the image has no layers: add at least one with ImageBuilder.gemm "
                             "or ImageBuilder.conv"):
        builder().build()


def test_builder_image_overlaps_data():
    b = _gemm(builder(image_addr=0, data_addr=64))
    with refused(ImageError, "the image [0x0, 0x", ") overlaps the data region at data_addr=0x40; "
                                                  "move data_addr up"):
        b.build()


def test_builder_hardware_rules():
    b = builder()
    y = b.buffer("y", 256)
    b.gemm("far", weights=np.ones((8, 8), np.int8), n=4, b_addr=CFG.dram_bytes - 8, b_stride=4,
           out_addr=y, out_stride=16)
    with refused(ImageError, "image breaks hardware rules:\n  layer 'far': BAD_ADDRESS: B spans",
                 f"beyond dram_bytes={CFG.dram_bytes:#x}"):
        b.build()


def test_builder_output_must_stay_in_its_buffer():
    """An int32 output in a buffer sized for int8 used to build, validate and run "OK" while
    its statistics record (the next buffer) overwrote part of it; an output address outside
    every buffer is refused too."""
    b = builder()
    x = b.buffer("x", 16 * 64)
    y = b.buffer("y", 8 * 64)                               # 8 x 64 int32 needs 2,048 bytes
    b.gemm("l", weights=np.ones((8, 16), np.int8), n=64, b_addr=x, b_stride=64, out_addr=y,
           out_stride=4 * 64)
    with refused(ImageError, f"layer 'l': its output [{y:#x}, {y + 2048:#x}) runs 1536 bytes "
                             f"past the end of buffer 'y' [{y:#x}, {y + 512:#x})"):
        b.build()
    b = builder()
    x = b.buffer("x", 16 * 64)
    b.gemm("l", weights=np.ones((8, 16), np.int8), n=64, b_addr=x, b_stride=64,
           out_addr=CFG.dram_bytes - 4096, out_stride=4 * 64)
    with refused(ImageError, "layer 'l': its output", "does not start inside any buffer of "
                                                      "this builder"):
        b.build()


# -- Runtime -----------------------------------------------------------------------------------

class Device:
    """Minimal in-memory backend: registers answer from ``regs``, memory is a bytearray."""

    def __init__(self, **regs):
        self.mem = bytearray(CFG.dram_bytes)
        self.regs = {REG["CONFIG_ID"].offset: CFG.config_id,
                     REG["STATUS"].offset: 1 << STATUS_BITS["DONE"]}
        self.regs.update({REG[k].offset: v for k, v in regs.items()})

    async def write_memory(self, addr, data):
        self.mem[addr:addr + len(data)] = data

    async def read_memory(self, addr, size):
        return bytes(self.mem[addr:addr + size])

    async def write_register(self, offset, value):
        pass

    async def read_register(self, offset):
        return self.regs.get(offset, 0)

    async def wait_done(self, budget_cycles):
        pass


def run(coro):
    return asyncio.run(coro)


def test_runtime_open_config_id():
    dev = Device(CONFIG_ID=CFG.config_id ^ 1)
    with refused(DeviceError, f"device CONFIG_ID={CFG.config_id ^ 1:#010x} but the runtime was "
                              f"opened for config_id={CFG.config_id:#010x}"):
        run(Runtime(dev, CFG).open())


@pytest.mark.parametrize("addr, size", [(-1, 4), (CFG.dram_bytes - 2, 4), (0, -1), (1.0, 4)])
def test_runtime_memory_range(addr, size):
    rt = Runtime(Device(), CFG)
    with refused(ValueError, f"device range addr={addr!r} size={size!r} must lie in "
                             f"[0, dram_bytes={CFG.dram_bytes:#x})"):
        run(rt.read(addr, size))


@pytest.mark.parametrize("code", [ErrorCode.BAD_SHAPE, ErrorCode.BAD_CRC])
def test_runtime_report_error(code):
    where = " at layer 3" if code < ErrorCode.BAD_IMAGE else ""
    with refused(DeviceError, f"run ended with error {code.name} ({int(code)}){where}"):
        RunReport(error=code, layer_index=3, counters={}).raise_for_error()


def test_runtime_load_image_refuses_invalid():
    with refused(ImageError, "image refused:\n  ", "magic=0x00000000, expected"):
        run(Runtime(Device(), CFG).load_image(patch(blob(), HEADER_WORDS["magic"], 0)))


@pytest.mark.parametrize("size", [0, 4 * BASE_ADDR_WORD + 3])
def test_runtime_load_image_too_short(size):
    with refused(ImageError, f"image is {size} bytes, too short for a header: base_addr needs "
                             f"at least {4 * (BASE_ADDR_WORD + 1)} bytes"):
        run(Runtime(Device(), CFG).load_image(blob()[:size], check=False))


def test_runtime_stats_layer_index():
    data = blob()
    image = decode(data)
    status = (1 << STATUS_BITS["DONE"]) | (1 << STATUS_BITS["IMAGE"])
    dev = Device(STATUS=status)
    rt = Runtime(dev, CFG)

    async def go():
        base = await rt.load_image(data, check=False)
        stats = image.layers[0].stats_addr
        words = [0] * (STATS_BYTES // 4)
        words[STATS_WORDS["layer_index"]] = 5
        dev.mem[stats:stats + STATS_BYTES] = struct.pack(f"<{len(words)}I", *words)
        return await rt.run_image(base, budget_cycles=10)

    with refused(DeviceError, f"statistics record at {image.layers[0].stats_addr:#x} holds "
                              f"layer_index=5, expected 0"):
        run(go())


@pytest.mark.parametrize("name", ["desc_m", "op_kind", "stats_addr"])
def test_runtime_run_layer_missing_word(name):
    rec = layer_record(DESC)
    del rec[name]
    with refused(ValueError, f"record lacks {name}"):
        run(Runtime(Device(), CFG).run_layer(rec, budget_cycles=10))


@pytest.mark.parametrize("status, fragment", [
    (0, "STATUS=0x0 after done: expected done and not busy"),
    ((1 << STATUS_BITS["BUSY"]) | (1 << STATUS_BITS["DONE"]), "after done: expected done and "
                                                              "not busy"),
    ((1 << STATUS_BITS["DONE"]) | (1 << STATUS_BITS["IMAGE"]), "the IMAGE bit does not match "
                                                               "the run"),
])
def test_runtime_status_after_done(status, fragment):
    with refused(DeviceError, fragment):
        run(Runtime(Device(STATUS=status), CFG).run_layer(layer_record(DESC), budget_cycles=1))


@pytest.mark.parametrize("value", [int(max(ErrorCode)) + 1, 0xFFFF_FFFF])
def test_runtime_error_register(value):
    with refused(DeviceError, f"ERROR register holds {value}, not an ErrorCode (one of "
                              f"0..{int(max(ErrorCode))})"):
        run(Runtime(Device(ERROR=value), CFG).run_layer(layer_record(DESC), budget_cycles=1))


def test_with_a_crcs_a_outside_image():
    image = decode(blob())
    outside = dataclasses.replace(image.layers[0], desc=dataclasses.replace(
        image.layers[0].desc, a_addr=0x100))
    with refused(ImageError, "layer 0: A operand [0x100, ", "(desc_a_addr=0x100) is not inside "
                 "the image [0x10000, "):
        with_a_crcs(dataclasses.replace(image, layers=(outside,)), CFG)


def test_with_a_crcs_config():
    other = PRESETS["small"]
    with refused(ImageError, f"Image.config_id={CFG.config_id:#010x} is not cfg's "
                             f"{other.config_id:#010x}"):
        with_a_crcs(decode(blob()), other)
