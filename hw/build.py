"""Generation of Verilog and metadata for one configuration (``python -m hw``, ``make verilog``).

Generation is a function: :func:`emit` writes ``<out>/cfg-<config_id:08x>/`` and returns it.
Elaboration itself never writes files.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

from amaranth.back import verilog

from spec.config import FORMAT_VERSION, AccelConfig
from spec.headers import HEADERS
from spec.regmap import REGISTERS

from .sim.harness import SimTop
from .top import AccelTop

__all__ = ["emit", "build_dir", "locked", "TB_HDL"]

#: Hand-written simulation HDL (the memory model and clock).
TB_HDL = Path(__file__).resolve().parent.parent / "tb" / "hdl"
_HW = Path(__file__).resolve().parent
_ROOT = _HW.parent

#: Outputs of :func:`emit`.
OUTPUTS = ("accel_top.v", "sim_top.v", "config.json", "accel_top.json", "regs.json",
           "accel_regs.h", "accel_image.h")


def _source_hash(cfg: AccelConfig) -> str:
    """Hash of everything the generated files depend on: the hw and spec sources (spec holds
    the C-header generator) and the config."""
    h = hashlib.sha256(cfg.to_json().encode())
    sources = sorted(_HW.rglob("*.py")) + sorted((_ROOT / "spec").rglob("*.py"))
    for path in sources:
        h.update(path.relative_to(_ROOT).as_posix().encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def build_dir(cfg: AccelConfig, out: Path | str | None = None) -> Path:
    out = Path(out) if out is not None else _ROOT / "build"
    return out / f"cfg-{cfg.config_id:08x}"


@contextlib.contextmanager
def locked(path: Path):
    """Hold an exclusive lock on ``path`` (created if missing) across processes: parallel test
    workers and CLI runs serialise generation and simulator builds of one config."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def emit(cfg: AccelConfig, out: Path | str | None = None, *, force: bool = False) -> Path:
    """Write Verilog (``accel_top.v``, ``sim_top.v``), ``config.json``, the register map and
    the top's port metadata for ``cfg``; return the directory.

    Reuses an existing directory whose stamp matches the current hw sources and config.
    Output is byte-reproducible (no source locations). Generation holds a per-config lock and
    writes to a temporary directory renamed into place, so concurrent callers neither repeat
    the work nor see half-written output.
    """
    target = build_dir(cfg, out)
    with locked(target.with_name(target.name + ".lock")):
        return _emit(cfg, target, force)


def _emit(cfg: AccelConfig, target: Path, force: bool) -> Path:
    stamp = _source_hash(cfg)
    stamp_file = target / ".stamp"
    if not force and stamp_file.exists() and stamp_file.read_text() == stamp:
        return target

    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        top = AccelTop(cfg)
        (tmp / "accel_top.v").write_text(verilog.convert(top, name="accel_top", emit_src=False))
        (tmp / "accel_top.json").write_text(
            json.dumps(top.metadata.as_json(), indent=2, sort_keys=True) + "\n")
        (tmp / "sim_top.v").write_text(
            verilog.convert(SimTop(cfg), name="sim_top", emit_src=False))
        (tmp / "config.json").write_text(cfg.to_json())
        (tmp / "regs.json").write_text(json.dumps(
            {"format_version": FORMAT_VERSION, "config_id": cfg.config_id,
             "registers": [r.__dict__ for r in REGISTERS]}, indent=2) + "\n")
        for name, header in HEADERS.items():     # accel_regs.h, accel_image.h
            (tmp / name).write_text(header(cfg))
        (tmp / ".stamp").write_text(stamp)
        if target.exists():
            old = target.with_name(f".{target.name}-old-{os.getpid()}")
            try:
                os.replace(target, old)
            except OSError:
                old = None
            os.replace(tmp, target)
            if old is not None:
                shutil.rmtree(old, ignore_errors=True)
        else:
            try:
                os.replace(tmp, target)
            except OSError:     # another process won the race with identical content
                shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target
