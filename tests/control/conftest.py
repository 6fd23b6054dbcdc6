"""Helpers for the Spark + Delta end-to-end tests of control messages and the high-level API:
app configs over a local Delta root and local blob store, input loading, running stages (each a
streaming query on the shared SparkSession, alone or concurrently as one processor), reading outputs
and task checkpoints."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sparza.config import Config
from sparza.streams import MessageType, OutgoingMessageEnvelope, SystemStream, SystemStreamPartition

EVENTS = SystemStream("delta", "events")


@dataclass
class E2E:
    """One test's world: a work dir, the shared SparkSession, helpers."""

    work: Path
    spark: Any

    def config(self, app: str, **extra: Any) -> Config:
        base = {
            "job.name": "shop", "job.id": "1",
            "job.logged.store.base.dir": str(self.work / "state"),
            "app.class": app if "." in app else f"sparza.api.examples.{app}",
            "task.max.batch.messages": 1000, "task.commit.ms": 100,
            "systems.delta.samza.factory": "delta", "systems.delta.samza.offset.default": "oldest",
            "systems.delta.delta.root": str(self.work / "streams"),
            "systems.delta.streams.events.bounded": "true",
            "blob.store.manager.factory": "local", "blob.store.local.root": str(self.work / "blobstore"),
        }
        base.update({k: str(v) for k, v in extra.items()})
        return Config(base)

    def load(self, config: Config, events: list[tuple[int, str, int, int]], partitions: int,
             outputs: tuple[str, ...] = ("out",)) -> None:
        """Create ``events`` with ``partitions`` partitions (and 1-partition outputs); append (p, key, n, ts)."""
        from sparza.systems import StreamSpec
        from sparza.systems.delta import DeltaSystemAdmin

        admin = DeltaSystemAdmin("delta", config)
        admin.create_stream(StreamSpec("events", partitions))
        for name in outputs:
            admin.create_stream(StreamSpec(name, 1))
        self.append(config, events)

    def append(self, config: Config, events: list[tuple[int, str, int, int]], source: str = "loader") -> None:
        from sparza.systems.delta import DeltaSystemProducer

        producer = DeltaSystemProducer("delta", config)
        producer.register(source)
        for p, key, n, ts in events:
            producer.send(source, OutgoingMessageEnvelope(EVENTS, json.dumps({"key": key, "n": n}).encode(),
                                                          key=key.encode(), partition=p, timestamp=ts))
        producer.flush(source)

    def runner(self, stage_config: Config) -> Any:
        from sparza.runtime.driver.runner import JobRunner

        return JobRunner(stage_config, spark=self.spark, install_signal_handlers=False, status=lambda line: None)

    def run_stages(self, configs: list[Config], *, stop_when: Callable[[], bool] | None = None,
                   timeout_s: float = 240) -> list[Any]:
        """Run the stage jobs concurrently (one processor); wait until all ended, or ``stop_when()``."""
        runners = [self.runner(c) for c in configs]
        outcomes: list[Any] = [None] * len(runners)
        errors: list[BaseException] = []

        def go(i: int) -> None:
            try:
                outcomes[i] = runners[i].run()
            except BaseException as exc:  # reported below
                errors.append(exc)

        threads = [threading.Thread(target=go, args=(i,), daemon=True) for i in range(len(runners))]
        for runner, t in zip(runners, threads, strict=True):
            t.start()
            # Start queries one at a time: on a loaded 2-core machine, starting several Python data source
            # workers at once can exceed Spark's fixed worker connect-back timeout.
            while t.is_alive() and not _started(runner):
                t.join(0.2)
        deadline = threading.Event()
        timer = threading.Timer(timeout_s, deadline.set)
        timer.start()
        try:
            while any(t.is_alive() for t in threads) and not deadline.is_set() and not errors:
                if stop_when is not None and stop_when():
                    break
                deadline.wait(0.25)
        finally:
            timer.cancel()
            for r in runners:
                r.request_stop("test done")
            for t in threads:
                t.join(120)
        if errors:
            raise errors[0]
        if deadline.is_set() and stop_when is None:
            raise AssertionError(f"stages did not end within {timeout_s} s")
        return outcomes

    def run_app(self, config: Config, stage: str | None = None) -> Any:
        """``sparza run`` of an app.class config in this process: every stage (or ``stage``) as a query
        of one processor, via the runtime's run_application on the shared session."""
        from sparza.runtime.driver.application import run_application

        return run_application(config, spark=self.spark, stage=stage, install_signal_handlers=False)

    def rows(self, config: Config, stream: str = "out", partition: int = 0) -> list[tuple[str, int, Any]]:
        """(offset, type, value) of every row of ``delta.<stream>#partition``."""
        from sparza.systems.delta import DeltaSystemConsumer

        consumer = DeltaSystemConsumer("delta", config)
        ssp = SystemStreamPartition("delta", stream, partition)
        return [(e.offset, int(e.type), e.message) for e in consumer.read(ssp, None)]

    def values(self, config: Config, stream: str = "out") -> list[Any]:
        return [json.loads(v) for _, t, v in self.rows(config, stream) if t == MessageType.USER]

    def checkpoints(self, stage_config: Config) -> dict[str, Any]:
        from sparza.engine.checkpoint import checkpoint_store_from_config
        from sparza.engine.jobconfig import JobConfig

        job = JobConfig.from_config(stage_config)
        return checkpoint_store_from_config(stage_config, job.job_key).read_all()


def _started(runner: Any) -> bool:
    query = getattr(runner, "_query", None)
    if query is None:
        return False
    try:
        return query.lastProgress is not None or not query.isActive
    except Exception:
        return True


@pytest.fixture
def e2e(spark: Any, tmp_path: Path) -> E2E:
    return E2E(tmp_path, spark)


def windowed_expectation(events: list[tuple[int, str, int, int]], window_ms: int,
                         key_of: Callable[[str], str] = lambda k: k) -> dict[tuple[str, int], tuple[int, int]]:
    """{(key, window start): (count, sum)} of WindowedCount / ThreeStageCount over ``events``."""
    out: dict[tuple[str, int], list[int]] = {}
    for _, key, n, ts in events:
        acc = out.setdefault((key_of(key), ts - ts % window_ms), [0, 0])
        acc[0] += 1
        acc[1] += n
    return {k: (v[0], v[1]) for k, v in out.items()}


def pane_map(values: list[dict[str, Any]]) -> dict[tuple[str, int], tuple[int, int]]:
    """Panes by (key, start); a pane seen twice fails (windows must fire exactly once)."""
    got: dict[tuple[str, int], tuple[int, int]] = {}
    for pane in values:
        key = (pane["key"], pane["start"])
        assert key not in got, f"window {key} fired twice"
        got[key] = (pane["count"], pane["sum"])
    return got


@pytest.fixture
def expect_windows() -> Callable[..., dict[tuple[str, int], tuple[int, int]]]:
    return windowed_expectation


@pytest.fixture
def panes_of() -> Callable[[list[dict[str, Any]]], dict[tuple[str, int], tuple[int, int]]]:
    return pane_map
