"""Deadlines on PostgreSQL broker calls, and connections the server closed while idle.

A connection that stops answering keeps TCP open and forwards nothing (a black-holed
route, a middlebox that lost its state): the loopback proxy's black-hole mode (tests/apps/
tcpproxy.py), where the kernel still acknowledges every byte, so only sluicegate's own
deadline can end the call. Every call must give up within its bound (a third of the
lease for a worker, ``call_timeout`` for a producer), with a documented error; a worker
keeps its loop turning, reconnects once the path is back, and the leases it lost
meanwhile are fenced. A pooled connection the server closed while idle (a restart,
``pg_terminate_backend``) is replaced before anything is sent on it: the next call
succeeds the first time.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest
from tcpproxy import TcpProxy

from sluicegate import App, BrokerUnavailable, EnqueueFateUnknown, JobState
from sluicegate.brokers import Broker
from sluicegate.brokers.postgres.deadlines import bound_for_lease
from sluicegate.worker import PoolSpec, Worker
from support.brokers import connect, only_postgresql, rewrite, schema_of
from support.fleet import wait_for

pytestmark = only_postgresql

SLACK = 0.75  # scheduling noise on a shared machine, on top of a bound
PRODUCER_BOUND = 1.0  # the producers' call_timeout here
APP_NAME = "sg-deadlines"  # the application_name of connections under test


@pytest.fixture
def proxy(db_url: str) -> Iterator[TcpProxy]:
    parts = urlsplit(db_url)
    proxy = TcpProxy(parts.hostname or "127.0.0.1", parts.port or 5432)
    yield proxy
    proxy.close()


def through(db_url: str, proxy: TcpProxy, **options: str) -> str:
    return rewrite(db_url, port=proxy.port, application_name=APP_NAME, **options)


def timed(call: Callable[[], Any]) -> tuple[float, BaseException | None]:
    started = time.monotonic()
    try:
        call()
    except BaseException as exc:
        return time.monotonic() - started, exc
    return time.monotonic() - started, None


# ---- producers ---------------------------------------------------------------------------
def test_a_producer_never_hangs_on_a_black_hole(db_url: str, proxy: TcpProxy) -> None:
    """Enqueue gives up within call_timeout, with the error that says what happened: fate
    unknown when its write went out unanswered, not stored when nothing could be sent."""
    app = App(broker=through(db_url, proxy, call_timeout=str(PRODUCER_BOUND)))
    try:
        app.enqueue("t", args=[0])  # the pool holds a live connection now
        assert proxy.blackhole(new_connections=True) >= 1

        # The pooled connection looks fine, so the insert goes out, and no answer comes.
        took, exc = timed(lambda: app.enqueue("t", args=[1]))
        assert isinstance(exc, EnqueueFateUnknown), exc
        assert exc.unique_keys == (None,) and not exc.retry_is_safe
        assert "may store it twice" in str(exc) and "did not answer within 1 s" in str(exc)
        assert took <= PRODUCER_BOUND + SLACK, took

        # That connection is gone; a new one cannot be made: nothing was sent at all.
        for unique_key in (None, "k-1"):
            took, exc = timed(lambda key=unique_key: app.enqueue("t", args=[2], unique_key=key))  # type: ignore[misc]
            assert type(exc) is BrokerUnavailable, exc
            assert "nothing was sent" in str(exc)
            assert took <= PRODUCER_BOUND + SLACK, took
        print(f"black-holed enqueue gave up after {took:.2f} s (call_timeout 1 s)")

        proxy.restore()
        # The late insert reaches the server once the path is back: the job of unknown
        # fate was stored after all (its connection's close arrives behind it).
        wait_for(lambda: len(app.broker.list_jobs()) == 2, timeout=10, what="the late insert")
        stored = wait_for(lambda: _enqueue_or_none(app), timeout=15, what="enqueue after")
        assert app.get_job(stored.id).state is JobState.READY
    finally:
        proxy.restore()
        app.close()


def _enqueue_or_none(app: App) -> Any:
    try:
        return app.enqueue("t", args=[3])
    except BrokerUnavailable:
        return None


def test_a_commit_whose_answer_never_comes_names_the_unique_key(
    db_url: str, proxy: TcpProxy
) -> None:
    """The server commits, and its answer never arrives: EnqueueFateUnknown names the job's
    unique key, and enqueueing again with it is safe (the same job, stored once)."""
    app = App(broker=through(db_url, proxy, call_timeout=str(PRODUCER_BOUND)))
    try:
        app.enqueue("t", args=[0])
        proxy.fail_commits(["silent"], b"order-7")
        took, exc = timed(lambda: app.enqueue("t", args=[7], unique_key="order-7"))
        assert isinstance(exc, EnqueueFateUnknown), exc
        assert exc.unique_keys == ("order-7",) and exc.retry_is_safe
        assert "unique key 'order-7'" in str(exc)
        assert took <= PRODUCER_BOUND + SLACK, took
        again = app.enqueue("t", args=[7], unique_key="order-7")  # a fresh connection
        assert [j.id for j in app.broker.list_jobs() if j.unique_key == "order-7"] == [again.id]
    finally:
        proxy.restore()
        app.close()


def test_a_statement_that_waits_too_long_is_cancelled_by_the_server(db_url: str) -> None:
    """A statement waiting on a row lock is cancelled by the server at its
    statement_timeout (3/4 of call_timeout): a plain BrokerUnavailable (the statement
    failed, nothing changed), and the connection stays in the pool, usable."""
    app = App(broker=rewrite(db_url, application_name=APP_NAME, call_timeout="1"))
    try:
        job = app.enqueue("t", args=[])
        with connect(db_url) as other, other.transaction():
            other.execute(
                f"SELECT 1 FROM {schema_of(db_url)}.jobs WHERE id = %s FOR UPDATE",
                (job.id,),
            )
            took, exc = timed(lambda: app.broker.cancel(job.id))
        assert type(exc) is BrokerUnavailable, exc
        assert "statement_timeout" in str(exc), exc
        assert 0.7 <= took <= 1.0 + SLACK, took
        assert app.get_job(job.id).state is JobState.READY
        with connect(db_url) as conn:
            backends = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (APP_NAME,)
            ).fetchone()[0]
        assert backends == 1, backends  # the same connection, not a new one
        assert app.broker.cancel(job.id).state is JobState.CANCELLED
    finally:
        app.close()


def test_first_enqueue_after_the_server_ended_every_pooled_connection(db_url: str) -> None:
    """pg_terminate_backend of every pooled connection (what a restart or a failover does
    to them): the next enqueue succeeds the first time, and so does every one after it."""
    app = App(broker=rewrite(db_url, application_name=APP_NAME))
    try:
        # Grow the pool: concurrent enqueues each take a connection.
        threads = [
            threading.Thread(target=lambda: [app.enqueue("t", args=[i]) for i in range(20)])
            for _ in range(4)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        with connect(db_url) as conn:
            killed = conn.execute(
                "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid, 5000)) "
                "FROM pg_stat_activity WHERE application_name = %s",
                (APP_NAME,),
            ).fetchone()[0]
        assert killed >= 2, killed
        for i in range(10):
            app.enqueue("t", args=[100 + i])  # no BrokerUnavailable, not even the first
        broker: Broker = app.broker
        assert broker.claim(["default"], 1, 5.0, "w")  # a worker's call too
    finally:
        app.close()


# ---- workers -----------------------------------------------------------------------------
class Timed:
    """A broker whose every call is timed: (verb, seconds, error type name or None)."""

    def __init__(self, broker: Broker) -> None:
        self._broker = broker
        self.calls: list[tuple[str, float, float, str | None]] = []
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._broker, name)
        if name.startswith("_") or not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            started = time.monotonic()
            error = None
            try:
                return attr(*args, **kwargs)
            except BaseException as exc:
                error = type(exc).__name__
                raise
            finally:
                with self._lock:
                    self.calls.append((name, started, time.monotonic() - started, error))

        return call

    def since(self, moment: float) -> list[tuple[str, float, float, str | None]]:
        with self._lock:
            return [c for c in self.calls if c[1] + c[2] >= moment]


LEASE = 3.0
HOLD = 1.0  # each job's run time


def test_a_worker_on_a_black_hole_gives_up_in_time_and_its_lost_leases_are_fenced(
    db_url: str, proxy: TcpProxy, producer: App, caplog: pytest.LogCaptureFixture
) -> None:
    """Worker A's path to the server goes silent while it runs four jobs; new connections
    too. Each of its broker calls gives up within a third of its lease, so its loop keeps
    turning. Its leases expire meanwhile: worker B recovers the jobs and runs them. When
    the path is back, A reconnects and its late outcomes are refused (fenced): every job
    ends with B's run."""
    caplog.set_level(logging.INFO, logger="sluicegate")
    bound = bound_for_lease(LEASE)

    def make(url: str) -> App:
        app = App(broker=url)

        @app.task(queue="bh", name="hold", max_attempts=5)
        def hold() -> str:
            time.sleep(HOLD)
            return threading.current_thread().name

        return app

    app_a = make(through(db_url, proxy))
    app_b = make(db_url)
    broker_a = Timed(app_a.broker)
    worker_a = Worker(app_a, [PoolSpec("bh", ("bh",), 4)], broker=broker_a, lease=LEASE)  # type: ignore[arg-type]
    worker_b = Worker(app_b, [PoolSpec("bh", ("bh",), 4)], lease=LEASE)
    threads = [threading.Thread(target=w.run, daemon=True) for w in (worker_a, worker_b)]
    jobs = [producer.enqueue("hold", queue="bh", max_attempts=5) for _ in range(4)]
    try:
        threads[0].start()
        wait_for(
            lambda: all(producer.get_job(j.id).state is JobState.RUNNING for j in jobs),
            timeout=15,
            what="A running the four jobs",
        )
        down_at = time.monotonic()
        proxy.blackhole(new_connections=True)
        threads[1].start()  # B: straight to the server

        def taken_over() -> bool:
            return all(producer.get_job(j.id).state is JobState.SUCCEEDED for j in jobs)

        wait_for(taken_over, timeout=LEASE * 4 + 10, what="B to run the jobs A lost")
        # A is still cut off: it has given up on every call in time, and kept trying.
        during = broker_a.since(down_at)
        failed = [c for c in during if c[3] is not None]
        assert failed, during
        assert {c[3] for c in failed} <= {"BrokerUnavailable", "ConnectionLost"}, failed
        slowest = max(c[2] for c in during)
        assert slowest <= bound + SLACK, (bound, sorted(during, key=lambda c: -c[2])[:3])
        assert worker_a.counters.succeeded == 0, "counted as done while cut off"
        print(
            f"black-holed worker: {len(failed)} calls failed, the slowest call took "
            f"{slowest:.2f} s (bound {bound:g} s = lease/3)"
        )

        proxy.restore()
        up_at = time.monotonic()
        wait_for(
            lambda: worker_a.counters.lease_lost >= len(jobs),
            timeout=20,
            what=lambda: f"A's late outcomes refused ({worker_a.counters})\n{caplog.text}",
        )
        print(
            f"A fenced {worker_a.counters.lease_lost} lost leases, {time.monotonic() - up_at:.1f} s after the path came back"
        )
        assert "broker reachable again" in caplog.text
        # A works again: a new job is run by whichever worker claims it.
        extra = producer.enqueue("hold", queue="bh")
        wait_for(
            lambda: producer.get_job(extra.id).state is JobState.SUCCEEDED,
            timeout=15,
            what="a job after the outage",
        )
    finally:
        proxy.restore()
        for worker in (worker_a, worker_b):
            worker.stop(immediate=True)
        for thread in threads:
            if thread.is_alive():
                thread.join(15)
        app_a.close()
        app_b.close()
    for job in jobs:
        done = producer.get_job(job.id)
        assert done.state is JobState.SUCCEEDED and done.attempts == 2, done
        assert done.worker_id == worker_b.worker_id, done
