"""PostgreSQL-only behaviour, on a real server (tests/pgserver.py), each test on its own
schema: migrations, schema names, the claim's index, LISTEN/NOTIFY across handles,
enqueue and ack inside the caller's own transaction, and pruning.

Everything every broker must do lives in test_conformance.py, which runs here too.
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pytest

from sluicegate.brokers.base import Retention
from sluicegate.errors import BrokerUnavailable, ConfigError, LeaseLost
from sluicegate.job import Claim, JobState
from sluicegate.limits import encode_needs
from sluicegate.outcomes import Buried, Retried, Succeeded
from support.fleet import run_released, wait_for
from support.pg import generic_plan
from support.specs import spec

psycopg = pytest.importorskip("psycopg")

if TYPE_CHECKING:
    from conftest import FakeClock
    from sluicegate.brokers.postgres import PostgresBroker

S = JobState
LEASE = 30.0


def schema_of(url: str) -> str:
    return url.rsplit("schema=", 1)[1].split("&")[0]


def _blocked_by(sql: Any, pid: int) -> bool:
    """Whether some session of the server waits for a lock that session ``pid`` holds."""
    query = "SELECT count(*) FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))"
    return bool(sql.execute(query, (pid,)).fetchone()[0])


@pytest.fixture
def open_pg(pg_url: str, clock: FakeClock) -> Iterator[Callable[..., PostgresBroker]]:
    """Opens handles on the test's schema (fake clock unless clock=None); closes them all."""
    from sluicegate.brokers.postgres import PostgresBroker

    opened: list[PostgresBroker] = []

    def open_one(extra: str = "", **kwargs: Any) -> PostgresBroker:
        broker = PostgresBroker(pg_url + extra, **{"clock": clock, **kwargs})
        opened.append(broker)
        return broker

    yield open_one
    for broker in reversed(opened):
        broker.close()


@pytest.fixture
def pg(open_pg: Callable[..., PostgresBroker]) -> PostgresBroker:
    return open_pg()


@pytest.fixture
def sql(pg_dsn: str) -> Iterator[Any]:
    """A plain autocommit connection to the test server, for looking behind the broker."""
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        yield conn


# ---- migrations ---------------------------------------------------------------------------
class TestMigrations:
    @pytest.fixture
    def pg_url(self, pg_fresh_url: str) -> str:
        """Migration itself: a schema that does not exist yet, not a lent migrated one."""
        return pg_fresh_url

    def test_a_migrated_schema_has_its_version_table(
        self, pg_url: str, open_pg: Any, sql: Any
    ) -> None:
        broker = open_pg()
        assert broker.migrations_applied == [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]
        schema = schema_of(pg_url)
        rows = sql.execute(
            f"SELECT version, name FROM {schema}.schema_version ORDER BY 1"
        ).fetchall()
        assert rows == [
            (1, "initial"),
            (2, "limits"),
            (3, "workers"),
            (4, "stats"),
            (5, "listings"),
            (6, "history"),
            (7, "paused_queues"),
            (8, "progress"),
            (9, "headers"),
            (10, "expiry"),
            (11, "schedules"),
        ]
        tables = sql.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s ORDER BY 1",
            (schema,),
        ).fetchall()
        assert [t[0] for t in tables] == [
            "jobs",
            "limit_buckets",
            "limits",
            "paused_queues",
            "schedules",
            "schema_version",
            "stats_horizon",
            "stats_settled",
            "workers",
        ]

    def test_migrate_twice_is_a_no_op(self, pg_url: str, open_pg: Any, sql: Any) -> None:
        first = open_pg()
        assert first.migrate() == []
        second = open_pg()
        assert second.migrations_applied == [] and second.migrate() == []
        schema = schema_of(pg_url)
        assert sql.execute(f"SELECT count(*) FROM {schema}.schema_version").fetchone() == (11,)
        job = first.enqueue([spec()])[0]
        assert second.get_job(job.id) == job  # nothing was recreated under the first handle

    def test_concurrent_migrate_from_processes_is_safe(self, pg_url: str, sql: Any) -> None:
        child = (
            "import json, sys\n"
            "from sluicegate.brokers.postgres import PostgresBroker\n"
            "print('ready', flush=True)\n"
            "sys.stdin.readline()\n"
            "broker = PostgresBroker(sys.argv[1])\n"
            "print(json.dumps(broker.migrations_applied), flush=True)\n"
            "broker.close()\n"
        )
        outputs = run_released(child, [[pg_url]] * 4)
        assert sorted(outputs) == [[], [], [], [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]], outputs
        schema = schema_of(pg_url)
        assert sql.execute(f"SELECT count(*) FROM {schema}.schema_version").fetchone() == (11,)

    def test_migrate_false_on_an_unmigrated_schema_names_the_command(
        self, open_pg: Any, sql: Any, pg_url: str
    ) -> None:
        with pytest.raises(ConfigError, match="sluicegate migrate") as info:
            open_pg("&migrate=false")  # the schema does not even exist
        assert "version 0" in str(info.value)
        sql.execute(f"CREATE SCHEMA {schema_of(pg_url)}")  # exists, but has no tables
        with pytest.raises(ConfigError, match="sluicegate migrate"):
            open_pg("&migrate=false")
        open_pg()  # migrates
        job = open_pg("&migrate=false").enqueue([spec()])[0]
        assert job.state is S.READY

    def test_migrate_false_does_no_ddl(self, open_pg: Any, sql: Any, pg_url: str) -> None:
        with pytest.raises(ConfigError):
            open_pg("&migrate=false")
        found = sql.execute(
            "SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema_of(pg_url),)
        ).fetchone()
        assert found is None


