"""Lifecycle hooks with real ``sluicegate worker`` processes running tests/apps/hooksapp.py,
in each pool model, on both brokers.

The app's hooks append ``<pid> <hook> <job id> <outcome>`` lines to one file, so a test reads
which hooks ran, in which order and in which process:

- the worker's first line is on_worker_start and its last on_worker_stop, in its pid;
- a job that succeeds: before_job, the task, after_job succeeded; a job that fails twice:
  before_job, after_job retried, on_retry, then before_job, after_job dead, on_dead;
- thread and async pools run them in the worker process, a process pool in the child
  that ran the job (not the worker);
- an attempt past its timeout: after_job timed_out and on_dead where the end was decided
  (the thread pool's timeout thread and the async loop: the worker; a killed process
  child: its parent, the worker), and a thread that returns late runs no second after_job;
- hooks that raise are logged with the hook's name and traceback, and the job still
  succeeds with its result.
"""

from __future__ import annotations

import functools
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import hooksapp
import pytest

from sluicegate import App
from sluicegate.job import Job, JobState
from support.brokers import over_brokers
from support.fleet import Fleet, enqueue, wait_for

pytestmark = over_brokers

APP = "hooksapp:app"
FINAL = {JobState.SUCCEEDED, JobState.DEAD}
MODELS = {
    "thread": ("thr=thr:2:thread", hooksapp.thr_ok, hooksapp.thr_fail, hooksapp.thr_slow),
    "async": ("aio=aio:2:async", hooksapp.aio_ok, hooksapp.aio_fail, hooksapp.aio_slow),
    "process": ("proc=proc:2:process", hooksapp.proc_ok, hooksapp.proc_fail, hooksapp.proc_slow),
}

Line = tuple[int, str, str, str]  # pid, hook, job id, outcome


