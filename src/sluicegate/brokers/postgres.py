"""The PostgreSQL broker: many workers on many machines, one server.

Claims are one statement with ``FOR UPDATE SKIP LOCKED`` over a partial index of ready
jobs; heartbeats, acks and failures are batched with ``unnest`` arrays. Leases and due
times use the server's clock (``now()``); tests may pass a clock in. Wake-ups use
LISTEN/NOTIFY (payload: a queue name only), with polling as the fallback. Producers can
enqueue inside their own psycopg transaction, and ``transactional`` tasks commit their
writes together with the job's ack.
"""

from __future__ import annotations

import contextlib
import logging
import random
import re
import secrets
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from ..codec import dumps, loads
from ..errors import BrokerUnavailable, ConfigError, InvalidTransition, JobNotFound, LeaseLost
from ..job import Claim, ClaimedJob, ErrorInfo, Job, JobId, JobSpec, JobState
from ..outcomes import Failed, Outcome, Succeeded
from .base import Broker, QueueStats, Recovery, Retention, Stats
from .sqlfiles import load_migrations, load_queries
from .wakeups import Subscribers

try:
    import psycopg
    import psycopg_pool
except ImportError:  # pragma: no cover - exercised only without the extra installed
    psycopg = None  # type: ignore[assignment]
    psycopg_pool = None  # type: ignore[assignment]

log = logging.getLogger("sluicegate.postgres")

# A cut TCP connection must fail a call within seconds, not hang the worker's loop.
CONNECT_DEFAULTS: dict[str, Any] = {
    "connect_timeout": 5, "keepalives": 1, "keepalives_idle": 5, "keepalives_interval": 2,
    "keepalives_count": 3, "tcp_user_timeout": 10_000,
}  # fmt: skip
SCHEMA_PATTERN = re.compile(r"[a-z_][a-z0-9_]{0,49}")
OUR_OPTIONS = {"schema", "migrate", "pool_max", "poll_interval"}
TIMES = ("run_at", "lease_expires_at", "enqueued_at", "started_at", "finished_at")
COLUMNS = (
    "id", "queue", "task", "args", "kwargs", "state", "priority", "run_at", "attempts",
    "max_attempts", "unique_key", "lease_token", "lease_expires_at", "worker_id",
    "enqueued_at", "started_at", "finished_at", "result", "last_error",
)  # fmt: skip


def _select_list(prefix: str) -> str:
    return ", ".join(
        f"extract(epoch FROM {prefix}{c})::float8" if c in TIMES else f"{prefix}{c}"
        for c in COLUMNS
    )


def parse_postgres_url(url: str) -> tuple[str, dict[str, str]]:
    """Split sluicegate's own options (schema, migrate, pool_max, poll_interval) off a DSN."""
    parts = urlsplit(url)
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    ours = {k: v for k, v in pairs if k in OUR_OPTIONS}
    theirs = [(k, v) for k, v in pairs if k not in OUR_OPTIONS]
    dsn = urlunsplit(("postgresql", parts.netloc, parts.path, urlencode(theirs), ""))
    schema = ours.get("schema", "sluicegate")
    if SCHEMA_PATTERN.fullmatch(schema) is None:
        raise ConfigError(
            f"invalid schema {schema!r} in {url!r}: use 1-50 characters from a-z 0-9 _, "
            "not starting with a digit"
        )
    return dsn, ours


def _row_to_job(row: Sequence[Any]) -> Job:
    r = dict(zip(COLUMNS, row, strict=True))
    error, result = r["last_error"], r["result"]
    return Job.from_fields(
        id=JobId(r["id"]), task=r["task"], queue=r["queue"], state=JobState(r["state"]),
        args=loads(r["args"]), kwargs=loads(r["kwargs"]), priority=r["priority"],
        attempts=r["attempts"], max_attempts=r["max_attempts"], run_at=r["run_at"],
        enqueued_at=r["enqueued_at"], started_at=r["started_at"], finished_at=r["finished_at"],
        result=loads(result) if result is not None else None,
        last_error=ErrorInfo.from_dict(loads(error)) if error else None,
        unique_key=r["unique_key"], worker_id=r["worker_id"],
        lease_expires_at=r["lease_expires_at"],
    )  # fmt: skip


