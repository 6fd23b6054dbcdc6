"""Render ``sparza-dashboard.json`` as a picture from its own queries against a real sparza run.

Grafana itself is not used (it is AGPL and not installable here). Instead this script does what
Grafana and Prometheus would do, with the parts this repository has:

1. ``--run``: starts Azurite and runs real jobs with ``sparza run`` and their Prometheus endpoint on
   (``metrics.reporter.prometheus.port``): a keyed count under the Azure coordinator (a second
   processor with its own state dir joins at 40% of the run, so tasks move and their stores are
   restored from the blob store), writing JSON-lines blobs to Azurite, with an adjunct store; and a
   windowed application fed late data. While they run it scrapes every endpoint every ``--interval``
   seconds, as Prometheus would, adding an ``instance`` label per endpoint, and writes the samples to
   ``--samples`` (JSON lines) and the names of the metrics seen to ``scraped-metrics.txt``.
2. evaluates every panel's PromQL query on those samples at each scrape time with the small PromQL
   subset below (selectors with ``=``, ``!=``, ``=~``, ``!~`` matchers; ``rate`` and ``increase``
   over a range, without Prometheus's extrapolation; ``sum``/``max``/``min``/``avg`` with ``by``;
   ``+ - * /`` between vectors matched on all labels, or with a number; dashboard variables are
   taken as "all"). A query outside the subset is an error, never skipped.
3. draws the panels where ``gridPos`` puts them with matplotlib: time series as lines named by
   ``legendFormat``, stat panels as their last value.

    python docs/grafana/render_dashboard.py --run --seconds 480     # run, scrape, render
    python docs/grafana/render_dashboard.py                         # render the saved samples again
"""

from __future__ import annotations

import argparse
import json
import math
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
DASHBOARD = HERE / "sparza-dashboard.json"
SAMPLES = Path(tempfile.gettempdir()) / "sparza-dashboard-samples.jsonl"  # ~10 MB: not kept in the repo
SCRAPED = HERE / "scraped-metrics.txt"  # the metric names the run exported (tests compare the dashboard with it)
IMAGE = REPO / "docs" / "images" / "grafana-dashboard.png"

Labels = frozenset[tuple[str, str]]
Vector = dict[Labels, float]


# --- samples ------------------------------------------------------------------------------------------
def parse_exposition(text: str, extra: dict[str, str]) -> Iterator[tuple[str, Labels, float]]:
    """``(name, labels, value)`` of each sample of a Prometheus text exposition, plus ``extra`` labels."""
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        head, value = line.rsplit(" ", 1)
        name, _, rest = head.partition("{")
        labels = dict(extra)
        for match in re.finditer(r'(\w+)="((?:[^"\\]|\\.)*)"', rest):
            labels[match.group(1)] = match.group(2)
        yield name, frozenset(labels.items()), float(value)


class Series:
    """Scraped samples: per (name, labels) the (time, value) points in time order."""

    def __init__(self) -> None:
        self.points: dict[tuple[str, Labels], list[tuple[float, float]]] = {}

    def add(self, t: float, name: str, labels: Labels, value: float) -> None:
        self.points.setdefault((name, labels), []).append((t, value))

    def times(self) -> list[float]:
        return sorted({t for pts in self.points.values() for t, _ in pts})

    def names(self) -> set[str]:
        return {name for name, _ in self.points}

    @classmethod
    def load(cls, path: Path) -> Series:
        series = cls()
        for line in path.read_text().splitlines():
            row = json.loads(line)
            series.add(row["t"], row["name"], frozenset((k, v) for k, v in row["labels"].items()), row["value"])
        return series


# --- the PromQL subset ----------------------------------------------------------------------------------
class UnsupportedQuery(ValueError):
    """The query uses PromQL outside the subset this renderer evaluates."""


