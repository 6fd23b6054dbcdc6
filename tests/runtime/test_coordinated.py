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
    first_batch = threading.Event()
    processor = CoordinatedProcessor(config, master=None, processor_id="p1", once=True, spark=spark,
                                     status=lambda line: first_batch.set() if line.startswith("batch ") else None)
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
    assert not thread.is_alive() and outcome, "the --once processor did not finish"
    assert len(processor.generations) >= 2, "the processor never adopted the model that split the tasks"
    store = checkpoint_store_from_config(config, f"{unique_name}-1")
    done = {name: cp.offsets for name, cp in store.read_all().items()}
    from sparza.systems.delta import DeltaSystemAdmin

    upcoming = {f"delta.events#{p}": pm.upcoming for p, pm in DeltaSystemAdmin("delta", config)
                .get_system_stream_metadata({"events"})["events"].partitions.items()}
    finished = [name for name, offsets in done.items() if all(upcoming[k] == v for k, v in offsets.items())]
    assert finished, f"the processor ended --once without finishing its share: checkpoints {done}, ends {upcoming}"
