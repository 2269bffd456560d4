"""Each service of the worker loop on its own, against a real broker, with no loop running.

Time is passed in (``now``) and, where leases must expire, the broker gets a fake
clock. Broker failure is a real broker whose ``record`` raises ``BrokerUnavailable``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from sluicegate import App, JobState
from sluicegate.brokers import Retention
from sluicegate.brokers.base import ClaimBatch
from sluicegate.brokers.memory import MemoryBroker
from sluicegate.brokers.sqlite import SQLiteBroker
from sluicegate.errors import BrokerUnavailable
from sluicegate.job import Claim, ClaimedJob, JobSpec
from sluicegate.outcomes import Outcome, Succeeded
from sluicegate.worker import parse_pool_spec
from sluicegate.worker.pool import PoolState
from sluicegate.worker.services import (
    Backoff,
    Claimer,
    Counters,
    Dispatcher,
    LeaseKeeper,
    Pruner,
    Recoverer,
    ResultWriter,
    Shutdown,
)
from sluicegate.worker.services.base import Service
from sluicegate.worker.services.results import SHORT_BODY
from support.waiting import wait_for


class FlakyBroker(SQLiteBroker):
    """A real SQLite broker whose batched write fails while ``down`` is set."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.down = False
        self.writes: list[tuple[list[Claim], list[Outcome]]] = []

    def record(self, started: Sequence[Claim], outcomes: Sequence[Outcome]) -> list[Claim]:
        if self.down:
            raise BrokerUnavailable("database is unreachable")
        self.writes.append((list(started), list(outcomes)))
        return super().record(started, outcomes)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def enqueue(broker: MemoryBroker | SQLiteBroker, queue: str, n: int = 1) -> None:
    broker.enqueue([JobSpec("t", queue, "[]", "{}") for _ in range(n)])


@pytest.fixture
def flaky(tmp_path: Path) -> Iterator[FlakyBroker]:
    broker = FlakyBroker(f"sqlite:///{tmp_path}/jobs.db")
    yield broker
    broker.close()


# ---- result writer -----------------------------------------------------------------------
def test_result_writer_puts_back_on_broker_failure_nothing_lost_order_kept(
    flaky: FlakyBroker, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="sluicegate.worker")
    enqueue(flaky, "q", 3)
    claims = [c.claim for c in flaky.claim(["q"], 3, 30, "w")]
    leases = LeaseKeeper(flaky, 30)
    leases.hold(claims)
    counters, backoff = Counters(), Backoff()
    writer = ResultWriter(flaky, leases, counters, backoff)
    for claim in claims:
        writer.started(claim)
    first = [Succeeded(c, "1") for c in claims[:2]]
    for outcome in first:
        writer.add(outcome)

    flaky.down = True
    writer.run(time.monotonic())
    assert flaky.writes == []
    assert writer.unwritten == 5 and writer.due_in(0) == 0
    assert backoff.delay > 0 and not backoff.ready(time.monotonic())
    assert [flaky.get_job(c.job_id).state for c in claims] == [JobState.CLAIMED] * 3  # type: ignore[union-attr]

    last = Succeeded(claims[2], "3")  # came in during the outage: written after the rest
    writer.add(last)
    flaky.down = False
    writer.flush()
    assert flaky.writes == [(claims, [*first, last])]
    assert writer.unwritten == 0 and writer.due_in(0) is None
    assert [flaky.get_job(c.job_id).state for c in claims] == [JobState.SUCCEEDED] * 3  # type: ignore[union-attr]
    assert counters.succeeded == 3 and not leases.held
    assert backoff.delay == 0
    messages = [r.getMessage() for r in caplog.records]
    assert messages.count("broker error (will retry): database is unreachable") == 1
    assert messages.count("broker reachable again") == 1


def test_result_writer_reports_refused_outcomes_as_lost(flaky: FlakyBroker) -> None:
    enqueue(flaky, "q")
    (claimed,) = flaky.claim(["q"], 1, 30, "w")
    flaky.release([claimed.claim])  # someone else ended this claim: the token is stale
    lost: list[Claim] = []
    counters = Counters()
    writer = ResultWriter(flaky, LeaseKeeper(flaky, 30), counters, on_lost=lost.append)
    writer.add(Succeeded(claimed.claim, "null"))
    writer.flush()
    assert lost == [claimed.claim]
    assert (counters.lease_lost, counters.succeeded) == (1, 0)
    assert flaky.get_job(claimed.claim.job_id).state == JobState.READY  # type: ignore[union-attr]


