"""AdjunctConfig parsing, extractor loading and the recovery table (pure logic, no I/O)."""

from __future__ import annotations

import pytest

from sparza.config import Config
from sparza.errors import ConfigError
from sparza.state.adjunct import (
    AdjunctConfig,
    DefaultKeyValueExtractor,
    LocalCopy,
    RecoveryAction,
    decide_recovery,
    judge_local_copy,
    load_extractor,
)
from sparza.state.adjunct.slot import StoreMarker
from sparza.streams import IncomingMessageEnvelope, SystemStream, SystemStreamPartition

BASE = {
    "task.inputs": "d.orders,d.customers",
    "task.broadcast.inputs": "d.rates#[0-1]",
    "stores.customers.adstore.input": "d.customers",
    "stores.rates.adstore.input": "d.rates",
    "stores.plain.factory": "rocksdb",
}


def test_partitioned_and_broadcast_stores_are_told_apart() -> None:
    cfg = AdjunctConfig.from_config(Config({**BASE, "systems.d.streams.customers.samza.bootstrap": "true",
                                            "stores.customers.backup.factories": "blobstore"}))
    customers, rates = cfg.store("customers"), cfg.store("rates")
    assert customers is not None and rates is not None
    assert not customers.broadcast and customers.bootstrap and customers.backed_up and customers.persistent
    assert rates.broadcast and rates.broadcast_partitions == (0, 1) and rates.backed_up and not rates.bootstrap
    assert rates.builder_task == "Partition 0"
    assert cfg.bootstrap_streams() == {SystemStream("d", "customers")}
    assert cfg.is_adjunct(SystemStream("d", "rates")) and cfg.is_adjunct(SystemStreamPartition("d", "customers", 1))
    assert not cfg.is_adjunct(SystemStream("d", "orders"))
    assert cfg.store_names() == ["customers", "rates"] and not cfg.is_adjunct_store("plain")
    assert cfg.reads_input("Partition 0", SystemStreamPartition("d", "rates", 1))
    assert not cfg.reads_input("Partition 1", SystemStreamPartition("d", "rates", 1))
    assert cfg.reads_input("Partition 1", SystemStreamPartition("d", "customers", 1))


@pytest.mark.parametrize(("extra", "bad_key", "words"), [
    ({"stores.x.adstore.input": "d.nowhere"}, "stores.x.adstore.input", "add d.nowhere to task.inputs"),
    ({"stores.x.adstore.input": "d.a,d.b"}, "stores.x.adstore.input", "exactly one"),
    ({"stores.x.adstore.input": "nodot"}, "stores.x.adstore.input", "system.stream"),
    ({"stores.rates.factory": "memory"}, "stores.rates.factory", "broadcast"),
    ({"stores.customers.changelog": "d.log"}, "stores.customers.changelog", "no changelog"),
    ({"systems.d.streams.customers.samza.bootstrap": "maybe"}, "systems.d.streams.customers.samza.bootstrap",
     "true or false"),
])
def test_bad_config_names_the_key(extra: dict[str, str], bad_key: str, words: str) -> None:
    with pytest.raises(ConfigError) as err:
        AdjunctConfig.from_config(Config({**BASE, **extra}))
    assert err.value.key == bad_key
    assert words in str(err.value)


def test_stream_in_both_input_lists_is_refused() -> None:
    with pytest.raises(ConfigError, match="not both"):
        AdjunctConfig.from_config(Config({**BASE, "task.inputs": "d.orders,d.customers,d.rates"}))


def test_extractor_default_and_dotted_path() -> None:
    env = IncomingMessageEnvelope(SystemStreamPartition("d", "c", 0), "1:0", b"k", b'{"id": 7, "name": "ann"}')
    assert isinstance(load_extractor("s", None, Config()), DefaultKeyValueExtractor)
    custom = load_extractor("s", "adjunct_helpers.ProjectingExtractorFactory", Config())
    assert custom.get_key(env) == "7" and custom.get_value(env) == "ann"
    with pytest.raises(ConfigError) as err:
        load_extractor("s", "adjunct_helpers.ProjectingExtractor", Config())
    assert err.value.key == "stores.s.adstore.key.value.extractor.factory"
    with pytest.raises(ConfigError):
        load_extractor("s", "no_such_module.Factory", Config())


def test_local_copy_is_valid_only_when_it_matches_the_committed_entry() -> None:
    committed = StoreMarker(5, "idx-5", {"d.c#0": "3:0"})
    assert judge_local_copy(False, None, committed) is LocalCopy.NONE
    assert judge_local_copy(True, None, committed) is LocalCopy.INVALID
    assert judge_local_copy(True, StoreMarker(5, "idx-5", {"d.c#0": "3:0"}), committed) is LocalCopy.VALID
    # Ran ahead of the checkpoint (crash between store commit and checkpoint write): invalid.
    assert judge_local_copy(True, StoreMarker(6, "idx-6", {"d.c#0": "4:0"}), committed) is LocalCopy.INVALID
    assert judge_local_copy(True, StoreMarker(5, "idx-5", {"d.c#0": "3:0"}), None) is LocalCopy.INVALID


@pytest.mark.parametrize(("persistent", "bootstrap", "reset", "local", "snapshot", "action"), [
    # The seed's table for persistent stores without a blob-store snapshot.
    (True, True, False, LocalCopy.NONE, None, RecoveryAction.CREATE_BOOTSTRAP),
    (True, True, False, LocalCopy.INVALID, None, RecoveryAction.CREATE_BOOTSTRAP),
    (True, True, False, LocalCopy.VALID, None, RecoveryAction.CONTINUE_LOCAL),
    (True, False, False, LocalCopy.NONE, None, RecoveryAction.CREATE_CONTINUE),
    (True, False, False, LocalCopy.INVALID, None, RecoveryAction.CREATE_CONTINUE),
    (True, False, False, LocalCopy.VALID, None, RecoveryAction.CONTINUE_LOCAL),
    # With a committed snapshot a missing or invalid copy is restored instead.
    (True, True, False, LocalCopy.NONE, "idx", RecoveryAction.RESTORE_SNAPSHOT),
    (True, False, False, LocalCopy.INVALID, "idx", RecoveryAction.RESTORE_SNAPSHOT),
    (True, True, False, LocalCopy.VALID, "idx", RecoveryAction.CONTINUE_LOCAL),
    # Non-persistent stores.
    (False, True, False, LocalCopy.NONE, None, RecoveryAction.CREATE_BOOTSTRAP),
    (False, False, False, LocalCopy.NONE, None, RecoveryAction.CREATE_CONTINUE),
    # samza.reset.offset wins over everything.
    (True, False, True, LocalCopy.VALID, "idx", RecoveryAction.CREATE_BOOTSTRAP),
])
def test_recovery_table(persistent: bool, bootstrap: bool, reset: bool, local: LocalCopy, snapshot: str | None,
                        action: RecoveryAction) -> None:
    decision = decide_recovery(persistent=persistent, bootstrap=bootstrap, reset_offset=reset, local=local,
                               committed_snapshot=snapshot)
    assert decision.action is action
    assert decision.reason
