"""What the SQL brokers (SQLite, PostgreSQL) share, so each dialect keeps only what differs:
its connections, its locking, its SQL.

- Rows become Jobs by column name (``JobRows``), an undecodable row becoming a claimed
  job with a ``problem`` rather than an exception.
- ``record`` groups outcomes by event (``RecordBatch``) and wakes workers after retries.
- Operator actions (cancel, retry, and by filter) and their refusals.
- The migrations runner: read the version, apply pending numbered migrations, record them.
- Stats from the queue depths and the finished counts (settled, plus those not settled
  yet); queue depths and arrivals (one query each), worker registry rows by column name.
  Listings are ``listing.SQLListings``'.
- Options read from a broker URL's query string (``UrlOptions``).
"""

from __future__ import annotations

import contextlib
import time
from abc import abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from operator import itemgetter
from typing import Any, ClassVar, TypeVar

from ..codec import dumps, loads
from ..errors import ConfigError
from ..job import (
    HELD,
    Claim,
    ClaimedJob,
    ErrorInfo,
    Event,
    Job,
    JobId,
    JobState,
    Progress,
    in_order,
    job_id_of,
    stored_headers,
)
from ..limits import Bucket, Key, Limit, decode_needs
from ..outcomes import Outcome
from . import base
from .base import (
    Broker,
    Finished,
    PausedQueue,
    QueueDepth,
    QueueStats,
    RecordBatch,
    Retention,
    Stats,
    WorkerInfo,
    WorkerRecord,
    cancellable,
    refusal,
    stored_pools,
    unique_key_taken,
    was_held,
    who_asked,
    worker_record,
)
from .listing import MAX_ID, SQLListings
from .sqlfiles import JOB_COLUMNS, Migration, Query, Value, load_migrations, load_queries
from .wakeups import Subscribers

T = TypeVar("T")
Row = Sequence[Any]
BOOLEANS = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}


class JobRows:
    """Builds Jobs from the rows of one statement, reading its columns by name: where each
    column sits is looked up once, when the statement is loaded, not per row."""

    __slots__ = ("_pick",)

    def __init__(self, query: Query) -> None:
        self._pick = itemgetter(*(query.at[c] for c in JOB_COLUMNS))

    def job(self, row: Row) -> Job:
        (
            id_,
            queue,
            task,
            args,
            kwargs,
            state,
            priority,
            run_at,
            attempts,
            max_attempts,
            unique_key,
            worker_id,
            lease_expires_at,
            enqueued_at,
            started_at,
            finished_at,
            result,
            last_error,
            limits,
            history,
            progress,
            headers,
            expires_at,
        ) = self._pick(row)
        return Job.from_fields(
            id=JobId(id_),
            task=task,
            queue=queue,
            state=JobState(state),
            args=loads(args),
            kwargs=loads(kwargs),
            priority=priority,
            attempts=attempts,
            max_attempts=max_attempts,
            run_at=run_at,
            enqueued_at=enqueued_at,
            started_at=started_at,
            finished_at=finished_at,
            result=loads(result) if result is not None else None,
            last_error=ErrorInfo.from_dict(loads(last_error)) if last_error else None,
            unique_key=unique_key,
            worker_id=worker_id,
            lease_expires_at=lease_expires_at,
            limits=decode_needs(limits) if limits else (),
            history=stored_history(history),
            progress=stored_progress(progress),
            headers=stored_headers(headers),
            expires_at=expires_at,
        )

    def claimed(self, row: Row, token: int) -> ClaimedJob:
        """A claimed row; an undecodable payload becomes a ``problem`` instead of an
        exception, so one corrupt row sends one job to dead rather than stopping the claim."""
        try:
            job = self.job(row)
        except (ValueError, TypeError) as exc:
            fields = dict(zip(JOB_COLUMNS, self._pick(row), strict=True))
            job = Job.from_fields(
                id=JobId(fields["id"]),
                task=fields["task"],
                queue=fields["queue"],
                state=JobState(fields["state"]),
                attempts=fields["attempts"],
                max_attempts=fields["max_attempts"],
                run_at=fields["run_at"],
                enqueued_at=fields["enqueued_at"],
                priority=fields["priority"],
            )
            return ClaimedJob(Claim(job.id, token), job, f"corrupt job row: {exc}")
        return ClaimedJob(Claim(job.id, token), job)


