"""What the container mode costs per task, found with ``bench/scale_tasks.py`` at 1,024 tasks (issue 36).

- The driver under a backlog of reports: a job's reports cost time on the manager's thread, and neither the
  containers' liveness nor the reports' batching may depend on the reports keeping up. At 1,024 tasks each report
  (status line, metrics, lag over every task) took longer than the report interval, so every task result was
  reported alone (0.4 task batches/s in all), the manager's queue never emptied, no ping went out, and both
  containers stopped after 10 s of driver silence.
- An idle container waits a poll interval between looks at its inputs (``task.poll.interval.ms``), whatever the
  commit interval: at ``task.commit.ms: 0`` its passes ran back to back (16 idle tasks: 6,800 metadata reads/s).
- The driver's lag counts what moved since its last report, not every commit between each task and its input's end.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from examples.keyed_count.load import append_messages, create_streams
from tests.runtime.helpers import final_counts, job_values

from sparza.config import Config
from sparza.engine import job as engine_job
from sparza.engine.inprocess import InProcessHost, InProcessJob
from sparza.engine.manager import ContainerManager
from sparza.engine.messages import AddJob, Command, Event, Ping, StopContainer, TaskResult
from sparza.engine.results import BatchResult, BatchStatus
from sparza.runtime.driver.containers import ContainerQuery
from sparza.streams import SystemStreamPartition


class Clock:
    """Monotonic seconds that move only when told."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Link:
    """The manager's side of one container: what it was sent, and how many events the job had heard by then."""

    def __init__(self, member: SlowMember) -> None:
        self.member = member
        self.sent: list[tuple[Command, int]] = []

    def send(self, command: Command) -> None:
        self.sent.append((command, len(self.member.heard)))


class Launcher:
    def __init__(self) -> None:
        self.launched: list[int] = []

    def slots(self) -> int:
        return 1

    def launch(self, index: int) -> None:
        self.launched.append(index)

    def close(self) -> None:
        pass


class SlowMember:
    """A job whose report of each event takes ``cost_s`` of the manager's clock (a status line and metrics over many
    tasks)."""

    def __init__(self, clock: Clock, cost_s: float) -> None:
        self.key = "scale-1"
        self.tasks = ["Partition 0"]
        self.affinity = True
        self.count = None
        self.clock = clock
        self.cost_s = cost_s
        self.heard: list[Event] = []

    def add_job(self) -> AddJob:
        return AddJob(self.key, {}, 0, 1, {})

    def last_locations(self) -> dict[str, str]:
        return {}

    def on_event(self, event: Event) -> None:
        self.heard.append(event)
        self.clock.now += self.cost_s

    def on_notice(self, line: str) -> None:
        pass

    def container_lost(self, reason: str) -> bool:
        return True

    def left(self) -> None:
        pass


def _result(batch: int) -> BatchResult:
    return BatchResult("Partition 0", batch, BatchStatus.COMMITTED, messages=1)


def test_containers_are_pinged_while_a_backlog_of_slow_reports_is_worked_off():
    clock = Clock()
    launcher = Launcher()
    manager = ContainerManager(launcher, clock=clock, ping_s=1.0)
    member = SlowMember(clock, cost_s=0.4)
    manager.join(member)
    manager.step()
    assert launcher.launched == [0]
    link = Link(member)
    manager.connected(0, link)
    manager.step()
    assert any(isinstance(c, AddJob) for c, _ in link.sent)
    link.sent.clear()
    events = 60  # 24 s of reports on the manager's clock
    for batch in range(1, events + 1):
        manager.event(0, TaskResult(member.key, _result(batch)))
    steps = 0
    while len(member.heard) < events:
        manager.step()
        steps += 1
        assert steps <= events, "the manager stopped handling its queue"
    pings = [heard for command, heard in link.sent if isinstance(command, Ping)]
    # A ping at least every ping_s plus one report, however long the queue: 24 s of reports, so about 20 pings, the
    # first of them long before the queue was worked off (a container stops after 10 s without hearing anything).
    assert len(pings) >= 15, pings
    assert pings[0] < events // 4, pings
    gaps = [b - a for a, b in zip([0, *pings], [*pings, events], strict=True)]
    assert max(gaps) * member.cost_s <= manager.ping_s + member.cost_s, gaps
    # And the step gives the rest of its work a turn (launches, placements) at least once a ping interval.
    assert steps >= 15


class _Service:
    class manager:  # what ContainerQuery reads of its service: the connected containers
        containers = {0: "host", 1: "host"}


