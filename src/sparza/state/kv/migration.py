"""Opening a store whose format may have changed: read it as written, convert it once, or refuse.

:func:`reconcile` runs when :func:`~sparza.state.kv.open_store` opens a store. It compares the format the store
recorded (:mod:`sparza.state.kv.format`) with the one its config asks for, side by side (keys, values):

* the same format: nothing to do;
* the same Avro schema but for documentation, defaults or aliases (same binary encoding): the new schema is
  recorded, no value is touched;
* a compatible schema change (:func:`~sparza.state.kv.evolution.schema_problems` finds nothing: fields added
  with a default, fields removed, types widened, fields renamed with an alias): every value is rewritten in the
  new schema, once, when the store opens for writing (a read-only open reads the old values resolved into the
  new schema instead);
* a serde changed (``json`` → ``avro``...) with ``stores.<st>.<side>.migrate.from`` naming the recorded serde:
  every value is read with the old serde and written with the new one;
* anything else (an incompatible schema change, a serde changed without that declaration, a declaration that
  does not match the record): :class:`~sparza.state.kv.format.StoreFormatError`, naming the store, the key to
  change and the field, before any value is read.

Why every value is rewritten at open instead of tagging each value with its schema version (the Confluent wire
format): values stay plain Avro or JSON of the one schema the store records (any tool reading it with that
schema reads them right), reads never pay a resolution, and nothing about the on-disk bytes changes for stores
whose schema never changes; the cost is one pass over the store when a schema changes (measured in
``bench/state_schema.py``, see docs/state.md). The pass happens inside the task's batch, so a failure leaves
only a dirty directory, which the runtime rebuilds from the committed snapshot before trying again.

A store with no record (empty, or written before sparza recorded formats) gets the configured format recorded;
when it holds values, the first few are decoded with the configured serdes first, exactly (an Avro value must
use all its bytes), and a store they do not fit is refused rather than misread.
"""

from __future__ import annotations

import io
import logging
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparza.errors import SerdeError, payload_preview
from sparza.serde import AvroSerde, JsonSerde, Serde, conform_to_schema, parse_avro_schema
from sparza.state.kv.api import SerdeStore
from sparza.state.kv.evolution import schema_problems
from sparza.state.kv.format import (
    RecordedFormat,
    StoreFormat,
    StoreFormatError,
    ValueFormat,
    configured_format,
    declared_migration,
    write_format,
)

__all__ = ["SAMPLE_ENTRIES", "FormatPlan", "check_store_format", "plan_format", "reconcile"]

_log = logging.getLogger(__name__)
SAMPLE_ENTRIES = 64
"""Entries of a store without a recorded format decoded with the configured serdes before it is trusted."""
_WRITE_BATCH = 10_000
_SIDES = (("key", "keys"), ("msg", "values"))


def _config_key(store: str, which: str, what: str) -> str:
    return f"stores.{store}.{which}.{what}"


@dataclass(frozen=True, slots=True)
class FormatPlan:
    """What opening a store must do: ``old`` is the format its bytes are in, ``new`` the configured one; the sides
    in ``rewrite`` have values to convert; ``check_sample``: the store had no record and must be sampled."""

    old: StoreFormat
    new: StoreFormat
    rewrite: frozenset[str] = frozenset()
    check_sample: bool = False

    @property
    def changes(self) -> bool:
        """True when the record must be written (a new or changed format)."""
        return self.check_sample or not self.old.same_as(self.new)


def _schema_side(store: str, which: str, old: ValueFormat, new: ValueFormat) -> bool:
    """Whether the side must be rewritten going from ``old`` to ``new`` (same serde, schemas may differ); raises
    when the new schema cannot read the old values."""
    if old.schema is None and new.schema is None:
        return False
    if new.schema is None:  # json that had a schema and has none now: the values are JSON already
        return False
    if old.schema is None:  # json gains a schema: every value must fit it, and gets its defaults
        return True
    problems = schema_problems(old.schema, new.schema)
    if problems:
        what = dict(_SIDES)[which]
        raise StoreFormatError(
            store, _config_key(store, which, "schema"),
            f"the new {_config_key(store, which, 'schema')} cannot read the {what} the store holds (written with "
            f"{old.describe()}): " + "; ".join(str(p) for p in problems) + ". Make the change compatible (a new "
            "field needs a default, a renamed one an alias, types may only widen), or keep the old schema",
            field=problems[0].path or None)
    from fastavro.schema import to_parsing_canonical_form

    return bool(to_parsing_canonical_form(parse_avro_schema(old.schema))
                != to_parsing_canonical_form(parse_avro_schema(new.schema)))


