"""PostgreSQL's claim with a worker's turn record in the same statement
(``claim_and_record``): the starts and acks are fenced as ``record``'s are, an ack's
commit waits for the WAL flush, and what it cannot take is left to the two calls."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pytest

from sluicegate.errors import BrokerUnavailable
from sluicegate.job import Claim, ErrorInfo, JobState
from sluicegate.limits import encode_needs
from sluicegate.outcomes import Retried, Succeeded
from support.specs import spec

psycopg = pytest.importorskip("psycopg")

if TYPE_CHECKING:
    from conftest import FakeClock
    from sluicegate.brokers.postgres import PostgresBroker

S = JobState
LEASE = 30.0


@pytest.fixture
def pg(pg_url: str, clock: FakeClock) -> Iterator[PostgresBroker]:
    from sluicegate.brokers.postgres import PostgresBroker

    broker = PostgresBroker(pg_url, clock=clock)
    yield broker
    broker.close()


def claims(pg: PostgresBroker, n: int) -> list[Claim]:
    return [c.claim for c in pg.claim(["q"], n, LEASE, "w")]


def test_starts_and_acks_commit_with_the_claim(pg: PostgresBroker) -> None:
    pg.enqueue([spec(args=[i]) for i in range(5)])
    first, second = claims(pg, 2)
    got = pg.claim_and_record(["q"], 2, LEASE, "w", [second], [Succeeded(first, '"r"')])
    assert got is not None
    batch, lost = got
    assert lost == []
    assert [c.job.args for c in batch] == [[2], [3]]  # claim order, as claim's
    assert all(c.job.state is S.CLAIMED for c in batch)
    acked = pg.get_job(first.job_id)
    assert acked is not None and acked.state is S.SUCCEEDED and acked.result == "r"
    started = pg.get_job(second.job_id)
    assert started is not None and started.state is S.RUNNING
    # the new claims are fenced like any: their own acks land, through record too
    assert pg.record([], [Succeeded(c.claim, "null") for c in batch]) == []


def test_a_stale_token_is_lost_and_changes_nothing(pg: PostgresBroker) -> None:
    pg.enqueue([spec()])
    (held,) = claims(pg, 1)
    stale = Claim(held.job_id, held.token + 1)
    got = pg.claim_and_record(["q"], 1, LEASE, "w", [stale], [Succeeded(stale, "null")])
    assert got is not None
    batch, lost = got
    assert list(batch) == [] and lost == [stale]
    job = pg.get_job(held.job_id)
    assert job is not None and job.state is S.CLAIMED
    assert pg.record([], [Succeeded(held, "null")]) == []  # the holder's ack still lands


def test_failures_and_gated_queues_are_left_to_claim_and_record(pg: PostgresBroker) -> None:
    pg.enqueue([spec(), spec()])
    first, second = claims(pg, 2)
    retried = Retried(first, ErrorInfo("E", "boom", ""), 5.0)
    assert pg.claim_and_record(["q"], 1, LEASE, "w", [], [retried]) is None
    job = pg.get_job(first.job_id)
    assert job is not None and job.state is S.CLAIMED  # nothing was written
    pg.enqueue([spec(limits=encode_needs([("db", None, 1)]))])
    got = pg.claim_and_record(["q"], 1, LEASE, "w", [], [Succeeded(second, "null")])
    assert got is not None  # the plain claim met a gated job: it records, claims nothing ...
    batch, lost = got
    assert list(batch) == [] and batch.retry_in == 0.0 and lost == []  # ... and says so
    done = pg.get_job(second.job_id)
    assert done is not None and done.state is S.SUCCEEDED
    assert pg.claim_and_record(["q"], 1, LEASE, "w", [], [retried]) is None
    assert pg.claim_and_record(["q"], 1, LEASE, "w", [], [Succeeded(first, "null")]) is None


def test_a_claim_that_promotes_records_and_asks_to_look_again(
    pg: PostgresBroker, clock: FakeClock
) -> None:
    pg.enqueue([spec(), spec(args=[1], delay=10.0)])
    (held,) = claims(pg, 1)
    clock.advance(11.0)
    got = pg.claim_and_record(["q"], 1, LEASE, "w", [], [Succeeded(held, "null")])
    assert got is not None
    batch, lost = got
    assert list(batch) == [] and batch.retry_in == 0.0 and lost == []
    job = pg.get_job(held.job_id)
    assert job is not None and job.state is S.SUCCEEDED
    assert [c.job.args for c in pg.claim(["q"], 1, LEASE, "w")] == [[1]]


@pytest.mark.parametrize(("relax", "setting"), [(False, "on"), (True, "off")])
def test_the_claim_relaxes_its_commit_only_when_told(
    pg: PostgresBroker, relax: bool, setting: str
) -> None:
    pg.enqueue([spec()])
    params = {**pg._claim_params(("q",), 1, 1, LEASE, "w"), "relax": relax}
    with psycopg.connect(pg.dsn) as conn:  # one transaction, rolled back
        conn.execute("SET synchronous_commit = on")
        conn.execute(pg._queries["claim"], params).fetchall()
        assert conn.execute("SHOW synchronous_commit").fetchone()[0] == setting
        conn.rollback()


@pytest.mark.parametrize("acks", [True, False])
def test_a_turn_that_acks_commits_durably(pg: PostgresBroker, acks: bool) -> None:
    """The claim alone commits without waiting for the WAL flush; sharing its transaction
    with acks, it must not relax that commit (the acks are as durable as record's)."""
    pg.enqueue([spec(), spec()])
    (held,) = claims(pg, 1)
    sent: list[dict[str, Any]] = []
    real = pg._db.single

    class Watched:
        def __init__(self, conn: Any) -> None:
            self._conn = conn

        def __getattr__(self, name: str) -> Any:
            return getattr(self._conn, name)

        def execute(self, query: Any, params: Any = None) -> Any:
            if query is pg._queries["claim"]:
                sent.append(params)
            return self._conn.execute(query, params)

    @contextlib.contextmanager
    def watched() -> Iterator[Any]:
        with real() as conn:
            yield Watched(conn)

    pg._db.single = watched  # type: ignore[method-assign]
    outcomes = [Succeeded(held, "null")] if acks else []
    assert pg.claim_and_record(["q"], 1, LEASE, "w", [] if acks else [held], outcomes)
    assert [p["relax"] for p in sent] == [not acks]


def test_a_worker_drains_through_it(pg: PostgresBroker, pg_url: str) -> None:
    """A burst worker on PostgreSQL writes its turns with its claims: every job ends once."""
    from sluicegate import App
    from sluicegate.worker import PoolSpec, Worker

    app = App(broker=pg_url)
    ran: list[int] = []

    @app.task(name="t")
    def t(i: int) -> int:
        ran.append(i)
        return i

    try:
        calls: list[int] = []
        real: Callable[..., Any] = app.broker.claim_and_record

        def counted(*args: Any) -> Any:
            got = real(*args)
            calls.append(got is not None)
            return got

        app.broker.claim_and_record = counted  # type: ignore[method-assign]
        t.enqueue_many([[i] for i in range(200)])
        worker = Worker(app, [PoolSpec("p", ("q", "default"), 4)], burst=True)
        worker.run()
        assert sorted(ran) == list(range(200))
        assert worker.counters.succeeded == 200 and worker.counters.lease_lost == 0
        assert any(calls)  # turns went through the one-statement path
        assert {j.result for j in pg.list_jobs(S.SUCCEEDED, "default", limit=300)} == set(
            range(200)
        )
    finally:
        app.close()


def test_a_turns_statements_fit_psycopgs_statement_cache() -> None:
    """psycopg converts a statement's %(name)s placeholders once per text and keeps that
    only for texts up to 4 kB (``MAX_CACHED_STATEMENT_LENGTH``); a longer claim was
    converted again at every turn (0.2-0.4 ms of the worker's CPU). With the longest
    schema name a URL may give, the statements of a worker's turn stay within it."""
    from psycopg import _queries

    from sluicegate.brokers.postgres.broker import NOW, job_columns
    from sluicegate.brokers.sqlfiles import load_queries

    limit = getattr(_queries, "MAX_CACHED_STATEMENT_LENGTH", 4096)
    schema = '"' + "s" * 50 + '"'
    queries = load_queries("postgresql", {"schema": schema, "now": NOW, "job_columns": job_columns})
    for name in ("claim", "record_turn", "start", "ack", "heartbeat", "insert_one_notify"):
        assert len(queries[name].encode()) <= limit, name


def test_a_turn_whose_commit_lost_its_connection_finds_its_own_write(pg: PostgresBroker) -> None:
    """The reply to the turn's commit was lost (it landed): the worker writes its
    outcomes again with ``record``, which finds them as its own, not as lost leases."""
    pg.enqueue([spec(), spec()])
    (held,) = claims(pg, 1)
    real = pg._db.single

    @contextlib.contextmanager
    def lost_at_commit() -> Iterator[Any]:
        pg._db.single = real  # type: ignore[method-assign]
        with real() as conn:
            yield conn
        raise BrokerUnavailable("connection lost at COMMIT")

    pg._db.single = lost_at_commit  # type: ignore[method-assign]
    with pytest.raises(BrokerUnavailable):
        pg.claim_and_record(["q"], 1, LEASE, "w", [], [Succeeded(held, '"ok"')])
    assert pg.record([], [Succeeded(held, '"ok"')]) == []
    job = pg.get_job(held.job_id)
    assert job is not None and job.state is S.SUCCEEDED and job.result == "ok"
