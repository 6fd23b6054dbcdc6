"""Adjunct data stores (SEP-002): read-only key-value stores that fill themselves from a stream.

Bind a store to a stream with ``stores.<store>.adstore.input``; its messages go to the store, never
to the task. Partitioned streams give one store per task; broadcast streams
(``task.broadcast.inputs``) give one store per job, built by one task and read by all through
published snapshots kept once per host. Bootstrap streams gate main input; versioned bounded
datasets switch version at end-of-dataset markers. See ``docs/adjunct.md``.
"""

from __future__ import annotations

from sparza.state.adjunct.builder import BootstrapProgress, EnvelopeReader, StoreBuilder
from sparza.state.adjunct.container import ContainerSnapshotCache, SnapshotLease, directory_size_bytes
from sparza.state.adjunct.errors import (
    AdjunctError,
    AdjunctStoreReadOnlyError,
    BroadcastSnapshotError,
    UnknownAdjunctStoreError,
)
from sparza.state.adjunct.extractor import (
    DefaultKeyValueExtractor,
    DefaultKeyValueExtractorFactory,
    KeyValueExtractor,
    KeyValueExtractorFactory,
    load_extractor,
)
from sparza.state.adjunct.manager import (
    ENTRY_VERSION,
    TaskAdjunctManager,
    broadcast_bootstrap_published,
    task_partition,
)
from sparza.state.adjunct.markers import end_of_dataset
from sparza.state.adjunct.offsets import AdminStreamAccess, StreamAccess
from sparza.state.adjunct.publication import Publication, PublicationBoard
from sparza.state.adjunct.readonly import ReadOnlyStore
from sparza.state.adjunct.recovery import (
    LocalCopy,
    RecoveryAction,
    RecoveryDecision,
    decide_recovery,
    judge_local_copy,
)
from sparza.state.adjunct.settings import DEFAULT_BUILDER_TASK, AdjunctConfig, AdjunctStoreSpec, container_store_dir
from sparza.state.adjunct.slot import MARKER_FILE, StoreMarker, StoreSlot
from sparza.state.adjunct.snapshots import SnapshotStore
from sparza.state.adjunct.stores import (
    AdjunctStoreContext,
    AdjunctStoreManager,
    AdjunctStoreManagerFactory,
    BroadcastStoreManager,
    DefaultAdjunctStoreManagerFactory,
    PartitionedStoreManager,
    SupportsCommitted,
    SupportsReadThrough,
    SupportsRows,
)

__all__ = [
    "DEFAULT_BUILDER_TASK",
    "ENTRY_VERSION",
    "MARKER_FILE",
    "AdjunctConfig",
    "AdjunctError",
    "AdjunctStoreContext",
    "AdjunctStoreManager",
    "AdjunctStoreManagerFactory",
    "AdjunctStoreReadOnlyError",
    "AdjunctStoreSpec",
    "AdminStreamAccess",
    "BootstrapProgress",
    "BroadcastSnapshotError",
    "BroadcastStoreManager",
    "ContainerSnapshotCache",
    "DefaultAdjunctStoreManagerFactory",
    "DefaultKeyValueExtractor",
    "DefaultKeyValueExtractorFactory",
    "EnvelopeReader",
    "KeyValueExtractor",
    "KeyValueExtractorFactory",
    "LocalCopy",
    "PartitionedStoreManager",
    "Publication",
    "PublicationBoard",
    "ReadOnlyStore",
    "RecoveryAction",
    "RecoveryDecision",
    "SnapshotLease",
    "SnapshotStore",
    "StoreBuilder",
    "StoreMarker",
    "StoreSlot",
    "StreamAccess",
    "SupportsCommitted",
    "SupportsReadThrough",
    "SupportsRows",
    "TaskAdjunctManager",
    "UnknownAdjunctStoreError",
    "broadcast_bootstrap_published",
    "container_store_dir",
    "decide_recovery",
    "directory_size_bytes",
    "end_of_dataset",
    "judge_local_copy",
    "load_extractor",
    "task_partition",
]
