"""Operator fusion (seed 003): keep a producer's output tiles on chip for its consumer.

A *chain* is a producer layer whose output feeds exactly one consumer layer. Instead of writing
the whole intermediate tensor to memory and reading it back, the fused schedule

1. partitions the **consumer's output** first, into blocks the hardware supports: column blocks
   of tokens (multiples of ``array_cols``) for a GEMM consumer, blocks of output rows for a
   1x1 convolution consumer (the minimum block is one output row);
2. derives, per consumer block, the producer output it depends on (:func:`dependencies`: all
   producer output channels of the block's tokens; for convolutions, the output rows the
   consumer's kernel window reaches, and through the producer's own kernel the input rows with
   their halo);
3. checks that one block of the intermediate fits the accelerator's on-chip local buffer
   (``AccelConfig.local_buf_bytes``) and refuses with the reason when it does not;
4. fixes the execution order: producer block ``j``, then consumer block ``j``, for every ``j``
   (the dependent blocks run back to back, so one local region is reused by every block);
5. stores the producer's blocks in the local buffer: the producer's record writes its
   requantised int8 output there, the consumer's record reads it there as its B operand
   (``hw/sequencer.py``); neither crosses a memory port.

The "second code" of seed 003 -- the partition, the dependencies, the order and the storage rule
-- is the firmware image itself: one layer record per block and layer, in execution order, whose
C (producer) and B (consumer) addresses lie in the local buffer.

Several candidate partitions are generated (block sizes halving from the whole tensor down to the
minimum block); each is costed by a function the caller gives (:data:`ChainCost`; firmware
builds each candidate's image and predicts it with the cycle model, layers and image overheads:
:func:`firmware.chains.image_cost`), and the cheapest that fits wins (ties: fewer DRAM bytes).
The chains' images, data and golden model are :mod:`firmware.chains`; docs/fusion.md has the
measurements.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable


from spec.config import AccelConfig
from spec.record import SECTION_ALIGN_BYTES

from .net.lower import AccelLayer
from .shapes import ConvShape

__all__ = ["fusion_op", "fusible_pairs", "GemmOp", "ConvOp", "Node", "Chain", "Refusal",
           "FusionError", "Block", "Deps", "Candidate", "FusionPlan", "ChainCost", "find_chains",
           "fusible", "conv_input_range", "dependencies", "local_bytes", "blocks_of",
           "plan_fusion", "intermediate_bytes", "CHAINS", "extent", "channels", "row_bytes",
           "conv_op", "parse_gemm_chain"]


class FusionError(ValueError):
    """No fused schedule exists for a chain; the message gives the reason."""


@dataclasses.dataclass(frozen=True)
class GemmOp:
    """``Y (m x n) = W (m x k) @ X (k x n)``: features x tokens, int8 in and out."""

    name: str
    m: int
    k: int
    n: int

    def __post_init__(self):
        for field in ("m", "k", "n"):
            value = getattr(self, field)
            if type(value) is not int or value < 1:
                raise ValueError(f"GemmOp {self.name!r}: {field} must be a positive int, not "
                                 f"{value!r}")


@dataclasses.dataclass(frozen=True)
class ConvOp:
    """A convolution on an NCHW tensor (batch 1, one group); int8 in and out."""

    name: str
    shape: ConvShape


Op = GemmOp | ConvOp


@dataclasses.dataclass(frozen=True)
class Node:
    """A layer of a network: ``op`` reads tensor ``input`` (its B operand) and writes
    ``output``."""

    op: Op
    input: str
    output: str


@dataclasses.dataclass(frozen=True)
class Chain:
    producer: Op
    consumer: Op


@dataclasses.dataclass(frozen=True)
class Refusal:
    producer: str
    consumer: str | None
    reason: str


# -- network pairing (seed 003 inside a compiled network's segments) ---------------------------

def fusion_op(l: AccelLayer) -> Op:
    """The fusion planner's view of a lowered network layer."""
    if l.kind == "conv":
        return ConvOp(l.name, l.shape)
    return GemmOp(l.name, l.shape.m, l.shape.k, l.shape.n)


