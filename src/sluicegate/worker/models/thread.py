"""The thread model: N long-lived threads per pool, for blocking I/O and transactional tasks.

Timeouts are soft: a Python thread cannot be killed. At the deadline the attempt is
reported failed (``TimeoutError``) while its slot stays busy; when the function really
returns, the slot is freed and what it returned is ignored. A cancel is the same: the
task learns of it from ``current_job().cancelled`` (or ``raise_if_cancelled()``) and its
slot stays busy until it returns.
"""

from __future__ import annotations

import functools
import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...context import ProgressSink, StopCheck
from ...hooks import NO_HOOKS, Hooks
from ...job import Claim, ClaimedJob
from ...outcomes import Report
from ...retry import RetryPolicy
from ..executors import DoneCallback, StartCallback, WorkItem
from ..runner import EndsHere, ended_elsewhere, run_job, run_transactional, timed_out
from ..transactional import TransactionalStore
from .base import ConcurrencyModel, PoolContext, needs_async_pool

if TYPE_CHECKING:
    from ...task import Task

log = logging.getLogger("sluicegate.worker")


@dataclass(frozen=True, slots=True)
class ThreadItem(WorkItem):
    fn: Callable[..., Any]
    policy: RetryPolicy
    timeout: float | None
    transactional: bool  # gets connection=; its writes and the ack commit together


class ThreadExecutor:
    """N daemon threads fed by one queue (no per-job thread set-up), and one more that
    fails attempts at their deadline."""

    def __init__(
        self,
        name: str,
        slots: int,
        result_limit: int,
        store: TransactionalStore,
        progress: ProgressSink | None = None,
        stopped: StopCheck | None = None,
        hooks: Hooks = NO_HOOKS,
    ) -> None:
        self.name = name
        self.progress = progress
        self.stopped = stopped  # current_job().cancelled: the only stop a thread gets
        self.hooks = hooks
        self.slots = slots
        self.result_limit = result_limit
        self.store = store
        self._queue: queue.SimpleQueue[ThreadItem | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        # Per slot: the running item that has a deadline, and that deadline (None: none, or
        # already reported). Guarded by _clock, which the timeout thread waits on.
        self._timed: list[ThreadItem | None] = [None] * slots
        self._deadlines: list[float | None] = [None] * slots
        self._clock = threading.Condition()
        self._wakes_at = float("inf")  # when the timeout thread looks next
        self._stopped = False

    def start(self, on_start: StartCallback, on_done: DoneCallback) -> None:
        for index in range(self.slots):
            thread = threading.Thread(
                target=self._serve,
                args=(index, on_start, on_done),
                name=f"sluicegate-{self.name}-{index}",
                daemon=True,
            )
            thread.start()
            self._threads.append(thread)
        threading.Thread(
            target=self._time_out,
            args=(on_done,),
            name=f"sluicegate-{self.name}-timeouts",
            daemon=True,
        ).start()

    def submit(self, item: ThreadItem) -> None:
        self._queue.put(item)

    def stop(self) -> None:
        for _ in self._threads:
            self._queue.put(None)
        with self._clock:
            self._stopped = True
            self._clock.notify()

    def next_look(self) -> float | None:
        """When the timeout thread next looks at a deadline (monotonic s), or None: no
        attempt with a deadline is running or owed a report, and the thread waits on
        nothing, so no timeout is reported until another timed attempt starts. Read under
        the thread's lock (never mid-pass); for tests and operators, never called by the
        worker itself."""
        with self._clock:
            times = [d for d in self._deadlines if d is not None]
            if self._wakes_at != float("inf"):
                times.append(self._wakes_at)
            return min(times, default=None)

    def interrupt(self, claim: Claim) -> None:
        """A thread cannot be stopped from outside: its task sees ``current_job().cancelled``
        (the worker's answer changed already) and its slot stays busy until it returns."""

    def _serve(self, index: int, on_start: StartCallback, on_done: DoneCallback) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            on_start(item)
            if item.timeout is None:
                on_done(item, self._run(item, None), True)
                continue
            deadline = time.monotonic() + item.timeout
            with self._clock:
                self._timed[index], self._deadlines[index] = item, deadline
                if deadline < self._wakes_at:
                    self._clock.notify()
            ends_here = functools.partial(self._ends_here, index) if self.hooks.ending else None
            report = self._run(item, ends_here)
            with self._clock:  # after this, the timeout thread cannot report this item
                self._timed[index] = self._deadlines[index] = None
            on_done(item, report, True)

    def _run(self, item: ThreadItem, ends_here: EndsHere | None) -> Report:
        if item.transactional:
            return run_transactional(
                item.fn,
                item.policy,
                item.claimed,
                self.result_limit,
                self.store,
                self.progress,
                self.stopped,
                self.hooks,
                ends_here,
                self.name,
            )
        return run_job(
            item.fn,
            item.policy,
            item.claimed,
            self.result_limit,
            self.progress,
            self.stopped,
            self.hooks,
            ends_here,
            self.name,
        )

    def _ends_here(self, index: int) -> bool:
        """The attempt in slot ``index`` returned: True if its deadline had not been
        reported (and now never will be), False if the timeout thread reported it."""
        with self._clock:
            if self._deadlines[index] is None:
                return False
            self._deadlines[index] = None
            return True

    def _time_out(self, on_done: DoneCallback) -> None:
        """Report each attempt past its deadline as failed, once; its slot stays busy (the
        report says so) until its thread returns and reports again."""
        with self._clock:
            while not self._stopped:
                now = time.monotonic()
                self._wakes_at = float("inf")
                for index, deadline in enumerate(self._deadlines):
                    if deadline is None:
                        continue
                    item = self._timed[index]
                    if deadline <= now and item is not None:
                        self._deadlines[index] = None
                        log.warning(
                            "job %s (%s) timed out after %g s",
                            item.claimed.claim.job_id,
                            item.claimed.job.task,
                            item.timeout,
                        )
                        # Reported with the lock held, so the late return's report (which
                        # frees the slot) can only come after this one.
                        report = self._timed_out(item)
                        if self.hooks.ending:  # told here: the late return skips them
                            ended_elsewhere(self.hooks, item.claimed, report, self.name)
                        on_done(item, report, False)
                    else:
                        self._wakes_at = min(self._wakes_at, deadline)
                self._clock.wait(None if self._wakes_at == float("inf") else self._wakes_at - now)

    @staticmethod
    def _timed_out(item: ThreadItem) -> Report:
        return timed_out(item.policy, item.claimed, item.timeout or 0.0)


class ThreadModel(ConcurrencyModel):
    name = "thread"

    @classmethod
    def refuses(cls, task: Task[Any, Any]) -> str | None:
        return needs_async_pool(task, cls.name)

    @classmethod
    def executor(
        cls, name: str, slots: int, options: Mapping[str, Any], context: PoolContext
    ) -> ThreadExecutor:
        return ThreadExecutor(
            name,
            slots,
            context.result_limit,
            context.store,
            progress=context.progress,
            stopped=context.stopped,
            hooks=context.hooks,
        )

    @classmethod
    def work_item(cls, task: Task[Any, Any], claimed: ClaimedJob) -> ThreadItem:
        o = task.options
        return ThreadItem(claimed, task.fn, o.retry, o.timeout, o.transactional)