@pytest.fixture
def hooks_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The file the workers' hooks (and their children's) append to."""
    path = tmp_path / "hooks.log"
    monkeypatch.setenv("SG_HOOKS_LOG", str(path))
    yield path


def read_lines(path: Path) -> list[Line]:
    lines = []
    for text in path.read_text().splitlines():
        pid, hook, job_id, outcome = text.split()
        lines.append((int(pid), hook, job_id, outcome))
    return lines


def of_job(lines: list[Line], job: Job) -> list[tuple[int, str, str]]:
    return [(pid, hook, outcome) for pid, hook, job_id, outcome in lines if job_id == str(job.id)]


def finished(app: App, jobs: list[Job]) -> bool:
    return all(app.get_job(job.id).state in FINAL for job in jobs)


@pytest.mark.parametrize("model", list(MODELS))
def test_hooks_run_in_order_in_the_process_that_runs_the_job(
    model: str, producer: App, fleet: Fleet, hooks_log: Path
) -> None:
    pool, ok, fail, slow = MODELS[model]
    worker = fleet.start([pool], app=APP, lease=5.0)
    good = enqueue(producer, ok, 7)
    bad = enqueue(producer, fail)
    late = enqueue(producer, slow)
    raised = enqueue(producer, ok, hooksapp.RAISE)
    jobs = [good, bad, late, raised]
    wait_for(lambda: finished(producer, jobs), timeout=60, what=fleet.logs)
    if model == "thread":  # the timed-out thread returns late: its task line comes last
        wait_for(lambda: ran_task(hooks_log, late), timeout=30, what=fleet.logs)
    wait_for(lambda: worker_started(worker.log()), timeout=30)
    worker.send(signal.SIGTERM)
    assert worker.wait(30) == 0, worker.log()
    lines = read_lines(hooks_log)

    # The worker's own hooks come first and last, in the worker.
    assert lines[0] == (worker.pid, "on_worker_start", "-", "-")
    assert lines[-1] == (worker.pid, "on_worker_stop", "-", "-")

    # Where jobs run: the worker itself, or (process pools) one of its children.
    ran = of_job(lines, good)
    runner = ran[0][0]
    if model == "process":
        assert runner != worker.pid
    else:
        assert runner == worker.pid
    assert ran == [
        (runner, "before_job", "-"),
        (runner, "task", "-"),
        (runner, "after_job", "succeeded"),
    ]
    assert producer.get_job(good.id).result == 7

    failing = of_job(lines, bad)
    assert [(hook, outcome) for _, hook, outcome in failing] == [
        ("before_job", "-"),
        ("after_job", "retried"),
        ("on_retry", "retried"),
        ("before_job", "-"),
        ("after_job", "dead"),
        ("on_dead", "dead"),
    ]
    pids = {pid for pid, _, _ in failing}
    assert worker.pid not in pids if model == "process" else pids == {worker.pid}
    assert producer.get_job(bad.id).state is JobState.DEAD

    # A timeout ends the attempt where it is decided: the worker for every model (a
    # process pool's child is killed by its parent). A late thread adds only its task line.
    timed = of_job(lines, late)
    ends = [(pid, hook, outcome) for pid, hook, outcome in timed if hook != "before_job"]
    expected_ends = [
        (worker.pid, "after_job", "timed_out"),
        (worker.pid, "on_dead", "timed_out"),
    ]
    if model == "thread":  # the thread's late return: its task line, and no more hooks
        expected_ends.append((worker.pid, "task", "-"))
    assert timed[0][1] == "before_job"
    assert (timed[0][0] != worker.pid) if model == "process" else timed[0][0] == worker.pid
    assert ends == expected_ends
    assert producer.get_job(late.id).state is JobState.DEAD

    # Hooks that raise: logged by name, with the traceback; the job's outcome is its own.
    done = producer.get_job(raised.id)
    assert done.state is JobState.SUCCEEDED and done.result == hooksapp.RAISE
    assert [hook for _, hook, _ in of_job(lines, raised)] == ["task"]
    log = worker.log()
    assert "hook before_job hooksapp.before raised" in log
    assert "hook after_job hooksapp.after raised" in log
    assert "RuntimeError: a hook that fails" in log


WAITS = {"thread": hooksapp.thr_wait, "async": hooksapp.aio_wait, "process": hooksapp.proc_wait}


@pytest.mark.parametrize("model", list(MODELS))
def test_a_cancelled_attempt_ends_stopped_with_no_retry_or_dead_hook(
    model: str, producer: App, fleet: Fleet, hooks_log: Path
) -> None:
    worker = fleet.start([MODELS[model][0]], app=APP, lease=30.0)
    job = enqueue(producer, WAITS[model])
    began = functools.partial(hooks_of, hooks_log, job)
    wait_for(lambda: "before_job" in began(), timeout=60, what=fleet.logs)
    producer.cancel(job.id, by="hooks-test")
    wait_for(lambda: "after_job" in began(), timeout=30, what=fleet.logs)
    wait_for(lambda: worker_started(worker.log()), timeout=30)
    worker.send(signal.SIGTERM)
    assert worker.wait(30) == 0, worker.log()
    lines = of_job(read_lines(hooks_log), job)
    runner = lines[0][0]
    # Thread and async attempts end in the worker; a process child is killed, so its
    # parent (the worker) tells the hooks.
    assert lines == [(runner, "before_job", "-"), (worker.pid, "after_job", "stopped")]
    assert (runner != worker.pid) if model == "process" else runner == worker.pid
    assert producer.get_job(job.id).state is JobState.CANCELLED


def hooks_of(path: Path, job: Job) -> list[str]:
    """The hooks (and task lines) written for ``job`` so far."""
    return [hook for _, hook, _ in of_job(read_lines(path), job)] if path.exists() else []


def ran_task(path: Path, job: Job) -> bool:
    return any(hook == "task" for _, hook, _ in of_job(read_lines(path), job))


def worker_started(log: str) -> bool:
    return " started: " in log


def test_a_second_worker_start_and_stop_write_their_own_lines(
    fleet: Fleet, hooks_log: Path, producer: App
) -> None:
    """Worker hooks run once per worker process, in that process; none in its children."""
    workers = [fleet.start(["proc=proc:1:process"], app=APP) for _ in range(2)]
    job = enqueue(producer, hooksapp.proc_ok, 1)
    wait_for(lambda: finished(producer, [job]), timeout=60, what=fleet.logs)
    for worker in workers:
        wait_for(lambda w=worker: worker_started(w.log()), timeout=30)
        worker.send(signal.SIGTERM)
    for worker in workers:
        assert worker.wait(30) == 0, worker.log()
    lines = read_lines(hooks_log)
    for worker in workers:
        mine = [hook for pid, hook, _, _ in lines if pid == worker.pid]
        assert mine == ["on_worker_start", "on_worker_stop"]
    assert os.getpid() not in {pid for pid, *_ in lines}
