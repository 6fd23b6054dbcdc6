"""A processor under the Azure job coordinator (Azurite): it runs the tasks of the job model under the
model's version, its task checkpoints (in Azure blobs) carry that generation, and a stale generation's
checkpoint write is refused."""

from __future__ import annotations

import dataclasses

import pytest
from examples.keyed_count.load import append_messages
from tests.runtime.helpers import expected_counts, final_counts

from sparza.runtime import CheckpointFencedError, checkpoint_store_from_config
from sparza.runtime.driver.coordinated import CoordinatedProcessor
from sparza.testing import FAST_AZURE_COORDINATION

pytestmark = [pytest.mark.spark, pytest.mark.azurite]

FAST = FAST_AZURE_COORDINATION


def test_coordinated_processor_runs_its_model_with_fenced_checkpoints(spark, make_job, azure_connection_string,
                                                                       unique_name):
    config = make_job(**FAST, **{"azure.storage.connect": azure_connection_string, "job.name": unique_name,
                                 "job.checkpoint.factory": "azure", "job.checkpoint.azure.container": unique_name,
                                 "task.max.batch.messages": "10000"})
    append_messages(config, 500, 5, commit_size=500)
    processor = CoordinatedProcessor(config, master=None, processor_id="p1", once=True, spark=spark,
                                     status=lambda line: None)
    outcome = processor.run()
    assert outcome.batches >= 1
    generation = processor.generations[-1]
    assert generation >= 1
    # The coordinator's metrics and the runs' share the processor's registry (what its endpoint serves).
    snap = processor.metrics.snapshot()
    coordination = snap["coordination"]
    assert coordination["job-model-version"] == generation and coordination["job-models-adopted"] >= 1
    assert coordination["leader-elections-won"] >= 1 and coordination["is-leader"] == 0  # resigned when it left
    assert coordination["heartbeats"] >= 1 and coordination["rebalances"] == coordination["job-models-adopted"] - 1
    assert coordination["barrier-ms"]["count"] >= 1 and coordination["leader-barrier-ms"]["count"] >= 1
    assert snap["aggregate"]["messages-processed"] == 500 and snap["job"]["generation"] == generation
    counts, rows = final_counts(config)
    assert counts == expected_counts(500, 5)
    assert rows == 500
    store = checkpoint_store_from_config(config, f"{unique_name}-1")
    checkpoints = store.read_all()
    assert sorted(checkpoints) == ["Partition 0", "Partition 1"]
    assert {cp.generation for cp in checkpoints.values()} == {generation}
    # A processor still working under an older job model cannot overwrite the checkpoint.
    current = store.read("Partition 0")
    stale = dataclasses.replace(current.checkpoint, batch=current.checkpoint.batch + 1, generation=generation - 1)
    with pytest.raises(CheckpointFencedError):
        store.write(stale, current.etag)



class _IdleParticipant:
    """A coordinator listener that holds whatever tasks the job model gives it and runs nothing."""

    def on_new_job_model(self, job_model) -> None:
        """Nothing to start."""

    def on_job_model_expired(self) -> None:
        """Nothing to stop."""

    def on_coordinator_stop(self) -> None:
        """Nothing to clean up."""


def test_a_once_processor_whose_model_expires_mid_run_processes_its_new_share(spark, make_job,
                                                                             azure_connection_string, unique_name):
    """A second participant joins while a ``--once`` processor is in the middle of its batches: the first
    one's model expires and a new one gives it one of the two tasks. It must go on with that task until
    caught up. Found by the attack on the guarantees: a ``--once`` processor whose model expired exited
    0 at once (its loop tested a stop reason it had just cleared), leaving its new share unprocessed; with
    two ``--once`` processors, the last one expiring mid-run when the other left ended both runs with
    input left behind."""
    import threading

    from sparza.coordination import job_coordinator_from_config

    config = make_job(**FAST, **{"azure.storage.connect": azure_connection_string, "job.name": unique_name,
                                 "job.checkpoint.factory": "azure", "job.checkpoint.azure.container": unique_name,
                                 "task.max.batch.messages": "25"})
    append_messages(config, 600, 5, commit_size=600)       # 300 per task: 12 batches of 25
    first_batch, expiring = threading.Event(), threading.Event()

    def status(line: str) -> None:
        # The first batch waits until the model expires: a fast processor would otherwise finish all its
        # batches before the second participant joins (it did on CI), and the test would prove nothing.
        if line.startswith("batch ") and not first_batch.is_set():
            first_batch.set()
            expiring.wait(120)

    processor = CoordinatedProcessor(config, master=None, processor_id="p1", once=True, spark=spark,
                                     status=status)
    expire = processor.on_job_model_expired

    def on_job_model_expired() -> None:
        expiring.set()
        expire()

    processor.on_job_model_expired = on_job_model_expired  # type: ignore[method-assign]
    outcome: list[object] = []
    thread = threading.Thread(target=lambda: outcome.append(processor.run()), daemon=True)
    thread.start()
    assert first_batch.wait(300), "the processor committed no batch"
    other = job_coordinator_from_config("p2", config, ["Partition 0", "Partition 1"], _IdleParticipant())
    other.start()
    try:
        thread.join(600)
    finally:
        other.stop()
    assert expiring.is_set(), "the second participant's joining never expired the first one's model"
    assert not thread.is_alive() and outcome, "the --once processor did not finish"
    assert len(processor.generations) >= 2, "the processor never adopted the model that split the tasks"
    store = checkpoint_store_from_config(config, f"{unique_name}-1")
    done = {name: cp.offsets for name, cp in store.read_all().items()}
    from sparza.systems.delta import DeltaSystemAdmin

    upcoming = {f"delta.events#{p}": pm.upcoming for p, pm in DeltaSystemAdmin("delta", config)
                .get_system_stream_metadata({"events"})["events"].partitions.items()}
    finished = [name for name, offsets in done.items() if all(upcoming[k] == v for k, v in offsets.items())]
    assert finished, f"the processor ended --once without finishing its share: checkpoints {done}, ends {upcoming}"


