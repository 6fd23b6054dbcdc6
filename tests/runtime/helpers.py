"""Helpers of the runtime tests: the keyed-count job config, expected counts, `sparza` subprocesses, the job's task
checkpoints and committed snapshots (and their blobs deleted, as by an operator's mistake)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Self

import yaml

from sparza.config import Config

REPO = Path(__file__).resolve().parents[2]


def job_values(root: Path, **overrides: Any) -> dict[str, Any]:
    """The keyed-count job's config (flat keys) rooted in ``root``, in small batches."""
    from examples.keyed_count.config import job_values as example_values

    return example_values(root, **{"job.name": "kc", "task.max.batch.messages": "300", **overrides})


def final_counts(config: Config, stream: str = "counts") -> tuple[dict[str, int], int]:
    """The highest count per key in the output and the number of output rows."""
    from deltalake import DeltaTable

    table = DeltaTable(str(Path(config["systems.delta.delta.root"]) / stream)).to_pyarrow_table(
        columns=["value", "type"])
    best: dict[str, int] = {}
    rows = 0
    for value, kind in zip(table.column("value").to_pylist(), table.column("type").to_pylist(), strict=True):
        if kind != 0:
            continue
        rows += 1
        body = json.loads(value)
        best[body["key"]] = max(best.get(body["key"], 0), int(body["count"]))
    return best, rows


def counts_per_key(config: Config, stream: str = "counts") -> dict[str, list[int]]:
    """Every count the output holds per key, in ascending order (exactly-once: ``1 .. n`` for ``n`` messages)."""
    from deltalake import DeltaTable

    table = DeltaTable(str(Path(config["systems.delta.delta.root"]) / stream)).to_pyarrow_table(
        columns=["value", "type"])
    out: dict[str, list[int]] = {}
    for value, kind in zip(table.column("value").to_pylist(), table.column("type").to_pylist(), strict=True):
        if kind == 0:
            body = json.loads(value)
            out.setdefault(body["key"], []).append(int(body["count"]))
    return {key: sorted(counts) for key, counts in out.items()}


def expected_counts(messages: int, keys: int) -> dict[str, int]:
    """What the keyed count must produce for ``append_messages(messages, keys)``."""
    out: dict[str, int] = {}
    for i in range(messages):
        out[f"k{i % keys}"] = out.get(f"k{i % keys}", 0) + 1
    return out


def write_config(config: Config, path: Path) -> Path:
    """The config as a YAML file for ``sparza run --config``."""
    path.write_text(yaml.safe_dump(dict(config.items())))
    return path


def sparza_cmd(*args: str, python: str = sys.executable) -> list[str]:
    """``sparza`` as a subprocess command line (of ``python``'s sparza: this interpreter's unless told)."""
    return [python, "-c", "from sparza.cli import main; main()", *args]


