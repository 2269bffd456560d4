"""Waiting for jobs' results: one hub per App, however many callers wait.

``job.wait()`` and ``await job.wait_async()`` register the job's id here and sleep on a
``threading.Event`` or an asyncio future. One thread of the hub sleeps until the broker
says jobs may have finished (``Broker.subscribe_finished``: LISTEN/NOTIFY on PostgreSQL,
a doorbell on SQLite, one subscription for every waiter), then reads the state of ALL
waited ids in ONE query (``Broker.finished_jobs``) and resolves those that finished. So
1,000 waiters cost one query per wake-up, not a query each per poll. A slow safety poll
(``SAFETY_POLL``) covers a notification missed (a connection lost, a writer that cannot
ring). New waiters are checked the same way, together, on the hub's next turn.

Async waiters are resolved with ``loop.call_soon_threadsafe``: the event loop never
blocks on the broker. The thread starts on the first wait and stops when the App closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .brokers.base import Broker, Finished
from .errors import BrokerUnavailable, JobCancelled, JobFailed, JobNotFound, SluicegateError
from .job import Job, JobId, JobState, job_id_of

log = logging.getLogger("sluicegate.waiting")

SAFETY_POLL = 1.0  # s between reads while waiters wait and no notification came
RETRY_AFTER_ERROR = 1.0  # s before the hub reads again after a failed read
GATHER = 0.002  # s the hub lets new waiters gather before checking them (not on news)


def check_timeout(timeout: float | None) -> float | None:
    """None (no limit), or a finite number of seconds >= 0; anything else is a ValueError."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, int | float):
        raise ValueError(f"timeout must be a number of seconds or None, not {timeout!r}")
    if math.isnan(timeout) or timeout < 0:
        raise ValueError(f"timeout must be a number of seconds >= 0 or None, not {timeout!r}")
    return float(timeout)


def outcome_of(job: Job) -> tuple[bool, Any]:
    """(True, result) for a job that succeeded, else (False, the error to raise)."""
    if job.state is JobState.SUCCEEDED:
        return True, job.result
    if job.state is JobState.CANCELLED:
        return False, JobCancelled(job.id)
    error = job.last_error
    if error is None:
        return False, JobFailed(job.id, "", "")
    return False, JobFailed(job.id, error.type, error.message, error.traceback)


@dataclass(eq=False)
class _Waiter:
    """One caller's wait: a threading.Event, or a future on an event loop."""

    job_id: JobId
    event: threading.Event | None = None
    loop: asyncio.AbstractEventLoop | None = None
    future: asyncio.Future[tuple[bool, Any]] | None = None
    outcome: tuple[bool, Any] | None = field(default=None)

    def resolve(self, outcome: tuple[bool, Any]) -> None:
        if self.event is not None:
            self.outcome = outcome
            self.event.set()
        elif self.loop is not None and self.future is not None:
            with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits any more
                self.loop.call_soon_threadsafe(_settle, self.future, outcome)


def _settle(future: asyncio.Future[tuple[bool, Any]], outcome: tuple[bool, Any]) -> None:
    if not future.done():
        future.set_result(outcome)


def _returned(outcome: tuple[bool, Any]) -> Any:
    ok, value = outcome
    if not ok:
        raise value
    return value


