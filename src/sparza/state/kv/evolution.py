"""Can a new Avro schema read what an old one wrote? Avro's schema-resolution rules, as a check that names fields.

A store's values stay in the schema they were written with until they are rewritten, so before a store is
opened with a new schema (``stores.<st>.msg.schema``) every value must be readable through it. The rules are
the Avro specification's (fastavro applies the same ones when it reads): fields are matched by name or by one
of the new field's ``aliases``; a field that is new must have a ``default``; a field that is gone is skipped;
types may only widen (``int`` → ``long`` → ``float`` → ``double``, ``string`` ↔ ``bytes``); a named type keeps
its name or lists the old one in its ``aliases``; an enum keeps every symbol old values may hold (or has a
``default``); a union of the new schema must have a branch for each old type. On top of Avro's rules, a changed
``logicalType`` is refused: the stored numbers would be read in another unit without any error.

:func:`schema_problems` returns every problem with the path of the field it concerns, so an error can say
which field of which store to fix.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

__all__ = ["SchemaProblem", "schema_problems"]

_PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
_NAMED = frozenset({"record", "error", "enum", "fixed"})
_WIDENS_TO: dict[str, frozenset[str]] = {
    "int": frozenset({"long", "float", "double"}),
    "long": frozenset({"float", "double"}),
    "float": frozenset({"double"}),
    "string": frozenset({"bytes"}),
    "bytes": frozenset({"string"}),
}


@dataclass(frozen=True, slots=True)
class SchemaProblem:
    """One reason the new schema cannot read old values: ``path`` is the field (``address.zip``, ``tags[]`` for
    array items, ``counts{}`` for map values, ``""`` for the value itself) and ``reason`` says what changed."""

    path: str
    reason: str

    def __str__(self) -> str:
        where = f"field '{self.path}'" if self.path else "the value itself"
        return f"{where}: {self.reason}"


class _Names:
    """The named types (records, enums, fixed) of one schema by full name, to follow references."""

    def __init__(self, schema: Any) -> None:
        self.types: dict[str, tuple[dict[str, Any], str | None]] = {}
        self._collect(schema, None)

    @staticmethod
    def full_name(name: str, namespace: str | None) -> str:
        return name if "." in name or not namespace else f"{namespace}.{name}"

    def _collect(self, schema: Any, namespace: str | None) -> None:
        if isinstance(schema, list):
            for branch in schema:
                self._collect(branch, namespace)
            return
        if not isinstance(schema, dict):
            return
        kind = schema.get("type")
        if isinstance(kind, dict | list):
            self._collect(kind, namespace)
            return
        if kind in _NAMED:
            full = self.full_name(str(schema["name"]), schema.get("namespace", namespace))
            inner = full.rpartition(".")[0] or None
            self.types[full] = (schema, inner)
            for field in schema.get("fields", ()) if kind in ("record", "error") else ():
                self._collect(field["type"], inner)
        elif kind == "array":
            self._collect(schema["items"], namespace)
        elif kind == "map":
            self._collect(schema["values"], namespace)

    def resolve(self, schema: Any, namespace: str | None) -> tuple[Any, str | None]:
        """``schema`` with a reference to a named type replaced by its definition, and the namespace it is in."""
        if isinstance(schema, dict) and isinstance(schema.get("type"), dict | list):
            return self.resolve(schema["type"], namespace)
        if isinstance(schema, str) and schema not in _PRIMITIVES:
            for full in (self.full_name(schema, namespace), schema):
                if full in self.types:
                    return self.types[full]
            raise ValueError(f"unknown Avro type {schema!r}")
        if isinstance(schema, dict) and schema.get("type") in _NAMED:
            full = self.full_name(str(schema["name"]), schema.get("namespace", namespace))
            return schema, full.rpartition(".")[0] or None
        return schema, namespace


def _kind(schema: Any) -> str:
    if isinstance(schema, list):
        return "union"
    if isinstance(schema, str):
        return schema
    kind = schema.get("type")
    return "error" if kind == "error" else str(kind)


def _logical(schema: Any) -> tuple[Any, ...] | None:
    if not isinstance(schema, dict) or "logicalType" not in schema:
        return None
    return (schema["logicalType"], schema.get("precision"), schema.get("scale"))


def _short(schema: Any) -> str:
    """A type as an error shows it: ``long``, ``record Count``, ``union [null, string]``."""
    kind = _kind(schema)
    if kind == "union":
        return "union [" + ", ".join(_short(b) for b in schema) + "]"
    if kind in _NAMED:
        return f"{'record' if kind == 'error' else kind} {schema['name']}"
    if kind in ("array", "map"):
        return kind
    logical = _logical(schema)
    return f"{kind} ({logical[0]})" if logical else kind


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


class _Checker:
    def __init__(self, writer: Any, reader: Any) -> None:
        self.writer_names = _Names(writer)
        self.reader_names = _Names(reader)
        self._active: set[tuple[str, str]] = set()  # record pairs being checked: a recursive schema ends there

    def check(self, writer: Any, w_ns: str | None, reader: Any, r_ns: str | None, path: str) -> list[SchemaProblem]:
        """Why ``reader`` (in namespace ``r_ns``) cannot read what ``writer`` wrote, at ``path``."""
        return list(self._check(writer, w_ns, reader, r_ns, path))

    def _check(self, writer: Any, w_ns: str | None, reader: Any, r_ns: str | None,
               path: str) -> Iterator[SchemaProblem]:
        writer, w_ns = self.writer_names.resolve(writer, w_ns)
        reader, r_ns = self.reader_names.resolve(reader, r_ns)
        w_kind, r_kind = _kind(writer), _kind(reader)
        if w_kind == "union":
            for branch in writer:
                branch_problems = self.check(branch, w_ns, reader, r_ns, path)
                if branch_problems and r_kind != "union":
                    yield SchemaProblem(path, f"old values may be {_short(self._deref_w(branch, w_ns))} (a branch of "
                                              f"the old {_short(writer)}), which the new type {_short(reader)} "
                                              "cannot hold")
                else:
                    yield from branch_problems
            return
        if r_kind == "union":
            for branch in reader:
                if not self.check(writer, w_ns, branch, r_ns, path):
                    return
            matching = self._same_kind_branch(writer, w_ns, reader, r_ns)
            if matching is not None:  # the branch meant for it, with its own problems
                yield from self.check(writer, w_ns, matching, r_ns, path)
                return
            yield SchemaProblem(path, f"old values are {_short(writer)}, which is not a branch of the new "
                                      f"{_short(reader)} (add that branch)")
            return
        if w_kind in _PRIMITIVES and r_kind in _PRIMITIVES:
            if w_kind != r_kind and r_kind not in _WIDENS_TO.get(w_kind, ()):
                narrowed = w_kind in _WIDENS_TO.get(r_kind, ())
                yield SchemaProblem(path, f"changes type from {w_kind} to {r_kind} ("
                                          + ("a narrowing: old values may not fit; " if narrowed else "")
                                          + "only widening is allowed: int → long → float → double, "
                                            "string ↔ bytes)")
            elif _logical(writer) != _logical(reader):
                yield SchemaProblem(path, f"changes logical type from {_short(writer)} to {_short(reader)} (the "
                                          "stored values would be read in another unit; keep the logical type or "
                                          "add a new field)")
            return
        if w_kind != r_kind and not (w_kind in ("record", "error") and r_kind in ("record", "error")):
            yield SchemaProblem(path, f"changes type from {_short(writer)} to {_short(reader)}")
            return
        if w_kind == "array":
            yield from self.check(writer["items"], w_ns, reader["items"], r_ns, path + "[]")
            return
        if w_kind == "map":
            yield from self.check(writer["values"], w_ns, reader["values"], r_ns, path + "{}")
            return
        yield from self._named(writer, w_ns, reader, r_ns, path, w_kind)

    def _deref_w(self, schema: Any, ns: str | None) -> Any:
        return self.writer_names.resolve(schema, ns)[0]

    def _same_kind_branch(self, writer: Any, w_ns: str | None, union: list[Any], r_ns: str | None) -> Any:
        """The branch of ``union`` of the writer's kind (and name, for named types), to report its problems."""
        w_kind = _kind(writer)
        for branch in union:
            resolved, _ = self.reader_names.resolve(branch, r_ns)
            if _kind(resolved) == w_kind and (w_kind not in _NAMED or self._names_match(writer, resolved)):
                return branch
        return None

    @staticmethod
    def _names_match(writer: dict[str, Any], reader: dict[str, Any]) -> bool:
        w_name = str(writer["name"]).rpartition(".")[2]
        r_name = str(reader["name"]).rpartition(".")[2]
        aliases = {str(a).rpartition(".")[2] for a in reader.get("aliases", ())}
        return w_name == r_name or w_name in aliases

    def _named(self, writer: dict[str, Any], w_ns: str | None, reader: dict[str, Any], r_ns: str | None,
               path: str, kind: str) -> Iterator[SchemaProblem]:
        if not self._names_match(writer, reader):
            yield SchemaProblem(path, f"{_short(writer)} is now {_short(reader)} (a renamed type must list its old "
                                      f"name: \"aliases\": [\"{writer['name']}\"])")
            return
        if kind == "fixed":
            if writer.get("size") != reader.get("size"):
                yield SchemaProblem(path, f"fixed {reader['name']} changes size from {writer.get('size')} to "
                                          f"{reader.get('size')}")
            elif _logical(writer) != _logical(reader):
                yield SchemaProblem(path, f"changes logical type from {_short(writer)} to {_short(reader)}")
            return
        if kind == "enum":
            lost = [s for s in writer.get("symbols", ()) if s not in set(reader.get("symbols", ()))]
            if lost and "default" not in reader:
                yield SchemaProblem(path, f"enum {reader['name']} drops symbols {', '.join(lost)}, which old values "
                                          "may hold (keep them, or give the enum a \"default\" symbol)")
            return
        pair = (str(writer["name"]), str(reader["name"]))
        if pair in self._active:
            return  # a recursive reference: this pair is being checked further up
        self._active.add(pair)
        try:
            yield from self._fields(writer, w_ns, reader, r_ns, path)
        finally:
            self._active.discard(pair)

    def _fields(self, writer: dict[str, Any], w_ns: str | None, reader: dict[str, Any], r_ns: str | None,
                path: str) -> Iterator[SchemaProblem]:
        old_fields = {str(f["name"]): f for f in writer.get("fields", ())}
        matched: set[str] = set()
        for field in reader.get("fields", ()):
            name = str(field["name"])
            old = old_fields.get(name)
            if old is None:
                old = next((old_fields[a] for a in field.get("aliases", ()) if a in old_fields), None)
            field_path = _join(path, name)
            if old is None:
                if "default" not in field:
                    gone = [n for n in old_fields if n not in matched and n not in
                            {str(f["name"]) for f in reader.get("fields", ())}]
                    hint = (f"; if it is a renamed field ({', '.join(repr(g) for g in gone)} "
                            f"{'is' if len(gone) == 1 else 'are'} gone), list the old name in its \"aliases\"") \
                        if gone else ""
                    yield SchemaProblem(field_path, "is new and has no \"default\", so old values cannot be read "
                                                    f"(give it a default{hint})")
                continue
            matched.add(str(old["name"]))
            yield from self.check(old["type"], w_ns, field["type"], r_ns, field_path)


def schema_problems(writer: Any, reader: Any) -> list[SchemaProblem]:
    """Why values written with Avro schema ``writer`` cannot be read with ``reader`` (empty when they can).

    Both are schemas as JSON values (dicts, lists, names), as written in config, not fastavro-parsed ones.
    """
    return _Checker(writer, reader).check(writer, None, reader, None, "")
