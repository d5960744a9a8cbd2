"""Fused chains as firmware (seed 003): their data, golden model and images.

:func:`build_image` turns a :class:`planner.fusion.Chain` and a consumer block size into one
image (producer block ``j``, then consumer block ``j``, the intermediate in the local buffer; or
unfused, through memory). :func:`image_cost` is the cost :func:`planner.fusion.plan_fusion`
chooses with: each candidate's image, predicted by the cycle model with its overheads
(:func:`firmware.builder.predicted_image_cycles`), on placeholder data of the chain's shapes;
:func:`fusion_plan` is that plan. ``python -m firmware.chains`` prints it (:func:`main`).
"""

from __future__ import annotations

import argparse
import dataclasses

import numpy as np

from planner.fusion import (CHAINS, Block, Chain, ChainCost, FusionPlan, GemmOp,
                            Op, blocks_of, channels, dependencies, extent, local_bytes,
                            parse_gemm_chain, plan_fusion, row_bytes)
from planner.layout import padded_bytes, to_padded
from spec.config import PRESETS, AccelConfig
from spec.golden import conv2d_int8, gemm_int8, requantize

from .builder import ImageBuilder, Requant, predicted_image_cycles

__all__ = ["ChainData", "BuiltChain", "build_image", "golden_output", "placeholder_data",
           "image_cost", "fusion_plan", "main"]


# -- data, golden model, images --------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class ChainData:
    """Tensors of a chain: the producer's input ``x`` (k x n, or C x H x W), both layers'
    int8 weights (GEMM: m x k; conv: K x C x R x S) and :class:`firmware.builder.Requant`
    parameters (every fused intermediate is requantised int8 on chip)."""

    x: np.ndarray
    w1: np.ndarray
    w2: np.ndarray
    r1: object
    r2: object


def _gemm_weights(op: Op, w: np.ndarray) -> np.ndarray:
    return w if isinstance(op, GemmOp) else w.reshape(op.shape.out_channels, -1)


def golden_output(chain: Chain, data: ChainData) -> np.ndarray:
    """The consumer's int8 output (m2 x n, or K2 x P*Q) from :mod:`spec.golden`."""

    def rq(acc, r):
        return requantize(acc, multiplier=r.multiplier, shift=r.shift, zero_point=r.zero_point,
                          act_min=r.act_min, act_max=r.act_max)

    p = chain.producer
    if isinstance(p, GemmOp):
        h = rq(gemm_int8(data.w1, data.x), data.r1)
    else:
        acc = conv2d_int8(data.x[None], data.w1, stride=(p.shape.stride_h, p.shape.stride_w),
                          pads=(p.shape.pad_top, p.shape.pad_left, p.shape.pad_bottom,
                                p.shape.pad_right),
                          dilation=(p.shape.dilation_h, p.shape.dilation_w))[0]
        h = rq(acc.reshape(p.shape.out_channels, -1), data.r1)
    return rq(gemm_int8(_gemm_weights(chain.consumer, data.w2), h), data.r2).astype(np.int8)


def placeholder_data(chain: Chain) -> ChainData:
    """Constant tensors of the chain's shapes: costing candidates needs shapes, not values. Every
    array differs from the other layer's (1 vs 2), so the image stores as many blobs as with
    real data (the builder shares identical ones) and the predicted image overhead is the
    real image's."""

    def weights(op, value):
        if isinstance(op, GemmOp):
            return np.full((op.m, op.k), value, np.int8)
        s = op.shape
        return np.full((s.out_channels, s.in_channels, s.kernel_h, s.kernel_w), value, np.int8)

    def requant(op, value):
        m = channels(op)
        return Requant(multiplier=np.full(m, (1 << 30) + value, np.int32),
                       shift=np.full(m, value, np.int32))

    p = chain.producer
    x = (np.zeros((p.k, p.n), np.int8) if isinstance(p, GemmOp)
         else np.zeros((p.shape.in_channels, p.shape.height, p.shape.width), np.int8))
    return ChainData(x, weights(p, 1), weights(chain.consumer, 2), requant(p, 1),
                     requant(chain.consumer, 2))


@dataclasses.dataclass
class BuiltChain:
    """A chain's image and where its tensors live: load ``x_bytes`` at ``x_addr`` before the
    run, read the output (``y_rows`` rows of ``y_cols`` int8 at ``y_stride``) at ``y_addr``."""

    blob: bytes
    layers: list
    x_addr: int
    x_bytes: bytes
    y_addr: int
    y_rows: int
    y_cols: int
    predicted_cycles: int
    predicted_dram_bytes: int


