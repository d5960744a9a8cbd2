"""firmware.runtime against an in-memory fake device: no RTL, every register offset and bit from
spec.regmap, the statistics record layout from spec.layouts."""

import asyncio
import struct

import numpy as np
import pytest

from firmware.demos import build_mlp
from firmware.emulator import zeroed_memory
from firmware.builder import ImageBuilder
from firmware.image import BASE_ADDR_WORD, ImageError, decode, reseal, validate
from firmware.runtime import DeviceError, LayerStats, RunReport, RunTimeout, Runtime
from spec.config import PRESETS
from spec.desc import ErrorCode
from spec.layouts import COUNTERS, HEADER_WORDS, LAYER_WORDS, STATS_BYTES, STATS_WORDS
from spec.record import HEADER_BYTES, layer_record
from spec.regmap import CTRL_BITS, REG, REGISTERS, STATUS_BITS, record_register

CFG = PRESETS["tiny"]


def off(name: str) -> int:
    return REG[name].offset


def status_word(*, busy=False, done=True, image=False) -> int:
    return ((busy << STATUS_BITS["BUSY"]) | (done << STATUS_BITS["DONE"])
            | (image << STATUS_BITS["IMAGE"]))


def run_counters(seed: int) -> dict[str, int]:
    """Distinct values per counter (and per ``seed``) so a mix-up of names shows."""
    return {name: 1000 * seed + 7 * j + 1 for j, name in enumerate(COUNTERS)}


