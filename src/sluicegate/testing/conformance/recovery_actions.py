"""Recovery of expired leases, and the operator actions: cancel and retry."""

from __future__ import annotations

import pytest

from ...brokers.base import Broker, Recovery
from ...errors import InvalidTransition, JobNotFound, LeaseLost
from ...job import JobState
from .. import FakeClock
from .helpers import LEASE, S, get, make_state, put, spec, state, suite, take


# ---- recovery -------------------------------------------------------------------------
class TestRecovery:
    def test_nothing_to_recover_before_the_lease_expires(
        self, broker: Broker, clock: FakeClock
    ) -> None:
        put(broker)
        put(broker, delay=1.0)
        take(broker, lease=10)
        assert broker.recover_expired() == Recovery()
        clock.advance(9.9)
        assert broker.recover_expired() == Recovery()

    @pytest.mark.parametrize("started", [False, True])
    def test_expired_lease_is_requeued_with_the_attempt_charged(
        self, broker: Broker, clock: FakeClock, started: bool
    ) -> None:
        job = put(broker, max_attempts=3)
        old = take(broker, lease=10, worker="w-dead").claim
        if started:
            broker.start(old)
        clock.advance(10.5)
        assert broker.recover_expired() == Recovery(requeued=[job.id])
        back = get(broker, job.id)
        assert back.state is S.READY and back.attempts == 1
        assert back.lease_expires_at is None and back.worker_id is None
        assert back.last_error is not None and back.last_error.type == "WorkerLost"
        assert "worker lost" in back.last_error.message
        assert broker.recover_expired() == Recovery()
        new = take(broker, worker="w-new")
        assert new.job.attempts == 2 and new.claim.token != old.token
        with pytest.raises(LeaseLost):
            broker.ack(old)
        broker.ack(new.claim, "2")
        assert get(broker, job.id).result == 2

    def test_a_limited_pass_takes_the_oldest_expiries_whatever_their_fate(
        self, broker: Broker, clock: FakeClock
    ) -> None:
        """``limit`` bounds one pass as a whole, oldest expiry first: every broker recovers
        the same jobs, whether they go back to ready or to dead."""
        first = put(broker, queue="a", max_attempts=1)  # its lease expires first: dead
        second = put(broker, queue="b", max_attempts=3)  # then this one: back to ready
        take(broker, queue="a", lease=5)
        take(broker, queue="b", lease=10)
        clock.advance(11)
        assert broker.recover_expired(limit=1) == Recovery(dead=[first.id])
        assert get(broker, second.id).state in (S.CLAIMED, S.RUNNING)
        assert broker.recover_expired(limit=1) == Recovery(requeued=[second.id])
        assert broker.recover_expired(limit=1) == Recovery()

    def test_expired_lease_with_no_attempts_left_is_dead(
        self, broker: Broker, clock: FakeClock
    ) -> None:
        job = put(broker, max_attempts=2)
        for attempt in (1, 2):
            claim = take(broker, lease=10, worker="w-lost").claim
            broker.start(claim)
            clock.advance(11)
            recovery = broker.recover_expired()
            if attempt == 1:
                assert recovery == Recovery(requeued=[job.id])
        assert recovery == Recovery(dead=[job.id])
        dead = get(broker, job.id)
        assert dead.state is S.DEAD and dead.attempts == 2
        assert dead.finished_at == clock.now and dead.lease_expires_at is None
        assert dead.last_error is not None and dead.last_error.type == "WorkerLost"
        assert "worker lost" in dead.last_error.message and "w-lost" in dead.last_error.message
        with pytest.raises(LeaseLost):
            broker.ack(claim)
        assert broker.claim(["q"], 1, LEASE, "w") == []

    def test_recovery_sorts_jobs_by_remaining_attempts(
        self, broker: Broker, clock: FakeClock
    ) -> None:
        one = put(broker, max_attempts=1)
        three = put(broker, max_attempts=3)
        fresh = put(broker)
        broker.claim(["q"], 2, 5, "w")
        clock.advance(4)
        take(broker, lease=100)  # `fresh`, not expired
        clock.advance(2)
        recovery = broker.recover_expired()
        assert (recovery.requeued, recovery.dead) == ([three.id], [one.id])
        assert state(broker, fresh.id) is S.CLAIMED

    def test_recover_respects_the_limit(self, broker: Broker, clock: FakeClock) -> None:
        jobs = broker.enqueue([spec() for _ in range(5)])
        broker.claim(["q"], 5, 1, "w")
        clock.advance(2)
        first = broker.recover_expired(limit=2)
        assert len(first.requeued) == 2 and first.dead == []
        rest = broker.recover_expired(limit=10)
        assert sorted(first.requeued + rest.requeued) == [j.id for j in jobs]


