"""Expiring jobs (``JobSpec.expires_at`` / ``expires_in``): a job not claimed by its
expiry ends ``cancelled``, its history's last entry saying ``"reason": "expired"``, and is
never claimed afterwards. The check is the claim's own, in its transaction, on every claim
path (one queue, several, the gated claim of jobs that name limits); the clock is the
broker's (here the fake one)."""

from __future__ import annotations

import threading

import pytest

from ...app import App
from ...brokers.base import Broker
from ...errors import JobCancelled
from ...job import EXPIRED, Job
from ...limits import Limit, Need, encode_needs
from ...outcomes import Retried, Succeeded
from .. import FakeClock
from .async_producers import run
from .helpers import BOOM, LEASE, S, get, put, spec, suite, take

DB: Need = ("db", None, 1)
SLOW = 30.0  # s: a bound no passing test gets near


def claim_ids(broker: Broker, n: int = 100, queues: tuple[str, ...] = ("q",)) -> list[int]:
    batch = broker.claim(list(queues), n, LEASE, "w1", host="h1")
    assert all(c.problem is None for c in batch)
    return sorted(c.job.id for c in batch)


def assert_expired(job: Job, was: str, at: float, attempts: int = 0) -> None:
    """Cancelled by a claim at ``at`` (the broker's clock), from state ``was``."""
    assert job.state is S.CANCELLED
    assert job.finished_at == pytest.approx(at)
    assert job.attempts == attempts
    entry = job.history[-1]
    assert entry["event"] == "cancelled" and entry["reason"] == EXPIRED
    assert entry["from"] == was and entry["attempt"] == attempts
    assert entry["at"] == pytest.approx(at)
    assert "by" not in entry and "worker" not in entry


