"""The sequencer's walk over a layer's steps: (m, n, k) partitions in loop order."""

from amaranth import *
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from spec.config import AccelConfig
from spec.desc import DIM_BITS

__all__ = ["StepWalker", "step_layout"]


def step_layout(cfg: AccelConfig) -> data.StructLayout:
    """One step's registers. Besides its origin (``m0``, ``n0``, ``k0``) a step carries what is
    left of the matrix from it (``ml = M - m0``, ``gml = ceil(ml / R)`` array-tile groups;
    likewise for n and k), its partition's own extent (``me = min(ml, pm)`` rows and ``gme``
    array-tile rows; likewise ``ne``, ``gne`` and ``ke``), its operand pointers, and whether its
    A block (``m0``, ``k0``) and B block (``n0``, ``k0``) are the previous step's (``a_same``,
    ``b_same``: that load is skipped; 0 for a layer's first step). Every engine
    parameter is then a register (or a register plus a select of two), and the walk's wrap
    tests are compares: no compare or subtract-compare-add chain in front of an engine."""
    ab = cfg.dram_addr_bits
    return data.StructLayout({
        "m0": DIM_BITS, "n0": DIM_BITS, "k0": DIM_BITS,
        "ml": DIM_BITS, "nl": DIM_BITS, "kl": DIM_BITS,      # M - m0, N - n0, K - k0
        "gml": DIM_BITS, "gnl": DIM_BITS,                    # ceil(ml / R), ceil(nl / C)
        "me": DIM_BITS, "ne": DIM_BITS, "ke": DIM_BITS,      # min(ml, pm), min(nl, pn), ...
        "gme": DIM_BITS, "gne": DIM_BITS,                    # ceil(me / R), ceil(ne / C)
        "a_kptr": ab,                                        # a_addr + k0 * a_stride
        "b_kptr": ab,                                        # b_addr + k0 * b_stride
        "c_mptr": ab,                                        # c_addr + m0 * c_stride
        # (the row store, configs with row_store: n0 / pn * c_nstep, the step's offset in a
        # C row: n0 * the element size, or its row of pixels times c_row_pitch)
        **({"c_nptr": ab} if cfg.row_store else {}),
        "a_same": 1, "b_same": 1,                            # A / B block as the step before
    })


