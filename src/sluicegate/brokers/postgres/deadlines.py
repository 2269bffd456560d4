"""How long one broker call may take, and what enforces it.

A connection that stops answering (a black-holed route, a middlebox that lost its state, a
server that froze) must not hang the caller: a worker's loop does all its broker I/O on
one thread, and a hung call stops its heartbeats. Each call gets a deadline,
``call_timeout`` (a URL option; by default a third of the shortest lease the broker has
seen, between 1 and 10 s, and 10 s in a process that claims nothing), enforced three
ways:

- the server cancels a statement at 3/4 of it (``statement_timeout``: the connection
  survives, and the statement is known not to have committed), and ends a session of
  ours whose transaction sits idle for twice as long
  (``idle_in_transaction_session_timeout``: the row locks of a client that went away are
  freed);
- the kernel gives up on a connection whose sent data stays unacknowledged that long
  (``tcp_user_timeout``), and keepalives find an idle connection's peer gone;
- the ``Watchdog`` shuts down the socket of a call still running at its deadline, so the
  call fails at once whatever the network does (the kernel cannot tell a silent path
  from a slow one while the bytes are acknowledged, say by a proxy).

``found_dead`` tells, without a round trip, whether a pooled connection was closed by
the server while it sat idle (a restart, ``pg_terminate_backend``, a failover): such a
connection is replaced before anything is sent on it.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import os
import select
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any

DEFAULT_CALL_TIMEOUT = 10.0  # a process that claims nothing (a producer, the CLI)
MIN_CALL_TIMEOUT = 1.0  # the shortest automatic bound, whatever the lease
STATEMENT_SHARE = 0.75  # statement_timeout, as a share of the call's bound
IDLE_IN_TRANSACTION_FACTOR = 2.0  # idle_in_transaction_session_timeout, in call bounds


def bound_for_lease(lease: float) -> float:
    """The automatic call bound of a worker holding leases of ``lease`` seconds: its
    heartbeats run every lease/3, so a call that gives up by then lets the next one renew
    the leases in time."""
    return min(DEFAULT_CALL_TIMEOUT, max(MIN_CALL_TIMEOUT, lease / 3))


def tcp_params(bound: float) -> dict[str, Any]:
    """libpq's TCP settings for a call bound: unacknowledged data fails the connection
    after ``bound``; an idle connection's keepalives find a dead peer in about as long."""
    return {
        "keepalives": 1,
        "keepalives_idle": max(1, round(bound / 2)),
        "keepalives_interval": max(1, round(bound / 6)),
        "keepalives_count": 3,
        "tcp_user_timeout": int(bound * 1000),
    }


def session_settings(bound: float) -> str:
    """The server-side half, one simple-protocol round trip (its values are numbers)."""
    statement = max(1, int(bound * STATEMENT_SHARE * 1000))
    idle = max(1, int(bound * IDLE_IN_TRANSACTION_FACTOR * 1000))
    return f"SET statement_timeout = {statement}; SET idle_in_transaction_session_timeout = {idle}"


def found_dead(conn: Any) -> bool:
    """Whether an idle pooled connection is certainly unusable, without a round trip.

    The server writes to an idle session only to end it: a restart, a failover or
    ``pg_terminate_backend`` sends a FATAL message and closes the socket, and a TCP error
    also makes it readable. So anything to read means dead (at worst a rare harmless
    message costs one reconnect), and nothing has been sent on it yet."""
    if conn.closed:
        return True
    try:
        fd = conn.pgconn.socket
    except Exception:  # psycopg raises OperationalError for a connection without socket
        return True
    if hasattr(select, "poll"):
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        return bool(poller.poll(0))
    return bool(select.select([fd], [], [], 0)[0])  # pragma: no cover - Windows


@dataclass(eq=False, slots=True)
class Ticket:
    """One call's watch: ``fired`` once the watchdog cut its connection."""

    fd: int
    deadline: float
    active: bool = True
    fired: bool = False


class Watchdog:
    """Ends calls that outlive their deadline: one thread per process, started on first
    use, asleep until the earliest deadline. Cutting a call shuts its socket down (both
    directions), which wakes the caller blocked on it with a connection error; the caller
    still holds the connection (it releases its ticket before giving it back), so the
    descriptor cannot have been reused meanwhile."""

    def __init__(self) -> None:
        self._reset()
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=self._reset)

    def _reset(self) -> None:
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._heap: list[tuple[float, int, Ticket]] = []
        self._order = itertools.count()
        self._sleeping_until = float("inf")
        self._thread: threading.Thread | None = None
        self.cuts = 0  # calls cut, ever (for tests and curious operators)

    def watch(self, conn: Any, deadline: float) -> Ticket:
        """Cut ``conn``'s socket at ``deadline`` unless released first. A connection that
        is already closed gets a ticket that never fires (its next use fails anyway)."""
        try:
            ticket = Ticket(conn.pgconn.socket, deadline)
        except Exception:  # psycopg: OperationalError, the connection is lost
            return Ticket(-1, deadline, active=False)
        with self._lock:
            heap = self._heap
            while heap and not heap[0][2].active:  # calls over: keep the heap small
                heapq.heappop(heap)
            heapq.heappush(heap, (deadline, next(self._order), ticket))
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="sluicegate-pg-watchdog", daemon=True
                )
                self._thread.start()
            elif deadline < self._sleeping_until:
                self._changed.notify()
        return ticket

    @property
    def sleeping_until(self) -> float:
        """The deadline the watchdog thread sleeps until (monotonic s; inf: none, or not
        started). Read under its lock, so never mid-pass: once it is a later ticket's
        deadline, every earlier ticket has been dealt with (cut, or released and dropped).
        For tests and operators; nothing in the broker reads it."""
        with self._lock:
            return self._sleeping_until

    def release(self, ticket: Ticket) -> bool:
        """The call is over; True if the watchdog cut it."""
        with self._lock:
            ticket.active = False
            return ticket.fired

    def _run(self) -> None:
        heap = self._heap
        with self._lock:
            while True:
                now = time.monotonic()
                while heap and (not heap[0][2].active or heap[0][0] <= now):
                    _, _, ticket = heapq.heappop(heap)
                    if ticket.active:
                        ticket.active, ticket.fired = False, True
                        self.cuts += 1
                        _shut_down(ticket.fd)
                self._sleeping_until = heap[0][0] if heap else float("inf")
                self._changed.wait(None if not heap else self._sleeping_until - now)


def _shut_down(fd: int) -> None:
    """Shut a socket down in both directions, through a duplicate of its descriptor (the
    owner's descriptor stays open: its owner closes it)."""
    try:
        dup = os.dup(fd)
    except OSError:
        return
    try:
        sock = socket.socket(fileno=dup)
    except OSError:
        os.close(dup)
        return
    with sock, contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


WATCHDOG = Watchdog()
