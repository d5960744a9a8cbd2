"""bench.simspeed on a real simulator: Icarus, whose memory model is dense, measures default's
array and ports over a 16 MiB memory instead of refusing default's 2 GiB."""

import pytest

from tb.tools import ICARUS_MAX_ADDR_BITS, missing_tool


@pytest.mark.rtl
@pytest.mark.slow       # make bench's path; the first emit of the config takes ~45 s
def test_simspeed_measures_icarus_on_default_with_a_dense_sized_memory():
    reason = missing_tool("icarus")
    if reason:
        pytest.skip(reason)
    from bench.simspeed import SLOW_SHAPES, measure
    row = measure("icarus", "default")
    assert (row["simulator"], row["array"], row["gemm"]) == ("icarus", "16x16",
                                                              SLOW_SHAPES["default"])
    assert row["dram_addr_bits"] == ICARUS_MAX_ADDR_BITS
    assert row["total_cycles"] > 0 and row["cycles_per_s"] > 0