# ---- URLs and schema names ------------------------------------------------------------------
class TestUrls:
    @pytest.mark.parametrize(
        "schema",
        ["Jobs", "1jobs", "my-jobs", "jobs;drop", 'jobs"x', "pg_jobs", "a" * 51, "", "sch.ema"],
    )
    def test_bad_schema_names_are_refused(self, pg_dsn: str, schema: str) -> None:
        from sluicegate.brokers.postgres import PostgresBroker

        sep = "&" if "?" in pg_dsn else "?"
        with pytest.raises(ConfigError, match="invalid schema") as info:
            PostgresBroker(f"{pg_dsn}{sep}schema={schema}")
        assert "a-z 0-9 _" in str(info.value)

    @pytest.mark.parametrize(
        ("extra", "words"),
        [
            ("&migrate=perhaps", "migrate must be true or false"),
            ("&pool_max=0", "pool_max"),
            ("&pool_max=many", "invalid PostgreSQL URL"),
            ("&shema=x", "shema"),
        ],
    )
    def test_bad_options_are_refused(self, pg_url: str, extra: str, words: str) -> None:
        from sluicegate.brokers.postgres import PostgresBroker

        with pytest.raises(ConfigError, match=words):
            PostgresBroker(pg_url + extra)

    def test_a_reserved_word_is_a_usable_schema(self, pg_dsn: str) -> None:
        from sluicegate.brokers.postgres import PostgresBroker
        from support import pg as pgserver

        sep = "&" if "?" in pg_dsn else "?"
        broker = PostgresBroker(f"{pg_dsn}{sep}schema=user")
        try:
            job = broker.enqueue([spec()])[0]
            [claimed] = broker.claim(["q"], 1, LEASE, "w")
            broker.ack(claimed.claim)
            assert broker.get_job(job.id).state is S.SUCCEEDED  # type: ignore[union-attr]
        finally:
            broker.close()
            pgserver.drop_schema('"user"')

    def test_an_unreachable_server_fails_fast(self) -> None:
        from sluicegate.brokers.postgres import PostgresBroker

        started = time.monotonic()
        with pytest.raises(BrokerUnavailable, match="cannot connect to PostgreSQL"):
            PostgresBroker("postgresql://postgres@127.0.0.1:1/nothing")
        assert time.monotonic() - started < 5


# ---- the claim's plan -----------------------------------------------------------------------
def test_the_claim_reads_the_jobs_ready_index(pg: PostgresBroker, pg_url: str, sql: Any) -> None:
    # A history of finished jobs and a few ready ones, as in production.
    pg.enqueue([spec(args=[i]) for i in range(3000)])
    claims = [c.claim for c in pg.claim(["q"], 2990, LEASE, "w")]
    assert pg.record([], [Succeeded(c, "null") for c in claims]) == []
    pg.enqueue([spec(queue="other") for _ in range(50)])
    sql.execute(f"ANALYZE {schema_of(pg_url)}.jobs")
    params = pg._claim_params(("q", "other"), 10, 1, 30.0, "w")
    with psycopg.connect(pg.dsn) as conn:
        plan = conn.execute("EXPLAIN " + pg._queries["claim"], params).fetchall()
        conn.rollback()
    text = "\n".join(r[0] for r in plan)
    assert "jobs_ready" in text, text


