"""The in-process engine of the fault harness: fixed seeds through TestRunner (every fault kind, each checked
exactly against the oracle), seeds whose scenarios once broke the product, and checks that it can fail."""

from __future__ import annotations

import json
import random
from collections import Counter

import pytest

from sparza.testing.harness import (
    InProcessJob,
    Outcome,
    draw,
    inprocess_config,
    reproduce_command,
    run_inprocess_scenario,
)
from sparza.testing.harness.inprocess import check
from sparza.testing.scenario import ENGINE_FAULTS, EXTRA_FAULTS, FAULTS, generate

pytestmark = pytest.mark.guarantees

# One seed per fault (as the in-process engine plays it), small inputs: a few seconds in all.
SAMPLE = [
    pytest.param(3, id="filtermap-none"),
    pytest.param(16, id="count-poison"),
    pytest.param(10, id="pipeline-broadcast-join-kill9"),
    pytest.param(43, id="count-fail-once"),
    pytest.param(1, id="filtermap-storage-unreachable"),
    pytest.param(131, id="count-second-processor-refused"),
    pytest.param(1228, id="count-second-processor-takes-over-and-fences"),
    pytest.param(157, id="window-second-processor-takes-over-and-fences"),
    pytest.param(27, id="sliding-window-partitioned-join-lost-state"),
    pytest.param(17, id="window-lost-spark-checkpoint"),
    pytest.param(9, id="filtermap-replay-batch"),
    pytest.param(8, id="count-deleted-snapshot"),
    pytest.param(12, id="count-purged-snapshot"),
    pytest.param(75, id="filtermap-kafka-restart"),
    pytest.param(2536, id="count-container-retry-after-3-commits"),
    pytest.param(546, id="count-container-kill-runs-clean"),   # no Spark worker to kill in process
]


@pytest.mark.parametrize("seed", SAMPLE)
def test_fixed_seed_in_process(seed: int, tmp_path) -> None:
    outcome = run_inprocess_scenario(generate(seed), tmp_path)
    assert outcome.ok, outcome.report()
    assert outcome.runs and all(r.seconds >= 0 for r in outcome.runs)


# Found by the in-process soak: the input's records vanished mid-run (kafka-restart) and the in-memory consumer
# returned fewer rows than the planned range, so tasks committed offsets past messages they never read
# (10 filtermap records missing; counts one short). Fixed in sparza.systems.inmemory: such a read raises.
@pytest.mark.parametrize("seed", [75, 97])
def test_found_a_read_past_the_end_of_a_lost_input_skipped_messages(seed: int, tmp_path) -> None:
    scenario = generate(seed)
    assert scenario.fault == "kafka-restart"
    outcome = run_inprocess_scenario(scenario, tmp_path)
    assert outcome.ok, outcome.report()
    assert any("vanished mid-run" in n and "the run in flight failed" in n for n in outcome.notes), outcome.notes


# Found by the in-process soak: the deleted-snapshot fault tombstoned the broadcast join table's publication blobs
# with the snapshots; after the local state was lost too, the readers found no live publication, served an empty
# table and the join dropped the next chunk's messages (3 missing). Fixed in sparza.state.adjunct: deleted
# publications are read (SAMZA-2787), and a task that read a publication now gone stops instead of serving none.
def test_found_a_broadcast_table_served_empty_after_its_publications_were_deleted(tmp_path) -> None:
    scenario = generate(312)
    assert scenario.join == "broadcast" and "deleted-snapshot" in (scenario.fault, scenario.fault2)
    outcome = run_inprocess_scenario(scenario, tmp_path)
    assert outcome.ok, outcome.report()


# Found by the in-process engine's gc check: a commit that failed during cleanup (after the task checkpoint) and
# was retried left its snapshot index with a TTL when it was the task's last batch; gc 60 days later deleted the
# committed state of a keyed count (memory store) and of a window store. Fixed in the runtime: the replayed
# batch finishes the cleanup.
@pytest.mark.parametrize("seed", [506, 912])
def test_found_a_committed_snapshot_left_with_a_ttl_after_a_failed_cleanup(seed: int, tmp_path) -> None:
    scenario = generate(seed, execution=False)   # as found (912 draws a container fault since they exist)
    assert scenario.fault == "fail-once" and scenario.fail_step == "during-cleanup"
    outcome = run_inprocess_scenario(scenario, tmp_path)
    assert outcome.ok, outcome.report()


# Found by the in-process soak: TestRunner.drain() requested its drain before taking the job claim, so a second
# processor refused the claim left a drain request pending at the offsets of its time; the next drain run
# stopped there and the later chunk never came out. Fixed in TestRunner: the claim first, as sparza run does.
@pytest.mark.parametrize("seed", [101501, 104549, 243847069])
def test_found_a_refused_second_processor_left_its_drain_request_behind(seed: int, tmp_path) -> None:
    scenario = generate(seed)
    assert scenario.fault == "second-processor" and scenario.drain != "none"
    outcome = run_inprocess_scenario(scenario, tmp_path)
    assert outcome.ok, outcome.report()


