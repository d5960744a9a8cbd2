"""The floor under bench.simspeed's rates: what Verilator's model of a block costs alone, with no
testbench at all (issue 19).

    python -m bench.simspeed --floor [--presets small,default]

Each part is a Verilator ``--binary`` whose clock runs in HDL: no cocotb, no VPI, no memory
traffic, built with the options of the real simulator build (``tb.tools.VERILATOR_ARGS``):

``array``
    :class:`hw.array.SystolicArray` alone, built as the preset builds it (with the depthwise
    mesh where ``dw_mesh`` is 1, as on ``default``), fed a beat every cycle (tiles of
    ``array_rows`` beats, operands from an LFSR; with the mesh, one tile in 16 a mesh tile of
    random moves, fills and weights). Every bit of ``o_row`` and ``o_tag`` is folded into one
    observed register, so Verilator cannot drop a PE as dead logic (a wrapper that observed two
    columns measured four times faster), nor the mesh's logic (its inputs change).
``postproc``
    :class:`hw.postproc.PostProc` alone, a row in every cycle, data and parameters from an LFSR
    (multiplier and shift within their legal ranges), every output bit folded.
``accel_idle``
    The whole ``sim_top`` of the simulator build (accelerator and DRAM model) idle after reset.
    Verilator evaluates every block in every cycle whether it works or not, so this is close to
    what a busy cycle costs before the harness, the memory model's traffic and VPI.

The rate is the difference of two runs (``cycles`` and ``2 * cycles``), so the model's start-up
(a large memory's initialisation) does not count.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from amaranth import *
from amaranth.back import verilog
from amaranth.lib import wiring
from amaranth.lib.wiring import Out

from hw.array import SystolicArray
from hw.build import TB_HDL, emit
from hw.compute import array_tag_bits
from hw.postproc import PostProc
from spec.config import PRESETS, AccelConfig
from tb.tools import VERILATOR_ARGS, prepare_env, verilator_source

__all__ = ["PARTS", "ArrayFloor", "PostProcFloor", "fold", "measure_floor"]

#: what ``--floor`` measures, in this order
PARTS = ("array", "postproc", "accel_idle")
#: cycles of the shorter of the two timed runs, per preset
FLOOR_CYCLES = {"tiny": 1_000_000, "small": 1_000_000, "default": 500_000}


def fold(value: Value, width: int = 32) -> Value:
    """XOR of ``value``'s ``width``-bit slices (the last one zero-extended): every bit of
    ``value`` reaches the result."""
    parts = [value[i:i + width] for i in range(0, len(value), width)]
    out = parts[0]
    for p in parts[1:]:
        out = out ^ p
    return out


class _LfsrFloor(wiring.Component):
    """A self-driving wrapper: a 64-bit LFSR, and ``sig``, the running XOR of what it observes."""

    def __init__(self, cfg: AccelConfig, block: wiring.Component):
        self._cfg = cfg
        #: the block measured
        self.block = block
        super().__init__({"sig": Out(32)})

    @staticmethod
    def lfsr(m: Module) -> Signal:
        """A 64-bit Fibonacci LFSR (taps 64, 63, 61, 60), stepped every cycle."""
        s = Signal(64, init=0x9E3779B97F4A7C15)
        m.d.sync += s.eq(Cat(s[1:], s[0] ^ s[1] ^ s[3] ^ s[4]))
        return s

    @staticmethod
    def bytes_of(s: Signal, n: int, salt: int) -> Value:
        """``n`` bytes picked from the LFSR's state at different offsets."""
        return Cat(*(s[(salt + 5 * i) % 56:(salt + 5 * i) % 56 + 8] for i in range(n)))


