"""Tasks that report progress, one per concurrency model, for real ``sluicegate worker``
processes (and the process pool's children, which import this app themselves).

Each task reports ``CALLS`` times as fast as it can (every value but the last is to be
overwritten before any heartbeat), then its final value, ``(0.4, "<model> 2 of 5")``,
and waits until the file named by its argument exists, so a test can read the running
job's progress from another process before letting it finish.
"""

from __future__ import annotations

import asyncio
import os
import time

from sluicegate import App
from sluicegate.context import current_job

app = App()

CALLS = 10_000
WAIT = 60.0  # a task gives up waiting for its release file after this long


def _report(model: str) -> None:
    job = current_job()
    for i in range(CALLS):
        job.progress(i / (2 * CALLS), f"{model} step {i}")
    job.progress(0.4, f"{model} 2 of 5")


def _released(path: str, began: float) -> bool:
    return os.path.exists(path) or time.monotonic() - began > WAIT


@app.task(queue="thr")
def thr_steps(path: str) -> int:
    _report("thread")
    began = time.monotonic()
    while not _released(path, began):
        time.sleep(0.02)
    return current_job().id


@app.task(queue="aio")
async def aio_steps(path: str) -> int:
    _report("async")
    began = time.monotonic()
    while not _released(path, began):
        await asyncio.sleep(0.02)
    return current_job().id


@app.task(queue="proc")
def proc_steps(path: str) -> int:
    _report("process")
    began = time.monotonic()
    while not _released(path, began):
        time.sleep(0.02)
    return current_job().id
