"""Cancelling running work, with real ``sluicegate worker`` processes running
tests/apps/cancelapp.py, on both brokers.

- A running job of each concurrency model, cancelled with ``Job.cancel``, is stopped at
  once although the lease is long (30 s: the next heartbeat could be 10 s away), because
  the cancel notifies the workers (PostgreSQL NOTIFY, SQLite doorbell): a thread task's
  ``raise_if_cancelled`` raises, a coroutine is cancelled, a process child is killed and a
  fresh child takes its place. The job stays ``cancelled`` with one attempt, never runs
  again, and the pool's single slot runs the next job of its queue.
- A thread task that sees ``current_job().cancelled`` but goes on keeps its slot busy
  until it returns; what it returns is refused (the job stays cancelled, result None).
- With a short lease, a cancel from ``sluicegate jobs cancel --by`` in another process
  stops the job too, and ``jobs show --json`` records who cancelled it, when, from which
  state and on which worker.
- A cancelled job gives back the one token of a concurrency-1 limit: a job waiting for
  that token then runs.
- A job cancelled while it waits in its queue never starts.
- A cancel whose notice never reaches the worker is found by its next heartbeat.

Tasks record their pid and how many times they ran in files (cancelapp's docstring), so
what ran is read from what the tasks saw, not only from the broker.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import cancelapp
import pytest

from sluicegate import App
from sluicegate.job import Job, JobState
from sluicegate.task import Task
from support.brokers import over_brokers
from support.fleet import (
    Fleet,
    WorkerProcess,
    _sluicegate_command,
    enqueue,
    held_by,
    pool_children,
    process_gone,
    stop_all,
    wait_for,
)

pytestmark = over_brokers

APP = "cancelapp:app"
LEASE = 30.0  # heartbeats every 10 s: only the cancel's notification makes a stop prompt
SHORT_LEASE = 1.5  # heartbeats every 0.5 s
PROMPT = 5.0  # a notified worker stops the attempt well inside one heartbeat interval
PUBLISH = ("--publish-interval", "0.1")  # a registry publish (a turn's last step) often
BY = "cancel-test"

TaskT = Task[Any, Any]
MODELS: dict[str, tuple[str, TaskT, TaskT]] = {
    "thread": ("thr=thr:1:thread", cancelapp.thr_long, cancelapp.thr_quick),
    "async": ("aio=aio:1:async", cancelapp.aio_long, cancelapp.aio_quick),
    "process": ("proc=proc:1:process", cancelapp.proc_long, cancelapp.proc_quick),
}
ENDED_BY = {"thread": "JobCancelled", "async": "CancelledError"}  # process: killed


@pytest.fixture
def folder(tmp_path: Path) -> str:
    """Where the tasks write their marker files."""
    path = tmp_path / "marks"
    path.mkdir()
    return str(path)


# ---- 1. each model: a running job is stopped at once -----------------------------------


@pytest.mark.parametrize("model", list(MODELS))
def test_a_running_job_is_stopped_at_once_and_its_slot_freed(
    model: str, fleet: Fleet, producer: App, folder: str
) -> None:
    pool, long_task, quick_task = MODELS[model]
    worker = fleet.start([pool], lease=LEASE, app=APP)
    job = enqueue(producer, long_task, folder)
    running = _until(fleet, lambda: _running(producer, job.id, folder), 60)
    pid = _pid(folder, job.id)
    if model == "process":
        assert pool_children(worker.pid) == [pid]  # its one child runs it
    else:
        assert pid == worker.pid
    quick = enqueue(producer, quick_task, folder)  # waits for the pool's one slot
    assert producer.get_job(quick.id).state is JobState.READY

    asked = time.time()
    began = time.monotonic()
    cancelled = job.cancel(by=BY)
    assert cancelled.state is JobState.CANCELLED
    _check_entry(cancelled.history[-1], running, asked)

    if model == "process":
        wait_for(lambda: process_gone(pid), timeout=LEASE, what=fleet.logs)
    else:
        ended = cancelapp.mark(folder, "ended", job.id)
        wait_for(ended.exists, timeout=LEASE, what=fleet.logs)
        assert ended.read_text() == ENDED_BY[model]
    stopped = time.monotonic() - began
    assert stopped < PROMPT, f"the attempt stopped {stopped:.2f} s after the cancel"

    done = _until(fleet, lambda: _finished(producer, quick.id), 60)
    assert done.state is JobState.SUCCEEDED and done.result == cancelapp.QUICK  # slot freed
    if model == "process":
        fresh = pool_children(worker.pid)
        assert len(fresh) == 1 and pid not in fresh  # a fresh child in place of the killed
        assert _pid(folder, quick.id) == fresh[0]  # which ran the next job

    stop_all([worker])  # the worker exits 0 and nothing ran it again meanwhile
    after = producer.get_job(job.id)
    assert after.state is JobState.CANCELLED and after.attempts == 1
    assert after.result is None and after.history[-1] == cancelled.history[-1]
    assert _runs(folder, job.id) == 1


# ---- 2. a thread task that ignores the flag keeps its slot ----------------------------


def test_a_thread_task_that_goes_on_keeps_its_slot_and_its_late_result_is_refused(
    fleet: Fleet, producer: App, folder: str
) -> None:
    worker = fleet.start(["thr=thr:1:thread"], lease=LEASE, app=APP, extra=PUBLISH)
    job = enqueue(producer, cancelapp.thr_ignores, folder)
    _until(fleet, lambda: _running(producer, job.id, folder), 60)
    quick = enqueue(producer, cancelapp.thr_quick, folder)

    began = time.monotonic()
    assert job.cancel(by=BY).state is JobState.CANCELLED
    saw = cancelapp.mark(folder, "saw", job.id)
    wait_for(saw.exists, timeout=LEASE, what=fleet.logs)  # current_job().cancelled: True
    assert saw.read_text() == "True"
    assert time.monotonic() - began < PROMPT

    # It goes on: the pool's one slot stays busy, so the next job does not start, in the
    # whole loop turns after the one that stopped the attempt (saw it cancelled).
    _turns(producer, worker, 2)
    assert _waiting(producer, quick.id, folder), "expected the quick job to wait"

    cancelapp.mark(folder, "release", job.id).touch()  # now it returns "late"
    wait_for(cancelapp.mark(folder, "returned", job.id).exists, timeout=30, what=fleet.logs)
    done = _until(fleet, lambda: _finished(producer, quick.id), 30)
    assert done.state is JobState.SUCCEEDED and done.result == cancelapp.QUICK

    late = producer.get_job(job.id)
    assert late.state is JobState.CANCELLED and late.result is None  # "late" refused
    assert late.attempts == 1 and _runs(folder, job.id) == 1
    assert [e["event"] for e in late.history] == ["cancelled"]
    stop_all([worker])
    assert producer.get_job(job.id).state is JobState.CANCELLED


# ---- 3. the CLI, and the heartbeat with a short lease ----------------------------------


def test_a_cancel_from_the_cli_stops_the_job_and_is_in_its_history(
    fleet: Fleet, producer: App, db_url: str, folder: str
) -> None:
    worker = fleet.start(["aio=aio:1:async"], lease=SHORT_LEASE, app=APP)
    job = enqueue(producer, cancelapp.aio_long, folder)
    running = _until(fleet, lambda: _running(producer, job.id, folder), 60)
    assert held_by(running, worker.pid)

    asked = time.time()
    out = _cli("jobs", "cancel", str(job.id), "--by", "alice", "--broker", db_url)
    answered = time.time()
    assert out.startswith(f"job {job.id} is cancelled; it was running on worker ")
    assert running.worker_id is not None and running.worker_id in out

    ended = cancelapp.mark(folder, "ended", job.id)
    wait_for(ended.exists, timeout=SHORT_LEASE + 10, what=fleet.logs)
    assert ended.read_text() == "CancelledError"

    data = json.loads(_cli("jobs", "show", str(job.id), "--json", "--broker", db_url))
    assert data["state"] == "cancelled" and data["attempts"] == 1 and data["result"] is None
    entry = data["history"][-1]
    assert entry["event"] == "cancelled" and entry["from"] == "running"
    assert entry["by"] == "alice" and entry["worker"] == running.worker_id
    assert entry["attempt"] == 1
    assert asked - 5 <= entry["at"] <= answered + 5  # the broker's clock, when it was asked

    quick = enqueue(producer, cancelapp.aio_quick, folder)
    done = _until(fleet, lambda: _finished(producer, quick.id), 30)
    assert done.state is JobState.SUCCEEDED
    stop_all([worker])
    assert _runs(folder, job.id) == 1
    assert producer.get_job(job.id).state is JobState.CANCELLED


# ---- 4. limit tokens come back ----------------------------------------------------------


def test_a_cancelled_job_gives_back_its_limit_token(
    fleet: Fleet, producer: App, folder: str
) -> None:
    # Two slots, so only the concurrency-1 limit "one" holds the second job back.
    worker = fleet.start(["lim=lim:2:async"], lease=LEASE, app=APP)
    job = _enqueue_limited(producer, cancelapp.lim_long, folder)
    _until(fleet, lambda: _running(producer, job.id, folder), 60)
    second = _enqueue_limited(producer, cancelapp.lim_quick, folder)
    assert [h[0] for h in producer.broker.limit_figures().held] == ["one"]
    # A job behind it that needs no token takes the free slot: the claim that took it
    # passed over the limited job, which waits (and blocks nothing behind it).
    free = enqueue(producer, cancelapp.aio_quick, folder, queue="lim")
    passed = _until(fleet, lambda: _finished(producer, free.id), 30)
    assert passed.state is JobState.SUCCEEDED and passed.result == cancelapp.QUICK
    assert _waiting(producer, second.id, folder), "expected the limited job to wait"

    began = time.monotonic()
    assert producer.cancel(job.id, by=BY).state is JobState.CANCELLED
    done = _until(fleet, lambda: _finished(producer, second.id), LEASE)
    took = time.monotonic() - began
    assert done.state is JobState.SUCCEEDED and done.result == cancelapp.QUICK
    assert took < LEASE, f"the token came back {took:.2f} s after the cancel"
    # The broker frees the token with the cancel itself, so the second job may start
    # a moment before the worker has stopped the first: only that it stops is checked.
    ended = cancelapp.mark(folder, "ended", job.id)
    wait_for(ended.exists, timeout=LEASE, what=fleet.logs)
    assert ended.read_text() == "CancelledError"

    stop_all([worker])
    assert producer.broker.limit_figures().held == []  # every token came back
    after = producer.get_job(job.id)
    assert after.state is JobState.CANCELLED and after.attempts == 1
    assert _runs(folder, job.id) == 1


# ---- 5. a job cancelled while it waits never starts --------------------------------------


def test_a_job_cancelled_while_it_waits_never_starts(
    fleet: Fleet, producer: App, folder: str
) -> None:
    worker = fleet.start(["aio=aio:1:async"], lease=LEASE, app=APP)
    first = enqueue(producer, cancelapp.aio_long, folder)
    _until(fleet, lambda: _running(producer, first.id, folder), 60)
    waiting = enqueue(producer, cancelapp.aio_long, folder)  # behind it, in the one slot
    assert producer.get_job(waiting.id).state is JobState.READY

    cancelled = waiting.cancel(by=BY)
    assert cancelled.state is JobState.CANCELLED and cancelled.attempts == 0
    entry = cancelled.history[-1]
    assert entry["event"] == "cancelled" and entry["from"] == "ready" and entry["by"] == BY
    assert "worker" not in entry

    first.cancel(by=BY)  # frees the slot: the cancelled job is still not taken
    quick = enqueue(producer, cancelapp.aio_quick, folder)
    done = _until(fleet, lambda: _finished(producer, quick.id), 30)
    assert done.state is JobState.SUCCEEDED
    stop_all([worker])

    after = producer.get_job(waiting.id)
    assert after.state is JobState.CANCELLED and after.attempts == 0
    assert after.started_at is None and after.worker_id is None
    assert not cancelapp.mark(folder, "runs", waiting.id).exists()
    assert not cancelapp.mark(folder, "pid", waiting.id).exists()


# ---- helpers -----------------------------------------------------------------------------


# ---- 6. no notice: the next heartbeat stops it -------------------------------------------


def test_without_the_notice_the_next_heartbeat_stops_the_job(
    fleet: Fleet, producer: App, folder: str, broker_name: str
) -> None:
    """A cancel whose notice never reaches the worker (a lost NOTIFY, a writer that cannot
    ring the doorbell: here the producer's broker is told to send none) is found by the
    worker's next heartbeat, within one interval (lease / 3 = 0.5 s here)."""
    if broker_name == "postgresql":
        producer.broker._notify_cancelled = lambda conn: None  # type: ignore[attr-defined]
    else:
        producer.broker._ring_cancelled = lambda: None  # type: ignore[attr-defined]
    worker = fleet.start(["aio=aio:1:async"], lease=SHORT_LEASE, app=APP)
    job = enqueue(producer, cancelapp.aio_long, folder)
    _until(fleet, lambda: _running(producer, job.id, folder), 60)
    began = time.monotonic()
    job.cancel(by=BY)
    ended = cancelapp.mark(folder, "ended", job.id)
    wait_for(ended.exists, timeout=30, what=fleet.logs)
    stopped = time.monotonic() - began
    assert ended.read_text() == "CancelledError"
    # One heartbeat interval (0.5 s), and slack for a busy shared machine.
    assert stopped < SHORT_LEASE / 3 + 3.0, f"the attempt stopped {stopped:.2f} s after the cancel"
    stop_all([worker])
    assert producer.get_job(job.id).state is JobState.CANCELLED


def _until(fleet: Fleet, job: Callable[[], Job | None], timeout: float) -> Job:
    """``wait_for`` a job to be as ``job`` (a read returning it, or None) wants it."""
    found = wait_for(job, timeout=timeout, what=fleet.logs)
    assert found is not None
    return found


def _running(app: App, job_id: int, folder: str) -> Job | None:
    """The job, once it is running and its body has started (written its pid)."""
    job = app.get_job(job_id)
    ok = job.state is JobState.RUNNING and cancelapp.mark(folder, "pid", job_id).exists()
    return job if ok else None


def _waiting(app: App, job_id: int, folder: str) -> bool:
    """Still ready, and its body never started."""
    job = app.get_job(job_id)
    return job.state is JobState.READY and not cancelapp.mark(folder, "runs", job_id).exists()


def _finished(app: App, job_id: int) -> Job | None:
    job = app.get_job(job_id)
    return job if job.finished else None


def _pid(folder: str, job_id: int) -> int:
    return int(cancelapp.mark(folder, "pid", job_id).read_text())


def _runs(folder: str, job_id: int) -> int:
    return int(cancelapp.mark(folder, "runs", job_id).read_text())


def _uptime(app: App, worker: WorkerProcess) -> float | None:
    """The uptime in ``worker``'s last published snapshot: a new value, a new publish."""
    for record in app.broker.list_workers().workers:
        if record.info.pid == worker.pid and record.snapshot:
            return float(record.snapshot["uptime_s"])
    return None


def _turns(app: App, worker: WorkerProcess, n: int) -> None:
    """Wait for ``n`` more registry publishes of ``worker`` (started with PUBLISH). Each is
    the last step of a loop turn, and the first one seen is stored after this call: so for
    n >= 2 the n-th one's turn began after this call and ran whole, claimers included,
    before it was stored."""
    seen = _uptime(app, worker)
    for _ in range(n):
        seen = wait_for(
            lambda s=seen: (u := _uptime(app, worker)) != s and u,
            timeout=30,
            what=f"a registry publish of worker {worker.pid}",
        )


def _check_entry(entry: dict[str, Any], running: Job, asked: float) -> None:
    """The cancel's history entry: from running, by whom, on which worker, at which attempt."""
    assert entry["event"] == "cancelled" and entry["from"] == "running"
    assert entry["by"] == BY and entry["attempt"] == 1
    assert entry["worker"] == running.worker_id
    assert abs(entry["at"] - asked) < 5


def _enqueue_limited(app: App, task: TaskT, folder: str) -> Job:
    """Enqueue through cancelapp's own App, which stamps the job with the task's limits
    (a producer that does not register the task cannot), then read it back bound."""
    spec = cancelapp.app.build_spec(task.name, [folder])
    return app.get_job(app.broker.enqueue([spec])[0].id)


def _cli(*args: str) -> str:
    done = subprocess.run(
        [*_sluicegate_command(), *args], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout
