"""firmware.builder: built images validate, every array lands in its section and decodes back,
per-row convolutions, clear refusals, and a numpy golden-model check of the encoding."""

import dataclasses

import numpy as np
import pytest

from firmware.demos import build_cnn, build_mlp
from firmware.builder import BuiltLayer, ImageBuilder, Requant
from firmware.image import Image, ImageError, decode, validate
from spec.config import PRESETS
from spec.golden import gemm_int8, requantize
from spec.layouts import LAYER_WORDS, STATS_BYTES, OpKind, OutFormat, PostMode, SectionKind
from spec.record import SECTION_ALIGN_BYTES, written_range
from planner.conv import compile_conv
from planner.layout import padded_bytes, padded_dims, weights_k_major
from planner.offsets import compile_tables
from planner.shapes import ConvShape

CFG = PRESETS["tiny"]
NETWORKS = {"cnn": build_cnn, "mlp": build_mlp}


def rand_int8(rng, shape):
    return rng.integers(-128, 128, shape).astype(np.int8)


def record_of(layer) -> dict[str, int]:
    return dict(zip(LAYER_WORDS, layer.record_words()))


def section_range(image: Image, kind: SectionKind) -> tuple[int, int]:
    lo = image.section_addr(kind)
    return lo, lo + len(image.sections[kind])


def section_bytes(image: Image, kind: SectionKind, addr: int, size: int) -> bytes:
    """``size`` bytes at device address ``addr``, which must lie inside section ``kind``."""
    lo, hi = section_range(image, kind)
    assert lo <= addr and addr + size <= hi, (kind.name, hex(addr), size, hex(lo), hex(hi))
    return image.sections[kind][addr - lo:addr - lo + size]


def section_i32(image: Image, kind: SectionKind, addr: int, count: int) -> np.ndarray:
    return np.frombuffer(section_bytes(image, kind, addr, 4 * count), "<i4")


def weights_of(image: Image, layer) -> np.ndarray:
    """The (m x k) int8 A operand a layer reads, decoded from the WEIGHTS section (k-major)."""
    d = layer.desc
    raw = section_bytes(image, SectionKind.WEIGHTS, d.a_addr, d.k * d.a_stride)
    return np.frombuffer(raw, np.int8).reshape(d.k, d.a_stride)[:, :d.m].T


def requant(rng, m, *, zero_point=0, relu=False) -> Requant:
    return Requant(multiplier=rng.integers(1 << 29, 1 << 31, m).astype(np.int32),
                   shift=rng.integers(-3, 12, m).astype(np.int32), zero_point=zero_point,
                   act_min=zero_point if relu else -128, act_max=127,
                   post_mode=PostMode.RELU if relu else PostMode.NONE)


def gemm_builder(m=12, k=20, n=6, *, seed=0, bias=True, rq=True, image_addr=0, cfg=CFG):
    """One GEMM layer ``W (m x k) @ B (k x n)``; returns (builder, arrays, addresses)."""
    rng = np.random.default_rng(seed)
    b = ImageBuilder(cfg, image_addr=image_addr)
    w = rand_int8(rng, (m, k))
    bias_v = rng.integers(-50_000, 50_000, m).astype(np.int32) if bias else None
    q = requant(rng, m, zero_point=-5) if rq else None
    x = b.buffer("x", k * n)
    out_elem = 1 if rq else 4
    y = b.buffer("y", m * n * out_elem)
    b.gemm("g", weights=w, n=n, b_addr=x, b_stride=n, out_addr=y, out_stride=n * out_elem,
           bias=bias_v, requant=q)
    return b, dict(w=w, bias=bias_v, rq=q, b_in=rand_int8(rng, (k, n))), dict(x=x, y=y)


def conv_shape(**kw) -> ConvShape:
    base = dict(batch=1, in_channels=3, height=7, width=6, out_channels=5, kernel_h=3,
                kernel_w=3, stride_h=2, stride_w=1, pad_top=1, pad_left=1, pad_bottom=1,
                pad_right=1)
    return ConvShape(**{**base, **kw})


# -- the demo networks ----------------------------------------------------------------------------

@pytest.mark.parametrize("preset", ["tiny", "small", "default"])
@pytest.mark.parametrize("net", sorted(NETWORKS))
def test_builder_demo_networks_validate(preset, net):
    cfg = PRESETS[preset]
    network = NETWORKS[net](cfg)
    assert validate(network.blob, cfg) == []
    image = decode(network.blob)
    assert image.config_id == cfg.config_id
    assert image.layers == tuple(b.layer for b in network.layers)
    assert all(isinstance(b, BuiltLayer) and b.predicted_cycles > 0 for b in network.layers)


