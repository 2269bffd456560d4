"""Pausing a queue with real worker processes (SQLite and PostgreSQL), and an idle pool.

Two ``sluicegate worker`` processes share a queue ``work`` and a queue ``other``. A pause
of ``work`` stops new starts from it within about a second on both, while its running jobs
finish and ``other`` keeps flowing; enqueue into it still works; a worker restarted while
it is paused leaves it alone; a resume drains its backlog.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import chaosapp
import pytest

from sluicegate import App, Job, JobState
from sluicegate.brokers.memory import MemoryBroker
from sluicegate.job import JobSpec
from sluicegate.worker import PoolSpec, Worker
from sluicegate.worker.pool import PoolState, parse_pool_spec
from sluicegate.worker.services.claimer import Claimer
from sluicegate.worker.services.pauses import REFRESH, WAKE_GAP, PauseWatcher
from support.brokers import over_brokers
from support.fleet import Fleet, WorkerProcess, counts, enqueue, stop_all, wait_for

POOLS = ["mixed=work,other:2", "only=work:1"]  # 3 slots on work per worker, 2 on other
SLOW = 4.0  # s: the first jobs still run when the pause has taken effect
BOUND = 5.0  # "about a second", with slack for a busy 2-core machine


def started(worker: WorkerProcess) -> None:
    wait_for(lambda: " started: " in worker.log() or not worker.alive(), timeout=60)
    assert worker.alive(), worker.log()


def states_of(app: App, jobs: list[Job]) -> list[JobState]:
    return [app.get_job(j.id).state for j in jobs]


def ran_on(app: App, jobs: list[Job], pid: int) -> bool:
    return any(app.get_job(j.id).result == pid for j in jobs)


@over_brokers
def test_pause_and_resume_with_two_workers(fleet: Fleet, producer: App) -> None:
    workers = [fleet.start(POOLS, lease=5), fleet.start(POOLS, lease=5)]
    for worker in workers:
        started(worker)
    first = [enqueue(producer, chaosapp.slow, SLOW, queue="work") for _ in range(6)]
    waiting = [enqueue(producer, chaosapp.slow, 0.1, queue="work") for _ in range(4)]
    wait_for(lambda: all(s is JobState.RUNNING for s in states_of(producer, first)))

    # Pause: both workers see it within about a second, before any first job ends.
    paused_at = time.monotonic()
    assert producer.pause_queue("work", by="test") is True
    for worker in workers:
        wait_for(lambda w=worker: "queue work paused" in w.log(), timeout=BOUND, what="a pause")
    seen_in = time.monotonic() - paused_at
    assert seen_in < SLOW - 0.5, f"pause seen after {seen_in:.2f} s"
    print(f"pause seen by both workers {seen_in:.2f} s after it was stored")

    # Enqueue still works; other queues keep flowing; running jobs finish.
    later = [enqueue(producer, chaosapp.slow, 0.1, queue="work") for _ in range(3)]
    other = [enqueue(producer, chaosapp.slow, 0.2, queue="other") for _ in range(6)]
    wait_for(lambda: all(s is JobState.SUCCEEDED for s in states_of(producer, other)))
    wait_for(lambda: all(s is JobState.SUCCEEDED for s in states_of(producer, first)))
    wait_for(lambda: counts(producer.broker, "other")["succeeded"] == 6)
    assert all(s is JobState.READY for s in states_of(producer, waiting + later))
    assert producer.get_job(later[0].id).attempts == 0

    # A worker restarted while the queue is paused leaves it alone from its first claim.
    stop_all([workers[0]])
    fresh = fleet.start(POOLS, lease=5)
    started(fresh)
    wait_for(lambda: "queue work paused" in fresh.log(), timeout=BOUND, what="the pause read")
    probes: list[Job] = []

    def fresh_claims_other() -> bool:
        """One probe at a time: the next only once the last one finished elsewhere."""
        if probes and not producer.get_job(probes[-1].id).finished:
            return False
        if ran_on(producer, probes, fresh.pid):
            return True
        probes.append(enqueue(producer, chaosapp.slow, 0.05, queue="other"))
        return False

    wait_for(fresh_claims_other, timeout=60, what="a job of 'other' run by the new worker")
    assert all(s is JobState.READY for s in states_of(producer, waiting + later))
    assert counts(producer.broker, "work")["ready"] == len(waiting + later)

    # Resume: the backlog drains within about a second's notice.
    assert producer.resume_queue("work") is True
    wait_for(lambda: all(s is JobState.SUCCEEDED for s in states_of(producer, waiting + later)))
    for worker in (workers[1], fresh):
        assert "queue work resumed" in worker.log()
    stop_all([workers[1], fresh])
    for worker in fleet.started:
        assert "Traceback" not in worker.log(), worker.log()


def test_a_pool_whose_queues_are_all_paused_sits_idle(
    app: App, run_worker: Callable[..., Worker]
) -> None:
    """No look at the broker for work and no hot loop: after a wake-up the claimer is
    next due only at its fallback poll, until a resume wakes it."""

    @app.task(queue="q")
    def noop() -> None:
        pass

    app.pause_queue("q")
    job = noop.enqueue()
    worker = run_worker([PoolSpec("p", ("q",), 2)], poll_interval=0.2)
    wait_for(lambda: worker.pauses.paused == frozenset({"q"}))
    claimer = worker.claimers[0]
    looked = claimer.attempted_at
    for _ in range(5):
        noop.enqueue()  # a wake-up: a claim if the queue were not paused
        wait_for(lambda: not claimer.pool.maybe_more)
        assert claimer.due_in(time.monotonic()) > 0.0  # type: ignore[operator]
    assert claimer.attempted_at == looked  # it never looked at the broker for work
    assert app.get_job(job.id).state is JobState.READY
    assert app.resume_queue("q") is True
    wait_for(lambda: app.get_job(job.id).state is JobState.SUCCEEDED)


# ---- the pause watcher and the claimer, on the memory broker ---------------------------------
def watched_claimer(broker: MemoryBroker, spec: str) -> tuple[Claimer, PauseWatcher, list[str]]:
    """A claimer whose dispatch only notes the queue, and the watcher it takes pauses from."""
    got: list[str] = []
    pool = PoolState(parse_pool_spec(spec))
    claimer = Claimer(pool, broker, lambda _p, job: got.append(job.job.queue), lease=30,
                      worker_id="w")  # fmt: skip
    watcher = PauseWatcher(broker, pool.spec.queues, claimer.wake)
    claimer.open_queues = watcher.open_queues
    return claimer, watcher, got


def turn(claimer: Claimer, watcher: PauseWatcher) -> None:
    now = time.monotonic()
    if watcher.due_in(now) <= 0:  # type: ignore[operator]
        watcher.run(now)
    claimer.wake()
    claimer.run(now)


def fill(broker: MemoryBroker, queue: str, n: int) -> None:
    broker.enqueue(
        [JobSpec(task="t", queue=queue, args_json="[]", kwargs_json="{}") for _ in range(n)]
    )


def test_no_claim_before_the_paused_set_is_read() -> None:
    broker = MemoryBroker()
    fill(broker, "a", 3)
    claimer, watcher, got = watched_claimer(broker, "p=a:2")
    claimer.wake()
    claimer.run(time.monotonic())
    assert got == []  # a worker restarted while "a" is paused must not claim first
    turn(claimer, watcher)
    assert got == ["a", "a"]


def test_weighted_pool_gives_a_paused_queues_share_to_the_others() -> None:
    broker = MemoryBroker()
    fill(broker, "email", 50)
    fill(broker, "reports", 50)
    broker.pause_queue("email", by="t")
    claimer, watcher, got = watched_claimer(broker, "mixed=email*3,reports:4")
    for _ in range(3):
        turn(claimer, watcher)
    assert got == ["reports"] * 12
    broker.resume_queue("email")
    watcher.wake()  # the resume's wake-up: read again within WAKE_GAP, not a full second
    assert watcher.due_in(time.monotonic()) <= WAKE_GAP  # type: ignore[operator]
    watcher.run(time.monotonic())
    assert watcher.paused == frozenset()
    got.clear()
    for _ in range(5):
        turn(claimer, watcher)
    # No credit earned while paused: email gets its 3 in 4, not a burst to catch up.
    assert 12 <= got.count("email") <= 17, got


def test_watcher_reads_once_a_second_and_only_its_queues() -> None:
    broker = MemoryBroker()
    broker.pause_queue("elsewhere", by="t")
    changes: list[int] = []
    watcher = PauseWatcher(broker, ["a", "b"], lambda: changes.append(1))
    now = time.monotonic()
    assert watcher.due_in(now) <= 0  # type: ignore[operator]  # before any claim
    watcher.run(now)
    assert watcher.paused == frozenset() and changes == [1]  # the first read always counts
    assert watcher.due_in(now) == pytest.approx(REFRESH)
    watcher.run(now + REFRESH)
    assert changes == [1]  # nothing changed: claimers are not woken
    broker.pause_queue("b", by="t")
    watcher.run(now + 2 * REFRESH)
    assert watcher.paused == frozenset({"b"}) and changes == [1, 1]
    assert watcher.open_queues(("a", "b")) == ("a",)
