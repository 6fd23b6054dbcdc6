"""Benchmark: Azure Storage requests per task-commit, counted in Azurite's own request log.

A keyed count (``_storage_task.CountOrRead``: RocksDB store ``counts`` backed up to the blob store, task checkpoints
in the same container, one output) runs through :class:`sparza.testing.TestRunner` (the engine's container mode and
commit code, without Spark) against an Azurite that logs every request it serves. Each task first loads its keys,
then ``--commits`` batches each change a share of them (random keys; ``read`` batches only read). Every request
Azurite logged between two marker requests is counted and divided by the task-commits of those batches, by
operation; sparza's own count of the same requests (its ``storage.<scope>`` metrics, from ``TestRunner.metrics()``)
is printed beside it, operation by operation, with its scopes. After the last batch each task's store is restored on
a "new host" from its checkpoint's snapshot id (timed: restore must not get slower).

The same cases run on two trees in the same run, each in its own process with its own Azurite: this tree and the
baseline (``--baseline-src``: the ``src`` of a ``git worktree`` of the commit before the change), or, without it,
this tree with ``stores.counts.backup.delta.max.bytes: 0`` (files every commit).

Usage: ``python bench/storage_requests.py [--keys 10000,100000] [--tasks 2] [--commits 20]
[--baseline-src /tmp/base/src]``
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BENCH = Path(__file__).resolve().parent

MEASURES = ("Azure Storage requests per task-commit of a keyed count (RocksDB store backed up to the blob store, "
            "task checkpoints in it), counted in Azurite's request log, by store size and share of keys changed "
            "per commit, against the tree before the change in the same run; and the restore time of the last "
            "committed state.")
GOAL = ("≤ 4 requests per task-commit at 1 % changed (10,000 and 100,000 keys a task), ≤ 1 for a commit that "
        "changed nothing, restore at most 1.2 times the baseline's")
_LINE = re.compile(r'"(GET|PUT|POST|DELETE|HEAD) (\S+) HTTP')


def operation(method: str, path: str) -> str:
    """The Azure operation name of a logged request (as the price list and the account limits name them)."""
    query = path.partition("?")[2]
    params = dict(p.partition("=")[::2] for p in query.split("&") if p)
    comp, restype = params.get("comp", ""), params.get("restype", "")
    if restype == "container":
        return {"list": "List Blobs", "": {"PUT": "Create Container", "GET": "Get Container Properties",
                                           "HEAD": "Get Container Properties", "DELETE": "Delete Container"
                                           }.get(method, f"{method} container")}.get(comp, f"container {comp}")
    names = {("PUT", ""): "Put Blob", ("GET", ""): "Get Blob", ("HEAD", ""): "Get Blob Properties",
             ("DELETE", ""): "Delete Blob", ("PUT", "tags"): "Set Blob Tags", ("GET", "tags"): "Get Blob Tags",
             ("PUT", "metadata"): "Set Blob Metadata", ("GET", "metadata"): "Get Blob Metadata",
             ("PUT", "block"): "Put Block", ("PUT", "blocklist"): "Put Block List", ("POST", "batch"): "Blob Batch",
             ("PUT", "properties"): "Set Blob Properties"}
    return names.get((method, comp), f"{method} {comp}".strip())


# --- child: one tree, one Azurite ---------------------------------------------------------------------------
class _Azurite:
    """Azurite with its request log on (the product's dev server runs it silent)."""

    def __init__(self, work: Path) -> None:
        from sparza.devservers.storage import find_azurite

        self.log_path = work / "requests.log"
        ports = [_free_port() for _ in range(3)]
        self.blob_port, self.table_port, queue_port = ports
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - the child's stdout
        self.proc = subprocess.Popen(
            [find_azurite(), "--location", str(work / "data"), "--blobHost", "127.0.0.1", "--blobPort",
             str(self.blob_port), "--tableHost", "127.0.0.1", "--tablePort", str(self.table_port), "--queueHost",
             "127.0.0.1", "--queuePort", str(queue_port), "--skipApiVersionCheck", "--loose",
             "--disableProductStyleUrl"], stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        from sparza.azure import StorageAccount

        self.account = StorageAccount.emulator(self.blob_port, self.table_port)
        deadline = time.monotonic() + 60
        while True:
            try:
                self.client = self.account.blob_service_client(retry_total=0, timeout_s=5)
                self.client.get_service_properties()
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    @property
    def connection_string(self) -> str:
        return str(self.account.connection_string())

    def mark(self) -> int:
        """Send a marker request, wait until the log shows it, and return the log's line count before it."""
        name = f"bench-marker-{uuid.uuid4().hex}"
        from azure.core.exceptions import ResourceNotFoundError

        try:
            self.client.get_container_client(name).get_container_properties()
        except ResourceNotFoundError:
            pass
        while True:
            lines = self.log_path.read_text(errors="replace").splitlines()
            for i, line in enumerate(lines):
                if name in line:
                    return i
            time.sleep(0.05)

    def requests(self, start: int, end: int) -> Counter[str]:
        """Requests logged between two marks (the marker requests excluded), by operation."""
        lines = self.log_path.read_text(errors="replace").splitlines()[start + 1:end]
        out: Counter[str] = Counter()
        for line in lines:
            m = _LINE.search(line)
            if m is not None and "bench-marker-" not in m.group(2):
                out[operation(m.group(1), m.group(2))] += 1
        return out

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)
        self._log.close()


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _runner(azurite: _Azurite, container: str, tasks: int, batch_messages: int, extra: dict[str, str]) -> Any:
    from sparza.testing import TestRunner

    class AzureRunner(TestRunner):
        def _final_values(self) -> dict[str, str]:
            values = super()._final_values()
            values.update({"blob.store.manager.factory": "azure", "blob.store.azure.container": container,
                           "azure.storage.connect": azurite.connection_string})
            return values

    config = {"stores.counts.factory": "rocksdb", "stores.counts.key.serde": "string",
              "stores.counts.msg.serde": "json", "stores.counts.backup.factories": "blobstore",
              "systems.mem.streams.counts.samza.key.serde": "string",
              "systems.mem.streams.counts.samza.msg.serde": "json",
              "systems.mem.streams.events.samza.key.serde": "string",
              "systems.mem.streams.events.samza.msg.serde": "json",
              "task.max.batch.messages": str(batch_messages), **extra}
    runner = AzureRunner.of("_storage_task.CountOrRead", config)
    runner.add_input("mem.events", partitions=tasks).add_output("mem.counts", partitions=tasks)
    return runner


def _messages(tasks: int, keys: list[list[str]], value: str) -> dict[int, list[Any]]:
    from sparza.testing import TestMessage

    return {p: [TestMessage(value, key=k, partition=p) for k in keys[p]] for p in range(tasks)}


def run_case(azurite: _Azurite, case: dict[str, Any], extra: dict[str, str]) -> dict[str, Any]:
    """Load, warm up, then ``commits`` measured batches of the case; returns requests by operation."""
    tasks, n, share, commits = case["tasks"], case["keys"], case["share"], case["commits"]
    rng = random.Random(7)
    container = f"bench{uuid.uuid4().hex[:12]}"
    key_space = [[f"p{p}-k{i:07d}" for i in range(n)] for p in range(tasks)]
    changed = max(1, int(n * share))
    runner = _runner(azurite, container, tasks, max(n, changed), extra)
    try:
        runner.add_input("mem.events", _messages(tasks, key_space, "count"))
        runner.run_batch()  # the load: every key once
        for _ in range(3):  # warm: the first commits after a load upload the state once
            runner.add_input("mem.events", _messages(tasks, [rng.sample(ks, changed) for ks in key_space], "count"))
            runner.run_batch()
        value = "read" if case["read_only"] else "count"
        start = azurite.mark()
        counted_before = _product_counts(runner)
        began = time.perf_counter()
        for _ in range(commits):
            runner.add_input("mem.events", _messages(tasks, [rng.sample(ks, changed) for ks in key_space], value))
            runner.run_batch()
        seconds = time.perf_counter() - began
        counted_after = _product_counts(runner)
        end = azurite.mark()
        ops = azurite.requests(start, end)
        checkpoints = runner.checkpoints()
        restore_s = _restore(runner, checkpoints, azurite, container)
        id_bytes = max(len(str(cp.stores.get("counts", ""))) for cp in checkpoints.values())
    finally:
        runner.close()
    task_commits = tasks * commits
    out = {**case, "task_commits": task_commits, "requests": sum(ops.values()),
           "per_commit": sum(ops.values()) / task_commits,
           "by_operation": {k: v / task_commits for k, v in sorted(ops.items())}, "seconds": seconds,
           "restore_s": restore_s, "snapshot_id_bytes": id_bytes}
    if counted_before is not None and counted_after is not None:
        counted = counted_after - counted_before
        by_op: Counter[str] = Counter()
        by_scope: Counter[str] = Counter()
        for (group, op), n in counted.items():
            by_op[_azure_name(op)] += n
            by_scope[group] += n
        out.update({"product_requests": sum(counted.values()),
                    "product_per_commit": sum(counted.values()) / task_commits,
                    "product_by_operation": {k: v / task_commits for k, v in sorted(by_op.items())},
                    "product_by_scope": {k: v / task_commits for k, v in sorted(by_scope.items())},
                    "product_minus_azurite": {k: by_op[k] - ops[k] for k in sorted(set(by_op) | set(ops))
                                              if by_op[k] != ops[k]}})
    return out


def _product_counts(runner: Any) -> Counter[tuple[str, str]] | None:
    """sparza's own count of its storage requests so far, by (``storage.<scope>`` group, operation); None for a tree
    that does not count them (a baseline from before the counting)."""
    metrics = getattr(runner, "metrics", None)
    if metrics is None:
        return None
    out: Counter[tuple[str, str]] = Counter()
    for group, values in metrics().snapshot().items():
        if group.startswith("storage."):
            for name, value in values.items():
                if name != "storage-requests":
                    out[(group, name)] += int(value)
    return out


def _azure_name(operation: str) -> str:
    """sparza's operation name as :func:`operation` names the log's lines (``put-blob`` -> ``Put Blob``; the log does
    not show a lease's action)."""
    if operation.startswith("lease-blob-"):
        return "PUT lease"
    return " ".join(word.capitalize() for word in operation.split("-"))


def _restore(runner: Any, checkpoints: dict[str, Any], azurite: _Azurite, container: str) -> float:
    """Seconds to restore every task's store from its checkpoint's snapshot id into a new dir (a new host)."""
    from sparza.blobstore.azure import AzureBlobStoreManager
    from sparza.state.backup import StateBackup

    manager = AzureBlobStoreManager(container, {"azure.storage.connect": azurite.connection_string},
                                    create_container=False)
    total = 0.0
    try:
        with tempfile.TemporaryDirectory(prefix="sparza-bench-restore-") as tmp:
            for task, cp in checkpoints.items():
                backup = StateBackup(manager, "test", "1", task, progress=False)
                try:
                    began = time.perf_counter()
                    backup.restore(cp.stores["counts"], Path(tmp) / task.replace(" ", "_"), reupload_deleted=False)
                    total += time.perf_counter() - began
                finally:
                    backup.close()
    finally:
        manager.close()
    return total


def _resident() -> None:
    """Keep every task resident between batches, as a container does (``Container`` sets ``stores.resident``):
    TestRunner otherwise runs the micro-batch mode's path, which closes stores after each commit."""
    from sparza.engine import executor, instance

    original = instance.get_instance

    def get_instance(engine: Any, split: Any, *, resident: bool = False) -> Any:
        return original(engine, split, resident=True)

    executor.get_instance = get_instance  # type: ignore[assignment]


def child(cases: list[dict[str, Any]], extra: dict[str, str]) -> None:
    sys.path.insert(0, str(BENCH))
    _resident()
    with tempfile.TemporaryDirectory(prefix="sparza-bench-azurite-") as tmp:
        azurite = _Azurite(Path(tmp))
        try:
            for case in cases:
                print(json.dumps(run_case(azurite, case, extra)), flush=True)
        finally:
            azurite.close()


# --- parent ---------------------------------------------------------------------------------------------------
def _variant(src: Path, cases: list[dict[str, Any]], extra: dict[str, str]) -> list[dict[str, Any]]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(src), str(ROOT), str(BENCH)])}
    out = subprocess.run([sys.executable, __file__, "--child", json.dumps({"cases": cases, "extra": extra})],
                         env=env, check=True, stdout=subprocess.PIPE, text=True, cwd=str(src.parent))
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


