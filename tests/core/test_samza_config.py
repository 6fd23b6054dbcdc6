"""Samza's spellings translate to sparza's, and no config value is silently ignored."""

from __future__ import annotations

import struct
import sys
from pathlib import Path

import pytest

from sparza.config import Config
from sparza.config.check import UnknownKeyError, check_config, migrate_config, validate_for_run
from sparza.config.samza import translate
from sparza.control.settings import ControlSettings
from sparza.engine.jobconfig import JobConfig
from sparza.errors import ConfigError, SerdeError
from sparza.serde import serde_from_name

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from examples.keyed_count.config import job_values  # noqa: E402


def _job(tmp_path: Path, **overrides: str) -> Config:
    return Config(job_values(tmp_path, **overrides))


@pytest.mark.parametrize("key,samza,ours", [
    ("systems.out.samza.factory", "org.apache.samza.system.azureblob.AzureBlobSystemFactory", "azureblob"),
    ("systems.k.samza.factory", "org.apache.samza.system.kafka.KafkaSystemFactory", "kafka"),
    ("systems.eh.samza.factory", "org.apache.samza.system.eventhub.EventHubSystemFactory", "eventhubs"),
    ("job.coordinator.factory", "org.apache.samza.coordinator.AzureJobCoordinatorFactory", "azure"),
    ("job.coordinator.factory", "org.apache.samza.standalone.PassthroughJobCoordinatorFactory", "standalone"),
    ("stores.counts.factory", "org.apache.samza.storage.kv.RocksDbKeyValueStorageEngineFactory", "rocksdb"),
    ("stores.counts.factory", "org.apache.samza.storage.kv.inmemory.InMemoryKeyValueStorageEngineFactory", "memory"),
    ("stores.counts.backup.factories", "org.apache.samza.storage.blobstore.BlobStoreStateBackendFactory",
     "blobstore"),
    ("job.checkpoint.factory", "org.apache.samza.checkpoint.kafka.KafkaCheckpointManagerFactory", "blobstore"),
    ("job.checkpoint.factory", "org.apache.samza.checkpoint.file.FileSystemCheckpointManagerFactory", "local"),
    ("job.checkpoint.factory", "org.apache.samza.checkpoint.azure.AzureCheckpointManagerFactory", "azure"),
    ("serializers.registry.j.class", "org.apache.samza.serializers.JsonSerdeFactory", "json"),
    ("serializers.registry.i.class", "org.apache.samza.serializers.IntegerSerdeFactory", "integer"),
])
def test_samza_factory_classes_become_sparza_names(key, samza, ours):
    translation = translate(Config({key: samza}))
    assert translation.config[key] == ours
    assert not translation.errors
    assert any(n.key == key and n.level == "info" for n in translation.notes)
    assert translate(translation.config).config == translation.config  # idempotent


@pytest.mark.parametrize("key,samza,says", [
    ("job.coordinator.factory", "org.apache.samza.zk.ZkJobCoordinatorFactory", "no ZooKeeper"),
    ("stores.s.backup.factories", "org.apache.samza.storage.KafkaChangelogStateBackendFactory", "no changelog"),
    ("systems.h.samza.factory", "org.apache.samza.system.hdfs.HdfsSystemFactory", "no HDFS"),
    ("stores.s.factory", "org.apache.samza.storage.kv.SomeOtherEngineFactory", "does not have"),
])
def test_samza_class_of_a_missing_feature_is_an_error_saying_so(key, samza, says):
    with pytest.raises(ConfigError) as info:
        translate(Config({key: samza})).raise_first_error()
    assert key in str(info.value) and samza in str(info.value) and says in str(info.value)


def test_blob_store_backend_class_gives_the_store_a_backup(tmp_path):
    # Samza's own value gives the store a blob-store backup; the runtime reads job.config.
    job = JobConfig.from_config(_job(tmp_path, **{
        "stores.counts.backup.factories": "org.apache.samza.storage.blobstore.BlobStoreStateBackendFactory"}))
    assert job.config["stores.counts.backup.factories"] == "blobstore"
    job = JobConfig.from_config(_job(tmp_path, **{"stores.backup.factories": "blobstore",
                                                  "stores.counts.backup.factories": ""}))
    assert job.config["stores.counts.backup.factories"] == ""  # the store's own (empty) value wins
    values = job_values(tmp_path)
    del values["stores.counts.backup.factories"]
    job = JobConfig.from_config(Config({**values, "stores.backup.factories":
                                        "org.apache.samza.storage.blobstore.BlobStoreStateBackendFactory"}))
    assert job.config["stores.counts.backup.factories"] == "blobstore"


def test_a_backup_factory_that_is_not_a_backend_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match="stores.counts.backup.factories"):
        JobConfig.from_config(_job(tmp_path, **{"stores.counts.backup.factories": "blobstor"}))


