"""The embedded default broker: one SQLite file in WAL mode, for one machine.

Every write is one ``BEGIN IMMEDIATE`` transaction on a single writer connection per
process (a Python lock orders this process's writers, so they never spin in SQLite's
busy handler against each other). Reads for stats and listings use a second
connection and never take the write lock. Other processes are noticed through
``PRAGMA data_version``, polled cheaply by one watcher thread.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import secrets
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any
from urllib.parse import parse_qs, urlsplit

from ..codec import dumps, loads
from ..errors import BrokerUnavailable, ConfigError
from ..job import Claim, ClaimedJob, ErrorInfo, Job, JobId, JobSpec, JobState, in_claim_order
from ..outcomes import Buried, Failed, Outcome, Retried, Succeeded
from .base import Broker, QueueStats, Recovery, Stats, refusal, unique_key_taken
from .doorbell import Bell, open_doorbell
from .sqlfiles import load_migrations, load_queries
from .wakeups import Subscribers

Q = load_queries("sqlite")
SYNC_MODES = ("off", "normal", "full", "extra")


def parse_sqlite_url(url: str) -> tuple[str, dict[str, str]]:
    """``sqlite:///relative.db`` or ``sqlite:////absolute.db``; options as query parameters."""
    parts = urlsplit(url)
    if parts.netloc:
        raise ConfigError(
            f"invalid SQLite URL {url!r}: use sqlite:///relative/path.db or sqlite:////abs/path.db"
        )
    path = parts.path[1:] if parts.path.startswith("/") else parts.path
    if not path or path == ":memory:":
        raise ConfigError(
            f"invalid SQLite URL {url!r}: a file path is required (use memory:// for an in-memory broker)"
        )
    options = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    unknown = set(options) - {"synchronous", "busy_timeout", "poll_interval"}
    if unknown:
        raise ConfigError(
            f"invalid SQLite URL {url!r}: unknown option(s) {', '.join(sorted(unknown))}"
        )
    return path, options


def _row_to_job(row: sqlite3.Row) -> Job:
    error = row["last_error"]
    result = row["result"]
    return Job.from_fields(
        id=JobId(row["id"]),
        task=row["task"],
        queue=row["queue"],
        state=JobState(row["state"]),
        args=loads(row["args"]),
        kwargs=loads(row["kwargs"]),
        priority=row["priority"],
        attempts=row["attempts"],
        max_attempts=row["max_attempts"],
        run_at=row["run_at"],
        enqueued_at=row["enqueued_at"],
        started_at=row["started_at"],
        finished_at=row["finished_at"],
        result=loads(result) if result is not None else None,
        last_error=ErrorInfo.from_dict(loads(error)) if error else None,
        unique_key=row["unique_key"],
        worker_id=row["worker_id"],
        lease_expires_at=row["lease_expires_at"],
    )


def _claimed_from_row(row: sqlite3.Row, token: int) -> ClaimedJob:
    """A claimed row; an undecodable payload becomes a ``problem`` instead of an exception,
    so one corrupt row sends one job to dead rather than stopping the claim."""
    try:
        job = _row_to_job(row)
        problem = None
    except (ValueError, TypeError) as exc:
        job = Job(
            id=JobId(row["id"]), task=row["task"], queue=row["queue"], state=JobState(row["state"]),
            attempts=row["attempts"], max_attempts=row["max_attempts"], run_at=row["run_at"],
            enqueued_at=row["enqueued_at"], priority=row["priority"],
        )  # fmt: skip
        problem = f"corrupt job row: {exc}"
    return ClaimedJob(Claim(job.id, token), job, problem)


def _placeholders(prefix: str, values: Sequence[str]) -> tuple[str, dict[str, str]]:
    names = [f"{prefix}{i}" for i in range(len(values))]
    return ", ".join(":" + n for n in names), dict(zip(names, values, strict=True))


