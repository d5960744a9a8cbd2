"""The golden device's memory: a 2 GiB device address space (``default``) costs only the pages
written (firmware.emulator.zeroed_memory)."""

import asyncio
import struct
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


def test_unknown_bytes_are_noted_when_read_and_forgotten_when_written():
    cfg = PRESETS["tiny"]
    mem = DeviceMemory(zeroed_memory(cfg.dram_bytes), cfg)
    mem.set_unknown(100, 108)
    mem.gather(np.arange(90, 100))
    mem.words(108, 2)
    assert not mem.unknown_read                     # next to them, not in them
    mem.write(100, b"\0" * 4)                       # the first word is known again
    mem.gather(np.array([100, 103]))
    assert not mem.unknown_read and mem.unknown == [(104, 108)]
    mem.words(104, 1)
    assert mem.unknown_read
    mem = DeviceMemory(zeroed_memory(cfg.dram_bytes), cfg)
    mem.set_unknown(0, 4)
    mem.gather(np.array([cfg.dram_bytes + 2]))      # the local buffer is not DRAM byte 2
    assert not mem.unknown_read
    mem.gather(np.array([cfg.dram_bytes * 2 + 2]))  # a DRAM read wraps
    assert mem.unknown_read


@pytest.mark.parametrize("stats_in_input", [False, True])
def test_a_layer_reading_a_counter_word_has_no_defined_output(stats_in_input):
    """The model writes a layer's statistics counters as 0 (cycle counts it does not know);
    a later layer whose input holds one has an output the model cannot know (found by
    tests/sim/test_fuzz.py::test_fuzzed_images_on_rtl_full, seed 90111039: a bit flip moved
    the convolution's statistics record into the fully connected layer's input, and the RTL's
    real counters gave other outputs than the model's zeros)."""
    from firmware.emulator import run_image
    from firmware.image import reseal
    from tb.fuzz import _record_at, _set_word, _initial, seeds

    cfg = PRESETS["tiny"]
    conv = next(s for s in seeds(cfg, np.random.default_rng(90111039)) if s.name == "conv")
    blob = bytearray(conv.blob)
    fc_input = struct.unpack_from("<I", blob, _record_at(blob, 1, "desc_b_addr"))[0]
    stats = struct.unpack_from("<I", blob, _record_at(blob, 0, "stats_addr"))[0]
    if stats_in_input:                  # layer 1's input is layer 0's output: put it there
        stats = fc_input + 64
        _set_word(blob, _record_at(blob, 0, "stats_addr"), stats)
        blob = bytearray(reseal(bytes(blob)))
    mem = zeroed_memory(cfg.dram_bytes)
    for addr, data in [*_initial(conv), (0, bytes(blob))]:
        mem[addr:addr + len(data)] = data
    result = run_image(mem, 0, cfg)
    assert result.error == 0 and result.defined is not stats_in_input
    assert stats + 4 in result.counter_words
