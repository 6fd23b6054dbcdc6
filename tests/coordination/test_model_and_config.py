"""Assignment, job model, config and naming: no storage needed."""

from __future__ import annotations

import pytest

import sparza.coordination as coordination
from sparza.coordination import (
    CoordinationConfig,
    CoordinationResources,
    JobModel,
    StandaloneJobCoordinator,
    assign_tasks,
    job_coordinator_from_config,
)
from sparza.coordination.assignment import group_task, split_group_task
from sparza.coordination.store import BarrierState, CoordinatorState
from sparza.errors import ConfigError

TASKS = [f"Partition {i}" for i in range(10)]


def owners(assignments: dict[str, list[str]]) -> dict[str, str]:
    return {t: p for p, ts in assignments.items() for t in ts}


def test_public_names_resolve_once() -> None:
    assert len(coordination.__all__) == len(set(coordination.__all__))
    for name in coordination.__all__:
        assert getattr(coordination, name) is not None


def test_assignment_is_balanced_and_complete() -> None:
    result = assign_tasks(TASKS, ["a", "b", "c"])
    assert sorted(t for ts in result.values() for t in ts) == sorted(TASKS)
    assert sorted(len(ts) for ts in result.values()) == [3, 3, 4]


def test_assignment_is_sticky_when_a_processor_leaves_or_joins() -> None:
    before = assign_tasks(TASKS, ["a", "b", "c"])
    after = assign_tasks(TASKS, ["a", "c"], before)
    moved = [t for t, p in owners(after).items() if owners(before)[t] != p]
    assert sorted(moved) == sorted(before["b"])  # only b's tasks move
    joined = assign_tasks(TASKS, ["a", "c", "d"], after)
    moved = [t for t, p in owners(joined).items() if owners(after)[t] != p]
    assert len(moved) == len(joined["d"]) == 3  # the newcomer gets exactly its share, from the others
    assert sorted(len(ts) for ts in joined.values()) == [3, 3, 4]


def test_more_processors_than_tasks_leaves_idle_processors() -> None:
    result = assign_tasks(["Partition 0", "Partition 1"], [f"p{i}" for i in range(5)])
    assert len(result) == 5
    assert sorted(len(ts) for ts in result.values()) == [0, 0, 0, 1, 1]


def test_grouped_tasks_are_balanced_within_each_stage_and_in_total() -> None:
    # The stages of an application in one membership: every processor gets a share of every stage.
    sizes = {"app-a-1": 3, "app-b-1": 2, "app-c-1": 4}
    tasks = [group_task(g, f"Partition {i}") for g, n in sizes.items() for i in range(n)]
    assert split_group_task(tasks[0]) == ("app-a-1", "Partition 0") and split_group_task("Partition 0")[0] == ""

    def spread(counts: list[int]) -> int:
        return max(counts) - min(counts)

    for procs in (["p1", "p2"], ["p1", "p2", "p3"], [f"p{i:02d}" for i in range(16)]):
        result = assign_tasks(tasks, procs)
        assert sorted(t for ts in result.values() for t in ts) == sorted(tasks)
        for group in sizes:
            assert spread([sum(split_group_task(t)[0] == group for t in ts) for ts in result.values()]) <= 1
        assert spread([len(ts) for ts in result.values()]) <= 1, result
    before = assign_tasks(tasks, ["p1", "p2", "p3"])
    after = assign_tasks(tasks, ["p1", "p3"], before)
    assert sorted(t for t, p in owners(after).items() if owners(before)[t] != p) == sorted(before["p2"])


def test_assignment_is_deterministic_and_natural_ordered() -> None:
    assert assign_tasks(TASKS, ["b", "a"]) == assign_tasks(list(reversed(TASKS)), ["a", "b"])
    assert assign_tasks(TASKS, ["a"])["a"][:3] == ["Partition 0", "Partition 1", "Partition 2"]
    assert assign_tasks(TASKS, []) == {}


def test_state_round_trips_with_a_large_model() -> None:
    # Far beyond Samza's 1 MB job-model slot and 1 KiB processor-list slot.
    procs = [f"processor-{i:05d}-0123456789abcdef" for i in range(3000)]
    tasks = [f"Partition {i}" for i in range(60000)]
    model = JobModel(7, assign_tasks(tasks, procs))
    state = CoordinatorState(term=3, leader=procs[0], current=model, previous=None, barrier=BarrierState.START,
                             processors=procs)
    data = state.to_json()
    assert len(data) > 1_100_000
    back = CoordinatorState.from_json(data)
    assert back.current == model and back.processors == sorted(procs) and back.effective is None


def test_config_defaults_and_validation() -> None:
    cfg = CoordinationConfig.from_config({"job.name": "Orders-Job", "job.id": "2"})
    assert cfg.lease_duration_ms == 15000 and cfg.lease_renew_interval_ms * 3 <= cfg.lease_duration_ms
    assert cfg.liveness_timeout_ms >= 2 * cfg.heartbeat_interval_ms
    for key, value in [("job.coordinator.azure.lease.duration.ms", "10s"),
                       ("job.coordinator.azure.lease.duration.ms", "90s"),
                       ("job.coordinator.azure.lease.renew.interval.ms", "10s"),
                       ("job.coordinator.azure.liveness.timeout.ms", "1s")]:
        with pytest.raises(ConfigError) as info:
            CoordinationConfig.from_config({"job.name": "j", key: value})
        assert info.value.key == key
    with pytest.raises(ConfigError):
        CoordinationConfig.from_config({})


def test_resource_names_are_valid_and_distinct() -> None:
    a = CoordinationResources.for_job(CoordinationConfig.from_config({"job.name": "Orders_Job", "job.id": "1"}))
    assert a.container == "sparza-coord-ordersjob1" and a.table == "sparzacoordordersjob1"
    long1 = CoordinationResources.for_job(CoordinationConfig.from_config({"job.name": "x" * 100, "job.id": "1"}))
    long2 = CoordinationResources.for_job(CoordinationConfig.from_config({"job.name": "x" * 100 + "y", "job.id": "1"}))
    assert len(long1.container) <= 63 and len(long1.table) <= 63
    assert long1.container != long2.container and long1.table != long2.table


class Recorder:
    def __init__(self) -> None:
        self.calls: list[object] = []

    def on_new_job_model(self, job_model: JobModel) -> None:
        self.calls.append(job_model)

    def on_job_model_expired(self) -> None:
        self.calls.append("expired")

    def on_coordinator_stop(self) -> None:
        self.calls.append("stop")


def test_standalone_is_the_default_and_owns_every_task() -> None:
    listener = Recorder()
    coordinator = job_coordinator_from_config("p1", {"job.name": "j"}, ["Partition 1", "Partition 0"], listener)
    assert isinstance(coordinator, StandaloneJobCoordinator)
    coordinator.start()
    coordinator.stop()
    assert listener.calls == [JobModel(1, {"p1": ["Partition 0", "Partition 1"]}), "expired", "stop"]


def test_factory_rejects_unknown_coordinators() -> None:
    with pytest.raises(ConfigError) as info:
        job_coordinator_from_config("p1", {"job.coordinator.factory": "zookeeper"}, [], Recorder())
    assert info.value.key == "job.coordinator.factory"
