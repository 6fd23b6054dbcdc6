"""Job config validation and the task model: bad values fail naming the key."""

from __future__ import annotations

import pytest
from tests.runtime.helpers import job_values

from sparza.config import Config
from sparza.errors import ConfigError
from sparza.runtime import JobConfig, build_task_models
from sparza.streams import SystemStream, SystemStreamPartition


def test_valid_config_parses_every_runtime_key(tmp_path):
    job = JobConfig.from_config(Config(job_values(tmp_path, **{"task.window.ms": "5000",
                                                                "task.ignored.exceptions": "ValueError, KeyError",
                                                                "task.drop.deserialization.errors": "true",
                                                                "spark.sql.shuffle.partitions": "3"})))
    assert job.job_key == "kc-1"
    assert job.max_batch_messages == 300
    assert job.window_ms == 5000
    assert job.ignored_exceptions == {"ValueError", "KeyError"}
    assert job.drop_deserialization_errors is True
    assert job.store_names == ("counts",)
    assert job.spark_conf == {"spark.sql.shuffle.partitions": "3"}
    assert [str(s.stream) for s in job.inputs] == ["delta.events"]
    assert job.inputs[0].offset_default == "oldest"


@pytest.mark.parametrize(("key", "value"), [
    ("task.max.batch.messages", "zero"),
    ("task.max.batch.messages", "0"),
    ("task.window.ms", "0"),
    ("task.class", "not a path"),
    ("systems.delta.samza.offset.default", "newest"),
    ("job.checkpoint.factory", "s3"),
    ("job.coordinator.factory", "zk"),
    ("task.drop.deserialization.errors", "maybe"),
    ("task.inputs", "delta.events#3"),
    ("task.broadcast.inputs", "delta.side"),
])
def test_bad_value_names_its_key(tmp_path, key, value):
    with pytest.raises(ConfigError) as err:
        JobConfig.from_config(Config(job_values(tmp_path, **{key: value})))
    assert err.value.key == key
    assert key in str(err.value)


def test_missing_keys_are_named(tmp_path):
    values = job_values(tmp_path)
    del values["task.class"]
    with pytest.raises(ConfigError, match="'task.class' is missing"):
        JobConfig.from_config(Config(values))
    values = job_values(tmp_path)
    del values["systems.delta.samza.factory"]
    with pytest.raises(ConfigError, match="systems.delta.samza.factory"):
        JobConfig.from_config(Config(values))


def test_tasks_are_partitions_and_broadcast_goes_to_every_task(tmp_path):
    job = JobConfig.from_config(Config(job_values(tmp_path, **{
        "task.inputs": "delta.events,delta.clicks",
        "task.broadcast.inputs": "delta.rates#[0-1]",
        "systems.delta.streams.clicks.samza.bootstrap": "true"})))
    counts = {SystemStream("delta", "events"): 3, SystemStream("delta", "clicks"): 2,
              SystemStream("delta", "rates"): 2}
    tasks = build_task_models(job, counts)
    assert [t.name for t in tasks] == ["Partition 0", "Partition 1", "Partition 2"]
    # Bootstrap streams first, then sorted; broadcast partitions in every task.
    assert tasks[0].ssps == (SystemStreamPartition("delta", "clicks", 0), SystemStreamPartition("delta", "events", 0),
                             SystemStreamPartition("delta", "rates", 0), SystemStreamPartition("delta", "rates", 1))
    assert SystemStreamPartition("delta", "clicks", 2) not in tasks[2].ssps
    assert len(tasks[2].ssps) == 3
    with pytest.raises(ConfigError, match="task.broadcast.inputs"):
        build_task_models(job, {**counts, SystemStream("delta", "rates"): 1})