def plan_format(store: str, recorded: RecordedFormat | None, configured: StoreFormat,
                declared: dict[str, ValueFormat], *, empty: bool) -> FormatPlan:
    """Decide what opening store ``store`` must do (see the module docstring); raises :class:`StoreFormatError`
    for a change sparza will not make. ``declared``: the sides a ``migrate.from`` key declares; ``empty``: the
    store holds nothing."""
    if recorded is not None and recorded.migrating_to is not None:
        raise StoreFormatError(
            store, _config_key(store, "msg", "serde"),
            f"its values were being converted from {recorded.format.msg.describe()} to "
            f"{recorded.migrating_to.msg.describe()} when the process stopped, so it holds values of both; rebuild "
            "it from its last snapshot (the task runtime does so by itself; elsewhere, restore the snapshot)")
    if recorded is None:
        if empty:
            return FormatPlan(configured, configured)
        if not declared:
            return FormatPlan(configured, configured, check_sample=True)
        old = StoreFormat(declared.get("key", configured.key), declared.get("msg", configured.msg))
        for which, what in _SIDES:
            side = old.side(which)
            if side.serde == "avro" and side.schema is None:
                raise StoreFormatError(
                    store, _config_key(store, which, "migrate.from.schema"),
                    f"it has no record of the Avro schema its {what} were written with (written before sparza "
                    f"recorded store formats): give it in {_config_key(store, which, 'migrate.from.schema')}")
        recorded = RecordedFormat(old)
    old = recorded.format
    rewrite: set[str] = set()
    for which, what in _SIDES:
        was, wanted = old.side(which), configured.side(which)
        if was.same_as(wanted):
            continue
        if was.serde == wanted.serde:
            if _schema_side(store, which, was, wanted):
                rewrite.add(which)
            continue
        serde_key = _config_key(store, which, "serde")
        from_key = _config_key(store, which, "migrate.from")
        claim = declared.get(which)
        if claim is None:
            raise StoreFormatError(
                store, serde_key,
                f"its {what} were written with {was.describe()} (recorded with the store), but {serde_key} is now "
                f"{wanted.describe()}: they would be misread. Set {serde_key} back to {was.serde}, or convert every "
                f"one of them when the store next opens by declaring {from_key}: {was.serde} (each is read as "
                f"{was.serde} and written as {wanted.serde})")
        if claim.serde != was.serde or (claim.schema is not None and not claim.same_as(was)):
            raise StoreFormatError(
                store, from_key,
                f"{from_key} says its {what} were written with {claim.describe()}, but the store records "
                f"{was.describe()}: set {from_key} to {was.serde} (or remove it)")
        rewrite.add(which)
    return FormatPlan(old, configured, frozenset(rewrite))


def check_store_format(store: str, config: Mapping[str, str], recorded: RecordedFormat | None) -> FormatPlan:
    """What opening store ``store`` with ``config`` would do to a store that recorded ``recorded``, without opening
    it: raises :class:`StoreFormatError` when it would be refused. For checks before a job starts (a savepoint's
    or a task checkpoint's snapshots, whose format :meth:`~sparza.state.backup.StateBackup.read_file` reads)."""
    return plan_format(store, recorded, configured_format(store, config), declared_migration(store, config),
                       empty=recorded is None)


class _Converter:
    """Turns the bytes of one side from the old format into the new one (and reads them as the new one)."""

    def __init__(self, old: ValueFormat, new: ValueFormat) -> None:
        self.old, self.new = old, new
        if old.serde == new.serde == "avro":
            self._read: Serde = AvroSerde(new.schema, old.schema)  # Avro's resolution, by fastavro
        elif old.serde == new.serde == "json" and old.schema is not None and new.schema is not None:
            self._read = _ResolvingJson(old.schema, new.schema)
        else:
            self._read = old.serde_object()
        self._write = new.serde_object()
        # Into Avro from another serde: fields the schema lacks are refused, not dropped as an Avro writer would.
        self._fit = parse_avro_schema(new.schema) if new.serde == "avro" and old.serde != "avro" else None
        self._appends = old.serde == new.serde == "avro" and _only_appends(old.schema, new.schema)
        self._suffix: bytes | None = None
        self._checked = 0

    def read(self, data: bytes) -> Any:
        """The old bytes as a value of the new format."""
        return self._read.from_bytes(data)

    def _decoded_and_encoded(self, data: bytes) -> bytes:
        value = self.read(data)
        if self._fit is not None:
            value = conform_to_schema(value, self._fit)
        return self._write.to_bytes(value)

    def convert(self, data: bytes) -> bytes:
        """The old bytes rewritten in the new format."""
        if not self._appends:
            return self._decoded_and_encoded(data)
        if self._checked >= _SUFFIX_CHECKS and self._suffix is not None:
            return data + self._suffix
        # Fields added at the end with defaults: the new bytes are the old ones followed by the defaults' encoding
        # (an Avro record is its fields' encodings one after the other). The first values go the long way and
        # must agree, or every value does.
        full = self._decoded_and_encoded(data)
        suffix = full[len(data):] if full.startswith(data) else None
        if suffix is None or (self._suffix is not None and suffix != self._suffix):
            self._appends = False
            return full
        self._suffix = suffix
        self._checked += 1
        return full