def _label(case: dict[str, Any]) -> str:
    what = "nothing changed (reads only)" if case["read_only"] else f"{case['share']:.0%} changed"
    return f"{case['tasks']} tasks, {case['keys']:,} keys a task, {what}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--keys", default="10000,100000")
    parser.add_argument("--tasks", type=int, default=2)
    parser.add_argument("--commits", type=int, default=20)
    parser.add_argument("--baseline-src", type=Path, default=None,
                        help="src dir of the tree before the change (default: this tree with deltas off)")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        spec = json.loads(args.child)
        child(spec["cases"], spec["extra"])
        return
    sizes = [int(k) for k in args.keys.split(",")]
    cases = [{"tasks": args.tasks, "keys": n, "share": 0.01, "read_only": False, "commits": args.commits}
             for n in sizes]
    cases.append({"tasks": args.tasks, "keys": sizes[0], "share": 0.10, "read_only": False, "commits": args.commits})
    cases.append({"tasks": args.tasks, "keys": sizes[0], "share": 0.01, "read_only": True, "commits": args.commits})
    load_before = os.getloadavg()
    new = _variant(ROOT / "src", cases, {})
    if args.baseline_src is not None:
        base = _variant(args.baseline_src.resolve(), cases, {})
        base_label = f"tree before the change ({args.baseline_src})"
    else:
        base = _variant(ROOT / "src", cases, {"stores.counts.backup.delta.max.bytes": "0"})
        base_label = "this tree, stores.counts.backup.delta.max.bytes: 0"
    load_after = os.getloadavg()
    sys.path.insert(0, str(BENCH))
    import _report

    rows = []
    for b, n in zip(base, new, strict=True):
        rows.append([_label(n), f"{b['per_commit']:.1f}", f"{n['per_commit']:.2f}",
                     f"{b['restore_s'] * 1000:.0f} ms", f"{n['restore_s'] * 1000:.0f} ms",
                     f"{n['snapshot_id_bytes']:,}"])
    table = _report.table(["case", "baseline req/task-commit", "now req/task-commit", "baseline restore",
                           "now restore", "largest snapshot id (bytes in the checkpoint)"], rows)
    ops = sorted({op for r in new + base for op in r["by_operation"]})
    op_rows = [[op] + [f"{r['by_operation'].get(op, 0):.2f}" for pair in zip(base, new, strict=True) for r in pair]
               for op in ops]
    op_table = _report.table(["operation"] + [f"{tag} {i + 1}" for i in range(len(new)) for tag in ("base", "now")],
                             op_rows)
    agree = []
    for r in new:
        if "product_per_commit" not in r:
            continue
        diff = r["product_minus_azurite"]
        scopes = ", ".join(f"{g.removeprefix('storage.')} {v:.2f}" for g, v in r["product_by_scope"].items())
        agree.append([_label(r), f"{r['per_commit']:.2f}", f"{r['product_per_commit']:.2f}",
                      "same requests, operation by operation" if not diff else
                      "differ: " + ", ".join(f"{k} {v:+d}" for k, v in diff.items()), scopes or "none"])
    agree_table = _report.table(["case (this tree)", "Azurite's log req/task-commit", "sparza's count req/task-commit",
                                 "by operation", "sparza's count by scope, per task-commit"], agree) if agree else ""
    print(table)
    print()
    print(op_table)
    if agree_table:
        print()
        print(agree_table)
    print(f"machine load {load_before[0]:.1f} before, {load_after[0]:.1f} after")  # shown, not recorded
    body = (f"Goal: {GOAL}.\n\nBaseline: {base_label}; each variant in its own process with its own Azurite, in the "
            f"same run. {args.commits} measured commits per task after a load and 3 warm-up commits.\n\n"
            f"{table}\n\nRequests per task-commit by operation (cases in the order above, baseline then now):\n\n"
            f"{op_table}\n"
            + (f"\nsparza's own count of the same requests (its storage.<scope> metrics), beside Azurite's log:\n\n"
               f"{agree_table}\n" if agree_table else ""))
    command = ("flock /work/heavy.lock .venv/bin/python bench/storage_requests.py"
               + (f" --baseline-src {args.baseline_src}" if args.baseline_src else "")
               + (f" --keys {args.keys}" if args.keys != "10000,100000" else "")
               + (f" --commits {args.commits}" if args.commits != 20 else ""))
    _report.record("storage_requests", "Storage requests per task-commit", command, body, measures=MEASURES)
    (_report.SECTIONS / "storage_requests.json").write_text(json.dumps({"base": base, "now": new}, indent=1))


if __name__ == "__main__":
    main()
