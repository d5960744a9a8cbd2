"""Helpers for per-cycle Amaranth simulations of single blocks (small unit tests only)."""

import os

from amaranth.sim import Simulator

__all__ = ["run_sim"]


def run_sim(dut, *testbenches, tmp_path=None, name="sim", processes=()):
    """Simulate ``dut`` with a 1 MHz ``sync`` clock; writes ``tmp_path/name.vcd`` when VCD=1."""
    sim = Simulator(dut)
    sim.add_clock(1e-6)
    for tb in testbenches:
        sim.add_testbench(tb)
    for proc in processes:
        sim.add_process(proc)
    if os.getenv("VCD") == "1" and tmp_path is not None:
        with sim.write_vcd(str(tmp_path / f"{name}.vcd")):
            sim.run()
    else:
        sim.run()
