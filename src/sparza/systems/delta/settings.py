"""The config keys of a ``delta`` system and where each stream of it lives.

Every key this package reads is declared here with :func:`~sparza.config.define_key`; the
:class:`DeltaSystemSettings` getters are the only place that reads them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from sparza.azure.resolve import AccountKeys
from sparza.config import DURATION_MS, LIST, STR, Choice, Config, Int, define_key
from sparza.errors import ConfigError
from sparza.systems.settings import SystemSettings

__all__ = ["ACCOUNT_KEYS", "ACCOUNT_NAME", "COMMIT_RETRIES", "LOCATION", "LOG_RETENTION", "ROOT", "TABLE_KEY",
           "TABLE_MESSAGE_KEY_COLUMN", "TABLE_MODE", "TABLE_PARTITION_BY", "TABLE_SCHEMA", "TABLE_TIMESTAMP_COLUMN",
           "DeltaSystemSettings", "StreamLocation"]

_PKG = "systems.delta"
_S = "systems.<system>.streams.<stream>."
ROOT = define_key("systems.<system>.delta.root", None,
                  "Where a delta system keeps its stream tables: a directory or az://container/prefix; "
                  "stream x lives at <root>/x.", _PKG, kind=STR)
LOCATION = define_key(_S + "delta.location", None,
                      "The stream's own table location (a directory or az://container/path), instead of "
                      "<root>/<stream>.", _PKG, kind=STR)
TABLE_SCHEMA = define_key(_S + "delta.table.schema", None,
                          "Makes the stream a typed table with these columns: 'name type [not null], ...', a Delta "
                          "schema JSON or an Avro record (text or file path). See docs/tables.md.", _PKG, kind=STR)
TABLE_MODE = define_key(_S + "delta.table.mode", None,
                        "append (every message a new row) or upsert (merge the latest row per key; None deletes); "
                        "setting it alone makes a typed table whose columns come from the avro msg schema.", _PKG,
                        kind=Choice("append", "upsert"))
TABLE_KEY = define_key(_S + "delta.table.key", "", "Comma list of the key columns of an upsert table (rows are "
                       "merged on them).", _PKG, kind=LIST)
TABLE_PARTITION_BY = define_key(_S + "delta.table.partition.by", "", "Comma list of columns the typed table is "
                                "partitioned by (Delta partition columns).", _PKG, kind=LIST)
TABLE_TIMESTAMP_COLUMN = define_key(_S + "delta.table.timestamp.column", None, "Column that gets the message's event "
                                    "time when the message has no value for it.", _PKG, kind=STR)
TABLE_MESSAGE_KEY_COLUMN = define_key(_S + "delta.table.message.key.column", None, "Column that gets the message key "
                                      "when the message has no value for it.", _PKG, kind=STR)
COMMIT_RETRIES = define_key("systems.<system>.delta.commit.retries", 100,
                            "How often a producer retries a Delta commit that lost a race with another writer.", _PKG,
                            kind=Int(min_value=0))
LOG_RETENTION = define_key("systems.<system>.delta.log.retention", "30d",
                           "How long commits (and so offsets) stay readable: the table's delta.logRetentionDuration.",
                           _PKG, kind=DURATION_MS)
ACCOUNT_NAME = define_key("systems.<system>.delta.account.name", None,
                          "Storage account for az:// locations (else azure.storage.connect or dev storage).", _PKG,
                          kind=STR)
ACCOUNT_KEY = define_key("systems.<system>.delta.account.key", None, "Key of that storage account (secret).", _PKG,
                         kind=STR)
ENDPOINT = define_key("systems.<system>.delta.endpoint", None,
                      "Blob endpoint of that storage account (Azurite, sovereign clouds).", _PKG, kind=STR)
ACCOUNT_KEYS = AccountKeys(ACCOUNT_NAME, ACCOUNT_KEY, ENDPOINT)
"""The keys naming a delta system's storage account (``names={"system": system}``)."""


