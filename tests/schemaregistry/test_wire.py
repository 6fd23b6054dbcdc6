"""The Confluent wire format and subject naming, against the independent encoder of ``oracle.py`` (no registry)."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest

from sparza.config import is_secret_key
from sparza.errors import ConfigError, DataError
from sparza.schemaregistry import HEADER_SIZE, RegistrySettings, WireFormatError, frame, header, unframe

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tests.schemaregistry import oracle  # noqa: E402

ORDER = {"type": "record", "name": "Order", "namespace": "shop",
         "fields": [{"name": "id", "type": "long"}, {"name": "item", "type": "string"}]}


def test_frame_matches_the_independent_encoder_and_unframe_inverts_it() -> None:
    rng = random.Random(35)
    ids = [0, 1, 255, 256, 65_535, 2**31, 2**32 - 1] + [rng.randrange(2**32) for _ in range(200)]
    for schema_id in ids:
        record = {"id": rng.randrange(-2**63, 2**63), "item": "".join(rng.choice("aé€😀z ") for _ in range(
            rng.randrange(0, 30)))}
        payload = oracle.encode(ORDER, record)
        framed = frame(schema_id, payload)
        assert framed == oracle.frame(schema_id, payload)
        assert header(schema_id) == framed[:HEADER_SIZE]
        got_id, got_payload = unframe(framed)
        assert (got_id, bytes(got_payload)) == (schema_id, payload)
        assert oracle.decode(ORDER, bytes(got_payload)) == record


@pytest.mark.parametrize("data", [b"", b"\x00\x00\x00\x01", b"\x01\x00\x00\x00\x01abc", b"{\"id\": 1}",
                                  b"\x0e\x00\x00\x00\x01"])
def test_bytes_not_in_the_wire_format_are_a_data_error_naming_the_problem(data: bytes) -> None:
    with pytest.raises(WireFormatError) as info:
        unframe(data)
    assert isinstance(info.value, DataError)  # dead-letter and drop policies apply
    assert ("magic byte" in str(info.value)) or ("too short" in str(info.value))


def test_schema_ids_beyond_four_bytes_are_refused() -> None:
    with pytest.raises(DataError, match="4 bytes"):
        header(2**32)
    with pytest.raises(DataError):
        header(-1)


def _settings(**values: str) -> RegistrySettings:
    return RegistrySettings({"systems.k.schema.registry.url": "http://127.0.0.1:1/apis/ccompat/v7", **values}, "k")


def test_subject_name_strategies() -> None:
    assert _settings().subject("orders", "msg", ORDER) == "orders-value"
    assert _settings().subject("orders", "key", None) == "orders-key"
    physical = _settings(**{"systems.k.streams.orders.samza.physical.name": "shop.orders.v1"})
    assert physical.subject("orders", "msg", ORDER) == "shop.orders.v1-value"
    hub = _settings(**{"streams.orders.eventhubs.entitypath": "orders-hub"})
    assert hub.subject("orders", "msg", ORDER) == "orders-hub-value"
    record = _settings(**{"systems.k.schema.registry.value.subject.name.strategy": "record"})
    assert record.subject("orders", "msg", ORDER) == "shop.Order"
    confluent = _settings(**{"systems.k.schema.registry.value.subject.name.strategy":
                             "io.confluent.kafka.serializers.subject.TopicRecordNameStrategy"})
    assert confluent.subject("orders", "msg", ORDER) == "orders-shop.Order"
    assert confluent.subject("orders", "key", ORDER) == "orders-key"  # keys keep their own (default) strategy


def test_bad_strategies_and_urls_name_the_key() -> None:
    key = "systems.k.schema.registry.value.subject.name.strategy"
    with pytest.raises(ConfigError, match=key):
        _settings(**{key: "subject-per-day"}).subject("orders", "msg", ORDER)
    with pytest.raises(ConfigError, match="not a record"):
        _settings(**{key: "record"}).subject("orders", "msg", {"type": "string"})
    with pytest.raises(ConfigError, match="systems.k.schema.registry.url"):
        RegistrySettings({"systems.k.schema.registry.url": "127.0.0.1:8080"}, "k").endpoint()


def test_registry_credentials_are_secret() -> None:
    assert is_secret_key("systems.k.schema.registry.basic.auth.user.info")
    endpoint = _settings(**{"systems.k.schema.registry.basic.auth.user.info": "me:hunter2"}).endpoint()
    assert "hunter2" not in repr(endpoint)
