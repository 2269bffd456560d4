"""The three concurrency models under one in-process Worker, on a real SQLite file.

async: N coroutines at once on one loop, timeouts cancel, a loop-blocking task is named
in a warning and cannot stop heartbeats. thread: a soft timeout keeps the slot busy until
the thread returns (also shown on the thread executor alone: the failure is reported
once, with the slot still busy, then the real return frees it). process: results come back from children, children recycle after
``max_jobs_per_child`` jobs and above ``max_memory_mb``. A task whose kind does not fit
its pool's model is a ConfigError at ``Worker()`` naming task and pool. ``current_job()``
works in every model.

Process-pool tasks live in tests/apps/poisonapp.py: children import the app themselves.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import poisonapp
import pytest

from sluicegate import App, Job, JobState
from sluicegate.context import current_job
from sluicegate.errors import ConfigError
from sluicegate.job import Claim, ClaimedJob, JobId
from sluicegate.outcomes import Buried, Report, Retried, Succeeded
from sluicegate.worker import PoolSpec, Worker
from sluicegate.worker.executors import Executor, WorkItem
from sluicegate.worker.models import MODELS, PoolContext
from sluicegate.worker.models.process import ProcessExecutor
from sluicegate.worker.services.claimer import Claimer
from support.fleet import all_in, wait_for

Drain = Callable[..., Worker]
RunWorker = Callable[..., Worker]


def async_pool(slots: int, queue: str = "q") -> PoolSpec:
    return PoolSpec("aio", (queue,), slots, "async")


def polls(claimer: Claimer, n: int) -> None:
    """Wait until ``claimer`` has begun ``n`` more fallback polls (each sets its
    ``next_poll``): every one but the last has run whole, its claim included."""
    for _ in range(n):
        seen = claimer.next_poll
        wait_for(lambda s=seen: claimer.next_poll != s, what="a fallback poll of the claimer")


def settled(executor: Executor[Any]) -> None:
    """Wait until an async executor's loop runs no task and has run every callback queued
    before that (a finished task's done callbacks, where a report may still be made)."""
    loop: asyncio.AbstractEventLoop = executor.loop  # type: ignore[attr-defined]

    async def quiet() -> None:
        me = asyncio.current_task()
        while any(task is not me for task in asyncio.all_tasks()):
            await asyncio.sleep(0.01)  # a polling wait
        await asyncio.sleep(0)  # the callbacks queued when the last task ended run first

    asyncio.run_coroutine_threadsafe(quiet(), loop).result(10)


# ---- async model ---------------------------------------------------------------------------


def test_async_pool_runs_n_coroutines_at_once_on_one_loop(app: App, drain: Drain) -> None:
    n = 20
    started: list[float] = []
    ended: list[float] = []
    threads: set[str] = set()

    @app.task(queue="q")
    async def nap(i: int) -> int:
        started.append(time.monotonic())
        threads.add(threading.current_thread().name)
        # All n must be running at once for any to finish: proof of n concurrent slots
        # (with fewer, they give up after a while and the overlap assertion fails).
        give_up = time.monotonic() + 10
        while len(started) < n and time.monotonic() < give_up:
            await asyncio.sleep(0.005)  # a polling wait for the others to start
        await asyncio.sleep(0.2)  # the job's own body: all n stay in flight together
        ended.append(time.monotonic())
        return i

    jobs = [nap.enqueue(i) for i in range(n)]
    worker = drain([async_pool(n)])

    assert [app.get_job(j.id).result for j in jobs] == list(range(n))
    assert max(started) < min(ended)  # every coroutine started before the first one ended
    assert threads == {"sluicegate-aio-loop"}  # one event loop thread ran them all
    assert worker.counters.succeeded == n


def test_async_pool_never_runs_more_than_its_slots(app: App, drain: Drain) -> None:
    running = peak = 0

    @app.task(queue="q")
    async def step() -> None:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.02)  # the job's body runs a while, so that slots overlap
        running -= 1

    jobs = [step.enqueue() for _ in range(12)]
    drain([async_pool(3)])
    assert all_in(app, jobs, "succeeded")
    assert peak == 3


