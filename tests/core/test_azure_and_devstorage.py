from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from sparza.azure import StorageAccount, resolve_storage_account
from sparza.config import Config
from sparza.errors import ConfigError
from sparza.systems import get_system_factory, load_object
from sparza.systems.azureblob.settings import ACCOUNT_KEYS

SECRET = "c2VjcmV0LWtleS1mb3ItdGVzdHM="
PREFIX = "systems.out.azureblob."


def test_account_from_keys_with_endpoint_and_proxy():
    cfg = Config({PREFIX + "account.name": "acct", PREFIX + "sensitive.account.key": SECRET,
                  PREFIX + "endpoint": "https://acct.blob.core.chinacloudapi.cn",
                  PREFIX + "proxy.use": "true", PREFIX + "proxy.hostname": "proxy", PREFIX + "proxy.port": "3128"})
    acct = resolve_storage_account(cfg, ACCOUNT_KEYS, names={"container": "out"}, environ={})
    assert acct.account_name == "acct"
    assert acct.blob_endpoint == "https://acct.blob.core.chinacloudapi.cn"
    assert acct.table_endpoint == "https://acct.table.core.chinacloudapi.cn"
    assert acct.proxy == "proxy:3128"
    assert SECRET not in repr(acct)


def test_missing_account_name_is_one_clear_line():
    cfg = Config({PREFIX + "account.key": SECRET})
    with pytest.raises(ConfigError) as info:
        resolve_storage_account(cfg, ACCOUNT_KEYS, names={"container": "out"}, environ={})
    assert f"'{PREFIX}account.name' is missing" in str(info.value)
    assert SECRET not in str(info.value)


def test_nothing_configured_says_what_to_do(tmp_path, monkeypatch):
    monkeypatch.setenv("SPARZA_HOME", str(tmp_path))
    with pytest.raises(ConfigError, match="sparza dev-storage start"):
        resolve_storage_account(Config(), environ={})


def test_connection_string_from_config_and_env(azurite):
    conn = azurite.connection_string
    acct = resolve_storage_account(Config({"azure.storage.connect": conn}), environ={})
    assert acct.blob_endpoint == azurite.account.blob_endpoint
    assert acct.is_emulator
    env_acct = resolve_storage_account(Config(), environ={"AZURE_STORAGE_CONNECTION_STRING": conn})
    assert env_acct.table_endpoint == azurite.account.table_endpoint
    # the resolved account really reaches the service
    assert env_acct.blob_service_client().get_service_properties() is not None
    with pytest.raises(ConfigError) as info:
        StorageAccount.from_connection_string("AccountName=x;" + "AccountKey")
    assert "AccountKey" not in str(info.value).split(":")[0]


def test_delta_storage_options_for_emulator(azurite):
    opts = azurite.account.delta_storage_options()
    assert "use_emulator" not in opts  # it would override the port (delta-rs 1.6)
    assert opts["allow_http"] == "true"
    assert opts["azure_storage_endpoint"].endswith("/devstoreaccount1")


def _port_free(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) != 0


def test_dev_storage_cli_start_twice_status_stop(tmp_path, monkeypatch):
    env = {**os.environ, "SPARZA_HOME": str(tmp_path / "home")}
    cli = [sys.executable, "-m", "sparza.cli"]
    first = subprocess.run([*cli, "dev-storage", "start"], env=env, capture_output=True, text=True, timeout=60)
    assert first.returncode == 0, first.stderr
    assert "dev storage started" in first.stdout
    conn = first.stdout.strip().splitlines()[-1]
    try:
        second = subprocess.run([*cli, "dev-storage", "start"], env=env, capture_output=True, text=True, timeout=60)
        assert "already running" in second.stdout
        # a snippet with the printed connection string can create a container
        client = StorageAccount.from_connection_string(conn).blob_service_client()
        client.create_container("fromcli")
        assert "fromcli" in [c.name for c in client.list_containers()]
        status = subprocess.run([*cli, "dev-storage", "status"], env=env, capture_output=True, text=True, timeout=30)
        assert status.returncode == 0 and "running" in status.stdout
        # with nothing configured, an account resolves to the running dev storage (its recorded ports)
        monkeypatch.setenv("SPARZA_HOME", str(tmp_path / "home"))
        found = resolve_storage_account(Config(), environ={})
        assert found.blob_endpoint == StorageAccount.from_connection_string(conn).blob_endpoint
        assert found.table_endpoint == StorageAccount.from_connection_string(conn).table_endpoint
    finally:
        stop = subprocess.run([*cli, "dev-storage", "stop"], env=env, capture_output=True, text=True, timeout=60)
    assert "stopped" in stop.stdout
    port = int(conn.split("BlobEndpoint=http://127.0.0.1:")[1].split("/")[0])
    assert _port_free(port)
    status = subprocess.run([*cli, "dev-storage", "status"], env=env, capture_output=True, text=True, timeout=30)
    assert status.returncode == 1
    assert Path(tmp_path / "home" / "azurite" / "data").is_dir()
    with pytest.raises(ConfigError, match="sparza dev-storage start"):
        resolve_storage_account(Config(), environ={})  # the record names a stopped emulator


def test_cli_version():
    out = subprocess.run([sys.executable, "-m", "sparza.cli", "--version"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.startswith("sparza ")


def test_system_registry():
    with pytest.raises(ConfigError, match="systems.x.samza.factory"):
        get_system_factory(Config(), "x")
    with pytest.raises(ConfigError, match="importable module"):
        get_system_factory(Config({"systems.x.samza.factory": "no.such.module.Factory"}), "x")
    assert load_object("sparza.config:Config") is Config
    assert load_object("sparza.config.Config") is Config
