"""Two demo networks, each compiled to one firmware image: a small int8 CNN and a 2-layer MLP.

Weights, biases and inputs are seeded random int8 / int32; the requantisation scales are chosen
so activations use the int8 range. :class:`Network` carries the image, what to load into device
memory, what to read back and the golden (numpy, :mod:`spec.golden`) value of every buffer read.

* **CNN** (``build_cnn``): input 3x16x16; four 3x3 convolutions with padding 1 and strides 1, 2,
  1, 2 (3->8->16->16->32 channels), each requantised with ReLU; a fully connected head
  (512 -> 10) with an int32 bias and int8 logits with a zero point. Each convolution that feeds
  another writes straight into the interior of the next one's padded input buffer (one record
  per output row), so the whole network runs from one start.
* **MLP** (``build_mlp``): 2 fully connected layers on a batch of tokens (features x tokens):
  37 -> 45 (int8, ReLU) -> 10 (int32 logits with bias).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from planner.layout import padded_bytes, padded_dims, to_padded
from planner.requant import quantize_multiplier
from planner.shapes import ConvShape
from spec.config import AccelConfig
from spec.golden import conv2d_int8, gemm_int8, requantize
from spec.layouts import OpKind, PostMode

from .builder import BuiltLayer, ImageBuilder, Requant
from .runtime import image_budget_cycles

__all__ = ["Network", "build_cnn", "build_mlp", "NETWORKS", "budget_cycles", "random_int8",
           "random_requant"]


@dataclasses.dataclass
class Network:
    name: str
    blob: bytes
    layers: list[BuiltLayer]
    load: list[tuple[int, bytes]]                  # (addr, bytes) the host writes before start
    read: list[tuple[str, int, int]]               # (name, addr, size) read back after done
    golden: dict[str, bytes]                       # the expected bytes of every read


def budget_cycles(net: Network) -> int:
    """The run's cycle budget (:func:`firmware.runtime.image_budget_cycles`)."""
    return image_budget_cycles(sum(b.predicted_cycles for b in net.layers), len(net.blob),
                               len(net.layers))


def random_requant(rng, m: int, k: int, *, relu: bool, zero_point: int = 0) -> Requant:
    """Per-channel scales that map accumulators of k int8 products to about +-64."""
    acc_std = np.sqrt(k) * 74.0 * 74.0
    scales = 40.0 / acc_std * rng.uniform(0.5, 1.5, m)
    mult, shift = zip(*(quantize_multiplier(float(s)) for s in scales))
    return Requant(multiplier=np.array(mult, np.int32), shift=np.array(shift, np.int32),
                   zero_point=zero_point, act_min=zero_point if relu else -128, act_max=127,
                   post_mode=PostMode.RELU if relu else PostMode.NONE)


def _golden_requant(acc: np.ndarray, rq: Requant, bias=None) -> np.ndarray:
    return requantize(acc, multiplier=rq.multiplier, shift=rq.shift, bias=bias,
                      zero_point=rq.zero_point, act_min=rq.act_min, act_max=rq.act_max)


def random_int8(rng, shape) -> np.ndarray:
    """Full-range random int8 of ``shape``."""
    return rng.integers(-128, 128, shape, dtype=np.int64).astype(np.int8)


