"""``KafkaSystemProducer``: exactly-once output through Kafka transactions, one per task and batch.

Every source (task) that the runtime drives with a :class:`~sparza.systems.Transaction` gets its own
transactional producer with ``transactional.id = <app_id>@<system>`` (``app_id`` is
``<job.name>-<job.id>/<task>``), so it is the same id wherever the task runs:

1. ``begin(task, (app_id, version))``: ``init_transactions`` on first use (this fences any zombie
   instance of the task elsewhere and aborts the transaction it left open), then read the version
   recorded for ``app_id`` (step 3). Recorded version ``>= version``: this batch already committed
   (a replay after a crash after the commit): its sends are discarded and its flush commits
   nothing.
2. ``send``: the message is serialized, partitioned and buffered in memory (as the delta producer
   does), so no Kafka transaction is open while the task processes its batch.
3. ``flush(task, transaction=...)``: ``begin_transaction``, produce the buffer,
   ``send_offsets_to_transaction`` of offset ``version`` of partition 0 of the bookkeeping topic
   (``kafka.transactions.topic``) for consumer group ``<transactional.id>``, ``commit_transaction``.
   The records and the recorded version become visible together or not at all, so the version
   read back in step 1 says exactly whether batch ``version`` committed. A transaction is open
   only for the duration of this flush: a crash elsewhere leaves nothing to abort.
4. ``abandon``: drop the buffer (and abort, should a flush have failed half-way).

Sends without ``begin`` (tools, loaders: the library use) go through one shared idempotent,
non-transactional producer; ``flush(source)`` then waits until every message is acknowledged.

Partition: the envelope's ``partition``; else Kafka's default partitioner (murmur2) over the bytes
of ``partition_key`` or ``key``; else librdkafka's choice. Control messages carry ``sparza.type``
and ``sparza.producer`` headers (see :mod:`sparza.systems.kafka.consumer`).
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Any

from sparza.config import Config
from sparza.errors import DataError
from sparza.metrics import MetricsRegistry
from sparza.serde import Serde, is_utf8, partition_key_bytes, plain_json_encoder
from sparza.streams import OutgoingMessageEnvelope
from sparza.systems import StreamSpec, Transaction
from sparza.systems.kafka.admin import KafkaError, KafkaSystemAdmin, KafkaUnavailableError, open_client
from sparza.systems.kafka.partitioner import partition_for
from sparza.systems.kafka.settings import (
    CONTROL_PRODUCER_HEADER,
    CONTROL_TYPE_HEADER,
    TIMESTAMP_HEADER,
    KafkaSystemSettings,
)

__all__ = ["CommitRetriesExhaustedError", "KafkaSystemProducer", "is_fencing_error", "transactional_id"]

log = logging.getLogger(__name__)

_BYTES_LIKE = (bytes, bytearray, memoryview)


def _produce(producer: Any, on_delivery: Any, topic: str, value: bytes | None, key: bytes | None,
             partition: int, ts: int, headers: Any) -> None:
    """Produce one message, waiting while librdkafka's local queue is full (backpressure, never a drop)."""
    while True:
        try:
            producer.produce(topic, value=value, key=key, partition=partition, on_delivery=on_delivery,
                             timestamp=ts, headers=headers)
            return
        except BufferError:
            producer.poll(0.05)


_COMMIT_ATTEMPTS = 5
"""How often a commit whose outcome librdkafka calls retriable (a timeout, a coordinator moving) is tried."""


class CommitRetriesExhaustedError(KafkaError):
    """``commit_transaction`` kept failing with retriable errors: the brokers or the transaction coordinator are
    unreachable. The batch is retried from its checkpoint; the recorded version says whether it committed."""