class Waits:
    """The hub: every waiter of one App, one subscription, one query per wake-up.

    ``queries`` counts the hub's reads of the broker (one ``finished_jobs`` each), so a
    test or a benchmark can see what the waiting costs the broker."""

    def __init__(self, broker: Broker, safety_poll: float = SAFETY_POLL) -> None:
        self.broker = broker
        self.safety_poll = safety_poll
        self.queries = 0
        self._lock = threading.Lock()  # the waiters; held briefly, never across I/O
        self._start_lock = threading.Lock()  # starting and stopping the thread
        self._waiting: dict[JobId, list[_Waiter]] = {}
        self._unchecked: set[JobId] = set()  # registered since the last read
        self._news = False  # a notification came since the last read
        self._wake = threading.Event()
        self._closed = False
        self._thread: threading.Thread | None = None
        self._unsubscribe: Callable[[], None] | None = None

    # ---- the callers' side ---------------------------------------------------------------
    def wait(self, job_id: int | str, timeout: float | None = None) -> Any:
        limit = check_timeout(timeout)
        waiter = _Waiter(job_id_of(job_id), event=threading.Event())
        self._add(waiter)
        assert waiter.event is not None
        if not waiter.event.wait(limit):
            self._remove(waiter)
            if waiter.outcome is None:  # not resolved meanwhile: a last look of its own
                waiter.outcome = self._last_look(waiter.job_id, timeout)
        assert waiter.outcome is not None
        return _returned(waiter.outcome)

    async def wait_async(self, job_id: int | str, timeout: float | None = None) -> Any:
        limit = check_timeout(timeout)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[tuple[bool, Any]] = loop.create_future()
        waiter = _Waiter(job_id_of(job_id), loop=loop, future=future)
        # Registering may start the hub (PostgreSQL: until LISTEN is in place): off the loop.
        if self._thread is None:
            await asyncio.to_thread(self._add, waiter)
        else:
            self._add(waiter)
        try:
            async with asyncio.timeout(limit):
                outcome = await future
        except TimeoutError:
            self._remove(waiter)
            if future.done() and not future.cancelled():  # resolved just as time ran out
                outcome = future.result()
            else:
                outcome = await asyncio.to_thread(self._last_look, waiter.job_id, timeout)
        finally:
            self._remove(waiter)
        return _returned(outcome)

    def _last_look(self, job_id: JobId, timeout: float | None) -> tuple[bool, Any]:
        """At the timeout, the job's state read once more (one query, this waiter's own):
        a job that finished just then (or before a ``timeout=0`` wait) is not a timeout."""
        self.queries += 1
        found = self.broker.finished_jobs([job_id])
        if job_id in found.jobs:
            return outcome_of(found.jobs[job_id])
        if job_id in found.missing:
            return False, JobNotFound(f"job {job_id} not found")
        return False, TimeoutError(f"job {job_id} did not finish within {timeout} s")

    def _add(self, waiter: _Waiter) -> None:
        with self._lock:
            if self._closed:
                raise SluicegateError("cannot wait for a job: the app was closed")
            self._waiting.setdefault(waiter.job_id, []).append(waiter)
            self._unchecked.add(waiter.job_id)
        if self._thread is None:
            self._start()
        self._wake.set()

    def _start(self) -> None:
        """Subscribe, then start the thread: subscribed before its first read, so a job
        finishing after that read is heard."""
        with self._start_lock:
            if self._thread is not None or self._closed:
                return
            self._unsubscribe = self.broker.subscribe_finished(self._notified)
            thread = threading.Thread(target=self._run, name="sluicegate-waits", daemon=True)
            thread.start()
            self._thread = thread

    def _remove(self, waiter: _Waiter) -> None:
        with self._lock:
            waiters = self._waiting.get(waiter.job_id)
            if waiters is not None and waiter in waiters:
                waiters.remove(waiter)
                if not waiters:
                    del self._waiting[waiter.job_id]

    @property
    def waiting(self) -> int:
        """How many job ids are waited for now."""
        with self._lock:
            return len(self._waiting)

    # ---- the hub's thread ----------------------------------------------------------------
    def _notified(self) -> None:
        """From the broker's thread (or the thread that ended jobs): read again, soon."""
        with self._lock:
            self._news = True
        self._wake.set()

    def _run(self) -> None:
        while True:
            with self._lock:
                idle = not self._waiting
            self._wake.wait(None if idle else self.safety_poll)
            if not self._news and self._unchecked:  # a burst of new waiters: one read
                time.sleep(GATHER)
            self._wake.clear()
            with self._lock:
                if self._closed:
                    return
                if self._news or not self._unchecked:  # news, or the safety poll: all of them
                    ids = list(self._waiting)
                else:  # only new waiters: only their ids
                    ids = [i for i in self._unchecked if i in self._waiting]
                self._news = False
                self._unchecked.clear()
            if ids:
                self._read(ids)

    def _read(self, ids: list[JobId]) -> None:
        self.queries += 1
        try:
            found = self.broker.finished_jobs(ids)
        except (BrokerUnavailable, OSError) as exc:
            log.warning("reading the state of %d waited jobs failed (%s); retrying", len(ids), exc)
            time.sleep(RETRY_AFTER_ERROR)
            self._notified()
            return
        except Exception:  # never let the hub's thread die: its waiters would hang
            log.exception("reading the state of %d waited jobs failed; retrying", len(ids))
            time.sleep(RETRY_AFTER_ERROR)
            self._notified()
            return
        self._resolve(found)

    def _resolve(self, found: Finished) -> None:
        done: list[tuple[_Waiter, tuple[bool, Any]]] = []
        with self._lock:
            for job_id, job in found.jobs.items():
                outcome = outcome_of(job)
                done += [(w, outcome) for w in self._waiting.pop(job_id, ())]
            for job_id in found.missing:
                missing = (False, JobNotFound(f"job {job_id} not found"))
                done += [(w, missing) for w in self._waiting.pop(job_id, ())]
        for waiter, outcome in done:
            waiter.resolve(outcome)

    def close(self) -> None:
        """Stop the thread and the subscription; waiters still waiting get an error."""
        with self._start_lock:
            with self._lock:
                self._closed = True
                thread, self._thread = self._thread, None
                left = [w for ws in self._waiting.values() for w in ws]
                self._waiting.clear()
            unsubscribe, self._unsubscribe = self._unsubscribe, None
        self._wake.set()
        if unsubscribe is not None:
            unsubscribe()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)
        closed = (False, SluicegateError("the app was closed while waiting for the job"))
        for waiter in left:
            waiter.resolve(closed)
