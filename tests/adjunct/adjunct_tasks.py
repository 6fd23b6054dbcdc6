"""Task classes of the adjunct end-to-end tests (named by dotted path; importable by Spark workers)."""

from __future__ import annotations

import json
from typing import Any

from sparza.streams import IncomingMessageEnvelope, OutgoingMessageEnvelope, SystemStream
from sparza.task import MessageCollector, TaskContext, TaskCoordinator

OUT = SystemStream("delta", "seen")


class LookupTask:
    """For every order, records what the adjunct store ``lookup`` held for the order's customer.

    Output rows (stream ``seen``): ``{"order", "customer", "found", "task"}`` — what the task saw,
    so tests assert on it.
    """

    def init(self, context: TaskContext) -> None:
        self.store: Any = context.get_store("lookup")
        self.task = context.task_name

    def process(self, envelope: IncomingMessageEnvelope, collector: MessageCollector,
                coordinator: TaskCoordinator) -> None:
        order = json.loads(envelope.message)
        found = self.store.get(order["customer"])
        body = {"order": order["id"], "customer": order["customer"], "found": found, "task": self.task}
        collector.send(OutgoingMessageEnvelope(OUT, json.dumps(body).encode(), key=str(order["id"]).encode(),
                                               partition=0))
