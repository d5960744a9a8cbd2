"""The golden device's memory: a 2 GiB device address space (``default``) costs only the pages
written (firmware.emulator.zeroed_memory)."""

import asyncio
from pathlib import Path

import numpy as np
import pytest

from firmware.emulator import DeviceMemory, EmulatorDevice, zeroed_memory
from firmware.runtime import DeviceError
from spec.config import PRESETS


def _rss_bytes() -> int:
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        pytest.skip("no /proc/self/status: resident memory is not measurable here")
    return next(int(line.split()[1]) * 1024 for line in status.splitlines()
                if line.startswith("VmRSS:"))


def test_zeroed_memory_behaves_like_a_bytearray():
    mem = zeroed_memory(1 << 20)
    assert len(mem) == 1 << 20 and mem[:8] == bytes(8) and mem[(1 << 20) - 1] == 0
    mem[100:104] = b"\x01\x02\x03\x04"
    view = np.frombuffer(mem, np.uint8)
    assert view[100:104].tolist() == [1, 2, 3, 4]
    view[200] = 7                                   # writable through the buffer protocol
    assert mem[200] == 7 and bytes(mem[99:101]) == b"\x00\x01"
    DeviceMemory(zeroed_memory(PRESETS["tiny"].dram_bytes), PRESETS["tiny"])


@pytest.mark.parametrize("size", [0, -1, 1.5, None])
def test_zeroed_memory_refuses_a_bad_size(size):
    with pytest.raises(ValueError, match=rf"zeroed_memory: size={size!r} must be a positive int"):
        zeroed_memory(size)


def test_golden_device_of_2_gib_costs_the_pages_written():
    cfg = PRESETS["default"]
    assert cfg.dram_bytes == 2 << 30
    before = _rss_bytes()
    dev = EmulatorDevice(cfg)
    top = cfg.dram_bytes - 64

    async def go():
        await dev.write_memory(0, b"\x11" * 64)
        await dev.write_memory(top, bytes(range(64)))
        await dev.write_memory(1 << 30, b"\x22" * 4096)
        assert await dev.read_memory(top, 64) == bytes(range(64))
        assert await dev.read_memory((1 << 30) - 8, 16) == bytes(8) + b"\x22" * 8
        with pytest.raises(DeviceError, match="outside the device's dram_bytes=0x80000000"):
            await dev.read_memory(top, 65)

    asyncio.run(go())
    assert len(dev.mem) == cfg.dram_bytes
    grown = _rss_bytes() - before
    assert grown < 64 << 20, f"the 2 GiB golden device made {grown:,} bytes resident"


def test_reading_unwritten_memory_costs_nothing():
    """A private mapping reads untouched pages as the kernel's zero page (a shared one would
    allocate them): summing 256 MiB of never-written memory leaves the resident size alone."""
    mem = zeroed_memory(256 << 20)
    before = _rss_bytes()
    assert not np.frombuffer(mem, np.uint8).any()
    grown = _rss_bytes() - before
    assert grown < 32 << 20, f"reading 256 MiB of zeros made {grown:,} bytes resident"
