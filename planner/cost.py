"""Cycle model of the accelerator as built: :func:`predict` a :class:`CycleBreakdown` for a plan.

The field names of :class:`CycleBreakdown` are the RTL performance-counter names (and the bench
JSON keys). Every small overhead constant of the model lives in :class:`ModelConstants`
(:data:`DEFAULT_CONSTANTS`), the one place to calibrate against the RTL counters; every hardware
number comes from :class:`spec.config.AccelConfig`.

Model (one *step* = one ``(mi, ni, ki)`` partition triple; outer partition loop, inner partition
loop, then ``ki`` innermost; ``outer_m`` = 1 puts ``mi`` outside):

* ``gm = ceil(pm_eff / R)``, ``gn = ceil(pn_eff / C)``, ``pk_eff = min(pk, k - k0)``.
* Compute: ``gm * gn`` array tiles of ``L = max(pk_eff, R)`` beats, back to back, then one pipeline
  drain of ``drain_rows_factor * R + drain_cols_factor * C + drain_extra_cycles``.
* LoadA: only when the A block ``(mi, ki)`` differs from the previous step's: ``pk_eff * gm`` beats
  of ``a_beat_bytes``; LoadB likewise for ``(ki, ni)``: ``pk_eff * gn`` beats of ``b_beat_bytes``.
* Store: after the last ``ki`` of a partition, during the next step: ``pm_eff * gn`` beats of
  ``c_beat_bytes``.
* Port time for ``b`` beats: credit-limited issue ``ceil((b - 1) * beat / bw) + 1`` cycles, plus the
  port latency (reads; for stores when ``store_waits_latency``), plus an extra constant.
* Lock step: prologue = loads of step 0; step ``t`` = ``max(compute(t), loads(t+1),
  store(t-1's partition)) + step_ctrl_cycles``; epilogue = the last store; plus start and finish
  control cycles.

Counter attribution within a step: compute busy -> ``mac_active_cycles`` (real beats) and
``stall_drain_cycles`` (padding beats + drain); then waiting on A, then on B, then on the store;
control cycles -> ``stall_ctrl_cycles``. The six cycle counters sum to ``total_cycles``.

:func:`predict` groups identical steps (per loop dimension only indices ``0``, ``1..n-3``,
``n-2``, ``n-1`` can differ in cost) and equals :func:`predict_reference`, a plain step walk.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from spec.config import AccelConfig, require_config
from spec.desc import B_MODE_DEPTHWISE, DEPTHWISE_KERNELS, depthwise_arrays
from spec.layouts import STATS_BYTES
from spec.record import HEADER_BYTES, record_fetch_beats

if TYPE_CHECKING:  # pragma: no cover
    from .tiling import TilingPlan

__all__ = ["CycleBreakdown", "ModelConstants", "DEFAULT_CONSTANTS", "COUNTER_FIELDS", "predict",
           "on_chip", "off_chip_bytes",
           "predict_reference", "predict_tiling", "lower_bound_cycles", "utilisation"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class ModelConstants:
    """The model's small overhead constants (cycles), calibrated against the RTL counters.

    These are properties of the RTL implementation (pipeline depths, FSM states), not hardware
    parameters of a configuration, so they are not in :class:`AccelConfig`. With these values
    the model reproduces every RTL counter exactly on the random regression
    (``tests/sim/test_rtl.py``); ``tests/hw/test_model_constants.py`` ties the drain to
    :attr:`hw.compute.ComputeEngine.drain_cycles`.
    """

    #: Pipeline drain after a step's last beat: ``rows * R + cols * C + extra`` cycles
    #: (buffer read 1 + operand register 1 + array latency R + C + R result rows;
    #: ComputeEngine.drain_cycles).
    drain_rows_factor: int = 2
    drain_cols_factor: int = 1
    drain_extra_cycles: int = 2
    #: Control cycles at the end of every step (handshake of the three engines).
    step_ctrl_cycles: int = 2
    #: Descriptor validation / start-up cycles before the prologue loads: 4 control cycles
    #: plus the record checker's pipeline (hw.checker.RecordChecker.latency, 16).
    start_cycles: int = 20
    #: Cycles after the last store before ``done``.
    finish_cycles: int = 2
    #: Extra cycles per load / store burst on top of issue time and latency.
    load_extra_cycles: int = 0
    #: The store reads the accumulator two cycles before its first beat reaches the port (the
    #: read, then the word's register: hw.dma.StoreEngine).
    store_extra_cycles: int = 2
    #: 1 if a store burst completes only after the write latency of its last beat.
    store_waits_latency: int = 1
    #: Extra store latency of a post-processed layer (bias / int8 output): the requantiser's
    #: pipeline depth (hw.postproc.PostProc.latency).
    post_store_extra_cycles: int = 10
    #: Cycles between store beats when nothing else limits them: 1, or on a post-processed
    #: layer with shared requantiser lanes ``AccelConfig.post_row_cycles`` (:func:`post_consts`
    #: sets it; not an RTL constant but the config's, carried here with the store's other terms).
    store_beat_cycles: int = 1
    #: Control cycles per parameter array slot (issue + hand-over; one for a skipped array) and
    #: for leaving the parameter load, before the layer starts.
    param_ctrl_cycles: int = 2
    param_skip_cycles: int = 1
    param_end_cycles: int = 1
    #: Cycles from a local-buffer read request to its data (hw.sequencer.LOCAL_READ_LATENCY:
    #: the block RAM's read, then two registers); local writes are acknowledged in 1.
    local_read_latency_cycles: int = 3
    #: Image runs (hw.runner): the sequencer's dry run of a record without parameters
    #: (CHECK_START, the checker's pipeline, CHECK, FINISH), the runner's control cycles per
    #: record (state hand-overs of both passes), and per image (start, the header check's three
    #: states, the CRC compare, finish).
    dry_run_cycles: int = 18
    record_ctrl_cycles: int = 7
    image_ctrl_cycles: int = 6
    #: Image runs: the register every read response of the runner passes (header, CRC pass,
    #: record fetches; hw.top.RUNNER_READ_LATENCY).
    runner_read_extra_cycles: int = 1
    #: Depthwise layers on the mesh (planner.dwcost): cycles a strip's compute runs before its
    #: first beat (``hw.compute.MESH_START_CYCLES - 1``: the first beat comes MESH_START_CYCLES
    #: after ``m_start``, in ``ISSUE``, and the compute runs from the cycle after), the
    #: mesh's drain after a strip's last beat beyond ``R`` rows (hw.compute.mesh_drain_cycles:
    #: ``R + 5``), and the walk's start (hw.dwwalk.DwWalker: two serial products of DIM_BITS
    #: cycles, then its first strip).
    mesh_start_cycles: int = 2
    #: ... and the further start of a strip whose tiles take two channels each (maps of up to
    #: ``R/2 - 1`` rows; ``hw.compute.MESH_HALVES_START_CYCLES``).
    mesh_halves_start_cycles: int = 2
    #: ... or, in the quadrant mode (maps of ``R/2 - 1`` rows and columns), of
    #: a strip whose first tile takes four channels (one less for each channel fewer;
    #: ``hw.compute.MESH_QUAD_START_CYCLES``).
    mesh_quad_start_cycles: int = 3
    mesh_drain_extra_cycles: int = 5
    dw_walk_cycles: int = 51


DEFAULT_CONSTANTS = ModelConstants()


@dataclasses.dataclass(frozen=True, kw_only=True)
class CycleBreakdown:
    """Predicted performance counters; names are identical to the RTL counter registers."""

    total_cycles: int
    mac_active_cycles: int
    stall_drain_cycles: int
    stall_load_a_cycles: int
    stall_load_b_cycles: int
    stall_store_cycles: int
    stall_ctrl_cycles: int
    rd_a_bytes: int
    rd_b_bytes: int
    wr_c_bytes: int

    def as_dict(self) -> dict[str, int]:
        return dataclasses.asdict(self)


#: Counter names in register order.
COUNTER_FIELDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(CycleBreakdown))


def utilisation(m: int, k: int, n: int, cfg: AccelConfig, total_cycles: int) -> float:
    """``m*k*n / (R*C*total_cycles)``: useful MACs over peak MACs."""
    return m * k * n / (cfg.macs_per_cycle * total_cycles)


def _port_cycles(beats: int, beat_bytes: int, bytes_per_cycle: int, latency: int,
                 extra: int, spacing: int = 1) -> int:
    if beats == 0:
        return 0
    return (max(-(-(beats - 1) * beat_bytes // bytes_per_cycle), (beats - 1) * spacing)
            + 1 + latency + extra)


class _Timing:
    """Per-config port and compute timings (pure helpers shared by both walks)."""

    __slots__ = ("R", "C", "drain", "ctrl", "wait", "ab", "bb", "cb", "a", "b", "c")

    def __init__(self, cfg: AccelConfig, k: ModelConstants):
        self.R, self.C = cfg.array_rows, cfg.array_cols
        self.drain = (k.drain_rows_factor * self.R + k.drain_cols_factor * self.C
                      + k.drain_extra_cycles)
        self.ctrl = k.step_ctrl_cycles
        # the store's wait for the array's last results (hw.sequencer.store_wait_cycles)
        self.wait = self.drain - k.step_ctrl_cycles
        self.ab, self.bb, self.cb = cfg.a_beat_bytes, cfg.b_beat_bytes, cfg.c_beat_bytes
        self.a = (cfg.a_beat_bytes, cfg.a_port_bytes_per_cycle,
                  cfg.a_port_latency_cycles, k.load_extra_cycles)
        self.b = (cfg.b_beat_bytes, cfg.b_port_bytes_per_cycle,
                  cfg.b_port_latency_cycles, k.load_extra_cycles)
        self.c = (cfg.c_beat_bytes, cfg.c_port_bytes_per_cycle,
                  cfg.c_port_latency_cycles * k.store_waits_latency, k.store_extra_cycles,
                  k.store_beat_cycles)

    def load_a(self, beats: int) -> int:
        return _port_cycles(beats, *self.a)

    def load_b(self, beats: int) -> int:
        return _port_cycles(beats, *self.b)

    def store(self, beats: int) -> int:
        return _port_cycles(beats, *self.c)

    def phase(self, beats: int, real: int, ca: int, cb: int,
              store_beats: int) -> tuple[int, int, int, int, int]:
        """``(mac, drain, load_a, load_b, store)`` cycles of one phase (control cycles apart):
        ``beats`` issued by the compute engine (``real`` of them not padding), loads of ``ca``
        and ``cb`` cycles, and a store of ``store_beats`` that starts :attr:`wait` cycles in
        (the previous step's drain, which the compute overlaps). Waiting for the drain with
        nothing to compute counts as drain; then, in priority order, A, B, store."""
        wait = self.wait if store_beats else 0
        cs = wait + self.store(store_beats) if store_beats else 0
        e = max(beats, wait)
        return (real, beats - real + e - beats, max(0, ca - e), max(0, cb - max(e, ca)),
                max(0, cs - max(e, ca, cb)))


def _check_tiling(m, k, n, pm, pn, pk, cfg):
    if pm < 1 or pn < 1 or pk < 1 or pm % cfg.array_rows or pn % cfg.array_cols:
        raise ValueError(f"partitions (partition_m={pm}, partition_n={pn}, partition_k={pk}) must "
                         f"be positive, partition_m a multiple of array_rows={cfg.array_rows}, "
                         f"partition_n a multiple of array_cols={cfg.array_cols}")


def predict_reference(plan: "TilingPlan", cfg: AccelConfig,
                      consts: ModelConstants = DEFAULT_CONSTANTS) -> CycleBreakdown:
    """Step-by-step walk of the sequencer (the specification :func:`predict` is tested against)."""
    m, k, n = plan.m, plan.k, plan.n
    pm, pn, pk = plan.partition_m, plan.partition_n, plan.partition_k
    _check_tiling(m, k, n, pm, pn, pk, cfg)
    t = _Timing(cfg, consts)
    steps = []
    nm, nn, nk = -(-m // pm), -(-n // pn), -(-k // pk)
    outer = [(mi, ni) for mi in range(nm) for ni in range(nn)] if plan.outer_m else \
        [(mi, ni) for ni in range(nn) for mi in range(nm)]
    for mi, ni in outer:
        for ki in range(nk):
            steps.append((mi, ni, ki))
    dims = []
    for mi, ni, ki in steps:
        pm_eff, pn_eff, pk_eff = min(pm, m - mi * pm), min(pn, n - ni * pn), min(pk, k - ki * pk)
        dims.append((-(-pm_eff // t.R), -(-pn_eff // t.C), pk_eff, pm_eff))
    # Which loads each step needs (compared with the previous step's resident blocks).
    loads = []
    prev_a = prev_b = None
    for (mi, ni, ki), (gm, gn, pk_eff, _) in zip(steps, dims):
        la = pk_eff * gm if (mi, ki) != prev_a else 0
        lb = pk_eff * gn if (ki, ni) != prev_b else 0
        prev_a, prev_b = (mi, ki), (ki, ni)
        loads.append((la, lb))
    total = mac = drain = sa = sb = ss = ctrl = 0
    rd_a = rd_b = wr_c = 0
    # Start-up and prologue: compute idle waiting for step 0's operands.
    ctrl += consts.start_cycles
    ca, cb = t.load_a(loads[0][0]), t.load_b(loads[0][1])
    sa += ca
    sb += max(0, cb - ca)
    pending_store = 0
    for idx, (gm, gn, pk_eff, pm_eff) in enumerate(dims):
        if idx + 1 < len(dims):
            ca, cb = t.load_a(loads[idx + 1][0]), t.load_b(loads[idx + 1][1])
        else:
            ca = cb = 0
        ph = t.phase(gm * gn * max(pk_eff, t.R), gm * gn * pk_eff, ca, cb, pending_store)
        mac, drain, sa, sb, ss = (x + y for x, y in zip((mac, drain, sa, sb, ss), ph))
        ctrl += t.ctrl
        rd_a += loads[idx][0] * t.ab
        rd_b += loads[idx][1] * t.bb
        wr_c += pending_store * t.cb
        pending_store = pm_eff * gn if steps[idx][2] == nk - 1 else 0
    _, dr, _, _, st = t.phase(0, 0, 0, 0, pending_store)      # the epilogue: the last store
    drain += dr
    ss += st
    wr_c += pending_store * t.cb
    ctrl += consts.finish_cycles
    total = mac + drain + sa + sb + ss + ctrl
    return CycleBreakdown(total_cycles=total, mac_active_cycles=mac, stall_drain_cycles=drain,
                          stall_load_a_cycles=sa, stall_load_b_cycles=sb,
                          stall_store_cycles=ss, stall_ctrl_cycles=ctrl, rd_a_bytes=rd_a,
                          rd_b_bytes=rd_b, wr_c_bytes=wr_c)


def _reps(count: int) -> list[tuple[int, int]]:
    """Representative indices of a loop of ``count`` iterations with their multiplicities."""
    if count <= 4:
        return [(i, 1) for i in range(count)]
    return [(0, 1), (1, count - 3), (count - 2, 1), (count - 1, 1)]


_CACHE: dict = {}


def predict_tiling(m: int, k: int, n: int, pm: int, pn: int, pk: int, outer_m: int,
                   cfg: AccelConfig, consts: ModelConstants = DEFAULT_CONSTANTS
                   ) -> CycleBreakdown:
    """:func:`predict` on bare tiling numbers (memoised; the search calls it many times)."""
    key = (m, k, n, pm, pn, pk, outer_m, cfg, consts)
    hit = _CACHE.get(key)
    if hit is not None:
        return hit
    _check_tiling(m, k, n, pm, pn, pk, cfg)
    t = _Timing(cfg, consts)
    R, C = t.R, t.C
    nm, nn, nk = -(-m // pm), -(-n // pn), -(-k // pk)
    if not outer_m and (nm == 1 or nn == 1):
        outer_m = 1  # same step sequence either way
    n_out, n_in = (nm, nn) if outer_m else (nn, nm)

    def geo(o, i, q):
        mi, ni = (o, i) if outer_m else (i, o)
        pm_eff, pn_eff, pk_eff = min(pm, m - mi * pm), min(pn, n - ni * pn), min(pk, k - q * pk)
        return mi, ni, q, -(-pm_eff // R), -(-pn_eff // C), pk_eff, pm_eff

    def prev_of(o, i, q):
        if q:
            return o, i, q - 1
        if i:
            return o, i - 1, nk - 1
        if o:
            return o - 1, n_in - 1, nk - 1
        return None

    def next_of(o, i, q):
        if q + 1 < nk:
            return o, i, q + 1
        if i + 1 < n_in:
            return o, i + 1, 0
        if o + 1 < n_out:
            return o + 1, 0, 0
        return None

    mac = drain = sa = sb = ss = ctrl = rd_a = rd_b = wr_c = 0
    last_store = 0
    ro, ri, rq = _reps(n_out), _reps(n_in), _reps(nk)
    for o, wo in ro:
        for i, wi in ri:
            for q, wq in rq:
                w = wo * wi * wq
                mi, ni, _, gm, gn, pk_eff, pm_eff = geo(o, i, q)
                p = prev_of(o, i, q)
                x = next_of(o, i, q)
                beats = gm * gn * max(pk_eff, R)
                real = gm * gn * pk_eff
                # Loads of this step (for byte counts) and of the next (for timing).
                if p is None:
                    la, lb = pk_eff * gm, pk_eff * gn
                    ca0, cb0 = t.load_a(la), t.load_b(lb)
                    sa += ca0
                    sb += max(0, cb0 - ca0)
                    store_prev = 0
                else:
                    pmi, pni, pq, pgm, pgn, _, ppm_eff = geo(*p)
                    la = pk_eff * gm if (pmi, pq) != (mi, q) else 0
                    lb = pk_eff * gn if (pq, pni) != (q, ni) else 0
                    store_prev = ppm_eff * pgn if pq == nk - 1 else 0
                if x is None:
                    ca = cb = 0
                    last_store = pm_eff * gn
                else:
                    xmi, xni, xq, xgm, xgn, xpk, _ = geo(*x)
                    ca = t.load_a(xpk * xgm) if (xmi, xq) != (mi, q) else 0
                    cb = t.load_b(xpk * xgn) if (xq, xni) != (q, ni) else 0
                p_mac, p_drain, p_sa, p_sb, p_ss = t.phase(beats, real, ca, cb, store_prev)
                mac += w * p_mac
                drain += w * p_drain
                sa += w * p_sa
                sb += w * p_sb
                ss += w * p_ss
                rd_a += w * la * t.ab
                rd_b += w * lb * t.bb
                wr_c += w * store_prev * t.cb
    steps = nm * nn * nk
    ctrl = consts.start_cycles + steps * t.ctrl + consts.finish_cycles
    _, dr, _, _, st = t.phase(0, 0, 0, 0, last_store)         # the epilogue: the last store
    drain += dr
    ss += st
    wr_c += last_store * t.cb
    total = mac + drain + sa + sb + ss + ctrl
    out = CycleBreakdown(total_cycles=total, mac_active_cycles=mac, stall_drain_cycles=drain,
                         stall_load_a_cycles=sa, stall_load_b_cycles=sb, stall_store_cycles=ss,
                         stall_ctrl_cycles=ctrl, rd_a_bytes=rd_a, rd_b_bytes=rd_b,
                         wr_c_bytes=wr_c)
    if len(_CACHE) > 200_000:
        _CACHE.clear()
    _CACHE[key] = out
    return out


def predict(plan: "TilingPlan", cfg: AccelConfig,
            consts: ModelConstants = DEFAULT_CONSTANTS, *,
            post: "PostLoad | None" = None, b_local: bool = False,
            c_local: bool = False) -> CycleBreakdown:
    """Predicted RTL counters for ``plan`` on ``cfg`` (grouped steps; equals the step walk).
    ``post`` describes a post-processed layer (bias and/or int8 output): its parameter loads
    and the requantiser's latency on every store (:func:`with_post`). ``b_local`` /
    ``c_local``: the layer's B / C lies in the on-chip local buffer (:func:`on_chip`)."""
    require_config(cfg)
    port_cfg = on_chip(cfg, b_local=b_local, c_local=c_local)
    if post is None or not post.active:
        # no bias and int32 out: the store bypasses the requantiser (as predict_conv)
        return off_chip_bytes(predict_tiling(plan.m, plan.k, plan.n, plan.partition_m,
                                             plan.partition_n, plan.partition_k, plan.outer_m,
                                             port_cfg, consts), b_local=b_local, c_local=c_local)
    body = predict_tiling(plan.m, plan.k, plan.n, plan.partition_m, plan.partition_n,
                          plan.partition_k, plan.outer_m, port_cfg, post_consts(consts, cfg))
    body = off_chip_bytes(body, b_local=b_local, c_local=c_local)
    return with_post(body, plan.m, post, cfg, consts)


def on_chip(cfg: AccelConfig, *, b_local: bool = False, c_local: bool = False) -> AccelConfig:
    """``cfg`` as the cycle model sees a layer whose B and/or C lies in the local buffer: the
    sequencer serves that operand from the local buffer, which takes one beat per cycle,
    answers a read :attr:`ModelConstants.local_read_latency_cycles` after its request and
    acknowledges a write one cycle after it (hw/sequencer.py), so the port is modelled with the
    beat as its bandwidth and those latencies. Parameter arrays still come from memory through
    the ports (use the real ``cfg`` for them)."""
    changes = {}
    if b_local:
        changes.update(b_port_bytes_per_cycle=cfg.b_beat_bytes,
                       b_port_latency_cycles=DEFAULT_CONSTANTS.local_read_latency_cycles)
    if c_local:
        changes.update(c_port_bytes_per_cycle=cfg.c_beat_bytes, c_port_latency_cycles=1)
    return dataclasses.replace(cfg, **changes) if changes else cfg


def off_chip_bytes(body: CycleBreakdown, *, b_local: bool = False,
                   c_local: bool = False) -> CycleBreakdown:
    """``body`` with the byte counters of on-chip operands zeroed: the RTL's ``rd_b_bytes`` /
    ``wr_c_bytes`` count memory-port beats only, and a local operand crosses no port."""
    if not (b_local or c_local):
        return body
    out = body.as_dict()
    if b_local:
        out["rd_b_bytes"] = 0
    if c_local:
        out["wr_c_bytes"] = 0
    return CycleBreakdown(**out)


@dataclasses.dataclass(frozen=True)
class PostLoad:
    """Which per-channel parameter arrays a post-processed layer loads before it runs."""

    bias: bool
    requant: bool       # int8 output: multipliers and shifts

    @property
    def arrays(self) -> tuple[bool, bool, bool]:
        """Loaded or not, in the hardware's load order: bias, multiplier, shift."""
        return (self.bias, self.requant, self.requant)

    @property
    def active(self) -> bool:
        return self.bias or self.requant


def post_consts(consts: ModelConstants, cfg: AccelConfig) -> ModelConstants:
    """``consts`` with the requantiser on every store: its latency (one cycle more per further
    lane group of a row, ``post_row_cycles - 1``) and its row rate (``store_beat_cycles``)."""
    rows = cfg.post_row_cycles
    return dataclasses.replace(consts, store_extra_cycles=consts.store_extra_cycles
                               + consts.post_store_extra_cycles + rows - 1,
                               store_beat_cycles=rows)


#: The weight-array counts of the depthwise ``b_mode`` values (3x3: 3, 5x5: 7, 7x7: 13).
_WEIGHT_ARRAYS = frozenset(depthwise_arrays(b) for b in DEPTHWISE_KERNELS)


@dataclasses.dataclass(frozen=True)
class ParamLoadCycles:
    """Cycles and bytes of a layer's parameter loads (:func:`param_load_cycles`), as the
    counters see them: ``load_a`` / ``load_b`` cycles with the A / B load engine busy (A first,
    as :data:`hw.counters.CATEGORIES` orders them), ``ctrl`` the rest, ``read_a`` / ``read_b``
    bytes read at each port."""

    load_a: int
    load_b: int
    ctrl: int
    read_a: int
    read_b: int

    @property
    def total(self) -> int:
        return self.load_a + self.load_b + self.ctrl


def param_load_cycles(m: int, post: PostLoad, cfg: AccelConfig,
                      consts: ModelConstants = DEFAULT_CONSTANTS, *,
                      weight_arrays: int = 0) -> ParamLoadCycles:
    """The parameter loads (:class:`hw.params.ParamLoader`): each loaded array is one burst of
    ``4*m`` bytes in whole beats, one after another through the B port; on a config with
    ``dw_mesh`` a depthwise layer's ``weight_arrays`` weight arrays
    (:func:`spec.desc.depthwise_arrays` of its ``b_mode``: 3 for 3x3, 7 for 5x5, 13 for 7x7) go through
    the A port at the same time, one after another, and the loads end when both ports' are
    done (the A chain ends after a layer's last weight array); any other record's A chain is
    a 3x3 layer's three slots, skipped (:class:`hw.params.ParamLoader` walks at least three).
    Each port's chain: a
    loaded array is ``param_ctrl_cycles`` cycles (its state, then the cycle its engine's busy is
    seen low) around its load, the engine busy from the cycle after the state; a skipped one
    ``param_skip_cycles``; then ``param_end_cycles``."""
    if weight_arrays and (not cfg.dw_mesh or weight_arrays not in _WEIGHT_ARRAYS):
        raise ValueError(f"param_load_cycles: weight_arrays={weight_arrays!r} must be 0, or one "
                         f"of {sorted(_WEIGHT_ARRAYS)} (a depthwise layer's) on a config with "
                         f"dw_mesh=1 (this one has dw_mesh={cfg.dw_mesh})")
    t = _Timing(cfg, consts)
    slots_a = () if not cfg.dw_mesh else (True,) * weight_arrays if weight_arrays else \
        (False,) * depthwise_arrays(B_MODE_DEPTHWISE)
    beats_a, beats_b = -(-4 * m // cfg.a_beat_bytes), -(-4 * m // cfg.b_beat_bytes)
    load_a, load_b, ctrl = param_load_timeline(slots_a, post.arrays, t.load_a(beats_a),
                                               t.load_b(beats_b), consts)
    return ParamLoadCycles(load_a, load_b, ctrl, sum(slots_a) * beats_a * cfg.a_beat_bytes,
                           sum(post.arrays) * beats_b * cfg.b_beat_bytes)


def param_load_timeline(slots_a, slots_b, busy_a: int, busy_b: int,
                        consts: ModelConstants = DEFAULT_CONSTANTS) -> tuple[int, int, int]:
    """``(load_a, load_b, ctrl)`` cycles of two chains of parameter arrays run side by side
    from the same cycle (:func:`param_load_cycles`): ``slots_a`` / ``slots_b`` say which
    arrays of each chain load, each load keeping its engine busy ``busy_a`` / ``busy_b``
    cycles."""
    def chain(slots, cycles):
        cycle, busy = 0, []
        for loaded in slots:
            if loaded:
                busy.append((cycle + 1, cycle + 1 + cycles))    # from the cycle after its state
                cycle += cycles + consts.param_ctrl_cycles
            else:
                cycle += consts.param_skip_cycles
        return cycle, busy

    len_a, on_a = chain(slots_a, busy_a)
    len_b, on_b = chain(slots_b, busy_b)
    total = max(len_a, len_b) + consts.param_end_cycles
    load_a = sum(hi - lo for lo, hi in on_a)
    both = sum(max(0, min(hi, hb) - max(lo, lb)) for lo, hi in on_a for lb, hb in on_b)
    load_b = sum(hi - lo for lo, hi in on_b) - both
    return load_a, load_b, total - load_a - load_b


def with_post(body: CycleBreakdown, m: int, post: "PostLoad | None", cfg: AccelConfig,
              consts: ModelConstants = DEFAULT_CONSTANTS) -> CycleBreakdown:
    """``body`` (predicted with :func:`post_consts`) plus the parameter loads of ``post``."""
    if post is None or not post.active:
        return body
    p = param_load_cycles(m, post, cfg, consts)
    out = body.as_dict()
    out["stall_load_b_cycles"] += p.load_b
    out["stall_ctrl_cycles"] += p.ctrl
    out["rd_b_bytes"] += p.read_b
    out["total_cycles"] += p.total
    return CycleBreakdown(**out)


def lower_bound_cycles(m: int, k: int, n: int, pm: int, pn: int, pk: int, cfg: AccelConfig,
                       consts: ModelConstants = DEFAULT_CONSTANTS) -> int:
    """A cheap lower bound of ``predict_tiling(...).total_cycles`` for any loop order.

    Every step lasts at least its compute plus control, so the sum of compute, control, the
    prologue's smallest possible wait and the last store bounds the total from below.
    """
    R, C = cfg.array_rows, cfg.array_cols
    nm, nn, nk = -(-m // pm), -(-n // pn), -(-k // pk)
    gm_sum, gn_sum = -(-m // R), -(-n // C)  # pm, pn are multiples of R, C: tiles add up
    pk_last = k - (nk - 1) * pk
    beats = (nk - 1) * max(pk, R) + max(pk_last, R)
    steps = nm * nn * nk
    compute = gm_sum * gn_sum * beats + steps * consts.step_ctrl_cycles
    t = _Timing(cfg, consts)
    gm0, gn0 = -(-min(pm, m) // R), -(-min(pn, n) // C)
    pro = max(t.load_a(min(pk, k) * gm0), t.load_b(min(pk, k) * gn0))
    pm_last, pn_last = m - (nm - 1) * pm, n - (nn - 1) * pn
    epi = t.wait + t.store(min(pm_last, pm) * -(-min(pn_last, pn) // C))
    return consts.start_cycles + pro + compute + epi + consts.finish_cycles


def image_overhead_cycles(crc_bytes: int, records: "list[tuple]", cfg: AccelConfig,
                          consts: ModelConstants = DEFAULT_CONSTANTS) -> int:
    """Cycles an image run spends outside its layers (all ``stall_ctrl_cycles``): the header
    fetch, the CRC read of ``crc_bytes`` (the image up to its weights section: the weights are
    checked as the layers load them, at no cost), and per record ``(m, post)`` (or ``(m, post,
    weight_arrays)``, a depthwise record's, :func:`spec.desc.depthwise_arrays` of its
    ``b_mode``: the check pass loads none of them) two record fetches, the check-pass dry run
    (with the multiplier and shift arrays of an int8 layer, the arrays with rules; since
    session 42 not its bias or weight arrays) and the statistics write.
    The image's total is this plus the layers' own counters (docs/firmware.md)."""
    b = (cfg.b_beat_bytes, cfg.b_port_bytes_per_cycle, cfg.b_port_latency_cycles,
         consts.runner_read_extra_cycles)
    c = (cfg.c_beat_bytes, cfg.c_port_bytes_per_cycle, cfg.c_port_latency_cycles, 0)
    total = (_port_cycles(HEADER_BYTES // cfg.b_beat_bytes, *b)
             + _port_cycles(crc_bytes // cfg.b_beat_bytes, *b) + consts.image_ctrl_cycles)
    fetch = _port_cycles(record_fetch_beats(cfg), *b)
    stats = _port_cycles(-(-STATS_BYTES // cfg.c_beat_bytes), *c)
    for m, post, *_ in records:
        dry = consts.dry_run_cycles
        if post is not None and post.requant:
            dry += param_load_cycles(m, PostLoad(bias=False, requant=True), cfg, consts).total
        total += 2 * fetch + dry + stats + consts.record_ctrl_cycles
    return total