class TestExpiry:
    def test_none_by_default(self, broker: Broker) -> None:
        job = put(broker)
        assert job.expires_at is None and get(broker, job.id).expires_at is None
        assert take(broker).job.expires_at is None
        assert get(broker, job.id).to_dict()["expires_at"] is None

    def test_stored_and_read_back(self, broker: Broker, clock: FakeClock) -> None:
        absolute = put(broker, expires_at=clock.now + 5.5)
        relative = put(broker, expires_in=7.25)  # from the enqueue, by the broker's clock
        assert absolute.expires_at == pytest.approx(clock.now + 5.5)
        assert relative.expires_at == pytest.approx(clock.now + 7.25)
        for job in (absolute, relative):
            assert get(broker, job.id).expires_at == pytest.approx(job.expires_at)
        listed = {j.id: j.expires_at for j in broker.list_jobs(S.READY, "q", 10)}
        assert listed == {absolute.id: absolute.expires_at, relative.id: relative.expires_at}
        claimed = broker.claim(["q"], 10, LEASE, "w1")
        assert {c.job.id: c.job.expires_at for c in claimed} == listed

    def test_bulk_and_async_enqueue_store_each_jobs_own(
        self, broker: Broker, clock: FakeClock
    ) -> None:
        jobs = broker.enqueue(
            [spec(expires_in=float(i)) if i else spec() for i in range(4)]
            + [spec(expires_at=clock.now + 9, unique_key="k")]
        )
        want = [None, clock.now + 1, clock.now + 2, clock.now + 3, clock.now + 9]
        assert [j.expires_at for j in jobs] == pytest.approx(want)

        async def enqueue() -> list[Job]:
            return await broker.enqueue_async([spec(expires_in=4.0), spec(expires_in=5.0)])

        assert [j.expires_at for j in run(broker, enqueue)] == pytest.approx(
            [clock.now + 4, clock.now + 5]
        )

    def test_an_expired_job_is_never_claimed_and_ends_cancelled(
        self, broker: Broker, clock: FakeClock
    ) -> None:
        job = put(broker, expires_at=clock.now + 10)
        clock.advance(10)  # its expiry exactly: claimable only before it
        batch = broker.claim(["q"], 10, LEASE, "w1")
        assert list(batch) == [] and batch.expired == 1
        assert_expired(get(broker, job.id), "ready", clock.now)
        assert get(broker, job.id).started_at is None
        clock.advance(3600)
        assert claim_ids(broker) == []
        assert get(broker, job.id).state is S.CANCELLED

    def test_one_not_yet_expired_is_claimed_and_runs_past_its_expiry(
        self, broker: Broker, clock: FakeClock
    ) -> None:
        job = put(broker, expires_in=10)
        clock.advance(9.5)
        claimed = take(broker)
        assert claimed.job.id == job.id
        clock.advance(60)  # expiry is about starting: a claimed job finishes as usual
        broker.heartbeat([claimed.claim], LEASE)
        assert broker.record([claimed.claim], [Succeeded(claimed.claim, "1")]) == []
        assert get(broker, job.id).state is S.SUCCEEDED

    def test_only_the_expired_ones_go(self, broker: Broker, clock: FakeClock) -> None:
        soon = put(broker, expires_in=5, args=["soon"])
        later = put(broker, expires_in=50, args=["later"])
        never = put(broker, args=["never"])
        other = put(broker, queue="other", expires_in=5)  # another queue's: any claim ends it
        clock.advance(6)
        assert claim_ids(broker) == [later.id, never.id]
        assert_expired(get(broker, soon.id), "ready", clock.now)
        assert_expired(get(broker, other.id), "ready", clock.now)

    def test_several_queues_in_one_claim(self, broker: Broker, clock: FakeClock) -> None:
        gone = [put(broker, queue=q, expires_in=1, priority=-1) for q in ("a", "b")]
        live = [put(broker, queue=q) for q in ("a", "b")]
        clock.advance(2)
        assert claim_ids(broker, 10, ("a", "b")) == sorted(j.id for j in live)
        for job in gone:
            assert_expired(get(broker, job.id), "ready", clock.now)

    def test_a_scheduled_job_due_after_it_expired_is_never_promoted(
        self, broker: Broker, clock: FakeClock
    ) -> None:
        job = put(broker, run_at=clock.now + 60, expires_at=clock.now + 61)
        clock.advance(30)
        assert claim_ids(broker) == []
        assert get(broker, job.id).state is S.SCHEDULED
        clock.advance(31)  # due and expired at once: it never becomes ready
        assert claim_ids(broker) == []
        assert_expired(get(broker, job.id), "scheduled", clock.now)

    def test_a_delayed_job_is_claimed_between_its_run_at_and_its_expiry(
        self, broker: Broker, clock: FakeClock
    ) -> None:
        job = put(broker, delay=60, expires_in=120)
        clock.advance(59)
        assert claim_ids(broker) == []
        clock.advance(1)
        assert claim_ids(broker) == [job.id]

    def test_a_retried_job_past_its_expiry_expires_at_its_next_claim(
        self, broker: Broker, clock: FakeClock
    ) -> None:
        job = put(broker, expires_in=30)
        claimed = take(broker)
        broker.record((), [Retried(claimed.claim, BOOM, 100.0)])  # backoff past its expiry
        clock.advance(100)
        assert claim_ids(broker) == []
        expired = get(broker, job.id)
        assert_expired(expired, "scheduled", clock.now, attempts=1)
        assert expired.last_error == BOOM  # the failed attempt's error stays
        assert [e["event"] for e in expired.history] == ["failed", "cancelled"]

    def test_a_released_job_past_its_expiry_expires(self, broker: Broker, clock: FakeClock) -> None:
        job = put(broker, expires_in=30)
        claimed = take(broker)
        clock.advance(40)
        assert broker.release([claimed.claim]) == []  # handed back at a shutdown: not started
        assert claim_ids(broker) == []
        assert_expired(get(broker, job.id), "ready", clock.now)

    def test_many_expired_jobs_ahead_of_a_live_one(self, broker: Broker, clock: FakeClock) -> None:
        """More than one claim cancels (the SQL brokers take 1,000 at a time): the claim
        still returns the live job behind them, and claims go on ending the rest."""
        dead = broker.enqueue([spec(args=[i], priority=-1, expires_in=5) for i in range(1500)])
        live = put(broker, priority=0)
        clock.advance(5)
        assert claim_ids(broker, 1) == [live.id]
        for _ in range(3):
            assert claim_ids(broker, 10) == []
        states = {get(broker, j.id).state for j in dead}
        assert states == {S.CANCELLED}
        stats = broker.stats().queues["q"]
        assert stats.counts.get(S.CANCELLED) == 1500 and not stats.counts.get(S.READY)

    def test_the_gated_claim_path(self, broker: Broker, clock: FakeClock) -> None:
        """Jobs that name limits go through the gated claim: it expires them too, and
        expired jobs neither take tokens nor hide the live ones."""
        broker.register_limits([Limit("db", concurrency=2)])
        gated_gone = broker.enqueue(
            [spec(limits=encode_needs([DB]), priority=-1, expires_in=5) for _ in range(3)]
        )
        plain_gone = put(broker, priority=-1, expires_in=5)
        gated_live = put(broker, limits=encode_needs([DB]))
        plain_live = put(broker)
        clock.advance(5)
        assert claim_ids(broker, 10) == sorted([gated_live.id, plain_live.id])
        for job in [*gated_gone, plain_gone]:
            assert_expired(get(broker, job.id), "ready", clock.now)
        # Again, after a gated claim (PostgreSQL's later ones take its one-statement path).
        more = broker.enqueue(
            [spec(limits=encode_needs([DB]), priority=-1, expires_in=5) for _ in range(2)]
        )
        live = put(broker, limits=encode_needs([DB]))
        clock.advance(5)
        assert claim_ids(broker, 10) == [live.id]
        for job in more:
            assert_expired(get(broker, job.id), "ready", clock.now)

    def test_an_operators_retry_drops_the_expiry(self, broker: Broker, clock: FakeClock) -> None:
        job = put(broker, expires_in=5)
        clock.advance(5)
        assert claim_ids(broker) == []
        revived = broker.retry(job.id)
        assert revived.state is S.READY and revived.expires_at is None
        assert claim_ids(broker) == [job.id]

    def test_an_expired_job_frees_its_unique_key(self, broker: Broker, clock: FakeClock) -> None:
        first = put(broker, unique_key="k", expires_in=5)
        clock.advance(5)
        assert claim_ids(broker) == []
        again = put(broker, unique_key="k")
        assert again.id != first.id and again.state is S.READY


class TestExpiryWaiters:
    """``waiting_app`` and ``finisher`` (the handle that claims: another one on the same
    storage where there can be) are wait_results' fixtures."""

    def test_wait_raises_job_cancelled(
        self, waiting_app: App, finisher: Broker, clock: FakeClock
    ) -> None:
        job = put(waiting_app.broker, expires_in=5).bound(waiting_app)
        clock.advance(5)

        def claim_later() -> None:
            threading.Event().wait(0.05)  # the waiter is asleep by then
            finisher.claim(["q"], 1, LEASE, "w1")

        thread = threading.Thread(target=claim_later, daemon=True)
        thread.start()
        with pytest.raises(JobCancelled):
            job.wait(SLOW)
        thread.join()


__all__ = suite(globals())