def stored_progress(text: str | None) -> Progress | None:
    """A row's progress (JSON text, NULL until a task reported); anything unreadable reads
    as none, like a history."""
    if not text:
        return None
    try:
        return Progress.from_dict(loads(text))
    except ValueError:
        return None


def stored_history(text: str | None) -> list[dict[str, Any]]:
    """A row's history (JSON text, NULL while it has none); text that is no JSON array of
    objects reads as none: a job is never refused for what only a reader looks at."""
    if not text:
        return []
    try:
        decoded = loads(text)
    except ValueError:
        return []
    if not isinstance(decoded, list):
        return []
    return [in_order(e) for e in decoded if isinstance(e, dict)]


def matched(query: Query, rows: Iterable[Row]) -> set[Claim]:
    """The claims a batched write matched, from its ``id`` and ``token`` columns.

    Matching by id alone would let a stale claim pass for a live one on the same job."""
    at_id, at_token = query.at["id"], query.at["token"]
    return {Claim(JobId(r[at_id]), r[at_token]) for r in rows}


UNFINISHED_ORDER = (JobState.SCHEDULED, JobState.READY, JobState.CLAIMED, JobState.RUNNING)


def stats_of(depths: Mapping[str, QueueDepth], finished: Iterable[tuple[str, str, int]]) -> Stats:
    """Stats from the unfinished jobs' depths and (queue, finished state, jobs) counts: a
    queue appears when it has any job."""
    counts: dict[str, dict[JobState, int]] = {}
    for queue, d in depths.items():
        unfinished = (d.scheduled, d.ready, d.claimed, d.running)
        counts[queue] = {s: n for s, n in zip(UNFINISHED_ORDER, unfinished, strict=True) if n}
    for queue, state, jobs in finished:
        counts.setdefault(queue, {})[JobState(state)] = int(jobs)
    age = {q: d.oldest_ready_age_s for q, d in depths.items()}
    return Stats({q: QueueStats(c, age.get(q, 0.0)) for q, c in counts.items()})


WORKER_COLUMNS = ("id", "host", "pid", "version", "pools", "started_at", "last_seen",
                  "stopped_at", "held", "snapshot")  # fmt: skip


def worker_params(info: WorkerInfo, held: int, snapshot: str, stopped: bool) -> dict[str, Any]:
    """publish_worker's parameters but the clock."""
    return {
        "id": info.id,
        "host": info.host,
        "pid": info.pid,
        "version": info.version,
        "pools": dumps(list(info.pools)),
        "held": held,
        "snapshot": snapshot,
        "stopped": stopped,
    }


def worker_records(query: Query, rows: Iterable[Row]) -> list[WorkerRecord]:
    """Registry rows of ``query`` (WORKER_COLUMNS, times as unix seconds) as records."""
    pick = itemgetter(*(query.at[c] for c in WORKER_COLUMNS))
    out = []
    for id_, host, pid, version, pools, started, seen, stopped, held, snapshot in map(pick, rows):
        info = WorkerInfo(id_, host, int(pid), version, stored_pools(pools))
        out.append(worker_record(info, started, seen, stopped, held, snapshot))
    return out


