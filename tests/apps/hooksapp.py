"""An app whose every lifecycle hook appends a line to a file, for real ``sluicegate worker``
processes (and the process pool's children, which import this app themselves).

Each line is ``<pid> <hook> <job id or -> <outcome or ->``, appended in one write to the
file named by ``SG_HOOKS_LOG`` (no file: the hooks write nothing). Per model (queues
``thr``, ``aio``, ``proc``): ``*_ok(x)`` returns x, ``*_fail()`` raises ValueError (two
attempts: retried, then dead), ``*_slow()`` runs past its 0.5 s timeout (one attempt):
the thread returns late, the coroutine is cancelled, the process child is killed.
``*_wait()`` runs until it is cancelled (at most 30 s). An argument ``"hooks-raise"`` makes every job hook raise first (the
outcome must not change). The ``*_ok`` tasks write a ``task`` line too.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

from sluicegate import App
from sluicegate.context import current_job
from sluicegate.hooks import outcome_name

app = App(config=False)
RAISE = "hooks-raise"


def record(hook: str, job_id: object = "-", outcome: str = "-") -> None:
    path = os.environ.get("SG_HOOKS_LOG")
    if not path:
        return
    line = f"{os.getpid()} {hook} {job_id} {outcome}\n".encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)  # O_APPEND: whole lines from many processes never interleave
    finally:
        os.close(fd)


def raising(job: Any) -> None:
    if RAISE in job.args:
        raise RuntimeError("a hook that fails")


@app.hook("before_job")
def before(job: Any) -> None:
    raising(job)
    record("before_job", job.id)


@app.after_job
def after(job: Any, outcome: Any) -> None:
    raising(job)
    record("after_job", job.id, outcome_name(outcome))


@app.on_retry
def retry(job: Any, outcome: Any) -> None:
    record("on_retry", job.id, outcome_name(outcome))


@app.on_dead
def dead(job: Any, outcome: Any) -> None:
    record("on_dead", job.id, outcome_name(outcome))


@app.on_enqueue
def enqueued(job: Any) -> None:
    record("on_enqueue", job.id)


@app.on_worker_start
def worker_start(worker: Any) -> None:
    record("on_worker_start")


@app.on_worker_stop
def worker_stop(worker: Any) -> None:
    record("on_worker_stop")


# ---- tasks, one set per model ------------------------------------------------------------
FAIL = {"max_attempts": 2, "backoff_base": 0.05, "backoff_max": 0.05}


@app.task(queue="thr")
def thr_ok(x: Any) -> Any:
    record("task", current_job().id)
    return x


@app.task(queue="thr", **FAIL)  # type: ignore[arg-type]
def thr_fail() -> None:
    raise ValueError("thread task fails")


@app.task(queue="thr", timeout=0.5, max_attempts=1)
def thr_slow() -> str:
    time.sleep(1.5)  # a thread cannot be stopped: it returns after its attempt timed out
    record("task", current_job().id)
    return "late"


@app.task(queue="thr")
def thr_wait() -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        current_job().raise_if_cancelled()
        time.sleep(0.02)


@app.task(queue="aio")
async def aio_ok(x: Any) -> Any:
    await asyncio.sleep(0)
    record("task", current_job().id)
    return x


@app.task(queue="aio", **FAIL)  # type: ignore[arg-type]
async def aio_fail() -> None:
    raise ValueError("async task fails")


@app.task(queue="aio", timeout=0.5, max_attempts=1)
async def aio_slow() -> None:
    await asyncio.sleep(30)


@app.task(queue="aio")
async def aio_wait() -> None:
    await asyncio.sleep(30)


@app.task(queue="proc")
def proc_ok(x: Any) -> Any:
    record("task", current_job().id)
    return x


@app.task(queue="proc", **FAIL)  # type: ignore[arg-type]
def proc_fail() -> None:
    raise ValueError("process task fails")


@app.task(queue="proc", timeout=0.5, max_attempts=1)
def proc_slow() -> None:
    time.sleep(30)


@app.task(queue="proc")
def proc_wait() -> None:
    time.sleep(30)