def build_image(chain: Chain, data: ChainData, cfg: AccelConfig, block: int | None, *,
                strategy: str = "best") -> BuiltChain:
    """The image running ``chain``: unfused (``block`` None: the producer's whole output goes
    to memory and the consumer reads it back) or fused with consumer blocks of ``block``
    tokens / output rows, the intermediate in the local buffer."""

    p, c = chain.producer, chain.consumer
    b = ImageBuilder(cfg, strategy=strategy, share_blobs=True)
    w2 = _gemm_weights(c, data.w2)
    m2 = w2.shape[0]
    if isinstance(p, GemmOp):
        n, unit = p.n, 1
        x_bytes = np.ascontiguousarray(data.x).tobytes()
        x_addr = b.buffer("x", len(x_bytes))
    else:
        s = p.shape
        n, unit = s.out_h * s.out_w, s.out_w
        x_bytes = to_padded(data.x[None], s, "NCHW").tobytes()
        x_addr = b.buffer("x", padded_bytes(s, "NCHW"))
    y_addr = b.buffer("y", m2 * n)

    def producer(name, out_addr, chan_stride, out):
        if isinstance(p, GemmOp):
            lo, hi = out
            b.gemm(name, weights=data.w1, n=hi - lo, b_addr=x_addr + lo, b_stride=p.n,
                   out_addr=out_addr, out_stride=chan_stride, requant=data.r1)
        else:
            b.conv(name, shape=p.shape, weights=data.w1, x_addr=x_addr, out_addr=out_addr,
                   out_chan_stride=chan_stride, requant=data.r1,
                   rows=None if out == (0, p.shape.out_h) and block is None else out)

    def consumer(name, h_addr, h_stride, blk: Block):
        lo, hi = blk.lo * unit, blk.hi * unit
        b.gemm(name, weights=w2, n=hi - lo, b_addr=h_addr, b_stride=h_stride,
               out_addr=y_addr + lo, out_stride=n, requant=data.r2)

    if block is None:
        h_addr = b.buffer("h", channels(p) * n)
        producer(p.name, h_addr, n, (0, extent(c)))
        consumer(c.name, h_addr, n, Block(0, extent(c)))
    else:
        need = local_bytes(chain, block, cfg)
        h_addr = b.local("h", need)
        for j, blk in enumerate(blocks_of(chain, block)):
            out = dependencies(chain, blk).producer_out
            stride = row_bytes(chain, out[1] - out[0], cfg)
            producer(f"{p.name}[{j}]", h_addr, stride, out)
            # the consumer's block starts at its first dependency (1x1: the same rows)
            consumer(f"{c.name}[{j}]", h_addr + (blk.lo - out[0]) * unit, stride, blk)
    blob, layers = b.build()
    predicted = predicted_image_cycles(blob, layers, cfg)
    return BuiltChain(blob=blob, layers=layers, x_addr=x_addr, x_bytes=x_bytes, y_addr=y_addr,
                      y_rows=m2, y_cols=n, predicted_cycles=predicted,
                      predicted_dram_bytes=sum(l.predicted_dram_bytes for l in layers))


def image_cost(chain: Chain, cfg: AccelConfig, *, strategy: str = "best") -> ChainCost:
    """The :data:`planner.fusion.ChainCost` of ``chain``: build the image with consumer blocks
    of ``block`` (``None``: unfused) on :func:`placeholder_data` and return its predicted cycles
    (layers and image overheads) and memory bytes."""
    data = placeholder_data(chain)

    def cost(block: int | None) -> tuple[int, int]:
        built = build_image(chain, data, cfg, block, strategy=strategy)
        return built.predicted_cycles, built.predicted_dram_bytes

    return cost


def fusion_plan(chain: Chain, cfg: AccelConfig, *, strategy: str = "best",
                require_gain: bool = True) -> FusionPlan:
    """:func:`planner.fusion.plan_fusion` with each candidate's image as its cost."""
    return plan_fusion(chain, cfg, image_cost(chain, cfg, strategy=strategy),
                       require_gain=require_gain)


def main(argv: list[str] | None = None) -> int:
    """``python -m firmware.chains``: the fusion plan (every candidate partition, its local-buffer
    need, predicted cycles and memory bytes, or why it was refused) of named or given chains."""
    ap = argparse.ArgumentParser(prog="python -m firmware.chains", description=main.__doc__)
    ap.add_argument("--preset", default="default", choices=sorted(PRESETS))
    ap.add_argument("--chain", action="append", choices=sorted(CHAINS),
                    help="a chain of planner.fusion.CHAINS (repeatable; default: all)")
    ap.add_argument("--gemm-chain", action="append", metavar="M1,K1,N:M2",
                    help="a GEMM (M1 x K1 x N) feeding a GEMM (M2 x M1 x N)")
    args = ap.parse_args(argv)
    cfg = PRESETS[args.preset]
    chains = [(name, CHAINS[name]) for name in (args.chain or [])]
    try:
        chains += [(text, parse_gemm_chain(text)) for text in (args.gemm_chain or [])]
    except ValueError as exc:
        ap.error(str(exc))
    if not chains:
        chains = list(CHAINS.items())
    status = 0
    for name, chain in chains:
        print(f"{name}: {chain.producer.name} -> {chain.consumer.name} on {args.preset} "
              f"(local_buf_bytes={cfg.local_buf_bytes})")
        try:
            plan = fusion_plan(chain, cfg)
        except ValueError as exc:           # FusionError, or the image builder's refusal
            print(f"  refused: {exc}")
            status = 1
            continue
        print(f"  unfused: {plan.unfused_cycles:,} cycles, {plan.unfused_dram_bytes:,} memory "
              f"bytes (layers)")
        for c in plan.candidates:
            mark = "*" if c.block == plan.block and not c.refused else " "
            if c.refused:
                print(f"  {mark} block {c.block:>5} x{c.blocks:<4} local {c.local_bytes:>9,} B  "
                      f"refused: {c.refused}")
            else:
                print(f"  {mark} block {c.block:>5} x{c.blocks:<4} local {c.local_bytes:>9,} B  "
                      f"{c.predicted_cycles:>12,} cycles  {c.predicted_dram_bytes:>12,} bytes")
    return status


if __name__ == "__main__":
    raise SystemExit(main())
