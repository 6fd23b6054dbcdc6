"""The ceiling of the peer benchmark: a plain confluent-kafka consume → count (a dict) → produce loop.

``--transactional`` (exactly once): one Kafka transaction per ``--commit-ms``, holding the outputs and the
consumed offsets (``send_offsets_to_transaction``). Without it (at least once): an idempotent producer,
flushed before the offsets are committed every ``--commit-ms``. The dict is not durable: this is the cost of
moving the messages and nothing else, what any engine's keyed count is measured against.
"""

from __future__ import annotations

import argparse
import json
import signal
import time
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--input", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--commit-ms", type=int, default=100)
    parser.add_argument("--transactional", action="store_true")
    args = parser.parse_args()
    stop = False

    def on_term(signum: int, frame: Any) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    consumer = Consumer({"bootstrap.servers": args.bootstrap, "group.id": args.group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "isolation.level": "read_committed", "log_level": 3})
    settings: dict[str, Any] = {"bootstrap.servers": args.bootstrap, "linger.ms": 5, "log_level": 3}
    if args.transactional:
        settings["transactional.id"] = f"{args.group}-ceiling"
    else:
        settings["enable.idempotence"] = True
    producer = Producer(settings)
    if args.transactional:
        producer.init_transactions(30)
    consumer.subscribe([args.input])
    counts: dict[str, int] = {}
    interval = args.commit_ms / 1000.0
    pending = False  # outputs (and offsets) not yet committed
    committed = 0.0  # when the last commit ended: the next is due commit-ms after it
    output = args.output
    while not stop:
        msgs = consumer.consume(num_messages=10_000, timeout=0.02)
        if msgs:
            if args.transactional and not pending:
                producer.begin_transaction()
            pending = True
            for msg in msgs:
                if msg.error() is not None:
                    raise KafkaException(msg.error())
                key = json.loads(msg.value())["key"]
                count = counts.get(key, 0) + 1
                counts[key] = count
                value = json.dumps({"key": key, "count": count})
                while True:
                    try:
                        producer.produce(output, value=value, key=key)
                        break
                    except BufferError:
                        producer.poll(0.01)
            producer.poll(0)
        if pending and time.monotonic() - committed >= interval:
            if args.transactional:
                producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                                     consumer.consumer_group_metadata(), 30)
                producer.commit_transaction(30)
            else:
                producer.flush(30)
                consumer.commit(asynchronous=False)
            pending = False
            committed = time.monotonic()
    consumer.close()


if __name__ == "__main__":
    main()
