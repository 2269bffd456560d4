"""Waiting for a job's result (``job.wait``, ``app.wait``, ``wait_async``) over the broker:
each outcome (succeeded, dead, cancelled, timed out, no such job), sync and async, woken
by the broker's own finished notifications; and what many waiters cost the broker.

Jobs are finished through the broker's own operations. Where the broker's storage is
shared, they are finished through ANOTHER handle on it, as a worker process would: the
wake-up then comes through the broker's cross-process path (NOTIFY, a doorbell), not a
call within the handle.
"""

from __future__ import annotations

import asyncio
import math
import pickle
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from ...app import App
from ...brokers.base import Broker
from ...errors import ConfigError, InvalidJobId, JobCancelled, JobFailed, JobNotFound
from ...outcomes import Succeeded
from .. import BrokerKind, FakeClock
from .helpers import BOOM, LEASE, S, put, suite, take

SLOW = 30.0  # s: a bound no passing test gets near (a failing one fails, not hangs)


@pytest.fixture
def waiting_app(broker: Broker) -> Iterator[App]:
    """An App on the test's broker, for waiting; its hub is stopped at teardown (the
    broker itself is the ``broker`` fixture's to close)."""
    app = App(broker=broker, config=False)
    yield app
    app._stop_waiting()


@pytest.fixture
def finisher(broker: Broker, broker_kind: BrokerKind, open_broker: Callable[[], Broker]) -> Broker:
    """The handle that finishes jobs: another one on the same storage where there can be."""
    return open_broker() if broker_kind.shared else broker


def later(action: Callable[[], Any], after: float = 0.05) -> threading.Thread:
    """Run ``action`` in a thread after ``after`` s, so that a waiter is asleep by then."""

    def run() -> None:
        time.sleep(after)
        action()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def ack(broker: Broker, result_json: str = "null") -> Callable[[], None]:
    """Claim the next job of queue q and ack it with ``result_json``."""
    return lambda: broker.ack(take(broker).claim, result_json)


def bury(broker: Broker) -> Callable[[], None]:
    return lambda: broker.fail(take(broker).claim, BOOM, None)


class TestWaitOutcomes:
    """Each outcome, sync and async, the job finishing while the caller waits."""

    def test_success_returns_the_result(self, waiting_app: App, finisher: Broker) -> None:
        job = put(waiting_app.broker).bound(waiting_app)
        later(ack(finisher, '{"sum": 3}'))
        assert job.wait(SLOW) == {"sum": 3}

    def test_success_async(self, waiting_app: App, finisher: Broker) -> None:
        job = put(waiting_app.broker).bound(waiting_app)
        later(ack(finisher, "[1, 2]"))
        assert asyncio.run(job.wait_async(SLOW)) == [1, 2]

    def test_dead_raises_job_failed_with_the_last_error(
        self, waiting_app: App, finisher: Broker
    ) -> None:
        job = put(waiting_app.broker)
        later(bury(finisher))
        with pytest.raises(JobFailed, match="ValueError: boom") as caught:
            waiting_app.wait(job.id, SLOW)
        failed = caught.value
        assert (failed.job_id, failed.type, failed.message) == (job.id, BOOM.type, BOOM.message)
        assert failed.traceback == BOOM.traceback

    def test_dead_async(self, waiting_app: App, finisher: Broker) -> None:
        job = put(waiting_app.broker).bound(waiting_app)
        later(bury(finisher))
        with pytest.raises(JobFailed) as caught:
            asyncio.run(job.wait_async(SLOW))
        assert (caught.value.type, caught.value.traceback) == (BOOM.type, BOOM.traceback)

    def test_cancelled_raises_job_cancelled(self, waiting_app: App, finisher: Broker) -> None:
        job = put(waiting_app.broker).bound(waiting_app)
        later(lambda: finisher.cancel(job.id))
        with pytest.raises(JobCancelled, match=f"job {job.id} was cancelled"):
            job.wait(SLOW)

    def test_cancelled_async_while_running(self, waiting_app: App, finisher: Broker) -> None:
        """A running job cancelled by an operator: the waiter hears at once, not when (or
        if) the worker's refused outcome comes."""
        job = put(waiting_app.broker).bound(waiting_app)
        finisher.start(take(finisher).claim)
        later(lambda: finisher.cancel(job.id))
        with pytest.raises(JobCancelled):
            asyncio.run(job.wait_async(SLOW))

    def test_cancel_by_filter_wakes_waiters(self, waiting_app: App, finisher: Broker) -> None:
        jobs = [put(waiting_app.broker).bound(waiting_app) for _ in range(3)]
        later(lambda: finisher.cancel_matching(state=S.READY, queue="q"))

        async def all_of_them() -> list[Any]:
            waits = [j.wait_async(SLOW) for j in jobs]
            return await asyncio.gather(*waits, return_exceptions=True)

        assert [type(r) for r in asyncio.run(all_of_them())] == [JobCancelled] * 3

    def test_lease_expiry_to_dead_raises_job_failed(
        self, waiting_app: App, finisher: Broker, clock: FakeClock
    ) -> None:
        """Recovery that ends a job (no attempts left) wakes waiters like a failure does."""
        job = put(waiting_app.broker, max_attempts=1)
        take(finisher)

        def expire() -> None:
            clock.advance(LEASE + 1)
            assert finisher.recover_expired().dead == [job.id]

        later(expire)
        with pytest.raises(JobFailed, match="worker lost") as caught:
            waiting_app.wait(job.id, SLOW)
        assert caught.value.type == "WorkerLost"

    def test_timeout_raises_timeout_error(self, waiting_app: App) -> None:
        job = put(waiting_app.broker).bound(waiting_app)
        with pytest.raises(TimeoutError, match=f"job {job.id} did not finish within 0.2 s"):
            job.wait(0.2)
        with pytest.raises(TimeoutError):
            asyncio.run(job.wait_async(0.2))
        with pytest.raises(TimeoutError):
            job.wait(0)  # no time at all: an unfinished job times out at once
        assert waiting_app._waiting().waiting == 0  # timed-out waiters leave nothing behind

    def test_a_job_that_finished_already_returns_at_once(
        self, waiting_app: App, finisher: Broker
    ) -> None:
        ok, dead, cancelled = (put(waiting_app.broker) for _ in range(3))
        finisher.ack(take(finisher).claim, '"done"')
        finisher.fail(take(finisher).claim, BOOM, None)
        finisher.cancel(cancelled.id)
        assert waiting_app.wait(ok.id, 0) == "done"
        assert asyncio.run(waiting_app.wait_async(ok.id, 0)) == "done"
        with pytest.raises(JobFailed):
            waiting_app.wait(dead.id, SLOW)
        with pytest.raises(JobCancelled):
            asyncio.run(waiting_app.wait_async(cancelled.id, SLOW))

    def test_a_retry_is_not_the_end(self, waiting_app: App, finisher: Broker) -> None:
        """A failure with attempts left does not end the wait; the later ack does."""
        job = put(waiting_app.broker).bound(waiting_app)

        def fail_then_ack() -> None:
            finisher.fail(take(finisher).claim, BOOM, 0.0)
            time.sleep(0.1)
            finisher.ack(take(finisher).claim, "7")

        later(fail_then_ack)
        assert job.wait(SLOW) == 7


