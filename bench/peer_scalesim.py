"""SCALE-Sim as a peer: the same layers, array and SRAM sizes, stall-free and bandwidth-limited.

SCALE-Sim 3.0.0 (``pip install scalesim``) fails under numpy 2.4 (``int()`` of 1-element arrays
in ``double_buffered_scratchpad_mem.py``) and works with numpy 2.3, so it gets a venv of its own
(:data:`VENV`, created on first use) and runs in a subprocess (:mod:`bench.scalesim_driver`).

How a Tessera config and layer become SCALE-Sim inputs (:func:`scalesim_config`,
:func:`topology_row`):

* array ``ArrayHeight x ArrayWidth`` = ``array_rows x array_cols``;
* filter SRAM = buffer A (weights), ifmap SRAM = buffer B (activations), in KiB; SCALE-Sim's words
  are 1 byte, as our operands. Ofmap SRAM = the accumulator's capacity in *outputs*
  (``acc_buf_bytes / 4`` KiB of 1-byte words), since SCALE-Sim stores 1-byte outputs where the
  accumulator holds int32. SCALE-Sim double-buffers every SRAM (half active), as we do.
* bandwidth-limited (``InterfaceBandwidth = USER``): filter/ifmap DRAM bandwidth =
  ``a_port``/``b_port_bytes_per_cycle`` words per cycle; ofmap = ``c_port_bytes_per_cycle / 4``
  outputs per cycle (our store port moves that many int32 per cycle). Stall-free (``CALC``):
  SCALE-Sim's compute-only schedule, no memory stalls.
* a convolution is SCALE-Sim's conv topology with the *touched* input extent
  ``(P-1)*stride + R`` as IFMAP height (likewise width): SCALE-Sim has no padding, and this
  gives its ``ceil`` output formula our ``P x Q``. Batch must be 1 (SCALE-Sim has no batch);
  grouped convs are refused. A GEMM ``M x K x N`` (ours: M = weight rows, N = tokens) is
  SCALE-Sim GEMM ``M'=N, N'=M, K``: its M' rows stream as the ifmap, its N' columns are filters.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Callable

from spec.config import AccelConfig
from planner.shapes import ConvShape, GemmShape

__all__ = ["VENV", "CACHE", "SCALESIM_REQUIREMENTS", "MODES", "DATAFLOWS", "ensure_venv",
           "scalesim_config", "topology_row", "operand_dims", "stall_free_cycles",
           "run_scalesim"]

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / "build" / "scalesim-venv"
#: Per-layer SCALE-Sim results, keyed by config and layer (a rerun skips what is done).
CACHE = ROOT / "build" / "scalesim-cache"
#: SCALE-Sim and the numpy it works with (3.0.0 breaks on numpy 2.4).
SCALESIM_REQUIREMENTS = ["scalesim==3.0.0", "numpy>=2.0,<2.4"]
MODES = {"stall_free": "CALC", "bw_limited": "USER"}
DATAFLOWS = ("os", "ws")


def ensure_venv(venv: Path = VENV) -> Path:
    """The venv's Python; creates the venv and installs SCALE-Sim on first use."""
    python = venv / "bin" / "python"
    stamp = venv / ".scalesim-installed"
    if not stamp.exists():
        if not python.exists():
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "--quiet",
                        *SCALESIM_REQUIREMENTS], check=True)
        stamp.write_text(" ".join(SCALESIM_REQUIREMENTS) + "\n")
    return python


