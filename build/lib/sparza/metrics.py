"""Metrics: a registry of named groups of counters, gauges and timers, with reporters.

Groups follow Samza's convention: ``aggregate`` for totals, a system name, or a source name.
``MetricsRegistry.snapshot()`` gives ``{group: {name: value}}``; :class:`JsonLinesReporter` writes
snapshots as JSON lines and :class:`PrometheusExporter` serves them over HTTP.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

__all__ = ["PROMETHEUS_LABELS", "Counter", "Gauge", "JsonLinesReporter", "MetricsRegistry", "PrometheusExporter",
           "Timer", "attach_prometheus", "prometheus_labels"]


class Counter:
    """A monotonically increasing count (thread-safe)."""

    __slots__ = ("_lock", "_value", "name")

    def __init__(self, name: str) -> None:
        self.name = name
        self._value = 0
        self._lock = threading.Lock()

    def inc(self, n: int = 1) -> None:
        """Add ``n``."""
        with self._lock:
            self._value += n

    @property
    def count(self) -> int:
        """The current count."""
        return self._value

    def value(self) -> int:
        """The value reported in snapshots."""
        return self._value


class Gauge:
    """A value that is set, not accumulated (queue depth, lag, last watermark)."""

    __slots__ = ("_value", "name")

    def __init__(self, name: str, initial: Any = 0) -> None:
        self.name = name
        self._value = initial

    def set(self, value: Any) -> None:
        """Replace the value."""
        self._value = value

    def value(self) -> Any:
        """The value reported in snapshots."""
        return self._value


class Timer:
    """Durations in milliseconds: count, total, max and last (thread-safe)."""

    __slots__ = ("_lock", "_window_max_ms", "count", "last_ms", "max_ms", "name", "total_ms")

    def __init__(self, name: str) -> None:
        self.name = name
        self.count = 0
        self.total_ms = 0.0
        self.max_ms = 0.0
        self.last_ms = 0.0
        self._window_max_ms = 0.0  # the max since the registry's last changes()
        self._lock = threading.Lock()

    def update(self, duration_ms: float) -> None:
        """Record one duration."""
        with self._lock:
            self.count += 1
            self.total_ms += duration_ms
            self.last_ms = duration_ms
            self.max_ms = max(self.max_ms, duration_ms)
            self._window_max_ms = max(self._window_max_ms, duration_ms)

    def merge(self, count: int, total_ms: float, max_ms: float, last_ms: float) -> None:
        """Add durations recorded elsewhere (an executor's), given as their count, total, max and last."""
        if count <= 0:
            return
        with self._lock:
            self.count += count
            self.total_ms += total_ms
            self.last_ms = last_ms
            self.max_ms = max(self.max_ms, max_ms)
            self._window_max_ms = max(self._window_max_ms, max_ms)

    @contextmanager
    def time(self) -> Iterator[None]:
        """Time the ``with`` block."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.update((time.perf_counter() - start) * 1000.0)

    def value(self) -> dict[str, float]:
        """The value reported in snapshots."""
        mean = self.total_ms / self.count if self.count else 0.0
        return {"count": self.count, "mean_ms": round(mean, 3), "max_ms": round(self.max_ms, 3),
                "last_ms": round(self.last_ms, 3), "total_ms": round(self.total_ms, 3)}


Metric = Counter | Gauge | Timer


class MetricsRegistry:
    """Named groups of metrics; asking twice for the same name gives the same metric."""

    def __init__(self) -> None:
        self._groups: dict[str, dict[str, Metric]] = {}
        self._lock = threading.Lock()
        self._reported: dict[tuple[str, str], tuple[int, float]] = {}  # what changes() last handed out

    def _get(self, group: str, name: str, kind: type[Metric]) -> Any:
        with self._lock:
            metrics = self._groups.setdefault(group, {})
            metric = metrics.get(name)
            if metric is None:
                metric = kind(name)
                metrics[name] = metric
            elif not isinstance(metric, kind):
                raise TypeError(f"metric {group}/{name} is a {type(metric).__name__}, not a {kind.__name__}")
            return metric

    def counter(self, group: str, name: str) -> Counter:
        """The counter ``name`` in ``group``."""
        return self._get(group, name, Counter)  # type: ignore[no-any-return]

    def gauge(self, group: str, name: str) -> Gauge:
        """The gauge ``name`` in ``group``."""
        return self._get(group, name, Gauge)  # type: ignore[no-any-return]

    def timer(self, group: str, name: str) -> Timer:
        """The timer ``name`` in ``group``."""
        return self._get(group, name, Timer)  # type: ignore[no-any-return]

    def groups(self) -> list[str]:
        """The group names."""
        with self._lock:
            return list(self._groups)

    def snapshot(self) -> dict[str, dict[str, Any]]:
        """``{group: {name: value}}`` for every metric."""
        with self._lock:
            groups = {g: dict(m) for g, m in self._groups.items()}
        return {g: {n: m.value() for n, m in metrics.items()} for g, metrics in groups.items()}

    def merge_snapshot(self, snapshot: dict[str, dict[str, Any]]) -> None:
        """Add counters and set gauges from a :meth:`snapshot` taken elsewhere (kinds are guessed: ints
        add up, timer values merge, anything else is set); prefer :meth:`merge_changes`, which knows them."""
        for group, metrics in snapshot.items():
            for name, value in metrics.items():
                if isinstance(value, dict) and {"count", "total_ms", "max_ms"} <= value.keys():
                    self.timer(group, name).merge(int(value["count"]), float(value["total_ms"]),
                                                  float(value["max_ms"]), float(value.get("last_ms", 0.0)))
                elif isinstance(value, bool) or not isinstance(value, int | float):
                    self.gauge(group, name).set(value)
                elif isinstance(value, int):
                    try:
                        self.counter(group, name).inc(value)
                    except TypeError:
                        self.gauge(group, name).set(value)
                else:
                    self.gauge(group, name).set(value)

    def changes(self) -> dict[str, dict[str, list[Any]]]:
        """What changed since the previous call, with each metric's kind, as plain JSON-able values:
        ``{group: {name: ["c", added] | ["g", value] | ["t", count, total_ms, max_ms, last_ms]}}``.

        This is how metrics of long-lived objects on an executor (producers, consumers, backups) travel
        to the driver with each batch result: every increment is handed out exactly once, whichever
        task's batch carries it. Counters and timers that did not move since they were last handed out
        are left out (each is handed out once, at zero too, so its series exists); gauges always go.
        """
        with self._lock:
            groups = {g: dict(m) for g, m in self._groups.items()}
            out: dict[str, dict[str, list[Any]]] = {}
            for group, metrics in groups.items():
                for name, metric in metrics.items():
                    entry: list[Any] | None
                    first = (group, name) not in self._reported  # sent once even at zero: the series exists
                    if isinstance(metric, Counter):
                        seen = self._reported.get((group, name), (0, 0.0))[0]
                        now = metric.count
                        entry = ["c", now - seen] if now != seen or first else None
                        self._reported[(group, name)] = (now, 0.0)
                    elif isinstance(metric, Timer):
                        with metric._lock:
                            count, total, last = metric.count, metric.total_ms, metric.last_ms
                            window_max, metric._window_max_ms = metric._window_max_ms, 0.0
                        seen_count, seen_total = self._reported.get((group, name), (0, 0.0))
                        entry = (["t", count - seen_count, round(total - seen_total, 3), round(window_max, 3),
                                  round(last, 3)] if count != seen_count or first else None)
                        self._reported[(group, name)] = (count, total)
                    else:
                        entry = ["g", metric.value()]
                        self._reported[(group, name)] = (0, 0.0)
                    if entry is not None:
                        out.setdefault(group, {})[name] = entry
        return out

    def merge_changes(self, changes: dict[str, dict[str, list[Any]]], group_prefix: str = "") -> None:
        """Apply :meth:`changes` taken elsewhere: add counters and timers, set gauges (groups get
        ``group_prefix``, e.g. ``"<task>:"``)."""
        for group, metrics in changes.items():
            target = group_prefix + group
            for name, entry in metrics.items():
                kind = entry[0]
                if kind == "c":
                    self.counter(target, name).inc(int(entry[1]))
                elif kind == "t":
                    self.timer(target, name).merge(int(entry[1]), float(entry[2]), float(entry[3]), float(entry[4]))
                else:
                    self.gauge(target, name).set(entry[1])

    def value(self, group: str, name: str, default: Any = 0) -> Any:
        """The reported value of ``group``/``name`` (``default`` when there is no such metric)."""
        with self._lock:
            metric = self._groups.get(group, {}).get(name)
        return default if metric is None else metric.value()

    def total(self, name: str, group_suffix: str = "") -> int:
        """The sum of counter ``name`` over every group ending with ``group_suffix`` (e.g. every task's
        ``":stores"``)."""
        with self._lock:
            groups = {g: m.get(name) for g, m in self._groups.items() if g.endswith(group_suffix)}
        return sum(m.count for m in groups.values() if isinstance(m, Counter))


class JsonLinesReporter:
    """Writes registry snapshots as JSON lines (``{"time_ms", "job", "metrics"}``) to a file or stream.

    Call :meth:`report` yourself, or :meth:`start` a background thread that reports every
    ``interval_ms`` until :meth:`stop`.
    """

    def __init__(self, registry: MetricsRegistry, target: str | Path | IO[str], *, source: str = "",
                 interval_ms: int = 60_000) -> None:
        self.registry = registry
        self.source = source
        self.interval_ms = interval_ms
        self._target = target
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def report(self) -> dict[str, Any]:
        """Write one snapshot now and return it."""
        record = {"time_ms": int(time.time() * 1000), "source": self.source, "metrics": self.registry.snapshot()}
        line = json.dumps(record, sort_keys=True, default=str) + "\n"
        if isinstance(self._target, str | Path):
            with open(self._target, "a", encoding="utf-8") as fh:
                fh.write(line)
        else:
            self._target.write(line)
            self._target.flush()
        return record

    def start(self) -> None:
        """Report every ``interval_ms`` in a daemon thread."""
        def loop() -> None:
            while not self._stop.wait(self.interval_ms / 1000.0):
                self.report()

        self._thread = threading.Thread(target=loop, name="sparza-metrics-jsonl", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread and write a last snapshot."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.report()


def _prom_name(text: str) -> str:
    """``messages-in`` -> ``messages_in``, Samza's ``eventWriteRate`` -> ``event_write_rate``."""
    out = []
    for i, ch in enumerate(text):
        if ch.isupper() and i and (text[i - 1].islower() or text[i - 1].isdigit()):
            out.append("_")
        out.append(ch.lower() if ch.isalnum() else "_")
    return "".join(out).strip("_")


def prometheus_labels(group: str) -> tuple[str, str]:
    """``(group, task)`` of a registry group: the driver keeps a task's metrics in ``<task>:<group>``."""
    task, sep, rest = group.partition(":")
    return (rest, task) if sep else (group, "")


PROMETHEUS_LABELS = ("group", "task", "sparza_job")
"""The labels of every exported sample: the registry group, the task (empty for job-level metrics)
and the job (``<job.name>-<job.id>``, empty when the exporter was given none)."""


class PrometheusExporter:
    """Serves registries on ``http://host:port/metrics`` in Prometheus text format.

    Counters become ``sparza_<name>_total``; timers export ``_count``, ``_total_ms`` and ``_max_ms``;
    numeric gauges are exported as is. Every sample has the labels :data:`PROMETHEUS_LABELS`. One
    endpoint can serve several registries (the stages of an application, a coordinator's): :meth:`add`.
    """

    def __init__(self, registry: MetricsRegistry | None, port: int, host: str = "127.0.0.1",
                 labels: dict[str, str] | None = None) -> None:
        self.port = port
        self.host = host
        self._server: Any = None
        self._lock = threading.Lock()
        self._served: dict[int, tuple[MetricsRegistry, dict[str, str], int]] = {}
        if registry is not None:
            self.add(registry, labels)

    @property
    def registry(self) -> MetricsRegistry | None:
        """The first registry served (None when none is)."""
        with self._lock:
            return next((r for r, _, _ in self._served.values()), None)

    def add(self, registry: MetricsRegistry, labels: dict[str, str] | None = None) -> None:
        """Serve ``registry`` too (adding one already served counts a second user of it)."""
        with self._lock:
            current = self._served.get(id(registry))
            uses = current[2] + 1 if current else 1
            self._served[id(registry)] = (registry, dict(labels or {}), uses)

    def remove(self, registry: MetricsRegistry) -> bool:
        """Stop serving ``registry`` (once its last user removed it); True when nothing is served any more."""
        with self._lock:
            current = self._served.get(id(registry))
            if current is not None:
                if current[2] > 1:
                    self._served[id(registry)] = (current[0], current[1], current[2] - 1)
                else:
                    del self._served[id(registry)]
            return not self._served

    def _samples(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        families: dict[str, Any] = {}
        with self._lock:
            served = [(r, labels) for r, labels, _ in self._served.values()]
        for registry, labels in served:
            job = labels.get("sparza_job", "")
            with registry._lock:
                groups = {g: dict(m) for g, m in registry._groups.items()}
            for group, metrics in groups.items():
                values = [*prometheus_labels(group), job]
                for name, metric in metrics.items():
                    base = "sparza_" + _prom_name(name)
                    if isinstance(metric, Counter):
                        fam = families.setdefault(base + "_c", CounterMetricFamily(base, name,
                                                                                   labels=PROMETHEUS_LABELS))
                        fam.add_metric(values, metric.count)
                    elif isinstance(metric, Timer):
                        for part in ("count", "total_ms", "max_ms"):
                            key = f"{base}_{part}"
                            fam = families.setdefault(key, GaugeMetricFamily(key, name, labels=PROMETHEUS_LABELS))
                            fam.add_metric(values, float(metric.value()[part]))
                    elif isinstance(metric.value(), int | float):
                        fam = families.setdefault(base, GaugeMetricFamily(base, name, labels=PROMETHEUS_LABELS))
                        fam.add_metric(values, float(metric.value()))
        yield from families.values()

    def start(self) -> None:
        """Start the HTTP endpoint in a daemon thread."""
        from prometheus_client import CollectorRegistry, start_http_server

        exporter = self

        class _Collector:
            def collect(self) -> Iterator[Any]:
                yield from exporter._samples()

        prom_registry = CollectorRegistry()
        prom_registry.register(_Collector())  # type: ignore[arg-type]
        self._server, _thread = start_http_server(self.port, addr=self.host, registry=prom_registry)

    def stop(self) -> None:
        """Stop serving."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


_SHARED: dict[tuple[str, int], PrometheusExporter] = {}
_SHARED_LOCK = threading.Lock()


def attach_prometheus(registry: MetricsRegistry, port: int, *, host: str = "127.0.0.1",
                      labels: dict[str, str] | None = None) -> Callable[[], None]:
    """Serve ``registry`` on this process's endpoint at ``host:port``, started by the first registry
    attached, so the stages of an application and the runs of a coordinated processor share one port.
    Returns the function that detaches it again (the endpoint stops with the last one)."""
    with _SHARED_LOCK:
        exporter = _SHARED.get((host, port))
        if exporter is None:
            exporter = PrometheusExporter(registry, port, host, labels)
            exporter.start()
            _SHARED[(host, port)] = exporter
        else:
            exporter.add(registry, labels)

    def detach() -> None:
        with _SHARED_LOCK:
            if _SHARED.get((host, port)) is exporter and exporter.remove(registry):
                del _SHARED[(host, port)]
                exporter.stop()

    return detach
