"""Rows in: the PostgreSQL broker's inserts, plain (a large run by ``COPY``, copyin.py;
a smaller one batched with ``unnest``; one job with plain parameters) and by unique key,
and the NOTIFY that wakes workers elsewhere. Plain inserts hand back Jobs built from
their specs and what the server decided (fresh.py), not read back.
Every path stores the job's limit needs (``JobSpec.limits``, canonical JSON text) and
its headers (``JobSpec.headers``, JSON text or None), and its expiry (``expires_at``,
or ``expires_in`` from the database clock)."""

from __future__ import annotations

import asyncio
import functools
import itertools
from collections.abc import Callable, Sequence
from typing import Any

from ...errors import BrokerUnavailable
from ...job import Job, JobSpec
from ..sqlbase import JobRows
from ..sqlfiles import Query
from .copyin import COPY_MIN, COPY_TYPES, CopyBatch
from .fresh import StoredRows

PLAIN_INSERTS = ("insert_jobs", "insert_one_notify")  # they return fragment_stored's columns


def tuple_rows(conn: Any) -> Any:
    """A cursor reading tuples: the caller's connection may have any row factory."""
    from psycopg.rows import tuple_row

    return conn.cursor(row_factory=tuple_row)


def spec_params(spec: JobSpec) -> dict[str, Any]:
    """One job's columns as the single-row inserts name their parameters."""
    return {
        "queue": spec.queue,
        "task": spec.task,
        "args": spec.args_json,
        "kwargs": spec.kwargs_json,
        "priority": spec.priority,
        "max_attempts": spec.max_attempts,
        "run_at": spec.run_at,
        "delay": spec.delay,
        "limits": spec.limits,
        "headers": spec.headers,
        "expires_at": spec.expires_at,
        "expires_in": spec.expires_in,
    }


def plain_params(
    specs: Sequence[JobSpec], now: float | None, channel: str, notify: bool
) -> dict[str, Any]:
    """The batched insert's parameters: one array per column."""
    return {
        "queue": [s.queue for s in specs],
        "task": [s.task for s in specs],
        "args": [s.args_json for s in specs],
        "kwargs": [s.kwargs_json for s in specs],
        "priority": [s.priority for s in specs],
        "max_attempts": [s.max_attempts for s in specs],
        # floats throughout: psycopg refuses a list that mixes ints and floats
        "delay": [float(s.delay) for s in specs],
        "run_at": [None if s.run_at is None else float(s.run_at) for s in specs],
        "limits": [s.limits for s in specs],
        "headers": [s.headers for s in specs],
        "expires_at": [None if s.expires_at is None else float(s.expires_at) for s in specs],
        "expires_in": [None if s.expires_in is None else float(s.expires_in) for s in specs],
        "now": now,
        "channel": channel,
        "queues": sorted({s.queue for s in specs}) if notify else [],
    }


def can_copy(conn: Any) -> bool:
    """COPY cannot run in pipeline mode, which a caller's connection may be in: then the
    batched INSERT takes the run."""
    return not conn.pgconn.pipeline_status  # PipelineStatus.OFF is 0


def key_kept_changing(spec: JobSpec) -> BrokerUnavailable:
    return BrokerUnavailable(
        f"unique key {spec.unique_key!r} kept changing hands during enqueue; try again"
    )


JOBS_SLICE = 100  # rows made into Jobs between two yields to the loop (enqueue_async)
UNIQUE_TRIES = 5  # the holder of the key can finish between our insert and our read


class Inserts:
    """The insert half of PostgresBroker (whose enqueue picks one of these)."""

    channel: str
    _queries: dict[str, Query]
    _jobs: dict[str, JobRows]
    _now: Callable[[], float | None]

    @functools.cached_property
    def _stored(self) -> dict[str, StoredRows]:
        """Readers of the plain inserts' rows (fresh.py)."""
        return {name: StoredRows(self._queries[name]) for name in PLAIN_INSERTS}

    def _insert(self, conn: Any, specs: Sequence[JobSpec]) -> list[Job]:
        """Rows go in batch order (ids are the claim order's last tie-break): each run of
        specs without a unique key is one statement (a COPY from COPY_MIN specs on),
        keyed specs go one at a time."""
        jobs: list[Job] = []
        now = self._now()
        for plain, run in itertools.groupby(specs, key=lambda s: s.unique_key is None):
            batch = list(run)
            if plain and len(batch) >= COPY_MIN and can_copy(conn):
                jobs.extend(self._copy_plain(conn, batch, now))
            elif plain:
                jobs.extend(self._insert_plain(conn, batch, now))
            else:
                jobs.extend(self._insert_unique(conn, spec, now) for spec in batch)
        self._notify_queues(conn, [s.queue for s in specs])
        return jobs

    def _insert_plain(
        self, conn: Any, specs: list[JobSpec], now: float | None, notify: bool = False
    ) -> list[Job]:
        query = self._queries["insert_jobs"]
        params = plain_params(specs, now, self.channel, notify)
        with tuple_rows(conn) as cur:
            rows = cur.execute(query, params).fetchall()
        return self._stored["insert_jobs"].jobs(specs, rows)

    def _copy_plain(self, conn: Any, specs: list[JobSpec], now: float | None) -> list[Job]:
        """A large run by COPY (copyin.py), in the caller's transaction: its ids and
        clock first, then the rows; the Jobs are built while the server takes the last."""
        with tuple_rows(conn) as cur:
            params = {"n": len(specs), "now": now}
            now_us, ids = cur.execute(self._queries["reserve_ids"], params).fetchone()
            batch = CopyBatch(specs, ids, now_us)
            with cur.copy(self._queries["copy_jobs"]) as copy:
                copy.set_types(COPY_TYPES)
                write = copy.write_row
                for row in batch.rows():
                    write(row)
                return batch.jobs()

    def _insert_one(self, conn: Any, spec: JobSpec) -> Job:
        params = {**spec_params(spec), "now": self._now(), "channel": self.channel}
        row = conn.execute(self._queries["insert_one_notify"], params).fetchone()
        return self._stored["insert_one_notify"].job(spec, row)

    def _insert_unique(self, conn: Any, spec: JobSpec, now: float | None) -> Job:
        q = self._queries
        params = {**spec_params(spec), "unique_key": spec.unique_key, "now": now}
        # The holder of the key can finish between our insert and our read: then go again.
        with tuple_rows(conn) as cur:
            for _ in range(UNIQUE_TRIES):
                row = cur.execute(q["insert_unique_job"], params).fetchone()
                if row is not None:
                    return self._jobs["insert_unique_job"].job(row)
                row = cur.execute(q["unfinished_by_unique_key"], params).fetchone()
                if row is not None:
                    return self._jobs["unfinished_by_unique_key"].job(row)
        raise key_kept_changing(spec)

    def _notify_queues(self, conn: Any, queues: Sequence[str]) -> None:
        params = {"channel": self.channel, "queues": sorted(set(queues))}
        conn.execute(self._queries["notify"], params)


