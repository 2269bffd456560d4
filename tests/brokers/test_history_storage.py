"""Where a job's history is written, on the SQL brokers: only by the statements that take
a job off the happy path, each through the dialect's one fragment (fragment_history), and
never by an enqueue, a claim, a start, a heartbeat or an ack, whose rows keep it NULL.
(What each entry says: the conformance suite's ``history`` cases.)"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from sluicegate.brokers.sqlfiles import FRAGMENT, blocks
from sluicegate.brokers.sqlite import SQLiteBroker
from sluicegate.job import ErrorInfo
from sluicegate.outcomes import Buried, Retried, Succeeded
from sluicegate.testing import FakeClock
from support.specs import spec

OFF_THE_HAPPY_PATH = {
    "sqlite": {"fail_retry", "fail_dead", "release", "recover_expired", "recover_worker",
               "cancel", "revive", "expire_due"},
    "postgresql": {"fail_retry", "fail_dead", "release", "recover_expired", "recover_worker",
                   "cancel", "revive", "cancel_matching", "revive_matching"},
}  # fmt: skip
WRITES_HISTORY = re.compile(r"\bhistory\s*=")


@pytest.mark.parametrize("dialect", ["sqlite", "postgresql"])
def test_only_the_statements_off_the_happy_path_write_it(dialect: str) -> None:
    writing = set()
    for block in blocks(dialect):
        if block.name.startswith(FRAGMENT):
            continue
        writes = WRITES_HISTORY.findall(block.sql)
        if writes:
            writing.add(block.name)
            calls = re.findall(r"\bhistory\s*=\s*\{fragment_history\(", block.sql)
            assert len(calls) == len(writes) == 1, (block.name, block.sql)
    assert writing == OFF_THE_HAPPY_PATH[dialect]
    [fragment] = [b for b in blocks(dialect) if b.name == "fragment_history"]
    assert fragment.parameter == "entry" and "{history_cap}" in fragment.sql


def run_happy_and_not(broker: Any) -> tuple[list[int], list[int]]:
    """Jobs through the happy path (enqueued, claimed, heartbeats, started, acked; a due
    delayed one too), and jobs failed or released; returns (happy ids, other ids)."""
    happy = broker.enqueue([spec() for _ in range(4)]) + broker.enqueue([spec(unique_key="k")])
    claimed = broker.claim(["q"], 5, 30.0, "w")
    claims = [c.claim for c in claimed]
    broker.heartbeat(claims, 30.0)
    broker.record(claims[:2], [])
    assert broker.record(claims[2:], [Succeeded(c, "null") for c in claims]) == []
    other = broker.enqueue([spec(max_attempts=5) for _ in range(3)])
    claims = [c.claim for c in broker.claim(["q"], 3, 30.0, "w")]
    boom = ErrorInfo("E", "boom")
    broker.record((), [Retried(claims[0], boom, 60.0), Buried(claims[1], boom)])
    broker.release(claims[2:])
    return [j.id for j in happy], [j.id for j in other]


def test_sqlite_the_happy_path_leaves_it_null(tmp_path: Path) -> None:
    broker = SQLiteBroker(f"sqlite:///{tmp_path / 'jobs.db'}", clock=FakeClock())
    try:
        happy, other = run_happy_and_not(broker)
        with broker._db.read() as conn:
            rows = dict(conn.execute("SELECT id, history IS NULL FROM jobs").fetchall())
    finally:
        broker.close()
    assert [rows[i] for i in happy] == [1] * len(happy)
    assert [rows[i] for i in other] == [0] * len(other)


def test_postgres_the_happy_path_leaves_it_null(pg_url: str) -> None:
    psycopg = pytest.importorskip("psycopg")
    from sluicegate.brokers.postgres import PostgresBroker

    broker = PostgresBroker(pg_url, clock=FakeClock())
    try:
        happy, other = run_happy_and_not(broker)
        with psycopg.connect(broker.dsn) as conn:
            table = f"{broker.settings.quoted_schema}.jobs"
            rows = dict(conn.execute(f"SELECT id, history IS NULL FROM {table}").fetchall())
    finally:
        broker.close()
    assert [rows[i] for i in happy] == [True] * len(happy)
    assert [rows[i] for i in other] == [False] * len(other)
