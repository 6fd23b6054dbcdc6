"""The batch planner over real Delta streams (no Spark): capping, bootstrap gating, bounded ends,
starting offsets from task checkpoints, and no new plan when nothing changed."""

from __future__ import annotations

import dataclasses
import json

import pytest
from examples.keyed_count.load import append_messages
from tests.runtime.helpers import PROFILES_STORE, create_profiles

from sparza.config import Config
from sparza.engine.inputs import InputSystems
from sparza.engine.planner import BatchPlanner
from sparza.runtime import Intent, JobConfig, TaskCheckpoint
from sparza.streams import OutgoingMessageEnvelope, SystemStream
from sparza.systems import StreamSpec
from sparza.systems.delta import DeltaSystemAdmin, DeltaSystemProducer


def _planner(config: Config) -> BatchPlanner:
    job = JobConfig.from_config(config)
    inputs = InputSystems(job)
    return BatchPlanner(job, inputs.task_models(), inputs.ops, inputs.positions)


def test_plans_are_capped_and_continue_from_checkpoints(make_job):
    config = make_job(partitions=1, **{"task.max.batch.messages": "250"})
    append_messages(config, 600, 3, commit_size=200)  # versions 1..3, 200 rows each, partition 0
    planner = _planner(config)
    start = planner.initial({})
    assert start.tasks["Partition 0"].offsets == {"delta.events#0": "1:0"}  # oldest
    ends = []
    plan = start
    for i in range(4):
        plan = planner.next(plan, 1_000 + i)
        ends.append(plan.tasks["Partition 0"].offsets["delta.events#0"])
    assert ends == ["2:50", "3:100", "4:0", "4:0"]
    assert plan.batch == 3  # the last call planned nothing new: same plan
    # A new planner (new Spark checkpoint dir) starts where the task checkpoint says, batch included.
    cp = TaskCheckpoint("Partition 0", batch=7, generation=0, offsets={"delta.events#0": "3:100"})
    again = _planner(config).initial({"Partition 0": cp})
    assert again.batch == 7
    assert again.tasks["Partition 0"].offsets == {"delta.events#0": "3:100"}


def test_bootstrap_stream_gates_main_input_and_bounded_streams_end(make_job, work_dir):
    config = make_job(partitions=1, **{"task.inputs": "delta.events,delta.profiles",
                                       "task.max.batch.messages": "100",
                                       "systems.delta.streams.profiles.samza.bootstrap": "true",
                                       "systems.delta.streams.events.bounded": "true"})
    DeltaSystemAdmin("delta", config).create_stream(StreamSpec("profiles", 1))
    producer = DeltaSystemProducer("delta", config)
    producer.register("t")
    for i in range(150):
        producer.send("t", OutgoingMessageEnvelope(SystemStream("delta", "profiles"), b"p", key=b"k", partition=0,
                                                   timestamp=i))
    producer.flush("t")
    append_messages(config, 120, 2, commit_size=120)
    planner = _planner(config)
    first = planner.next(planner.initial({}), 1)
    offsets = first.tasks["Partition 0"].offsets
    assert offsets["delta.profiles#0"] == "1:100"  # each stream is its own table: own versions
    assert offsets["delta.events#0"] == "1:0"  # gated: the bootstrap stream has not caught up
    second = planner.next(first, 2).tasks["Partition 0"]
    assert second.offsets["delta.profiles#0"] == "2:0"
    assert second.offsets["delta.events#0"] == "1:100"
    assert second.ended is False
    third = planner.next(planner.next(first, 2), 3).tasks["Partition 0"]
    assert third.offsets["delta.events#0"] == "2:0"
    # events is bounded and reached its end, but profiles is not bounded: the task does not end.
    assert third.ended is False


def test_an_open_intent_is_replanned_exactly_once_with_its_planned_at(make_job):
    config = make_job(partitions=1, **{"task.max.batch.messages": "250"})
    append_messages(config, 600, 3, commit_size=200)
    # Batch 8 flushed outputs for 1:0 -> 2:50 but never committed; Spark's offset log of it is gone.
    intent = Intent(batch=8, planned_at_ms=4_242, starts={"delta.events#0": "1:0"},
                    ends={"delta.events#0": "2:50"})
    cp = TaskCheckpoint("Partition 0", batch=0, generation=0, offsets={}, pending=intent)
    assert not cp.committed and cp.open_intent() == intent
    start = _planner(config).initial({"Partition 0": cp})
    assert start.batch == 7  # the next plan is batch 8 again: later batches get higher output versions
    planner = _planner(config)
    replay = planner.next(start, 99_000)
    assert replay.batch == 8
    assert replay.tasks["Partition 0"].offsets == {"delta.events#0": "2:50"}
    assert replay.tasks["Partition 0"].planned_at_ms == 4_242
    after = planner.next(replay, 99_001)  # then planning goes on as usual
    assert after.tasks["Partition 0"].offsets == {"delta.events#0": "3:100"}
    assert after.tasks["Partition 0"].planned_at_ms is None
    # An intent that the checkpoint already committed is not replayed.
    done = TaskCheckpoint("Partition 0", batch=8, generation=0, offsets={"delta.events#0": "2:50"}, pending=intent)
    assert done.open_intent() is None
    assert _planner(config).initial({"Partition 0": done}).tasks["Partition 0"].replay is None