class ArrayFloor(_LfsrFloor):
    """:class:`~hw.array.SystolicArray` as ``cfg`` builds it (``mesh``: with the depthwise
    mesh when ``cfg.dw_mesh``), fed a beat every cycle; ``sig`` folds its outputs
    (:attr:`OUTPUTS`). With the mesh, the tile after one whose last beat finds LFSR bits 50-53
    zero (one in 16) is a mesh tile: every cycle a tap with a random move, fill, split and
    weights. (The cost is the point, not the results: a mesh tile follows a GEMM tile without
    the gap the array's contract asks for.)"""

    #: the outputs folded into ``sig``
    OUTPUTS = ("o_row", "o_tag", "o_valid")

    def __init__(self, cfg: AccelConfig):
        #: whether the array has the depthwise mesh (``cfg.dw_mesh``)
        self.mesh = bool(cfg.dw_mesh)
        array = SystolicArray(cfg, tag_bits=array_tag_bits(cfg, mesh=self.mesh), mesh=self.mesh)
        super().__init__(cfg, array)

    def elaborate(self, platform):
        m = Module()
        cfg = self._cfg
        R, C = cfg.array_rows, cfg.array_cols
        m.submodules.array = arr = self.block
        s = self.lfsr(m)
        k = Signal(range(R))
        m.d.sync += k.eq(Mux(k == R - 1, 0, k + 1))
        a, b = self.bytes_of(s, R, 0), self.bytes_of(s, C, 3)
        m.d.sync += [arr.i_valid.eq(1), arr.i_first.eq(k == 0), arr.i_last.eq(k == R - 1),
                     arr.i_a.eq(a), arr.i_b.eq(b), arr.i_a00.eq(a[:8]), arr.i_b00.eq(b[:8]),
                     arr.i_tag.eq(s[40:])]
        if self.mesh:
            in_mesh = Signal()          # this tile is a mesh tile
            with m.If(k == R - 1):
                m.d.sync += in_mesh.eq(s[50:54] == 0)
            m.d.sync += [arr.i_mesh.eq(in_mesh), arr.i_tap.eq(in_mesh),
                         arr.i_move.eq(Mux(s[20:23] > 4, 0, s[20:23])),
                         arr.i_split.eq(Mux(s[23:25] == 3, 0, s[23:25])),
                         arr.i_fill.eq(self.bytes_of(s, 2 * C, 7)),
                         arr.i_w.eq(self.bytes_of(s, 4, 11))]
        m.d.sync += self.sig.eq(self.sig ^ fold(Cat(*(getattr(arr, o) for o in self.OUTPUTS))))
        return m


class PostProcFloor(_LfsrFloor):
    """:class:`~hw.postproc.PostProc` given a row every cycle; ``sig`` folds every output."""

    OUTPUTS = ("o_data", "o_sum", "o_valid")

    def __init__(self, cfg: AccelConfig):
        super().__init__(cfg, PostProc(cfg))

    def elaborate(self, platform):
        m = Module()
        cfg = self._cfg
        m.submodules.post = post = self.block
        s = self.lfsr(m)
        rows = Signal(range(post.row_cycles))       # shared lanes take a row every row_cycles
        m.d.sync += rows.eq(Mux(rows == post.row_cycles - 1, 0, rows + 1))
        shift = Signal(signed(6))
        m.d.comb += shift.eq(Mux(s[8:14].as_signed() < -31, -31, s[8:14].as_signed()))
        m.d.sync += [
            post.en.eq(1), post.i_valid.eq(rows == 0),
            post.i_data.eq(self.bytes_of(s, 4 * cfg.array_cols, 1)),
            post.i_bias.eq(s[20:52]), post.i_mult.eq(Cat(s[30:60], 1)),
            post.i_shift.eq(shift), post.i_zero_point.eq(s[2:10]),
            post.i_act_min.eq(-128), post.i_act_max.eq(127),
        ]
        m.d.sync += self.sig.eq(self.sig ^ fold(Cat(*(getattr(post, o) for o in self.OUTPUTS))))
        return m


