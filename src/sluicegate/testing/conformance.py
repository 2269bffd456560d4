"""The conformance suite: what every broker must do, run against each broker kind.

Every test runs on a fake clock (leases expire by ``clock.advance``, never by sleeping)
and compares durable brokers with the in-memory reference broker on random operations.

To run it against a broker of your own (written outside this repository), register its
URL scheme in ``sluicegate.brokers.BROKERS`` (the process races open it through
``broker_from_url``), then in a test module::

    import pytest
    from sluicegate.testing import BrokerKind
    from sluicegate.testing.conformance import *  # the tests and their fixtures

    @pytest.fixture
    def broker_kind() -> BrokerKind:
        return BrokerKind(
            "mine", url=lambda tmp_path: f"mine:///{tmp_path}/jobs",
            open=lambda url, clock: MyBroker(url, clock=clock),
            shared=True, multiprocess=True,
        )

The suite's fixtures are all built from ``broker_kind``: ``clock`` (a FakeClock),
``broker_url``, ``open_broker`` (more handles on the same storage, closed at the end) and
``broker``; override any of them if your broker needs it. Needs pytest and hypothesis.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ..brokers.base import Broker, Recovery
from ..brokers.memory import MemoryBroker
from ..codec import dumps, encode_payload
from ..errors import InvalidTransition, JobNotFound, LeaseLost, SluicegateError
from ..job import Claim, ClaimedJob, ErrorInfo, Job, JobId, JobSpec, JobState
from ..outcomes import Buried, Outcome, Retried, Succeeded
from . import BrokerKind, FakeClock, run_released


# ---- fixtures, all built from the user's broker_kind ------------------------------------
@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def broker_url(broker_kind: BrokerKind, tmp_path: Path) -> str:
    return broker_kind.url(tmp_path)


@pytest.fixture
def open_broker(
    broker_kind: BrokerKind, broker_url: str, clock: FakeClock
) -> Iterator[Callable[[], Broker]]:
    """Opens more handles on the test's storage (same URL, same fake clock); closes them all."""
    opened: list[Broker] = []

    def open_one() -> Broker:
        broker = broker_kind.open(broker_url, clock)
        opened.append(broker)
        return broker

    yield open_one
    for broker in reversed(opened):
        broker.close()


@pytest.fixture
def broker(open_broker: Callable[[], Broker]) -> Broker:
    """A fresh, empty broker of the kind under test, on the fake ``clock``."""
    return open_broker()


S = JobState
LEASE = 30.0
BOOM = ErrorInfo("ValueError", "boom", "Traceback ...")


# ---- helpers ----------------------------------------------------------------------
def spec(
    task: str = "t",
    queue: str = "q",
    args: Sequence[Any] = (),
    kwargs: dict[str, Any] | None = None,
    **options: Any,
) -> JobSpec:
    args_json, kwargs_json = encode_payload(task, list(args), kwargs or {})
    return JobSpec(task=task, queue=queue, args_json=args_json, kwargs_json=kwargs_json, **options)


def put(broker: Broker, **fields: Any) -> Job:
    [job] = broker.enqueue([spec(**fields)])
    return job


def take(broker: Broker, queue: str = "q", lease: float = LEASE, worker: str = "w1") -> ClaimedJob:
    """Claim exactly one job of ``queue``."""
    [claimed] = broker.claim([queue], 1, lease, worker)
    assert claimed.problem is None
    return claimed


def get(broker: Broker, job_id: int) -> Job:
    job = broker.get_job(job_id)
    assert job is not None
    return job


def state(broker: Broker, job_id: int) -> JobState:
    return get(broker, job_id).state


def make_state(broker: Broker, clock: FakeClock, target: JobState, **fields: Any) -> Job:
    """A job of queue ``q`` brought to ``target`` through the broker's own operations."""
    if target is S.SCHEDULED:
        return put(broker, delay=60.0, **fields)
    job = put(broker, **fields)
    if target is S.READY:
        return job
    if target is S.CANCELLED:
        return broker.cancel(job.id)
    claimed = broker.claim(["q"], 1, LEASE, "w1")
    assert [c.job.id for c in claimed] == [job.id], "make_state needs queue q to be empty"
    claim = claimed[0].claim
    if target is S.CLAIMED:
        return get(broker, job.id)
    if target is S.RUNNING:
        broker.start(claim)
    elif target is S.SUCCEEDED:
        broker.ack(claim, "null")
    elif target is S.DEAD:
        broker.fail(claim, BOOM, None)
    return get(broker, job.id)


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


