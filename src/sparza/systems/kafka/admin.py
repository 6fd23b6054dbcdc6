"""``KafkaSystemAdmin``: topics as streams: create, describe, partition counts and offsets.

Offsets are Kafka's integer offsets written as decimal strings. ``upcoming`` is the partition's
end as a ``read_committed`` consumer sees it (the last stable offset: the high watermark when no
transaction is open), so a planned batch never waits for an open transaction. Offsets are not
dense: transaction markers, aborted records and compaction leave gaps, so the arithmetic below
gives bounds (a batch of *at most* n messages, a lag of *at most* n), never a reason to skip.

Because offsets are not dense, ``count_between`` is only a bound; where a count decides an error (an
ended task's input grew) :meth:`KafkaSystemAdmin.count_messages` reads the range and counts what a
consumer would get.
"""

from __future__ import annotations

import contextlib
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any

from sparza.config import Config
from sparza.errors import JOB_CONFIG_PLACEHOLDER, SparzaError
from sparza.streams import SystemStreamPartition
from sparza.systems import StreamSpec, SystemStreamMetadata, SystemStreamPartitionMetadata
from sparza.systems.kafka.settings import KafkaSystemSettings, redact_conf

__all__ = ["KafkaError", "KafkaSystemAdmin", "KafkaUnavailableError", "PartitionCountMismatchError",
           "TopicNotFoundError"]

_OFFSET_INVALID = -1001
"""librdkafka's ``RD_KAFKA_OFFSET_INVALID``: an offset not known (a ListOffsets answer lost with its connection)."""


class KafkaError(SparzaError):
    """A Kafka request failed (after librdkafka's own retries)."""