def _commit_transaction(producer: Any, txn_id: str | None, version: int, timeout_s: float) -> None:
    """``commit_transaction``, tried again after a retriable error (librdkafka allows calling it again: a commit
    that timed out may still complete) with a growing pause, at most :data:`_COMMIT_ATTEMPTS` times in all."""
    from confluent_kafka import KafkaException

    pause = 0.1
    for attempt in range(1, _COMMIT_ATTEMPTS + 1):
        try:
            producer.commit_transaction(timeout_s)
            return
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            if not getattr(error, "retriable", lambda: False)():
                raise
            if attempt == _COMMIT_ATTEMPTS:
                raise CommitRetriesExhaustedError(
                    f"Kafka did not confirm the commit of transaction {txn_id!r} (output version {version}) in "
                    f"{attempt} attempts of up to {timeout_s:.0f}s each (last error: {exc}): check that the brokers "
                    "are reachable and that the transaction coordinator (the leader of the __transaction_state "
                    "partition of this transactional.id) is up. The batch is retried from its checkpoint and "
                    "writes its output once; kafka.request.timeout.ms sets each attempt's limit") from exc
            log.warning("committing Kafka transaction %r (version %d) failed with a retriable error (%s); "
                        "trying again in %.1f s (attempt %d of %d)", txn_id, version, exc, pause, attempt + 1,
                        _COMMIT_ATTEMPTS)
            time.sleep(pause)
            pause = min(pause * 2, 2.0)


class _HungCallError(KafkaError):
    """A transactional call of librdkafka did not return within its own timeout and :data:`_HANG_GRACE_S` more: after
    a broker restart, a request to the group or transaction coordinator may never time out (librdkafka issues 5456
    and 5511). The producer is given up (a new one's ``init_transactions`` fences it) and the batch committed again."""


_HANG_GRACE_S = 15.0
"""How long past a transactional call's own timeout it may take before its producer is given up."""


class _Caller:
    """One thread that makes a producer's transactional calls, so each can be waited for with a bound
    (:meth:`call`); it lives as long as its producer, instead of a new thread for every call of every commit."""

    def __init__(self, name: str) -> None:
        self._calls: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]] | None] = queue.SimpleQueue()
        threading.Thread(target=self._run, name=name, daemon=True).start()

    def _run(self) -> None:
        while (item := self._calls.get()) is not None:
            call, future = item
            try:
                future.set_result(call())
            except BaseException as exc:  # handed to the caller's thread as it is
                future.set_exception(exc)

    def call(self, what: str, call: Callable[[], Any], limit_s: float) -> Any:
        """``call()`` on this thread, waited for at most ``limit_s`` + :data:`_HANG_GRACE_S`: its result or its
        exception, or :class:`_HungCallError` (the thread, blocked inside librdkafka, is left behind with its
        producer, which the caller then drops).

        Not sooner: right after a broker restart the task's recorded version may not be readable for a while (its
        group's offsets read as unstable: seen for 40 s and more in a probe), so a producer given up early only
        moves the wait into its successor's version read, and a batch that begins then fails (tried: a 5 s bound,
        and a new producer made at once after a lost connection)."""
        future: Future[Any] = Future()
        self._calls.put((call, future))
        try:
            return future.result(limit_s + _HANG_GRACE_S)
        except FutureTimeout:
            raise _HungCallError(f"{what} did not return within {limit_s + _HANG_GRACE_S:.0f}s (its own timeout is "
                                 f"{limit_s:.0f}s): a coordinator request that librdkafka never times out, as after "
                                 "a broker restart; the producer is given up and the batch committed again by a new "
                                 "one") from None

    def close(self) -> None:
        """Let the thread end once it is done with what it was given (at once if it is idle)."""
        self._calls.put(None)


def _transient(error: Any) -> bool:
    """Whether a librdkafka error is one a request may be made again after: flagged retriable, or a coordinator
    loading, moving or not yet found, a timeout, a lost connection (librdkafka reports some of these unflagged)."""
    from confluent_kafka import KafkaError as RdKafkaError

    if getattr(error, "retriable", lambda: False)():
        return True
    return getattr(error, "code", lambda: None)() in (
        RdKafkaError.NOT_COORDINATOR, RdKafkaError.COORDINATOR_LOAD_IN_PROGRESS, RdKafkaError.COORDINATOR_NOT_AVAILABLE,
        RdKafkaError.REQUEST_TIMED_OUT, RdKafkaError._TIMED_OUT, RdKafkaError._TRANSPORT, RdKafkaError._WAIT_COORD,
        RdKafkaError._ALL_BROKERS_DOWN)