def _claimed_from_row(row: Sequence[Any], token: int) -> ClaimedJob:
    try:
        return ClaimedJob(Claim(JobId(row[0]), token), _row_to_job(row))
    except (ValueError, TypeError) as exc:
        r = dict(zip(COLUMNS, row, strict=True))
        job = Job.from_fields(
            id=JobId(r["id"]), task=r["task"], queue=r["queue"], state=JobState(r["state"]),
            attempts=r["attempts"], max_attempts=r["max_attempts"], run_at=r["run_at"],
            enqueued_at=r["enqueued_at"], priority=r["priority"],
        )  # fmt: skip
        return ClaimedJob(Claim(job.id, token), job, f"corrupt job row: {exc}")


def _ids_tokens(claims: Sequence[Claim]) -> dict[str, list[int]]:
    return {"ids": [c.job_id for c in claims], "tokens": [c.token for c in claims]}


class PostgresBroker(Broker):
    supports_transactions = True

    def __init__(self, url: str, clock: Callable[[], float] | None = None) -> None:
        if psycopg is None:
            raise ConfigError(
                "the postgresql:// broker needs psycopg: pip install 'sluicegate[postgres]'"
            )
        self.url = url
        self.dsn, options = parse_postgres_url(url)
        self.schema = options.get("schema", "sluicegate")
        self.channel = f"{self.schema}_jobs"
        try:
            pool_max = int(options.get("pool_max", "4"))
            self.poll_interval = float(options.get("poll_interval", "1.0"))
        except ValueError as exc:
            raise ConfigError(f"invalid PostgreSQL URL {url!r}: {exc}") from None
        migrate = options.get("migrate", "true").lower()
        if migrate not in ("true", "false", "1", "0", "yes", "no"):
            raise ConfigError(f"invalid PostgreSQL URL {url!r}: migrate must be true or false")
        self._clock = clock
        self._queries = self._load_queries()
        self._pool = psycopg_pool.ConnectionPool(
            self.dsn, min_size=1, max_size=max(pool_max, 1), open=False,
            kwargs={"autocommit": False, **CONNECT_DEFAULTS}, name=f"sluicegate-{self.schema}",
            timeout=5.0,
        )  # fmt: skip
        try:
            self._pool.open(wait=True, timeout=10.0)
        except psycopg_pool.PoolTimeout as exc:
            self._pool.close()
            raise BrokerUnavailable(
                f"cannot connect to PostgreSQL at {self._safe_dsn()}: {exc}"
            ) from None
        self.migrations_applied: list[int] = []
        if migrate in ("true", "1", "yes"):
            self.migrate()
        else:
            self._check_migrated()
        self._subscribers = Subscribers(self._listen_loop)

    # ---- setup -------------------------------------------------------------------------
    def _load_queries(self) -> dict[str, str]:
        now = "coalesce(to_timestamp(%(now)s::float8), now())"
        out = {}
        for name, sql in load_queries("postgresql").items():
            sql = sql.replace("{job_columns_j}", _select_list("j."))
            sql = sql.replace("{job_columns}", _select_list(""))
            out[name] = sql.replace("{schema}", self.schema).replace("{now}", now)
        return out

    def _safe_dsn(self) -> str:
        parts = urlsplit(self.dsn)
        host = parts.hostname or "localhost"
        return f"{host}:{parts.port or 5432}{parts.path}"

    def _now(self) -> float | None:
        return self._clock() if self._clock is not None else None

    def migrate(self) -> list[int]:
        """Apply pending numbered migrations under an advisory lock; returns those applied."""
        applied = []
        with self._conn() as conn:
            conn.execute(
                "SELECT pg_advisory_xact_lock(hashtext(%s))", (f"sluicegate:{self.schema}",)
            )
            conn.execute(f"CREATE SCHEMA IF NOT EXISTS {self.schema}")
            conn.execute(
                f"CREATE TABLE IF NOT EXISTS {self.schema}.schema_version "
                "(version integer PRIMARY KEY, name text NOT NULL, "
                "applied_at timestamptz NOT NULL DEFAULT now())"
            )
            current = self._version(conn)
            for migration in load_migrations("postgresql"):
                if migration.version <= current:
                    continue
                for statement in migration.statements:
                    conn.execute(statement.replace("{schema}", self.schema))
                conn.execute(
                    f"INSERT INTO {self.schema}.schema_version (version, name) VALUES (%s, %s)",
                    (migration.version, migration.name),
                )
                applied.append(migration.version)
        self.migrations_applied.extend(applied)
        return applied

    def _version(self, conn: Any) -> int:
        row = conn.execute(
            f"SELECT coalesce(max(version), 0) FROM {self.schema}.schema_version"
        ).fetchone()
        return int(row[0])

    def _check_migrated(self) -> None:
        latest = max((m.version for m in load_migrations("postgresql")), default=0)
        try:
            with self._conn() as conn:
                current = self._version(conn)
        except psycopg.errors.UndefinedTable:
            current = 0
        if current < latest:
            raise ConfigError(
                f"PostgreSQL schema {self.schema!r} is at version {current}, this sluicegate "
                f"needs {latest}: run `sluicegate migrate --broker URL` (migrate=false is set)"
            )

    # ---- connections ----------------------------------------------------------------------
    @contextlib.contextmanager
    def _conn(self) -> Iterator[Any]:
        """A pooled connection in one transaction; storage errors become BrokerUnavailable."""
        try:
            with self._pool.connection() as conn, conn.transaction():
                yield conn
        except (psycopg.OperationalError, psycopg_pool.PoolTimeout) as exc:
            raise BrokerUnavailable(f"PostgreSQL unavailable ({self._safe_dsn()}): {exc}") from None

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Any]:
        """A psycopg connection in an open transaction; commits on success, else rolls back."""
        with self._conn() as conn:
            yield conn

    def close(self) -> None:
        self._subscribers.stop()
        self._pool.close()

    # ---- producer side ----------------------------------------------------------------------
    def enqueue(self, specs: Sequence[JobSpec], connection: Any = None) -> list[Job]:
        if not specs:
            return []
        if connection is not None:
            jobs = self._insert(connection, specs)  # the caller's transaction: no commit here
        else:
            with self._conn() as conn:
                jobs = self._insert(conn, specs)
            self._subscribers.notify_local()
        return jobs

    def _insert(self, conn: Any, specs: Sequence[JobSpec]) -> list[Job]:
        q, now = self._queries, self._now()
        jobs: list[Job | None] = [None] * len(specs)
        plain = [i for i, s in enumerate(specs) if s.unique_key is None]
        if plain:
            ps = [specs[i] for i in plain]
            rows = conn.execute(q["insert_job"], {
                "queue": [s.queue for s in ps], "task": [s.task for s in ps],
                "args": [s.args_json for s in ps], "kwargs": [s.kwargs_json for s in ps],
                "priority": [s.priority for s in ps], "max_attempts": [s.max_attempts for s in ps],
                "delay": [s.delay for s in ps], "run_at": [s.run_at for s in ps], "now": now,
            }).fetchall()  # fmt: skip
            rows.sort(key=lambda r: r[0])  # identities follow the statement's ORDER BY
            for i, row in zip(plain, rows, strict=True):
                jobs[i] = _row_to_job(row)
        for i, spec in enumerate(specs):
            if spec.unique_key is None:
                continue
            params = {
                "queue": spec.queue, "task": spec.task, "args": spec.args_json,
                "kwargs": spec.kwargs_json, "priority": spec.priority,
                "max_attempts": spec.max_attempts, "unique_key": spec.unique_key,
                "run_at": spec.run_at, "delay": spec.delay, "now": now,
            }  # fmt: skip
            row = conn.execute(q["insert_unique_job"], params).fetchone()
            if row is None:
                row = conn.execute(q["unfinished_by_unique_key"], params).fetchone()
            jobs[i] = _row_to_job(row)
        queues = sorted({s.queue for s in specs})
        conn.execute(q["notify"], {"channel": self.channel, "queues": queues})
        return [j for j in jobs if j is not None]

    # ---- hot path -----------------------------------------------------------------------------
    def claim(
        self, queues: Sequence[str], n: int, lease: float, worker_id: str
    ) -> list[ClaimedJob]:
        if n <= 0 or not queues:
            return []
        token = secrets.randbits(62)
        now = self._now()
        with self._conn() as conn:
            conn.execute(self._queries["promote_due"], {"now": now})
            rows = conn.execute(self._queries["claim"], {
                "queues": list(queues), "n": n, "token": token, "lease": lease,
                "worker": worker_id, "now": now,
            }).fetchall()  # fmt: skip
        claimed = [_claimed_from_row(r, token) for r in rows]
        return sorted(claimed, key=lambda c: (c.job.priority, c.job.run_at, c.job.id))

    def has_work(self, queues: Sequence[str]) -> bool:
        with self._conn() as conn:
            row = conn.execute(
                self._queries["probe_work"], {"queues": list(queues), "now": self._now()}
            ).fetchone()
        return bool(row[0])

    def next_due(self, queues: Sequence[str]) -> float | None:
        with self._conn() as conn:
            row = conn.execute(
                self._queries["next_scheduled"], {"queues": list(queues), "now": self._now()}
            ).fetchone()
        return None if row[0] is None else max(0.0, float(row[0]))

    def record(self, started: Sequence[Claim], outcomes: Sequence[Outcome]) -> list[Claim]:
        if not started and not outcomes:
            return []
        finishing = {o.claim for o in outcomes}
        starts = [c for c in started if c not in finishing]
        acks = [o for o in outcomes if isinstance(o, Succeeded)]
        dead = [o for o in outcomes if isinstance(o, Failed) and o.retry_in is None]
        retries = [o for o in outcomes if isinstance(o, Failed) and o.retry_in is not None]
        q, now = self._queries, self._now()
        done: set[int] = set()
        params: dict[str, Any]
        with self._conn() as conn:
            if starts:
                done |= {
                    r[0] for r in conn.execute(q["start"], {**_ids_tokens(starts), "now": now})
                }
            if acks:
                params = {**_ids_tokens([o.claim for o in acks]), "now": now,
                          "results": [o.result_json for o in acks]}  # fmt: skip
                done |= {r[0] for r in conn.execute(q["ack"], params)}
            if dead:
                params = {**_ids_tokens([o.claim for o in dead]), "now": now,
                          "errors": [dumps(o.error.to_dict()) for o in dead]}  # fmt: skip
                done |= {r[0] for r in conn.execute(q["fail_dead"], params)}
            if retries:
                params = {**_ids_tokens([o.claim for o in retries]), "now": now,
                          "errors": [dumps(o.error.to_dict()) for o in retries],
                          "retry_in": [o.retry_in for o in retries]}  # fmt: skip
                done |= {r[0] for r in conn.execute(q["fail_retry"], params)}
            unmatched = [c for c in [*starts, *finishing] if c.job_id not in done]
            if unmatched:
                # An outcome retried after a commit of unknown fate finds its own write; a
                # start may find a transactional task already committed its own ack.
                settled = conn.execute(q["already_settled"], _ids_tokens(unmatched))
                done |= {r[0] for r in settled}
        if retries:
            self._subscribers.notify_local()
        lost = [c for c in starts if c.job_id not in done]
        return lost + [o.claim for o in outcomes if o.claim.job_id not in done]

    def heartbeat(self, claims: Sequence[Claim], lease: float) -> list[Claim]:
        if not claims:
            return []
        with self._conn() as conn:
            params = {**_ids_tokens(claims), "lease": lease, "now": self._now()}
            alive = {r[0] for r in conn.execute(self._queries["heartbeat"], params)}
        return [c for c in claims if c.job_id not in alive]

    def release(self, claims: Sequence[Claim]) -> list[Claim]:
        if not claims:
            return []
        with self._conn() as conn:
            rows = conn.execute(self._queries["release"], _ids_tokens(claims)).fetchall()
            if rows:
                self._notify(conn, [r[1] for r in rows])
        self._subscribers.notify_local()
        released = {r[0] for r in rows}
        return [c for c in claims if c.job_id not in released]

    def _notify(self, conn: Any, queues: Sequence[str]) -> None:
        conn.execute(
            self._queries["notify"], {"channel": self.channel, "queues": sorted(set(queues))}
        )

    def recover_expired(self, limit: int = 1000) -> Recovery:
        with self._conn() as conn:
            rows = conn.execute(
                self._queries["recover_expired"], {"limit": limit, "now": self._now()}
            ).fetchall()
            requeued = [r for r in rows if r[1] == "ready"]
            if requeued:
                self._notify(conn, [r[2] for r in requeued])
        if rows:
            self._subscribers.notify_local()
        return Recovery(
            requeued=sorted(JobId(r[0]) for r in requeued),
            dead=sorted(JobId(r[0]) for r in rows if r[1] == "dead"),
        )

    # ---- transactional completion ---------------------------------------------------------------
    def ack_on(self, conn: Any, claim: Claim, result_json: str) -> None:
        """Ack inside the caller's transaction (a transactional task's own connection)."""
        params = {
            "ids": [claim.job_id],
            "tokens": [claim.token],
            "results": [result_json],
            "now": self._now(),
        }
        if not conn.execute(self._queries["ack"], params).fetchall():
            raise LeaseLost(claim.job_id, claim.token)

    # ---- operator actions -------------------------------------------------------------------------
    def cancel(self, job_id: int) -> Job:
        return self._operator_action("cancel", job_id)

    def retry(self, job_id: int) -> Job:
        try:
            job = self._operator_action("revive", job_id)
        except psycopg.errors.UniqueViolation:
            raise InvalidTransition(
                f"cannot retry job {job_id}: another unfinished job holds its unique key"
            ) from None
        self._subscribers.notify_local()
        return job

    def _operator_action(self, query: str, job_id: int) -> Job:
        with self._conn() as conn:
            row = conn.execute(self._queries[query], {"id": job_id, "now": self._now()}).fetchone()
            if row is not None and query == "revive":
                self._notify(conn, [row[1]])
            current = None
            if row is None:
                current = conn.execute(self._queries["get_job"], {"id": job_id}).fetchone()
        if row is not None:
            return _row_to_job(row)
        if current is None:
            raise JobNotFound(f"job {job_id} not found")
        verb = "cancel" if query == "cancel" else "retry"
        raise InvalidTransition(f"cannot {verb} job {job_id}: it is {current[5]}")

    # ---- read side -----------------------------------------------------------------------------------
    def get_job(self, job_id: int) -> Job | None:
        if not -(2**63) <= job_id < 2**63:
            return None
        with self._conn() as conn:
            row = conn.execute(self._queries["get_job"], {"id": job_id}).fetchone()
        return _row_to_job(row) if row else None

    def list_jobs(
        self, state: JobState | None = None, queue: str | None = None, limit: int = 100
    ) -> list[Job]:
        params = {"state": state.value if state else None, "queue": queue, "limit": limit}
        with self._conn() as conn:
            rows = conn.execute(self._queries["list_jobs"], params).fetchall()
        return [_row_to_job(r) for r in rows]

    def stats(self) -> Stats:
        now = self._now()
        with self._conn() as conn:
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            counts = conn.execute(self._queries["count_by_queue_state"], {"now": now}).fetchall()
            oldest = dict(conn.execute(self._queries["oldest_ready"], {"now": now}).fetchall())
        per_queue: dict[str, dict[JobState, int]] = {}
        for queue, state, count in counts:
            per_queue.setdefault(queue, {})[JobState(state)] = int(count)
        return Stats(
            {q: QueueStats(c, max(0.0, float(oldest.get(q) or 0.0))) for q, c in per_queue.items()}
        )

    # ---- retention -------------------------------------------------------------------------------------
    def prune(self, retention: Retention, batch: int = 1000) -> int:
        """Delete finished jobs older than their retention, one small batch per transaction.

        One pruner at a time: the others find the advisory lock taken and return 0.
        """
        deleted = 0
        for state, older_than in retention.by_state().items():
            while True:
                with self._conn() as conn:
                    got = conn.execute(
                        "SELECT pg_try_advisory_xact_lock(hashtext(%s))",
                        (f"sluicegate-prune:{self.schema}",),
                    ).fetchone()
                    if not got[0]:
                        return deleted
                    cur = conn.execute(self._queries["prune"], {
                        "state": state.value, "older_than": older_than, "batch": batch, "now": self._now(),
                    })  # fmt: skip
                    count = cur.rowcount
                deleted += count
                if count < batch:
                    break
        return deleted

    # ---- wake-ups ------------------------------------------------------------------------------------------
    def subscribe(self, callback: Callable[[], None]) -> Callable[[], None]:
        return self._subscribers.add(callback)

    def _listen_loop(self, stop: threading.Event, fire: Callable[[], None]) -> None:
        """LISTEN on a dedicated connection; reconnect with capped, jittered backoff."""
        delay = 0.0
        while not stop.is_set():
            try:
                with psycopg.connect(self.dsn, autocommit=True, **CONNECT_DEFAULTS) as conn:
                    conn.execute(f"LISTEN {self.channel}")
                    if delay:
                        log.info("LISTEN connection restored")
                        fire()  # anything enqueued while we were away
                    delay = 0.0
                    while not stop.is_set():
                        for _ in conn.notifies(timeout=0.5, stop_after=1):
                            fire()
            except psycopg.Error as exc:
                if delay == 0.0:
                    log.warning("LISTEN connection lost (%s); polling until it is back", exc)
                delay = min(max(delay * 2, 0.1), 5.0)
                stop.wait(delay * random.uniform(0.5, 1.0))
