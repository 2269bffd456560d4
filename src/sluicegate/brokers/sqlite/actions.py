"""The SQLite broker's operator actions: cancel and retry, one job or a filter's batch.

A batch is picked range by range as listings read them (``listing.SQLListings``), then
cancelled or revived by id (the same statements as a single job's), all under the one
write lock: nothing changes between the pick and the writes.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence

from ...codec import dumps
from ...job import Job, JobId, JobState
from ..base import one_per_key
from ..listing import SQLListings
from .connections import Connections


class OperatorActions(SQLListings):
    """The operator half of SQLiteBroker."""

    _db: Connections
    _clock: Callable[[], float]

    def _apply_one(self, query: str, job_id: int, by: str | None) -> tuple[Job | None, str | None]:
        get = self._queries["get_job"]
        with self._db.write() as conn:
            changed = self._apply_ids(conn, query, [job_id], by)
            row = conn.execute(get, {"id": job_id}).fetchone()
        if changed:
            return self._jobs["get_job"].job(row), None
        return None, row[get.at["state"]] if row else None

    def _apply_ids(
        self, conn: sqlite3.Connection, query: str, ids: Sequence[int], by: str | None = None
    ) -> int:
        """``cancel`` or ``revive`` on jobs by id; returns how many it changed. A revival
        takes settled jobs out of the counts first (nothing for a job it does not revive).
        ``by``: who asked, for a cancel's history entry."""
        if not ids:
            return 0
        params = {"ids": dumps(ids), "now": self._clock(), "by": by}
        if query == "revive":
            conn.execute(self._queries["unsettle_revived"], params)
        return int(conn.execute(self._queries[query], params).rowcount)

    def _shed(self, queue: str, priority: int, by: str) -> Job | None:
        """Pick and cancel under the one write lock: the pick is still ready when cancelled."""
        pick = self._queries["shed_pick"]
        with self._db.write() as conn:
            row = conn.execute(pick, {"queue": queue, "priority": priority}).fetchone()
            if row is None:
                return None
            job_id = int(row[pick.at["id"]])
            self._apply_ids(conn, "cancel", [job_id], by)
            got = conn.execute(self._queries["get_job"], {"id": job_id}).fetchone()
        job: Job = self._jobs["get_job"].job(got)
        return job

    def _revive_matching(self, queue: str | None, task: str | None, limit: int) -> int:
        """Under the write lock: nothing changes between the pick and the writes."""
        with self._db.write() as conn:
            picked = self._matching(conn, JobState.DEAD, queue, task, limit, free_key=True)
            return self._apply_ids(conn, "revive", one_per_key(picked))

    def _cancel_matching(
        self, state: JobState, queue: str | None, task: str | None, limit: int, by: str | None
    ) -> int:
        with self._db.write() as conn:
            picked = self._matching(conn, state, queue, task, limit, free_key=False)
            return self._apply_ids(conn, "cancel", [job_id for job_id, _ in picked], by)

    def _matching(
        self,
        conn: sqlite3.Connection,
        state: JobState,
        queue: str | None,
        task: str | None,
        limit: int,
        free_key: bool,
    ) -> list[tuple[JobId, str | None]]:
        """(id, unique key) of at most ``limit`` jobs in ``state`` of ``queue`` and ``task``,
        range by range as listings read them (``listing.SQLListings``)."""
        by_task = task is not None and state in self.TASK_RANGES
        query = self._queries["matching_by_task" if by_task else "matching_by_queue"]
        by = {"state": state.value, "task": task}
        queues = self._queues(conn, "queues_of_task_state" if by_task else "queues_of_state",
                              by, queue)  # fmt: skip
        at_id, at_key = query.at["id"], query.at["unique_key"]
        picked: list[tuple[JobId, str | None]] = []
        for name in queues:
            if len(picked) >= limit:
                break
            params = {**by, "queue": name, "free_key": free_key, "limit": limit - len(picked)}
            picked += [(JobId(r[at_id]), r[at_key]) for r in conn.execute(query, params)]
        return picked
