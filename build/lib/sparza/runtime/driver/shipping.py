"""The driver's half of :mod:`sparza.runtime.secrets`: write a run's secrets into a private file and add it to the
Spark session, so executors (and the micro-batch source) merge them back by name."""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import shutil
import tempfile
import threading
import uuid
import weakref
from typing import Any

from sparza.config import Config
from sparza.runtime.driver.session import is_connect
from sparza.runtime.secrets import SECRETS_REF_KEY, remember_secrets, split_secrets

__all__ = ["ShippedSecrets", "ship_secrets"]

_LOCK = threading.Lock()
_SHIPPED: weakref.WeakKeyDictionary[Any, dict[str, ShippedSecrets]] = weakref.WeakKeyDictionary()
"""Files added to each live session, by digest of their secrets: a session outlives one runner (a coordinated
processor's next model, ``sparza.run(spark=...)`` called again), and Spark serves an added file from the
driver's copy for as long as the session lives, so the file is reused, never removed while it may be fetched."""


class ShippedSecrets:
    """The secrets file of one run: its name (what the shipped config carries) and the driver's copy,
    removed by :meth:`close` (executors' copies go with the Spark application or Connect session)."""

    def __init__(self, name: str, directory: str) -> None:
        self.name = name
        self._directory = directory

    def close(self) -> None:
        """Remove the driver's copy of the file: only once its session is stopped (executors fetch it from
        there, also new ones), else at interpreter exit."""
        shutil.rmtree(self._directory, ignore_errors=True)


def ship_secrets(spark: Any, config: Config) -> tuple[dict[str, str], ShippedSecrets | None]:
    """Split ``config`` and add the secrets file to ``spark``; the config to ship and the file's handle
    (None when there is no secret: nothing is added)."""
    public, secrets = split_secrets(config)
    if not secrets:
        return public, None
    digest = hashlib.sha256(json.dumps(secrets, sort_keys=True).encode("utf-8")).hexdigest()
    with _LOCK:
        per_session = _session_files(spark)
        shipped = per_session.get(digest)
    if shipped is not None:
        public[SECRETS_REF_KEY] = shipped.name
        return public, shipped
    name = f"sparza-secrets-{uuid.uuid4().hex}.json"
    directory = tempfile.mkdtemp(prefix="sparza-secrets-")
    path = os.path.join(directory, name)
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        json.dump(secrets, out)
    shipped = ShippedSecrets(name, directory)
    try:
        if is_connect(spark):
            spark.addArtifacts(path, file=True)
        else:
            spark.sparkContext.addFile(path)
    except BaseException:
        shipped.close()
        raise
    atexit.register(shipped.close)
    remember_secrets(name, secrets)
    with _LOCK:
        per_session[digest] = shipped
    public[SECRETS_REF_KEY] = name
    return public, shipped


def _session_files(spark: Any) -> dict[str, ShippedSecrets]:
    try:
        return _SHIPPED.setdefault(spark, {})
    except TypeError:  # a session type that takes no weak reference: no reuse, the file stays until exit
        return {}


