"""A writer process for the concurrency tests: ``python writer_process.py CONFIG_JSON WRITER MESSAGES PER_FLUSH``.

Sends ``MESSAGES`` messages ``b"<writer>:<i>"`` to stream ``d.s``, flushing every ``PER_FLUSH`` with
the transaction ``(writer-<w>, batch)``.
"""

from __future__ import annotations

import json
import sys

from sparza.config import Config
from sparza.streams import OutgoingMessageEnvelope, SystemStream
from sparza.systems.delta import DeltaSystemProducer


def main(config_json: str, writer: int, messages: int, per_flush: int) -> None:
    """Write this writer's messages."""
    producer = DeltaSystemProducer("d", Config(json.loads(config_json)))
    source = f"writer-{writer}"
    producer.register(source)
    producer.start()
    stream = SystemStream("d", "s")
    for batch in range(messages // per_flush):
        for i in range(batch * per_flush, (batch + 1) * per_flush):
            producer.send(source, OutgoingMessageEnvelope(stream, f"{writer}:{i}".encode(), key=f"k{i}".encode()))
        producer.flush(source, transaction=(source, batch))
    producer.stop()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
