"""Create the example's streams and append input messages: ``python -m examples.keyed_count.load``.

Messages are 100-byte values keyed ``k0`` … ``k<keys-1>`` (round robin), written in commits of
``--commit-size`` rows, so the expected final count per key is easy to check.
"""

from __future__ import annotations

import argparse
import threading
from pathlib import Path

import pyarrow as pa

from sparza.config import Config
from sparza.streams import OutgoingMessageEnvelope, SystemStream
from sparza.systems import StreamSpec
from sparza.systems.delta import DeltaSystemAdmin, DeltaSystemProducer

__all__ = ["SteadyInput", "append_messages", "bulk_append", "create_streams", "main"]


def create_streams(config: Config, partitions: int = 4) -> None:
    """Create ``events`` (input) and ``counts`` (output) with ``partitions`` partitions each."""
    admin = DeltaSystemAdmin("delta", config)
    for stream in ("events", "counts"):
        admin.create_stream(StreamSpec(stream, partitions))


def append_messages(config: Config, messages: int, keys: int, *, start: int = 0, commit_size: int = 10_000,
                    source: str = "loader") -> None:
    """Append ``messages`` messages (message i has key ``k{i % keys}``), ``commit_size`` per Delta commit."""
    producer = DeltaSystemProducer("delta", config)
    producer.register(source)
    stream = SystemStream("delta", "events")
    done = 0
    while done < messages:
        n = min(commit_size, messages - done)
        for i in range(start + done, start + done + n):
            key = f"k{i % keys}".encode()
            value = (f"message-{i}-".encode() + b"x" * 100)[:100]
            producer.send(source, OutgoingMessageEnvelope(stream, value, key=key, timestamp=1_700_000_000_000 + i))
        producer.flush(source)
        done += n


class SteadyInput:
    """Appends ``size`` messages (continuing :func:`append_messages`' numbering from ``start``) every
    ``interval_s`` in a thread, one Delta commit each: steady input for a job that runs meanwhile."""

    def __init__(self, config: Config, keys: int, size: int, *, start: int = 0, interval_s: float = 0.5) -> None:
        self.config, self.keys, self.size, self.interval_s = config, keys, size, interval_s
        self.appended = start
        """How many messages were appended in all (``start`` included)."""
        self.error: BaseException | None = None
        """What failed an append (the thread stops appending then)."""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="steady-input", daemon=True)

    def _run(self) -> None:
        try:
            while not self._stop.wait(self.interval_s):
                append_messages(self.config, self.size, self.keys, start=self.appended, commit_size=self.size)
                self.appended += self.size
        except BaseException as exc:  # read by the caller after stop()
            self.error = exc

    def start(self) -> SteadyInput:
        """Start appending."""
        self._thread.start()
        return self

    def stop(self) -> int:
        """Stop appending (after the running append); returns :attr:`appended`."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(60)
        return self.appended


def bulk_append(config: Config, messages: int, keys: int, partitions: int, *, commit_size: int = 250_000) -> None:
    """Fast path for big inputs (benchmarks): Arrow batches straight into each partition."""
    from sparza.systems.delta import partition_for

    producer = DeltaSystemProducer("delta", config)
    producer.register("loader")
    done = 0
    while done < messages:
        n = min(commit_size, messages - done)
        by_partition: dict[int, tuple[list[bytes], list[bytes], list[int]]] = {}
        for i in range(done, done + n):
            key = f"k{i % keys}".encode()
            p = partition_for(key, partitions)
            bucket = by_partition.setdefault(p, ([], [], []))
            bucket[0].append(key)
            bucket[1].append((f"message-{i}-".encode() + b"x" * 100)[:100])
            bucket[2].append(1_700_000_000_000 + i)
        for p, (ks, vs, ts) in by_partition.items():
            producer.send_batch("loader", "events", p, pa.table({"key": pa.array(ks, pa.binary()),
                                                                 "value": pa.array(vs, pa.binary()),
                                                                 "timestamp": pa.array(ts, pa.int64())}))
        producer.flush("loader")
        done += n


def main() -> None:
    """Command line: create the streams of a job config and append messages."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--config", default=str(Path(__file__).with_name("job.yaml")),
                        help="job config whose delta system holds the streams (default: the example's job.yaml)")
    parser.add_argument("--messages", type=int, default=10_000, help="how many messages to append")
    parser.add_argument("--keys", type=int, default=100, help="how many distinct keys (k0 ... k<keys-1>)")
    parser.add_argument("--partitions", type=int, default=4, help="partitions of new streams")
    parser.add_argument("--commit-size", type=int, default=10_000, help="messages per Delta commit")
    args = parser.parse_args()
    config = Config.from_file(args.config)
    create_streams(config, args.partitions)
    append_messages(config, args.messages, args.keys, commit_size=args.commit_size)
    print(f"appended {args.messages} messages over {args.keys} keys to delta.events")


if __name__ == "__main__":
    main()
