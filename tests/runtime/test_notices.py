"""What the status line says about Kafka fencing: nothing for the routine case, a line when it meant something."""

from __future__ import annotations

from sparza.engine.results import BatchResult, BatchStatus
from sparza.runtime.driver.report import RunNotices


def _result(changes: dict[str, int]) -> BatchResult:
    return BatchResult("Partition 0", 1, BatchStatus.COMMITTED,
                       system_metrics={"kafka": {name: ["c", n] for name, n in changes.items()}})


def test_producers_fenced_within_one_processor_are_counted_but_not_shown() -> None:
    """A task's batches moving between Spark's Python workers fence each other's producers: counted
    (the metric), never shown as if another instance existed."""
    notices = RunNotices.of([_result({"producer-reinitialised-after-fencing": 3})])
    assert notices.fenced == 3
    assert not notices
    assert notices.describe() == ""


def test_a_batch_another_instance_had_written_is_shown() -> None:
    notices = RunNotices.of([_result({"producer-reinitialised-after-fencing": 1,
                                      "producer-fenced-batch-written-elsewhere": 1})])
    assert notices
    assert notices.describe() == ("1 output batch(es) another instance of the same task had already written to "
                                  "Kafka (its producer was fenced; written once)")
