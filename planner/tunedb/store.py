"""SQLite storage of the tuning database (seed 001): initial and boundary records, raw measurements.

One file holds the records of one accelerator configuration. The ``meta`` table stores the schema
version, the ``config_id`` and the configuration JSON; opening a file written by another schema
version or for another configuration raises :class:`TuneDBError` with both values named (there
is no migration: rebuild the database).

Tables (all keyed by ``config_id``, op kind and shape ``m, k, n``):

* ``records``: ``kind`` (``initial`` or ``boundary``), the tiling (:data:`planner.tiling.
  TILING_FIELDS`), measured ``cycles``, the RTL counters (JSON), the utilisation, where the shape
  came from and the evidence (JSON: measured candidates, halving ratios).
* ``measurements``: every RTL run the builder made, keyed by shape and tiling, so a build that is
  stopped resumes without re-measuring and the boundary walk reuses the initial runs.

Concurrent writers (several builders, Dask clients) are safe: WAL journal, a busy timeout, and
every write is one ``BEGIN IMMEDIATE`` transaction.
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3
import time
from pathlib import Path
from typing import Iterable, Literal

from spec.config import AccelConfig
from planner.tiling import TILING_FIELDS

__all__ = ["SCHEMA_VERSION", "TuneDB", "TuneDBError", "Record", "RecordKind", "OPS"]

#: Bump when the tables change; a file of another version is refused, never migrated.
SCHEMA_VERSION = 1
#: Operator kinds the database knows (convolutions are stored as their implicit GEMM).
OPS = ("gemm",)
#: Seconds a writer waits for another writer's transaction before giving up.
BUSY_TIMEOUT_S = 60.0

RecordKind = Literal["initial", "boundary"]

_TILING_COLS = ", ".join(f"{f} INTEGER NOT NULL" for f in TILING_FIELDS)
_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS records (
    config_id TEXT NOT NULL, kind TEXT NOT NULL CHECK (kind IN ('initial', 'boundary')),
    op TEXT NOT NULL, m INTEGER NOT NULL, k INTEGER NOT NULL, n INTEGER NOT NULL,
    {_TILING_COLS}, cycles INTEGER NOT NULL, counters TEXT NOT NULL, util REAL NOT NULL,
    source TEXT NOT NULL, evidence TEXT NOT NULL,
    PRIMARY KEY (config_id, kind, op, m, k, n));
CREATE TABLE IF NOT EXISTS measurements (
    config_id TEXT NOT NULL, op TEXT NOT NULL, m INTEGER NOT NULL, k INTEGER NOT NULL,
    n INTEGER NOT NULL, {_TILING_COLS}, counters TEXT NOT NULL,
    PRIMARY KEY (config_id, op, m, k, n, {", ".join(TILING_FIELDS)}));
"""


class TuneDBError(ValueError):
    """The database file cannot be used with this code or this configuration."""


def _enable_wal(conn: sqlite3.Connection, timeout_s: float = BUSY_TIMEOUT_S):
    """Switch ``conn``'s file to the WAL journal (a persistent setting), waiting for others.

    Switching a new file from the rollback journal to WAL needs the file to itself, and SQLite
    answers ``database is locked`` at once, without its busy handler, while another process holds
    it (several builders creating one database together). The switch is retried for up to
    ``timeout_s`` seconds, like every other wait on a busy database here; a file already in WAL
    mode needs no switch.
    """
    deadline = time.monotonic() + timeout_s
    delay = 0.001
    while True:
        try:
            if conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as err:
            if "locked" not in str(err) and "busy" not in str(err):
                raise
            if time.monotonic() >= deadline:
                raise
        time.sleep(delay)
        delay = min(2 * delay, 0.05)


class Tiled:
    """A shape ``m, k, n`` with a ``tiling`` tuple in :data:`TILING_FIELDS` order (mixin of
    :class:`Record` and :class:`planner.tunedb.measure.Case`)."""

    @property
    def dims(self) -> tuple[int, int, int]:
        return (self.m, self.k, self.n)

    @property
    def tiling_dict(self) -> dict[str, int]:
        return dict(zip(TILING_FIELDS, self.tiling))