# ---- asyncio producers ----
class AsyncInserts(Inserts):
    """The same inserts, with the same SQL and parameters, on a psycopg AsyncConnection
    (``enqueue_async``): only the awaiting differs."""

    async def _ainsert(self, conn: Any, specs: Sequence[JobSpec]) -> list[Job]:
        jobs: list[Job] = []
        now = self._now()
        for plain, run in itertools.groupby(specs, key=lambda s: s.unique_key is None):
            batch = list(run)
            if plain and len(batch) >= COPY_MIN and can_copy(conn):
                jobs.extend(await self._acopy_plain(conn, batch, now))
            elif plain:
                jobs.extend(await self._ainsert_plain(conn, batch, now))
            else:
                for spec in batch:
                    jobs.append(await self._ainsert_unique(conn, spec, now))
        params = {"channel": self.channel, "queues": sorted({s.queue for s in specs})}
        await conn.execute(self._queries["notify"], params)
        return jobs

    async def _ainsert_plain(
        self, conn: Any, specs: list[JobSpec], now: float | None, notify: bool = False
    ) -> list[Job]:
        """The batched insert, JOBS_SLICE rows per statement with a yield to the loop
        between them: adapting, reading and decoding a thousand rows at once would hold the
        loop for milliseconds. More than one slice needs the caller's transaction (a
        statement of its own commits alone)."""
        assert not (notify and len(specs) > JOBS_SLICE), "one slice per autocommit statement"
        query = self._queries["insert_jobs"]
        jobs: list[Job] = []
        for start in range(0, len(specs), JOBS_SLICE):
            if start:
                await asyncio.sleep(0)
            params = plain_params(specs[start : start + JOBS_SLICE], now, self.channel, notify)
            async with tuple_rows(conn) as cur:
                await cur.execute(query, params)
                rows = await cur.fetchall()
            jobs.extend(self._stored["insert_jobs"].jobs(specs[start : start + JOBS_SLICE], rows))
        return jobs

    async def _acopy_plain(self, conn: Any, specs: list[JobSpec], now: float | None) -> list[Job]:
        """``_copy_plain``, with a yield to the loop every JOBS_SLICE rows written and
        Jobs built."""
        async with tuple_rows(conn) as cur:
            await cur.execute(self._queries["reserve_ids"], {"n": len(specs), "now": now})
            now_us, ids = await cur.fetchone()
            batch = CopyBatch(specs, ids, now_us)
            async with cur.copy(self._queries["copy_jobs"]) as copy:
                copy.set_types(COPY_TYPES)
                for n, row in enumerate(batch.rows(), 1):
                    await copy.write_row(row)
                    if n % JOBS_SLICE == 0:
                        await asyncio.sleep(0)
                jobs: list[Job] = []
                for start in range(0, len(specs), JOBS_SLICE):
                    jobs.extend(batch.jobs(start, start + JOBS_SLICE))
                    await asyncio.sleep(0)
                return jobs

    async def _ainsert_one(self, conn: Any, spec: JobSpec) -> Job:
        params = {**spec_params(spec), "now": self._now(), "channel": self.channel}
        cur = await conn.execute(self._queries["insert_one_notify"], params)
        return self._stored["insert_one_notify"].job(spec, await cur.fetchone())

    async def _ainsert_unique(self, conn: Any, spec: JobSpec, now: float | None) -> Job:
        q = self._queries
        params = {**spec_params(spec), "unique_key": spec.unique_key, "now": now}
        async with tuple_rows(conn) as cur:
            for _ in range(UNIQUE_TRIES):
                await cur.execute(q["insert_unique_job"], params)
                row = await cur.fetchone()
                if row is not None:
                    return self._jobs["insert_unique_job"].job(row)
                await cur.execute(q["unfinished_by_unique_key"], params)
                row = await cur.fetchone()
                if row is not None:
                    return self._jobs["unfinished_by_unique_key"].job(row)
        raise key_kept_changing(spec)
