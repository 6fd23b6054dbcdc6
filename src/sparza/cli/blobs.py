"""``sparza blobs ls|cat``: list and read what the azureblob producer (or the Spark sink) wrote.

``cat`` decodes Avro (gzip or not) and JSON-lines blobs into JSON lines on stdout, so results can be
piped to ``jq``; raw blobs are copied as they are.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from sparza.cli._help import SparzaTyper

if TYPE_CHECKING:
    from sparza.azure import StorageAccount

# The Azure SDK and the blob readers are imported by the commands that use them: every `sparza` command loads
# this module, and most never touch a blob.

__all__ = ["app", "register"]

app = SparzaTyper(help="List and read the blobs written by the azureblob producer and Spark sink.",
                  no_args_is_help=True)

_CONFIG = typer.Option(None, "--config", "-c", metavar="FILE",
                       help="Job config (YAML/.properties) with the account keys.")
_CONN = typer.Option(None, "--connection-string", envvar="AZURE_STORAGE_CONNECTION_STRING",
                     help="Storage connection string (default: config, then the running dev storage).",
                     show_envvar=True)


def _account(container: str, config: Path | None, connection_string: str | None) -> StorageAccount:
    from sparza.azure import StorageAccount, resolve_storage_account
    from sparza.config import Config

    if connection_string:
        return StorageAccount.from_connection_string(connection_string, source="--connection-string")
    cfg = Config.load(config) if config is not None else Config()
    from sparza.systems.azureblob.settings import ACCOUNT_KEYS

    return resolve_storage_account(cfg, ACCOUNT_KEYS, names={"container": container})


@app.command("ls")
def ls(container: str = typer.Argument(..., help="The container (the system name)."),
       prefix: str = typer.Argument("", help="Only blobs whose names start with this (e.g. a stream)."),
       config: Path | None = _CONFIG, connection_string: str | None = _CONN,
       show_all: bool = typer.Option(False, "--all", help="Include the Spark sink's commit manifests.")) -> None:
    """One line per committed blob: name, size in bytes, records (from its metadata)."""
    from sparza.systems.azureblob.errors import AzureBlobError
    from sparza.systems.azureblob.naming import MANIFEST_PREFIX

    account = _account(container, config, connection_string)
    client = account.blob_service_client().get_container_client(container)
    try:
        if not client.exists():
            raise AzureBlobError(f"container {container!r} does not exist on {account.blob_endpoint}")
        count = 0
        for blob in client.list_blobs(name_starts_with=prefix or None, include=["metadata"]):
            if blob.name.startswith(MANIFEST_PREFIX) and not show_all:
                continue
            records = (blob.metadata or {}).get("numberOfRecords", "-")
            typer.echo(f"{blob.name}\t{blob.size}\t{records}")
            count += 1
    except AzureBlobError:
        raise
    except Exception as exc:  # the SDK's errors, said in one line
        raise AzureBlobError(f"listing {container!r} on {account.blob_endpoint} failed: {exc}") from exc
    typer.echo(f"{count} blob(s)", err=True)


@app.command("cat")
def cat(container: str = typer.Argument(..., help="The container (the system name)."),
        name: str = typer.Argument(..., help="The blob name, as 'sparza blobs ls' prints it."),
        config: Path | None = _CONFIG, connection_string: str | None = _CONN) -> None:
    """Print a blob's records as JSON lines (Avro and JSON-lines blobs, gzip or not); raw blobs as is."""
    from sparza.systems.azureblob.client import BlobStorage
    from sparza.systems.azureblob.errors import AzureBlobError
    from sparza.systems.azureblob.reading import decode_blob, to_json_line

    account = _account(container, config, connection_string)
    data = BlobStorage(account.blob_service_client(), container).download(name)
    if data is None:
        raise AzureBlobError(f"no committed blob {name!r} in container {container!r} (list them with "
                             f"'sparza blobs ls {container}')")
    for record in decode_blob(name, data):
        if isinstance(record, bytes):
            sys.stdout.buffer.write(record)
            sys.stdout.buffer.flush()
        else:
            typer.echo(to_json_line(record))


def register(root: typer.Typer) -> None:
    """Add ``blobs`` to the root command."""
    root.add_typer(app, name="blobs")
