"""Host runtime: place an image and tensors in device memory, run, wait, read results back.

The runtime is backend-agnostic: everything device-specific is a :class:`Backend` (five
coroutines: memory in/out, register in/out, wait for ``done``). The cocotb testbenches drive the
RTL through ``tb.backend.CocotbBackend``, so the runtime the tests exercise is the one shipped
here; a SoC driver implements the same five calls over its bus (``accel_regs.h`` has the
register offsets). Register offsets and bits come from :mod:`spec.regmap`, the statistics record
layout from :mod:`spec.layouts`.

Typical use (inside a coroutine)::

    rt = Runtime(backend, cfg)
    await rt.open()                                   # CONFIG_ID must match cfg
    await rt.load_image(blob)                         # validated, placed at its base_addr
    await rt.write(x_addr, x_bytes)
    report = await rt.run_image(image_addr, budget_cycles=10_000_000)
    report.raise_for_error()
    y = await rt.read(y_addr, size)
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Mapping
from typing import Protocol

from spec.config import AccelConfig
from spec.desc import ErrorCode
from spec.layouts import COUNTERS, LAYER_WORDS, STATS_BYTES, STATS_WORDS
from spec.regmap import CTRL_BITS, REG, STATUS_BITS, record_register

from .image import BASE_ADDR_WORD, ImageError, decode, validate

__all__ = ["Backend", "Runtime", "RunReport", "LayerStats", "DeviceError", "RunTimeout",
           "image_budget_cycles"]


def image_budget_cycles(predicted_cycles: int, image_bytes: int, records: int) -> int:
    """A generous cycle budget for one image run: four times the predicted layer cycles, the
    CRC pass over the image and an allowance per record (fetches, checks, parameters,
    statistics). A run that needs more is a hang, reported as such."""
    return 4 * predicted_cycles + 4 * image_bytes + 4000 * records + 20_000


class Backend(Protocol):
    """What the runtime needs from a device (or a simulation of one)."""

    async def write_memory(self, addr: int, data: bytes) -> None: ...

    async def read_memory(self, addr: int, size: int) -> bytes: ...

    async def write_register(self, offset: int, value: int) -> None: ...

    async def read_register(self, offset: int) -> int: ...

    async def wait_done(self, budget_cycles: int) -> None:
        """Return once the ``done`` line is high; raise :class:`RunTimeout` if that takes more
        than ``budget_cycles`` clock cycles."""


class DeviceError(RuntimeError):
    """The device is not the one the runtime was opened for, or a run ended with an error."""


class RunTimeout(DeviceError):
    """A run did not finish within its cycle budget."""


@dataclasses.dataclass(frozen=True)
class LayerStats:
    """One layer's statistics record (written by the hardware after the layer)."""

    index: int
    counters: dict[str, int]


@dataclasses.dataclass(frozen=True)
class RunReport:
    """The outcome of one run: ``error`` (0 = none), the failing / last ``layer_index``, the run's
    counters (PERF registers) and, for an image run that succeeded, every layer's statistics."""

    error: ErrorCode
    layer_index: int
    counters: dict[str, int]
    layers: tuple[LayerStats, ...] = ()
    image: bool = True          # an image run (False: one record in register mode)

    @property
    def ok(self) -> bool:
        return self.error == ErrorCode.NONE

    def raise_for_error(self) -> "RunReport":
        if not self.ok:
            layer_code = self.error < ErrorCode.BAD_IMAGE
            where = f" at layer {self.layer_index}" if self.image and layer_code else ""
            raise DeviceError(f"run ended with error {self.error.name} ({int(self.error)})"
                              f"{where}")
        return self


