"""``Broker.shed`` on every broker kind (memory, SQLite, PostgreSQL): it cancels the ready
job that would start last (lowest priority = highest number, then latest run_at, then
youngest), records who did it, never touches a claimed job or a more urgent one."""

from __future__ import annotations

from sluicegate.brokers.base import Broker
from sluicegate.job import JobState
from sluicegate.testing import FakeClock
from sluicegate.testing.conformance.helpers import get, put, take


def test_shed_picks_lowest_priority_then_youngest(broker: Broker, clock: FakeClock) -> None:
    urgent = put(broker, priority=0)
    low_old = put(broker, priority=5)
    clock.advance(1.0)
    low_young = put(broker, priority=5)
    clock.advance(1.0)
    normal_young = put(broker, priority=1)
    other_queue = put(broker, queue="other", priority=9)

    shed = broker.shed("q", 0, by="shed: queue full")
    assert shed is not None and shed.id == low_young.id
    assert shed.state is JobState.CANCELLED
    entry = get(broker, low_young.id).history[-1]
    assert entry["event"] == "cancelled" and entry["by"] == "shed: queue full"

    assert broker.shed("q", 0, by="shed: queue full").id == low_old.id  # type: ignore[union-attr]
    assert broker.shed("q", 0, by="shed: queue full").id == normal_young.id  # type: ignore[union-attr]
    for job in (urgent, other_queue):
        assert get(broker, job.id).state is JobState.READY


def test_shed_never_takes_a_more_urgent_job(broker: Broker) -> None:
    urgent = put(broker, priority=0)
    assert broker.shed("q", 3, by="shed: queue full") is None  # the new job is less urgent
    assert get(broker, urgent.id).state is JobState.READY
    assert broker.shed("q", 0, by="shed: queue full") is not None  # equal: the youngest goes


def test_shed_never_cancels_a_claimed_job(broker: Broker) -> None:
    held = put(broker, priority=9)
    take(broker)
    assert broker.shed("q", 0, by="shed: queue full") is None
    assert get(broker, held.id).state is JobState.CLAIMED
    assert broker.shed("empty", 0, by="shed: queue full") is None
