"""Random GEMM cases for the RTL regression: reproducible from one seed, printed on failure."""

from __future__ import annotations

import dataclasses
import os

import numpy as np

import planner
from planner.tiling import TILING_FIELDS
from spec.config import AccelConfig
from spec.desc import GemmDescriptor
from spec.schedule import steps

from .placement import descriptor, place

__all__ = ["GemmCase", "random_cases", "planned_cases", "register_budget_cycles"]


@dataclasses.dataclass(frozen=True)
class GemmCase:
    m: int
    k: int
    n: int
    seed: int
    outer_m: int
    splitk: bool

    def __str__(self):
        return (f"{self.m}x{self.k}x{self.n} seed={self.seed} outer_m={self.outer_m} "
                f"splitk={int(self.splitk)}")


def random_cases(cfg: AccelConfig, seed: int, count: int) -> list[GemmCase]:
    """``count`` cases: m, n not multiples of the array (mostly), k from 1 to >= 2048, both loop
    orders and split-K on and off in rotation."""
    rng = np.random.default_rng(seed)
    R, C = cfg.array_rows, cfg.array_cols
    ks = [1, 2, 3, R - 1, R + 1, 2048, 2051]
    cases = []
    for i in range(count):
        m = int(rng.integers(1, 4 * R + R // 2))
        n = int(rng.integers(1, 4 * C + C // 2))
        k = ks[i] if i < len(ks) else int(rng.integers(1, 700))
        cases.append(GemmCase(m=m, k=k, n=n, seed=int(rng.integers(0, 2**31)),
                              outer_m=i % 2, splitk=bool((i // 2) % 2)))
    return cases


def planned_cases(text: str, cfg: AccelConfig, strategy: str, seed: int
                  ) -> list[tuple[GemmCase, dict, str]]:
    """``"MxKxN,..."`` as ``(case, tiling, strategy that planned it)`` per shape, each tiled by
    the planner with ``strategy`` and laid out densely from address 0, as ``tb.planned`` runs
    them (``make sim``, ``python -m tb.demo``). Raises ``ValueError`` naming the item and what
    is wrong (not ``MxKxN``, a size out of range, a strategy, operands beyond the device
    memory, a descriptor rule, a negative ``seed``), so a run can refuse before it builds
    anything."""
    if not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer (numpy's generators take no "
                         f"other), not {seed!r}")
    out = []
    for idx, item in enumerate(text.split(",")):
        dims = item.strip().lower().split("x")
        if len(dims) != 3 or not all(d.strip().isdigit() for d in dims):
            raise ValueError(f"shape {item!r} must be MxKxN (three positive integers), in "
                             f"{text!r}")
        m, k, n = (int(d) for d in dims)
        try:
            plan = planner.layer_cost(planner.GemmShape(m, k, n), cfg, strategy).plan
            tiling = {name: getattr(plan, name) for name in TILING_FIELDS}
            descriptor(m, k, n, tiling, place(m, k, n, cfg), cfg)
        except ValueError as e:
            raise ValueError(f"shape {item.strip()!r}: {e}") from None
        out.append((GemmCase(m=m, k=k, n=n, seed=seed + idx, outer_m=plan.outer_m,
                             splitk=bool(plan.need_splitk)), tiling, plan.strategy))
    return out


def register_budget_cycles(d: GemmDescriptor, cfg: AccelConfig, group_table=None) -> int:
    """A generous cycle budget: every step's compute, loads and store run one after another,
    twice over. A run that needs more has hung. A convolution (``group_table`` given) charges
    every gather request the worst case, one beat per lane, plus its table words."""
    R = cfg.array_rows
    total = 1000
    if group_table is not None:
        words = d.k + 2 * d.run_count + len(group_table)
        total += words * (cfg.b_beat_bytes // cfg.b_port_bytes_per_cycle + 1)
    for s in steps(d, cfg):
        if group_table is not None and s.load_b:
            g0 = s.n0 // cfg.array_cols
            runs = int(group_table[g0 + s.groups_n]) - int(group_table[g0])
            total += s.k_eff * (runs * cfg.array_cols * cfg.b_beat_bytes //
                                cfg.b_port_bytes_per_cycle + 2)
        total += s.groups_m * s.groups_n * max(s.k_eff, R) + 4 * R + 2 * cfg.array_cols
        total += s.k_eff * s.groups_m * cfg.a_beat_bytes // cfg.a_port_bytes_per_cycle
        total += s.k_eff * s.groups_n * cfg.b_beat_bytes // cfg.b_port_bytes_per_cycle
        total += s.m_eff * s.groups_n * cfg.c_beat_bytes // cfg.c_port_bytes_per_cycle
        total += cfg.a_port_latency_cycles + cfg.b_port_latency_cycles
        total += cfg.c_port_latency_cycles + 16
    return 2 * total * stall_budget_scale()


def stall_budget_scale() -> int:
    """Budget multiplier for runs under injected memory stalls (``TESSERA_STALL_BUDGET``,
    default 1: no stalls)."""
    value = os.environ.get("TESSERA_STALL_BUDGET", "1")
    if not value.isdigit() or int(value) < 1:
        raise ValueError(f"TESSERA_STALL_BUDGET must be a positive integer, not {value!r}")
    return int(value)
