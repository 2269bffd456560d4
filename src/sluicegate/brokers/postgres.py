"""The PostgreSQL broker: many workers on many machines, one server.

Claims are one statement with ``FOR UPDATE SKIP LOCKED`` over a partial index of ready
jobs; heartbeats, acks and failures are batched with ``unnest`` arrays and matched by
(job id, fencing token). Leases and due times use the server's clock (``now()``); tests
may pass a clock in. Wake-ups use LISTEN/NOTIFY (payload: a queue name only), with
polling as the fallback. Producers can enqueue inside their own psycopg transaction, and
``transactional`` tasks commit their writes together with the job's ack, on connections
of their own so that a long task never starves claims and heartbeats.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import random
import re
import secrets
import selectors
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from ..codec import dumps, loads
from ..errors import BrokerUnavailable, ConfigError, JobNotFound, LeaseLost
from ..job import Claim, ClaimedJob, ErrorInfo, Job, JobId, JobSpec, JobState, in_claim_order
from ..outcomes import Buried, Outcome, Retried, Succeeded
from .base import Broker, QueueStats, Recovery, Stats, refusal, unique_key_taken
from .sqlfiles import load_migrations, load_queries
from .wakeups import Subscribers

try:
    import psycopg
    import psycopg_pool
    from psycopg.conninfo import conninfo_to_dict
    from psycopg.rows import tuple_row
except ImportError:  # pragma: no cover - exercised only without the extra installed
    psycopg = None  # type: ignore[assignment]
    psycopg_pool = None  # type: ignore[assignment]

log = logging.getLogger("sluicegate.postgres")

# A cut TCP connection must fail a call within seconds, not hang the worker's loop.
CONNECT_DEFAULTS: dict[str, Any] = {
    "connect_timeout": 5, "keepalives": 1, "keepalives_idle": 5, "keepalives_interval": 2,
    "keepalives_count": 3, "tcp_user_timeout": 10_000,
}  # fmt: skip
# The pool's own reconnect attempts back off exponentially; past this many seconds it
# gives up its background attempt and the next request tries afresh, so reconnects stay
# within a few seconds of the server coming back.
RECONNECT_CAP = 5.0
SCHEMA_PATTERN = re.compile(r"[a-z_][a-z0-9_]{0,49}")
OUR_OPTIONS = {"schema", "migrate", "pool_max", "poll_interval"}
BOOLEANS = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}
TASK_POOL_MAX = 64  # connections for transactional tasks' own transactions (opened lazily)
LISTEN_WAIT = 2.0  # subscribe() waits this long at most for LISTEN to be in place
LISTEN_IDLE = 5.0  # the listener's longest sleep, should a stop's interrupt be lost
MAYBE_WRITTEN_MAX = 10_000  # claims remembered for own_writes; the oldest are forgotten
TIMES = ("run_at", "lease_expires_at", "enqueued_at", "started_at", "finished_at")
COLUMNS = (
    "id", "queue", "task", "args", "kwargs", "state", "priority", "run_at", "attempts",
    "max_attempts", "unique_key", "lease_token", "lease_expires_at", "worker_id",
    "enqueued_at", "started_at", "finished_at", "result", "last_error",
)  # fmt: skip


class _QuietPoolTrouble(logging.Filter):
    """psycopg_pool warns at every failed connection attempt and every broken connection it
    drops: a flood in an outage, which the worker already reports once (and its end). For
    sluicegate's own pools those records go down to DEBUG."""

    PREFIXES = (
        "error connecting in", "discarding closed connection", "discarding broken connection",
        "reconnection attempt in pool",
    )  # fmt: skip

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno != logging.WARNING or not str(record.msg).startswith(self.PREFIXES):
            return True
        args = record.args if isinstance(record.args, tuple) else ()
        names = [getattr(getattr(a, "_pool", None), "name", a) for a in args]
        if not any(isinstance(n, str) and n.startswith("sluicegate-") for n in names):
            return True
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)


