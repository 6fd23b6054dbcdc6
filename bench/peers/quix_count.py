"""The peer benchmark's keyed count in Quix Streams 3.28: a stateful ``apply`` (RocksDB state, changelog topics)
from a JSON input topic to a JSON output topic, exactly once unless ``--guarantee at-least-once``.

Run in its own venv (``bench/peers/run.py`` makes it); ``--commit-ms default`` keeps Quix's own commit interval.
"""

from __future__ import annotations

import argparse
from typing import Any

from quixstreams import Application, State


def count(value: dict[str, Any], state: State) -> dict[str, Any]:
    """The running count of the message's key (Quix scopes state by the record key, which is the same key)."""
    key = value["key"]
    n = (state.get(key) or 0) + 1
    state.set(key, n)
    return {"key": key, "count": n}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--input", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--state", required=True)
    parser.add_argument("--commit-ms", default="default")
    parser.add_argument("--guarantee", default="exactly-once")
    args = parser.parse_args()
    extra: dict[str, Any] = {}
    if args.commit_ms != "default":
        extra["commit_interval"] = int(args.commit_ms) / 1000.0
    app = Application(broker_address=args.bootstrap, consumer_group=args.group, state_dir=args.state,
                      auto_offset_reset="earliest", processing_guarantee=args.guarantee, **extra)
    sdf = app.dataframe(app.topic(args.input, value_deserializer="json"))
    sdf = sdf.apply(count, stateful=True)
    sdf.to_topic(app.topic(args.output, value_serializer="json"))
    app.run()


if __name__ == "__main__":
    main()
