"""The seed's recovery table, as a pure function of what is on disk and what was committed.

Persistent stores (rows: is the stream a bootstrap stream; columns: the local copy):

==================  ==========================  ==========================  ========================
                    no store found              found, not valid            found and valid
==================  ==========================  ==========================  ========================
bootstrap           create, force bootstrap     re-create, force bootstrap  continue from last offset
not bootstrap       create, continue            re-create, continue         continue from last offset
==================  ==========================  ==========================  ========================

Non-persistent (memory) stores: force bootstrap when the stream is a bootstrap stream, else
continue from the last offset. ``samza.reset.offset`` always re-creates and reads from the oldest.

Two refinements over the seed. *Valid* means the local copy's marker equals the committed
checkpoint entry (batch, snapshot, offsets) rather than "its files are recent". And when the local
copy is missing or invalid but the committed entry names a snapshot in the blob store, the store is
restored from that snapshot and continues from the committed offsets (a new host does not re-read
the stream).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from sparza.state.adjunct.slot import StoreMarker

__all__ = ["LocalCopy", "RecoveryAction", "RecoveryDecision", "decide_recovery", "judge_local_copy"]


class LocalCopy(Enum):
    """What was found on local disk for a store."""

    NONE = "none"
    INVALID = "invalid"
    VALID = "valid"


class RecoveryAction(Enum):
    """What restore does with a store."""

    CONTINUE_LOCAL = "continue-local"
    """Reuse the local copy; continue after the committed offsets."""
    RESTORE_SNAPSHOT = "restore-snapshot"
    """Download the committed snapshot from the blob store; continue after the committed offsets."""
    CREATE_CONTINUE = "create-continue"
    """(Re-)create an empty store; continue after the committed offsets (earlier data is not re-read)."""
    CREATE_BOOTSTRAP = "create-bootstrap"
    """(Re-)create an empty store and read the stream from its oldest offset."""


@dataclass(frozen=True, slots=True)
class RecoveryDecision:
    """The action for one store and why (the reason is logged and shown by tests)."""

    action: RecoveryAction
    local: LocalCopy
    reason: str

    @property
    def from_oldest(self) -> bool:
        """True when the store must be rebuilt from the oldest offset (no committed offsets apply)."""
        return self.action is RecoveryAction.CREATE_BOOTSTRAP


def judge_local_copy(exists: bool, marker: StoreMarker | None, committed: StoreMarker | None) -> LocalCopy:
    """NONE when nothing is on disk; VALID only when the local marker equals the committed entry."""
    if not exists:
        return LocalCopy.NONE
    if marker is None or committed is None:
        return LocalCopy.INVALID
    same = (marker.batch == committed.batch and marker.snapshot == committed.snapshot
            and marker.offsets == committed.offsets)
    return LocalCopy.VALID if same else LocalCopy.INVALID


def decide_recovery(*, persistent: bool, bootstrap: bool, reset_offset: bool, local: LocalCopy,
                    committed_snapshot: str | None) -> RecoveryDecision:
    """Apply the recovery table (see the module docstring)."""
    if reset_offset:
        return RecoveryDecision(RecoveryAction.CREATE_BOOTSTRAP, local, "samza.reset.offset: rebuild from oldest")
    if not persistent:
        if bootstrap:
            return RecoveryDecision(RecoveryAction.CREATE_BOOTSTRAP, local, "memory store of a bootstrap stream")
        return RecoveryDecision(RecoveryAction.CREATE_CONTINUE, local, "memory store, not a bootstrap stream")
    if local is LocalCopy.VALID:
        return RecoveryDecision(RecoveryAction.CONTINUE_LOCAL, local, "local copy matches the committed checkpoint")
    if committed_snapshot is not None:
        return RecoveryDecision(RecoveryAction.RESTORE_SNAPSHOT, local,
                                f"local copy {local.value}; committed snapshot {committed_snapshot} in the blob store")
    what = "no local copy" if local is LocalCopy.NONE else "local copy does not match the committed checkpoint"
    if bootstrap:
        return RecoveryDecision(RecoveryAction.CREATE_BOOTSTRAP, local, f"{what}; bootstrap stream: force bootstrap")
    return RecoveryDecision(RecoveryAction.CREATE_CONTINUE, local, f"{what}; continue from the last offset")
