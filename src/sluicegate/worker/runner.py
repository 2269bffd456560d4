"""Run one claimed job and turn what happened into an Outcome value.

Pure apart from calling the task: the retry decision comes from retry.decide.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from ..brokers import Broker
from ..codec import encode_result
from ..context import reset_current, set_current
from ..errors import LeaseLost
from ..job import ClaimedJob
from ..outcomes import Buried, Failed, Outcome, Report, Settled, Succeeded
from ..retry import RetryPolicy, error_info, failure, plain_error
from .executors import WorkItem

if TYPE_CHECKING:
    from ..task import Task


def run_job(fn: Any, policy: RetryPolicy, claimed: ClaimedJob, result_limit: int) -> Outcome:
    job = claimed.job
    token = set_current(job)
    try:
        value = fn(*job.args, **job.kwargs)
        return Succeeded(claimed.claim, encode_result(value, result_limit))
    except BaseException as exc:  # a task's SystemExit must not kill the slot's thread
        return failed(policy, claimed, exc)
    finally:
        reset_current(token)


def run_transactional(
    fn: Any, policy: RetryPolicy, claimed: ClaimedJob, result_limit: int, broker: Broker
) -> Report:
    """Run a transactional task: its writes and the ack commit in one transaction.

    A raise rolls both back and becomes an ordinary failure. If the commit itself fails
    its fate is unknown, so the attempt is reported as failed: the broker's fencing then
    either applies the retry or finds the ack already committed, never both.
    """
    job = claimed.job
    token = set_current(job)
    try:
        with broker.transaction() as conn:
            value = fn(*job.args, connection=conn, **job.kwargs)
            broker.ack_on(conn, claimed.claim, encode_result(value, result_limit))
        return Settled(claimed.claim)
    except LeaseLost:
        return Settled(claimed.claim, lease_lost=True)
    except BaseException as exc:
        return failed(policy, claimed, exc)
    finally:
        reset_current(token)


async def run_job_async(
    fn: Any, policy: RetryPolicy, claimed: ClaimedJob, result_limit: int, timeout: float | None
) -> Outcome:
    """Await a coroutine task; ``timeout`` cancels it and fails the attempt."""
    job = claimed.job
    token = set_current(job)
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


def make_work(
    task: Task[Any, Any], claimed: ClaimedJob, model: str, result_limit: int, broker: Broker
) -> WorkItem:
    """The work item for one job, in the form its pool's model runs it (a process pool's
    child looks the task up itself and needs only the job, the timeout and the policy)."""
    fn, policy, timeout = task.fn, task.options.retry, task.options.timeout
    if model == "async":
        return WorkItem(
            claimed, arun=lambda: run_job_async(fn, policy, claimed, result_limit, timeout)
        )
    if task.options.transactional:
        return WorkItem(
            claimed, lambda: run_transactional(fn, policy, claimed, result_limit, broker)
        )
    if model == "thread":
        return WorkItem(claimed, lambda: run_job(fn, policy, claimed, result_limit))
    return WorkItem(claimed, timeout=timeout, policy=policy)


def timed_out(policy: RetryPolicy, claimed: ClaimedJob, seconds: float) -> Failed:
    job = claimed.job
    error = plain_error("TimeoutError", f"timed out after {seconds:g} s")
    return failure(policy, claimed.claim, job.attempts, job.max_attempts, error)


def refused(claimed: ClaimedJob, kind: str, message: str) -> Buried:
    """A job that cannot run at all (unknown task, corrupt row): dead at once."""
    return Buried(claimed.claim, plain_error(kind, message))
