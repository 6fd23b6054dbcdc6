"""Storage that hangs in the middle of a run (accepts connections, never answers) is reported within
``azure.storage.timeout.ms``, with the endpoint and what to check.

The job's blob store is Azurite behind a loopback proxy that the test can make silent: it keeps
accepting connections and holds every byte until it is told to resume. That is storage hanging
mid-run as a real client meets it (nothing in sparza is stubbed).
"""

from __future__ import annotations

import queue
import signal
import socket
import subprocess
import threading
import time

import pytest
from examples.keyed_count.load import append_messages
from tests.runtime.helpers import REPO, sparza_cmd, sparza_env, write_config

from sparza.testing import eventually

pytestmark = [pytest.mark.spark, pytest.mark.azurite, pytest.mark.slow]


class SilenceableProxy:
    """Forwards 127.0.0.1:<port> to ``target_port``; while silent, connections are accepted and data is
    held (not forwarded) until :meth:`resume`."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self._server = socket.socket()
        self._server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._server.bind(("127.0.0.1", 0))
        self._server.listen(64)
        self.port = self._server.getsockname()[1]
        self._open = threading.Event()
        self._open.set()
        self._stop = threading.Event()
        self._conns: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def silence(self) -> None:
        self._open.clear()

    def resume(self) -> None:
        self._open.set()

    def close(self) -> None:
        self._stop.set()
        self._open.set()
        self._server.close()
        for conn in self._conns:
            try:
                conn.close()
            except OSError:
                pass

    def _accept(self) -> None:
        self._server.settimeout(0.2)
        while not self._stop.is_set():
            try:
                client, _ = self._server.accept()
            except OSError:
                continue
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            self._conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, source: socket.socket, target: socket.socket) -> None:
        try:
            while not self._stop.is_set():
                data = source.recv(65536)
                if not data:
                    break
                self._open.wait()  # silent: hold the bytes, answer nothing
                target.sendall(data)
        except OSError:
            pass
        finally:
            for s in (source, target):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


def _reader(stream, lines: queue.Queue) -> None:
    for line in stream:
        lines.put(line.rstrip("\n"))


def _wait_for(lines: queue.Queue, seen: list[str], text: str, timeout_s: float) -> str:
    def next_line() -> str | None:
        try:
            line = lines.get(timeout=0.5)  # blocks up to half a second: the wait's polling interval
        except queue.Empty:
            return None
        seen.append(line)
        return line if text in line else None

    return eventually(next_line, timeout_s, 0,
                      lambda: f"no line with {text!r} within {timeout_s} s; stderr so far:\n" + "\n".join(seen[-40:]))


def test_storage_that_hangs_mid_run_is_reported_within_the_timeout(make_job, work_dir, azurite, unique_name):
    proxy = SilenceableProxy(azurite.blob_port)
    account = azurite.account
    connect = (f"DefaultEndpointsProtocol=http;AccountName={account.account_name};AccountKey={account.account_key};"
               f"BlobEndpoint=http://127.0.0.1:{proxy.port}/{account.account_name};"
               f"TableEndpoint={account.table_endpoint};")
    config = make_job(**{"blob.store.manager.factory": "azure", "blob.store.azure.container": unique_name,
                         "azure.storage.connect": connect, "azure.storage.timeout.ms": "4000",
                         "task.commit.ms": "500"})
    append_messages(config, 200, 4, commit_size=200)
    path = write_config(config, work_dir / "job.yaml")
    process = subprocess.Popen(sparza_cmd("run", "--config", str(path), "--master", "local[2]"), cwd=REPO,
                               env=sparza_env(), stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    lines: queue.Queue = queue.Queue()
    seen: list[str] = []
    threading.Thread(target=_reader, args=(process.stderr, lines), daemon=True).start()
    try:
        _wait_for(lines, seen, "batch 1 ", 300)
        proxy.silence()
        silenced = time.monotonic()
        append_messages(config, 100, 4, start=200, commit_size=100)  # the next batch meets the hang
        report = _wait_for(lines, seen, "storage not answering", 120)
        reported_after = time.monotonic() - silenced
        endpoint = f"http://127.0.0.1:{proxy.port}/{account.account_name}"
        assert f"storage endpoint {endpoint} did not answer within 2 s" in report, report
        assert "check that it is the Azure Storage (or Azurite) endpoint" in report
        assert "azure.storage.timeout.ms" in report and "the batch keeps retrying" in report
        assert "the blob store / checkpoint store" in report and "'blob.store.azure.container'" in report
        proxy.resume()
        # Both follow the resume, in either order: the watch's next probe and the held batch's retry race.
        for text in ("storage answers again: the blob store / checkpoint store", "batch 2 "):
            if not any(text in line for line in seen):
                _wait_for(lines, seen, text, 300)  # "batch 2": the held batch went on and committed
    finally:
        proxy.resume()
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=180)
        finally:
            if process.poll() is None:
                process.kill()
            proxy.close()
    # Reported while the batch still hung: the clients' own timeouts and retries take minutes. (Not a
    # speed assertion: the bound is the timeout the user configured, with room for a loaded machine.)
    assert reported_after < 60, reported_after