@pytest.mark.parametrize("preset", ["tiny", "default"])
@pytest.mark.parametrize("net", sorted(NETWORKS))
def test_builder_output_window_is_the_written_range(preset, net):
    network = NETWORKS[net](PRESETS[preset])
    for built in network.layers:
        layer = built.layer
        assert (layer.out_window_lo, layer.out_window_hi) == written_range(record_of(layer))
        assert layer.out_window_lo < layer.out_window_hi


@pytest.mark.parametrize("net", sorted(NETWORKS))
def test_builder_arrays_lie_in_their_sections(net):
    network = NETWORKS[net](CFG)
    image = decode(network.blob)
    image_end = image.base_addr + len(network.blob)
    stats = []
    for layer in image.layers:
        d = layer.desc
        section_bytes(image, SectionKind.WEIGHTS, d.a_addr, d.k * d.a_stride)
        if layer.bias_present:
            section_i32(image, SectionKind.QUANT, layer.bias_addr, d.m)
        if layer.out_format == OutFormat.INT8:
            section_i32(image, SectionKind.QUANT, layer.mult_addr, d.m)
            section_i32(image, SectionKind.QUANT, layer.shift_addr, d.m)
        if layer.op_kind == OpKind.CONV:
            assert d.b_mode == 1
            section_bytes(image, SectionKind.TABLES, d.off_addr, 4 * d.k)
            section_bytes(image, SectionKind.TABLES, d.run_addr, 8 * d.run_count)
        else:
            assert d.b_mode == 0
        # outputs and statistics live in the data region, above the image
        assert layer.out_window_lo >= image_end
        assert layer.stats_addr >= image_end and layer.stats_addr % SECTION_ALIGN_BYTES == 0
        stats.append(layer.stats_addr)
    assert len(set(stats)) == len(stats)
    assert all(b - a >= STATS_BYTES for a, b in zip(sorted(stats), sorted(stats)[1:]))


# -- custom layers decode back --------------------------------------------------------------------

@pytest.mark.parametrize("preset", ["tiny", "small", "default"])
@pytest.mark.parametrize("bias, rq", [(False, False), (True, False), (False, True),
                                      (True, True)])
def test_builder_gemm_decodes_back(preset, bias, rq):
    cfg = PRESETS[preset]
    b, arrays, addrs = gemm_builder(bias=bias, rq=rq, image_addr=0x4000, cfg=cfg)
    blob, built = b.build()
    assert validate(blob, cfg) == []
    image = decode(blob)
    assert image.base_addr == 0x4000
    (layer,) = image.layers
    assert layer == built[0].layer and built[0].name == "g"
    d = layer.desc
    assert (d.m, d.k, d.n) == arrays["w"].shape + (6,)
    assert (d.b_addr, d.b_stride, d.c_addr) == (addrs["x"], 6, addrs["y"])
    assert layer.op_kind == OpKind.GEMM and layer.stats_addr == b.buffers["g.stats"][0]
    np.testing.assert_array_equal(weights_of(image, layer), arrays["w"])
    assert layer.bias_present == int(bias)
    if bias:
        np.testing.assert_array_equal(section_i32(image, SectionKind.QUANT, layer.bias_addr,
                                                  d.m), arrays["bias"])
    if rq:
        q = arrays["rq"]
        assert layer.out_format == OutFormat.INT8 and d.c_stride == d.n
        assert (layer.out_zero_point, layer.act_min, layer.act_max) == (-5, -128, 127)
        np.testing.assert_array_equal(section_i32(image, SectionKind.QUANT, layer.mult_addr,
                                                  d.m), q.multiplier)
        np.testing.assert_array_equal(section_i32(image, SectionKind.QUANT, layer.shift_addr,
                                                  d.m), q.shift)
    else:
        assert layer.out_format == OutFormat.INT32 and d.c_stride == 4 * d.n
    # the window is exactly m rows of n output elements
    elem = 1 if rq else 4
    assert (layer.out_window_lo, layer.out_window_hi) == (
        addrs["y"], addrs["y"] + (d.m - 1) * d.c_stride + elem * d.n)


def test_builder_fc_op_kind_and_relu_requant():
    rng = np.random.default_rng(3)
    b = ImageBuilder(CFG)
    x, y = b.buffer("x", 16), b.buffer("y", 8)
    q = requant(rng, 8, zero_point=-20, relu=True)
    b.gemm("fc", weights=rand_int8(rng, (8, 16)), n=1, b_addr=x, b_stride=1, out_addr=y,
           out_stride=1, requant=q, op_kind=OpKind.FC)
    blob, (built,) = b.build()
    assert validate(blob, CFG) == []
    layer = decode(blob).layers[0]
    assert layer.op_kind == OpKind.FC and layer.post_mode == PostMode.RELU
    assert (layer.out_zero_point, layer.act_min) == (-20, -20)