@dataclasses.dataclass(frozen=True)
class Record(Tiled):
    """One database entry: a shape, the tiling to run it with and its measured cost.

    ``tiling`` is a tuple in :data:`TILING_FIELDS` order; ``counters`` are the RTL performance
    counters of the run (``total_cycles == cycles``); ``evidence`` says why the record is there
    (measured candidates for an initial record, the halving chain and the failed halvings for a
    boundary record).
    """

    kind: RecordKind
    op: str
    m: int
    k: int
    n: int
    tiling: tuple[int, ...]
    cycles: int
    counters: dict
    util: float
    source: str
    evidence: dict

    def as_dict(self) -> dict:
        out = dataclasses.asdict(self)
        out["tiling"] = self.tiling_dict
        return out


class TuneDB:
    """A tuning database file for one configuration (see the module docstring).

    Use :meth:`open`; the object is a context manager closing the connection.
    """

    def __init__(self, conn: sqlite3.Connection, path: Path, cfg: AccelConfig):
        self._conn = conn
        self._path = path
        self._cfg = cfg
        self._cid = f"{cfg.config_id:08x}"

    @property
    def cfg(self) -> AccelConfig:
        return self._cfg

    @property
    def path(self) -> Path:
        return self._path

    @property
    def config_id(self) -> str:
        return self._cid

    @classmethod
    def open(cls, path: str | Path, cfg: AccelConfig | None = None, *,
             create: bool = True) -> "TuneDB":
        """Open (``create``: or create) ``path`` for ``cfg``.

        Without ``cfg`` the stored configuration is used (query, stats, export). Raises
        :class:`TuneDBError` when the file has another schema version, another ``config_id``
        than ``cfg``, is not a tuning database, or does not exist and ``create`` is false.
        """
        path = Path(path)
        if not create and not path.exists():
            raise TuneDBError(f"{path}: no such tuning database (build one with "
                              f"`tessera tunedb build`)")
        if cfg is None and not path.exists():
            raise TuneDBError(f"{path}: a new tuning database needs a configuration")
        if path.is_dir():
            raise TuneDBError(f"{path}: is a directory, not a tuning database file")
        try:
            conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
        except sqlite3.OperationalError as e:     # (no directory to create it in)
            raise TuneDBError(f"{path}: cannot open a tuning database there ({e})") from None
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
            _enable_wal(conn)
            conn.execute("BEGIN IMMEDIATE")
            try:
                meta = cls._read_meta(conn, path)
                if not meta:
                    if cfg is None:
                        raise TuneDBError(f"{path}: empty tuning database and no configuration")
                    for stmt in _SCHEMA.split(";"):
                        if stmt.strip():
                            conn.execute(stmt)
                    conn.executemany("INSERT INTO meta VALUES (?, ?)", [
                        ("schema_version", str(SCHEMA_VERSION)),
                        ("config_id", f"{cfg.config_id:08x}"),
                        ("config", cfg.to_json())])
                    stored_cfg = cfg
                else:
                    stored_cfg = cls._check_meta(meta, path, cfg)
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
        except sqlite3.DatabaseError as err:
            conn.close()
            raise TuneDBError(f"{path}: not a tuning database ({err})") from None
        except BaseException:
            conn.close()
            raise
        return cls(conn, path, stored_cfg)

    @staticmethod
    def _read_meta(conn: sqlite3.Connection, path: Path) -> dict[str, str]:
        tables = {row[0] for row in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'")}
        if not tables:
            return {}
        if "meta" not in tables:
            raise TuneDBError(f"{path}: not a tuning database (no meta table; tables "
                              f"{', '.join(sorted(tables))})")
        return dict(conn.execute("SELECT key, value FROM meta"))

    @staticmethod
    def _check_meta(meta: dict[str, str], path: Path, cfg: AccelConfig | None) -> AccelConfig:
        version = meta.get("schema_version")
        if version != str(SCHEMA_VERSION):
            raise TuneDBError(f"{path}: tuning database schema version {version}, this code "
                              f"reads version {SCHEMA_VERSION}; there is no migration, rebuild it "
                              f"with `tessera tunedb build`")
        stored = AccelConfig.from_json(meta["config"])
        if f"{stored.config_id:08x}" != meta.get("config_id"):
            raise TuneDBError(f"{path}: tuning database is for config_id "
                              f"{meta.get('config_id')}, but its stored configuration now hashes "
                              f"to {stored.config_id:08x} (the AccelConfig definition changed "
                              f"since it was built); rebuild it with `tessera tunedb build`")
        if cfg is not None and cfg.config_id != stored.config_id:
            raise TuneDBError(f"{path}: tuning database is for config_id {meta['config_id']}, "
                              f"not {cfg.config_id:08x}; measurements of one configuration do "
                              f"not apply to another, use or build a database for this one")
        return stored

    # -- context manager -------------------------------------------------------------------------

    def close(self):
        self._conn.close()

    def __enter__(self) -> "TuneDB":
        return self

    def __exit__(self, *exc):
        self.close()

    # -- writes (each one transaction) -----------------------------------------------------------

    def _write(self, sql: str, rows: list[tuple], *, clear: bool = False):
        if not rows and not clear:
            return
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            if clear:
                self._conn.execute("DELETE FROM records WHERE config_id = ?", (self._cid,))
            if rows:
                self._conn.executemany(sql, rows)
            self._conn.execute("COMMIT")
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise

    def put_records(self, records: Iterable[Record], *, replace_all: bool = False):
        """Insert or replace ``records`` (same kind and shape) in one transaction;
        ``replace_all`` first deletes every record in the same transaction (a rebuild: readers
        see the old or the new records, never a mix or none)."""
        rows = []
        for r in records:
            if r.op not in OPS:
                raise ValueError(f"Record.op must be one of {', '.join(OPS)}, not {r.op!r}")
            rows.append((self._cid, r.kind, r.op, r.m, r.k, r.n, *r.tiling, r.cycles,
                         json.dumps(r.counters, sort_keys=True), r.util, r.source,
                         json.dumps(r.evidence, sort_keys=True)))
        cols = ("config_id, kind, op, m, k, n, " + ", ".join(TILING_FIELDS)
                + ", cycles, counters, util, source, evidence")
        marks = ", ".join("?" * (len(TILING_FIELDS) + 11))
        self._write(f"INSERT OR REPLACE INTO records ({cols}) VALUES ({marks})", rows,
                    clear=replace_all)

    def put_measurements(self, items: Iterable[tuple[str, tuple[int, int, int], tuple[int, ...],
                                                     dict]]):
        """Store ``(op, (m, k, n), tiling, counters)`` runs in one transaction."""
        rows = [(self._cid, op, *dims, *tiling, json.dumps(counters, sort_keys=True))
                for op, dims, tiling, counters in items]
        marks = ", ".join("?" * (len(TILING_FIELDS) + 6))
        self._write(f"INSERT OR REPLACE INTO measurements VALUES ({marks})", rows)

    # -- reads -----------------------------------------------------------------------------------

    def records(self, kind: RecordKind | None = None, op: str = "gemm") -> list[Record]:
        """Records of ``op`` (and ``kind``), ordered by kind, then shape."""
        sql = ("SELECT kind, op, m, k, n, " + ", ".join(TILING_FIELDS)
               + ", cycles, counters, util, source, evidence FROM records "
               "WHERE config_id = ? AND op = ?")
        args: list = [self._cid, op]
        if kind is not None:
            sql += " AND kind = ?"
            args.append(kind)
        sql += " ORDER BY kind DESC, m, k, n"
        nt = len(TILING_FIELDS)
        out = []
        for row in self._conn.execute(sql, args):
            out.append(Record(kind=row[0], op=row[1], m=row[2], k=row[3], n=row[4],
                              tiling=tuple(row[5:5 + nt]), cycles=row[5 + nt],
                              counters=json.loads(row[6 + nt]), util=row[7 + nt],
                              source=row[8 + nt], evidence=json.loads(row[9 + nt])))
        return out

    def measurement(self, op: str, dims: tuple[int, int, int], tiling: tuple[int, ...]
                    ) -> dict | None:
        where = " AND ".join(f"{f} = ?" for f in ("m", "k", "n", *TILING_FIELDS))
        row = self._conn.execute(
            f"SELECT counters FROM measurements WHERE config_id = ? AND op = ? AND {where}",
            (self._cid, op, *dims, *tiling)).fetchone()
        return None if row is None else json.loads(row[0])

    def measurement_count(self) -> int:
        return self._conn.execute("SELECT COUNT(*) FROM measurements WHERE config_id = ?",
                                  (self._cid,)).fetchone()[0]

    def stats(self) -> dict:
        """Counts per kind and op, measurements, schema version and configuration."""
        kinds = dict(self._conn.execute(
            "SELECT kind || '/' || op, COUNT(*) FROM records WHERE config_id = ? "
            "GROUP BY kind, op", (self._cid,)))
        return {"path": str(self._path), "schema_version": SCHEMA_VERSION,
                "config_id": self._cid, "records": kinds,
                "measurements": self.measurement_count()}