def sparza_env() -> dict[str, str]:
    """Environment of a ``sparza run`` subprocess: the repo importable (task classes are dotted paths)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def start_sparza(*args: str, log: Path, env: dict[str, str], cwd: Path,
                 python: str = sys.executable) -> subprocess.Popen[bytes]:
    """``sparza`` started in the background (a ``sparza run`` on a cluster), its output (both streams) to ``log``."""
    with log.open("w") as out:
        return subprocess.Popen(sparza_cmd(*args, python=python), env=env, stdout=out, stderr=subprocess.STDOUT,
                                cwd=cwd)


def stop_sparza(proc: subprocess.Popen[bytes] | None) -> None:
    """Kill a ``sparza`` process that still runs (the test or round around it failed) and wait for it."""
    if proc is not None and proc.poll() is None:
        proc.kill()
        proc.wait(30)


def run_sparza(*args: str, timeout: float = 240, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """Run ``sparza`` to completion in the repo dir."""
    kwargs.setdefault("env", sparza_env())
    return subprocess.run(sparza_cmd(*args), cwd=REPO, capture_output=True, text=True, timeout=timeout,
                          check=False, **kwargs)


def metrics_after_once(config: Config, spark: Any, port: int, status: Callable[[str], None] = lambda line: None
                       ) -> str:
    """A ``--once`` run of ``config`` in this process (a :class:`~sparza.runtime.JobRunner` on ``spark``), then its
    Prometheus endpoint on ``port`` read while the finished runner still serves it: the text."""
    import urllib.request

    from sparza.runtime import JobRunner

    runner = JobRunner(config, spark=spark, once=True, install_signal_handlers=False, status=status)
    runner.start()
    try:
        while runner.poll():
            pass
        runner.finish()
        return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    finally:
        runner.close()


PROFILES_STORE: dict[str, str] = {
    "systems.delta.streams.profiles.samza.bootstrap": "true",
    "stores.profiles.adstore.input": "delta.profiles",
    "stores.profiles.key.serde": "string",
    "stores.profiles.msg.serde": "json",
}
"""A bootstrap adjunct store ``profiles`` filled from ``delta.profiles`` (a job adds the stream to
``task.broadcast.inputs`` or ``task.inputs``)."""


def create_profiles(config: Config, records: int = 0, partitions: int = 1) -> None:
    """Create the Delta stream ``profiles`` and write ``records`` profile records (keys ``k0``…) to partition 0."""
    from sparza.streams import OutgoingMessageEnvelope, SystemStream
    from sparza.systems import StreamSpec
    from sparza.systems.delta import DeltaSystemAdmin, DeltaSystemProducer

    DeltaSystemAdmin("delta", config).create_stream(StreamSpec("profiles", partitions))
    if not records:
        return
    producer = DeltaSystemProducer("delta", config)
    producer.register("t")
    for i in range(records):
        producer.send("t", OutgoingMessageEnvelope(SystemStream("delta", "profiles"), b'{"c": 1}', key=f"k{i}".encode(),
                                                   partition=0, timestamp=i))
    producer.flush("t")


def task_checkpoints(config: Config) -> dict[str, Any]:
    """Each task's latest committed checkpoint of ``config``'s job, read in this process from the job's checkpoint
    store (what ``sparza checkpoints show`` prints). Polling tests use it instead of a ``sparza`` subprocess per
    sample: each one started Python and imported the product, a second of CPU the job under test lost."""
    from sparza.engine.checkpoint import checkpoint_store_from_config
    from sparza.engine.jobconfig import JobConfig

    return checkpoint_store_from_config(config, JobConfig.from_config(config, require_inputs=False).job_key).read_all()


def committed_snapshots(config: Config) -> dict[str, str]:
    """Task -> the committed snapshot id of its ``counts`` store (the keyed-count job ``kc``, id 1)."""
    from sparza.engine.checkpoint import checkpoint_store_from_config

    return {task: cp.stores["counts"] for task, cp in checkpoint_store_from_config(config, "kc-1").read_all().items()}


def _present_blobs(manager: Any, task: str, index_id: str) -> list[str]:
    from sparza.state.backup import StateBackup

    index = StateBackup(manager, "kc", "1", task).read_index(index_id, get_deleted=True)
    return [b.blob_id for b in index.dir_index.present_blobs()]


def snapshot_blobs(config: Config, task: str, index_id: str) -> list[str]:
    """The file blobs of ``task``'s ``counts`` snapshot ``index_id``, read from its index even when deleted."""
    from sparza.blobstore import blob_store_manager_from_config

    manager = blob_store_manager_from_config(config)
    try:
        return _present_blobs(manager, task, index_id)
    finally:
        manager.close()


def delete_snapshots(config: Config) -> dict[str, list[str]]:
    """Mark every committed ``counts`` snapshot's index and file blobs deleted (an operator's mistake); returns each
    task's deleted blobs, the index's first."""
    from sparza.blobstore import blob_store_manager_from_config
    from sparza.blobstore.api import INDEX_PAYLOAD_PATH, Metadata
    from sparza.state.backup.delta import base_of

    manager = blob_store_manager_from_config(config)
    deleted: dict[str, list[str]] = {}
    try:
        for task, index_id in committed_snapshots(config).items():
            blobs = _present_blobs(manager, task, index_id)
            for blob in blobs:
                manager.delete(blob, Metadata("", -1, "kc", "1", task, "counts"))
            # A snapshot id may carry a commit's writes after the index blob's id (#d1...): the blob is its base.
            manager.delete(base_of(index_id), Metadata(INDEX_PAYLOAD_PATH, -1, "kc", "1", task, "counts"))
            deleted[task] = [base_of(index_id), *blobs]
    finally:
        manager.close()
    return deleted


class CheckpointWatch:
    """What a running job's task checkpoints show, sampled in a thread once a second (:func:`task_checkpoints`, what
    ``sparza checkpoints show`` prints): :attr:`history` holds ``(time, {task: shape(checkpoint)})`` of every read,
    :attr:`error` the last failed read's error (Azurite busy, a blob replaced while read: the next sample has it)."""

    def __init__(self, config: Config, shape: Callable[[Any], dict[str, Any]], *, stop_timeout_s: float = 60.0) -> None:
        self.config = config
        self.shape = shape
        self.history: list[tuple[float, dict[str, dict[str, Any]]]] = []
        self.error: Exception | None = None
        self._stop_timeout_s = stop_timeout_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                shown = task_checkpoints(self.config)
            except Exception as exc:  # the next sample has it
                self.error = exc
            else:
                self.history.append((time.time(), {t: self.shape(cp) for t, cp in shown.items()}))
            self._stop.wait(1.0)

    def start(self) -> Self:
        """Start sampling."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop sampling (waits for a read in progress, at most ``stop_timeout_s``)."""
        self._stop.set()
        self._thread.join(self._stop_timeout_s)

    @property
    def samples(self) -> list[dict[str, dict[str, Any]]]:
        """Every sample so far, oldest first, without its time."""
        return [sample for _, sample in self.history]

    def latest(self) -> dict[str, dict[str, Any]]:
        """The newest sample (empty before the first)."""
        return self.history[-1][1] if self.history else {}