def stats_record(index: int, counters: dict[str, int]) -> bytes:
    words = [0] * (STATS_BYTES // 4)
    for name, value in counters.items():
        words[STATS_WORDS[name]] = value
    words[STATS_WORDS["layer_index"]] = index
    return struct.pack(f"<{len(words)}I", *words)


class FakeDevice:
    """A :class:`firmware.runtime.Backend` in memory: registers in a dict, ``cfg.dram_bytes`` of
    memory, every register write recorded. ``on_done(device, budget_cycles)`` scripts what the
    hardware did by the time ``done`` rose (or raises, e.g. :class:`RunTimeout`)."""

    def __init__(self, cfg=CFG, *, config_id=None, on_done=None):
        self.cfg = cfg
        self.regs = {r.offset: 0 for r in REGISTERS}
        self.regs[off("CONFIG_ID")] = cfg.config_id if config_id is None else config_id
        self.mem = zeroed_memory(cfg.dram_bytes)   # default's 2 GiB: only pages written
        self.reg_writes: list[tuple[int, int]] = []
        self.writes_at_done: list[tuple[int, int]] | None = None
        self.budgets: list[int] = []
        self.mem_reads: list[tuple[int, int]] = []
        self.on_done = on_done

    async def write_memory(self, addr, data):
        assert 0 <= addr and addr + len(data) <= len(self.mem)
        self.mem[addr:addr + len(data)] = data

    async def read_memory(self, addr, size):
        assert 0 <= addr and addr + size <= len(self.mem)
        self.mem_reads.append((addr, size))
        return bytes(self.mem[addr:addr + size])

    async def write_register(self, offset, value):
        assert type(offset) is int and type(value) is int and 0 <= value < 1 << 32
        self.reg_writes.append((offset, value))
        self.regs[offset] = value

    async def read_register(self, offset):
        return self.regs[offset]

    async def wait_done(self, budget_cycles):
        self.budgets.append(budget_cycles)
        self.writes_at_done = list(self.reg_writes)
        if self.on_done is not None:
            self.on_done(self, budget_cycles)

    # -- what the hardware does ---------------------------------------------------------------

    def finish(self, *, image, error=ErrorCode.NONE, layer_index=0, counters=None,
               status=None):
        self.regs[off("STATUS")] = status_word(image=image) if status is None else status
        self.regs[off("ERROR")] = int(error)
        self.regs[off("LAYER_INDEX")] = layer_index
        for name, value in (counters or run_counters(0)).items():
            self.regs[off(f"PERF_{name.upper()}")] = value

    def image_at(self, addr: int):
        total = struct.unpack_from("<I", self.mem, addr + 4 * HEADER_WORDS["total_bytes"])[0]
        return decode(bytes(self.mem[addr:addr + total]))

    def run_image_ok(self, *, bad_index_at=None):
        """A successful image run: each layer's statistics record at its stats_addr."""
        image = self.image_at(self.regs[off("IMAGE_ADDR")])
        for i, layer in enumerate(image.layers):
            index = i + 1 if i == bad_index_at else i
            rec = stats_record(index, run_counters(i + 1))
            self.mem[layer.stats_addr:layer.stats_addr + STATS_BYTES] = rec
        self.finish(image=True, layer_index=len(image.layers) - 1)


def run(coro):
    return asyncio.run(coro)


@pytest.fixture(scope="module")
def mlp():
    return build_mlp(CFG)


def one_layer_image(image_addr: int) -> bytes:
    b = ImageBuilder(CFG, image_addr=image_addr)
    x = b.buffer("x", 8 * 4)
    y = b.buffer("y", 4 * 8 * 4)
    b.gemm("g", weights=np.arange(64, dtype=np.int8).reshape(8, 8), n=4, b_addr=x,
           b_stride=4, out_addr=y, out_stride=16)
    return b.build()[0]


# -- open -----------------------------------------------------------------------------------------

def test_runtime_open_accepts_matching_config_id():
    dev = FakeDevice()
    run(Runtime(dev, CFG).open())
    assert dev.reg_writes == []


def test_runtime_open_refuses_wrong_config_id_naming_both():
    wrong = CFG.config_id ^ 0x8000_0001
    with pytest.raises(DeviceError) as info:
        run(Runtime(FakeDevice(config_id=wrong), CFG).open())
    assert f"{wrong:#010x}" in str(info.value)
    assert f"{CFG.config_id:#010x}" in str(info.value)


def test_runtime_open_refuses_other_preset():
    dev = FakeDevice(PRESETS["default"])
    with pytest.raises(DeviceError, match="CONFIG_ID"):
        run(Runtime(dev, CFG).open())


# -- load_image -----------------------------------------------------------------------------------

def test_runtime_load_image_places_blob_at_header_base_addr():
    base = 0x1_0000
    blob = one_layer_image(base)
    assert struct.unpack_from("<I", blob, 4 * BASE_ADDR_WORD)[0] == base
    dev = FakeDevice()
    got = run(Runtime(dev, CFG).load_image(blob))
    assert got == base
    assert bytes(dev.mem[base:base + len(blob)]) == blob
    assert not any(dev.mem[:base]) and not any(dev.mem[base + len(blob):])


def test_runtime_load_image_refuses_invalid_image_listing_problems(mlp):
    bad = bytearray(mlp.blob)
    struct.pack_into("<I", bad, 4 * HEADER_WORDS["config_id"], CFG.config_id ^ 1)
    struct.pack_into("<I", bad, 4 * HEADER_WORDS["format_version"], 0xEE)
    bad = reseal(bytes(bad))
    problems = validate(bad, CFG)
    assert len(problems) >= 2
    dev = FakeDevice()
    with pytest.raises(ImageError) as info:
        run(Runtime(dev, CFG).load_image(bad))
    for problem in problems:
        assert problem in str(info.value)
    assert "config_id" in str(info.value) and "format_version" in str(info.value)
    assert not np.frombuffer(dev.mem, np.uint8).any(), "a refused image must not be written"


def test_runtime_load_image_refuses_bad_crc():
    blob = bytearray(one_layer_image(0))
    blob[HEADER_BYTES] ^= 0xFF              # a record byte, not resealed
    with pytest.raises(ImageError, match="crc32"):
        run(Runtime(FakeDevice(), CFG).load_image(bytes(blob)))


def test_runtime_load_image_refuses_a_changed_weight():
    blob = bytearray(one_layer_image(0))
    a_addr = decode(bytes(blob)).layers[0].desc.a_addr
    blob[a_addr] ^= 0x01                    # the header's CRC does not cover the weights
    with pytest.raises(ImageError, match="layer 0: BAD_WEIGHTS: a_crc="):
        run(Runtime(FakeDevice(), CFG).load_image(bytes(blob)))


def test_runtime_load_image_unchecked_places_invalid_image_anyway():
    base = 0x2000
    blob = bytearray(one_layer_image(base))
    blob[-1] ^= 0xFF                        # bad CRC: refused with check=True
    blob = bytes(blob)
    assert validate(blob, CFG)
    dev = FakeDevice()
    assert run(Runtime(dev, CFG).load_image(blob, check=False)) == base
    assert bytes(dev.mem[base:base + len(blob)]) == blob


def test_runtime_load_image_unchecked_too_short_blob():
    with pytest.raises(ImageError, match="too short"):
        run(Runtime(FakeDevice(), CFG).load_image(b"\0" * (4 * BASE_ADDR_WORD), check=False))


def test_runtime_load_image_unchecked_past_device_memory():
    blob = bytearray(one_layer_image(0))
    struct.pack_into("<I", blob, 4 * BASE_ADDR_WORD, CFG.dram_bytes - 64)
    with pytest.raises(ValueError, match="dram_bytes"):
        run(Runtime(FakeDevice(), CFG).load_image(reseal(bytes(blob)), check=False))


# -- run_image ------------------------------------------------------------------------------------

def test_runtime_run_image_starts_reads_counters_and_every_layer_stats(mlp):
    dev = FakeDevice(on_done=lambda d, budget: d.run_image_ok())
    rt = Runtime(dev, CFG)

    async def go():
        await rt.open()
        addr = await rt.load_image(mlp.blob)
        for at, data in mlp.load:
            await rt.write(at, data)
        return addr, await rt.run_image(addr, budget_cycles=12345)

    addr, report = run(go())
    assert dev.writes_at_done == [(off("IMAGE_ADDR"), addr),
                                  (off("CTRL"), 1 << CTRL_BITS["RUN_IMAGE"])]
    assert dev.budgets == [12345]
    assert report.ok and report.error is ErrorCode.NONE
    assert report.layer_index == len(mlp.layers) - 1
    assert report.counters == run_counters(0)
    assert report.layers == tuple(LayerStats(index=i, counters=run_counters(i + 1))
                                  for i in range(len(mlp.layers)))
    stats = {(b.layer.stats_addr, STATS_BYTES) for b in mlp.layers}
    assert stats <= set(dev.mem_reads)
    assert report.raise_for_error() is report


def test_runtime_run_image_refuses_stats_record_with_wrong_layer_index(mlp):
    dev = FakeDevice(on_done=lambda d, budget: d.run_image_ok(bad_index_at=1))
    rt = Runtime(dev, CFG)

    async def go():
        addr = await rt.load_image(mlp.blob)
        return await rt.run_image(addr, budget_cycles=1000)

    with pytest.raises(DeviceError) as info:
        run(go())
    msg = str(info.value)
    assert f"{mlp.layers[1].layer.stats_addr:#x}" in msg
    assert "layer_index=2" in msg and "expected 1" in msg


def test_runtime_run_image_error_reports_code_and_layer_without_stats(mlp):
    dev = FakeDevice(on_done=lambda d, budget: d.finish(
        image=True, error=ErrorCode.BAD_QUANT, layer_index=1, counters=run_counters(3)))
    rt = Runtime(dev, CFG)

    async def go():
        addr = await rt.load_image(mlp.blob)
        return await rt.run_image(addr, budget_cycles=1000)

    report = run(go())
    assert not report.ok
    assert report.error is ErrorCode.BAD_QUANT and report.layer_index == 1
    assert report.counters == run_counters(3)
    assert report.layers == ()
    assert dev.mem_reads == [], "no statistics are read after a failed run"
    with pytest.raises(DeviceError) as info:
        report.raise_for_error()
    assert "BAD_QUANT" in str(info.value)
    assert f"({int(ErrorCode.BAD_QUANT)})" in str(info.value)
    assert "at layer 1" in str(info.value)


def test_runtime_run_image_of_unknown_image_has_no_layer_stats():
    dev = FakeDevice(on_done=lambda d, budget: d.finish(image=True))
    report = run(Runtime(dev, CFG).run_image(0x4000, budget_cycles=10))
    assert report.ok and report.layers == ()
    assert dev.mem_reads == []


def test_runtime_run_image_after_unchecked_undecodable_image_has_no_layer_stats(mlp):
    bad = bytearray(mlp.blob)
    bad[HEADER_BYTES] ^= 1                      # CRC no longer matches: decode() refuses it
    dev = FakeDevice(on_done=lambda d, budget: d.finish(image=True))
    rt = Runtime(dev, CFG)

    async def go():
        await rt.load_image(mlp.blob)           # a good image first ...
        addr = await rt.load_image(bytes(bad), check=False)    # ... replaced by a bad one
        return await rt.run_image(addr, budget_cycles=10)

    report = run(go())
    assert report.layers == ()
    assert dev.mem_reads == []


@pytest.mark.parametrize("error", [ErrorCode.BAD_IMAGE, ErrorCode.CONFIG_MISMATCH,
                                   ErrorCode.BAD_CRC])
def test_runtime_raise_for_error_image_errors_name_no_layer(error):
    report = RunReport(error=error, layer_index=0, counters={})
    with pytest.raises(DeviceError) as info:
        report.raise_for_error()
    assert error.name in str(info.value) and "at layer" not in str(info.value)


def test_runtime_raise_for_error_every_code():
    for code in ErrorCode:
        report = RunReport(error=code, layer_index=5, counters={})
        if code is ErrorCode.NONE:
            assert report.ok and report.raise_for_error() is report
        else:
            assert not report.ok
            with pytest.raises(DeviceError, match=code.name):
                report.raise_for_error()


def test_runtime_run_timeout_propagates():
    def hang(dev, budget):
        raise RunTimeout(f"done not raised within {budget} cycles")

    assert issubclass(RunTimeout, DeviceError)
    dev = FakeDevice(on_done=hang)
    with pytest.raises(RunTimeout, match="within 77 cycles"):
        run(Runtime(dev, CFG).run_image(0, budget_cycles=77))
    with pytest.raises(RunTimeout):
        run(Runtime(dev, CFG).run_layer(layer_record_of_mlp(), budget_cycles=77))


# -- run_layer ------------------------------------------------------------------------------------

def layer_record_of_mlp() -> dict[str, int]:
    desc = build_mlp(CFG).layers[0].layer.desc
    return layer_record(desc)


def test_runtime_run_layer_writes_every_record_register_then_start(mlp):
    layer = mlp.layers[0].layer
    rec = {name: value for name, value in zip(LAYER_WORDS, layer.record_words())}
    rec["out_zero_point"] = -3                  # signed values go out as two's complement
    rec["act_min"] = -3
    dev = FakeDevice(on_done=lambda d, budget: d.finish(image=False, counters=run_counters(5)))
    report = run(Runtime(dev, CFG).run_layer(rec, budget_cycles=999))
    expected = [(off(record_register(name)), rec[name] & 0xFFFF_FFFF) for name in LAYER_WORDS]
    expected.append((off("CTRL"), 1 << CTRL_BITS["START"]))
    assert dev.writes_at_done == expected
    assert dev.regs[off("LAYER_OUT_ZERO_POINT")] == 0xFFFF_FFFD
    assert dev.budgets == [999]
    assert report == RunReport(error=ErrorCode.NONE, layer_index=0, counters=run_counters(5),
                               image=False)
    assert dev.mem_reads == []


def test_runtime_run_layer_every_record_field_has_its_own_register():
    regs = [off(record_register(name)) for name in LAYER_WORDS]
    assert len(set(regs)) == len(LAYER_WORDS)
    assert not set(regs) & {off(n) for n in ("CTRL", "STATUS", "ERROR", "CONFIG_ID",
                                             "IMAGE_ADDR", "LAYER_INDEX")}


def test_runtime_run_layer_reports_error():
    dev = FakeDevice(on_done=lambda d, budget: d.finish(image=False,
                                                       error=ErrorCode.BAD_PARTITION_K))
    report = run(Runtime(dev, CFG).run_layer(layer_record_of_mlp(), budget_cycles=10))
    assert report.error is ErrorCode.BAD_PARTITION_K
    with pytest.raises(DeviceError, match="BAD_PARTITION_K"):
        report.raise_for_error()


def test_runtime_run_layer_missing_fields_named_and_nothing_written():
    rec = layer_record_of_mlp()
    del rec["stats_addr"], rec["desc_m"]
    dev = FakeDevice()
    with pytest.raises(ValueError) as info:
        run(Runtime(dev, CFG).run_layer(rec, budget_cycles=10))
    assert "desc_m" in str(info.value) and "stats_addr" in str(info.value)
    assert dev.reg_writes == [] and dev.budgets == []


# -- status and error checks ----------------------------------------------------------------------

@pytest.mark.parametrize("image_run", [False, True])
@pytest.mark.parametrize("status, fragment", [
    (dict(busy=True, done=True), "not busy"),
    (dict(busy=False, done=False), "expected done"),
    (dict(busy=True, done=False), "expected done"),
])
def test_runtime_inconsistent_status_after_done(image_run, status, fragment):
    word = status_word(image=image_run, **status)
    dev = FakeDevice(on_done=lambda d, budget: d.finish(image=image_run, status=word))
    rt = Runtime(dev, CFG)
    coro = (rt.run_image(0, budget_cycles=10) if image_run
            else rt.run_layer(layer_record_of_mlp(), budget_cycles=10))
    with pytest.raises(DeviceError, match=fragment) as info:
        run(coro)
    assert f"STATUS={word:#x}" in str(info.value)


def test_runtime_image_bit_must_match_the_run():
    dev = FakeDevice(on_done=lambda d, budget: d.finish(image=False))
    with pytest.raises(DeviceError, match="IMAGE bit"):
        run(Runtime(dev, CFG).run_image(0, budget_cycles=10))
    dev = FakeDevice(on_done=lambda d, budget: d.finish(image=True))
    with pytest.raises(DeviceError, match="IMAGE bit"):
        run(Runtime(dev, CFG).run_layer(layer_record_of_mlp(), budget_cycles=10))


@pytest.mark.parametrize("value", [max(ErrorCode) + 1, 0xFFFF_FFFF])
def test_runtime_error_register_not_an_error_code(value):
    def done(dev, budget):
        dev.finish(image=True)
        dev.regs[off("ERROR")] = value

    with pytest.raises(DeviceError, match=f"holds {value}, not an ErrorCode"):
        run(Runtime(FakeDevice(on_done=done), CFG).run_image(0, budget_cycles=10))


# -- memory ---------------------------------------------------------------------------------------

def test_runtime_write_read_round_trip_up_to_the_last_byte():
    dev = FakeDevice()
    rt = Runtime(dev, CFG)
    end = CFG.dram_bytes

    async def go():
        await rt.write(0x100, bytearray(b"\x01\x02\x03"))
        await rt.write(end - 2, b"\xAA\xBB")
        return (await rt.read(0x100, 3), await rt.read(end - 2, 2), await rt.read(end, 0))

    assert run(go()) == (b"\x01\x02\x03", b"\xAA\xBB", b"")


@pytest.mark.parametrize("addr, size", [
    (-1, 1), (CFG.dram_bytes, 1), (CFG.dram_bytes - 1, 2), (0, CFG.dram_bytes + 1),
    (0, -1), (1.0, 1), (None, 1),
])
def test_runtime_out_of_range_access_names_the_range(addr, size):
    dev = FakeDevice()
    rt = Runtime(dev, CFG)
    with pytest.raises(ValueError) as info:
        run(rt.read(addr, size))
    msg = str(info.value)
    assert f"dram_bytes={CFG.dram_bytes:#x}" in msg and f"addr={addr!r}" in msg
    if size >= 0:
        with pytest.raises(ValueError, match=f"dram_bytes={CFG.dram_bytes:#x}"):
            run(rt.write(addr, bytes(size)))
    assert dev.mem_reads == [] and not np.frombuffer(dev.mem, np.uint8).any()


def test_register_run_errors_name_no_layer():
    report = RunReport(error=ErrorCode.BAD_TILE, layer_index=0, counters={}, image=False)
    with pytest.raises(DeviceError) as info:
        report.raise_for_error()
    assert "BAD_TILE" in str(info.value) and "layer" not in str(info.value)


def test_image_overwritten_in_part_is_forgotten(mlp):
    """A second image placed over part of the first: running the first address no longer
    reads the first image's statistics records (they describe bytes that are gone)."""
    dev = FakeDevice(on_done=lambda d, budget: d.finish(image=True))
    rt = Runtime(dev, CFG)

    async def go():
        await rt.load_image(mlp.blob)                          # at 0, 3456 bytes
        await rt.load_image(one_layer_image(1024))             # over its middle
        return await rt.run_image(0, budget_cycles=10)

    report = run(go())
    assert report.ok and report.layers == ()
    assert dev.mem_reads == []
