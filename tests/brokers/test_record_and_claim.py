"""record_and_claim: the worker's common turn (write outcomes, take more) on every broker.

Same semantics as record() followed by claim(): fenced outcomes, claims in order, lost
claims reported; brokers may do it in one transaction.
"""

from __future__ import annotations

from test_conformance import BOOM, LEASE, get, put, take

from conftest import FakeClock
from sluicegate.brokers.base import Broker
from sluicegate.job import Claim, JobId, JobState
from sluicegate.outcomes import Failed, Succeeded


def test_records_then_claims_in_order(broker: Broker) -> None:
    first = put(broker, queue="q")
    later = [put(broker, queue="q", priority=p) for p in (5, 1)]
    held = take(broker)
    assert held.job.id == first.id
    lost, claimed = broker.record_and_claim(
        [held.claim], [Succeeded(held.claim, "7")], ["q"], 5, LEASE, "w1"
    )
    assert lost == []
    assert get(broker, first.id).state is JobState.SUCCEEDED
    assert get(broker, first.id).result == 7
    assert [c.job.id for c in claimed] == [later[1].id, later[0].id]  # priority order
    assert all(get(broker, c.job.id).state is JobState.CLAIMED for c in claimed)
    assert all(get(broker, c.job.id).attempts == 1 for c in claimed)


def test_stale_outcomes_are_lost_and_change_nothing(broker: Broker) -> None:
    job = put(broker, queue="q")
    held = take(broker)
    stale = Claim(JobId(job.id), held.claim.token + 1)
    other = put(broker, queue="r")
    lost, claimed = broker.record_and_claim([], [Failed(stale, BOOM, None)], ["r"], 1, LEASE, "w1")
    assert lost == [stale]
    assert get(broker, job.id).state is JobState.CLAIMED  # untouched
    assert [c.job.id for c in claimed] == [other.id]


def test_nothing_to_claim_still_records(broker: Broker) -> None:
    job = put(broker, queue="q")
    held = take(broker)
    lost, claimed = broker.record_and_claim(
        [], [Failed(held.claim, BOOM, 30.0)], ["q"], 4, LEASE, "w1"
    )
    assert (lost, claimed) == ([], [])
    after = get(broker, job.id)
    assert after.state is JobState.SCHEDULED
    assert after.last_error == BOOM


def test_due_jobs_are_claimed_in_claim_order(broker: Broker, clock: FakeClock) -> None:
    held_job = put(broker, queue="q", priority=-1)
    held = take(broker)
    assert held.job.id == held_job.id
    ready = put(broker, queue="q", priority=1)
    due = put(broker, queue="q", delay=5.0)
    clock.advance(5)
    lost, claimed = broker.record_and_claim(
        [], [Succeeded(held.claim, "null")], ["q"], 1, LEASE, "w1"
    )
    assert lost == []
    assert [c.job.id for c in claimed] == [due.id]  # priority 0 before the ready priority 1
    assert get(broker, ready.id).state is JobState.READY
