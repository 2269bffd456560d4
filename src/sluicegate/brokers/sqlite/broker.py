"""The SQLite broker's verbs: enqueue, claim, record, heartbeat and release, recovery,
operator actions, retention and the read side. Each write is one transaction on the
writer connection (``connections``); a commit that brings work wakes this process's
subscribers and rings the doorbells of other processes (``watch``).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import secrets
import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from operator import itemgetter
from typing import Any

from ...codec import dumps, loads
from ...errors import BrokerUnavailable, ConfigError
from ...job import (
    Claim,
    ClaimedJob,
    Job,
    JobId,
    JobSpec,
    JobState,
    Progress,
    history_error,
    in_claim_order,
    stored_headers,
)
from ...limits import (
    Candidate,
    Limit,
    Need,
    admit,
    decode_needs,
    in_use_of,
    local_host,
    room,
)
from ...outcomes import Failed, failed
from .. import base
from ..base import (
    FORGET_WORKERS_AFTER,
    ClaimBatch,
    LimitFigures,
    QueueDepth,
    RecordBatch,
    Recovery,
    WorkerInfo,
    WorkerList,
    unknown_limit,
    worker_died_error,
)
from ..doorbell import open_doorbell
from ..sqlbase import (
    LimitRows,
    Row,
    SQLBroker,
    UrlOptions,
    limit_params,
    matched,
    paused_rows,
    schedule_rows,
    worker_params,
    worker_records,
)
from ..sqlfiles import JOB_COLUMNS, Query
from ..wakeups import Subscribers
from .actions import OperatorActions
from .connections import SYNC_MODES, Connections, parse_sqlite_url
from .watch import Watcher

ASYNC_THREADS = 2  # enqueue_async's threads per broker: writes take turns on one lock anyway
FINISHED_BELLS = ".done"  # the doorbell folder's suffix for finished jobs (job.wait)
CANCEL_BELLS = ".cancels"  # ... for cancels of running jobs (workers stop them)
LISTEN_WAIT = 2.0  # s subscribe_cancelled waits at most for this process's bell
MAX_GROUPS = 1000  # groups of equal needs a claim visits per queue (see gated_groups)
EXPIRE_BATCH = 1000  # expired jobs a claim cancels at most (its reads skip any others)
WAL_LIMIT_MB = 32.0  # default wal_limit_mb: a WAL file past it is checkpointed and truncated


_NO_PROGRESS: dict[str, Any] = {"fraction": None, "message": None}  # heartbeat keeps progress


def job_columns(table: str) -> str:
    """``{job_columns}`` in SQLite: the columns as stored (times are unix seconds already)."""
    return ", ".join(f"{table}.{c}" if table else c for c in JOB_COLUMNS)


class SQLiteBroker(OperatorActions, SQLBroker):
    dialect = "sqlite"
    unique_violation = (sqlite3.IntegrityError,)

    def __init__(self, url: str, clock: Callable[[], float] = time.time) -> None:
        self.url = url
        self.path, values = parse_sqlite_url(url)
        folder = os.path.dirname(os.path.abspath(self.path))
        if not os.path.isdir(folder):
            raise ConfigError(f"SQLite directory {folder!r} does not exist (from {url!r})")
        options = UrlOptions("SQLite", url, values)
        sync = options.choice("synchronous", "full", SYNC_MODES)
        busy_ms = options.number("busy_timeout", 10_000, int, least=0)
        self.poll_interval = options.number("poll_interval", 0.005, float, above=0)
        max_pages = options.number("max_pages", 0, int, least=0) or None
        wal_limit_mb = options.number("wal_limit_mb", WAL_LIMIT_MB, float, least=0)
        self._clock = clock
        self._load_queries({"job_columns": job_columns})
        self._limit_rows = LimitRows(self._queries)
        self._group_cursor: dict[str, str] = {}  # queue -> where the next group scan starts
        at = self._queries["ready_of_queue"].at
        self._claim_order = itemgetter(at["priority"], at["run_at"], at["id"])
        self._db = Connections(self.path, sync, busy_ms, max_pages, int(wal_limit_mb * 1e6))
        self.migrations_applied: list[int] = []
        self.migrate()
        self._db.open_reader()
        self._watcher = Watcher(open_doorbell(self.path), self.poll_interval, self._db.data_version)
        self._subscribers = Subscribers(self._watcher.run, self._watcher.interrupt)
        self._executor: ThreadPoolExecutor | None = None  # enqueue_async's, made on first use
        self._executor_lock = threading.Lock()
        # Waiters for results: a doorbell of their own (a ring after every ack must not
        # wake claimers), no data_version check (the waiting hub's slow poll covers writers
        # that cannot ring).
        self._done_watcher = Watcher(
            open_doorbell(self.path, FINISHED_BELLS), 1.0, lambda first: None
        )
        self._waiters = Subscribers(self._done_watcher.run, self._done_watcher.interrupt)
        # Workers told of cancelled running jobs: a doorbell of their own, rung only by a
        # cancel of held jobs. Where no bell can be bound (no Unix sockets, a path too
        # long for one), any other writer's commit seen in a 1 s poll stands in for the
        # ring: the worker renews its leases early, at most once a second.
        self._cancel_watcher = Watcher(
            open_doorbell(self.path, CANCEL_BELLS), 1.0, self._db.data_version, False
        )
        self._cancels = Subscribers(self._cancel_watcher.run, self._cancel_watcher.interrupt)

    def _now(self) -> float:
        return self._clock()

    def local_folder(self) -> str:
        """Beside the database file (``jobs.db.workers``), as its doorbells are: every
        process that uses the database reaches it, however its URL spells the path."""
        return os.path.realpath(self.path) + ".workers"

    # ---- migrations and closing ------------------------------------------
    def migrate(self) -> list[int]:
        """An up-to-date schema is read without the write lock, so opening a broker (a
        producer, a CLI command) never waits behind another process's write."""
        latest = max((m.version for m in self._migrations()), default=0)
        with self._db.peek() as conn:
            if self._schema_version(conn) >= latest:
                return []
        return super().migrate()

    def _migration_transaction(self) -> contextlib.AbstractContextManager[sqlite3.Connection]:
        return self._db.write()  # BEGIN IMMEDIATE: other migrators wait for the write lock

    def _prepare_migration(self, conn: sqlite3.Connection) -> None:
        conn.execute(self._queries["create_version_table"])

    def close(self) -> None:
        self._close_executor()
        self._subscribers.stop()
        self._watcher.close()
        self._waiters.stop()
        self._done_watcher.close()
        self._cancels.stop()
        self._cancel_watcher.close()
        self._db.close()

    # ---- producer side --------------------------------------------------
    def enqueue(self, specs: Sequence[JobSpec], connection: Any = None) -> list[Job]:
        if connection is not None:
            raise ConfigError("enqueue(connection=...) needs the postgresql:// broker")
        if not specs:
            return []
        q = self._queries
        now = self._clock()
        rows = [job_row(spec, now) for spec in specs]
        ids: list[int] = [0] * len(specs)
        existing: dict[int, Job] = {}
        with self._db.write() as conn:
            # Rows go in in batch order (ids are the claim order's last tie-break); each run
            # of specs without a unique key is one executemany.
            runs = itertools.groupby(range(len(specs)), key=lambda i: specs[i].unique_key is None)
            for plain_run, run in runs:
                indexes = list(run)
                if plain_run:
                    conn.executemany(q["insert_job"], [rows[i] for i in indexes])
                    # One writer holds the lock, so AUTOINCREMENT ids of this run are consecutive.
                    first = (
                        conn.execute("SELECT last_insert_rowid()").fetchone()[0] - len(indexes) + 1
                    )
                    for offset, i in enumerate(indexes):
                        ids[i] = first + offset
                    continue
                for i in indexes:
                    cur = conn.execute(q["insert_unique_job"], rows[i])
                    if cur.rowcount == 1:
                        ids[i] = cur.lastrowid or 0
                    else:
                        found = conn.execute(
                            q["unfinished_by_unique_key"], {"key": specs[i].unique_key}
                        ).fetchone()
                        existing[i] = self._jobs["unfinished_by_unique_key"].job(found)
        self._announce()
        # Built after commit, outside the write lock. Decoded from what was stored, so the
        # caller's own objects (tuples, lists mutated later) never leak into the result.
        jobs = []
        for i, row in enumerate(rows):
            (
                queue,
                task,
                args,
                kwargs,
                state,
                priority,
                run_at,
                attempts,
                key,
                _,
                needs,
                heads,
                expires_at,
            ) = row
            if i in existing:
                jobs.append(existing[i])
                continue
            jobs.append(
                Job.from_fields(
                    id=JobId(ids[i]),
                    task=task,
                    queue=queue,
                    state=JobState.READY if state is READY else JobState.SCHEDULED,
                    args=loads(args),
                    kwargs=loads(kwargs),
                    priority=priority,
                    max_attempts=attempts,
                    run_at=run_at,
                    enqueued_at=now,
                    unique_key=key,
                    limits=decode_needs(needs),
                    headers=stored_headers(heads),
                    expires_at=expires_at,
                )
            )
        return jobs

    # ---- hot path -------------------------------------------------------
    def claim(
        self,
        queues: Sequence[str],
        n: int,
        lease: float,
        worker_id: str,
        host: str = "",
        done: Sequence[Claim] = (),
    ) -> ClaimBatch:
        if n <= 0 or not queues:
            return ClaimBatch()
        with self._db.write(relaxed=True) as conn:
            batch = self._claim_in(conn, queues, n, lease, worker_id, host or local_host(), done)
        if batch.expired:  # committed: their waiters hear they ended
            self._ended()
        return batch

    def _claim_in(
        self,
        conn: sqlite3.Connection,
        queues: Sequence[str],
        n: int,
        lease: float,
        worker_id: str,
        host: str,
        done: Sequence[Claim] = (),
    ) -> ClaimBatch:
        """Promote due jobs, then claim: one queue in one statement; several by reading
        each queue's first ``n`` ready jobs (an index range each), taking the first ``n``
        of them all in claim order, and claiming those by id. When jobs that name limits
        wait in these queues, ``_claim_gated`` admits them instead."""
        q = self._queries
        token = secrets.randbits(62)
        now = self._clock()
        expired = len(conn.execute(q["expire_due"], {"now": now, "limit": EXPIRE_BATCH}).fetchall())
        conn.execute(q["promote_due"], {"now": now})
        params: dict[str, Any] = {"n": n, "token": token, "now": now, "lease": lease}
        params["worker"], params["host"] = worker_id, host
        wanted = list(dict.fromkeys(queues))
        if conn.execute(q["probe_gated"], {"queues": dumps(wanted)}).fetchone() is not None:
            batch = self._claim_gated(conn, wanted, n, params, done)
            batch.expired = expired
            return batch
        if len(wanted) == 1:
            name, params["queue"] = "claim_queue", wanted[0]
        else:
            candidates: list[Row] = []
            for queue in wanted:
                candidates += conn.execute(
                    q["ready_of_queue"], {"queue": queue, "n": n, "now": now}
                )
            candidates.sort(key=self._claim_order)
            at_id = q["ready_of_queue"].at["id"]
            name, params["ids"] = "claim_ids", dumps([r[at_id] for r in candidates[:n]])
        read = self._jobs[name]
        return ClaimBatch(
            in_claim_order([read.claimed(r, token) for r in conn.execute(q[name], params)]),
            expired=expired,
        )

    def _claim_gated(
        self,
        conn: sqlite3.Connection,
        wanted: list[str],
        n: int,
        params: dict[str, Any],
        done: Sequence[Claim],
    ) -> ClaimBatch:
        """Admit jobs that name limits, within the claim's write transaction (SQLite has
        one writer at a time, so the tokens read here cannot change before the commit).

        Reads the limits, the tokens held (from held jobs' needs) and the buckets; then,
        per queue, the ready jobs without limits and the heads of each group of equal
        needs, only as many per group as could start (and one more); ``admit`` picks in
        claim order."""
        q, rows = self._queries, self._limit_rows
        now, host = params["now"], params["host"]
        limits, _ = rows.limits(conn.execute(q["limit_rows"]))
        ended = dumps([[c.job_id, c.token] for c in done])
        in_use = in_use_of(rows.held(conn.execute(q["held_needs"], {"done": ended})), host, limits)
        rated = any(limit.rate is not None for limit in limits.values())
        buckets = rows.buckets(conn.execute(q["bucket_rows"])) if rated else {}
        candidates: list[Row] = []
        for queue in wanted:
            candidates += conn.execute(q["ready_of_queue"], {"queue": queue, "n": n, "now": now})
            for text in self._groups(conn, queue):
                fits = room(decode_needs(text), limits, in_use, buckets, now, host, n)
                # one more than could start: admit then sees the group wait, and says when
                heads = {"queue": queue, "limits": text, "n": min(n, fits + 1), "now": now}
                candidates += conn.execute(q["gated_heads"], heads)
        candidates.sort(key=self._claim_order)
        at = q["ready_of_queue"].at
        id_at, needs_at = at["id"], at["limits"]
        needs_of: dict[str | None, tuple[Need, ...]] = {None: ()}
        for r in candidates:
            if r[needs_at] not in needs_of:
                needs_of[r[needs_at]] = decode_needs(r[needs_at])
        admission = admit(
            (Candidate(r[id_at], needs_of[r[needs_at]]) for r in candidates),
            n,
            limits,
            in_use,
            buckets,
            now,
            host,
        )
        claimed: list[ClaimedJob] = []
        if admission.ids:
            params["ids"] = dumps(admission.ids)
            read, token = self._jobs["claim_ids"], params["token"]
            claimed = [read.claimed(r, token) for r in conn.execute(q["claim_ids"], params)]
        if admission.buckets:
            conn.executemany(
                q["save_bucket"], [(*key, b.tokens, b.at) for key, b in admission.buckets.items()]
            )
        return ClaimBatch(in_claim_order(claimed), admission.retry_in)

    def _groups(self, conn: sqlite3.Connection, queue: str) -> list[str]:
        """At most MAX_GROUPS groups of equal needs of ``queue``. With more than that, each
        claim goes on where the last one stopped (wrapping round), so every group is
        visited in turn and none waits for good behind a thousand full ones."""
        query = self._queries["gated_groups"]
        after = self._group_cursor.pop(queue, "")
        texts = [
            r[0]
            for r in conn.execute(query, {"queue": queue, "groups": MAX_GROUPS, "after": after})
        ]
        if len(texts) == MAX_GROUPS:
            self._group_cursor[queue] = texts[-1]
        elif after:  # wrap round to the first groups, up to the ones already read
            more = {"queue": queue, "groups": MAX_GROUPS - len(texts), "after": ""}
            texts += [r[0] for r in conn.execute(query, more) if r[0] <= after]
        return texts

    def has_work(self, queues: Sequence[str]) -> bool:
        params = {"queues": dumps(list(queues)), "now": self._clock()}
        with self._db.read() as conn:
            if conn.execute(self._queries["probe_ready"], params).fetchone():
                return True
            return conn.execute(self._queries["probe_due"], params).fetchone() is not None

    def next_due(self, queues: Sequence[str]) -> float | None:
        query = self._queries["next_scheduled"]
        with self._db.read() as conn:
            row = conn.execute(query, {"queues": dumps(list(queues))}).fetchone()
        at = row[query.at["run_at"]]
        return None if at is None else max(0.0, at - self._clock())

    def _write_record(self, batch: RecordBatch) -> list[Claim]:
        """One statement per kind of write (start, ack, retry, dead) for the whole batch."""
        with self._db.write(relaxed=batch.only_starts) as conn:  # see Connections.write
            return self._record_in(conn, batch)

    def _record_in(self, conn: sqlite3.Connection, batch: RecordBatch) -> list[Claim]:
        writes: list[tuple[str, list[list[Any]]]] = [
            ("start", [[c.job_id, c.token] for c in batch.starts]),
            ("ack", [[o.claim.job_id, o.claim.token, o.result_json] for o in batch.acks]),
            (
                "fail_dead",
                [
                    [o.claim.job_id, o.claim.token, _error_json(o), failed(o), _brief(o)]
                    for o in batch.burials
                ],
            ),
            (
                "fail_retry",
                [
                    [
                        o.claim.job_id,
                        o.claim.token,
                        _error_json(o),
                        o.retry_in,
                        failed(o),
                        _brief(o),
                    ]
                    for o in batch.retries
                ],
            ),
        ]
        now = self._clock()
        done: set[Claim] = set()
        for name, rows in writes:
            if rows:
                query = self._queries[name]
                done |= matched(query, conn.execute(query, {"batch": dumps(rows), "now": now}))
        return batch.lost(done)

    def heartbeat(
        self,
        claims: Sequence[Claim],
        lease: float,
        progress: Mapping[Claim, Progress] | None = None,
    ) -> list[Claim]:
        if not progress:
            return self._per_claim("heartbeat", claims, {"lease": lease, **_NO_PROGRESS})
        query = self._queries["heartbeat"]
        lost = []
        with self._db.write() as conn:
            now = self._clock()
            for claim in claims:
                reported = progress.get(claim)
                params: dict[str, Any] = {
                    "id": claim.job_id,
                    "token": claim.token,
                    "now": now,
                    "lease": lease,
                }
                params.update(
                    {"fraction": reported.fraction, "message": reported.message}
                    if reported is not None
                    else _NO_PROGRESS
                )
                if conn.execute(query, params).rowcount == 0:
                    lost.append(claim)
        return lost

    def release(self, claims: Sequence[Claim]) -> list[Claim]:
        lost = self._per_claim("release", claims, {})
        if len(lost) < len(claims):
            self._announce()
        return lost

    def _per_claim(self, name: str, claims: Sequence[Claim], extra: dict[str, Any]) -> list[Claim]:
        if not claims:
            return []
        query = self._queries[name]
        lost = []
        with self._db.write() as conn:
            now = self._clock()
            for claim in claims:
                params = {"id": claim.job_id, "token": claim.token, "now": now, **extra}
                if conn.execute(query, params).rowcount == 0:
                    lost.append(claim)
        return lost

    def recover_expired(self, limit: int = 1000) -> Recovery:
        q = self._queries
        with self._db.read() as conn:
            if conn.execute(q["probe_expired"], {"now": self._clock()}).fetchone() is None:
                return Recovery()
        with self._db.write() as conn:
            params = {"now": self._clock(), "limit": limit}
            rows = conn.execute(q["recover_expired"], params).fetchall()
        return self._recovered(q["recover_expired"], rows)

    def recover_worker(self, worker_id: str) -> Recovery:
        query = self._queries["recover_worker"]
        error = dumps(worker_died_error(worker_id).to_dict())
        with self._db.write() as conn:
            params = {"now": self._clock(), "worker": worker_id, "error": error}
            rows = conn.execute(query, params).fetchall()
        return self._recovered(query, rows)

    def _recovered(self, query: Query, rows: Sequence[Row]) -> Recovery:
        """What a recovery statement returned (``id``, ``state``); wakes claimers if any
        job is ready again."""
        id_at, state_at = query.at["id"], query.at["state"]
        dead = sorted(JobId(r[id_at]) for r in rows if r[state_at] == JobState.DEAD)
        requeued = sorted(JobId(r[id_at]) for r in rows if r[state_at] != JobState.DEAD)
        if requeued:
            self._announce()
        if dead:
            self._ended()
        return Recovery(requeued=requeued, dead=dead)

    # ---- limits --------------------------------------------------------------
    def register_limits(self, limits: Sequence[Limit]) -> None:
        if not limits:
            return
        with self._db.write() as conn:
            now = self._clock()
            for limit in limits:
                conn.execute(self._queries["register_limit"], {**limit_params(limit), "now": now})
        self._announce()  # claimers held back by a limit that was missing look again

    def set_limit(self, limit: Limit) -> None:
        params = {**limit_params(limit), "now": self._clock()}
        with self._db.write() as conn:
            if conn.execute(self._queries["set_limit"], params).rowcount == 0:
                known, _ = self._limit_rows.limits(conn.execute(self._queries["limit_rows"]))
                raise unknown_limit(limit.name, known)
        self._announce()

    def reset_limit(self, name: str) -> Limit:
        q = self._queries
        with self._db.write() as conn:
            row = conn.execute(q["declared_limit"], {"name": name}).fetchone()
            if row is None:
                known, _ = self._limit_rows.limits(conn.execute(q["limit_rows"]))
                raise unknown_limit(name, known)
            declared = loads(row[q["declared_limit"].at["declared"]])
            conn.execute(q["reset_limit"], {"name": name, "now": self._clock(), **declared})
            limits, _ = self._limit_rows.limits(conn.execute(q["limit_rows"]))
        self._announce()
        return limits[name]

    def limit_figures(self) -> LimitFigures:
        q, rows = self._queries, self._limit_rows
        with self._db.read() as conn:
            conn.execute("BEGIN")  # one snapshot for every figure
            try:
                limits, overridden = rows.limits(conn.execute(q["limit_rows"]))
                held = rows.held(conn.execute(q["held_needs"], {"done": "[]"}))
                waiting = rows.waiting(conn.execute(q["waiting_groups"]))
                buckets = rows.buckets(conn.execute(q["bucket_rows"]))
            finally:
                conn.execute("COMMIT")
        return LimitFigures(limits, overridden, held, waiting, buckets, self._clock())

    # ---- worker registry and signals ---------------------------------------------
    def publish_worker(
        self, info: WorkerInfo, held: int, snapshot: str, stopped: bool = False
    ) -> None:
        """Relaxed (see Connections.write): a publish lost in a power cut is followed by
        the next. Rings no doorbell: it makes no job ready."""
        params = worker_params(info, held, snapshot, stopped)
        with self._db.write(relaxed=True) as conn:
            now = self._clock()
            conn.execute(self._queries["forget_workers"], {"cutoff": now - FORGET_WORKERS_AFTER})
            conn.execute(self._queries["publish_worker"], {**params, "now": now})

    def list_workers(self, gone_within: float = 3600.0) -> WorkerList:
        query = self._queries["list_workers"]
        now = self._clock()
        with self._db.read() as conn:
            rows = conn.execute(query, {"since": now - gone_within}).fetchall()
        return WorkerList(now, worker_records(query, rows))

    # ---- retention ------------------------------------------------------------
    def prune_batch(self, state: JobState, older_than: float, batch: int) -> int:
        """Deletes a batch and takes its settled jobs out of the counts, in one transaction."""
        q = self._queries
        at = itemgetter(*(q["prune"].at[c] for c in ("queue", "state", "settled")))
        with self._db.write() as conn:
            params = {"state": state.value, "cutoff": self._clock() - older_than, "batch": batch}
            gone = [at(r) for r in conn.execute(q["prune"], params)]
            settled = Counter((queue, state_) for queue, state_, was in gone if was)
            conn.executemany(
                q["unsettle"],
                [{"queue": k[0], "state": k[1], "jobs": n} for k, n in sorted(settled.items())],
            )
        return len(gone)

    # ---- read side ----------------------------------------------------------
    def _reading(self) -> contextlib.AbstractContextManager[Any]:
        return self._db.read()

    def _stats_read(self) -> tuple[dict[str, QueueDepth], list[tuple[str, str, int]], int]:
        q = self._queries
        depths, finished = q["queue_depths"], q["finished_counts"]
        with self._db.read() as conn:
            conn.execute("BEGIN")  # one snapshot for both queries
            try:
                depth_rows = conn.execute(depths, {"now": self._clock()}).fetchall()
                finished_rows = conn.execute(finished).fetchall()
            finally:
                conn.execute("COMMIT")
        return self._depths(depths, depth_rows), *self._finished(finished, finished_rows)

    def _settle(self) -> None:
        """In steps of at most SETTLE_STEP jobs, each its own short write transaction
        (relaxed: lost in a power cut, the counts are as they were, and still right)."""
        q = self._queries
        bound = q["settle_bound"]
        more = True
        while more:
            with self._db.write(relaxed=True) as conn:
                row = conn.execute(bound, {"chunk": base.SETTLE_STEP}).fetchone()
                step_end, last = row[bound.at["step_end"]], row[bound.at["last"]]
                if last is None:
                    return
                more = step_end is not None
                upto = {"bound": step_end if more else last}
                conn.execute(q["settle"], upto)
                conn.execute(q["move_horizon"], upto)

    def _settle_from_stats(self) -> None:
        """A reader that cannot write (a read-only file, a busy lock) still gets its stats."""
        with contextlib.suppress(sqlite3.OperationalError, BrokerUnavailable):
            self._settle()

    # ---- wake-ups -----------------------------------------------------------
    def wakeups_healthy(self) -> bool:
        return self._watcher.bell is not None

    def _ring_others(self) -> None:
        """Ring every other process waiting on this database."""
        self._watcher.ring_others()

    # ---- paused queues ----
    def paused_queues(self) -> dict[str, base.PausedQueue]:
        query = self._queries["paused_queues"]
        with self._db.read() as conn:
            rows = conn.execute(query).fetchall()
        return paused_rows(query, rows)

    def _pause_queue(self, queue: str, by: str) -> bool:
        params = {"queue": queue, "by": by, "now": self._clock()}
        with self._db.write() as conn:
            paused = conn.execute(self._queries["pause_queue"], params).fetchone() is not None
        self._announce()  # workers look at the paused set again at once
        return paused

    def _resume_queue(self, queue: str) -> bool:
        with self._db.write() as conn:
            row = conn.execute(self._queries["resume_queue"], {"queue": queue}).fetchone()
        self._announce()  # its backlog is claimable again
        return row is not None

    # ---- asyncio producers ----
    # SQLite has no asyncio driver: every call waits on a file (and an fsync per commit), so
    # the sync call runs on a small pool of this broker's own threads, off the event loop.
    # The Jobs are built there too (decoding their payloads), and sqlite3 lets go of the GIL
    # while it works, so the loop keeps running. A cancelled await does not stop a write
    # already under way: the job may be stored, as with a sync enqueue interrupted late.
    async def enqueue_async(self, specs: Sequence[JobSpec], connection: Any = None) -> list[Job]:
        if connection is not None:
            raise ConfigError("enqueue(connection=...) needs the postgresql:// broker")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._threads(), self.enqueue, specs)

    async def get_job_async(self, job_id: int | str) -> Job | None:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._threads(), self.get_job, job_id)

    def _threads(self) -> ThreadPoolExecutor:
        with self._executor_lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(
                    ASYNC_THREADS, thread_name_prefix="sluicegate-sqlite-async"
                )
            return self._executor

    def _close_executor(self) -> None:
        with self._executor_lock:
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=True)

    # ---- waiting for results (job.wait) ----------------------------------------------
    def _ring_finished(self) -> None:
        """Ring the processes waiting for results: with none, one failed folder listing."""
        self._done_watcher.ring_others()

    def _ring_cancelled(self) -> None:
        self._cancel_watcher.ring_others()

    def subscribe_cancelled(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Also waits (at most LISTEN_WAIT s) until this process's bell is bound, so a
        cancel committed anywhere after this returns rings it (a worker starting)."""
        unsubscribe = self._cancels.add(callback)
        self._cancel_watcher.listening.wait(LISTEN_WAIT)
        return unsubscribe

    # ---- periodic schedules (issue 15) ----
    def schedule_states(self) -> base.ScheduleStates:
        query = self._queries["schedule_rows"]
        with self._reading() as conn:
            rows = conn.execute(query).fetchall()
        return base.ScheduleStates(schedule_rows(query, rows), self._clock())

    def register_schedules(self, names: Sequence[str]) -> None:
        if not names:
            return
        now = self._clock()
        with self._db.write() as conn:
            for name in names:
                conn.execute(self._queries["register_schedule"], {"name": name, "now": now})

    def enqueue_tick(self, name: str, tick: float, spec: JobSpec) -> Job | None:
        """Under the write lock: the compare-and-set of the last tick, the job, its id."""
        q = self._queries
        now = self._clock()
        row = job_row(spec, now)
        with self._db.write() as conn:
            params = {"name": name, "now": now, "tick": tick}
            if conn.execute(q["take_tick"], params).fetchone() is None:
                return None
            cur = conn.execute(q["insert_unique_job" if spec.unique_key else "insert_job"], row)
            if cur.rowcount == 1:
                job_id = cur.lastrowid or 0
            else:  # an unfinished job holds the tick's key: that one is the tick's job
                found = conn.execute(q["unfinished_by_unique_key"], {"key": spec.unique_key})
                job_id = int(found.fetchone()[q["unfinished_by_unique_key"].at["id"]])
            conn.execute(q["tick_job"], {"name": name, "job": job_id})
        self._announce()
        return self.get_job(job_id)


READY, SCHEDULED = JobState.READY.value, JobState.SCHEDULED.value  # plain str binds fast


def job_row(spec: JobSpec, now: float) -> tuple[Any, ...]:
    """One job's row in ``insert_job``'s column order: every insert path (an enqueue's
    batch, a schedule's tick) stores a job the same way."""
    run_at = spec.run_at if spec.run_at is not None else now + spec.delay
    return (
        spec.queue,
        spec.task,
        spec.args_json,
        spec.kwargs_json,
        READY if run_at <= now else SCHEDULED,  # job.initial_state, inlined
        spec.priority,
        run_at,
        spec.max_attempts,
        spec.unique_key,
        now,
        spec.limits,
        spec.headers,
        spec.expiry(now),
    )


def _error_json(outcome: Failed) -> str:
    return dumps(outcome.error.to_dict())


def _brief(outcome: Failed) -> str:
    """The failure's error as its history entry keeps it."""
    return dumps(history_error(outcome.error))
