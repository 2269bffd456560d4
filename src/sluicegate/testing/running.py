"""One claimed job through the worker's own runner, in this process: what ``drain`` and
``perform`` share.

The runner functions are the ones every pool model calls (``sluicegate.worker.runner``),
so whatever the runner does (the current-job context, retry decisions, result encoding,
the app's job hooks) a test gets too. The lifecycle around them is the broker's: the job is marked running,
its progress goes in a heartbeat, its outcome is recorded (``broker.record``) and fenced
by its claim. What differs from a worker: one job at a time, in the caller's process;
a process-pool task runs here rather than in a child, and a sync task's ``timeout`` is
not enforced (a coroutine task's is, as in an async pool).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from ..job import Claim, ClaimedJob, JobState, Progress
from ..outcomes import Report, Settled
from ..worker.runner import refused, run_job, run_job_async, run_transactional

if TYPE_CHECKING:
    from ..app import App
    from ..brokers import Broker

LEASE = 3600.0  # s: a test's attempt is never recovered under it
WORKER_ID = "sluicegate-testing"


class Loop:
    """An event loop on a thread of its own, made on first use: coroutine tasks run on
    it (as an async pool runs them on its loop's thread), whether or not the caller is
    inside a running loop itself."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def run(self, coro: Coroutine[Any, Any, Report]) -> Report:
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
            self._thread = threading.Thread(
                target=self._loop.run_forever, name="sluicegate-testing-loop", daemon=True
            )
            self._thread.start()
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def close(self) -> None:
        loop, thread, self._loop, self._thread = self._loop, self._thread, None, None
        if loop is None or thread is None:
            return
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        loop.close()


class Attempt:
    """Runs claimed jobs of ``app`` on ``broker``, one at a time: started, run by the
    runner, progress written, outcome returned (the caller records it)."""

    def __init__(self, app: App, broker: Broker, loop: Loop) -> None:
        self.app = app
        self.broker = broker
        self.loop = loop
        self._progress: dict[Claim, Progress] = {}

    def _report(self, claim: Claim, fraction: float, message: str | None) -> None:
        self._progress[claim] = Progress(fraction, message)  # the latest wins, as a worker's

    def _stopped(self, claim: Claim) -> bool:
        """``current_job().cancelled``: a worker hears of a cancel and answers from memory;
        here the job is read back (one broker read per question)."""
        job = self.broker.get_job(claim.job_id)
        return job is None or job.state is JobState.CANCELLED

    def run(self, claimed: ClaimedJob, wrap: Callable[[Any], Any] | None = None) -> Report:
        """The attempt's report. ``wrap`` (perform) gets the task's function and returns
        the one to call: a way to see the exception the runner turns into an outcome."""
        job = claimed.job
        task = self.app.tasks.get(job.task)
        if claimed.problem is not None or task is None:
            reason = claimed.problem or f"unknown task {job.task!r}"
            return refused(claimed, "CorruptJob" if claimed.problem else "UnknownTask", reason)
        if task.options.transactional and not self.broker.supports_transactions:
            self.broker.release([claimed.claim])  # as a worker that refuses to start
            raise ConfigError(
                f"task {task.name!r} is transactional, which needs the postgresql:// broker"
            )
        self.broker.start(claimed.claim)
        fn = task.fn if wrap is None else wrap(task.fn)
        policy, limit = task.options.retry, self.app.payload_limit
        report: Report
        hooks = self.app.hooks  # before_job, after_job, on_retry, on_dead: as a worker's
        if task.is_coroutine:
            timeout = task.options.timeout
            coro = run_job_async(
                fn, policy, claimed, limit, timeout, self._report, self._stopped, hooks
            )
            report = self.loop.run(coro)
        elif task.options.transactional:
            report = run_transactional(
                fn, policy, claimed, limit, self.broker, self._report, self._stopped, hooks
            )
        else:
            report = run_job(fn, policy, claimed, limit, self._report, self._stopped, hooks)
        progress = self._progress.pop(claimed.claim, None)
        if progress is not None and not isinstance(report, Settled):
            self.broker.heartbeat([claimed.claim], LEASE, {claimed.claim: progress})
        return report
