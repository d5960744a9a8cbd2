"""The sequencer schedule: step order, split-K, block reuse, ragged edges, traffic counters."""

import dataclasses
from collections import Counter

import pytest
from hypothesis import given, settings, strategies as st

from spec.config import PRESETS
from spec.desc import GemmDescriptor, check
from spec.schedule import Step, steps, traffic

CFG = PRESETS["tiny"]   # 4x4 array: a_beat 4 bytes, b_beat 4 bytes, c_beat 16 bytes


def desc(m, k, n, pm, pn, pk, outer_m=1, cfg=CFG, legal=True):
    d = GemmDescriptor(
        m=m, k=k, n=n, partition_m=pm, partition_n=pn, partition_k=pk,
        tile_m=cfg.array_rows, tile_n=cfg.array_cols, outer_m=outer_m,
        need_splitk=int(pk < k), acc_buffer_needed=pm * pn * 4,
        a_addr=0, a_stride=pm * ((m + pm - 1) // pm), b_addr=0x10000, b_stride=max(n, 8) + 8,
        c_addr=0x80000, c_stride=4 * n)
    if legal:
        assert check(d, cfg) == []
    return d


def order(d):
    return [(s.m0, s.n0, s.k0) for s in steps(d, CFG)]


def flags(d, name):
    return [getattr(s, name) for s in steps(d, CFG)]


# -- order ---------------------------------------------------------------------------------------

def test_schedule_outer_m_puts_n_partitions_inside():
    d = desc(8, 8, 8, 4, 4, 8, outer_m=1)
    assert order(d) == [(0, 0, 0), (0, 4, 0), (4, 0, 0), (4, 4, 0)]


def test_schedule_outer_n_puts_m_partitions_inside():
    d = desc(8, 8, 8, 4, 4, 8, outer_m=0)
    assert order(d) == [(0, 0, 0), (4, 0, 0), (0, 4, 0), (4, 4, 0)]


def test_schedule_outer_m_agrees_with_rtl_bit0():
    try:
        d = desc(8, 8, 8, 4, 4, 8, outer_m=2, legal=False)
    except ValueError:
        return                  # flags outside {0, 1} refused: also consistent with the RTL
    if check(d, CFG):
        return                  # refused by check(): the RTL never runs it
    assert order(d) == order(desc(8, 8, 8, 4, 4, 8, outer_m=0))


def test_schedule_splitk_is_innermost_and_flags_last_k():
    d = desc(4, 10, 8, 4, 4, 4, outer_m=1)
    assert order(d) == [(0, 0, 0), (0, 0, 4), (0, 0, 8), (0, 4, 0), (0, 4, 4), (0, 4, 8)]
    assert flags(d, "k_eff") == [4, 4, 2] * 2
    assert flags(d, "last_k") == [False, False, True] * 2
    # k changes every step: every block is reloaded
    assert all(flags(d, "load_a")) and all(flags(d, "load_b"))


def test_schedule_partition_k_at_least_k_is_one_step_per_block():
    for pk in (8, 9, 200):
        d = desc(4, 8, 4, 4, 4, pk)
        (s,) = steps(d, CFG)
        assert (s.k0, s.k_eff, s.last_k) == (0, 8, True)


# -- block reuse ---------------------------------------------------------------------------------

def test_schedule_outer_m_reuses_a_across_n():
    d = desc(8, 8, 8, 4, 4, 8, outer_m=1)
    assert flags(d, "load_a") == [True, False, True, False]
    assert flags(d, "load_b") == [True, True, True, True]


def test_schedule_outer_n_reuses_b_across_m():
    d = desc(8, 8, 8, 4, 4, 8, outer_m=0)
    assert flags(d, "load_a") == [True, True, True, True]
    assert flags(d, "load_b") == [True, False, True, False]


def test_schedule_single_n_partition_reuses_b_across_m_when_m_outside():
    # outer_m=1 but one n partition: the B block (n0, k0) repeats from step to step
    d = desc(12, 8, 4, 4, 4, 8, outer_m=1)
    assert order(d) == [(0, 0, 0), (4, 0, 0), (8, 0, 0)]
    assert flags(d, "load_a") == [True, True, True]
    assert flags(d, "load_b") == [True, False, False]


def test_schedule_single_step_loads_both():
    (s,) = steps(desc(4, 4, 4, 4, 4, 4), CFG)
    assert s.load_a and s.load_b and s.last_k


def test_schedule_splitk_with_single_k_block_per_m_reuses_nothing_across_k():
    # two m partitions, split-K into two, outer n: A (m0, k0) and B (n0, k0) both change
    d = desc(8, 8, 4, 4, 4, 4, outer_m=0)
    assert order(d) == [(0, 0, 0), (0, 0, 4), (4, 0, 0), (4, 0, 4)]
    assert flags(d, "load_a") == [True] * 4
    assert flags(d, "load_b") == [True] * 4


# -- ragged edges --------------------------------------------------------------------------------

def test_schedule_ragged_edges_shrink_the_last_partition():
    d = desc(10, 5, 6, 8, 4, 5, outer_m=1)
    got = [(s.m0, s.n0, s.m_eff, s.n_eff, s.groups_m, s.groups_n, s.k_eff)
           for s in steps(d, CFG)]
    assert got == [
        (0, 0, 8, 4, 2, 1, 5),
        (0, 4, 8, 2, 2, 1, 5),
        (8, 0, 2, 4, 1, 1, 5),
        (8, 4, 2, 2, 1, 1, 5),
    ]


def test_schedule_ragged_inside_a_partition_rounds_groups_up():
    (s,) = steps(desc(6, 3, 5, 8, 8, 3), CFG)
    assert s == Step(m0=0, n0=0, k0=0, m_eff=6, n_eff=5, k_eff=3, groups_m=2, groups_n=2,
                     load_a=True, load_b=True, last_k=True)


# -- traffic -------------------------------------------------------------------------------------

@pytest.mark.parametrize("d, expected", [
    # 2x2 partitions of 4x4, k=8, m outside: A loaded twice, B four times, C 8*8*4 bytes
    (desc(8, 8, 8, 4, 4, 8, outer_m=1),
     dict(rd_a_bytes=2 * 8 * 4, rd_b_bytes=4 * 8 * 4, wr_c_bytes=256, mac_active_cycles=32)),
    (desc(8, 8, 8, 4, 4, 8, outer_m=0),
     dict(rd_a_bytes=4 * 8 * 4, rd_b_bytes=2 * 8 * 4, wr_c_bytes=256, mac_active_cycles=32)),
    # split-K 10 = 4 + 4 + 2: every k block read once, C stored once
    (desc(4, 10, 4, 4, 4, 4),
     dict(rd_a_bytes=40, rd_b_bytes=40, wr_c_bytes=64, mac_active_cycles=10)),
    # ragged 6x5, k=3: two 4-row groups each way; C stores 6 rows of two 16-byte beats
    (desc(6, 3, 5, 8, 8, 3),
     dict(rd_a_bytes=3 * 2 * 4, rd_b_bytes=3 * 2 * 4, wr_c_bytes=6 * 2 * 16,
          mac_active_cycles=2 * 2 * 3)),
    # ragged partitions (see test_schedule_ragged_edges_shrink_the_last_partition)
    (desc(10, 5, 6, 8, 4, 5, outer_m=1),
     dict(rd_a_bytes=5 * 2 * 4 + 5 * 1 * 4, rd_b_bytes=4 * 5 * 4,
          wr_c_bytes=8 * 16 + 8 * 16 + 2 * 16 + 2 * 16, mac_active_cycles=10 + 10 + 5 + 5)),
], ids=["outer_m", "outer_n", "splitk", "ragged", "ragged_partitions"])
def test_schedule_traffic_hand_computed(d, expected):
    assert traffic(d, CFG) == expected


def test_schedule_traffic_scales_with_beats_on_small_preset():
    cfg = PRESETS["small"]     # 8x8: a/b beat 8 bytes, c beat 32 bytes
    d = desc(16, 4, 8, 8, 8, 4, outer_m=1, cfg=cfg)
    # two m partitions, one n partition: B loaded once; C 16 rows of one 32-byte beat
    assert traffic(d, cfg) == dict(rd_a_bytes=2 * 4 * 8, rd_b_bytes=4 * 8, wr_c_bytes=16 * 32,
                                   mac_active_cycles=2 * 4)


def test_schedule_traffic_of_empty_schedule_is_zero():
    d = dataclasses.replace(desc(4, 4, 4, 4, 4, 4), m=0)
    assert list(steps(d, CFG)) == []
    assert traffic(d, CFG) == dict(rd_a_bytes=0, rd_b_bytes=0, wr_c_bytes=0,
                                   mac_active_cycles=0)


# -- properties ----------------------------------------------------------------------------------

dims = st.integers(1, 30)
parts = st.integers(1, 4).map(lambda x: 4 * x)


@settings(max_examples=200, deadline=None)
@given(dims, dims, dims, parts, parts, st.integers(1, 12), st.integers(0, 1))
def test_schedule_covers_every_partition_once(m, k, n, pm, pn, pk, outer_m):
    d = desc(m, k, n, pm, pn, pk, outer_m=outer_m, legal=False)
    ss = list(steps(d, CFG))
    keys = [(s.m0, s.n0, s.k0) for s in ss]
    assert len(set(keys)) == len(keys)
    assert set(keys) == {(m0, n0, k0) for m0 in range(0, m, pm) for n0 in range(0, n, pn)
                         for k0 in range(0, k, pk)}
    # each output block sums its k slices to k, in consecutive steps ending with last_k
    by_mn = {}
    for i, s in enumerate(ss):
        by_mn.setdefault((s.m0, s.n0), []).append((i, s))
    area = 0
    for (m0, n0), group in by_mn.items():
        idx = [i for i, _ in group]
        assert idx == list(range(idx[0], idx[0] + len(idx)))
        assert sum(s.k_eff for _, s in group) == k
        assert [s.last_k for _, s in group] == [False] * (len(group) - 1) + [True]
        _, s = group[0]
        assert 0 < s.m_eff <= pm and 0 < s.n_eff <= pn
        assert s.groups_m == -(-s.m_eff // 4) and s.groups_n == -(-s.n_eff // 4)
        area += s.m_eff * s.n_eff
    assert area == m * n
    # a block is loaded exactly when it differs from the previous step's
    for prev, s in zip([None] + ss, ss):
        assert s.load_a == (prev is None or (prev.m0, prev.k0) != (s.m0, s.k0))
        assert s.load_b == (prev is None or (prev.n0, prev.k0) != (s.n0, s.k0))
    t = traffic(d, CFG)
    # every MAC is issued; C is stored once, in whole beats per row
    assert t["mac_active_cycles"] * 16 >= m * n * k
    assert t["wr_c_bytes"] == sum(s.m_eff * s.groups_n * 16 for s in ss if s.last_k)
    assert t["wr_c_bytes"] >= 4 * m * n
    assert t["rd_a_bytes"] >= m * k and t["rd_b_bytes"] >= k * n


# -- a_load_crc: the CRC of the A beats, in load order --------------------------------------------

def _a_beats(d, cfg, memory):
    """The A beats as the load engine writes them, beat by beat (an independent model of
    hw.dma.LoadEngine: beat (r, g) from ``addr + r*stride + g*W``, bytes past ``elems`` zero)."""
    w = cfg.a_beat_bytes
    out = bytearray()
    for s in steps(d, cfg):
        if not s.load_a:
            continue
        addr = d.a_addr + s.k0 * d.a_stride + s.m0
        for r in range(s.k_eff):
            for g in range(s.groups_m):
                start = addr + r * d.a_stride + g * w
                beat = bytearray(memory[start:start + w])
                for b in range(w):
                    if g * w + b >= s.m_eff:
                        beat[b] = 0
                out += beat
    return bytes(out)


@settings(max_examples=60, deadline=None)
@given(m=st.integers(1, 23), k=st.integers(1, 19), n=st.integers(1, 13),
       pm=st.integers(1, 3), pn=st.integers(1, 3), pk=st.integers(1, 20),
       outer_m=st.integers(0, 1), pad=st.integers(0, 5), seed=st.integers(0, 2**32 - 1))
def test_a_load_crc_is_the_crc_of_the_engine_beats(m, k, n, pm, pn, pk, outer_m, pad, seed):
    """Ragged m, split-K, both loop orders, A reused across partitions, a stride wider than m:
    the CRC of the beats an independent beat-level model writes; memory past the matrix (the
    ragged edge's beats read into it) never counts."""
    import zlib

    import numpy as np

    from spec.schedule import a_load_crc

    R = CFG.array_rows
    d = desc(m, k, n, R * pm, CFG.array_cols * pn, pk, outer_m=outer_m, legal=False)
    d = dataclasses.replace(d, a_addr=64, a_stride=m + pad)
    rng = np.random.default_rng(seed)
    memory = bytearray(rng.integers(0, 256, 64 + k * (m + pad) + 4 * R, np.uint8).tobytes())
    want = zlib.crc32(_a_beats(d, CFG, memory))
    assert a_load_crc(d, CFG, lambda addr, size: memory[addr:addr + size]) == want
    # the bytes past the matrix's last row and columns do not matter
    span = 64 + (k - 1) * (m + pad) + m
    memory[span:] = bytes(len(memory) - span)
    assert a_load_crc(d, CFG, lambda addr, size: memory[addr:addr + size]) == want
    # every byte of A does
    memory[64 + (k - 1) * (m + pad) + m - 1] ^= 0x80
    assert a_load_crc(d, CFG, lambda addr, size: memory[addr:addr + size]) != want


def test_a_load_crc_refuses_a_short_read_and_a_non_descriptor():
    from spec.schedule import a_load_crc

    d = desc(8, 4, 4, 4, 4, 4)
    with pytest.raises(ValueError, match=r"read\(0x0, 32\) returned 31 bytes"):
        a_load_crc(d, CFG, lambda addr, size: bytes(size - 1))
    with pytest.raises(TypeError, match="a_load_crc needs a GemmDescriptor, not dict"):
        a_load_crc({}, CFG, lambda addr, size: bytes(size))