def test_a_due_window_plans_an_empty_batch_except_under_available_now(make_job):
    config = make_job(partitions=1, **{"task.window.ms": "1000"})
    append_messages(config, 10, 2, commit_size=10)
    planner = _planner(config)
    first = planner.next(planner.initial({}), 10_000)
    assert planner.next(first, 10_500) is first  # no data, window not due: no batch
    due = planner.next(first, 11_000)
    assert due.batch == first.batch + 1 and due.tasks == first.tasks  # an empty batch for the window
    planner.freeze_targets()  # --once
    assert planner.next(due, 99_000) is due


def test_an_intent_of_a_first_batch_starts_where_the_intent_says_and_new_ssps_stay_put(make_job):
    # offset.default upcoming: re-computing the start after a crash would skip the flushed range.
    config = make_job(partitions=1, **{"systems.delta.samza.offset.default": "upcoming"})
    append_messages(config, 100, 2, commit_size=100)  # version 1
    intent = Intent(batch=1, planned_at_ms=7, starts={"delta.events#0": "1:0"}, ends={"delta.events#0": "1:60"})
    first_batch = TaskCheckpoint("Partition 0", batch=0, generation=0, offsets={}, pending=intent)
    append_messages(config, 100, 2, start=100, commit_size=100)  # version 2: upcoming has moved on
    planner = _planner(config)
    start = planner.initial({"Partition 0": first_batch})
    assert start.tasks["Partition 0"].offsets == {"delta.events#0": "1:0"}
    replay = planner.next(start, 50)
    assert replay.batch == 1
    assert replay.tasks["Partition 0"].offsets == {"delta.events#0": "1:60"}
    # An input added since the intent was written reads nothing in the replayed batch.
    wider = make_job(partitions=1, **{"task.inputs": "delta.events,delta.counts"})
    append_messages(wider, 10, 2, start=200, commit_size=10)
    committed = TaskCheckpoint("Partition 0", batch=4, generation=0, offsets={"delta.events#0": "1:0"},
                               pending=dataclasses.replace(intent, batch=5))
    planner = _planner(wider)
    start = planner.initial({"Partition 0": committed})
    replay = planner.next(start, 50)
    assert replay.batch == 5
    offsets = replay.tasks["Partition 0"].offsets
    assert offsets["delta.events#0"] == "1:60"
    assert offsets["delta.counts#0"] == start.tasks["Partition 0"].offsets["delta.counts#0"]


def test_plans_round_trip_through_the_json_spark_keeps_in_its_offset_log():
    from sparza.engine.planner import BatchPlan, Replay, TaskPlan

    plan = BatchPlan(4, 1_234, {
        "Partition 0": TaskPlan({"delta.events#0": "1:0"}, ended=False,
                                replay=Replay({"delta.events#0": "2:5"}, 99, {"delta.events#0": "3:0"})),
        "Partition 1": TaskPlan({"delta.events#1": "1:7"}, ended=True, planned_at_ms=77, bounded_ends={}),
    })
    body = plan.to_json()
    assert json.loads(json.dumps(body)) == body  # plain JSON, as Spark stores it
    assert BatchPlan.from_json(body) == plan
    # The stored keys are the ones sparza 0.1 wrote, so an existing Spark checkpoint dir still replays.
    assert body["tasks"]["Partition 0"]["replay"] == {"ends": {"delta.events#0": "2:5"}, "planned_at": 99,
                                                      "bounded_ends": {"delta.events#0": "3:0"}}
    assert body["tasks"]["Partition 1"]["planned_at"] == 77 and "replay" not in body["tasks"]["Partition 1"]
    # A plan made under a drain records it, and a replayed intent keeps the drain its split ran under.
    from sparza.engine.drain import DrainRequest

    drained = BatchPlan(5, 2_000, {
        "Partition 0": TaskPlan({"delta.events#0": "2:5"}, planned_at_ms=99, bounded_ends={},
                                drain={"id": "d1", "unreached": ["delta.events#0"]}),
        "Partition 1": TaskPlan({"delta.events#1": "1:7"}, replay=Replay({"delta.events#1": "1:9"}, 98, {},
                                                                        {"id": "d1", "unreached": []}))},
        DrainRequest("d1", 1_999, {"delta.events#0": "2:9", "delta.events#1": "1:9"}))
    assert BatchPlan.from_json(json.loads(json.dumps(drained.to_json()))) == drained