def test_the_claims_generic_plan_reads_indexes_only(
    pg: PostgresBroker, pg_url: str, sql: Any
) -> None:
    # A generic plan cannot know that LIMIT n is small: updating the claimed rows through
    # a join once made it merge-join against the whole primary key (a full index scan).
    pg.enqueue([spec(args=[i]) for i in range(3000)])
    claims = [c.claim for c in pg.claim(["q"], 2990, LEASE, "w")]
    assert pg.record([], [Succeeded(c, "null") for c in claims]) == []
    sql.execute(f"ANALYZE {schema_of(pg_url)}.jobs")
    params = pg._claim_params(("q",), 8, 1, 30.0, "w")
    with psycopg.connect(pg.dsn) as conn:
        text = generic_plan(conn, pg._queries["claim"], params)
    assert "jobs_ready" in text, text
    assert "jobs_expiring" in text, text  # expiry: one seek of its (here empty) index
    # the claimed rows are found by primary-key lookups of the candidates' ids, whatever
    # the estimates (a join's strategy follows the estimates, which a generic plan lacks)
    assert re.search(r"Index Cond: \(id = ANY \(\$\d+\)\)", text), text
    for full_read in ("Seq Scan on jobs", "Merge Join", "Hash Join"):
        assert full_read not in text, text


@pytest.fixture
def history(pg: PostgresBroker, pg_url: str, sql: Any) -> PostgresBroker:
    """Finished jobs, as in production, and a few of every unfinished state, analysed."""
    pg.enqueue([spec(args=[i]) for i in range(3000)])
    claims = [c.claim for c in pg.claim(["q"], 3000, LEASE, "w")]
    assert pg.record([], [Succeeded(c, "null") for c in claims]) == []
    pg.enqueue([spec(), spec(queue="other"), spec(delay=60.0), spec(queue="held")])
    pg.enqueue([spec(limits=encode_needs([("db", None, 1)])), spec(queue="held")])
    pg.start(pg.claim(["held"], 2, LEASE, "w")[0].claim)
    sql.execute(f"ANALYZE {schema_of(pg_url)}.jobs")
    return pg


@pytest.mark.parametrize("name", ["queue_depths", "queue_depths_of"])
def test_queue_depths_read_only_partial_indexes(history: PostgresBroker, name: str) -> None:
    """Sampled by every worker every few seconds: its generic plan reads each unfinished
    state off its partial index, never the finished rows."""
    params = {"now": None, "queues": ["q", "held", "none"]}
    with psycopg.connect(history.dsn) as conn:
        text = generic_plan(conn, history._queries[name], params)
    # Each state off its partial index, or (a small table) the state's own range of the
    # listing index, which holds finished jobs too but in ranges of their own.
    listing = re.findall(r"using jobs_listing on jobs.*\n\s+Index Cond: \(+state = '(\w+)'", text)
    assert len(listing) == text.count("using jobs_listing"), text
    assert set(listing) <= {"ready", "scheduled"}, text
    for index, state in [("jobs_ready", "ready"), ("jobs_gated", "ready"),
                         ("jobs_scheduled", "scheduled"), ("jobs_leased", None)]:  # fmt: skip
        assert index in text or state in listing, text
    for full_read in ("Seq Scan on jobs", "jobs_finished", "jobs_pkey"):
        assert full_read not in text, text


def test_a_dead_workers_recovery_reads_held_jobs_only(history: PostgresBroker) -> None:
    """recover_worker finds the dead worker's jobs among the held ones (a partial index),
    never among the finished rows; its generic plan, run and rolled back."""
    params = {"now": None, "worker": "w", "error": "{}"}
    with psycopg.connect(history.dsn) as conn:
        text = generic_plan(conn, history._queries["recover_worker"], params)
    assert "jobs_leased" in text or "jobs_holding" in text, text
    assert "Seq Scan on jobs" not in text and "jobs_finished" not in text, text