_TOKEN = re.compile(r'\s*(?:(?P<num>\d+(?:\.\d+)?)|(?P<str>"(?:[^"\\]|\\.)*")|(?P<dur>\[\d+[smh]\])'
                    r'|(?P<op>=~|!~|!=|[-+*/(){},=])|(?P<id>[A-Za-z_:][\w:]*))')


def _tokens(text: str) -> list[tuple[str, str]]:
    out, pos = [], 0
    text = text.strip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise UnsupportedQuery(f"cannot read {text[pos:pos + 20]!r}")
        kind = m.lastgroup or ""
        out.append((kind, m.group(kind)))
        pos = m.end()
        while pos < len(text) and text[pos].isspace():
            pos += 1
    return out


@dataclass
class Node:
    """A parsed query: ``kind`` is selector, range, call, agg, binop or number."""

    kind: str
    value: Any = None
    args: tuple[Any, ...] = ()


class Parser:
    """Recursive descent over the subset (see the module docstring)."""

    AGGS = ("sum", "max", "min", "avg")
    FUNCS = ("rate", "increase")

    def __init__(self, text: str) -> None:
        self.toks = _tokens(text)
        self.i = 0

    def parse(self) -> Node:
        node = self.expr()
        if self.i != len(self.toks):
            raise UnsupportedQuery(f"unexpected {self.toks[self.i][1]!r}")
        return node

    def peek(self) -> tuple[str, str] | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self, value: str | None = None) -> tuple[str, str]:
        tok = self.peek()
        if tok is None or (value is not None and tok[1] != value):
            raise UnsupportedQuery(f"expected {value!r}, found {tok[1] if tok else 'the end'!r}")
        self.i += 1
        return tok

    def expr(self) -> Node:
        node = self.term()
        while self.peek() and self.peek()[1] in "+-":  # type: ignore[index]
            op = self.take()[1]
            node = Node("binop", op, (node, self.term()))
        return node

    def term(self) -> Node:
        node = self.atom()
        while self.peek() and self.peek()[1] in "*/":  # type: ignore[index]
            op = self.take()[1]
            node = Node("binop", op, (node, self.atom()))
        return node

    def atom(self) -> Node:
        kind, value = self.take()
        if kind == "num":
            return Node("number", float(value))
        if value == "(":
            node = self.expr()
            self.take(")")
            return node
        if kind != "id":
            raise UnsupportedQuery(f"unexpected {value!r}")
        if value in self.AGGS:
            by: tuple[str, ...] = ()
            if self.peek() and self.peek()[1] == "by":  # type: ignore[index]
                self.take()
                by = self.labels()
            self.take("(")
            inner = self.expr()
            self.take(")")
            return Node("agg", value, (by, inner))
        if value in self.FUNCS:
            self.take("(")
            inner = self.atom()
            self.take(")")
            if inner.kind != "range":
                raise UnsupportedQuery(f"{value}() needs a range selector")
            return Node("call", value, (inner,))
        if self.peek() and self.peek()[1] == "(":  # type: ignore[index]
            raise UnsupportedQuery(f"function {value}() is not in the subset")
        matchers = self.matchers()
        node = Node("selector", value, tuple(matchers))
        if self.peek() and self.peek()[0] == "dur":  # type: ignore[index]
            dur = self.take()[1][1:-1]
            seconds = float(dur[:-1]) * {"s": 1, "m": 60, "h": 3600}[dur[-1]]
            return Node("range", seconds, (node,))
        return node

    def labels(self) -> tuple[str, ...]:
        self.take("(")
        names = []
        while self.peek() and self.peek()[1] != ")":  # type: ignore[index]
            names.append(self.take()[1])
            if self.peek() and self.peek()[1] == ",":  # type: ignore[index]
                self.take()
        self.take(")")
        return tuple(names)

    def matchers(self) -> list[tuple[str, str, str]]:
        out: list[tuple[str, str, str]] = []
        if not (self.peek() and self.peek()[1] == "{"):  # type: ignore[index]
            return out
        self.take("{")
        while self.peek() and self.peek()[1] != "}":  # type: ignore[index]
            name = self.take()[1]
            op = self.take()[1]
            if op not in ("=", "!=", "=~", "!~"):
                raise UnsupportedQuery(f"matcher operator {op!r}")
            kind, text = self.take()
            if kind != "str":
                raise UnsupportedQuery("a matcher needs a quoted value")
            out.append((name, op, json.loads(text)))
            if self.peek() and self.peek()[1] == ",":  # type: ignore[index]
                self.take()
        self.take("}")
        return out