def test_reset_offset_starts_main_inputs_at_the_default_unless_a_batch_is_half_committed(make_job):
    """``samza.reset.offset`` (Samza: ignore the checkpointed offset at every start): oldest or upcoming
    replaces the checkpoint of that stream only; an ended task reads again; a task with an open intent
    completes its batch first and is reset at the next start (a warning says so)."""
    from sparza.engine.planner import plan_resets

    config = make_job(partitions=1, **{"task.max.batch.messages": "250",
                                       "systems.delta.streams.events.samza.reset.offset": "true"})
    append_messages(config, 600, 3, commit_size=200)
    planner = _planner(config)
    cp = TaskCheckpoint("Partition 0", batch=5, generation=0, offsets={"delta.events#0": "3:100"}, ended=True)
    start = planner.initial({"Partition 0": cp})
    task = start.tasks["Partition 0"]
    assert task.offsets == {"delta.events#0": "1:0"}  # oldest: the job's samza.offset.default
    assert task.reset == ("delta.events#0",) and task.ended is False
    assert start.batch == 5  # output versions keep increasing
    assert _round_trip(task) == task
    upcoming = Config({**dict(config.items()), "systems.delta.samza.offset.default": "upcoming"})
    assert _planner(upcoming).initial({"Partition 0": cp}).tasks["Partition 0"].offsets == {"delta.events#0": "4:0"}
    # Without the key, the checkpoint decides.
    plain = Config({k: v for k, v in config.items() if "reset.offset" not in k})
    assert _planner(plain).initial({"Partition 0": cp}).tasks["Partition 0"].offsets == {"delta.events#0": "3:100"}
    # A half-committed batch is completed exactly as planned; the reset waits for the next start.
    intent = Intent(batch=6, planned_at_ms=1, starts={"delta.events#0": "3:100"}, ends={"delta.events#0": "4:0"})
    open_cp = dataclasses.replace(cp, pending=intent, ended=False)
    replayed = planner.initial({"Partition 0": open_cp}).tasks["Partition 0"]
    assert replayed.offsets == {"delta.events#0": "3:100"} and replayed.replay is not None and not replayed.reset
    job = JobConfig.from_config(config)
    resets, warnings = plan_resets(job, InputSystems(job).task_models(), {"Partition 0": open_cp})
    assert resets == {} and len(warnings) == 1 and "uncommitted batch 6" in warnings[0]


def _waits(planner, task):
    """Whether the last plan held ``task``'s main input back for a broadcast publication."""
    return any(task.name in tasks for tasks in planner.broadcast_waits().values())


def _round_trip(plan):
    from sparza.engine.planner import TaskPlan

    return TaskPlan.from_json(json.loads(json.dumps(plan.to_json())))


def test_a_task_held_back_for_a_broadcast_publication_waits_for_it_even_when_it_appears_after_the_plan(make_job):
    """Containers: a task whose main input the plan held back for the broadcast store's bootstrapped publication
    is not caught up, even when the builder publishes between that plan and the question; the next plan reads.

    Found by the scale scenario under load (--once, two stages, broadcast join): the container asked the blob
    store again after a gated plan, saw the new publication, called the reader task caught up without its main
    input ever planned, and the job ended with exit 0 and none of that task's windows."""
    from sparza.state.adjunct.publication import Publication

    planners, board = _broadcast_job(make_job, profiles=5, events=(40, 3))
    planner = planners["Partition 1"]
    reader = planner.tasks[0]
    first = planner.next(planner.initial({}), 1)
    events = "delta.events#1"
    assert first.tasks["Partition 1"].offsets["delta.profiles#0"] == "2:0"  # the broadcast partition, read whole
    assert first.tasks["Partition 1"].offsets[events] == "1:0"              # main input held back meanwhile
    held = planner.next(first, 2)
    assert held is first  # nothing to do: the builder has not published its bootstrapped snapshot yet
    # The builder (another container) publishes now, after that plan.
    board.publish(Publication(store="profiles", batch=1, snapshot="s1", bootstrapped=True, applied=5))
    assert _waits(planner, reader), "the plan held main input back: the task is not caught up"
    flowing = planner.next(first, 3)
    assert flowing.tasks["Partition 1"].offsets[events] != "1:0"  # the next plan reads the main input
    assert planner.next(flowing, 4) is flowing and not _waits(planner, reader)  # now caught up


