"""Output paths of the command-line tools, checked before the work that fills them."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["check_writable", "check_directory"]


def check_writable(option: str, path: str | Path | None) -> None:
    """Raise ``ValueError`` naming ``option`` when the file ``path`` cannot be written: it is a
    directory, its directory does not exist, or either is read-only. ``None``: nothing to
    check."""
    if path is None:
        return
    p = Path(path)
    if p.is_dir():
        raise ValueError(f"{option} {path}: is a directory, not a file")
    if not p.parent.is_dir():
        raise ValueError(f"{option} {path}: directory {p.parent} does not exist")
    if not os.access(p.parent, os.W_OK) or (p.exists() and not os.access(p, os.W_OK)):
        raise ValueError(f"{option} {path}: not writable")


def check_directory(option: str, path: str | Path) -> None:
    """Raise ``ValueError`` naming ``option`` unless ``path`` is a writable directory or can be
    made one (it is made here)."""
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise ValueError(f"{option} {path}: exists and is not a directory")
    try:
        p.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ValueError(f"{option} {path}: cannot create it ({e.strerror})") from None
    if not os.access(p, os.W_OK):
        raise ValueError(f"{option} {path}: not writable")
