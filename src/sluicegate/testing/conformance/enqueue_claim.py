"""Enqueue (order, delays, unique keys), claim (order, leases, fencing tokens) and the
probes (has_work, next_due)."""

from __future__ import annotations

import pytest

from ...brokers.base import Broker
from ...errors import LeaseLost
from ...job import JobState
from .. import FakeClock
from .helpers import LEASE, S, get, make_state, put, spec, state, suite, take


# ---- enqueue ----------------------------------------------------------------------
class TestEnqueue:
    def test_single_job_is_ready_and_stored(self, broker: Broker, clock: FakeClock) -> None:
        job = put(
            broker,
            task="send",
            queue="email",
            args=[1, "a"],
            kwargs={"k": [True]},
            priority=4,
            max_attempts=7,
        )
        assert job.id > 0
        assert (job.task, job.queue, job.state) == ("send", "email", S.READY)
        assert (job.args, job.kwargs) == ([1, "a"], {"k": [True]})
        assert (job.priority, job.attempts, job.max_attempts) == (4, 0, 7)
        assert job.run_at == job.enqueued_at == clock.now
        assert job.started_at is job.finished_at is job.result is job.last_error is None
        assert job.lease_expires_at is None and job.unique_key is None
        assert broker.get_job(job.id) == job

    def test_bulk_enqueue_keeps_order_with_distinct_ids(self, broker: Broker) -> None:
        jobs = broker.enqueue([spec(args=[i]) for i in range(5)])
        assert [j.args for j in jobs] == [[i] for i in range(5)]
        ids = [j.id for j in jobs]
        assert ids == sorted(ids) and len(set(ids)) == 5
        assert all(broker.get_job(j.id) == j for j in jobs)
        assert len(broker.list_jobs()) == 5

    def test_bulk_enqueue_mixing_unique_keys_keeps_fifo_order(self, broker: Broker) -> None:
        kept = put(broker, unique_key="held", args=["kept"])
        jobs = broker.enqueue(
            [
                spec(args=[0], unique_key="k0"),
                spec(args=[1]),
                spec(args=[2]),
                spec(args=["dup"], unique_key="held"),
                spec(args=[3], unique_key="k3"),
                spec(args=[4]),
            ]
        )
        assert [j.args for j in jobs] == [[0], [1], [2], ["kept"], [3], [4]]
        assert jobs[3].id == kept.id
        fresh = [j.id for j in jobs if j.id != kept.id]
        assert fresh == sorted(fresh)
        claimed = broker.claim(["q"], 10, LEASE, "w")
        assert [c.job.args for c in claimed] == [["kept"], [0], [1], [2], [3], [4]]

    def test_empty_enqueue_stores_nothing(self, broker: Broker) -> None:
        assert broker.enqueue([]) == []
        assert broker.list_jobs() == []

    def test_delay_schedules_the_job(self, broker: Broker, clock: FakeClock) -> None:
        job = put(broker, delay=10.0)
        assert job.state is S.SCHEDULED
        assert job.run_at == clock.now + 10.0
        assert get(broker, job.id).state is S.SCHEDULED

    def test_run_at_in_future_is_scheduled_and_in_past_is_ready(
        self, broker: Broker, clock: FakeClock
    ) -> None:
        later = put(broker, run_at=clock.now + 5)
        earlier = put(broker, run_at=clock.now - 5)
        now = put(broker, run_at=clock.now)
        assert (later.state, later.run_at) == (S.SCHEDULED, clock.now + 5)
        assert (earlier.state, earlier.run_at) == (S.READY, clock.now - 5)
        assert now.state is S.READY

    def test_unique_key_returns_the_unfinished_job(self, broker: Broker) -> None:
        first = put(broker, unique_key="k", args=[1])
        again = put(broker, unique_key="k", args=[2])
        assert again.id == first.id and again.args == [1]
        other = put(broker, unique_key="other")
        assert other.id != first.id
        assert len(broker.list_jobs()) == 2

    @pytest.mark.parametrize("held", [S.SCHEDULED, S.CLAIMED, S.RUNNING])
    def test_unique_key_holds_while_unfinished(
        self, broker: Broker, clock: FakeClock, held: JobState
    ) -> None:
        first = make_state(broker, clock, held, unique_key="k")
        assert put(broker, unique_key="k").id == first.id

    @pytest.mark.parametrize("finished", [S.SUCCEEDED, S.DEAD, S.CANCELLED])
    def test_unique_key_allows_a_new_job_once_finished(
        self, broker: Broker, clock: FakeClock, finished: JobState
    ) -> None:
        first = make_state(broker, clock, finished, unique_key="k")
        second = put(broker, unique_key="k")
        assert second.id != first.id and second.state is S.READY
        assert put(broker, unique_key="k").id == second.id

    def test_unique_key_within_one_batch(self, broker: Broker) -> None:
        jobs = broker.enqueue([spec(unique_key="k", args=[1]), spec(unique_key="k", args=[2])])
        assert jobs[0].id == jobs[1].id and jobs[1].args == [1]
        assert len(broker.list_jobs()) == 1


