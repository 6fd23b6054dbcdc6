"""Two processors of a two-stage application under the Azure coordinator (Azurite): they are one membership (one
heartbeat and lease set per processor, named after the application, whose job model holds every stage's tasks),
they share every stage's tasks (a task runs in one processor at a time under the model's version as fencing
generation), and the windows they write together are exactly what a plain-Python oracle computes."""

from __future__ import annotations

import json
import threading
import time
import traceback
from collections import Counter
from typing import Any

import pytest

from sparza.api import plan_application
from sparza.config import Config
from sparza.coordination.status import read_status
from sparza.engine.inputs import InputSystems
from sparza.engine.jobconfig import JobConfig
from sparza.runtime import checkpoint_store_from_config
from sparza.runtime.driver.application import run_application
from sparza.streams import OutgoingMessageEnvelope, SystemStream
from sparza.systems import StreamSpec
from sparza.systems.delta import DeltaSystemAdmin, DeltaSystemProducer
from sparza.testing import FAST_AZURE_COORDINATION

pytestmark = [pytest.mark.spark, pytest.mark.azurite]

WINDOW_MS = 1000


def _events(count: int) -> list[tuple[str, int, int, int]]:
    """(key, n, partition, timestamp): skewed keys (k0 gets a third), partition 3 empty; times rise in each
    partition (no message is late: what is tested here is who runs which task, not lateness)."""
    out = []
    for i in range(count):
        key = "k0" if i % 3 == 0 else f"k{1 + (i * 7) % 6}"
        out.append((key, i, i % 3, 1000 + i * 17))
    return out


def _oracle(events: list[tuple[str, int, int, int]]) -> Counter[tuple[str, int, int, int]]:
    """One final pane per key and tumbling window: (key, start, count, sum)."""
    panes: dict[tuple[str, int], list[int]] = {}
    for key, n, _partition, ts in events:
        acc = panes.setdefault((key, ts - ts % WINDOW_MS), [0, 0])
        acc[0] += 1
        acc[1] += n
    return Counter((key, start, c, s) for (key, start), (c, s) in panes.items())


def _application(work_dir: Any, connection: str, name: str, events: list[tuple[str, int, int, int]]) -> Config:
    config = Config({
        **FAST_AZURE_COORDINATION,
        # Two processors in one loaded test process: slow heartbeats must not count as deaths (a processor judged
        # dead while it still runs is fenced and steps back, which is not what is tested here).
        "job.coordinator.azure.liveness.timeout.ms": "15000",
        "job.coordinator.azure.barrier.timeout.ms": "60000",
        "job.name": name,
        "app.class": "sparza.api.examples.WindowedCount",
        "app.example.partitions": "3",
        "app.example.window.ms": str(WINDOW_MS),
        "job.execution.mode": "batches",  # two processors in one SparkSession: one container pool each is not
        "task.max.batch.messages": "10",
        "task.commit.ms": "0",
        "job.logged.store.base.dir": str(work_dir / "state"),
        "azure.storage.connect": connection,
        "job.checkpoint.factory": "azure",
        "job.checkpoint.azure.container": name,
        "app.window.store.backup.factories": "blobstore",  # a task moving to the other processor restores it
        "blob.store.manager.factory": "local",
        "blob.store.local.root": str(work_dir / "blobstore"),
        "systems.delta.samza.factory": "delta",
        "systems.delta.samza.offset.default": "oldest",
        "systems.delta.delta.root": str(work_dir / "streams"),
        "systems.delta.streams.events.bounded": "true",
    })
    admin = DeltaSystemAdmin("delta", config)
    admin.create_stream(StreamSpec("events", 4))
    admin.create_stream(StreamSpec("out", 2))
    producer = DeltaSystemProducer("delta", config)
    producer.register("test")
    for i, (key, n, partition, ts) in enumerate(events):
        producer.send("test", OutgoingMessageEnvelope(SystemStream("delta", "events"),
                                                      json.dumps({"key": key, "n": n}).encode(), key=key.encode(),
                                                      partition=partition, timestamp=ts))
        if i % 30 == 29:
            producer.flush("test")  # several input commits: several batches per task
    producer.flush("test")
    return config


