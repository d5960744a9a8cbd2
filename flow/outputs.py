"""Output paths of the command-line tools, checked before the work that fills them."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["check_writable"]


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