def scalesim_config(cfg: AccelConfig, dataflow: str, mode: str, run_name: str) -> dict:
    """The SCALE-Sim config (``{section: {key: value}}``) matching ``cfg``."""
    if dataflow not in DATAFLOWS + ("is",):
        raise ValueError(f"dataflow must be one of os, ws, is, not {dataflow!r}")
    if mode not in MODES:
        raise ValueError(f"mode must be one of {sorted(MODES)}, not {mode!r}")
    ofmap_words_per_cycle = cfg.c_port_bytes_per_cycle // cfg.acc_bytes
    return {
        "general": {"run_name": run_name},
        "architecture_presets": {
            "ArrayHeight": str(cfg.array_rows), "ArrayWidth": str(cfg.array_cols),
            "IfmapSramSzkB": str(cfg.buf_b_bytes >> 10),
            "FilterSramSzkB": str(cfg.buf_a_bytes >> 10),
            "OfmapSramSzkB": str(max(1, (cfg.acc_buf_bytes // cfg.acc_bytes) >> 10)),
            "IfmapOffset": "0", "FilterOffset": "10000000", "OfmapOffset": "20000000",
            "Bandwidth": str(ofmap_words_per_cycle), "Dataflow": dataflow,
            "ReadRequestBuffer": "32", "WriteRequestBuffer": "32"},
        "layout": {
            "IfmapCustomLayout": "False", "FilterCustomLayout": "False",
            "IfmapSRAMBankBandwidth": str(cfg.b_port_bytes_per_cycle),
            "IfmapSRAMBankNum": "1", "IfmapSRAMBankPort": "2",
            "FilterSRAMBankBandwidth": str(cfg.a_port_bytes_per_cycle),
            "FilterSRAMBankNum": "1", "FilterSRAMBankPort": "2"},
        "run_presets": {"InterfaceBandwidth": MODES[mode], "UseRamulatorTrace": "False"},
        "sparsity": {"SparsitySupport": "false", "SparseRep": "ellpack_block",
                     "OptimizedMapping": "false", "BlockSize": "8",
                     "RandomNumberGeneratorSeed": "40"},
    }


def topology_row(shape: GemmShape | ConvShape) -> tuple[str, list[int]]:
    """``(kind, fields)`` of the SCALE-Sim topology row of ``shape`` (without the name)."""
    if isinstance(shape, GemmShape):
        return "gemm", [shape.n, shape.m, shape.k]
    if shape.batch != 1:
        raise ValueError(f"SCALE-Sim has no batch; batch={shape.batch}")
    if shape.groups != 1:
        raise ValueError(f"SCALE-Sim runs no grouped convolutions; groups={shape.groups}")
    if shape.stride_h != shape.stride_w:
        raise ValueError(f"SCALE-Sim has one stride; stride_h={shape.stride_h}, "
                         f"stride_w={shape.stride_w}")
    if shape.dilation_h != 1 or shape.dilation_w != 1:
        raise ValueError("SCALE-Sim has no dilation")
    h = (shape.out_h - 1) * shape.stride_h + shape.kernel_h
    w = (shape.out_w - 1) * shape.stride_w + shape.kernel_w
    return "conv", [h, w, shape.kernel_h, shape.kernel_w, shape.in_channels, shape.out_channels,
                    shape.stride_h]


def operand_dims(shape: GemmShape | ConvShape) -> tuple[int, int, int]:
    """SCALE-Sim's ``(Sr, Sc, T)``: output pixels (GEMM: tokens), filters, window (K)."""
    if isinstance(shape, ConvShape):
        topology_row(shape)                       # same refusals as a run
        return shape.out_h * shape.out_w, shape.out_channels, shape.gemm.k
    return shape.n, shape.m, shape.k


def stall_free_cycles(shape: GemmShape | ConvShape, cfg: AccelConfig, dataflow: str) -> int:
    """SCALE-Sim 3.0.0's stall-free ``Total Cycles`` of one layer, in closed form.

    Its compute model runs folds back to back, each paying a full fill and drain:
    OS: ``ceil(Sr/R) * ceil(Sc/C)`` folds of ``T + R + C - 2`` cycles; WS: ``ceil(T/R) *
    ceil(Sc/C)`` folds of ``Sr + 2R + C - 2`` (the weight load adds R); minus one cycle. Equal
    to SCALE-Sim's own runs on every layer we ran it on (docs/bench.md), and it reproduces the
    network utilisations the issue quotes (ResNet-50 85.8% OS / 77.5% WS, BERT-base 96.3% OS).
    """
    sr, sc, t = operand_dims(shape)
    rows, cols = cfg.array_rows, cfg.array_cols
    if dataflow == "os":
        return -(-sr // rows) * -(-sc // cols) * (t + rows + cols - 2) - 1
    if dataflow == "ws":
        return -(-t // rows) * -(-sc // cols) * (sr + 2 * rows + cols - 2) - 1
    raise ValueError(f"dataflow must be os or ws, not {dataflow!r}")


def run_scalesim(named_shapes: list[tuple[str, GemmShape | ConvShape]], cfg: AccelConfig,
                 workdir: Path, *, runs: list[tuple[str, str]] | None = None,
                 progress: Callable[[int], None] | None = None) -> dict[str, list[dict | None]]:
    """Run every shape for every ``(dataflow, mode)`` in ``runs`` (default: os and ws, both
    modes); return ``{f"scalesim_{df}_{mode}": [result or None per shape]}`` (``None``: SCALE-Sim
    cannot express the shape). ``progress(done)`` counts finished layer runs."""
    runs = runs or [(df, mode) for df in DATAFLOWS for mode in MODES]
    python = ensure_venv()
    workdir = Path(workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    layers, index = [], []
    for i, (name, shape) in enumerate(named_shapes):
        try:
            kind, row = topology_row(shape)
        except ValueError:
            continue
        safe = "".join(c if c.isalnum() else "_" for c in name)
        layers.append({"name": safe, "kind": kind, "row": [safe, *row]})
        index.append(i)
    spec = {"workdir": str(workdir), "cache": str(CACHE), "runs": [
        {"key": f"scalesim_{df}_{mode}", "config": scalesim_config(cfg, df, mode, f"{df}_{mode}"),
         "layers": layers} for df, mode in runs]}
    spec_path, out_path = workdir / "spec.json", workdir / "out.json"
    spec_path.write_text(json.dumps(spec, indent=1))
    out_path.unlink(missing_ok=True)
    driver = Path(__file__).resolve().parent / "scalesim_driver.py"
    log = open(workdir / "scalesim.log", "w")
    proc = subprocess.Popen([str(python), str(driver), str(spec_path), str(out_path)],
                            stdout=log, stderr=subprocess.STDOUT, cwd=workdir,
                            env={**os.environ, "PYTHONWARNINGS": "ignore"})
    done = threading.Event()

    def poll():
        seen = -1
        while not done.wait(1.0):
            try:
                now = sum(len(v) for v in json.loads(out_path.read_text()).values())
            except (OSError, ValueError):
                continue
            if now != seen and progress is not None:
                seen = now
                progress(now)

    watcher = threading.Thread(target=poll, daemon=True)
    watcher.start()
    rc = proc.wait()
    done.set()
    watcher.join()
    log.close()
    if rc != 0:
        raise RuntimeError(f"SCALE-Sim failed (exit {rc}); see {workdir / 'scalesim.log'}")
    raw = json.loads(out_path.read_text())
    if progress is not None:
        progress(sum(len(v) for v in raw.values()))
    results = {}
    for key, rows in raw.items():
        per_shape: list[dict | None] = [None] * len(named_shapes)
        for i, row in zip(index, rows):
            per_shape[i] = row
        results[key] = per_shape
    return results
