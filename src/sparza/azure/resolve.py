"""Which storage account a config means, and whether it answers.

Resolution order for a storage account (first match wins):

1. a system's own keys (``systems.<s>.azureblob.account.name`` / ``account.key`` / ``endpoint``...), which
   the package of that kind of system declares and hands over as :class:`AccountKeys`,
2. ``azure.storage.connect`` (a connection string),
3. the ``AZURE_STORAGE_CONNECTION_STRING`` environment variable,
4. the embedded dev storage (a running ``sparza dev-storage``, found by its record: :mod:`sparza.azure.local`).

Account keys and connection strings are kept out of ``repr``, logs and error messages.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from sparza.azure.account import STORAGE_CONNECT, StorageAccount, container_name_problem
from sparza.azure.errors import explain_storage_error
from sparza.azure.local import running_emulator
from sparza.azure.requests import StorageRequests
from sparza.config import DefaultKey, OptionalKey
from sparza.errors import ConfigError, StartCheckError

__all__ = ["AccountKeys", "check_container", "resolve_storage_account"]


@dataclass(frozen=True)
class AccountKeys:
    """The keys by which one kind of system names its own storage account (``systems.<system>.delta.account.name``
    ...), declared by that system's package; optional members are keys that kind of system does not have.
    ``alternative_key`` is a second spelling of the account key (``sensitive.account.key``)."""

    name: OptionalKey[str]
    key: OptionalKey[str]
    endpoint: OptionalKey[str]
    table_endpoint: OptionalKey[str] | None = None
    alternative_key: OptionalKey[str] | None = None
    proxy_use: DefaultKey[bool] | None = None
    proxy_hostname: OptionalKey[str] | None = None
    proxy_port: OptionalKey[int] | None = None


def check_container(account: StorageAccount, container: str, key: str, timeout_s: float, *,
                    requests: StorageRequests | None = None) -> None:
    """One cheap authenticated call (container properties, no retries, ``timeout_s`` to connect and answer):
    raises :class:`~sparza.errors.StartCheckError` naming ``key`` when the name is invalid, the
    credentials are refused or the endpoint is unreachable. A missing container is fine (it is created).
    ``requests`` counts the call."""
    from azure.core.exceptions import ResourceNotFoundError

    problem = container_name_problem(container)
    if problem is not None:
        raise StartCheckError(key, container, "", message=f"config key '{key}' = {container!r} is not a valid "
                                                          f"Azure container name: {problem}")
    client = account.blob_service_client(retry_total=0, timeout_s=max(1, int(timeout_s)), requests=requests,
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


def resolve_storage_account(config: Mapping[str, str] | None = None, keys: AccountKeys | None = None, *,
                            names: Mapping[str, str] | None = None, environ: Mapping[str, str] | None = None,
                            allow_dev_storage: bool = True) -> StorageAccount:
    """The storage account the config points at (see the module docstring for the order).

    ``keys`` are a system's own account keys, filled with ``names`` (``{"system": "out"}``). Raises
    :class:`ConfigError` naming the missing key when nothing is configured and no dev storage runs.
    """
    cfg: Mapping[str, str] = config if config is not None else {}
    env = os.environ if environ is None else environ
    fill = dict(names or {})
    name = key = proxy = None
    if keys is not None:
        name = keys.name.get(cfg, **fill)
        key = keys.key.get(cfg, **fill) or (keys.alternative_key.get(cfg, **fill) if keys.alternative_key else None)
        if keys.proxy_use is not None and keys.proxy_use.get(cfg, **fill):
            assert keys.proxy_hostname is not None and keys.proxy_port is not None
            proxy = f"{keys.proxy_hostname.require(cfg, **fill)}:{keys.proxy_port.require(cfg, **fill)}"
    if keys is not None and (name or key):
        if not name:
            raise ConfigError(keys.name.name(**fill), None, "the storage account name (account.key is set)")
        if not key:
            raise ConfigError(keys.key.name(**fill), None, f"the key of storage account {name!r}")
        table_endpoint = keys.table_endpoint.get(cfg, **fill) if keys.table_endpoint is not None else None
        return StorageAccount.from_keys(name, key, keys.endpoint.get(cfg, **fill), table_endpoint, proxy)
    connect = STORAGE_CONNECT.get(cfg)
    if connect:
        account = StorageAccount.from_connection_string(connect, source="azure.storage.connect")
    elif env.get("AZURE_STORAGE_CONNECTION_STRING"):
        account = StorageAccount.from_connection_string(env["AZURE_STORAGE_CONNECTION_STRING"],
                                                        source="AZURE_STORAGE_CONNECTION_STRING")
    else:
        found = running_emulator() if allow_dev_storage else None
        if found is None:
            missing = keys.name.name(**fill) if keys is not None else STORAGE_CONNECT.key
            raise ConfigError(missing, None,
                              "an Azure storage account: set account.name/account.key, azure.storage.connect or "
                              "AZURE_STORAGE_CONNECTION_STRING, or start local storage with "
                              "'sparza dev-storage start'")
        account = found
    if proxy:
        account = StorageAccount(account.account_name, account.account_key, account.blob_endpoint,
                                 account.table_endpoint, proxy, account.source)
    return account
