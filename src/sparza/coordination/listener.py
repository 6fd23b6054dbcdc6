"""The contract between a job coordinator and the processor that runs tasks."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from sparza.coordination.jobmodel import JobModel

__all__ = ["JobCoordinator", "JobCoordinatorListener", "MemberNotes"]


@runtime_checkable
class JobCoordinatorListener(Protocol):
    """What a coordinator tells its processor, always in this order per model change:
    ``on_job_model_expired`` (stop tasks at a batch boundary; return when stopped), then
    ``on_new_job_model`` (start the tasks the model gives this processor). ``on_coordinator_stop``
    comes once, last. Calls come from coordinator threads, never two at the same time."""

    def on_new_job_model(self, job_model: JobModel) -> None:
        """A job model is in force; run ``job_model.tasks_of(processor_id)`` under generation ``job_model.version``."""

    def on_job_model_expired(self) -> None:
        """The model in force is being replaced: stop processing and committing; return once stopped."""

    def on_coordinator_stop(self) -> None:
        """The coordinator stopped (asked to, or after a fatal error)."""


@runtime_checkable
class JobCoordinator(Protocol):
    """Decides which tasks this processor runs, and tells its listener."""

    processor_id: str

    def start(self) -> None:
        """Join the job; the listener hears of the first model asynchronously."""

    def stop(self) -> None:
        """Leave the job gracefully (others take over this processor's tasks at once)."""


@runtime_checkable
class MemberNotes(Protocol):
    """An optional coordinator capability: each member keeps one short note its peers can read (how far a
    ``--once`` run of an application got, so a stage does not end before the stages feeding it ended everywhere).

    A note outlives its writer (a processor that left keeps its last note), so readers ask only for the members
    of the model in force; one never written reads as absent.
    """

    def write_note(self, text: str) -> None:
        """Replace this processor's note with ``text``."""

    def clear_note(self) -> None:
        """Remove this processor's note (absent for its peers from now on); no note is fine."""

    def read_notes(self, processor_ids: list[str]) -> dict[str, str]:
        """The notes of ``processor_ids`` that have one."""