def build_cnn(cfg: AccelConfig, seed: int = 0, strategy: str = "best") -> Network:
    rng = np.random.default_rng(seed)
    b = ImageBuilder(cfg, strategy=strategy)
    spec = [(3, 8, 1), (8, 16, 2), (16, 16, 1), (16, 32, 2)]       # (in, out, stride), 3x3 pad 1
    h = w = 16
    shapes = []
    for c_in, c_out, stride in spec:
        shapes.append(ConvShape(batch=1, in_channels=c_in, height=h, width=w,
                                out_channels=c_out, kernel_h=3, kernel_w=3, stride_h=stride,
                                stride_w=stride, pad_top=1, pad_left=1, pad_bottom=1,
                                pad_right=1))
        h, w = shapes[-1].out_h, shapes[-1].out_w
    # padded input buffers of the four convolutions, then the flat CHW output of the last one
    xbufs = [b.buffer(f"x{i}", padded_bytes(s, "NCHW")) for i, s in enumerate(shapes)]
    last = shapes[-1]
    flat = last.out_channels * last.out_h * last.out_w
    feat = b.buffer("features", flat)
    logits = b.buffer("logits", 10)

    x = random_int8(rng, (1, 3, 16, 16))
    golden: dict[str, bytes] = {}
    act = x
    for i, s in enumerate(shapes):
        wgt = random_int8(rng, (s.out_channels, s.in_channels, 3, 3))
        k = s.in_channels * 9
        rq = random_requant(rng, s.out_channels, k, relu=True)
        bias = rng.integers(-4000, 4000, s.out_channels).astype(np.int32)
        if i + 1 < len(shapes):
            nxt = shapes[i + 1]
            hp, wp = padded_dims(nxt)
            out_addr = xbufs[i + 1] + nxt.pad_top * wp + nxt.pad_left
            b.conv(f"conv{i + 1}", shape=s, weights=wgt, x_addr=xbufs[i], out_addr=out_addr,
                   out_chan_stride=hp * wp, out_row_stride=wp, bias=bias, requant=rq)
        else:
            b.conv(f"conv{i + 1}", shape=s, weights=wgt, x_addr=xbufs[i], out_addr=feat,
                   out_chan_stride=s.out_h * s.out_w, bias=bias, requant=rq)
        acc = conv2d_int8(act, wgt, stride=(s.stride_h, s.stride_w), pads=(1, 1, 1, 1))
        y = _golden_requant(acc.reshape(s.out_channels, -1), rq, bias)
        act = y.reshape(1, s.out_channels, s.out_h, s.out_w)
        if i + 1 < len(shapes):
            golden[f"x{i + 1}"] = to_padded(act, shapes[i + 1], "NCHW").tobytes()
    golden["features"] = act.reshape(-1).tobytes()
    w_fc = random_int8(rng, (10, flat))
    bias_fc = rng.integers(-20000, 20000, 10).astype(np.int32)
    rq_fc = random_requant(rng, 10, flat, relu=False, zero_point=-7)
    b.gemm("fc", weights=w_fc, n=1, b_addr=feat, b_stride=1, out_addr=logits, out_stride=1,
           bias=bias_fc, requant=rq_fc, op_kind=OpKind.FC)
    acc = gemm_int8(w_fc, act.reshape(flat, 1))
    golden["logits"] = _golden_requant(acc, rq_fc, bias_fc).tobytes()

    blob, layers = b.build()
    load = [(xbufs[0], to_padded(x, shapes[0], "NCHW").tobytes())]
    # the other padded buffers start zeroed: their halo is the next layer's zero padding
    load += [(addr, bytes(padded_bytes(s, "NCHW"))) for addr, s in zip(xbufs[1:], shapes[1:])]
    read = [(f"x{i}", xbufs[i], padded_bytes(shapes[i], "NCHW")) for i in range(1, len(shapes))]
    read += [("features", feat, flat), ("logits", logits, 10)]
    return Network("cnn", blob, layers, load, read, golden)


def build_mlp(cfg: AccelConfig, seed: int = 0, strategy: str = "best") -> Network:
    rng = np.random.default_rng(seed)
    b = ImageBuilder(cfg, strategy=strategy)
    d_in, d_hidden, d_out, tokens = 37, 45, 10, 13
    x = random_int8(rng, (d_in, tokens))
    w1 = random_int8(rng, (d_hidden, d_in))
    w2 = random_int8(rng, (d_out, d_hidden))
    bias1 = rng.integers(-3000, 3000, d_hidden).astype(np.int32)
    bias2 = rng.integers(-3000, 3000, d_out).astype(np.int32)
    rq1 = random_requant(rng, d_hidden, d_in, relu=True)
    x_addr = b.buffer("x", x.size)
    h_addr = b.buffer("hidden", d_hidden * tokens)
    y_addr = b.buffer("logits", 4 * d_out * tokens)
    b.gemm("fc1", weights=w1, n=tokens, b_addr=x_addr, b_stride=tokens, out_addr=h_addr,
           out_stride=tokens, bias=bias1, requant=rq1, op_kind=OpKind.FC)
    b.gemm("fc2", weights=w2, n=tokens, b_addr=h_addr, b_stride=tokens, out_addr=y_addr,
           out_stride=4 * tokens, bias=bias2, op_kind=OpKind.FC)
    hidden = _golden_requant(gemm_int8(w1, x), rq1, bias1)
    acc2 = gemm_int8(w2, hidden).astype(np.int64) + bias2[:, None]
    logits = ((acc2 + 2**31) % 2**32 - 2**31).astype("<i4")
    blob, layers = b.build()
    return Network("mlp", blob, layers, load=[(x_addr, x.tobytes())],
                   read=[("hidden", h_addr, hidden.size), ("logits", y_addr, logits.nbytes)],
                   golden={"hidden": hidden.tobytes(), "logits": logits.tobytes()})


NETWORKS = {"cnn": build_cnn, "mlp": build_mlp}