def test_builder_negative_shift_builds():
    """Left shifts (scale > 1) are legal: shift words with the top bit set must not break the
    builder's own BAD_QUANT check."""
    b = ImageBuilder(CFG)
    x, y = b.buffer("x", 8 * 4), b.buffer("y", 8 * 4)
    q = Requant(multiplier=np.full(8, 1 << 30, np.int32), shift=np.arange(-8, 0, dtype=np.int32))
    b.gemm("g", weights=np.ones((8, 8), np.int8), n=4, b_addr=x, b_stride=4, out_addr=y,
           out_stride=4, requant=q)
    blob, _ = b.build()
    assert validate(blob, CFG) == []
    image = decode(blob)
    np.testing.assert_array_equal(
        section_i32(image, SectionKind.QUANT, image.layers[0].shift_addr, 8), q.shift)


def test_builder_layers_share_sections_in_order():
    rng = np.random.default_rng(5)
    b = ImageBuilder(CFG)
    x = b.buffer("x", 10 * 3)
    h = b.buffer("h", 7 * 3)
    y = b.buffer("y", 4 * 5 * 3)
    w1, w2 = rand_int8(rng, (7, 10)), rand_int8(rng, (5, 7))
    b.gemm("l1", weights=w1, n=3, b_addr=x, b_stride=3, out_addr=h, out_stride=3,
           requant=requant(rng, 7))
    b.gemm("l2", weights=w2, n=3, b_addr=h, b_stride=3, out_addr=y, out_stride=12,
           bias=np.arange(5))
    blob, built = b.build()
    assert [x.name for x in built] == ["l1", "l2"]
    assert validate(blob, CFG) == []
    image = decode(blob)
    np.testing.assert_array_equal(weights_of(image, image.layers[0]), w1)
    np.testing.assert_array_equal(weights_of(image, image.layers[1]), w2)
    assert image.layers[0].desc.a_addr < image.layers[1].desc.a_addr
    for layer in image.layers:
        assert layer.desc.a_addr % SECTION_ALIGN_BYTES == 0


def test_builder_conv_whole_output_decodes_back():
    rng = np.random.default_rng(1)
    shape = conv_shape()
    w = rand_int8(rng, (shape.out_channels, shape.in_channels, 3, 3))
    bias = rng.integers(-1000, 1000, shape.out_channels).astype(np.int32)
    q = requant(rng, shape.out_channels, relu=True)
    b = ImageBuilder(CFG)
    x = b.buffer("x", padded_bytes(shape, "NCHW"))
    pq = shape.out_h * shape.out_w
    y = b.buffer("y", shape.out_channels * pq)
    b.conv("c", shape=shape, weights=w, x_addr=x, out_addr=y, out_chan_stride=pq, bias=bias,
           requant=q)
    blob, built = b.build()
    assert validate(blob, CFG) == []
    image = decode(blob)
    (layer,) = image.layers
    assert [x.name for x in built] == ["c"]
    d = layer.desc
    assert layer.op_kind == OpKind.CONV and d.b_mode == 1
    assert (d.m, d.k, d.n) == (shape.gemm.m, shape.gemm.k, shape.gemm.n)
    assert (d.b_addr, d.c_addr, d.c_stride) == (x, y, pq)
    assert d.b_stride == padded_bytes(shape, "NCHW")
    expected_a = weights_k_major(w, shape, 0)
    np.testing.assert_array_equal(weights_of(image, layer), expected_a.T)
    tables = compile_conv(shape, "NCHW", CFG).tables
    blobs = tables.to_bytes()
    assert d.run_count == tables.run_count
    for key in ("off", "run", "grp"):
        addr = getattr(d, f"{key}_addr")
        assert section_bytes(image, SectionKind.TABLES, addr, len(blobs[key])) == blobs[key]
    np.testing.assert_array_equal(section_i32(image, SectionKind.QUANT, layer.bias_addr, d.m),
                                  bias)


