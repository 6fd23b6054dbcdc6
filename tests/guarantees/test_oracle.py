"""The harness's own parts, fast and without Spark: the generator is deterministic and covers the
fault matrix, the oracle computes what the documented rules say, and the check notices a lost and
a repeated record in a real Delta output."""

from __future__ import annotations

import dataclasses
import json
from collections import Counter

import pytest

from sparza.testing.harness import Outcome, SparkJob, check, reproduce_command
from sparza.testing.oracle import compare, expected_records, expected_table_rows, reduce_panes, window_starts
from sparza.testing.scenario import (
    AFTER_RUN_FAULTS,
    COMMIT_STEPS,
    ENGINE_FAULTS,
    EXTRA_FAULTS,
    FAULTS,
    INPUTS,
    OUTPUTS,
    InputMessage,
    Profile,
    Scenario,
    generate,
    scale_scenario,
)

pytestmark = pytest.mark.guarantees


def _scenario(kind: str, messages: list[InputMessage], **kw: object) -> Scenario:
    base: dict[str, object] = dict(seed=0, api="task", kind=kind, partitions=2, keys=2, bounded=True, chunks=1,
                                   max_batch=10, event_order="sorted", late=False, store="rocksdb", backup=True,
                                   blob_store="local", output="delta")
    base.update(kw)
    scenario = Scenario(**base)  # type: ignore[arg-type]
    scenario.messages = messages
    return scenario


def test_a_seed_is_a_complete_reproduction() -> None:
    first, again = generate(4242), generate(4242)
    assert first.describe() == again.describe()
    assert first.messages == again.messages and first.profiles == again.profiles
    assert generate(4243).describe() != first.describe()


def test_seeds_cover_every_job_kind_fault_and_commit_step() -> None:
    drawn = [generate(seed) for seed in range(1, 400)]
    assert {s.kind for s in drawn} == {"copy", "count", "filtermap", "pipeline", "window", "join", "session"}
    assert {s.fault for s in drawn} == set(FAULTS + EXTRA_FAULTS + ENGINE_FAULTS)
    assert {s.fail_step for s in drawn if s.fault == "fail-once"} == set(COMMIT_STEPS)
    assert {s.join for s in drawn if s.api == "app"} == {"none", "broadcast", "partitioned"}
    assert {s.partitions for s in drawn} == set(range(1, 9))
    assert any(s.window_slide_ms != s.window_size_ms for s in drawn if s.kind == "window")
    assert {(s.blob_format, s.blob_gzip, s.blob_rollover) for s in drawn if s.output == "blob"} >= {
        ("avro", True, "count"), ("jsonl", False, "size"), ("avro", False, "none")}
    # ids are unique and every chunk/partition assignment is in range
    for s in drawn[:50]:
        assert sorted(m.id for m in s.messages) == list(range(len(s.messages)))
        assert all(0 <= m.partition < (s.grow_to or s.partitions) and 0 <= m.chunk < s.chunks for m in s.messages)


def test_count_oracle_ranks_messages_per_task_and_key_in_offset_order() -> None:
    msgs = [InputMessage(0, "a", 1, 0, 0, 0), InputMessage(1, "a", 1, 0, 1, 0), InputMessage(2, "a", 1, 0, 0, 0),
            InputMessage(3, "b", 1, 0, 0, 1), InputMessage(4, "a", 1, 0, 0, 1)]
    expected = expected_records(_scenario("count", msgs, chunks=2))
    assert expected == Counter({(0, "a", 1, 0, "count"): 1, (2, "a", 2, 0, "count"): 1, (4, "a", 3, 0, "count"): 1,
                                (1, "a", 1, 0, "count"): 1, (3, "b", 1, 0, "count"): 1})