def _output(work_dir: Any) -> Counter[tuple[str, int, int, int]]:
    from deltalake import DeltaTable

    table = DeltaTable(str(work_dir / "streams" / "out")).to_pyarrow_table(columns=["value", "type"])
    rows = [json.loads(v) for v, t in zip(table.column("value").to_pylist(), table.column("type").to_pylist(),
                                          strict=True) if t == 0]
    return Counter((r["key"], r["start"], r["count"], r["sum"]) for r in rows)


def test_two_processors_share_each_stage_of_an_application(spark, work_dir, azure_connection_string, unique_name):
    # p2 joins about 5 s after p1 started; 360 events keep p1 busy with both stages for 10 s more (600 before).
    events = _events(360)
    config = _application(work_dir, azure_connection_string, unique_name, events)
    stages = [s.config for s in plan_application(config).stages]
    assert len(stages) == 2
    keys = [JobConfig.from_config(c).job_key for c in stages]
    models: dict[int, dict[str, list[str]]] = {}  # every model of the application's membership, by version
    members: set[str] = set()
    stage_members: set[str] = set()  # anything coordinated per stage (there must be nothing)
    outcomes: dict[str, Any] = {}

    def processor(pid: str) -> None:
        own = config.with_overrides({"job.logged.store.base.dir": str(work_dir / f"state-{pid}")})  # own host
        try:
            outcomes[pid] = run_application(own, spark=spark, processor_id=pid, install_signal_handlers=False)
        except BaseException as exc:
            outcomes[pid] = exc

    def record_models() -> None:
        status = read_status(config)
        members.update(p.processor_id for p in status.processors)
        model = status.state.effective
        if model is not None:
            models[int(model.version)] = {p: sorted(t) for p, t in model.assignments.items()}
        for stage in stages:
            st = read_status(stage)
            stage_members.update(p.processor_id for p in st.processors)
            if st.state.current is not None:
                stage_members.add(f"a job model of stage {JobConfig.from_config(stage).job_key}")

    threads = [threading.Thread(target=processor, args=(pid,), daemon=True) for pid in ("p1", "p2")]
    threads[0].start()
    # p2 starts once p1 has begun processing (as a second `sparza run` would); also, the start checks of two
    # runs at once in one Python 3.11.7 process can trip an ast.parse thread-safety bug of that CPython
    # ("SystemError: AST constructor recursion depth mismatch"; sparza run checks on its main thread only).
    deadline = time.monotonic() + 300
    while threads[0].is_alive() and not outcomes and time.monotonic() < deadline:
        record_models()
        if models:
            break
        time.sleep(0.2)
    threads[1].start()
    deadline = time.monotonic() + 600
    while any(t.is_alive() for t in threads) and time.monotonic() < deadline:
        record_models()
        time.sleep(0.2)
    assert not any(t.is_alive() for t in threads), "the processors did not end"
    for pid in ("p1", "p2"):
        assert not isinstance(outcomes[pid], BaseException), \
            f"{pid} failed: {''.join(traceback.format_exception(outcomes[pid]))}"
        assert outcomes[pid].reason == "all inputs ended"

    assert members == {"p1", "p2"} and not stage_members, (members, stage_members)  # one membership per processor
    assert models, "the application was never coordinated: no job model"
    for stage, key in zip(stages, keys, strict=True):
        tasks = sorted(t.name for t in InputSystems(JobConfig.from_config(stage)).task_models())
        per_model = {version: {p: [t.split("/", 1)[1] for t in ts if t.split("/", 1)[0] == key]
                               for p, ts in assignments.items()} for version, assignments in models.items()}
        for version, assignments in per_model.items():  # one processor per task in every model
            owned = [t for ts in assignments.values() for t in ts]
            assert sorted(owned) == tasks, f"stage {key} model {version}: {assignments}"
        assert any(all(assignments.get(p) for p in ("p1", "p2")) for assignments in per_model.values()), \
            f"stage {key}: no model shared the tasks between the processors: {per_model}"
        for task, checkpoint in checkpoint_store_from_config(stage, key).read_all().items():
            assert 1 <= checkpoint.generation <= max(models), f"{key} {task}: generation {checkpoint.generation}"
            assert checkpoint.ended and checkpoint.open_intent() is None

    assert _output(work_dir) == _oracle(events)


