"""Poison jobs in every concurrency model, with real ``sluicegate worker`` processes.

Process pools: a raise, a hang past the timeout, ``os._exit(1)``, a segfault, a memory
blow-up (under ``max_memory_mb``) and a child killed from outside (as the OOM killer
does) each end dead after their attempts with the reason; healthy jobs in the same pool
keep completing, the pool is back to its configured number of children, and no child
outlives a SIGKILLed worker.

Thread and async pools: a raise and a hang end dead with the reason while the worker
keeps serving. ``os._exit`` and a segfault take the whole worker down: each restarted
worker recovers the job as it starts (the dead one's lock file is free), each crash
charged one attempt, until it is dead with "worker lost" -- and the worker that finds it
dead stays up.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path

import poisonapp
import pytest

from sluicegate import App, Job, JobState
from support.fleet import (
    Fleet,
    WorkerProcess,
    all_in,
    children_of,
    pool_children,
    process_gone,
    wait_for,
)

APP = "poisonapp:app"
LEASE = 1.0
SLOTS = 2
MEMORY_MB = 200
PROCESS_CONFIG = f"""\
[pools.proc]
queues = ["proc"]
slots = {SLOTS}
model = "process"
max_memory_mb = {MEMORY_MB}
"""
HEALTHY = 6


def enqueue(producer: App, task: str, *args: object) -> Job:
    """Enqueue by name with the task's own queue and attempt budget (from poisonapp)."""
    options = poisonapp.app.tasks[task].options
    return producer.enqueue(
        task, args=list(args), queue=options.queue, max_attempts=options.max_attempts
    )


def healthy(producer: App, task: str, count: int = HEALTHY) -> list[Job]:
    return [enqueue(producer, task, n) for n in range(count)]


def wait_dead(producer: App, job: Job, fleet: Fleet) -> Job:
    wait_for(lambda: producer.get_job(job.id).state == JobState.DEAD, what=fleet.logs)
    return producer.get_job(job.id)


def wait_succeeded(producer: App, jobs: list[Job], fleet: Fleet) -> list[Job]:
    wait_for(lambda: all_in(producer, jobs, "succeeded"), what=fleet.logs)
    return [producer.get_job(j.id) for j in jobs]


def start_process_worker(fleet: Fleet, tmp_path: Path) -> WorkerProcess:
    config = tmp_path / "sluicegate.toml"
    config.write_text(PROCESS_CONFIG)
    worker = fleet.start([], lease=LEASE, app=APP, extra=["--config", str(config)])
    wait_for(lambda: len(pool_children(worker.pid)) == SLOTS, what=worker.log)
    return worker


def assert_pool_back_to_size(worker: WorkerProcess) -> list[int]:
    wait_for(lambda: len(pool_children(worker.pid)) == SLOTS, what=worker.log)
    assert worker.alive(), worker.log()
    return pool_children(worker.pid)


def assert_children_die_with(worker: WorkerProcess) -> None:
    """SIGKILL the worker: no child of it (pool children, resource tracker) outlives it."""
    assert len(pool_children(worker.pid)) == SLOTS, worker.log()
    children = children_of(worker.pid)  # the pool's children and multiprocessing's helper
    worker.kill()
    wait_for(
        lambda: all(process_gone(pid) for pid in children),
        timeout=10,
        what=lambda: f"children {[p for p in children if not process_gone(p)]} to exit",
    )


# ---- process model -----------------------------------------------------------------------

PROCESS_POISONS = {
    "p_raise": ("ValueError", "poison: raised in a child"),
    "p_hang": ("TimeoutError", f"timed out after {poisonapp.TIMEOUT:g} s"),
    "p_exit": ("ChildProcessError", "child process exited with code 1"),
    "p_segv": ("ChildProcessError", "child process killed by SIGSEGV"),
    "p_blow_up": ("MemoryError", ""),
}
KILLS_CHILD = {"p_hang", "p_exit", "p_segv"}


