"""Processors as separate OS processes against Azurite: election, failover, rebalance, fencing, scale.

Each processor is ``python -m sparza.coordination._processor_main`` (see ``ProcessorFleet``). The
config uses short heartbeat/liveness periods; the lease stays at Azure's 15 s minimum.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from sparza.azure import StorageAccount
from sparza.coordination import CoordinationConfig
from sparza.coordination.clients import CoordinationClients
from sparza.coordination.fencing import stored_generation
from sparza.devservers.storage import AzuriteProcess

from .conftest import job_config

pytestmark = pytest.mark.slow

THREE = ["p1", "p2", "p3"]


def test_three_processors_one_leader_every_task_once(fleet_factory: Any, coord_config: dict[str, str]) -> None:
    fleet = fleet_factory(coord_config, tasks=8)
    fleet.start(*THREE)
    version = fleet.wait_converged(THREE, 60)
    assert fleet.leaders(THREE) and len(fleet.leaders(THREE)) == 1
    owned = [t for pid in THREE for t in fleet.report(pid)["tasks"]]
    assert sorted(owned) == sorted(fleet.tasks) and len(owned) == len(set(owned))
    assert sorted(len(fleet.report(pid)["tasks"]) for pid in THREE) == [2, 3, 3]
    assert version >= 1


def test_kill_9_of_the_leader_elects_a_new_leader_with_a_complete_model(fleet_factory: Any,
                                                                        coord_config: dict[str, str]) -> None:
    fleet = fleet_factory(coord_config, tasks=8)
    fleet.start(*THREE)
    v1 = fleet.wait_converged(THREE, 60)
    leader = fleet.wait_for(lambda: fleet.leaders(THREE), 10, "a leader")[0]
    before = {pid: set(fleet.report(pid)["tasks"]) for pid in THREE}
    fleet.kill(leader)
    rest = [p for p in THREE if p != leader]
    # Documented bound: lease (15 s) + leader check + liveness check + barrier; generous margin here.
    v2 = fleet.wait_converged(rest, 45, newer_than=v1)
    new_leaders = fleet.wait_for(lambda: fleet.leaders(rest), 10, "the new leader to report")
    assert len(new_leaders) == 1 and new_leaders[0] != leader
    for pid in rest:  # sticky: survivors kept their tasks and gained the dead leader's
        assert before[pid] <= set(fleet.report(pid)["tasks"])
    assert v2 > v1


def test_kill_9_of_a_worker_reassigns_its_tasks(fleet_factory: Any, coord_config: dict[str, str]) -> None:
    fleet = fleet_factory(coord_config, tasks=8)
    fleet.start(*THREE)
    v1 = fleet.wait_converged(THREE, 60)
    leader = fleet.wait_for(lambda: fleet.leaders(THREE), 10, "a leader")[0]
    worker = next(p for p in THREE if p != leader)
    orphaned = set(fleet.report(worker)["tasks"])
    fleet.kill(worker)
    rest = [p for p in THREE if p != worker]
    fleet.wait_converged(rest, 30, newer_than=v1)
    now_owned = {t for pid in rest for t in fleet.report(pid)["tasks"]}
    assert orphaned <= now_owned
    assert fleet.leaders(rest) == [leader]  # a worker's death does not move leadership


def test_graceful_stop_rebalances_at_once_and_a_newcomer_joins(fleet_factory: Any,
                                                               coord_config: dict[str, str]) -> None:
    # A liveness timeout far longer than the test's wait proves the rebalance came from the stop
    # itself, not from the stopped processor's heartbeat going stale.
    config = {**coord_config, "job.coordinator.azure.liveness.timeout.ms": "120000"}
    fleet = fleet_factory(config, tasks=8)
    fleet.start(*THREE)
    v1 = fleet.wait_converged(THREE, 60)
    leader = fleet.wait_for(lambda: fleet.leaders(THREE), 10, "a leader")[0]
    worker = next(p for p in THREE if p != leader)
    assert fleet.terminate(worker) == 0
    rest = [p for p in THREE if p != worker]
    v2 = fleet.wait_converged(rest, 20, newer_than=v1)
    # The leader stops gracefully too: it releases its lease, so the survivor takes over without
    # waiting for the lease to expire, and a newcomer joins.
    assert fleet.terminate(leader) == 0
    survivor = next(p for p in rest if p != leader)
    fleet.start("p4")
    v3 = fleet.wait_converged([survivor, "p4"], 30, newer_than=v2)
    assert fleet.leaders([survivor, "p4"]) and v3 > v2


def test_paused_processor_is_fenced_then_rejoins(fleet_factory: Any, coord_config: dict[str, str],
                                                 azure_account: StorageAccount) -> None:
    fleet = fleet_factory(coord_config, tasks=6, checkpoints=True)
    fleet.start(*THREE)
    v1 = fleet.wait_converged(THREE, 60)
    leader = fleet.wait_for(lambda: fleet.leaders(THREE), 10, "a leader")[0]
    victim = next(p for p in THREE if p != leader)
    its_tasks = fleet.report(victim)["tasks"]
    # A batch is "in flight" (its generation and tasks frozen), then the process is stopped.
    fleet.signal(victim, signal.SIGUSR1)
    fleet.wait_for(lambda: fleet.report(victim)["frozen"], 10, "the victim to freeze a batch")
    fleet.signal(victim, signal.SIGSTOP)
    rest = [p for p in THREE if p != victim]
    v2 = fleet.wait_converged(rest, 30, newer_than=v1)
    clients = CoordinationClients.create(CoordinationConfig.from_config(coord_config), azure_account)

    def taken_over() -> bool:  # the new owners committed (and claimed) the victim's tasks
        return all(stored_generation(clients.blob("checkpoints/" + t.replace(" ", "-")))[0] >= v2
                   for t in its_tasks)
    fleet.wait_for(taken_over, 20, "the new owners to commit the victim's tasks")
    fleet.signal(victim, signal.SIGCONT)  # it resumes and commits its stale batch at once
    # generous: the resumed process's pooled connections may have been closed by the server meanwhile
    stale = fleet.wait_for(lambda: fleet.report(victim)["stale"], 60, "the stale commit")
    assert [s["task"] for s in stale] == its_tasks
    assert all(s["generation"] == v1 for s in stale)
    assert all(s["check"] == "fenced" for s in stale)
    assert all(s["write"] == "refused" for s in stale)
    for t in its_tasks:  # nothing the stale processor wrote landed
        assert b":stale" not in clients.blob("checkpoints/" + t.replace(" ", "-")).download_blob().readall()
    # It rejoins: a newer model gives every processor a share again.
    v3 = fleet.wait_converged(THREE, 40, newer_than=v2)
    assert fleet.report(victim)["tasks"] and v3 > v2


def test_paused_leader_loses_leadership_and_cannot_publish(fleet_factory: Any, coord_config: dict[str, str],
                                                          azure_account: StorageAccount) -> None:
    fleet = fleet_factory(coord_config, tasks=6)
    fleet.start(*THREE)
    v1 = fleet.wait_converged(THREE, 60)
    leader = fleet.wait_for(lambda: fleet.leaders(THREE), 10, "a leader")[0]
    clients = CoordinationClients.create(CoordinationConfig.from_config(coord_config), azure_account)
    term1 = clients.store.read().state.term
    fleet.signal(leader, signal.SIGSTOP)  # past its lease (15 s): another processor must take over
    rest = [p for p in THREE if p != leader]
    v2 = fleet.wait_converged(rest, 45, newer_than=v1)
    state = clients.store.read().state
    assert state.term > term1 and state.leader in rest
    fleet.signal(leader, signal.SIGCONT)
    v3 = fleet.wait_converged(THREE, 40, newer_than=v2)
    final = clients.store.read().state
    assert final.leader in rest and final.term == state.term  # the old leader never published again
    assert len(fleet.leaders(THREE)) == 1 and fleet.leaders(THREE)[0] != leader
    assert v3 > v2


def test_twenty_five_processors(fleet_factory: Any, coord_config: dict[str, str]) -> None:
    pids = [f"proc-{i:02d}-{'x' * 24}" for i in range(25)]  # long ids: Samza's 1 KiB list slot would overflow
    # Default-like periods: 25 processes on a 2-core machine must not starve their own heartbeats.
    config = {**coord_config, **{f"job.coordinator.azure.{k}": v for k, v in {
        "heartbeat.interval.ms": "2000", "liveness.timeout.ms": "10000", "leader.check.interval.ms": "2000",
        "jobmodel.poll.interval.ms": "1000", "liveness.check.interval.ms": "1000",
        "barrier.timeout.ms": "30000"}.items()}}
    fleet = fleet_factory(config, tasks=20)  # more processors than tasks: 5 stay idle
    fleet.start(*pids)
    fleet.wait_converged(pids, 150)
    counts = sorted(len(fleet.report(p)["tasks"]) for p in pids)
    assert counts == [0] * 5 + [1] * 20
    assert len(fleet.leaders(pids)) == 1


def test_coordination_recovers_after_azurite_restarts(fleet_factory: Any, tmp_path: Path, unique_name: str) -> None:
    storage = AzuriteProcess(tmp_path / "own-azurite")
    storage.start()
    try:
        fleet = fleet_factory(job_config(storage.connection_string, unique_name), tasks=6)
        fleet.start(*THREE)
        v1 = fleet.wait_converged(THREE, 60)
        os.killpg(storage.pid, signal.SIGKILL)  # a crash: whatever Azurite had not persisted is lost
        storage.stop()
        time.sleep(2)  # processors see refused connections; none of them may give up
        storage.start()
        assert sorted(fleet.alive()) == THREE
        # A new processor joining after the restart proves heartbeats, leadership and barriers work again.
        fleet.start("p4")
        fleet.wait_converged([*THREE, "p4"], 90, newer_than=v1)
        assert len(fleet.leaders([*THREE, "p4"])) == 1
    finally:
        storage.stop()  # the fleet fixture kills the processors


def test_cli_status_shows_leader_processors_and_model(fleet_factory: Any, coord_config: dict[str, str],
                                                      tmp_path: Path) -> None:
    import json
    import subprocess
    import sys

    fleet = fleet_factory(coord_config, tasks=4)
    fleet.start("p1", "p2")
    version = fleet.wait_converged(["p1", "p2"], 60)
    leader = fleet.wait_for(lambda: fleet.leaders(["p1", "p2"]), 10, "a leader")[0]
    config = tmp_path / "job.yaml"
    config.write_text(json.dumps(coord_config))  # JSON is valid YAML
    run = subprocess.run([sys.executable, "-m", "sparza.cli", "coordinator", "status", "--config", str(config)],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert f"leader: {leader}" in run.stdout
    assert f"version {version}, barrier END" in run.stdout
    assert "p1" in run.stdout and "p2" in run.stdout and "Partition 3" in run.stdout
