"""The PostgreSQL broker's verbs: many workers on many machines, one server.

Claims are one statement with ``FOR UPDATE SKIP LOCKED`` over a partial index of ready
jobs that name no limit; while jobs that do are ready, claims of their queues go through
the gated claim instead (``gated``: two round trips under advisory locks per limit name).
Heartbeats, acks and failures are batched with ``unnest`` arrays and matched by
(job id, fencing token). Leases and due times use the server's clock (``now()``); tests
may pass a clock in. Wake-ups use LISTEN/NOTIFY (payload: a queue name only), with
polling as the fallback. Producers can enqueue inside their own psycopg transaction, and
``transactional`` tasks commit their writes together with the job's ack, on connections
of their own so that a long task never starves claims and heartbeats.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from ...codec import dumps
from ...errors import BrokerUnavailable, ConfigError, EnqueueFateUnknown, LeaseLost
from ...job import (
    HELD,
    Claim,
    Job,
    JobId,
    JobSpec,
    JobState,
    Progress,
    history_error,
    in_claim_order,
    job_id_of,
)
from ...limits import local_host
from ...outcomes import Failed, Outcome, failed
from ..base import (
    FORGET_WORKERS_AFTER,
    ClaimBatch,
    PausedQueue,
    QueueDepth,
    RecordBatch,
    Recovery,
    ScheduleStates,
    WorkerInfo,
    WorkerList,
    private_folder,
    was_held,
    worker_died_error,
)
from ..sqlbase import (
    Row,
    SQLBroker,
    matched,
    paused_rows,
    schedule_rows,
    worker_params,
    worker_records,
)
from ..sqlfiles import JOB_COLUMNS, Query
from ..wakeups import Subscribers
from .aconnections import AsyncConnections
from .connections import ConnectionLost, Connections, psycopg
from .copyin import COPY_MIN
from .fate import UnknownFate, ids_tokens
from .gated import Limits, rolled_back_on_error
from .inserts import AsyncInserts, tuple_rows
from .listener import Listener
from .url import Settings

LISTEN_WAIT = 2.0  # subscribe() waits this long at most for LISTEN to be in place
REVIVE_TRIES = 5  # retry_matching's runs when jobs of its unique keys keep appearing
TIMES = ("run_at", "lease_expires_at", "enqueued_at", "started_at", "finished_at", "expires_at")
# statement_timestamp(), not now(): now() is when the transaction began, and an ack in a
# transactional task's transaction would stamp finished_at at the task's start.
NOW = "coalesce(to_timestamp(%(now)s::float8), statement_timestamp())"


def job_columns(alias: str) -> str:
    """``{job_columns:ALIAS}``: the columns a Job is built from, times as unix seconds."""
    prefix = f"{alias}." if alias else ""
    return ", ".join(
        f"extract(epoch FROM {prefix}{c})::float8 AS {c}" if c in TIMES else f"{prefix}{c}"
        for c in JOB_COLUMNS
    )


def fate_unknown(exc: Exception, specs: Sequence[JobSpec]) -> EnqueueFateUnknown:
    """An enqueue whose commit was sent and whose answer never came."""
    keys = tuple(s.unique_key for s in specs)
    named = [k for k in keys if k is not None]
    if len(keys) == 1:
        what = "the job"
        advice = (
            f"enqueue it again with unique key {named[0]!r}: that returns it if it was stored"
            if named
            else "it has no unique key, so enqueueing it again may store it twice"
        )
    else:
        what = f"the {len(keys)} jobs"
        advice = (
            f"enqueue them again with the same unique keys ({', '.join(map(repr, named))})"
            if len(named) == len(keys)
            else f"{len(keys) - len(named)} of them have no unique key and may be stored twice "
            "if enqueued again"
        )
    return EnqueueFateUnknown(
        f"{exc}; the connection was lost while {what} committed, so it is unknown whether "
        f"{'it was' if len(keys) == 1 else 'they were'} stored: {advice}",
        keys,
    )


def lost_enqueue(exc: ConnectionLost, committing: bool, specs: Sequence[JobSpec]) -> Exception:
    """An enqueue whose connection was lost: before its commit went out, nothing was stored
    (BrokerUnavailable); after, its fate is unknown (EnqueueFateUnknown)."""
    if not committing:  # lost inside the transaction, before its COMMIT: rolled back
        return BrokerUnavailable(f"{exc} (nothing was stored)")
    return fate_unknown(exc, specs)


class PostgresBroker(AsyncInserts, Limits, SQLBroker):
    dialect = "postgresql"
    unique_violation = (psycopg.errors.UniqueViolation,) if psycopg is not None else ()
    supports_transactions = True
    cheap_empty_claim = True  # an empty claim writes nothing: idle workers need no probe first
    fresh_jobs = True  # enqueue builds new Jobs for each call
    records_with_claims = True  # a turn's starts and acks go in its claim's transaction

    def __init__(self, url: str, clock: Callable[[], float] | None = None) -> None:
        if psycopg is None:
            raise ConfigError(
                "the postgresql:// broker needs psycopg: pip install 'sluicegate[postgres]'"
            )
        self.url = url
        self.settings = settings = Settings.from_url(url)
        self.dsn, self.schema, self.channel = settings.dsn, settings.schema, settings.channel
        self.finished_channel = settings.finished_channel
        self.poll_interval = settings.poll_interval
        self._clock = clock
        self._load_queries(
            {"schema": settings.quoted_schema, "now": NOW, "job_columns": job_columns}
        )
        self.migrations_applied: list[int] = []
        self._fate = UnknownFate(self._queries["own_writes"])
        self._init_limits()
        self._db = Connections(settings)
        self._adb = AsyncConnections(self._db)  # opened by the first asyncio call
        try:
            if settings.migrate:
                self.migrate()
            else:
                self._check_migrated()
        except BaseException:
            self._db.close()
            raise
        self._listener = Listener(settings)
        self._subscribers = Subscribers(self._listener.run, self._listener.interrupt)
        # Waiters for results: a LISTEN connection of their own, opened on the first wait.
        self._done_listener = Listener(settings, settings.finished_channel)
        self._waiters = Subscribers(self._done_listener.run, self._done_listener.interrupt)
        # Workers told of cancelled running jobs: LISTEN on a connection of their own,
        # opened when a worker starts (only a cancel of held jobs NOTIFYs there).
        self._cancel_listener = Listener(settings, settings.cancel_channel)
        self._cancels = Subscribers(self._cancel_listener.run, self._cancel_listener.interrupt)

    def _now(self) -> float | None:
        return self._clock() if self._clock is not None else None

    def local_folder(self) -> str:
        """One per server, database and schema (not per user, password or option)."""
        return private_folder(f"postgresql:{self.settings.server}#{self.schema}")

    def close(self) -> None:
        self._subscribers.stop()
        self._listener.close()
        self._adb.close()
        self._waiters.stop()
        self._done_listener.close()
        self._cancels.stop()
        self._cancel_listener.close()
        self._db.close()

    # ---- migrations ---------------------------------------------------------------------
    def _migration_values(self) -> dict[str, str]:
        return {"schema": self.settings.quoted_schema}

    def _migration_transaction(self) -> contextlib.AbstractContextManager[Any]:
        return self._db.unbounded()  # DDL on a large table, or waiting for another migrator

    def _prepare_migration(self, conn: Any) -> None:
        """An advisory lock per schema serialises migrators (many processes may start at
        once); CREATE SCHEMA needs CREATE on the database, even IF NOT EXISTS: only if missing."""
        q, schema = self._queries, {"schema": self.schema}
        conn.execute(q["migration_lock"], schema)
        if not conn.execute(q["schema_exists"], schema).fetchone()[0]:
            conn.execute(f"CREATE SCHEMA {self.settings.quoted_schema}")
        conn.execute(q["create_version_table"])

    def _schema_version(self, conn: Any) -> int:
        table = {"version_table": f"{self.settings.quoted_schema}.schema_version"}
        if not conn.execute(self._queries["version_table_exists"], table).fetchone()[0]:
            return 0
        return int(conn.execute(self._queries["schema_version"]).fetchone()[0])

    def _check_migrated(self) -> None:
        current, latest = self._versions()
        if current < latest:
            raise ConfigError(
                f"PostgreSQL schema {self.schema!r} at {self.settings.server} is at version "
                f"{current}, this sluicegate needs {latest}, and the URL says migrate=false: "
                "run `sluicegate migrate --broker URL` (URL without migrate=false, as a role "
                "that may create tables in the schema)"
            )

    # ---- producer side ------------------------------------------------------------------
    def enqueue(self, specs: Sequence[JobSpec], connection: Any = None) -> list[Job]:
        if connection is not None and not isinstance(connection, psycopg.Connection):
            raise ConfigError(
                "enqueue(connection=...) takes a psycopg 3 Connection with an open "
                f"transaction, not {type(connection).__name__}"
                + (
                    " (use enqueue_async)"
                    if isinstance(connection, psycopg.AsyncConnection)
                    else ""
                )
            )
        if not specs:
            return []
        if connection is not None:
            # The caller's transaction: no commit here; NOTIFY goes out when it commits.
            return self._insert(connection, specs)
        committing = False  # every statement sent is one that commits (or the COMMIT)
        try:
            if len(specs) == 1 and specs[0].unique_key is None:
                # One statement, its own transaction: row and wake-up commit in one round trip.
                with self._db.single() as conn:
                    committing = True
                    jobs = [self._insert_one(conn, specs[0])]
            elif len(specs) < COPY_MIN and all(s.unique_key is None for s in specs):
                with self._db.single() as conn:
                    committing = True
                    jobs = self._insert_plain(conn, list(specs), self._now(), notify=True)
            else:
                with self._db.transaction() as conn:
                    jobs = self._insert(conn, specs)
                    committing = True  # the COMMIT goes out as the block ends
        except ConnectionLost as exc:
            raise lost_enqueue(exc, committing, specs) from None
        self._subscribers.notify_local()
        return jobs

    # ---- hot path -----------------------------------------------------------------------
    def claim(
        self,
        queues: Sequence[str],
        n: int,
        lease: float,
        worker_id: str,
        host: str = "",
        done: Sequence[Claim] = (),
    ) -> ClaimBatch:
        """The plain claim, one statement in its own transaction: an idle worker's claim is
        one round trip. It takes only jobs that name no limit, and none if a wanted queue has
        jobs that do ("gated"): then, and until a gated claim finds none left, this set of
        queues claims through the gated claim (``claim_gated``), which admits those and
        takes the others too, all in one claim order.

        A plain claim that promoted due jobs of its queues claims nothing (see the claim
        statement); the second statement, without promoting, sees them committed."""
        self._db.expect_lease(lease)
        if n <= 0 or not queues:
            return ClaimBatch()
        wanted = tuple(dict.fromkeys(queues))
        token = secrets.randbits(62)
        if not self._gated_seen.get(wanted):
            query = self._queries["claim"]
            params = self._claim_params(wanted, n, token, lease, worker_id)
            with self._db.single() as conn:
                rows = conn.execute(query, params).fetchall()
                expired = rows[0][query.at["expired"]] if rows else 0
                if rows and rows[0][query.at["promoted"]]:
                    rows = conn.execute(query, {**params, "promote": False}).fetchall()
                    expired += rows[0][query.at["expired"]] if rows else 0
            if expired:  # NOTIFY went out with the commit; this process's waiters too
                self._waiters.notify_local()
            if not (rows and rows[0][query.at["gated"]]):
                at_id, read = query.at["id"], self._jobs["claim"].claimed
                return ClaimBatch(
                    in_claim_order([read(r, token) for r in rows if r[at_id] is not None]),
                    expired=expired,
                )
            self._gated_seen[wanted] = True  # it claimed nothing: the gated claim takes over
        else:
            expired = 0
        jobs, retry_in, gone = self.claim_gated(
            wanted, n, lease, worker_id, host or local_host(), token, done
        )
        if gone:
            self._waiters.notify_local()
        return ClaimBatch(in_claim_order(jobs), retry_in, expired + gone)

    def _claim_params(
        self, wanted: tuple[str, ...], n: int, token: int, lease: float, worker_id: str
    ) -> dict[str, Any]:
        return {
            "queues": list(wanted),
            "n": n,
            "token": token,
            "lease": lease,
            "worker": worker_id,
            "now": self._now(),
            "promote": True,
            "finished": self.finished_channel,
            "relax": True,
        }

    def claim_and_record(
        self,
        queues: Sequence[str],
        n: int,
        lease: float,
        worker_id: str,
        started: Sequence[Claim],
        outcomes: Sequence[Outcome],
    ) -> tuple[ClaimBatch, list[Claim]] | None:
        """A worker's turn record (starts and acks, ``record_turn``) and the plain claim,
        pipelined in one transaction (BEGIN and COMMIT as statements): one round trip and
        one commit, which waits for the WAL flush when it acks. None, with nothing sent,
        where that does not apply: failures or retries to record, or a set of queues that
        claims through the gated claim.

        A claim that promoted due jobs or met gated ones claims nothing here (the record
        is written all the same) and says to look again at once (``retry_in`` 0): the
        next claim, a plain one or the gated claim, takes them."""
        self._db.expect_lease(lease)
        batch = RecordBatch.of(started, outcomes)
        wanted = tuple(dict.fromkeys(queues))
        if n <= 0 or not wanted or batch.burials or batch.retries or self._gated_seen.get(wanted):
            return None
        token = secrets.randbits(62)
        q, query = self._queries, self._queries["claim"]
        params = self._claim_params(wanted, n, token, lease, worker_id)
        params["relax"] = not batch.acks
        turn = {
            "start_ids": [c.job_id for c in batch.starts],
            "start_tokens": [c.token for c in batch.starts],
            "ack_ids": [o.claim.job_id for o in batch.acks],
            "ack_tokens": [o.claim.token for o in batch.acks],
            "results": [o.result_json for o in batch.acks],
            "now": params["now"],
        }
        try:
            with self._db.single() as conn, rolled_back_on_error(conn):
                with conn.pipeline():  # one round trip, COMMIT included
                    conn.execute("BEGIN")
                    recorded = conn.execute(q["record_turn"], turn)
                    claimed = conn.execute(query, params)
                    conn.execute("COMMIT")
                    if batch.acks:
                        self._notify_finished_after(conn)
                done = matched(q["record_turn"], recorded.fetchall())
                rows = claimed.fetchall()
                unmatched = batch.lost(done)
                if unmatched:  # rare: a write this handle could not see may have landed
                    done |= self._fate.own_writes(conn, unmatched)
        except BrokerUnavailable:
            self._fate.remember(batch.claims)  # perhaps committed: see _write_record
            raise
        first = rows[0]
        expired = first[query.at["expired"]]
        if batch.acks:
            self._ended()
        elif expired:
            self._waiters.notify_local()
        gated = bool(first[query.at["gated"]])
        if gated:
            self._gated_seen[wanted] = True
        at_id, read = query.at["id"], self._jobs["claim"].claimed
        jobs = [read(r, token) for r in rows if r[at_id] is not None]
        again = gated or bool(first[query.at["promoted"]])
        return ClaimBatch(in_claim_order(jobs), 0.0 if again else None, expired), batch.lost(done)

    def has_work(self, queues: Sequence[str]) -> bool:
        with self._db.transaction() as conn:
            params = {"queues": list(queues), "now": self._now()}
            return bool(conn.execute(self._queries["probe_work"], params).fetchone()[0])

    def next_due(self, queues: Sequence[str]) -> float | None:
        with self._db.transaction() as conn:
            params = {"queues": list(queues), "now": self._now()}
            due_in = conn.execute(self._queries["next_scheduled"], params).fetchone()[0]
        return None if due_in is None else max(0.0, float(due_in))

    def _write_record(self, batch: RecordBatch) -> list[Claim]:
        """Starts and outcomes in one transaction, in one round trip: BEGIN, the writes and
        COMMIT go out in one pipeline, and their rows are read once it has ended (only
        retries, whose queues are notified, read theirs before the COMMIT)."""
        try:
            with self._db.single() as conn, rolled_back_on_error(conn):
                with conn.pipeline():
                    conn.execute("BEGIN")
                    if batch.only_starts:  # losing them in a crash leaves jobs "claimed"
                        conn.execute("SET LOCAL synchronous_commit = off")
                    written = self._record_in(conn, batch)
                    conn.execute("COMMIT")
                    if batch.acks or batch.burials:
                        self._notify_finished_after(conn)
                done: set[Claim] = set()
                for query, cursor in written:
                    done |= matched(query, cursor)
                unmatched = batch.lost(done)
                if unmatched:  # rare: a write this handle could not see may have landed
                    done |= self._fate.own_writes(conn, unmatched)
        except BrokerUnavailable:
            # Perhaps at COMMIT: whether it was written stays unknown until the caller retries.
            self._fate.remember(batch.claims)
            raise
        # Any other claim that ended (ack, fail, release, recovery, cancel) is lost for every
        # later call, its own token included: fencing, as on every broker.
        return batch.lost(done)

    def _record_in(self, conn: Any, batch: RecordBatch) -> list[tuple[Query, Any]]:
        """The batched writes of ``record``, one statement per kind, queued in ``conn``'s
        pipeline; returns each statement with its cursor (or rows), read after the COMMIT."""
        q, now = self._queries, self._now()
        written: list[tuple[Query, Any]] = []
        params: dict[str, Any]
        if batch.starts:
            params = {**ids_tokens(batch.starts), "now": now}
            written.append((q["start"], conn.execute(q["start"], params)))
        if batch.acks:
            params = {**ids_tokens([o.claim for o in batch.acks]), "now": now}
            params["results"] = [o.result_json for o in batch.acks]
            written.append((q["ack"], conn.execute(q["ack"], params)))
        if batch.burials:
            params = {**ids_tokens([o.claim for o in batch.burials]), "now": now}
            params["errors"] = [dumps(o.error.to_dict()) for o in batch.burials]
            params["events"] = [failed(o) for o in batch.burials]
            params["briefs"] = [_brief(o) for o in batch.burials]
            written.append((q["fail_dead"], conn.execute(q["fail_dead"], params)))
        if batch.retries:
            params = {**ids_tokens([o.claim for o in batch.retries]), "now": now}
            params["errors"] = [dumps(o.error.to_dict()) for o in batch.retries]
            params["retry_in"] = [o.retry_in for o in batch.retries]
            params["events"] = [failed(o) for o in batch.retries]
            params["briefs"] = [_brief(o) for o in batch.retries]
            rows = conn.execute(q["fail_retry"], params).fetchall()  # a round trip of its own
            written.append((q["fail_retry"], rows))
            if rows:  # due later: sleeping workers elsewhere recompute their next wake-up
                at_queue = q["fail_retry"].at["queue"]
                self._notify_queues(conn, [r[at_queue] for r in rows])
        return written

    def heartbeat(
        self,
        claims: Sequence[Claim],
        lease: float,
        progress: Mapping[Claim, Progress] | None = None,
    ) -> list[Claim]:
        self._db.expect_lease(lease)
        if not claims:
            return []
        query = self._queries["heartbeat"]
        reported = [(progress or {}).get(c) for c in claims]
        with self._db.transaction() as conn:
            params: dict[str, Any] = {**ids_tokens(claims), "lease": lease, "now": self._now()}
            params["fractions"] = [p.fraction if p else None for p in reported]
            params["messages"] = [p.message if p else None for p in reported]
            alive = matched(query, conn.execute(query, params))
            alive |= self._fate.own_writes(conn, [c for c in claims if c not in alive])
        return [c for c in claims if c not in alive]

    def release(self, claims: Sequence[Claim]) -> list[Claim]:
        if not claims:
            return []
        query = self._queries["release"]
        with self._db.transaction() as conn:
            rows = conn.execute(query, {**ids_tokens(claims), "now": self._now()}).fetchall()
            if rows:
                self._notify_queues(conn, [r[query.at["queue"]] for r in rows])
        released = matched(query, rows)
        if released:
            self._announce()
        return [c for c in claims if c not in released]

    def recover_expired(self, limit: int = 1000) -> Recovery:
        query = self._queries["recover_expired"]
        with self._db.transaction() as conn:
            rows = conn.execute(query, {"limit": limit, "now": self._now()}).fetchall()
            requeued, dead = self._recovered(conn, query, rows)
        if requeued:
            self._announce()
        return Recovery(requeued=requeued, dead=dead)

    def recover_worker(self, worker_id: str) -> Recovery:
        query = self._queries["recover_worker"]
        error = dumps(worker_died_error(worker_id).to_dict())
        params = {"worker": worker_id, "error": error, "now": self._now()}
        with self._db.transaction() as conn:
            conn.execute(self._queries["recover_worker_settings"])
            rows = conn.execute(query, params).fetchall()
            requeued, dead = self._recovered(conn, query, rows)
        if requeued:
            self._announce()
        return Recovery(requeued=requeued, dead=dead)

    def _recovered(
        self, conn: Any, query: Query, rows: Sequence[Row]
    ) -> tuple[list[JobId], list[JobId]]:
        """(requeued, dead) from a recovery's rows (``id``, ``state``, ``queue``); notifies
        the queues of the requeued jobs in the recovery's own transaction."""
        at_id, at_state, at_queue = (query.at[c] for c in ("id", "state", "queue"))
        requeued = [r for r in rows if r[at_state] == JobState.READY]
        if requeued:
            self._notify_queues(conn, [r[at_queue] for r in requeued])
        if any(r[at_state] == JobState.DEAD for r in rows):
            self._notify_finished(conn)
        return (
            sorted(JobId(r[at_id]) for r in requeued),
            sorted(JobId(r[at_id]) for r in rows if r[at_state] == JobState.DEAD),
        )

    # ---- transactional completion -------------------------------------------------------
    @contextlib.contextmanager
    def transaction(self) -> Iterator[Any]:
        """A psycopg connection in an open transaction; commits on success, else rolls back.

        Taken from a pool of its own: a task holds it for as long as it runs, and must not
        starve the claims and heartbeats of the main pool."""
        with self._db.task_transaction() as conn:
            yield conn

    def ack_on(self, connection: Any, claim: Claim, result_json: str) -> None:
        """Ack inside the caller's transaction (a transactional task's own connection).

        Commits or rolls back with the caller's writes; LeaseLost if the token is stale."""
        query = self._queries["ack"]
        params = {**ids_tokens([claim]), "results": [result_json], "now": self._now()}
        with self._db.bounded(connection), tuple_rows(connection) as cur:
            done = matched(query, cur.execute(query, params).fetchall())
            if done:  # goes out when the caller commits
                cur.execute(
                    self._queries["notify_finished"], {"channel": self.settings.finished_channel}
                )
        if claim not in done:
            raise LeaseLost(claim.job_id, claim.token)
        # The caller's COMMIT may land any moment (or break, fate unknown). Remembered now,
        # before that commit hands the row to a start or heartbeat of this claim waiting on
        # its lock: those find the task's own ack, which is no lost lease (own_writes).
        self._fate.remember([claim])

    # ---- operator actions ---------------------------------------------------------------
    def _apply_one(self, query: str, job_id: int, by: str | None) -> tuple[Job | None, str | None]:
        get = self._queries["get_job"]
        with self._db.transaction() as conn:
            params = {"id": job_id, "now": self._now(), "by": by}
            if query == "revive":  # a settled job leaves the counts (nothing if not revived)
                conn.execute(self._queries["lock_horizon"])
                conn.execute(self._queries["unsettle_revived"], params)
            row = conn.execute(self._queries[query], params).fetchone()
            if row is not None:
                job = self._jobs[query].job(row)
                if query == "revive":
                    self._notify_queues(conn, [row[self._queries[query].at["queue"]]])
                else:
                    self._notify_finished(conn)
                    if was_held(job):
                        self._notify_cancelled(conn)
                return job, None
            current = conn.execute(get, {"id": job_id}).fetchone()
        return None, current[get.at["state"]] if current else None

    def _shed(self, queue: str, priority: int, by: str) -> Job | None:
        """Pick (locked: no claim takes it) and cancel in one transaction."""
        pick = self._queries["shed_pick"]
        with self._db.transaction() as conn:
            row = conn.execute(pick, {"queue": queue, "priority": priority}).fetchone()
            if row is None:
                return None
            params = {"id": row[pick.at["id"]], "now": self._now(), "by": by}
            got = conn.execute(self._queries["cancel"], params).fetchone()
            if got is None:
                return None
            self._notify_finished(conn)
            return self._jobs["cancel"].job(got)

    def _revive_matching(self, queue: str | None, task: str | None, limit: int) -> int:
        """Holds the horizon row (the revived leave the settled counts), as a revive does.
        Runs again when a job of a picked job's unique key appeared meanwhile."""
        query = self._queries["revive_matching"]
        params = {"queue": queue, "task": task, "limit": limit, "now": self._now()}
        for attempt in range(1, REVIVE_TRIES + 1):
            try:
                with self._filtered() as conn:
                    conn.execute(self._queries["lock_horizon"])
                    rows = conn.execute(query, params).fetchall()
                    if rows:
                        self._notify_queues(conn, [r[query.at["queue"]] for r in rows])
                return len(rows)
            except self.unique_violation:
                if attempt == REVIVE_TRIES:
                    raise
        raise AssertionError("unreachable")

    def _cancel_matching(
        self, state: JobState, queue: str | None, task: str | None, limit: int, by: str | None
    ) -> int:
        query = self._queries["cancel_matching"]
        params = {"state": state.value, "queue": queue, "task": task, "limit": limit, "by": by}
        with self._filtered() as conn:
            cancelled = len(conn.execute(query, {**params, "now": self._now()}).fetchall())
            if cancelled:
                self._notify_finished(conn)
                if state in HELD:
                    self._notify_cancelled(conn)
        return cancelled

    # ---- read side ----------------------------------------------------------------------
    def _reading(self) -> contextlib.AbstractContextManager[Any]:
        return self._db.transaction()

    @contextlib.contextmanager
    def _filtered(self) -> Iterator[Any]:
        """A transaction for an operator's filter (listings, bulk actions): custom plans
        (the filter's values pick the index), and no bitmap scans: a bitmap reads a whole
        range to sort or lock it, where a scan in the index's order stops at the page or
        the batch, however stale the planner's estimate of the range."""
        with self._db.custom_plans() as conn:
            conn.execute("SET LOCAL enable_bitmapscan = off")
            yield conn

    def _listing(self) -> contextlib.AbstractContextManager[Any]:
        return self._filtered()

    listed_by_queue = frozenset(JobState) - HELD  # in jobs_listing; held ones: jobs_leased

    def _stats_read(self) -> tuple[dict[str, QueueDepth], list[tuple[str, str, int]], int]:
        q = self._queries
        depths, finished = q["queue_depths"], q["finished_counts"]
        with self._db.transaction() as conn:
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            conn.execute("SET LOCAL plan_cache_mode = force_custom_plan")
            depth_rows = conn.execute(depths, {"now": self._now()}).fetchall()
            finished_rows = conn.execute(finished, self._horizon(conn)).fetchall()
        return self._depths(depths, depth_rows), *self._finished(finished, finished_rows)

    def _horizon(self, conn: Any) -> dict[str, Any]:
        query = self._queries["horizon"]
        row = conn.execute(query).fetchone()
        return {"xmax": row[query.at["xmax"]], "xip": row[query.at["xip"]]}

    def _settle(self, wait: bool = True) -> None:
        """One statement under the horizon row's lock, committed without waiting for the
        WAL flush (lost in a crash, the counts are as they were, and still right). With
        ``wait`` false, nothing happens while someone else holds the row."""
        q = self._queries
        with self._db.transaction() as conn:
            conn.execute("SET LOCAL synchronous_commit = off")
            conn.execute("SET LOCAL plan_cache_mode = force_custom_plan")
            lock = q["lock_horizon" if wait else "try_lock_horizon"]
            if conn.execute(lock).fetchone() is not None:
                conn.execute(q["settle"], self._horizon(conn))

    def _settle_from_stats(self) -> None:
        """Never waits for a prune or another settling; a role that may only read (or a
        standby) still gets its stats, unsettled."""
        with contextlib.suppress(ConfigError, psycopg.errors.ReadOnlySqlTransaction):
            self._settle(wait=False)

    def _queue_list(self, queues: Sequence[str]) -> list[str]:
        return list(queues)

    def _id_list(self, ids: Sequence[int]) -> list[int]:
        return list(ids)

    # ---- worker registry ----------------------------------------------------------------
    def publish_worker(
        self, info: WorkerInfo, held: int, snapshot: str, stopped: bool = False
    ) -> None:
        """One round trip (pipelined), committed without waiting for the WAL flush: a
        publish lost in a crash is followed by the next. Notifies no one: no job is ready."""
        q = self._queries
        params = worker_params(info, held, snapshot, stopped)
        params.update(now=self._now(), forget=FORGET_WORKERS_AFTER)
        with self._db.single() as conn, rolled_back_on_error(conn), conn.pipeline():
            conn.execute("BEGIN")
            conn.execute("SET LOCAL synchronous_commit = off")
            conn.execute(q["forget_workers"], params)
            conn.execute(q["publish_worker"], params)
            conn.execute("COMMIT")

    def list_workers(self, gone_within: float = 3600.0) -> WorkerList:
        query = self._queries["list_workers"]
        with self._db.single() as conn:
            params = {"now": self._now(), "gone_within": gone_within}
            rows = conn.execute(query, params).fetchall()
        at_id = query.at["id"]
        workers = worker_records(query, [r for r in rows if r[at_id] is not None])
        return WorkerList(float(rows[0][query.at["now"]]), workers)

    # ---- retention ----------------------------------------------------------------------
    def prune_batch(self, state: JobState, older_than: float, batch: int) -> int:
        """Pruners take turns on the horizon row (their batches change the settled counts);
        SKIP LOCKED still keeps them off rows someone else holds, a revive's say."""
        params = {"state": state.value, "older_than": older_than, "batch": batch}
        query = self._queries["prune"]
        with self._db.custom_plans() as conn:
            conn.execute(self._queries["lock_horizon"])
            row = conn.execute(query, {**params, "now": self._now()}).fetchone()
        return int(row[query.at["deleted"]])

    # ---- wake-ups -----------------------------------------------------------------------
    def wake_claimers(self) -> None:
        """NOTIFY the queues with jobs waiting for a limit (one statement, autocommit)."""
        with self._db.single() as conn:
            self._wake_waiters(conn)

    def wakeups_healthy(self) -> bool:
        return self._listener.listening.is_set()

    def subscribe(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Also waits (at most LISTEN_WAIT s) until LISTEN is in place, so that an enqueue
        from anywhere after this returns is seen."""
        unsubscribe = self._subscribers.add(callback)
        self._listener.listening.wait(LISTEN_WAIT)
        return unsubscribe

    # ---- paused queues ----
    def paused_queues(self) -> dict[str, PausedQueue]:
        query = self._queries["paused_queues"]
        with self._db.single() as conn:
            rows = conn.execute(query).fetchall()
        return paused_rows(query, rows)

    def _pause_queue(self, queue: str, by: str) -> bool:
        """One autocommit statement: the row and the queue's NOTIFY commit together."""
        params = {"queue": queue, "by": by, "now": self._now(), "channel": self.channel}
        with self._db.single() as conn:
            paused = conn.execute(self._queries["pause_queue"], params).fetchone() is not None
        self._subscribers.notify_local()
        return paused

    def _resume_queue(self, queue: str) -> bool:
        params = {"queue": queue, "channel": self.channel}
        with self._db.single() as conn:
            resumed = conn.execute(self._queries["resume_queue"], params).fetchone() is not None
        self._subscribers.notify_local()
        return resumed

    # ---- asyncio producers ----
    async def enqueue_async(self, specs: Sequence[JobSpec], connection: Any = None) -> list[Job]:
        """``enqueue`` on the asyncio pool (or the caller's AsyncConnection, in its open
        transaction): the same statements and errors. A bulk of COPY_MIN jobs or more goes
        in by COPY, the loop free every JOBS_SLICE rows."""
        if connection is not None and not isinstance(connection, psycopg.AsyncConnection):
            raise ConfigError(
                "enqueue_async(connection=...) takes a psycopg 3 AsyncConnection with an open "
                f"transaction, not {type(connection).__name__}"
                + (" (use enqueue)" if isinstance(connection, psycopg.Connection) else "")
            )
        if not specs:
            return []
        if connection is not None:
            return await self._ainsert(connection, specs)
        committing = False
        try:
            if len(specs) == 1 and specs[0].unique_key is None:
                async with self._adb.single() as conn:
                    committing = True
                    jobs = [await self._ainsert_one(conn, specs[0])]
            elif len(specs) < COPY_MIN and all(s.unique_key is None for s in specs):
                async with self._adb.single() as conn:
                    committing = True
                    jobs = await self._ainsert_plain(conn, list(specs), self._now(), notify=True)
            else:
                async with self._adb.transaction() as conn:
                    jobs = await self._ainsert(conn, specs)
                    committing = True
        except ConnectionLost as exc:
            raise lost_enqueue(exc, committing, specs) from None
        self._subscribers.notify_local()
        return jobs

    async def get_job_async(self, job_id: int | str) -> Job | None:
        job_id = job_id_of(job_id)
        if not self._may_exist(job_id):
            return None
        async with self._adb.single() as conn:
            cur = await conn.execute(self._queries["get_job"], {"id": job_id})
            row = await cur.fetchone()
        return self._jobs["get_job"].job(row) if row else None

    async def aclose(self) -> None:
        await self._adb.aclose()
        await asyncio.to_thread(self.close)

    # ---- waiting for results (job.wait) -------------------------------------------------
    def _one_read(self) -> contextlib.AbstractContextManager[Any]:
        return self._db.single()  # one statement: one round trip, its own snapshot

    def _notify_finished(self, conn: Any) -> None:
        """NOTIFY the waiters of every process, at the commit of ``conn``'s transaction."""
        params = {"channel": self.settings.finished_channel}
        conn.execute(self._queries["notify_finished"], params)

    def _notify_finished_after(self, conn: Any) -> None:
        """The waiters' NOTIFY for outcomes just committed on ``conn``, as a transaction of
        its own queued after that COMMIT in the same pipeline (no extra round trip), which
        does not wait for the WAL flush. A notifying transaction holds the server's one
        NOTIFY lock from its commit until its commit returns: inside the acks' transaction
        that spans their WAL flush, and every other notifying commit on the server (the
        other workers' acks) waits behind it. Lost in a crash between the two commits, the
        waiters' safety poll finds the outcome."""
        conn.execute("BEGIN")
        conn.execute("SET LOCAL synchronous_commit = off")
        self._notify_finished(conn)
        conn.execute("COMMIT")

    def _notify_cancelled(self, conn: Any) -> None:
        """NOTIFY the workers of every process, at the commit: held jobs were cancelled."""
        params = {"channel": self.settings.cancel_channel}
        conn.execute(self._queries["notify_finished"], params)

    def subscribe_cancelled(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Also waits (at most LISTEN_WAIT s) until LISTEN is in place, as
        ``subscribe_finished`` does."""
        unsubscribe = self._cancels.add(callback)
        self._cancel_listener.listening.wait(LISTEN_WAIT)
        return unsubscribe

    def subscribe_finished(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Also waits (at most LISTEN_WAIT s) until LISTEN is in place, so that a job
        finishing anywhere after this returns is seen."""
        unsubscribe = self._waiters.add(callback)
        self._done_listener.listening.wait(LISTEN_WAIT)
        return unsubscribe

    # ---- periodic schedules (issue 15) ----
    def schedule_states(self) -> ScheduleStates:
        """The rows and the clock in one statement."""
        query = self._queries["schedule_rows"]
        with self._db.single() as conn:
            rows = conn.execute(query, {"now": self._now()}).fetchall()
        now = float(rows[0][query.at["now"]])
        return ScheduleStates(schedule_rows(query, rows), now)

    def register_schedules(self, names: Sequence[str]) -> None:
        if not names:
            return
        with self._db.transaction() as conn:
            for name in names:
                conn.execute(self._queries["register_schedule"], {"name": name, "now": self._now()})

    def enqueue_tick(self, name: str, tick: float, spec: JobSpec) -> Job | None:
        """One transaction: the compare-and-set of the last tick (its row lock makes a
        concurrent taker wait, then find the tick taken), the job, the job's id."""
        q = self._queries
        with self._db.transaction() as conn:
            params = {"name": name, "now": self._now(), "tick": tick}
            if conn.execute(q["take_tick"], params).fetchone() is None:
                return None
            job = self._insert(conn, [spec])[0]
            conn.execute(q["tick_job"], {"name": name, "job": job.id})
        self._subscribers.notify_local()
        return job


def _brief(outcome: Failed) -> str:
    """The failure's error as its history entry keeps it."""
    return dumps(history_error(outcome.error))
