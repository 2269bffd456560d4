"""Run one claimed job and turn what happened into an Outcome value.

Pure apart from calling the task (and, for a transactional task, its store) and the app's
hooks: the retry decision comes from retry.failure. Shared by the models' executors and
process children, so every model calls before_job, after_job, on_retry and on_dead here,
in the process and thread that run the attempt (docs/hooks.md).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from ..codec import encode_result
from ..context import ProgressSink, RunningJob, StopCheck, reset_current, set_current
from ..errors import LeaseLost
from ..hooks import NO_HOOKS, HookOutcome, Hooks, Stopped
from ..job import ClaimedJob
from ..outcomes import Buried, Failed, Outcome, Report, Settled, Succeeded
from ..retry import RetryPolicy, error_info, failure, plain_error
from .transactional import TransactionalStore

# Asked once the attempt has its outcome: whether its end is still to be told to the hooks
# here (False: a thread pool's timeout already reported the attempt, and its hooks ran).
EndsHere = Callable[[], bool]


def run_job(
    fn: Any,
    policy: RetryPolicy,
    claimed: ClaimedJob,
    result_limit: int,
    progress: ProgressSink | None = None,
    stopped: StopCheck | None = None,
    hooks: Hooks = NO_HOOKS,
    ends_here: EndsHere | None = None,
    pool: str | None = None,
) -> Outcome:
    job = claimed.job
    token = set_current(RunningJob(job, claimed.claim, progress, stopped, pool))
    try:
        if hooks.before_job:
            hooks.fire("before_job", job)
        outcome: Outcome
        try:
            value = fn(*job.args, **job.kwargs)
            outcome = Succeeded(claimed.claim, encode_result(value, result_limit))
        except BaseException as exc:  # a task's SystemExit must not kill the slot's thread
            outcome = failed(policy, claimed, exc)
        if hooks.ending and (ends_here is None or ends_here()):
            hooks.ended(job, told(claimed, outcome, stopped))
        return outcome
    finally:
        reset_current(token)


def run_transactional(
    fn: Any,
    policy: RetryPolicy,
    claimed: ClaimedJob,
    result_limit: int,
    store: TransactionalStore,
    progress: ProgressSink | None = None,
    stopped: StopCheck | None = None,
    hooks: Hooks = NO_HOOKS,
    ends_here: EndsHere | None = None,
    pool: str | None = None,
) -> Report:
    """Run a transactional task: its writes and the ack commit in one transaction.

    A raise rolls both back and becomes an ordinary failure. If the commit itself fails
    its fate is unknown, so the attempt is reported as failed: the broker's fencing then
    either applies the retry or finds the ack already committed, never both.
    """
    job = claimed.job
    token = set_current(RunningJob(job, claimed.claim, progress, stopped, pool))
    try:
        if hooks.before_job:
            hooks.fire("before_job", job)
        report: Report
        try:
            with store.transaction() as conn:
                value = fn(*job.args, connection=conn, **job.kwargs)
                store.ack_on(conn, claimed.claim, encode_result(value, result_limit))
            report = Settled(claimed.claim)
        except LeaseLost:
            report = Settled(claimed.claim, lease_lost=True)
        except BaseException as exc:
            report = failed(policy, claimed, exc)
        if hooks.ending and (ends_here is None or ends_here()):
            hooks.ended(job, told(claimed, report, stopped))
        return report
    finally:
        reset_current(token)


async def run_job_async(
    fn: Any,
    policy: RetryPolicy,
    claimed: ClaimedJob,
    result_limit: int,
    timeout: float | None,
    progress: ProgressSink | None = None,
    stopped: StopCheck | None = None,
    hooks: Hooks = NO_HOOKS,
    pool: str | None = None,
) -> Outcome:
    """Await a coroutine task; ``timeout`` cancels it and fails the attempt. The hooks are
    plain calls on the loop's thread, before the coroutine starts and after it ended."""
    job = claimed.job
    token = set_current(RunningJob(job, claimed.claim, progress, stopped, pool))
    deadline = asyncio.timeout(timeout)
    try:
        if hooks.before_job:
            hooks.fire("before_job", job)
        outcome: Outcome
        try:
            async with deadline:
                value = await fn(*job.args, **job.kwargs)
            outcome = Succeeded(claimed.claim, encode_result(value, result_limit))
        except TimeoutError as exc:
            if deadline.expired():
                outcome = timed_out(policy, claimed, timeout or 0.0)
            else:
                outcome = failed(policy, claimed, exc)
        except BaseException as exc:  # includes CancelledError from a stopping loop
            outcome = failed(policy, claimed, exc)
        if hooks.ending:
            hooks.ended(job, told(claimed, outcome, stopped))
        return outcome
    finally:
        reset_current(token)


def ended_elsewhere(
    hooks: Hooks, claimed: ClaimedJob, outcome: HookOutcome, pool: str | None
) -> None:
    """The end hooks of an attempt the worker ended itself (a thread's timeout, a killed
    process child), run where that was decided, with ``current_job()`` set as in a task."""
    token = set_current(RunningJob(claimed.job, claimed.claim, pool=pool))
    try:
        hooks.ended(claimed.job, outcome)
    finally:
        reset_current(token)


def told(claimed: ClaimedJob, report: Report, stopped: StopCheck | None) -> HookOutcome:
    """What after_job hears: the report, or Stopped if the worker stopped the attempt
    (cancelled, lease lost), whose report it will not record."""
    if stopped is not None and stopped(claimed.claim):
        return Stopped(claimed.claim, report)
    return report


def failed(policy: RetryPolicy, claimed: ClaimedJob, exc: BaseException) -> Failed:
    """An attempt that raised: retried with backoff, or dead, by the task's policy."""
    job = claimed.job
    return failure(policy, claimed.claim, job.attempts, job.max_attempts, error_info(exc), exc)


def timed_out(policy: RetryPolicy, claimed: ClaimedJob, seconds: float) -> Failed:
    job = claimed.job
    error = plain_error("TimeoutError", f"timed out after {seconds:g} s")
    return failure(policy, claimed.claim, job.attempts, job.max_attempts, error, timed_out=True)


def refused(claimed: ClaimedJob, kind: str, message: str) -> Buried:
    """A job that cannot run at all (unknown task, corrupt row): dead at once."""
    return Buried(claimed.claim, plain_error(kind, message))
