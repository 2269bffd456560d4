"""Every filter combination of ``list_jobs`` (state, queue, task, unique key, and a deep
``before_id``) reads index ranges only: never the table, never a full index, and on
PostgreSQL never the primary key walked past rows that do not match. The bulk actions
(``retry_matching``, ``cancel_matching``) pick their jobs the same way. Each statement a
listing runs is recorded as the broker runs it (its own connection, its own parameters)
and explained: SQLite with EXPLAIN QUERY PLAN, PostgreSQL with EXPLAIN ANALYZE on the
custom plan the broker's listing connection makes. The history is built so that a
planner free to walk the primary key would be tempted: an old ready backlog below
thousands of newer finished jobs, one task and one unique key holding most of them."""

from __future__ import annotations

import contextlib
import itertools
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sluicegate.brokers.sqlite import SQLiteBroker
from sluicegate.job import HELD, ErrorInfo, JobState
from sluicegate.outcomes import Buried, Succeeded
from sluicegate.testing import FakeClock
from support.specs import spec

BOOM = ErrorInfo("ValueError", "boom")
S = JobState


def fill(broker: Any) -> int:
    """An old backlog, then 3000 finished jobs (task t0 and key k0 most of them), then a
    fresh backlog and a few held jobs; returns an id deep in the history."""
    broker.enqueue([spec(task="old", queue="old") for _ in range(300)])
    for round_ in range(6):
        jobs = [
            spec(task="t0" if i % 10 else f"t{1 + i % 3}", queue=f"q{i % 3}",
                 unique_key=f"k{i % 20 and 1 + i % 7}-{round_}-{i}" if i % 2 else None)
            for i in range(500)
        ]  # fmt: skip
        broker.enqueue(jobs)
        for queue in ("q0", "q1", "q2"):
            claims = [c.claim for c in broker.claim([queue], 500, 30.0, "w")]
            outcomes = [Buried(c, BOOM) if i % 25 == 0 else Succeeded(c, "null") for i, c in
                        enumerate(claims)]  # fmt: skip
            assert broker.record([], outcomes) == []
        broker.cancel(broker.enqueue([spec(queue="q1", task="t2")])[0].id)
    deep = broker.list_jobs(limit=1500)[-1].id
    broker.enqueue([spec(queue=f"q{i % 3}", task=f"t{i % 4}") for i in range(200)])
    broker.enqueue([spec(queue="q1", task="t1", delay=600.0) for _ in range(50)])
    broker.enqueue([spec(queue="held", task=f"t{i}") for i in range(4)])
    held = broker.claim(["held"], 4, 30.0, "w")
    broker.record([c.claim for c in held[:2]], [])
    broker.enqueue([spec(task="t1", queue="q1", unique_key="k0-live")])
    return deep


FILTERS = list(
    itertools.product(
        (None, *JobState),  # state
        (None, "q1"),  # queue
        (None, "t1"),  # task
        (None, "k0-live"),  # unique key
        (False, True),  # at depth
    )
)


@contextlib.contextmanager
def recording(broker: Any, seen: list[tuple[Any, dict[str, Any]]]) -> Iterator[None]:
    """Every statement the broker's listings run, with its parameters, into ``seen``."""
    real = broker._listing

    @contextlib.contextmanager
    def listing() -> Iterator[Any]:
        with real() as conn:
            yield Recorder(conn, seen)

    broker._listing = listing
    try:
        yield
    finally:
        del broker._listing


class Recorder:
    def __init__(self, conn: Any, seen: list[tuple[Any, dict[str, Any]]]) -> None:
        self.conn, self.seen = conn, seen

    def execute(self, query: Any, params: dict[str, Any]) -> Any:
        self.seen.append((query, dict(params)))
        return self.conn.execute(query, params)