# ---- claimer -------------------------------------------------------------------------------
def claimer_for(broker: MemoryBroker, spec: str) -> tuple[Claimer, list[str]]:
    """A claimer whose dispatch only notes the queue (slots never fill: each run claims
    as many jobs as the pool has slots)."""
    got: list[str] = []

    def dispatch(pool: PoolState, job: ClaimedJob) -> None:
        got.append(job.job.queue)

    pool = PoolState(parse_pool_spec(spec))
    return Claimer(pool, broker, dispatch, lease=30, worker_id="w"), got


def run_turns(claimer: Claimer, turns: int) -> None:
    for _ in range(turns):
        claimer.wake()
        assert claimer.due_in(time.monotonic()) == 0
        claimer.run(time.monotonic())


def test_claimer_splits_a_backlog_of_both_queues_about_three_to_one() -> None:
    broker = MemoryBroker()
    enqueue(broker, "email", 200)
    enqueue(broker, "reports", 200)
    claimer, got = claimer_for(broker, "mixed=email*3,reports:4")
    run_turns(claimer, 25)
    assert len(got) == 100
    assert 2.4 <= got.count("email") / got.count("reports") <= 3.6, got


def test_claimer_idle_queue_earns_no_credit() -> None:
    broker = MemoryBroker()
    enqueue(broker, "reports", 40)
    claimer, got = claimer_for(broker, "mixed=email*3,reports:4")
    run_turns(claimer, 12)  # email idle all along, reports drained
    assert got == ["reports"] * 40
    enqueue(broker, "email", 100)
    enqueue(broker, "reports", 100)
    got.clear()
    run_turns(claimer, 10)
    # Without the rule, email would take the next ~120 slots to catch up on its pass.
    assert 20 <= got.count("email") <= 32 and got.count("reports") >= 8, got


def test_claimer_claims_only_for_free_slots_and_stops_looking_when_short() -> None:
    broker = MemoryBroker()
    enqueue(broker, "q", 3)
    pool = PoolState(parse_pool_spec("p=q:2"))

    def occupy(pool: PoolState, job: ClaimedJob) -> None:
        pool.busy[job.claim] = job

    claimer = Claimer(pool, broker, occupy, lease=30, worker_id="w")
    claimer.start()
    claimer.run(time.monotonic())
    assert len(pool.busy) == 2 and pool.backlog  # full: claim again without probing
    assert claimer.due_in(time.monotonic()) > 0  # until a slot frees (or the poll)
    pool.busy.clear()
    assert claimer.due_in(time.monotonic()) == 0
    claimer.run(time.monotonic())
    assert len(pool.busy) == 1 and not pool.backlog
    assert not pool.maybe_more  # came back short: no more looking until woken or polled
    assert claimer.due_in(time.monotonic()) > 0
    claimer.wake()
    assert claimer.due_in(time.monotonic()) == 0
    claimer.halt()
    assert claimer.due_in(time.monotonic()) is None


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


# ---- dispatcher and shutdown -------------------------------------------------------------------
@pytest.fixture
def app(tmp_path: Path) -> Iterator[App]:
    app = App(broker=f"sqlite:///{tmp_path}/jobs.db")
    yield app
    app.close()


def test_shutdown_waits_for_running_jobs_then_releases_leftovers_without_an_attempt(
    app: App,
) -> None:
    gate, fast_done = threading.Event(), threading.Event()

    @app.task(queue="q")
    def slow() -> None:
        gate.wait(10)

    @app.task(queue="q")
    def fast() -> None:
        fast_done.set()

    slow_job, fast_job = slow.enqueue(), fast.enqueue()
    broker = app.broker
    pool = PoolState(parse_pool_spec("p=q:2"))
    counters = Counters()
    leases = LeaseKeeper(broker, 30)
    writer = ResultWriter(broker, leases, counters)
    dispatcher = Dispatcher(app, [pool], broker, writer, leases, result_limit=1 << 20)
    claimer = Claimer(pool, broker, dispatcher.dispatch, lease=30, worker_id="w")
    shutdown = Shutdown(5.0, broker, [claimer], dispatcher, writer, leases, counters)
    dispatcher.start()
    try:
        claimer.run(time.monotonic())
        assert fast_done.wait(5) and dispatcher.busy == 2
        assert shutdown.due_in(time.monotonic()) is None

        shutdown.request()
        now = time.monotonic()
        assert shutdown.due_in(now) == 0
        shutdown.run(now)
        assert claimer.due_in(now) is None  # no more claims, at once
        wait_for(lambda: dispatcher.finishing, timeout=5, what="the fast job's report")
        assert dispatcher.due_in(time.monotonic()) == 0
        dispatcher.run(time.monotonic())
        assert dispatcher.busy == 1
        assert not shutdown.finished and 0 < shutdown.due_in(time.monotonic()) <= 5  # type: ignore[operator]

        shutdown.request()  # a second request: release now
        shutdown.run(time.monotonic())
        assert shutdown.finished
    finally:
        gate.set()
        dispatcher.stop()
    assert app.get_job(fast_job.id).state == JobState.SUCCEEDED  # its outcome was written
    released = app.get_job(slow_job.id)
    assert released.state == JobState.READY and released.attempts == 0
    assert released.worker_id is None
    assert counters.released == 1 and not leases.held