# ---- read side -------------------------------------------------------------------------
class TestRead:
    def test_get_job_of_unknown_id(self, broker: Broker) -> None:
        assert broker.get_job(123456) is None

    def test_list_jobs_filters_and_limits(self, broker: Broker, clock: FakeClock) -> None:
        a1 = put(broker, queue="a")
        a2 = put(broker, queue="a", delay=100.0)
        b1 = put(broker, queue="b")
        a3 = put(broker, queue="a")
        assert [j.id for j in broker.list_jobs()] == [a3.id, b1.id, a2.id, a1.id]
        assert [j.id for j in broker.list_jobs(queue="a")] == [a3.id, a2.id, a1.id]
        assert [j.id for j in broker.list_jobs(state=S.READY)] == [a3.id, b1.id, a1.id]
        assert [j.id for j in broker.list_jobs(state=S.SCHEDULED, queue="a")] == [a2.id]
        assert broker.list_jobs(state=S.DEAD) == []
        assert broker.list_jobs(queue="zzz") == []
        assert [j.id for j in broker.list_jobs(limit=2)] == [a3.id, b1.id]
        assert [j.id for j in broker.list_jobs(state=S.READY, queue="a", limit=1)] == [a3.id]
        assert broker.list_jobs()[0] == get(broker, a3.id)

    def test_stats_of_an_empty_broker(self, broker: Broker) -> None:
        assert broker.stats().to_dict() == {"queues": {}}

    def test_stats_shape_and_counts(self, broker: Broker, clock: FakeClock) -> None:
        for target in (S.SUCCEEDED, S.DEAD, S.RUNNING, S.CLAIMED):
            make_state(broker, clock, target)
        make_state(broker, clock, S.CANCELLED)
        put(broker, delay=60.0)
        put(broker, delay=5.0)
        put(broker, queue="other")
        clock.advance(2)
        put(broker)
        put(broker)
        clock.advance(4)  # the 5 s job is due: counted as ready; the oldest ready is 4 s old
        stats = broker.stats().to_dict()
        assert json.loads(json.dumps(stats)) == stats
        assert stats == {
            "queues": {
                "other": {
                    "scheduled": 0,
                    "ready": 1,
                    "claimed": 0,
                    "running": 0,
                    "succeeded": 0,
                    "dead": 0,
                    "cancelled": 0,
                    "oldest_ready_age_s": 6.0,
                },
                "q": {
                    "scheduled": 1,
                    "ready": 3,
                    "claimed": 1,
                    "running": 1,
                    "succeeded": 1,
                    "dead": 1,
                    "cancelled": 1,
                    "oldest_ready_age_s": 4.0,
                },
            }
        }
        assert list(stats["queues"]["q"]) == [
            "scheduled",
            "ready",
            "claimed",
            "running",
            "succeeded",
            "dead",
            "cancelled",
            "oldest_ready_age_s",
        ]

    def test_oldest_ready_age_is_zero_without_ready_jobs(
        self, broker: Broker, clock: FakeClock
    ) -> None:
        put(broker, delay=10.0)
        clock.advance(3)
        assert broker.stats().to_dict()["queues"]["q"]["oldest_ready_age_s"] == 0.0


# ---- wake-ups ---------------------------------------------------------------------------
class TestSubscribe:
    def test_callback_fires_on_enqueue_until_unsubscribed(self, broker: Broker) -> None:
        fired = threading.Event()
        calls: list[int] = []

        def callback() -> None:
            calls.append(1)
            fired.set()

        unsubscribe = broker.subscribe(callback)
        try:
            put(broker)
            assert fired.wait(5)
        finally:
            unsubscribe()
        seen = len(calls)
        put(broker)
        assert len(calls) == seen

    @pytest.mark.parametrize("how", ["release", "recover", "retry_later", "revive"])
    def test_callback_fires_when_jobs_come_back(
        self, broker: Broker, clock: FakeClock, how: str
    ) -> None:
        job = put(broker)
        claim = take(broker, lease=1).claim
        if how == "revive":
            broker.fail(claim, BOOM, None)
        fired = threading.Event()
        unsubscribe = broker.subscribe(fired.set)
        try:
            if how == "release":
                broker.release_one(claim)
            elif how == "recover":
                clock.advance(2)
                broker.recover_expired()
            elif how == "retry_later":
                broker.fail(claim, BOOM, 1.0)
            else:
                broker.retry(job.id)
            assert fired.wait(5)
        finally:
            unsubscribe()

    def test_enqueue_through_another_handle_wakes_subscribers(
        self, broker_kind: BrokerKind, open_broker: Callable[[], Broker]
    ) -> None:
        if not broker_kind.shared:
            pytest.skip(f"{broker_kind.name}: handles do not share storage")
        watcher, producer = open_broker(), open_broker()
        fired = threading.Event()
        unsubscribe = watcher.subscribe(fired.set)
        try:
            put(producer)
            assert fired.wait(5)
        finally:
            unsubscribe()