def test_async_timeout_cancels_the_coroutine(app: App, drain: Drain) -> None:
    cancelled = threading.Event()

    @app.task(queue="q", timeout=0.2, max_attempts=1)
    async def stuck() -> None:
        try:
            await asyncio.sleep(30)  # far past its timeout: only the cancellation ends it
        except asyncio.CancelledError:
            cancelled.set()
            raise

    @app.task(queue="q")
    async def fine() -> str:
        return "ok"

    job = stuck.enqueue()
    others = [fine.enqueue() for _ in range(3)]  # they need the one slot the timeout frees
    began = time.monotonic()
    worker = drain([async_pool(1)])

    dead = app.get_job(job.id)
    assert dead.state == JobState.DEAD
    assert dead.last_error is not None
    assert (dead.last_error.type, dead.last_error.message) == (
        "TimeoutError",
        "timed out after 0.2 s",
    )
    assert cancelled.is_set()  # the coroutine itself saw the cancellation
    assert time.monotonic() - began < 10  # not the 30 s sleep
    assert all_in(app, others, "succeeded")
    assert worker.counters.dead == 1


def test_async_timeout_retries_then_dead(app: App, drain: Drain) -> None:
    attempts: list[int] = []

    @app.task(queue="q", timeout=0.1, max_attempts=3, backoff_base=0)
    async def stuck() -> None:
        attempts.append(current_job().attempts)
        await asyncio.sleep(30)  # far past its timeout: only the cancellation ends it

    job = stuck.enqueue()
    drain([async_pool(1)])
    dead = app.get_job(job.id)
    assert (dead.state, dead.attempts) == (JobState.DEAD, 3)
    assert attempts == [1, 2, 3]


def test_a_loop_blocking_task_is_named_by_its_task_name_not_its_function(
    app: App, drain: Drain, caplog: pytest.LogCaptureFixture
) -> None:
    @app.task(name="reports.render", queue="q")
    async def render() -> None:
        time.sleep(1.0)  # blocks the loop: what is tested (past BLOCKED_AFTER, 0.5 s)

    caplog.set_level(logging.WARNING, logger="sluicegate.worker")
    job = render.enqueue()
    drain([async_pool(1)])
    warnings = [
        r.getMessage() for r in caplog.records if "blocked the event loop" in r.getMessage()
    ]
    assert warnings and "'reports.render'" in warnings[0], caplog.text
    assert app.get_job(job.id).state is JobState.SUCCEEDED


def test_loop_blocking_task_is_named_and_cannot_stop_heartbeats(
    app: App, drain: Drain, caplog: pytest.LogCaptureFixture
) -> None:
    @app.task(queue="q")
    async def hog() -> str:
        time.sleep(1.5)  # what is tested: a sync call in a coroutine stops the whole loop
        return "done"

    @app.task(queue="q")
    async def polite(i: int) -> int:
        await asyncio.sleep(0.01)  # the job's body: it awaits, as a polite coroutine does
        return i

    caplog.set_level(logging.WARNING, logger="sluicegate.worker")
    blocker = hog.enqueue()
    others = [polite.enqueue(i) for i in range(5)]
    # Heartbeats every lease/3 = 0.2 s: a loop blocked for 1.5 s would lose the lease if
    # heartbeats ran on it. They run on the worker's own thread, so nothing is lost.
    worker = drain([async_pool(4)], lease=0.6)

    warnings = [
        r.getMessage() for r in caplog.records if "blocked the event loop" in r.getMessage()
    ]
    assert warnings, caplog.text
    assert "'hog'" in warnings[0]
    assert "pool aio" in warnings[0]
    done = app.get_job(blocker.id)
    assert (done.state, done.result, done.attempts) == (JobState.SUCCEEDED, "done", 1)
    assert [app.get_job(j.id).result for j in others] == list(range(5))
    assert worker.counters.lease_lost == 0
    assert worker.counters.recovered == 0


