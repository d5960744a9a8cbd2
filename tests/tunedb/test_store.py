"""SQLite storage: round trip, schema and configuration refusal, concurrent writers."""

import json
import multiprocessing
import sqlite3
import threading

import pytest

from spec.config import PRESETS
from planner.tunedb import SCHEMA_VERSION, TuneDB, TuneDBError
from planner.tunedb.store import _enable_wal

from .conftest import CFG, record


def test_store_round_trip_and_replace(tmp_path):
    path = tmp_path / "a.tunedb"
    r1 = record("initial", (64, 64, 64), 32, 32, 64, 5000)
    r2 = record("boundary", (32, 64, 64), 32, 32, 64, 2600)
    with TuneDB.open(path, CFG) as db:
        db.put_records([r1, r2])
        db.put_measurements([("gemm", r1.dims, r1.tiling, {"total_cycles": 5000})])
    with TuneDB.open(path, create=False) as db:           # configuration read from the file
        assert db.cfg == CFG and db.config_id == f"{CFG.config_id:08x}"
        assert db.records() == [r1, r2]
        assert db.records("boundary") == [r2]
        assert db.measurement("gemm", r1.dims, r1.tiling) == {"total_cycles": 5000}
        assert db.measurement("gemm", r2.dims, r2.tiling) is None
        db.put_records([record("initial", (64, 64, 64), 64, 64, 64, 4000)])
        assert [r.cycles for r in db.records("initial")] == [4000]
        assert db.stats()["records"] == {"initial/gemm": 1, "boundary/gemm": 1}


def test_store_refuses_another_config(tmp_path):
    path = tmp_path / "a.tunedb"
    TuneDB.open(path, CFG).close()
    other = PRESETS["tiny"]
    with pytest.raises(TuneDBError, match=f"is for config_id {CFG.config_id:08x}, not "
                                          f"{other.config_id:08x}"):
        TuneDB.open(path, other)


def test_store_refuses_another_schema_version(tmp_path):
    path = tmp_path / "a.tunedb"
    TuneDB.open(path, CFG).close()
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'",
                     (str(SCHEMA_VERSION + 1),))
    conn.close()
    with pytest.raises(TuneDBError, match=f"schema version {SCHEMA_VERSION + 1}, this code "
                                          f"reads version {SCHEMA_VERSION}; there is no "
                                          f"migration"):
        TuneDB.open(path, CFG)


def test_store_refuses_other_files(tmp_path):
    with pytest.raises(TuneDBError, match="no such tuning database"):
        TuneDB.open(tmp_path / "missing.tunedb", CFG, create=False)
    foreign = tmp_path / "foreign.sqlite"
    conn = sqlite3.connect(foreign)
    conn.execute("CREATE TABLE t (x)")
    conn.close()
    with pytest.raises(TuneDBError, match="not a tuning database"):
        TuneDB.open(foreign, CFG)
    text = tmp_path / "text.tunedb"
    text.write_text("hello, not sqlite " * 100)
    with pytest.raises(TuneDBError, match="not a tuning database"):
        TuneDB.open(text, CFG)


def _writer(path, index, count):
    with TuneDB.open(path, CFG) as db:
        for i in range(count):
            m = 8 * (1 + index * count + i)
            db.put_records([record("initial", (m, 16, 8), 8, 8, 16, 100 + i)])
            db.put_measurements([("gemm", (m, 16, 8), (8,) * 8, {"total_cycles": i})])


def test_store_concurrent_writers_lose_nothing(tmp_path):
    path = tmp_path / "shared.tunedb"
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(path, i, 25)) for i in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0, 0]
    with TuneDB.open(path, create=False) as db:
        assert sorted(r.m for r in db.records()) == [8 * i for i in range(1, 76)]
        assert db.measurement_count() == 75
        mode = db._conn.execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"


def test_store_switch_to_wal_waits_for_a_process_holding_the_file(tmp_path):
    """The WAL switch is answered 'locked' without SQLite's busy handler; it is retried.

    The CI once lost a writer this way: three builders creating one database together.
    """
    path = tmp_path / "new.tunedb"
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN EXCLUSIVE")
    holder.execute("CREATE TABLE t (x)")
    other = sqlite3.connect(path, timeout=0, isolation_level=None)
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        _enable_wal(other, timeout_s=0.05)
    release = threading.Timer(0.2, holder.execute, ("COMMIT",))
    release.start()
    _enable_wal(other)  # waits for the holder's commit, then switches
    release.join()
    assert other.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    holder.close()
    other.close()


def test_store_refuses_a_config_definition_that_changed(tmp_path):
    """A database built before AccelConfig changed (new field, new default) is refused."""
    path = tmp_path / "a.tunedb"
    TuneDB.open(path, CFG).close()
    conn = sqlite3.connect(path)
    with conn:
        stored = json.loads(conn.execute("SELECT value FROM meta WHERE key = 'config'")
                            .fetchone()[0])
        stored["sync_bytes"] *= 2          # as if the stored JSON hashed differently today
        conn.execute("UPDATE meta SET value = ? WHERE key = 'config'", (json.dumps(stored),))
    conn.close()
    with pytest.raises(TuneDBError, match="its stored configuration now hashes to"):
        TuneDB.open(path, create=False)


def test_store_replace_all_swaps_every_record(tmp_path):
    with TuneDB.open(tmp_path / "a.tunedb", CFG) as db:
        db.put_records([record("initial", (64, 64, 64), 32, 32, 64, 5000),
                        record("boundary", (32, 64, 64), 32, 32, 64, 2600)])
        new = record("initial", (128, 64, 64), 32, 32, 64, 9000)
        db.put_records([new], replace_all=True)
        assert db.records() == [new]
