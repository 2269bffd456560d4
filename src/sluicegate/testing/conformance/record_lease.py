"""Recording starts and outcomes, fencing (a stale token changes nothing), and the lease
(heartbeat, release)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from ...brokers.base import Broker, Recovery
from ...codec import dumps
from ...errors import LeaseLost
from ...job import Claim, JobId
from ...outcomes import Buried, Outcome, Retried, Succeeded
from .. import FakeClock
from .helpers import BOOM, LEASE, S, get, put, spec, state, suite, take


# ---- record: start, ack, fail -----------------------------------------------------
class TestRecord:
    def test_start_marks_running(self, broker: Broker, clock: FakeClock) -> None:
        job = put(broker)
        claim = take(broker).claim
        claimed_at = clock.now
        clock.advance(1)
        broker.start(claim)
        running = get(broker, job.id)
        assert running.state is S.RUNNING and running.started_at == clock.now
        assert running.attempts == 1 and running.lease_expires_at == claimed_at + LEASE

    def test_ack_stores_the_result(self, broker: Broker, clock: FakeClock) -> None:
        job = put(broker)
        claim = take(broker).claim
        broker.start(claim)
        started_at = clock.now
        clock.advance(2)
        broker.ack(claim, dumps({"ok": [1, 2], "s": "é"}))
        done = get(broker, job.id)
        assert done.state is S.SUCCEEDED and done.finished
        assert done.result == {"ok": [1, 2], "s": "é"}
        assert done.finished_at == clock.now and done.started_at == started_at
        assert done.lease_expires_at is None and done.attempts == 1

    def test_ack_without_start_sets_started_at(self, broker: Broker, clock: FakeClock) -> None:
        job = put(broker)
        claim = take(broker).claim
        clock.advance(3)
        assert broker.record([claim], [Succeeded(claim, "42")]) == []
        done = get(broker, job.id)
        assert (done.state, done.result) == (S.SUCCEEDED, 42)
        assert done.started_at == done.finished_at == clock.now

    @pytest.mark.parametrize("outcome", ["ack", "fail_retry", "fail_dead"])
    def test_started_at_belongs_to_the_latest_attempt(
        self, broker: Broker, clock: FakeClock, outcome: str
    ) -> None:
        """A start folded into the outcome (one write) still stamps this attempt's start."""
        job = put(broker)
        claim = take(broker).claim
        broker.start(claim)
        broker.fail(claim, BOOM, 5.0)
        clock.advance(5)
        claim = take(broker).claim
        clock.advance(1)
        finishes: dict[str, Outcome] = {
            "ack": Succeeded(claim, "null"),
            "fail_retry": Retried(claim, BOOM, 9.0),
            "fail_dead": Buried(claim, BOOM),
        }
        finish = finishes[outcome]
        assert broker.record([claim], [finish]) == []
        done = get(broker, job.id)
        assert done.attempts == 2 and done.started_at == clock.now

    def test_fail_with_retry_schedules_with_backoff(self, broker: Broker, clock: FakeClock) -> None:
        job = put(broker, max_attempts=3)
        claim = take(broker).claim
        broker.start(claim)
        broker.fail(claim, BOOM, 7.5)
        failed = get(broker, job.id)
        assert failed.state is S.SCHEDULED
        assert failed.run_at == clock.now + 7.5
        assert failed.last_error == BOOM
        assert failed.attempts == 1 and failed.lease_expires_at is None
        assert failed.finished_at is None
        assert broker.claim(["q"], 1, LEASE, "w") == []
        assert broker.next_due(["q"]) == pytest.approx(7.5)
        clock.advance(7.5)
        again = take(broker)
        assert again.job.id == job.id and again.job.attempts == 2

    def test_fail_without_retry_buries(self, broker: Broker, clock: FakeClock) -> None:
        job = put(broker)
        claim = take(broker).claim
        broker.start(claim)
        clock.advance(1)
        broker.fail(claim, BOOM, None)
        dead = get(broker, job.id)
        assert dead.state is S.DEAD and dead.finished
        assert dead.last_error == BOOM and dead.finished_at == clock.now
        assert dead.lease_expires_at is None

    def test_fail_from_claimed_without_start(self, broker: Broker, clock: FakeClock) -> None:
        job = put(broker)
        claim = take(broker).claim
        clock.advance(1)
        assert broker.record([], [Buried(claim, BOOM)]) == []
        dead = get(broker, job.id)
        assert dead.state is S.DEAD and dead.started_at == dead.finished_at == clock.now

    def test_record_batches_starts_and_outcomes(self, broker: Broker) -> None:
        jobs = broker.enqueue([spec(args=[i]) for i in range(4)])
        claims = [c.claim for c in broker.claim(["q"], 4, LEASE, "w")]
        stale = Claim(claims[0].job_id, claims[0].token + 1)
        lost = broker.record(
            [*claims[:2], stale],
            [
                Succeeded(claims[1], "1"),
                Retried(claims[2], BOOM, 1.0),
                Buried(claims[3], BOOM),
            ],
        )
        assert lost == [stale]
        assert [state(broker, j.id) for j in jobs] == [S.RUNNING, S.SUCCEEDED, S.SCHEDULED, S.DEAD]

    def test_record_of_nothing_is_a_no_op(self, broker: Broker) -> None:
        assert broker.record([], []) == []

    def test_second_start_is_refused(self, broker: Broker) -> None:
        put(broker)
        claim = take(broker).claim
        broker.start(claim)
        with pytest.raises(LeaseLost):
            broker.start(claim)


