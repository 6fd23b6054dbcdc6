"""End-of-dataset markers: how a producer of a versioned bounded dataset says "version complete".

A marker is a message of type END_OF_STREAM on the dataset's stream (one per partition that the
store reads). A store configured with ``stores.<store>.adstore.versioned: true`` seals the version
it is building when it reads one; any other adjunct store ignores it.
"""

from __future__ import annotations

import json

from sparza.streams import MessageType, OutgoingMessageEnvelope, SystemStream

__all__ = ["end_of_dataset"]


def end_of_dataset(stream: SystemStream, partition: int, label: str = "") -> OutgoingMessageEnvelope:
    """The marker to send after the last record of a dataset version into ``partition``.

    ``label`` (optional, e.g. the file name or date of the version) is kept in the message body
    for operators; stores do not interpret it.
    """
    body = json.dumps({"endOfDataset": True, "label": label}).encode("utf-8")
    return OutgoingMessageEnvelope(stream, body, key=b"__end_of_dataset__", partition=partition,
                                   type=MessageType.END_OF_STREAM)
