"""Partitions that grow, through ``sparza run`` (container mode) on a real Kafka broker and on a Delta stream: a 4-task
keyed count whose input gets more partitions (``sparza stream grow``) while the job runs.

Messages are produced as a producer that partitions by ``hash(key) % count`` does (hash = the key's number), before
and after the growth. The oracle is plain Python over what was produced: SEP-5 maps a partition ``p >= 4`` to the task
of ``p % 4``, so each (task, key) counts its messages 1..n, and a key's output counts are the union of its tasks'."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from tests.ops.conftest import REPO, Job, read_counts, sparza
from tests.runtime.helpers import sparza_cmd, sparza_env, write_config

from sparza.config import Config
from sparza.streams import OutgoingMessageEnvelope, SystemStream
from sparza.systems import Transaction, get_system_factory
from sparza.testing import eventually

pytestmark = pytest.mark.slow

KEYS = 24


def produce(job: Job, start: int, n: int, partitions: int, sent: list[tuple[str, int]]) -> None:
    """Message i has key ``k{i % KEYS}`` in partition ``(i % KEYS) % partitions``; ``sent`` gets (key, partition)."""
    producer = get_system_factory(job.config, job.system).get_producer(job.system, job.config)
    producer.register("loader")
    producer.start()
    target = SystemStream(job.system, job.events)
    app = f"{job.events}-grow-{start}"
    producer.begin("loader", Transaction(app, 1))
    for i in range(start, start + n):
        index = i % KEYS
        p = index % partitions
        producer.send("loader", OutgoingMessageEnvelope(target, f"m{i}".encode(), key=f"k{index}".encode(),
                                                        partition=p, timestamp=1_760_000_000_000 + i))
        sent.append((f"k{index}", p))
    producer.flush("loader", transaction=Transaction(app, 1))
    producer.stop()


def sep5_outputs(sent: list[tuple[str, int]], first: int = 4) -> dict[str, list[int]]:
    """The oracle: per key, the counts its tasks emit (sorted), a partition p >= ``first`` counted by task p % first."""
    per_task: Counter[tuple[int, str]] = Counter()
    out: dict[str, list[int]] = {}
    for key, p in sent:
        task = p if p < first else p % first
        per_task[(task, key)] += 1
        out.setdefault(key, []).append(per_task[(task, key)])
    return {key: sorted(counts) for key, counts in out.items()}


def outputs(job: Job) -> dict[str, list[int]]:
    return {key: sorted(counts) for key, counts in read_counts(job.config, "delta", "counts").items()}


def start(path: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(sparza_cmd("run", "--config", str(path), "--master", "local[2]"), cwd=REPO,
                            env=sparza_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def wait_for_outputs(job: Job, proc: subprocess.Popen[str], total: int) -> None:
    def done() -> bool:
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else "exited"
        return sum(len(v) for v in read_counts(job.config, "delta", "counts").values()) >= total

    eventually(done, 300, 0.5, f"the job did not count {total} messages")


def grow(job: Job, partitions: int) -> None:
    done = sparza(["stream", "grow", job.events, "--partitions", str(partitions), "--config", str(job.path),
                   "--system", job.system])
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"4 -> {partitions} partitions" in done.stdout


@pytest.mark.parametrize("system", ["kafka", "delta"])
def test_growth_stops_the_job_by_default_then_expansion_grouping_counts_exactly(
        ops_job: Callable[..., Job], work_dir: Path, system: str) -> None:
    job = ops_job(system, **{"task.commit.ms": "300"})
    sent: list[tuple[str, int]] = []
    produce(job, 0, 240, 4, sent)
    proc = start(job.path)
    try:
        wait_for_outputs(job, proc, 240)
        grow(job, 6)
        grown_at = time.monotonic()
        produce(job, 240, 180, 6, sent)
        _, stderr = proc.communicate(timeout=300)
        stopped_after = time.monotonic() - grown_at
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    print(f"stopped {stopped_after:.2f} s after the growth (task.commit.ms 300, task.poll.interval.ms 50)")
    assert proc.returncode == 1, stderr[-3000:]
    assert f"{system}.{job.events}: 4 -> 6 partitions" in stderr and "while it ran" in stderr, stderr[-3000:]
    assert "job.partition.expansion: group" in stderr and "job.partition.expansion: new-tasks" in stderr
    assert "job.id" in stderr and "Nothing committed is lost" in stderr
    # Everything committed before the growth is there, nothing after it was counted.
    assert outputs(job) == sep5_outputs(sent[:240])

    # The operator chooses SEP-5 grouping: the job goes on from its commits, the new partitions join tasks 0 and 1.
    values = dict(job.config.items())
    values["job.partition.expansion"] = "group"
    path = write_config(Config(values), work_dir / "job-group.yaml")
    result = job.run("--master", "local[2]", config=path)
    assert "input partitions grew" in result.stderr and "p % 4" in result.stderr, result.stderr[-3000:]
    assert "no multiple of 4" in result.stderr
    assert outputs(job) == sep5_outputs(sent)


def test_expansion_grouping_regroups_a_running_job_and_every_key_keeps_its_state(ops_job: Callable[..., Job]) -> None:
    job = ops_job("kafka", **{"job.partition.expansion": "group", "task.commit.ms": "300"})
    sent: list[tuple[str, int]] = []
    produce(job, 0, 240, 4, sent)
    proc = start(job.path)
    try:
        wait_for_outputs(job, proc, 240)
        grow(job, 8)
        produce(job, 240, 240, 8, sent)
        wait_for_outputs(job, proc, 480)
        os.killpg(proc.pid, signal.SIGINT)
        _, stderr = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, stderr[-3000:]
    assert "starting 4 task(s) again, regrouped" in stderr, stderr[-3000:]
    got = outputs(job)
    assert got == sep5_outputs(sent)
    # 8 is a multiple of 4: each key stayed in one task with its state, so its counts are 1..n.
    assert got == {key: list(range(1, n + 1)) for key, n in Counter(k for k, _ in sent).items()}
