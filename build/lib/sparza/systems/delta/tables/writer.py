"""Writing messages to a typed table: :class:`TypedTable` buffers one row per message per source and commits
a source's rows per flush, as one append or one merge that carries the batch's app transaction (see
:mod:`sparza.systems.delta.tables`)."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from sparza.errors import SerdeError, payload_preview
from sparza.serde import AvroRecord, BytesSerde, Serde
from sparza.streams import MessageType, OutgoingMessageEnvelope
from sparza.systems import Transaction
from sparza.systems.delta.errors import TableError, TableRowError
from sparza.systems.delta.settings import StreamLocation
from sparza.systems.delta.storage import storage_errors
from sparza.systems.delta.tables.create import ensure_table
from sparza.systems.delta.tables.spec import TableSpec

__all__ = ["TypedTable"]

_DELETE = "__sparza_delete"
"""The merge source's column marking a deletion (a ``None`` message); reserved in declared schemas."""


def _as_mapping(obj: Any) -> dict[str, Any] | None:
    if isinstance(obj, dict):
        return obj
    if isinstance(obj, AvroRecord):
        return _as_mapping(obj.datum)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
    asdict = getattr(obj, "_asdict", None)  # NamedTuple
    if callable(asdict):
        return dict(asdict())
    return None


@dataclass
class _Buffer:
    """What one source sent to one table since its last flush."""

    rows: list[dict[str, Any]] = field(default_factory=list)          # append
    latest: dict[tuple[Any, ...], dict[str, Any] | None] = field(default_factory=dict)  # upsert: key -> row/None

    def __len__(self) -> int:
        return len(self.rows) + len(self.latest)


def _hashable(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_hashable(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _hashable(v)) for k, v in value.items()))
    return value