@pytest.mark.parametrize("name", ["arrivals", "last_job_id"])
def test_arrivals_read_the_primary_key(history: PostgresBroker, name: str) -> None:
    query = history._queries[name]
    with psycopg.connect(history.dsn) as conn:
        if query.columns == ("id",):  # no parameter to make generic
            text = "\n".join(r[0] for r in conn.execute("EXPLAIN " + query).fetchall())
        else:
            text = generic_plan(conn, query, {"after": 2990, "scan": 100})
    assert "jobs_pkey" in text, text
    assert "Seq Scan on jobs" not in text, text
    assert history.arrivals(2990) == (3006, {"q": 13, "other": 1, "held": 2})
    assert history.arrivals(None) == (3006, {})


def test_a_queue_named_twice_is_claimed_from_once(pg: PostgresBroker) -> None:
    pg.enqueue([spec(args=[i]) for i in range(4)])
    claimed = pg.claim(["q", "q"], 3, LEASE, "w")
    assert [c.job.args for c in claimed] == [[0], [1], [2]]


# ---- LISTEN/NOTIFY ----------------------------------------------------------------------------
class TestListenNotify:
    def test_an_enqueue_through_another_handle_wakes_a_subscriber(self, open_pg: Any) -> None:
        watcher, producer = open_pg(), open_pg()
        fired = threading.Event()
        unsubscribe = watcher.subscribe(fired.set)
        try:
            fired.clear()  # subscribe returns with LISTEN in place (and may have fired once)
            producer.enqueue([spec(queue="elsewhere")])
            assert fired.wait(5)
            fired.clear()
            # a rolled-back transactional enqueue sends nothing; a committed one does
            with psycopg.connect(producer.dsn) as conn:
                producer.enqueue([spec()], connection=conn)
                conn.rollback()
                assert not fired.wait(0.3)
                producer.enqueue([spec()], connection=conn)
                conn.commit()
            assert fired.wait(5)
        finally:
            unsubscribe()

    def test_the_listener_comes_back_after_its_connection_is_killed(
        self, open_pg: Any, sql: Any
    ) -> None:
        watcher, producer = open_pg(), open_pg()
        fired = threading.Event()
        unsubscribe = watcher.subscribe(fired.set)
        try:
            killed = sql.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query = %s",
                (f'LISTEN "{watcher.channel}"',),
            ).fetchall()
            assert killed == [(True,)]
            fired.clear()
            assert fired.wait(5), "no wake-up after the LISTEN connection came back"
            deadline = time.monotonic() + 5
            while not watcher._listener.listening.is_set() and time.monotonic() < deadline:
                time.sleep(0.01)
            fired.clear()
            producer.enqueue([spec()])
            assert fired.wait(5)
        finally:
            unsubscribe()


# ---- enqueue inside the caller's transaction ---------------------------------------------------
class TestTransactionalEnqueue:
    def test_rolled_back_never_visible_committed_claimable(self, pg: PostgresBroker) -> None:
        with psycopg.connect(pg.dsn) as conn:
            [job] = pg.enqueue([spec(args=["gone"])], connection=conn)
            assert job.state is S.READY and job.args == ["gone"]
            assert pg.get_job(job.id) is None  # not visible before commit
            assert pg.claim(["q"], 5, LEASE, "w") == []
            conn.rollback()
            assert pg.get_job(job.id) is None
            assert pg.claim(["q"], 5, LEASE, "w") == []
            assert pg.list_jobs() == []

            with conn.transaction():
                [kept] = pg.enqueue([spec(args=["kept"])], connection=conn)
                assert pg.claim(["q"], 5, LEASE, "w") == []
        assert pg.get_job(kept.id) == kept
        [claimed] = pg.claim(["q"], 5, LEASE, "w")
        assert claimed.job.id == kept.id and claimed.job.args == ["kept"]

    def test_the_callers_row_factory_does_not_matter(self, pg: PostgresBroker) -> None:
        from psycopg.rows import dict_row

        with psycopg.connect(pg.dsn, row_factory=dict_row) as conn:
            jobs = pg.enqueue([spec(args=[1]), spec(args=[2], unique_key="k")], connection=conn)
            conn.commit()
        assert [j.args for j in jobs] == [[1], [2]]
        assert [pg.get_job(j.id) for j in jobs] == jobs

    def test_not_a_psycopg_connection(self, pg: PostgresBroker) -> None:
        with pytest.raises(ConfigError, match="psycopg"):
            pg.enqueue([spec()], connection=object())


