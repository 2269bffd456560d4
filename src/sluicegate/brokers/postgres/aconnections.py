"""The PostgreSQL broker's asyncio side: an ``AsyncConnectionPool`` for producers that run
in an event loop (``enqueue_async``, ``get_job_async``), so a request handler enqueues
on the loop's own thread, without a hop to a worker thread.

It keeps the sync side's rules (``connections``): the same connect keyword arguments
(connect timeout, TCP settings), the same server-side bounds (``statement_timeout``,
``idle_in_transaction_session_timeout``) and the same call bound, enforced by the same watchdog (it shuts the socket down at the
deadline, which wakes the awaiting call with a connection error; cancelling the await
instead would make psycopg try to cancel the query on the server, over the very path
that stopped answering, and wait for that); a pooled connection found dead at
checkout is replaced before anything is sent on it; errors become the same
``BrokerUnavailable``, ``ConnectionLost`` or ``ConfigError``.

The pool is opened by the first call, in the running loop, and belongs to that loop
(asyncio objects cannot cross loops). A call from another loop while it is open raises
ConfigError; once its loop is closed, the next loop gets a fresh pool. ``aclose``
closes it in its loop; ``close`` (the broker's sync close) does what it can from where
it is called.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import weakref
from collections.abc import AsyncIterator
from typing import Any

from ...errors import BrokerUnavailable, ConfigError
from .connections import (
    CHECKOUT_SLICE,
    RECONNECT_CAP,
    Connections,
    mark_ours,
    psycopg,
    psycopg_pool,
)
from .deadlines import WATCHDOG, found_dead, session_settings

OPEN_TIMEOUT = 10.0  # s: the first connection, as the sync pool waits for its own
CLOSE_WAIT = 10.0  # s: the most a sync close waits for the pool's loop to close it


class AsyncConnections:
    """The async pool beside the sync ``Connections`` (whose settings, call bound and error
    translation it shares)."""

    def __init__(self, sync: Connections) -> None:
        self._sync = sync
        self._lock = threading.Lock()  # loops of other threads may ask at once
        self._pool: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._opening: asyncio.Task[Any] | None = None
        self._tuned: weakref.WeakKeyDictionary[Any, float] = weakref.WeakKeyDictionary()
        self._closing: set[asyncio.Task[Any]] = set()  # closes scheduled from inside the loop

    # ---- the pool, bound to one loop ---------------------------------------------------
    async def pool(self) -> Any:
        loop = asyncio.get_running_loop()
        with self._lock:
            if self._pool is not None and self._loop is not loop:
                if self._loop is not None and not self._loop.is_closed():
                    raise ConfigError(
                        "the broker's asyncio pool was opened in another event loop, which "
                        "is still open; await app.aclose() in that loop before using the "
                        "app from this one"
                    )
                self._forget()  # its loop is gone: nothing of it can run any more
            if self._pool is None:
                self._pool = self._make_pool()
                self._loop = loop
                self._opening = loop.create_task(self._open(self._pool))
            opening = self._opening
        assert opening is not None
        return await asyncio.shield(opening)

    def _make_pool(self) -> Any:
        s = self._sync.settings
        return psycopg_pool.AsyncConnectionPool(
            s.dsn,
            min_size=1,
            max_size=s.pool_max,
            open=False,
            kwargs=self._sync.connect_kwargs,  # autocommit, connect timeout, TCP settings
            configure=self._configure,
            name=f"sluicegate-{s.schema}-async",
            timeout=self._sync.call_timeout,
            reconnect_timeout=RECONNECT_CAP,
        )

    async def _open(self, pool: Any) -> Any:
        try:
            await pool.open(wait=True, timeout=OPEN_TIMEOUT)
        except Exception as exc:
            with self._lock:
                if self._pool is pool:
                    self._pool, self._loop, self._opening = None, None, None
            await pool.close()
            raise BrokerUnavailable(
                f"cannot connect to PostgreSQL at {self._sync.settings.server}: "
                f"{str(exc).strip() or type(exc).__name__}"
            ) from None
        return pool

    async def _configure(self, conn: Any) -> None:
        """As the sync pool's connections: generic plans, no JIT, the call's bounds."""
        mark_ours(conn)
        bound = self._sync.call_timeout
        await conn.execute(
            "SET plan_cache_mode = force_generic_plan; SET jit = off; " + session_settings(bound)
        )
        self._tuned[conn] = bound

    # ---- calls ------------------------------------------------------------------------
    async def _checkout(self, pool: Any, deadline: float) -> Any:
        """A live pooled connection (see ``Connections._checkout``): dead ones are dropped
        before anything is sent on them, while the deadline allows."""
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BrokerUnavailable(
                    f"PostgreSQL unavailable ({self._sync.settings.server}): no connection "
                    f"within {self._sync.call_timeout:g} s (call_timeout); nothing was sent"
                )
            try:
                conn = await pool.getconn(timeout=min(left, CHECKOUT_SLICE))
            except psycopg_pool.PoolTimeout:
                continue
            if found_dead(conn):
                await self._drop(pool, conn)
                continue
            bound = self._sync.call_timeout
            if self._tuned.get(conn) == bound:
                return conn
            ticket = WATCHDOG.watch(conn, deadline)
            try:
                await conn.execute(session_settings(bound))
                self._tuned[conn] = bound
                return conn
            except psycopg.OperationalError as exc:
                fired = WATCHDOG.release(ticket)
                if not (fired or conn.broken):
                    await pool.putconn(conn)
                    raise self._sync.unavailable(exc) from None
                await self._drop(pool, conn)
            finally:
                WATCHDOG.release(ticket)

    async def _drop(self, pool: Any, conn: Any) -> None:
        self._tuned.pop(conn, None)
        await conn.close()
        await pool.putconn(conn)

    @contextlib.asynccontextmanager
    async def single(self) -> AsyncIterator[Any]:
        """A pooled autocommit connection; the whole call, checkout included, ends by its
        deadline. A call that failed or was cancelled midway leaves its connection in an
        unknown state: it is closed, never handed to the next caller."""
        pool = await self.pool()
        deadline = time.monotonic() + self._sync.call_timeout
        conn = await self._checkout(pool, deadline)
        ticket = WATCHDOG.watch(conn, deadline)
        fired, idle = False, False
        try:
            try:
                try:
                    yield conn
                    idle = True
                finally:
                    fired = WATCHDOG.release(ticket)
            except psycopg.OperationalError as exc:
                raise self._sync.failed(exc, conn, fired) from None
            except psycopg.errors.InsufficientPrivilege as exc:
                raise self._sync.privilege(exc) from None
        finally:
            if not idle and not conn.closed and _busy(conn):
                self._tuned.pop(conn, None)
                await conn.close()
            await pool.putconn(conn)

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[Any]:
        async with self.single() as conn, conn.transaction():
            yield conn

    # ---- closing ----------------------------------------------------------------------
    def _take(self) -> tuple[Any, asyncio.AbstractEventLoop | None]:
        with self._lock:
            pool, loop = self._pool, self._loop
            self._pool, self._loop, self._opening = None, None, None
            self._tuned.clear()
            return pool, loop

    def _forget(self) -> None:
        """Drop a pool whose loop is closed (lock held): its tasks can never run again."""
        self._pool, self._loop, self._opening = None, None, None
        self._tuned.clear()

    async def aclose(self) -> None:
        pool, loop = self._take()
        if pool is None or loop is None:
            return
        if loop is asyncio.get_running_loop():
            await pool.close()
        else:
            await asyncio.to_thread(_close_from_outside, pool, loop)

    def close(self) -> None:
        """From sync code: close the pool in its loop if that loop can still run it."""
        pool, loop = self._take()
        if pool is None or loop is None:
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:  # inside the loop itself: it cannot be waited for here
            task = loop.create_task(pool.close())
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)
            return
        _close_from_outside(pool, loop)


def _close_from_outside(pool: Any, loop: asyncio.AbstractEventLoop) -> None:
    if loop.is_closed():
        return
    if loop.is_running():  # in another thread
        asyncio.run_coroutine_threadsafe(pool.close(), loop).result(CLOSE_WAIT)
    else:
        loop.run_until_complete(pool.close())


def _busy(conn: Any) -> bool:
    """Whether the connection is anywhere but idle outside a transaction."""
    from psycopg import pq

    return bool(conn.pgconn.transaction_status != pq.TransactionStatus.IDLE)
