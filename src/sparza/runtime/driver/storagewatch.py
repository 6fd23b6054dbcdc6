"""Storage that hangs while a job runs is reported within ``azure.storage.timeout.ms``.

A storage service that accepts connections and never answers does not fail a batch quickly: the
executors' clients wait for their own timeouts and the blob-store retry policy keeps retrying (for
up to ``blob.store.retry.policy.max.retry.duration.millis``), so the batch just seems slow. The start
checks catch a hang at start only. :class:`StorageWatch` runs on the driver: while a batch has run
(in the container mode: while containers have run without committing) for a quarter of the timeout,
it makes the start checks' one cheap authenticated call to each Azure container the job's tasks use
(the blob store, the checkpoint store, the Azure blob outputs), each allowed half the timeout, every
quarter of the timeout. A container that does not answer is
reported with its endpoint and what to check (status line, warning, the metric
``job/storage-not-answering``), so the report comes at most one timeout after the hang began. It
says so again when the endpoint answers. The batch itself goes on under the retry policy.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from sparza.blobstore.settings import MANAGER_FACTORY
from sparza.config import Config
from sparza.engine.jobconfig import CHECKPOINT_FACTORY
from sparza.metrics import MetricsRegistry

__all__ = ["StorageWatch", "azure_probes"]

Probe = Callable[[float], None]
"""One cheap call with a timeout in seconds: raises (a one-line message) when storage does not answer."""


def azure_probes(config: Config, metrics: MetricsRegistry | None = None) -> dict[str, Probe]:
    """``{what: probe}`` for each Azure container a job's tasks use while running (none for local storage); their
    requests are counted in ``metrics`` (group ``storage.probes``) when given."""
    from sparza.azure import TIMEOUT_KEY, StorageRequests, check_container, resolve_storage_account
    from sparza.runtime.driver.preflight import PROBES_SCOPE, check_storage
    from sparza.systems.azureblob.settings import ACCOUNT_KEYS as AZUREBLOB_ACCOUNT

    requests = StorageRequests(metrics, PROBES_SCOPE) if metrics is not None else None
    probes: dict[str, Probe] = {}
    if MANAGER_FACTORY.get(config) == "azure" or CHECKPOINT_FACTORY.get(config) == "azure":
        def stores(timeout_s: float) -> None:
            check_storage(Config({**dict(config.items()), TIMEOUT_KEY: str(max(1, int(timeout_s * 1000)))}),
                          local=False, metrics=metrics)

        probes["the blob store / checkpoint store"] = stores
    for key, value in config.items():
        parts = key.split(".")
        if len(parts) == 4 and parts[0] == "systems" and parts[2:] == ["samza", "factory"] \
                and value.strip().lower() in ("azureblob", "org.apache.samza.system.azureblob.azureblobsystemfactory"):
            system = parts[1]

            def output(timeout_s: float, system: str = system) -> None:
                account = resolve_storage_account(config, AZUREBLOB_ACCOUNT, names={"container": system})
                check_container(account, system, f"systems.{system}.samza.factory", timeout_s, requests=requests)

            probes[f"the Azure blob output '{system}'"] = output
    return probes


class StorageWatch:
    """Probes storage while a batch runs long (see the module docstring); :meth:`batch_started` and
    :meth:`batch_ended` frame each batch, :meth:`close` stops the thread."""

    def __init__(self, probes: dict[str, Probe], timeout_s: float, report: Callable[[str], None],
                 metrics: MetricsRegistry) -> None:
        self._probes = probes
        self._timeout_s = timeout_s
        self._report = report
        self._metrics = metrics
        self._started: float | None = None
        self._running = "spark batch 0"
        self._failing: set[str] = set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if probes:
            self._thread = threading.Thread(target=self._loop, name="sparza-storage-watch", daemon=True)
            self._thread.start()

    def batch_started(self, batch: int) -> None:
        """A batch began (its tasks may now wait on storage)."""
        self.running(f"spark batch {batch}")

    def running(self, what: str) -> None:
        """Work that uses storage began (``what``: a micro-batch, the containers of an epoch)."""
        self._running = what
        self._started = time.monotonic()

    def progress(self) -> None:
        """The running work committed something: storage answered, so the watch's clock starts again
        (containers run until the job stops; only a stretch without a commit can mean a hang)."""
        if self._started is not None:
            self._started = time.monotonic()

    def batch_ended(self) -> None:
        """The batch (or the containers' run) ended, committed or failed."""
        self._started = None

    def close(self) -> None:
        """Stop probing."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self._timeout_s)

    def _loop(self) -> None:
        tick = self._timeout_s / 4
        while not self._stop.wait(tick):
            started = self._started
            if self._failing or (started is not None and time.monotonic() - started >= tick):
                self.probe_once(0.0 if started is None else time.monotonic() - started)

    def probe_once(self, running_s: float) -> None:
        """Probe every endpoint once, allowing each half the timeout; report changes."""
        for what, probe in self._probes.items():
            try:
                probe(self._timeout_s / 2)
            except Exception as exc:
                if what not in self._failing:
                    self._failing.add(what)
                    self._metrics.counter("job", "storage-not-answering").inc()
                    self._report(f"storage not answering while {self._running} runs ({running_s:.0f} s "
                                 f"without a commit), {what}: {_first_line(exc)}; the batch keeps retrying under "
                                 "blob.store.retry.policy.*")
                continue
            if what in self._failing:
                self._failing.discard(what)
                self._report(f"storage answers again: {what}")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
