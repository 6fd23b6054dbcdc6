"""``TestRunner`` as processes and processors: the standalone job claim on a manual clock, a second processor
refused or taking over and fencing the first, restarts with a changed config, a replayed batch, pausing a
commit to run something there."""

from __future__ import annotations

import shutil

import pytest
from examples.keyed_count.task import KeyedCountTask
from tests.testing.jobs import KEYED_COUNT

from sparza.coordination.jobclaim import ClaimHeldError
from sparza.engine.errors import TasksFencedError
from sparza.engine.executor import TaskAttemptError
from sparza.testing import TestMessage, TestRunner

TIMEOUT_MS = 30_000  # job.coordinator.standalone.claim.timeout.ms (default)


def _events(start: int, n: int, keys: int = 3) -> list[TestMessage]:
    return [TestMessage(f"m{i}".encode(), key=f"k{i % keys}".encode(), partition=i % 2)
            for i in range(start, start + n)]


def _runner(events: int = 12) -> TestRunner:
    runner = TestRunner.of(KeyedCountTask, KEYED_COUNT, claim=True)
    runner.add_input("delta.events", _events(0, events), partitions=2).add_output("delta.counts", partitions=2)
    return runner


def _counts(runner: TestRunner) -> list[tuple[str, int]]:
    return sorted((v["key"], v["count"]) for v in runner.values("delta.counts"))


def _expected(n: int, keys: int = 3) -> list[tuple[str, int]]:
    seen: dict[tuple[int, str], int] = {}
    out = []
    for i in range(n):
        k = (i % 2, f"k{i % keys}")
        seen[k] = seen.get(k, 0) + 1
        out.append((k[1], seen[k]))
    return sorted(out)


def test_a_second_processor_is_refused_while_the_first_holds_the_claim_and_takes_over_after_a_clean_stop() -> None:
    with _runner() as first:
        first.run()
        second = first.new_processor("1")
        with pytest.raises(ClaimHeldError, match="is claimed by processor 0"):
            second.run()
        first.advance_time(TIMEOUT_MS - 1)
        with pytest.raises(ClaimHeldError):
            second.run()                          # 1 ms short of the timeout
        first.add_input("delta.events", _events(12, 4))
        first.run()                               # renewed: its claim is a new version again
        first.advance_time(TIMEOUT_MS - 1)
        with pytest.raises(ClaimHeldError):
            second.run()
        first.restart(crashed=False)              # a clean stop releases the claim
        first.add_input("delta.events", _events(16, 4))
        second.run()                              # at once: restores the stores from the blob store
        assert _counts(second) == _expected(20)
        assert {cp.generation for cp in second.checkpoints().values()} == {2}
        second.close()


def test_a_crashed_processor_blocks_its_successor_until_the_claim_times_out() -> None:
    with _runner() as runner:
        runner.run()
        runner.restart()                          # crashed: its claim document stays live
        with pytest.raises(ClaimHeldError):
            runner.run()
        runner.advance_time(TIMEOUT_MS)
        runner.add_input("delta.events", _events(12, 2))
        runner.run()
        assert _counts(runner) == _expected(14)


def test_a_paused_processor_is_taken_over_and_fenced_when_it_wakes() -> None:
    """Processor 0 pauses right after flushing batch 2 of Partition 0; processor 1 is refused, then (0 still
    paused past the timeout) takes over and finishes; 0 wakes, and its checkpoint write is refused."""
    with _runner() as first:
        taken: list[TestRunner] = []

        def pause(task: str, step: object, batch: int) -> None:
            second = first.new_processor("1")
            taken.append(second)
            with pytest.raises(ClaimHeldError):
                second.run()
            first.advance_time(TIMEOUT_MS)
            second.run()

        first.call_at("after-flush", pause, task="Partition 0", batch=2)
        with pytest.raises(TasksFencedError, match="CheckpointFencedError"):  # at once: a retry is refused too
            first.run()
        second = taken[0]
        assert _counts(second) == _expected(12)    # the paused batch's output once, from both flushes
        assert {cp.generation for cp in second.checkpoints().values()} == {2}
        with pytest.raises(Exception, match="lost its claim"):
            first.run()                           # it learns at its next renewal
        second.close()