# Found by the in-process soak: a fail-once fault drawn for the run after a purged-snapshot fault may end that run
# before the purge is noticed; the engine took the injected failure for a purge reported without its name.
def test_found_a_fail_once_ending_the_run_after_a_purge_first(tmp_path) -> None:
    scenario = generate(104718)
    assert scenario.fault == "purged-snapshot" and scenario.fault2 == "fail-once"
    outcome = run_inprocess_scenario(scenario, tmp_path)
    assert outcome.ok, outcome.report()


# Found by the in-process soak: a broadcast store's builder, paused past the claim timeout, woke after the processor
# that took its task over had published, replaced that publication with its own (naming a snapshot its fenced
# commit never made permanent), and gc purged that snapshot under every reader (107586). Fixed in the adjunct
# stores: a publication names its generation; an older one never replaces a newer one's, and a newer one's first
# publication removes the older ones. Publishing after the task checkpoint instead lost the publication when
# storage failed right after the checkpoint (110736): publications stay before it.
@pytest.mark.parametrize("seed", [107586, 110736])
def test_found_a_fenced_builder_published_a_snapshot_gc_then_purged(seed: int, tmp_path) -> None:
    scenario = generate(seed)
    assert scenario.fault in ("second-processor", "azurite-restart")
    outcome = run_inprocess_scenario(scenario, tmp_path)
    assert outcome.ok, outcome.report()


# Found by the in-process soak of partition growth (the seed fails without it too): a container removed mid-commit
# hands its stage-2 task to another container, whose metadata of the pass predated the checkpoint the first one
# had just committed; the task was refused as "past the partition's end" (a stream that lost its data). Fixed in the
# container: a task's start plan reads the metadata again before refusing.
@pytest.mark.parametrize("dayops", [False, True], ids=["as-drawn-before-growth", "with-growth"])
def test_found_a_task_handed_over_mid_run_refused_as_past_its_partitions_end(dayops: bool, tmp_path) -> None:
    scenario = generate(12387, dayops=dayops)
    assert scenario.fault == "second-processor" and scenario.api == "app"
    assert scenario.fault2 == ("partition-growth" if dayops else "none")
    outcome = run_inprocess_scenario(scenario, tmp_path)
    assert outcome.ok, outcome.report()


def test_the_faults_fire_where_they_are_drawn(tmp_path) -> None:
    """A kill lands after the drawn commit step; a second processor taking over leaves processor 0 fenced."""
    killed = run_inprocess_scenario(generate(10), tmp_path / "kill")
    assert any(n.startswith(f"kill9: killed after {draw(generate(10)).kill_step} of batch") for n in killed.notes)
    labels = [r.label for r in killed.runs]
    kill = labels.index(f"phase{generate(10).fault_phase}-kill9")
    assert labels[kill + 1].endswith("-restart")
    assert killed.runs[kill].returncode == 1 and "killed after" in killed.runs[kill].error
    takeover = run_inprocess_scenario(generate(1228), tmp_path / "takeover")
    assert any("1 took over" in n for n in takeover.notes)
    assert any("CheckpointFencedError" in n for n in takeover.notes), takeover.notes
    labels = [r.label for r in takeover.runs]
    assert labels[:3] == ["phase0-proc1-while-proc0-lives", "phase0-proc1-takes-over", "phase0-proc0"]
    assert "ClaimHeldError" in takeover.runs[0].error and takeover.runs[1].returncode == 0


def test_the_check_finds_a_lost_and_a_repeated_record_in_the_in_memory_output(tmp_path) -> None:
    """The in-process verdict must be able to fail: after a clean run, drop one output record and repeat
    another through the in-memory stream itself, and the check reports both."""
    from sparza.streams import OutgoingMessageEnvelope, SystemStream
    from sparza.systems.inmemory import InMemorySystemProducer, clear_stream

    scenario = generate(3, fault="none")
    job = InProcessJob(scenario, tmp_path, draw(scenario))
    try:
        job.append_chunk(0)
        assert job.run("clean").returncode == 0
        clean = Outcome(scenario, "inprocess")
        check(job, clean)
        assert clean.ok, clean.report()
        config = job.runner.config
        values = job.runner.values(job.output_stream)
        clear_stream("blob", config, "out")
        producer = InMemorySystemProducer("blob", config)
        producer.register("t")
        for value in values[1:] + values[-1:]:          # the first lost, the last twice
            producer.send("t", OutgoingMessageEnvelope(SystemStream("blob", "out"), value, key=value["key"]))
        producer.flush("t")
        outcome = Outcome(scenario, "inprocess")
        check(job, outcome)
    finally:
        job.close()
    assert outcome.comparison is not None
    assert sum(outcome.comparison.missing.values()) == 1 and sum(outcome.comparison.extra.values()) == 1
    report = outcome.report()
    assert report.startswith("FAIL [inprocess]")
    assert reproduce_command(3, engine="inprocess") in report and reproduce_command(3) in report


