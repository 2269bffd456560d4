"""The async model: one event loop, in its own thread, running N coroutine tasks at once.

It runs coroutine functions only, and no transactional tasks. A task's ``timeout``
cancels its coroutine, and so does a cancel of its job. A task that blocks the loop (a sync call
inside a coroutine) is reported by a watchdog that names it; it cannot stop the
worker's heartbeats, which run on the main thread.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import logging
import sys
import threading
import time
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...context import ProgressSink, StopCheck
from ...hooks import NO_HOOKS, Hooks
from ...job import Claim, ClaimedJob
from ...outcomes import Report
from ...retry import RetryPolicy
from ..executors import DoneCallback, StartCallback, WorkItem
from ..runner import failed, run_job_async
from .base import ConcurrencyModel, PoolContext, needs_thread_pool

if TYPE_CHECKING:
    from ...task import Task

log = logging.getLogger("sluicegate.worker")

TICK = 0.05  # how often the loop proves it is alive
BLOCKED_AFTER = 0.5  # seconds without a tick before a blocked loop is reported


@dataclass(frozen=True, slots=True)
class AsyncItem(WorkItem):
    fn: Callable[..., Coroutine[Any, Any, Any]]
    policy: RetryPolicy
    timeout: float | None


class AsyncExecutor:
    def __init__(
        self,
        name: str,
        slots: int,
        result_limit: int,
        blocked_after: float = BLOCKED_AFTER,
        progress: ProgressSink | None = None,
        stopped: StopCheck | None = None,
        hooks: Hooks = NO_HOOKS,
    ) -> None:
        self.name = name
        self.progress = progress
        self.stopped = stopped
        self.hooks = hooks  # plain calls on the loop's thread (keep them cheap)
        self.slots = slots
        self.result_limit = result_limit
        self.blocked_after = blocked_after
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._serve, name=f"sluicegate-{name}-loop", daemon=True
        )
        self._watchdog = threading.Thread(
            target=self._watch, name=f"sluicegate-{name}-watchdog", daemon=True
        )
        self._last_tick = time.monotonic()
        self._stop = threading.Event()
        # Submitted items wait here for the loop: one wake-up of the loop thread per batch
        # the dispatcher hands over, not one per job.
        self._inbox: collections.deque[AsyncItem] = collections.deque()
        self._inbox_lock = threading.Lock()
        self._inbox_scheduled = False
        # The loop keeps only weak references; by claim, so a cancel finds its coroutine.
        self._tasks: dict[Claim, asyncio.Task[None]] = {}
        self._on_start: StartCallback | None = None
        self._on_done: DoneCallback | None = None

    def start(self, on_start: StartCallback, on_done: DoneCallback) -> None:
        self._on_start, self._on_done = on_start, on_done
        self._thread.start()
        self._watchdog.start()

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(self._tick)
        try:
            self.loop.run_forever()
        finally:  # stopped: cancel what is left (released jobs) and close the loop
            pending = asyncio.all_tasks(self.loop)
            for task in pending:
                task.cancel()
            self.loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            self.loop.close()

    def _tick(self) -> None:
        self._last_tick = time.monotonic()
        if not self._stop.is_set():
            self.loop.call_later(TICK, self._tick)

    def submit(self, item: AsyncItem) -> None:
        with self._inbox_lock:
            self._inbox.append(item)
            if self._inbox_scheduled:
                return
            self._inbox_scheduled = True
        self.loop.call_soon_threadsafe(self._take_inbox)

    def _take_inbox(self) -> None:
        with self._inbox_lock:
            items, self._inbox = self._inbox, collections.deque()
            self._inbox_scheduled = False
        for item in items:
            claim = item.claimed.claim
            task = self.loop.create_task(self._run(item))
            self._tasks[claim] = task
            task.add_done_callback(functools.partial(self._forget, item))

    def _forget(self, item: AsyncItem, task: asyncio.Task[None]) -> None:
        claim = item.claimed.claim
        if self._tasks.get(claim) is task:
            del self._tasks[claim]
        if task.cancelled() and not self._stop.is_set():
            # Cancelled before its first step (a cancel right behind the hand-over): its
            # coroutine never ran, so nothing reported; the slot is freed here.
            assert self._on_done is not None
            report = failed(item.policy, item.claimed, asyncio.CancelledError())
            self._on_done(item, report, True)

    def interrupt(self, claim: Claim) -> None:
        """Cancel the job's coroutine, on the loop's thread (after any hand-over of items
        already submitted, so a job not started yet is found too)."""
        self.loop.call_soon_threadsafe(self._cancel, claim)

    def _cancel(self, claim: Claim) -> None:
        task = self._tasks.get(claim)
        if task is not None:
            task.cancel()

    async def _run(self, item: AsyncItem) -> None:
        assert self._on_start is not None and self._on_done is not None
        self._on_start(item)
        report: Report = await run_job_async(
            item.fn,
            item.policy,
            item.claimed,
            self.result_limit,
            item.timeout,
            self.progress,
            self.stopped,
            self.hooks,
            self.name,
        )
        self._on_done(item, report, True)

    def _watch(self) -> None:
        """Report a loop that stopped ticking, naming the task whose code is on its stack."""
        reported = False
        while not self._stop.wait(TICK * 2):
            stalled = time.monotonic() - self._last_tick
            if stalled < self.blocked_after:
                reported = False
                continue
            culprit = self._blocking_task()
            if culprit is not None and not reported:  # no task on the stack: CPU starvation
                reported = True
                log.warning(
                    "pool %s: task %r blocked the event loop for %.1f s (a sync call in a "
                    "coroutine?); other async jobs in this pool are stalled",
                    self.name,
                    culprit,
                    stalled,
                )

    def _blocking_task(self) -> str | None:
        """The task of the job whose coroutine is on the loop thread's stack, if any: the
        innermost ``_run`` frame holds its work item (whatever the task function is named)."""
        frame = sys._current_frames().get(self._thread.ident or -1)
        while frame is not None:
            if frame.f_code is _RUN_CODE:
                item = frame.f_locals.get("item")
                return item.claimed.job.task if isinstance(item, WorkItem) else None
            frame = frame.f_back
        return None

    def stop(self) -> None:
        self._stop.set()
        self.loop.call_soon_threadsafe(self.loop.stop)


_RUN_CODE = AsyncExecutor._run.__code__  # the frame that runs one job's coroutine


class AsyncModel(ConcurrencyModel):
    name = "async"

    @classmethod
    def refuses(cls, task: Task[Any, Any]) -> str | None:
        if not task.is_coroutine:
            return (
                f"task {task.name!r} is a plain function; "
                "an async pool runs coroutine functions only"
            )
        return needs_thread_pool(task)

    @classmethod
    def executor(
        cls, name: str, slots: int, options: Mapping[str, Any], context: PoolContext
    ) -> AsyncExecutor:
        return AsyncExecutor(
            name,
            slots,
            context.result_limit,
            progress=context.progress,
            stopped=context.stopped,
            hooks=context.hooks,
        )

    @classmethod
    def work_item(cls, task: Task[Any, Any], claimed: ClaimedJob) -> AsyncItem:
        o = task.options
        return AsyncItem(claimed, task.fn, o.retry, o.timeout)
