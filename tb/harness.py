"""cocotb harness for ``sim_top``: memory images in, one GEMM run, results and counters out.

The clock runs in HDL; Python writes registers (a handful of edges), loads the memory model
from a hex file, pulses start and awaits ``done`` with a cycle budget. It never steps the clock.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import numpy as np
from cocotb.triggers import ReadOnly, RisingEdge, with_timeout

from spec.config import AccelConfig
from spec.desc import GemmDescriptor
from spec.layouts import LAYER_WORDS
from spec.record import layer_record
from spec.regmap import COUNTERS, CSR_READ_LATENCY, CTRL_BITS, REG, record_register

__all__ = ["Harness", "RunResult", "CLOCK_NS"]

#: Period of the HDL clock in tessera_clock (tb/hdl/dram_model.sv).
CLOCK_NS = 10


class RunResult:
    """Outcome of one run: ``error`` code and every counter by its :data:`COUNTERS` name."""

    def __init__(self, error: int, counters: dict[str, int]):
        self.error = error
        self.counters = counters

    def __repr__(self):
        return f"RunResult(error={self.error}, counters={self.counters})"


class Harness:
    def __init__(self, dut, cfg: AccelConfig, workdir: Path):
        self.dut = dut
        self.cfg = cfg
        self.workdir = workdir
        self.image_path = workdir / "dram_image.hex"   # default plusargs of tessera_dram
        self.dump_path = workdir / "dram_dump.hex"

    @classmethod
    async def start(cls, dut) -> "Harness":
        """Reset the design and check CONFIG_ID against ``$ACCEL_BUILD/config.json``."""
        build = Path(os.environ["ACCEL_BUILD"])
        cfg = AccelConfig.from_json((build / "config.json").read_text())
        h = cls(dut, cfg, Path.cwd())
        dut.csr__we.value = 0
        dut.csr__addr.value = 0
        dut.csr__wdata.value = 0
        dut.dram_load.value = 0
        dut.dram_dump.value = 0
        dut.dram_dump_lo.value = 0
        dut.dram_dump_hi.value = 0
        dut.rst.value = 1
        for _ in range(4):
            await RisingEdge(dut.clk)
        dut.rst.value = 0
        await RisingEdge(dut.clk)
        config_id = await h.csr_read(REG["CONFIG_ID"].offset)
        if config_id != cfg.config_id:
            raise AssertionError(f"CONFIG_ID {config_id:08x} != config.json {cfg.config_id:08x}")
        return h

    # -- registers -------------------------------------------------------------------------------

    async def csr_write(self, offset: int, value: int):
        self.dut.csr__addr.value = offset
        self.dut.csr__wdata.value = value & 0xFFFF_FFFF
        self.dut.csr__we.value = 1
        await RisingEdge(self.dut.clk)
        self.dut.csr__we.value = 0

    async def csr_read(self, offset: int) -> int:
        self.dut.csr__addr.value = offset
        await RisingEdge(self.dut.clk)          # addr reaches the register block
        for _ in range(CSR_READ_LATENCY):
            await RisingEdge(self.dut.clk)
        await ReadOnly()
        value = int(self.dut.csr__rdata.value)
        await RisingEdge(self.dut.clk)
        return value

    # -- memory ----------------------------------------------------------------------------------

    async def load(self, regions: list[tuple[int, bytes]]):
        """Write ``regions`` (address, bytes) into the memory model; other bytes keep their
        contents."""
        for addr, data in regions:
            if addr < 0 or addr + len(data) > self.cfg.dram_bytes:
                raise ValueError(f"region [{addr:#x}, {addr + len(data):#x}) outside memory")
        # written a MiB at a time: a 100 MB weight matrix never exists as one 300 MB string
        with self.image_path.open("w") as f:
            for addr, data in regions:
                f.write(f"@{addr:x}\n")
                for lo in range(0, len(data), 1 << 20):
                    chunk = data[lo:lo + (1 << 20)]
                    f.write("\n".join(chunk[i:i + 64].hex(" ") for i in range(0, len(chunk), 64)))
                    f.write("\n")
        self.dut.dram_load.value = 1
        await RisingEdge(self.dut.clk)
        self.dut.dram_load.value = 0
        await RisingEdge(self.dut.clk)

    async def dump(self, addr: int, size: int) -> bytes:
        """Read ``size`` bytes from ``addr`` out of the memory model."""
        self.dut.dram_dump_lo.value = addr
        self.dut.dram_dump_hi.value = addr + size - 1
        self.dut.dram_dump.value = 1
        await RisingEdge(self.dut.clk)
        self.dut.dram_dump.value = 0
        await RisingEdge(self.dut.clk)
        words = []
        for line in self.dump_path.read_text().splitlines():
            # Icarus writes `// 0x...` address comments; both write `@addr` directives
            words.extend(w for w in line.split("//", 1)[0].split() if not w.startswith("@"))
        if len(words) != size:
            raise AssertionError(f"memory dump returned {len(words)} bytes, expected {size}")
        return bytes.fromhex("".join(w.zfill(2) for w in words))

    # -- runs ------------------------------------------------------------------------------------

    async def run(self, desc: GemmDescriptor | Mapping[str, int], *,
                  budget_cycles: int) -> RunResult:
        """Program one layer in register mode, start, await ``done`` within ``budget_cycles``
        (else raise ``cocotb.triggers.SimTimeoutError``), and read the error code and counters.

        ``desc`` is a whole layer record (u32 words by :data:`spec.layouts.LAYER_WORDS` name) or a
        bare descriptor, which :func:`spec.record.layer_record` completes (int32 output, the
        written range as the output window)."""
        rec = layer_record(desc) if isinstance(desc, GemmDescriptor) else dict(desc)
        for name in LAYER_WORDS:
            await self.csr_write(REG[record_register(name)].offset, rec[name])
        await self.csr_write(REG["CTRL"].offset, 1 << CTRL_BITS["START"])
        await with_timeout(RisingEdge(self.dut.done), budget_cycles * CLOCK_NS, "ns")
        await RisingEdge(self.dut.clk)
        status = await self.csr_read(REG["STATUS"].offset)
        if status & 1:
            raise AssertionError(f"STATUS {status:#x}: busy after done")
        error = await self.csr_read(REG["ERROR"].offset)
        counters = {name: await self.csr_read(REG[f"PERF_{name.upper()}"].offset)
                    for name in COUNTERS}
        return RunResult(error, counters)


def a_image(a: np.ndarray, stride: int) -> bytes:
    """A (m x k, int8) stored k-major with ``stride`` bytes per k row."""
    m, k = a.shape
    img = np.zeros((k, stride), dtype=np.int8)
    img[:, :m] = a.T
    return img.tobytes()


def b_image(b: np.ndarray, stride: int) -> bytes:
    k, n = b.shape
    img = np.zeros((k, stride), dtype=np.int8)
    img[:, :n] = b
    return img.tobytes()


def c_from_bytes(raw: bytes, m: int, n: int, stride: int) -> np.ndarray:
    rows = np.frombuffer(raw[:m * stride].ljust(m * stride, b"\0"), dtype=np.uint8)
    rows = rows.reshape(m, stride)[:, :4 * n]
    return rows.copy().view("<i4").reshape(m, n)
