"""Fixtures of the azureblob tests: producers on the shared Azurite that are always stopped."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # importlib mode: make azureblob_helpers importable

from azureblob_helpers import account_config

from sparza.azure import StorageAccount
from sparza.metrics import MetricsRegistry
from sparza.systems.azureblob import AzureBlobSystemProducer


@pytest.fixture
def make_producer(azure_account: StorageAccount) -> Iterator[Callable[..., AzureBlobSystemProducer]]:
    """Build and start producers on the shared Azurite; every one is stopped at the end of the test."""
    made: list[AzureBlobSystemProducer] = []

    def make(container: str, *, metrics: MetricsRegistry | None = None, service_client: Any = None,
             account: StorageAccount | None = None, start: bool = True, **extra: Any) -> AzureBlobSystemProducer:
        producer = AzureBlobSystemProducer(container, account_config(account or azure_account, container, **extra),
                                           metrics, service_client=service_client)
        made.append(producer)
        if start:
            producer.start()
        return producer

    yield make
    for producer in made:
        try:
            producer.stop()
        except Exception:
            pass