@pytest.mark.parametrize("mode", ["containers", "batches"])
def test_a_processor_fenced_off_while_it_runs_steps_back_and_takes_its_next_model(spark, make_job, mode,
                                                                                 azure_connection_string, unique_name):
    """A processor judged dead while it still runs (a pause, a slow host): a newer model gave its tasks to another
    processor, which stamped their checkpoints with its generation when it took them over, so the next commit of
    the first one is refused. That must not end its run (it exited 1): it stops its tasks, waits for the next job
    model and runs its share of it."""
    import threading

    from sparza.coordination import job_coordinator_from_config
    from sparza.coordination.status import read_status
    from sparza.runtime.driver.coordinated import claim_tasks
    from sparza.runtime.driver.report import RunOutcome
    from sparza.testing import eventually

    config = make_job(**FAST, **{"azure.storage.connect": azure_connection_string, "job.name": unique_name,
                                 "job.checkpoint.factory": "azure", "job.checkpoint.azure.container": unique_name,
                                 "job.execution.mode": mode, "task.max.batch.messages": "25"})
    job_key = f"{unique_name}-1"
    tasks = ["Partition 0", "Partition 1"]
    append_messages(config, 100, 5, commit_size=100)
    first_batch, fenced = threading.Event(), threading.Event()

    def status(line: str) -> None:
        if line.startswith("batch "):
            first_batch.set()
        if "was fenced off" in line:
            fenced.set()

    processor = CoordinatedProcessor(config, master=None, processor_id="p1", once=False, spark=spark, status=status)
    outcome: list[object] = []

    def run() -> None:
        try:
            outcome.append(processor.run())
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    other = None
    try:
        assert first_batch.wait(300), f"the processor committed no batch: {outcome}"
        generation = processor.generations[-1]
        claim_tasks(config, job_key, tasks, generation + 1)  # what the new owners do when they take the tasks over
        append_messages(config, 100, 5, start=100, commit_size=100)  # a batch to commit: its write is fenced
        eventually(lambda: fenced.is_set() or not thread.is_alive(), 300, 0.2, "no fenced write")
        assert fenced.is_set() and thread.is_alive(), f"the fenced processor ended its run: {outcome}"
        # The next model: another processor joins (the leader, p1, publishes it); p1 runs its share of it.
        other = job_coordinator_from_config("p2", config, tasks, _IdleParticipant())
        other.start()
        store = checkpoint_store_from_config(config, job_key)
        stamped = {t: store.read(t).checkpoint.batch for t in tasks}

        def runs_its_new_share() -> bool:
            assert thread.is_alive(), f"the processor ended its run: {outcome}"
            model = read_status(config).state.effective
            if model is None or model.version <= generation or processor.generations[-1] != model.version:
                return False
            mine = model.tasks_of("p1")  # the input the fenced batch read is still to commit
            return bool(mine) and all(store.read(t).checkpoint.generation == model.version
                                      and store.read(t).checkpoint.batch > stamped[t] for t in mine)

        eventually(runs_its_new_share, 300, 1.0, "p1 did not run its share of the next job model")
        assert processor.fenced == 1
    finally:
        processor.request_stop("test over")
        thread.join(300)
        if other is not None:
            other.stop()
    assert outcome and isinstance(outcome[0], RunOutcome), outcome
