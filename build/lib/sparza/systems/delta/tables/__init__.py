"""Typed result tables: a delta stream configured with a schema is written as a plain Delta table.

A stream ``x`` of a delta system becomes a *typed table* when ``systems.<s>.streams.<x>.delta.table.schema``
or ``...delta.table.mode`` is set. Each message (a dict, a dataclass, JSON or Avro bytes) becomes one row
with real columns; there is no ``partition``/``key``/``value`` layout and no control row, so Spark SQL,
DuckDB, Polars and BI tools read the table directly. Two modes:

- ``append``: every message is a new row. One flush is one ``write_deltalake`` commit.
- ``upsert``: rows are identified by the key columns (``delta.table.key``); a flush merges the source's
  latest row per key (a ``None`` message deletes the key) in one Delta ``MERGE`` commit.

Both commit with the batch's app transaction ``(app_id, version)`` in the same commit as the data, and skip
a transaction the table already records (delta-rs records app transactions but does not skip replays by
itself), so a replayed batch adds and changes nothing. Concurrent merges from other tasks make a commit
fail ("a concurrent transaction added new data"); the merge is then re-run on the new snapshot, which is
safe because each task's rows replace whole rows by key (see docs/tables.md for what this means when two
tasks write the same key).

The package's modules, one concern each: :mod:`~sparza.systems.delta.tables.columns` (declared columns to an
Arrow schema), :mod:`~sparza.systems.delta.tables.spec` (:class:`TableSpec` from config),
:mod:`~sparza.systems.delta.tables.create` (create the table, evolve its schema),
:mod:`~sparza.systems.delta.tables.writer` (:class:`TypedTable`: rows, append, merge) and
:mod:`~sparza.systems.delta.tables.optimize` (compaction and vacuum).
"""

from __future__ import annotations

from sparza.systems.delta.errors import TableError, TableRowError
from sparza.systems.delta.tables.columns import arrow_schema_to_text, avro_to_arrow, parse_schema
from sparza.systems.delta.tables.create import ensure_table
from sparza.systems.delta.tables.optimize import MIN_VACUUM_RETENTION_HOURS, OptimizeResult, optimize_table
from sparza.systems.delta.tables.spec import MODES, TableSpec, table_spec_from_config
from sparza.systems.delta.tables.writer import TypedTable

__all__ = [
    "MIN_VACUUM_RETENTION_HOURS",
    "MODES",
    "OptimizeResult",
    "TableError",
    "TableRowError",
    "TableSpec",
    "TypedTable",
    "arrow_schema_to_text",
    "avro_to_arrow",
    "ensure_table",
    "optimize_table",
    "parse_schema",
    "table_spec_from_config",
]
