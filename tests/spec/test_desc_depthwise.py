"""The depthwise descriptor's rules (b_mode 2, spec.desc._check_depthwise) and its layer record
(spec.record.check_record): each rule alone, with a message naming the field."""

import dataclasses

import pytest

from spec.config import PRESETS
from spec.desc import (B_MODE_DEPTHWISE, B_MODE_DEPTHWISE5, B_MODE_DEPTHWISE5_S2,
                       B_MODE_DEPTHWISE_S2, DEPTHWISE_UNUSED, ErrorCode, GemmDescriptor, check,
                       depthwise_arrays, depthwise_weight_words, depthwise_words, tensor_extents)
from spec.layouts import OpKind, OutFormat
from spec.record import check_record, layer_record, written_range

CFG = dataclasses.replace(PRESETS["small"], dw_mesh=1)
D = CFG.dram_bytes
M, H, W, G = 10, 12, 20, 6


def dw_desc(**over) -> GemmDescriptor:
    """A legal depthwise descriptor on CFG: 10 channels of 12 x 20, 6 a step, int8 output."""
    fields = dict(m=M, k=H, n=W, partition_m=G, partition_n=0, partition_k=0, tile_m=0,
                  tile_n=0, outer_m=0, need_splitk=0,
                  acc_buffer_needed=(G * H + CFG.array_rows) * CFG.c_beat_bytes,
                  a_addr=D // 8, a_stride=4 * M, b_addr=D // 4, b_stride=H * W,
                  c_addr=D // 2, c_stride=H * W, b_mode=B_MODE_DEPTHWISE)
    fields.update(over)
    return GemmDescriptor(**fields)


def codes(d, cfg=CFG, out_bytes=1):
    return [code for code, _ in check(d, cfg, out_bytes=out_bytes)]


def test_depthwise_base_is_legal():
    assert check(dw_desc(), CFG, out_bytes=1) == []
    assert check(dw_desc(c_stride=4 * H * W), CFG, out_bytes=4) == []


def test_stride_2_output_pitch():
    """b_mode 3: the output maps are ceil(k/2) x ceil(n/2) (6 x 10), so is c_stride; the
    record (op_kind DEPTHWISE) is legal and writes exactly those channels."""
    d = dw_desc(b_mode=B_MODE_DEPTHWISE_S2, c_stride=60)
    assert check(d, CFG, out_bytes=1) == []
    assert check(dataclasses.replace(d, k=13, partition_m=1, b_stride=13 * W, c_stride=70),
                 CFG, out_bytes=1) == []
    assert check(dataclasses.replace(d, c_stride=240), CFG, out_bytes=4) == []
    assert (ErrorCode.BAD_ADDRESS, "c_stride=240 must be the output's channel pitch "
            "ceil(k/2)*ceil(n/2)*1=60 (dense NCHW)") in check(dataclasses.replace(
                d, c_stride=240), CFG, out_bytes=1)
    rec = layer_record(d, op_kind=int(OpKind.DEPTHWISE), out_format=int(OutFormat.INT8),
                       mult_addr=D // 16, shift_addr=D // 16 + 1024)
    assert check_record(rec, CFG) == []
    assert written_range(rec) == (D // 2, D // 2 + M * 60)
    assert tensor_extents(d, CFG, out_bytes=1)["c"] == (D // 2, D // 2 + M * 60)


def test_depthwise_needs_the_mesh():
    # without the mesh a b_mode 2 descriptor is judged as a GEMM, and b_mode 2 is refused
    errs = check(dw_desc(), PRESETS["small"], out_bytes=1)
    assert (ErrorCode.BAD_FLAGS, "b_mode=2 (depthwise 3x3 on the mesh) needs a config with "
            "dw_mesh=1; this one has none") in errs
    assert (ErrorCode.BAD_FLAGS, "b_mode=3 (depthwise 3x3 on the mesh) needs a config with "
            "dw_mesh=1; this one has none") in check(dw_desc(b_mode=3), PRESETS["small"],
                                                     out_bytes=1)
    assert (ErrorCode.BAD_FLAGS, "b_mode=4 (depthwise 5x5 on the mesh) needs a config with "
            "dw_mesh=1; this one has none") in check(dw_desc(b_mode=4), PRESETS["small"],
                                                     out_bytes=1)
    for b_mode in (8, 10, 12, 16, 17, 24, 32, 35):
        assert (ErrorCode.BAD_FLAGS, f"b_mode={b_mode} must be 0 to 7 (2 to 7: depthwise 3x3, "
                "5x5 or 7x7, stride 1 or 2) or a stride-2 depthwise value (3, 5, 7) plus 8 "
                "(odd rows) and / or 16 (odd columns)") in check(dw_desc(b_mode=b_mode), CFG,
                                                                  out_bytes=1)


@pytest.mark.parametrize("b_mode,kernel,odd", [
    (11, 3, (True, False)), (19, 3, (False, True)), (27, 3, (True, True)),
    (13, 5, (True, False)), (29, 5, (True, True)), (23, 7, (False, True)),
    (31, 7, (True, True))])
def test_odd_stride2_b_modes(b_mode, kernel, odd):
    """A stride-2 b_mode plus 8 / 16: the same layer with a top / left pad one less (TF
    "SAME"), legal with an even side, its output the same size; an odd side is refused naming
    the side and the rule."""
    from spec.desc import (DEPTHWISE_KERNELS, DEPTHWISE_STRIDES, depthwise_odd,
                           depthwise_out)
    assert (DEPTHWISE_KERNELS[b_mode], DEPTHWISE_STRIDES[b_mode], depthwise_odd(b_mode)) == (
        kernel, 2, odd)
    arrays = depthwise_arrays(b_mode)
    big = PRESETS["default"]                    # (7x7 needs a 9 x 9 mesh)
    d = dw_desc(b_mode=b_mode, c_stride=60, a_stride=4 * M,
                acc_buffer_needed=(G * H + big.array_rows) * big.c_beat_bytes)
    assert depthwise_out(d) == (6, 10)
    assert check(d, big, out_bytes=1) == []
    assert arrays == {3: 3, 5: 7, 7: 13}[kernel]
    rows, cols = odd
    if rows:
        assert (ErrorCode.BAD_FLAGS, f"b_mode={b_mode} keeps the odd output rows of the "
                "stride-1 results, which needs an even map height k, not k=13 (an odd side's "
                "stride-2 pads are the same on both ends: it keeps the even ones)") in check(
                    dataclasses.replace(d, k=13, partition_m=1, b_stride=13 * W, c_stride=70),
                    big, out_bytes=1)
    if cols:
        assert (ErrorCode.BAD_FLAGS, f"b_mode={b_mode} keeps the odd output columns of the "
                "stride-1 results, which needs an even map width n, not n=21 (an odd side's "
                "stride-2 pads are the same on both ends: it keeps the even ones)") in check(
                    dataclasses.replace(d, n=21, b_stride=H * 21, c_stride=66), big,
                    out_bytes=1)
    rec = layer_record(d, op_kind=int(OpKind.DEPTHWISE), out_format=int(OutFormat.INT8),
                       mult_addr=D // 16, shift_addr=D // 16 + 1024)
    assert check_record(rec, big) == []


def test_5x5_descriptors_take_seven_weight_arrays():
    """b_mode 4 and 5: a depthwise 5x5 layer (pad 2), the 3x3 layer's fields and output sizes,
    seven weight arrays (taps 4t .. 4t + 3 of 25 in array t) whose extent the rules check."""
    assert [depthwise_arrays(b) for b in (2, 3, 4, 5)] == [3, 3, 7, 7]
    d = dw_desc(b_mode=B_MODE_DEPTHWISE5)
    assert check(d, CFG, out_bytes=1) == []
    assert tensor_extents(d, CFG, out_bytes=1)["a"] == (D // 8, D // 8 + 6 * 4 * M + 4 * M)
    s2 = dw_desc(b_mode=B_MODE_DEPTHWISE5_S2, c_stride=60)
    assert check(s2, CFG, out_bytes=1) == []
    assert ErrorCode.BAD_PARTITION_M in codes(dataclasses.replace(
        s2, k=13, partition_m=2, b_stride=13 * W, c_stride=70))
    assert (ErrorCode.BAD_ADDRESS, f"a_addr={D // 8:#x}, a_stride={4 * M - 4}: the 7 weight "
            f"arrays of m={M} u32 need 4-byte alignment and a_stride >= 4*m={4 * M}") in check(
                dataclasses.replace(d, a_stride=4 * M - 4), CFG, out_bytes=1)
    # the seventh array may not reach the output
    assert ErrorCode.BAD_ADDRESS in codes(dataclasses.replace(d, c_addr=D // 8 + 6 * 4 * M))
    assert ErrorCode.BAD_ADDRESS not in codes(dataclasses.replace(d, c_addr=D // 8 + 7 * 4 * M))
    words = depthwise_weight_words(list(range(-12, 13)))
    assert len(words) == 7 and words[6] == 12
    assert words[0] == int.from_bytes(bytes(v & 0xFF for v in (-12, -11, -10, -9)), "little")
    with pytest.raises(ValueError, match="9, 25 or 49 int8 taps"):
        depthwise_weight_words([0] * 16)
    assert len(depthwise_weight_words([0] * 49)) == 13 == depthwise_arrays(7)


@pytest.mark.parametrize("over, code, words", [
    (dict(partition_m=0), ErrorCode.BAD_PARTITION_M, "partition_m=0"),
    (dict(k=13, partition_m=2, acc_buffer_needed=4096, b_mode=B_MODE_DEPTHWISE_S2,
          b_stride=13 * W, c_stride=70), ErrorCode.BAD_PARTITION_M, "odd with stride 2"),
    (dict(partition_m=400, acc_buffer_needed=CFG.acc_half_bytes), ErrorCode.BUF_A_OVERFLOW,
     "buffer-A"),
    (dict(acc_buffer_needed=(G * H + 7) * 32), ErrorCode.ACC_OVERFLOW, "acc_buffer_needed"),
    (dict(acc_buffer_needed=CFG.acc_half_bytes + 32), ErrorCode.ACC_OVERFLOW, "acc_half_bytes"),
    (dict(b_stride=H * W + 1), ErrorCode.BAD_ADDRESS, "b_stride"),
    (dict(c_stride=4 * H * W), ErrorCode.BAD_ADDRESS, "c_stride"),
    (dict(a_addr=D // 8 + 2), ErrorCode.BAD_ADDRESS, "a_addr"),
    (dict(a_stride=4 * M - 4), ErrorCode.BAD_ADDRESS, "a_stride"),
    (dict(b_addr=D - M * H * W + 1), ErrorCode.BAD_ADDRESS, "the input"),
    (dict(c_addr=D - M * H * W + 1), ErrorCode.BAD_ADDRESS, "the output"),
    (dict(c_addr=D // 4 + 100), ErrorCode.BAD_ADDRESS, "overlaps the input"),
    (dict(c_addr=D // 8 + 4), ErrorCode.BAD_ADDRESS, "overlaps the weights"),
])
def test_depthwise_each_rule(over, code, words):
    errs = check(dw_desc(**over), CFG, out_bytes=1)
    assert errs and errs[0][0] == code and words in errs[0][1], errs


@pytest.mark.parametrize("name", DEPTHWISE_UNUSED)
def test_depthwise_unused_fields_must_be_zero(name):
    errs = check(dw_desc(**{name: 1}), CFG, out_bytes=1)
    assert [c for c, _ in errs] == [ErrorCode.BAD_FLAGS] and f"{name}=1" in errs[0][1]


def test_depthwise_buffer_b_overflow_alone():
    # odd h with G = 1: buffer B takes one word more than A
    cfg = dataclasses.replace(CFG, buf_b_bytes=CFG.buf_a_bytes // 64,   # 32 words a half
                              quant_entries=16)    # (a parameter array fits buffer B)
    half = cfg.buf_b_depth // 2
    d = dw_desc(k=2 * half + 1, partition_m=1, acc_buffer_needed=cfg.acc_half_bytes,
                b_stride=(2 * half + 1) * W, c_stride=(2 * half + 1) * W, m=2, a_stride=8)
    assert depthwise_words(d, cfg.array_rows) == (half, half + 1)
    assert codes(d, cfg) == [ErrorCode.BUF_B_OVERFLOW]


def test_depthwise_extents_and_written_range():
    d = dw_desc()
    ext = tensor_extents(d, CFG, out_bytes=1)
    assert ext == {"a": (D // 8, D // 8 + 2 * 4 * M + 4 * M),
                   "b": (D // 4, D // 4 + M * H * W), "c": (D // 2, D // 2 + M * H * W)}
    rec = layer_record(d, out_format=int(OutFormat.INT8), mult_addr=D // 16,
                       shift_addr=D // 16 + 64)
    assert rec["op_kind"] == OpKind.DEPTHWISE
    assert written_range(rec) == ext["c"]
    assert check_record(rec, CFG) == []


def test_depthwise_record_rules():
    d = dw_desc()
    fields = dict(out_format=int(OutFormat.INT8), mult_addr=D // 16, shift_addr=D // 16 + 64)
    errs = check_record(layer_record(d, **fields, op_kind=int(OpKind.GEMM)), CFG)
    assert errs[0][0] == ErrorCode.BAD_LAYER and "b_mode" in errs[0][1]
    gemm = GemmDescriptor(m=8, k=8, n=8, partition_m=8, partition_n=8, partition_k=8,
                          tile_m=8, tile_n=8, outer_m=0, need_splitk=0, acc_buffer_needed=256,
                          a_addr=0, a_stride=8, b_addr=D // 4, b_stride=8, c_addr=D // 2,
                          c_stride=32)
    errs = check_record(layer_record(gemm, op_kind=int(OpKind.DEPTHWISE)), CFG)
    assert errs[0][0] == ErrorCode.BAD_LAYER and "op_kind=DEPTHWISE" in errs[0][1]
    # weights are parameter arrays: m <= quant_entries even without post-processing
    many = CFG.quant_entries + 1
    big = dw_desc(m=many, a_stride=4 * many, c_addr=D // 2 + D // 4)
    errs = check_record(layer_record(dataclasses.replace(big, c_stride=4 * H * W)), CFG)
    assert errs[0][0] == ErrorCode.BAD_LAYER and "(weights)" in errs[0][1], errs
    # the written range against the output window
    errs = check_record(layer_record(d, **fields, out_window_hi=D // 2 + M * H * W - 1), CFG)
    assert errs[0][0] == ErrorCode.BAD_WINDOW and "written C range" in errs[0][1]


def test_depthwise_pad_value():
    d = dw_desc()
    fields = dict(out_format=int(OutFormat.INT8), mult_addr=D // 16, shift_addr=D // 16 + 64)
    for pad in (-128, 0, 127):
        assert check_record(layer_record(d, **fields, pad_value=pad & 0xFFFF_FFFF), CFG) == []
    for pad in (-129, 128):
        errs = check_record(layer_record(d, **fields, pad_value=pad & 0xFFFF_FFFF), CFG)
        assert errs[0][0] == ErrorCode.BAD_LAYER and f"pad_value={pad} is outside int8" in errs[0][1]
    gemm = GemmDescriptor(m=8, k=8, n=8, partition_m=8, partition_n=8, partition_k=8,
                          tile_m=8, tile_n=8, outer_m=0, need_splitk=0, acc_buffer_needed=256,
                          a_addr=0, a_stride=8, b_addr=D // 4, b_stride=8, c_addr=D // 2,
                          c_stride=32)
    errs = check_record(layer_record(gemm, pad_value=3), CFG)
    assert errs == [(ErrorCode.BAD_LAYER, "pad_value=3 must be 0: only a depthwise layer "
                                          "(b_mode 2 to 7, or a stride-2 one plus 8 or 16) "
                                          "pads its input")]


def test_depthwise_image_rules():
    d = dw_desc()
    fields = dict(out_format=int(OutFormat.INT8), mult_addr=D // 8 + 256,
                  shift_addr=D // 8 + 512, stats_addr=D // 2 + 65536)
    image, wt = (D // 8, D // 8 + 4096), D // 8 + 1024
    rec = layer_record(d, **fields)
    assert check_record(rec, CFG, image=image, weights_at=wt) == []
    # the weights in the part only A loads check: refused (a depthwise A port reads the input)
    rec = layer_record(dataclasses.replace(d, a_addr=wt), **fields)
    errs = check_record(rec, CFG, image=image, weights_at=wt)
    assert errs[0][0] == ErrorCode.BAD_WINDOW and "depthwise weights" in errs[0][1]
    # the input reading the image's weights part
    rec = layer_record(dataclasses.replace(d, b_addr=wt), **fields)
    errs = check_record(rec, CFG, image=image, weights_at=wt)
    assert errs[0][0] == ErrorCode.BAD_WINDOW and "B operand" in errs[0][1]


def test_depthwise_weight_words():
    taps = [-128, 1, 2, 3, 127, -1, 5, 6, -7]
    w0, w1, w2 = depthwise_weight_words(taps)
    assert w0 == 0x03020180 and w1 == 0x0605FF7F and w2 == 0xF9
    with pytest.raises(ValueError, match="9, 25 or 49 int8 taps"):
        depthwise_weight_words(taps[:8])
    with pytest.raises(ValueError, match="9, 25 or 49 int8 taps"):
        depthwise_weight_words(taps[:8] + [128])


def test_row_phases_two_channels_a_tile_fill_a_word_more_of_a():
    """In row phases two channels a tile (spec.dwmesh.phase_halves: stride 2, even k from
    R/2 to R - 2) buffer A holds 2 ceil(G k / 4) words, one more than G k / 2 when that is
    odd; B's second class starts at the same word, so B reaches word G k / 2 as with stride 1.
    An odd count is never a power of two above 1, so a power-of-two buffer half (every
    config's, at least 2 words) that holds G k / 2 words holds the extra one too: the
    hardware's rules, which count G k / 2 for both, refuse exactly what the words refuse, with
    buffers of different sizes too."""
    cfg = PRESETS["default"]
    d = dw_desc(m=5, k=14, n=14, partition_m=5, b_mode=B_MODE_DEPTHWISE_S2)
    assert depthwise_words(d, cfg.array_rows) == (36, 35)
    assert depthwise_words(d, CFG.array_rows) == (35, 35)      # (8 rows: not in the mode)
    assert depthwise_words(dataclasses.replace(d, partition_m=4), cfg.array_rows) == (28, 28)
    for half in (2 ** n for n in range(5, 13)):
        for g in range(1, 2 * half):
            for k in (8, 10, 12, 14):
                a, b = depthwise_words(dataclasses.replace(d, k=k, partition_m=g), 16)
                assert (a <= half) == (g * k // 2 <= half) and b == g * k // 2