class LimitRows:
    """Limits, held tokens and buckets from the rows of the named limit queries, by
    column name; a limit row becomes a ``Limit`` once per distinct row, not per claim."""

    def __init__(self, queries: Mapping[str, Query]) -> None:
        self._limits = queries["limit_rows"]
        self._held = queries["held_needs"]
        self._buckets = queries["bucket_rows"]
        self._waiting = queries["waiting_groups"]
        self._made: dict[tuple[Any, ...], Limit] = {}

    def limits(self, rows: Iterable[Row]) -> tuple[dict[str, Limit], frozenset[str]]:
        at = self._limits.at
        fields = itemgetter(*(at[c] for c in ("name", "concurrency", "rate", "burst", "scope",
                                             "partition_by")))  # fmt: skip
        out: dict[str, Limit] = {}
        overridden = set()
        for row in rows:
            values = fields(row)
            limit = self._made.get(values)
            if limit is None:
                limit = self._made[values] = Limit(*values)
            out[limit.name] = limit
            if row[at["overridden"]]:
                overridden.add(limit.name)
        return out, frozenset(overridden)

    def held(self, rows: Iterable[Row]) -> list[tuple[str, str | None, str | None, int]]:
        pick = itemgetter(*(self._held.at[c] for c in ("name", "part", "host", "cost")))
        return [(n, p, h, int(c)) for n, p, h, c in map(pick, rows)]

    def buckets(self, rows: Iterable[Row]) -> dict[Key, Bucket]:
        pick = itemgetter(*(self._buckets.at[c] for c in ("name", "part", "host", "tokens", "at")))
        return {(n, p, h): Bucket(t, a) for n, p, h, t, a in map(pick, rows)}

    def waiting(self, rows: Iterable[Row]) -> list[tuple[str, int, float]]:
        pick = itemgetter(*(self._waiting.at[c] for c in ("limits", "jobs", "oldest")))
        return [(text, int(jobs), float(oldest)) for text, jobs, oldest in map(pick, rows)]


def paused_rows(query: Query, rows: Iterable[Row]) -> dict[str, PausedQueue]:
    """The rows of ``paused_queues``, by queue."""
    at = query.at
    out = {}
    for row in rows:
        name = row[at["queue"]]
        out[name] = PausedQueue(name, row[at["paused_by"]], float(row[at["paused_at"]]))
    return out


def schedule_rows(query: Query, rows: Iterable[Row]) -> dict[str, base.ScheduleState]:
    """The rows of ``schedule_rows``, by name (a row without a name is the clock's)."""
    at = query.at
    out = {}
    for row in rows:
        name = row[at["name"]]
        if name is None:
            continue
        last, job = row[at["last_tick"]], row[at["last_job_id"]]
        out[name] = base.ScheduleState(
            name,
            float(row[at["since"]]),
            None if last is None else float(last),
            None if job is None else JobId(int(job)),
        )
    return out


def limit_params(limit: Limit) -> dict[str, Any]:
    """A limit's columns, and its declaration as JSON (kept for ``reset_limit``)."""
    return {
        "name": limit.name,
        "concurrency": limit.concurrency,
        "rate": limit.rate,
        "burst": limit.burst,
        "scope": limit.scope,
        "partition_by": limit.partition,
        "declared": dumps(
            {"concurrency": limit.concurrency, "rate": limit.rate, "burst": limit.burst}
        ),
    }


class UrlOptions:
    """A broker URL's own options (its query parameters), read with errors that name the
    URL (``shown``: with any password hidden) and the option."""

    def __init__(self, kind: str, shown: str, values: Mapping[str, str]) -> None:
        self.kind, self.shown, self.values = kind, shown, values

    def error(self, detail: str) -> ConfigError:
        return ConfigError(f"invalid {self.kind} URL {self.shown!r}: {detail}")

    def only(self, known: Iterable[str]) -> None:
        unknown = set(self.values) - set(known)
        if unknown:
            raise self.error(f"unknown option(s) {', '.join(sorted(unknown))}")

    def number(
        self,
        name: str,
        default: T,
        cast: Callable[[str], T],
        *,
        least: float | None = None,
        above: float | None = None,
    ) -> T:
        raw = self.values.get(name)
        if raw is None:
            return default
        try:
            value = cast(raw)
        except ValueError:
            raise self.error(f"{name} must be a number, not {raw!r}") from None
        if least is not None and value < least:  # type: ignore[operator]
            raise self.error(f"{name} must be at least {least:g}")
        if above is not None and not value > above:  # type: ignore[operator]
            raise self.error(f"{name} must be above {above:g}")
        return value

    def boolean(self, name: str, default: bool) -> bool:
        raw = self.values.get(name)
        if raw is None:
            return default
        value = BOOLEANS.get(raw.lower())
        if value is None:
            raise self.error(f"{name} must be true or false")
        return value

    def choice(self, name: str, default: str, choices: Sequence[str]) -> str:
        value = self.values.get(name, default).lower()
        if value not in choices:
            raise self.error(f"{name} must be one of {', '.join(choices)}")
        return value


