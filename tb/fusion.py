"""Run a fusion chain (planner.fusion) fused and unfused on a simulator, from plain Python.

Every variant of a chain is one image; all of them run in one simulation (one start/done each),
and each result carries the consumer's output, the image's counters and every layer's
statistics record. Used by tests/sim/test_fusion.py and bench/fusion.py.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from spec.config import AccelConfig
from firmware.chains import BuiltChain, ChainData, build_image, golden_output
from planner.fusion import CHAINS, Chain, GemmOp
from firmware.demos import random_int8, random_requant

from .jobs import ImageRun, run_jobs

__all__ = ["random_data", "ChainRun", "run_chain", "CHAINS"]




def random_data(chain: Chain, rng: np.random.Generator) -> ChainData:
    """Full-range random int8 input and weights; the producer requantised with ReLU (its
    activation), the consumer without."""
    def int8(shape):
        return random_int8(rng, shape)

    p, c = chain.producer, chain.consumer
    if isinstance(p, GemmOp):
        x, w1, k1 = int8((p.k, p.n)), int8((p.m, p.k)), p.k
    else:
        s = p.shape
        x = int8((s.in_channels, s.height, s.width))
        w1 = int8((s.out_channels, s.in_channels, s.kernel_h, s.kernel_w))
        k1 = s.in_channels * s.kernel_h * s.kernel_w
    if isinstance(c, GemmOp):
        w2, m1, m2 = int8((c.m, c.k)), c.k, c.m
    else:
        s = c.shape
        w2 = int8((s.out_channels, s.in_channels, 1, 1))
        m1, m2 = s.in_channels, s.out_channels
    return ChainData(x, w1, w2, random_requant(rng, w1.shape[0], k1, relu=True),
                     random_requant(rng, m2, m1, relu=False))


@dataclasses.dataclass
class ChainRun:
    """One variant (``block`` None: unfused) as built and as run."""

    block: int | None
    built: BuiltChain
    output: np.ndarray              # the consumer's int8 output read back
    counters: dict[str, int]        # the image run's counters
    layers: list[dict[str, int]]    # every record's statistics
    error_name: str


def run_chain(chain: Chain, data: ChainData, cfg: AccelConfig, blocks: list[int | None], *,
              workdir: Path, sim: str = "verilator", plusargs: list[str] | tuple = (),
              budget_scale: int = 2,
              poison_collisions: bool = False) -> tuple[np.ndarray, list[ChainRun]]:
    """Run every variant in ``blocks`` in one simulation; returns the golden output and the
    runs, in order. ``plusargs`` go to the simulator (the memory model's stall injection);
    ``budget_scale`` multiplies the predicted cycles into each run's cycle budget;
    ``poison_collisions`` runs the build of ``hw.build.emit(cfg, poison_collisions=True)``."""
    built = [build_image(chain, data, cfg, block) for block in blocks]
    runs = []
    for b in built:
        size = b.y_rows * b.y_cols
        budget = budget_scale * b.predicted_cycles + 2 * len(b.blob) + 10_000
        runs.append(ImageRun(b.blob, budget_cycles=budget, load=[(b.x_addr, b.x_bytes)],
                             read=[("y", b.y_addr, size)]))
    results = run_jobs(runs, cfg, workdir=workdir, sim=sim, plusargs=plusargs,
                       poison_collisions=poison_collisions)
    out = []
    for block, b, r in zip(blocks, built, results):
        y = np.frombuffer(r.reads["y"], np.int8).reshape(b.y_rows, b.y_cols)
        out.append(ChainRun(block, b, y, r.counters, r.layers, r.error_name))
    return golden_output(chain, data), out