def substitute_variables(expr: str) -> str:
    """Dashboard variables as "all": ``$job`` / ``${job}`` become ``.*`` (they only appear in ``=~``)."""
    return re.sub(r"\$\{?\w+\}?", ".*", expr)


def _matches(labels: Labels, matchers: tuple[tuple[str, str, str], ...]) -> bool:
    have = dict(labels)
    for name, op, value in matchers:
        actual = have.get(name, "")
        ok = {"=": actual == value, "!=": actual != value,
              "=~": re.fullmatch(value, actual) is not None, "!~": re.fullmatch(value, actual) is None}[op]
        if not ok:
            return False
    return True


LOOKBACK_S = 5.0
"""How far back an instant selector looks: 2.5 scrape intervals. Prometheus marks the series of a target
that stopped answering stale at once; with a short lookback a processor that left drops out the same way."""


def evaluate(node: Node, series: Series, t: float) -> Vector | float:
    """The value of ``node`` at time ``t``: a vector (labels -> value) or a number."""
    if node.kind == "number":
        return float(node.value)
    if node.kind == "selector":
        out: Vector = {}
        for (name, labels), points in series.points.items():
            if name == node.value and _matches(labels, node.args):
                recent = [v for ts, v in points if t - LOOKBACK_S < ts <= t]
                if recent:
                    out[labels] = recent[-1]
        return out
    if node.kind == "call":
        rng = node.args[0]
        selector, seconds = rng.args[0], rng.value
        out = {}
        for (name, labels), points in series.points.items():
            if name != selector.value or not _matches(labels, selector.args):
                continue
            window = [(ts, v) for ts, v in points if t - seconds < ts <= t]
            if len(window) < 2:
                continue
            delta, prev = 0.0, window[0][1]
            for _, v in window[1:]:
                delta += v - prev if v >= prev else v  # a counter reset (a restarted processor)
                prev = v
            out[labels] = delta / (window[-1][0] - window[0][0]) if node.value == "rate" else delta
        return out
    if node.kind == "agg":
        by, inner = node.args
        vec = evaluate(inner, series, t)
        if not isinstance(vec, dict):
            raise UnsupportedQuery("aggregating a number")
        groups: dict[Labels, list[float]] = {}
        for labels, v in vec.items():
            key = frozenset((k, v2) for k, v2 in labels if k in by)
            groups.setdefault(key, []).append(v)
        fn: Callable[[list[float]], float] = {"sum": sum, "max": max, "min": min,
                                              "avg": lambda xs: sum(xs) / len(xs)}[node.value]
        return {k: fn(vs) for k, vs in groups.items()}
    if node.kind == "binop":
        left, right = (evaluate(a, series, t) for a in node.args)
        op: Callable[[float, float], float] = {
            "+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
            "/": lambda a, b: a / b if b else math.nan}[node.value]
        if isinstance(left, dict) and isinstance(right, dict):
            return {k: op(v, right[k]) for k, v in left.items() if k in right}
        if isinstance(left, dict):
            return {k: op(v, right) for k, v in left.items()}  # type: ignore[arg-type]
        if isinstance(right, dict):
            return {k: op(left, v) for k, v in right.items()}
        return op(left, right)
    raise UnsupportedQuery(node.kind)


def legend(fmt: str, labels: Labels) -> str:
    """Grafana's ``legendFormat``: ``{{label}}`` replaced by the label's value."""
    have = dict(labels)
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: have.get(m.group(1), ""), fmt) or ",".join(
        f"{k}={v}" for k, v in sorted(labels))


