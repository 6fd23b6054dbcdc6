"""A job that cannot make progress ends, saying why: a failure a retry may cure is retried a bounded number of
times (a new epoch of containers, or a new streaming query), then the run fails naming the cause."""

from __future__ import annotations

import pytest
from examples.keyed_count.load import append_messages
from tests.runtime.helpers import PROFILES_STORE, create_profiles

from sparza.runtime import JobFailedError, JobRunner


@pytest.mark.parametrize("mode", ["containers", "batches"])
def test_a_task_that_can_never_start_ends_the_run_after_bounded_restarts(spark, make_job, mode):
    config = make_job(**{"task.class": "tests.runtime.jobs.UnreachableLookupTask", "job.execution.mode": mode,
                         "job.container.max.restarts": "1"})
    append_messages(config, 40, 3, commit_size=40)
    lines: list[str] = []
    runner = JobRunner(config, spark=spark, install_signal_handlers=False, status=lines.append)
    with pytest.raises(JobFailedError) as failure:
        runner.run()  # unbounded input: without the restart bound this would poll for ever
    assert "cannot reach the lookup service" in str(failure.value)
    # One restart (job.container.max.restarts), said in the status line: in the container mode the failing task
    # alone starts again (the others of its container go on), in the micro-batch mode the streaming query.
    said = ("it alone starts again from its last commit" if mode == "containers"
            else "starting it again from the last commits")
    restarts = [line for line in lines if said in line]
    assert len(restarts) == 1, lines
    metric = "task-retries" if mode == "containers" else "query-restarts"
    assert runner.metrics.snapshot()["aggregate"][metric] == 1


@pytest.mark.timeout(600)
def test_a_once_run_held_for_a_broadcast_publication_that_cannot_come_ends_saying_what_it_waits_for(spark, make_job):
    """Container mode, ``--once``: every task's main input waits for a versioned broadcast store's publication, which
    comes only with a complete version (an end-of-dataset marker the stream does not have). The status line says what
    the tasks wait for while they do; once two epochs read nothing, the run fails naming the store and its builder
    (it waited for ever before: no task was ever caught up)."""
    from sparza.engine.errors import JobStalledError

    config = make_job(**{"job.execution.mode": "containers", "job.container.epoch.ms": "3000",
                         "task.broadcast.inputs": "delta.profiles#0", **PROFILES_STORE,
                         "stores.profiles.adstore.versioned": "true"})
    create_profiles(config, 1)
    append_messages(config, 40, 3, commit_size=40)
    lines: list[str] = []
    runner = JobRunner(config, spark=spark, once=True, install_signal_handlers=False, status=lines.append)
    with pytest.raises(JobStalledError, match=r"cannot make progress: task\(s\) 'Partition 0', 'Partition 1' wait for "
                                              r"the bootstrapped publication of broadcast store 'profiles'"):
        runner.run()
    said = [line for line in lines if "wait for the bootstrapped publication of broadcast store 'profiles'" in line]
    assert said and "task 'Partition 0' builds" in said[0], lines
    assert len(said) <= 3, lines   # once per epoch, not once per poll


@pytest.mark.timeout(300)
def test_a_job_whose_input_waits_while_nothing_commits_is_reported_and_ended(spark, make_job):
    """The stall watchdog: a task stuck in its own code (here ``process`` sleeps) commits nothing while messages
    wait; the status line warns at half of job.stall.timeout.ms and the run ends at all of it, naming the waiting
    partition, instead of running on as if healthy (issue 40: input left unprocessed with no error)."""
    from examples.keyed_count.load import append_messages as append

    # The run ends once the hanging batch returns (a stop lets the running batch finish): the hang is what this
    # test lasts. 20 s is the stall timeout and its check period (2 s) with 10 s to spare; if the watchdog missed
    # it, the task would commit and the unbounded run go on until the test's timeout.
    config = make_job(**{"task.class": "tests.runtime.jobs.HangingTask", "job.stall.timeout.ms": "8000",
                         "test.hang.s": "20", "task.max.batch.messages": "5"})
    append(config, 20, 3, commit_size=20)
    from sparza.streams import OutgoingMessageEnvelope, SystemStream
    from sparza.systems.delta import DeltaSystemProducer

    producer = DeltaSystemProducer("delta", config)
    producer.register("test")
    for _ in range(6):
        producer.send("test", OutgoingMessageEnvelope(SystemStream("delta", "events"), b"x", key=b"hang"))
    producer.flush("test")
    lines: list[str] = []
    runner = JobRunner(config, spark=spark, install_signal_handlers=False, status=lines.append)
    with pytest.raises(JobFailedError, match=r"stalled: no task committed for \d+ s while \d+ message\(s\) wait in "
                                             r"delta\.events#"):
        runner.run()
    assert any("warning: no task committed for" in line and "job.stall.timeout.ms" in line for line in lines), lines
    assert runner.metrics.snapshot()["job"]["stalls"] == 1


