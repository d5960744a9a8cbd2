"""Shared helper: assert an exception whose message contains every given fragment."""

from __future__ import annotations

import contextlib
import re

import pytest


@contextlib.contextmanager
def refused(exc_type, *fragments: str):
    """``pytest.raises(exc_type)`` whose ``str()`` contains each of ``fragments`` verbatim
    (the first via ``match=``, so a mismatch shows the message)."""
    with pytest.raises(exc_type, match=re.escape(fragments[0])) as info:
        yield info
    text = str(info.value)
    for fragment in fragments[1:]:
        assert fragment in text, f"{fragment!r} not in {text!r}"