@dataclass(frozen=True)
class StreamLocation:
    """Where one stream's Delta table is: its URI (absolute path or ``az://``) and storage options.

    Picklable; :meth:`filesystem` builds a pyarrow filesystem rooted at the table on first use.
    """

    stream: str
    uri: str
    storage_options: dict[str, str] | None = field(default=None, repr=False)
    _fs: list[Any] = field(default_factory=list, repr=False, compare=False)
    _raw: list[Any] = field(default_factory=list, repr=False, compare=False)

    @property
    def is_remote(self) -> bool:
        """True for object-store locations (``az://``, ``abfs://``)."""
        return "://" in self.uri

    def filesystem(self) -> Any:
        """A pyarrow filesystem whose root is the table directory (paths like ``_delta_log/…``)."""
        if not self._fs:
            import pyarrow.fs as pa_fs

            if self.is_remote:
                from deltalake.fs import DeltaStorageHandler

                fs = pa_fs.PyFileSystem(DeltaStorageHandler(self.uri, self.storage_options))
            else:
                fs = pa_fs.SubTreeFileSystem(self.uri, pa_fs.LocalFileSystem())
            self._fs.append(fs)
        return self._fs[0]

    def write_bytes(self, path: str, data: bytes) -> None:
        """Write a whole file at ``path`` (relative to the table root), creating directories as needed."""
        if self.is_remote:
            from deltalake.fs import DeltaStorageHandler

            # pyarrow's PythonFile hands delta-rs a Buffer it rejects; write through the raw handler.
            if not self._raw:
                self._raw.append(DeltaStorageHandler(self.uri, self.storage_options)._handler)
            stream = self._raw[0].open_output_stream(path, None)
            try:
                stream.write(data)
            finally:
                stream.close()  # type: ignore[attr-defined]  # exists at runtime, missing in the stub
            return
        target = os.path.join(self.uri, path)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "wb") as out:
            out.write(data)

    def __getstate__(self) -> dict[str, Any]:
        return {"stream": self.stream, "uri": self.uri, "storage_options": self.storage_options}

    def __setstate__(self, state: dict[str, Any]) -> None:
        object.__setattr__(self, "stream", state["stream"])
        object.__setattr__(self, "uri", state["uri"])
        object.__setattr__(self, "storage_options", state["storage_options"])
        object.__setattr__(self, "_fs", [])
        object.__setattr__(self, "_raw", [])


def _join(root: str, name: str) -> str:
    if "://" in root:
        return root.rstrip("/") + "/" + name
    return os.path.join(root, name)


class DeltaSystemSettings(SystemSettings):
    """Typed access to the ``systems.<system>.*`` keys of one delta system."""

    def __init__(self, system_name: str, config: Config) -> None:
        super().__init__(system_name, config)
        self._locations: dict[str, StreamLocation] = {}

    def location_uri(self, stream: str) -> str:
        """The table URI of ``stream``: its own location or ``<root>/<stream>``; local paths made absolute."""
        explicit = LOCATION.get(self.config, system=self.system, stream=stream)
        if explicit:
            uri = explicit
        else:
            root = ROOT.get(self.config, system=self.system)
            if not root:
                raise ConfigError(ROOT.name(system=self.system), None,
                                  f"a directory or az://container/prefix for the tables of system {self.system!r} "
                                  f"(or set {self.stream_key(stream, 'delta.location')})")
            uri = _join(root, stream)
        if "://" not in uri:
            uri = os.path.abspath(os.path.expanduser(uri))
        return uri.rstrip("/") if "://" in uri else uri

    def location(self, stream: str) -> StreamLocation:
        """Where ``stream`` lives, with storage options for ``az://`` locations."""
        cached = self._locations.get(stream)
        if cached is None:
            uri = self.location_uri(stream)
            options = None
            if uri.startswith(("az://", "abfs://", "abfss://", "azure://")):
                from sparza.azure import resolve_storage_account

                options = resolve_storage_account(self.config, ACCOUNT_KEYS,
                                                  names={"system": self.system}).delta_storage_options()
                if "azure_storage_endpoint" in options:
                    # delta-rs 1.6: use_emulator forces 127.0.0.1:10000 and overrides the endpoint's port.
                    options.pop("use_emulator", None)
            cached = StreamLocation(stream, uri, options)
            self._locations[stream] = cached
        return cached

    @property
    def commit_retries(self) -> int:
        """``systems.<s>.delta.commit.retries``."""
        return COMMIT_RETRIES.get(self.config, system=self.system)

    @property
    def log_retention(self) -> str:
        """``delta.logRetentionDuration`` for new tables, from ``systems.<s>.delta.log.retention``."""
        ms = LOG_RETENTION.get(self.config, system=self.system)
        return f"interval {max(ms // 1000, 1)} seconds"