@pytest.mark.parametrize("task", list(PROCESS_POISONS))
def test_process_pool_poison_ends_dead_and_pool_recovers(
    task: str, fleet: Fleet, producer: App, tmp_path: Path
) -> None:
    worker = start_process_worker(fleet, tmp_path)
    first_children = set(pool_children(worker.pid))
    poison = enqueue(producer, task)
    alongside = healthy(producer, "p_ok")

    dead = wait_dead(producer, poison, fleet)
    error_type, message = PROCESS_POISONS[task]
    assert dead.attempts == poisonapp.MAX_ATTEMPTS
    assert dead.last_error is not None
    assert (dead.last_error.type, dead.last_error.message) == (error_type, message)
    assert dead.result is None
    for done in wait_succeeded(producer, alongside, fleet):
        assert done.attempts == 1
        assert done.result["pid"] != worker.pid

    # Every attempt that killed its child was reported and the child replaced.
    failed_lines = [line for line in worker.log().splitlines() if f"({task}) failed:" in line]
    assert len(failed_lines) == (poisonapp.MAX_ATTEMPTS if task in KILLS_CHILD else 0)
    children = assert_pool_back_to_size(worker)
    if task == "p_raise":
        assert set(children) == first_children  # an exception does not cost a child

    # The pool at full size keeps serving: new work runs in the current children.
    after = wait_succeeded(producer, healthy(producer, "p_ok"), fleet)
    assert {job.result["pid"] for job in after} <= set(pool_children(worker.pid))
    assert_children_die_with(worker)


def test_process_child_killed_from_outside_fails_the_attempt(
    fleet: Fleet, producer: App, tmp_path: Path
) -> None:
    """A child SIGKILLed mid-job (what the OOM killer does): the attempt fails with the
    signal, the child is replaced, and after its attempts the job is dead."""
    worker = start_process_worker(fleet, tmp_path)
    pid_file = tmp_path / "pids"
    job = enqueue(producer, "p_sleep", 60, str(pid_file))
    killed: list[int] = []
    for attempt in range(1, poisonapp.MAX_ATTEMPTS + 1):
        wait_for(
            lambda a=attempt: pid_file.exists() and len(pid_file.read_text().split()) == a,
            what=worker.log,
        )
        busy = int(pid_file.read_text().split()[-1])
        assert busy in pool_children(worker.pid)
        os.kill(busy, signal.SIGKILL)
        killed.append(busy)
    dead = wait_dead(producer, job, fleet)
    assert dead.attempts == poisonapp.MAX_ATTEMPTS
    assert dead.last_error is not None
    assert dead.last_error.type == "ChildProcessError"
    assert dead.last_error.message == "child process killed by SIGKILL"
    assert not set(killed) & set(assert_pool_back_to_size(worker))
    wait_succeeded(producer, healthy(producer, "p_ok"), fleet)


def test_children_do_not_outlive_a_killed_worker_mid_job(
    fleet: Fleet, producer: App, tmp_path: Path
) -> None:
    worker = start_process_worker(fleet, tmp_path)
    pid_file = tmp_path / "pids"
    jobs = [enqueue(producer, "p_sleep", 60, str(pid_file)) for _ in range(SLOTS)]
    wait_for(
        lambda: pid_file.exists() and len(pid_file.read_text().split()) == SLOTS,
        what=worker.log,
    )
    assert all_in(producer, jobs, "running")
    assert_children_die_with(worker)


def test_children_do_not_outlive_a_worker_killed_while_they_start(
    fleet: Fleet, producer: App, tmp_path: Path
) -> None:
    """Jobs are handed to children at once, before the children have even imported the
    app; a worker killed then must not leave orphans that start those jobs later."""
    pid_file = tmp_path / "pids"
    jobs = [enqueue(producer, "p_sleep", 60, str(pid_file)) for _ in range(SLOTS)]
    config = tmp_path / "sluicegate.toml"
    config.write_text(PROCESS_CONFIG)
    worker = fleet.start([], lease=LEASE, app=APP, extra=["--config", str(config)])
    wait_for(lambda: all_in(producer, jobs, "running"), what=worker.log)
    assert_children_die_with(worker)