def test_filtermap_and_pipeline_oracles() -> None:
    msgs = [InputMessage(0, "a", 3, 0, 0, 0), InputMessage(1, "a", 5, 0, 0, 0), InputMessage(2, "b", 7, 0, 0, 0)]
    assert expected_records(_scenario("filtermap", msgs)) == Counter(
        {(1, "a", 25, 0, "fm0"): 1, (1, "a", 6, 0, "fm1"): 1, (2, "b", 49, 0, "fm0"): 1})
    joined = _scenario("pipeline", msgs, api="app", join="broadcast")
    joined.profiles = [Profile("a", "x", 0), Profile("a", "y", 0)]     # the last update wins; b has none
    assert expected_records(joined) == Counter({(1, "a", 10, 0, "y"): 1})


def test_window_oracle_tumbling_sliding_and_routed_late_messages() -> None:
    assert window_starts(1234, 1000, 1000) == [1000]
    assert window_starts(1234, 1000, 500) == [500, 1000]
    assert window_starts(1000, 1000, 250) == [250, 500, 750, 1000]
    msgs = [InputMessage(0, "a", 1, 100, 0, 0), InputMessage(1, "a", 2, 900, 0, 0), InputMessage(2, "a", 4, 1100, 0, 0)]
    tumbling = _scenario("window", msgs, api="app", window_size_ms=1000, window_slide_ms=1000)
    assert expected_records(tumbling) == Counter({(0, "a", 2, 3, "w"): 1, (1000, "a", 1, 4, "w"): 1})
    assert expected_records(tumbling, excluded_ids=[1]) == Counter({(0, "a", 1, 1, "w"): 1, (1000, "a", 1, 4, "w"): 1})
    sliding = _scenario("window", msgs, api="app", window_size_ms=1000, window_slide_ms=500)
    assert expected_records(sliding)[(500, "a", 2, 6, "w")] == 1


def test_compare_names_missing_and_repeated_records() -> None:
    expected = Counter({(1, "a", 1, 0, "copy"): 1, (2, "a", 2, 0, "copy"): 1})
    result = compare(expected, Counter({(1, "a", 1, 0, "copy"): 2}))
    assert not result.ok
    assert result.missing == Counter({(2, "a", 2, 0, "copy"): 1})
    assert result.extra == Counter({(1, "a", 1, 0, "copy"): 1})
    assert "1 missing" in result.summary() and "1 extra or repeated" in result.summary()
    assert compare(expected, expected).ok


def test_the_check_finds_a_lost_and_a_duplicated_record_in_a_real_delta_output(tmp_path) -> None:
    """The harness must be able to fail: write the copy job's output with one record lost and one
    repeated, through the real Delta producer, and the check reports both."""
    from sparza.config import Config
    from sparza.streams import OutgoingMessageEnvelope, SystemStream
    from sparza.systems.delta import DeltaSystemProducer

    class _NoAzurite:
        connection_string = "UseDevelopmentStorage=true"

    scenario = generate(7, fault="none", output="delta", input="delta")
    scenario.kind, scenario.api = "copy", "task"
    job = SparkJob(scenario, tmp_path, _NoAzurite())
    job.create_streams()
    producer = DeltaSystemProducer("delta", Config(job.config))
    producer.register("t")
    messages = scenario.messages[1:] + scenario.messages[-1:]           # first lost, last twice
    for m in messages:
        producer.send("t", OutgoingMessageEnvelope(SystemStream("delta", "out"), json.dumps(
            {"id": m.id, "key": m.key, "val": m.n, "aux": 0, "tag": "copy"}).encode(), key=m.key.encode()))
    producer.flush("t")
    outcome = Outcome(scenario)
    check(job, outcome)
    assert outcome.comparison is not None
    assert sum(outcome.comparison.missing.values()) == 1 and sum(outcome.comparison.extra.values()) == 1
    assert not outcome.ok and "1 missing" in outcome.problems[0]
    assert "--seed 7" in outcome.report() and outcome.report().startswith("FAIL")


def test_reproduce_command_and_scale_scenario_shape() -> None:
    assert reproduce_command(12) == "PYTHONPATH=src:. .venv/bin/python -m sparza.testing.harness --seed 12"
    assert reproduce_command(12, messages=40, fault="kill9").endswith("--seed 12 --messages 40 --fault kill9")
    big = scale_scenario()
    assert len(big.messages) >= 100_000 and big.join == "broadcast" and big.kind == "window"
    assert big.output == "blob"


