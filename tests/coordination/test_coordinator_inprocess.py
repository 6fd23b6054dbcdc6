"""AzureJobCoordinator objects in one process: losing the lease in the middle of a barrier."""

from __future__ import annotations

import threading
from collections.abc import Callable

from sparza.azure import StorageAccount
from sparza.coordination import AzureJobCoordinator, JobModel, LeaseBlobManager
from sparza.coordination.store import BarrierState
from sparza.testing import eventually

TASKS = [f"Partition {i}" for i in range(6)]


class Listener:
    """Records models; can hold ``on_job_model_expired`` (a batch that takes long to finish)."""

    def __init__(self) -> None:
        self.models: list[JobModel] = []
        self.hold = threading.Event()
        self.hold.set()
        self.stopped = False

    def on_new_job_model(self, job_model: JobModel) -> None:
        self.models.append(job_model)

    def on_job_model_expired(self) -> None:
        self.hold.wait(60)

    def on_coordinator_stop(self) -> None:
        self.stopped = True


def wait(cond: Callable[[], object], timeout_s: float, what: str) -> None:
    eventually(cond, timeout_s, 0.1, f"timed out waiting for {what}")


def test_leader_losing_its_lease_during_a_barrier_is_superseded(coord_config: dict[str, str],
                                                               azure_account: StorageAccount) -> None:
    listeners = {pid: Listener() for pid in ("a", "b", "c")}
    coords = {pid: AzureJobCoordinator(pid, coord_config, TASKS, listeners[pid], account=azure_account)
              for pid in listeners}
    try:
        coords["a"].start()
        wait(lambda: coords["a"].job_model is not None, 20, "a alone to get a model")
        coords["b"].start()
        wait(lambda: coords["b"].job_model is not None, 20, "b to join")
        # b will take long to stop its tasks, so the next barrier stays open...
        listeners["b"].hold.clear()
        coords["c"].start()
        store = coords["a"]._clients.store
        wait(lambda: store.read().state.barrier is BarrierState.START and "c" in store.read().state.processors,
             20, "a barrier including c")
        open_version = store.read().state.version
        # ...and the leader's lease is broken in the middle of it.
        LeaseBlobManager(coords["a"].blob(coords["a"].resources.leader_blob), 15).break_lease(0)
        wait(lambda: store.read().state.term >= 2, 30, "a new leader term")
        listeners["b"].hold.set()

        def converged() -> bool:
            models = [c.job_model for c in coords.values()]
            return all(m is not None and m.version > open_version for m in models) and \
                len({m.version for m in models if m}) == 1
        wait(converged, 40, "everyone on a model newer than the interrupted barrier")
        final = coords["a"].job_model
        assert final is not None and sorted(final.processors) == ["a", "b", "c"]
        assert sorted(final.tasks) == sorted(TASKS)
        assert sum(c.is_leader() for c in coords.values()) == 1
        state = store.read().state
        assert state.term >= 2 and state.barrier is BarrierState.END
        # Nobody adopted the interrupted version, and the old leader's term cannot publish any more.
        assert all(m.version != open_version for lst in listeners.values() for m in lst.models)
    finally:
        for listener in listeners.values():
            listener.hold.set()
        for c in coords.values():
            c.stop()
    assert all(listener.stopped for listener in listeners.values())


def test_timed_out_barrier_is_retried_without_the_laggard_and_cleaned_up(coord_config: dict[str, str],
                                                                        azure_account: StorageAccount) -> None:
    config = {**coord_config, "job.coordinator.azure.barrier.timeout.ms": "3000"}
    listeners = {pid: Listener() for pid in ("a", "b", "c")}
    coords = {pid: AzureJobCoordinator(pid, config, TASKS, listeners[pid], account=azure_account)
              for pid in listeners}
    try:
        coords["a"].start()
        wait(lambda: coords["a"].job_model is not None, 20, "a alone to get a model")
        coords["b"].start()
        wait(lambda: (m := coords["b"].job_model) is not None and m == coords["a"].job_model, 20, "b to join")
        listeners["b"].hold.clear()  # b cannot stop its tasks in time...
        coords["c"].start()
        store = coords["a"]._clients.store
        wait(lambda: store.read().state.barrier is BarrierState.START and "c" in store.read().state.processors,
             20, "a barrier including c")
        stuck = store.read().state.version
        # ...so the barrier times out and a newer version without b goes through.
        wait(lambda: (m := coords["c"].job_model) is not None and m.version > stuck and "b" not in m.assignments,
             30, "a model without the laggard")
        without_b = coords["c"].job_model
        assert without_b is not None and sorted(without_b.tasks) == sorted(TASKS)
        listeners["b"].hold.set()  # b recovers and rejoins

        def all_three() -> bool:
            models = [c.job_model for c in coords.values()]
            return all(m is not None and sorted(m.processors) == ["a", "b", "c"] and m.version > without_b.version
                       for m in models) and len({m.version for m in models if m}) == 1
        wait(all_three, 40, "b to rejoin")
        table = coords["a"]._clients.table
        wait(lambda: not [r for r in table.list_all() if r.version == stuck], 20, "the timed-out version's rows to go")
    finally:
        for listener in listeners.values():
            listener.hold.set()
        for c in coords.values():
            c.stop()