class SQLiteBroker(Broker):
    def __init__(self, url: str, clock: Callable[[], float] = time.time) -> None:
        self.url = url
        self.path, options = parse_sqlite_url(url)
        folder = os.path.dirname(os.path.abspath(self.path))
        if not os.path.isdir(folder):
            raise ConfigError(f"SQLite directory {folder!r} does not exist (from {url!r})")
        sync = options.get("synchronous", "full").lower()
        if sync not in SYNC_MODES:
            raise ConfigError(
                f"invalid SQLite URL {url!r}: synchronous must be one of {', '.join(SYNC_MODES)}"
            )
        try:
            self._busy_ms = int(options.get("busy_timeout", "10000"))
            self.poll_interval = float(options.get("poll_interval", "0.005"))
        except ValueError as exc:
            raise ConfigError(f"invalid SQLite URL {url!r}: {exc}") from None
        self._sync = sync
        self._clock = clock
        self._write_lock = threading.Lock()
        self._read_lock = threading.Lock()
        self._writer = self._connect()
        self.migrations_applied: list[int] = []
        self.migrate()
        self._reader = self._connect()
        self._claim_sql: dict[int, str] = {}
        self._doorbell = open_doorbell(self.path)
        self._bell: Bell | None = None  # this process's, while someone is subscribed
        self._subscribers = Subscribers(self._watch_loop, self._interrupt_watch)

    # ---- connections and transactions ------------------------------------
    def _connect(self) -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(
                self.path,
                isolation_level=None,
                check_same_thread=False,
                timeout=self._busy_ms / 1000,
            )
            conn.row_factory = sqlite3.Row
            conn.execute(f"PRAGMA busy_timeout = {self._busy_ms}")
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute(f"PRAGMA synchronous = {self._sync}")
        except sqlite3.Error as exc:
            raise BrokerUnavailable(f"cannot open SQLite database {self.path!r}: {exc}") from None
        return conn

    @contextlib.contextmanager
    def _write(self, relaxed: bool = False) -> Iterator[sqlite3.Connection]:
        """One BEGIN IMMEDIATE transaction on the writer connection.

        ``relaxed``: a write whose loss in a power cut is harmless (a claim, which is then
        claimed again and its holder's ack refused; a start, which leaves the job "claimed")
        commits without its own fsync (synchronous=NORMAL: still synced at checkpoints, and
        by the next full commit, which syncs the whole WAL)."""
        with self._write_lock:
            conn = self._writer
            relax = relaxed and self._sync in ("full", "extra")
            if relax:
                conn.execute("PRAGMA synchronous = NORMAL")
            try:
                try:
                    conn.execute("BEGIN IMMEDIATE")
                except sqlite3.OperationalError as exc:
                    raise BrokerUnavailable(
                        f"SQLite database {self.path!r} is busy: {exc}"
                    ) from None
                try:
                    yield conn
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
                try:
                    conn.execute("COMMIT")
                except sqlite3.Error:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    raise
            finally:
                if relax:
                    conn.execute(f"PRAGMA synchronous = {self._sync}")

    @contextlib.contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        with self._read_lock:
            yield self._reader

    def migrate(self) -> list[int]:
        """Apply pending numbered migrations in one write transaction; returns those applied."""
        applied = []
        with self._write() as conn:
            conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_version "
                "(version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at REAL NOT NULL)"
            )
            current = conn.execute(
                "SELECT coalesce(max(version), 0) FROM schema_version"
            ).fetchone()[0]
            for migration in load_migrations("sqlite"):
                if migration.version <= current:
                    continue
                for statement in migration.statements:
                    conn.execute(statement)
                conn.execute(
                    "INSERT INTO schema_version VALUES (?, ?, ?)",
                    (migration.version, migration.name, time.time()),
                )
                applied.append(migration.version)
        self.migrations_applied.extend(applied)
        return applied

    def close(self) -> None:
        self._subscribers.stop()
        if self._doorbell is not None:
            self._doorbell.close()
        with self._write_lock:
            self._writer.close()
        with self._read_lock:
            self._reader.close()

    # ---- producer side --------------------------------------------------
    def enqueue(self, specs: Sequence[JobSpec], connection: Any = None) -> list[Job]:
        if connection is not None:
            raise ConfigError("enqueue(connection=...) needs the postgresql:// broker")
        if not specs:
            return []
        now = self._clock()
        rows = []
        for spec in specs:
            run_at = spec.run_at if spec.run_at is not None else now + spec.delay
            state = "ready" if run_at <= now else "scheduled"  # job.initial_state, inlined
            rows.append(
                (spec.queue, spec.task, spec.args_json, spec.kwargs_json, state,
                 spec.priority, run_at, spec.max_attempts, spec.unique_key, now)
            )  # fmt: skip
        ids: list[int] = [0] * len(specs)
        existing: dict[int, Job] = {}
        with self._write() as conn:
            # Rows go in in batch order (ids are the claim order's last tie-break); each run
            # of specs without a unique key is one executemany.
            runs = itertools.groupby(range(len(specs)), key=lambda i: specs[i].unique_key is None)
            for plain_run, run in runs:
                indexes = list(run)
                if plain_run:
                    conn.executemany(Q["insert_job"], [rows[i] for i in indexes])
                    # One writer holds the lock, so AUTOINCREMENT ids of this run are consecutive.
                    first = (
                        conn.execute("SELECT last_insert_rowid()").fetchone()[0] - len(indexes) + 1
                    )
                    for offset, i in enumerate(indexes):
                        ids[i] = first + offset
                    continue
                for i in indexes:
                    cur = conn.execute(Q["insert_unique_job"], rows[i])
                    if cur.rowcount == 1:
                        ids[i] = cur.lastrowid or 0
                    else:
                        found = conn.execute(
                            Q["unfinished_by_unique_key"], {"key": specs[i].unique_key}
                        ).fetchone()
                        existing[i] = _row_to_job(found)
        self._announce()
        # Built after commit, outside the write lock. Decoded from what was stored, so the
        # caller's own objects (tuples, lists mutated later) never leak into the result.
        ready, scheduled = JobState.READY, JobState.SCHEDULED
        jobs = []
        for i, (queue, task, args, kwargs, state, priority, run_at, attempts, key, _) in enumerate(
            rows
        ):
            if i in existing:
                jobs.append(existing[i])
                continue
            jobs.append(
                Job.from_fields(
                    id=JobId(ids[i]), task=task, queue=queue,
                    state=ready if state == "ready" else scheduled, args=loads(args),
                    kwargs=loads(kwargs), priority=priority, max_attempts=attempts,
                    run_at=run_at, enqueued_at=now, unique_key=key,
                )
            )  # fmt: skip
        return jobs

    # ---- hot path -------------------------------------------------------
    def _claim_statement(self, count: int) -> str:
        sql = self._claim_sql.get(count)
        if sql is None:
            parts = [Q["ready_of_queue"].replace("{queue}", f":q{i}") for i in range(count)]
            sql = Q["claim"].replace("{candidates}", " UNION ALL ".join(parts))
            self._claim_sql[count] = sql
        return sql

    def claim(
        self, queues: Sequence[str], n: int, lease: float, worker_id: str
    ) -> list[ClaimedJob]:
        if n <= 0 or not queues:
            return []
        with self._write(relaxed=True) as conn:
            return self._claim_in(conn, queues, n, lease, worker_id)

    def _claim_in(
        self, conn: sqlite3.Connection, queues: Sequence[str], n: int, lease: float, worker_id: str
    ) -> list[ClaimedJob]:
        params: dict[str, Any] = {f"q{i}": q for i, q in enumerate(queues)}
        token = secrets.randbits(62)
        now = self._clock()
        conn.execute(Q["promote_due"], {"now": now})
        params.update(n=n, token=token, now=now, lease=lease, worker=worker_id)
        rows = conn.execute(self._claim_statement(len(queues)), params).fetchall()
        return in_claim_order([_claimed_from_row(r, token) for r in rows])

    def has_work(self, queues: Sequence[str]) -> bool:
        marks, params = _placeholders("q", queues)
        with self._read() as conn:
            if conn.execute(Q["probe_ready"].replace("{queues}", marks), params).fetchone():
                return True
            due = conn.execute(
                Q["probe_due"].replace("{queues}", marks), {**params, "now": self._clock()}
            ).fetchone()
            return due is not None

    def next_due(self, queues: Sequence[str]) -> float | None:
        marks, params = _placeholders("q", queues)
        with self._read() as conn:
            at = conn.execute(Q["next_scheduled"].replace("{queues}", marks), params).fetchone()[0]
        return None if at is None else max(0.0, at - self._clock())

    def record(self, started: Sequence[Claim], outcomes: Sequence[Outcome]) -> list[Claim]:
        if not started and not outcomes:
            return []
        with self._write(relaxed=not outcomes) as conn:  # starts alone: see _write
            lost = self._record_in(conn, started, outcomes)
        self._after_record(outcomes)
        return lost

    def _record_in(
        self, conn: sqlite3.Connection, started: Sequence[Claim], outcomes: Sequence[Outcome]
    ) -> list[Claim]:
        """One statement per kind of write (start, ack, retry, dead) for the whole batch."""
        finishing = {o.claim for o in outcomes}
        starts = [c for c in started if c not in finishing]  # ack/fail below set started_at
        acks = [o for o in outcomes if isinstance(o, Succeeded)]
        dead = [o for o in outcomes if isinstance(o, Buried)]
        retries = [o for o in outcomes if isinstance(o, Retried)]
        batches: list[tuple[str, list[list[Any]]]] = [
            ("start", [[c.job_id, c.token] for c in starts]),
            ("ack", [[o.claim.job_id, o.claim.token, o.result_json] for o in acks]),
            ("fail_dead", [[o.claim.job_id, o.claim.token, _error_json(o)] for o in dead]),
            ("fail_retry", [[o.claim.job_id, o.claim.token, _error_json(o), o.retry_in]
                            for o in retries]),
        ]  # fmt: skip
        now = self._clock()
        matched: set[Claim] = set()
        for query, batch in batches:
            if batch:
                rows = conn.execute(Q[query], {"batch": dumps(batch), "now": now}).fetchall()
                matched.update(Claim(JobId(r[0]), r[1]) for r in rows)
        return [c for c in [*starts, *(o.claim for o in outcomes)] if c not in matched]

    def _after_record(self, outcomes: Sequence[Outcome]) -> None:
        if any(isinstance(o, Retried) for o in outcomes):
            self._announce()

    def heartbeat(self, claims: Sequence[Claim], lease: float) -> list[Claim]:
        return self._per_claim("heartbeat", claims, {"lease": lease})

    def release(self, claims: Sequence[Claim]) -> list[Claim]:
        lost = self._per_claim("release", claims, {})
        if len(lost) < len(claims):
            self._announce()
        return lost

    def _per_claim(self, query: str, claims: Sequence[Claim], extra: dict[str, Any]) -> list[Claim]:
        if not claims:
            return []
        lost = []
        with self._write() as conn:
            now = self._clock()
            for claim in claims:
                params = {"id": claim.job_id, "token": claim.token, "now": now, **extra}
                if conn.execute(Q[query], params).rowcount == 0:
                    lost.append(claim)
        return lost

    def recover_expired(self, limit: int = 1000) -> Recovery:
        with self._read() as conn:
            if conn.execute(Q["probe_expired"], {"now": self._clock()}).fetchone() is None:
                return Recovery()
        with self._write() as conn:
            params = {"now": self._clock(), "limit": limit}
            dead = [JobId(r[0]) for r in conn.execute(Q["recover_dead"], params).fetchall()]
            requeued = [JobId(r[0]) for r in conn.execute(Q["recover_ready"], params).fetchall()]
        if requeued:
            self._announce()
        return Recovery(requeued=requeued, dead=dead)

    # ---- operator actions -------------------------------------------------
    def cancel(self, job_id: int) -> Job:
        return self._operator_action("cancel", job_id)

    def retry(self, job_id: int) -> Job:
        try:
            job = self._operator_action("revive", job_id)
        except sqlite3.IntegrityError:
            raise unique_key_taken(job_id) from None
        self._announce()
        return job

    def _operator_action(self, query: str, job_id: int) -> Job:
        with self._write() as conn:
            row = conn.execute(Q[query], {"id": job_id, "now": self._clock()}).fetchone()
            if row is None:
                current = conn.execute(Q["get_job"], {"id": job_id}).fetchone()
        if row is not None:
            return _row_to_job(row)
        verb = "cancel" if query == "cancel" else "retry"
        raise refusal(verb, job_id, current["state"] if current else None)

    # ---- retention ------------------------------------------------------------
    def prune_batch(self, state: JobState, older_than: float, batch: int) -> int:
        with self._write() as conn:
            params = {"state": state.value, "cutoff": self._clock() - older_than, "batch": batch}
            return int(conn.execute(Q["prune"], params).rowcount)

    # ---- read side ----------------------------------------------------------
    def get_job(self, job_id: int) -> Job | None:
        with self._read() as conn:
            row = conn.execute(Q["get_job"], {"id": job_id}).fetchone()
        return _row_to_job(row) if row else None

    def list_jobs(
        self, state: JobState | None = None, queue: str | None = None, limit: int = 100
    ) -> list[Job]:
        params = {"state": state.value if state else None, "queue": queue, "limit": limit}
        with self._read() as conn:
            rows = conn.execute(Q["list_jobs"], params).fetchall()
        return [_row_to_job(r) for r in rows]

    def stats(self) -> Stats:
        with self._read() as conn:
            conn.execute("BEGIN")  # one snapshot for both queries
            try:
                now = self._clock()
                counts = conn.execute(Q["count_by_queue_state"], {"now": now}).fetchall()
                oldest = dict(conn.execute(Q["oldest_ready"], {"now": now}).fetchall())
            finally:
                conn.execute("COMMIT")
        per_queue: dict[str, dict[JobState, int]] = {}
        for queue, state, count in counts:
            per_queue.setdefault(queue, {})[JobState(state)] = count
        return Stats(
            {
                q: QueueStats(c, max(0.0, now - oldest[q]) if q in oldest else 0.0)
                for q, c in per_queue.items()
            }
        )

    # ---- wake-ups -----------------------------------------------------------
    def subscribe(self, callback: Callable[[], None]) -> Callable[[], None]:
        return self._subscribers.add(callback)

    def wakeups_healthy(self) -> bool:
        return self._bell is not None

    def _announce(self) -> None:
        """After a commit that makes work claimable: wake this process's subscribers and
        ring every other process waiting on this database."""
        self._subscribers.notify_local()
        if self._doorbell is not None:
            self._doorbell.ring()

    def _watch_loop(self, stop: threading.Event, fire: Callable[[], None]) -> None:
        """Wake subscribers when another process commits work.

        On a doorbell ring at once; and on a change of PRAGMA data_version, which changes
        when another connection commits: checked every BELL_CHECK s with a doorbell (for
        writers that cannot ring it: another path to the same file, a folder they may not
        enter, an older version), every poll_interval without one. data_version is read on
        the writer connection, so this broker's own writes (which notify locally) never
        count; a check that finds the writer busy is skipped."""
        bell = self._doorbell.listen() if self._doorbell is not None else None
        self._bell = bell
        try:
            last = self._data_version(blocking=True)
            while not stop.is_set():
                if bell is not None:
                    rang = bell.wait(BELL_CHECK)
                else:  # time.sleep + is_set costs less CPU per turn than Event.wait
                    time.sleep(self.poll_interval)
                    rang = False
                if stop.is_set():
                    break
                version = self._data_version(blocking=False)
                changed = version is not None and version != last
                if changed:
                    last = version
                if rang or changed:
                    fire()
        finally:
            if bell is not None:
                if self._bell is bell:  # a later watcher may already have its own
                    self._bell = None
                bell.close()

    def _interrupt_watch(self) -> None:
        bell = self._bell
        if bell is not None:
            bell.interrupt()

    def _data_version(self, blocking: bool) -> int | None:
        if not self._write_lock.acquire(blocking):
            return None
        try:
            return int(self._writer.execute("PRAGMA data_version").fetchone()[0])
        except sqlite3.Error:
            return None
        finally:
            self._write_lock.release()


BELL_CHECK = 0.5  # with a doorbell: seconds between data_version checks for other writers


def _error_json(outcome: Failed) -> str:
    from ..codec import dumps

    return dumps(outcome.error.to_dict())
