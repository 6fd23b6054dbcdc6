"""``sparza snapshots show|restore|verify`` and ``sparza gc`` on a local and an Azurite blob store."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sparza.blobstore import blob_store_manager_from_config
from sparza.cli import app
from sparza.config import Config
from sparza.state.backup import StateBackup


@pytest.fixture
def config_file(backend: str, tmp_path: Path, unique_name: str, request: pytest.FixtureRequest) -> Path:
    if backend == "local":
        text = f"blob.store.manager.factory=local\nblob.store.local.root={tmp_path / 'blobs'}\n"
    else:
        azurite = request.getfixturevalue("azurite")
        text = (f"blob.store.manager.factory=azure\nblob.store.azure.container={unique_name}cli\n"
                f"azure.storage.connect={azurite.connection_string}\n")
    path = tmp_path / "job.properties"
    path.write_text(text + "job.name=wordcount\njob.id=1\n")
    return path


def _snapshot(config_file: Path, tmp_path: Path) -> str:
    src = tmp_path / "cp-3"
    (src / "sub").mkdir(parents=True)
    (src / "000001.sst").write_bytes(b"s" * 5000)
    (src / "sub" / "CURRENT").write_bytes(b"MANIFEST-1\n")
    store = blob_store_manager_from_config(Config.from_file(config_file))
    with StateBackup(store, "wordcount", "1", "Partition 0") as backup:
        index_id = backup.upload("counts", src, None)
        backup.cleanup(index_id)
    store.close()
    return index_id


def test_show_restore_verify(config_file: Path, tmp_path: Path) -> None:
    index_id = _snapshot(config_file, tmp_path)
    runner = CliRunner()
    out = runner.invoke(app, ["snapshots", "show", index_id, "--config", str(config_file)])
    assert out.exit_code == 0, out.output
    assert "store 'counts'" in out.output and "checkpoint 3" in out.output and "sub/CURRENT" in out.output
    out = runner.invoke(app, ["snapshots", "show", index_id, "--json", "--config", str(config_file)])
    assert '"dir-index"' in out.output

    dest = tmp_path / "restored"
    out = runner.invoke(app, ["snapshots", "restore", index_id, str(dest), "--config", str(config_file)])
    assert out.exit_code == 0, out.output
    assert (dest / "000001.sst").read_bytes() == b"s" * 5000 and (dest / "sub" / "CURRENT").exists()

    out = runner.invoke(app, ["snapshots", "verify", index_id, "--config", str(config_file)])
    assert out.exit_code == 0 and "ok, 2 files" in out.output


def test_verify_reports_a_missing_blob(config_file: Path, tmp_path: Path) -> None:
    index_id = _snapshot(config_file, tmp_path)
    store = blob_store_manager_from_config(Config.from_file(config_file))
    with StateBackup(store, "wordcount", "1", "Partition 0") as backup:
        blob = next(backup.read_index(index_id).dir_index.present_blobs()).blob_id
    store.purge(blob)
    out = CliRunner().invoke(app, ["snapshots", "verify", index_id, "--config", str(config_file)])
    assert out.exit_code == 1 and "1 problem" in out.output


def test_gc_removes_only_expired_blobs(config_file: Path, tmp_path: Path) -> None:
    import io

    from sparza.blobstore import Metadata

    index_id = _snapshot(config_file, tmp_path)
    store = blob_store_manager_from_config(Config.from_file(config_file))
    orphan = store.put(io.BytesIO(b"orphan of a crashed commit"), Metadata("x.sst", job_name="wordcount"))
    store.close()
    runner = CliRunner()
    out = runner.invoke(app, ["gc", "--config", str(config_file)])
    assert out.exit_code == 0 and "removed 0 expired" in out.output
    later = int(time.time() * 1000) + 31 * 86_400_000
    out = runner.invoke(app, ["gc", "--dry-run", "--now-ms", str(later), "--config", str(config_file)])
    assert f"would remove expired {orphan}" in out.output
    out = runner.invoke(app, ["gc", "--now-ms", str(later), "--config", str(config_file)])
    assert out.exit_code == 0 and f"removed expired {orphan}" in out.output and "removed 1 expired" in out.output
    out = runner.invoke(app, ["snapshots", "verify", index_id, "--config", str(config_file)])
    assert out.exit_code == 0, out.output  # the committed snapshot survived gc
