"""The same contract on Azure Blob Storage (Azurite): az:// tables through delta-rs and our log reader."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from sparza.azure import StorageAccount
from sparza.config import Config
from sparza.streams import MessageType, OutgoingMessageEnvelope, SystemStream, SystemStreamPartition
from sparza.systems import StreamSpec
from sparza.systems.delta import (
    DeltaOffset,
    DeltaSystemAdmin,
    DeltaSystemConsumer,
    DeltaSystemProducer,
    InvalidOffsetError,
    OffsetRemovedError,
    next_offset,
)
from sparza.systems.delta.maintenance import compact, truncate

pytestmark = pytest.mark.azurite
S = SystemStream("d", "s")


@pytest.fixture
def az_config(azure_account: StorageAccount, azure_connection_string: str, unique_name: str) -> Config:
    """A delta system rooted in a fresh Azurite container."""
    azure_account.blob_service_client().create_container(unique_name)
    return Config({"systems.d.samza.factory": "delta", "systems.d.delta.root": f"az://{unique_name}/streams",
                   "azure.storage.connect": azure_connection_string})


def _write(config: Config, batches: int, per_batch: int, *, transaction: str | None = None, first: int = 0) -> None:
    producer = DeltaSystemProducer("d", config)
    producer.register("t")
    for b in range(batches):
        for i in range(per_batch):
            n = first + b * per_batch + i
            producer.send("t", OutgoingMessageEnvelope(S, f"m{n}".encode(), key=f"k{n % 7}".encode(), timestamp=n))
        producer.flush("t", transaction=(transaction, b) if transaction else None)


def test_create_describe_round_trip(az_config: Config, read_all: Callable[..., list]) -> None:
    admin = DeltaSystemAdmin("d", az_config)
    assert admin.stream_location("s").startswith("az://")
    assert admin.create_stream(StreamSpec("s", 3)) is True
    assert admin.create_stream(StreamSpec("s", 3)) is False
    _write(az_config, 4, 30)
    meta = admin.get_system_stream_metadata({"s"})["s"]
    assert meta.partition_count == 3
    total = []
    for p in range(3):
        got = read_all(az_config, "s", p)
        offsets = [DeltaOffset.parse(e.offset) for e in got]
        assert offsets == sorted(set(offsets))
        assert [int(e.message[1:]) for e in got] == sorted(int(e.message[1:]) for e in got)
        if got:
            assert meta.partitions[p].oldest == got[0].offset and meta.partitions[p].newest == got[-1].offset
            assert [e.offset for e in read_all(az_config, "s", p, next_offset(got[3].offset))] == \
                [e.offset for e in got[4:]]
        total += got
    assert sorted(int(e.message[1:]) for e in total) == list(range(120))
    with pytest.raises(InvalidOffsetError):
        read_all(az_config, "s", 0, "garbage")


def test_replayed_transaction_commits_nothing(az_config: Config, read_all: Callable[..., list]) -> None:
    DeltaSystemAdmin("d", az_config).create_stream(StreamSpec("s", 2))
    _write(az_config, 3, 10, transaction="job/task-1")
    _write(az_config, 3, 10, transaction="job/task-1")   # the whole run replayed: nothing new
    assert sum(len(read_all(az_config, "s", p)) for p in range(2)) == 30


def test_concurrent_writer_processes(az_config: Config, read_all: Callable[..., list],
                                     run_writers: Callable[..., None]) -> None:
    DeltaSystemAdmin("d", az_config).create_stream(StreamSpec("s", 4))
    run_writers(az_config, range(4), 2000, 250)
    seen = [e.message for p in range(4) for e in read_all(az_config, "s", p)]
    assert len(seen) == 8000 and len(set(seen)) == 8000


def test_bounded_compaction_and_retention(az_config: Config, read_all: Callable[..., list]) -> None:
    admin = DeltaSystemAdmin("d", az_config)
    admin.create_stream(StreamSpec("s", 1))
    _write(az_config, 5, 4)                                    # versions 1..5
    before = read_all(az_config, "s", 0)
    compact(admin.location("s"))                               # version 6
    assert [(e.offset, e.message) for e in read_all(az_config, "s", 0)] == [(e.offset, e.message) for e in before]
    reader = DeltaSystemConsumer("d", az_config).read(SystemStreamPartition("d", "s", 0), None, bounded=True)
    first = next(reader)
    _write(az_config, 1, 4, first=100)                        # version 7, after the bounded read began
    got = [first, *reader]
    assert len(got) == 21 and got[-1].type == MessageType.END_OF_STREAM
    truncate(admin.location("s"), 3)
    with pytest.raises(OffsetRemovedError) as info:
        read_all(az_config, "s", 0, before[0].offset)
    assert info.value.oldest == "3:0"
    assert [e.message for e in read_all(az_config, "s", 0)] == [e.message for e in before[8:]] + \
        [f"m{n}".encode() for n in range(100, 104)]


def test_create_makes_the_container(azure_connection_string: str, unique_name: str,
                                    read_all: Callable[..., list]) -> None:
    config = Config({"systems.d.delta.root": f"az://{unique_name}new/streams",
                     "azure.storage.connect": azure_connection_string})
    assert DeltaSystemAdmin("d", config).create_stream(StreamSpec("s", 1)) is True
    _write(config, 1, 3)
    assert len(read_all(config, "s", 0)) == 3


def test_unreachable_storage_is_a_clear_error(tmp_path: Path, read_all: Callable[..., list]) -> None:
    from sparza.devservers.storage import AzuriteProcess
    from sparza.errors import StorageUnavailableError

    own = AzuriteProcess(tmp_path / "azurite")   # our own emulator: stopping it breaks no other test
    own.start()
    try:
        config = Config({"systems.d.delta.root": "az://outage/streams",
                         "azure.storage.connect": own.connection_string})
        DeltaSystemAdmin("d", config).create_stream(StreamSpec("s", 1))
        _write(config, 1, 3)
        own.stop()
        with pytest.raises(StorageUnavailableError, match="unreachable"):
            read_all(config, "s", 0, "1:0")
    finally:
        own.stop()
