"""Tasks for bench/cancel.py: one that holds its slot until cancelled, per pool model, and
one that stamps when it starts. A holder that hears of its cancel (async, thread) stamps
when it stops; a process child cannot (it is killed), so the bench watches its pid."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

from sluicegate import App
from sluicegate.context import current_job
from sluicegate.errors import JobCancelled

app = App()


def _stamp(folder: str, name: str) -> None:
    (Path(folder) / name).write_text(repr(time.time()))


@app.task(queue="aio")
async def aio_hold(folder: str) -> None:
    _stamp(folder, f"{current_job().id}.began")
    try:
        await asyncio.sleep(600)
    except asyncio.CancelledError:
        _stamp(folder, f"{current_job().id}.stopped")
        raise


@app.task(queue="thr")
def thr_hold(folder: str) -> None:
    _stamp(folder, f"{current_job().id}.began")
    end = time.monotonic() + 600
    try:
        while time.monotonic() < end:
            current_job().raise_if_cancelled()
            time.sleep(0.001)
    except JobCancelled:
        _stamp(folder, f"{current_job().id}.stopped")
        raise


@app.task(queue="proc")
def proc_hold(folder: str) -> None:
    (Path(folder) / f"{current_job().id}.pid").write_text(str(os.getpid()))
    _stamp(folder, f"{current_job().id}.began")  # after the pid: the bench reads both
    end = time.monotonic() + 600
    while time.monotonic() < end:
        pass


@app.task(queue="thr")
def mark(folder: str) -> None:
    _stamp(folder, f"{current_job().id}.began")


@app.task(queue="aio")
async def amark(folder: str) -> None:
    _stamp(folder, f"{current_job().id}.began")
