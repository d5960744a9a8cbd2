"""hw.crc: CRC-32 of random words equals zlib's (restartable_crc, and CrcState fed with
registered crc_data_term terms); restart clears, a word offered with restart is dropped, words
with valid low are skipped."""

import zlib

import numpy as np
from amaranth import Cat, Const, Elaboratable, Module, Mux, Signal
from amaranth.lib.crc import catalog

from hw.crc import CrcState, crc_data_term, crc_step_masks, restartable_crc

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


class _SplitDut(Elaboratable):
    """The runner's form: the word's term registered, then CrcState; a second term (of the word's
    lane 1 alone) XORed in where `zero` is high cancels that lane, as if it were zero."""

    def __init__(self):
        self.data, self.valid, self.zero = Signal(WIDTH), Signal(), Signal()
        self.restart = Signal()
        self.state = CrcState(catalog.CRC32_ISO_HDLC, WIDTH)

    def elaborate(self, platform):
        m = Module()
        m.submodules.state = st = self.state
        alg = catalog.CRC32_ISO_HDLC
        term, lane_term, valid, zero = Signal(32), Signal(32), Signal(), Signal()
        lane = self.data[32:64]
        m.d.sync += [term.eq(crc_data_term(alg, self.data)),
                     lane_term.eq(crc_data_term(alg, Cat(Const(0, 32), lane))),
                     valid.eq(self.valid), zero.eq(self.zero)]
        m.d.comb += [st.term.eq(term ^ Mux(zero, lane_term, 0)), st.valid.eq(valid),
                     st.restart.eq(self.restart)]
        return m


def test_crc_state_with_registered_terms_matches_zlib():
    dut = _SplitDut()
    rng = np.random.default_rng(11)
    words = [int(w) for w in rng.integers(0, 2 ** 64, 12, dtype=np.uint64)]
    zero = [i % 5 == 3 for i in range(len(words))]
    skip = [i % 4 == 1 for i in range(len(words))]
    seen = {}

    async def tb(ctx):
        for word in words[:3]:                  # taken, then dropped by the restart below
            ctx.set(dut.data, word)
            ctx.set(dut.valid, 1)
            await ctx.tick()
        ctx.set(dut.valid, 0)
        await ctx.tick()
        ctx.set(dut.restart, 1)
        await ctx.tick()
        ctx.set(dut.restart, 0)
        seen["restarted"] = ctx.get(dut.state.crc)
        for word, z, s in zip(words, zero, skip):
            ctx.set(dut.data, word)
            ctx.set(dut.zero, z)
            ctx.set(dut.valid, not s)
            await ctx.tick()
        ctx.set(dut.valid, 0)
        await ctx.tick()                        # the last term's register, then the state
        seen["crc"] = ctx.get(dut.state.crc)

    run_sim(dut, tb)
    expect = b"".join((w & (2 ** 32 - 1) if z else w).to_bytes(8, "little")
                      for w, z, s in zip(words, zero, skip) if not s)
    assert seen["restarted"] == zlib.crc32(b"")
    assert seen["crc"] == zlib.crc32(expect)


def test_crc_step_masks_are_the_bitwise_crc():
    """One 8-bit word through the masks equals zlib's CRC of that byte (from the initial value,
    through the output reflection and XOR)."""
    alg = catalog.CRC32_ISO_HDLC
    state_masks, data_masks = crc_step_masks(alg, 8)
    for byte in (0x00, 0x01, 0x80, 0xA5, 0xFF):
        state = 0
        for i in range(32):
            bit = bin(alg.initial_crc & state_masks[i]).count("1") + bin(byte & data_masks[i]).count("1")
            state |= (bit & 1) << i
        out = int(f"{state:032b}"[::-1], 2) ^ alg.xor_output
        assert out == zlib.crc32(bytes([byte])), hex(byte)
