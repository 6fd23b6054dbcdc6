"""Samza job configs run: Samza's factory class names act like sparza's short names."""

from __future__ import annotations

import shutil

import pytest
from examples.keyed_count.load import append_messages
from tests.runtime.helpers import expected_counts, final_counts, run_sparza, sparza_env, write_config

from sparza.config import Config
from sparza.engine.jobconfig import JobConfig
from sparza.runtime import JobRunner, checkpoint_store_from_config

pytestmark = pytest.mark.spark

BLOBSTORE = "org.apache.samza.storage.blobstore.BlobStoreStateBackendFactory"
ROCKSDB = "org.apache.samza.storage.kv.RocksDbKeyValueStorageEngineFactory"


def _run(spark, config) -> JobRunner:
    runner = JobRunner(config, spark=spark, once=True, install_signal_handlers=False, status=lambda line: None)
    runner.run()
    return runner


def test_samza_blob_store_backend_class_backs_the_store_up(spark, make_job, work_dir):
    # Samza's own class name for the blob-store backend gives the store a backup, as sparza's short name does.
    config = make_job(**{"stores.counts.backup.factories": BLOBSTORE, "stores.counts.factory": ROCKSDB,
                         "task.max.batch.messages": "10000"})
    append_messages(config, 200, 5, commit_size=200)
    _run(spark, config)
    job = JobConfig.from_config(config)
    snapshots = [cp.stores.get("counts", "") for cp in checkpoint_store_from_config(config, job.job_key)
                 .read_all().values()]
    assert len(snapshots) == 2 and all(s and not s.startswith("local:") for s in snapshots), snapshots
    shutil.rmtree(work_dir / "state")  # a new host: the state must come back from the blob store
    append_messages(config, 100, 5, start=200, commit_size=100)
    _run(spark, config)
    counts, _ = final_counts(config)
    assert counts == expected_counts(300, 5)


# hello-samza's wikipedia-stats job config, in Samza's exact spelling (its Kafka system included).
WIKIPEDIA_STATS = """\
job.factory.class=org.apache.samza.job.yarn.YarnJobFactory
job.name=wikipedia-stats
yarn.package.path=file://${basedir}/target/hello-samza-dist.tar.gz
app.class=samza.examples.wikipedia.task.application.WikipediaStatsStreamApplication
task.window.ms=10000
metrics.reporters=snapshot,jmx
metrics.reporter.snapshot.class=org.apache.samza.metrics.reporter.MetricsSnapshotReporterFactory
metrics.reporter.snapshot.stream=kafka.metrics
metrics.reporter.jmx.class=org.apache.samza.metrics.reporter.JmxReporterFactory
serializers.registry.json.class=org.apache.samza.serializers.JsonSerdeFactory
serializers.registry.string.class=org.apache.samza.serializers.StringSerdeFactory
serializers.registry.integer.class=org.apache.samza.serializers.IntegerSerdeFactory
systems.kafka.samza.factory=org.apache.samza.system.kafka.KafkaSystemFactory
systems.kafka.consumer.zookeeper.connect=localhost:2181/
systems.kafka.consumer.auto.offset.reset=largest
systems.kafka.producer.bootstrap.servers=localhost:9092
stores.wikipedia-stats.factory=org.apache.samza.storage.kv.RocksDbKeyValueStorageEngineFactory
stores.wikipedia-stats.changelog=kafka.wikipedia-stats-changelog
stores.wikipedia-stats.key.serde=string
stores.wikipedia-stats.msg.serde=integer
stores.wikipedia-stats.changelog.replication.factor=1
stores.wikipedia-stats.write.batch.size=0
stores.wikipedia-stats.object.cache.size=0
job.coordinator.system=kafka
job.coordinator.replication.factor=1
"""


def _has_kafka() -> bool:
    from sparza.systems import SYSTEM_FACTORIES

    return "kafka" in SYSTEM_FACTORIES


@pytest.mark.slow
def test_config_check_explains_every_key_of_a_samza_config(work_dir):
    path = work_dir / "wikipedia-stats.properties"
    path.write_text(WIKIPEDIA_STATS)
    result = run_sparza("config", "check", "--config", str(path), timeout=120)
    out = result.stdout
    # every key with its meaning, default and reader
    assert "stores.wikipedia-stats.factory = rocksdb" in out
    assert "store engine: rocksdb or memory" in out and "read by sparza.state.kv" in out
    assert "stores.wikipedia-stats.msg.serde = integer" in out
    assert "systems.kafka.producer.bootstrap.servers = localhost:9092" in out and "read by systems.kafka" in out
    assert "org.apache.samza.storage.kv.RocksDbKeyValueStorageEngineFactory → rocksdb" in out
    for key in ("job.factory.class", "yarn.package.path", "metrics.reporters", "stores.wikipedia-stats.changelog",
                "stores.wikipedia-stats.write.batch.size", "job.coordinator.system"):
        assert f"  {key}: a Samza key sparza does not use" in out, key
    if _has_kafka():
        assert result.returncode == 0 and "no problems" in out, out
    else:  # the Kafka system is not in this build: the one problem says so
        assert result.returncode == 1 and "problems (1):" in out and "names the kafka system" in out, out