def test_builder_conv_per_row_mode():
    rng = np.random.default_rng(2)
    shape = conv_shape()
    P, Q = shape.out_h, shape.out_w
    assert P > 1
    hp, wp = padded_dims(shape)
    row_stride = Q + 3
    chan_stride = P * row_stride + 5
    w = rand_int8(rng, (shape.out_channels, shape.in_channels, 3, 3))
    b = ImageBuilder(CFG)
    x = b.buffer("x", padded_bytes(shape, "NCHW"))
    y = b.buffer("y", shape.out_channels * chan_stride)
    b.conv("c", shape=shape, weights=w, x_addr=x, out_addr=y, out_chan_stride=chan_stride,
           out_row_stride=row_stride, requant=requant(rng, shape.out_channels))
    blob, built = b.build()
    assert validate(blob, CFG) == []
    image = decode(blob)
    assert len(image.layers) == len(built) == P
    assert [x.name for x in built] == [f"c[row {p}]" for p in range(P)]
    x_bytes = padded_bytes(shape, "NCHW")
    tables = compile_tables(shape, "NCHW", CFG, pixels=Q).to_bytes()
    first = image.layers[0].desc
    for p, layer in enumerate(image.layers):
        d = layer.desc
        assert (d.m, d.k, d.n) == (shape.out_channels, shape.gemm.k, Q)
        assert d.c_addr == y + p * row_stride
        assert d.b_addr == x + p * shape.stride_h * wp
        assert d.b_stride == x_bytes - p * shape.stride_h * wp
        assert d.c_stride == chan_stride
        # every row runs row 0's tables and weights
        assert (d.off_addr, d.run_addr, d.grp_addr, d.a_addr, d.run_count) == (
            first.off_addr, first.run_addr, first.grp_addr, first.a_addr, first.run_count)
        assert layer.mult_addr == image.layers[0].mult_addr
        assert (layer.out_window_lo, layer.out_window_hi) == (
            d.c_addr, d.c_addr + (d.m - 1) * chan_stride + Q)
        assert layer.stats_addr == b.buffers[f"c[row {p}].stats"][0]
    for key in ("off", "run", "grp"):
        addr = getattr(first, f"{key}_addr")
        assert section_bytes(image, SectionKind.TABLES, addr, len(tables[key])) == tables[key]
    # the rows write disjoint bytes that tile the output plane
    written = set()
    for layer in image.layers:
        d = layer.desc
        for c in range(d.m):
            row = range(d.c_addr + c * d.c_stride, d.c_addr + c * d.c_stride + d.n)
            assert written.isdisjoint(row)
            written.update(row)
    assert written == {y + c * chan_stride + p * row_stride + q for c in range(shape.out_channels)
                       for p in range(P) for q in range(Q)}



@pytest.mark.parametrize("shape", [conv_shape(), conv_shape(width=9, stride_w=2, height=10),
                                   conv_shape(height=5, width=5, stride_h=1)])