_SUFFIX_CHECKS = 16
"""Values converted the long way before the appended-defaults shortcut is trusted for the rest."""


def _only_appends(old: Any, new: Any) -> bool:
    """True when Avro record schema ``new`` is ``old`` with fields appended at its end, each with a default (the
    same binary encoding up to there: same field names, types and order)."""
    from fastavro.schema import to_parsing_canonical_form

    if not (isinstance(old, dict) and isinstance(new, dict) and old.get("type") == new.get("type") == "record"):
        return False
    old_fields, new_fields = old.get("fields", []), new.get("fields", [])
    if len(new_fields) <= len(old_fields) or not all("default" in f for f in new_fields[len(old_fields):]):
        return False
    if [f["name"] for f in old_fields] != [f["name"] for f in new_fields[:len(old_fields)]]:
        return False
    try:
        prefix = to_parsing_canonical_form(parse_avro_schema({**new, "fields": new_fields[:len(old_fields)]}))
        return bool(prefix == to_parsing_canonical_form(parse_avro_schema(old)))
    except SerdeError:
        return False


class _ResolvingJson:
    """Reads JSON values written under one schema as values of another: through Avro's resolution (the value is
    encoded with the old schema and read back with both), so JSON stores evolve by exactly Avro's rules."""

    name = "json"

    def __init__(self, writer: Any, reader: Any) -> None:
        self._plain = JsonSerde()
        self._writer = parse_avro_schema(writer)
        self._reader = parse_avro_schema(reader)

    def to_bytes(self, obj: Any) -> bytes:
        raise SerdeError("a resolving JSON reader does not write")

    def from_bytes(self, data: bytes) -> Any:
        import fastavro

        value = conform_to_schema(self._plain.from_bytes(data), self._writer)
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, self._writer, value)
        buf.seek(0)
        return fastavro.schemaless_reader(buf, self._writer, self._reader)


class _ReadOnlyResolved:
    """A read-only store's value serde: values of the old format, read as the new one."""

    def __init__(self, converter: _Converter) -> None:
        self._converter = converter
        self.name = converter.new.serde

    def to_bytes(self, obj: Any) -> bytes:
        raise SerdeError("a store opened read-only writes nothing")

    def from_bytes(self, data: bytes) -> Any:
        return self._converter.read(data)


def _exact(serde: Serde, data: bytes) -> None:
    """Decode ``data`` with ``serde``, and for Avro check every byte was used (Avro has no framing: bytes of
    another format often decode to something, but rarely to exactly their length)."""
    if isinstance(serde, AvroSerde):
        import fastavro

        buf = io.BytesIO(data)
        try:
            fastavro.schemaless_reader(buf, parse_avro_schema(serde.schema), None)
        except Exception as exc:
            raise SerdeError(f"not Avro of the schema: {exc}") from exc
        if buf.tell() != len(data):
            raise SerdeError(f"not Avro of the schema: the value uses {buf.tell()} of its {len(data)} bytes")
        return
    serde.from_bytes(data)


def _check_sample(store: SerdeStore, fmt: StoreFormat, entries: Iterator[tuple[bytes, bytes]]) -> None:
    sides = {"key": fmt.key.serde_object(), "msg": fmt.msg.serde_object()}
    for n, (key, value) in enumerate(entries):
        if n >= SAMPLE_ENTRIES:
            return
        for which, data in (("key", key), ("msg", value)):
            try:
                _exact(sides[which], data)
            except SerdeError as exc:
                what = dict(_SIDES)[which]
                raise StoreFormatError(
                    store.name, _config_key(store.name, which, "serde"),
                    f"it has no record of its format (written before sparza recorded store formats) and its {what} "
                    f"are not {fmt.side(which).describe()} as {_config_key(store.name, which, 'serde')} says "
                    f"({which} {payload_preview(key)}: {exc}). Set {_config_key(store.name, which, 'serde')} (and "
                    f"its schema) to what they were written with, or declare it in "
                    f"{_config_key(store.name, which, 'migrate.from')} (and "
                    f"{_config_key(store.name, which, 'migrate.from.schema')}) to convert them") from exc


