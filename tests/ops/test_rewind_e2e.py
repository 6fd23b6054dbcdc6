"""Rewind through ``sparza rewind`` and ``sparza run``: a 4-task keyed count over Kafka and over Delta input, with
out-of-order event times, rewound by one hour of event time with its state reset.

The oracle (written from what was produced, not from sparza's offsets) finds per partition the first message
at or after the time in offset order, and recounts every key from there: the re-run's output (what the output
stream got after the rewind) must be each key's counts 1..n exactly, and the upsert table must hold exactly the
recount's final counts (keys whose messages all came before the time are gone from it)."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable

import pytest
from tests.ops.conftest import Job, Produced, produce, read_counts, read_table, sparza, sparza_here, upcoming

from sparza.config import Config

pytestmark = pytest.mark.slow

KEYS = 37


def recount_from(produced: Produced, time_ms: int) -> dict[str, int]:
    """The oracle: per partition, from the first message whose event time is at or after ``time_ms`` (in the
    order produced), how many messages each key has."""
    out: dict[str, int] = {}
    for messages in produced.partitions.values():
        first = next((i for i, (_, ts) in enumerate(messages) if ts >= time_ms), len(messages))
        for key, _ in messages[first:]:
            out[key] = out.get(key, 0) + 1
    return out


def totals(produced: Produced) -> dict[str, int]:
    return recount_from(produced, 0)


@pytest.mark.parametrize("system", ["kafka", "delta"])
def test_rewind_one_hour_with_state_reset_recounts_exactly(ops_job: Callable[..., Job], system: str) -> None:
    job = ops_job(system)
    produce(job.config, system, job.events, job.produced, 1100, KEYS, seed=11, quiet=5)
    job.run()
    assert {k: v[-1] for k, v in read_counts(job.config, "delta", "counts").items()} == totals(job.produced)
    assert read_table(job.config, "count_table") == totals(job.produced)

    newest = max(ts for messages in job.produced.partitions.values() for _, ts in messages)
    rewind_to = newest - 3_600_000
    iso = dt.datetime.fromtimestamp(rewind_to / 1000, tz=dt.UTC).isoformat().replace("+00:00", "Z")
    before = json.loads(sparza_here(["checkpoints", "show", "--config", str(job.path), "--json", "--no-lag"]).stdout)

    dry = sparza(["rewind", "--config", str(job.path), "--to-time", iso, "--state", "reset", "--dry-run"])
    assert dry.returncode == 0, dry.stderr
    assert "dry run: nothing changed" in dry.stdout and "upsert table delta.count_table: emptied" in dry.stdout
    assert json.loads(sparza_here(["checkpoints", "show", "--config", str(job.path), "--json", "--no-lag"]).stdout) \
        == before

    done = sparza(["rewind", "--config", str(job.path), "--to-time", iso, "--state", "reset"])
    assert done.returncode == 0, done.stdout + done.stderr
    after = json.loads(sparza_here(["checkpoints", "show", "--config", str(job.path), "--json", "--no-lag"]).stdout)
    assert {t: cp["batch"] for t, cp in after.items()} == {t: cp["batch"] for t, cp in before.items()}
    assert all(cp["stores"] == {} for cp in after.values())
    history = sparza_here(["checkpoints", "show", "--config", str(job.path), "--history", "--json"])
    [operation] = json.loads(history.stdout)
    assert operation["kind"] == "rewind" and str(rewind_to) in operation["target"]
    assert {t: c["offsets_from"] for t, c in operation["tasks"].items()} == \
        {t: cp["offsets"] for t, cp in before.items()}
    assert {t: c["offsets_to"] for t, c in operation["tasks"].items()} == {t: cp["offsets"] for t, cp in after.items()}
    assert "rewind to time" in sparza_here(["checkpoints", "show", "--config", str(job.path), "--no-lag"]).stdout

    output_end = upcoming(job.config, "delta", "counts")
    job.run()
    expected = recount_from(job.produced, rewind_to)
    assert 0 < sum(expected.values()) < sum(totals(job.produced).values())
    assert len(expected) == KEYS - 5  # the quiet keys' rows must go from the table
    rerun = read_counts(job.config, "delta", "counts", after=output_end)
    assert rerun == {k: list(range(1, n + 1)) for k, n in expected.items()}
    assert read_table(job.config, "count_table") == expected


def test_rewind_of_chosen_tasks_keeps_state_and_refuses_unclear_tables(ops_job: Callable[..., Job],
                                                                       tmp_path: object) -> None:
    job = ops_job("delta")
    produce(job.config, "delta", job.events, job.produced, 400, KEYS, seed=5)
    job.run()
    refused = sparza(["rewind", "--config", str(job.path), "--to-oldest", "--task", "Partition 1", "--state", "reset"])
    assert refused.returncode != 0 and "--tables keep" in refused.stdout + refused.stderr
    # Offsets from a file, for one task, state kept: that partition's messages are counted again on top.
    shown = json.loads(sparza_here(["checkpoints", "show", "--config", str(job.path), "--json", "--no-lag"]).stdout)
    from sparza.systems import get_system_factory

    meta = get_system_factory(job.config, "delta").get_admin("delta", job.config).get_system_stream_metadata(
        {"events"})["events"]
    offsets = {"delta.events#1": meta.partitions[1].oldest}
    path = job.path.parent / "offsets.json"
    path.write_text(json.dumps(offsets))
    done = sparza(["rewind", "--config", str(job.path), "--to-file", str(path), "--task", "Partition 1"])
    assert done.returncode == 0, done.stdout + done.stderr
    job.run()
    counts = read_counts(job.config, "delta", "counts")
    first = totals(job.produced)
    for key, seen in counts.items():
        partition = int(key[1:]) % 4  # as produce() sends them
        n = first[key]
        assert seen == (list(range(1, 2 * n + 1)) if partition == 1 else list(range(1, n + 1))), key
    assert shown["Partition 1"]["batch"] > 0


def test_rewind_is_refused_while_the_job_runs(ops_job: Callable[..., Job]) -> None:
    from sparza.coordination.jobclaim import JobClaim
    from sparza.engine.jobconfig import JobConfig
    from sparza.runtime import checkpoint_store_from_config

    job = ops_job("delta")
    key = JobConfig.from_config(Config(dict(job.config.items()))).job_key
    claim = JobClaim(checkpoint_store_from_config(job.config, key).claim_backend(), key, "7")  # type: ignore[attr-defined]
    claim.acquire()
    try:
        refused = sparza(["rewind", "--config", str(job.path), "--to-oldest", "--dry-run"])
    finally:
        claim.release()
    assert refused.returncode != 0
    assert "is running in processor 7" in refused.stdout + refused.stderr
