"""Recovery of a dead worker's jobs (``recover_worker``): a worker on the same host saw its
process go, so its claims come back at once, leases unexpired, attempts charged."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from ...brokers.base import Broker, Recovery
from ...errors import LeaseLost
from ...limits import Limit, encode_needs
from ...outcomes import Succeeded
from .. import BrokerKind, FakeClock
from .helpers import BOOM, LEASE, S, get, put, spec, suite, take
from .races import _run_threads

DIED = "worker lost: worker w-dead died (its process is gone)"


class TestRecoverWorker:
    def test_only_the_dead_workers_held_jobs_come_back(
        self, broker: Broker, clock: FakeClock
    ) -> None:
        claimed = put(broker)
        running = put(broker)
        finished = put(broker)
        others = put(broker)
        dead_claims = {c.job.id: c.claim for c in broker.claim(["q"], 3, LEASE, "w-dead")}
        broker.start(dead_claims[running.id])
        broker.ack(dead_claims[finished.id], "1")
        other = take(broker, worker="w-live")
        ready = put(broker)
        scheduled = put(broker, delay=60.0)
        clock.advance(1)  # far from the lease's end: recovery does not wait for it

        assert broker.recover_worker("w-dead") == Recovery(requeued=[claimed.id, running.id])
        for job_id in (claimed.id, running.id):
            back = get(broker, job_id)
            assert back.state is S.READY and back.attempts == 1
            assert back.worker_id is None and back.lease_expires_at is None
            assert back.finished_at is None
            assert back.last_error is not None
            assert (back.last_error.type, back.last_error.message) == ("WorkerLost", DIED)
        assert get(broker, finished.id).state is S.SUCCEEDED
        assert other.job.id == others.id
        held = get(broker, others.id)
        assert held.state is S.CLAIMED and held.worker_id == "w-live"
        assert broker.heartbeat([other.claim], LEASE) == []
        assert get(broker, ready.id).state is S.READY
        assert get(broker, scheduled.id).state is S.SCHEDULED

    def test_the_attempt_stays_charged_and_the_next_claim_runs_it(
        self, broker: Broker, clock: FakeClock
    ) -> None:
        job = put(broker, max_attempts=3)
        take(broker, worker="w-dead")
        broker.recover_worker("w-dead")
        again = take(broker, worker="w-new")
        assert again.job.id == job.id and again.job.attempts == 2
        broker.ack(again.claim, "2")
        done = get(broker, job.id)
        assert done.state is S.SUCCEEDED and done.result == 2 and done.attempts == 2

    def test_dead_when_attempts_are_exhausted(self, broker: Broker, clock: FakeClock) -> None:
        last = put(broker, max_attempts=1)
        spare = put(broker, max_attempts=2)
        broker.claim(["q"], 2, LEASE, "w-dead")
        clock.advance(3)
        assert broker.recover_worker("w-dead") == Recovery(requeued=[spare.id], dead=[last.id])
        dead = get(broker, last.id)
        assert dead.state is S.DEAD and dead.attempts == 1
        assert dead.finished_at == clock.now and dead.lease_expires_at is None
        assert dead.worker_id == "w-dead"  # as lease recovery keeps it: who held it last
        assert dead.last_error is not None
        assert (dead.last_error.type, dead.last_error.message) == ("WorkerLost", DIED)
        assert [c.job.id for c in broker.claim(["q"], 5, LEASE, "w")] == [spare.id]

    @pytest.mark.parametrize("started", [False, True])
    def test_the_dead_workers_later_calls_are_refused(
        self, broker: Broker, clock: FakeClock, started: bool
    ) -> None:
        """A worker taken for dead that was not (or its last write, delivered late) changes
        nothing: fencing, as after a lease recovery -- before and after a new claim."""
        job = put(broker)
        old = take(broker, worker="w-dead").claim
        if started:
            broker.start(old)
        broker.recover_worker("w-dead")
        assert broker.heartbeat([old], LEASE) == [old]
        with pytest.raises(LeaseLost):
            broker.start(old)
        with pytest.raises(LeaseLost):
            broker.ack(old, "1")
        with pytest.raises(LeaseLost):
            broker.fail(old, BOOM, 1.0)
        assert broker.release([old]) == [old]
        assert get(broker, job.id).state is S.READY
        new = take(broker, worker="w-new")
        assert broker.heartbeat([old], LEASE) == [old]
        assert broker.record([], [Succeeded(old, "1")]) == [old]
        with pytest.raises(LeaseLost):
            broker.fail(old, BOOM, None)
        assert get(broker, job.id).state is S.CLAIMED
        broker.ack(new.claim, "2")
        assert get(broker, job.id).result == 2

    def test_idempotent(self, broker: Broker, clock: FakeClock) -> None:
        job = put(broker)
        take(broker, worker="w-dead")
        assert broker.recover_worker("w-dead") == Recovery(requeued=[job.id])
        after = get(broker, job.id)
        clock.advance(1)
        assert broker.recover_worker("w-dead") == Recovery()
        assert get(broker, job.id) == after
        assert broker.recover_worker("never-was") == Recovery()
        assert broker.recover_expired() == Recovery()

    def test_a_job_recovered_by_lease_and_claimed_again_is_not_taken_back(
        self, broker: Broker, clock: FakeClock
    ) -> None:
        """The dead worker's lease expired first and another worker runs the job now: its
        claim names the new worker, so a late recovery of the dead one leaves it be."""
        job = put(broker)
        take(broker, lease=5, worker="w-dead")
        clock.advance(6)
        assert broker.recover_expired() == Recovery(requeued=[job.id])
        new = take(broker, worker="w-new")
        assert broker.recover_worker("w-dead") == Recovery()
        assert broker.heartbeat([new.claim], LEASE) == []
        assert get(broker, job.id).worker_id == "w-new"

    def test_held_limit_units_come_back(self, broker: Broker, clock: FakeClock) -> None:
        broker.register_limits([Limit("db", concurrency=1)])
        needs = encode_needs([("db", None, 1)])
        first = put(broker, limits=needs)
        second = put(broker, limits=needs)
        assert [c.job.id for c in broker.claim(["q"], 2, LEASE, "w-dead")] == [first.id]
        assert broker.claim(["q"], 2, LEASE, "w-live") == []
        broker.recover_worker("w-dead")
        assert [c.job.id for c in broker.claim(["q"], 2, LEASE, "w-live")] == [first.id]
        assert get(broker, second.id).state is S.READY

    def test_wakes_subscribers_when_jobs_are_ready_again(
        self, broker: Broker, broker_kind: BrokerKind, open_broker: Callable[[], Broker]
    ) -> None:
        """Claimers of this process, and of other processes where the broker reaches them
        (another handle on the same storage stands for one)."""
        put(broker)
        take(broker, worker="w-dead")
        watchers = [broker, *([open_broker()] if broker_kind.shared else [])]
        fired = [threading.Event() for _ in watchers]
        unsubscribe = [w.subscribe(f.set) for w, f in zip(watchers, fired, strict=True)]
        try:
            deadline = time.monotonic() + 5  # until each watches (a doorbell bound, LISTEN)
            while not all(w.wakeups_healthy() for w in watchers) and time.monotonic() < deadline:
                time.sleep(0.01)
            broker.recover_worker("w-dead")
            for event in fired:
                assert event.wait(5)
        finally:
            for stop in unsubscribe:
                stop()

    def test_many_at_once_recover_each_job_once(
        self, broker_kind: BrokerKind, broker: Broker, open_broker: Callable[[], Broker]
    ) -> None:
        """Two workers of the host may both see the death: together they recover each job
        once, whether through one handle or each its own."""
        jobs = broker.enqueue([spec(args=[i], max_attempts=1 + i % 2) for i in range(40)])
        broker.claim(["q"], 40, LEASE, "w-dead")
        handles = [open_broker() for _ in range(4)] if broker_kind.shared else [broker] * 4
        results: list[Recovery] = [Recovery()] * len(handles)

        def recover(i: int) -> None:
            results[i] = handles[i].recover_worker("w-dead")

        _run_threads(len(handles), recover)
        requeued = sorted(j for r in results for j in r.requeued)
        dead = sorted(j for r in results for j in r.dead)
        assert requeued == [j.id for j in jobs if j.max_attempts == 2]
        assert dead == [j.id for j in jobs if j.max_attempts == 1]


__all__ = suite(globals())
