"""The demo application: Wikipedia edits joined with user profiles, counted per page and minute.

Stage 1 (``main``) parses each edit and repartitions by page (``partition_by``). Stage 2
(``by-page``) joins the editor's profile from the broadcast adjunct store ``profiles`` (filled from
the CDC stream, bootstrapped before the first edit), then counts edits, bytes changed and edits by
bots per page in 1-minute event-time tumbling windows kept in RocksDB, and sends each window as an
Avro record to the Azure blob producer. Edits by users without a profile (deleted accounts) are
dropped by the inner join.

Stage 1 also keeps each user's **editing sessions** (edits of one user with no pause of 30 minutes of event
time), when ``app.wikipedia.sessions.table`` names a typed table: the edits stream is partitioned by user,
so a user's edits are all in one task and no repartition is needed. Sessions merge when an edit bridges
two; each session is upserted into the table by ``(user, window_start)`` and a session merged into an
earlier one has its row deleted.
"""

from __future__ import annotations

from typing import Any

import msgspec
import pyarrow as pa

from sparza.api import StreamApplication, WindowPane, Windows
from sparza.serde import AvroSerde

__all__ = ["PAGE_STATS_KEY", "PAGE_STATS_SCHEMA", "SESSION_GAP_MS", "USER_SESSIONS_KEY", "USER_SESSIONS_SCHEMA",
           "WINDOW_MS", "WINDOW_SCHEMA", "WikipediaPageStats", "join_profile", "parse_edit", "window_record"]

WINDOW_MS = 60_000
"""Tumbling window size: one minute of event time."""

WINDOW_SCHEMA: dict[str, Any] = {
    "type": "record", "name": "PageWindow", "namespace": "sparza.demo",
    "doc": "Edits of one page in one 1-minute event-time window.",
    "fields": [
        {"name": "page", "type": "string"},
        {"name": "window_start", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "window_end", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "edits", "type": "int"},
        {"name": "bytes_changed", "type": "long"},
        {"name": "bot_edits", "type": "int"},
    ],
}
"""Avro schema of one window result."""

PAGE_STATS_SCHEMA = pa.schema([
    pa.field("page", pa.string(), nullable=False),
    pa.field("window_start", pa.timestamp("ms", tz="UTC"), nullable=False),
    pa.field("window_end", pa.timestamp("ms", tz="UTC")),
    pa.field("edits", pa.int64()),
    pa.field("bytes_changed", pa.int64()),
    pa.field("bot_edits", pa.int64()),
])
"""Columns of the page-statistics table (``app.wikipedia.table``): one row per page and window."""

PAGE_STATS_KEY = ["page", "window_start"]
"""The table's key: a replayed or late-updated window replaces its row (upsert)."""


SESSION_GAP_MS = 30 * 60_000
"""A user's editing session ends after 30 minutes (of event time) without an edit."""

USER_SESSIONS_SCHEMA = pa.schema([
    pa.field("user", pa.string(), nullable=False),
    pa.field("window_start", pa.timestamp("ms", tz="UTC"), nullable=False),
    pa.field("window_end", pa.timestamp("ms", tz="UTC")),
    pa.field("pane", pa.string()),
    pa.field("pane_index", pa.int64()),
    pa.field("edits", pa.int64()),
    pa.field("bytes_changed", pa.int64()),
])
"""Columns of the editing-sessions table (``app.wikipedia.sessions.table``): one row per user and session; the
session ends at ``window_end`` (its last edit plus the gap); ``pane`` says which firing wrote the row."""

USER_SESSIONS_KEY = ["user", "window_start"]
"""The sessions table's key: a session's newer pane replaces its row, a merged-away session's row is deleted."""


_decode_json = msgspec.json.Decoder().decode