# ---- durability across handles -----------------------------------------------------------
def test_jobs_survive_reopening(
    broker_kind: BrokerKind, open_broker: Callable[[], Broker], clock: FakeClock
) -> None:
    if not broker_kind.shared:
        pytest.skip(f"{broker_kind.name}: nothing outlives the broker")
    first = open_broker()
    job = put(first, args=["kept"])
    claim = take(first).claim
    first.close()
    second = open_broker()
    assert get(second, job.id).args == ["kept"]
    second.ack(claim, "true")
    assert get(second, job.id).result is True


# ---- races -----------------------------------------------------------------------------
def _run_threads(count: int, target: Callable[[int], None]) -> None:
    barrier = threading.Barrier(count)
    errors: list[BaseException] = []

    def run(index: int) -> None:
        try:
            barrier.wait(timeout=10)
            target(index)
        except BaseException as exc:  # reported in the main thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads)
    assert not errors, errors


def _drain(broker: Broker, worker: str, batch: int = 3) -> list[tuple[int, int]]:
    got: list[tuple[int, int]] = []
    while True:
        claimed = broker.claim(["q"], batch, LEASE, worker)
        if not claimed:
            return got
        got.extend((c.claim.job_id, c.claim.token) for c in claimed)


def _assert_claimed_once(broker: Broker, ids: Sequence[int], claims: list[tuple[int, int]]) -> None:
    counts = Counter(job_id for job_id, _ in claims)
    assert [i for i, n in counts.items() if n > 1] == [], "a job was claimed twice"
    assert sorted(counts) == sorted(ids), "a job was never claimed"
    jobs = [get(broker, i) for i in ids]
    assert all(j.state is S.CLAIMED and j.attempts == 1 for j in jobs)
    for job_id, token in claims:  # every winner really holds its job
        assert broker.heartbeat([Claim(JobId(job_id), token)], LEASE) == []


BACKLOG = 300


class TestRaces:
    def test_threads_claiming_share_the_backlog(self, broker: Broker) -> None:
        ids = [j.id for j in broker.enqueue([spec(args=[i]) for i in range(BACKLOG)])]
        results: list[list[tuple[int, int]]] = [[] for _ in range(8)]

        def work(i: int) -> None:
            results[i] = _drain(broker, f"w{i}", batch=1 + i % 4)

        _run_threads(8, work)
        _assert_claimed_once(broker, ids, [c for r in results for c in r])

    def test_threads_with_their_own_handles(
        self, broker_kind: BrokerKind, broker: Broker, open_broker: Callable[[], Broker]
    ) -> None:
        if not broker_kind.shared:
            pytest.skip(f"{broker_kind.name}: handles do not share storage")
        ids = [j.id for j in broker.enqueue([spec(args=[i]) for i in range(BACKLOG)])]
        handles = [open_broker() for _ in range(6)]
        results: list[list[tuple[int, int]]] = [[] for _ in handles]

        def work(i: int) -> None:
            results[i] = _drain(handles[i], f"w{i}")

        _run_threads(len(handles), work)
        _assert_claimed_once(broker, ids, [c for r in results for c in r])

    def test_concurrent_recovery_recovers_each_job_once(
        self, broker: Broker, clock: FakeClock
    ) -> None:
        jobs = broker.enqueue([spec(args=[i], max_attempts=1 + i % 2) for i in range(200)])
        broker.claim(["q"], len(jobs), 10, "w-lost")
        clock.advance(11)
        results: list[list[Recovery]] = [[] for _ in range(8)]

        def work(i: int) -> None:
            while (recovery := broker.recover_expired(limit=7)) != Recovery():
                results[i].append(recovery)

        _run_threads(8, work)
        passes = [r for rs in results for r in rs]
        _assert_recovered_once(
            broker,
            jobs,
            [i for r in passes for i in r.requeued],
            [i for r in passes for i in r.dead],
        )