# ---- thread model ------------------------------------------------------------------------------


def test_thread_soft_timeout_keeps_the_slot_busy_until_the_thread_returns(
    app: App, run_worker: RunWorker, gate: threading.Event
) -> None:
    @app.task(queue="q", timeout=0.2, max_attempts=1)
    def stubborn() -> str:
        gate.wait(30)
        return "late"

    @app.task(queue="q")
    def quick() -> str:
        return current_job().task

    job = stubborn.enqueue()
    worker = run_worker([PoolSpec("thr", ("q",), 1)], lease=5, poll_interval=0.05)
    wait_for(lambda: app.get_job(job.id).state == JobState.DEAD)
    dead = app.get_job(job.id)
    assert dead.last_error is not None
    assert (dead.last_error.type, dead.last_error.message) == (
        "TimeoutError",
        "timed out after 0.2 s",
    )

    # The thread is still inside the task: its slot is not given to other work.
    waiting = quick.enqueue()
    assert worker.busy == 1
    # An absence: after the enqueue's wake-up and a whole fallback poll of the claimer,
    # nothing claimed it while the only slot is held.
    polls(worker.claimers[0], 2)
    assert worker.busy == 1
    assert app.get_job(waiting.id).state == JobState.READY

    gate.set()  # the thread returns; its late result is ignored, the slot is free again
    wait_for(lambda: app.get_job(waiting.id).state == JobState.SUCCEEDED)
    assert app.get_job(waiting.id).result == "quick"
    wait_for(lambda: worker.busy == 0)
    assert app.get_job(job.id) == dead


# ---- the thread model's soft timeout, on its own: a real thread, no worker loop ----------------


class Reports:
    """What a thread executor reports, in order: (item, report, slot_free)."""

    def __init__(self) -> None:
        self.started: list[WorkItem] = []
        self.done: list[tuple[WorkItem, Report, bool]] = []
        self.changed = threading.Condition()

    def on_start(self, item: WorkItem) -> None:
        self.started.append(item)

    def on_done(self, item: WorkItem, report: Report, slot_free: bool) -> None:
        with self.changed:
            self.done.append((item, report, slot_free))
            self.changed.notify_all()

    def wait(self, count: int, timeout: float = 10) -> None:
        with self.changed:
            assert self.changed.wait_for(lambda: len(self.done) >= count, timeout), self.done


def claimed_job(task: str, attempts: int = 1, max_attempts: int = 1) -> ClaimedJob:
    job = Job.from_fields(
        id=JobId(7),
        task=task,
        queue="q",
        state=JobState.RUNNING,
        args=[],
        kwargs={},
        attempts=attempts,
        max_attempts=max_attempts,
    )
    return ClaimedJob(Claim(job.id, 1), job)


@pytest.fixture
def thread_executor(app: App) -> Iterator[Callable[[], tuple[Executor[Any], Reports]]]:
    """Start a one-slot thread executor that reports to a Reports; stopped at teardown."""
    started: list[Executor[Any]] = []

    def start() -> tuple[Executor[Any], Reports]:
        context = PoolContext(lambda: "unused:app", 1024, app.broker)
        executor = MODELS["thread"].executor("thr", 1, {}, context)
        reports = Reports()
        executor.start(reports.on_start, reports.on_done)
        started.append(executor)
        return executor, reports

    yield start
    for executor in started:
        executor.stop()


