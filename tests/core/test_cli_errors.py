"""Every command group of the ``sparza`` CLI ends a failure with one line, never a traceback;
``--debug`` shows the traceback. Each case runs the real CLI in a subprocess against real storage
(Azurite with a wrong key, a port nothing listens on, missing files and streams)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from sparza.azure import AZURITE_ACCOUNT_NAME, StorageAccount

REPO = Path(__file__).resolve().parents[2]
WRONG_KEY = "d3Jvbmcta2V5LW5vdC10aGUtcmVhbC1vbmU="


def _sparza(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop("AZURE_STORAGE_CONNECTION_STRING", None)
    env.pop("SPARZA_DEBUG", None)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return subprocess.run([sys.executable, "-c", "from sparza.cli import main; main()", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120, check=False, env=env)


def _one_line(result: subprocess.CompletedProcess[str], *needles: str) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip() and not line.startswith("warning:")]
    assert result.returncode in (1, 2), (result.returncode, result.stdout[-2000:], result.stderr[-3000:])
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    assert len(lines) == 1, result.stderr[-3000:]
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def _wrong_key(account: StorageAccount) -> str:
    return (f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT_NAME};AccountKey={WRONG_KEY};"
            f"BlobEndpoint={account.blob_endpoint};TableEndpoint={account.table_endpoint};")


def _config(path: Path, values: dict[str, str]) -> str:
    path.write_text(yaml.safe_dump(values))
    return str(path)


def _job(work_dir: Path, **values: str) -> dict[str, str]:
    return {"job.name": "j", "task.class": "examples.keyed_count.task.KeyedCountTask", "task.inputs": "delta.events",
            "systems.delta.samza.factory": "delta", "systems.delta.delta.root": str(work_dir / "streams"),
            **values}


@pytest.fixture
def bad_key_job(work_dir: Path, azure_account: StorageAccount, unique_name: str) -> str:
    """A job whose checkpoints and blob store live in Azurite, reached with a wrong account key."""
    return _config(work_dir / "bad-key.yaml", _job(
        work_dir, **{"azure.storage.connect": _wrong_key(azure_account), "job.checkpoint.factory": "azure",
                     "job.checkpoint.azure.container": unique_name, "blob.store.manager.factory": "azure",
                     "blob.store.azure.container": unique_name, "job.coordinator.factory": "azure"}))


def test_checkpoints_show_with_a_wrong_account_key(bad_key_job: str, work_dir: Path,
                                                   azure_account: StorageAccount) -> None:
    line = _one_line(_sparza("checkpoints", "show", "-c", bad_key_job, cwd=work_dir),
                     "refused the credentials", azure_account.blob_endpoint)
    assert WRONG_KEY not in line


def test_checkpoints_show_with_the_key_shown_traceback_under_debug(bad_key_job: str, work_dir: Path) -> None:
    result = _sparza("checkpoints", "show", "-c", bad_key_job, "--debug", cwd=work_dir)
    assert result.returncode != 0
    assert "Traceback" in result.stderr


def test_checkpoints_drop_intent_of_a_missing_config_file(work_dir: Path) -> None:
    _one_line(_sparza("checkpoints", "drop-intent", "-c", str(work_dir / "nope.yaml"), "--task", "Partition 0",
                      cwd=work_dir), "nope.yaml")


def test_snapshots_show_with_a_wrong_account_key(bad_key_job: str, work_dir: Path) -> None:
    _one_line(_sparza("snapshots", "show", "some-blob", "-c", bad_key_job, cwd=work_dir), "refused the credentials")


def test_coordinator_status_with_a_wrong_account_key(bad_key_job: str, work_dir: Path) -> None:
    _one_line(_sparza("coordinator", "status", "-c", bad_key_job, cwd=work_dir), "credentials")


def test_blobs_ls_against_storage_that_is_not_running(work_dir: Path) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    account = StorageAccount.from_keys(AZURITE_ACCOUNT_NAME, WRONG_KEY, f"http://127.0.0.1:{port}/x")
    _one_line(_sparza("blobs", "ls", "out", "--connection-string", account.connection_string(), cwd=work_dir),
              f"127.0.0.1:{port}")


def test_stream_describe_of_a_missing_stream(work_dir: Path) -> None:
    config = _config(work_dir / "job.yaml", _job(work_dir))
    _one_line(_sparza("stream", "describe", "nosuch", "-c", config, cwd=work_dir), "nosuch")


def test_config_check_of_a_file_that_does_not_parse(work_dir: Path) -> None:
    path = work_dir / "broken.yaml"
    path.write_text("job.name: [unclosed\n")
    _one_line(_sparza("config", "check", "-c", str(path), cwd=work_dir), "broken.yaml")


def test_run_of_a_missing_config_file(work_dir: Path) -> None:
    _one_line(_sparza("run", "-c", str(work_dir / "nope.yaml"), cwd=work_dir), "nope.yaml")


def test_checkpoints_show_against_storage_that_hangs(work_dir: Path, silent_server: str) -> None:
    from sparza.azure import AZURITE_ACCOUNT_KEY

    connect = (f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT_NAME};AccountKey={AZURITE_ACCOUNT_KEY};"
               f"BlobEndpoint={silent_server};")
    config = _config(work_dir / "hang.yaml", _job(
        work_dir, **{"azure.storage.connect": connect, "job.checkpoint.factory": "azure",
                     "job.checkpoint.azure.container": "cps", "azure.storage.timeout.ms": "1000"}))
    _one_line(_sparza("checkpoints", "show", "-c", config, cwd=work_dir), silent_server,
              "did not answer within 1 s", "azure.storage.timeout.ms")