def test_new_kinds_are_drawn_apart_and_leave_older_draws_alone() -> None:
    """Typed tables and Kafka come from a second generator: every output and input kind is drawn, upsert
    only for keyed results, and a seed's other choices are what they were before the new kinds existed
    (these two lines are the sample seeds' scenarios as generated before)."""
    drawn = [generate(seed) for seed in range(1, 400)]
    assert {s.output for s in drawn} == set(OUTPUTS) and {s.input for s in drawn} == set(INPUTS)
    assert {s.kind for s in drawn if s.output == "table-upsert"} == {"count", "window"}
    assert {s.api for s in drawn if s.output == "table-append"} == {"task", "app"}
    assert {s.api for s in drawn if s.input == "kafka"} == {"task", "app"}
    assert generate(669040315, output="delta", input="delta", task_api="stream").describe() == (
        "seed=669040315 task:count(rocksdb) tasks=3 msgs=120 keys=2 unbounded chunks=1 batch=5 sorted "
        "blobstore=azure out=delta fault=kill9@phase0 exec=batches")
    assert generate(365773884, output="delta").describe() == (
        "seed=365773884 app:window(p2=2,join=broadcast,win=1000/1000) tasks=3 msgs=120 keys=3 bounded chunks=1 "
        "batch=100000 shuffled blobstore=local out=delta fault=lost-spark-checkpoint@phase0 exec=containers")
    unkeyed = next(seed for seed in range(1, 100) if generate(seed).kind in ("copy", "filtermap", "pipeline"))
    with pytest.raises(ValueError, match="keyed result"):
        generate(unkeyed, output="table-upsert")
    with pytest.raises(ValueError, match="unknown output"):
        generate(7, output="parquet")


def test_the_batch_task_api_is_drawn_apart_for_task_jobs_only_and_changes_nothing_else() -> None:
    """Whether a task job uses process_batch comes from its own generator: both APIs are drawn for task jobs,
    applications keep theirs, and every other choice of a seed is what it was before."""
    drawn = [generate(seed) for seed in range(1, 200)]
    assert {s.task_api for s in drawn if s.api == "task"} == {"stream", "batch"}
    assert {s.task_api for s in drawn if s.api == "app"} == {"stream"}
    for seed, scenario in enumerate(drawn, start=1):
        stream = generate(seed, task_api="stream")
        assert scenario.describe().replace("batch:", "task:", 1) == stream.describe()
        assert scenario.messages == stream.messages and scenario.profiles == stream.profiles
    assert generate(669040315, output="delta", input="delta").task_api == "batch"
    with pytest.raises(ValueError, match="unknown task api"):
        generate(7, task_api="vectorized")


def _unmoved(messages: list, scenario) -> list:
    """The messages as drawn before ``partition-growth``: a grown scenario moves later chunks' messages from
    partition ``t`` to ``t + j*n`` of the same task (``c % n == t``), so the partition is compared modulo ``n``."""
    if not scenario.grow_to:
        return list(messages)
    return [(m.id, m.key, m.n, m.timestamp, m.partition % scenario.partitions, m.chunk) for m in messages]