class Runtime:
    """Drives one accelerator through ``backend``; ``cfg`` is the configuration it was built
    with (its ``config_id`` is checked by :meth:`open`)."""

    def __init__(self, backend: Backend, cfg: AccelConfig):
        self.backend = backend
        self.cfg = cfg
        # image_addr -> (image bytes, stats_addr of each layer) of the images placed
        self._layers: dict[int, tuple[int, list[int]]] = {}

    async def open(self) -> None:
        """Check the device's CONFIG_ID against ``cfg``."""
        got = await self.backend.read_register(REG["CONFIG_ID"].offset)
        if got != self.cfg.config_id:
            raise DeviceError(f"device CONFIG_ID={got:#010x} but the runtime was opened for "
                              f"config_id={self.cfg.config_id:#010x}")

    # -- memory -----------------------------------------------------------------------------------

    def _check_range(self, addr: int, size: int) -> None:
        if not (isinstance(addr, int) and isinstance(size, int) and 0 <= addr
                and size >= 0 and addr + size <= self.cfg.dram_bytes):
            raise ValueError(f"device range addr={addr!r} size={size!r} must lie in "
                             f"[0, dram_bytes={self.cfg.dram_bytes:#x})")

    async def write(self, addr: int, data: bytes) -> None:
        """Write ``data`` at device address ``addr``."""
        self._check_range(addr, len(data))
        await self.backend.write_memory(addr, bytes(data))

    async def read(self, addr: int, size: int) -> bytes:
        """Read ``size`` bytes at device address ``addr``."""
        self._check_range(addr, size)
        return await self.backend.read_memory(addr, size)

    async def load_image(self, blob: bytes, *, check: bool = True) -> int:
        """Place ``blob`` at the ``base_addr`` its header names and return that address.

        With ``check`` (default) the image is validated first (:func:`firmware.image.validate`)
        and :class:`~firmware.image.ImageError` lists every problem; ``check=False`` places it
        as is (to show what the hardware does with a bad image)."""
        blob = bytes(blob)
        if check:
            problems = validate(blob, self.cfg)
            if problems:
                raise ImageError("image refused:\n  " + "\n  ".join(problems))
        if len(blob) < 4 * (BASE_ADDR_WORD + 1):
            raise ImageError(f"image is {len(blob)} bytes, too short for a header: base_addr "
                             f"needs at least {4 * (BASE_ADDR_WORD + 1)} bytes")
        base = struct.unpack_from("<I", blob, 4 * BASE_ADDR_WORD)[0]
        await self.write(base, blob)
        # an image placed over (part of) another one replaces it
        for addr in [a for a, (size, _) in self._layers.items()
                     if a < base + len(blob) and base < a + size]:
            del self._layers[addr]
        try:
            image = decode(blob)
            self._layers[base] = (len(blob), [layer.stats_addr for layer in image.layers])
        except ImageError:
            pass        # placed unchecked and undecodable: run_image reports no statistics
        return base

    # -- runs -------------------------------------------------------------------------------------

    async def run_image(self, image_addr: int, *, budget_cycles: int) -> RunReport:
        """Run the image at ``image_addr`` (one start, one done) and report, with every layer's
        statistics record when it succeeded."""
        await self.backend.write_register(REG["IMAGE_ADDR"].offset, image_addr)
        await self.backend.write_register(REG["CTRL"].offset, 1 << CTRL_BITS["RUN_IMAGE"])
        report = await self._finish(budget_cycles, image=True)
        if report.ok and image_addr in self._layers:
            layers = []
            for i, addr in enumerate(self._layers[image_addr][1]):
                raw = await self.read(addr, STATS_BYTES)
                words = struct.unpack_from(f"<{STATS_BYTES // 4}I", raw)
                stats = {name: words[STATS_WORDS[name]] for name in COUNTERS}
                if words[STATS_WORDS["layer_index"]] != i:
                    raise DeviceError(f"statistics record at {addr:#x} holds layer_index="
                                      f"{words[STATS_WORDS['layer_index']]}, expected {i}")
                layers.append(LayerStats(index=i, counters=stats))
            report = dataclasses.replace(report, layers=tuple(layers))
        return report

    async def run_layer(self, record: Mapping[str, int], *, budget_cycles: int) -> RunReport:
        """Run one layer record (u32 words by :data:`spec.layouts.LAYER_WORDS` name; see
        :func:`spec.record.layer_record`) in register mode."""
        missing = [name for name in LAYER_WORDS if name not in record]
        if missing:
            raise ValueError(f"record lacks {', '.join(missing)}")
        for name in LAYER_WORDS:
            await self.backend.write_register(REG[record_register(name)].offset,
                                              record[name] & 0xFFFF_FFFF)
        await self.backend.write_register(REG["CTRL"].offset, 1 << CTRL_BITS["START"])
        return await self._finish(budget_cycles, image=False)

    async def _finish(self, budget_cycles: int, *, image: bool) -> RunReport:
        await self.backend.wait_done(budget_cycles)
        status = await self.backend.read_register(REG["STATUS"].offset)
        if status & (1 << STATUS_BITS["BUSY"]) or not status & (1 << STATUS_BITS["DONE"]):
            raise DeviceError(f"STATUS={status:#x} after done: expected done and not busy")
        if bool(status & (1 << STATUS_BITS["IMAGE"])) != image:
            raise DeviceError(f"STATUS={status:#x}: the IMAGE bit does not match the run")
        error = await self.backend.read_register(REG["ERROR"].offset)
        index = await self.backend.read_register(REG["LAYER_INDEX"].offset)
        counters = {name: await self.backend.read_register(REG[f"PERF_{name.upper()}"].offset)
                    for name in COUNTERS}
        try:
            code = ErrorCode(error)
        except ValueError:
            raise DeviceError(f"ERROR register holds {error}, not an ErrorCode (one of "
                              f"{int(min(ErrorCode))}..{int(max(ErrorCode))})") from None
        return RunReport(error=code, layer_index=index, counters=counters, image=image)
