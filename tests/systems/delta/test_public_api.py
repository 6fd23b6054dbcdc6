"""The package's public surface: every ``__all__`` name resolves, none repeats; factory protocol."""

from __future__ import annotations

import importlib

import pytest

from sparza.systems import SystemAdmin, SystemConsumer, SystemFactory, SystemProducer

MODULES = ["sparza.systems.delta", "sparza.systems.delta.admin", "sparza.systems.delta.consumer",
           "sparza.systems.delta.producer", "sparza.systems.delta.offsets", "sparza.systems.delta.log",
           "sparza.systems.delta.reader", "sparza.systems.delta.retention", "sparza.systems.delta.maintenance",
           "sparza.systems.delta.settings", "sparza.systems.delta.schema", "sparza.systems.delta.partitioner",
           "sparza.systems.delta.errors", "sparza.systems.delta.factory", "sparza.systems.delta.inspect",
           "sparza.cli.stream"]


@pytest.mark.parametrize("name", MODULES)
def test_all_names_resolve_once(name: str) -> None:
    module = importlib.import_module(name)
    assert len(module.__all__) == len(set(module.__all__))
    for attr in module.__all__:
        assert hasattr(module, attr), f"{name}.{attr}"


def test_factory_satisfies_the_protocols(work_dir: object) -> None:
    from sparza.config import Config
    from sparza.systems.delta import DeltaSystemFactory

    factory = DeltaSystemFactory()
    config = Config({"systems.d.delta.root": str(work_dir)})
    assert isinstance(factory, SystemFactory)
    assert isinstance(factory.get_admin("d", config), SystemAdmin)
    assert isinstance(factory.get_consumer("d", config), SystemConsumer)
    assert isinstance(factory.get_producer("d", config), SystemProducer)
