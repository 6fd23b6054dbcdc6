"""Secrets (account keys, connection strings) never reach what Spark records: the plan (``explain``), query
progress, the session's conf, Spark's checkpoint dir, a Connect server's event log and log; and the job still
works, reading them from the per-run file sparza ships (runtime/secrets.py). Each haystack is shown to hold
the job (so the check is not vacuous), and the old way, the whole config as the source's option, is shown to
leak into the plan."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from examples.keyed_count.load import append_messages
from pyspark import SparkFiles, cloudpickle
from tests.runtime.helpers import expected_counts, final_counts, run_sparza, sparza_env, write_config

from sparza.azure import AZURITE_ACCOUNT_KEY
from sparza.config import Config
from sparza.runtime import JobRunner
from sparza.runtime.driver.source import SparzaBatchReader, SparzaDataSource, SparzaStreamReader
from sparza.runtime.secrets import SECRETS_REF_KEY, resolve_secrets, split_secrets

SECRET = AZURITE_ACCOUNT_KEY  # the account key inside azure.storage.connect


def _azure_job(make_job, connection_string: str, container: str, **overrides: str) -> Config:
    """The keyed count with its blob store and task checkpoints on Azurite: executors need the key."""
    return make_job(**{"blob.store.manager.factory": "azure", "blob.store.azure.container": container,
                       "azure.storage.connect": connection_string, **overrides})


def _text_of(directory: Path) -> str:
    return "\n".join(p.read_text(errors="replace") for p in sorted(directory.rglob("*")) if p.is_file())


def test_split_keeps_secret_keys_and_the_drivers_connection_string_out_of_the_shipped_config():
    config = {"job.name": "kc", "azure.storage.connect": "AccountKey=abc", "systems.d.delta.account.key": "k1",
              "sensitive.systems.out.azureblob.account.key": "k2", "systems.k.consumer.sasl.password": "p"}
    public, secrets = split_secrets(config, environ={})
    assert public == {"job.name": "kc"}
    assert secrets == {k: v for k, v in config.items() if k != "job.name"}
    public, secrets = split_secrets({"job.name": "kc"}, environ={"AZURE_STORAGE_CONNECTION_STRING": "AccountKey=e"})
    assert (public, secrets) == ({"job.name": "kc"}, {"azure.storage.connect": "AccountKey=e"})
    assert resolve_secrets(Config(public)) == Config(public)  # nothing shipped: nothing to merge


@pytest.mark.spark
@pytest.mark.azurite
def test_a_local_run_keeps_the_key_out_of_plan_progress_conf_and_checkpoints(spark, make_job, azure_connection_string,
                                                                            unique_name, capsys):
    # The micro-batch mode: its plan and progress are Spark's (containers ship the config in the epoch plan,
    # which test_sparza_run_remote_keeps_the_key_out_of_the_connect_servers_event_log covers).
    config = _azure_job(make_job, azure_connection_string, unique_name, **{"job.execution.mode": "batches"})
    append_messages(config, 300, 5, commit_size=300)
    # The old way: the whole config as the source's option is in the plan Spark shows and logs.
    spark.dataSource.register(SparzaDataSource)
    spark.readStream.format("sparza").option("config", json.dumps(dict(config.items()))).load().explain(True)
    assert SECRET in capsys.readouterr().out

    runner = JobRunner(config, spark=spark, once=True, install_signal_handlers=False, status=lambda _: None)
    runner.start()
    while runner.poll():
        pass
    # What Spark ships to each task that runs a batch: the pickled reader whose read() runs it (the stream's;
    # on Spark Connect the batch reader, into the plan sent to the server), after the driver's source merged
    # the secrets back to plan (the reader is built in Spark's Python source runner, not here: rebuilt the same way).
    options = {"config": json.dumps(runner._shipped), "generation": "0", "task_count": str(runner._task_count)}
    stream_reader = SparzaStreamReader(options)
    splits = stream_reader.partitions(stream_reader.initialOffset(), stream_reader.initialOffset())
    assert SECRET in stream_reader.config.get_str("azure.storage.connect")  # not vacuous: merged back
    batch_reader = SparzaBatchReader(stream_reader.batch_options(splits))
    batch_reader.stream.config  # noqa: B018  (merges the secrets back, as read() does)
    shipped_functions = [cloudpickle.dumps(stream_reader), cloudpickle.dumps(batch_reader)]
    query = runner._query
    query.explain(True)
    # The source's plan as the runner built it (a running query's explain shows the micro-batch plan only).
    spark.readStream.format("sparza").option("config", json.dumps(runner._shipped)).load().explain(True)
    recorded = "\n".join([capsys.readouterr().out, str(query.lastProgress), str(query.recentProgress),
                          repr(spark.sparkContext.getConf().getAll()), _text_of(Path(runner.spark_checkpoint_dir))])
    outcome = runner.finish()
    runner.close()
    assert outcome.batches >= 1
    assert SECRET not in recorded
    assert shipped_functions and not any(SECRET.encode() in f for f in shipped_functions)
    # Not vacuous: the source's relation with its options and the batch plans are in there. (Spark shows the
    # shipped config option as redacted: its job.secrets.ref key matches spark.redaction.regex.)
    assert "StreamingRelationV2" in recorded and "config=" in recorded and '"Partition 1"' in recorded
    assert SECRETS_REF_KEY in runner._shipped and "azure.storage.connect" not in runner._shipped
    counts, rows = final_counts(config)
    assert counts == expected_counts(300, 5)
    assert rows == 300


def test_a_session_outliving_its_runners_keeps_one_secrets_file_for_them(spark, make_job, azure_connection_string,
                                                                          unique_name):
    # A coordinated processor runs each job model's runner on one session. Spark serves an added file from the
    # driver's copy while the session lives: the second runner failed its tasks ("exists and does not match
    # contents") once the first had removed its copy. Runners now share the file, and it outlives them.
    config = _azure_job(make_job, azure_connection_string, unique_name)
    names = []
    for first in (0, 200):
        append_messages(config, 200, 5, start=first, commit_size=200)
        runner = JobRunner(config, spark=spark, once=True, install_signal_handlers=False, status=lambda _: None)
        outcome = runner.run()
        assert outcome.exit_code == 0 and outcome.batches >= 1
        names.append(runner._shipped[SECRETS_REF_KEY])
        assert Path(SparkFiles.get(names[-1])).exists()  # Spark's copy
    assert names[0] == names[1]
    counts, rows = final_counts(config)
    assert counts == expected_counts(400, 5) and rows == 400


@pytest.mark.connect
@pytest.mark.azurite
@pytest.mark.slow
def test_sparza_run_remote_keeps_the_key_out_of_the_connect_servers_event_log(spark_connect_server, sparza_package,
                                                                             make_job, azure_connection_string,
                                                                             unique_name, work_dir):
    config = _azure_job(make_job, azure_connection_string, unique_name, **{
        "job.py.files": str(sparza_package), "job.filesystem.shared": "true"})
    append_messages(config, 600, 5, commit_size=300)
    path = write_config(config, work_dir / "job.yaml")
    env = {k: v for k, v in sparza_env().items() if k != "AZURE_STORAGE_CONNECTION_STRING"}
    result = run_sparza("run", "--config", str(path), "--once", "--remote", spark_connect_server.url, env=env,
                        timeout=420)
    assert result.returncode == 0, result.stderr[-3000:]
    counts, rows = final_counts(config)
    assert counts == expected_counts(600, 5)
    assert rows == 600
    events = _text_of(spark_connect_server.event_log_dir)
    assert "sparza-container-0" in events  # the containers' jobs are logged (their tag): the log is not empty
    server_log = (spark_connect_server.data_dir / spark_connect_server.LOG_NAME).read_text(errors="replace")
    client_dir = Path(config["job.logged.store.base.dir"]) / "_spark"
    for name, text in (("event log", events), ("server log", server_log), ("output", result.stdout + result.stderr),
                       ("client's plan log", _text_of(client_dir))):
        assert SECRET not in text, f"the account key is in the {name}"
    assert "sparza-secrets-" in events  # the key went as the run's secrets file (an artifact of the session)