class CutOff:
    """Wraps a real storage client; while ``cut`` is set every call fails as if the network were down."""

    def __init__(self, real: object, cut: threading.Event) -> None:
        self._real = real
        self.cut = cut

    def __getattr__(self, name: str) -> object:
        attr = getattr(self._real, name)
        if not callable(attr):
            return attr

        def call(*args: object, **kwargs: object) -> object:
            if self.cut.is_set():
                from azure.core.exceptions import ServiceRequestError
                raise ServiceRequestError("injected: network cut")
            return attr(*args, **kwargs)
        return call


class Recording(Listener):
    def __init__(self) -> None:
        super().__init__()
        self.events: list[str] = []

    def on_new_job_model(self, job_model: JobModel) -> None:
        super().on_new_job_model(job_model)
        self.events.append(f"model {job_model.version}")

    def on_job_model_expired(self) -> None:
        self.events.append("expired")


def test_processor_cut_off_from_storage_stops_its_tasks_then_rejoins(coord_config: dict[str, str],
                                                                     azure_account: StorageAccount) -> None:
    listeners = {"a": Recording(), "b": Recording()}
    coords = {pid: AzureJobCoordinator(pid, coord_config, TASKS, listeners[pid], account=azure_account)
              for pid in listeners}
    cut = threading.Event()
    table, store = coords["b"]._clients.table, coords["b"]._clients.store
    table._table = CutOff(table._table, cut)
    store._blob = CutOff(store._blob, cut)  # b cannot even see the job model: only it can stop itself
    try:
        coords["a"].start()
        wait(lambda: coords["a"].is_leader(), 20, "a to lead")
        coords["b"].start()
        wait(lambda: (m := coords["b"].job_model) is not None and m == coords["a"].job_model and
             m.tasks_of("b") and f"model {m.version}" in listeners["b"].events, 20, "b to get tasks")
        before = coords["b"].job_model
        cut.set()
        # the model attribute is set just before the listener hears of it: wait for both, then the cut
        wait(lambda: listeners["b"].events[-1:] == ["expired"], 20, "b to stop its tasks by itself")
        wait(lambda: (m := coords["a"].job_model) is not None and "b" not in m.assignments, 20,
             "the leader to give b's tasks away")
        cut.clear()
        wait(lambda: (m := coords["b"].job_model) is not None and m == coords["a"].job_model and
             m.version > before.version and m.tasks_of("b"), 30, "b to rejoin")
    finally:
        cut.clear()
        for c in coords.values():
            c.stop()


def test_member_notes_are_read_back_per_processor_and_cleared(coord_config: dict[str, str],
                                                              azure_account: StorageAccount) -> None:
    from sparza.coordination import MemberNotes

    coords = {pid: AzureJobCoordinator(pid, coord_config, TASKS, Listener(), account=azure_account)
              for pid in ("a", "b")}
    try:
        coords["a"].write_note("once:0")  # before joining, into a job whose coordination container is not there yet
        for coord in coords.values():
            coord.start()
        assert all(isinstance(c, MemberNotes) for c in coords.values())
        assert coords["a"].read_notes(["a", "b"]) == {"a": "once:0"}  # b never wrote one: absent, not empty
        coords["b"].write_note("continuous")
        coords["a"].write_note("once:1")  # replaced, not appended
        assert coords["b"].read_notes(["a", "b", "ghost"]) == {"a": "once:1", "b": "continuous"}
        coords["b"].clear_note()
        coords["b"].clear_note()  # none there is fine
        assert coords["a"].read_notes(["a", "b"]) == {"a": "once:1"}
    finally:
        for coord in coords.values():
            coord.stop()
