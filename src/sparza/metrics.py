"""Metrics: a registry of named groups of counters, gauges and timers, with reporters.

Groups follow Samza's convention: ``aggregate`` for totals, a system name, or a source name.
``MetricsRegistry.snapshot()`` gives ``{group: {name: value}}``; :class:`JsonLinesReporter` writes
snapshots as JSON lines and :class:`PrometheusExporter` serves them over HTTP.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

__all__ = ["Counter", "Gauge", "JsonLinesReporter", "MetricsRegistry", "PrometheusExporter", "Timer"]


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

    __slots__ = ("_lock", "count", "last_ms", "max_ms", "name", "total_ms")

    def __init__(self, name: str) -> None:
        self.name = name
        self.count = 0
        self.total_ms = 0.0
        self.max_ms = 0.0
        self.last_ms = 0.0
        self._lock = threading.Lock()

    def update(self, duration_ms: float) -> None:
        """Record one duration."""
        with self._lock:
            self.count += 1
            self.total_ms += duration_ms
            self.last_ms = duration_ms
            self.max_ms = max(self.max_ms, duration_ms)

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
        """Add counters and set gauges from a snapshot taken elsewhere (an executor's task metrics)."""
        for group, metrics in snapshot.items():
            for name, value in metrics.items():
                if isinstance(value, bool) or not isinstance(value, int | float):
                    self.gauge(group, name).set(value)
                elif isinstance(value, int):
                    try:
                        self.counter(group, name).inc(value)
                    except TypeError:
                        self.gauge(group, name).set(value)
                else:
                    self.gauge(group, name).set(value)


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
    return "".join(ch if ch.isalnum() else "_" for ch in text).strip("_").lower()


class PrometheusExporter:
    """Serves the registry on ``http://host:port/metrics`` in Prometheus text format.

    Counters become ``sparza_<name>_total{group=...}``; timers export count, total and max.
    """

    def __init__(self, registry: MetricsRegistry, port: int, host: str = "127.0.0.1") -> None:
        self.registry = registry
        self.port = port
        self.host = host
        self._server: Any = None

    def start(self) -> None:
        """Start the HTTP endpoint in a daemon thread."""
        from prometheus_client import CollectorRegistry, start_http_server
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        registry = self.registry

        class _Collector:
            def collect(self) -> Iterator[Any]:
                families: dict[str, Any] = {}
                with registry._lock:
                    groups = {g: dict(m) for g, m in registry._groups.items()}
                for group, metrics in groups.items():
                    for name, metric in metrics.items():
                        base = "sparza_" + _prom_name(name)
                        if isinstance(metric, Counter):
                            fam = families.setdefault(base + "_c", CounterMetricFamily(base, name, labels=["group"]))
                            fam.add_metric([group], metric.count)
                        elif isinstance(metric, Timer):
                            for part in ("count", "total_ms", "max_ms"):
                                key = f"{base}_{part}"
                                fam = families.setdefault(key, GaugeMetricFamily(key, name, labels=["group"]))
                                fam.add_metric([group], float(metric.value()[part]))
                        elif isinstance(metric.value(), int | float):
                            fam = families.setdefault(base, GaugeMetricFamily(base, name, labels=["group"]))
                            fam.add_metric([group], float(metric.value()))
                yield from families.values()

        prom_registry = CollectorRegistry()
        prom_registry.register(_Collector())  # type: ignore[arg-type]
        self._server, _thread = start_http_server(self.port, addr=self.host, registry=prom_registry)

    def stop(self) -> None:
        """Stop serving."""
        if self._server is not None:
            self._server.shutdown()
            self._server = None
