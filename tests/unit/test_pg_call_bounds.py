"""The PostgreSQL broker's call bounds, its watchdog, its dead-connection check and its
quiet pool logs, without a server (sockets stand in for connections)."""

from __future__ import annotations

import logging
import socket
import time
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from sluicegate import ConfigError
from sluicegate.brokers.postgres import QuietPoolTrouble
from sluicegate.brokers.postgres.deadlines import (
    Watchdog,
    bound_for_lease,
    found_dead,
    session_settings,
    tcp_params,
)
from sluicegate.brokers.postgres.url import Settings
from support.waiting import wait_for


@pytest.mark.parametrize(
    ("lease", "bound"), [(30.0, 10.0), (12.0, 4.0), (3.0, 1.0), (1.5, 1.0), (300.0, 10.0)]
)
def test_the_bound_is_a_third_of_the_lease_between_1_and_10_s(lease: float, bound: float) -> None:
    assert bound_for_lease(lease) == bound


def test_what_a_bound_sets() -> None:
    assert tcp_params(10.0) == {
        "keepalives": 1,
        "keepalives_idle": 5,
        "keepalives_interval": 2,
        "keepalives_count": 3,
        "tcp_user_timeout": 10_000,
    }
    assert tcp_params(1.0)["keepalives_idle"] == 1 and tcp_params(1.0)["tcp_user_timeout"] == 1000
    assert session_settings(2.0) == (
        "SET statement_timeout = 1500; SET idle_in_transaction_session_timeout = 4000"
    )


def test_call_timeout_in_the_url() -> None:
    base = "postgresql://u@h/db"
    assert Settings.from_url(base).call_timeout is None  # automatic
    assert Settings.from_url(f"{base}?call_timeout=2.5").call_timeout == 2.5
    assert "call_timeout" not in Settings.from_url(f"{base}?call_timeout=2.5").dsn
    for bad in ("0", "-1", "soon"):
        with pytest.raises(ConfigError, match="call_timeout"):
            Settings.from_url(f"{base}?call_timeout={bad}")


# ---- sockets standing in for connections ----------------------------------------------
@dataclass
class FakePgConn:
    socket: int


class FakeConn:
    def __init__(self, sock: socket.socket) -> None:
        self.pgconn = FakePgConn(sock.fileno())
        self.closed = False


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    ours, theirs = socket.socketpair()
    yield ours, theirs
    ours.close()
    theirs.close()


def test_a_call_past_its_deadline_is_cut(pair: tuple[socket.socket, socket.socket]) -> None:
    ours, _theirs = pair
    watchdog = Watchdog()
    started = time.monotonic()
    ticket = watchdog.watch(FakeConn(ours), started + 0.2)
    ours.settimeout(5)
    assert ours.recv(10) == b""  # the blocked read ends: the socket was shut down
    took = time.monotonic() - started
    assert 0.15 <= took < 2.0, took
    assert watchdog.release(ticket) is True
    assert watchdog.cuts == 1


def test_a_call_that_ended_in_time_is_left_alone(pair: tuple[socket.socket, socket.socket]) -> None:
    ours, theirs = pair
    watchdog = Watchdog()
    early = watchdog.watch(FakeConn(ours), time.monotonic() + 0.1)
    assert watchdog.release(early) is False
    later = watchdog.watch(FakeConn(ours), time.monotonic() + 30)  # an earlier one wakes it
    # An absence: the watchdog sleeps towards the later deadline, so it has dealt with the
    # early one (released: dropped, not cut).
    wait_for(lambda: watchdog.sleeping_until == later.deadline, what="the watchdog to move on")
    theirs.sendall(b"x")
    ours.settimeout(5)
    assert ours.recv(10) == b"x"
    assert watchdog.release(later) is False
    assert watchdog.cuts == 0


def test_found_dead(pair: tuple[socket.socket, socket.socket]) -> None:
    ours, theirs = pair
    conn = FakeConn(ours)
    assert not found_dead(conn)  # idle, nothing to read: alive as far as anyone can tell
    theirs.sendall(b"E")  # the server's FATAL message
    assert found_dead(conn)
    ours.recv(10)
    assert not found_dead(conn)
    theirs.close()  # end of stream
    assert found_dead(conn)
    conn.closed = True
    assert found_dead(conn)


