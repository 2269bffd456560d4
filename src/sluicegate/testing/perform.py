"""``perform``: one job of a task, run here and now as a worker would run it.

A real job is enqueued on the task's app (its own queue and options), claimed with a
lease, marked running, run by the worker's runner with ``current_job()`` set, and its
outcome recorded: a test of a task sees the same JSON round trip of arguments and
result, the same job id and attempt, and the same stored outcome a worker would give.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

from ..codec import loads
from ..errors import JobFailed
from ..job import ClaimedJob, Job
from ..outcomes import Settled, Succeeded
from ..task import PRIORITY_RANGE, Task
from .running import LEASE, WORKER_ID, Attempt, Loop


class Watch:
    """Wraps a task's function to keep the exception it raises: the runner turns it into
    an outcome, and ``perform`` raises it again."""

    def __init__(self) -> None:
        self.raised: BaseException | None = None

    def __call__(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def run_async(*args: Any, **kwargs: Any) -> Any:
                try:
                    return await fn(*args, **kwargs)
                except BaseException as exc:
                    self.raised = exc
                    raise

            return run_async

        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
            try:
                return fn(*args, **kwargs)
            except BaseException as exc:
                self.raised = exc
                raise

        return run


def _claim(task: Task[Any, Any], job: Job) -> ClaimedJob:
    """The claim of ``job``, just enqueued first in line in its queue."""
    broker = task.app.broker
    if task.app.limits:
        broker.register_limits(list(task.app.limits.values()))  # as a worker does at start
    batch = broker.claim([job.queue], 1, LEASE, WORKER_ID)
    if batch and batch[0].claim.job_id == job.id:
        return batch[0]
    if batch:
        broker.release([c.claim for c in batch])
    raise RuntimeError(
        f"perform could not claim its job {job.id} of task {task.name!r} in queue "
        f"{job.queue!r}: another job is first in line, or a limit holds it back"
    )


def perform(task: Task[Any, Any], *args: Any, **kwargs: Any) -> Any:
    """Run one job of ``task`` with these arguments; its result as a worker stores it
    (decoded from JSON), or the task's own exception raised again.

    The job is enqueued first in line (the lowest priority value) in the task's queue, so
    the claim takes it before any job already there (a pause of the queue does not
    hold it back: it is run now, as asked); its attempt is recorded, a failure as a
    retry or as dead by the task's policy, exactly as after a worker's attempt.
    """
    if not isinstance(task, Task):
        raise TypeError(f"perform needs a task (@app.task), not {task!r}")
    app = task.app
    job = task.with_options(priority=PRIORITY_RANGE[0]).enqueue(*args, **kwargs)
    claimed = _claim(task, job)
    watch = Watch()
    loop = Loop()
    try:
        report = Attempt(app, app.broker, loop).run(claimed, wrap=watch)
    finally:
        loop.close()
    if isinstance(report, Settled):  # a transactional task: acked in its own transaction
        return app.get_job(job.id).result
    app.broker.record((), [report])
    if isinstance(report, Succeeded):
        return loads(report.result_json)
    if report.timed_out:
        raise TimeoutError(f"job {job.id} ({task.name}) {report.error.message}")
    if watch.raised is not None:
        raise watch.raised
    # The task returned, but what it returned could not be stored (not JSON, too large).
    error = report.error
    raise JobFailed(job.id, error.type, error.message, error.traceback)
