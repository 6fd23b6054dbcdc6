"""Drain end to end through real ``sparza run`` processes (Spark, Delta streams): a two-stage windowed count drained
by ``sparza run --drain`` in the container mode, then, after more input, by ``sparza drain`` while a micro-batch
run is running. Checked against plain-Python window counts of each phase."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from tests.api.test_operators_e2e import _config, _sparza_run, _write

from sparza.config import Config
from sparza.engine.drain import read_drain
from sparza.systems import StreamSpec
from sparza.systems.delta import DeltaSystemAdmin
from sparza.testing import eventually
from sparza.testing.oracle import read_delta_values

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def _windows(rows: list[tuple[int, dict[str, object], int]], size: int) -> dict[tuple[str, int], tuple[int, int]]:
    out: dict[tuple[str, int], tuple[int, int]] = {}
    for _, value, ts in rows:
        ident = (str(value["key"]), ts - ts % size)
        count, total = out.get(ident, (0, 0))
        out[ident] = (count + 1, total + int(value["n"]))  # type: ignore[call-overload]
    return out


def _panes(path: Path) -> list[dict[str, object]]:
    return [json.loads(v) for v in read_delta_values(path)]


def test_sparza_run_drain_and_sparza_drain_fire_every_open_window_and_the_next_run_continues(tmp_path: Path) -> None:
    size = 1000
    config = _config(tmp_path, "WindowedCount", **{"app.example.window.ms": size, "task.max.batch.messages": 5,
                                                   "job.drain-monitor.poll.interval.ms": 300})
    first = [(i % 2, {"key": f"k{i % 3}", "n": i}, 150 * i) for i in range(40)]   # event times 0 .. 5850
    _write(config, "events", first)
    DeltaSystemAdmin("delta", Config(config)).create_stream(StreamSpec("out", 2))
    out = tmp_path / "streams" / "out"

    # Container mode (the default): --drain processes what exists, fires every open window (the watermark alone
    # would leave the last ones open: the input is unbounded) and exits 0, drained.
    done = _sparza_run(tmp_path, config, "--drain")
    assert "drained (drain " in done.stderr, done.stderr[-2000:]
    panes = _panes(out)
    assert {(p["key"], p["start"]): (p["count"], p["sum"]) for p in panes} == _windows(first, size)
    assert len(panes) == len(_windows(first, size))          # every window once
    assert read_drain(Config(config)) is None                 # the request went with the drain

    # More input, and a micro-batch run drained from outside: the job continued where it stopped.
    second = [(i % 2, {"key": f"k{i % 3}", "n": i}, 150 * i) for i in range(40, 70)]  # 6000 .. 10350
    _write(config, "events", second)
    path = tmp_path / "job-batches.yaml"
    path.write_text(yaml.safe_dump({**config, "job.execution.mode": "batches"}))
    sparza = str(Path(sys.executable).with_name("sparza"))
    log = tmp_path / "run.log"
    with open(log, "w") as handle:
        proc = subprocess.Popen([sparza, "run", "--config", str(path)], stdout=handle, stderr=subprocess.STDOUT,
                                text=True)
    try:
        eventually(lambda: "batch " in log.read_text() or proc.poll() is not None, 300, 0.5,
                   lambda: "no batch reported within 300 s:\n" + log.read_text()[-3000:])
        requested = subprocess.run([sparza, "drain", "--config", str(path)], capture_output=True, text=True,
                                   timeout=120)
        assert requested.returncode == 0, requested.stderr
        assert "requested" in requested.stdout
        assert proc.wait(timeout=300) == 0, log.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
    text = log.read_text()
    assert "drain " in text and "requested" in text and "drained (drain " in text, text[-2000:]
    earlier = {json.dumps(p, sort_keys=True) for p in panes}
    later = [p for p in _panes(out) if json.dumps(p, sort_keys=True) not in earlier]
    assert {(p["key"], p["start"]): (p["count"], p["sum"]) for p in later} == _windows(second, size)
    assert len(later) == len(_windows(second, size))
    assert read_drain(Config(config)) is None
    # Withdrawing a request that is not there says so.
    cancel = subprocess.run([sparza, "drain", "--config", str(path), "--cancel"], capture_output=True, text=True,
                            timeout=120)
    assert cancel.returncode == 1 and "no pending drain request" in cancel.stderr
