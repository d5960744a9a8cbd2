"""Building the database: candidate filter, threshold, boundary walk and its evidence, Dask."""

import math

import pytest

from planner.shapes import GemmShape
from planner.tunedb import BuildOptions, Executor, TuneDB, build_db, measure_model
from planner.tunedb.build import halvings, initial_candidates, is_linear, pad_to_blocks

from .conftest import CFG, record

#: Synthetic cost: a fixed overhead plus perfectly parallel work. Halving ``V`` is linear within
#: ``tol`` iff ``OVERHEAD / (OVERHEAD + V/64) <= tol``, i.e. ``V/64 >= 49 * OVERHEAD`` at 2%.
OVERHEAD = 1000


def overhead_measure(cases, cfg):
    return [{"total_cycles": OVERHEAD + c.m * c.k * c.n // 64} for c in cases]


def synthetic_linear(v_parent, v_child, tol):
    return is_linear(OVERHEAD + v_parent // 64, OVERHEAD + v_child // 64, tol)


def test_build_candidates_are_regular_legal_and_ranked_by_the_model():
    shape = GemmShape(96, 200, 64)
    cands = initial_candidates(shape, CFG, 4)
    assert len(cands) == 4
    for c in cands:
        t = c.tiling_dict
        assert shape.m % t["partition_m"] == 0 and shape.n % t["partition_n"] == 0
        assert shape.k % t["partition_k"] == 0
    predicted = [r["total_cycles"] for r in measure_model(cands, CFG)]
    assert predicted == sorted(predicted)


def test_build_pads_m_and_n_to_blocks():
    assert pad_to_blocks(GemmShape(1000, 2048, 1), CFG) == GemmShape(1000, 2048, 8)
    assert pad_to_blocks(GemmShape(13, 7, 17), CFG) == GemmShape(16, 7, 24)


def test_build_threshold_filter_rejects_low_utilisation(tmp_path):
    shapes = [("thin", GemmShape(64, 64, 1)), ("square", GemmShape(64, 64, 64))]
    with TuneDB.open(tmp_path / "a.tunedb", CFG) as db:
        report = build_db(db, shapes, measure_model, Executor("serial"),
                          BuildOptions(top_n=2, util_floor=0.3))
        kept = {r.source for r in db.records("initial")}
    assert kept == {"square"}
    assert [r["source"] for r in report.rejected] == ["thin"]
    assert report.rejected[0]["util"] < 1 / 8                # one useful column of eight
    with TuneDB.open(tmp_path / "b.tunedb", CFG) as db:
        build_db(db, shapes, measure_model, Executor("serial"),
                 BuildOptions(top_n=2, util_floor=0.0))
        assert {r.source for r in db.records("initial")} == {"thin", "square"}


def test_build_keeps_the_cheapest_measured_candidate(tmp_path):
    def reversed_measure(cases, cfg):   # make the model's last choice the fastest on "hardware"
        out = measure_model(cases, cfg)
        return [{"total_cycles": 10**6 - r["total_cycles"]} for r in out]

    with TuneDB.open(tmp_path / "a.tunedb", CFG) as db:
        build_db(db, [("s", GemmShape(128, 64, 128))], reversed_measure, Executor("serial"),
                 BuildOptions(top_n=3, util_floor=0.0))
        (rec,) = db.records("initial")
    rows = rec.evidence["candidates"]
    assert len(rows) == 3 and rec.cycles == min(r["measured"] for r in rows)
    assert rec.tiling_dict == rows[-1]["tiling"]


def test_build_boundary_walk_stops_where_cost_stops_halving(tmp_path):
    tol = 0.02
    shapes = [("big", GemmShape(256, 64, 256)), ("small", GemmShape(64, 64, 64))]
    with TuneDB.open(tmp_path / "a.tunedb", CFG) as db:
        report = build_db(db, shapes, overhead_measure, Executor("serial"),
                          BuildOptions(top_n=1, linear_tol=tol))
        boundary = db.records("boundary")
        initial = {r.source: r for r in db.records("initial")}
    # 64^3 is below the linear regime: every first halving is non-linear, so it is dropped
    assert [d["source"] for d in report.dropped] == ["small"]
    assert initial["small"].evidence["linear"] is False and initial["big"].evidence["linear"]
    assert boundary
    v0 = 256 * 64 * 256
    for r in boundary:
        v = math.prod(r.dims)
        ev = r.evidence
        assert r.cycles == OVERHEAD + v // 64
        par = ev["parent"]
        assert math.prod(par["shape"]) == 2 * v
        assert synthetic_linear(2 * v, v, tol) and abs(par["ratio"] / 0.5 - 1) <= tol
        for f in ev["failed_halvings"]:
            assert math.prod(f["shape"]) * 2 == v and abs(f["ratio"] / 0.5 - 1) > tol
        # the minimal linear shapes of this cost: exactly one halving below the root
        assert v == v0 // 2 and ev["path"][0] == [256, 64, 256]
    # every halvable first halving of the root is linear and minimal here
    root = initial["big"]
    assert sorted(r.dims for r in boundary) == sorted(c for _, c in halvings(root, root.dims,
                                                                              CFG))


def test_build_halvings_keep_regular_loops():
    root = record("initial", (96, 100, 64), 32, 32, 100, 5000)
    got = dict(halvings(root, root.dims, CFG))
    # m: 48 is 1.5 partitions of 32 (irregular); k: 50 < 100 shrinks the partition; n: 32 ok
    assert got == {"k": (96, 50, 64), "n": (96, 100, 32)}
    assert dict(halvings(root, (8, 3, 8), CFG)) == {}


def test_build_is_identical_serial_and_on_a_dask_local_cluster(tmp_path):
    shapes = [("a", GemmShape(128, 64, 128)), ("b", GemmShape(64, 256, 192)),
              ("c", GemmShape(40, 48, 200))]
    opts = BuildOptions(top_n=2, batch_cases=3)
    with TuneDB.open(tmp_path / "serial.tunedb", CFG) as db:
        build_db(db, shapes, measure_model, Executor("serial"), opts)
        serial = db.records()
    with TuneDB.open(tmp_path / "dask.tunedb", CFG) as db, Executor("local", 2) as ex:
        build_db(db, shapes, measure_model, ex, opts)
        on_dask = db.records()
    assert serial and serial == on_dask
    assert {r.kind for r in serial} == {"initial", "boundary"}


def test_build_executor_refuses_bad_schedulers():
    with pytest.raises(ValueError, match="scheduler must be"):
        Executor("bogus")
    with pytest.raises(ValueError, match="workers must be a positive int"):
        Executor("local", 0)


def test_build_uses_an_existing_scheduler_by_address(tmp_path):
    from distributed import LocalCluster

    shapes = [("a", GemmShape(128, 64, 128))]
    with TuneDB.open(tmp_path / "serial.tunedb", CFG) as db:
        build_db(db, shapes, measure_model, Executor("serial"), BuildOptions(top_n=1))
        serial = db.records()
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                      dashboard_address=":0") as cluster:
        assert cluster.scheduler_address.startswith("tcp://")
        with TuneDB.open(tmp_path / "remote.tunedb", CFG) as db, \
                Executor(cluster.scheduler_address) as ex:
            build_db(db, shapes, measure_model, ex, BuildOptions(top_n=1))
            assert db.records() == serial
