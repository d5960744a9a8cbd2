"""argparse ``type`` functions shared by the command-line tools: a refused value is a usage
error naming the option and its range (exit 2), not a traceback or a silently odd run."""

from __future__ import annotations

import argparse

__all__ = ["at_least", "SEED"]


def at_least(kind: type, lo):
    """An argparse ``type``: a ``kind`` (int or float) no smaller than ``lo`` (NaN refused)."""
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {kind.__name__}") from None
        if not value >= lo:                 # NaN too
            raise argparse.ArgumentTypeError(f"must be >= {lo}, not {text}")
        return value
    return parse


#: A random seed: numpy's generators take non-negative integers only.
SEED = at_least(int, 0)
