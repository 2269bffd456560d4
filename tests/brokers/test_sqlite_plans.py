"""The SQLite broker's signal reads (queue depths, arrivals), sampled by every worker every
few seconds, and the recovery of a dead worker's jobs never read a finished job: their
plans scan only partial indexes of unfinished jobs, and otherwise seek (a range of state,
or of the primary key)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from sluicegate.brokers.sqlite import SQLiteBroker
from sluicegate.limits import encode_needs
from sluicegate.outcomes import Succeeded
from sluicegate.testing import FakeClock
from support.specs import spec

UNFINISHED_ONLY = {"jobs_ready", "jobs_gated", "jobs_scheduled", "jobs_leased", "jobs_holding"}


@pytest.fixture
def sqlite(tmp_path: Path) -> Iterator[SQLiteBroker]:
    """A history of finished jobs and a few of every unfinished state, analysed."""
    broker = SQLiteBroker(f"sqlite:///{tmp_path / 'jobs.db'}", clock=FakeClock())
    broker.enqueue([spec() for _ in range(2000)])
    claims = [c.claim for c in broker.claim(["q"], 2000, 30.0, "w")]
    assert broker.record([], [Succeeded(c, "null") for c in claims]) == []
    broker.enqueue([spec(), spec(queue="other"), spec(delay=60.0)])
    broker.enqueue([spec(limits=encode_needs([("db", None, 1)]))])
    broker.enqueue([spec(queue="held") for _ in range(2)])
    broker.start(broker.claim(["held"], 2, 30.0, "w")[0].claim)
    with broker._db.write() as conn:
        conn.execute("ANALYZE")
    yield broker
    broker.close()


def plan(broker: SQLiteBroker, name: str) -> list[str]:
    params = {"now": broker._now(), "queues": '["q", "held"]', "after": 5, "scan": 100}
    params.update(worker="w", error="{}")
    with broker._db.read() as conn:
        rows = conn.execute("EXPLAIN QUERY PLAN " + broker._queries[name], params).fetchall()
    return [row[3] for row in rows]


@pytest.mark.parametrize("name", ["queue_depths", "queue_depths_of", "arrivals", "last_job_id"])
def test_signal_reads_touch_no_finished_job(sqlite: SQLiteBroker, name: str) -> None:
    assert_unfinished_only(plan(sqlite, name))


def test_a_dead_workers_recovery_touches_no_finished_job(sqlite: SQLiteBroker) -> None:
    """recover_worker (a worker of the host died) reads held jobs only, whatever the history."""
    lines = plan(sqlite, "recover_worker")
    # What it buries is stamped for the finished counts, as every finishing write is: one
    # seek to the top of jobs_settling for the next number (tests/brokers/test_stats_plans.py).
    stamp = "SEARCH jobs USING COVERING INDEX jobs_settling (finish_seq>?)"
    assert stamp in lines, lines
    assert_unfinished_only([ln for ln in lines if ln != stamp])
    assert any("jobs_state_queue (state=?)" in ln or "jobs_leased" in ln for ln in lines), lines


def assert_unfinished_only(lines: list[str]) -> None:
    reads = [ln for ln in lines if re.match(r"(SCAN|SEARCH) jobs\b", ln)]
    assert reads, lines
    for line in reads:
        index = re.search(r"USING (?:COVERING )?INDEX (\w+)", line)
        if line.startswith("SCAN"):
            assert index is not None and index.group(1) in UNFINISHED_ONLY, lines
        elif index is not None and index.group(1) not in UNFINISHED_ONLY:
            assert "(state=?" in line, lines  # a range of one unfinished state at a time


def test_depths_read_the_partial_indexes(sqlite: SQLiteBroker) -> None:
    text = "\n".join(plan(sqlite, "queue_depths"))
    assert "jobs_ready" in text and "jobs_gated" in text, text
    assert "COVERING INDEX jobs_state_queue (state=?)" in text, text  # claimed and running


@pytest.mark.parametrize("name", ["arrivals", "last_job_id"])
def test_arrivals_read_the_primary_key(sqlite: SQLiteBroker, name: str) -> None:
    lines = [ln for ln in plan(sqlite, name) if " jobs" in ln]
    if name == "arrivals":
        assert lines == ["SEARCH jobs USING INTEGER PRIMARY KEY (rowid>?)"], lines
    else:
        assert lines == ["SEARCH jobs"], lines  # max(id): the last key of the table's b-tree


def test_the_plans_answer_as_the_broker_does(sqlite: SQLiteBroker) -> None:
    depths = sqlite.queue_depths()
    assert {q: (d.ready, d.scheduled, d.claimed, d.running) for q, d in depths.items()} == {
        "q": (2, 1, 0, 0),
        "other": (1, 0, 0, 0),
        "held": (0, 0, 1, 1),
    }
    last, counts = sqlite.arrivals(2000)
    assert counts == {"q": 3, "other": 1, "held": 2} and last == 2006


def test_every_claims_expiry_step_touches_no_finished_job(sqlite: SQLiteBroker) -> None:
    """expire_due runs in every claim: a seek of jobs_expiring (waiting jobs that have an
    expiry), never a read of the history, nor of waiting jobs without one."""
    params = {"now": sqlite._now(), "limit": 1000}
    with sqlite._db.read() as conn:
        rows = conn.execute("EXPLAIN QUERY PLAN " + sqlite._queries["expire_due"], params)
        lines = [row[3] for row in rows.fetchall()]
    stamp = "SEARCH jobs USING COVERING INDEX jobs_settling (finish_seq>?)"
    assert any("INDEX jobs_expiring (expires_at>? AND expires_at<?)" in ln for ln in lines), lines
    rest = [ln for ln in lines if ln != stamp and "jobs_expiring" not in ln]
    assert not [ln for ln in rest if "jobs" in ln and "PRIMARY KEY" not in ln], lines
