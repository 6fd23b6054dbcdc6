"""What the settings of every stream system share: its keys under ``systems.<system>.``, a stream's own keys
under ``systems.<system>.streams.<stream>.``, whether a stream is bounded and its serdes.

Each system's settings (:class:`~sparza.systems.delta.settings.DeltaSystemSettings`,
:class:`~sparza.systems.kafka.settings.KafkaSystemSettings`) adds its own keys to these.
"""

from __future__ import annotations

from collections.abc import Mapping

from sparza.config import Config
from sparza.serde import Serde, stream_serde

__all__ = ["SystemSettings"]


class SystemSettings:
    """Typed access to the ``systems.<system>.*`` keys of one system."""

    def __init__(self, system_name: str, config: Mapping[str, str]) -> None:
        self.system = system_name
        self.config = Config.of(config)
        self._prefix = f"systems.{system_name}."

    def stream_key(self, stream: str, suffix: str) -> str:
        """The full key ``systems.<system>.streams.<stream>.<suffix>``."""
        return f"{self._prefix}streams.{stream}.{suffix}"

    def is_bounded(self, stream: str) -> bool:
        """``systems.<s>.streams.<x>.bounded``."""
        return bool(self.config.get_bool(self.stream_key(stream, "bounded"), False))

    def key_serde(self, stream: str) -> Serde:
        """Serde for keys that are not bytes."""
        return stream_serde(self.config, self.system, stream, "key")

    def msg_serde(self, stream: str) -> Serde:
        """Serde for message values that are not bytes."""
        return stream_serde(self.config, self.system, stream, "msg")