def test_samza_key_spellings(tmp_path):
    config = Config({"task.watermark.quorum.size.percentage": "0.8"})
    assert ControlSettings.from_config(translate(config).config).quorum == 0.8
    config = Config({"task.watermark.quorum.size,percentage": "0.7"})  # the literal constant in Samza
    assert ControlSettings.from_config(translate(config).config).quorum == 0.7
    translated = translate(Config({"sensitive.systems.out.azureblob.account.key": "s3cret",
                                   "task.checkpoint.factory":
                                       "org.apache.samza.checkpoint.file.FileSystemCheckpointManagerFactory",
                                   "task.checkpoint.path": "/tmp/cp"})).config
    assert translated["systems.out.azureblob.account.key"] == "s3cret"
    assert translated["job.checkpoint.factory"] == "local" and translated["job.checkpoint.local.dir"] == "/tmp/cp"
    conflict = translate(Config({"app.name": "a", "job.name": "b"}))
    assert conflict.errors and "keep one" in conflict.errors[0].message


def test_secrets_are_masked_in_the_check_report(tmp_path):
    report = check_config(_job(tmp_path, **{"sensitive.systems.out.azureblob.account.key": "s3cret"}))
    assert report.ok, report.problems
    shown = {k.key: k.value for k in report.keys}
    assert shown["systems.out.azureblob.account.key"] == "<redacted>"
    assert "s3cret" not in repr(report.keys)


def test_misspelled_key_fails_with_the_closest_known_key(tmp_path):
    report = check_config(_job(tmp_path, **{"stores.counts.factroy": "rocksdb"}))
    assert [str(p) for p in report.problems] == [
        "unknown config key 'stores.counts.factroy': did you mean 'stores.counts.factory'?"]
    with pytest.raises(UnknownKeyError) as info:
        validate_for_run(_job(tmp_path, **{"task.max.batch.mesages": "10"}))
    assert info.value.suggestion == "task.max.batch.messages"
    with pytest.raises(UnknownKeyError, match="systems.delta.streams.counts.samza.msg.serde"):
        validate_for_run(_job(tmp_path, **{"systems.delta.streams.counts.samza.msg.sedre": "json"}))


def test_free_form_pass_through_and_samza_unused_keys(tmp_path):
    warned: list[str] = []
    config = validate_for_run(_job(tmp_path, **{
        "app.anything.goes": "1", "spark.executor.memory": "1g",
        "systems.kafka.consumer.fetch.min.bytes": "1", "systems.kafka.producer.linger.ms": "5",
        "streams.clicks.eventhubs.namespace": "ns", "sensitive.streams.clicks.eventhubs.sas.key": "k",
        "job.factory.class": "org.apache.samza.job.yarn.YarnJobFactory", "stores.counts.changelog": "kafka.c",
        "yarn.package.path": "x.tgz", "my.own.key": "1",
        "app.runner.class": "org.apache.samza.runtime.RemoteApplicationRunner"}), warn=warned.append)
    assert config["app.anything.goes"] == "1"
    assert len(warned) == 5, warned
    assert any(w.startswith("app.runner.class") for w in warned)  # Samza's app.* keys are known, not free-form
    assert any(w.startswith("job.factory.class") for w in warned)
    assert any(w.startswith("stores.counts.changelog") and "backup.factories" in w for w in warned)
    assert any(w.startswith("my.own.key") and "not read by sparza" in w for w in warned)


def test_serde_registry_names(tmp_path):
    config = _job(tmp_path, **{"serializers.registry.text.class": "org.apache.samza.serializers.StringSerdeFactory",
                               "stores.counts.key.serde": "text"})
    assert JobConfig.from_config(config).config["stores.counts.key.serde"] == "string"
    report = check_config(_job(tmp_path, **{"stores.counts.key.serde": "text"}))
    assert any("serializers.registry.text.class" in str(p) for p in report.problems)
    used = _job(tmp_path, **{"serializers.registry.m.class": "org.apache.samza.serializers.SerializableSerdeFactory",
                             "stores.counts.msg.serde": "m"})
    assert any("Java serialization" in str(p) for p in check_config(used).problems)
    unused = check_config(_job(tmp_path, **{
        "serializers.registry.metrics.class": "org.apache.samza.serializers.MetricsSnapshotSerdeFactory"}))
    assert unused.ok and any("metrics snapshot" in w for w in unused.warnings)


def test_samza_number_serdes_use_samzas_byte_layout():
    assert serde_from_name("integer").to_bytes(258) == b"\x00\x00\x01\x02"
    assert serde_from_name("long").from_bytes(struct.pack(">q", -5)) == -5
    assert serde_from_name("double").from_bytes(serde_from_name("double").to_bytes(1.5)) == 1.5
    with pytest.raises(SerdeError, match="4 bytes"):
        serde_from_name("integer").from_bytes(b"\x01")
    with pytest.raises(SerdeError):
        serde_from_name("integer").to_bytes("7")