class KafkaUnavailableError(KafkaError, ConnectionError):
    """A Kafka request kept failing with an error a retry may cure (a timeout, a coordinator loading or moving,
    brokers away): the batch is retried from its checkpoint, as when storage is unreachable, not judged the fault of
    the message it was writing."""


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
        self._counter: Any = None             # the read_committed consumer of count_messages
        self._counts: OrderedDict[tuple[str, int, int, int], int] = OrderedDict()  # see count_messages

    def __getstate__(self) -> dict[str, Any]:
        return {"system_name": self.system_name, "settings": self.settings, "_client": None, "_partitions": {},
                "_counter": None, "_counts": OrderedDict()}

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
        # An intermediate stream's records carry the event times of the application's input as their timestamps,
        # which may be older than the broker's retention.ms (a backfill, a replay): time retention would delete
        # them before the next stage reads them. sparza deletes what that stage committed (delete_messages).
        configs = {**({"retention.ms": "-1"} if spec.intermediate else {}), **spec.properties}
        topic = NewTopic(name, num_partitions=spec.partitions,
                         replication_factor=self.settings.replication_factor, config=configs)
        future = self.client.create_topics([topic], request_timeout=self._timeout)[name]
        try:
            future.result(timeout=self._timeout)
        except Exception as exc:
            error = exc.args[0] if exc.args else None
            if getattr(error, "code", lambda: None)() != RdKafkaError.TOPIC_ALREADY_EXISTS:
                raise KafkaError(f"cannot create Kafka topic {name!r}: {exc}") from exc
            self._partitions.pop(spec.stream, None)
            # Another client just created it (two tasks starting at once): brokers learn of a new topic one by
            # one, so the one asked may not know it yet. It exists; ask again within the request timeout.
            existing = self._partition_count(spec.stream, known_to_exist=True)
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

    def partition_of(self, stream: str, key: bytes) -> int:
        """The partition the system's producer writes a message with key bytes ``key`` to
        (:class:`~sparza.systems.SupportsKeyPartitioner`)."""
        from sparza.systems.kafka.partitioner import partition_for

        return partition_for(key, self.partition_count(stream))

    def partition_count(self, stream: str) -> int:
        """How many partitions the topic of ``stream`` has (cached; :meth:`get_system_stream_metadata` reads it again
        each time, so a topic given more partitions is seen within one metadata read)."""
        return self._partition_count(stream, known_to_exist=False)

    def _partition_count(self, stream: str, *, known_to_exist: bool) -> int:
        from confluent_kafka import KafkaError as ClientError

        count = self._partitions.get(stream)
        if count is not None:
            return count
        topic = self.settings.topic(stream)
        # A topic just created, or whose leader just died, comes back with LEADER_NOT_AVAILABLE (or with no
        # partitions yet) while the controller elects leaders: that is not a missing topic. Only
        # UNKNOWN_TOPIC_OR_PART says the topic is not there; the rest is asked again within the request timeout.
        client = self.client  # a config error (no brokers named) comes out as itself
        deadline = time.monotonic() + self._timeout
        pause = 0.05
        while True:
            try:
                metadata = client.list_topics(topic=topic, timeout=self._timeout)
            except Exception as exc:
                raise KafkaError(f"cannot read the metadata of Kafka topic {topic!r}: {exc}") from exc
            info = metadata.topics.get(topic)
            error = None if info is None else info.error
            missing = info is None or (error is not None and error.code() == ClientError.UNKNOWN_TOPIC_OR_PART)
            if error is None and info is not None and info.partitions:
                count = len(info.partitions)
                self._partitions[stream] = count
                return count
            if missing and not known_to_exist:
                raise TopicNotFoundError(topic, self.settings.bootstrap_servers())
            if time.monotonic() + pause > deadline:
                if missing:
                    raise TopicNotFoundError(topic, self.settings.bootstrap_servers())
                raise KafkaError(f"Kafka topic {topic!r} on {self.settings.bootstrap_servers()} has no leaders "
                                 f"within {self._timeout:.0f}s ({error}); check that its brokers are up "
                                 f"(systems.<system>.kafka.request.timeout.ms bounds the wait)")
            time.sleep(pause)
            pause = min(pause * 2, 1.0)

    def delete_messages(self, offsets: Mapping[SystemStreamPartition, str]) -> None:
        """Samza's ``deleteMessages`` (:class:`~sparza.systems.SupportsDeleteMessages`): delete the records before
        each partition's offset (Kafka's DeleteRecords: the partition's log start moves there)."""
        from confluent_kafka import TopicPartition

        wanted = [TopicPartition(self.settings.topic(ssp.stream), ssp.partition, int(offset))
                  for ssp, offset in offsets.items() if ssp.system == self.system_name and int(offset) > 0]
        if not wanted:
            return
        try:
            futures = self.client.delete_records(wanted, request_timeout=self._timeout,
                                                 operation_timeout=self._timeout)
            for future in futures.values():
                future.result(timeout=self._timeout)
        except Exception as exc:
            raise KafkaError(f"cannot delete the committed records of Kafka partitions "
                             f"{sorted((tp.topic, tp.partition) for tp in wanted)}: {exc}") from exc

    def skips_deleted_messages(self, stream: str) -> bool:
        """:class:`~sparza.systems.SupportsDeletedMessagesPolicy`: ``consumer.auto.offset.reset: smallest``."""
        return self.settings.skips_deleted_messages

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
        count, whole = self._count_records(topic, ssp.partition, s, e)
        # A range past the last stable offset may still get its open transaction's records: not kept.
        if whole:
            self._counts[key] = count
            if len(self._counts) > 256:
                self._counts.popitem(last=False)
        return count

    def _count_records(self, topic: str, partition: int, start: int, end: int) -> tuple[int, bool]:
        """(records a ``read_committed`` consumer reads in ``[start, end)``, whether it read to ``end``): it stops
        at its first record at or past ``end`` or at its end-of-partition event, which comes at the last stable
        offset (the range is then whole when that is at or past ``end``)."""
        from confluent_kafka import KafkaError as RdKafkaError
        from confluent_kafka import TopicPartition

        if self._counter is None:
            from confluent_kafka import Consumer

            conf = self.settings.consumer_conf()
            conf["group.id"] = f"{conf['group.id']}-counts"
            self._counter = open_client("consumer", Consumer, conf, self.system_name)
        consumer = self._counter
        consumer.assign([TopicPartition(topic, partition, start)])
        count = 0
        deadline = time.monotonic() + self._timeout
        try:
            while time.monotonic() < deadline:
                for msg in consumer.consume(10_000, timeout=0.05):
                    if msg.topic() != topic or msg.partition() != partition:
                        continue
                    error = msg.error()
                    if error is not None:
                        if error.code() == RdKafkaError._PARTITION_EOF:
                            return count, msg.offset() >= end
                        if error.fatal():
                            raise KafkaError(f"counting records of {topic}[{partition}]: {error.str()}")
                        continue
                    if msg.offset() >= end:
                        return count, True
                    if msg.offset() >= start:
                        count += 1
        finally:
            consumer.unassign()
        raise KafkaError(f"cannot count the records of Kafka partition {topic}[{partition}] in [{start}, {end}) "
                         f"within {self._timeout:.0f}s (systems.{self.system_name}.kafka.request.timeout.ms)")

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
        # -1: no record at or after the time; OFFSET_INVALID (-1001) is no answer at all, asked again.
        found = self._list_offsets(request, f"by time {time_ms}", lambda offset: offset != _OFFSET_INVALID)
        return {by_tp[tp]: str(offset) if offset >= 0 else None for tp, offset in found.items()}

    def watermarks(self, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], tuple[int, int]]:
        """Per (topic, partition): (earliest offset, end offset), the end as the configured isolation level
        sees it (``read_committed``: the last stable offset), in one round trip each."""
        from confluent_kafka import IsolationLevel, TopicPartition
        from confluent_kafka.admin import OffsetSpec

        committed = str(self.settings.consumer_conf().get("isolation.level")) != "read_uncommitted"
        isolation = IsolationLevel.READ_COMMITTED if committed else IsolationLevel.READ_UNCOMMITTED
        out: dict[tuple[str, int], list[int]] = {tp: [0, 0] for tp in partitions}
        for slot, (spec, what) in enumerate(((OffsetSpec.earliest(), "earliest"), (OffsetSpec.latest(), "latest"))):
            request = {TopicPartition(t, p): spec for t, p in partitions}
            # A partition's start and end are never negative: a negative answer is no answer (see _list_offsets).
            found = self._list_offsets(request, what, lambda offset: offset >= 0, isolation_level=isolation)
            for tp, offset in found.items():
                out[tp][slot] = offset
        return {tp: (b[0], b[1]) for tp, b in out.items()}

    def _list_offsets(self, request: dict[Any, Any], what: str, answered: Callable[[int], bool],
                      **options: Any) -> dict[tuple[str, int], int]:
        """One ListOffsets ``request`` ({TopicPartition: OffsetSpec}): per (topic, partition) the offset, asked
        again until the request timeout while the answer is transient, then a :class:`KafkaError` saying what.

        Transient, as seen around a broker's restart (``kill -9``, then started on its log dir): a request in
        flight when the connection drops is answered without an error but with OFFSET_INVALID (-1001), for
        every partition, so ``answered`` judges each offset and such an answer is asked again, never taken
        for where a partition ends. While the broker is down librdkafka answers ``_NOENT``; once it is back,
        the admin client's cached leader epochs are older than the broker's, and it answers
        FENCED_LEADER_EPOCH to every request (for minutes: it does not refresh its metadata itself) until
        a metadata request refreshes them, so each retry reads the topics' metadata first.
        """
        topics = sorted({tp.topic for tp in request})
        deadline = time.monotonic() + self._timeout
        pause = 0.1
        while True:
            cause: BaseException | None = None
            try:
                futures = self.client.list_offsets(request, request_timeout=self._timeout, **options)
                found = {(tp.topic, tp.partition): int(future.result(timeout=self._timeout).offset)
                         for tp, future in futures.items()}
                unanswered = sorted(tp for tp, offset in found.items() if not answered(offset))
                if not unanswered:
                    return found
                problem = (f"partition(s) {unanswered[:4]} answered offset {found[unanswered[0]]} (no answer; a "
                           "broker restarting?)")
            except Exception as exc:
                if not _retriable(exc):
                    raise KafkaError(f"cannot list the {what} offsets of Kafka topics {topics}: {exc}") from exc
                problem, cause = str(exc), exc
            if time.monotonic() + pause >= deadline:
                raise KafkaError(f"cannot list the {what} offsets of Kafka topics {topics} within "
                                 f"{self._timeout:.0f}s (systems.{self.system_name}.kafka.request.timeout.ms): "
                                 f"{problem}") from cause
            time.sleep(pause)
            pause = min(pause * 2, 1.0)
            for topic in topics:   # fresh leaders and leader epochs for the next attempt
                with contextlib.suppress(Exception):
                    self.client.list_topics(topic=topic, timeout=max(0.1, min(2.0, deadline - time.monotonic())))

    def get_system_stream_metadata(self, streams: set[str] | list[str]) -> dict[str, SystemStreamMetadata]:
        """Per topic and partition: ``oldest`` (None when empty), ``newest`` (the offset before
        ``upcoming``; it may be a transaction marker) and ``upcoming``."""
        for stream in streams:  # a topic may have been given more partitions (sparza.engine.partitions)
            self._partitions.pop(stream, None)
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

    def grow_stream(self, stream: str, partitions: int) -> int:
        """Give the topic ``partitions`` partitions in all (Kafka's CreatePartitions,
        :class:`~sparza.systems.SupportsPartitionGrowth`); returns how many it had. Keys a producer partitions by
        ``hash % count`` land elsewhere from then on: see :mod:`sparza.engine.partitions`."""
        from confluent_kafka.admin import NewPartitions

        self._partitions.pop(stream, None)
        before = self.partition_count(stream)
        if partitions <= before:
            raise KafkaError(f"Kafka topic {self.settings.topic(stream)!r} has {before} partitions: it can only get "
                             f"more (asked for {partitions})")
        name = self.settings.topic(stream)
        future = self.client.create_partitions([NewPartitions(name, partitions)],
                                               request_timeout=self._timeout)[name]
        try:
            future.result(timeout=self._timeout)
        except Exception as exc:
            raise KafkaError(f"cannot give Kafka topic {name!r} {partitions} partitions: {exc}") from exc
        deadline = time.monotonic() + self._timeout
        while True:  # the broker answers before every metadata response shows them
            self._partitions.pop(stream, None)
            if self.partition_count(stream) >= partitions or time.monotonic() > deadline:
                return before
            time.sleep(0.1)

    def close(self) -> None:
        """Drop the admin client (and the consumer that counts records)."""
        self._client = None
        if self._counter is not None:
            self._counter.close()
            self._counter = None


def _retriable(exc: BaseException) -> bool:
    """True for a Kafka error a retry cures (a leader moving or being elected, metadata not yet there, a request
    timing out): the client marks some retriable itself; per-partition results of ListOffsets come without the mark."""
    from confluent_kafka import KafkaError as ClientError

    error = exc.args[0] if exc.args else None
    if not isinstance(error, ClientError):
        return False
    # _NOENT: no leader known (the broker down); the epoch errors and OFFSET_NOT_AVAILABLE: a leader just elected.
    transient = {ClientError.NOT_LEADER_FOR_PARTITION, ClientError.LEADER_NOT_AVAILABLE,
                 ClientError.UNKNOWN_TOPIC_OR_PART, ClientError.REQUEST_TIMED_OUT, ClientError._TIMED_OUT,
                 ClientError._TRANSPORT, ClientError.NOT_COORDINATOR, ClientError._NOENT,
                 ClientError.FENCED_LEADER_EPOCH, ClientError.UNKNOWN_LEADER_EPOCH, ClientError.OFFSET_NOT_AVAILABLE}
    return bool(error.retriable()) or error.code() in transient