def test_extras_are_drawn_apart_and_leave_older_draws_alone() -> None:
    """The extras (intermediate streams, Delta on az://, several processors, the new faults, a second fault,
    the probe chunk) come from a third generator: each is drawn, only where it fits, and ``extras=False``
    is the scenario as generated before them."""
    drawn = [generate(seed, drain=False) for seed in range(1, 600)]
    assert {s.intermediate for s in drawn if s.api == "app"} == {"default", "kafka", "delta"}
    assert {s.intermediate for s in drawn if s.api == "task"} == {"default"}
    assert {s.delta_location for s in drawn} == {"local", "azure"}
    assert {s.processors for s in drawn} == {1, 2, 3}
    assert {s.fault2 for s in drawn} >= {"none", "purged-snapshot", "lost-state", "kill9"}
    for s in drawn:
        if s.fault2 != "none":
            assert s.fault2 != s.fault
            assert s.fault2_phase != s.fault_phase or s.fault2 in AFTER_RUN_FAULTS
        if "kafka-restart" in (s.fault, s.fault2):
            assert s.input == "kafka" and s.output != "kafka" and s.intermediate_system != "kafka"
            assert s.processors == 1
        if s.processors > 1:
            assert "second-processor" not in (s.fault, s.fault2)
        if "purged-snapshot" in (s.fault, s.fault2):
            assert s.backup
        plain = generate(s.seed, extras=False)
        assert (plain.intermediate, plain.delta_location, plain.processors, plain.fault2) == (
            "default", "local", 1, "none")
        if s.fault not in EXTRA_FAULTS + ENGINE_FAULTS:
            assert plain.fault == s.fault
        probe = [m for m in s.messages if m.chunk >= plain.chunks]
        if _operators_drawn(s):  # one bounded chunk (see test_operators_are_drawn_apart...): chunks merged
            assert [m.id for m in s.messages[:len(plain.messages)]] == [m.id for m in plain.messages]
            continue
        assert _unmoved(s.messages[:len(plain.messages)], s) == _unmoved(plain.messages, s)
        if probe:   # only after damage in the last phase of an unbounded scenario, with new ids and live partitions
            assert not s.bounded and s.chunks == plain.chunks + 1
            assert any(f in AFTER_RUN_FAULTS and p == plain.chunks - 1
                       for f, p in ((s.fault, s.fault_phase), (s.fault2, s.fault2_phase)))
            assert [m.id for m in probe] == list(range(len(plain.messages), len(s.messages)))
            assert {m.partition for m in probe} <= {m.partition for m in plain.messages} | set(
                range(s.partitions, s.grow_to))  # a grown input's probe may use its new partitions
    assert any(s.chunks > generate(s.seed, extras=False).chunks for s in drawn)
    with pytest.raises(ValueError, match="needs a Kafka input"):
        generate(669040315, output="delta", input="delta", fault="kafka-restart")
    assert reproduce_command(7, extras=False).endswith("--seed 7 --extras none")


def _operators_drawn(s: Scenario) -> bool:
    return s.kind in ("join", "session") or bool(s.early or s.allowed_lateness_ms or s.late_trigger)


def test_operators_are_drawn_apart_with_the_extras_and_leave_older_draws_alone() -> None:
    """Joins, sessions and triggers come from their own generator (OPERATORS_SALT), only with the extras: every
    shape is drawn, each scenario so drawn is bounded in one chunk, a join has no table join and no upsert
    table, and without the extras a seed is what it was."""
    drawn = [generate(seed, drain=False) for seed in range(1, 600)]
    joins = [s for s in drawn if s.kind == "join"]
    sessions = [s for s in drawn if s.kind == "session"]
    triggered = [s for s in drawn if s.kind == "window" and _operators_drawn(s)]
    assert {s.join_type for s in joins} == {"inner", "left", "outer"} and {s.session_merge for s in sessions} == {
        True, False}
    assert any(s.late for s in joins) and any(s.late for s in sessions) and any(s.late for s in triggered)
    assert {s.early.split(":")[0] for s in sessions + triggered if s.early} == {"count", "ms"}
    assert any(s.allowed_lateness_ms and s.late_trigger for s in sessions + triggered)
    assert any(s.allowed_lateness_ms for s in joins) and any(s.join_within_ms == 0 for s in joins)
    for s in drawn:
        plain = generate(s.seed, extras=False)
        assert not _operators_drawn(plain) and plain.kind in ("copy", "count", "filtermap", "pipeline", "window")
        if _operators_drawn(s):
            assert s.api == "app" and s.bounded and s.chunks == 1 and s.fault_phase == 0
            assert {m.chunk for m in s.messages} == {0}
        if s.kind == "join":
            assert s.join == "none" and not s.profiles and s.output != "table-upsert"
        if s.kind not in ("window", "session"):
            assert not (s.early or s.late_trigger)
        if s.late_trigger:
            assert s.allowed_lateness_ms
    assert "join" in generate(1642).describe() and "window" in generate(1642, extras=False).describe()