def test_draws_are_apart_from_the_scenario_and_cover_every_kind() -> None:
    """The in-process draws come from their own generator: deterministic per seed, every step and both ways of
    meeting a second processor drawn, and the scenario of a seed is what the Spark engine runs."""
    assert draw(generate(4242)) == draw(generate(4242))
    drawn = [draw(generate(seed)) for seed in range(1, 300)]
    steps = {"after-intent", "after-flush", "after-adjunct", "after-snapshot", "after-checkpoint", "during-cleanup"}
    assert {d.kill_step for d in drawn} == steps and {d.meet_step for d in drawn} == steps
    assert {d.takeover for d in drawn} == {True, False} and {d.new_process_per_run for d in drawn} == {True, False}
    assert {generate(seed).fault for seed in range(1, 300)} == set(FAULTS + EXTRA_FAULTS + ENGINE_FAULTS)


def test_every_system_of_an_in_process_job_is_in_memory_and_tables_are_left_out() -> None:
    rng = random.Random(5)
    for seed in rng.sample(range(1, 10_000), 60):
        scenario = generate(seed)
        config = inprocess_config(scenario)
        factories = {k: v for k, v in config.items() if k.endswith(".samza.factory")}
        assert set(factories.values()) == {"inmemory"}, (seed, factories)
        assert not any(".delta.table." in k or k.startswith("app.harness.table.") for k in config)
        assert json.loads(json.dumps(config)) == config       # plain strings only


def test_an_upsert_table_is_judged_by_folding_its_rows(tmp_path) -> None:
    """A keyed count into an upsert table: the in-memory output holds every update; folded by (key, task) it
    must be the oracle's final rows."""
    seed = next(s for s in range(1, 2000) if generate(s).output == "table-upsert" and generate(s).kind == "count"
                and generate(s).fault == "none")
    outcome = run_inprocess_scenario(generate(seed), tmp_path)
    assert outcome.ok, outcome.report()
    assert outcome.comparison is not None
    assert outcome.comparison.actual == len({(m.partition, m.key) for m in generate(seed).messages})
    assert Counter() == outcome.comparison.extra


def test_a_soak_prints_each_engines_count_and_each_failures_reproduction_on_both(tmp_path, monkeypatch) -> None:
    """The soak's summary: the count per engine, and for a failing seed the command for each engine."""
    from sparza.testing.harness import inprocess, soaks
    from sparza.testing.harness.__main__ import parse_seeds

    assert parse_seeds("3, 5-7,9") == [3, 5, 6, 7, 9]
    real = inprocess.run_inprocess_scenario

    def failing_on_16(scenario, workdir=None, **kwargs):  # a seed that fails, as a defect would make it
        outcome = real(scenario, workdir, **kwargs)
        if scenario.seed == 16:
            outcome.problems.append("output: made to fail by the test")
        return outcome

    monkeypatch.setattr(inprocess, "run_inprocess_scenario", failing_on_16)
    lines: list[str] = []
    results = soaks.soak(5, tmp_path, engine="inprocess", seeds=[3, 16], out=lines.append)
    assert [len(r.outcomes) for r in results] == [2] and [o.scenario.seed for o in results[0].failed] == [16]
    text = "\n".join(lines)
    assert "soak [inprocess]: 2 scenarios, 1 passed, 1 failed, 0 inconclusive" in text
    assert f"inprocess: {reproduce_command(16, engine='inprocess')}" in text
    assert f"spark: {reproduce_command(16)}" in text
    assert "FAIL [inprocess] seed=16" in text and "made to fail by the test" in text


# Found by the Spark soak: a broadcast join whose table stream is empty (no profiles drawn) in container mode. Every
# task's main input waits for the table's bootstrapped publication; the builder task had nothing to read, so it
# never committed a batch nor published, and `--once` never ended (no task of the joining stage committed one
# batch). The in-process engine ran every task in batches of one common number, which needs no publication, and
# ended its run when nothing was planned. Fixed in the planner (the builder gets one batch that reads nothing, to
# publish in) and in TestRunner (container mode plans as containers do; a run held for a publication that cannot
# come stops saying so instead of passing as caught up).
@pytest.mark.timeout(300)
def test_found_an_empty_broadcast_table_held_every_task_of_a_container_job(tmp_path) -> None:
    scenario = generate(279784511)
    assert scenario.join == "broadcast" and not scenario.profiles and scenario.execution == "containers"
    outcome = run_inprocess_scenario(scenario, tmp_path)
    assert outcome.ok, outcome.report()
