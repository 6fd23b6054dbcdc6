"""``sparza demo``: the end-to-end demo on embedded defaults (Azurite + local Spark).

This grows with the product; today it exercises what the foundation provides end to end:
the embedded Azure storage, a blob round trip and a local Spark job.
"""

from __future__ import annotations

import os
import time

import typer
from rich.console import Console

__all__ = ["register"]


def demo(azure_connection_string: str = typer.Option(
             None, "--azure-connection-string", envvar="AZURE_STORAGE_CONNECTION_STRING",
             help="Use this storage account instead of the embedded Azurite.", show_default=False),
         master: str = typer.Option("local[2]", "--master", help="Spark master URL.")) -> None:
    """Run the demo: start embedded storage if needed, write and read back through Azure, run Spark."""
    from sparza.azure import StorageAccount
    from sparza.devstorage import DevStorage

    console = Console()
    started = time.monotonic()
    console.print("[bold]sparza demo[/bold] — foundation stage: storage + Spark end to end "
                  "(the streaming pipeline is added as the runtime lands)")
    if azure_connection_string:
        account = StorageAccount.from_connection_string(azure_connection_string)
        console.print(f"storage: account {account.account_name} ({account.blob_endpoint})")
    else:
        proc, fresh = DevStorage.default().start()
        account = proc.account
        console.print(f"storage: embedded Azurite {'started' if fresh else 'running'} on 127.0.0.1:{proc.blob_port}")
    client = account.blob_service_client()
    container = client.get_container_client("sparza-demo")
    if not container.exists():
        container.create_container()
    payload = f"hello from sparza at {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}".encode()
    container.upload_blob("demo/hello.txt", payload, overwrite=True)
    assert container.download_blob("demo/hello.txt").readall() == payload
    console.print(f"blob round trip: sparza-demo/demo/hello.txt ({len(payload)} bytes) written and read back")

    from sparza.testing import local_spark_session

    os.environ.setdefault("PYSPARK_PYTHON", os.sys.executable)  # type: ignore[attr-defined]
    spark = local_spark_session(master=master, app_name="sparza-demo")
    try:
        rows = spark.range(100_000).selectExpr("id % 10 AS page").groupBy("page").count().collect()
    finally:
        spark.stop()
    console.print(f"spark ({master}): counted 100000 events into {len(rows)} pages, "
                  f"{sorted(r['count'] for r in rows)[0]} each")
    console.print(f"done in {time.monotonic() - started:.1f}s")


def register(app: typer.Typer) -> None:
    """Add ``demo`` to the root command."""
    app.command(name="demo")(demo)
