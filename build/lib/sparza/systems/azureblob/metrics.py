"""The producer's counters, kept in three groups as Samza does: ``aggregate``, the system name, the source.

Each count is kept twice: under sparza's name in the groups ``aggregate``, ``<system>`` and
``<source>``, and under Samza's name (:data:`SAMZA_NAMES`, ``AzureBlobBasicMetrics``) in Samza's
groups ``aggregate``, ``<account>_<system>`` and ``<source>``, so dashboards built for Samza keep
working. Unlike Samza, a source named like the system is not an error (Samza's metrics were null
there and ``send`` threw): its counts go to the system group once instead of twice.
"""

from __future__ import annotations

from sparza.metrics import Counter, MetricsRegistry

__all__ = ["COUNTERS", "SAMZA_NAMES", "AzureBlobMetrics"]

COUNTERS = (
    "messages_sent",        # messages accepted by send() (published every 1,024 per writer and at flush)
    "bytes_sent",           # uncompressed bytes staged as blocks (blob content, with format overhead)
    "bytes_compressed",     # bytes actually uploaded (after gzip; equal to bytes_sent for none)
    "send_errors",          # failed send() or flush() calls
    "blocks_uploaded",      # blocks staged successfully
    "blobs_committed",      # block lists committed successfully
    "azure_connection_errors",  # requests that failed because storage was unreachable
    "non_transactional_blobs",  # blobs of a transactional flush that were named before it (see producer)
)

SAMZA_NAMES = {
    "messages_sent": "eventWriteRate",
    "bytes_sent": "eventWriteByteRate",
    "bytes_compressed": "eventCompressByteRate",
    "send_errors": "eventProduceError",
    "blocks_uploaded": "azureBlockUploadRate",
    "blobs_committed": "azureBlobCommitRate",
    "azure_connection_errors": "azureContainerError",  # Samza: aggregate and system groups only
}
"""sparza's counter -> Samza's name for the same count (the seed's seven metrics)."""


class AzureBlobMetrics:
    """Counters of one source: each ``inc`` adds to the aggregate, system and source groups."""

    def __init__(self, registry: MetricsRegistry, system: str, source: str | None,
                 account: str | None = None) -> None:
        groups = ["aggregate", system]
        samza_groups = ["aggregate", f"{account}_{system}" if account else system]
        if source is not None and source not in groups:
            groups.append(source)
            samza_groups.append(source)
        self._counters: dict[str, list[Counter]] = {
            name: [registry.counter(group, name) for group in groups] for name in COUNTERS}
        for name, samza_name in SAMZA_NAMES.items():
            targets = samza_groups[:2] if name == "azure_connection_errors" else samza_groups
            self._counters[name] += [registry.counter(group, samza_name) for group in targets]

    def inc(self, name: str, n: int = 1) -> None:
        """Add ``n`` to counter ``name`` in every group."""
        for counter in self._counters[name]:
            counter.inc(n)