class TypedTable:
    """Buffers rows per source for one typed table and commits them per flush (see the module docstring)."""

    def __init__(self, spec: TableSpec, location: StreamLocation, msg_serde: Serde, key_serde: Serde, *,
                 commit_retries: int = 100, config: Any = None, system: str = "",
                 log_retention: str | None = None) -> None:
        self.spec = spec
        self.location = location
        self.msg_serde = msg_serde
        self.key_serde = key_serde
        self.commit_retries = commit_retries
        self._config = config
        self._system = system
        self._log_retention = log_retention
        self._table: Any = None
        self._buffers: dict[str, _Buffer] = {}
        self._names = set(spec.schema.names)
        self._input_schema = pa.schema([pa.field(f.name, pa.timestamp("ms", tz=f.type.tz)
                                                 if pa.types.is_timestamp(f.type) else f.type, f.nullable)
                                        for f in spec.schema])
        self.stats = {"commits": 0, "rows": 0, "skipped": 0, "conflicts": 0}

    # --- sending -------------------------------------------------------------------------------
    def _row(self, message: Any) -> dict[str, Any]:
        if isinstance(message, bytes | bytearray | memoryview):
            if isinstance(self.msg_serde, BytesSerde):
                raise TableError(f"typed table {self.spec.stream!r} got bytes but its samza.msg.serde is bytes; "
                                 f"send dicts, or set systems.<s>.streams.{self.spec.stream}.samza.msg.serde "
                                 f"to json or avro")
            try:
                message = self.msg_serde.from_bytes(bytes(message))
            except SerdeError as exc:
                raise TableError(f"typed table {self.spec.stream!r}: message is not {self.msg_serde.name}: "
                                 f"{exc}") from exc
        row = _as_mapping(message)
        if row is None:
            raise TableError(f"typed table {self.spec.stream!r} takes dicts, dataclasses, named tuples or "
                             f"{self.msg_serde.name} bytes; got {type(message).__name__}")
        unknown = [name for name in row if name not in self._names]
        if unknown:
            raise TableRowError(f"typed table {self.spec.stream!r} has no column {unknown[0]!r} (columns: "
                             f"{', '.join(self.spec.schema.names)}); declare it in delta.table.schema "
                             f"(a new nullable column is added to the table without rewriting it)",
                                column=unknown[0])
        return dict(row)

    def _key_value(self, key: Any) -> Any:
        if isinstance(key, bytes | bytearray | memoryview):
            if not isinstance(self.key_serde, BytesSerde):
                return self.key_serde.from_bytes(bytes(key))
            try:
                return bytes(key).decode("utf-8")
            except UnicodeDecodeError:
                return bytes(key)
        return key

    def _fill_from_key(self, row: dict[str, Any], key: Any) -> None:
        """Key columns the row lacks are taken from the envelope's key (a dict, a sequence or a scalar)."""
        columns = self.spec.key
        if key is None:
            return
        value = self._key_value(key)
        if isinstance(value, dict):
            for column in columns:
                if column in value:
                    row.setdefault(column, value[column])
        elif isinstance(value, list | tuple) and len(columns) > 1:
            if len(value) != len(columns):
                raise TableError(f"typed table {self.spec.stream!r}: a key of {len(value)} values for "
                                 f"{len(columns)} key columns ({', '.join(columns)})")
            for column, item in zip(columns, value, strict=True):
                row.setdefault(column, item)
        elif len(columns) == 1:
            row.setdefault(columns[0], value)

    def send(self, source: str, envelope: OutgoingMessageEnvelope) -> None:
        """Buffer one message as a row (or, in upsert mode, a ``None`` message as the deletion of its key)."""
        if envelope.type != MessageType.USER:
            raise TableError(f"typed table {self.spec.stream!r} got a {MessageType(envelope.type).name} control "
                             f"message; intermediate streams (partition_by) cannot be typed tables")
        buffer = self._buffers.get(source)
        if buffer is None:
            buffer = self._buffers[source] = _Buffer()
        spec = self.spec
        if envelope.message is None:
            if spec.mode != "upsert":
                raise TableError(f"typed table {spec.stream!r} is append-only: a None message (a deletion) needs "
                                 f"delta.table.mode: upsert")
            row: dict[str, Any] = {}
            self._fill_from_key(row, envelope.key)
            buffer.latest[self._key_of(row)] = None
            return
        row = self._row(envelope.message)
        if spec.timestamp_column is not None and row.get(spec.timestamp_column) is None:
            row[spec.timestamp_column] = envelope.timestamp  # None stays null: a row never gets the wall clock
        if spec.message_key_column is not None and row.get(spec.message_key_column) is None \
                and envelope.key is not None:
            row[spec.message_key_column] = self._key_value(envelope.key)
        if spec.mode == "upsert":
            self._fill_from_key(row, envelope.key)
            self._check_row(row)
            buffer.latest[self._key_of(row)] = row
        else:
            self._check_row(row)
            buffer.rows.append(row)

    def _check_row(self, row: dict[str, Any]) -> None:
        """Refuse a row that cannot be written (when it is sent, so the error names the input message):
        a NOT NULL column without a value, or a value its column's type cannot hold."""
        for f in self._input_schema:
            value = row.get(f.name)
            if value is None:
                if not f.nullable:
                    raise TableRowError(f"typed table {self.spec.stream!r}: column {f.name!r} is NOT NULL but the "
                                        "message has no value for it", column=f.name)
                continue
            fast = _FITS_AS_IS.get(f.type)
            if fast is not None and isinstance(value, fast) and not (isinstance(value, bool) and bool not in fast):
                continue
            if isinstance(value, str) and (pa.types.is_timestamp(f.type) or pa.types.is_date(f.type)):
                value = _parse_time(value, f)
            if not _fits(value, f.type):
                raise TableRowError(f"typed table {self.spec.stream!r}: column {f.name!r} ({f.type}) cannot hold "
                                    f"a {type(value).__name__} {payload_preview(value)}", column=f.name)

    def _key_of(self, row: dict[str, Any]) -> tuple[Any, ...]:
        values = []
        for column in self.spec.key:
            value = row.get(column)
            if value is None:
                raise TableError(f"typed table {self.spec.stream!r}: key column {column!r} has no value; give it "
                                 f"in the message or as the message key")
            values.append(_hashable(value))
        return tuple(values)

    def pending(self, source: str) -> int:
        """Rows (or upsert keys) ``source`` buffered since its last flush."""
        buffer = self._buffers.get(source)
        return len(buffer) if buffer is not None else 0

    def abandon(self, source: str) -> None:
        """Forget what ``source`` buffered."""
        self._buffers.pop(source, None)

    # --- building Arrow data ----------------------------------------------------------------
    def _arrow(self, rows: list[dict[str, Any]], deleted: list[bool] | None = None) -> pa.Table:
        """The rows as Arrow in the table's types; a clear error names the first column a value does not fit.

        ``deleted`` marks deletions of a merge: they carry only their key, so NOT NULL is checked on the
        other rows and the result's columns are all nullable.
        """
        columns = []
        for f in self._input_schema:
            values = [r.get(f.name) for r in rows]
            if (pa.types.is_timestamp(f.type) or pa.types.is_date(f.type)) and any(isinstance(v, str) for v in values):
                values = [_parse_time(v, f) if isinstance(v, str) else v for v in values]
            try:
                array = pa.array(values, type=f.type)
            except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError) as exc:
                bad = next((v for v in values if not _fits(v, f.type)), None)
                raise TableRowError(f"typed table {self.spec.stream!r}: column {f.name!r} ({f.type}) cannot hold "
                                    f"a {type(bad).__name__} {payload_preview(bad)} ({type(exc).__name__})",
                                    column=f.name) from exc
            if not f.nullable and array.null_count:
                missing = array.null_count if deleted is None else sum(
                    1 for v, d in zip(values, deleted, strict=True) if v is None and not d)
                if missing:
                    raise TableRowError(f"typed table {self.spec.stream!r}: column {f.name!r} is NOT NULL but "
                                        f"{missing} of {len(values)} rows have no value for it", column=f.name)
            columns.append(array)
        if deleted is None:
            return pa.Table.from_arrays(columns, schema=self._input_schema).cast(self.spec.schema)
        relaxed = pa.schema([pa.field(f.name, f.type, True) for f in self._input_schema])
        target = pa.schema([pa.field(f.name, f.type, True) for f in self.spec.schema])
        return pa.Table.from_arrays(columns, schema=relaxed).cast(target)

    # --- flushing ------------------------------------------------------------------------------
    def _open(self) -> Any:
        if self._table is None:
            self._table = ensure_table(self.location, self.spec, config=self._config, system=self._system,
                                       log_retention=self._log_retention)
        else:
            with storage_errors(self.location.uri):
                self._table.update_incremental()
        return self._table

    def flush(self, source: str, transaction: Transaction | None) -> None:
        """Commit what ``source`` buffered: one append or one merge, carrying ``transaction`` when given.

        Nothing is committed for a transaction the table already records (a replay). The buffer is kept
        when the commit fails, so a later flush may try again.
        """
        buffer = self._buffers.get(source)
        if buffer is None or not len(buffer):
            self._buffers.pop(source, None)
            return
        from deltalake.exceptions import CommitFailedError

        attempts = 0
        while True:
            table = self._open()
            if transaction is not None:
                done = table.transaction_version(transaction.app_id)
                if done is not None and done >= transaction.version:
                    self.stats["skipped"] += 1
                    break
            try:
                if self.spec.mode == "append":
                    self._append(table, buffer.rows, source, transaction)
                else:
                    self._merge(table, buffer.latest, source, transaction)
                break
            except CommitFailedError:
                # Another writer committed first (a concurrent merge, or this very transaction): re-read, check
                # the transaction again and re-run the commit on the new snapshot.
                attempts += 1
                self.stats["conflicts"] += 1
                if attempts > self.commit_retries:
                    raise
                time.sleep(min(0.05 * attempts, 1.0))
        self._buffers.pop(source, None)

    def _properties(self, source: str, transaction: Transaction | None) -> Any:
        from deltalake.transaction import CommitProperties
        from deltalake.transaction import Transaction as DeltaTransaction

        return CommitProperties(
            max_commit_retries=self.commit_retries,
            app_transactions=[DeltaTransaction(transaction.app_id, transaction.version)] if transaction else None,
            custom_metadata={"sparza.producer": source})

    def _append(self, table: Any, rows: list[dict[str, Any]], source: str, transaction: Transaction | None) -> None:
        from deltalake import write_deltalake

        data = self._arrow(rows)
        with storage_errors(self.location.uri):
            write_deltalake(table, data, mode="append", commit_properties=self._properties(source, transaction))
        self.stats["commits"] += 1
        self.stats["rows"] += data.num_rows

    def _merge(self, table: Any, latest: dict[tuple[Any, ...], dict[str, Any] | None], source: str,
               transaction: Transaction | None) -> None:
        rows: list[dict[str, Any]] = []
        deleted: list[bool] = []
        for key, row in latest.items():
            if row is None:
                rows.append(dict(zip(self.spec.key, key, strict=True)))
                deleted.append(True)
            else:
                rows.append(row)
                deleted.append(False)
        data = self._arrow(rows, deleted if any(deleted) else None)
        data = data.append_column(pa.field(_DELETE, pa.bool_(), nullable=False), pa.array(deleted, pa.bool_()))
        names = self.spec.schema.names
        predicate = " AND ".join(f't."{c}" = s."{c}"' for c in self.spec.key)
        values = {f'"{c}"': f's."{c}"' for c in names}
        with storage_errors(self.location.uri):
            (table.merge(data, predicate, source_alias="s", target_alias="t",
                         commit_properties=self._properties(source, transaction))
             .when_matched_delete(predicate=f's."{_DELETE}"')
             .when_matched_update(updates=values)
             .when_not_matched_insert(updates=values, predicate=f'NOT s."{_DELETE}"')
             .execute())
        self.stats["commits"] += 1
        self.stats["rows"] += len(rows)


def _parse_time(text: str, f: pa.Field) -> Any:
    """ISO-8601 text (what JSON carries) for a date or timestamp column; naive times are UTC."""
    import datetime as dt

    try:
        if pa.types.is_date(f.type):
            return dt.date.fromisoformat(text.strip()[:10])
        parsed = dt.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError as exc:
        raise TableError(f"column {f.name!r} ({f.type}) cannot hold {text!r}: not an ISO-8601 date/time") from exc
    if f.type.tz is not None and parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=dt.UTC)
    return parsed


# Python types that always fit a column of these Arrow types (anything else is checked by converting it).
_FITS_AS_IS: dict[pa.DataType, tuple[type, ...]] = {
    pa.string(): (str,), pa.int64(): (int,), pa.float64(): (float, int), pa.float32(): (float, int),
    pa.bool_(): (bool,), pa.binary(): (bytes,),
}


def _fits(value: Any, arrow_type: pa.DataType) -> bool:
    try:
        pa.array([value], type=arrow_type)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
        return False
    return True
