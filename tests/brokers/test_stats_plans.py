"""``stats()`` and the operator listings never read the whole jobs table: their plans, on
SQLite (EXPLAIN QUERY PLAN) and PostgreSQL (the plans the broker's connections use: custom
plans for the values given), over a history of finished jobs, analysed. The statements
that finish jobs stamp them with an index seek (SQLite) or their transaction id
(PostgreSQL), never a count."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sluicegate.brokers import base
from sluicegate.brokers.sqlite import SQLiteBroker
from sluicegate.job import HELD, TERMINAL, ErrorInfo, JobState
from sluicegate.outcomes import Buried, Succeeded
from sluicegate.testing import FakeClock
from support.specs import spec

BOOM = ErrorInfo("ValueError", "boom")


def fill(broker: Any) -> None:
    """3000 finished jobs (settled), 20 finished since (not settled), a few unfinished."""
    for queue, n in (("q", 2500), ("other", 500)):
        broker.enqueue([spec(queue=queue) for _ in range(n)])
        claims = [c.claim for c in broker.claim([queue], n, 30.0, "w")]
        outcomes = [Buried(c, BOOM) if i % 50 == 0 else Succeeded(c, "null") for i, c in
                    enumerate(claims)]  # fmt: skip
        assert broker.record([], outcomes) == []
    broker.cancel(broker.enqueue([spec()])[0].id)
    saved = base.SETTLE_AT
    base.SETTLE_AT = 0
    try:
        broker.stats()  # settles
    finally:
        base.SETTLE_AT = saved
    broker.enqueue([spec() for _ in range(20)])
    claims = [c.claim for c in broker.claim(["q"], 20, 30.0, "w")]
    assert broker.record([], [Succeeded(c, "null") for c in claims]) == []
    broker.enqueue([spec(), spec(queue="other"), spec(delay=60.0), spec(queue="held")])
    broker.start(broker.claim(["held"], 1, 30.0, "w")[0].claim)


# ---- SQLite ----------------------------------------------------------------------------------
@pytest.fixture
def sqlite(tmp_path: Path) -> Iterator[SQLiteBroker]:
    broker = SQLiteBroker(f"sqlite:///{tmp_path / 'jobs.db'}", clock=FakeClock())
    fill(broker)
    with broker._db.write() as conn:
        conn.execute("ANALYZE")
    yield broker
    broker.close()


def sqlite_plan(broker: SQLiteBroker, name: str, **params: Any) -> list[str]:
    values = {"now": broker._now(), "batch": "[]", "chunk": 1000, "bound": 5, "id": 1,
              "state": "succeeded", "queue": "q", "limit": 100, "token": 1, "cutoff": 0.0,
              "upto": 2**63 - 1, "ids": "[1]", "by": None, **params}  # fmt: skip
    with broker._db.read() as conn:
        rows = conn.execute("EXPLAIN QUERY PLAN " + broker._queries[name], values).fetchall()
    return [row[3] for row in rows]


def job_reads(lines: list[str]) -> list[str]:
    return [ln for ln in lines if re.match(r"(SCAN|SEARCH) jobs\b", ln)]


@pytest.mark.parametrize("name", ["finished_counts", "settle_bound", "settle"])
def test_sqlite_stats_read_only_the_unsettled_range(sqlite: SQLiteBroker, name: str) -> None:
    lines = sqlite_plan(sqlite, name)
    reads = job_reads(lines)
    assert reads, lines
    for line in reads:
        assert line.startswith("SEARCH jobs USING COVERING INDEX jobs_settling (finish_seq>?"), (
            lines
        )


@pytest.mark.parametrize("name", ["ack", "fail_dead", "cancel", "recover_expired"])
def test_sqlite_finishing_writes_stamp_with_a_seek(sqlite: SQLiteBroker, name: str) -> None:
    reads = [ln for ln in job_reads(sqlite_plan(sqlite, name)) if "jobs_settling" in ln]
    assert reads == ["SEARCH jobs USING COVERING INDEX jobs_settling (finish_seq>?)"], reads


@pytest.mark.parametrize("state", list(JobState))
def test_sqlite_listings_read_one_range_newest_first(sqlite: SQLiteBroker, state: JobState) -> None:
    lines = sqlite_plan(sqlite, "list_jobs_of_state_queue", state=state.value)
    assert lines == ["SEARCH jobs USING INDEX jobs_state_queue (state=? AND queue=? AND rowid<?)"]
    lines = sqlite_plan(sqlite, "queues_of_state", state=state.value)
    for line in job_reads(lines):
        assert line.startswith("SEARCH jobs USING COVERING INDEX jobs_state_queue (state=?"), lines


def test_sqlite_unsettling_reads_one_job(sqlite: SQLiteBroker) -> None:
    assert job_reads(sqlite_plan(sqlite, "unsettle_revived")) == [
        "SEARCH jobs USING INTEGER PRIMARY KEY (rowid=?)"
    ]


def test_sqlite_the_plans_answer_as_a_count_does(sqlite: SQLiteBroker) -> None:
    counts = {q: s.counts for q, s in sqlite.stats().queues.items()}
    assert counts == {
        "q": {JobState.SUCCEEDED: 2470, JobState.DEAD: 50, JobState.CANCELLED: 1,
              JobState.READY: 1, JobState.SCHEDULED: 1},
        "other": {JobState.SUCCEEDED: 490, JobState.DEAD: 10, JobState.READY: 1},
        "held": {JobState.RUNNING: 1},
    }  # fmt: skip


# ---- PostgreSQL ------------------------------------------------------------------------------
@pytest.fixture
def pg(pg_url: str) -> Iterator[Any]:
    psycopg = pytest.importorskip("psycopg")
    from sluicegate.brokers.postgres import PostgresBroker

    broker = PostgresBroker(pg_url, clock=FakeClock())
    fill(broker)
    with psycopg.connect(broker.dsn, autocommit=True) as conn:
        conn.execute(f"ANALYZE {broker.settings.quoted_schema}.jobs")
    yield broker
    broker.close()


def pg_plan(broker: Any, name: str, analyze: bool = True, **params: Any) -> str:
    """The plan of ``name`` as the broker runs it: custom plans (the values given)."""
    import psycopg

    values = {"now": None, "state": "succeeded", "queue": "q", "limit": 100, "id": 1,
              "older_than": 3600.0, "batch": 1000, "upto": 2**63 - 1, **params}  # fmt: skip
    with psycopg.connect(broker.dsn) as conn:
        conn.execute("SET plan_cache_mode = force_custom_plan")
        if "%(xmax)s" in broker._queries[name]:
            values.update(broker._horizon(conn))
        explain = "EXPLAIN (ANALYZE) " if analyze else "EXPLAIN "
        rows = conn.execute(explain + broker._queries[name], values).fetchall()
        conn.rollback()
    return "\n".join(r[0] for r in rows)


@pytest.mark.parametrize("name", ["finished_counts", "settle"])
def test_postgres_stats_read_only_the_unsettled_range(pg: Any, name: str) -> None:
    text = pg_plan(pg, name)
    assert "jobs_settling" in text, text
    assert "Seq Scan on jobs" not in text, text
    assert "jobs_pkey" not in text, text


@pytest.mark.parametrize("state", list(JobState))
def test_postgres_listings_read_indexes_only(pg: Any, state: JobState) -> None:
    """(Every filter of the listings: tests/brokers/test_listing_plans.py.)"""
    for queue in ("q", "none"):
        text = pg_plan(pg, "list_jobs_of_state_queue", state=state.value, queue=queue)
        assert "Seq Scan on jobs" not in text, text
        if state in TERMINAL and queue == "none":
            assert "jobs_listing" in text, text  # (a queue without scheduled jobs: any)
    name = "list_jobs_of_state" if state in HELD else "queues_of_state"
    text = pg_plan(pg, name, state=state.value)
    assert "Seq Scan on jobs" not in text, text
    if state in TERMINAL:
        assert "jobs_listing" in text, text


def test_postgres_unsettling_a_revived_job_reads_that_job(pg: Any) -> None:
    text = pg_plan(pg, "unsettle_revived")
    assert "Index Scan using jobs_pkey on jobs" in text, text
    assert "Seq Scan on jobs" not in text, text


def test_postgres_the_plans_answer_as_a_count_does(pg: Any) -> None:
    counts = {q: s.counts for q, s in pg.stats().queues.items()}
    assert counts == {
        "q": {JobState.SUCCEEDED: 2470, JobState.DEAD: 50, JobState.CANCELLED: 1,
              JobState.READY: 1, JobState.SCHEDULED: 1},
        "other": {JobState.SUCCEEDED: 490, JobState.DEAD: 10, JobState.READY: 1},
        "held": {JobState.RUNNING: 1},
    }  # fmt: skip
