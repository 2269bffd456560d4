"""One ``list_jobs`` call as a value (``Listing``), and how a SQL broker answers it.

A filter becomes a few index ranges, each read newest first and cut at ``limit`` rows,
then merged by id: never a scan of the table, never a sort of more than those rows (the
backlog of a held state aside, which a lease bounds). The ranges, by filter:

- a unique key: that key's jobs (``jobs_unique_key``), the other filters checked on them;
- a task: one range per (state, queue) of the task in ``jobs_task``, which holds every
  job but the held (claimed, running) ones; those, few, off ``jobs_leased``;
- a state or a queue: one range per (state, queue) pair (``listed_by_queue``), the
  queues of a state found with a loose index scan (one seek per queue);
- nothing: the primary key from its end.

``before_id`` bounds every range (keyset paging), so a deep page costs what the first does.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, ClassVar

from ..job import HELD, Job, JobState, job_id_of
from .sqlfiles import Query

MAX_ID = 2**63 - 1  # job ids are 64-bit integers on every SQL broker

Range = tuple[str, dict[str, Any]]  # a listing statement and its parameters


@dataclass(frozen=True, slots=True)
class Listing:
    """The filters and page of one ``list_jobs`` call."""

    state: JobState | None = None
    queue: str | None = None
    task: str | None = None
    unique_key: str | None = None
    before_id: int | None = None
    limit: int = 100

    @classmethod
    def of(
        cls,
        state: JobState | None,
        queue: str | None,
        limit: int,
        task: str | None,
        unique_key: str | None,
        before_id: int | str | None,
    ) -> Listing:
        """Checked as every broker checks it: a state is a JobState (or its name), an id
        an integer or its decimal text (``job_id_of``)."""
        before = None if before_id is None else int(job_id_of(before_id))
        return cls(None if state is None else JobState(state), queue, task, unique_key, before,
                   limit)  # fmt: skip

    def matches(self, job: Job) -> bool:
        return (
            (self.state is None or job.state is self.state)
            and (self.queue is None or job.queue == self.queue)
            and (self.task is None or job.task == self.task)
            and (self.unique_key is None or job.unique_key == self.unique_key)
            and (self.before_id is None or job.id < self.before_id)
        )

    def page(self, jobs: Iterable[Job]) -> list[Job]:
        """The matching jobs, newest first, at most ``limit`` (the memory broker's way)."""
        found = sorted((j for j in jobs if self.matches(j)), key=lambda j: j.id, reverse=True)
        return found[: max(self.limit, 0)]

    @property
    def upto(self) -> int | None:
        """The highest id a page may hold (every range reads ``id <= upto``); None when no
        stored id can be below ``before_id``."""
        if self.before_id is None:
            return MAX_ID
        upto = min(self.before_id - 1, MAX_ID)
        return upto if upto >= -MAX_ID else None


class SQLListings:
    """``list_jobs`` of a SQL broker: the ranges of a listing (see the module's docstring),
    read in one transaction and merged. The dialect names which states its (state, queue)
    listing index holds (``listed_by_queue``); the others are read per state."""

    _queries: dict[str, Query]
    _jobs: dict[str, Any]  # JobRows per statement that returns job rows
    listed_by_queue: ClassVar[frozenset[JobState]] = frozenset(JobState)
    TASK_RANGES: ClassVar[frozenset[JobState]] = frozenset(JobState) - HELD  # in jobs_task

    def _listing(self) -> contextlib.AbstractContextManager[Any]:
        """A connection in one transaction for an operator's listing (the dialect's)."""
        raise NotImplementedError

    def list_jobs(
        self,
        state: JobState | None = None,
        queue: str | None = None,
        limit: int = 100,
        *,
        task: str | None = None,
        unique_key: str | None = None,
        before_id: int | None = None,
    ) -> list[Job]:
        listing = Listing.of(state, queue, limit, task, unique_key, before_id)
        upto = listing.upto
        if upto is None or listing.limit <= 0:
            return []
        found: list[tuple[int, str, Any]] = []
        with self._listing() as conn:
            for name, params in self._ranges(conn, listing):
                query = self._queries[name]
                rows = conn.execute(query, {**params, "upto": upto, "limit": listing.limit})
                at_id = query.at["id"]
                found += [(r[at_id], name, r) for r in rows]
        found.sort(key=lambda f: f[0], reverse=True)
        return [self._jobs[name].job(row) for _, name, row in found[: listing.limit]]

    def _ranges(self, conn: Any, f: Listing) -> list[Range]:
        states = list(JobState) if f.state is None else [f.state]
        if f.unique_key is not None:
            params = {"key": f.unique_key, "task": f.task, "queue": f.queue}
            return [("list_jobs_of_unique_key", {**params, "state": _value(f.state)})]
        if f.task is not None:
            ranges: list[Range] = []
            if any(s in HELD for s in states):
                params = {"task": f.task, "state": _value(f.state), "queue": f.queue}
                ranges.append(("list_held_of_task", params))
            for s in states:
                if s in self.TASK_RANGES:
                    by = {"task": f.task, "state": s.value}
                    queues = self._queues(conn, "queues_of_task_state", by, f.queue)
                    ranges += [("list_jobs_of_task", {**by, "queue": q}) for q in queues]
            return ranges
        if f.state is None and f.queue is None:
            return [("list_jobs", {})]
        ranges = []
        for s in states:
            if s not in self.listed_by_queue and f.queue is None:
                ranges.append(("list_jobs_of_state", {"state": s.value}))
                continue
            queues = self._queues(conn, "queues_of_state", {"state": s.value}, f.queue)
            ranges += [("list_jobs_of_state_queue", {"state": s.value, "queue": q}) for q in queues]
        return ranges

    def _queues(self, conn: Any, name: str, params: dict[str, Any], given: str | None) -> list[str]:
        """``[given]``, or every queue with jobs in that range (a loose index scan)."""
        if given is not None:
            return [given]
        query = self._queries[name]
        return [r[query.at["queue"]] for r in conn.execute(query, params)]


def _value(state: JobState | None) -> str | None:
    return None if state is None else state.value
