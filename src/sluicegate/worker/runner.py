"""Run one claimed job and turn what happened into an Outcome value.

Pure apart from calling the task (and, for a transactional task, its store): the retry
decision comes from retry.failure. Shared by the models' executors and process children.
"""

from __future__ import annotations

import asyncio
from typing import Any

from ..codec import encode_result
from ..context import ProgressSink, RunningJob, StopCheck, reset_current, set_current
from ..errors import LeaseLost
from ..job import ClaimedJob
from ..outcomes import Buried, Failed, Outcome, Report, Settled, Succeeded
from ..retry import RetryPolicy, error_info, failure, plain_error
from .transactional import TransactionalStore


def run_job(
    fn: Any,
    policy: RetryPolicy,
    claimed: ClaimedJob,
    result_limit: int,
    progress: ProgressSink | None = None,
    stopped: StopCheck | None = None,
) -> Outcome:
    job = claimed.job
    token = set_current(RunningJob(job, claimed.claim, progress, stopped))
    try:
        value = fn(*job.args, **job.kwargs)
        return Succeeded(claimed.claim, encode_result(value, result_limit))
    except BaseException as exc:  # a task's SystemExit must not kill the slot's thread
        return failed(policy, claimed, exc)
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
) -> Report:
    """Run a transactional task: its writes and the ack commit in one transaction.

    A raise rolls both back and becomes an ordinary failure. If the commit itself fails
    its fate is unknown, so the attempt is reported as failed: the broker's fencing then
    either applies the retry or finds the ack already committed, never both.
    """
    job = claimed.job
    token = set_current(RunningJob(job, claimed.claim, progress, stopped))
    try:
        with store.transaction() as conn:
            value = fn(*job.args, connection=conn, **job.kwargs)
            store.ack_on(conn, claimed.claim, encode_result(value, result_limit))
        return Settled(claimed.claim)
    except LeaseLost:
        return Settled(claimed.claim, lease_lost=True)
    except BaseException as exc:
        return failed(policy, claimed, exc)
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
) -> Outcome:
    """Await a coroutine task; ``timeout`` cancels it and fails the attempt."""
    job = claimed.job
    token = set_current(RunningJob(job, claimed.claim, progress, stopped))
    deadline = asyncio.timeout(timeout)
    try:
        async with deadline:
            value = await fn(*job.args, **job.kwargs)
        return Succeeded(claimed.claim, encode_result(value, result_limit))
    except TimeoutError as exc:
        if deadline.expired():
            return timed_out(policy, claimed, timeout or 0.0)
        return failed(policy, claimed, exc)
    except BaseException as exc:  # includes CancelledError from a stopping loop
        return failed(policy, claimed, exc)
    finally:
        reset_current(token)


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