# ---- claim --------------------------------------------------------------------------
class TestClaim:
    def test_claim_charges_an_attempt_and_sets_a_lease(
        self, broker: Broker, clock: FakeClock
    ) -> None:
        job = put(broker)
        claimed = take(broker, lease=12.5, worker="w-7")
        assert claimed.claim.job_id == claimed.job.id == job.id
        for seen in (claimed.job, get(broker, job.id)):
            assert seen.state is S.CLAIMED
            assert seen.attempts == 1
            assert seen.worker_id == "w-7"
            assert seen.lease_expires_at == clock.now + 12.5

    def test_claim_takes_at_most_n(self, broker: Broker) -> None:
        broker.enqueue([spec() for _ in range(5)])
        assert len(broker.claim(["q"], 3, LEASE, "w")) == 3
        assert len(broker.claim(["q"], 10, LEASE, "w")) == 2
        assert broker.claim(["q"], 10, LEASE, "w") == []

    def test_claim_of_zero_or_no_queues_takes_nothing(self, broker: Broker) -> None:
        job = put(broker)
        assert broker.claim(["q"], 0, LEASE, "w") == []
        assert broker.claim([], 5, LEASE, "w") == []
        assert state(broker, job.id) is S.READY

    def test_claim_order_is_priority_then_run_at_then_id(
        self, broker: Broker, clock: FakeClock
    ) -> None:
        t = clock.now
        made = broker.enqueue(
            [
                spec(args=["p1 late"], priority=1, run_at=t - 1),
                spec(args=["p0 late a"], priority=0, run_at=t - 1),
                spec(args=["p0 early"], priority=0, run_at=t - 9),
                spec(args=["p0 late b"], priority=0, run_at=t - 1),
                spec(args=["p-5"], priority=-5, run_at=t),
                spec(args=["p1 early"], priority=1, run_at=t - 9),
            ]
        )
        assert all(j.state is S.READY for j in made)
        order = ["p-5", "p0 early", "p0 late a", "p0 late b", "p1 early", "p1 late"]
        claimed = broker.claim(["q"], 10, LEASE, "w")
        assert [c.job.args[0] for c in claimed] == order
        # one at a time gives the same order
        for c in claimed:
            broker.release_one(c.claim)
        assert [take(broker).job.args[0] for _ in order] == order

    def test_claim_only_from_wanted_queues(self, broker: Broker) -> None:
        a = put(broker, queue="a")
        b = put(broker, queue="b")
        c = put(broker, queue="c")
        assert broker.claim(["x"], 5, LEASE, "w") == []
        got = broker.claim(["a", "c"], 5, LEASE, "w")
        assert sorted(j.job.id for j in got) == [a.id, c.id]
        assert state(broker, b.id) is S.READY

    def test_claim_across_queues_keeps_the_global_order(self, broker: Broker) -> None:
        low = put(broker, queue="a", priority=5)
        high = put(broker, queue="b", priority=1)
        got = broker.claim(["a", "b"], 1, LEASE, "w")
        assert [c.job.id for c in got] == [high.id]
        assert state(broker, low.id) is S.READY

    def test_claim_promotes_due_scheduled_jobs(self, broker: Broker, clock: FakeClock) -> None:
        job = put(broker, delay=10.0)
        assert broker.claim(["q"], 1, LEASE, "w") == []
        clock.advance(9.5)
        assert broker.claim(["q"], 1, LEASE, "w") == []
        assert state(broker, job.id) is S.SCHEDULED
        clock.advance(0.5)  # run_at reached exactly
        claimed = take(broker)
        assert claimed.job.id == job.id and claimed.job.attempts == 1

    def test_promoted_jobs_keep_claim_order(self, broker: Broker, clock: FakeClock) -> None:
        late = put(broker, delay=5.0)
        soon = put(broker, delay=1.0)
        ready = put(broker, priority=1)
        clock.advance(5)
        got = broker.claim(["q"], 3, LEASE, "w")
        assert [c.job.id for c in got] == [soon.id, late.id, ready.id]

    def test_a_due_job_comes_before_a_ready_one_behind_it(
        self, broker: Broker, clock: FakeClock
    ) -> None:
        ready = put(broker, priority=1)
        due = put(broker, delay=5.0)
        clock.advance(5)
        assert [c.job.id for c in broker.claim(["q"], 1, LEASE, "w")] == [due.id]
        assert [c.job.id for c in broker.claim(["q"], 1, LEASE, "w")] == [ready.id]

    def test_each_claim_gets_a_fresh_fencing_token(self, broker: Broker) -> None:
        put(broker)
        first = take(broker).claim
        broker.release_one(first)
        second = take(broker).claim
        assert second.job_id == first.job_id and second.token != first.token
        with pytest.raises(LeaseLost):
            broker.ack(first)
        broker.ack(second)

    def test_claimed_jobs_are_not_claimed_again(self, broker: Broker) -> None:
        put(broker)
        take(broker)
        assert broker.claim(["q"], 5, LEASE, "w2") == []


class TestProbes:
    def test_has_work(self, broker: Broker, clock: FakeClock) -> None:
        assert broker.has_work(["q"]) is False
        put(broker, queue="q", delay=10.0)
        assert broker.has_work(["q"]) is False
        clock.advance(10)
        assert broker.has_work(["q"]) is True  # due, not yet promoted
        assert broker.has_work(["other"]) is False
        assert broker.has_work(["other", "q"]) is True
        take(broker)
        assert broker.has_work(["q"]) is False
        put(broker, queue="q")
        assert broker.has_work(["q"]) is True

    def test_next_due(self, broker: Broker, clock: FakeClock) -> None:
        assert broker.next_due(["q"]) is None
        put(broker)  # ready jobs are not "scheduled"
        assert broker.next_due(["q"]) is None
        put(broker, delay=10.0)
        put(broker, delay=30.0)
        put(broker, queue="other", delay=2.0)
        assert broker.next_due(["q"]) == pytest.approx(10.0)
        assert broker.next_due(["q", "other"]) == pytest.approx(2.0)
        assert broker.next_due(["nothing"]) is None
        clock.advance(6)
        assert broker.next_due(["q"]) == pytest.approx(4.0)
        clock.advance(100)
        assert broker.next_due(["q"]) == 0.0


__all__ = suite(globals())
