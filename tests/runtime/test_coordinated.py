"""A processor under the Azure job coordinator (Azurite): it runs the tasks of the job model under the
model's version, its task checkpoints (in Azure blobs) carry that generation, and a stale generation's
checkpoint write is refused."""

from __future__ import annotations

import dataclasses

import pytest
from examples.keyed_count.load import append_messages
from tests.runtime.helpers import expected_counts, final_counts

from sparza.runtime import CheckpointFencedError, checkpoint_store_from_config
from sparza.runtime.coordinated import CoordinatedProcessor
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