# ---- ack inside the caller's transaction ---------------------------------------------------------
class TestAckOn:
    @pytest.fixture
    def side(self, pg_url: str, sql: Any) -> str:
        table = f"{schema_of(pg_url)}.side_effects"
        sql.execute(f"CREATE TABLE {table} (job_id bigint PRIMARY KEY, note text)")
        return table

    def _rows(self, sql: Any, table: str) -> list[tuple[Any, ...]]:
        return sql.execute(f"SELECT job_id, note FROM {table}").fetchall()

    def test_commit_acks_together_with_the_callers_write(
        self, pg: PostgresBroker, sql: Any, side: str
    ) -> None:
        job = pg.enqueue([spec()])[0]
        [claimed] = pg.claim(["q"], 1, LEASE, "w")
        with pg.transaction() as conn:
            conn.execute(f"INSERT INTO {side} VALUES (%s, 'done')", (job.id,))
            pg.ack_on(conn, claimed.claim, '"ok"')
            assert pg.get_job(job.id).state is S.CLAIMED  # type: ignore[union-attr]
            assert self._rows(sql, side) == []
        done = pg.get_job(job.id)
        assert done is not None and (done.state, done.result) == (S.SUCCEEDED, "ok")
        assert self._rows(sql, side) == [(job.id, "done")]

    def test_rollback_undoes_both(self, pg: PostgresBroker, sql: Any, side: str) -> None:
        job = pg.enqueue([spec()])[0]
        [claimed] = pg.claim(["q"], 1, LEASE, "w")
        with psycopg.connect(pg.dsn) as conn:
            conn.execute(f"INSERT INTO {side} VALUES (%s, 'done')", (job.id,))
            pg.ack_on(conn, claimed.claim, '"ok"')
            conn.rollback()
        assert pg.get_job(job.id).state is S.CLAIMED  # type: ignore[union-attr]
        assert self._rows(sql, side) == []
        with pytest.raises(RuntimeError), pg.transaction() as conn:
            conn.execute(f"INSERT INTO {side} VALUES (%s, 'done')", (job.id,))
            pg.ack_on(conn, claimed.claim, '"ok"')
            raise RuntimeError("the task failed after its writes")
        assert pg.get_job(job.id).state is S.CLAIMED  # type: ignore[union-attr]
        assert self._rows(sql, side) == []
        pg.ack(claimed.claim)  # the claim is intact

    def test_a_stale_token_raises_lease_lost(
        self, pg: PostgresBroker, clock: FakeClock, sql: Any, side: str
    ) -> None:
        job = pg.enqueue([spec()])[0]
        old = pg.claim(["q"], 1, 10, "old")[0].claim
        clock.advance(11)
        assert pg.recover_expired().requeued == [job.id]
        new = pg.claim(["q"], 1, LEASE, "new")[0].claim
        for stale in (old, Claim(new.job_id, new.token ^ 1)):
            with pytest.raises(LeaseLost), pg.transaction() as conn:
                conn.execute(f"INSERT INTO {side} VALUES (%s, 'stale')", (job.id,))
                pg.ack_on(conn, stale, '"stale"')
            assert self._rows(sql, side) == []
        assert pg.get_job(job.id).state is S.CLAIMED  # type: ignore[union-attr]
        pg.ack(new, '"mine"')
        with pytest.raises(LeaseLost), pg.transaction() as conn:  # an ended claim, too
            pg.ack_on(conn, new, '"again"')
        assert pg.get_job(job.id).result == "mine"  # type: ignore[union-attr]

    def test_finished_at_is_when_the_ack_ran_not_when_the_transaction_began(
        self, open_pg: Any
    ) -> None:
        broker = open_pg(clock=None)  # the server's clock
        job = broker.enqueue([spec()])[0]
        claim = broker.claim(["q"], 1, LEASE, "w")[0].claim
        with broker.transaction() as conn:
            conn.execute("SELECT 1")  # the transaction (and its now()) begins here
            began = broker.get_job(job.id).enqueued_at  # type: ignore[union-attr]
            time.sleep(0.3)  # the task's body: its duration is what finished_at must show
            broker.ack_on(conn, claim, "null")
        done = broker.get_job(job.id)
        assert done is not None and done.finished_at is not None
        assert done.finished_at - began >= 0.25

    def test_a_long_transaction_does_not_starve_the_hot_path(self, open_pg: Any) -> None:
        broker = open_pg("&pool_max=1")
        broker.enqueue([spec(), spec()])
        [first] = broker.claim(["q"], 1, LEASE, "w")
        with broker.transaction() as conn:  # a transactional task holding its connection
            [second] = broker.claim(["q"], 1, LEASE, "w")
            assert broker.heartbeat([first.claim], LEASE) == []
            broker.ack_on(conn, first.claim, "1")
        broker.ack(second.claim)