@pytest.mark.timeout(300)
def test_one_task_that_commits_nothing_while_its_input_waits_ends_the_run_though_the_others_commit(spark, make_job):
    """The stall watchdog is per task: one task stuck (its ``process`` sleeps on key ``hang``) while the other
    task's input keeps arriving and committing. No job-wide quiet ever comes, yet the run is warned at half of
    job.stall.timeout.ms and ended at all of it, naming the stuck task (status line, the gauges
    ``job/stalled-tasks`` and ``<task>:task/stalled-s``, the error), never silent (issue 40)."""
    import threading

    from sparza.engine.errors import JobStalledError
    from sparza.streams import OutgoingMessageEnvelope, SystemStream
    from sparza.systems.delta import DeltaSystemAdmin, DeltaSystemProducer

    # As above, the hang is what the test lasts: the stall timeout and its check period (2.5 s) with 11 s to spare.
    config = make_job(**{"task.class": "tests.runtime.jobs.HangingTask", "job.stall.timeout.ms": "10000",
                         "test.hang.s": "24", "task.max.batch.messages": "5", "task.commit.ms": "200"})
    admin = DeltaSystemAdmin("delta", config)
    stuck_partition = admin.partition_of("events", b"hang")
    stuck = f"Partition {stuck_partition}"
    other_keys = [f"k{k}".encode() for k in range(40) if admin.partition_of("events", f"k{k}".encode())
                  != stuck_partition][:3]
    producer = DeltaSystemProducer("delta", config)
    producer.register("test")
    for _ in range(3):
        producer.send("test", OutgoingMessageEnvelope(SystemStream("delta", "events"), b"x", key=b"hang"))
    producer.flush("test")
    stop = threading.Event()

    def feed() -> None:  # the other partition's keys only: the stuck task gets nothing new
        while not stop.wait(0.5):
            for key in other_keys:
                producer.send("test", OutgoingMessageEnvelope(SystemStream("delta", "events"), b"x", key=key))
            producer.flush("test")

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    lines: list[str] = []
    runner = JobRunner(config, spark=spark, install_signal_handlers=False, status=lines.append)
    try:
        with pytest.raises(JobStalledError, match=rf"stalled: task\(s\) '{stuck}' committed nothing for \d+ s while "
                                                  r"\d+ message\(s\) wait in delta\.events#"):
            runner.run()
    finally:
        stop.set()
        feeder.join(10)
    warned = [line for line in lines if "warning: task(s)" in line and f"'{stuck}'" in line]
    assert warned and "job.stall.timeout.ms" in warned[0], lines
    snapshot = runner.metrics.snapshot()
    assert snapshot["job"]["stalls"] == 1 and snapshot["job"]["stalled-tasks"] == 1
    assert snapshot[f"{stuck}:task"]["stalled-s"] >= 10
    other = next(t for t in ("Partition 0", "Partition 1") if t != stuck)
    assert snapshot[f"{other}:task"].get("stalled-s", 0) == 0
    # The other task kept committing all along: the job-wide quiet the watchdog had used never came.
    assert snapshot["aggregate"]["task-commits"] >= 10
