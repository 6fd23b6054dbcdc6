"""Lease, leader election, lock, processor table, job-model store and fencing against real Azurite."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from sparza.azure import StorageAccount
from sparza.clock import ManualClock
from sparza.coordination import (
    AzureLeaderElector,
    AzureLock,
    FencedError,
    GenerationFence,
    JobModel,
    LeaseBlobManager,
    LeaseHeldError,
    LeaseLostError,
    LockTimeoutError,
    StaleLeaderError,
    claim,
    write_fenced,
)
from sparza.coordination.clients import CoordinationClients
from sparza.coordination.fencing import stored_generation
from sparza.coordination.settings import CoordinationConfig
from sparza.coordination.store import BarrierState, CoordinatorState
from sparza.coordination.table import live_processors


@pytest.fixture
def clients(coord_config: dict[str, str], azure_account: StorageAccount) -> CoordinationClients:
    c = CoordinationClients.create(CoordinationConfig.from_config(coord_config), azure_account)
    c.ensure()
    return c


def test_lease_is_exclusive_and_renewable(clients: CoordinationClients) -> None:
    a = LeaseBlobManager(clients.blob("lease-a"), 15)
    b = LeaseBlobManager(clients.blob("lease-a"), 15)
    a.acquire()
    with pytest.raises(LeaseHeldError):
        b.acquire()
    a.renew()
    assert a.held() and a.info().state == "leased"
    a.release()
    assert not a.held()
    b.acquire()
    assert b.held()
    b.release()


def test_broken_lease_cannot_be_renewed(clients: CoordinationClients) -> None:
    holder = LeaseBlobManager(clients.blob("lease-b"), 15)
    holder.acquire()
    LeaseBlobManager(clients.blob("lease-b"), 15).break_lease(0)
    with pytest.raises(LeaseLostError):
        holder.renew()
    assert not holder.held()


def test_late_renewal_is_refused_even_if_storage_would_accept(clients: CoordinationClients) -> None:
    clock = ManualClock()
    holder = LeaseBlobManager(clients.blob("lease-c"), 15, clock=clock)
    holder.acquire()
    clock.advance(seconds=14.9)
    assert holder.held() and 0 < holder.remaining_s() < 0.2
    holder.renew()  # in time: renewed, and its 15 s count again from this renewal
    clock.advance(seconds=14.9)
    assert holder.held()
    # The process "was paused" past the lease: our own clock moves on, the service is not asked.
    clock.advance(seconds=0.1)
    assert not holder.held() and holder.remaining_s() == 0.0
    with pytest.raises(LeaseLostError, match="late"):
        holder.renew()
    assert holder.lease_id is None


class Events:
    def __init__(self) -> None:
        self.events: list[tuple[str, object]] = []

    def on_become_leader(self, term: int) -> None:
        self.events.append(("leader", term))

    def on_leadership_lost(self, reason: str) -> None:
        self.events.append(("lost", reason))


def test_election_terms_and_stale_leader_fencing(clients: CoordinationClients) -> None:
    ea, eb = Events(), Events()
    a = AzureLeaderElector(LeaseBlobManager(clients.blob("leader-x"), 15), "a", ea)
    b = AzureLeaderElector(LeaseBlobManager(clients.blob("leader-x"), 15), "b", eb)
    assert a.try_become_leader() and a.am_i_leader() and a.term == 1
    assert not b.try_become_leader()
    assert b.current_leader() == ("a", 1)
    clients.store.update(a.term, lambda s: s.with_changes(leader="a", current=JobModel(1, {"a": []}),
                                                           processors=["a"]))
    # a's lease is broken (as if it expired during a pause) and b takes over with a newer term.
    LeaseBlobManager(clients.blob("leader-x"), 15).break_lease(0)
    assert b.try_become_leader() and b.term == 2
    clients.store.update(b.term, lambda s: s.with_changes(leader="b"))
    with pytest.raises(StaleLeaderError) as info:
        clients.store.update(a.term, lambda s: s.with_changes(leader="a"))
    assert (info.value.term, info.value.stored_term) == (1, 2)
    a.renew()  # a finds out at its next renewal
    assert not a.am_i_leader() and ea.events[-1][0] == "lost"
    clients.store.update(b.term, lambda s: s, leader="b")
    with pytest.raises(StaleLeaderError):  # the same term claimed by someone else is refused too
        clients.store.update(b.term, lambda s: s, leader="z")
    b.resign()
    assert eb.events == [("leader", 2), ("lost", "resigned")]
    # Storage that forgot the term (an emulator restart) cannot make a new leader reuse one seen before.
    c = AzureLeaderElector(LeaseBlobManager(clients.blob("leader-y"), 15), "c")
    c.observe_term(7)
    assert c.try_become_leader() and c.term == 8
    c.resign()


def test_store_writes_are_conditional(clients: CoordinationClients) -> None:
    store = clients.store
    store.update(1, lambda s: s.with_changes(current=JobModel(1, {"p": ["Partition 0"]}), processors=["p"]))
    snap = store.read()
    assert snap.state.version == 1 and snap.state.barrier is BarrierState.END
    # A writer racing with us: its change is applied on a fresh read, never on the stale one.
    calls: list[int] = []

    def change(state: CoordinatorState) -> CoordinatorState:
        calls.append(state.version)
        if len(calls) == 1:
            store.update(1, lambda s: s.with_changes(current=JobModel(2, {"p": []})))
        return state.with_changes(current=JobModel(state.version + 1, {"p": []}))

    written = store.update(1, change)
    assert calls == [1, 2] and written is not None and written.version == 3 == store.read().state.version


def test_large_job_model_round_trips_through_the_blob(clients: CoordinationClients) -> None:
    procs = [f"processor-{i:05d}-0123456789abcdef" for i in range(2000)]
    model = JobModel(4, {p: [f"Partition {i * 30 + k}" for k in range(30)] for i, p in enumerate(procs)})
    clients.store.update(1, lambda s: s.with_changes(current=model, processors=procs, barrier=BarrierState.START))
    back = clients.store.read().state
    assert back.current == model and back.processors == sorted(procs)


def test_heartbeats_are_judged_by_service_timestamps(clients: CoordinationClients) -> None:
    table = clients.table
    first = table.heartbeat_and_read("UNASSIGNED", "old", False)
    fresh = table.heartbeat_and_read("000000000001", "fresh", False)
    while fresh.timestamp <= first.timestamp:  # the service's clock has not ticked between them yet
        fresh = table.heartbeat_and_read("000000000001", "fresh", False)
    reference = table.heartbeat_and_read("000000000001", "me", True).timestamp
    assert reference >= fresh.timestamp > first.timestamp
    rows = table.list_all()
    # No waiting: the timeout is set between the two rows' ages, as the service stamped them.
    old_ms = (reference - first.timestamp).total_seconds() * 1000
    fresh_ms = (reference - fresh.timestamp).total_seconds() * 1000
    assert set(live_processors(rows, reference, int(old_ms) + 1)) == {"old", "fresh", "me"}
    between = (old_ms + fresh_ms) / 2
    assert set(live_processors(rows, reference, between)) == {"fresh", "me"}  # type: ignore[arg-type]
    assert set(live_processors(rows, reference, 0)) == {"me"} | ({"fresh"} if fresh_ms == 0 else set())
    table.delete_processor("old")
    assert "old" not in {r.processor_id for r in table.list_all()}


def test_fenced_writes_refuse_older_generations(clients: CoordinationClients) -> None:
    blob = clients.blob("checkpoints/Partition-0")
    write_fenced(blob, b"g1", 1, "a")
    write_fenced(blob, b"g2", 2, "b")
    with pytest.raises(FencedError) as info:
        write_fenced(blob, b"stale", 1, "a")
    assert (info.value.generation, info.value.current_generation) == (1, 2)
    assert blob.download_blob().readall() == b"g2"
    claim(blob, 3, "c")  # a new owner takes over before writing
    with pytest.raises(FencedError):
        write_fenced(blob, b"late", 2, "b")
    assert stored_generation(blob)[0] == 3 and blob.download_blob().readall() == b"g2"


def test_generation_fence_checks_the_newest_model(clients: CoordinationClients, coord_config: dict[str, str],
                                                   azure_account: StorageAccount) -> None:
    clients.store.update(1, lambda s: s.with_changes(current=JobModel(5, {"a": ["Partition 0"], "b": ["Partition 1"]}),
                                                      processors=["a", "b"]))
    GenerationFence(coord_config, "a", 5, account=azure_account).check("Partition 0")
    GenerationFence(coord_config, "a", 4, account=azure_account).check("Partition 0")  # still ours in v5
    with pytest.raises(FencedError) as info:
        GenerationFence(coord_config, "a", 4, account=azure_account).check("Partition 1")
    assert info.value.current_generation == 5 and "'b'" in str(info.value)


def test_generation_fence_refuses_a_task_that_moved_away_and_back(clients: CoordinationClients,
                                                                  coord_config: dict[str, str],
                                                                  azure_account: StorageAccount) -> None:
    # v1 gave Partition 0 to a; a paused, v2 gave it to b (in force); a woke and rejoined: v3 gives it back to a.
    # A batch of a's generation 1 must be refused whether v3's barrier is still open or ended.
    v2 = JobModel(2, {"b": ["Partition 0", "Partition 1"]})
    v3 = JobModel(3, {"a": ["Partition 0"], "b": ["Partition 1"]})
    for barrier in (BarrierState.START, BarrierState.END):
        clients.store.update(1, lambda s, b=barrier: s.with_changes(current=v3, previous=v2, barrier=b,
                                                                    processors=["a", "b"]))
        with pytest.raises(FencedError) as info:
            GenerationFence(coord_config, "a", 1, account=azure_account).check("Partition 0")
        assert info.value.current_generation == 3 and "job model 2" in str(info.value)
        GenerationFence(coord_config, "a", 2, account=azure_account).check("Partition 0")  # v3 is the only newer
        GenerationFence(coord_config, "a", 3, account=azure_account).check("Partition 0")


_LOCK_WORKER = textwrap.dedent("""
    import json, sys, time
    from sparza.coordination import AzureLock
    from sparza.coordination.clients import CoordinationClients
    from sparza.coordination.settings import CoordinationConfig
    from sparza.azure import resolve_storage_account
    config = json.loads(sys.argv[1])
    counter = CoordinationClients.create(CoordinationConfig.from_config(config),
                                         resolve_storage_account(config)).blob("counter")
    lock = AzureLock.for_job(config, "counter")
    for _ in range(4):
        with lock:
            value = int(counter.download_blob().readall())
            time.sleep(0.05)  # widen the race a lock must prevent
            counter.upload_blob(str(value + 1).encode(), overwrite=True)
""")


def test_lock_gives_mutual_exclusion_across_processes(clients: CoordinationClients,
                                                      coord_config: dict[str, str]) -> None:
    clients.blob("counter").upload_blob(b"0", overwrite=True)
    procs = [subprocess.Popen([sys.executable, "-c", _LOCK_WORKER, json.dumps(coord_config)]) for _ in range(3)]
    assert [p.wait(120) for p in procs] == [0, 0, 0]
    assert int(clients.blob("counter").download_blob().readall()) == 12


def test_lock_times_out_while_held(clients: CoordinationClients) -> None:
    holder = AzureLock(clients.blob("locks/x"), "x")
    other = AzureLock(clients.blob("locks/x"), "x")
    with holder:
        assert holder.locked
        with pytest.raises(LockTimeoutError):
            other.lock(timeout_s=1)
    other.lock(timeout_s=5)
    other.unlock()