def panel_queries(dashboard: dict[str, Any]) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """``(panel, target)`` of every query of the dashboard."""
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            yield panel, target


def metric_names(expr: str) -> set[str]:
    """The metric names a query selects."""
    names: set[str] = set()

    def walk(node: Node) -> None:
        if node.kind == "selector":
            names.add(node.value)
        for arg in node.args:
            if isinstance(arg, Node):
                walk(arg)

    walk(Parser(substitute_variables(expr)).parse())
    return names


# --- drawing ----------------------------------------------------------------------------------------------
def render(dashboard: dict[str, Any], series: Series, out: Path, caption: str) -> None:
    """Draw every panel of ``dashboard`` at its ``gridPos`` into ``out`` (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    times = series.times()
    t0 = times[0]
    rows = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in dashboard["panels"])
    unit_px, width_px = 28, 1800
    fig = plt.figure(figsize=(width_px / 100, (rows * unit_px + 90) / 100), dpi=100, facecolor="#111217")
    height = rows * unit_px + 90
    fig.text(0.01, 1 - 20 / height, dashboard["title"], color="#d8d9da", fontsize=15, va="top", weight="bold")
    fig.text(0.99, 1 - 22 / height, caption, color="#8e8e8e", fontsize=8.5, va="top", ha="right")
    colors = ["#73bf69", "#f2cc0c", "#8ab8ff", "#ff780a", "#f2495c", "#5794f2", "#b877d9", "#705da0"]
    for panel in dashboard["panels"]:
        g = panel["gridPos"]
        left, top = g["x"] / 24, (g["y"] * unit_px + 50) / height
        w, h = g["w"] / 24, g["h"] * unit_px / height
        if panel["type"] == "row":
            fig.text(left + 0.005, 1 - top - h * 0.6, panel["title"], color="#d8d9da", fontsize=11, weight="bold")
            continue
        ax = fig.add_axes((left + 0.032, 1 - top - h + 0.02, w - 0.04, h - 0.04), facecolor="#181b1f")
        ax.set_title(panel["title"], color="#d8d9da", fontsize=9.5, loc="left")
        for spine in ax.spines.values():
            spine.set_color("#2c3235")
        ax.tick_params(colors="#8e8e8e", labelsize=7)
        curves: dict[str, tuple[list[float], list[float]]] = {}
        for target in panel["targets"]:
            node = Parser(substitute_variables(target["expr"])).parse()
            for t in times:
                value = evaluate(node, series, t)
                vec = value if isinstance(value, dict) else {frozenset(): value}
                for labels, v in vec.items():
                    if math.isfinite(v):
                        xs, ys = curves.setdefault(legend(target.get("legendFormat", ""), labels), ([], []))
                        xs.append(t - t0)
                        ys.append(v)
        if panel["type"] == "stat":
            ax.set_xticks([])
            ax.set_yticks([])
            last = [ys[-1] for _, ys in curves.values() if ys]
            text = f"{sum(last):,.0f}" if last else "No data"
            ax.text(0.5, 0.42, text, color="#73bf69", fontsize=22, ha="center", va="center", transform=ax.transAxes)
            ax.set_position((left + 0.006, 1 - top - h + 0.012, w - 0.012, h - 0.03))
            continue
        if not curves:
            ax.text(0.5, 0.5, "No data", color="#8e8e8e", ha="center", va="center", transform=ax.transAxes)
        for i, (name, (xs, ys)) in enumerate(sorted(curves.items())):
            ax.plot(xs, ys, color=colors[i % len(colors)], linewidth=1.2, label=name)
        unit = panel.get("fieldConfig", {}).get("defaults", {}).get("unit", "")
        shown = {"ms": "ms", "Bps": "bytes / s", "dateTimeAsIso": "event time (epoch ms)"}.get(unit)
        if shown:
            ax.set_ylabel(shown, color="#8e8e8e", fontsize=7)
        ax.grid(color="#2c3235", linewidth=0.5)
        if curves:
            ax.legend(fontsize=6.5, loc="upper left", facecolor="#181b1f", edgecolor="#2c3235", labelcolor="#d8d9da",
                      ncol=2 if len(curves) > 4 else 1)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, facecolor=fig.get_facecolor())
    plt.close(fig)


# --- the real run --------------------------------------------------------------------------------------
def _sparza(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", "from sparza.cli import main; main()", *args], cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=log.open("wb"))


def run_and_scrape(seconds: float, interval: float, samples: Path) -> None:
    """Run the jobs (see the module docstring) and scrape their endpoints into ``samples``."""
    sys.path.insert(0, str(REPO))
    import yaml
    from examples.keyed_count.config import job_values
    from examples.keyed_count.load import append_messages, create_streams

    from sparza.config import Config
    from sparza.devservers.processes import free_port
    from sparza.devservers.storage import AzuriteProcess
    from sparza.streams import OutgoingMessageEnvelope, SystemStream
    from sparza.systems import StreamSpec
    from sparza.systems.delta import DeltaSystemAdmin, DeltaSystemProducer
    from sparza.testing import FAST_AZURE_COORDINATION

    root = Path(tempfile.mkdtemp(prefix="sparza-dashboard-"))
    azurite = AzuriteProcess(root / "azurite")
    azurite.start()
    procs: list[subprocess.Popen[bytes]] = []
    try:
        connect = azurite.connection_string
        ports = {"shop p1": free_port(), "shop p2": free_port(), "windows": free_port()}
        shop = Config(job_values(root / "shop", **{
            "job.name": "shop", "task.commit.ms": "1000", "task.max.batch.messages": "2000",
            **FAST_AZURE_COORDINATION, "azure.storage.connect": connect,
            "job.checkpoint.factory": "azure", "job.checkpoint.azure.container": "shop-checkpoints",
            "blob.store.manager.factory": "azure", "blob.store.azure.container": "shop-state",
            "task.inputs": "delta.events,delta.profiles", "keyed_count.output": "shop-out.counts",
            "systems.shop-out.samza.factory": "azureblob", "systems.shop-out.azureblob.writer.format": "jsonl",
            "stores.profiles.adstore.input": "delta.profiles", "stores.profiles.factory": "rocksdb"}))
        create_streams(shop, 4)
        DeltaSystemAdmin("delta", shop).create_stream(StreamSpec("profiles", 4))
        windows = Config({
            "job.name": "windows", "job.id": "1", "app.class": "sparza.api.examples.WindowedCount",
            "app.example.partitions": "2", "app.example.window.ms": "5000",
            "job.logged.store.base.dir": str(root / "windows" / "state"), "task.commit.ms": "1000",
            "systems.delta.samza.factory": "delta", "systems.delta.samza.offset.default": "oldest",
            "systems.delta.delta.root": str(root / "windows" / "streams"),
            "blob.store.local.root": str(root / "windows" / "blobstore"),
            "metrics.reporter.prometheus.port": str(ports["windows"])})
        admin = DeltaSystemAdmin("delta", windows)
        admin.create_stream(StreamSpec("events", 2))
        admin.create_stream(StreamSpec("out", 2))

        def config_file(name: str, config: Config, **extra: str) -> Path:
            path = root / f"{name}.yaml"
            path.write_text(yaml.safe_dump({**dict(config.items()), **extra}))
            return path

        p1 = config_file("shop-p1", shop, **{"metrics.reporter.prometheus.port": str(ports["shop p1"]),
                                               "job.logged.store.base.dir": str(root / "shop" / "state-p1")})
        p2 = config_file("shop-p2", shop, **{"metrics.reporter.prometheus.port": str(ports["shop p2"]),
                                               "job.logged.store.base.dir": str(root / "shop" / "state-p2")})
        procs.append(_sparza(["run", "--config", str(p1), "--processor-id", "p1", "--master", "local[1]"],
                             root / "shop-p1.log"))
        procs.append(_sparza(["run", "--config", str(config_file("windows", windows)), "--master", "local[1]"],
                             root / "windows.log"))
        stop = threading.Event()

        def feed() -> None:
            profiles = DeltaSystemProducer("delta", shop)
            profiles.register("feeder")
            late = DeltaSystemProducer("delta", windows)
            late.register("feeder")
            sent, clock = 0, 1_000_000
            while not stop.wait(1.0):
                append_messages(shop, 400, 50, start=sent, commit_size=400)
                for i in range(20):
                    profiles.send("feeder", OutgoingMessageEnvelope(SystemStream("delta", "profiles"),
                                                                    f"profile {sent + i}".encode(),
                                                                    key=f"k{(sent + i) % 50}".encode(),
                                                                    partition=i % 4))
                profiles.flush("feeder")
                for i in range(300):  # event times mostly in order, some far behind: late at the windows
                    ts = clock + i * 10 - (40_000 if i % 37 == 0 else 0)
                    late.send("feeder", OutgoingMessageEnvelope(
                        SystemStream("delta", "events"), json.dumps({"key": f"k{i % 7}", "n": i}).encode(),
                        key=f"k{i % 7}".encode(), partition=i % 2, timestamp=ts))
                late.flush("feeder")
                sent += 400
                clock += 3000

        threading.Thread(target=feed, daemon=True).start()
        started = time.time()
        joined = False
        with samples.open("w") as out:
            while time.time() - started < seconds:
                elapsed = time.time() - started
                if not joined and elapsed > seconds * 0.4:  # a second processor, a new host, joins: the
                    # tasks are shared, and those it takes are restored from the blob store
                    procs.append(_sparza(["run", "--config", str(p2), "--processor-id", "p2", "--master",
                                          "local[1]"], root / "shop-p2.log"))
                    joined = True
                now = time.time()
                for instance, port in ports.items():
                    try:
                        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
                    except OSError:
                        continue  # not up yet, or gone: Prometheus would record the target as down
                    for name, labels, value in parse_exposition(text, {"instance": instance}):
                        out.write(json.dumps({"t": now, "name": name, "labels": dict(labels), "value": value}) + "\n")
                out.flush()
                time.sleep(max(0.0, interval - (time.time() - now)))
        stop.set()
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                proc.kill()
        azurite.stop()
        logs = Path(tempfile.gettempdir()) / "sparza-dashboard-logs"
        shutil.rmtree(logs, ignore_errors=True)
        logs.mkdir()
        for log in root.glob("*.log"):
            shutil.copy(log, logs / log.name)  # the processors' stderr, for a look when a panel stays empty
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", action="store_true", help="run the jobs and scrape them first")
    parser.add_argument("--seconds", type=float, default=480.0)
    parser.add_argument("--interval", type=float, default=2.0)
    parser.add_argument("--samples", type=Path, default=SAMPLES)
    parser.add_argument("--out", type=Path, default=IMAGE)
    args = parser.parse_args()
    if args.run:
        run_and_scrape(args.seconds, args.interval, args.samples)
    dashboard = json.loads(DASHBOARD.read_text())
    series = Series.load(args.samples)
    render(dashboard, series, args.out, "Rendered by docs/grafana/render_dashboard.py (matplotlib) from this "
           "dashboard's own PromQL queries on samples scraped from a real sparza run; not a Grafana screenshot. "
           "x axis: seconds since the first scrape")
    if args.run:
        SCRAPED.write_text("".join(f"{name}\n" for name in sorted(series.names())))
    missing = sorted({n for _, target in panel_queries(dashboard) for n in metric_names(target["expr"])}
                     - series.names())
    print(f"wrote {args.out}; {len(series.points)} series; metrics the dashboard reads that the run never "
          f"exported: {missing or 'none'}")


if __name__ == "__main__":
    main()
