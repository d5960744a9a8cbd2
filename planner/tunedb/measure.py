"""Measurement jobs: run (shape, tiling) cases, serially or on a Dask cluster.

A *job* is a list of :class:`Case` run by one simulator process (``tb/tunedb_measure.py`` loops
over them; the memory model is reloaded per case, the Verilator build is reused). Jobs are
independent, so :class:`Executor` maps them over a Dask ``distributed`` cluster (a
``LocalCluster`` by default, or an existing scheduler ``tcp://host:port``) or runs them in this
process (``serial``).

Measure functions take ``(cases, cfg)`` and return one counter dict per case (the RTL counter
names, :data:`spec.regmap.COUNTERS`):

* :func:`flow.measure.measure_rtl`: Verilator through ``cocotb_tools.runner`` (bit-exact result
  checked by ``tb.gemm.run_case`` on every case; in the orchestration layer, as it builds RTL);
* :func:`measure_model`: :func:`planner.cost.predict_tiling`, a deterministic stand-in used by the
  tests of the database logic and of the Dask path (it is *not* a measurement).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Callable, Iterator, Sequence

from spec.config import AccelConfig
from planner.cost import predict_tiling
from planner.tiling import TILING_FIELDS

from .store import Tiled

__all__ = ["Case", "MeasureFn", "measure_model", "Executor"]



@dataclasses.dataclass(frozen=True, order=True)
class Case(Tiled):
    """One GEMM run: shape ``m x k x n`` and a tiling in :data:`TILING_FIELDS` order."""

    m: int
    k: int
    n: int
    tiling: tuple[int, ...]

    def to_json(self) -> dict:
        return {"m": self.m, "k": self.k, "n": self.n, "tiling": self.tiling_dict}

    @classmethod
    def from_json(cls, raw: dict) -> "Case":
        return cls(raw["m"], raw["k"], raw["n"], tuple(raw["tiling"][f] for f in TILING_FIELDS))


MeasureFn = Callable[[Sequence[Case], AccelConfig], list[dict]]


def measure_model(cases: Sequence[Case], cfg: AccelConfig) -> list[dict]:
    """The analytic cycle model's counters for each case (deterministic stand-in, no RTL)."""
    out = []
    for c in cases:
        t = c.tiling_dict
        out.append(predict_tiling(c.m, c.k, c.n, t["partition_m"], t["partition_n"],
                                  t["partition_k"], t["outer_m"], cfg).as_dict())
    return out


def _run_job(fn: MeasureFn, cfg: AccelConfig, cases: list[Case]) -> list[dict]:
    return fn(cases, cfg)


class Executor:
    """Runs measurement jobs: ``serial`` in this process, else on Dask ``distributed``.

    ``scheduler``: ``"serial"``, ``"local"`` (a ``LocalCluster`` of ``workers`` single-threaded
    worker processes, started on first use) or a scheduler address ``tcp://host:port``. Results
    come back in job order whatever the cluster, so builds are deterministic.
    """

    def __init__(self, scheduler: str = "local", workers: int = 2):
        if scheduler not in ("serial", "local") and "://" not in scheduler:
            raise ValueError(f"scheduler must be 'serial', 'local' or an address like "
                             f"tcp://host:8786, not {scheduler!r}")
        if type(workers) is not int or workers < 1:
            raise ValueError(f"workers must be a positive int, not {workers!r}")
        self._scheduler = scheduler
        self._workers = workers
        self._client = None
        self._cluster = None

    @property
    def scheduler(self) -> str:
        return self._scheduler

    def _connect(self):
        if self._client is None:
            try:
                from distributed import Client, LocalCluster
            except ImportError:
                raise RuntimeError("Dask `distributed` is not installed (pip install "
                                   "'tessera[dev]', or use --scheduler serial)") from None
            if self._scheduler == "local":
                self._cluster = LocalCluster(n_workers=self._workers, threads_per_worker=1,
                                             processes=True, dashboard_address=":0")
                self._client = Client(self._cluster)
            else:
                self._client = Client(self._scheduler)
        return self._client

    def imap(self, fn: MeasureFn, cfg: AccelConfig, jobs: list[list[Case]]
             ) -> Iterator[tuple[int, list[dict]]]:
        """``(index, fn(jobs[index], cfg))`` for every job, as each finishes (any order)."""
        if not jobs:
            return
        if self._scheduler == "serial":
            for i, job in enumerate(jobs):
                yield i, fn(job, cfg)
            return
        from distributed import as_completed

        client = self._connect()
        futures = client.map(functools.partial(_run_job, fn, cfg), jobs, pure=False)
        index = {f.key: i for i, f in enumerate(futures)}
        for future in as_completed(futures):
            yield index[future.key], future.result()

    def map(self, fn: MeasureFn, cfg: AccelConfig, jobs: list[list[Case]]) -> list[list[dict]]:
        """``[fn(job, cfg) for job in jobs]``, run where the scheduler says, in job order."""
        out: list = [None] * len(jobs)
        for i, result in self.imap(fn, cfg, jobs):
            out[i] = result
        return out

    def close(self):
        if self._client is not None:
            self._client.close()
            self._client = None
        if self._cluster is not None:
            self._cluster.close()
            self._cluster = None

    def __enter__(self) -> "Executor":
        return self

    def __exit__(self, *exc):
        self.close()

