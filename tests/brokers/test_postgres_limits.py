"""Limits on the PostgreSQL broker: admission as the memory broker (the reference) does it,
the gated claim's plan and cost, its locks under concurrent claimers, and the limit verbs.

The semantic checks run on both brokers, so a difference from the reference shows as a
failure on one of them; the rest are PostgreSQL's own.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import pytest

from sluicegate.brokers.base import Broker
from sluicegate.brokers.memory import MemoryBroker
from sluicegate.errors import ConfigError
from sluicegate.job import ClaimedJob, JobState
from sluicegate.limits import RECHECK, Limit, Need, encode_needs
from sluicegate.outcomes import Succeeded
from sluicegate.testing import FakeClock
from support.pg import generic_plan
from support.specs import needing, spec
from support.waiting import wait_for

psycopg = pytest.importorskip("psycopg")

if TYPE_CHECKING:
    from sluicegate.brokers.postgres import PostgresBroker

S = JobState
LEASE = 30.0


def storage(cost: int = 1) -> list[Need]:
    return [("storage", None, cost)]


def ids(claimed: Sequence[ClaimedJob]) -> list[int]:
    return [c.job.id for c in claimed]


def ack_all(broker: Broker, claimed: Sequence[ClaimedJob]) -> None:
    assert broker.record([], [Succeeded(c.claim, "null") for c in claimed]) == []


# ---- fixtures -------------------------------------------------------------------------------
@pytest.fixture(params=["memory", "postgresql"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def open_b(
    kind: str, clock: FakeClock, request: pytest.FixtureRequest
) -> Iterator[Callable[..., Broker]]:
    """Opens handles on one storage (the memory broker: one handle only)."""
    opened: list[Broker] = []
    # A fresh schema, dropped at teardown; skipped without a server, failed when required.
    url = request.getfixturevalue("pg_url") if kind == "postgresql" else None

    def open_one(**kwargs: Any) -> Broker:
        broker: Broker
        if kind == "memory":
            assert not opened, "the memory broker has one handle"
            broker = MemoryBroker(clock=clock)
        else:
            from sluicegate.brokers.postgres import PostgresBroker

            assert url is not None
            broker = PostgresBroker(url, **{"clock": clock, **kwargs})
        opened.append(broker)
        return broker

    yield open_one
    for broker in reversed(opened):
        broker.close()


@pytest.fixture
def b(open_b: Callable[..., Broker]) -> Broker:
    return open_b()


@pytest.fixture
def pg(pg_url: str, clock: FakeClock) -> Iterator[PostgresBroker]:
    from sluicegate.brokers.postgres import PostgresBroker

    broker = PostgresBroker(pg_url, clock=clock)
    yield broker
    broker.close()


@pytest.fixture
def sql(pg_dsn: str) -> Iterator[Any]:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        yield conn


def schema_of(url: str) -> str:
    return url.rsplit("schema=", 1)[1].split("&")[0]


# ---- admission, as the reference broker does it ---------------------------------------------
class TestAdmission:
    def test_a_global_concurrency_limit(self, b: Broker) -> None:
        b.register_limits([Limit("storage", concurrency=3)])
        jobs = b.enqueue([needing(storage(), args=[i]) for i in range(20)])
        first = b.claim(["q"], 10, LEASE, "w")
        assert ids(first) == [j.id for j in jobs[:3]]
        assert first.retry_in == RECHECK
        assert b.claim(["q"], 10, LEASE, "w") == []
        ack_all(b, first[:1])
        again = b.claim(["q"], 10, LEASE, "w")
        assert ids(again) == [jobs[3].id]

    def test_costs_and_several_needs(self, b: Broker) -> None:
        b.register_limits([Limit("storage", concurrency=4), Limit("api", concurrency=1)])
        big, both, small = b.enqueue(
            [
                needing(storage(3)),
                needing([("api", None, 1), ("storage", None, 1)]),
                needing(storage(1)),
            ]
        )
        got = b.claim(["q"], 10, LEASE, "w")
        assert ids(got) == [big.id, both.id]  # 3 + 1 of storage, 1 of api
        assert b.claim(["q"], 10, LEASE, "w") == []
        ack_all(b, got[:1])
        assert ids(b.claim(["q"], 10, LEASE, "w")) == [small.id]

    def test_a_partitioned_limit_admits_one_per_key(self, b: Broker) -> None:
        b.register_limits([Limit("acct", concurrency=1, partition="account")])
        b.enqueue([needing([("acct", f"k{i % 5}", 1)], args=[i]) for i in range(15)])
        got = b.claim(["q"], 20, LEASE, "w")
        assert sorted(c.job.args[0] for c in got) == [0, 1, 2, 3, 4]
        assert b.claim(["q"], 20, LEASE, "w") == []
        ack_all(b, [c for c in got if c.job.args[0] == 2])
        assert [c.job.args[0] for c in b.claim(["q"], 20, LEASE, "w")] == [7]

    def test_a_host_scoped_limit_counts_each_host_apart(self, b: Broker) -> None:
        b.register_limits([Limit("gpu", concurrency=2, scope="host")])
        b.enqueue([needing([("gpu", None, 1)]) for _ in range(10)])
        on_a = b.claim(["q"], 10, LEASE, "w-a", host="a")
        on_b = b.claim(["q"], 10, LEASE, "w-b", host="b")
        assert (len(on_a), len(on_b)) == (2, 2)
        assert b.claim(["q"], 10, LEASE, "w-a", host="a") == []
        ack_all(b, on_b)
        assert len(b.claim(["q"], 10, LEASE, "w-b", host="b")) == 2
        assert b.claim(["q"], 10, LEASE, "w-a", host="a") == []

    def test_the_local_host_by_default(self, b: Broker, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("SLUICEGATE_HOST", "here")
        b.register_limits([Limit("gpu", concurrency=1, scope="host")])
        b.enqueue([needing([("gpu", None, 1)]) for _ in range(3)])
        assert len(b.claim(["q"], 10, LEASE, "w")) == 1
        assert b.claim(["q"], 10, LEASE, "w", host="here") == []
        assert len(b.claim(["q"], 10, LEASE, "w", host="there")) == 1
        held = sorted(h[2] or "" for h in b.limit_figures().held)
        assert held == ["here", "there"]

    def test_a_rate_limit_spaces_starts(self, b: Broker, clock: FakeClock) -> None:
        b.register_limits([Limit("email", rate=20.0, burst=1)])
        b.enqueue([needing([("email", None, 1)]) for _ in range(5)])
        assert len(b.claim(["q"], 10, LEASE, "w")) == 1
        held_back = b.claim(["q"], 10, LEASE, "w")
        # (PostgreSQL keeps times to the microsecond)
        assert held_back == [] and held_back.retry_in == pytest.approx(0.05, abs=1e-5)
        clock.advance(0.03)
        assert b.claim(["q"], 10, LEASE, "w").retry_in == pytest.approx(0.02, abs=1e-5)
        clock.advance(0.0201)
        assert len(b.claim(["q"], 10, LEASE, "w")) == 1
        assert b.claim(["q"], 10, LEASE, "w") == []
        clock.advance(1.0)  # a long pause refills the bucket to its burst, no more
        assert len(b.claim(["q"], 10, LEASE, "w")) == 1

    def test_a_burst_starts_at_once_then_at_the_rate(self, b: Broker, clock: FakeClock) -> None:
        b.register_limits([Limit("email", rate=10.0, burst=3)])
        b.enqueue([needing([("email", None, 1)]) for _ in range(10)])
        assert len(b.claim(["q"], 10, LEASE, "w")) == 3
        clock.advance(0.25)
        assert len(b.claim(["q"], 10, LEASE, "w")) == 2

    def test_an_unregistered_limit_holds_its_jobs_only(self, b: Broker) -> None:
        waiting = b.enqueue([needing([("nope", None, 1)])])[0]
        free = b.enqueue([spec()])[0]
        got = b.claim(["q"], 10, LEASE, "w")
        assert ids(got) == [free.id] and got.retry_in == RECHECK
        b.register_limits([Limit("nope", concurrency=1)])
        assert ids(b.claim(["q"], 10, LEASE, "w")) == [waiting.id]

    def test_no_head_of_line_blocking(self, b: Broker) -> None:
        b.register_limits([Limit("storage", concurrency=1)])
        b.enqueue([needing(storage(), args=[i]) for i in range(1000)])
        free = b.enqueue([spec(args=[i]) for i in range(5)])
        got = b.claim(["q"], 10, LEASE, "w")
        assert len(got) == 6 and set(j.id for j in free) <= set(ids(got))
        assert b.claim(["q"], 10, LEASE, "w") == []

    def test_claim_order_spans_limited_and_free_jobs(self, b: Broker) -> None:
        b.register_limits([Limit("storage", concurrency=5)])
        late = b.enqueue([spec(priority=5)])[0]
        urgent = b.enqueue([needing(storage(), priority=-1)])[0]
        mid = b.enqueue([spec(priority=0)])[0]
        limited = b.enqueue([needing(storage(), priority=1)])[0]
        assert ids(b.claim(["q"], 3, LEASE, "w")) == [urgent.id, mid.id, limited.id]
        assert ids(b.claim(["q"], 3, LEASE, "w")) == [late.id]

    def test_an_expired_lease_gives_its_token_back(self, b: Broker, clock: FakeClock) -> None:
        b.register_limits([Limit("storage", concurrency=1)])
        first, _ = b.enqueue([needing(storage()), needing(storage())])
        assert ids(b.claim(["q"], 5, 5.0, "w")) == [first.id]
        assert b.claim(["q"], 5, 5.0, "w") == []
        clock.advance(10)
        assert b.recover_expired().requeued == [first.id]
        assert ids(b.claim(["q"], 5, 5.0, "w")) == [first.id]

    def test_release_and_failure_give_tokens_back(self, b: Broker) -> None:
        b.register_limits([Limit("storage", concurrency=1)])
        b.enqueue([needing(storage()) for _ in range(3)])
        [one] = b.claim(["q"], 5, LEASE, "w")
        assert b.release([one.claim]) == []
        [two] = b.claim(["q"], 5, LEASE, "w")
        b.cancel(two.job.id)
        assert len(b.claim(["q"], 5, LEASE, "w")) == 1

    def test_a_due_scheduled_job_is_claimed_through_its_limit(
        self, b: Broker, clock: FakeClock
    ) -> None:
        b.register_limits([Limit("storage", concurrency=1)])
        later = b.enqueue([needing(storage(), delay=10.0)])[0]
        assert b.claim(["q"], 5, LEASE, "w") == []
        clock.advance(11)
        assert ids(b.claim(["q"], 5, LEASE, "w")) == [later.id]

    def test_has_work_sees_jobs_waiting_for_a_limit(self, b: Broker) -> None:
        assert not b.has_work(["q"])
        b.enqueue([needing([("nope", None, 1)])])
        assert b.has_work(["q"])


class TestLimitVerbs:
    def test_register_set_reset(self, b: Broker) -> None:
        declared = Limit("storage", concurrency=2)
        b.register_limits([declared])
        assert b.limit_figures().limits == {"storage": declared}
        operator = Limit("storage", concurrency=5, rate=2.5, burst=2)
        b.set_limit(operator)
        figures = b.limit_figures()
        assert figures.limits["storage"] == operator and figures.overridden == {"storage"}
        # a worker's new declaration keeps the operator's values, takes its scope
        redeclared = Limit("storage", concurrency=3, scope="host", partition="bucket")
        b.register_limits([redeclared])
        kept = Limit("storage", 5, 2.5, 2, scope="host", partition="bucket")
        assert b.limit_figures().limits["storage"] == kept
        assert b.reset_limit("storage") == redeclared
        figures = b.limit_figures()
        assert figures.limits["storage"] == redeclared and figures.overridden == frozenset()

    def test_an_operator_limit_applies_to_the_next_claim(self, b: Broker) -> None:
        b.register_limits([Limit("storage", concurrency=1)])
        b.enqueue([needing(storage()) for _ in range(5)])
        assert len(b.claim(["q"], 5, LEASE, "w")) == 1
        b.set_limit(Limit("storage", concurrency=3))
        assert len(b.claim(["q"], 5, LEASE, "w")) == 2

    def test_unknown_names_are_refused(self, b: Broker) -> None:
        b.register_limits([Limit("storage", concurrency=1)])
        with pytest.raises(ConfigError, match=r"no limit named 'nope'.*limits: storage"):
            b.set_limit(Limit("nope", concurrency=1))
        with pytest.raises(ConfigError, match="no limit named 'nope'"):
            b.reset_limit("nope")

    def test_a_name_given_twice_keeps_the_last(self, b: Broker) -> None:
        b.register_limits([Limit("a", concurrency=1), Limit("a", concurrency=2)])
        assert b.limit_figures().limits == {"a": Limit("a", concurrency=2)}

    def test_figures(self, b: Broker, clock: FakeClock) -> None:
        b.register_limits(
            [Limit("storage", concurrency=2), Limit("email", rate=1.0, partition="to")]
        )
        b.enqueue([needing(storage(2)), needing(storage(1)), needing(storage(1))])
        clock.advance(1)
        b.enqueue([needing([("email", "x@y", 1)]), needing([("email", "x@y", 1)])])
        clock.advance(1)
        got = b.claim(["q"], 10, LEASE, "w", host="h")
        assert len(got) == 2
        figures = b.limit_figures()
        assert sorted(figures.held) == [("email", "x@y", "h", 1), ("storage", None, "h", 2)]
        assert sorted(figures.waiting) == [
            (encode_needs([("email", "x@y", 1)]), 1, clock.now - 1),
            (encode_needs(storage(1)), 2, clock.now - 2),
        ]
        assert figures.buckets[("email", "x@y", "")].tokens == pytest.approx(0.0)
        assert figures.now == clock.now


# ---- PostgreSQL's own -------------------------------------------------------------------------
class TestStorage:
    def test_every_insert_path_stores_the_needs(self, pg: PostgresBroker, pg_dsn: str) -> None:
        needs = [("storage", "x", 2)]
        one = pg.enqueue([needing(needs)])
        batch = pg.enqueue([needing(needs), needing(needs)])
        keyed = pg.enqueue([needing(needs, unique_key="k"), needing(needs)])
        with psycopg.connect(pg_dsn) as conn:
            in_tx = pg.enqueue([needing(needs)], connection=conn)
        for job in [*one, *batch, *keyed, *in_tx]:
            stored = pg.get_job(job.id)
            assert stored is not None and stored.limits == tuple(needs) == job.limits

    def test_the_claimers_host_is_stored(self, pg: PostgresBroker, sql: Any, pg_url: str) -> None:
        pg.register_limits([Limit("storage", concurrency=5)])
        [job] = pg.enqueue([needing(storage())])
        pg.claim(["q"], 1, LEASE, "w", host="box-1")
        row = sql.execute(
            f"SELECT host FROM {schema_of(pg_url)}.jobs WHERE id = %s", (job.id,)
        ).fetchone()
        assert row == ("box-1",)

    def test_the_gate_opens_and_closes_with_limited_jobs(self, pg: PostgresBroker) -> None:
        pg.register_limits([Limit("storage", concurrency=1)])
        pg.enqueue([spec()])
        assert len(pg.claim(["q"], 5, LEASE, "w")) == 1
        assert not pg._gated_seen.get(("q",))  # plain claims only
        [limited] = pg.enqueue([needing(storage())])
        assert ids(pg.claim(["q"], 5, LEASE, "w")) == [limited.id]  # seen, then gated
        assert pg._gated_seen[("q",)]
        pg.enqueue([spec()])
        assert len(pg.claim(["q"], 5, LEASE, "w")) == 1  # gated: finds none waiting
        assert not pg._gated_seen[("q",)]

    def test_concurrency_limits_claim_in_one_statement_rates_in_python(
        self, pg: PostgresBroker, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """After a first claim has learnt the names, a queue whose limits bound only
        concurrency claims by claim_gated_fast; a rate sends it to the Python admission."""
        pg.register_limits([Limit("db", concurrency=2), Limit("api", rate=1000.0, burst=5)])
        pg.enqueue([needing([("db", None, 1)]) for _ in range(6)])
        fast: list[int] = []
        real = type(pg)._claim_gated_fast

        def counted(self: Any, *args: Any) -> Any:
            fast.append(1)
            return real(self, *args)

        monkeypatch.setattr(type(pg), "_claim_gated_fast", counted)
        first = pg.claim(["q"], 5, LEASE, "w")  # learns the names: the two-trip path
        assert len(first) == 2 and fast == []
        assert pg.claim(["q"], 5, LEASE, "w") == [] and len(fast) == 1  # full: none
        pg.ack(first[0].claim)
        assert len(pg.claim(["q"], 5, LEASE, "w")) == 1 and len(fast) == 2
        pg.enqueue([needing([("api", None, 1)]) for _ in range(3)])
        got = pg.claim(["q"], 5, LEASE, "w")  # meets a rate: finished the other way
        assert [c.job.limits[0][0] for c in got] == ["api"] * 3
        assert len(fast) == 3
        pg.claim(["q"], 5, LEASE, "w")
        assert len(fast) == 3  # these queues now admit in Python

    def test_new_limit_names_relock_in_order(
        self, pg: PostgresBroker, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        pg.register_limits([Limit(n, concurrency=1) for n in ("a", "b", "c")])
        pg.enqueue([needing([("b", None, 1)])])
        assert len(pg.claim(["q"], 5, LEASE, "w")) == 1
        assert pg._lock_names[("q",)] == {"b"}
        locked: list[list[str]] = []
        execute = psycopg.Connection.execute

        def spy(conn: Any, query: Any, params: Any = None, **kw: Any) -> Any:
            if getattr(query, "name", None) == "lock_limits":
                locked.append(list(params["names"]))
            return execute(conn, query, params, **kw)

        monkeypatch.setattr(psycopg.Connection, "execute", spy)
        pg.enqueue([needing([("c", None, 1)]), needing([("a", None, 1), ("c", None, 1)])])
        assert len(pg.claim(["q"], 5, LEASE, "w")) == 1  # c; then a+c waits for c
        assert locked == [["b"], ["a", "b", "c"]]
        assert pg._lock_names[("q",)] == {"a", "c"}

    def test_jobs_taken_meanwhile_leave_room_for_others(
        self, pg: PostgresBroker, sql: Any, pg_url: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        pg.register_limits([Limit("storage", concurrency=5)])
        free = pg.enqueue([spec(args=[i]) for i in range(20)])
        [limited] = pg.enqueue([needing(storage())])
        admit = pg._admit
        taken = [j.id for j in free[:5]]

        def others_take_some(*args: Any) -> Any:
            sql.execute(
                f"UPDATE {schema_of(pg_url)}.jobs SET state = 'claimed' WHERE id = ANY(%s)",
                (taken,),
            )
            monkeypatch.setattr(pg, "_admit", admit)
            return admit(*args)

        monkeypatch.setattr(pg, "_admit", others_take_some)
        pg._lock_names[("q",)] = frozenset({"storage"})  # no relock: that would read again
        got = pg.claim(["q"], 10, LEASE, "w")
        assert ids(got) == [j.id for j in free[5:15]]
        assert ids(pg.claim(["q"], 10, LEASE, "w")) == [*(j.id for j in free[15:]), limited.id]

    def test_a_changed_limit_wakes_workers_elsewhere(
        self, pg: PostgresBroker, pg_url: str, clock: FakeClock
    ) -> None:
        from sluicegate.brokers.postgres import PostgresBroker

        other = PostgresBroker(pg_url, clock=clock)
        wakes: list[None] = []
        unsubscribe = other.subscribe(lambda: wakes.append(None))
        try:
            # LISTEN in place, its own first wake-up fired: from here on a wake-up comes
            # from a commit's NOTIFY, so each step below is known by its own.
            wait_for(other._listener.listening.is_set, timeout=5, what="LISTEN in place")
            for change in (
                lambda: pg.enqueue([needing(storage())]),  # the enqueue's own wake-up
                lambda: pg.register_limits([Limit("storage", concurrency=1)]),
                lambda: pg.set_limit(Limit("storage", concurrency=2)),
                lambda: pg.reset_limit("storage"),
            ):
                before = len(wakes)
                change()
                wait_for(lambda b=before: len(wakes) > b, timeout=5, what="a wake-up")
        finally:
            unsubscribe()
            other.close()

    def test_a_corrupt_needs_text_kills_its_job_only(
        self, pg: PostgresBroker, sql: Any, pg_url: str
    ) -> None:
        pg.register_limits([Limit("storage", concurrency=1)])
        bad, good = pg.enqueue([needing(storage()), needing(storage())])
        sql.execute(
            f"UPDATE {schema_of(pg_url)}.jobs SET limits = %s WHERE id = %s",
            ('[["storage"]]', bad.id),
        )
        got = pg.claim(["q"], 5, LEASE, "w")
        assert ids(got) == [bad.id, good.id] and got[0].problem and not got[1].problem

    def test_the_read_costs_n_per_group_whatever_the_line(
        self, pg: PostgresBroker, pg_url: str, sql: Any
    ) -> None:
        pg.register_limits([Limit("storage", concurrency=1), Limit("api", concurrency=50)])
        pg.enqueue([needing(storage()) for _ in range(1000)])
        pg.enqueue([needing([("api", None, 1)]) for _ in range(1000)])
        pg.enqueue([spec() for _ in range(30)])
        assert len(pg.claim(["q"], 10, LEASE, "w")) == 10
        sql.execute(f"ANALYZE {schema_of(pg_url)}.jobs")
        params = {"queues": ["q"], "n": 10, "host": "h", "burst": 1, "now": None}
        params.update(after=[""], groups=1000, done_ids=[], done_tokens=[])
        row = sql.execute(pg._queries["claim_gated_read"], params).fetchone()
        # 10 free; of each group, as many as one claim could admit and one more, never the
        # 1000s: storage, 1 at once: 2; api, 50 at once: n
        assert len(row[0]) == 10 + 2 + 10
        with psycopg.connect(pg.dsn) as conn:
            text = generic_plan(conn, pg._queries["claim_gated_read"], params)
        assert "Seq Scan on jobs" not in text, text
        assert "jobs_gated" in text and "jobs_ready" in text, text
        # every scan of the jobs returned at most a group's n rows, or one seek per group
        for rows in re.findall(r"Index (?:Only )?Scan .*? on jobs.*?rows=(\d+) loops", text):
            assert int(rows) <= 10, text


class TestConcurrentClaimers:
    CLAIMERS = 8
    LIMIT = 3
    JOBS = 120

    def test_a_global_limit_holds_across_claimers(
        self, pg_url: str, pg_dsn: str, clock: FakeClock
    ) -> None:
        from sluicegate.brokers.postgres import PostgresBroker

        setup = PostgresBroker(pg_url)
        setup.register_limits([Limit("storage", concurrency=self.LIMIT)])
        # Free jobs too: gated claims take them alongside, plain claims race for them.
        setup.enqueue(
            [
                needing(storage(), queue=f"q{i % 4}", args=[i]) if i % 3 else spec(args=[i])
                for i in range(self.JOBS)
            ]
        )
        schema = schema_of(pg_url)
        in_use = 0
        most = 0
        count_lock = threading.Lock()
        done: list[int] = []
        errors: list[BaseException] = []
        stop = threading.Event()
        seen_by_db: list[int] = []

        def claimer(k: int) -> None:
            nonlocal in_use, most
            broker = PostgresBroker(pg_url)
            # Until every job is done (not until a few empty claims in a row: on a busy
            # machine every claimer can find the limit taken that often, and stop early).
            deadline = time.monotonic() + 60
            try:
                while len(done) < self.JOBS and not stop.is_set():
                    assert time.monotonic() < deadline, f"{len(done)} of {self.JOBS} done"
                    queues = ["q", f"q{k % 4}", f"q{(k + 1) % 4}"]
                    got = broker.claim(queues, 2, LEASE, f"w{k}", host=f"h{k}")
                    limited = [c for c in got if c.job.limits]
                    with count_lock:
                        in_use += len(limited)
                        most = max(most, in_use)
                    time.sleep(0.002 if got else 0.01)  # the jobs' bodies, or an idle pause
                    with count_lock:  # before the ack: never counted below the truth
                        in_use -= len(limited)
                    ack_all(broker, got)
                    done.extend(ids(got))
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)
                stop.set()
            finally:
                broker.close()

        def monitor() -> None:
            with psycopg.connect(pg_dsn, autocommit=True) as conn:
                while not stop.is_set():
                    row = conn.execute(
                        f"SELECT count(*) FROM {schema}.jobs "
                        "WHERE state IN ('claimed', 'running') AND limits IS NOT NULL"
                    ).fetchone()
                    seen_by_db.append(row[0])
                    time.sleep(0.001)  # the monitor's sampling interval

        threads = [threading.Thread(target=claimer, args=(k,)) for k in range(self.CLAIMERS)]
        watcher = threading.Thread(target=monitor)
        watcher.start()
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        stop.set()
        watcher.join(10)
        setup.close()
        assert not errors, errors
        assert sorted(done) == sorted(set(done)) and len(done) == self.JOBS
        assert most <= self.LIMIT and max(seen_by_db) <= self.LIMIT
        assert most == self.LIMIT  # the limit was reached, not just respected

    def test_claimers_that_start_together_never_overshoot(self, pg_url: str, pg_dsn: str) -> None:
        """Rounds: every claimer claims at once (a barrier), then the round's claims are
        counted and acked. Without the limit locks, claimers read the same count in use."""
        from sluicegate.brokers.postgres import PostgresBroker

        brokers = [PostgresBroker(pg_url) for _ in range(self.CLAIMERS)]
        brokers[0].register_limits([Limit("storage", concurrency=self.LIMIT)])
        # A queue per claimer: claimers of one queue would race for the same rows, and SKIP
        # LOCKED alone would keep them under the limit.
        brokers[0].enqueue(
            [needing(storage(), queue=f"q{i % self.CLAIMERS}", args=[i]) for i in range(self.JOBS)]
        )
        barrier = threading.Barrier(self.CLAIMERS)
        rounds: list[list[ClaimedJob]] = [[] for _ in range(self.CLAIMERS)]
        per_round: list[int] = []
        errors: list[BaseException] = []

        def claimer(k: int) -> None:
            try:
                for _ in range(self.JOBS // self.LIMIT):
                    barrier.wait(30)
                    rounds[k] = brokers[k].claim([f"q{k}"], self.LIMIT, LEASE, f"w{k}")
                    barrier.wait(30)
                    if k == 0:
                        per_round.append(sum(len(r) for r in rounds))
                    barrier.wait(30)
                    ack_all(brokers[k], rounds[k])
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)
                barrier.abort()

        threads = [threading.Thread(target=claimer, args=(k,)) for k in range(self.CLAIMERS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        for broker in brokers:
            broker.close()
        assert not errors, errors
        assert per_round == [self.LIMIT] * (self.JOBS // self.LIMIT), per_round


def test_figures_read_the_declared_json(pg: PostgresBroker, sql: Any, pg_url: str) -> None:
    pg.register_limits([Limit("email", rate=1 / 3, burst=2, partition="to")])
    row = sql.execute(f"SELECT declared FROM {schema_of(pg_url)}.limits").fetchone()
    assert json.loads(row[0])["rate"] == 1 / 3
    assert pg.reset_limit("email") == Limit("email", rate=1 / 3, burst=2, partition="to")
