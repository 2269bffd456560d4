"""Connections to the server: the broker's pool, the pool of transactional tasks, and the
translation of psycopg's errors into sluicegate's (BrokerUnavailable, ConfigError)."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator
from typing import Any

from ...errors import BrokerUnavailable, ConfigError
from .url import Settings

try:
    import psycopg
    import psycopg_pool
except ImportError:  # pragma: no cover - exercised only without the extra installed
    psycopg = None  # type: ignore[assignment]
    psycopg_pool = None  # type: ignore[assignment]

# A cut TCP connection must fail a call within seconds, not hang the worker's loop.
CONNECT_DEFAULTS: dict[str, Any] = {
    "connect_timeout": 5,
    "keepalives": 1,
    "keepalives_idle": 5,
    "keepalives_interval": 2,
    "keepalives_count": 3,
    "tcp_user_timeout": 10_000,
}
# The pool's own reconnect attempts back off exponentially; past this many seconds it
# gives up its background attempt and the next request tries afresh, so reconnects stay
# within a few seconds of the server coming back.
RECONNECT_CAP = 5.0
TASK_POOL_MAX = 64  # connections for transactional tasks' own transactions (opened lazily)

__all__ = [
    "CONNECT_DEFAULTS",
    "RECONNECT_CAP",
    "TASK_POOL_MAX",
    "Connections",
    "QuietPoolTrouble",
    "psycopg",
    "quiet_pool_logs",
]


class QuietPoolTrouble(logging.Filter):
    """psycopg_pool warns at every failed connection attempt and every broken connection it
    drops: a flood in an outage, which the worker already reports once (and its end). For
    sluicegate's own pools those records go down to DEBUG."""

    PREFIXES = (
        "error connecting in",
        "discarding closed connection",
        "discarding broken connection",
        "reconnection attempt in pool",
    )

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno != logging.WARNING or not str(record.msg).startswith(self.PREFIXES):
            return True
        args = record.args if isinstance(record.args, tuple) else ()
        names = [getattr(getattr(a, "_pool", None), "name", a) for a in args]
        if not any(isinstance(n, str) and n.startswith("sluicegate-") for n in names):
            return True
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)


def quiet_pool_logs() -> None:
    """Install QuietPoolTrouble on psycopg's pool logger, once: when a pool is made, so that
    importing sluicegate changes no one's logging."""
    pool_log = logging.getLogger("psycopg.pool")
    if not any(isinstance(f, QuietPoolTrouble) for f in pool_log.filters):
        pool_log.addFilter(QuietPoolTrouble())


def generic_plans(conn: Any) -> None:
    """Plan the broker's statements once per connection, not at every execution.

    Re-planning the claim costs the server more than running it, and PostgreSQL keeps
    choosing custom plans for it (its LIMIT and queue list are parameters). Every hot
    statement's generic plan reads the same index as its custom one; the operator queries
    whose best index depends on a parameter opt out (``custom_plans``). A generic plan
    cannot know that a claim's LIMIT is small, so its cost estimate is large: JIT
    compilation, which would then start, is off for these connections (every statement
    here touches a handful of rows)."""
    conn.execute("SET plan_cache_mode = force_generic_plan")
    conn.execute("SET jit = off")


class Connections:
    """The broker's pools, opened at once; every use translates storage errors."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._task_pool: Any = None
        self._task_pool_lock = threading.Lock()
        quiet_pool_logs()
        # Autocommit: one-statement writes (enqueue, claim) commit in their own round trip;
        # every other use opens a transaction explicitly (transaction).
        self._pool = psycopg_pool.ConnectionPool(
            settings.dsn,
            min_size=1,
            max_size=settings.pool_max,
            open=False,
            kwargs={"autocommit": True, **CONNECT_DEFAULTS},
            configure=generic_plans,
            name=f"sluicegate-{settings.schema}",
            timeout=5.0,
            reconnect_timeout=RECONNECT_CAP,
        )
        # One direct connection first: an unreachable server or a refused login fails at
        # once with the server's own words, not after the pool's timeout.
        try:
            psycopg.connect(settings.dsn, **CONNECT_DEFAULTS).close()
            self._pool.open(wait=True, timeout=10.0)
        except (psycopg.OperationalError, psycopg_pool.PoolTimeout) as exc:
            self._pool.close()
            raise BrokerUnavailable(
                f"cannot connect to PostgreSQL at {settings.server}: {str(exc).strip()}"
            ) from None

    @contextlib.contextmanager
    def single(self) -> Iterator[Any]:
        """A pooled autocommit connection: each statement is its own transaction."""
        try:
            with self._pool.connection() as conn:
                yield conn
        except (psycopg.OperationalError, psycopg_pool.PoolTimeout) as exc:
            raise self.unavailable(exc) from None
        except psycopg.errors.InsufficientPrivilege as exc:
            raise ConfigError(
                f"PostgreSQL role lacks a privilege on schema {self.settings.schema!r}: "
                f"{str(exc).strip()} (see docs/postgresql.md, roles and privileges)"
            ) from None

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Any]:
        """A pooled connection in one transaction; storage errors become BrokerUnavailable."""
        with self.single() as conn, conn.transaction():
            yield conn

    @contextlib.contextmanager
    def custom_plans(self) -> Iterator[Any]:
        """A transaction that plans each statement for its parameter values: an operator's
        filter (a state, a queue) decides which partial index fits."""
        with self.transaction() as conn:
            conn.execute("SET LOCAL plan_cache_mode = force_custom_plan")
            yield conn

    @contextlib.contextmanager
    def task_transaction(self) -> Iterator[Any]:
        """A connection of the task pool in an open transaction; commits on success, else
        rolls back. Only failing to get a connection becomes BrokerUnavailable; the body's
        own errors pass through unchanged."""
        with contextlib.ExitStack() as stack:
            try:
                conn = stack.enter_context(self._tasks_pool().connection())
            except (psycopg.OperationalError, psycopg_pool.PoolTimeout) as exc:
                raise self.unavailable(exc) from None
            with conn.transaction():
                yield conn

    def _tasks_pool(self) -> Any:
        with self._task_pool_lock:
            if self._task_pool is None:
                self._task_pool = psycopg_pool.ConnectionPool(
                    self.settings.dsn,
                    min_size=0,
                    max_size=TASK_POOL_MAX,
                    open=True,
                    max_idle=60.0,
                    kwargs={"autocommit": False, **CONNECT_DEFAULTS},
                    timeout=30.0,
                    reconnect_timeout=RECONNECT_CAP,
                    name=f"sluicegate-{self.settings.schema}-tasks",
                )
            return self._task_pool

    def unavailable(self, exc: Exception) -> BrokerUnavailable:
        return BrokerUnavailable(f"PostgreSQL unavailable ({self.settings.server}): {exc}")

    def close(self) -> None:
        self._pool.close()
        with self._task_pool_lock:
            if self._task_pool is not None:
                self._task_pool.close()
