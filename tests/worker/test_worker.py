"""The in-process Worker against a real SQLite file: outcomes, retries, pools, timeouts.

Burst workers drain and return; workers that must stay up run in a thread (fixture
``run_worker``) and are stopped at teardown. Blocking tasks wait on ``gate``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from sluicegate import App, JobState
from sluicegate.context import current_job
from sluicegate.worker import PoolSpec, Worker
from support.fleet import all_in, counts, wait_for

Drain = Callable[..., Worker]
RunWorker = Callable[..., Worker]


def pool(name: str = "p", queues: tuple[str, ...] = ("q",), slots: int = 2) -> PoolSpec:
    return PoolSpec(name, queues, slots)


def next_poll(worker: Worker) -> None:
    """Wait until the worker's claimer begins its next fallback poll (it sets ``next_poll``),
    so its poll before, if any, has run whole, its claim included."""
    claimer = worker.claimers[0]
    seen = claimer.next_poll
    wait_for(lambda: claimer.next_poll != seen, what="a fallback poll of the claimer")


def test_jobs_succeed_with_results_stored(app: App, drain: Drain) -> None:
    @app.task(queue="q")
    def add(a: int, b: int) -> dict[str, int]:
        return {"sum": a + b}

    jobs = [add.enqueue(i, 10) for i in range(5)]
    kw = app.enqueue("add", kwargs={"a": 1, "b": 2}, queue="q")

    worker = drain([pool(slots=3)])

    for i, job in enumerate(jobs):
        done = app.get_job(job.id)
        assert done.state == JobState.SUCCEEDED
        assert done.result == {"sum": i + 10}
        assert done.attempts == 1
        assert done.worker_id == worker.worker_id
        assert done.last_error is None
        assert done.finished_at is not None and done.started_at is not None
        assert done.lease_expires_at is None
    assert app.get_job(kw.id).result == {"sum": 3}
    assert worker.counters.succeeded == 6
    assert counts(app.broker, "q")["succeeded"] == 6


def test_raising_task_is_retried_then_dead_with_message_and_traceback(
    app: App, drain: Drain
) -> None:
    seen: list[int] = []

    @app.task(queue="q", max_attempts=3, backoff_base=0)
    def explode(n: int) -> None:
        seen.append(current_job().attempts)
        raise ValueError(f"bad input {n}")

    job = explode.enqueue(7)
    worker = drain([pool()])

    dead = app.get_job(job.id)
    assert dead.state == JobState.DEAD
    assert dead.attempts == 3
    assert seen == [1, 2, 3]
    assert dead.last_error is not None
    assert dead.last_error.type == "ValueError"
    assert dead.last_error.message == "bad input 7"
    assert dead.last_error.traceback.startswith("Traceback (most recent call last)")
    assert "in explode" in dead.last_error.traceback
    assert "ValueError: bad input 7" in dead.last_error.traceback
    assert dead.result is None
    assert worker.counters.retried == 2
    assert worker.counters.dead == 1


def test_retry_on_limits_which_errors_are_retried(app: App, drain: Drain) -> None:
    calls: dict[str, int] = {"transient": 0, "permanent": 0}

    @app.task(queue="q", max_attempts=4, backoff_base=0, retry_on=[ConnectionError])
    def flaky(kind: str) -> None:
        calls[kind] += 1
        if kind == "transient":
            raise ConnectionError("provider unavailable")
        raise KeyError("no such user")

    transient = flaky.enqueue("transient")
    permanent = flaky.enqueue("permanent")
    drain([pool()])

    retried = app.get_job(transient.id)
    assert retried.state == JobState.DEAD
    assert retried.attempts == 4
    assert calls["transient"] == 4
    assert retried.last_error is not None and retried.last_error.type == "ConnectionError"

    not_retried = app.get_job(permanent.id)
    assert not_retried.state == JobState.DEAD
    assert not_retried.attempts == 1
    assert calls["permanent"] == 1
    assert not_retried.last_error is not None and not_retried.last_error.type == "KeyError"


def test_retry_succeeds_on_a_later_attempt(app: App, drain: Drain) -> None:
    @app.task(queue="q", max_attempts=3, backoff_base=0)
    def second_time_lucky() -> int:
        attempt = current_job().attempts
        if attempt < 2:
            raise RuntimeError("not yet")
        return attempt

    job = second_time_lucky.enqueue()
    drain([pool()])
    done = app.get_job(job.id)
    assert done.state == JobState.SUCCEEDED
    assert done.result == 2
    assert done.attempts == 2


def test_unknown_task_goes_dead_and_the_worker_keeps_serving(app: App, drain: Drain) -> None:
    @app.task(queue="q")
    def known(n: int) -> int:
        return n * 2

    before = [known.enqueue(i) for i in range(3)]
    unknown = app.enqueue("no_such_task", args=[1], queue="q")
    after = [known.enqueue(i) for i in range(3, 6)]

    worker = drain([pool(slots=1)])

    dead = app.get_job(unknown.id)
    assert dead.state == JobState.DEAD
    assert dead.last_error is not None
    assert dead.last_error.type == "UnknownTask"
    assert "unknown task 'no_such_task'" in dead.last_error.message
    for job in before + after:
        done = app.get_job(job.id)
        assert done.state == JobState.SUCCEEDED
        assert done.result == done.args[0] * 2
    assert worker.counters.dead == 1


def test_non_json_result_fails_clearly(app: App, drain: Drain) -> None:
    @app.task(queue="q", max_attempts=1)
    def returns_a_set() -> object:
        return {1, 2}

    @app.task(queue="q")
    def fine() -> str:
        return "ok"

    bad = returns_a_set.enqueue()
    good = fine.enqueue()
    drain([pool()])

    failed = app.get_job(bad.id)
    assert failed.state == JobState.DEAD
    assert failed.result is None
    assert failed.last_error is not None
    assert failed.last_error.type == "SerializationError"
    assert "result is not JSON-serializable" in failed.last_error.message
    assert app.get_job(good.id).result == "ok"


def test_pool_claims_only_as_many_jobs_as_free_slots(
    app: App, run_worker: RunWorker, gate: threading.Event
) -> None:
    lock = threading.Lock()
    running = [0]
    peak = [0]

    @app.task(queue="q")
    def blocking(i: int) -> int:
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        gate.wait(30)
        with lock:
            running[0] -= 1
        return i

    jobs = blocking.enqueue_many([i] for i in range(5))
    worker = run_worker([pool(slots=2)], lease=10, poll_interval=0.05)

    wait_for(lambda: running[0] == 2, what="two jobs running")
    wait_for(lambda: counts(app.broker, "q")["running"] == 2, what="two jobs marked running")
    # The worker keeps polling (every 0.05 s x 5 while wake-ups work) with both slots busy:
    # after each of its polls, it has claimed no more.
    for _ in range(3):
        next_poll(worker)
        c = counts(app.broker, "q")
        assert c["claimed"] + c["running"] == 2, c
        assert c["ready"] == 3, c

    gate.set()
    wait_for(lambda: all_in(app, jobs, "succeeded"), what="all jobs succeeded")
    assert peak[0] == 2
    assert sorted(app.get_job(j.id).result for j in jobs) == list(range(5))


def test_pools_over_separate_queues_are_independent(
    app: App, run_worker: RunWorker, gate: threading.Event
) -> None:
    @app.task(queue="slow")
    def long_job() -> str:
        gate.wait(30)
        return "slow done"

    @app.task(queue="fast")
    def quick(n: int) -> int:
        return n

    slow_jobs = [long_job.enqueue() for _ in range(2)]
    fast_jobs = [quick.enqueue(n) for n in range(8)]
    run_worker([PoolSpec("slow", ("slow",), 1), PoolSpec("fast", ("fast",), 2)], lease=10)

    # The slow pool is full (its one slot blocked) while every fast job completes.
    wait_for(lambda: all_in(app, fast_jobs, "succeeded"), what="fast jobs succeeded")
    assert counts(app.broker, "slow")["ready"] == 1
    assert app.get_job(slow_jobs[0].id).state in (JobState.CLAIMED, JobState.RUNNING)

    gate.set()
    wait_for(lambda: all_in(app, slow_jobs, "succeeded"), what="slow jobs succeeded")
    assert [app.get_job(j.id).result for j in fast_jobs] == list(range(8))


def test_priority_order_within_a_queue(app: App, drain: Drain) -> None:
    order: list[str] = []

    @app.task(queue="q")
    def note(label: str) -> None:
        order.append(label)

    for label, priority in [("p5", 5), ("p-1a", -1), ("p3", 3), ("p0", 0), ("p-1b", -1)]:
        note.with_options(priority=priority).enqueue(label)
    drain([pool(slots=1)])
    assert order == ["p-1a", "p-1b", "p0", "p3", "p5"]


def test_scheduled_job_runs_after_its_delay(app: App, run_worker: RunWorker) -> None:
    ran_at: list[float] = []

    @app.task(queue="q")
    def later() -> str:
        ran_at.append(time.time())
        return "later"

    # A long poll interval: the worker must wake for the due job by itself.
    run_worker([pool()], lease=30, poll_interval=60)
    job = later.with_options(delay=0.6).enqueue()
    assert app.get_job(job.id).state == JobState.SCHEDULED

    wait_for(lambda: app.get_job(job.id).state == JobState.SUCCEEDED, timeout=15)
    done = app.get_job(job.id)
    assert done.result == "later"
    assert done.started_at is not None
    assert done.started_at >= done.enqueued_at + 0.6
    assert ran_at[0] >= done.enqueued_at + 0.6


def test_soft_timeout_fails_the_attempt_and_keeps_the_slot_busy(
    app: App, run_worker: RunWorker, gate: threading.Event
) -> None:
    @app.task(queue="q", timeout=0.3, max_attempts=1)
    def overruns() -> str:
        gate.wait(30)  # until the test opens the gate, well past its timeout
        return "too late"

    @app.task(queue="q")
    def next_one() -> str:
        return "next"

    stuck = overruns.enqueue()
    worker = run_worker([pool(slots=1)], lease=10, poll_interval=0.05)

    wait_for(lambda: app.get_job(stuck.id).state == JobState.DEAD, timeout=10)
    dead = app.get_job(stuck.id)
    assert dead.last_error is not None
    assert dead.last_error.type == "TimeoutError"
    assert "timed out after 0.3 s" in dead.last_error.message
    assert worker.counters.timed_out == 1

    # The thread is still sleeping: its slot stays busy, so the next job is not claimed,
    # neither on the enqueue's wake-up nor at the claimer's fallback polls after it.
    waiting = next_one.enqueue()
    for _ in range(3):
        assert worker.busy == 1
        assert app.get_job(waiting.id).state == JobState.READY
        next_poll(worker)
    assert worker.busy == 1
    assert app.get_job(waiting.id).state == JobState.READY

    gate.set()  # the abandoned thread returns; its "success" must not be recorded
    wait_for(lambda: app.get_job(waiting.id).state == JobState.SUCCEEDED)
    dead = app.get_job(stuck.id)
    assert dead.state == JobState.DEAD
    assert dead.result is None


def test_same_process_enqueue_wakes_an_idle_worker(app: App, run_worker: RunWorker) -> None:
    @app.task(queue="q")
    def ping(n: int) -> int:
        return n

    # Polling is effectively off (60 s); only the broker's wake-up can start these jobs.
    run_worker([pool()], lease=30, poll_interval=60)
    first = ping.enqueue(1)
    wait_for(lambda: app.get_job(first.id).state == JobState.SUCCEEDED, timeout=20)
    second = ping.enqueue(2)  # the worker is idle now, having found the queue empty
    wait_for(lambda: app.get_job(second.id).state == JobState.SUCCEEDED, timeout=20)
    assert app.get_job(second.id).result == 2


def test_current_job_gives_id_and_attempt(app: App, drain: Drain) -> None:
    @app.task(queue="q", max_attempts=3, backoff_base=0)
    def who_am_i() -> dict[str, object]:
        job = current_job()
        if job.attempts == 1:
            raise RuntimeError("try again")
        return {"id": job.id, "attempts": job.attempts, "task": job.task, "queue": job.queue}

    job = who_am_i.enqueue()
    drain([pool()])
    done = app.get_job(job.id)
    assert done.result == {"id": job.id, "attempts": 2, "task": "who_am_i", "queue": "q"}
    with pytest.raises(RuntimeError, match="outside a running sluicegate job"):
        current_job()


def test_cancel_of_a_running_job_refuses_its_ack(
    app: App, run_worker: RunWorker, gate: threading.Event
) -> None:
    started = threading.Event()

    @app.task(queue="q")
    def blocking() -> str:
        started.set()
        gate.wait(30)
        return "finished anyway"

    @app.task(queue="q")
    def afterwards() -> str:
        return "ran"

    job = blocking.enqueue()
    worker = run_worker([pool(slots=1)], lease=10, poll_interval=0.05)
    wait_for(started.is_set, what="task started")
    wait_for(lambda: app.get_job(job.id).state == JobState.RUNNING)

    cancelled = app.broker.cancel(job.id)
    assert cancelled.state == JobState.CANCELLED

    gate.set()
    wait_for(lambda: worker.counters.lease_lost >= 1, what="the ack to be refused")
    done = app.get_job(job.id)
    assert done.state == JobState.CANCELLED
    assert done.result is None
    assert worker.counters.succeeded == 0

    # The slot is free again and the worker goes on serving.
    nxt = afterwards.enqueue()
    wait_for(lambda: app.get_job(nxt.id).state == JobState.SUCCEEDED)
    assert app.get_job(job.id).state == JobState.CANCELLED


def test_a_worker_started_from_python_applies_the_settings_file(tmp_path: Path) -> None:
    """Overrides in the settings file route tasks before the worker fits them to pools,
    even when no enqueue has read the file yet."""
    config = tmp_path / "sluicegate.toml"
    config.write_text('[tasks.send]\nqueue = "email"\nmax_attempts = 7\n')
    app = App(broker="memory://", config=str(config))

    @app.task
    def send() -> None: ...

    Worker(app, [PoolSpec("email", ("email",), 1)], burst=True)
    assert send.options.queue == "email"
    assert send.options.max_attempts == 7