def _assert_recovered_once(
    broker: Broker, jobs: list[Job], requeued: list[int], dead: list[int]
) -> None:
    assert len(requeued) == len(set(requeued)) and len(dead) == len(set(dead))
    assert sorted(requeued) == sorted(j.id for j in jobs if j.max_attempts == 2)
    assert sorted(dead) == sorted(j.id for j in jobs if j.max_attempts == 1)
    for job in jobs:
        now = get(broker, job.id)
        assert now.attempts == 1, "recovery must not charge a second attempt"
        assert now.state is (S.READY if job.max_attempts == 2 else S.DEAD)
        assert now.last_error is not None and now.last_error.type == "WorkerLost"


# ---- races between OS processes ---------------------------------------------------------
# Each child opens its own broker on the URL through the public seam, waits for "go" on
# stdin so all of them start together, then prints a JSON list of what it got.
CHILD = r"""
import json, sys
from sluicegate.brokers import broker_from_url
url, action, worker = sys.argv[1:4]
broker = broker_from_url(url)
try:
    print("ready", flush=True)
    sys.stdin.readline()
    got = []
    if action == "claim":
        while batch := broker.claim(["q"], 2, 30.0, worker):
            got.extend([c.claim.job_id, c.claim.token] for c in batch)
    else:
        while (rec := broker.recover_expired(limit=3)).requeued or rec.dead:
            got.extend(["requeued", i] for i in rec.requeued)
            got.extend(["dead", i] for i in rec.dead)
    print(json.dumps(got), flush=True)
finally:
    broker.close()
"""


def _run_children(url: str, action: str, count: int) -> list[list[Any]]:
    return run_released(CHILD, [[url, action, f"p{i}"] for i in range(count)])


class TestProcessRaces:
    @pytest.fixture(autouse=True)
    def _multiprocess_only(self, broker_kind: BrokerKind) -> None:
        if not broker_kind.multiprocess:
            pytest.skip(f"{broker_kind.name}: cannot be shared between processes")

    def test_processes_claiming_share_the_backlog(self, broker: Broker, broker_url: str) -> None:
        ids = [j.id for j in broker.enqueue([spec(args=[i]) for i in range(BACKLOG)])]
        outputs = _run_children(broker_url, "claim", 4)
        _assert_claimed_once(broker, ids, [(job_id, token) for o in outputs for job_id, token in o])

    def test_processes_recovering_recover_each_job_once(
        self, broker: Broker, broker_url: str
    ) -> None:
        # The fake clock stands at T0, years before now: by the children's real clocks
        # every lease taken here has expired.
        jobs = broker.enqueue([spec(args=[i], max_attempts=1 + i % 2) for i in range(200)])
        broker.claim(["q"], len(jobs), 10, "w-lost")
        outputs = [pair for o in _run_children(broker_url, "recover", 4) for pair in o]
        _assert_recovered_once(
            broker,
            jobs,
            [i for kind, i in outputs if kind == "requeued"],
            [i for kind, i in outputs if kind == "dead"],
        )


# ---- every broker behaves like the reference broker ----------------------------------------
# Random sequences of operations run on the broker under test and on MemoryBroker, on one
# shared fake clock; after every step the answers and every stored job must agree.
EXAMPLE_START = 1_700_000_000.0
CLAIM_OPS = ("start", "ack", "fail_retry", "fail_dead", "heartbeat", "release")
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("enqueue"), st.sampled_from("ab"), st.integers(0, 2),
                  st.sampled_from([0.0, 5.0]), st.integers(1, 3), st.sampled_from([None, "k"])),
        st.tuples(st.just("claim"), st.sampled_from([("a",), ("b",), ("a", "b")]),
                  st.integers(1, 3), st.sampled_from([5.0, 10.0])),
        st.tuples(st.sampled_from(CLAIM_OPS), st.integers(0, 3)),  # 0: the latest claim
        st.tuples(st.sampled_from(["cancel", "retry"]), st.integers(1, 12)),
        st.tuples(st.just("recover"), st.integers(1, 3)),
        st.tuples(st.just("advance"), st.sampled_from([1.0, 4.0, 11.0])),
    ),
    max_size=40,
)  # fmt: skip