def test_every_example_and_test_job_config_is_clean(tmp_path):
    for config in (Config.from_file(REPO / "examples" / "keyed_count" / "job.yaml"), _job(tmp_path)):
        report = check_config(config)
        assert report.ok, [str(p) for p in report.problems]
        assert not report.warnings, report.warnings


def test_migrate_drops_samza_only_keys_and_replaces_the_changelog(tmp_path):
    values = job_values(tmp_path)
    del values["stores.counts.backup.factories"]
    migration = migrate_config(Config({
        **values, "stores.counts.changelog": "kafka.counts-changelog", "job.factory.class": "x",
        "task.checkpoint.factory": "org.apache.samza.checkpoint.kafka.KafkaCheckpointManagerFactory"}))
    assert migration.values["stores.counts.backup.factories"] == "blobstore"
    assert "stores.counts.changelog" not in migration.values and "job.factory.class" not in migration.values
    assert migration.values["job.checkpoint.factory"] == "blobstore"
    assert "task.checkpoint.factory" not in migration.values
    assert not migration.to_fix, migration.to_fix


def test_side_inputs_become_partitioned_adjunct_stores(tmp_path):
    from sparza.state.adjunct import AdjunctConfig

    config = _job(tmp_path, **{"stores.profiles.side.inputs": "delta.profiles",
                               "stores.profiles.side.inputs.processor.factory": "examples.x.ProfileExtractor",
                               "stores.profiles.key.serde": "string"})
    job = JobConfig.from_config(config)
    assert job.config["task.inputs"] == "delta.events,delta.profiles"
    spec = AdjunctConfig.from_config(job.config).store("profiles")
    assert spec is not None and str(spec.stream) == "delta.profiles" and not spec.broadcast
    assert spec.extractor_factory == "examples.x.ProfileExtractor"
    assert check_config(config).ok
    two = translate(Config({"stores.p.side.inputs": "delta.a,delta.b"}))
    assert two.errors and "exactly one system.stream" in two.errors[0].message


def test_samza_groupers(tmp_path):
    both = translate(Config({
        "job.systemstreampartition.grouper.factory":
            "org.apache.samza.container.grouper.stream.GroupByPartitionFactory",
        "task.name.grouper.factory": "org.apache.samza.container.grouper.task.GroupByContainerCountFactory"}))
    assert not both.errors and both.config["task.name.grouper.factory"] == "partition"
    assert any(n.level == "warning" and "containers" in n.message for n in both.notes)
    other = translate(Config({"job.systemstreampartition.grouper.factory":
                              "org.apache.samza.container.grouper.stream.GroupBySystemStreamPartitionFactory"}))
    assert other.errors and "GroupByPartition" in other.errors[0].message


def test_samza_stream_id_configs_move_under_their_system(tmp_path):
    """Samza's ``streams.<id>.samza.system`` / ``samza.physical.name`` / ``samza.reset.offset`` …:
    every key of a stream id lands on ``systems.<s>.streams.<physical>.``; a stream id without a system
    (and no job.default.system) is an error naming the key to set."""
    got = translate({"streams.page-views.samza.system": "kafka",
                     "streams.page-views.samza.physical.name": "PageViewEvent",
                     "streams.page-views.samza.reset.offset": "true",
                     "streams.page-views.samza.offset.default": "oldest",
                     "streams.clicks.samza.bootstrap": "true",
                     "job.default.system": "delta",
                     "streams.hub.eventhubs.namespace": "ns"})
    assert not got.errors
    config = dict(got.config.items())
    assert config["systems.kafka.streams.PageViewEvent.samza.reset.offset"] == "true"
    assert config["systems.kafka.streams.PageViewEvent.samza.offset.default"] == "oldest"
    assert config["systems.delta.streams.clicks.samza.bootstrap"] == "true"
    assert config["streams.hub.eventhubs.namespace"] == "ns"  # read there by the Event Hubs mapping
    assert not any(k.startswith(("streams.page-views.", "streams.clicks.")) for k in config)
    assert dict(translate(config).config.items()) == config  # idempotent
    missing = translate({"streams.orphan.samza.reset.offset": "true"})
    assert [n.key for n in missing.errors] == ["streams.orphan.samza.reset.offset"]
    assert "streams.orphan.samza.system" in missing.errors[0].message
    clash = translate({"streams.a.samza.system": "kafka", "streams.a.samza.bootstrap": "true",
                       "systems.kafka.streams.a.samza.bootstrap": "false"})
    assert clash.errors and "keep one" in clash.errors[0].message
