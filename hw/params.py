"""The per-channel post-processing parameter memories (docs/firmware.md, "Post-processing")."""

from amaranth import *
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from spec.config import AccelConfig

from .checker import PARAM_ARRAYS

__all__ = ["ParamMemories"]


class ParamMemories(wiring.Component):
    """One memory per parameter array (:data:`hw.checker.PARAM_ARRAYS`: bias, multiplier,
    shift) of ``quant_entries`` 32-bit words, one B beat (``b_beat_bytes / 4`` words) per row.

    Loading: the B load engine's buffer writes (``w_addr``, ``w_data``, ``w_en``) go to the
    array ``sel`` while ``load`` is high. Reading: ``ch`` with ``ren`` reads channel ``ch`` of
    every array; its words are on ``bias``, ``mult`` and ``shift`` in the next cycle (and held
    until the next read).

    Parameters
    ----------
    cfg : AccelConfig
        Uses ``b_beat_bytes``, ``quant_entries``.

    Members
    -------
    load : ``In(1)``; sel : ``In(range(3))``; w_addr : ``In(range(quant_entries // words))``
    w_data : ``In(8 * b_beat_bytes)``; w_en : ``In(1)``
    ch : ``In(range(quant_entries))``; ren : ``In(1)``; bias, mult, shift : ``Out(32)``
    """

    def __init__(self, cfg: AccelConfig):
        self._cfg = cfg
        words = cfg.b_beat_bytes // 4
        super().__init__({
            "load": In(1), "sel": In(range(len(PARAM_ARRAYS))),
            "w_addr": In(range(cfg.quant_entries // words)), "w_data": In(8 * cfg.b_beat_bytes),
            "w_en": In(1),
            "ch": In(range(cfg.quant_entries)), "ren": In(1),
            **{name: Out(32) for name in PARAM_ARRAYS},
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self._cfg
        words = cfg.b_beat_bytes // 4
        lw = words.bit_length() - 1
        lane = Signal(max(lw, 1))
        with m.If(self.ren):
            m.d.sync += lane.eq(self.ch[:lw] if lw else 0)
        for i, name in enumerate(PARAM_ARRAYS):
            mem = Memory(shape=8 * cfg.b_beat_bytes, depth=cfg.quant_entries // words, init=[])
            # submodule names as before the split (q_bias, ...): bench.fpga's breakdown keys
            m.submodules[f"q_{name}"] = mem
            w, r = mem.write_port(), mem.read_port(transparent_for=())
            m.d.comb += [w.addr.eq(self.w_addr), w.data.eq(self.w_data),
                         w.en.eq(self.w_en & self.load & (self.sel == i)),
                         r.addr.eq(self.ch >> lw), r.en.eq(self.ren),
                         getattr(self, name).eq(r.data.word_select(lane, 32) if lw else r.data)]
        return m