# ---- thread and async models: raise and hang -------------------------------------------

SOFT_POISONS = {
    ("thread", "t_raise"): ("ValueError", "poison: raised in a thread"),
    ("thread", "t_hang"): ("TimeoutError", f"timed out after {poisonapp.TIMEOUT:g} s"),
    ("async", "a_raise"): ("ValueError", "poison: raised in a coroutine"),
    ("async", "a_hang"): ("TimeoutError", f"timed out after {poisonapp.TIMEOUT:g} s"),
}
POOLS = {"thread": "thr=thr:3:thread", "async": "aio=aio:3:async"}
OK_TASK = {"thread": "t_ok", "async": "a_ok"}


@pytest.mark.parametrize(("model", "task"), list(SOFT_POISONS))
def test_thread_and_async_poison_ends_dead_and_worker_keeps_serving(
    model: str, task: str, fleet: Fleet, producer: App
) -> None:
    worker = fleet.start([POOLS[model]], lease=LEASE, app=APP)
    poison = enqueue(producer, task)
    alongside = healthy(producer, OK_TASK[model])

    dead = wait_dead(producer, poison, fleet)
    assert dead.attempts == poisonapp.MAX_ATTEMPTS
    assert dead.last_error is not None
    assert (dead.last_error.type, dead.last_error.message) == SOFT_POISONS[(model, task)]
    for done in wait_succeeded(producer, alongside, fleet):
        assert done.result["pid"] == worker.pid
    wait_succeeded(producer, healthy(producer, OK_TASK[model]), fleet)
    assert worker.alive(), worker.log()
    assert f"job {poison.id} is dead" in worker.log()


# ---- thread and async models: crashes that take the worker down -----------------------

CRASHES = {
    ("thread", "t_exit"): 1,
    ("thread", "t_segv"): -signal.SIGSEGV,
    ("async", "a_exit"): 1,
    ("async", "a_segv"): -signal.SIGSEGV,
}


@pytest.mark.parametrize(("model", "task"), list(CRASHES))
def test_worker_crashing_job_ends_dead_with_worker_lost(
    model: str, task: str, fleet: Fleet, producer: App
) -> None:
    job = enqueue(producer, task)
    start: Callable[[], WorkerProcess] = lambda: fleet.start(  # noqa: E731
        [POOLS[model]], lease=LEASE, app=APP, shutdown_timeout=5
    )
    attempts_at_crash: list[int] = []

    # Restart a worker after every crash, as a supervisor would, until the job is dead.
    for _ in range(poisonapp.MAX_ATTEMPTS + 2):
        worker = start()
        wait_for(
            lambda w=worker: not w.alive() or producer.get_job(job.id).state == JobState.DEAD,
            what=fleet.logs,
        )
        if producer.get_job(job.id).state == JobState.DEAD:
            break
        assert worker.wait() == CRASHES[(model, task)], worker.log()
        lost = producer.get_job(job.id)
        assert lost.state in (JobState.CLAIMED, JobState.RUNNING)  # no live worker looks
        attempts_at_crash.append(lost.attempts)

    assert attempts_at_crash == list(range(1, poisonapp.MAX_ATTEMPTS + 1)), fleet.logs()
    dead = producer.get_job(job.id)
    assert dead.state == JobState.DEAD
    assert dead.attempts == poisonapp.MAX_ATTEMPTS
    assert dead.last_error is not None
    assert dead.last_error.type == "WorkerLost"
    assert dead.last_error.message.startswith("worker lost")

    # The worker that found it dead did not run it: it is up and serving healthy jobs.
    survivor = fleet.started[-1]
    wait_succeeded(producer, healthy(producer, OK_TASK[model], 3), fleet)
    assert survivor.alive(), survivor.log()
    assert producer.get_job(job.id) == dead
