"""``KafkaSystemAdmin``: topics as streams: create, describe, partition counts and offsets.

Offsets are Kafka's integer offsets written as decimal strings. ``upcoming`` is the partition's
end as a ``read_committed`` consumer sees it (the last stable offset: the high watermark when no
transaction is open), so a planned batch never waits for an open transaction. Offsets are not
dense: transaction markers, aborted records and compaction leave gaps, so the arithmetic below
gives bounds (a batch of *at most* n messages, a lag of *at most* n), never a reason to skip.

A Tansu broker (the dev broker) reports as end the base offset of the last record batch + 1, which
hides every other record of that batch: one producer request of 100 records would show as 1. On
such a broker (``kafka.end.offsets.verify``: auto detects it by its cluster id) the end is read,
not trusted: a fetch from the reported end - 1 returns that whole batch, and the real end is one
past its last record. Only partitions whose reported end changed since the last look are fetched.
While a transaction is open, Tansu also reports a ``read_committed`` end of 0 (Kafka reports the last
stable offset); there the end is read too: a ``read_committed`` fetch stops at the real last stable
offset, so the probe reads from the end known last (never past the real one: it only grows) to its
end-of-partition event.

Because offsets are not dense, ``count_between`` is only a bound; where a count decides an error (an
ended task's input grew) :meth:`KafkaSystemAdmin.count_messages` reads the range and counts what a
consumer would get.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from sparza.config import Config
from sparza.errors import JOB_CONFIG_PLACEHOLDER, SparzaError
from sparza.streams import SystemStreamPartition
from sparza.systems import StreamSpec, SystemStreamMetadata, SystemStreamPartitionMetadata
from sparza.systems.kafka.settings import KafkaSystemSettings, redact_conf

__all__ = ["KafkaError", "KafkaSystemAdmin", "PartitionCountMismatchError", "TopicNotFoundError"]


class KafkaError(SparzaError):
    """A Kafka request failed (after librdkafka's own retries)."""


def open_client(kind: str, make: Callable[[dict[str, Any]], Any], conf: dict[str, Any], system: str) -> Any:
    """The librdkafka ``kind`` (admin client, consumer, producer) ``make(conf)`` builds; a refused setting
    fails with an error naming the system and the settings (secrets redacted, callbacks left out)."""
    try:
        return make(conf)
    except Exception as exc:
        shown = redact_conf({k: v for k, v in conf.items() if not callable(v)})
        raise KafkaError(f"cannot create a Kafka {kind} for system {system!r} with {shown}: {exc}") from exc


class TopicNotFoundError(KafkaError, LookupError):
    """The topic of a stream does not exist."""

    def __init__(self, topic: str, servers: str) -> None:
        self.topic = topic
        super().__init__(f"Kafka topic {topic!r} does not exist on {servers}: create it with "
                         f"'sparza stream create --system <s> {topic} --partitions N --config "
                         f"{JOB_CONFIG_PLACEHOLDER}' or your Kafka tools")


class PartitionCountMismatchError(KafkaError, ValueError):
    """A topic exists with another partition count than asked for."""

    def __init__(self, topic: str, existing: int, wanted: int) -> None:
        super().__init__(f"Kafka topic {topic!r} exists with {existing} partitions, not {wanted}: "
                         "delete it or use another name (sparza never changes a topic's partition count)")


class KafkaSystemAdmin:
    """Stream management for a ``kafka`` system (see the module docstring)."""

    def __init__(self, system_name: str, config: Config) -> None:
        self.system_name = system_name
        self.settings = KafkaSystemSettings(system_name, config)
        self._client: Any = None
        self._partitions: dict[str, int] = {}
        self._verify: bool | None = None      # read the real end (see the module docstring); None: not decided yet
        self._probe: Any = None               # the consumer that reads it
        self._real_ends: dict[tuple[str, int], tuple[int, int]] = {}  # (topic, p) -> (reported, real)
        self._stable_ends: dict[tuple[str, int], int] = {}  # (topic, p) -> the read_committed end returned last
        self._counts: OrderedDict[tuple[str, int, int, int], int] = OrderedDict()  # see count_messages

    def __getstate__(self) -> dict[str, Any]:
        return {"system_name": self.system_name, "settings": self.settings, "_client": None, "_partitions": {},
                "_verify": None, "_probe": None, "_real_ends": {}, "_stable_ends": {}, "_counts": OrderedDict()}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    @property
    def client(self) -> Any:
        """The librdkafka admin client (opened on first use)."""
        if self._client is None:
            from confluent_kafka.admin import AdminClient

            self._client = open_client("admin client", AdminClient, self.settings.admin_conf(), self.system_name)
        return self._client

    @property
    def _timeout(self) -> float:
        return self.settings.request_timeout_s

    # --- create / describe -------------------------------------------------------------------
    def create_stream(self, spec: StreamSpec) -> bool:
        """Create topic ``spec.stream`` with ``spec.partitions`` partitions (``spec.properties`` become
        topic configs). True when created; False when it exists with that count; raises
        :class:`PartitionCountMismatchError` when it exists with another."""
        from confluent_kafka import KafkaError as RdKafkaError
        from confluent_kafka.admin import NewTopic

        if spec.partitions < 1:
            raise ValueError(f"a stream needs at least 1 partition, got {spec.partitions}")
        name = self.settings.topic(spec.stream)
        topic = NewTopic(name, num_partitions=spec.partitions,
                         replication_factor=self.settings.replication_factor, config=dict(spec.properties))
        future = self.client.create_topics([topic], request_timeout=self._timeout)[name]
        try:
            future.result(timeout=self._timeout)
        except Exception as exc:
            error = exc.args[0] if exc.args else None
            if getattr(error, "code", lambda: None)() != RdKafkaError.TOPIC_ALREADY_EXISTS:
                raise KafkaError(f"cannot create Kafka topic {name!r}: {exc}") from exc
            self._partitions.pop(spec.stream, None)
            existing = self.partition_count(spec.stream)
            if existing != spec.partitions:
                raise PartitionCountMismatchError(name, existing, spec.partitions) from None
            return False
        self._partitions[spec.stream] = spec.partitions
        return True

    def stream_location(self, stream: str) -> str:
        """``Kafka topic <name> on <bootstrap servers>``: where ``stream`` lives, for messages."""
        return f"Kafka topic {self.settings.topic(stream)} on {self.settings.bootstrap_servers()}"

    def exists(self, stream: str) -> bool:
        """True when the topic exists."""
        try:
            self.partition_count(stream)
        except TopicNotFoundError:
            return False
        return True

    def partition_count(self, stream: str) -> int:
        """How many partitions the topic of ``stream`` has (cached: sparza never changes it)."""
        count = self._partitions.get(stream)
        if count is None:
            topic = self.settings.topic(stream)
            client = self.client
            try:
                metadata = client.list_topics(topic=topic, timeout=self._timeout)
            except Exception as exc:
                raise KafkaError(f"cannot read the metadata of Kafka topic {topic!r}: {exc}") from exc
            info = metadata.topics.get(topic)
            # A missing topic comes back with an error or (some brokers) with no partitions.
            if info is None or info.error is not None or not info.partitions:
                raise TopicNotFoundError(topic, self.settings.bootstrap_servers())
            count = len(info.partitions)
            self._partitions[stream] = count
        return count

    # --- offsets -----------------------------------------------------------------------------
    def offset_comparator(self, a: str, b: str) -> int:
        """Negative, zero or positive as offset ``a`` is before, equal to or after ``b``."""
        x, y = int(a), int(b)
        return (x > y) - (x < y)

    def offset_after(self, ssp: SystemStreamPartition, start: str, end: str, n: int) -> str:
        """``start + n`` capped at ``end``: a batch of at most ``n`` messages (gaps make it fewer)."""
        if n < 1:
            raise ValueError(f"offset_after needs n >= 1, got {n}")
        return str(min(int(start) + n, int(end)))

    def count_between(self, ssp: SystemStreamPartition, start: str, end: str) -> int:
        """``end - start``: at most that many messages lie in ``[start, end)`` (markers count too)."""
        return max(0, int(end) - int(start))

    def count_messages(self, ssp: SystemStreamPartition, start: str, end: str) -> int:
        """How many messages a ``read_committed`` consumer reads in ``[start, end)``, counted by reading them:
        a transaction's commit marker after a task's last message is not a message after its end. Counts are
        kept for the last ranges asked (a range's records do not change), so asking again costs nothing."""
        s, e = int(start), int(end)
        if s >= e:
            return 0
        topic = self.settings.topic(ssp.stream)
        key = (topic, ssp.partition, s, e)
        if key in self._counts:
            self._counts.move_to_end(key)
            return self._counts[key]
        tp = (topic, ssp.partition)
        counted = {tp: 0}
        # A range past the last stable offset may still get its open transaction's records: not kept.
        whole = self._read_ends({tp: s}, {tp: s}, whole_batch=False, until={tp: e}, counted=counted)[tp] >= e
        count = counted[tp]
        if whole:
            self._counts[key] = count
            if len(self._counts) > 256:
                self._counts.popitem(last=False)
        return count

    def offsets_for_times(self, ssps: list[SystemStreamPartition], time_ms: int) -> dict[SystemStreamPartition,
                                                                                          str | None]:
        """Kafka's offsets-for-times (ListOffsets by timestamp): per SSP, the first offset whose record timestamp is
        at or after ``time_ms``, or None. sparza's producer gives a record its event time as timestamp (a header
        only for event times of 0 or less, which no positive time reaches), so no message of event time at or after
        ``time_ms`` comes before it."""
        from confluent_kafka import TopicPartition
        from confluent_kafka.admin import OffsetSpec

        request = {TopicPartition(self.settings.topic(ssp.stream), ssp.partition): OffsetSpec.for_timestamp(time_ms)
                   for ssp in ssps}
        by_tp = {(self.settings.topic(ssp.stream), ssp.partition): ssp for ssp in ssps}
        out: dict[SystemStreamPartition, str | None] = {}
        try:
            futures = self.client.list_offsets(request, request_timeout=self._timeout)
            for tp, future in futures.items():
                offset = int(future.result(timeout=self._timeout).offset)
                out[by_tp[(tp.topic, tp.partition)]] = str(offset) if offset >= 0 else None
        except Exception as exc:
            raise KafkaError(f"cannot list the offsets of Kafka topics {sorted({t for t, _ in by_tp})} by time "
                             f"{time_ms}: {exc}") from exc
        return out

    def watermarks(self, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], tuple[int, int]]:
        """Per (topic, partition): (earliest offset, read_committed end offset), in one round trip each."""
        from confluent_kafka import IsolationLevel, TopicPartition
        from confluent_kafka.admin import OffsetSpec

        committed = str(self.settings.consumer_conf().get("isolation.level")) != "read_uncommitted"
        isolation = IsolationLevel.READ_COMMITTED if committed else IsolationLevel.READ_UNCOMMITTED
        verify = self._verifies_end_offsets()
        asks = [(OffsetSpec.earliest(), isolation), (OffsetSpec.latest(), isolation)]
        if verify and committed:  # the high watermark: above the end, a transaction is open (see the docstring)
            asks.append((OffsetSpec.latest(), IsolationLevel.READ_UNCOMMITTED))
        out: dict[tuple[str, int], list[int]] = {tp: [0] * len(asks) for tp in partitions}
        for slot, (spec, level) in enumerate(asks):
            request = {TopicPartition(t, p): spec for t, p in partitions}
            try:
                futures = self.client.list_offsets(request, isolation_level=level, request_timeout=self._timeout)
                for tp, future in futures.items():
                    out[(tp.topic, tp.partition)][slot] = int(future.result(timeout=self._timeout).offset)
            except Exception as exc:
                raise KafkaError(f"cannot list the offsets of Kafka topics "
                                 f"{sorted({t for t, _ in partitions})}: {exc}") from exc
        if verify:
            open_txn = {tp: b for tp, b in out.items() if len(b) > 2 and b[1] < b[2]}
            self._read_real_ends({tp: b for tp, b in out.items() if tp not in open_txn})
            self._read_stable_ends(open_txn)
            self._stable_ends.update({tp: b[1] for tp, b in out.items()})
        return {tp: (b[0], b[1]) for tp, b in out.items()}

    def _verifies_end_offsets(self) -> bool:
        """Whether reported ends are checked by reading (``kafka.end.offsets.verify``; auto: a Tansu broker)."""
        if self._verify is None:
            setting = self.settings.verify_end_offsets
            if setting is None:
                try:
                    cluster_id = self.client.list_topics(timeout=self._timeout).cluster_id or ""
                except Exception as exc:
                    raise KafkaError(f"cannot read the metadata of Kafka system {self.system_name!r}: {exc}") from exc
                setting = cluster_id.lower().startswith("tansu")
            self._verify = setting
        return self._verify

    def _probe_consumer(self) -> Any:
        """The ``read_committed`` consumer that reads ends and counts (opened on first use)."""
        if self._probe is None:
            from confluent_kafka import Consumer

            conf = self.settings.consumer_conf()
            conf["group.id"] = f"{conf['group.id']}-end-offsets"
            # The EOF that ends a partition's probe comes one broker-side fetch wait after its records.
            conf["fetch.wait.max.ms"] = 2
            self._probe = Consumer(conf)
        return self._probe

    def _read_real_ends(self, marks: dict[tuple[str, int], list[int]]) -> None:
        """Replace each non-empty partition's reported end by one past the last record of the batch it
        points into (see the module docstring); partitions whose reported end did not change keep the
        end read last time."""
        todo: dict[tuple[str, int], int] = {}
        for tp, bounds in marks.items():
            lo, hi = bounds[0], bounds[1]
            known = self._real_ends.get(tp)
            if known is not None and known[0] == hi:
                bounds[1] = known[1]
            elif hi > lo:
                todo[tp] = hi
        if not todo:
            return
        # A fetch returns the batch at the reported end - 1 whole (Kafka never splits a record batch), so a
        # partition that got records has its real end after one quiet poll.
        ends = self._read_ends({tp: hi - 1 for tp, hi in todo.items()}, dict(todo), whole_batch=True)
        for tp, hi in todo.items():
            self._real_ends[tp] = (hi, ends[tp])
            marks[tp][1] = ends[tp]

    def _read_stable_ends(self, marks: dict[tuple[str, int], list[int]]) -> None:
        """Replace the ``read_committed`` end of partitions with an open transaction by the real last stable
        offset: a ``read_committed`` fetch from at most that offset stops there with its end-of-partition
        event. The read starts at the end returned last (the stable end only grows) unless the high watermark
        fell below it (the topic lost its data: read from its start)."""
        if not marks:
            return
        starts: dict[tuple[str, int], int] = {}
        for tp, (lo, _, high) in marks.items():
            known = self._stable_ends.get(tp, lo)
            starts[tp] = max(lo, known) if known <= high else lo
        ends = self._read_ends(starts, dict(starts), whole_batch=False)
        for tp, end in ends.items():
            marks[tp][1] = end

    def _read_ends(self, starts: dict[tuple[str, int], int], ends: dict[tuple[str, int], int], *,
                   whole_batch: bool, until: dict[tuple[str, int], int] | None = None,
                   counted: dict[tuple[str, int], int] | None = None) -> dict[tuple[str, int], int]:
        """``ends`` raised to one past the last record the probe reads from ``starts`` or to the offset of the
        end-of-partition event; with ``whole_batch`` a partition that got records is done at the first quiet
        poll, else only at its end-of-partition event or, with ``until``, at its first record at or past
        ``until``. ``counted`` gets the records read before that."""
        from confluent_kafka import KafkaError as RdKafkaError
        from confluent_kafka import TopicPartition

        probe = self._probe_consumer()
        probe.assign([TopicPartition(t, p, start) for (t, p), start in starts.items()])
        waiting = set(starts)
        received: set[tuple[str, int]] = set()
        deadline = time.monotonic() + self._timeout
        try:
            while waiting and time.monotonic() < deadline:
                # poll returns at the first event (consume would wait out its whole timeout, 20 ms or more
                # per changed end: a container's every poll after new input paid it), then take what is
                # buffered. Most partitions end with their EOF event, a fetch wait after their records.
                first = probe.poll(0.02)
                if first is None:
                    if whole_batch:
                        waiting -= received
                    continue
                for msg in [first, *probe.consume(10_000, timeout=0)]:
                    tp = (msg.topic(), msg.partition())
                    error = msg.error()
                    if error is not None:
                        if error.code() == RdKafkaError._PARTITION_EOF and tp in waiting:
                            ends[tp] = max(ends[tp], msg.offset())
                            waiting.discard(tp)
                        continue
                    if tp in ends and msg.offset() >= starts[tp]:
                        ends[tp] = max(ends[tp], msg.offset() + 1)
                        received.add(tp)
                        if until is not None and tp in waiting:
                            if msg.offset() >= until[tp]:
                                waiting.discard(tp)
                            elif counted is not None:
                                counted[tp] += 1
        finally:
            probe.unassign()
        if waiting:
            raise KafkaError(f"cannot read Kafka partitions {sorted(waiting)} to their end within "
                             f"{self._timeout:.0f}s (systems.{self.system_name}.kafka.end.offsets.verify)")
        return ends

    def get_system_stream_metadata(self, streams: set[str] | list[str]) -> dict[str, SystemStreamMetadata]:
        """Per topic and partition: ``oldest`` (None when empty), ``newest`` (the offset before
        ``upcoming``; it may be a transaction marker) and ``upcoming``."""
        counts = {stream: self.partition_count(stream) for stream in streams}
        topics = {stream: self.settings.topic(stream) for stream in counts}
        marks = self.watermarks([(topics[s], p) for s, n in counts.items() for p in range(n)])
        out: dict[str, SystemStreamMetadata] = {}
        for stream, count in counts.items():
            parts: dict[int, SystemStreamPartitionMetadata] = {}
            for p in range(count):
                lo, hi = marks[(topics[stream], p)]
                if hi > lo:
                    parts[p] = SystemStreamPartitionMetadata(str(lo), str(hi - 1), str(hi))
                else:
                    parts[p] = SystemStreamPartitionMetadata(None, None, str(hi))
            out[stream] = SystemStreamMetadata(stream, parts, {"partitions": str(count)})
        return out

    def close(self) -> None:
        """Drop the admin client (and the consumer that reads real ends)."""
        self._client = None
        if self._probe is not None:
            self._probe.close()
            self._probe = None
