"""Progress costs no broker write of its own: a running attempt's reports only replace
the latest value the lease keeper holds, and the next batched heartbeat writes it.

Counted honestly: every statement the SQLite broker's writer connection executes is
traced (a real database file, nothing mocked), while a real handle reports 10,000 times."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import pytest

from sluicegate.brokers.sqlite import SQLiteBroker
from sluicegate.context import RunningJob
from sluicegate.errors import BrokerUnavailable
from sluicegate.job import Claim, JobSpec, Progress
from sluicegate.worker.services import LeaseKeeper

LEASE = 30.0


@pytest.fixture
def sqlite_broker(tmp_path: Path) -> Iterator[SQLiteBroker]:
    broker = SQLiteBroker(f"sqlite:///{tmp_path / 'jobs.db'}")
    yield broker
    broker.close()


def _traced(broker: SQLiteBroker) -> list[str]:
    statements: list[str] = []
    broker._db._writer.set_trace_callback(statements.append)
    return statements


def _claimed(broker: SQLiteBroker, n: int = 1) -> list[RunningJob]:
    broker.enqueue([JobSpec("t", "q", "[]", "{}") for _ in range(n)])
    return [RunningJob(c.job, c.claim) for c in broker.claim(["q"], n, LEASE, "w1")]


def test_ten_thousand_reports_cost_no_write_and_one_heartbeat_carries_the_last(
    sqlite_broker: SQLiteBroker,
) -> None:
    (claimed,) = _claimed(sqlite_broker)
    keeper = LeaseKeeper(sqlite_broker, LEASE)
    keeper.hold([claimed.claim])
    handle = RunningJob(claimed.job, claimed.claim, keeper.report_progress)
    statements = _traced(sqlite_broker)

    for i in range(10_000):
        handle.progress(i / 10_000, f"step {i}")
    assert statements == []  # not one statement, let alone one per call
    assert sqlite_broker.get_job(claimed.id).progress is None

    keeper.run(keeper.next_beat)  # the heartbeat, when due
    updates = [s for s in statements if s.lstrip().upper().startswith("UPDATE")]
    assert len(updates) == 1 and "lease_expires_at" in updates[0]
    stored = sqlite_broker.get_job(claimed.id).progress
    assert stored is not None and (stored.fraction, stored.message) == (0.9999, "step 9999")

    statements.clear()
    keeper.run(keeper.next_beat)  # nothing new reported: the lease alone, value kept
    assert len([s for s in statements if s.lstrip().upper().startswith("UPDATE")]) == 1
    assert sqlite_broker.get_job(claimed.id).progress == stored


def test_a_beat_writes_each_held_claim_once_whatever_was_reported(
    sqlite_broker: SQLiteBroker,
) -> None:
    handles = _claimed(sqlite_broker, 3)
    keeper = LeaseKeeper(sqlite_broker, LEASE)
    keeper.hold(h.claim for h in handles)
    statements = _traced(sqlite_broker)
    for n in range(1000):
        for h in handles[:2]:
            RunningJob(h.job, h.claim, keeper.report_progress).progress(n / 1000)
    keeper.run(keeper.next_beat)
    assert len([s for s in statements if s.lstrip().upper().startswith("UPDATE")]) == 3
    got = [sqlite_broker.get_job(h.id).progress for h in handles]
    assert [p.fraction if p else None for p in got] == [0.999, 0.999, None]


def test_a_report_for_a_claim_no_longer_held_is_dropped(sqlite_broker: SQLiteBroker) -> None:
    first, second = _claimed(sqlite_broker, 2)
    keeper = LeaseKeeper(sqlite_broker, LEASE)
    keeper.hold([first.claim, second.claim])
    keeper.report_progress(first.claim, 0.5, "ended before the beat")
    keeper.report_progress(second.claim, 0.7, None)
    keeper.drop([first.claim])  # its outcome was written: no longer ours
    keeper.run(keeper.next_beat)
    assert sqlite_broker.get_job(first.id).progress is None
    assert (sqlite_broker.get_job(second.id).progress or Progress(0)).fraction == 0.7
    keeper.hold([first.claim])  # even if held again, the dropped report is gone
    keeper.run(keeper.next_beat)
    assert sqlite_broker.get_job(first.id).progress is None


class OutageOnce(SQLiteBroker):
    """A real SQLite broker whose next heartbeat fails as an unreachable database would."""

    down = False

    def heartbeat(
        self,
        claims: Sequence[Claim],
        lease: float,
        progress: Mapping[Claim, Progress] | None = None,
    ) -> list[Claim]:
        if self.down:
            self.down = False
            raise BrokerUnavailable("database is unreachable")
        return super().heartbeat(claims, lease, progress)


def test_a_failed_heartbeat_keeps_its_values_for_the_next(tmp_path: Path) -> None:
    broker = OutageOnce(f"sqlite:///{tmp_path / 'jobs.db'}")
    try:
        first, second = _claimed(broker, 2)
        keeper = LeaseKeeper(broker, LEASE)
        keeper.hold([first.claim, second.claim])
        keeper.report_progress(first.claim, 0.3, "before the outage")
        keeper.report_progress(second.claim, 0.1, "before the outage")
        broker.down = True
        with pytest.raises(BrokerUnavailable):
            keeper.run(keeper.next_beat)
        keeper.report_progress(second.claim, 0.2, "during the outage")  # newer: it wins
        keeper.run(keeper.next_beat)
        got = [broker.get_job(h.id).progress for h in (first, second)]
        assert [(p.fraction, p.message) if p else None for p in got] == [
            (0.3, "before the outage"),
            (0.2, "during the outage"),
        ]
    finally:
        broker.close()
