"""Tasks that run until they are cancelled, one per concurrency model, for real
``sluicegate worker`` processes (and the process pool's children, which import this app
themselves).

Every task takes a folder and, when its body starts, writes ``pid-<job id>`` (the pid of
the process running it) and adds one to ``runs-<job id>``, so a test can tell where a job
ran and that it never ran again (each marker is written whole: a poller never reads it
half-written). Then:

- ``thr_long`` (queue ``thr``, thread model) loops on ``current_job().raise_if_cancelled()``
  with short sleeps; ``aio_long`` (queue ``aio``, async) awaits ``asyncio.sleep(60)``. Both
  write ``ended-<job id>`` with the name of what ended them (``JobCancelled``,
  ``CancelledError``) as it propagates.
- ``proc_long`` (queue ``proc``, process model) spins the CPU for 60 s: only a kill ends it.
- ``thr_ignores`` (queue ``thr``) waits for ``current_job().cancelled``, writes
  ``saw-<job id>``, then goes on until ``release-<job id>`` exists, writes
  ``returned-<job id>`` and returns ``"late"``: a thread task that acknowledges late.
- ``thr_quick``, ``aio_quick``, ``proc_quick``: return ``"quick"`` at once (a slot is free).
- ``lim_long`` and ``lim_quick`` (queue ``lim``, async) each take the one token of the
  concurrency-1 limit ``one``.

Every wait gives up after ``WAIT`` seconds, so nothing outlives a failed test for long.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

from sluicegate import App
from sluicegate.context import current_job

app = App(config=False)
app.limit("one", concurrency=1)

WAIT = 60.0  # a task gives up after this long
QUICK = "quick"
LATE = "late"


def mark(folder: str, name: str, job_id: int) -> Path:
    """The file ``<name>-<job id>`` of ``folder``."""
    return Path(folder) / f"{name}-{job_id}"


def _write(path: Path, text: str) -> None:
    """Write a marker whole (a reader polling for it never sees it empty)."""
    part = path.with_name(path.name + ".part")
    part.write_text(text)
    os.replace(part, path)


def _started(folder: str) -> int:
    """Record that this job's body started, here: its pid, and one more run."""
    job_id = current_job().id
    _write(mark(folder, "pid", job_id), str(os.getpid()))
    runs = mark(folder, "runs", job_id)
    count = int(runs.read_text()) if runs.exists() else 0
    _write(runs, str(count + 1))
    return job_id


def _ended(folder: str, job_id: int, exc: BaseException) -> None:
    _write(mark(folder, "ended", job_id), type(exc).__name__)


# ---- thread pool ---------------------------------------------------------------------


@app.task(queue="thr")
def thr_long(folder: str) -> str:
    job_id = _started(folder)
    began = time.monotonic()
    try:
        while time.monotonic() - began < WAIT:
            current_job().raise_if_cancelled()
            time.sleep(0.02)
    except BaseException as exc:
        _ended(folder, job_id, exc)
        raise
    return "finished"


@app.task(queue="thr")
def thr_ignores(folder: str) -> str:
    job_id = _started(folder)
    began = time.monotonic()
    while not current_job().cancelled and time.monotonic() - began < WAIT:
        time.sleep(0.02)
    _write(mark(folder, "saw", job_id), str(current_job().cancelled))
    release = mark(folder, "release", job_id)
    began = time.monotonic()
    while not release.exists() and time.monotonic() - began < WAIT:
        time.sleep(0.02)
    _write(mark(folder, "returned", job_id), LATE)
    return LATE


@app.task(queue="thr")
def thr_quick(folder: str) -> str:
    _started(folder)
    return QUICK


# ---- async pool ----------------------------------------------------------------------


async def _sleep_long(folder: str) -> str:
    job_id = _started(folder)
    try:
        await asyncio.sleep(WAIT)
    except BaseException as exc:
        _ended(folder, job_id, exc)
        raise
    return "finished"


@app.task(queue="aio")
async def aio_long(folder: str) -> str:
    return await _sleep_long(folder)


@app.task(queue="aio")
async def aio_quick(folder: str) -> str:
    _started(folder)
    return QUICK


# ---- process pool --------------------------------------------------------------------


@app.task(queue="proc")
def proc_long(folder: str) -> str:
    _started(folder)
    began = time.monotonic()
    while time.monotonic() - began < WAIT:
        pass
    return "finished"


@app.task(queue="proc")
def proc_quick(folder: str) -> str:
    _started(folder)
    return QUICK


# ---- a concurrency-1 limit (async pool) ----------------------------------------------


@app.task(queue="lim", limits=["one"])
async def lim_long(folder: str) -> str:
    return await _sleep_long(folder)


@app.task(queue="lim", limits=["one"])
async def lim_quick(folder: str) -> str:
    _started(folder)
    return QUICK