def test_dispatcher_refuses_an_unknown_task_without_taking_a_slot(app: App) -> None:
    app.enqueue("nobody.knows", queue="q")
    broker = app.broker
    pool = PoolState(parse_pool_spec("p=q:2"))
    leases = LeaseKeeper(broker, 30)
    counters = Counters()
    writer = ResultWriter(broker, leases, counters)
    dispatcher = Dispatcher(app, [pool], broker, writer, leases, result_limit=1 << 20)
    dispatcher.start()
    try:
        (claimed,) = broker.claim(["q"], 1, 30, "w")
        dispatcher.dispatch(pool, claimed)
        assert pool.free == 2 and dispatcher.due_in(time.monotonic()) is None
        writer.flush()
    finally:
        dispatcher.stop()
    dead = app.get_job(claimed.job.id)
    assert dead.state == JobState.DEAD and dead.last_error is not None
    assert dead.last_error.type == "UnknownTask"
    assert counters.dead == 1


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


# ---- failures between the services' broker calls ------------------------------------------
class FailingClaims(MemoryBroker):
    """A real memory broker whose claim of one queue fails while ``failing`` names it."""

    failing: str | None = None

    def claim(
        self,
        queues: Sequence[str],
        n: int,
        lease: float,
        worker_id: str,
        host: str = "",
        done: Sequence[Claim] = (),
    ) -> ClaimBatch:
        if self.failing in queues:
            raise BrokerUnavailable(f"claim of {self.failing} failed")
        return super().claim(queues, n, lease, worker_id, host, done)


def test_weighted_claim_failing_midway_still_dispatches_what_it_claimed() -> None:
    """Weighted claims commit per queue: jobs claimed before a later queue's claim failed
    are dispatched (so their leases are held), and the failure starts the backoff."""
    broker = FailingClaims()
    enqueue(broker, "a")
    enqueue(broker, "b")
    claimer, got = claimer_for(broker, "p=a*1,b*1:2")
    broker.failing = "b"
    claimer.wake()
    claimer.run(time.monotonic())
    assert got == ["a"]
    assert claimer.backoff.delay > 0 and claimer.pool.maybe_more  # look again after it
    broker.failing = None
    claimer.run(time.monotonic())
    assert got == ["a", "b"]
    assert claimer.backoff.delay == 0


def test_a_refused_start_is_no_longer_renewed(flaky: FlakyBroker) -> None:
    enqueue(flaky, "q")
    (claimed,) = flaky.claim(["q"], 1, 30, "w")
    leases = LeaseKeeper(flaky, 30)
    leases.hold([claimed.claim])
    flaky.release([claimed.claim])  # the claim ended elsewhere: its start is refused
    writer = ResultWriter(flaky, leases, Counters())
    writer.started(claimed.claim)
    writer.flush()
    assert claimed.claim not in leases.held


def test_heartbeats_and_recovery_that_get_through_end_an_outage(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="sluicegate.worker")
    broker = MemoryBroker()
    enqueue(broker, "q")
    (claimed,) = broker.claim(["q"], 1, 30, "w")
    for service in ("heartbeat", "recovery"):
        backoff = Backoff()
        backoff.failed(BrokerUnavailable("down"))
        if service == "heartbeat":
            keeper = LeaseKeeper(broker, 30, backoff=backoff)
            keeper.hold([claimed.claim])
            keeper.run(keeper.next_beat)
        else:
            Recoverer(broker, 30, backoff=backoff).recover()
        assert backoff.delay == 0, service
    messages = [r.getMessage() for r in caplog.records]
    assert messages.count("broker reachable again") == 2