class TestWaitInput:
    def test_no_such_job(self, waiting_app: App) -> None:
        with pytest.raises(JobNotFound, match="job 123456 not found"):
            waiting_app.wait(123456, SLOW)
        with pytest.raises(JobNotFound):
            asyncio.run(waiting_app.wait_async(2**70, SLOW))  # no storage holds it
        with pytest.raises(InvalidJobId):
            waiting_app.wait("abc", SLOW)

    @pytest.mark.parametrize("timeout", [-1, -0.001, math.nan, "1", True])
    def test_bad_timeouts_are_refused(self, waiting_app: App, timeout: Any) -> None:
        job = put(waiting_app.broker).bound(waiting_app)
        with pytest.raises(ValueError, match="timeout must be a number of seconds"):
            job.wait(timeout)
        with pytest.raises(ValueError, match="timeout must be a number of seconds"):
            asyncio.run(job.wait_async(timeout))

    def test_a_job_without_an_app_says_how_to_wait(self, waiting_app: App) -> None:
        """A Job straight from the broker (or unpickled) has no way back: a clear error."""
        job = put(waiting_app.broker)
        with pytest.raises(ConfigError, match=rf"use app.wait\({job.id}\)"):
            job.wait(SLOW)
        bound = job.bound(waiting_app)
        assert bound == job and repr(bound) == repr(job)  # the way back is no part of it
        with pytest.raises(ConfigError):
            pickle.loads(pickle.dumps(bound)).wait(SLOW)

    def test_closing_the_app_ends_the_waits(self, waiting_app: App) -> None:
        job = put(waiting_app.broker).bound(waiting_app)
        errors: list[BaseException] = []

        def wait() -> None:
            try:
                job.wait(SLOW)
            except BaseException as exc:
                errors.append(exc)

        thread = threading.Thread(target=wait)
        thread.start()
        while waiting_app._waiting().waiting == 0:
            time.sleep(0.01)
        waiting_app._stop_waiting()
        thread.join(SLOW)
        assert [str(e) for e in errors] == ["the app was closed while waiting for the job"]


class TestManyWaiters:
    WAITERS = 1000

    def test_a_thousand_waiters_cost_a_few_queries_per_completion_batch(
        self, waiting_app: App, finisher: Broker
    ) -> None:
        """1,000 asyncio waiters on 1,000 jobs; all acked in one batch. The hub's reads of
        the broker (each ONE ``finished_jobs`` query for every waited id, counted by the
        hub itself) stay a handful: one per wake-up, not one per waiter."""
        broker = waiting_app.broker
        jobs = [put(broker) for _ in range(self.WAITERS)]
        hub = waiting_app._waiting()

        async def scenario() -> tuple[int, int, list[Any]]:
            waits = [asyncio.ensure_future(waiting_app.wait_async(j.id, SLOW)) for j in jobs]
            while hub.waiting < self.WAITERS:  # every waiter registered and checked once
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.1)
            registered = hub.queries
            claimed = finisher.claim(["q"], self.WAITERS, LEASE, "w1")
            outcomes = [Succeeded(c.claim, str(c.job.id)) for c in claimed]
            assert finisher.record([], outcomes) == []  # one completion batch
            results = await asyncio.gather(*waits)
            return registered, hub.queries - registered, results

        registered, per_batch, results = asyncio.run(scenario())
        assert results == [j.id for j in jobs]
        assert registered <= self.WAITERS + 2  # at most one read per new waiter (+ polls)
        # local wake-up, the broker's notification, at most one safety poll
        assert 1 <= per_batch <= 3, per_batch


__all__ = ["finisher", "waiting_app", *suite(globals())]
