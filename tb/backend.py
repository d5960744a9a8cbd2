"""The shipped host runtime's backend for the RTL under cocotb (:class:`firmware.runtime.Backend`).

Memory goes in and out through the memory model's ``$readmemh`` / ``$writememh`` ports, registers
through the CSR bus, and ``wait_done`` awaits the ``done`` line under a cycle budget: Python never
steps the clock.
"""

from __future__ import annotations

from cocotb.triggers import RisingEdge, SimTimeoutError, with_timeout

from firmware.runtime import RunTimeout

from .harness import CLOCK_NS, Harness

__all__ = ["CocotbBackend"]


class CocotbBackend:
    def __init__(self, harness: Harness):
        self.h = harness

    async def write_memory(self, addr: int, data: bytes) -> None:
        await self.h.load([(addr, data)])

    async def read_memory(self, addr: int, size: int) -> bytes:
        return await self.h.dump(addr, size)

    async def write_register(self, offset: int, value: int) -> None:
        await self.h.csr_write(offset, value)

    async def read_register(self, offset: int) -> int:
        return await self.h.csr_read(offset)

    async def wait_done(self, budget_cycles: int) -> None:
        try:
            await with_timeout(RisingEdge(self.h.dut.done), budget_cycles * CLOCK_NS, "ns")
        except SimTimeoutError:
            raise RunTimeout(f"done not raised within {budget_cycles} cycles") from None
        await RisingEdge(self.h.dut.clk)
