"""Which storage account a config means, and whether it answers.

Resolution order for a storage account (first match wins):

1. explicit keys under a prefix (``systems.<s>.azureblob.account.name`` / ``account.key`` /
   ``endpoint``; ``sensitive.account.key`` is accepted too),
2. ``azure.storage.connect`` (a connection string),
3. the ``AZURE_STORAGE_CONNECTION_STRING`` environment variable,
4. the embedded dev storage (a running ``sparza dev-storage``, found by its record: :mod:`sparza.azure.local`).

Account keys and connection strings are kept out of ``repr``, logs and error messages.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from sparza.azure.account import StorageAccount, container_name_problem
from sparza.azure.errors import explain_storage_error
from sparza.azure.local import running_emulator
from sparza.config import Config
from sparza.errors import ConfigError, StartCheckError

__all__ = ["check_container", "resolve_storage_account"]


def check_container(account: StorageAccount, container: str, key: str, timeout_s: float) -> None:
    """One cheap authenticated call (container properties, no retries, ``timeout_s`` to connect and answer):
    raises :class:`~sparza.errors.StartCheckError` naming ``key`` when the name is invalid, the
    credentials are refused or the endpoint is unreachable. A missing container is fine (it is created)."""
    from azure.core.exceptions import ResourceNotFoundError

    problem = container_name_problem(container)
    if problem is not None:
        raise StartCheckError(key, container, "", message=f"config key '{key}' = {container!r} is not a valid "
                                                          f"Azure container name: {problem}")
    client = account.blob_service_client(retry_total=0, timeout_s=max(1, int(timeout_s)),
                                         connection_timeout=timeout_s, read_timeout=timeout_s)
    try:
        client.get_container_client(container).get_container_properties()
    except ResourceNotFoundError:
        return  # authenticated (a wrong key is refused before the lookup): the store creates it
    except Exception as exc:
        raise StartCheckError(key, container, "", message=f"config key '{key}' (container {container!r}): "
                                                          f"{explain_storage_error(exc, account, timeout_s)}") from exc
    finally:
        client.close()


def resolve_storage_account(config: Mapping[str, str] | None = None, prefix: str = "",
                            environ: Mapping[str, str] | None = None,
                            allow_dev_storage: bool = True) -> StorageAccount:
    """The storage account the config points at (see the module docstring for the order).

    ``prefix`` is where per-system keys live, e.g. ``systems.out.azureblob.``. Raises
    :class:`ConfigError` naming the missing key when nothing is configured and no dev storage runs.
    """
    cfg = Config.of(config)
    env = os.environ if environ is None else environ
    if prefix and not prefix.endswith("."):
        prefix += "."
    name = cfg.get_str(prefix + "account.name", None) if prefix else None
    key = None
    if prefix:
        key = cfg.get_str(prefix + "account.key", None) or cfg.get_str(prefix + "sensitive.account.key", None)
    proxy = None
    if prefix and cfg.get_bool(prefix + "proxy.use", False):
        host = cfg.get_str(prefix + "proxy.hostname")
        port = cfg.get_int(prefix + "proxy.port", min_value=1)
        proxy = f"{host}:{port}"
    if name or key:
        if not name:
            raise ConfigError(prefix + "account.name", None, "the storage account name (account.key is set)")
        if not key:
            raise ConfigError(prefix + "account.key", None, f"the key of storage account {name!r}")
        endpoint = cfg.get_str(prefix + "endpoint", None)
        return StorageAccount.from_keys(name, key, endpoint, cfg.get_str(prefix + "table.endpoint", None), proxy)
    connect = cfg.get_str("azure.storage.connect", None)
    if connect:
        account = StorageAccount.from_connection_string(connect, source="azure.storage.connect")
    elif env.get("AZURE_STORAGE_CONNECTION_STRING"):
        account = StorageAccount.from_connection_string(env["AZURE_STORAGE_CONNECTION_STRING"],
                                                        source="AZURE_STORAGE_CONNECTION_STRING")
    else:
        found = running_emulator() if allow_dev_storage else None
        if found is None:
            missing = (prefix + "account.name") if prefix else "azure.storage.connect"
            raise ConfigError(missing, None,
                              "an Azure storage account: set account.name/account.key, azure.storage.connect or "
                              "AZURE_STORAGE_CONNECTION_STRING, or start local storage with "
                              "'sparza dev-storage start'")
        account = found
    if proxy:
        account = StorageAccount(account.account_name, account.account_key, account.blob_endpoint,
                                 account.table_endpoint, proxy, account.source)
    return account
