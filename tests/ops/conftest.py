"""Fixtures of the day-two tests: a 4-task keyed count over Kafka or Delta input, with generated timestamps."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tests.runtime.helpers import job_values, sparza_cmd, sparza_env, write_config  # noqa: E402

from sparza.config import Config  # noqa: E402
from sparza.streams import OutgoingMessageEnvelope, SystemStream, SystemStreamPartition  # noqa: E402
from sparza.systems import StreamSpec, Transaction, get_system_factory  # noqa: E402

TASKS = 4
T0 = 1_760_000_000_000


@dataclass
class Produced:
    """What was written to the input, per partition in offset order: (key, event time)."""

    partitions: dict[int, list[tuple[str, int]]]


@dataclass
class Job:
    """One test job: its config, the config file, its input system, and what was produced."""

    config: Config
    path: Path
    system: str
    events: str
    produced: Produced

    def run(self, *args: str, config: Path | None = None) -> subprocess.CompletedProcess[str]:
        """``sparza run --once``, which must succeed."""
        result = sparza(["run", "--config", str(config or self.path), "--once", *args])
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
        return result


def sparza(args: list[str], timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """Run the ``sparza`` command to completion."""
    return subprocess.run(sparza_cmd(*args), cwd=REPO, env=sparza_env(), capture_output=True, text=True,
                          timeout=timeout, check=False)


def sparza_here(args: list[str]) -> subprocess.CompletedProcess[str]:
    """A read-only ``sparza`` command (``checkpoints show``, ``savepoint list``) through the CLI's app in this
    process: what the command prints, without a subprocess's Python start and import of the product (a second
    each). The operations under test (``run``, ``rewind``, ``savepoint create``, ``gc``) stay subprocesses."""
    from typer.testing import CliRunner

    from sparza.cli import app

    result = CliRunner().invoke(app, args)
    return subprocess.CompletedProcess(args, result.exit_code, result.stdout, result.stderr)


def produce(config: Config, system: str, stream: str, produced: Produced, count: int, keys: int, *,
            seed: int, start: int = 0, jitter_ms: int = 600_000, quiet: int = 0) -> None:
    """Append ``count`` messages: message i has key ``k{i % keys}``, goes to partition ``(i % keys) % TASKS`` and
    has event time ``T0 + i minutes`` moved by up to ``jitter_ms`` either way (out of order within a partition).
    The last ``quiet`` keys get no message in the second half. ``produced`` records them in offset order."""
    rng = random.Random(seed)
    producer = get_system_factory(config, system).get_producer(system, config)
    producer.register("loader")
    producer.start()
    target = SystemStream(system, stream)
    app = f"{stream}-loader-{start}"
    for version, first in enumerate(range(start, start + count, 200), start=1):
        producer.begin("loader", Transaction(app, version))
        for i in range(first, min(first + 200, start + count)):
            index = i % keys
            if quiet and i >= start + count // 2 and index >= keys - quiet:
                index %= keys - quiet
            key = f"k{index}"
            partition = index % TASKS
            ts = T0 + i * 60_000 + rng.randint(-jitter_ms, jitter_ms)
            producer.send("loader", OutgoingMessageEnvelope(target, f"m{i}".encode(), key=key.encode(),
                                                            partition=partition, timestamp=ts))
            produced.partitions.setdefault(partition, []).append((key, ts))
        producer.flush("loader", transaction=Transaction(app, version))
    producer.stop()


def read_counts(config: Config, system: str, stream: str,
                after: dict[int, str] | None = None) -> dict[str, list[int]]:
    """The counts in ``stream`` per key in offset order, from ``after`` (partition → offset) or the start."""
    admin = get_system_factory(config, system).get_admin(system, config)
    meta = admin.get_system_stream_metadata({stream})[stream]
    consumer = get_system_factory(config, system).get_consumer(system, config)
    consumer.start()
    out: dict[str, list[int]] = {}
    try:
        for p, pm in sorted(meta.partitions.items()):
            start = (after or {}).get(p, pm.oldest)
            if start is None:
                continue
            for env in consumer.read(SystemStreamPartition(system, stream, p), start, pm.upcoming,
                                     include_control=False):
                body = json.loads(env.message)
                out.setdefault(body["key"], []).append(int(body["count"]))
    finally:
        consumer.stop()
    return out


def upcoming(config: Config, system: str, stream: str) -> dict[int, str]:
    """Each partition's upcoming offset now."""
    admin = get_system_factory(config, system).get_admin(system, config)
    meta = admin.get_system_stream_metadata({stream})[stream]
    return {p: pm.upcoming for p, pm in meta.partitions.items()}


def read_table(config: Config, table: str) -> dict[str, int]:
    """The upsert table's rows: key → count."""
    from deltalake import DeltaTable

    rows = DeltaTable(str(Path(config["systems.delta.delta.root"]) / table)).to_pyarrow_table().to_pylist()
    out = {str(r["key"]): int(r["count"]) for r in rows}
    assert len(out) == len(rows), "an upsert table holds one row per key"
    return out


@pytest.fixture
def ops_job(work_dir: Path, unique_name: str, request: pytest.FixtureRequest) -> Callable[..., Job]:
    """Build the counting job on ``kafka`` or ``delta`` input (4 partitions), output stream ``delta.counts``
    and upsert table ``delta.count_table``."""

    def build(system: str, **overrides: Any) -> Job:
        events = f"{unique_name}-events" if system == "kafka" else "events"
        values: dict[str, Any] = {
            "job.name": unique_name, "task.class": "tests.ops.tasks.CountToStreamAndTable",
            "task.inputs": f"{system}.{events}", "task.max.batch.messages": "150",
            "ops_test.stream": "delta.counts", "ops_test.table": "delta.count_table",
            "systems.delta.streams.count_table.delta.table.schema": "key string not null, count long",
            "systems.delta.streams.count_table.delta.table.mode": "upsert",
            "systems.delta.streams.count_table.delta.table.key": "key",
        }
        if system == "kafka":
            values.update({"systems.kafka.samza.factory": "kafka",
                           "systems.kafka.consumer.bootstrap.servers": request.getfixturevalue("kafka_bootstrap"),
                           "systems.kafka.samza.offset.default": "oldest"})
        values.update(overrides)
        config = Config(job_values(work_dir, **values))
        # The events carry event times from T0 (2025): a Kafka topic's default time retention (7 days, checked
        # every second by the test broker) would delete them as they arrive, so the input keeps them for ever.
        props = {"retention.ms": "-1"} if system == "kafka" else {}
        get_system_factory(config, system).get_admin(system, config).create_stream(StreamSpec(events, TASKS,
                                                                                              properties=props))
        admin = get_system_factory(config, "delta").get_admin("delta", config)
        admin.create_stream(StreamSpec("counts", TASKS))
        path = write_config(config, work_dir / "job.yaml")
        return Job(config, path, system, events, Produced({}))

    return build