def statements(broker: Any, deep: int) -> list[tuple[Any, dict[str, Any]]]:
    """Each distinct statement every filter combination runs (the listing checked too)."""
    seen: list[tuple[Any, dict[str, Any]]] = []
    every = broker.list_jobs(limit=10**6)
    with recording(broker, seen):
        for state, queue, task, key, at_depth in FILTERS:
            before = deep if at_depth else None
            got = broker.list_jobs(state, queue, 20, task=task, unique_key=key, before_id=before)
            want = [
                j
                for j in every
                if (state is None or j.state is state)
                and (queue is None or j.queue == queue)
                and (task is None or j.task == task)
                and (key is None or j.unique_key == key)
                and (before is None or j.id < before)
            ][:20]
            assert got == want
    unique = {(q.name, tuple(sorted(p.items()))): (q, p) for q, p in seen}
    return list(unique.values())


# ---- SQLite ---------------------------------------------------------------------------------
SQLITE_READS = {
    # statement: the index its every read of jobs must seek
    "list_jobs": "INTEGER PRIMARY KEY",
    "list_jobs_of_state_queue": "jobs_state_queue",
    "queues_of_state": "jobs_state_queue",
    "list_jobs_of_task": "jobs_task",
    "queues_of_task_state": "jobs_task",
    "list_held_of_task": "jobs_leased",
    "list_jobs_of_unique_key": "jobs_unique_key",
}


@pytest.fixture
def sqlite(tmp_path: Path) -> Iterator[tuple[SQLiteBroker, int]]:
    broker = SQLiteBroker(f"sqlite:///{tmp_path / 'jobs.db'}", clock=FakeClock())
    deep = fill(broker)
    with broker._db.write() as conn:
        conn.execute("ANALYZE")
    yield broker, deep
    broker.close()


def test_sqlite_every_listing_reads_index_ranges(sqlite: tuple[SQLiteBroker, int]) -> None:
    broker, deep = sqlite
    names = set()
    for query, params in statements(broker, deep):
        with broker._listing() as conn:
            lines = [r[3] for r in conn.execute("EXPLAIN QUERY PLAN " + query, params)]
        names.add(query.name)
        index = SQLITE_READS[query.name]
        reads = [ln for ln in lines if re.match(r"(SCAN|SEARCH) jobs\b", ln)]
        assert reads, lines
        for line in reads:
            if index == "jobs_leased":  # held jobs: as many as the slots, read whole
                assert re.fullmatch(r"(SCAN|SEARCH) jobs USING INDEX jobs_leased.*", line), lines
            else:
                assert line.startswith("SEARCH jobs USING ") and index in line, lines
        if index == "jobs_leased":
            continue
        assert not any("TEMP B-TREE" in ln for ln in lines), lines  # the index gives the order
        if params.get("upto", 2**63 - 1) < 2**63 - 1 and query.name.startswith("list_"):
            assert any("rowid<" in ln for ln in reads), lines  # keyset: the page starts by a seek
    assert names == set(SQLITE_READS)


# ---- PostgreSQL -----------------------------------------------------------------------------
PG_READS = {
    "list_jobs": "jobs_pkey",
    "list_jobs_of_state_queue": "jobs_listing",  # a held state: jobs_leased
    "list_jobs_of_state": "jobs_leased",
    "queues_of_state": "jobs_listing",
    "list_jobs_of_task": "jobs_task",
    "queues_of_task_state": "jobs_task",
    "list_held_of_task": "jobs_leased",
    "list_jobs_of_unique_key": "jobs_unique_key",
}


@pytest.fixture
def pg(pg_url: str) -> Iterator[tuple[Any, int]]:
    psycopg = pytest.importorskip("psycopg")
    from sluicegate.brokers.postgres import PostgresBroker

    broker = PostgresBroker(pg_url, clock=FakeClock())
    deep = fill(broker)
    with psycopg.connect(broker.dsn, autocommit=True) as conn:
        conn.execute(f"VACUUM ANALYZE {broker.settings.quoted_schema}.jobs")
    yield broker, deep
    broker.close()


