"""What an Azure Storage account is to sparza: its name, key and endpoints (:class:`StorageAccount`),
how a connection string reads, Azurite's well-known account, and the account-wide config keys.

Which account a config means is decided in :mod:`sparza.azure.resolve`; what a failed request means,
in :mod:`sparza.azure.errors`. Account keys and connection strings are kept out of ``repr``, logs and
error messages.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sparza.azure.requests import StorageRequests
from sparza.config import STR, Int, define_check, define_key
from sparza.errors import ConfigError

__all__ = [
    "AZURITE_ACCOUNT_KEY",
    "AZURITE_ACCOUNT_NAME",
    "STORAGE_CONNECT",
    "STORAGE_TIMEOUT_MS",
    "TIMEOUT_KEY",
    "StorageAccount",
    "container_name_problem",
    "parse_connection_string",
    "storage_timeout_s",
]

AZURITE_ACCOUNT_NAME = "devstoreaccount1"
# Azurite's well-known development key: public, documented by Microsoft, only valid for the emulator.
AZURITE_ACCOUNT_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


STORAGE_CONNECT = define_key("azure.storage.connect", None,
                             "Connection string of the storage account for coordination, blob stores and Delta on "
                             "az:// (falls back to AZURE_STORAGE_CONNECTION_STRING, then the embedded dev storage).",
                             "sparza.azure", kind=STR)


TIMEOUT_KEY = "azure.storage.timeout.ms"
STORAGE_TIMEOUT_MS = define_key(TIMEOUT_KEY, 30000,
                                "How long the start checks of `sparza run` and the CLI's storage calls wait for Azure "
                                "Storage to connect and answer before reporting the endpoint as not answering (no "
                                "retries).", "sparza.azure", kind=Int(min_value=1))


def storage_timeout_s(config: Mapping[str, str]) -> float:
    """``azure.storage.timeout.ms`` in seconds (default 30 s)."""
    return STORAGE_TIMEOUT_MS.get(config) / 1000.0


define_check("sparza.azure", storage_timeout_s)


_CONTAINER = re.compile(r"^[a-z0-9](?:[a-z0-9]|-(?=[a-z0-9])){2,62}$")


def container_name_problem(name: str) -> str | None:
    """Why ``name`` is not a valid Azure container name (None when it is): 3-63 characters of lowercase
    letters, digits and single hyphens, starting and ending with a letter or digit."""
    if _CONTAINER.match(name):
        return None
    if not 3 <= len(name) <= 63:
        return f"it has {len(name)} characters; Azure container names have 3 to 63"
    if name != name.lower():
        return "it has uppercase letters; Azure container names are lowercase"
    if "--" in name or name.startswith("-") or name.endswith("-"):
        return "a hyphen is doubled or at an end; hyphens must sit between letters or digits"
    return "only lowercase letters, digits and hyphens are allowed in Azure container names"


def parse_connection_string(text: str) -> dict[str, str]:
    """Split ``Key=Value;Key=Value`` into a dict (values may contain ``=``). Never echoes the text."""
    parts: dict[str, str] = {}
    for item in text.strip().strip(";").split(";"):
        if not item.strip():
            continue
        name, sep, value = item.partition("=")
        if not sep:
            raise ConfigError("azure.storage.connect", "<connection string>",
                              "Key=Value pairs separated by ';' (check for a stray ';' or missing '=')",
                              secret=True)
        parts[name.strip()] = value.strip()
    return parts


@dataclass(frozen=True)
class StorageAccount:
    """Where and how to reach one storage account: name, key and service endpoints.

    ``proxy`` is ``host:port`` when the seed's ``proxy.use`` is on. Build clients with
    :meth:`blob_service_client` and :meth:`table_service_client`.
    """

    account_name: str
    account_key: str = field(repr=False)
    blob_endpoint: str
    table_endpoint: str
    proxy: str | None = None
    source: str = "config"

    @property
    def is_emulator(self) -> bool:
        """True when the endpoints are Azurite's (loopback, http)."""
        return self.blob_endpoint.startswith("http://")

    def connection_string(self) -> str:
        """A connection string for this account (contains the key: never log it)."""
        return (f"DefaultEndpointsProtocol={'http' if self.is_emulator else 'https'};"
                f"AccountName={self.account_name};AccountKey={self.account_key};"
                f"BlobEndpoint={self.blob_endpoint};TableEndpoint={self.table_endpoint};")

    def _client_kwargs(self, retry_total: int, timeout_s: int) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"retry_total": retry_total, "connection_timeout": timeout_s,
                                  "read_timeout": max(timeout_s, 60)}
        if self.proxy:
            kwargs["proxies"] = {"http": f"http://{self.proxy}", "https": f"http://{self.proxy}"}
        return kwargs

    def blob_service_client(self, *, retry_total: int = 3, timeout_s: int = 20, requests: StorageRequests | None = None,
                            **kwargs: Any) -> Any:
        """A ``BlobServiceClient`` with exponential retries (``retry_total`` attempts); ``requests`` counts every
        request it sends (:mod:`sparza.azure.requests`)."""
        from azure.storage.blob import BlobServiceClient, ExponentialRetry

        options = self._client_kwargs(retry_total, timeout_s)
        options["retry_policy"] = ExponentialRetry(initial_backoff=1, increment_base=2, retry_total=retry_total)
        if requests is not None:
            options.update(requests.blob_client_options())
        options.update(kwargs)
        return BlobServiceClient(account_url=self.blob_endpoint,
                                 credential={"account_name": self.account_name, "account_key": self.account_key},
                                 **options)

    def table_service_client(self, *, retry_total: int = 3, timeout_s: int = 20,
                             requests: StorageRequests | None = None, **kwargs: Any) -> Any:
        """A ``TableServiceClient`` for the same account; ``requests`` counts every request it sends."""
        from azure.core.credentials import AzureNamedKeyCredential
        from azure.data.tables import TableServiceClient

        options = self._client_kwargs(retry_total, timeout_s)
        if requests is not None:
            options.update(requests.table_client_options())
        options.update(kwargs)
        return TableServiceClient(endpoint=self.table_endpoint,
                                  credential=AzureNamedKeyCredential(self.account_name, self.account_key),
                                  **options)

    def delta_storage_options(self) -> dict[str, str]:
        """Storage options for delta-rs (``az://container/path`` URIs)."""
        options = {"account_name": self.account_name, "account_key": self.account_key}
        if self.is_emulator:
            # No use_emulator: in delta-rs 1.6 it forces 127.0.0.1:10000 and ignores the endpoint's port.
            options.update({"allow_http": "true", "azure_storage_endpoint": self.blob_endpoint.rstrip("/")})
        elif not self.blob_endpoint.endswith(".blob.core.windows.net") and \
                not self.blob_endpoint.endswith(".blob.core.windows.net/"):
            options["azure_storage_endpoint"] = self.blob_endpoint.rstrip("/")
        return options

    @classmethod
    def from_connection_string(cls, text: str, *, source: str = "connection string") -> StorageAccount:
        """Parse an Azure Storage connection string (``UseDevelopmentStorage=true`` included)."""
        parts = parse_connection_string(text)
        if parts.get("UseDevelopmentStorage", "").lower() == "true":
            return cls.emulator(10000, 10002, source=source)
        name = parts.get("AccountName")
        key = parts.get("AccountKey")
        if not name or not key:
            raise ConfigError("azure.storage.connect", "<connection string>",
                              "a connection string with AccountName and AccountKey", secret=True)
        protocol = parts.get("DefaultEndpointsProtocol", "https")
        suffix = parts.get("EndpointSuffix", "core.windows.net")
        blob = parts.get("BlobEndpoint") or f"{protocol}://{name}.blob.{suffix}"
        table = parts.get("TableEndpoint") or f"{protocol}://{name}.table.{suffix}"
        return cls(name, key, blob.rstrip("/"), table.rstrip("/"), source=source)

    @classmethod
    def emulator(cls, blob_port: int, table_port: int, *, source: str = "azurite") -> StorageAccount:
        """Azurite's well-known account with its blob and table services on these loopback ports."""
        return cls(AZURITE_ACCOUNT_NAME, AZURITE_ACCOUNT_KEY, f"http://127.0.0.1:{blob_port}/{AZURITE_ACCOUNT_NAME}",
                   f"http://127.0.0.1:{table_port}/{AZURITE_ACCOUNT_NAME}", source=source)

    @classmethod
    def from_keys(cls, account_name: str, account_key: str, endpoint: str | None = None,
                  table_endpoint: str | None = None, proxy: str | None = None) -> StorageAccount:
        """An account from its name, key and optional blob endpoint (Azurite, sovereign clouds)."""
        blob = (endpoint or f"https://{account_name}.blob.core.windows.net").rstrip("/")
        if table_endpoint is None:
            table_endpoint = (blob.replace(".blob.", ".table.") if ".blob." in blob
                              else f"https://{account_name}.table.core.windows.net")
        return cls(account_name, account_key, blob, table_endpoint.rstrip("/"), proxy=proxy, source="account keys")