def _testbench(dut: str, shown: str) -> str:
    """A Verilog top that instantiates ``dut``, releases reset after two cycles and stops after
    ``+cycles=N`` clock cycles, printing ``shown`` (so nothing the DUT computes is dead)."""
    return f"""
module tessera_floor_tb;
  reg rst = 1'b1;
{dut}
  longint n = 0, cycles = 0;
  initial if (!$value$plusargs("cycles=%d", cycles)) cycles = 1000;
  always @(posedge clk) begin
    n <= n + 1;
    if (n == 2) rst <= 1'b0;
    if (n == cycles) begin $display("%h", {shown}); $finish; end
  end
endmodule
"""


#: the self-driving wrappers: a clock here, ``sig`` out
_TB = _testbench("""  reg clk = 1'b0;
  wire [31:0] sig;
  floor_top dut(.clk(clk), .rst(rst), .sig(sig));
  always #5 clk = ~clk;""", "sig")

#: the whole sim_top: its own clock, idle inputs
_TB_ACCEL = _testbench("""  wire clk, busy, done;
  wire [31:0] rdata;
  sim_top dut(.csr__addr('0), .csr__wdata('0), .csr__we(1'b0), .dram_load(1'b0),
              .dram_dump(1'b0), .dram_dump_lo('0), .dram_dump_hi('0), .clk(clk),
              .csr__rdata(rdata), .busy(busy), .done(done), .rst(rst));""", "busy")


def _build(part: str, cfg: AccelConfig, work: Path) -> Path:
    """Verilog for ``part`` and its Verilator binary under ``work``; returns the binary."""
    work.mkdir(parents=True, exist_ok=True)
    tb = work / "floor_tb.sv"
    if part == "accel_idle":
        out = emit(cfg)
        sources = [verilator_source(out / "sim_top.v"), TB_HDL / "dram_model.sv",
                   TB_HDL / "dram_pages.cpp"]
        tb.write_text(_TB_ACCEL)
    else:
        top = {"array": ArrayFloor, "postproc": PostProcFloor}[part](cfg)
        rtl = work / "floor_top.v"
        rtl.write_text(verilog.convert(top, name="floor_top"))
        sources = [rtl]
        tb.write_text(_TB)
    prepare_env()
    cmd = ["verilator", "--binary", *VERILATOR_ARGS, "--top-module", "tessera_floor_tb",
           "-Mdir", str(work / "obj"), "-o", "floor", *map(str, sources), str(tb)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"verilator failed for {part}:\n{done.stderr[-2000:]}")
    return work / "obj" / "floor"


def _run(binary: Path, cycles: int) -> float:
    started = time.perf_counter()
    subprocess.run([str(binary), f"+cycles={cycles}"], check=True, capture_output=True,
                   cwd=binary.parent)
    return time.perf_counter() - started


def measure_floor(part: str, preset: str, work: Path, cycles: int | None = None) -> dict:
    """Build and time ``part`` (:data:`PARTS`) of ``preset``; returns a result row."""
    if part not in PARTS:
        raise ValueError(f"part={part!r}: must be one of {', '.join(PARTS)}")
    if preset not in PRESETS:
        raise ValueError(f"preset={preset!r}: must be one of {', '.join(PRESETS)}")
    cfg = PRESETS[preset]
    cycles = cycles or FLOOR_CYCLES.get(preset, 500_000)
    binary = _build(part, cfg, work / f"{preset}-{part}")
    short, long = _run(binary, cycles), _run(binary, 2 * cycles)
    extra = max(long - short, 1e-9)
    mesh = {"mesh": bool(cfg.dw_mesh)} if part == "array" else {}    # (the array's build)
    return {"kind": "floor", "part": part, "preset": preset,
            "array": f"{cfg.array_rows}x{cfg.array_cols}", **mesh, "cycles": cycles,
            "wall_s": round(extra, 3), "cycles_per_s": round(cycles / extra),
            "cpus": os.cpu_count()}