def test_postgres_every_listing_reads_index_ranges(pg: tuple[Any, int]) -> None:
    broker, deep = pg
    names = set()
    for query, params in statements(broker, deep):
        with broker._listing() as conn:  # its settings: custom plans, no bitmap scans
            rows = conn.execute("EXPLAIN (ANALYZE) " + query, params).fetchall()
        text = "\n".join(r[0] for r in rows)
        names.add(query.name)
        index = PG_READS[query.name]
        if query.name == "list_jobs_of_state_queue" and params["state"] in HELD:
            index = "jobs_leased"
        assert "Seq Scan" not in text, text
        assert index in text, (query.name, params, text)
        if index != "jobs_pkey":
            assert "jobs_pkey" not in text, text
        else:  # from the end, or from the page's bound down: a range, no filter
            assert "Index Scan Backward using jobs_pkey" in text, text
            assert "Filter" not in text, text
        if index == "jobs_leased":
            continue
        assert "Sort" not in text, text  # the index gives the order
        if query.name.startswith("list_") and params.get("upto", 2**63 - 1) < 2**63 - 1:
            assert re.search(r"Index Cond: .*id\b", text), text  # keyset: a seek
    assert names == set(PG_READS)


# ---- bulk actions -------------------------------------------------------------------------
BULK = list(itertools.product((S.READY, S.RUNNING, S.DEAD), (None, "q1"), (None, "t1")))


def test_sqlite_bulk_actions_pick_from_index_ranges(sqlite: tuple[SQLiteBroker, int]) -> None:
    """Each statement the bulk actions run, recorded on the writer connection, explained."""
    broker, _ = sqlite
    seen: list[tuple[Any, dict[str, Any]]] = []
    real = broker._db.write

    @contextlib.contextmanager
    def write(*args: Any, **kwargs: Any) -> Iterator[Any]:
        with real(*args, **kwargs) as conn:
            yield Recorder(conn, seen)

    broker._db.write = write  # type: ignore[method-assign]
    try:
        for state, queue, task in BULK:
            if state is S.DEAD:
                broker.retry_matching(queue=queue, task=task, limit=5)
            else:
                broker.cancel_matching(state=state, queue=queue, task=task, limit=5)
    finally:
        del broker._db.write
    names = set()
    for query, params in {(q.name, tuple(sorted(p.items()))): (q, p) for q, p in seen}.values():
        with broker._db.read() as conn:
            lines = [r[3] for r in conn.execute("EXPLAIN QUERY PLAN " + query, params)]
        names.add(query.name)
        reads = [ln for ln in lines if re.match(r"(SCAN|SEARCH) (jobs|u)\b", ln)]
        for line in reads:
            assert line.startswith("SEARCH "), lines
            if query.name in ("matching_by_queue", "matching_by_task"):
                index = "jobs_task" if query.name.endswith("task") else "jobs_state_queue"
                assert index in line or "jobs_unique_unfinished" in line, lines
            elif query.name in ("cancel", "revive", "unsettle_revived"):
                assert "PRIMARY KEY" in line or "jobs_settling" in line, lines
    assert {"matching_by_queue", "matching_by_task", "cancel", "revive"} <= names


@pytest.mark.parametrize("name", ["cancel_matching", "revive_matching"])
def test_postgres_bulk_actions_pick_from_index_ranges(pg: tuple[Any, int], name: str) -> None:
    """Explained (and run, then rolled back) with the settings of the broker's transaction
    for a filter (custom plans, no bitmap scans)."""
    import psycopg

    broker, _ = pg
    for state, queue, task in BULK:
        if (name == "revive_matching") != (state is S.DEAD):
            continue
        params = {"state": state.value, "queue": queue, "task": task, "limit": 5, "now": None}
        params["by"] = "ops"
        with psycopg.connect(broker.dsn) as conn:
            conn.execute("SET plan_cache_mode = force_custom_plan")
            conn.execute("SET enable_bitmapscan = off")
            rows = conn.execute("EXPLAIN (ANALYZE) " + broker._queries[name], params).fetchall()
            conn.rollback()
        text = "\n".join(r[0] for r in rows)
        assert "Seq Scan on jobs" not in text, text  # (stats_horizon is one row)
        index = {S.RUNNING: "jobs_leased"}.get(state, "jobs_task" if task else "jobs_listing")
        assert index in text, (params, text)
        assert "Index Scan using jobs_pkey" in text, text  # the rows picked, by id
        if name == "revive_matching":
            assert "jobs_unique_unfinished" in text, text  # a taken key: one probe