def test_thread_timeout_reports_the_failure_once_and_keeps_the_slot_busy(
    app: App,
    gate: threading.Event,
    thread_executor: Callable[[], tuple[Executor[Any], Reports]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    @app.task(queue="q", timeout=0.2, max_attempts=1)
    def stubborn() -> str:
        gate.wait(30)
        return "late"

    caplog.set_level(logging.WARNING, logger="sluicegate.worker")
    executor, reports = thread_executor()
    item = MODELS["thread"].work_item(stubborn, claimed_job("stubborn"))
    began = time.monotonic()
    executor.submit(item)

    reports.wait(1)
    assert time.monotonic() - began >= 0.2
    timed_out_item, outcome, slot_free = reports.done[0]
    assert (timed_out_item, slot_free) == (item, False)  # decided, but the slot stays busy
    assert isinstance(outcome, Buried)
    assert (outcome.error.type, outcome.error.message) == ("TimeoutError", "timed out after 0.2 s")
    assert "job 7 (stubborn) timed out after 0.2 s" in caplog.text

    # An absence: the report made, the timeout thread has no deadline left to look at,
    # so the timeout is reported once, not at every look.
    idle = executor.next_look  # type: ignore[attr-defined]
    wait_for(lambda: idle() is None or len(reports.done) > 1, what="the timeout thread idle")
    assert len(reports.done) == 1

    gate.set()  # the function really returns: the slot is free; its late result is the
    reports.wait(2)  # worker's to ignore
    assert reports.done[1][0] is item and reports.done[1][2] is True
    assert isinstance(reports.done[1][1], Succeeded)
    assert caplog.text.count("timed out") == 1


@pytest.mark.parametrize("when", ["before its first step", "while it awaits"])
def test_an_interrupted_coroutine_always_reports_and_frees_its_slot(app: App, when: str) -> None:
    """A cancel right behind the hand-over finds the job's asyncio task not yet started:
    its coroutine never runs, and the executor itself reports it (else the slot leaks)."""
    ran = threading.Event()

    @app.task(queue="q")
    async def sleeper() -> None:
        ran.set()
        await asyncio.sleep(30)  # runs until the interrupt cancels it

    context = PoolContext(lambda: "unused:app", 1024, app.broker)
    executor = MODELS["async"].executor("aio", 1, {}, context)
    reports = Reports()
    executor.start(reports.on_start, reports.on_done)
    try:
        claimed = claimed_job("sleeper")
        item = MODELS["async"].work_item(sleeper, claimed)
        hold = threading.Event()
        if when == "before its first step":  # the loop waits until both calls are queued
            executor.loop.call_soon_threadsafe(hold.wait, 5)  # type: ignore[attr-defined]
        executor.submit(item)
        if when == "while it awaits":
            assert ran.wait(5)
        executor.interrupt(claimed.claim)
        hold.set()
        reports.wait(1)
        reported, outcome, slot_free = reports.done[0]
        assert reported is item and slot_free is True
        assert isinstance(outcome, Buried) and outcome.error.type == "CancelledError"
        assert ran.is_set() is (when == "while it awaits")
        settled(executor)  # an absence: its task is over and was reported once
        assert len(reports.done) == 1
    finally:
        executor.stop()


def test_a_process_job_interrupted_before_a_child_took_it_never_runs() -> None:
    """Interrupted while it waits for a child (the pool's only child still importing the
    app): reported at once with its slot free, and never handed to the child."""
    executor = ProcessExecutor("proc", 1, "poisonapp:app")
    reports = Reports()
    executor.start(reports.on_start, reports.on_done)
    try:
        claimed = claimed_job("p_ok")
        executor.submit(MODELS["process"].work_item(poisonapp.p_ok, claimed))
        executor.interrupt(claimed.claim)
        reports.wait(1)
        _, outcome, slot_free = reports.done[0]
        assert slot_free is True and isinstance(outcome, Buried)
        assert outcome.error.type == "JobCancelled"
        # An absence: the child, once ready (and offered what waited), never got the job.
        wait_for(lambda: executor.ready_children() == 1, timeout=60, what="the child ready")
        assert reports.started == [] and len(reports.done) == 1
    finally:
        executor.stop()


def test_thread_timeout_retries_with_the_tasks_policy(
    app: App, gate: threading.Event, thread_executor: Callable[[], tuple[Executor[Any], Reports]]
) -> None:
    @app.task(queue="q", timeout=0.05, max_attempts=3, backoff_base=0)
    def stubborn() -> None:
        gate.wait(30)

    executor, reports = thread_executor()
    executor.submit(MODELS["thread"].work_item(stubborn, claimed_job("stubborn", 1, 3)))
    reports.wait(1)
    outcome = reports.done[0][1]
    assert isinstance(outcome, Retried) and outcome.error.type == "TimeoutError"


def test_thread_job_done_in_time_reports_once_with_its_slot_free(
    app: App, thread_executor: Callable[[], tuple[Executor[Any], Reports]]
) -> None:
    @app.task(queue="q", timeout=0.2)
    def quick() -> str:
        return "ok"

    executor, reports = thread_executor()
    item = MODELS["thread"].work_item(quick, claimed_job("quick"))
    executor.submit(item)
    reports.wait(1)
    # An absence: once the timeout thread waits on no deadline (past this one's, if it
    # was watching it), nothing more is reported.
    idle = executor.next_look  # type: ignore[attr-defined]
    wait_for(lambda: idle() is None or len(reports.done) > 1, what="the timeout thread idle")
    assert [(i, type(r), free) for i, r, free in reports.done] == [(item, Succeeded, True)]
    assert reports.started == [item]


# ---- process model -----------------------------------------------------------------------------


@pytest.fixture
def drain_poisonapp(app: App) -> Iterator[Callable[..., Worker]]:
    """A burst worker for tests/apps/poisonapp.py's app (importable by children), on the
    test's broker."""
    workers: list[tuple[Worker, threading.Thread]] = []

    def run(pools: list[PoolSpec], **options: Any) -> Worker:
        options.setdefault("lease", 10.0)
        worker = Worker(poisonapp.app, pools, broker=app.broker, burst=True, **options)
        thread = threading.Thread(target=worker.run, name="burst-worker", daemon=True)
        thread.start()
        workers.append((worker, thread))
        thread.join(30)
        assert not thread.is_alive(), "burst worker did not drain its queues within 30 s"
        return worker

    yield run
    for worker, thread in workers:
        worker.stop(immediate=True)
        thread.join(10)


def process_pool(slots: int, **options: Any) -> PoolSpec:
    return PoolSpec("proc", ("proc",), slots, "process", options=options)


def enqueue(app: App, task: str, *args: Any) -> Job:
    return app.enqueue(task, args=list(args), queue=poisonapp.app.tasks[task].options.queue)


def test_process_pool_results_come_back_from_children(app: App, drain_poisonapp: Drain) -> None:
    jobs = [enqueue(app, "p_ok", i) for i in range(8)]
    worker = drain_poisonapp([process_pool(2)])

    results = [app.get_job(j.id).result for j in jobs]
    assert [r["n"] for r in results] == list(range(8))
    pids = {r["pid"] for r in results}
    assert os.getpid() not in pids
    assert 1 <= len(pids) <= 2
    assert worker.counters.succeeded == 8


def test_process_children_recycle_after_max_jobs_per_child(
    app: App, drain_poisonapp: Drain
) -> None:
    jobs = [enqueue(app, "p_ok", i) for i in range(6)]
    drain_poisonapp([process_pool(1, max_jobs_per_child=2)])

    pids = [app.get_job(j.id).result["pid"] for j in jobs]
    assert pids[0] == pids[1] and pids[2] == pids[3] and pids[4] == pids[5], pids
    assert len(set(pids)) == 3, pids  # a fresh child after every second job


def test_process_children_recycle_above_max_memory(app: App, drain_poisonapp: Drain) -> None:
    # Recycled after a job that leaves the child above 80% of max_memory_mb (which is also
    # its address-space cap, so this stays below it).
    small = enqueue(app, "p_hold", 10)
    after_small = enqueue(app, "p_ok")
    big = enqueue(app, "p_hold", 330)
    after_big = enqueue(app, "p_ok")
    drain_poisonapp([process_pool(1, max_memory_mb=400)])

    pid = {j.id: app.get_job(j.id).result["pid"] for j in (small, after_small, big, after_big)}
    assert pid[small.id] == pid[after_small.id] == pid[big.id]
    assert pid[after_big.id] != pid[big.id]


def test_process_memory_cap_turns_a_blow_up_into_memory_error(
    app: App, drain_poisonapp: Drain
) -> None:
    job = enqueue(app, "p_blow_up")
    ok = [enqueue(app, "p_ok", i) for i in range(3)]
    drain_poisonapp([process_pool(1, max_memory_mb=200)])

    dead = app.get_job(job.id)
    assert dead.state == JobState.DEAD
    assert dead.last_error is not None and dead.last_error.type == "MemoryError"
    assert "_blow_up" in dead.last_error.traceback
    assert all_in(app, ok, "succeeded")


# ---- current_job() in every model --------------------------------------------------------------


def test_current_job_in_thread_and_async_models(app: App, drain: Drain) -> None:
    @app.task(queue="t")
    def in_thread() -> list[Any]:
        job = current_job()
        return [job.id, job.attempts, job.task, threading.current_thread().name]

    @app.task(queue="a")
    async def in_loop() -> list[Any]:
        await asyncio.sleep(0)  # what is tested: current_job() still holds after an await
        job = current_job()
        return [job.id, job.attempts, job.task, threading.current_thread().name]

    t_jobs = [in_thread.enqueue() for _ in range(3)]
    a_jobs = [in_loop.enqueue() for _ in range(3)]
    drain([PoolSpec("thr", ("t",), 2), PoolSpec("aio", ("a",), 2, "async")])

    for job in t_jobs:
        job_id, attempt, task, thread = app.get_job(job.id).result
        assert (job_id, attempt, task) == (job.id, 1, "in_thread")
        assert thread.startswith("sluicegate-thr-")
    for job in a_jobs:
        job_id, attempt, task, thread = app.get_job(job.id).result
        assert (job_id, attempt, task) == (job.id, 1, "in_loop")
        assert thread == "sluicegate-aio-loop"


def test_current_job_in_process_model(app: App, drain_poisonapp: Drain) -> None:
    jobs = [enqueue(app, "p_ok", i) for i in range(3)]
    drain_poisonapp([process_pool(2)])
    for job in jobs:
        result = app.get_job(job.id).result
        assert (result["job_id"], result["attempt"], result["task"]) == (job.id, 1, "p_ok")


# ---- a task must fit its pool's model ---------------------------------------------------------


def test_coroutine_task_in_thread_or_process_pool_is_a_config_error(app: App) -> None:
    @app.task(queue="mail")
    async def send_mail() -> None: ...

    for model in ("thread", "process"):
        with pytest.raises(ConfigError) as err:
            Worker(app, [PoolSpec("mailers", ("mail",), 2, model)])
        message = str(err.value)
        assert "'send_mail'" in message and "'mailers'" in message, message
        assert "coroutine" in message and model in message, message


def test_plain_function_in_async_pool_is_a_config_error(app: App) -> None:
    @app.task(queue="index")
    def update_index() -> None: ...

    with pytest.raises(ConfigError) as err:
        Worker(app, [PoolSpec("indexers", ("index",), 2, "async")])
    message = str(err.value)
    assert "'update_index'" in message and "'indexers'" in message, message
    assert "plain function" in message, message


def test_tasks_on_queues_no_pool_serves_are_not_checked(app: App) -> None:
    @app.task(queue="elsewhere")
    async def later() -> None: ...

    Worker(app, [PoolSpec("thr", ("q",), 1)])  # no error: no pool here runs it


def test_coroutine_sent_to_a_thread_pool_by_enqueue_override_is_dead(
    app: App, drain: Drain
) -> None:
    @app.task(queue="a")
    async def coro() -> None: ...

    job = coro.with_options(queue="t").enqueue()
    drain([PoolSpec("thr", ("t",), 1)])
    dead = app.get_job(job.id)
    assert dead.state == JobState.DEAD
    assert dead.attempts == 1
    assert dead.last_error is not None and dead.last_error.type == "WrongPoolModel"
    assert "'coro'" in dead.last_error.message and "'thr'" in dead.last_error.message