@pytest.mark.slow
def test_config_migrate_says_what_to_change(work_dir):
    path = work_dir / "wikipedia-stats.properties"
    path.write_text(WIKIPEDIA_STATS)
    out_path = work_dir / "migrated.properties"
    result = run_sparza("config", "migrate", str(path), "--output", str(out_path), timeout=120)
    migrated = Config.from_file(out_path)
    assert migrated["stores.wikipedia-stats.factory"] == "rocksdb"
    assert migrated["stores.wikipedia-stats.backup.factories"] == "blobstore"  # in place of the changelog
    assert migrated["stores.wikipedia-stats.msg.serde"] == "integer"
    assert migrated["systems.kafka.samza.factory"] == "kafka"
    assert migrated["systems.kafka.consumer.zookeeper.connect"] == "localhost:2181/"  # --output keeps values
    for key in ("job.factory.class", "yarn.package.path", "metrics.reporters", "stores.wikipedia-stats.changelog",
                "serializers.registry.json.class"):
        assert key not in migrated, key
    assert "#   yarn.package.path: sparza runs on Spark" in result.stdout
    assert "# must be changed by hand:" in result.stdout and "port the Samza task or application" in result.stdout
    assert result.returncode == 1
    masked = run_sparza("config", "migrate", str(path), timeout=120).stdout
    assert "systems.kafka.consumer.zookeeper.connect=<secret" in masked


@pytest.mark.slow
def test_sparza_run_rejects_a_misspelled_key_in_one_line(make_job, work_dir):
    config = make_job(**{"stores.counts.factroy": "rocksdb"})
    result = run_sparza("run", "--config", str(write_config(config, work_dir / "job.yaml")), timeout=120,
                        env={**sparza_env(), "COLUMNS": "300"})
    assert result.returncode == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines == ["config error: unknown config key 'stores.counts.factroy': did you mean "
                     "'stores.counts.factory'?"], result.stderr


@pytest.mark.slow
def test_sparza_run_runs_a_job_config_in_samzas_spelling(make_job, work_dir):
    base = make_job()
    append_messages(base, 400, 6, commit_size=400)
    samza = {k: v for k, v in base.items() if not k.startswith(("stores.counts.", "systems.delta.streams."))}
    samza.update({
        "job.factory.class": "org.apache.samza.job.yarn.YarnJobFactory",
        "task.checkpoint.factory": "org.apache.samza.checkpoint.kafka.KafkaCheckpointManagerFactory",
        "task.checkpoint.system": "kafka",
        "serializers.registry.str.class": "org.apache.samza.serializers.StringSerdeFactory",
        "serializers.registry.js.class": "org.apache.samza.serializers.JsonSerdeFactory",
        "systems.delta.streams.counts.samza.key.serde": "str",
        "systems.delta.streams.counts.samza.msg.serde": "js",
        "stores.counts.factory": ROCKSDB,
        "stores.counts.key.serde": "str",
        "stores.counts.msg.serde": "js",
        "stores.counts.changelog": "kafka.counts-changelog",
        "stores.backup.factories": BLOBSTORE,
        "stores.counts.write.batch.size": "0",
    })
    path = work_dir / "job.properties"
    path.write_text("".join(f"{k}={v}\n" for k, v in sorted(samza.items())))
    result = run_sparza("run", "--config", str(path), "--once", "--master", "local[2]", timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    counts, rows = final_counts(base)
    assert counts == expected_counts(400, 6) and rows == 400
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning: ")]
    for key in ("job.factory.class", "task.checkpoint.system", "stores.counts.changelog",
                "stores.counts.write.batch.size"):
        assert sum(line.startswith(f"warning: {key}:") for line in warnings) == 1, (key, warnings)
    snapshots = [cp.stores.get("counts", "") for cp in checkpoint_store_from_config(base, "kc-1").read_all().values()]
    assert snapshots and all(s and not s.startswith("local:") for s in snapshots), snapshots
