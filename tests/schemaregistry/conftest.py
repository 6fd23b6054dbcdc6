"""Fixtures of the schema registry tests: one Apicurio Registry per test session (in-memory, free loopback ports)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sparza.devservers.registry import ApicurioProcess


@pytest.fixture(scope="session")
def schema_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApicurioProcess]:
    """A session-wide Apicurio Registry; tests keep apart by their subjects (topics named after the test)."""
    proc = ApicurioProcess(tmp_path_factory.mktemp("apicurio"))
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture
def registry_url(schema_registry: ApicurioProcess) -> str:
    """The registry's Confluent-compatible API (``/apis/ccompat/v7``)."""
    return schema_registry.url
