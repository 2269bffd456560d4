"""Each service of the worker loop on its own, against a real broker, with no loop running.

Time is passed in (``now``) and, where leases must expire, the broker gets a fake
clock.
"""

from __future__ import annotations

import logging
import time

import pytest

from sluicegate import JobState
from sluicegate.brokers.memory import MemoryBroker
from sluicegate.brokers.sqlite import SQLiteBroker
from sluicegate.errors import BrokerUnavailable
from sluicegate.job import Claim, JobSpec
from sluicegate.worker.services import Backoff, Counters, LeaseKeeper, Recoverer


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def enqueue(broker: MemoryBroker | SQLiteBroker, queue: str, n: int = 1) -> None:
    broker.enqueue([JobSpec("t", queue, "[]", "{}") for _ in range(n)])


# ---- lease keeper and recoverer --------------------------------------------------------------
def test_lease_keeper_reports_lost_claims() -> None:
    clock = Clock()
    broker = MemoryBroker(clock=clock)
    enqueue(broker, "q", 2)
    (early,) = broker.claim(["q"], 1, 10, "w")
    clock.now += 8
    (late,) = broker.claim(["q"], 1, 10, "w")
    lost: list[Claim] = []
    counters = Counters()
    keeper = LeaseKeeper(broker, 10, counters, on_lost=lost.append)
    keeper.hold([early.claim, late.claim])
    clock.now += 3  # the early lease expired, and another worker's recoverer took it back
    assert broker.recover_expired().requeued == [early.claim.job_id]
    assert keeper.due_in(time.monotonic()) > 0
    keeper.run(keeper.next_beat)
    assert lost == [early.claim] and counters.lease_lost == 1
    assert keeper.held == {late.claim}
    assert broker.get_job(late.claim.job_id).lease_expires_at == clock.now + 10  # type: ignore[union-attr]


def test_recoverer_requeues_an_expired_lease() -> None:
    clock = Clock()
    broker = MemoryBroker(clock=clock)
    enqueue(broker, "q")
    (claimed,) = broker.claim(["q"], 1, 5, "a-worker-that-vanished")
    counters = Counters()
    recoverer = Recoverer(broker, 30, counters)
    recoverer.start()
    now = time.monotonic()
    assert recoverer.due_in(now) <= 0  # the first turn recovers what a crash left behind
    recoverer.run(now)
    assert counters.recovered == 0  # not expired yet
    assert 8 <= recoverer.due_in(now) <= 12  # every lease/3 (10 s), jittered
    clock.now += 6
    recoverer.run(now)
    job = broker.get_job(claimed.claim.job_id)
    assert job is not None and job.state == JobState.READY and job.attempts == 1
    assert counters.recovered == 1


# ---- backoff ----------------------------------------------------------------------------------
def test_backoff_doubles_to_a_cap_and_logs_once_per_outage(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="sluicegate.worker")
    backoff = Backoff(first=0.05, cap=0.3)
    delays = []
    for _ in range(5):
        backoff.failed(BrokerUnavailable("down"))
        delays.append(backoff.delay)
        assert backoff.until <= time.monotonic() + backoff.delay
    assert delays == [0.05, 0.1, 0.2, 0.3, 0.3]
    assert not backoff.ready(time.monotonic() - 1)
    backoff.ok()
    backoff.ok()
    assert backoff.delay == 0 and backoff.ready(backoff.until)
    messages = [r.getMessage() for r in caplog.records]
    assert messages == ["broker error (will retry): down", "broker reachable again"]