# ---- operator actions ----------------------------------------------------------------
class TestCancel:
    @pytest.mark.parametrize("start", [S.SCHEDULED, S.READY, S.CLAIMED, S.RUNNING])
    def test_cancel_any_unfinished_job(
        self, broker: Broker, clock: FakeClock, start: JobState
    ) -> None:
        job = make_state(broker, clock, start)
        assert job.state is start
        clock.advance(1)
        cancelled = broker.cancel(job.id)
        assert cancelled.state is S.CANCELLED and cancelled.id == job.id
        assert cancelled.finished_at == clock.now and cancelled.lease_expires_at is None
        assert get(broker, job.id) == cancelled
        clock.advance(100)
        assert broker.claim(["q"], 5, LEASE, "w") == []
        assert broker.recover_expired() == Recovery()

    @pytest.mark.parametrize("end", [S.SUCCEEDED, S.DEAD, S.CANCELLED])
    def test_cancel_of_a_finished_job_is_refused(
        self, broker: Broker, clock: FakeClock, end: JobState
    ) -> None:
        job = make_state(broker, clock, end)
        with pytest.raises(InvalidTransition):
            broker.cancel(job.id)
        assert get(broker, job.id) == job

    def test_cancel_of_an_unknown_job(self, broker: Broker) -> None:
        with pytest.raises(JobNotFound):
            broker.cancel(424242)


class TestRetry:
    @pytest.mark.parametrize("end", [S.DEAD, S.CANCELLED])
    def test_retry_revives_with_a_fresh_budget(
        self, broker: Broker, clock: FakeClock, end: JobState
    ) -> None:
        job = make_state(broker, clock, end, max_attempts=1)
        clock.advance(50)
        revived = broker.retry(job.id)
        assert revived.state is S.READY and revived.attempts == 0
        assert revived.finished_at is None and revived.run_at == clock.now
        assert revived.max_attempts == 1
        assert get(broker, job.id) == revived
        claimed = take(broker)
        assert claimed.job.id == job.id and claimed.job.attempts == 1

    @pytest.mark.parametrize("start", [S.SCHEDULED, S.READY, S.CLAIMED, S.RUNNING, S.SUCCEEDED])
    def test_retry_of_other_states_is_refused(
        self, broker: Broker, clock: FakeClock, start: JobState
    ) -> None:
        job = make_state(broker, clock, start)
        with pytest.raises(InvalidTransition):
            broker.retry(job.id)
        assert get(broker, job.id) == job

    def test_retry_of_an_unknown_job(self, broker: Broker) -> None:
        with pytest.raises(JobNotFound):
            broker.retry(424242)

    def test_retry_refused_while_another_job_holds_the_unique_key(
        self, broker: Broker, clock: FakeClock
    ) -> None:
        dead = make_state(broker, clock, S.DEAD, unique_key="k")
        holder = put(broker, unique_key="k")
        with pytest.raises(InvalidTransition):
            broker.retry(dead.id)
        assert get(broker, dead.id) == dead
        broker.cancel(holder.id)
        assert broker.retry(dead.id).state is S.READY


__all__ = suite(globals())
