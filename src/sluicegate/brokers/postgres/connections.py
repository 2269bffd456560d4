"""Connections to the server: the broker's pool, the pool of transactional tasks, and the
translation of psycopg's errors into sluicegate's (BrokerUnavailable, ConfigError).

Every call on the broker's pool is bounded (``deadlines``): a connection found dead at
checkout is replaced before anything is sent on it, and one that stops answering is cut
at the call's deadline (``ConnectionLost``: what was sent may or may not have landed).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import weakref
from collections.abc import Iterator
from typing import Any

from ...errors import BrokerUnavailable, ConfigError
from .deadlines import (
    DEFAULT_CALL_TIMEOUT,
    WATCHDOG,
    Ticket,
    bound_for_lease,
    found_dead,
    session_settings,
    tcp_params,
)
from .url import Settings

try:
    import psycopg
    import psycopg_pool
except ImportError:  # pragma: no cover - exercised only without the extra installed
    psycopg = None  # type: ignore[assignment]
    psycopg_pool = None  # type: ignore[assignment]

# Connecting: libpq's own bound on one attempt (the pool retries in the background).
CONNECT_TIMEOUT = 5
# A cut TCP connection must fail a call within seconds, not hang the worker's loop (the
# TCP settings follow the call bound, see deadlines.tcp_params; these are for 10 s).
CONNECT_DEFAULTS: dict[str, Any] = {
    "connect_timeout": CONNECT_TIMEOUT,
    **tcp_params(DEFAULT_CALL_TIMEOUT),
}
# The pool's own reconnect attempts back off exponentially; past this many seconds it
# gives up its background attempt and the next request tries afresh, so reconnects stay
# within a few seconds of the server coming back.
RECONNECT_CAP = 5.0
# A call waits for a connection in slices of this many seconds: a pool whose background
# reconnect gave up (the server was away longer than RECONNECT_CAP) tries again only
# when asked, so a call waiting for the server's return asks once per slice.
CHECKOUT_SLICE = 1.0
TASK_POOL_MAX = 64  # connections for transactional tasks' own transactions (opened lazily)

__all__ = [
    "CONNECT_DEFAULTS",
    "CONNECT_TIMEOUT",
    "RECONNECT_CAP",
    "TASK_POOL_MAX",
    "ConnectionLost",
    "Connections",
    "QuietPoolTrouble",
    "psycopg",
    "psycopg_pool",
    "quiet_pool_logs",
]


class QuietPoolTrouble(logging.Filter):
    """psycopg_pool warns at every failed connection attempt, every broken connection it
    drops or rolls back, every reconnect it gives up and every maintenance task that fails,
    and psycopg at every pipeline or transaction it could not end on a broken connection:
    a flood in an outage, which sluicegate already reports in one line (and one when it
    ends). Their warnings about sluicegate's own pools (named ``sluicegate-...``) and
    their connections go down to DEBUG, where they stay visible to whoever asks for them;
    other pools' and connections' are untouched."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno != logging.WARNING or not self.about_ours(record):
            return True
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)

    @staticmethod
    def about_ours(record: logging.LogRecord) -> bool:
        """Whether an argument names one of sluicegate's pools: the pool's name, a
        connection one of them made (marked by ``mark_ours``: the pool forgets a connection
        it closes, ``_pool``, before it warns that it discards it) or a pipeline of such a
        connection (``_conn``), or a maintenance task of the pool (``pool``, a weak
        reference)."""
        args = record.args if isinstance(record.args, tuple) else ()
        for arg in args:
            conn = getattr(arg, "_conn", arg)
            with contextlib.suppress(TypeError):  # an argument that cannot be weakly held
                if conn in _OUR_CONNECTIONS:
                    return True
            pool = getattr(conn, "_pool", None)
            if pool is None and callable(ref := getattr(arg, "pool", None)):
                with contextlib.suppress(TypeError):
                    pool = ref()
            name = arg if isinstance(arg, str) else getattr(pool, "name", None)
            if isinstance(name, str) and name.startswith("sluicegate-"):
                return True
        return False


# Every connection sluicegate's pools made, held weakly: what their warnings are about.
_OUR_CONNECTIONS: weakref.WeakSet[Any] = weakref.WeakSet()


def mark_ours(conn: Any) -> None:
    """A pool's ``configure`` hook: remember the new connection as sluicegate's."""
    _OUR_CONNECTIONS.add(conn)


def quiet_pool_logs() -> None:
    """Install QuietPoolTrouble on psycopg's and psycopg_pool's loggers, once: when a pool
    is made, so that importing sluicegate changes no one's logging. (A logger's filter sees
    only what is logged on that logger, not what its children pass up: psycopg logs a
    rollback it could not finish on ``psycopg.transaction``.)"""
    for name in ("psycopg", "psycopg.pool", "psycopg.transaction"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, QuietPoolTrouble) for f in logger.filters):
            logger.addFilter(QuietPoolTrouble())


class ConnectionLost(BrokerUnavailable):
    """The connection broke, or was cut at its deadline, after statements were sent on it:
    a write among them may or may not have committed. (Internal: callers that can say more,
    such as enqueue, turn it into a precise error; others see a BrokerUnavailable.)"""