def test_builder_conv_into_a_padded_buffer_through_the_row_store(shape):
    """On a config with the row store the same layer is one record (its output rows as row
    lanes: out_w rounded up to a lane group), and the golden device writes exactly what the
    record-a-row image writes: the interior, every other byte of the buffer left as it was."""
    from firmware.emulator import run_image
    from spec.desc import ErrorCode

    rng = np.random.default_rng(3)
    P, Q = shape.out_h, shape.out_w
    row_stride, chan_stride = Q + 3, P * (Q + 3) + 5
    w = rand_int8(rng, (shape.out_channels, shape.in_channels, 3, 3))
    q = requant(rng, shape.out_channels)
    rows_cfg = dataclasses.replace(CFG, row_store=1)
    out = {}
    for cfg in (CFG, rows_cfg):
        b = ImageBuilder(cfg, data_addr=1 << 20)
        x = b.buffer("x", padded_bytes(shape, "NCHW"))
        y = b.buffer("y", shape.out_channels * chan_stride)
        b.conv("c", shape=shape, weights=w, x_addr=x, out_addr=y, out_chan_stride=chan_stride,
               out_row_stride=row_stride, requant=q)
        blob, built = b.build()
        assert validate(blob, cfg) == []
        mem = bytearray(np.random.default_rng(9).integers(0, 256, cfg.dram_bytes,
                                                          np.uint8).tobytes())
        mem[:len(blob)] = blob
        before = bytes(mem[y:y + shape.out_channels * chan_stride])
        assert run_image(mem, 0, cfg).error == ErrorCode.NONE
        out[cfg.row_store] = (before, bytes(mem[y:y + shape.out_channels * chan_stride]),
                              decode(blob), built)
    (before, per_row, _, rows_built), (before1, stored, image, built) = out[0], out[1]
    assert before == before1 and stored == per_row
    assert len(rows_built) == P and [x.name for x in built] == ["c"]
    (layer,) = image.layers
    d = layer.desc
    width = -(-Q // CFG.array_cols) * CFG.array_cols
    assert (d.n, d.partition_n, d.c_rows, d.c_row_elems, d.c_row_pitch) == (
        P * width, width, P, Q, row_stride)
    assert (layer.out_window_lo, layer.out_window_hi) == (
        d.c_addr, d.c_addr + (d.m - 1) * chan_stride + (P - 1) * row_stride + Q)
    interior = {c * chan_stride + p * row_stride + j for c in range(shape.out_channels)
                for p in range(P) for j in range(Q)}
    assert all(stored[i] == before[i] for i in range(len(stored)) if i not in interior)
    assert built[0].predicted_cycles < sum(r.predicted_cycles for r in rows_built)


def test_builder_conv_with_channels_interleaved_by_row_runs_a_record_a_row():
    """The row store needs a channel's rows to end before the next channel starts; an output
    whose channels interleave by row (HCW: out_chan_stride = out_w, out_row_stride = C *
    out_w) still builds on a row store config, a record a row (it raised BAD_ADDRESS)."""
    from firmware.emulator import run_image
    from spec.desc import ErrorCode

    rng = np.random.default_rng(0)
    shape = conv_shape(height=6, width=8, stride_h=1)
    P, Q, C = shape.out_h, shape.out_w, shape.out_channels
    cfg = dataclasses.replace(CFG, row_store=1)
    b = ImageBuilder(cfg, data_addr=1 << 20)
    x = b.buffer("x", padded_bytes(shape, "NCHW"))
    y = b.buffer("y", P * C * Q)
    b.conv("c", shape=shape, weights=rand_int8(rng, (C, 3, 3, 3)), x_addr=x, out_addr=y,
           out_chan_stride=Q, out_row_stride=C * Q, requant=requant(rng, C))
    blob, built = b.build()
    assert validate(blob, cfg) == [] and len(built) == P
    mem = bytearray(cfg.dram_bytes)
    mem[:len(blob)] = blob
    assert run_image(mem, 0, cfg).error == ErrorCode.NONE

def test_builder_conv_row_stride_equal_out_w_is_one_record():
    rng = np.random.default_rng(4)
    shape = conv_shape()
    b = ImageBuilder(CFG)
    x = b.buffer("x", padded_bytes(shape, "NCHW"))
    pq = shape.out_h * shape.out_w
    y = b.buffer("y", 4 * shape.out_channels * pq)
    b.conv("c", shape=shape, weights=rand_int8(rng, (5, 3, 3, 3)), x_addr=x, out_addr=y,
           out_chan_stride=4 * pq, out_row_stride=shape.out_w)
    blob, built = b.build()
    assert len(built) == 1 and built[0].layer.desc.n == pq
    assert built[0].layer.out_format == OutFormat.INT32
    assert validate(blob, CFG) == []


# -- golden model without RTL ---------------------------------------------------------------------

@pytest.mark.parametrize("preset", ["tiny", "default"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_builder_gemm_encoding_is_lossless_for_the_golden_model(preset, seed):
    cfg = PRESETS[preset]
    b, arrays, _ = gemm_builder(m=19, k=33, n=7, seed=seed, cfg=cfg)
    blob, _ = b.build()
    image = decode(blob)
    (layer,) = image.layers
    d = layer.desc
    w_dec = weights_of(image, layer)
    bias_dec = section_i32(image, SectionKind.QUANT, layer.bias_addr, d.m)
    mult_dec = section_i32(image, SectionKind.QUANT, layer.mult_addr, d.m)
    shift_dec = section_i32(image, SectionKind.QUANT, layer.shift_addr, d.m)
    q = arrays["rq"]
    b_in = arrays["b_in"]

    def emulate(w, bias, mult, shift, zp, lo, hi):
        return requantize(gemm_int8(w, b_in), multiplier=mult, shift=shift, bias=bias,
                          zero_point=zp, act_min=lo, act_max=hi)

    got = emulate(w_dec, bias_dec, mult_dec, shift_dec, layer.out_zero_point, layer.act_min,
                  layer.act_max)
    want = emulate(arrays["w"], arrays["bias"], q.multiplier, q.shift, q.zero_point, q.act_min,
                   q.act_max)
    np.testing.assert_array_equal(got, want)
    assert got.shape == (d.m, d.n) and len(np.unique(got)) > 10      # not saturated


def test_builder_mlp_emulated_from_the_image_matches_golden():
    """Run the demo MLP layer by layer from the decoded image on a numpy device memory: the
    addresses, strides and parameters the builder wrote reproduce the network's golden bytes."""
    net = build_mlp(CFG)
    image = decode(net.blob)
    mem = bytearray(CFG.dram_bytes)
    mem[image.base_addr:image.base_addr + len(net.blob)] = net.blob
    for addr, data in net.load:
        mem[addr:addr + len(data)] = data
    for layer in image.layers:
        d = layer.desc
        assert d.b_mode == 0
        b_in = np.stack([np.frombuffer(mem, np.int8, d.n, d.b_addr + kk * d.b_stride)
                         for kk in range(d.k)])
        acc = gemm_int8(weights_of(image, layer), b_in)
        bias = (section_i32(image, SectionKind.QUANT, layer.bias_addr, d.m)
                if layer.bias_present else None)
        if layer.out_format == OutFormat.INT8:
            out = requantize(acc, multiplier=section_i32(image, SectionKind.QUANT,
                                                         layer.mult_addr, d.m),
                             shift=section_i32(image, SectionKind.QUANT, layer.shift_addr, d.m),
                             bias=bias, zero_point=layer.out_zero_point,
                             act_min=layer.act_min, act_max=layer.act_max)
        else:
            wide = acc.astype(np.int64) + (0 if bias is None else bias[:, None])
            out = ((wide + 2**31) % 2**32 - 2**31).astype("<i4")
        for i in range(d.m):
            row = out[i].tobytes()
            at = d.c_addr + i * d.c_stride
            assert layer.out_window_lo <= at and at + len(row) <= layer.out_window_hi
            mem[at:at + len(row)] = row
    for name, addr, size in net.read:
        assert bytes(mem[addr:addr + size]) == net.golden[name], name


# -- refusals -------------------------------------------------------------------------------------

@pytest.mark.parametrize("image_addr", [32, 1, -64, CFG.dram_bytes, CFG.dram_bytes + 64])
def test_builder_bad_image_addr(image_addr):
    with pytest.raises(ValueError, match=f"image_addr={image_addr!r} must be "
                                         f"{SECTION_ALIGN_BYTES}-byte aligned"):
        ImageBuilder(CFG, image_addr=image_addr)


@pytest.mark.parametrize("image_addr, data_addr", [
    (0, 0x1020), (0, 0), (0x1000, 0x1000), (0x2000, 0x1000), (0, CFG.dram_bytes),
])
def test_builder_bad_data_addr(image_addr, data_addr):
    with pytest.raises(ValueError, match=f"data_addr={data_addr!r} must be "
                                         f"{SECTION_ALIGN_BYTES}-byte aligned"):
        ImageBuilder(CFG, image_addr=image_addr, data_addr=data_addr)


def test_builder_default_data_addr_is_half_the_memory():
    b = ImageBuilder(CFG)
    assert b.data_addr == CFG.dram_bytes // 2
    assert b.buffer("a", 1) == CFG.dram_bytes // 2
    second = b.buffer("b", 1)
    assert second % SECTION_ALIGN_BYTES == 0
    assert second >= CFG.dram_bytes // 2 + 1 + CFG.c_beat_bytes


def test_builder_buffer_name_reuse():
    b = ImageBuilder(CFG)
    b.buffer("x", 64)
    with pytest.raises(ValueError, match="buffer 'x' already exists"):
        b.buffer("x", 64)


def test_builder_layer_name_reuse():
    b, arrays, addrs = gemm_builder()
    weights_before = len(b._blobs[SectionKind.WEIGHTS])
    with pytest.raises(ValueError, match="layer name 'g' is already used"):
        b.gemm("g", weights=arrays["w"], n=6, b_addr=addrs["x"], b_stride=6,
               out_addr=addrs["y"], out_stride=24)
    # refused before any of the layer's bytes were added
    assert len(b._blobs[SectionKind.WEIGHTS]) == weights_before


@pytest.mark.parametrize("nbytes", [0, -1, 1.5, np.int64(8), None])
def test_builder_buffer_bad_size(nbytes):
    with pytest.raises(ValueError, match="nbytes must be a positive int"):
        ImageBuilder(CFG).buffer("x", nbytes)


def test_builder_buffer_that_does_not_fit():
    b = ImageBuilder(CFG)
    room = CFG.dram_bytes - b.data_addr
    b.buffer("all", room)                   # exactly fits
    with pytest.raises(ValueError, match=r"buffer 'more' of 1 bytes does not fit.*dram_bytes"):
        b.buffer("more", 1)
    with pytest.raises(ValueError, match="does not fit"):
        ImageBuilder(CFG).buffer("big", room + 1)


@pytest.mark.parametrize("weights", [
    np.ones((4, 8), np.int16), np.ones((4, 8), np.float32), np.ones(8, np.int8),
    np.ones((2, 4, 8), np.int8), [[1, 2], [3, 4]],
])
def test_builder_gemm_weights_must_be_2d_int8(weights):
    b = ImageBuilder(CFG)
    x, y = b.buffer("x", 64), b.buffer("y", 64)
    with pytest.raises(ValueError, match="g: weights must be a 2-D int8 array"):
        b.gemm("g", weights=weights, n=4, b_addr=x, b_stride=4, out_addr=y, out_stride=16)


def test_builder_gemm_refuses_conv_op_kind():
    b = ImageBuilder(CFG)
    x, y = b.buffer("x", 64), b.buffer("y", 256)
    with pytest.raises(ValueError, match="g: op_kind CONV needs ImageBuilder.conv"):
        b.gemm("g", weights=np.ones((4, 8), np.int8), n=4, b_addr=x, b_stride=4, out_addr=y,
               out_stride=16, op_kind=OpKind.CONV)


def _gemm_with(**kw):
    m = 8
    b = ImageBuilder(CFG)
    x, y = b.buffer("x", 64), b.buffer("y", 256)
    args = dict(weights=np.ones((m, 8), np.int8), n=4, b_addr=x, b_stride=4, out_addr=y,
                out_stride=4)
    b.gemm("g", **{**args, **kw})
    return b


def _rq(mult=1 << 30, shift=5, m=8):
    return Requant(multiplier=np.broadcast_to(np.asarray(mult), (m,)).copy()
                   if np.ndim(mult) == 0 else np.asarray(mult),
                   shift=np.broadcast_to(np.asarray(shift), (m,)).copy()
                   if np.ndim(shift) == 0 else np.asarray(shift))


@pytest.mark.parametrize("kw, fragment", [
    (dict(bias=np.full(8, 2**31)), r"bias values must be in \[-2147483648, 2147483647\]"),
    (dict(bias=np.full(8, -2**31 - 1)), r"bias values must be in"),
    (dict(bias=np.zeros(7, np.int32)), r"bias must be an integer array of shape \(8,\)"),
    (dict(bias=np.zeros((8, 1), np.int32)), r"bias must be an integer array of shape \(8,\)"),
    (dict(bias=np.zeros(8, np.float64)), r"bias must be an integer array.*float64"),
    (dict(requant=_rq(mult=0)), r"multiplier values must be in \[1, 2147483647\]"),
    (dict(requant=_rq(mult=2**31)), r"multiplier values must be in"),
    (dict(requant=_rq(mult=np.ones(9, np.int32))), r"multiplier must be .* shape \(8,\)"),
    (dict(requant=_rq(shift=32)), r"shift values must be in \[-31, 31\]"),
    (dict(requant=_rq(shift=-32)), r"shift values must be in \[-31, 31\]"),
    (dict(requant=_rq(shift=np.zeros(8, np.float32))), r"shift must be an integer array"),
])
def test_builder_quant_arrays_checked(kw, fragment):
    with pytest.raises(ValueError, match=fragment):
        _gemm_with(**kw)


def test_builder_quant_arrays_at_their_limits_build():
    b = _gemm_with(bias=np.array([-2**31, 2**31 - 1] * 4),
                   requant=_rq(mult=np.array([1, 2**31 - 1] * 4), shift=np.array([-31, 31] * 4)))
    blob, _ = b.build()
    assert validate(blob, CFG) == []


def test_builder_requant_fields_breaking_hardware_rules_refused_at_build():
    rq = dataclasses.replace(_rq(), zero_point=200)
    b = _gemm_with(requant=rq)
    with pytest.raises(ImageError, match=r"layer 'g': BAD_LAYER: out_zero_point=200"):
        b.build()


def test_builder_record_breaking_hardware_rules_names_layer():
    b = ImageBuilder(CFG)
    y = b.buffer("y", 256)
    b.gemm("far", weights=np.ones((8, 8), np.int8), n=4, b_addr=CFG.dram_bytes - 8,
           b_stride=4, out_addr=y, out_stride=16)
    with pytest.raises(ImageError, match="image breaks hardware rules") as info:
        b.build()
    assert "layer 'far': BAD_ADDRESS" in str(info.value)


@pytest.mark.parametrize("kw, fragment", [
    (dict(groups=3, out_channels=6), "groups=3"),
    (dict(batch=2), "batch=2"),
])
def test_builder_conv_batch1_one_group_only(kw, fragment):
    shape = conv_shape(**kw)
    b = ImageBuilder(CFG)
    w = np.zeros((shape.out_channels, shape.in_channels // shape.groups, 3, 3), np.int8)
    with pytest.raises(ValueError, match=f"c: the builder handles batch 1, one group.*{fragment}"):
        b.conv("c", shape=shape, weights=w, x_addr=b.buffer("x", 4096),
               out_addr=b.buffer("y", 4096), out_chan_stride=shape.out_h * shape.out_w)


@pytest.mark.parametrize("weights", [
    np.zeros((5, 3, 3, 3), np.int16), np.zeros((5, 3, 3), np.int8), np.zeros((3, 5, 3, 3), np.int8),
])
def test_builder_conv_weights_shape_and_dtype(weights):
    shape = conv_shape()
    b = ImageBuilder(CFG)
    with pytest.raises(ValueError, match=r"c: weights must be int8 of shape \(K, C, R, S\) = "
                                         r"\(5, 3, 3, 3\)"):
        b.conv("c", shape=shape, weights=weights, x_addr=b.buffer("x", 4096),
               out_addr=b.buffer("y", 4096), out_chan_stride=shape.out_h * shape.out_w)


def test_builder_conv_row_stride_below_out_w():
    shape = conv_shape()
    b = ImageBuilder(CFG)
    with pytest.raises(ValueError, match=f"out_row_stride={shape.out_w - 1} < "
                                         f"out_w={shape.out_w}"):
        b.conv("c", shape=shape, weights=np.zeros((5, 3, 3, 3), np.int8),
               x_addr=b.buffer("x", 4096), out_addr=b.buffer("y", 4096),
               out_chan_stride=64, out_row_stride=shape.out_w - 1)


def test_builder_image_overlapping_data_region():
    b = ImageBuilder(CFG, data_addr=SECTION_ALIGN_BYTES)
    x, y = b.buffer("x", 64), b.buffer("y", 256)
    b.gemm("g", weights=np.ones((8, 8), np.int8), n=4, b_addr=x, b_stride=4, out_addr=y,
           out_stride=16)
    with pytest.raises(ImageError, match=r"the image \[0x0, 0x[0-9a-f]+\) overlaps the data "
                                         r"region at data_addr=0x40; move data_addr up"):
        b.build()


def test_builder_empty():
    b = ImageBuilder(CFG)
    b.buffer("x", 64)
    with pytest.raises(ImageError, match="the image has no layers"):
        b.build()


def test_builder_conv_whose_tables_do_not_fit_runs_in_bands_of_rows():
    """tiny's table memories cannot hold a 109 x 109 output's runs: the builder writes one
    record per band of rows (planner.conv.row_bands), each band running the first band's
    tables (the last, shorter band its own) with b_addr and c_addr moved down, and the
    records' predicted cycles add up to planner.layer_cost's."""
    from planner import layer_cost
    from planner.conv import row_bands

    rng = np.random.default_rng(5)
    shape = conv_shape(height=220, width=220, out_channels=4, stride_w=2, pad_top=0,
                       pad_left=0, pad_bottom=0, pad_right=0)
    P, Q = shape.out_h, shape.out_w
    bands = row_bands(shape, "NCHW", CFG)
    assert len(bands) > 2 and bands[-1][1] - bands[-1][0] < bands[0][1] - bands[0][0]
    hp, wp = padded_dims(shape)
    b = ImageBuilder(CFG)
    x = b.buffer("x", padded_bytes(shape, "NCHW"))
    y = b.buffer("y", 4 * shape.out_channels * P * Q)
    b.conv("c", shape=shape, weights=rand_int8(rng, (4, 3, 3, 3)), x_addr=x, out_addr=y,
           out_chan_stride=4 * P * Q)
    blob, built = b.build()
    assert validate(blob, CFG) == []
    assert [r.name for r in built] == [f"c[rows {p0}:{p1}]" for p0, p1 in bands]
    for (p0, p1), r in zip(bands, built):
        d = r.layer.desc
        # int32 output: band p0's first pixel is 4 * p0 * Q bytes into each channel
        assert (d.n, d.b_addr, d.c_addr, d.c_stride) == ((p1 - p0) * Q, x + p0 * 2 * wp,
                                                        y + 4 * p0 * Q, 4 * P * Q)
        t = compile_tables(shape, "NCHW", CFG, pixels=(p1 - p0) * Q)
        assert d.run_count == t.run_count
    first, last = built[0].layer.desc, built[-1].layer.desc
    assert {(r.layer.desc.run_addr, r.layer.desc.a_addr) for r in built[:-1]} == {
        (first.run_addr, first.a_addr)}
    assert last.run_addr != first.run_addr and last.a_addr == first.a_addr
    assert sum(r.predicted_cycles for r in built) == layer_cost(shape, CFG).cycles
    assert sum(r.macs for r in built) == shape.macs


def test_builder_conv_one_row_into_a_padded_buffer_is_planned_as_a_row():
    """A one-row output into a padded buffer is the per-row record, planned for its row
    (planner.conv.block_plan), as before bands existed, not as a whole layer."""
    from planner.conv import block_plan
    from planner.cost import PostLoad
    from planner.tiling import TILING_FIELDS

    rng = np.random.default_rng(6)
    shape = conv_shape(height=1, width=14, in_channels=32, out_channels=16, stride_h=1)
    assert shape.out_h == 1
    Q = shape.out_w
    b = ImageBuilder(CFG, strategy="seed")
    x = b.buffer("x", padded_bytes(shape, "NCHW"))
    y = b.buffer("y", 16 * (Q + 3) * 3)
    b.conv("c", shape=shape, weights=rand_int8(rng, (16, 32, 3, 3)), x_addr=x, out_addr=y,
           out_chan_stride=(Q + 3) * 3, out_row_stride=Q + 3, requant=requant(rng, 16))
    _, built = b.build()
    (record,) = built
    plan = block_plan(shape, "NCHW", CFG, Q, "seed", post=PostLoad(bias=False, requant=True))
    assert record.name == "c[row 0]"
    assert {f: getattr(record.layer.desc, f) for f in TILING_FIELDS} == \
        {f: getattr(plan, f) for f in TILING_FIELDS}