def _apply_claim_op(broker: Broker, op: str, claim: Claim) -> list[Claim]:
    if op == "start":
        return broker.record([claim], [])
    if op == "ack":
        return broker.record([], [Succeeded(claim, "[1]")])
    if op == "fail_retry":
        return broker.record([claim], [Retried(claim, BOOM, 3.0)])
    if op == "fail_dead":
        return broker.record([], [Buried(claim, BOOM)])
    if op == "heartbeat":
        return broker.heartbeat([claim], 10.0)
    return broker.release([claim])


def _step(broker: Broker, claims: list[Claim], op: tuple[Any, ...]) -> tuple[Any, ...]:
    kind = op[0]
    try:
        if kind == "enqueue":
            _, queue, priority, delay, attempts, key = op
            new = spec(
                queue=queue, priority=priority, delay=delay, max_attempts=attempts, unique_key=key
            )
            return ("ids", [j.id for j in broker.enqueue([new])])
        if kind == "claim":
            got = broker.claim(list(op[1]), op[2], op[3], "w")
            claims.extend(c.claim for c in got)
            return ("ids", [c.job.id for c in got])
        if kind in CLAIM_OPS:
            if not claims:
                return ("nothing",)
            claim = claims[-1 - op[1] % len(claims)]
            return ("lost", bool(_apply_claim_op(broker, kind, claim)))
        if kind in ("cancel", "retry"):
            ids = sorted(_ranks(broker))
            target = ids[op[1] % len(ids)] if ids and op[1] < 12 else 10**9
            job = broker.cancel(target) if kind == "cancel" else broker.retry(target)
            return ("ids", [job.id])
        recovery = broker.recover_expired(limit=op[1])
        return ("recovery", sorted(recovery.requeued), sorted(recovery.dead))
    except SluicegateError as exc:
        return ("error", type(exc).__name__)


def _ranks(broker: Broker) -> dict[int, int]:
    """Job ids by creation order. Ids are opaque: a broker may skip some (SQLite does when a
    unique key turns an insert into nothing), so brokers are compared by rank, not id."""
    ids = sorted(j.id for j in broker.list_jobs(limit=10_000))
    return {job_id: rank for rank, job_id in enumerate(ids)}


def _normalized(broker: Broker, result: tuple[Any, ...]) -> tuple[Any, ...]:
    rank = _ranks(broker)
    if result[0] == "ids":
        return ("ids", [rank[i] for i in result[1]])
    if result[0] == "recovery":
        return ("recovery", [rank[i] for i in result[1]], [rank[i] for i in result[2]])
    return result


def _observe(broker: Broker) -> object:
    rank = _ranks(broker)
    return (
        [{**j.to_dict(), "id": rank[j.id]} for j in broker.list_jobs(limit=10_000)],
        broker.stats().to_dict(),
        [broker.has_work(qs) for qs in (["a"], ["b"], ["a", "b"])],
        broker.next_due(["a", "b"]),
    )


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=OPS)
def test_behaves_like_the_reference_broker(
    broker_kind: BrokerKind, tmp_path: Path, clock: FakeClock, ops: list[tuple[Any, ...]]
) -> None:
    if broker_kind.name == "memory":
        pytest.skip("memory is the reference")
    folder = tmp_path / f"example-{len(list(tmp_path.iterdir()))}"
    folder.mkdir()
    clock.now = EXAMPLE_START  # the fixture outlives one example
    reference = MemoryBroker(clock=clock)
    tested = broker_kind.open(broker_kind.url(folder), clock)
    try:
        ref_claims: list[Claim] = []
        tested_claims: list[Claim] = []
        for op in ops:
            if op[0] == "advance":
                clock.advance(op[1])
                continue
            expected = _normalized(reference, _step(reference, ref_claims, op))
            assert _normalized(tested, _step(tested, tested_claims, op)) == expected, op
            assert _observe(tested) == _observe(reference), op
    finally:
        tested.close()
        reference.close()


__all__ = [
    name
    for name in list(globals())
    if name.startswith(("Test", "test_"))
    or name in ("clock", "broker_url", "open_broker", "broker")
]