def test_once_runs_a_coordinated_application_writers_first(spark, work_dir, azure_connection_string, unique_name):
    """``--once`` under the coordinator: the stages run one after the other under the application's one job
    model, so the second stage sees all the first wrote, and the bounded input's windows all fire."""
    events = _events(90)
    config = _application(work_dir, azure_connection_string, unique_name, events)
    outcome = run_application(config, spark=spark, processor_id="p1", once=True, install_signal_handlers=False)
    assert outcome.batches > 0
    model = read_status(config).state.current
    assert model is not None, "the application was never coordinated"
    stages = plan_application(config).stages
    assert sorted(model.tasks) == sorted(f"{JobConfig.from_config(s.config).job_key}/{t.name}" for s in stages
                                         for t in InputSystems(JobConfig.from_config(s.config)).task_models())
    for stage in stages:
        key = JobConfig.from_config(stage.config).job_key
        assert read_status(stage.config).state.current is None, f"stage {key} was coordinated on its own"
        checkpoints = checkpoint_store_from_config(stage.config, key).read_all()
        assert checkpoints and all(1 <= cp.generation <= model.version and cp.ended for cp in checkpoints.values())
    assert _output(work_dir) == _oracle(events)
    # `sparza coordinator status` of the application shows its one membership.
    import yaml
    from typer.testing import CliRunner

    from sparza.cli import app

    path = work_dir / "app.yaml"
    path.write_text(yaml.safe_dump(dict(config.items())))
    result = CliRunner().invoke(app, ["coordinator", "status", "--config", str(path)])
    assert result.exit_code == 0, result.output
    version = read_status(config).state.version
    assert f"job {unique_name}-1:" in result.output and "stage " not in result.output
    assert version >= 1 and f"job model: version {version}," in result.output


def test_once_processors_start_a_stage_only_after_every_peer_ended_the_stages_before_it(
        spark, work_dir, azure_connection_string, unique_name):
    """Two ``--once`` processors, all input in one partition: the processor without it is through the first stage
    at once. Its second stage must not start (and freeze its end) before the other processor has written all the
    first stage's output: once the first of them returns, the first stage is done, and the windows are exact
    without another run. Before, it ended "caught up" on what was there, and left it short when it stayed in the
    membership past the other's last look at the job model (soak seed 35729013: 91 of 259 records missing)."""
    # 300 events in ten-message batches (30 batches) keep p1 in the first stage for about 6 s after p2 has passed it
    # here: the window in which the bug started p2's second stage on a partial first stage (500 events before).
    events = [(f"k{(i * 7) % 5}", i, 0, 1000 + i * 17) for i in range(300)]
    config = _application(work_dir, azure_connection_string, unique_name, events)
    first = plan_application(config).stages[0].config
    first_key = JobConfig.from_config(first).job_key
    outcomes: dict[str, Any] = {}
    at_return: dict[str, dict[str, dict[str, str]]] = {}

    def processor(pid: str) -> None:
        own = config.with_overrides({"job.logged.store.base.dir": str(work_dir / f"state-{pid}")})
        try:
            outcomes[pid] = run_application(own, spark=spark, processor_id=pid, once=True,
                                            install_signal_handlers=False)
        except BaseException as exc:
            outcomes[pid] = exc
        at_return[pid] = {t: dict(cp.offsets) for t, cp in
                          checkpoint_store_from_config(first, first_key).read_all().items()}

    threads = {pid: threading.Thread(target=processor, args=(pid,), daemon=True) for pid in ("p1", "p2")}
    threads["p1"].start()
    deadline = time.monotonic() + 300
    while read_status(config).state.effective is None and threads["p1"].is_alive() and time.monotonic() < deadline:
        time.sleep(0.2)
    threads["p2"].start()
    for thread in threads.values():
        thread.join(600)
    assert not any(t.is_alive() for t in threads.values()), "the processors did not end"
    for pid in ("p1", "p2"):
        assert not isinstance(outcomes[pid], BaseException), \
            f"{pid} failed: {''.join(traceback.format_exception(outcomes[pid]))}"
    final = {t: dict(cp.offsets) for t, cp in checkpoint_store_from_config(first, first_key).read_all().items()}
    first_back = next(iter(at_return))  # filled as the processors return
    assert at_return[first_back] == final, \
        f"{first_back} returned while the first stage still had input to process: {at_return[first_back]} -> {final}"
    assert _output(work_dir) == _oracle(events)


