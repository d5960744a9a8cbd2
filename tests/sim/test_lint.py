"""`make verilog` output passes `verilator --lint-only` (waivers in tb.tools.LINT_WAIVERS)."""

import pytest

from hw.build import emit
from spec.config import PRESETS
from tb.tools import lint, missing_tool


@pytest.mark.parametrize("preset", ["tiny", "default"])
def test_lint_accel_top_is_clean(preset):
    reason = missing_tool("verilator")
    if reason:
        pytest.skip(reason)
    out = emit(PRESETS[preset])
    result = lint(out / "accel_top.v", "accel_top")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "%Warning" not in result.stderr and "%Error" not in result.stderr, result.stderr[-3000:]
