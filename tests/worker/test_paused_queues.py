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
from sg_brokers import over_brokers
from sg_harness import Fleet, WorkerProcess, counts, enqueue, stop_all, wait_for

from sluicegate import App, Job, JobState
from sluicegate.worker import PoolSpec, Worker

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
        probes.append(enqueue(producer, chaosapp.slow, 0.05, queue="other"))
        time.sleep(0.2)
        return ran_on(producer, probes, fresh.pid)

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