def _rewrite(store: SerdeStore, plan: FormatPlan) -> int:
    """Rewrite every entry of ``store`` from ``plan.old`` into ``plan.new``; returns how many."""
    keys = _Converter(plan.old.key, plan.new.key) if "key" in plan.rewrite else None
    values = _Converter(plan.old.msg, plan.new.msg) if "msg" in plan.rewrite else None

    def convert(side: str, conv: _Converter | None, key: bytes, data: bytes) -> bytes:
        if conv is None:
            return data
        try:
            return conv.convert(data)
        except SerdeError as exc:
            raise StoreFormatError(
                store.name, _config_key(store.name, side, "serde"),
                f"the {'key' if side == 'key' else 'value'} of key {payload_preview(key)} cannot be converted from "
                f"{conv.old.describe()} to {conv.new.describe()}: {exc}. Nothing was committed; fix the value's "
                "format (or the schema) and start again") from exc

    count = 0
    if keys is None:
        batch: list[tuple[bytes, bytes]] = []
        for key, value in store._iter_raw(None, None):
            batch.append((key, convert("msg", values, key, value)))
            if len(batch) >= _WRITE_BATCH:
                store._write_raw(batch, [])
                count += len(batch)
                batch = []
        store._write_raw(batch, [])
        return count + len(batch)
    # Keys change bytes (and so order): every new key is computed before any is written.
    converted = [(convert("key", keys, key, key), convert("msg", values, key, value), key)
                 for key, value in store._iter_raw(None, None)]
    new_keys = {new_key for new_key, _, _ in converted}
    if len(new_keys) != len(converted):
        raise StoreFormatError(store.name, _config_key(store.name, "key", "schema"),
                               f"converting its keys to {plan.new.key.describe()} makes some of them equal "
                               "(a field removed from the key?): keys must stay distinct; keep the old key schema")
    store._write_raw([], [old for _, _, old in converted if old not in new_keys])
    for start in range(0, len(converted), _WRITE_BATCH):
        store._write_raw([(k, v) for k, v, _ in converted[start:start + _WRITE_BATCH]], [])
    return len(converted)


def reconcile(store: SerdeStore, recorded: RecordedFormat | None, configured: StoreFormat,
              declared: dict[str, ValueFormat], *, record_in: Path | None) -> StoreFormat:
    """Bring ``store`` (opened with the configured serdes) to the configured format, or make it read the one it
    has; returns the format its bytes are in now, which its checkpoints record.

    ``record_in``: the directory whose ``STORE-FORMAT.json`` follows the store's live bytes (a RocksDB dir), None
    for a store that keeps it only in memory until its next checkpoint. A read-only store is never converted:
    it reads old values resolved into the new schema, or, when the change is one sparza refuses, as they were
    written (a tool reading committed state must read it, never misread it).
    """
    empty = next(store._iter_raw(None, None), None) is None
    try:
        plan = plan_format(store.name, recorded, configured, declared, empty=empty)
    except StoreFormatError:
        if not store.read_only or recorded is None or recorded.migrating_to is not None:
            raise
        plan = FormatPlan(recorded.format, recorded.format)
        store.key_serde, store.msg_serde = plan.old.key.serde_object(), plan.old.msg.serde_object()
        _log.warning("store '%s' is read as written (%s), not as its config says: the config's format cannot "
                     "read it", store.name, plan.old.msg.describe())
    if plan.check_sample:
        _check_sample(store, plan.new, store._iter_raw(None, None))
    if store.read_only:
        if not plan.rewrite:
            return plan.new
        if "key" in plan.rewrite:
            store.key_serde = plan.old.key.serde_object()  # lookups must encode keys as stored
            store.msg_serde = plan.old.msg.serde_object()
            return plan.old
        store.msg_serde = _ReadOnlyResolved(_Converter(plan.old.msg, plan.new.msg))
        return plan.old
    if plan.rewrite:
        if record_in is not None:
            write_format(record_in, store.name, plan.old, migrating_to=plan.new)
        started = time.monotonic()
        count = _rewrite(store, plan)
        store.compact()  # every value has an overwritten version: measured 1-2 s per million values (bench)
        _log.info("store '%s': converted %d entries from %s to %s in %.1f s", store.name, count,
                  " / ".join(f.describe() for f in (plan.old.key, plan.old.msg)),
                  " / ".join(f.describe() for f in (plan.new.key, plan.new.msg)), time.monotonic() - started)
    if record_in is not None and (plan.changes or recorded is None):
        store.flush()
        write_format(record_in, store.name, plan.new)
    return plan.new
