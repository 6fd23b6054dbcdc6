"""A job that cannot make progress ends, saying why: a failure a retry may cure is retried a bounded number of
times (a new epoch of containers, or a new streaming query), then the run fails naming the cause."""

from __future__ import annotations

import pytest
from examples.keyed_count.load import append_messages

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
    restarts = [line for line in lines if "starting" in line and "again from the last commits" in line]
    assert len(restarts) == 1, lines  # one restart (job.container.max.restarts), said in the status line
    metric = "container-restarts" if mode == "containers" else "query-restarts"
    assert runner.metrics.snapshot()["aggregate"][metric] == 1
