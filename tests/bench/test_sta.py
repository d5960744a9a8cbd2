"""bench.sta: static timing from nextpnr's SDF, on hand-written SDF with known answers."""

import json
import os

import pytest

from bench.sta import failing_by_module, main, parse_sdf, signal_name, worst_paths

# Two flip-flop banks a[0..1] -> (one LUT) -> b[0..1], and a block RAM read -> multiplier -> p.
# Delays in ps; the slow corner (third value) is the one that counts.
SDF = r"""(DELAYFILE
  (SDFVERSION "3.0")
  (DESIGN "top")
  (DIVIDER /)
  (TIMESCALE 1ps)
  (CELL
    (CELLTYPE "top")
    (INSTANCE )
    (DELAY
      (ABSOLUTE
        (INTERCONNECT \$gbuf/CLKO a_TRELLIS_FF_Q/CLK (0:0:0) (0:0:0))
        (INTERCONNECT a_TRELLIS_FF_Q/Q lut0/A (100:200:300) (100:200:400))
        (INTERCONNECT a_TRELLIS_FF_Q_1/Q lut0/B (100:200:1300) (100:200:300))
        (INTERCONNECT lut0/F b_TRELLIS_FF_Q/DI (100:200:500) (100:200:500))
        (INTERCONNECT lut0/F b_TRELLIS_FF_Q_1/DI (100:200:600) (100:200:600))
        (INTERCONNECT u.buf\.x.mem.0.1/DOB0 mul_DI_MULT18X18D/A0 (1:2:2000) (1:2:2000))
        (INTERCONNECT mul_DI_MULT18X18D/P0 p_TRELLIS_FF_Q_3/M (1:2:1000) (1:2:1000))
      )
    )
  )
  (CELL
    (CELLTYPE "TRELLIS_FF")
    (INSTANCE a_TRELLIS_FF_Q)
    (DELAY (ABSOLUTE
        (IOPATH CLK Q (430:477:525) (430:477:525))
    ))
  )
  (CELL
    (CELLTYPE "TRELLIS_FF")
    (INSTANCE a_TRELLIS_FF_Q_1)
    (DELAY (ABSOLUTE
        (IOPATH CLK Q (430:477:525) (430:477:525))
    ))
  )
  (CELL
    (CELLTYPE "TRELLIS_COMB")
    (INSTANCE lut0)
    (DELAY (ABSOLUTE
        (IOPATH A F (100:200:240) (100:200:240))
        (IOPATH B F (100:200:250) (100:200:250))
    ))
  )
  (CELL
    (CELLTYPE "TRELLIS_FF")
    (INSTANCE b_TRELLIS_FF_Q)
    (DELAY (ABSOLUTE
        (IOPATH CLK Q (430:477:525) (430:477:525))
    ))
    (TIMINGCHECK
      (SETUPHOLD (posedge DI) (posedge CLK) (0:0:100) (267:285:303))
    )
  )
  (CELL
    (CELLTYPE "TRELLIS_FF")
    (INSTANCE b_TRELLIS_FF_Q_1)
    (TIMINGCHECK
      (SETUPHOLD (posedge DI) (posedge CLK) (0:0:50) (267:285:303))
    )
  )
  (CELL
    (CELLTYPE "DP16KD")
    (INSTANCE u.buf\.x.mem.0.1)
    (DELAY (ABSOLUTE
        (IOPATH CLKB DOB0 (5000:5500:5830) (5000:5500:5830))
    ))
  )
  (CELL
    (CELLTYPE "MULT18X18D")
    (INSTANCE mul_DI_MULT18X18D)
    (DELAY (ABSOLUTE
        (IOPATH A0 P0 (2909:3418:3927) (2909:3418:3927))
    ))
  )
  (CELL
    (CELLTYPE "TRELLIS_FF")
    (INSTANCE p_TRELLIS_FF_Q_3)
    (TIMINGCHECK
      (SETUPHOLD (posedge M) (posedge CLK) (0:0:0) (233:268:303))
    )
  )
)
"""


@pytest.fixture
def sdf(tmp_path):
    path = tmp_path / "routed.sdf"
    path.write_text(SDF)
    return path


def test_sta_finds_the_worst_paths_with_logic_and_routing(sdf):
    graph = parse_sdf(sdf)
    assert graph.cell_type["u.buf.x.mem.0.1"] == "DP16KD"       # SDF escapes undone
    paths = worst_paths(graph, top=5, period_ns=2.0)
    # block RAM clock-to-out 5.83 + 2.0 routing + multiplier 3.927 + 1.0 routing + setup 0
    ram = paths[0]
    assert ram.start == "u.buf.x.mem.0.1/DOB0" and ram.end == "p_TRELLIS_FF_Q_3/M"
    assert ram.delay_ns == pytest.approx(12.757)
    assert ram.logic_ns == pytest.approx(5.83 + 3.927) and ram.routing_ns == pytest.approx(3.0)
    assert ram.cells == ("u.buf.x.mem.0.1", "mul_DI_MULT18X18D", "p_TRELLIS_FF_Q_3")
    assert ram.fmax_mhz == pytest.approx(1000 / 12.757)
    # a[1] -> lut (B, 1.3 routing, 0.25) -> b[1]: 0.525 + 1.3 + 0.25 + 0.6 + setup 0.05; the
    # pair (a, b) is one entry, its worst endpoint, counting both endpoints over 2 ns
    ab = paths[1]
    assert ab.start == "a_TRELLIS_FF_Q_1/Q" and ab.end == "b_TRELLIS_FF_Q_1/DI"
    assert ab.delay_ns == pytest.approx(2.725)
    assert ab.endpoints == 2
    assert len(paths) == 2