def test_drain_is_drawn_apart_with_the_extras_and_leaves_older_draws_alone() -> None:
    """A drain (DRAIN_SALT) is drawn last, only with the extras and a standalone job: both modes, every kind of
    job; a drained scenario is unbounded in two chunks or more with the same messages, each chunk after the first
    beyond the reach of the windows, sessions and joins of the ones before; ``drain=False`` is the seed as it was."""
    drawn = [generate(seed) for seed in range(1, 1000)]
    drains = [s for s in drawn if s.drain != "none"]
    assert {s.drain for s in drains} == {"run", "request"}
    assert {"window", "session", "join"} <= {s.kind for s in drains} and {"copy", "count"} <= {s.kind for s in drains}
    for s in drawn:
        plain = generate(s.seed, drain=False)
        if s.drain == "none":
            assert s == plain
            continue
        assert s.processors == 1 and "kafka-restart" not in (s.fault, s.fault2)
        assert generate(s.seed, extras=False).drain == "none"
        assert not s.bounded and s.chunks == max(2, plain.chunks) and {m.chunk for m in s.messages} == set(
            range(s.chunks))
        assert [(m.id, m.key, m.n, m.partition % s.partitions) for m in s.messages] == [
            (m.id, m.key, m.n, m.partition % s.partitions) for m in plain.messages]
        reach = (max(s.window_size_ms, s.session_gap_ms, s.join_within_ms + 1) + s.allowed_lateness_ms
                 + 600 * s.step_ms)
        for chunk in range(1, s.chunks):
            before = max(m.timestamp for m in s.messages if m.chunk < chunk)
            assert min(m.timestamp for m in s.messages if m.chunk == chunk) >= before + reach
    assert reproduce_command(7, drain=False).endswith("--seed 7 --drain none")


