"""Poison tasks for every concurrency model, imported by real ``sluicegate worker`` processes
(and by process-pool children, which import the app themselves).

One queue per model: ``proc`` (process pools), ``thr`` (thread pools), ``aio`` (async
pools). Each model has a healthy task and the poisons: raise, hang past the timeout,
``os._exit(1)``, a segfault (``ctypes.string_at(0)``) and, for the process model, a
memory blow-up that only a per-child memory cap stops. Poisons retry at once
(``backoff_base=0``) and have ``MAX_ATTEMPTS`` attempts, so tests stay fast.

The app has no broker of its own: workers get ``--broker``, tests enqueue by name.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import threading
import time
from typing import Any

from sluicegate import App
from sluicegate.context import current_job

app = App()

MAX_ATTEMPTS = 2
TIMEOUT = 0.5  # the hang tasks' timeout
HANG = 30.0  # how long a hang would last if nothing stopped it
THREAD_HANG = 1.5  # thread timeouts are soft: the thread must return by itself to free its slot
BLOW_UP_BYTES = 2 * 1024**3
CHUNK = 64 * 1024**2

_held: list[bytes] = []  # memory a process child keeps between jobs (recycling tests)


def _segfault() -> None:
    ctypes.string_at(0)  # reads address 0: SIGSEGV


def _blow_up() -> None:
    """Allocate (and touch) up to 2 GB in 64 MB chunks; a memory cap stops it early."""
    chunks = [b"x" * CHUNK for _ in range(BLOW_UP_BYTES // CHUNK)]
    raise AssertionError(f"allocated {len(chunks) * CHUNK} bytes: no memory cap applied")


def _me() -> dict[str, Any]:
    job = current_job()
    return {
        "pid": os.getpid(),
        "thread": threading.current_thread().name,
        "job_id": job.id,
        "attempt": job.attempts,
        "task": job.task,
    }


poison = {"max_attempts": MAX_ATTEMPTS, "backoff_base": 0}

# ---- process model (queue "proc") -------------------------------------------------------


@app.task(queue="proc")
def p_ok(n: int = 0) -> dict[str, Any]:
    return {**_me(), "n": n}


@app.task(queue="proc", **poison)
def p_raise() -> None:
    raise ValueError("poison: raised in a child")


@app.task(queue="proc", timeout=TIMEOUT, **poison)
def p_hang() -> None:
    time.sleep(HANG)


@app.task(queue="proc", **poison)
def p_exit() -> None:
    os._exit(1)


@app.task(queue="proc", **poison)
def p_segv() -> None:
    _segfault()


@app.task(queue="proc", **poison)
def p_blow_up() -> None:
    _blow_up()


@app.task(queue="proc", **poison)
def p_sleep(seconds: float, pid_file: str | None = None) -> None:
    """No timeout: a test kills the child running it (as the OOM killer would). Appends
    the child's pid to ``pid_file`` first, one line per attempt."""
    if pid_file is not None:
        with open(pid_file, "a") as f:
            f.write(f"{os.getpid()}\n")
    time.sleep(seconds)


@app.task(queue="proc")
def p_hold(megabytes: int) -> dict[str, Any]:
    """Keep ``megabytes`` of touched memory in this child after the job returns."""
    _held.append(b"x" * (megabytes * 1024**2))
    return _me()


# ---- thread model (queue "thr") ---------------------------------------------------------


@app.task(queue="thr")
def t_ok(n: int = 0) -> dict[str, Any]:
    return {**_me(), "n": n}


@app.task(queue="thr", **poison)
def t_raise() -> None:
    raise ValueError("poison: raised in a thread")


@app.task(queue="thr", timeout=TIMEOUT, **poison)
def t_hang() -> None:
    time.sleep(THREAD_HANG)


@app.task(queue="thr", **poison)
def t_exit() -> None:
    os._exit(1)


@app.task(queue="thr", **poison)
def t_segv() -> None:
    _segfault()


# ---- async model (queue "aio") ----------------------------------------------------------


@app.task(queue="aio")
async def a_ok(n: int = 0) -> dict[str, Any]:
    await asyncio.sleep(0)
    return {**_me(), "n": n}


@app.task(queue="aio", **poison)
async def a_raise() -> None:
    await asyncio.sleep(0)
    raise ValueError("poison: raised in a coroutine")


@app.task(queue="aio", timeout=TIMEOUT, **poison)
async def a_hang() -> None:
    await asyncio.sleep(HANG)


@app.task(queue="aio", **poison)
async def a_exit() -> None:
    os._exit(1)


@app.task(queue="aio", **poison)
async def a_segv() -> None:
    _segfault()