class Connections:
    """The broker's pools, opened at once; every use is bounded and translates storage
    errors."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        # How long one call may take (deadlines.py): the URL's call_timeout, or narrowed
        # to a third of the shortest lease a claim or heartbeat names (expect_lease).
        self.call_timeout = settings.call_timeout or DEFAULT_CALL_TIMEOUT
        self._tuned: weakref.WeakKeyDictionary[Any, float] = weakref.WeakKeyDictionary()
        self._task_pool: Any = None
        self._task_pool_lock = threading.Lock()
        quiet_pool_logs()
        # The user's own libpq TCP settings in the URL win over the derived ones.
        self._own_tcp = set(tcp_params(1.0)) & set(conninfo_keys(settings.dsn))
        self._connect_kwargs: dict[str, Any] = {
            "autocommit": True,
            "connect_timeout": CONNECT_TIMEOUT,
        }
        self._connect_kwargs.update(self._tcp(self.call_timeout))
        # Autocommit: one-statement writes (enqueue, claim) commit in their own round trip;
        # every other use opens a transaction explicitly (transaction).
        self._pool = psycopg_pool.ConnectionPool(
            settings.dsn,
            min_size=1,
            max_size=settings.pool_max,
            open=False,
            kwargs=self._connect_kwargs,  # the same dict: expect_lease updates it in place
            configure=self._configure,
            name=f"sluicegate-{settings.schema}",
            timeout=self.call_timeout,
            reconnect_timeout=RECONNECT_CAP,
        )
        # One direct connection first: an unreachable server or a refused login fails at
        # once with the server's own words, not after the pool's timeout.
        try:
            psycopg.connect(settings.dsn, **self._connect_kwargs).close()
            self._pool.open(wait=True, timeout=10.0)
        except (psycopg.OperationalError, psycopg_pool.PoolTimeout) as exc:
            self._pool.close()
            raise BrokerUnavailable(
                f"cannot connect to PostgreSQL at {settings.server}: {str(exc).strip()}"
            ) from None

    def _tcp(self, bound: float) -> dict[str, Any]:
        return {k: v for k, v in tcp_params(bound).items() if k not in self._own_tcp}

    def _configure(self, conn: Any) -> None:
        """A new pool connection: generic plans, and the server-side bounds of the call
        bound, in one round trip.

        Plan the broker's statements once per connection, not at every execution:
        re-planning the claim costs the server more than running it, and PostgreSQL keeps
        choosing custom plans for it (its LIMIT and queue list are parameters). Every hot
        statement's generic plan reads the same index as its custom one; the operator
        queries whose best index depends on a parameter opt out (``custom_plans``). A
        generic plan cannot know that a claim's LIMIT is small, so its cost estimate is
        large: JIT compilation, which would then start, is off for these connections
        (every statement here touches a handful of rows)."""
        mark_ours(conn)
        bound = self.call_timeout
        conn.execute(
            "SET plan_cache_mode = force_generic_plan; SET jit = off; " + session_settings(bound)
        )
        self._tuned[conn] = bound

    def expect_lease(self, lease: float) -> None:
        """A claim or heartbeat names its lease: calls give up by a third of the shortest
        (unless the URL sets call_timeout). Connections made from now on get TCP settings
        to match; pooled ones get the server-side bounds at their next checkout."""
        if self.settings.call_timeout is not None:
            return
        bound = bound_for_lease(lease)
        if bound < self.call_timeout:
            self.call_timeout = bound
            self._connect_kwargs.update(self._tcp(bound))

    def _checkout(self, deadline: float) -> tuple[Any, Ticket]:
        """A live pooled connection, watched until ``deadline``. Connections found dead
        (closed by the server while idle, or failing the one statement that brings them up
        to date) are dropped and the next one taken, as long as the deadline allows:
        nothing of the caller's had been sent on them, so this is safe for any call."""
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BrokerUnavailable(
                    f"PostgreSQL unavailable ({self.settings.server}): no connection within "
                    f"{self.call_timeout:g} s (call_timeout); nothing was sent"
                )
            try:
                conn = self._pool.getconn(timeout=min(left, CHECKOUT_SLICE))
            except psycopg_pool.PoolTimeout:
                continue  # asking again makes a pool that gave up reconnecting try afresh
            if found_dead(conn):
                self._drop(conn)
                continue
            ticket = WATCHDOG.watch(conn, deadline)
            bound = self.call_timeout
            if self._tuned.get(conn) == bound:
                return conn, ticket
            try:
                conn.execute(session_settings(bound))
                self._tuned[conn] = bound
                return conn, ticket
            except psycopg.OperationalError as exc:
                fired = WATCHDOG.release(ticket)
                if not (fired or conn.broken):
                    self._pool.putconn(conn)
                    raise self.unavailable(exc) from None
                self._drop(conn)

    def _drop(self, conn: Any) -> None:
        """Close a connection and give it back: the pool replaces it in the background."""
        conn.close()
        self._pool.putconn(conn)

    @contextlib.contextmanager
    def single(self) -> Iterator[Any]:
        """A pooled autocommit connection: each statement is its own transaction. The
        whole call, checkout included, ends by its deadline."""
        deadline = time.monotonic() + self.call_timeout
        conn, ticket = self._checkout(deadline)
        fired = False
        try:
            try:
                yield conn
            finally:
                fired = WATCHDOG.release(ticket)
        except psycopg.OperationalError as exc:
            raise self._failed(exc, conn, fired) from None
        except psycopg.errors.InsufficientPrivilege as exc:
            raise self.privilege(exc) from None
        finally:
            self._pool.putconn(conn)

    def privilege(self, exc: Exception) -> ConfigError:
        return ConfigError(
            f"PostgreSQL role lacks a privilege on schema {self.settings.schema!r}: "
            f"{str(exc).strip()} (see docs/postgresql.md, roles and privileges)"
        )

    @property
    def connect_kwargs(self) -> dict[str, Any]:
        """libpq's connect arguments, the dict itself (``expect_lease`` updates it)."""
        return self._connect_kwargs

    def failed(self, exc: Exception, conn: Any, fired: bool) -> BrokerUnavailable:
        """``_failed`` for the asyncio side (``aconnections``), whose connections it reads
        the same way."""
        return self._failed(exc, conn, fired)

    def _failed(self, exc: Exception, conn: Any, fired: bool) -> BrokerUnavailable:
        """The error of a call that failed on its connection. Lost (broken or cut): what
        was sent may have landed. Otherwise the server answered with an error, so the
        statement failed and its transaction did not commit."""
        if fired:
            return ConnectionLost(
                f"PostgreSQL at {self.settings.server} did not answer within "
                f"{self.call_timeout:g} s (call_timeout): connection abandoned"
            )
        if conn.broken:
            return ConnectionLost(
                f"PostgreSQL unavailable ({self.settings.server}): {one_line(exc)}"
            )
        if isinstance(exc, psycopg.errors.QueryCanceled):
            return BrokerUnavailable(
                f"PostgreSQL at {self.settings.server} cancelled a statement at its "
                f"statement_timeout (call_timeout {self.call_timeout:g} s): {one_line(exc)}"
            )
        return self.unavailable(exc)

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Any]:
        """A pooled connection in one transaction; storage errors become BrokerUnavailable."""
        with self.single() as conn, conn.transaction():
            yield conn

    @contextlib.contextmanager
    def unbounded(self) -> Iterator[Any]:
        """A pooled connection in one transaction with no deadline and no statement timeout:
        migrations (DDL on a large table may take its time, and waits for other migrators)."""
        try:
            with self._pool.connection() as conn, conn.transaction():
                conn.execute("SET LOCAL statement_timeout = 0")
                yield conn
        except (psycopg.OperationalError, psycopg_pool.PoolTimeout) as exc:
            raise self.unavailable(exc) from None

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
        own errors pass through unchanged. The body (the task) may take as long as it
        takes; the commit or rollback after it is bounded like any broker call."""
        with contextlib.ExitStack() as stack:
            try:
                conn = stack.enter_context(self._tasks_pool().connection())
            except (psycopg.OperationalError, psycopg_pool.PoolTimeout) as exc:
                raise self.unavailable(exc) from None
            ticket = None
            try:
                with conn.transaction():
                    try:
                        yield conn
                    finally:
                        ticket = WATCHDOG.watch(conn, time.monotonic() + self.call_timeout)
            finally:
                if ticket is not None:
                    WATCHDOG.release(ticket)

    @contextlib.contextmanager
    def bounded(self, conn: Any) -> Iterator[None]:
        """Bound one call on a connection of the task pool (a transactional task's ack)."""
        ticket = WATCHDOG.watch(conn, time.monotonic() + self.call_timeout)
        try:
            yield
        finally:
            WATCHDOG.release(ticket)

    def _tasks_pool(self) -> Any:
        with self._task_pool_lock:
            if self._task_pool is None:
                self._task_pool = psycopg_pool.ConnectionPool(
                    self.settings.dsn,
                    min_size=0,
                    max_size=TASK_POOL_MAX,
                    open=True,
                    max_idle=60.0,
                    kwargs={**self._connect_kwargs, "autocommit": False},
                    timeout=30.0,
                    reconnect_timeout=RECONNECT_CAP,
                    configure=mark_ours,
                    name=f"sluicegate-{self.settings.schema}-tasks",
                )
            return self._task_pool

    def unavailable(self, exc: Exception) -> BrokerUnavailable:
        return BrokerUnavailable(
            f"PostgreSQL unavailable ({self.settings.server}): {one_line(exc)}"
        )

    def close(self) -> None:
        self._pool.close()
        with self._task_pool_lock:
            if self._task_pool is not None:
                self._task_pool.close()


def one_line(exc: Exception) -> str:
    """libpq's message on one line (it spreads "server closed the connection" over three)."""
    return " ".join(str(exc).split())


def conninfo_keys(dsn: str) -> list[str]:
    """The libpq parameters a DSN sets itself."""
    from psycopg.conninfo import conninfo_to_dict

    return list(conninfo_to_dict(dsn))
