"""Firmware fuzzing: mutated images on the RTL against the functional model (tb/fuzz.py), and
the host-side decoder / validator against arbitrary bytes."""

from __future__ import annotations

import collections
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from firmware.image import ImageError, decode, inspect, reseal, validate
from spec.config import PRESETS
from spec.desc import ErrorCode

from .test_rtl import seed_for

#: Fuzzed images per run: default tier / make test-full.
FUZZ_CASES, FUZZ_CASES_FULL = 300, 10_000


def _run(count, tmp_path, request, cfg=PRESETS["tiny"]):
    from tb.fuzz import fuzz_cases, run_fuzz
    from tb.tools import missing_tool

    reason = missing_tool("verilator")
    if reason:
        pytest.skip(reason)
    seed = seed_for(request)
    cases, summary = fuzz_cases(cfg, count, seed)
    started = time.perf_counter()
    records = run_fuzz(cases, cfg, workdir=tmp_path)
    wall = time.perf_counter() - started
    bad = [r for r in records if r["problems"]]
    codes = collections.Counter(r["error"] for r in records)
    print(f"\n{len(records)} fuzzed images in {wall:.0f} s: {len(bad)} differ from the model; "
          f"outcomes {dict(codes)}; mutations {dict(summary['mutations'])}")
    assert not bad, bad[:5]
    from tb import coverage
    coverage.record("error", [{"error": r["error"]} for r in records])
    return codes


@pytest.mark.rtl
def test_fuzzed_images_on_rtl_match_the_model(tmp_path, request):
    """Each mutant ends with the model's error code and layer, or writes exactly the model's
    bytes; nothing else in the image, the data region or around any written range changes;
    none hangs."""
    codes = _run(FUZZ_CASES, tmp_path, request)
    assert len(codes) >= 10, codes


@pytest.mark.rtl
def test_fuzzed_row_store_images_on_rtl_match_the_model(tmp_path, request):
    """The same on ``tiny`` with the row store, whose seeds add a convolution writing the next
    one's padded input in one row store record (tb.fuzz's ``row_store`` seed)."""
    import dataclasses

    from tb.fuzz import seeds

    cfg = dataclasses.replace(PRESETS["tiny"], row_store=1)
    assert "row_store" in [s.name for s in seeds(cfg, np.random.default_rng(0))]
    codes = _run(FUZZ_CASES // 2, tmp_path, request, cfg)
    assert len(codes) >= 6, codes


@pytest.mark.rtl
@pytest.mark.slow
def test_fuzzed_images_on_rtl_full(tmp_path, request):
    codes = _run(FUZZ_CASES_FULL, tmp_path, request)
    missing = {c.name for c in ErrorCode} - set(codes)
    assert not missing, f"error codes never reached: {sorted(missing)}"


# -- host side --------------------------------------------------------------------------------

def _mlp_blob():
    from firmware.demos import build_mlp

    return build_mlp(PRESETS["tiny"]).blob


BLOB = None


def _seed_blob():
    global BLOB
    if BLOB is None:
        BLOB = _mlp_blob()
    return BLOB


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.binary(max_size=600))
def test_decoder_and_validator_survive_arbitrary_bytes(data):
    cfg = PRESETS["tiny"]
    try:
        decode(data)
    except ImageError:
        pass
    problems = validate(data, cfg)
    assert problems and all(isinstance(p, str) for p in problems)
    assert isinstance(inspect(data), str)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), resealed=st.booleans())
def test_decoder_and_validator_survive_mutated_images(seed, resealed):
    """Mutants of a valid image: decode raises ImageError or returns an Image; validate returns
    a list of messages and never raises; a mutant validate accepts decodes."""
    from tb.fuzz import mutate

    cfg = PRESETS["tiny"]
    _, blob = mutate(_seed_blob(), np.random.default_rng(seed), cfg)
    if resealed and len(blob) >= 64:
        blob = reseal(blob)
    problems = validate(blob, cfg)
    assert all(isinstance(p, str) and p for p in problems)
    try:
        decode(blob)
    except ImageError:
        assert problems
    inspect(blob)