def test_results_that_arrive_while_a_report_is_written_go_into_the_next_report():
    reports: list[int] = []

    def on_results(results: list[BatchResult], containers: int) -> None:
        reports.append(len(results))
        time.sleep(0.15)  # a report slower than its interval (lag over a thousand tasks, metrics, status line)

    query = ContainerQuery(_Service(), "scale-1", ["Partition 0"], lambda: AddJob("scale-1", {}, 0, 1, {}),
                           dict, on_results, lambda line: None, once=False, affinity=True, count=None,
                           max_restarts=3, report_interval_s=0.1)
    query._last_report = 0.0  # the first result is reported at once
    began = time.monotonic()
    results = 0
    while time.monotonic() - began < 1.0:
        results += 1
        query.on_event(TaskResult("scale-1", _result(results)))
        time.sleep(0.005)
    query.flush(force=True)
    assert sum(reports) == results
    # A report every 0.25 s at most (0.15 s to write it, then 0.1 s of interval): ~5 in 1 s, each of many results.
    # Counted from the start of a report, every result that came after a slow report was reported alone.
    assert len(reports) <= 8, reports
    assert max(reports) >= 10, reports


def test_an_idle_container_looks_at_its_inputs_once_a_poll_interval_and_still_takes_new_messages(work_dir: Path,
                                                                                                 monkeypatch):
    config = Config(job_values(work_dir, **{"task.commit.ms": "0", "task.poll.interval.ms": "50"}))
    create_streams(config, 4)
    append_messages(config, 40, 8, commit_size=40)
    host = InProcessHost(slots=1)
    job = InProcessJob(config)
    host.join(job)
    for _ in range(20):  # place the tasks and run their first batches
        host.step()
    assert final_counts(config)[1] == 40
    reads: list[float] = []
    refresh = engine_job.EngineJob.refresh

    def counted(self: engine_job.EngineJob) -> None:
        reads.append(time.monotonic())
        refresh(self)

    monkeypatch.setattr(engine_job.EngineJob, "refresh", counted)
    (container,) = host.containers.values()
    thread = threading.Thread(target=container.run, daemon=True)
    thread.start()
    try:
        time.sleep(1.5)
        idle_reads = len(reads)
        # 50 ms apart: about 30 in 1.5 s (back to back, it was thousands).
        assert 10 <= idle_reads <= 60, idle_reads
        append_messages(config, 20, 8, commit_size=20)
        began = time.monotonic()
        while final_counts(config)[1] < 60 and time.monotonic() - began < 30:
            time.sleep(0.05)
        assert final_counts(config)[1] == 60
    finally:
        container.command(StopContainer())
        thread.join(30)
    assert not thread.is_alive()


def test_lag_counted_from_what_moved_is_the_full_count_at_every_report(work_dir: Path):
    """The driver's lag (:class:`~sparza.engine.offsets.LagCounts`) counts only what was read and what arrived since
    the last report; a random walk of readers over a real Delta stream, with resets, is compared with a full count at
    every step."""
    import random

    from sparza.engine.job import EngineJob
    from sparza.engine.offsets import LagCounts

    config = Config(job_values(work_dir))
    create_streams(config, 3)
    engine = EngineJob(config)
    rng = random.Random(36)
    seen: dict[SystemStreamPartition, list[str]] = {}  # every upcoming offset read so far, per SSP
    readers: dict[tuple[str, str], str] = {}
    lags = LagCounts()
    for step in range(60):
        if rng.random() < 0.6:
            append_messages(config, rng.randrange(1, 30), 5, commit_size=rng.randrange(3, 12))
        engine.refresh()
        positions = engine.positions()
        for ssp, pos in positions.items():
            seen.setdefault(ssp, []).append(pos.upcoming)
        ops = engine.ops["delta"]
        for ssp, pos in positions.items():
            for reader in ("a", "b"):
                key = (reader, str(ssp))
                history = seen[ssp]
                current = readers.get(key, history[0])
                choice = rng.random()
                if choice < 0.1:
                    current = rng.choice(history)  # anywhere, back included (a reset)
                elif choice < 0.7:  # forward, to an offset read since
                    later = [o for o in history if ops.compare(o, current) >= 0]
                    current = rng.choice(later)
                readers[key] = current
                counted = lags.count(key, ops, ssp, current, pos.upcoming)
                assert counted == ops.count_between(ssp, current, pos.upcoming), (step, key)
    assert any(n for n in (lags.count(k, engine.ops["delta"], SystemStreamPartition.parse(k[1]), o,
                                      engine.positions()[SystemStreamPartition.parse(k[1])].upcoming)
                           for k, o in readers.items()))
    engine.close()