def test_sta_counts_only_endpoints_over_the_period(sdf):
    graph = parse_sdf(sdf)
    (ram, ab) = worst_paths(graph, period_ns=2.7)
    assert ab.endpoints == 1              # b[0] arrives at 0.525 + 1.3 + 0.25 + 0.5 + 0.1 = 2.675
    assert [p.endpoints for p in worst_paths(graph)] == [1, 2]   # no period: every endpoint
    assert worst_paths(graph, top=1) == [ram]
    with pytest.raises(ValueError, match="top=0"):
        worst_paths(graph, top=0)


def test_signal_names():
    assert signal_name("u_accel.x2_4_TRELLIS_FF_Q_5") == "u_accel.x2_4"
    assert signal_name("p_TRELLIS_FF_Q_DI_MULT18X18D_P15") == "p"
    assert signal_name("u.seq.buf_a.mem.1.0") == "u.seq.buf_a.mem"
    assert signal_name("$gbuf$clk") == "$gbuf$clk"


def test_sta_cli(sdf, capsys):
    assert main([str(sdf), "--top", "1", "--period", "2"]) == 0
    out = capsys.readouterr().out
    assert "12.76 ns" in out and "from u.buf.x.mem.0.1/DOB0" in out
    assert main([str(sdf), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows[0]["through"][1] == "MULT18X18D mul_DI_MULT18X18D"
    assert rows[1]["logic_ns"] == pytest.approx(0.525 + 0.25 + 0.05)


def test_sta_refuses_what_is_not_nextpnr_sdf(tmp_path, capsys):
    bad = tmp_path / "x.sdf"
    bad.write_text("module t; endmodule\n")
    with pytest.raises(ValueError, match="not an SDF file"):
        parse_sdf(bad)
    assert main([str(bad)]) == 2
    assert "not an SDF file" in capsys.readouterr().err
    assert main([str(tmp_path / "missing.sdf")]) == 2
    broken = tmp_path / "broken.sdf"
    broken.write_text(SDF.replace("(IOPATH A0 P0 (2909:3418:3927)", "(IOPATH A0 P0 (oops)"))
    with pytest.raises(ValueError, match=r"broken.sdf:\d+: unreadable IOPATH"):
        parse_sdf(broken)


def test_sta_refuses_a_combinational_loop(tmp_path):
    looped = tmp_path / "loop.sdf"
    looped.write_text(SDF.replace(
        "(INTERCONNECT lut0/F b_TRELLIS_FF_Q/DI (100:200:500) (100:200:500))",
        "(INTERCONNECT lut0/F lut0/A (100:200:500) (100:200:500))"))
    with pytest.raises(ValueError, match="combinational loop"):
        worst_paths(parse_sdf(looped))


def test_failing_endpoints_by_module(sdf):
    graph = parse_sdf(sdf)
    # over 2 ns: p (12.76 ns, top level), b[1] (2.725) and b[0] (2.675), all at the top level
    assert failing_by_module(graph, 2.0) == [("(top)", 3, pytest.approx(12.757))]
    assert failing_by_module(graph, 2.7) == [("(top)", 2, pytest.approx(12.757))]
    assert failing_by_module(graph, 20.0) == []
    with pytest.raises(ValueError, match="period_ns=0"):
        failing_by_module(graph, 0)


def test_failing_endpoints_are_grouped_by_hierarchy(tmp_path):
    path = tmp_path / "h.sdf"
    path.write_text(SDF.replace("p_TRELLIS_FF_Q_3", "u.seq.store.p_TRELLIS_FF_Q_3"))
    rows = failing_by_module(parse_sdf(path), 2.0, depth=2)
    assert [(m, n) for m, n, _ in rows] == [("(top)", 2), ("u.seq", 1)]


def test_fpga_rows_carry_the_worst_paths_and_markdown_lists_them(sdf):
    from bench.fpga import markdown, routed_timing

    timing = routed_timing(sdf, 2.0)
    paths = timing["top_paths"]
    assert [p["from"] for p in paths] == ["u.buf.x.mem.0.1/DOB0", "a_TRELLIS_FF_Q_1/Q"]
    assert timing["failing_by_module"] == [["(top)", 3, 12.757]]
    cached = sdf.with_name("paths.json")
    assert json.loads(cached.read_text())["timing"] == timing
    stamp = sdf.stat().st_mtime_ns
    sdf.write_text(SDF.replace("(1:2:2000) (1:2:2000)", "(1:2:200) (1:2:200)"))
    os.utime(sdf, ns=(stamp, stamp))
    assert routed_timing(sdf, 2.0) == timing     # same file time: the cache answers
    os.utime(sdf, (1, 1))                        # a new SDF: read again
    assert routed_timing(sdf, 2.0)["top_paths"][0]["delay_ns"] == pytest.approx(10.957)
    row = {"preset": "small", "array": "8x8", "variant": "dsp", "target_mhz": 100,
           "work_dir": "build/fpga/small", "yosys_cells": {}, **timing}
    text = markdown([row])
    assert "Worst paths of `small` (dsp)" in text and "endpoints over 10 ns" in text
    assert "| 1 | 12.76 | 78.4 | 9.76 / 3.00 | 1 | `u.buf.x.mem.0.1/DOB0` | `p_TRELLIS_FF_Q_3/M` |" \
        in text
    assert "| `(top)` | 3 | 12.76 |" in text