# ---- retention -----------------------------------------------------------------------------------
def _finished(pg: PostgresBroker, count: int, how: str = "ack") -> list[int]:
    jobs = pg.enqueue([spec() for _ in range(count)])
    claims = [c.claim for c in pg.claim(["q"], count, LEASE, "w")]
    if how == "ack":
        outcomes: list[Any] = [Succeeded(c, "null") for c in claims]
    else:
        from sluicegate.job import ErrorInfo

        outcomes = [Buried(c, ErrorInfo("E", "boom")) for c in claims]
    assert pg.record([], outcomes) == []
    return [j.id for j in jobs]


class TestPrune:
    def test_prune_deletes_only_finished_jobs_past_retention(
        self, pg: PostgresBroker, clock: FakeClock
    ) -> None:
        old_ok = _finished(pg, 7)
        old_dead = _finished(pg, 2, how="fail")
        old_cancelled = pg.cancel(pg.enqueue([spec(queue="c")])[0].id).id
        unfinished = [j.id for j in pg.enqueue([spec(queue="u"), spec(queue="u", delay=1e6)])]
        held = pg.enqueue([spec(queue="h")])[0].id
        pg.claim(["h"], 1, 1e6, "w")
        clock.advance(200)
        recent_ok = _finished(pg, 2)
        clock.advance(50)
        retention = Retention(succeeded=100, cancelled=100, dead=1000)
        assert pg.prune(retention, batch=3) == 7 + 1  # old succeeded in batches, the cancelled
        gone = set(old_ok) | {old_cancelled}
        for job_id in [*old_ok, *old_dead, old_cancelled, *unfinished, held, *recent_ok]:
            assert (pg.get_job(job_id) is None) == (job_id in gone), job_id
        assert pg.prune(retention, batch=3) == 0
        clock.advance(1000)
        assert pg.prune(retention) == 2 + 2  # now the dead and the recent succeeded
        assert {j.id for j in pg.list_jobs()} == {*unfinished, held}

    def test_concurrent_pruners_do_not_double_count(self, open_pg: Any, clock: FakeClock) -> None:
        pg = open_pg()
        ids = _finished(pg, 1500)
        clock.advance(10)
        pruners = [open_pg() for _ in range(3)]
        counts = [0] * len(pruners)
        barrier = threading.Barrier(len(pruners))

        def prune(i: int) -> None:
            barrier.wait(10)
            counts[i] = pruners[i].prune(Retention(succeeded=1), batch=40)

        threads = [threading.Thread(target=prune, args=(i,)) for i in range(len(pruners))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert sum(counts) == len(ids), counts
        assert pg.list_jobs(limit=10_000) == []


# ---- writes whose fate the broker could not see ----------------------------------------------
def _break_next_commit(pg: PostgresBroker, landed: bool) -> None:
    """The next record of ``pg`` reports a lost connection after its COMMIT was sent;
    ``landed``: the server had committed it anyway (the reply was lost), else it was
    rolled back. (A record is BEGIN, its writes and COMMIT in one pipeline on a
    connection of ``single``.)"""
    original = pg._db.single

    class Committing:
        """The record's connection; its COMMIT becomes a ROLLBACK when it did not land."""

        def __init__(self, conn: Any) -> None:
            self._conn = conn

        def __getattr__(self, name: str) -> Any:
            return getattr(self._conn, name)

        def execute(self, query: Any, params: Any = None) -> Any:
            if query == "COMMIT" and not landed:
                query = "ROLLBACK"
            return self._conn.execute(query, params)

    @contextlib.contextmanager
    def broken() -> Iterator[Any]:
        pg._db.single = original  # type: ignore[method-assign]
        with original() as conn:
            yield Committing(conn)
        raise BrokerUnavailable("connection lost at COMMIT")

    pg._db.single = broken  # type: ignore[method-assign]


class TestUnknownFate:
    @pytest.mark.parametrize("landed", [True, False])
    @pytest.mark.parametrize("outcome", ["ack", "fail_retry", "fail_dead"])
    def test_a_retried_outcome_finds_its_own_write(
        self, pg: PostgresBroker, open_pg: Any, landed: bool, outcome: str
    ) -> None:
        from sluicegate.job import ErrorInfo

        job = pg.enqueue([spec()])[0]
        claim = pg.claim(["q"], 1, LEASE, "w")[0].claim
        error = ErrorInfo("E", "boom")
        report = {
            "ack": Succeeded(claim, '"ok"'),
            "fail_retry": Retried(claim, error, 5.0),
            "fail_dead": Buried(claim, error),
        }[outcome]
        _break_next_commit(pg, landed)
        with pytest.raises(BrokerUnavailable):
            pg.record([claim], [report])
        assert pg.record([claim], [report]) == []  # done once, whichever way it went
        state = {"ack": S.SUCCEEDED, "fail_retry": S.SCHEDULED, "fail_dead": S.DEAD}[outcome]
        settled = pg.get_job(job.id)
        assert settled is not None and settled.state is state and settled.attempts == 1
        assert pg.record([], [report]) == []  # reported again: still its own write
        assert pg.get_job(job.id) == settled  # and nothing was written twice
        # Another handle never wrote it: there the ended claim is refused, as on every broker.
        assert open_pg().record([], [report]) == [claim]

    def test_a_claim_recovered_meanwhile_is_lost(
        self, pg: PostgresBroker, clock: FakeClock
    ) -> None:
        jobs = pg.enqueue([spec(max_attempts=1), spec(max_attempts=2)])
        claims = [c.claim for c in pg.claim(["q"], 2, 10, "w")]
        _break_next_commit(pg, landed=False)
        with pytest.raises(BrokerUnavailable):
            pg.record(claims, [])
        clock.advance(11)
        recovery = pg.recover_expired()
        assert (recovery.dead, recovery.requeued) == ([jobs[0].id], [jobs[1].id])
        assert pg.record([], [Succeeded(c, "1") for c in claims]) == claims
        assert [pg.get_job(j.id).state for j in jobs] == [S.DEAD, S.READY]  # type: ignore[union-attr]

    def test_late_reports_after_a_transactional_ack_are_not_lost(self, pg: PostgresBroker) -> None:
        pg.enqueue([spec(), spec()])
        mine, other = (c.claim for c in pg.claim(["q"], 2, LEASE, "w"))
        with pg.transaction() as conn:
            pg.ack_on(conn, mine, '"tx"')
        # The worker's start and a heartbeat arrive after the task's commit.
        assert pg.record([mine], []) == [] and pg.heartbeat([mine], LEASE) == []
        assert pg.record([], [Succeeded(mine, '"again"')]) == []  # nothing written twice
        assert pg.get_job(mine.job_id).result == "tx"  # type: ignore[union-attr]
        pg.ack(other)
        # A plain ack ended it: fencing as usual.
        assert pg.record([other], []) == [other] and pg.heartbeat([other], LEASE) == [other]

    def test_a_start_waiting_on_the_transactions_row_lock(
        self, pg: PostgresBroker, sql: Any
    ) -> None:
        pg.enqueue([spec()])
        claim = pg.claim(["q"], 1, LEASE, "w")[0].claim
        lost: list[list[Claim]] = []
        with pg.transaction() as conn:
            pg.ack_on(conn, claim, '"tx"')  # the row stays locked until the commit
            holder = conn.info.backend_pid
            start = threading.Thread(target=lambda: lost.append(pg.record([claim], [])))
            start.start()
            # The server's word that the start waits for this transaction's lock.
            wait_for(
                lambda: _blocked_by(sql, holder) or not start.is_alive(),
                what="the start to wait on the row lock",
            )
            assert start.is_alive(), "the start should wait for the task's transaction"
        start.join(10)
        assert lost == [[]]
        assert pg.get_job(claim.job_id).state is S.SUCCEEDED  # type: ignore[union-attr]
