"""Bench helpers without a simulator: roofline math, records and totals, reports and plots,
SCALE-Sim inputs and its stall-free fold model, the FPGA wrapper and log parsers."""

import json
import sys

import pytest

from bench.__main__ import _peer_greedy, _peer_scalesim, headline, write_report
from bench.fpga import (auto_dsp_rows, module_breakdown, nextpnr_args, parse_nextpnr_log,
                        parse_nextpnr_report, parse_ports, parse_yosys_stat, synth_script,
                        variant_name, wrapper_verilog)
from bench.network import BenchLayer, distinct_layers, layer_record, network_totals
from bench.peer_scalesim import scalesim_config, stall_free_cycles, topology_row
from bench.report import markdown, peer_rows
from bench.roofline import bound, compulsory_bytes, roofline
from spec.config import PRESETS
from spec.regmap import COUNTERS
from planner.shapes import ConvShape, GemmShape
from planner.workload import Layer, Workload

CFG = PRESETS["default"]
CONV = ConvShape(batch=1, in_channels=64, height=56, width=56, out_channels=64, kernel_h=3,
                 kernel_w=3, pad_top=1, pad_left=1, pad_bottom=1, pad_right=1)
GEMM = GemmShape(768, 768, 128)


def fake_raw(shape, cycles, predicted=None, strategy="best"):
    """A testbench record as bench.rtl_layers writes it (counters made up, consistent)."""
    macs = shape.macs
    mac_active = -(-macs // CFG.macs_per_cycle)
    stalls = cycles - mac_active
    raw = {"total_cycles": cycles, "mac_active_cycles": mac_active,
           "stall_drain_cycles": stalls // 2, "stall_load_a_cycles": stalls - stalls // 2,
           "stall_load_b_cycles": 0, "stall_store_cycles": 0, "stall_ctrl_cycles": 0,
           "rd_a_bytes": 1000, "rd_b_bytes": 2000, "wr_c_bytes": 64000}
    raw["predicted"] = {**{k: raw[k] for k in COUNTERS},
                        "total_cycles": cycles if predicted is None else predicted}
    tiling = {"partition_m": 64, "partition_n": 80, "partition_k": 576, "tile_m": 64,
              "tile_n": 32, "outer_m": 1, "need_splitk": 0, "acc_buffer_needed": 32768}
    return {**raw, **tiling, "strategy": strategy, "run_wall_s": 1.0,
            "planner_predicted_cycles": cycles}


def fake_report():
    layers = [BenchLayer("conv", ("conv", "conv_b"), CONV, 3),
              BenchLayer("fc", ("fc",), GEMM, 2)]
    raws = [fake_raw(CONV, 500_000, 500_500), fake_raw(GEMM, 300_000)]
    records = [layer_record(layer, raw, CFG) for layer, raw in zip(layers, raws)]
    report = {"network": "fake", "preset": "default", "config_id": f"{CFG.config_id:08x}",
              "config": CFG.to_dict(), "strategy": "best", "layers": records,
              "totals": network_totals(records, CFG), "peers": {}}
    greedy = [fake_raw(CONV, 550_000, strategy="greedy"), fake_raw(GEMM, 330_000,
                                                                   strategy="greedy")]
    report["peers"]["greedy"] = _peer_greedy(layers, greedy, CFG)
    report["peers"].update(_peer_scalesim(layers, {
        "scalesim_os_stall_free": [{"total_cycles": 480_000}, {"total_cycles": 290_000}],
        "scalesim_os_bw_limited": [{"total_cycles": 600_000}, None]}, CFG))
    return report


def test_roofline_compulsory_bytes_gemm_and_conv():
    assert compulsory_bytes(GemmShape(3, 5, 7)) == {"a": 15, "b": 35, "c": 84}
    g = CONV.gemm
    assert compulsory_bytes(CONV) == {"a": 64 * 576, "b": 64 * 56 * 56, "c": 64 * g.n * 4}


def test_roofline_bound_is_max_of_compute_and_ports():
    b = bound(256 * 1000, {"a": 16 * 10, "b": 16 * 2000, "c": 64 * 5}, CFG)
    assert b.terms_cycles == {"compute": 1000, "a": 10, "b": 2000, "c": 5}
    assert b.cycles == 2000 and b.binding == "b"
    tie = bound(256 * 10, {"a": 16 * 10, "b": 0, "c": 0}, CFG)
    assert tie.binding == "compute"


def test_roofline_efficiency_against_both_bounds():
    counters = {"total_cycles": 2000, "rd_a_bytes": 16 * 3000, "rd_b_bytes": 0,
                "wr_c_bytes": 0}
    r = roofline(GemmShape(16, 16, 1000), counters, CFG)       # 256000 MACs: 1000 cycles
    assert r["compulsory"]["cycles"] == 1000 and r["compulsory"]["efficiency"] == 0.5
    assert r["traffic"]["binding"] == "a" and r["traffic"]["efficiency"] == 1.5


def test_distinct_layers_merge_equal_shapes_and_add_counts():
    wl = Workload("w", (Layer("x", GEMM, 2), Layer("y", GemmShape(1, 2, 3), 1),
                        Layer("z", GEMM, 5)))
    layers = distinct_layers(wl)
    assert [(layer.name, layer.names, layer.count) for layer in layers] == [
        ("x", ("x", "z"), 7), ("y", ("y",), 1)]
    assert layers[0].job("NCHW") == {"kind": "gemm", "m": 768, "k": 768, "n": 128}
    conv = BenchLayer("c", ("c",), CONV, 1).job("NHWC")
    assert conv["kind"] == "conv" and conv["layout"] == "NHWC"
    assert ConvShape(**conv["shape"]) == CONV


def test_network_totals_weight_by_count():
    t = fake_report()["totals"]
    assert t["cycles"] == 3 * 500_000 + 2 * 300_000
    assert t["macs"] == 3 * CONV.macs + 2 * GEMM.macs
    assert t["utilisation"] == pytest.approx(t["macs"] / (256 * t["cycles"]))
    assert t["predicted_cycles"] == 3 * 500_500 + 2 * 300_000
    assert t["worst_layer"] == "conv" and t["worst_layer_prediction_error"] == pytest.approx(
        0.001)
    assert t["dram_bytes"] == {"a": 5000, "b": 10000, "c": 320000}


def test_report_markdown_has_layers_totals_and_peers():
    report = fake_report()
    text = markdown(report, {"roofline": "x-roofline.png"})
    assert "| conv | 3 | 64x576x3136 |" in text
    assert "+0.10%" in text and "![roofline](x-roofline.png)" in text
    head, rows = peer_rows(report)
    assert head[2:] == ["Tessera RTL (best)", "greedy tiling on RTL", "SCALE-Sim OS stall-free",
                        "SCALE-Sim OS bw-limited"]
    assert rows[0][2:] == ["500,000", "550,000", "480,000", "600,000"]
    assert rows[1][-1] == "—"                      # SCALE-Sim could not run the layer
    assert rows[2][3] == f"**{3 * 550_000 + 2 * 330_000:,}**" and rows[2][-1] == "—"
    line = headline([report]).splitlines()[2]
    assert "| fake |" in line and f"{2_100_000:,}" in line


def test_report_json_markdown_and_plots_written(tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib is optional (the [bench] extra, which "
                        "make bench installs); without it the plots are not tested")
    report = fake_report()
    md = write_report(report, tmp_path)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["bench-fake-default-predicted.png", "bench-fake-default-roofline.png",
                     "bench-fake-default-util.png", "bench-fake-default.json",
                     "bench-fake-default.md"]
    assert json.loads((tmp_path / "bench-fake-default.json").read_text()) == json.loads(
        json.dumps(report))
    assert "bench-fake-default-util.png" in md.read_text()
    assert all((tmp_path / n).read_bytes()[:4] == b"\x89PNG" for n in names if "png" in n)


def test_scalesim_config_matches_our_sizes_and_ports():
    c = scalesim_config(CFG, "os", "bw_limited", "run")
    arch = c["architecture_presets"]
    assert (arch["ArrayHeight"], arch["ArrayWidth"]) == ("16", "16")
    assert (arch["FilterSramSzkB"], arch["IfmapSramSzkB"]) == ("128", "128")
    assert arch["OfmapSramSzkB"] == "16"             # 64 KiB of int32 = 16 K outputs
    assert arch["Bandwidth"] == "16" and arch["Dataflow"] == "os"
    assert c["layout"]["FilterSRAMBankBandwidth"] == "16"
    assert c["layout"]["IfmapSRAMBankBandwidth"] == "16"
    assert c["run_presets"]["InterfaceBandwidth"] == "USER"
    assert scalesim_config(CFG, "ws", "stall_free", "r")["run_presets"][
        "InterfaceBandwidth"] == "CALC"
    with pytest.raises(ValueError, match="mode"):
        scalesim_config(CFG, "os", "fast", "r")


def test_scalesim_topology_rows():
    # padding becomes the touched input extent, so SCALE-Sim's ceil formula gives P x Q
    conv1 = ConvShape(batch=1, in_channels=3, height=224, width=224, out_channels=64,
                      kernel_h=7, kernel_w=7, stride_h=2, stride_w=2, pad_top=3, pad_left=3,
                      pad_bottom=3, pad_right=3)
    kind, row = topology_row(conv1)
    assert kind == "conv" and row == [229, 229, 7, 7, 3, 64, 2]
    assert -(-(row[0] - 7 + 2) // 2) == conv1.out_h == 112
    assert topology_row(GemmShape(768, 3072, 128)) == ("gemm", [128, 768, 3072])
    for bad in (ConvShape(batch=2, in_channels=4, height=5, width=5, out_channels=4,
                          kernel_h=1, kernel_w=1),
                ConvShape(batch=1, in_channels=4, height=5, width=5, out_channels=4,
                          kernel_h=1, kernel_w=1, groups=2)):
        with pytest.raises(ValueError):
            topology_row(bad)


@pytest.mark.parametrize("preset, shape, dataflow, cycles", [
    # SCALE-Sim 3.0.0 runs (InterfaceBandwidth=CALC), docs/bench.md
    ("default", ConvShape(batch=1, in_channels=64, height=56, width=56, out_channels=64,
                          kernel_h=3, kernel_w=3, pad_top=1, pad_left=1, pad_bottom=1,
                          pad_right=1), "os", 475103),
    ("default", GemmShape(1000, 2048, 1), "os", 130913),
    ("tiny", ConvShape(batch=1, in_channels=6, height=9, width=9, out_channels=8, kernel_h=3,
                       kernel_w=3, pad_top=1, pad_left=1, pad_bottom=1, pad_right=1), "os", 2519),
    ("tiny", ConvShape(batch=1, in_channels=6, height=9, width=9, out_channels=8, kernel_h=3,
                       kernel_w=3, pad_top=1, pad_left=1, pad_bottom=1, pad_right=1), "ws", 2547),
    ("tiny", GemmShape(20, 33, 17), "os", 974),
    ("tiny", GemmShape(20, 33, 17), "ws", 1214),
])
def test_scalesim_stall_free_formula_equals_scalesim_runs(preset, shape, dataflow, cycles):
    assert stall_free_cycles(shape, PRESETS[preset], dataflow) == cycles


def test_fpga_wrapper_covers_every_port():
    verilog = ("module accel_top(clk, rst, a, b, y);\n  input [7:0] a;\n  input b;\n"
               "  input clk;\n  input rst;\n  output [15:0] y;\nendmodule\n"
               "module other(q);\n  output [3:0] q;\nendmodule\n")
    ports = parse_ports(verilog)
    assert ports == [("input", "a", 8), ("input", "b", 1), ("input", "clk", 1),
                     ("input", "rst", 1), ("output", "y", 16)]
    top = wrapper_verilog(ports)
    assert "reg [8:0] in_sr;" in top and "reg [15:0] out_sr;" in top
    assert ".a(in_sr[7:0])" in top and ".b(in_sr[8:8])" in top and ".y(outs[15:0])" in top
    assert ".clk(clk)" in top and ".rst(rst_g)" in top     # the reset on a global net
    assert "DCCA rst_gbuf (.CLKI(rst), .CE(1'b1), .CLKO(rst_g));" in top
    # no control pins: the inputs shift every cycle, the outputs enter a signature register
    assert "module fpga_top(input clk, input rst, input sin, output sout);" in top
    assert "in_sr <= {in_sr[7:0], sin};" in top
    assert "out_sr <= outs ^ {out_sr[14:0], 1'b0};" in top and "sout = out_sr[15]" in top


def test_fpga_log_parsers():
    log = ("Number of cells: 1\n   Number of cells:  300\n     12000   LUT4\n      900   "
           "TRELLIS_FF\n       64   MULT18X18D\n       40   DP16KD\n")
    assert parse_yosys_stat(log) == {"lut4": 12000, "ff": 900, "mult18": 64, "dp16kd": 40}
    assert parse_yosys_stat("Number of cells 3\n  LUT4  77\n") == {"lut4": 77}
    report = {"utilization": {"TRELLIS_COMB": {"used": 9000, "available": 83640},
                              "TRELLIS_FF": {"used": 5000, "available": 83640},
                              "MULT18X18D": {"used": 64, "available": 156}},
              "fmax": {"$glbnet$clk": {"achieved": 104.5, "constraint": 100.0}}}
    got = parse_nextpnr_report(report)
    assert got["comb"] == 9000 and got["mult18"] == 64 and got["dp16kd"] is None
    assert got["fmax_mhz"] == 104.5 and "report_critical_path" not in got
    ff = {"cell": "a_TRELLIS_FF_Q", "port": "Q", "loc": [1, 1]}
    mul = {"cell": "m_MULT18X18D", "port": "A0", "loc": [9, 1]}
    mul_out = {"cell": "m_MULT18X18D", "port": "P3", "loc": [9, 1]}
    cin = {"cell": "s_CCU2C$CCU2_COMB0", "port": "A", "loc": [5, 1]}
    half = {"cell": "s_CCU2C$CCU2_COMB1", "port": "F", "loc": [5, 1]}
    end = {"cell": "q_TRELLIS_FF_Q", "port": "DI", "loc": [5, 1]}
    report["critical_paths"] = [
        {"from": "posedge clk", "to": "posedge clk", "path": [
            {"type": "clk-to-q", "delay": 0.5, "from": ff, "to": ff},
            {"type": "routing", "delay": 5.0, "from": ff, "to": mul},
            {"type": "logic", "delay": 4.0, "from": mul_out, "to": mul_out},
            {"type": "routing", "delay": 3.0, "from": mul_out, "to": cin},
            {"type": "logic", "delay": 0.5, "from": cin, "to": cin},
            {"type": "routing", "delay": 0.0, "from": cin, "to": half},
            {"type": "logic", "delay": 0.0, "from": half, "to": half},
            {"type": "routing", "delay": 0.5, "from": half, "to": end},
            {"type": "setup", "delay": 0.1, "from": end, "to": end}]},
        {"from": "posedge clk", "to": "<async>", "path": [
            {"type": "clk-to-q", "delay": 0.5, "from": ff, "to": ff}]}]
    cp = parse_nextpnr_report(report)["report_critical_path"]
    assert cp["cells"] == 2 and cp["nets"] == 3               # the MULT18X18D and one CCU2C
    assert cp["logic_ns"] == 5.1 and cp["routing_ns"] == 8.5
    assert cp["from"] == "a_TRELLIS_FF_Q.Q" and cp["to"] == "q_TRELLIS_FF_Q.DI"


def test_fpga_synth_script_maps_only_the_chosen_array_rows_to_luts():
    plain = synth_script(8, 8)
    assert "booth" not in plain and "synth_ecp5 -top fpga_top -json fpga_top.json" in plain
    assert "-nodsp" in synth_script(8, 8, nodsp=True)
    assert "booth" not in synth_script(8, 8, dsp_rows=8)     # every row on DSPs: no rewrite
    script = synth_script(4, 3, dsp_rows=1)
    lines = script.splitlines()
    sel = next(line for line in lines if line.startswith("select -set lutmul"))
    assert sel == ("select -set lutmul w:pe1_*_prod w:pe2_*_prod w:pe3_*_prod %u %u %ci1 "
                   "t:$mul %i")
    assert "select -assert-count 9 @lutmul" in lines
    assert lines.index("booth @lutmul") < lines.index(
        "synth_ecp5 -top fpga_top -json fpga_top.json")
    keep = "setattr -set keep 1 a:keep %ci1 t:$dff %i"
    for script in (plain, synth_script(4, 3, dsp_rows=1)):
        lines = script.splitlines()
        assert lines.index("proc") < lines.index(keep) < lines.index(
            "synth_ecp5 -top fpga_top -json fpga_top.json")
    assert variant_name() == "dsp" and variant_name(nodsp=True) == "nodsp"
    assert variant_name(dsp_rows=2) == "dsprows2"
    with pytest.raises(ValueError):
        variant_name(nodsp=True, dsp_rows=2)
    # a submodule alone, and in LUTs, in directories of their own
    assert variant_name(submodule="array") == "array"
    assert variant_name(submodule="array", nodsp=True) == "array-nodsp"
    with pytest.raises(ValueError, match="not to a submodule alone"):
        variant_name(submodule="array", dsp_rows=2)
    assert auto_dsp_rows("small") is None        # 64 + 3 * 8 <= 156: all on MULT18X18D
    assert auto_dsp_rows("default") is not None  # 256 array multipliers alone exceed 156
    assert auto_dsp_rows("fpga") == 9            # (156 - 3 * 4 lanes) // 16 rows on MULT18X18D
    args = nextpnr_args(route=False)
    assert "--no-route" in args and "--timing-allow-fail" in args and "--threads" not in args
    assert "--no-route" not in nextpnr_args() and "--sdf" not in args
    routed = nextpnr_args()
    assert routed[routed.index("--sdf") + 1] == "routed.sdf"   # the routed delays, for paths
    assert args[args.index("--lpf") + 1] == "fpga_top.lpf"
    assert args[args.index("--freq") + 1] == "100"
    relaxed = nextpnr_args(freq_mhz=62.5)
    assert relaxed[relaxed.index("--freq") + 1] == "62.5"
    with pytest.raises(ValueError, match="freq_mhz=0"):
        nextpnr_args(freq_mhz=0)
    assert nextpnr_args()[nextpnr_args().index("--router") + 1] == "router1"
    two = nextpnr_args(router="router2")
    assert two[two.index("--router") + 1] == "router2"
    with pytest.raises(ValueError, match="router='router3'"):
        nextpnr_args(router="router3")
    assert "--placer-heap-timingweight" not in args and "--seed" not in args  # nextpnr's own
    tuned = nextpnr_args(timing_weight=40, seed=7)
    assert tuned[tuned.index("--placer-heap-timingweight") + 1] == "40"
    assert tuned[tuned.index("--seed") + 1] == "7"
    with pytest.raises(ValueError, match="timing_weight=0"):
        nextpnr_args(timing_weight=0)
    with pytest.raises(ValueError, match="seed=-1"):
        nextpnr_args(seed=-1)
    assert "--tmg-ripup" not in args and "--tmg-ripup" in nextpnr_args(tmg_ripup=True)


def test_fpga_lpf_puts_the_clock_on_a_clock_pin():
    from bench.fpga import CLOCK_PIN, FREQ_MHZ, lpf
    text = lpf()
    assert f'LOCATE COMP "clk" SITE "{CLOCK_PIN}";' in text
    assert f'FREQUENCY PORT "clk" {FREQ_MHZ} MHZ;' in text
    # nextpnr takes the LPF's frequency over --freq: a relaxed target must reach the file
    assert 'FREQUENCY PORT "clk" 62.5 MHZ;' in lpf(62.5)


def test_fpga_nextpnr_log_parser_splits_placement_and_routing():
    log = "\n".join([
        "Info: Device utilisation:",
        "Info: \t          DP16KD:      75/    208    36%",
        "Info: \t      MULT18X18D:     133/    156    85%",
        "Info: \t      TRELLIS_FF:   18042/  83640    21%",
        "Info: \t    TRELLIS_COMB:   36985/  83640    44%",
        "Info: SA placement time 905.48s",
        "Info: Max frequency for clock '$glbnet$clk$TRELLIS_IO_IN': 21.33 MHz (FAIL at 100.00 MHz)",
        "Info: Running main router loop...",
        "Info: Routing complete.",
        "Info: Critical path report for clock '$glbnet$clk$TRELLIS_IO_IN' (posedge -> posedge):",
        "Info:       type curr  total name",
        "Info:   clk-to-q  0.52   0.52 Source u_accel.seq.d_TRELLIS_FF_Q.Q",
        "Info:    routing  1.21   1.73 Net u_accel.seq.d (10,11) -> (12,13)",
        "Info:                         Sink u_accel.seq.m_MULT18X18D_P.A0",
        "Info:      logic  4.00   5.73 Source u_accel.seq.m_MULT18X18D_P.P0",
        "Info:    routing  0.90   6.63 Net u_accel.seq.p (12,13) -> (12,14)",
        "Info:                         Sink u_accel.seq.q_TRELLIS_FF_Q.DI",
        "Info:      setup  0.10   6.73 Sink u_accel.seq.q_TRELLIS_FF_Q.DI",
        "Info: 4.62 ns logic, 2.11 ns routing",
        "Info: Max frequency for clock '$glbnet$clk$TRELLIS_IO_IN': 23.90 MHz (FAIL at 100.00 MHz)",
    ])
    got = parse_nextpnr_log(log)
    assert got["comb"] == 36985 and got["ff"] == 18042 and got["mult18"] == 133
    assert got["dp16kd"] == 75
    assert got["fmax_placed_mhz"] == 21.33 and got["fmax_routed_mhz"] == 23.9
    cp = got["critical_path"]
    assert cp["after"] == "routing" and cp["logic_ns"] == 4.62 and cp["routing_ns"] == 2.11
    assert cp["from"] == "u_accel.seq.d_TRELLIS_FF_Q.Q"
    assert cp["to"] == "u_accel.seq.q_TRELLIS_FF_Q.DI"
    assert cp["cells"] == 1 and cp["nets"] == 2       # the MULT18X18D between two flip-flops
    placed_only = parse_nextpnr_log(log[:log.index("Info: Running main router")])
    assert "fmax_routed_mhz" not in placed_only and "critical_path" not in placed_only


def test_fpga_module_breakdown_groups_cells_by_hierarchical_name():
    cells = {"u_accel.seq.compute.array.pe0_0_acc_LUT4_Z": "LUT4",
             "u_accel.seq.compute.array.pe0_0_acc_CCU2C_S0": "CCU2C",
             "u_accel.seq.store.post.s1_TRELLIS_FF_Q": "TRELLIS_FF",
             "u_accel.busy_LUT4_Z": "LUT4", "out_sr_TRELLIS_FF_Q_3": "TRELLIS_FF",
             "$abc$123$lut": "LUT4", "u_accel.seq.acc.0.1": "DP16KD", "x_PFUMX_Z": "PFUMX"}
    netlist = {"modules": {"fpga_top": {"cells": {n: {"type": t} for n, t in cells.items()}}}}
    got = module_breakdown(netlist)
    assert got["seq.compute.array"] == {"lut4": 1, "ccu2c": 1}
    assert got["seq.store.post"] == {"ff": 1} and got["accel_top"] == {"lut4": 1}
    assert got["wrapper"] == {"ff": 1} and got["other"] == {"lut4": 1}
    assert got["seq.acc"] == {"dp16kd": 1}
    assert list(got)[0] == "seq.compute.array"          # most LUT sites first


def test_fpga_wrapper_of_an_escaped_submodule():
    verilog = ("module \\accel_top.seq.store.post (clk, rst, d, q);\n  input [3:0] d;\n"
               "  input clk;\n  input rst;\n  output [1:0] q;\nendmodule\n")
    ports = parse_ports(verilog, "\\accel_top.seq.store.post")
    assert ports == [("input", "d", 4), ("input", "clk", 1), ("input", "rst", 1),
                     ("output", "q", 2)]
    top = wrapper_verilog(ports, "\\accel_top.seq.store.post")
    assert "  \\accel_top.seq.store.post u_accel (" in top     # escaped name, space before (


def test_fpga_tool_run_stops_at_the_timeout(tmp_path):
    from bench.fpga import TIMED_OUT, _run
    rc, secs = _run([sys.executable, "-c", "print('placed', flush=True); import time; "
                     "time.sleep(30)"], tmp_path, tmp_path / "log", timeout=2)
    assert rc == TIMED_OUT and secs < 20
    assert "placed" in (tmp_path / "log").read_text()


def test_fpga_tool_run_stops_at_the_first_line_stop_when_accepts(tmp_path):
    from bench.fpga import STOPPED, _run
    script = ("import time\nprint('Info: packing', flush=True)\n"
              "print('Info: \\t TRELLIS_COMB: 100395/ 83640   120%', flush=True)\n"
              "time.sleep(60)\nprint('never', flush=True)\n")
    seen = []
    rc, _ = _run([sys.executable, "-c", script], tmp_path, tmp_path / "log", timeout=120,
                 stop_when=lambda line: seen.append(line) or "TRELLIS_COMB" in line)
    assert rc == STOPPED
    assert len(seen) == 2
    log = (tmp_path / "log").read_text()
    assert "TRELLIS_COMB" in log and "never" not in log


def test_fpga_tool_run_passes_the_return_code_through(tmp_path):
    from bench.fpga import _run
    rc, _ = _run([sys.executable, "-c", "import sys; print('x'); sys.exit(3)"], tmp_path,
                 tmp_path / "log", timeout=60, stop_when=lambda line: False)
    assert rc == 3 and (tmp_path / "log").read_text() == "x\n"


def test_fpga_overflow_reads_nextpnr_utilisation_lines():
    from bench.fpga import overflow
    assert overflow("Info: \t        TRELLIS_COMB:  100395/  83640   120%") == \
        "TRELLIS_COMB 100,395/83,640"
    assert overflow("Info: \t              DP16KD:     244/    208   117%") == "DP16KD 244/208"
    assert overflow("Info: \t              DP16KD:     156/    208    75%") is None
    assert overflow("Info: \t          MULT18X18D:     156/    156   100%") is None
    assert overflow("Info: Placed 0 cells based on constraints.") is None


def test_fpga_every_submodule_name_is_a_module_of_the_generated_verilog():
    from bench.fpga import SUBMODULES
    from hw.build import emit
    verilog = (emit(PRESETS["tiny"]) / "accel_top.v").read_text()
    for short, path in SUBMODULES.items():
        assert f"module \\accel_top.{path} " in verilog or \
            f"module \\accel_top.{path}(" in verilog, short


def test_fpga_results_keep_the_recorded_sessions(tmp_path):
    """A new run replaces earlier untagged rows but keeps the rows docs/bench.md cites."""
    from bench.fpga import _write

    old = {"preset": "small", "array": "8x8", "variant": "dsp", "yosys_cells": {}}
    (tmp_path / "fpga.json").write_text(json.dumps(
        {"rows": [dict(old, session=7, fmax_mhz=52.6), dict(old, fmax_mhz=40.0)]}))
    new = dict(old, fmax_mhz=54.5)
    assert _write([new], tmp_path) == 0
    rows = json.loads((tmp_path / "fpga.json").read_text())["rows"]
    assert [r["fmax_mhz"] for r in rows] == [54.5, 52.6]
    (tmp_path / "fpga.json").write_text("not json")
    assert _write([new], tmp_path) == 0
    assert json.loads((tmp_path / "fpga.json").read_text())["rows"] == [new]


def test_fpga_standalone_array_mesh_is_the_mesh_array_as_accel_top():
    from bench.fpga import STANDALONE, parse_ports, standalone_verilog

    verilog = standalone_verilog("array_mesh", PRESETS["tiny"])
    names = {name for _, name, _ in parse_ports(verilog)}
    assert {"i_fill", "i_move", "i_mesh", "i_w", "o_tag"} <= names     # the mesh's ports
    assert "array_mesh" in STANDALONE
    with pytest.raises(ValueError, match="standalone block 'array': must be one of array_mesh"):
        standalone_verilog("array", PRESETS["tiny"])