def test_restart_with_a_changed_config_and_a_replayed_batch_give_the_outputs_of_a_clean_run() -> None:
    with _runner() as runner:
        runner.run()
        runner.restart(crashed=False, replay_last_batch=True)   # Spark lost the commit of the last batch
        runner.run()
        assert _counts(runner) == _expected(12)
        runner.restart(crashed=False, config={"task.max.batch.messages": "1"})
        runner.add_input("delta.events", _events(12, 4))
        report = runner.run()
        assert report.batches == {"keyedcounttask": 2}          # 2 messages per partition, 1 per batch
        assert runner.config.get_int("task.max.batch.messages") == 1
        assert _counts(runner) == _expected(16)


def test_call_at_skips_matches_and_fail_at_raises_the_given_error() -> None:
    from sparza.errors import StorageUnavailableError

    with _runner() as runner:
        seen: list[tuple[str, int]] = []
        runner.call_at("after-checkpoint", lambda task, step, batch: seen.append((task, batch)), skip=3)
        runner.fail_at("after-snapshot", task="Partition 1", batch=2, error=StorageUnavailableError("down"))
        assert runner.pending_faults == 2
        with pytest.raises(TaskAttemptError, match="down"):
            runner.run()
        runner.run()                              # retried in the same process
        assert seen == [("Partition 1", 2)]       # the 4th checkpoint written: after P0 b1, P1 b1, P0 b2
        assert runner.pending_faults == 0
        assert _counts(runner) == _expected(12)


@pytest.mark.parametrize("mode", ["containers", "batches"])
def test_a_processor_back_after_another_ran_the_job_continues_from_the_task_checkpoints(mode: str) -> None:
    """Processor 0 ran, stopped cleanly, processor 1 ran the job for a while and stopped, and processor 0 comes
    back. No host keeps a plan of its own beside the task checkpoints, so it starts where processor 1 committed:
    nothing is skipped as "already committed" by batch number (16 of 20 counted) nor counted twice."""
    runner = TestRunner.of(KeyedCountTask, {**KEYED_COUNT, "job.execution.mode": mode}, claim=True)
    runner.add_input("delta.events", _events(0, 12), partitions=2).add_output("delta.counts", partitions=2)
    with runner as first:
        first.run()
        first.restart(crashed=False)              # processor 0 stops
        first.add_input("delta.events", _events(12, 4))
        second = first.new_processor("1")
        second.run()
        second.close()
        first.add_input("delta.events", _events(16, 4))
        first.run()
        assert _counts(first) == _expected(20)
        assert {cp.generation for cp in first.checkpoints().values()} == {3}


def test_a_batch_that_failed_during_cleanup_and_is_replayed_leaves_no_ttl_on_its_snapshot() -> None:
    """The commit of a task's last batch fails during cleanup (after its checkpoint) and the retry skips the
    batch as a replay: something must still finish the cleanup, or the committed snapshot index keeps its
    TTL and `sparza gc` deletes it 30 days later, and the task's state with it."""
    from sparza.blobstore import blob_store_manager_from_config, collect_garbage
    from sparza.clock import system_clock_ms
    from sparza.state.backup.delta import base_of

    with _runner() as runner:
        runner.fail_at("during-cleanup", task="Partition 1", batch=2)   # its last batch (6 messages, 4 a batch)
        with pytest.raises(Exception, match="injected failure"):
            runner.run()
        runner.run()                                                     # the retry: batch 2 skipped
        manager = blob_store_manager_from_config(runner.config)
        try:
            blobs = {info.blob_id: info for info in manager.list_blobs()}
            committed = {task: cp.stores["counts"] for task, cp in runner.checkpoints().items()}
            # A snapshot id may carry the commit's writes after its index blob's id (#d1...): the blob is the base.
            assert {task: blobs[base_of(snapshot)].expires_at_ms for task, snapshot in committed.items()} == {
                "Partition 0": None, "Partition 1": None}
            collect_garbage(manager, now_ms=system_clock_ms() + 60 * 86_400_000, deleted_retention_ms=0)
        finally:
            manager.close()
        runner.restart(crashed=False)
        runner.advance_time(1)
        shutil.rmtree(runner.state_dir)                                  # a new host: restore from the blob store
        runner.add_input("delta.events", _events(12, 2))
        runner.run()
        assert _counts(runner) == _expected(14)