def _broadcast_job(make_job, *, profiles: int = 0, events: tuple[int, int] = (60, 7)):
    """The keyed count with a broadcast bootstrap store ``profiles`` (built by Partition 0) of ``profiles`` records
    and ``events`` (messages, keys) of bounded input; the tasks' planners as containers make them (one per task,
    gated by the real publication board: what a container asks), and that board."""
    from sparza.blobstore import blob_store_manager_from_config
    from sparza.state.adjunct import broadcast_bootstrap_published
    from sparza.state.adjunct.publication import PublicationBoard

    config = make_job(partitions=2, **{"task.broadcast.inputs": "delta.profiles#0", **PROFILES_STORE,
                                       "systems.delta.streams.events.bounded": "true"})
    create_profiles(config, profiles)
    append_messages(config, *events, commit_size=events[0])
    job = JobConfig.from_config(config)
    inputs = InputSystems(job)
    blobs = blob_store_manager_from_config(config)

    def ready(stream: SystemStream) -> bool:
        return broadcast_bootstrap_published(config, stream, blobs, job.name, job.job_id)

    planners = {t.name: BatchPlanner(job, [t], inputs.ops, inputs.positions, broadcast_ready=ready)
                for t in inputs.task_models()}
    return planners, PublicationBoard(blobs, job.name, job.job_id, "Partition 0", "profiles")


def test_an_empty_broadcast_bootstrap_stream_gives_its_builder_one_batch_to_publish_in(make_job):
    """Containers: the builder of a broadcast bootstrap store whose stream is empty has nothing to read, and its main
    input is held for the store's bootstrapped publication like every task's: the planner gives it one batch that
    reads nothing, in which it publishes (an empty bootstrapped snapshot); readers wait for that publication.

    Found by the Spark soak (seed 279784511, no profiles drawn): no task of the joining stage ever planned a batch,
    so the builder never published and every task waited for ever."""
    from sparza.state.adjunct.publication import Publication

    planners, board = _broadcast_job(make_job)
    builder, reader = planners["Partition 0"], planners["Partition 1"]
    b0, r0 = builder.initial({}), reader.initial({})
    r_held = reader.next(r0, 1)
    assert r_held is r0 and _waits(reader, reader.tasks[0])  # a reader waits, without a batch
    nudge = builder.next(b0, 1)
    assert nudge is not b0, "the builder must get a batch in which to publish"
    assert nudge.tasks["Partition 0"].offsets == b0.tasks["Partition 0"].offsets  # it reads nothing: main input held
    assert _waits(builder, builder.tasks[0])
    # Until its publication appears, no more empty batches: one is enough to publish in.
    assert builder.next(nudge, 2) is nudge and reader.next(r0, 2) is r0
    board.publish(Publication(store="profiles", batch=1, snapshot="s1", bootstrapped=True))  # what that batch does
    flowing = builder.next(nudge, 3)
    assert flowing.tasks["Partition 0"].offsets["delta.events#0"] != "1:0"
    assert reader.next(r0, 3).tasks["Partition 1"].offsets["delta.events#1"] != "1:0"


@pytest.mark.parametrize("published", [True, False], ids=["bootstrapped-publication", "none-bootstrapped"])
def test_a_builder_that_read_its_bootstrap_stream_goes_on_with_main_input_or_gets_one_batch_to_publish_in(
        make_job, published: bool):
    """A builder reads its bootstrap stream with main input held. When that batch published the bootstrapped snapshot,
    main input flows in the next plan (no empty batch); when it did not (its bootstrap completed only as the next
    batch read past a never-delivered offset), the next plan is one batch that reads nothing, to publish in."""
    from sparza.state.adjunct.publication import Publication

    planners, board = _broadcast_job(make_job, profiles=5)
    builder = planners["Partition 0"]
    first = builder.next(builder.initial({}), 1)
    assert first.tasks["Partition 0"].offsets["delta.profiles#0"] == "2:0"   # the bootstrap stream, read whole
    assert first.tasks["Partition 0"].offsets["delta.events#0"] == "1:0"     # main input held
    board.publish(Publication(store="profiles", batch=1, snapshot="s1", bootstrapped=published))
    second = builder.next(first, 2)
    assert second is not first
    assert (second.tasks["Partition 0"].offsets["delta.events#0"] != "1:0") is published
    if not published:
        assert second.tasks["Partition 0"].offsets == first.tasks["Partition 0"].offsets
        assert builder.next(second, 3) is second   # one such batch, not a loop of them


def test_an_empty_partitioned_bootstrap_stream_holds_nothing(make_job):
    config = make_job(partitions=2, **{"task.inputs": "delta.events,delta.profiles", **PROFILES_STORE})
    create_profiles(config, partitions=2)
    append_messages(config, 40, 3, commit_size=40)
    job = JobConfig.from_config(config)
    inputs = InputSystems(job)
    for task in inputs.task_models():
        planner = BatchPlanner(job, [task], inputs.ops, inputs.positions, broadcast_ready=lambda stream: False)
        first = planner.next(planner.initial({}), 1)
        events = f"delta.events#{task.ssps[0].partition}"
        assert first.tasks[task.name].offsets[events] != "1:0" and not _waits(planner, task)