if psycopg_pool is not None:
    _pool_log = logging.getLogger("psycopg.pool")
    if not any(isinstance(f, _QuietPoolTrouble) for f in _pool_log.filters):
        _pool_log.addFilter(_QuietPoolTrouble())


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
    if SCHEMA_PATTERN.fullmatch(schema) is None or schema.startswith("pg_"):
        raise ConfigError(
            f"invalid schema {schema!r} in {url!r}: use 1-50 characters from a-z 0-9 _, "
            "not starting with a digit or pg_"
        )
    if psycopg is not None:
        try:
            conninfo_to_dict(dsn)  # libpq's own check: unknown options, bad ports, ...
        except psycopg.ProgrammingError as exc:
            raise ConfigError(
                f"invalid PostgreSQL URL {_redacted(url)!r}: {exc}; sluicegate's own "
                f"options are {', '.join(sorted(OUR_OPTIONS))}"
            ) from None
    return dsn, ours


def _redacted(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None:
        return url
    return parts._replace(netloc=parts.netloc.replace(f":{parts.password}@", ":***@", 1)).geturl()


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


def _matched(rows: Any) -> set[Claim]:
    """The claims a batched write matched, from rows of (job id, lease token, ...).

    Matching by id alone would let a stale claim pass for a live one on the same job."""
    return {Claim(JobId(r[0]), r[1]) for r in rows}


def _generic_plans(conn: Any) -> None:
    """Plan the broker's statements once per connection, not at every execution.

    Re-planning the claim costs the server more than running it, and PostgreSQL keeps
    choosing custom plans for it (its LIMIT and queue list are parameters). Every hot
    statement's generic plan reads the same index as its custom one; the operator queries
    whose best index depends on a parameter opt out (``_custom_plans``). A generic plan
    cannot know that a claim's LIMIT is small, so its cost estimate is large: JIT
    compilation, which would then start, is off for these connections (every statement
    here touches a handful of rows)."""
    conn.execute("SET plan_cache_mode = force_generic_plan")
    conn.execute("SET jit = off")


def _fits_bigint(job_id: int) -> bool:
    return -(2**63) <= job_id < 2**63


class PostgresBroker(Broker):
    supports_transactions = True
    cheap_empty_claim = True  # an empty claim writes nothing: idle workers need no probe first

    def __init__(self, url: str, clock: Callable[[], float] | None = None) -> None:
        if psycopg is None:
            raise ConfigError(
                "the postgresql:// broker needs psycopg: pip install 'sluicegate[postgres]'"
            )
        self.url = url
        self.dsn, options = parse_postgres_url(url)
        self.schema = options.get("schema", "sluicegate")
        # Validated above; quoting keeps reserved words (user, order, ...) usable as names.
        self._s = f'"{self.schema}"'
        self.channel = f"{self.schema}_jobs"
        try:
            pool_max = int(options.get("pool_max", "4"))
            self.poll_interval = float(options.get("poll_interval", "1.0"))
        except ValueError as exc:
            raise ConfigError(f"invalid PostgreSQL URL {_redacted(url)!r}: {exc}") from None
        if pool_max < 1 or not self.poll_interval > 0:
            raise ConfigError(
                f"invalid PostgreSQL URL {_redacted(url)!r}: pool_max must be at least 1 "
                "and poll_interval above 0"
            )
        migrate = BOOLEANS.get(options.get("migrate", "true").lower())
        if migrate is None:
            raise ConfigError(
                f"invalid PostgreSQL URL {_redacted(url)!r}: migrate must be true or false"
            )
        self._clock = clock
        self._queries = self._load_queries()
        self.migrations_applied: list[int] = []
        self._listening = threading.Event()
        self._task_pool: Any = None
        self._task_pool_lock = threading.Lock()
        # Claims whose write from this handle may have landed unseen (see own_writes).
        self._maybe_written: dict[Claim, None] = {}
        self._maybe_lock = threading.Lock()
        # Autocommit: one-statement writes (enqueue, claim) commit in their own round trip;
        # every other use opens a transaction explicitly (_conn).
        self._pool = psycopg_pool.ConnectionPool(
            self.dsn, min_size=1, max_size=pool_max, open=False,
            kwargs={"autocommit": True, **CONNECT_DEFAULTS}, configure=_generic_plans,
            name=f"sluicegate-{self.schema}",
            timeout=5.0, reconnect_timeout=RECONNECT_CAP,
        )  # fmt: skip
        # One direct connection first: an unreachable server or a refused login fails at
        # once with the server's own words, not after the pool's timeout.
        try:
            psycopg.connect(self.dsn, **CONNECT_DEFAULTS).close()
            self._pool.open(wait=True, timeout=10.0)
        except (psycopg.OperationalError, psycopg_pool.PoolTimeout) as exc:
            self._pool.close()
            raise BrokerUnavailable(
                f"cannot connect to PostgreSQL at {self._safe_dsn()}: {str(exc).strip()}"
            ) from None
        try:
            if migrate:
                self.migrate()
            else:
                self._check_migrated()
        except BaseException:
            self._pool.close()
            raise
        # The listener sleeps in select() on its connection and this pair's reading end;
        # stopping writes to the other end (no periodic wake-ups while idle).
        self._listen_wake = socket.socketpair()
        for end in self._listen_wake:
            end.setblocking(False)
        self._subscribers = Subscribers(self._listen_loop, self._interrupt_listener)

    # ---- setup -------------------------------------------------------------------------
    def _load_queries(self) -> dict[str, str]:
        # statement_timestamp(), not now(): now() is when the transaction began, and an ack
        # in a transactional task's transaction would stamp finished_at at the task's start.
        now = "coalesce(to_timestamp(%(now)s::float8), statement_timestamp())"
        out = {}
        raw = load_queries("postgresql")
        raw["insert_jobs_notify"] = raw["insert_jobs_notify"].replace(
            "{insert_job}", raw["insert_job"].rstrip().rstrip(";")
        )
        for name, sql in raw.items():
            sql = sql.replace("{job_columns_j}", _select_list("j."))
            sql = sql.replace("{job_columns}", _select_list(""))
            out[name] = sql.replace("{schema}", self._s).replace("{now}", now)
        return out

    def _safe_dsn(self) -> str:
        parts = urlsplit(self.dsn)
        host = parts.hostname or "localhost"
        return f"{host}:{parts.port or 5432}{parts.path}"

    def _now(self) -> float | None:
        return self._clock() if self._clock is not None else None

    def migrate(self) -> list[int]:
        """Apply pending numbered migrations; returns the versions this call applied.

        Safe from many processes at once: an advisory lock per schema serialises them and
        each re-reads the version under it. An up-to-date schema costs one read, no DDL.
        """
        migrations = load_migrations("postgresql")
        latest = max((m.version for m in migrations), default=0)
        applied: list[int] = []
        with self._conn() as conn:
            if self._version(conn) >= latest:
                return applied
            conn.execute(
                "SELECT pg_advisory_xact_lock(hashtext(%s))", (f"sluicegate:{self.schema}",)
            )
            exists = conn.execute("SELECT to_regnamespace(%s)", (self.schema,)).fetchone()[0]
            if exists is None:  # CREATE SCHEMA needs CREATE on the database, even IF NOT EXISTS
                conn.execute(f"CREATE SCHEMA {self._s}")
            conn.execute(
                f"CREATE TABLE IF NOT EXISTS {self._s}.schema_version "
                "(version integer PRIMARY KEY, name text NOT NULL, "
                "applied_at timestamptz NOT NULL DEFAULT now())"
            )
            current = self._version(conn)
            for migration in migrations:
                if migration.version <= current:
                    continue
                for statement in migration.statements:
                    conn.execute(statement.replace("{schema}", self._s))
                conn.execute(
                    f"INSERT INTO {self._s}.schema_version (version, name) VALUES (%s, %s)",
                    (migration.version, migration.name),
                )
                applied.append(migration.version)
        self.migrations_applied.extend(applied)
        return applied

    def _version(self, conn: Any) -> int:
        """The schema's migration version: 0 while the schema or its version table is missing."""
        table = f"{self._s}.schema_version"
        if conn.execute("SELECT to_regclass(%s)", (table,)).fetchone()[0] is None:
            return 0
        row = conn.execute(f"SELECT coalesce(max(version), 0) FROM {table}").fetchone()
        return int(row[0])

    def _check_migrated(self) -> None:
        latest = max((m.version for m in load_migrations("postgresql")), default=0)
        with self._conn() as conn:
            current = self._version(conn)
        if current < latest:
            raise ConfigError(
                f"PostgreSQL schema {self.schema!r} at {self._safe_dsn()} is at version "
                f"{current}, this sluicegate needs {latest}, and the URL says migrate=false: "
                "run `sluicegate migrate --broker URL` (URL without migrate=false, as a role "
                "that may create tables in the schema)"
            )

    # ---- connections ----------------------------------------------------------------------
    @contextlib.contextmanager
    def _conn(self) -> Iterator[Any]:
        """A pooled connection in one transaction; storage errors become BrokerUnavailable."""
        with self._single() as conn, conn.transaction():
            yield conn

    @contextlib.contextmanager
    def _custom_plans(self) -> Iterator[Any]:
        """A transaction that plans each statement for its parameter values: an operator's
        filter (a state, a queue) decides which partial index fits."""
        with self._conn() as conn:
            conn.execute("SET LOCAL plan_cache_mode = force_custom_plan")
            yield conn

    @contextlib.contextmanager
    def _single(self) -> Iterator[Any]:
        """A pooled autocommit connection: each statement is its own transaction."""
        try:
            with self._pool.connection() as conn:
                yield conn
        except (psycopg.OperationalError, psycopg_pool.PoolTimeout) as exc:
            raise BrokerUnavailable(f"PostgreSQL unavailable ({self._safe_dsn()}): {exc}") from None
        except psycopg.errors.InsufficientPrivilege as exc:
            raise ConfigError(
                f"PostgreSQL role lacks a privilege on schema {self.schema!r}: "
                f"{str(exc).strip()} (see docs/postgresql.md, roles and privileges)"
            ) from None

    def _tasks_pool(self) -> Any:
        with self._task_pool_lock:
            if self._task_pool is None:
                self._task_pool = psycopg_pool.ConnectionPool(
                    self.dsn, min_size=0, max_size=TASK_POOL_MAX, open=True, max_idle=60.0,
                    kwargs={"autocommit": False, **CONNECT_DEFAULTS}, timeout=30.0,
                    reconnect_timeout=RECONNECT_CAP,
                    name=f"sluicegate-{self.schema}-tasks",
                )  # fmt: skip
            return self._task_pool

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Any]:
        """A psycopg connection in an open transaction; commits on success, else rolls back.

        Taken from a pool of its own: a task holds it for as long as it runs, and must not
        starve the claims and heartbeats of the main pool. Only failing to get a connection
        becomes BrokerUnavailable; the body's own errors pass through unchanged.
        """
        with contextlib.ExitStack() as stack:
            try:
                conn = stack.enter_context(self._tasks_pool().connection())
            except (psycopg.OperationalError, psycopg_pool.PoolTimeout) as exc:
                raise BrokerUnavailable(
                    f"PostgreSQL unavailable ({self._safe_dsn()}): {exc}"
                ) from None
            with conn.transaction():
                yield conn

    # ---- writes whose fate this handle cannot see ----------------------------------------------
    def _remember(self, claims: Sequence[Claim]) -> None:
        """Note claims whose write may be in the database unseen; the oldest drop out."""
        with self._maybe_lock:
            for claim in claims:
                self._maybe_written.pop(claim, None)
                self._maybe_written[claim] = None
            while len(self._maybe_written) > MAYBE_WRITTEN_MAX:
                del self._maybe_written[next(iter(self._maybe_written))]

    def _own_writes(self, conn: Any, unmatched: Sequence[Claim]) -> set[Claim]:
        """Of claims a write did not match, those whose own earlier write is in the row.

        Asked only for claims this handle remembers (an unknown-fate COMMIT, or an ack made
        in a caller's transaction): for every other claim, one that ended is lost."""
        with self._maybe_lock:
            maybe = [c for c in unmatched if c in self._maybe_written]
        if not maybe:
            return set()
        return _matched(conn.execute(self._queries["own_writes"], _ids_tokens(maybe)))

    def close(self) -> None:
        self._subscribers.stop()
        for end in self._listen_wake:
            end.close()
        self._pool.close()
        with self._task_pool_lock:
            if self._task_pool is not None:
                self._task_pool.close()

    # ---- producer side ----------------------------------------------------------------------
    def enqueue(self, specs: Sequence[JobSpec], connection: Any = None) -> list[Job]:
        if connection is not None and not isinstance(connection, psycopg.Connection):
            raise ConfigError(
                "enqueue(connection=...) takes a psycopg 3 Connection with an open "
                f"transaction, not {type(connection).__name__}"
            )
        if not specs:
            return []
        if connection is not None:
            # The caller's transaction: no commit here; NOTIFY goes out when it commits.
            return self._insert(connection, specs)
        if len(specs) == 1 and specs[0].unique_key is None:
            # One statement, its own transaction: row and wake-up commit in one round trip.
            with self._single() as conn:
                jobs = [self._insert_one(conn, specs[0])]
        elif all(s.unique_key is None for s in specs):
            with self._single() as conn:
                jobs = self._insert_plain(conn, list(specs), self._now(), notify=True)
        else:
            with self._conn() as conn:
                jobs = self._insert(conn, specs)
        self._subscribers.notify_local()
        return jobs

    def _insert(self, conn: Any, specs: Sequence[JobSpec]) -> list[Job]:
        """Rows go in batch order (ids are the claim order's last tie-break): each run of
        specs without a unique key is one statement, keyed specs go one at a time."""
        jobs: list[Job] = []
        now = self._now()
        for plain, run in itertools.groupby(specs, key=lambda s: s.unique_key is None):
            batch = list(run)
            if plain:
                jobs.extend(self._insert_plain(conn, batch, now))
            else:
                jobs.extend(self._insert_unique(conn, spec, now) for spec in batch)
        queues = sorted({s.queue for s in specs})
        conn.execute(self._queries["notify"], {"channel": self.channel, "queues": queues})
        return jobs

    def _insert_plain(
        self, conn: Any, specs: list[JobSpec], now: float | None, notify: bool = False
    ) -> list[Job]:
        params = {
            "queue": [s.queue for s in specs], "task": [s.task for s in specs],
            "args": [s.args_json for s in specs], "kwargs": [s.kwargs_json for s in specs],
            "priority": [s.priority for s in specs],
            "max_attempts": [s.max_attempts for s in specs],
            "delay": [s.delay for s in specs], "run_at": [s.run_at for s in specs], "now": now,
        }  # fmt: skip
        if notify:
            params.update(channel=self.channel, queues=sorted({s.queue for s in specs}))
        # The caller's connection may have any row factory; ours reads tuples.
        with conn.cursor(row_factory=tuple_row) as cur:
            query = self._queries["insert_jobs_notify" if notify else "insert_job"]
            rows = cur.execute(query, params).fetchall()
        rows.sort(key=lambda r: r[0])  # identities follow the statement's ORDER BY
        return [_row_to_job(r) for r in rows]

    def _insert_one(self, conn: Any, spec: JobSpec) -> Job:
        row = conn.execute(self._queries["insert_one_notify"], {
            "queue": spec.queue, "task": spec.task, "args": spec.args_json,
            "kwargs": spec.kwargs_json, "priority": spec.priority,
            "max_attempts": spec.max_attempts, "run_at": spec.run_at, "delay": spec.delay,
            "now": self._now(), "channel": self.channel,
        }).fetchone()  # fmt: skip
        return _row_to_job(row)

    def _insert_unique(self, conn: Any, spec: JobSpec, now: float | None) -> Job:
        params = {
            "queue": spec.queue, "task": spec.task, "args": spec.args_json,
            "kwargs": spec.kwargs_json, "priority": spec.priority,
            "max_attempts": spec.max_attempts, "unique_key": spec.unique_key,
            "run_at": spec.run_at, "delay": spec.delay, "now": now,
        }  # fmt: skip
        # The holder of the key can finish between our insert and our read: then go again.
        with conn.cursor(row_factory=tuple_row) as cur:
            for _ in range(5):
                row = cur.execute(self._queries["insert_unique_job"], params).fetchone()
                if row is None:
                    row = cur.execute(self._queries["unfinished_by_unique_key"], params).fetchone()
                if row is not None:
                    return _row_to_job(row)
        raise BrokerUnavailable(
            f"unique key {spec.unique_key!r} kept changing hands during enqueue; try again"
        )

    # ---- hot path -----------------------------------------------------------------------------
    def claim(
        self, queues: Sequence[str], n: int, lease: float, worker_id: str
    ) -> list[ClaimedJob]:
        """One statement, its own transaction: an idle worker's claim is one round trip.

        A claim that promoted due jobs of its queues claims nothing (see the claim
        statement); the second statement, without promoting, sees them committed."""
        if n <= 0 or not queues:
            return []
        token = secrets.randbits(62)
        params = {
            "queues": list(dict.fromkeys(queues)), "n": n, "token": token, "lease": lease,
            "worker": worker_id, "now": self._now(), "promote": True,
        }  # fmt: skip
        with self._single() as conn:
            rows = conn.execute(self._queries["claim"], params).fetchall()
            if rows and rows[0][0]:
                rows = conn.execute(self._queries["claim"], {**params, "promote": False}).fetchall()
        claimed = [_claimed_from_row(r[2:], token) for r in rows if r[2] is not None]
        return in_claim_order(claimed)

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
        """Starts and outcomes in one pipelined transaction."""
        if not started and not outcomes:
            return []
        finishing = {o.claim for o in outcomes}
        starts = [c for c in started if c not in finishing]
        written = [*starts, *finishing]
        try:
            with self._conn() as conn, conn.pipeline():
                if not outcomes:  # starts alone: losing them in a crash leaves jobs "claimed"
                    conn.execute("SET LOCAL synchronous_commit = off")
                done = self._record(conn, starts, outcomes)
                done |= self._own_writes(conn, [c for c in written if c not in done])
        except BrokerUnavailable:
            # Perhaps at COMMIT: whether it was written stays unknown until the caller retries.
            self._remember(written)
            raise
        if any(isinstance(o, Retried) for o in outcomes):
            self._subscribers.notify_local()  # retries due later: look again then
        # Any other claim that ended (ack, fail, release, recovery, cancel) is lost for every
        # later call, its own token included: fencing, as on every broker.
        lost = [c for c in starts if c not in done]
        return lost + [o.claim for o in outcomes if o.claim not in done]

    def _record(self, conn: Any, starts: list[Claim], outcomes: Sequence[Outcome]) -> set[Claim]:
        """The batched writes of ``record``, one statement per kind; returns the claims matched."""
        q, now = self._queries, self._now()
        acks = [o for o in outcomes if isinstance(o, Succeeded)]
        dead = [o for o in outcomes if isinstance(o, Buried)]
        retries = [o for o in outcomes if isinstance(o, Retried)]
        done: set[Claim] = set()
        params: dict[str, Any]
        if starts:
            done |= _matched(conn.execute(q["start"], {**_ids_tokens(starts), "now": now}))
        if acks:
            params = {**_ids_tokens([o.claim for o in acks]), "now": now,
                      "results": [o.result_json for o in acks]}  # fmt: skip
            done |= _matched(conn.execute(q["ack"], params))
        if dead:
            params = {**_ids_tokens([o.claim for o in dead]), "now": now,
                      "errors": [dumps(o.error.to_dict()) for o in dead]}  # fmt: skip
            done |= _matched(conn.execute(q["fail_dead"], params))
        if retries:
            params = {**_ids_tokens([o.claim for o in retries]), "now": now,
                      "errors": [dumps(o.error.to_dict()) for o in retries],
                      "retry_in": [o.retry_in for o in retries]}  # fmt: skip
            rows = conn.execute(q["fail_retry"], params).fetchall()
            done |= _matched(rows)
            if rows:  # due later: sleeping workers elsewhere recompute their next wake-up
                self._notify_queues(conn, [r[2] for r in rows])
        return done

    def heartbeat(self, claims: Sequence[Claim], lease: float) -> list[Claim]:
        if not claims:
            return []
        with self._conn() as conn:
            params = {**_ids_tokens(claims), "lease": lease, "now": self._now()}
            alive = _matched(conn.execute(self._queries["heartbeat"], params))
            alive |= self._own_writes(conn, [c for c in claims if c not in alive])
        return [c for c in claims if c not in alive]

    def release(self, claims: Sequence[Claim]) -> list[Claim]:
        if not claims:
            return []
        with self._conn() as conn:
            rows = conn.execute(self._queries["release"], _ids_tokens(claims)).fetchall()
            if rows:
                self._notify_queues(conn, [r[2] for r in rows])
        released = _matched(rows)
        if released:
            self._subscribers.notify_local()
        return [c for c in claims if c not in released]

    def _notify_queues(self, conn: Any, queues: Sequence[str]) -> None:
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
                self._notify_queues(conn, [r[2] for r in requeued])
        if requeued:
            self._subscribers.notify_local()
        return Recovery(
            requeued=sorted(JobId(r[0]) for r in requeued),
            dead=sorted(JobId(r[0]) for r in rows if r[1] == "dead"),
        )

    # ---- transactional completion ---------------------------------------------------------------
    def ack_on(self, connection: Any, claim: Claim, result_json: str) -> None:
        """Ack inside the caller's transaction (a transactional task's own connection).

        Commits or rolls back with the caller's writes; LeaseLost if the token is stale."""
        params = {
            "ids": [claim.job_id],
            "tokens": [claim.token],
            "results": [result_json],
            "now": self._now(),
        }
        with connection.cursor(row_factory=tuple_row) as cur:
            matched = _matched(cur.execute(self._queries["ack"], params).fetchall())
        if claim not in matched:
            raise LeaseLost(claim.job_id, claim.token)
        # The caller's COMMIT may land any moment (or break, fate unknown). Remembered now,
        # before that commit hands the row to a start or heartbeat of this claim waiting on
        # its lock: those find the task's own ack, which is no lost lease (own_writes).
        self._remember([claim])

    # ---- operator actions -------------------------------------------------------------------------
    def cancel(self, job_id: int) -> Job:
        return self._operator_action("cancel", job_id)

    def retry(self, job_id: int) -> Job:
        try:
            job = self._operator_action("revive", job_id)
        except psycopg.errors.UniqueViolation:
            raise unique_key_taken(job_id) from None
        self._subscribers.notify_local()
        return job

    def _operator_action(self, query: str, job_id: int) -> Job:
        if not _fits_bigint(job_id):
            raise JobNotFound(f"job {job_id} not found")
        with self._conn() as conn:
            row = conn.execute(self._queries[query], {"id": job_id, "now": self._now()}).fetchone()
            if row is not None and query == "revive":
                self._notify_queues(conn, [row[1]])
            current = None
            if row is None:
                current = conn.execute(self._queries["get_job"], {"id": job_id}).fetchone()
        if row is not None:
            return _row_to_job(row)
        verb = "cancel" if query == "cancel" else "retry"
        raise refusal(verb, job_id, current[5] if current else None)

    # ---- read side -----------------------------------------------------------------------------------
    def get_job(self, job_id: int) -> Job | None:
        if not _fits_bigint(job_id):
            return None
        with self._conn() as conn:
            row = conn.execute(self._queries["get_job"], {"id": job_id}).fetchone()
        return _row_to_job(row) if row else None

    def list_jobs(
        self, state: JobState | None = None, queue: str | None = None, limit: int = 100
    ) -> list[Job]:
        params = {"state": state.value if state else None, "queue": queue, "limit": limit}
        with self._custom_plans() as conn:
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
    def prune_batch(self, state: JobState, older_than: float, batch: int) -> int:
        """Pruners may run at once: SKIP LOCKED gives each its own rows and its own count."""
        with self._custom_plans() as conn:
            return int(conn.execute(self._queries["prune"], {
                "state": state.value, "older_than": older_than, "batch": batch,
                "now": self._now(),
            }).rowcount)  # fmt: skip

    # ---- wake-ups ------------------------------------------------------------------------------------------
    def wakeups_healthy(self) -> bool:
        return self._listening.is_set()

    def _await_notification(self, waiting: selectors.BaseSelector) -> None:
        """Sleep until the LISTEN connection has input (a notification, or the server
        closing it) or stop is asked for. A long timeout only bounds a lost interrupt.
        A selector, not select(): it has no limit on descriptor numbers."""
        wake = self._listen_wake[0]
        try:
            ready = waiting.select(LISTEN_IDLE)
        except (OSError, ValueError):  # the wake socket was closed: the broker is closing
            time.sleep(0.1)
            return
        if any(key.fileobj is wake for key, _ in ready):
            with contextlib.suppress(OSError):
                while wake.recv(64):
                    pass

    def _interrupt_listener(self) -> None:
        with contextlib.suppress(OSError):
            self._listen_wake[1].send(b"!")

    def subscribe(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Also waits (at most LISTEN_WAIT s) until LISTEN is in place, so that an enqueue
        from anywhere after this returns is seen."""
        unsubscribe = self._subscribers.add(callback)
        self._listening.wait(LISTEN_WAIT)
        return unsubscribe

    def _listen_loop(self, stop: threading.Event, fire: Callable[[], None]) -> None:
        """LISTEN on a dedicated connection. Fires once each time LISTEN is (re)established
        (for what committed while nobody listened) and every poll_interval while it is down
        (polling fallback); reconnects with capped, jittered backoff."""
        delay = 0.0
        try:
            while not stop.is_set():
                try:
                    with psycopg.connect(self.dsn, autocommit=True, **CONNECT_DEFAULTS) as conn:
                        conn.execute(f'LISTEN "{self.channel}"')
                        if delay:
                            log.info("LISTEN connection restored")
                        delay = 0.0
                        fire()
                        self._listening.set()
                        with selectors.DefaultSelector() as waiting:
                            waiting.register(conn.fileno(), selectors.EVENT_READ)
                            waiting.register(self._listen_wake[0], selectors.EVENT_READ)
                            while not stop.is_set():
                                self._await_notification(waiting)
                                if any(True for _ in conn.notifies(timeout=0)):
                                    fire()
                except psycopg.Error as exc:
                    self._listening.clear()
                    if delay == 0.0:
                        log.warning("LISTEN connection lost (%s); polling until it is back", exc)
                    delay = min(max(delay * 2, 0.1), 5.0)
                    until = time.monotonic() + delay * random.uniform(0.5, 1.0)
                    while not stop.is_set() and (left := until - time.monotonic()) > 0:
                        stop.wait(min(left, self.poll_interval))
                        fire()
        finally:
            self._listening.clear()