def parse_edit(raw: bytes) -> list[dict[str, Any]]:
    """One edit from its JSON bytes, normalized; a malformed message yields nothing (it is skipped).

    Decoded with msgspec (the JSON library sparza's own serdes use): several times faster than
    ``json.loads`` per message, which is most of this stage's own work."""
    try:
        obj = _decode_json(raw)
        return [{"page": str(obj["page"]), "user": str(obj["user"]), "bytes_changed": int(obj["bytes_changed"])}]
    except (msgspec.DecodeError, ValueError, KeyError, TypeError):
        return []


def join_profile(edit: dict[str, Any], profile: dict[str, Any]) -> dict[str, Any]:
    """The edit with its editor's country and bot flag."""
    return {**edit, "country": profile.get("country"), "bot": bool(profile.get("bot"))}


def _fold(edit: dict[str, Any], acc: list[int]) -> list[int]:
    return [acc[0] + 1, acc[1] + int(edit["bytes_changed"]), acc[2] + (1 if edit["bot"] else 0)]


def _session_fold(edit: dict[str, Any], acc: dict[str, int]) -> dict[str, int]:
    return {"edits": acc["edits"] + 1, "bytes_changed": acc["bytes_changed"] + int(edit["bytes_changed"])}


def _session_merge(a: dict[str, int], b: dict[str, int]) -> dict[str, int]:
    return {"edits": a["edits"] + b["edits"], "bytes_changed": a["bytes_changed"] + b["bytes_changed"]}


def window_record(pane: WindowPane) -> dict[str, Any]:
    """A window pane as the Avro record of :data:`WINDOW_SCHEMA`."""
    edits, changed, bots = pane.value
    return {"page": pane.key, "window_start": pane.start, "window_end": pane.end, "edits": int(edits),
            "bytes_changed": int(changed), "bot_edits": int(bots)}


class WikipediaPageStats:
    """The demo's application (``app.class: examples.wikipedia.app.WikipediaPageStats``).

    Streams come from config: ``app.wikipedia.edits`` (default ``delta.edits``), ``app.wikipedia.output``
    (the blob container and stream, e.g. ``sparza-demo.page-windows``), the table store
    ``app.wikipedia.profiles.store`` (default ``profiles``) and, when set, ``app.wikipedia.table``: a
    typed Delta table (e.g. ``tables.page_stats``) the windows are also upserted into, for SQL, and
    ``app.wikipedia.sessions.table``: a typed Delta table of each user's editing sessions.
    """

    def describe(self, app: StreamApplication) -> None:
        """Build the two-stage graph."""
        edits = app.input(app.config.get_str("app.wikipedia.edits", "delta.edits"), serde="bytes")
        out = app.output(app.config.get_str("app.wikipedia.output", "sparza-demo.page-windows"),
                         serde=AvroSerde(WINDOW_SCHEMA), key_serde="string")
        profiles = app.table(app.config.get_str("app.wikipedia.profiles.store", "profiles"))
        parsed = edits.flat_map(parse_edit)
        sessions_table = app.config.get_str("app.wikipedia.sessions.table", None)
        if sessions_table:  # stage 1: edits are partitioned by user already
            (parsed.window(Windows.session(SESSION_GAP_MS, lambda e: {"user": e["user"]},
                                           {"edits": 0, "bytes_changed": 0}, _session_fold, _session_merge),
                           name="user-sessions")
                   .send_to(app.output(sessions_table, schema=USER_SESSIONS_SCHEMA, mode="upsert",
                                       key=USER_SESSIONS_KEY)))
        windows = (parsed
                   .partition_by(lambda e: e["page"], "by-page")                       # stage boundary
                   .join(profiles, lambda e: e["user"], join_profile)
                   .window(Windows.tumbling(WINDOW_MS, lambda e: e["page"], [0, 0, 0], _fold), name="page-minute")
                   .map(window_record))
        windows.send_to(out)
        table = app.config.get_str("app.wikipedia.table", None)
        if table:
            windows.send_to(app.output(table, schema=PAGE_STATS_SCHEMA, mode="upsert", key=PAGE_STATS_KEY))