# ---- fencing: stale tokens change nothing --------------------------------------------
def _stale_calls(broker: Broker) -> dict[str, Callable[[Claim], object]]:
    return {
        "heartbeat": lambda c: broker.heartbeat_one(c, LEASE),
        "ack": lambda c: broker.ack(c, "1"),
        "fail_retry": lambda c: broker.fail(c, BOOM, 1.0),
        "fail_dead": lambda c: broker.fail(c, BOOM, None),
        "release": lambda c: broker.release_one(c),
        "start": lambda c: broker.start(c),
    }


STALE_CALLS = ["heartbeat", "ack", "fail_retry", "fail_dead", "release", "start"]


class TestFencing:
    @pytest.mark.parametrize("call", STALE_CALLS)
    def test_old_owner_after_recovery_and_reclaim_is_refused(
        self, broker: Broker, clock: FakeClock, call: str
    ) -> None:
        job = put(broker)
        old = take(broker, lease=10, worker="old").claim
        clock.advance(11)
        assert broker.recover_expired().requeued == [job.id]
        new = take(broker, worker="new").claim
        assert new.token != old.token
        before = get(broker, job.id)
        with pytest.raises(LeaseLost) as info:
            _stale_calls(broker)[call](old)
        assert (info.value.job_id, info.value.token) == (old.job_id, old.token)
        assert get(broker, job.id) == before
        broker.start(new)
        broker.ack(new, '"mine"')
        assert get(broker, job.id).result == "mine"

    @pytest.mark.parametrize("call", STALE_CALLS)
    def test_wrong_token_is_refused(self, broker: Broker, call: str) -> None:
        job = put(broker)
        claim = take(broker).claim
        before = get(broker, job.id)
        with pytest.raises(LeaseLost):
            _stale_calls(broker)[call](Claim(claim.job_id, claim.token ^ 1))
        assert get(broker, job.id) == before

    @pytest.mark.parametrize("call", STALE_CALLS)
    def test_unknown_job_is_lost(self, broker: Broker, call: str) -> None:
        with pytest.raises(LeaseLost):
            _stale_calls(broker)[call](Claim(JobId(987654), 1))

    @pytest.mark.parametrize("call", STALE_CALLS)
    @pytest.mark.parametrize("end", ["ack", "fail_dead", "fail_retry", "release", "cancel"])
    def test_calls_after_the_claim_ended_are_refused(
        self, broker: Broker, call: str, end: str
    ) -> None:
        job = put(broker)
        claim = take(broker).claim
        if end == "cancel":
            broker.cancel(job.id)
        else:
            _stale_calls(broker)[end](claim)
        before = get(broker, job.id)
        with pytest.raises(LeaseLost):
            _stale_calls(broker)[call](claim)
        assert get(broker, job.id) == before

    def test_batched_calls_report_only_the_lost_claims(self, broker: Broker) -> None:
        broker.enqueue([spec() for _ in range(3)])
        claims = [c.claim for c in broker.claim(["q"], 3, LEASE, "w")]
        stale = Claim(claims[0].job_id, claims[0].token + 1)
        assert broker.heartbeat([*claims, stale], LEASE) == [stale]
        assert broker.release([claims[0], stale]) == [stale]
        assert broker.release(claims) == [claims[0]]
        assert broker.heartbeat([], LEASE) == [] and broker.release([]) == []


# ---- heartbeat and release ------------------------------------------------------------
class TestLease:
    def test_heartbeat_extends_the_lease(self, broker: Broker, clock: FakeClock) -> None:
        job = put(broker)
        claim = take(broker, lease=10).claim
        clock.advance(8)
        assert broker.heartbeat([claim], 10) == []
        assert get(broker, job.id).lease_expires_at == clock.now + 10
        clock.advance(8)  # past the first lease, inside the extended one
        assert broker.recover_expired() == Recovery()
        broker.start(claim)
        clock.advance(8)
        broker.heartbeat_one(claim, 10)  # running jobs are heartbeated too
        clock.advance(8)
        assert broker.recover_expired() == Recovery()
        assert get(broker, job.id).state is S.RUNNING
        broker.ack(claim)

    def test_release_refunds_the_attempt(self, broker: Broker) -> None:
        job = put(broker)
        claim = take(broker).claim
        broker.release_one(claim)
        released = get(broker, job.id)
        assert released.state is S.READY and released.attempts == 0
        assert released.lease_expires_at is None and released.worker_id is None
        again = take(broker, worker="w2")
        assert again.job.attempts == 1

    def test_release_of_a_running_job(self, broker: Broker) -> None:
        job = put(broker, max_attempts=1)
        claim = take(broker).claim
        broker.start(claim)
        broker.release_one(claim)
        assert state(broker, job.id) is S.READY
        claim = take(broker).claim  # the budget of one attempt is intact
        broker.fail(claim, BOOM, None)
        assert state(broker, job.id) is S.DEAD


__all__ = suite(globals())