def test_execution_mode_and_container_faults_are_drawn_apart_and_leave_older_draws_alone() -> None:
    """The execution mode (EXECUTION_SALT) is drawn last, with the extras: containers mostly (some with a short
    epoch), batches sometimes; a container fault replaces the first fault only of a standalone container scenario
    without a drain, and fires after fewer commits than its task makes. ``execution=False`` is the seed as it was."""
    drawn = [generate(seed) for seed in range(1, 800)]
    assert {s.execution for s in drawn} == {"containers", "batches"}
    assert sum(s.execution == "containers" for s in drawn) > sum(s.execution == "batches" for s in drawn)
    assert {s.epoch_ms for s in drawn if s.execution == "containers"} == {0, 2000, 3000, 5000, 10_000}
    assert {s.fault for s in drawn} >= set(ENGINE_FAULTS)
    assert {s.fail_after for s in drawn if s.fault == "container-retry"} >= {0, 1, 2}
    for s in drawn:
        plain = generate(s.seed, execution=False)
        assert (plain.execution, plain.epoch_ms, plain.fail_after) == ("containers", 0, 0)
        assert plain.fault not in ENGINE_FAULTS
        if s.execution == "batches":
            assert s.epoch_ms == 0 and s.fault not in ENGINE_FAULTS
        if s.fault in ENGINE_FAULTS:
            assert s.execution == "containers" and s.processors == 1 and s.drain == "none"
            assert [m.id for m in s.messages] == [m.id for m in plain.messages] and plain.fault_phase == s.fault_phase
            sizes = Counter(m.partition for m in s.messages if m.chunk == s.fault_phase)
            assert s.fail_after == 0 or s.fail_after < max(-(-n // s.max_batch) for n in sizes.values())
            assert "exec=containers" in s.describe() and s.fault in s.describe()
        else:
            assert s.fault == plain.fault
        # Nothing else of the seed changes.
        assert dataclasses.replace(s, execution="containers", epoch_ms=0, fail_after=0, fault=plain.fault) == plain
    forced = generate(669040315, output="delta", input="delta", fault="container-kill", extras=False)
    assert forced.execution == "containers" and forced.fault == "container-kill"
    several = next(s.seed for s in drawn if s.processors > 1)
    assert generate(several, fault="container-retry").processors == 1  # a forced container fault keeps one
    assert reproduce_command(7, execution=False).endswith("--seed 7 --execution none")


def test_join_session_and_pane_oracles() -> None:
    """Join: even n on the left, odd on the right, pairs within the bound; sessions split at the gap; the newest
    pane of a window is its record, and a lost, repeated or early-last pane is reported."""
    msgs = [InputMessage(0, "a", 2, 100, 0, 0), InputMessage(1, "a", 3, 105, 0, 0), InputMessage(2, "a", 5, 140, 1, 0),
            InputMessage(3, "b", 4, 100, 1, 0), InputMessage(4, "a", 6, 200, 0, 0)]
    join = _scenario("join", msgs, api="app", join_within_ms=10, join_type="outer")
    assert expected_records(join) == Counter({(0, "a", 2, 1, "j"): 1, (3, "b", 4, -1, "jl"): 1,
                                              (4, "a", 6, -1, "jl"): 1, (2, "a", 5, -1, "jr"): 1})
    join.join_type = "inner"
    assert expected_records(join, excluded_ids=[1]) == Counter()
    sessions = _scenario("session", msgs, api="app", session_gap_ms=40)
    # a: 100, 105, 140 (35 < 40 apart: one session), 200; b: 100
    assert expected_records(sessions) == Counter({(100, "a", 3, 10, "s"): 1, (200, "a", 1, 6, "s"): 1,
                                                  (100, "b", 1, 4, "s"): 1})
    panes = Counter({(100, "a", 1, 2, "s:early:0"): 1, (100, "a", 3, 10, "s:on_time:1"): 1,
                     (140, "a", 1, 5, "s:on_time:0"): 1, (140, "a", 0, 0, "s:retract:1"): 1})
    reduced, problems = reduce_panes(sessions, panes, upserted=False)
    assert reduced == Counter({(100, "a", 3, 10, "s"): 1}) and not problems
    repeated = panes + Counter({(100, "a", 3, 10, "s:on_time:1"): 1})
    assert "a firing lost or repeated" in reduce_panes(sessions, repeated, upserted=False)[1][0]
    early_last = Counter({(100, "a", 1, 2, "s:early:0"): 1})
    assert "the last pane is early" in reduce_panes(sessions, early_last, upserted=False)[1][0]
    plain = _scenario("window", msgs, api="app", window_size_ms=100, window_slide_ms=100)
    assert reduce_panes(plain, Counter({(0, "a", 1, 1, "w"): 1}), upserted=False) == (
        Counter({(0, "a", 1, 1, "w"): 1}), [])


def test_table_oracle_append_is_every_record_upsert_the_last_count_per_task_and_key() -> None:
    msgs = [InputMessage(0, "a", 1, 0, 0, 0), InputMessage(1, "a", 1, 0, 1, 0), InputMessage(2, "a", 1, 0, 0, 0),
            InputMessage(3, "b", 1, 0, 0, 1), InputMessage(4, "a", 1, 0, 0, 1)]
    upsert = _scenario("count", msgs, chunks=2, output="table-upsert")
    assert expected_table_rows(upsert) == Counter({(4, "a", 3, 0, "count"): 1, (1, "a", 1, 1, "count"): 1,
                                                   (3, "b", 1, 0, "count"): 1})
    append = _scenario("count", msgs, chunks=2, output="table-append")
    assert expected_table_rows(append) == expected_records(append)
    windows = _scenario("window", msgs, api="app", window_size_ms=1000, window_slide_ms=1000, output="table-upsert")
    assert expected_table_rows(windows) == Counter({(0, "a", 4, 4, "w"): 1, (0, "b", 1, 1, "w"): 1})


def _rows_for_upsert_count(scenario: Scenario) -> list[dict[str, object]]:
    rows: dict[tuple[int, str], dict[str, object]] = {}
    counts: Counter[tuple[int, str]] = Counter()
    for m in sorted(scenario.messages, key=lambda m: (m.partition, m.chunk, m.id)):
        counts[(m.partition, m.key)] += 1
        rows[(m.partition, m.key)] = {"id": m.id, "key": m.key, "val": counts[(m.partition, m.key)],
                                      "aux": m.partition, "tag": "count"}
    return list(rows.values())


def test_the_check_reads_a_real_upsert_table_with_every_reader_and_finds_a_wrong_count(tmp_path) -> None:
    """A typed upsert table written by the real table producer under the job's own config: exact rows
    pass (read by deltalake, DuckDB and Polars alike); one key's count off by one fails."""
    from sparza.config import Config
    from sparza.streams import OutgoingMessageEnvelope, SystemStream
    from sparza.systems import Transaction
    from sparza.systems.delta import DeltaSystemProducer

    class _NoAzurite:
        connection_string = "UseDevelopmentStorage=true"

    scenario = generate(314, fault="none", output="table-upsert", input="delta")
    assert scenario.kind == "count"
    job = SparkJob(scenario, tmp_path, _NoAzurite())
    assert job.config["systems.delta.streams.out.delta.table.key"] == "key,aux"
    job.create_streams()
    stream = SystemStream("delta", "out")
    rows = _rows_for_upsert_count(scenario)

    def write(version: int, batch: list[dict[str, object]]) -> None:
        producer = DeltaSystemProducer("delta", Config(job.config))
        producer.register("t")
        producer.begin("t", Transaction("harness-test/t", version))
        for row in batch:
            producer.send("t", OutgoingMessageEnvelope(stream, dict(row), key=str(row["key"])))
        producer.flush("t", transaction=Transaction("harness-test/t", version))
        producer.stop()

    write(1, rows)
    outcome = Outcome(scenario)
    check(job, outcome)
    assert outcome.ok, outcome.report()
    assert any("deltalake, duckdb, polars" in n for n in outcome.notes)
    wrong = dict(rows[0])
    wrong["val"] = int(wrong["val"]) + 1          # type: ignore[call-overload]
    write(2, [wrong])
    outcome = Outcome(scenario)
    check(job, outcome)
    assert not outcome.ok and "1 missing" in outcome.problems[0] and "1 extra" in outcome.problems[0]
    assert "--seed 314" in outcome.report()


def test_harness_task_passes_the_start_check_of_sparza_run_for_store_less_kinds() -> None:
    """Found after merging the start checks: every copy/filtermap scenario exited 2 ("asks for store
    'counts' … not set") because the class named its count-only store with a literal."""
    from sparza.runtime.driver.preflight import store_names_asked
    from sparza.testing.jobs import HarnessTask

    assert store_names_asked(HarnessTask) == []


def test_sparza_run_subprocesses_import_sparza_from_the_source_dir() -> None:
    """The harness puts SRC_DIR first on the subprocesses' PYTHONPATH: it must hold the package, not be the
    package (``sparza/azure.py`` would then shadow the Azure SDK: every Spark scenario failed at import)."""
    from sparza.testing.harness.spark import SRC_DIR

    assert (SRC_DIR / "sparza" / "__init__.py").is_file()
    assert not (SRC_DIR / "azure.py").exists()


def test_container_kill_finds_the_processes_under_the_run_connected_to_a_port_it_listens_on(tmp_path) -> None:
    """The container-kill fault's victims: processes under the run's process (its JVM's Python workers) with a
    connection to a port the run's process listens on (the container channel); other children are left alone."""
    import os
    import socket
    import subprocess
    import sys

    from sparza.testing.harness.spark import container_workers

    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    connect = f"import socket, time\ns = socket.create_connection(('127.0.0.1', {port}))\ntime.sleep(60)"
    connected = subprocess.Popen([sys.executable, "-c", connect])
    idle = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    java = tmp_path / "java"  # the JVM connects to the driver too (PySpark's accumulator server): never a victim
    java.symlink_to(sys.executable)
    jvm = subprocess.Popen([str(java), "-c", connect])
    try:
        conns = [server.accept()[0] for _ in range(2)]
        assert container_workers(os.getpid()) == [connected.pid]
        for conn in conns:
            conn.close()
    finally:
        for proc in (connected, idle, jvm):
            proc.kill()
            proc.wait()
        server.close()
    assert container_workers(os.getpid()) == []
