"""The sequencer's performance counters (docs/architecture.md, "Counters")."""

from amaranth import *
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from spec.config import AccelConfig
from spec.regmap import COUNTERS

from .ports import named_members

__all__ = ["PerfCounters", "CATEGORIES"]

#: The counters of the MAC and stall categories a busy cycle can land in, in priority order;
#: a busy cycle in none of them is a control cycle (``stall_ctrl_cycles``).
CATEGORIES: tuple[str, ...] = ("mac_active_cycles", "stall_drain_cycles", "stall_load_a_cycles",
                               "stall_load_b_cycles", "stall_store_cycles")


class PerfCounters(wiring.Component):
    """Counts a layer run's cycles by category and its memory traffic.

    Every ``busy`` cycle lands in exactly one category: the first of :data:`CATEGORIES` whose
    condition ``in_<category>`` holds (``cat_<category>`` says which, for the image runner), or
    ``stall_ctrl_cycles`` when none does. ``rd_a_bytes`` / ``rd_b_bytes`` / ``wr_c_bytes`` add
    one beat per accepted request (``a_fire`` / ``b_fire`` / ``c_fire``) in a busy cycle. A
    ``start`` while not busy clears every counter.

    The inputs are registered before they count (the conditions come from every engine, and
    each counter is a 32-bit add): a cycle is counted, and ``cat_<category>`` names it, one
    cycle later. So the counters are final the cycle after ``busy`` falls, which is the
    earliest a reader (the image runner's statistics, a CSR read) sees them. A ``start`` in
    that cycle clears them, the last cycle's count included.

    Parameters
    ----------
    cfg : AccelConfig
        Uses the three beat sizes.

    Members
    -------
    start, busy : ``In(1)``; in_<category> : ``In(1)`` for every :data:`CATEGORIES` name
    a_fire, b_fire, c_fire : ``In(1)``
    c_<counter> : ``Out(32)`` for every :data:`spec.regmap.COUNTERS` name
    cat_<category> : ``Out(1)``: the previous cycle counted there
    """

    def __init__(self, cfg: AccelConfig):
        self._cfg = cfg
        super().__init__({
            "start": In(1), "busy": In(1), "a_fire": In(1), "b_fire": In(1), "c_fire": In(1),
            **named_members("in_", CATEGORIES, In(1)),
            **named_members("cat_", CATEGORIES, Out(1)),
            **named_members("c_", COUNTERS, Out(32)),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self._cfg
        ctr = {name: getattr(self, f"c_{name}") for name in COUNTERS}

        def late(name, value):
            """``value`` registered: what the counters count a cycle later."""
            q = Signal(name=f"{name}_q")
            m.d.sync += q.eq(value)
            return q

        busy = late("busy", self.busy)
        taken = Const(0)
        for name in CATEGORIES:
            cond = getattr(self, f"in_{name}")
            cat = late(name, self.busy & cond & ~taken)
            m.d.comb += getattr(self, f"cat_{name}").eq(cat)
            taken = taken | cond
        ctrl = late("ctrl", self.busy & ~taken)
        fires = [(late(name, self.busy & fire), name, beat)
                 for fire, name, beat in ((self.a_fire, "rd_a_bytes", cfg.a_beat_bytes),
                                          (self.b_fire, "rd_b_bytes", cfg.b_beat_bytes),
                                          (self.c_fire, "wr_c_bytes", cfg.c_beat_bytes))]
        with m.If(self.start & ~self.busy):
            m.d.sync += [sig.eq(0) for sig in ctr.values()]
        with m.Elif(busy):
            m.d.sync += ctr["total_cycles"].eq(ctr["total_cycles"] + 1)
            for name in CATEGORIES:
                with m.If(getattr(self, f"cat_{name}")):
                    m.d.sync += ctr[name].eq(ctr[name] + 1)
            with m.If(ctrl):
                m.d.sync += ctr["stall_ctrl_cycles"].eq(ctr["stall_ctrl_cycles"] + 1)
            for fire, name, beat in fires:
                with m.If(fire):
                    m.d.sync += ctr[name].eq(ctr[name] + beat)
        return m
