"""The executor interface every concurrency model implements, and the work item base.

An executor runs work items in its pool's slots and reports back through two callbacks;
it never talks to the broker about leases (the worker's main thread does all heartbeats,
acks and claims). Each model (``models/``) builds its pools' executors and the items they
run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, TypeVar

from ..job import Claim, ClaimedJob
from ..outcomes import Report


@dataclass(frozen=True, slots=True)
class WorkItem:
    """One claimed job on its way to a slot. Each model's item type adds what its
    executor needs to run the job."""

    claimed: ClaimedJob


StartCallback = Callable[[WorkItem], None]
# on_done(item, report, slot_free). slot_free is False only for an attempt that failed at
# its deadline while its code runs on (thread model): the slot stays busy until a second
# call, slot_free True, when the code really returns.
DoneCallback = Callable[[WorkItem, Report, bool], None]

ItemT_contra = TypeVar("ItemT_contra", bound=WorkItem, contravariant=True)


class Executor(Protocol[ItemT_contra]):
    def start(self, on_start: StartCallback, on_done: DoneCallback) -> None: ...

    def submit(self, item: ItemT_contra) -> None:
        """Run ``item`` in a free slot; the caller guarantees a slot is free."""

    def stop(self) -> None:
        """Stop taking work; in-flight items may still finish and report."""

    def interrupt(self, claim: Claim) -> None:
        """Stop ``claim``'s attempt if it runs here, as this model can (called from the
        worker's main thread). Its report still comes, through ``on_done``, and frees
        the slot; the worker ignores what it says."""
