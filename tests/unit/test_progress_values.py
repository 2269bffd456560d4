"""What a task may report as progress (sluicegate.job.checked_progress), and the handle
``current_job()`` gives a running attempt (sluicegate.context.RunningJob)."""

from __future__ import annotations

import math
from decimal import Decimal
from fractions import Fraction
from typing import Any

import pytest

from sluicegate.context import RunningJob, current_job, reset_current, set_current
from sluicegate.errors import JobCancelled
from sluicegate.job import (
    PROGRESS_MESSAGE,
    Claim,
    Job,
    JobId,
    JobState,
    Progress,
    checked_progress,
)


@pytest.mark.parametrize(
    ("fraction", "expected"),
    [(0, 0.0), (1, 1.0), (0.0, 0.0), (1.0, 1.0), (0.4, 0.4), (5e-324, 5e-324)],
)
def test_a_fraction_in_range_is_kept_as_a_float(fraction: Any, expected: float) -> None:
    value, message = checked_progress(fraction)
    assert value == expected and type(value) is float and message is None


@pytest.mark.parametrize("fraction", [math.nan, math.inf, -math.inf, -0.1, 1.0000001, 2, -1])
def test_a_fraction_out_of_range_or_not_finite_is_a_value_error(fraction: float) -> None:
    with pytest.raises(ValueError, match=r"finite number in \[0, 1\]"):
        checked_progress(fraction)


@pytest.mark.parametrize("fraction", [True, False, "0.5", None, [0.5], Decimal("0.5"), 1j])
def test_a_fraction_that_is_no_real_number_is_a_type_error(fraction: Any) -> None:
    with pytest.raises(TypeError, match=r"number in \[0, 1\]"):
        checked_progress(fraction)


def test_a_fraction_type_is_a_real_float_or_int_only() -> None:
    # Fraction is a numbers.Real but not a float or int: refused rather than guessed at.
    with pytest.raises(TypeError):
        checked_progress(Fraction(1, 2))


@pytest.mark.parametrize("message", [b"bytes", 3, ["a"]])
def test_a_message_must_be_text(message: Any) -> None:
    with pytest.raises(TypeError, match="progress message must be a str or None, not"):
        checked_progress(0.5, message)


def test_a_long_message_is_cut_and_a_nul_replaced() -> None:
    assert checked_progress(0.5, "x" * (PROGRESS_MESSAGE + 50))[1] == "x" * PROGRESS_MESSAGE
    assert checked_progress(0.5, "a\x00b")[1] == "a\ufffdb"
    assert checked_progress(0.5, "")[1] == ""


def test_stored_progress_reads_back_or_reads_as_none() -> None:
    progress = Progress(0.25, "a quarter", 1700000000.5)
    assert Progress.from_dict(progress.to_dict()) == progress
    assert Progress.from_dict({"fraction": 1, "message": None}) == Progress(1.0)
    for junk in (None, [], "0.5", {"fraction": "0.5"}, {"fraction": True}, {}):
        assert Progress.from_dict(junk) is None


def _job() -> Job:
    return Job.from_fields(
        id=JobId(7), task="encode", queue="media", state=JobState.RUNNING, attempts=2, args=[1]
    )


def test_the_handle_reads_like_the_job_and_reports_to_its_sink() -> None:
    seen: list[tuple[Claim, float, str | None]] = []
    handle = RunningJob(_job(), Claim(JobId(7), 99), lambda *report: seen.append(report))
    assert (handle.id, handle.attempts, handle.task, handle.queue) == (7, 2, "encode", "media")
    assert (handle.args, handle.max_attempts, handle.state) == ([1], 3, JobState.RUNNING)
    handle.progress(0.4, "transcoding 2 of 5")
    handle.progress(1)
    assert seen == [
        (Claim(JobId(7), 99), 0.4, "transcoding 2 of 5"),
        (Claim(JobId(7), 99), 1.0, None),
    ]
    with pytest.raises(ValueError):
        handle.progress(math.nan)
    with pytest.raises(AttributeError):
        handle.no_such_field  # noqa: B018
    assert len(seen) == 2


def test_current_job_outside_a_job_is_a_clear_error_and_inside_gives_the_handle() -> None:
    with pytest.raises(RuntimeError, match="outside a running sluicegate job"):
        current_job()
    handle = RunningJob(_job(), Claim(JobId(7), 1))
    token = set_current(handle)
    try:
        assert current_job() is handle
        current_job().progress(0.5)  # no worker: validated, then kept nowhere
    finally:
        reset_current(token)


def test_outside_a_worker_an_attempt_is_never_cancelled() -> None:
    job = Job.from_fields(id=JobId(7), task="t", queue="q", state=JobState.RUNNING)
    handle = RunningJob(job, Claim(JobId(7), 1))
    assert handle.cancelled is False
    handle.raise_if_cancelled()  # nothing to raise


def test_a_stopped_attempt_says_so_and_raises() -> None:
    """The worker's answer (its StopCheck) is asked for this attempt's claim each time."""
    job = Job.from_fields(id=JobId(7), task="t", queue="q", state=JobState.RUNNING)
    stopped: set[Claim] = set()
    handle = RunningJob(job, Claim(JobId(7), 1), stopped=stopped.__contains__)
    token = set_current(handle)
    try:
        assert current_job().cancelled is False
        current_job().raise_if_cancelled()
        stopped.add(Claim(JobId(7), 1))
        assert current_job().cancelled is True
        with pytest.raises(JobCancelled, match="job 7 was stopped: cancelled") as raised:
            current_job().raise_if_cancelled()
        assert raised.value.job_id == 7
    finally:
        reset_current(token)