def test_once_processor_goes_back_to_a_stage_for_the_tasks_of_a_peer_that_died(
        spark, work_dir, azure_connection_string, unique_name):
    """Two ``--once`` processors; p2 (a ``sparza run`` subprocess, two messages per batch) is still in the first
    stage when it is killed with SIGKILL, while p1 (in this process) is through that stage and waits at the second.
    When p2 is judged dead its tasks come to p1, which goes back to the first stage for them: the windows are exact
    once p1 returns, with no other run. Before, p1 ran the second stage and left, those tasks' input unprocessed."""
    import os
    import signal
    import subprocess

    from tests.runtime.helpers import REPO, sparza_cmd, sparza_env, write_config

    from sparza.coordination import AzureJobCoordinator

    events = [(f"k{(i * 7) % 5}", i, i % 4, 1000 + i * 17) for i in range(800)]
    config = _application(work_dir, azure_connection_string, unique_name, events)
    slow = config.with_overrides({"task.max.batch.messages": "2", "job.logged.store.base.dir": str(work_dir / "s2")})
    log = (work_dir / "p2.log").open("w")
    p2 = subprocess.Popen(sparza_cmd("run", "--config", str(write_config(slow, work_dir / "p2.yaml")), "--once",
                                     "--master", "local[1]", "--processor-id", "p2"),
                          cwd=REPO, env=sparza_env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    observer = AzureJobCoordinator("observer", config, [], None)  # type: ignore[arg-type]  # reads notes only
    outcome: list[Any] = []

    def p1() -> None:
        own = config.with_overrides({"task.max.batch.messages": "50",
                                     "job.logged.store.base.dir": str(work_dir / "s1")})
        try:
            outcome.append(run_application(own, spark=spark, processor_id="p1", once=True,
                                           install_signal_handlers=False))
        except BaseException as exc:
            outcome.append(exc)

    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and p2.poll() is None:
            model = read_status(config).state.effective
            if model is not None and model.tasks_of("p2"):
                break
            time.sleep(0.5)
        assert p2.poll() is None, f"p2 ended before p1 started: {(work_dir / 'p2.log').read_text()[-3000:]}"
        thread = threading.Thread(target=p1, daemon=True)
        thread.start()
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and thread.is_alive():
            notes = observer.read_notes(["p1", "p2"])
            if notes.get("p1", "").startswith("once:") and notes["p1"] != "once:0":
                break
            time.sleep(0.2)
        notes = observer.read_notes(["p1", "p2"])
        assert notes.get("p2") == "once:0", f"p2 was through the first stage before p1 was: {notes}"
        os.killpg(p2.pid, signal.SIGKILL)
        p2.wait(60)
        thread.join(600)
        assert not thread.is_alive(), "p1 did not end"
    finally:
        if p2.poll() is None:
            os.killpg(p2.pid, signal.SIGKILL)
        log.close()
    assert not isinstance(outcome[0], BaseException), "".join(traceback.format_exception(outcome[0]))
    assert _output(work_dir) == _oracle(events)