def transactional_id(app_id: str, system: str) -> str:
    """The ``transactional.id`` (and bookkeeping group id) of one task's output to one system."""
    return f"{app_id}@{system}"


@dataclass
class _Topic:
    """What a producer caches per stream: its topic, partition count and serdes, and the partition of keys seen
    (``by_key``: murmur2 in Python costs about a microsecond a key, and keys repeat; valid for ``partitions``)."""

    name: str
    partitions: int
    key_serde: Serde
    msg_serde: Serde
    by_key: dict[bytes, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.key_utf8 = is_utf8(self.key_serde)
        self.msg_utf8 = is_utf8(self.msg_serde)
        self.msg_json = plain_json_encoder(self.msg_serde)

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "partitions":  # a new count (the topic grew): the remembered partitions are of the old one
            object.__setattr__(self, "by_key", {})
        object.__setattr__(self, name, value)


_KEYS_MEMO = 1 << 16
"""How many keys' partitions a topic remembers (the first ones seen; others are hashed each time)."""


class _FencedError(KafkaError):
    """A commit failed because a newer producer instance with the same ``transactional.id`` exists."""


def _fencing_codes() -> frozenset[int]:
    from confluent_kafka import KafkaError as RdKafkaError

    return frozenset((RdKafkaError._FENCED, RdKafkaError.PRODUCER_FENCED, RdKafkaError.INVALID_PRODUCER_EPOCH))


def is_fencing_error(error: Any, producer: Any = None, timeout_s: float = 10.0) -> bool:
    """True when ``error`` (a librdkafka ``KafkaError``) means a newer instance with the same
    ``transactional.id`` fenced ``producer``.

    librdkafka reports fencing with a fencing code the first time, but once the producer is in its
    fatal state other calls (``produce``) fail with the generic ``_FATAL``. confluent-kafka does not
    expose ``rd_kafka_fatal_error``; the transactional API raises the underlying fatal error instead, so
    for ``_FATAL`` (or any fatal error) the producer is asked with ``abort_transaction``. Its answer
    comes from librdkafka's main thread (no broker round trip), but not at once: with a zero timeout a
    busy machine got ``_TIMED_OUT`` (3 calls in 40 under load), hence ``timeout_s`` bounds the wait.
    """
    from confluent_kafka import KafkaError as RdKafkaError
    from confluent_kafka import KafkaException

    code = getattr(error, "code", lambda: None)()
    codes = _fencing_codes()
    if code in codes:
        return True
    if producer is None or not (code == RdKafkaError._FATAL or getattr(error, "fatal", lambda: False)()):
        return False
    try:
        producer.abort_transaction(timeout_s)
    except KafkaException as exc:
        cause = exc.args[0] if exc.args else None
        return getattr(cause, "code", lambda: None)() in codes
    except Exception:
        return False
    return False


class _LibrdkafkaLog:
    """librdkafka's log lines through Python logging (the ``logger`` setting of a transactional producer).

    A fenced transactional producer logs its fencing at error and critical level (``ADDPARTS``, ``TXNERR``,
    ``FATAL``), although sparza expects it whenever a task's batches move between Spark Python workers
    and handles it (a new producer, the recorded version decides): those lines go to debug, every
    other line keeps its level.
    """

    _FENCING_WORDS = ("fenced", "fences the current one", "producer_fenced", "invalid_producer_epoch")

    def __init__(self, logger: logging.Logger) -> None:
        self._logger = logger

    def log(self, level: int, msg: str, *args: Any) -> None:
        """What confluent-kafka calls for each librdkafka log line."""
        text = (msg % args if args else msg).lower()
        if any(word in text for word in self._FENCING_WORDS):
            level = logging.DEBUG
        self._logger.log(level, msg, *args)


@dataclass
class _Source:
    """One task's transactional producer and where its current batch stands."""

    producer: Any = None
    group: Any = None            # a consumer of the bookkeeping group: committed versions, group metadata
    txn_id: str | None = None
    transaction: Transaction | None = None
    state: str = "idle"          # idle | ready (begun, buffering) | replay (already committed)
    pending: list[tuple[str, bytes | None, bytes | None, int, int, Any]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    skipped: int = 0
    sent: int = 0                # messages sent into the open transaction not yet counted in messages-sent
    known: int | None = None     # the version this very producer committed last (or read): no read at each begin
    caller: _Caller | None = None  # the thread of this producer's bounded transactional calls

    def __post_init__(self) -> None:
        self.on_delivery = _delivery_callback(self.errors)


def _delivery_callback(errors: list[str]) -> Any:
    """A delivery report callback that records failures in ``errors`` (raised at flush/commit)."""

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(f"{msg.topic()}[{msg.partition()}]: {err.str()}")

    return on_delivery


class KafkaSystemProducer:
    """Writes messages to the topics of a ``kafka`` system (see the module docstring)."""

    def __init__(self, system_name: str, config: Config, metrics: MetricsRegistry | None = None) -> None:
        self.system_name = system_name
        self.settings = KafkaSystemSettings(system_name, config)
        self.admin = KafkaSystemAdmin(system_name, config)
        self.metrics = metrics
        self._sources: dict[str, _Source] = {}
        self._topics: dict[str, _Topic] = {}
        self._plain: Any = None
        self._plain_errors: list[str] = []
        self._plain_delivery: Any = None
        self._bookkeeping_ready = False
        self._bookkeeping_lock = threading.Lock()  # a fence (a restore thread) and a begin (the loop) may both ask
        self._max_message_bytes = int(self.settings.producer_conf().get("message.max.bytes", 1_000_000))

    # --- lifecycle -------------------------------------------------------------------------
    def flushes_concurrently(self) -> bool:
        """True: every task has a transactional producer of its own, so their flushes may overlap
        (:class:`~sparza.systems.SupportsConcurrentFlush`)."""
        return True

    def register(self, source: str) -> None:
        """Declare ``source`` (a task name)."""
        self._sources.setdefault(source, _Source())

    def start(self) -> None:
        """Nothing to open ahead of time: producers connect on first use."""

    def stop(self) -> None:
        """Abort what is still open, deliver the library-use messages, release the producers."""
        for name in list(self._sources):
            self.abandon(name)
        if self._plain is not None:
            self._plain.flush(self.settings.request_timeout_s)
        for src in self._sources.values():
            if src.caller is not None:
                src.caller.close()
        self._sources.clear()
        self._plain = None

    # --- helpers ---------------------------------------------------------------------------
    def _count(self, name: str, n: int = 1) -> None:
        if self.metrics is not None:
            self.metrics.counter(self.system_name, name).inc(n)

    def _count_sent(self, src: _Source) -> None:
        """Count what ``src`` sent into its transaction since it was last counted (once each)."""
        if src.sent:
            self._count("messages-sent", src.sent)
            src.sent = 0

    def _topic(self, topic: str) -> _Topic:
        info = self._topics.get(topic)
        if info is None:
            info = _Topic(self.settings.topic(topic), self.admin.partition_count(topic), self.settings.key_serde(topic),
                          self.settings.msg_serde(topic))
            self._topics[topic] = info
        return info

    def _new_producer(self, extra: dict[str, Any], errors: list[str]) -> Any:
        from confluent_kafka import Producer

        conf = self.settings.producer_conf()
        conf.update(extra)

        def on_error(err: Any) -> None:
            if err.fatal():
                errors.append(err.str())

        conf["error_cb"] = on_error
        # Only failed deliveries call back into Python (a report per delivered message cost about a microsecond
        # each at commit); a transaction with a failed delivery fails its commit anyway, the reports name why.
        conf.setdefault("delivery.report.only.error", True)
        if "transactional.id" in conf:
            conf.setdefault("logger", _LibrdkafkaLog(logging.getLogger(f"{__name__}.librdkafka")))
        return open_client("producer", Producer, conf, self.system_name)

    def _ensure_bookkeeping(self) -> None:
        with self._bookkeeping_lock:
            if not self._bookkeeping_ready:
                topic = self.settings.transactions_topic
                if not self.admin.exists(topic):
                    self.admin.create_stream(StreamSpec(topic, 1))
                self._bookkeeping_ready = True

    def committed_version(self, app_id: str) -> int | None:
        """The last output version committed for ``app_id`` on this system (None: none yet)."""
        src = _Source()
        try:
            return self._read_version(src, transactional_id(app_id, self.system_name))
        finally:
            if src.group is not None:
                src.group.close()

    def _read_version(self, src: _Source, txn_id: str) -> int | None:
        from confluent_kafka import Consumer, KafkaException, TopicPartition

        if src.group is None:
            conf = self.settings.consumer_conf()
            conf["group.id"] = txn_id
            src.group = Consumer(conf)
        tp = TopicPartition(self.settings.transactions_topic, 0)
        # The group coordinator may be loading or moving (a broker started or restarted, a leader moved): librdkafka
        # answers NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS, retriable; asked again after a pause, within the
        # request timeout.
        deadline = time.monotonic() + self.settings.request_timeout_s
        pause = 0.05
        while True:
            try:
                got = src.group.committed([tp], timeout=self.settings.request_timeout_s)[0]
                error = got.error
            except KafkaException as exc:
                error = exc.args[0] if exc.args else exc
            except Exception as exc:
                raise KafkaError(f"cannot read the committed output version of {txn_id!r}: {exc}") from exc
            if error is None:
                return int(got.offset) if got.offset >= 0 else None
            if not _transient(error):
                raise KafkaError(f"cannot read the committed output version of {txn_id!r}: {error}")
            if time.monotonic() + pause > deadline:
                raise KafkaUnavailableError(f"cannot read the committed output version of {txn_id!r} within "
                                            f"{self.settings.request_timeout_s:.0f}s: {error}")
            time.sleep(pause)
            pause = min(pause * 2, 1.0)

    # --- the batch contract ----------------------------------------------------------------
    def begin(self, source: str, transaction: Transaction) -> None:
        """Open ``source``'s Kafka transaction for ``transaction``, or mark the batch a replay when the
        version is already committed (see the module docstring)."""
        src = self._sources.setdefault(source, _Source())
        if src.pending:   # "ready", or a failed commit's buffer: a begin must not silently drop it
            raise KafkaError(f"{source}: begin({transaction}) while {len(src.pending)} messages of "
                             f"{src.transaction} are neither flushed nor abandoned")
        txn_id = transactional_id(transaction.app_id, self.system_name)
        self._open_transactional(src, txn_id)
        # The version this producer committed (or read) itself is what the broker holds, unless a newer instance of
        # the task fenced it since; then its commit fails as fenced, the producer is dropped (known with it) and
        # the version is read again (_reopen). So the broker is asked once per producer, not once per batch.
        committed = src.known if src.known is not None else self._read_version(src, txn_id)
        src.known = committed
        src.transaction = transaction
        src.pending = []
        if committed is not None and committed >= transaction.version:
            src.state = "replay"
            src.skipped = 0
            log.info("%s: output version %d of %s is already committed (recorded %d); this replay writes nothing",
                     source, transaction.version, transaction.app_id, committed)
            return
        src.state = "ready"

    def fence(self, source: str, app_id: str) -> None:
        """``init_transactions`` for ``source`` now (:class:`~sparza.systems.SupportsFencing`): it aborts the
        transaction an instance that died mid-flush left open, which holds every ``read_committed`` reader of the
        partitions it wrote; the producer is kept for ``source``'s next ``begin``."""
        src = self._sources.setdefault(source, _Source())
        if src.pending:
            return  # a batch of this instance is under way: its begin initialised the producer already
        self._open_transactional(src, transactional_id(app_id, self.system_name))
        self._count("producer-fences")

    def _open_transactional(self, src: _Source, txn_id: str) -> None:
        """Give ``src`` an initialised transactional producer for ``txn_id`` (unless it has one)."""
        if src.producer is not None and src.txn_id == txn_id:
            return
        self._ensure_bookkeeping()
        src.errors.clear()
        # transaction.timeout.ms: generous, as a flush of a big batch may take a while.
        src.producer = self._new_producer({"transactional.id": txn_id, "transaction.timeout.ms": 300_000,
                                           **{k: v for k, v in self.settings.producer_conf().items()
                                              if k == "transaction.timeout.ms"}}, src.errors)
        src.txn_id = txn_id
        try:
            src.producer.init_transactions(self.settings.request_timeout_s)  # fences zombies, aborts what they left
        except Exception as exc:
            self._drop(src)
            error = exc.args[0] if exc.args else None
            kind = KafkaUnavailableError if _transient(error) else KafkaError
            raise kind(f"cannot initialise Kafka transactions for {txn_id!r}: {exc}") from exc

    def send(self, source: str, envelope: OutgoingMessageEnvelope) -> None:
        """Produce one message into ``source``'s open transaction (or the library producer)."""
        src = self._sources.get(source)
        if src is not None and src.state == "replay":
            src.skipped += 1   # already committed by the first run of this batch: counted, not written
            return
        topic = envelope.system_stream.stream
        info = self._topics.get(topic) or self._topic(topic)
        key = envelope.key
        if key is not None and key.__class__ is not bytes:
            # A str of a UTF-8 string serde is encoded in place (no serde call per message).
            key = (key.encode() if key.__class__ is str and info.key_utf8
                   else bytes(key) if isinstance(key, _BYTES_LIKE) else info.key_serde.to_bytes(key))
        value = envelope.message
        if value is not None and value.__class__ is not bytes:
            json_encode = info.msg_json
            if json_encode is not None and value.__class__ is dict:
                # A JSON serde's usual message, encoded here (see plain_json_encoder); the serde decides the rest.
                try:
                    encoded = json_encode(value)
                except Exception:
                    encoded = None
                value = encoded if encoded is not None and encoded.find(b"null") < 0 else info.msg_serde.to_bytes(value)
            else:
                value = (value.encode() if value.__class__ is str and info.msg_utf8
                         else bytes(value) if isinstance(value, _BYTES_LIKE) else info.msg_serde.to_bytes(value))
        partition = envelope.partition
        if partition is not None:
            if not 0 <= partition < info.partitions:
                raise ValueError(f"partition {partition} out of range for Kafka topic {topic!r} "
                                 f"with {info.partitions} partitions")
        else:
            pkey = envelope.partition_key
            if pkey is not None:
                if pkey.__class__ is not bytes:
                    pkey = partition_key_bytes(pkey, info.key_serde)
                partition = partition_for(pkey, info.partitions)
            elif key is not None:
                memo = info.by_key
                partition = memo.get(key)  # type: ignore[assignment]
                if partition is None:
                    partition = partition_for(key, info.partitions)
                    if len(memo) < _KEYS_MEMO:
                        memo[key] = partition
            else:
                partition = -1  # librdkafka's partitioner picks one
        headers = None
        if envelope.type:
            headers = [(CONTROL_TYPE_HEADER, str(int(envelope.type)).encode()),
                       (CONTROL_PRODUCER_HEADER, source.encode("utf-8"))]
        ts = int(envelope.timestamp) if envelope.timestamp is not None else 0
        if envelope.timestamp is not None and ts <= 0:
            # librdkafka reads timestamp 0 as "now" and Kafka refuses negative ones: an event time of 0
            # (or before 1970) travels in a header instead, and the consumer restores it.
            headers = [*(headers or []), (TIMESTAMP_HEADER, str(ts).encode())]
            ts = 0
        size = (len(value) if value is not None else 0) + (len(key) if key is not None else 0)
        if size > self._max_message_bytes:
            # Refused now, naming the message, rather than by the broker at the batch's commit (a failure
            # every retry of the batch would repeat).
            raise DataError(f"a message of {size} bytes to Kafka topic {info.name!r} is over the producer's "
                            f"message.max.bytes ({self._max_message_bytes}; systems.{self.system_name}."
                            "producer.message.max.bytes, and the topic's max.message.bytes on the broker)")
        if src is not None and src.state == "ready":
            src.pending.append((info.name, value, key, partition, ts, headers))
            src.sent += 1  # counted in messages-sent at flush or abandon: no registry lookup per message
            return
        self._count("messages-sent")
        if self._plain is None:
            self._plain = self._new_producer({}, self._plain_errors)
            self._plain_delivery = _delivery_callback(self._plain_errors)
        _produce(self._plain, self._plain_delivery, info.name, value, key, partition, ts, headers)

    def pending(self, source: str) -> int:
        """How many messages ``source`` sent that are not flushed yet."""
        src = self._sources.get(source)
        return len(src.pending) if src is not None else 0

    def flush(self, source: str, *, transaction: Transaction | None = None) -> None:
        """Commit ``source``'s transaction together with its version (nothing for a replay); without a
        transaction and without ``begin``, wait until the library producer delivered everything."""
        src = self._sources.get(source)
        if src is not None:
            self._count_sent(src)
        if transaction is not None and (src is None or src.state == "idle"):
            self.begin(source, transaction)  # nothing was sent: still record the version
            src = self._sources[source]
        if src is None or src.state == "idle":
            if self._plain is not None:
                left = self._plain.flush(self.settings.request_timeout_s)
                if left:
                    raise KafkaError(f"{left} messages of {source} were not delivered within "
                                     f"{self.settings.request_timeout_s:.0f}s")
            if self._plain_errors:
                errors, self._plain_errors[:] = list(self._plain_errors), []
                raise KafkaError(f"messages of {source} were not delivered: {errors[:5]}")
            return
        if transaction is not None and transaction != src.transaction:
            raise KafkaError(f"{source}: flush({transaction}) does not match the open transaction {src.transaction}")
        assert src.transaction is not None
        if src.state == "replay":
            self._skip_replay(source, src, src.skipped)
            return
        try:
            self._commit(source, src)
        except _FencedError as fenced:
            # Another instance of this task (the same transactional.id) ran init_transactions since this
            # producer's: usually the task ran a batch in another Spark Python worker and came back. The
            # runtime's intent already fenced zombie processors before this flush, and every instance
            # writes the same batch for the same version, so: a new producer (which fences the other
            # instance), and the version read again decides whether this batch is still to be written.
            # Expected within one processor (debug); worth a line only when another instance had
            # written this very batch (counted in producer-fenced-batch-written-elsewhere).
            log.debug("%s; re-initialising the transactional producer and retrying once", fenced)
            self._count("producer-reinitialised-after-fencing")
            if not self._reopen(source, src):
                log.info("%s: another instance of the task had already written batch %s; not written again",
                         source, src.transaction)
                self._count("producer-fenced-batch-written-elsewhere")
                return
            self._commit(source, src)

    def _reopen(self, source: str, src: _Source) -> bool:
        """A new transactional producer for ``src``'s open batch; False when the batch turned out to be
        committed already (its buffer is then dropped as a replay's)."""
        assert src.transaction is not None
        pending, src.pending = src.pending, []
        self._drop(src)
        self.begin(source, src.transaction)
        if src.state == "replay":
            self._skip_replay(source, src, len(pending))
            return False
        src.pending = pending
        return True

    def _skip_replay(self, source: str, src: _Source, skipped: int) -> None:
        log.info("%s: replayed batch %s: %d messages not written again", source, src.transaction, skipped)
        self._count("flushes-skipped-replay")
        self._count("messages-skipped-replay", skipped)
        src.state = "idle"

    def _commit(self, source: str, src: _Source) -> None:
        from confluent_kafka import TopicPartition

        assert src.transaction is not None
        started = time.perf_counter()
        timeout = self.settings.request_timeout_s
        app_id, version = src.transaction
        producer = src.producer
        opened = False
        try:
            producer.begin_transaction()
            opened = True
            produce, on_delivery = producer.produce, src.on_delivery
            for topic, value, key, partition, ts, headers in src.pending:
                try:  # _produce inlined: this loop runs once per message
                    produce(topic, value=value, key=key, partition=partition, on_delivery=on_delivery, timestamp=ts,
                            headers=headers)
                except BufferError:
                    _produce(producer, on_delivery, topic, value, key, partition, ts, headers)
            marker = TopicPartition(self.settings.transactions_topic, 0, version)
            with contextlib.suppress(AttributeError):
                marker.metadata = app_id  # for people reading the group's offsets; versions ignore it
            metadata = src.group.consumer_group_metadata()
            if src.caller is None:
                src.caller = _Caller(f"sparza-kafka-{source}")
            src.caller.call("send_offsets_to_transaction",
                            lambda: producer.send_offsets_to_transaction([marker], metadata, timeout), timeout)
            # Its retries may take every attempt's timeout and the pauses between them.
            src.caller.call("commit_transaction", lambda: _commit_transaction(producer, src.txn_id, version, timeout),
                            timeout * _COMMIT_ATTEMPTS + 2.0 * _COMMIT_ATTEMPTS)
        except Exception as exc:
            from confluent_kafka import KafkaError as RdKafkaError

            errors, txn_id = list(src.errors), src.txn_id
            error = exc.args[0] if exc.args else None
            # A fencing may surface as librdkafka's generic _FATAL (a produce after the producer turned
            # fatal): is_fencing_error asks the producer for the underlying cause.
            fenced = isinstance(error, RdKafkaError) and is_fencing_error(error, producer, timeout)
            fatal = getattr(error, "fatal", lambda: False)() or getattr(error, "code", lambda: None)() == \
                RdKafkaError._FATAL or isinstance(exc, _HungCallError)
            if isinstance(exc, _HungCallError):
                # Not routine (a fencing is): the user sees why this commit took its time.
                log.warning("%s: %s", source, exc)
                self._count("producer-given-up-hung-call")
            if fenced or fatal:
                # Fenced by a newer instance of the task (or another fatal error): this producer can do
                # nothing more, not even abort; the newer instance's init_transactions aborted for us.
                self._drop(src)   # the buffer stays, for flush's retry or until abandon
                outcome = "this producer is fenced or broken and was dropped"
            else:
                if opened:
                    self._abort(source, src)
                outcome = "it was aborted; the messages stay buffered until abandon"
            # A fatal producer whose cause librdkafka does not name as a fencing takes the same path: a new
            # producer, and the version read again decides; the new producer fails the same way if it is
            # really broken.
            kind = _FencedError if fenced or fatal else KafkaError
            raise kind(f"{source}: committing Kafka transaction {txn_id!r} version {version} failed "
                       f"({exc}); {outcome}{'; ' + '; '.join(errors[:3]) if errors else ''}") from exc
        self._count("messages-written", len(src.pending))
        src.pending = []
        src.state = "idle"
        src.known = version
        self._count("commits")
        if self.metrics is not None:
            self.metrics.timer(self.system_name, "flush-ms").update((time.perf_counter() - started) * 1000.0)

    def abandon(self, source: str) -> None:
        """Drop what ``source`` sent since its last flush: none of it was produced (see the module docstring)."""
        src = self._sources.get(source)
        if src is None:
            return
        self._count_sent(src)
        if src.pending:
            self._count("messages-abandoned", len(src.pending))
        src.pending = []
        src.state = "idle"

    def _abort(self, source: str, src: _Source) -> None:
        src.known = None  # an aborted commit may still have landed (a lost answer): read the version again
        try:
            src.producer.abort_transaction(self.settings.request_timeout_s)
        except Exception as exc:
            # A broken producer: drop it; the next instance's init_transactions aborts the transaction.
            log.warning("%s: aborting Kafka transaction %r failed (%s); the producer is dropped",
                        source, src.txn_id, exc)
            self._drop(src)
        self._count("transactions-aborted")

    @staticmethod
    def _drop(src: _Source) -> None:
        src.producer = None
        if src.caller is not None:
            src.caller.close()
            src.caller = None
        src.known = None
        src.txn_id = None
        src.state = "idle"
        if src.group is not None:
            src.group.close()
            src.group = None
