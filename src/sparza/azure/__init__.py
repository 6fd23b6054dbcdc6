"""sparza's Azure Storage plumbing: what an account is (:mod:`sparza.azure.account`), which one a config
means and whether it answers (:mod:`sparza.azure.resolve`), the count of its requests by operation
(:mod:`sparza.azure.requests`), the record of a dev storage running on this
machine (:mod:`sparza.azure.local`), and the one place Azure SDK exceptions become sparza's errors
(:mod:`sparza.azure.errors`).

``from sparza.azure import StorageAccount, resolve_storage_account`` is the import other packages use.
"""

from sparza.azure.account import (
    AZURITE_ACCOUNT_KEY,
    AZURITE_ACCOUNT_NAME,
    STORAGE_CONNECT,
    STORAGE_TIMEOUT_MS,
    TIMEOUT_KEY,
    StorageAccount,
    container_name_problem,
    parse_connection_string,
    storage_timeout_s,
)
from sparza.azure.errors import (
    Failure,
    StorageFailure,
    classify,
    error_code,
    explain_storage_error,
    storage_unavailable,
    storage_unreachable,
)
from sparza.azure.requests import StorageRequests, blob_operation, table_operation
from sparza.azure.resolve import AccountKeys, check_container, resolve_storage_account

__all__ = [
    "AZURITE_ACCOUNT_KEY",
    "AZURITE_ACCOUNT_NAME",
    "STORAGE_CONNECT",
    "STORAGE_TIMEOUT_MS",
    "TIMEOUT_KEY",
    "AccountKeys",
    "Failure",
    "StorageAccount",
    "StorageFailure",
    "StorageRequests",
    "blob_operation",
    "check_container",
    "classify",
    "container_name_problem",
    "error_code",
    "explain_storage_error",
    "parse_connection_string",
    "resolve_storage_account",
    "storage_timeout_s",
    "storage_unavailable",
    "storage_unreachable",
    "table_operation",
]
