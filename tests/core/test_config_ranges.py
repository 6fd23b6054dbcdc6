"""Settings outside their documented range are configuration errors found before anything runs: by
``sparza config check`` (one problem line naming the key and the limit) and by ``sparza run`` in seconds,
before Spark starts (exit 2, one line). Each case through the CLI, as a user types it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]


def _sparza(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("SPARZA_DEBUG", "AZURE_STORAGE_CONNECTION_STRING")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["COLUMNS"] = "400"
    return subprocess.run([sys.executable, "-c", "from sparza.cli import main; main()", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120, check=False, env=env)


def _job(work_dir: Path, **values: str) -> dict[str, str]:
    return {"job.name": "j", "task.class": "examples.keyed_count.task.KeyedCountTask", "task.inputs": "delta.events",
            "systems.delta.samza.factory": "delta", "systems.delta.delta.root": str(work_dir / "streams"),
            "stores.counts.factory": "rocksdb", "job.logged.store.base.dir": str(work_dir / "state"),
            "blob.store.local.root": str(work_dir / "blobs"), **values}


BLOB = {"systems.out-blobs.samza.factory": "azureblob"}
KAFKA = {"systems.k.samza.factory": "kafka", "systems.k.consumer.bootstrap.servers": "127.0.0.1:1"}

CASES = [
    pytest.param({**BLOB, "systems.out-blobs.azureblob.maxFlushThresholdSize": "5000000000"},
                 "systems.out-blobs.azureblob.maxFlushThresholdSize", "4000 MiB", id="azure-block-limit"),
    pytest.param({**BLOB, "systems.out-blobs.azureblob.maxBlobSize": "500TB"},
                 "systems.out-blobs.azureblob.maxBlobSize", "50,000 blocks", id="azure-blob-limit"),
    pytest.param({**BLOB, "systems.out-blobs.azureblob.threadPoolCount": "0"},
                 "systems.out-blobs.azureblob.threadPoolCount", "0", id="azure-threads"),
    pytest.param({**KAFKA, "systems.k.producer.batch.num.messages": "0"},
                 "systems.k.producer.batch.num.messages", "1..1000000", id="librdkafka-range"),
    pytest.param({**KAFKA, "systems.k.consumer.fetch.wait.max.mss": "20"},
                 "systems.k.consumer.", "fetch.wait.max.mss", id="librdkafka-unknown"),
    pytest.param({**KAFKA, "systems.k.kafka.read.timeout.ms": "sometimes"},
                 "systems.k.kafka.read.timeout.ms", "sometimes", id="kafka-own-key"),
    pytest.param({"stores.counts.rocksdb.num.write.buffers": "0"},
                 "stores.counts.rocksdb.num.write.buffers", "at least 1", id="rocksdb-range"),
    pytest.param({"blob.store.file.chunk.size": "1KB"}, "blob.store.file.chunk.size", "1048576", id="backup-chunk"),
    pytest.param({"blob.store.azure.block.size": "5000MB"}, "blob.store.azure.block.size", "4000 MiB",
                 id="blob-store-block"),
    pytest.param({"job.coordinator.factory": "azure", "job.coordinator.azure.lease.duration.ms": "90s"},
                 "job.coordinator.azure.lease.duration.ms", "15 to 60 seconds", id="azure-lease"),
    pytest.param({"task.dead.letter.stream": "nodot"}, "task.dead.letter.stream", "system.stream",
                 id="dead-letter-stream"),
    pytest.param({"systems.delta.streams.stats.delta.table.schema": "page strng"},
                 "systems.delta.streams.stats.delta.table.schema", "strng", id="typed-table-schema"),
]


@pytest.mark.parametrize(("values", "key", "limit"), CASES)
def test_config_check_names_the_key_and_the_limit(work_dir: Path, values: dict[str, str], key: str,
                                                   limit: str) -> None:
    path = work_dir / "job.yaml"
    path.write_text(yaml.safe_dump(_job(work_dir, **values)))
    result = _sparza("config", "check", "--config", str(path), cwd=REPO)
    assert result.returncode == 1, result.stdout[-3000:]
    problems = result.stdout.split("problems (", 1)[1].splitlines()[1:]
    assert problems and key in problems[0] and limit in problems[0], result.stdout[-3000:]


def test_run_refuses_a_producer_setting_beyond_azure_in_seconds_before_spark(work_dir: Path) -> None:
    """The 5 GB flush threshold of the first hour: exit 2 and one line, before a SparkSession exists."""
    path = work_dir / "job.yaml"
    path.write_text(yaml.safe_dump(_job(work_dir, **BLOB, **{
        "systems.out-blobs.azureblob.maxFlushThresholdSize": "5000000000", "task.ignored.exceptions": "*"})))
    result = _sparza("run", "--config", str(path), "--once", cwd=REPO)
    assert result.returncode == 2, result.stderr[-3000:]
    lines = [line for line in result.stderr.splitlines() if line.strip() and not line.startswith("warning:")]
    assert len(lines) == 1 and "maxFlushThresholdSize" in lines[0] and "4000 MiB" in lines[0], result.stderr
    assert "sparza: job" not in result.stderr and "log4j" not in result.stderr   # no SparkSession was built