class Recording(Service):
    """A service added to a worker in one line: records the hooks the loop calls, and
    holds a burst worker until it has been woken."""

    def __init__(self, fail_stop: bool = False) -> None:
        self.calls: list[str] = []
        self.fail_stop = fail_stop
        self.uses_broker = False

    def wake(self) -> None:
        self.calls.append("wake")

    def halt(self) -> None:
        self.calls.append("halt")

    def drained(self) -> bool:
        return "wake" in self.calls

    def stop(self) -> None:
        self.calls.append("stop")
        if self.fail_stop:
            raise RuntimeError("could not deregister")


def test_an_added_service_gets_every_hook_and_cannot_break_the_stop(app: App) -> None:
    from sluicegate.worker import PoolSpec, Worker

    worker = Worker(app, [PoolSpec("p", ("q",), 1)], burst=True, poll_interval=0.05)
    recording, failing = Recording(), Recording(fail_stop=True)
    worker.services += [recording, failing]  # adding a service is one line
    runner = threading.Thread(target=worker.run)
    runner.start()
    # Burst mode waits: the added service is not drained. Shown by whole loop turns (each
    # ends with the burst check) after the paused set was read (until then a burst
    # worker never counts as drained anyway): a turn began after them (turned_at).
    wait_for(lambda: worker.pauses.paused is not None or not runner.is_alive())
    for _ in range(2):
        since = worker.health.turned_at
        wait_for(lambda s=since: worker.health.turned_at > s or not runner.is_alive())
    assert runner.is_alive()
    app.enqueue("nothing", queue="elsewhere")  # a wake-up reaches every service
    runner.join(timeout=10)
    assert not runner.is_alive()
    assert recording.calls[0] == "wake" and recording.calls[-1] == "stop"
    assert failing.calls[-1] == "stop"  # its stop raised; the others still stopped
    worker.stop()  # a shutdown halts every service, added ones too
    worker.shutdown.run(time.monotonic())
    assert "halt" in recording.calls and "halt" in failing.calls


def test_pruner_deletes_past_retention_in_its_own_thread_and_survives_failures(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock = Clock()
    broker = SQLiteBroker(f"sqlite:///{tmp_path}/jobs.db", clock=clock)
    enqueue(broker, "q", 2)
    old, new = broker.claim(["q"], 2, 30, "w")
    broker.ack(old.claim)
    clock.now += 8 * 86_400  # the first ack is now 8 days old; the default keeps 7
    broker.ack(new.claim)
    failures = {"left": 1}
    real_prune = broker.prune

    def prune(retention: Retention, batch: int = 1000) -> int:
        if failures["left"]:
            failures["left"] -= 1
            raise BrokerUnavailable("database is locked")
        return real_prune(retention, batch)

    broker.prune = prune  # type: ignore[method-assign]
    pruner = Pruner(broker, Retention(), interval=0.05)
    assert pruner.due_in(time.monotonic()) is None  # never due on the loop: its own thread
    pruner.start()
    wait_for(lambda: pruner.deleted, timeout=10, what="a prune after the failed one")
    pruner.stop()
    assert pruner.deleted == 1
    assert broker.get_job(old.claim.job_id) is None
    assert broker.get_job(new.claim.job_id) is not None
    assert "prune failed (will retry): database is locked" in caplog.text
    broker.close()


def test_only_short_bodies_outcomes_ride_with_a_claim(flaky: FlakyBroker) -> None:
    """A claim that shares an ack's transaction waits for its flush: outcomes of bodies
    that ran SHORT_BODY or longer are left for the writer's own write, after the claim."""
    enqueue(flaky, "q", 2)
    quick, slow = (c.claim for c in flaky.claim(["q"], 2, 30, "w"))
    leases = LeaseKeeper(flaky, 30)
    leases.hold([quick, slow])
    writer = ResultWriter(flaky, leases, Counters())
    handed: list[list[Outcome]] = []

    def claim(started: list[Claim], outcomes: list[Outcome]) -> tuple[ClaimBatch, list[Claim]]:
        handed.append(outcomes)
        return ClaimBatch(), flaky.record(started, outcomes)

    writer.add(Succeeded(quick, "1"), took=SHORT_BODY / 10)
    assert writer.along_with(claim) == ClaimBatch() and handed == [[Succeeded(quick, "1")]]
    assert writer.unwritten == 0
    writer.add(Succeeded(slow, "2"), took=SHORT_BODY)
    assert writer.along_with(claim) is None and len(handed) == 1  # not handed over ...
    assert writer.unwritten == 1
    writer.flush()  # ... but written on its own
    assert writer.unwritten == 0
    assert flaky.get_job(slow.job_id).state == JobState.SUCCEEDED  # type: ignore[union-attr]