# ---- quiet pool logs ---------------------------------------------------------------------
class Pool:
    def __init__(self, name: str) -> None:
        self.name = name


class Conn:
    def __init__(self, pool: Pool | None) -> None:
        self._pool = pool


class Task:
    def __init__(self, pool: Pool) -> None:
        self.pool = weakref.ref(pool)


class Pipeline:
    def __init__(self, conn: Conn) -> None:
        self._conn = conn


def record(level: int, msg: str, *args: Any) -> logging.LogRecord:
    return logging.LogRecord("psycopg.pool", level, __file__, 1, msg, args, None)


def test_pool_warnings_about_our_pools_go_down_to_debug() -> None:
    quiet = QuietPoolTrouble()
    ours, theirs = Pool("sluicegate-jobs"), Pool("app-pool")
    ours_too = [
        record(logging.WARNING, "error connecting in %r: %s", ours.name, "refused"),
        record(logging.WARNING, "discarding closed connection: %s", Conn(ours)),
        record(logging.WARNING, "rolling back returned connection: %s", Conn(ours)),
        record(logging.WARNING, "task run %s failed: %s: %s", Task(ours), "X", "boom"),
        record(logging.WARNING, "reconnection attempt in pool %r failed", ours.name),
        record(logging.WARNING, "error ignored terminating %r: %s", Pipeline(Conn(ours)), "lost"),
    ]
    for rec in ours_too:
        assert quiet.filter(rec) is False, rec.msg  # DEBUG is off for psycopg.pool here
        assert rec.levelno == logging.DEBUG and rec.levelname == "DEBUG"
    not_ours = [
        record(logging.WARNING, "error connecting in %r: %s", theirs.name, "refused"),
        record(logging.WARNING, "discarding closed connection: %s", Conn(theirs)),
        record(logging.WARNING, "error ignored terminating %r: %s", Pipeline(Conn(theirs)), "x"),
        record(logging.WARNING, "something else"),
        record(logging.ERROR, "error connecting in %r: %s", ours.name, "refused"),
    ]
    for rec in not_ours:
        level = rec.levelno
        assert quiet.filter(rec) is True and rec.levelno == level


def test_a_connection_our_pool_closed_before_warning_is_still_ours() -> None:
    """psycopg_pool closes a connection returned mid-operation, which clears its
    ``_pool``, and only then warns "discarding closed connection": the connection is known
    as ours by the pool's configure hook, not by ``_pool`` alone."""
    from sluicegate.brokers.postgres.connections import mark_ours

    quiet = QuietPoolTrouble()
    closed, stranger = Conn(None), Conn(None)
    mark_ours(closed)
    rec = record(logging.WARNING, "discarding closed connection: %s", closed)
    assert quiet.filter(rec) is False and rec.levelname == "DEBUG"
    rec = record(logging.WARNING, "discarding closed connection: %s", stranger)
    assert quiet.filter(rec) is True and rec.levelname == "WARNING"


def test_demoted_records_still_show_at_debug() -> None:
    logger = logging.getLogger("psycopg.pool")
    old = logger.level
    logger.setLevel(logging.DEBUG)
    try:
        rec = record(logging.WARNING, "error connecting in %r: %s", "sluicegate-x", "refused")
        assert QuietPoolTrouble().filter(rec) is True and rec.levelname == "DEBUG"
    finally:
        logger.setLevel(old)


def test_a_closed_connection_gets_a_ticket_that_never_fires() -> None:
    class Lost:
        @property
        def socket(self) -> int:
            raise OSError("the connection is lost")

    class LostConn:
        pgconn = Lost()

    watchdog = Watchdog()
    ticket = watchdog.watch(LostConn(), time.monotonic())
    # An absence: its deadline is now, yet the ticket is born inactive, so no pass of the
    # watchdog can ever cut it.
    assert ticket.active is False
    assert watchdog.release(ticket) is False and watchdog.cuts == 0


def test_every_psycopg_logger_that_warns_about_a_broken_connection_is_quieted() -> None:
    from sluicegate.brokers.postgres.connections import quiet_pool_logs

    quiet_pool_logs()
    for name in ("psycopg", "psycopg.pool", "psycopg.transaction"):
        filters = logging.getLogger(name).filters
        assert any(isinstance(f, QuietPoolTrouble) for f in filters), name
