"""Secrets reach the driver's source and the executors through Spark's file distribution, never through
Spark's plan, options or conf.

A job's config goes to the engine twice: as an option of the ``sparza`` source (the logical plan, the
SQL tab of the UI, the event log, a Connect server's statement log) and inside the pickled reader whose
``read`` runs the tasks. Neither may hold an account key or a connection string. At start the driver splits the config
(:func:`split_secrets`): every key :func:`~sparza.config.is_secret_key` names goes into a per-run JSON
file with a random name, written with mode 0600 into a private temp dir, and Spark distributes that
file like any added file: ``SparkContext.addFile`` on a classic session (local, standalone, Kubernetes,
YARN), ``spark.addArtifacts(file=True)`` on Spark Connect (session-scoped on the server). The shipped
config carries only the file's name (``job.secrets.ref``). Every process that rebuilds the config from
what was shipped, the driver's source and each executor's task runner, merges the file back with
:func:`resolve_secrets` (``SparkFiles.get(name)``).

Also shipped: the driver's ``AZURE_STORAGE_CONNECTION_STRING``, as ``azure.storage.connect``, when the
config has no connection string of its own, so executors on other hosts use the account the driver
checked (executors inherit the driver's environment only under ``local[N]``).

What this does not protect against: anyone who can read the executors' work dirs, run code in the
application or attach to its processes can read the file, as with any credential a Spark job uses
(``spark-submit --files``, a keytab). See ``docs/operations.md`` for the per-target choices.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections.abc import Mapping

from sparza.config import STR, Config, define_key, is_secret_key
from sparza.errors import ConfigError

__all__ = ["SECRETS_REF_KEY", "remember_secrets", "resolve_secrets", "split_secrets"]

SECRETS_REF_KEY = "job.secrets.ref"
SECRETS_REF = define_key(SECRETS_REF_KEY, None, "Set by sparza in the config it ships to Spark: the name of the "
                         "per-run secrets file distributed with the job (never set it yourself).", "runtime", kind=STR)

_ENV_CONNECTION = "AZURE_STORAGE_CONNECTION_STRING"

_KNOWN: dict[str, dict[str, str]] = {}
"""Secrets by file name in this process: shipped from here, or read once from the distributed file."""
_LOCK = threading.Lock()


def split_secrets(config: Mapping[str, str], environ: Mapping[str, str] | None = None
                  ) -> tuple[dict[str, str], dict[str, str]]:
    """``(public, secrets)``: the config without its secret keys, and those keys (plus the driver's
    ``AZURE_STORAGE_CONNECTION_STRING`` as ``azure.storage.connect`` when the config has none)."""
    env = os.environ if environ is None else environ
    public = {k: v for k, v in config.items() if not is_secret_key(k)}
    secrets = {k: v for k, v in config.items() if is_secret_key(k)}
    if "azure.storage.connect" not in secrets and env.get(_ENV_CONNECTION):
        secrets["azure.storage.connect"] = env[_ENV_CONNECTION]
    return public, secrets


def remember_secrets(name: str, secrets: Mapping[str, str]) -> None:
    """The driver shipped ``secrets`` as file ``name``: :func:`resolve_secrets` in this process reads them from
    here, not from Spark's copy of the file."""
    with _LOCK:
        _KNOWN[name] = dict(secrets)


def _load(name: str) -> dict[str, str]:
    with _LOCK:
        known = _KNOWN.get(name)
    if known is not None:
        return known
    from pyspark import SparkFiles

    candidates = []
    with contextlib.suppress(Exception):
        candidates.append(SparkFiles.get(name))
        # A streaming query's Python source runs with a job-scoped files dir (<root>/streaming_job) while
        # files added to the context sit in <root>.
        candidates.append(os.path.join(os.path.dirname(SparkFiles.getRootDirectory().rstrip(os.sep)), name))
    candidates.append(os.path.join(os.getcwd(), name))  # Spark Connect: the session's artifact dir is the cwd
    for path in candidates:
        try:
            with open(path, encoding="utf-8") as src:
                loaded = {str(k): str(v) for k, v in json.load(src).items()}
        except (OSError, ValueError):
            continue
        with _LOCK:
            _KNOWN[name] = loaded
        return loaded
    raise ConfigError(SECRETS_REF_KEY, name, "", message=(
        f"the job's secrets file {name} is not available in this Spark process (looked at "
        f"{', '.join(candidates)}): sparza run adds it with SparkContext.addFile / spark.addArtifacts; a session "
        "that drops added files (a restarted Connect session) must run the job again"))


def resolve_secrets(config: Config) -> Config:
    """``config`` with the secrets of ``job.secrets.ref`` merged back (``config`` itself when it has none)."""
    name = SECRETS_REF.get(config)
    if not name:
        return config
    values = {k: v for k, v in config.items() if k != SECRETS_REF_KEY}
    values.update(_load(name))
    return Config(values)
