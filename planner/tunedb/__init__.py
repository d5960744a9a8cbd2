"""Tuning database (seed 001): measured best tilings, boundary shapes, matching and auto-padding.

::

    from planner.tunedb import TuneDB, lookup
    with TuneDB.open("small.tunedb", create=False) as db:
        res = lookup(db.records(), GemmShape(512, 256, 384), db.cfg)
        res.rule, res.run_shape, res.tiling_dict, res.estimated_cycles

Modules: :mod:`.store` (SQLite file, schema and config checks), :mod:`.measure` (cases, the
model's measure function, serial or Dask executor), :mod:`.build` (initial and boundary
database), :mod:`.lookup` (the seed's lookup order, estimates, auto-padding, ``--strategy db``).
The RTL's measure function is :func:`flow.measure.measure_rtl` and the command
``tessera tunedb build | query | stats | export`` is :mod:`flow.tunedb_cli` (orchestration).
docs/tunedb.md describes the method and its measured accuracy.
"""

from .build import BuildOptions, BuildReport, build_db
from .lookup import RULES, LookupResult, db_plan, estimate, lookup
from .measure import Case, Executor, measure_model
from .store import SCHEMA_VERSION, Record, TuneDB, TuneDBError

__all__ = ["TuneDB", "TuneDBError", "Record", "SCHEMA_VERSION", "Case", "Executor",
           "measure_model", "BuildOptions", "BuildReport", "build_db", "RULES",
           "LookupResult", "lookup", "estimate", "db_plan"]
