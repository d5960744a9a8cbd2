"""hw.crc.restartable_crc: CRC-32 of random words equals zlib's, restart clears, a word
offered with restart is dropped, words with valid low are skipped."""

import zlib

import numpy as np
from amaranth import Elaboratable, Module, Signal
from amaranth.lib.crc import catalog

from hw.crc import restartable_crc

from .util import run_sim

WIDTH = 64


class _Dut(Elaboratable):
    def __init__(self):
        self.restart = Signal()
        self.crc, self._sub = restartable_crc(catalog.CRC32_ISO_HDLC, WIDTH, self.restart)

    def elaborate(self, platform):
        m = Module()
        m.submodules.crc = self._sub
        return m


def _stream(words) -> bytes:
    return b"".join(int(w).to_bytes(WIDTH // 8, "little") for w in words)


def test_restartable_crc_matches_zlib_and_restarts():
    dut = _Dut()
    rng = np.random.default_rng(7)
    first = [int(w) for w in rng.integers(0, 2 ** 63, 5, dtype=np.uint64)]
    second = [int(w) for w in rng.integers(0, 2 ** 63, 9, dtype=np.uint64)]
    seen = {}

    async def tb(ctx):
        crc = dut.crc
        for word in first:
            ctx.set(crc.data, word)
            ctx.set(crc.valid, 1)
            await ctx.tick()
        ctx.set(crc.valid, 0)
        await ctx.tick()                        # an idle cycle holds the state
        seen["first"] = ctx.get(crc.crc)
        ctx.set(dut.restart, 1)                 # with a word offered: dropped
        ctx.set(crc.data, 0x1234)
        ctx.set(crc.valid, 1)
        await ctx.tick()
        ctx.set(dut.restart, 0)
        seen["restarted"] = ctx.get(crc.crc)
        for i, word in enumerate(second):
            ctx.set(crc.data, word)
            ctx.set(crc.valid, i % 3 != 2)
            await ctx.tick()
        ctx.set(crc.valid, 0)
        seen["second"] = ctx.get(crc.crc)

    run_sim(dut, tb)
    assert seen["first"] == zlib.crc32(_stream(first))
    assert seen["restarted"] == zlib.crc32(b"")
    assert seen["second"] == zlib.crc32(_stream(w for i, w in enumerate(second) if i % 3 != 2))
