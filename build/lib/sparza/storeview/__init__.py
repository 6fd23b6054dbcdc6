"""State a user can look at: a job's stores as its tasks last committed them, read without touching the job.

:class:`CommittedStores` reads them in Python (``sparza store get|scan|count`` is built on it);
:mod:`sparza.storeview.spark` is a Spark data source (``sparza-state``) that reads them as a DataFrame of
``task, key, value`` with the stores' serdes applied. See docs/state.md.
"""

from __future__ import annotations

from sparza.storeview.reader import CommittedStores, StoreRef, StoreViewError, TaskSnapshot

__all__ = ["CommittedStores", "StoreRef", "StoreViewError", "TaskSnapshot"]