def fusible_pairs(layers: list[AccelLayer], reads_after: set[str],
                  cfg: AccelConfig) -> tuple[list[tuple[AccelLayer, AccelLayer, int]],
                                             list[tuple[str, str, str]]]:
    """The pairs of a segment whose intermediate can stay in the local buffer whole (seed 003,
    planner.fusion), as ``(producer, consumer, local row bytes)``, and every candidate pair that
    cannot, as ``(producer, consumer, reason)``. A pair qualifies when the producer's output is
    read by the consumer only (not by another layer, a later step or the graph output), the
    hardware can serve it (:func:`planner.fusion.fusible`: a GEMM-like consumer), both layers
    fit the parameter memories in one piece, the consumer's output is not padded, and the
    intermediates of the segment fit ``local_buf_bytes`` together."""

    readers: dict[str, list[AccelLayer]] = {}
    for l in layers:
        for t in l.inputs:
            readers.setdefault(t, []).append(l)
    inner = {l.input: l.in_layout for l in layers if l.input in {x.output for x in layers}}
    pairs, refused, used, free = [], [], set(), cfg.local_buf_bytes
    for p in layers:
        users = readers.get(p.output, [])
        if len(users) != 1 or p.kind not in ("conv", "fc"):
            continue
        c = users[0]
        pop, cop = fusion_op(p), fusion_op(c)
        why = None
        if p.output in reads_after:
            why = f"{p.output!r} is also read after the segment"
        elif c.input != p.output or c.kind not in ("conv", "fc"):
            why = f"{c.name} does not read {p.output!r} as its activation operand"
        elif p.name in used or c.name in used:
            why = "a layer of this pair is already fused"
        elif p.mesh or c.mesh:
            why = "a depthwise layer on the mesh reads and writes memory only"
        else:
            why = fusible(pop, cop)
        if why is None and max(channels(pop), channels(cop)) > cfg.quant_entries:
            why = f"more than quant_entries={cfg.quant_entries} output channels (split layer)"
        if why is None and c.kind == "conv" and inner.get(c.output, c.out_layout)[1] != \
                (0, 0, 0, 0):
            why = f"{c.name}'s output goes to a padded buffer (a convolution reads it)"
        row = 0
        if why is None:                     # the whole intermediate, one block
            chain, whole = Chain(pop, cop), extent(cop)
            row = row_bytes(chain, whole, cfg)
            # ImageBuilder.local allocates whole sections
            need = -(-local_bytes(chain, whole, cfg) // SECTION_ALIGN_BYTES) * SECTION_ALIGN_BYTES
            if cfg.local_unreachable():
                why = cfg.local_unreachable()
            elif need > free:
                why = (f"the intermediate needs {need} bytes on chip, {free} of "
                       f"local_buf_bytes={cfg.local_buf_bytes} are free")
            else:
                free -= need
        if why is None:
            pairs.append((p, c, row))
            used.update((p.name, c.name))
        else:
            refused.append((p.name, c.name, why))
    return pairs, refused


def _pointwise(shape: ConvShape) -> bool:
    return (shape.kernel_h == shape.kernel_w == 1 and shape.stride_h == shape.stride_w == 1
            and shape.dilation_h == shape.dilation_w == 1 and shape.groups == 1
            and shape.pad_top == shape.pad_bottom == shape.pad_left == shape.pad_right == 0)


def fusible(producer: Op, consumer: Op) -> str | None:
    """Why the hardware cannot run ``producer -> consumer`` fused (None when it can).

    The local buffer serves a *dense* B operand: the consumer must read the intermediate as a
    matrix (a GEMM, or a 1x1 stride-1 unpadded convolution, which is a GEMM over pixels); a
    consumer that gathers its B through convolution tables (a kernel wider than 1x1, a stride,
    padding) reads memory. Both layers must be batch 1, one group."""
    for op in (producer, consumer):
        if isinstance(op, ConvOp) and (op.shape.batch != 1 or op.shape.groups != 1):
            return (f"{op.name}: batch={op.shape.batch}, groups={op.shape.groups}; fusion "
                    f"handles batch 1, one group")
    if isinstance(producer, GemmOp) and isinstance(consumer, GemmOp):
        if consumer.k != producer.m or consumer.n != producer.n:
            return (f"{consumer.name} (k={consumer.k}, n={consumer.n}) does not consume "
                    f"{producer.name}'s {producer.m}x{producer.n} output")
        return None
    if isinstance(producer, ConvOp) and isinstance(consumer, ConvOp):
        p, c = producer.shape, consumer.shape
        if (c.in_channels, c.height, c.width) != (p.out_channels, p.out_h, p.out_w):
            return (f"{consumer.name}'s input {c.in_channels}x{c.height}x{c.width} is not "
                    f"{producer.name}'s output {p.out_channels}x{p.out_h}x{p.out_w}")
        if not _pointwise(c):
            return (f"{consumer.name} is a {c.kernel_h}x{c.kernel_w} convolution (stride "
                    f"{c.stride_h}, padding {c.pad_top}): it gathers its B through tables from "
                    f"memory, and the local buffer serves dense B operands only (1x1, stride 1, "
                    f"no padding)")
        return None
    return (f"{producer.name} ({type(producer).__name__}) -> {consumer.name} "
            f"({type(consumer).__name__}): the layouts differ (features x tokens vs NCHW)")


def find_chains(nodes: list[Node]) -> tuple[list[Chain], list[Refusal]]:
    """Fusible producer -> consumer pairs of ``nodes``, and every pair that is not, with why.

    A producer qualifies when its output tensor is read by exactly one layer (a tensor two
    layers read, e.g. a residual, must reach memory anyway). Chains do not overlap: a layer is
    fused with at most one neighbour, taken in node order."""
    readers: dict[str, list[Node]] = {}
    for node in nodes:
        readers.setdefault(node.input, []).append(node)
    chains, refused, used = [], [], set()
    for node in nodes:
        users = readers.get(node.output, [])
        if not users:
            continue
        if len(users) > 1:
            refused.append(Refusal(node.op.name, None,
                                   f"its output {node.output!r} feeds {len(users)} layers "
                                   f"({', '.join(u.op.name for u in users)}), so it must reach "
                                   f"memory"))
            continue
        consumer = users[0]
        if node.op.name in used or consumer.op.name in used:
            refused.append(Refusal(node.op.name, consumer.op.name,
                                   "a layer of this pair is already fused with a neighbour"))
            continue
        reason = fusible(node.op, consumer.op)
        if reason:
            refused.append(Refusal(node.op.name, consumer.op.name, reason))
            continue
        chains.append(Chain(node.op, consumer.op))
        used.update((node.op.name, consumer.op.name))
    return chains, refused


# -- dependencies ----------------------------------------------------------------------------------

def conv_input_range(shape: ConvShape, lo: int, hi: int, axis: str = "h") -> tuple[int, int]:
    """Input rows (``axis="h"``) or columns (``"w"``) ``[first, last+1)`` of the unpadded input
    that output rows / columns ``[lo, hi)`` of ``shape`` read, clipped to the tensor (taps in the
    padding read the halo, not the tensor)."""
    if axis == "h":
        stride, pad, dil, kern, size = (shape.stride_h, shape.pad_top, shape.dilation_h,
                                        shape.kernel_h, shape.height)
    else:
        stride, pad, dil, kern, size = (shape.stride_w, shape.pad_left, shape.dilation_w,
                                        shape.kernel_w, shape.width)

    def taps(p):                            # input positions output position p reads
        return [t for t in range(p * stride - pad, p * stride - pad + kern * dil, dil)
                if 0 <= t < size]

    # a dilated kernel's taps may straddle the padding, and with dilation > stride a later
    # position can reach a lower row: take the extremes over every position of the block
    reach = [t for p in range(lo, hi) for t in taps(p)[:1] + taps(p)[-1:]]
    if not reach:
        return 0, 0                         # every tap of the block reads the padding
    return min(reach), max(reach) + 1


@dataclasses.dataclass(frozen=True)
class Block:
    """A block of the consumer's output: tokens ``[lo, hi)`` (GEMM) or output rows (conv)."""

    lo: int
    hi: int


@dataclasses.dataclass(frozen=True)
class Deps:
    """What one consumer block depends on: the producer output ``[lo, hi)`` (tokens or rows,
    every channel) and, through the producer, its input ``[lo, hi)`` (with a convolution's
    halo)."""

    producer_out: tuple[int, int]
    producer_in: tuple[int, int]


def dependencies(chain: Chain, block: Block) -> Deps:
    """Seed 003's dependency derivation for one consumer output block."""
    p, c = chain.producer, chain.consumer
    if isinstance(c, GemmOp):
        out = (block.lo, block.hi)              # a token's output needs that token's column
    else:
        out = conv_input_range(c.shape, block.lo, block.hi)
    if isinstance(p, GemmOp):
        return Deps(out, out)
    return Deps(out, conv_input_range(p.shape, *out))


def extent(op: Op) -> int:
    """Size of the consumer's blockable output axis: tokens or output rows."""
    return op.n if isinstance(op, GemmOp) else op.shape.out_h


def channels(op: Op) -> int:
    """Output channels (rows of the output) of ``op``."""
    return op.m if isinstance(op, GemmOp) else op.shape.out_channels


def _pixels_per_unit(op: Op) -> int:
    return 1 if isinstance(op, GemmOp) else op.shape.out_w


def blocks_of(chain: Chain, size: int) -> list[Block]:
    """The consumer's output cut into blocks of ``size`` (the last one ragged)."""
    total = extent(chain.consumer)
    return [Block(lo, min(lo + size, total)) for lo in range(0, total, size)]


def row_bytes(chain: Chain, size: int, cfg: AccelConfig) -> int:
    """Bytes of one channel of one intermediate block as stored on chip (whole local rows)."""
    beat = cfg.b_beat_bytes
    return -(-size * _pixels_per_unit(chain.producer) // beat) * beat


def local_bytes(chain: Chain, size: int, cfg: AccelConfig) -> int:
    """Local-buffer bytes a block of ``size`` needs: every producer channel of the block."""
    deps = max((dependencies(chain, b) for b in blocks_of(chain, size)),
               key=lambda d: d.producer_out[1] - d.producer_out[0])
    rows = deps.producer_out[1] - deps.producer_out[0]
    return channels(chain.producer) * row_bytes(chain, rows, cfg)


def intermediate_bytes(chain: Chain) -> int:
    """Bytes of the int8 intermediate tensor (producer output)."""
    p = chain.producer
    return p.m * p.n if isinstance(p, GemmOp) else (p.shape.out_channels * p.shape.out_h
                                                    * p.shape.out_w)


def conv_op(name: str, c: int, h: int, w: int, k: int, r: int = 1, pad: int = 0) -> ConvOp:
    """A batch-1 ``r`` x ``r`` convolution ``c`` -> ``k`` channels on ``h`` x ``w``, padding
    ``pad`` on every side."""
    return ConvOp(name, ConvShape(batch=1, in_channels=c, height=h, width=w, out_channels=k,
                                  kernel_h=r, kernel_w=r, pad_top=pad, pad_left=pad,
                                  pad_bottom=pad, pad_right=pad))


#: Example chains, those of the acceptance runs and the benchmark (docs/fusion.md): BERT-base's FFN block
#: at seq 128 (768 -> 3072 -> 768; the hardware's activation is ReLU, not GELU) and the 3x3 ->
#: 1x1 pair of ResNet-50 bottlenecks (res2: 56x56, res5: 7x7).
CHAINS: dict[str, Chain] = {
    "bert_base_ffn_seq128": Chain(GemmOp("ffn.up", 3072, 768, 128),
                                  GemmOp("ffn.down", 768, 3072, 128)),
    "resnet50_res2_3x3_1x1": Chain(conv_op("res2_branch2b", 64, 56, 56, 64, r=3, pad=1),
                                   conv_op("res2_branch2c", 64, 56, 56, 256)),
    "resnet50_res5_3x3_1x1": Chain(conv_op("res5_branch2b", 512, 7, 7, 512, r=3, pad=1),
                                   conv_op("res5_branch2c", 512, 7, 7, 2048)),
}


# -- candidates and the choice ---------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Candidate:
    """One consumer partition: blocks of ``block`` tokens / rows; its local-buffer need and,
    when it fits, the predicted image cycles and memory-port bytes; else why it was refused."""

    block: int
    blocks: int
    local_bytes: int
    predicted_cycles: int | None = None
    predicted_dram_bytes: int | None = None
    refused: str | None = None


@dataclasses.dataclass(frozen=True)
class FusionPlan:
    chain: Chain
    block: int                          # the chosen block size
    candidates: tuple[Candidate, ...]   # every candidate considered, the chosen one included
    unfused_cycles: int                 # predicted, same image conventions
    unfused_dram_bytes: int

    @property
    def chosen(self) -> Candidate:
        return next(c for c in self.candidates if c.block == self.block and not c.refused)


def _sizes(chain: Chain, cfg: AccelConfig) -> list[int]:
    """Block sizes from the whole axis down to the minimum block, halving (tokens in whole
    lane groups of ``array_cols``; output rows down to one)."""
    total = extent(chain.consumer)
    quantum = cfg.array_cols if isinstance(chain.consumer, GemmOp) else 1
    sizes, size = [], total
    while True:
        size = max(quantum, -(-size // quantum) * quantum) if quantum > 1 else max(size, 1)
        size = min(size, total)
        if size not in sizes:
            sizes.append(size)
        if size <= quantum:
            break
        size = -(-size // 2)
    return sizes


#: The cost of one way to run a chain: ``cost(block)`` -> ``(predicted cycles, predicted memory
#: bytes)`` with consumer blocks of ``block`` (``None``: unfused). The images are firmware's to
#: build, so the caller supplies it (:func:`firmware.chains.image_cost`).
ChainCost = Callable[[int | None], tuple[int, int]]


def _tensor_bytes(op: Op) -> tuple[int, int, int]:
    """``(input, weights, output)`` bytes of ``op``, int8 and unpadded: the least memory its
    tensors take."""
    if isinstance(op, GemmOp):
        return op.k * op.n, op.m * op.k, op.m * op.n
    s = op.shape
    return (s.in_channels * s.height * s.width,
            s.out_channels * s.in_channels * s.kernel_h * s.kernel_w,
            s.out_channels * s.out_h * s.out_w)


def plan_fusion(chain: Chain, cfg: AccelConfig, cost: ChainCost, *,
                require_gain: bool = True) -> FusionPlan:
    """Choose the consumer partition of ``chain`` (module docstring), each candidate costed by
    ``cost`` (:data:`ChainCost`). Raises
    :class:`FusionError` naming the reason when the hardware cannot fuse it: a layer the local
    buffer cannot serve (:func:`fusible`), tensors that cannot all lie in the device memory
    (before any candidate is costed), more output channels than ``quant_entries``, or no
    block that fits ``local_buf_bytes``; and, with ``require_gain``, when the best partition
    that fits is predicted slower than the unfused pair (small blocks reload the weights once
    per block: fusion then costs more cycles and usually more memory traffic than it saves)."""
    reason = fusible(chain.producer, chain.consumer)
    if reason:
        raise FusionError(f"cannot fuse {chain.producer.name} -> {chain.consumer.name}: {reason}")
    unreachable = cfg.local_unreachable()
    if unreachable:
        raise FusionError(f"cannot fuse {chain.producer.name} -> {chain.consumer.name}: "
                          f"{unreachable}")
    need = sum(sum(_tensor_bytes(op)) for op in (chain.producer, chain.consumer)) - \
        _tensor_bytes(chain.producer)[2]          # the intermediate, counted once
    if need > cfg.dram_bytes:
        raise FusionError(f"cannot run {chain.producer.name} -> {chain.consumer.name}: its "
                          f"input, weights, intermediate and output need at least {need:,} "
                          f"bytes of device memory, more than dram_bytes={cfg.dram_bytes:,}")
    for op in (chain.producer, chain.consumer):
        if channels(op) > cfg.quant_entries:
            raise FusionError(f"cannot fuse {chain.producer.name} -> {chain.consumer.name}: "
                              f"{op.name} has {channels(op)} output channels, more than "
                              f"quant_entries={cfg.quant_entries} (its requantisation "
                              f"parameters must fit on chip)")
    cands = []
    for size in _sizes(chain, cfg):
        need = local_bytes(chain, size, cfg)
        count = len(blocks_of(chain, size))
        if need > cfg.local_buf_bytes:
            cands.append(Candidate(size, count, need, refused=(
                f"a block of {size} needs {need} bytes of intermediate on chip, more than "
                f"local_buf_bytes={cfg.local_buf_bytes}")))
            continue
        cands.append(Candidate(size, count, need, *cost(size)))
    fits = [c for c in cands if not c.refused]
    if not fits:
        smallest = cands[-1]
        raise FusionError(f"cannot fuse {chain.producer.name} -> {chain.consumer.name}: even "
                          f"the minimum block ({smallest.block}) needs {smallest.local_bytes} "
                          f"bytes of intermediate on chip, more than local_buf_bytes="
                          f"{cfg.local_buf_bytes}")
    best = min(fits, key=lambda c: (c.predicted_cycles, c.predicted_dram_bytes))
    unfused_cycles, unfused_bytes = cost(None)
    if require_gain and (best.predicted_cycles, best.predicted_dram_bytes) > \
            (unfused_cycles, unfused_bytes):
        raise FusionError(
            f"fusing {chain.producer.name} -> {chain.consumer.name} does not pay on this "
            f"configuration: the best partition that fits local_buf_bytes="
            f"{cfg.local_buf_bytes} (blocks of {best.block}) is predicted at "
            f"{best.predicted_cycles:,} cycles and {best.predicted_dram_bytes:,} memory bytes, "
            f"unfused {unfused_cycles:,} and {unfused_bytes:,}")
    return FusionPlan(chain, best.block, tuple(cands), unfused_cycles, unfused_bytes)


def parse_gemm_chain(text: str) -> Chain:
    """``m1,k1,n:m2`` -> GEMM (m1 x k1 x n) feeding GEMM (m2 x m1 x n)."""
    try:
        first, m2 = text.split(":")
        m1, k1, n = (int(v) for v in first.split(","))
        return Chain(GemmOp("producer", m1, k1, n), GemmOp("consumer", int(m2), m1, n))
    except ValueError:
        raise ValueError(f"--gemm-chain {text!r} must be M1,K1,N:M2 (positive integers)") \
            from None