class StepWalker(wiring.Component):
    """The step after ``step`` in loop order (``next``), and whether ``step`` is the layer's
    last (``last``). spec.schedule.steps is the same walk in Python.

    Every compare the walk needs (the loops' wrap tests, the partition cuts) and every add of
    an advance (``m0 + pm``, ``ml - pm``, the pointers' steps, ...) is registered from ``step``
    and the sizes, and ``next`` and ``last`` are registers too (only selects between the two),
    so they are valid :attr:`next_latency` clock edges after ``step`` changes (``first``, from
    the sizes only, after :attr:`first_latency`). The sequencer
    changes ``step`` at the end of ``ISSUE`` and reads ``next`` from ``WAIT``'s third cycle on
    (it guards the first two; a phase's engines are busy longer anyway). On the ECP5 the
    compare -> select -> step-register path put 421 of the whole 8x8's endpoints over 10 ns
    (session 11); the adds -> select -> step-register path 213 (session 13); with the adds
    still in the second cycle, Yosys moved the selects (``outer_m``, fan-out 121) in front of
    the subtractors' carry chains: 108 endpoints at up to 11.7 ns (session 19).

    The split-K loop is innermost: k advances by ``pk`` until ``kl <= pk``, then wraps to 0 and
    the inner partition loop (n with ``outer_m``, else m) advances; when that wraps too, the
    outer one does. ``first`` is the layer's first step.

    ``a_same`` / ``b_same`` of ``next`` follow from the wrap tests: k stays only when it wraps
    in a single k partition, m (n) when it does not move or wraps in a single partition.

    A partition's extent after an advance compares the step's remainder with twice the
    partition (``ml - pm < pm`` is ``ml < 2 pm``), beside the subtract rather than after it.

    Parameters
    ----------
    cfg : AccelConfig
        Uses ``dram_addr_bits``.

    Members
    -------
    step : ``In(step_layout(cfg))``; next, first : ``Out(step_layout(cfg))``; last : ``Out(1)``
    m, n, k, pm, pn, pk : ``In(32)``: the matrix and partition sizes (descriptor fields)
    pmg, png : ``In(DIM_BITS)``: ``pm / R``, ``pn / C``; gm_all, gn_all : ``In(DIM_BITS)``:
    the matrix's array-tile rows and columns
    outer_m : ``In(1)``; a_addr, b_addr, c_addr : ``In(32)``
    restart : ``In(1)``: ``next`` takes ``first`` instead (the sequencer's walk before its first
    step)
    a_kstep, b_kstep, c_mstep : ``In(dram_addr_bits)``: pointer steps per partition
    c_nstep : ``In(dram_addr_bits)`` (only with ``row_store``): the step of ``c_nptr`` per n
    partition
    """

    #: Clock edges from a change of ``step`` until its ``next`` and ``last`` are valid (the
    #: compares' register, then ``next``'s); ``first`` follows the sizes after
    #: ``first_latency`` edges (the walker's copies of the sizes, then the compares').
    next_latency = 2
    first_latency = 2

    def __init__(self, cfg: AccelConfig):
        self._cfg = cfg
        layout = step_layout(cfg)
        ab = cfg.dram_addr_bits
        super().__init__({
            "step": In(layout), "next": Out(layout), "first": Out(layout), "last": Out(1),
            **{name: In(32) for name in ("m", "n", "k", "pm", "pn", "pk",
                                         "a_addr", "b_addr", "c_addr")},
            **{name: In(DIM_BITS) for name in ("pmg", "png", "gm_all", "gn_all")},
            "outer_m": In(1), "restart": In(1),
            **{name: In(ab) for name in ("a_kstep", "b_kstep", "c_mstep")},
            **({"c_nstep": In(ab)} if cfg.row_store else {}),
        })

    def elaborate(self, platform):
        m = Module()
        s = self.step

        def registered(name, value, keep=False):
            """``value`` a cycle later: every compare and every add of the walk, off its select
            paths (the walk's second cycle is then selects of registers only). ``keep``: a
            deliberate copy, not merged with an equal register elsewhere."""
            q = Signal(value.shape(), name=name, attrs={"keep": 1} if keep else {})
            m.d.sync += q.eq(value)
            return q

        # The sizes as registers of the walker's own (the sequencer's record latch is placed
        # for its many other readers: a latched partition size into the m/n flags' compares
        # was a 10.7 ns path of the whole 8x8, ad670c5 seed 3, session 24). The sequencer
        # holds the record for the checker's latency before the first step, so `first` a
        # cycle later (first_latency) costs nothing. They are `keep` copies, as are the
        # checker's of the same fields (`rec_*`, equal in every cycle): synthesis merged the
        # two, which put the checker's `rec_partition_n` 8 ns of routing from the walker's
        # flags (10.14 ns, 0c732f5 seed 3, session 25).
        sz = {name: registered(f"{name}_r", getattr(self, name), keep=True)
              for name in ("m", "n", "k", "pm", "pn", "pk")}

        cuts = {
            ("m", True): registered("cut_m0", sz["m"] < sz["pm"]),
            ("m", False): registered("cut_m", s.ml < (sz["pm"] << 1)),
            ("n", True): registered("cut_n0", sz["n"] < sz["pn"]),
            ("n", False): registered("cut_n", s.nl < (sz["pn"] << 1)),
            ("k", True): registered("cut_k0", sz["k"] < sz["pk"]),
            ("k", False): registered("cut_k", s.kl < (sz["pk"] << 1)),
        }

        adds = {
            "m0": registered("adv_m0", s.m0 + sz["pm"]),
            "ml": registered("adv_ml", s.ml - sz["pm"]),
            "gml": registered("adv_gml", s.gml - self.pmg),
            "c_mptr": registered("adv_c_mptr", s.c_mptr + self.c_mstep),
            "n0": registered("adv_n0", s.n0 + sz["pn"]),
            "nl": registered("adv_nl", s.nl - sz["pn"]),
            "gnl": registered("adv_gnl", s.gnl - self.png),
            "k0": registered("adv_k0", s.k0 + sz["pk"]),
            "kl": registered("adv_kl", s.kl - sz["pk"]),
            "a_kptr": registered("adv_a_kptr", s.a_kptr + self.a_kstep),
            "b_kptr": registered("adv_b_kptr", s.b_kptr + self.b_kstep),
        }
        rows = bool(self._cfg.row_store)
        if rows:
            adds["c_nptr"] = registered("adv_c_nptr", s.c_nptr + self.c_nstep)

        def short(dim, fresh):
            """Whether the partition is cut by the matrix's edge: ``whole < part`` at a fresh
            loop, else ``left - part < part`` after the advance, compared as ``left < 2 part``
            beside the subtract rather than after it (both registered)."""
            return cuts[dim, fresh]

        def step_m(t, fresh):
            """Assignments to ``t``: m restarts at 0 (``fresh``) or advances a partition."""
            cut = short("m", fresh)
            if fresh:
                ml, gml, mptr = sz["m"], self.gm_all, self.c_addr
                out = [t.m0.eq(0)]
            else:
                ml, gml, mptr = adds["ml"], adds["gml"], adds["c_mptr"]
                out = [t.m0.eq(adds["m0"])]
            return out + [t.ml.eq(ml), t.gml.eq(gml), t.c_mptr.eq(mptr),
                          t.me.eq(Mux(cut, ml, sz["pm"])), t.gme.eq(Mux(cut, gml, self.pmg))]

        def step_n(t, fresh):
            cut = short("n", fresh)
            if fresh:
                nl, gnl, out = sz["n"], self.gn_all, [t.n0.eq(0)]
                out += [t.c_nptr.eq(0)] if rows else []
            else:
                nl, gnl, out = adds["nl"], adds["gnl"], [t.n0.eq(adds["n0"])]
                out += [t.c_nptr.eq(adds["c_nptr"])] if rows else []
            return out + [t.nl.eq(nl), t.gnl.eq(gnl),
                          t.ne.eq(Mux(cut, nl, sz["pn"])), t.gne.eq(Mux(cut, gnl, self.png))]

        def step_k(t, fresh):
            cut = short("k", fresh)
            if fresh:
                kl, out = sz["k"], [t.k0.eq(0), t.a_kptr.eq(self.a_addr),
                                   t.b_kptr.eq(self.b_addr)]
            else:
                kl, out = adds["kl"], [t.k0.eq(adds["k0"]), t.a_kptr.eq(adds["a_kptr"]),
                                       t.b_kptr.eq(adds["b_kptr"])]
            return out + [t.kl.eq(kl), t.ke.eq(Mux(cut, kl, sz["pk"]))]

        # the walk is computed into `adv` and registered into `next` (and `last`)
        adv = Signal(step_layout(self._cfg), name="adv")

        k_wrap = registered("k_wrap", s.kl <= sz["pk"])
        m_wraps, n_wraps = s.ml <= sz["pm"], s.nl <= sz["pn"]
        m_wrap = registered("m_wrap", m_wraps)
        n_wrap = registered("n_wrap", n_wraps)
        # a loop that restarts at 0 keeps its origin only when it has a single partition
        one_m = registered("one_m", sz["m"] <= sz["pm"])
        one_n = registered("one_n", sz["n"] <= sz["pn"])
        one_k = registered("one_k", sz["k"] <= sz["pk"])
        # What each of m and n does at the advance (stay, advance a partition, restart at 0),
        # registered with the wraps from the loop order: the loop order (`outer_m`) then
        # selects nothing in the second cycle (outer_m -> the m fields' selects was a 10.1 ns
        # path of the whole 8x8 at 41fd93f). With `outer_m` (m outside) n advances until it
        # wraps, then restarts as m advances; without it the roles swap.
        k_wraps = s.kl <= sz["pk"]
        m_adv = registered("m_adv", k_wraps & Mux(self.outer_m, n_wraps, ~m_wraps))
        m_fresh = registered("m_fresh", k_wraps & ~self.outer_m & m_wraps)
        n_adv = registered("n_adv", k_wraps & Mux(self.outer_m, ~n_wraps, m_wraps))
        n_fresh = registered("n_fresh", k_wraps & self.outer_m & n_wraps)
        m.d.comb += adv.eq(s)
        with m.If(~k_wrap):
            m.d.comb += step_k(adv, fresh=False)
        with m.Else():
            m.d.comb += step_k(adv, fresh=True)
        with m.If(m_fresh):
            m.d.comb += step_m(adv, fresh=True)
        with m.Elif(m_adv):
            m.d.comb += step_m(adv, fresh=False)
        with m.If(n_fresh):
            m.d.comb += step_n(adv, fresh=True)
        with m.Elif(n_adv):
            m.d.comb += step_n(adv, fresh=False)
        # a loop keeps its origin when it does not move, or restarts with a single partition
        k_same = k_wrap & one_k
        m_same = ~m_adv & (~m_fresh | one_m)
        n_same = ~n_adv & (~n_fresh | one_n)
        wrapped = k_wrap & m_wrap & n_wrap
        m.d.comb += [adv.a_same.eq(k_same & m_same), adv.b_same.eq(k_same & n_same)]
        m.d.sync += [self.next.eq(Mux(self.restart, self.first, adv)),
                     self.last.eq(wrapped)]

        # the first step: every loop fresh
        f = self.first
        m.d.comb += step_m(f, fresh=True) + step_n(f, fresh=True) + step_k(f, fresh=True)
        m.d.comb += [f.a_same.eq(0), f.b_same.eq(0)]
        return m