class SQLBroker(SQLListings, Broker):
    """A broker over SQL storage: the shared shape of the SQLite and PostgreSQL brokers.

    A dialect sets ``dialect`` (its folder under sql/), loads its queries with
    ``_load_queries`` and supplies: ``_write_record`` (the batched writes of ``record``),
    ``_apply_one`` (one operator action), the migration hooks, ``_ring_others``, and the
    connections the read side uses (``_reading``, ``_listing``).
    """

    dialect: ClassVar[str]
    unique_violation: ClassVar[tuple[type[Exception], ...]] = ()  # errors of a unique index

    _queries: dict[str, Query]
    _jobs: dict[str, JobRows]  # per query that returns job rows
    _subscribers: Subscribers
    _waiters: Subscribers  # processes waiting for results (subscribe_finished)
    _cancels: Subscribers  # workers told of cancelled running jobs (subscribe_cancelled)
    migrations_applied: list[int]

    def _load_queries(self, values: Mapping[str, Value]) -> None:
        self._queries = load_queries(self.dialect, values)
        self._jobs = {
            name: JobRows(query)
            for name, query in self._queries.items()
            if set(JOB_COLUMNS) <= set(query.columns)
        }

    # ---- wake-ups ------------------------------------------------------------------------
    def _announce(self) -> None:
        """After a commit that makes work claimable (an enqueue, a retry due later, a
        release, a recovery, a revive): wake this process's subscribers, and others."""
        self._subscribers.notify_local()
        self._ring_others()

    def wake_claimers(self) -> None:
        self._ring_others()

    def _ring_others(self) -> None:
        """Wake other processes, for a dialect that cannot do so in the write's own SQL."""

    def subscribe(self, callback: Callable[[], None]) -> Callable[[], None]:
        return self._subscribers.add(callback)

    # ---- read side -----------------------------------------------------------------------
    @abstractmethod
    def _reading(self) -> contextlib.AbstractContextManager[Any]:
        """A connection for one short read (never the write lock)."""

    def _listing(self) -> contextlib.AbstractContextManager[Any]:
        """A connection for an operator's listing (a dialect may plan it per filter)."""
        return self._reading()

    def _may_exist(self, job_id: int) -> bool:
        """False for an id the storage cannot hold (asked before any query)."""
        return -MAX_ID - 1 <= job_id <= MAX_ID

    def get_job(self, job_id: int | str) -> Job | None:
        job_id = job_id_of(job_id)
        if not self._may_exist(job_id):
            return None
        with self._reading() as conn:
            row = conn.execute(self._queries["get_job"], {"id": job_id}).fetchone()
        return self._jobs["get_job"].job(row) if row else None

    # ---- signals -------------------------------------------------------------------------
    def queue_depths(self, queues: Sequence[str] | None = None) -> dict[str, QueueDepth]:
        """``queue_depths`` reads every queue; ``queue_depths_of`` only the index ranges of
        the queues given (its parameter: a JSON array on SQLite, an array on PostgreSQL)."""
        if queues is None:
            query, params = self._queries["queue_depths"], {"now": self._now()}
        else:
            query = self._queries["queue_depths_of"]
            params = {"now": self._now(), "queues": self._queue_list(queues)}
        with self._reading() as conn:
            rows = conn.execute(query, params).fetchall()
        return self._depths(query, rows)

    @staticmethod
    def _depths(query: Query, rows: Iterable[Row]) -> dict[str, QueueDepth]:
        fields = ("queue", "ready", "scheduled", "claimed", "running", "age_s")
        pick = itemgetter(*(query.at[c] for c in fields))
        return {
            q: QueueDepth(
                int(ready), int(scheduled), int(claimed), int(running), max(0.0, age or 0.0)
            )
            for q, ready, scheduled, claimed, running, age in map(pick, rows)
        }

    def stats(self) -> Stats:
        """Unfinished jobs off their partial indexes (``queue_depths``) and finished ones
        from the settled counts plus those not settled yet (``finished_counts``), in one
        snapshot: the cost follows the backlog and the jobs finished since the last
        settling, never the history. Past SETTLE_AT unsettled jobs, the call settles them
        afterwards (``_settle``), so the next call reads fewer."""
        depths, finished, unsettled = self._stats_read()
        if unsettled >= base.SETTLE_AT:
            self._settle_from_stats()
        return stats_of(depths, finished)

    @abstractmethod
    def _stats_read(self) -> tuple[dict[str, QueueDepth], list[tuple[str, str, int]], int]:
        """In one snapshot: the queue depths, the finished counts (queue, state, jobs) and
        how many finished jobs were not settled yet."""

    @staticmethod
    def _finished(query: Query, rows: Iterable[Row]) -> tuple[list[tuple[str, str, int]], int]:
        pick = itemgetter(*(query.at[c] for c in ("queue", "state", "jobs", "unsettled")))
        counts, unsettled = [], 0
        for queue, state, jobs, fresh in map(pick, rows):
            counts.append((queue, state, int(jobs)))
            unsettled += int(fresh)
        return counts, unsettled

    @abstractmethod
    def _settle(self) -> None:
        """Add the finished jobs not settled yet to the settled counts and move the horizon
        past them (see the dialect's 0004 migration)."""

    def _settle_from_stats(self) -> None:
        """``_settle`` for a stats call; a dialect may skip what a reader cannot write."""
        self._settle()

    def prune(self, retention: Retention, batch: int = 1000) -> int:
        """Also settles: a worker's pruner keeps the unsettled jobs few even when no one
        calls stats."""
        deleted = super().prune(retention, batch)
        self._settle()
        return deleted

    def arrivals(self, after_id: int | None) -> tuple[int, dict[str, int]]:
        """Off the primary key: the highest id, or a range of at most ARRIVALS_SCAN ids
        (read when called, so a test may lower it)."""
        last, query = self._queries["last_job_id"], self._queries["arrivals"]
        if after_id is not None and after_id >= MAX_ID:
            return after_id, {}  # no id is stored above it
        with self._reading() as conn:
            if after_id is None:
                return int(conn.execute(last).fetchone()[last.at["id"]]), {}
            params = {"after": max(after_id, 0), "scan": base.ARRIVALS_SCAN}
            rows = conn.execute(query, params).fetchall()
        pick = itemgetter(*(query.at[c] for c in ("queue", "jobs", "last")))
        counts, highest = {}, after_id
        for queue, jobs, top in map(pick, rows):
            counts[queue] = int(jobs)
            highest = max(highest, int(top))
        return highest, counts

    @abstractmethod
    def _now(self) -> float | None:
        """The clock parameter of the dialect's queries (``now``)."""

    def _queue_list(self, queues: Sequence[str]) -> Any:
        """A list of queues as the dialect's queries take it: a JSON array by default."""
        return dumps(list(queues))

    # ---- record --------------------------------------------------------------------------
    def record(self, started: Sequence[Claim], outcomes: Sequence[Outcome]) -> list[Claim]:
        batch = RecordBatch.of(started, outcomes)
        if not batch.claims:
            return []
        lost = self._write_record(batch)
        if batch.retries:  # due later: sleeping workers recompute their next wake-up
            self._announce()
        if batch.acks or batch.burials:
            self._ended()
        return lost

    @abstractmethod
    def _write_record(self, batch: RecordBatch) -> list[Claim]:
        """One transaction, one statement per non-empty group; returns the lost claims."""

    # ---- operator actions ----------------------------------------------------------------
    def cancel(self, job_id: int | str, *, by: str | None = None) -> Job:
        job = self._operator_action(Event.CANCEL, job_id_of(job_id), who_asked(by, "cancel"))
        self._ended()
        if was_held(job):
            self._cancelled()
        return job

    def shed(self, queue: str, priority: int, *, by: str) -> Job | None:
        job = self._shed(queue, priority, by)
        if job is not None:
            self._ended()
        return job

    def _shed(self, queue: str, priority: int, by: str) -> Job | None:
        """``shed`` in one transaction (the dialect's)."""
        raise NotImplementedError

    def retry(self, job_id: int | str) -> Job:
        job_id = job_id_of(job_id)
        try:
            job = self._operator_action(Event.REVIVE, job_id)
        except self.unique_violation:
            raise unique_key_taken(job_id) from None
        self._announce()
        return job

    def _operator_action(self, event: Event, job_id: int, by: str | None = None) -> Job:
        query = "cancel" if event is Event.CANCEL else "revive"
        if not self._may_exist(job_id):
            raise refusal(event, job_id, None)
        job, current = self._apply_one(query, job_id, by)
        if job is None:
            raise refusal(event, job_id, current)
        return job

    @abstractmethod
    def _apply_one(self, query: str, job_id: int, by: str | None) -> tuple[Job | None, str | None]:
        """Run an operator action's statement on one job in one transaction: the job as it
        left it, or None and the job's current state (None too when there is no such job).
        ``by``: who asked, for a cancel's history entry. A cancel of a held job tells the
        workers of every process (PostgreSQL: NOTIFY with the commit; SQLite: the caller
        rings ``_cancelled``)."""

    def retry_matching(
        self, *, queue: str | None = None, task: str | None = None, limit: int = 1000
    ) -> int:
        revived = self._revive_matching(queue, task, limit) if limit > 0 else 0
        if revived:
            self._announce()
        return revived

    def cancel_matching(
        self,
        *,
        state: JobState,
        queue: str | None = None,
        task: str | None = None,
        limit: int = 1000,
        by: str | None = None,
    ) -> int:
        state = cancellable(state)
        by = who_asked(by, "cancel")
        cancelled = self._cancel_matching(state, queue, task, limit, by) if limit > 0 else 0
        if cancelled:
            self._ended()
            if state in HELD:
                self._cancelled()
        return cancelled

    @abstractmethod
    def _revive_matching(self, queue: str | None, task: str | None, limit: int) -> int:
        """``retry_matching`` in one transaction: pick, revive, take the revived out of the
        settled counts; returns how many."""

    @abstractmethod
    def _cancel_matching(
        self, state: JobState, queue: str | None, task: str | None, limit: int, by: str | None
    ) -> int:
        """``cancel_matching`` in one transaction; returns how many. Held jobs cancelled
        tell the workers as ``_apply_one`` says."""

    # ---- migrations ----------------------------------------------------------------------
    def _migrations(self) -> list[Migration]:
        return load_migrations(self.dialect, self._migration_values())

    def _migration_values(self) -> Mapping[str, Value]:
        return {}

    def migrate(self) -> list[int]:
        """Apply pending numbered migrations in one transaction; returns those applied.

        An up-to-date schema costs one read and no lock; otherwise the dialect locks out
        other migrators and the version is read again under that lock."""
        migrations = self._migrations()
        latest = max((m.version for m in migrations), default=0)
        applied: list[int] = []
        with self._migration_transaction() as conn:
            if self._schema_version(conn) < latest:
                self._prepare_migration(conn)
                current = self._schema_version(conn)
                for migration in migrations:
                    if migration.version <= current:
                        continue
                    for statement in migration.statements:
                        conn.execute(statement)
                    conn.execute(
                        self._queries["record_migration"],
                        {"version": migration.version, "name": migration.name, "now": time.time()},
                    )
                    applied.append(migration.version)
        self.migrations_applied.extend(applied)
        return applied

    def _schema_version(self, conn: Any) -> int:
        """The schema's migration version: 0 while its version table is missing."""
        found = conn.execute(self._queries["version_table_exists"]).fetchone()
        if not found[self._queries["version_table_exists"].at["found"]]:
            return 0
        query = self._queries["schema_version"]
        return int(conn.execute(query).fetchone()[query.at["version"]])

    def _versions(self) -> tuple[int, int]:
        """(the schema's version, the latest this code knows), read without migrating."""
        latest = max((m.version for m in self._migrations()), default=0)
        with self._migration_transaction() as conn:
            return self._schema_version(conn), latest

    @abstractmethod
    def _migration_transaction(self) -> contextlib.AbstractContextManager[Any]:
        """A connection in one transaction, for migrations."""

    @abstractmethod
    def _prepare_migration(self, conn: Any) -> None:
        """Lock out other migrators and create the version table (and what it needs)."""

    # ---- waiting for results (job.wait) ----------------------------------------------------
    def _ended(self) -> None:
        """After a commit that ended jobs (ack, dead, cancel): wake this process's waiters,
        and others (``_ring_finished``)."""
        self._waiters.notify_local()
        self._ring_finished()

    def _ring_finished(self) -> None:
        """Wake other processes' waiters, for a dialect that cannot do so in the write's own
        SQL (PostgreSQL's NOTIFY goes out with the commit instead)."""

    def subscribe_finished(self, callback: Callable[[], None]) -> Callable[[], None]:
        return self._waiters.add(callback)

    # ---- cancels of running work (workers stop it) -----------------------------------
    def _cancelled(self) -> None:
        """After a commit that cancelled held jobs: wake this process's workers, and
        others (``_ring_cancelled``)."""
        self._cancels.notify_local()
        self._ring_cancelled()

    def _ring_cancelled(self) -> None:
        """Wake other processes' workers, for a dialect that cannot do so in the write's
        own SQL (PostgreSQL's NOTIFY goes out with the commit instead)."""

    def subscribe_cancelled(self, callback: Callable[[], None]) -> Callable[[], None]:
        return self._cancels.add(callback)

    def _one_read(self) -> contextlib.AbstractContextManager[Any]:
        """A connection for one read statement, on the waiters' path: every round trip
        saved is latency saved (PostgreSQL: autocommit, no BEGIN and COMMIT around it)."""
        return self._reading()

    def _id_list(self, ids: Sequence[int]) -> Any:
        """A list of job ids as the dialect's queries take it: a JSON array by default."""
        return dumps(list(ids))

    def finished_jobs(self, ids: Sequence[JobId]) -> Finished:
        """One statement (``finished_among``) for every id; ids no storage can hold are
        missing without asking."""
        possible = [i for i in dict.fromkeys(ids) if self._may_exist(i)]
        missing = {i for i in ids if not self._may_exist(i)}
        jobs: dict[JobId, Job] = {}
        if possible:
            query = self._queries["finished_among"]
            with self._one_read() as conn:
                rows = conn.execute(query, {"ids": self._id_list(possible)}).fetchall()
            at_waited, at_id, read = query.at["waited"], query.at["id"], self._jobs[query.name]
            for row in rows:
                if row[at_id] is None:
                    missing.add(JobId(row[at_waited]))
                else:
                    jobs[JobId(row[at_id])] = read.job(row)
        return Finished(jobs, frozenset(missing))
