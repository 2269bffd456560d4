"""Job.from_fields, the fast constructor brokers use, must equal the dataclass's own."""

from __future__ import annotations

import dataclasses

from sluicegate.job import _JOB_DEFAULTS, ErrorInfo, Job, JobId, JobState


def test_defaults_match_the_dataclass() -> None:
    for f in dataclasses.fields(Job):
        if f.name in _JOB_DEFAULTS:
            default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
            assert default == _JOB_DEFAULTS[f.name], f.name


def test_from_fields_equals_init() -> None:
    fields = dict(
        id=JobId(7),
        task="t",
        queue="q",
        state=JobState.DEAD,
        args=[1, "a"],
        kwargs={"k": 2},
        priority=-1,
        attempts=3,
        max_attempts=3,
        run_at=1.5,
        enqueued_at=1.0,
        started_at=1.2,
        finished_at=1.4,
        result={"ok": True},
        last_error=ErrorInfo("E", "m", "tb"),
        unique_key="u",
        worker_id="w",
        lease_expires_at=None,
    )
    assert Job.from_fields(**fields) == Job(**fields)  # type: ignore[arg-type]
    minimal = Job.from_fields(id=JobId(1), task="t", queue="q", state=JobState.READY)
    assert minimal == Job(id=JobId(1), task="t", queue="q", state=JobState.READY)


def test_from_fields_never_shares_mutable_defaults() -> None:
    a = Job.from_fields(id=JobId(1), task="t", queue="q", state=JobState.READY)
    b = Job.from_fields(id=JobId(2), task="t", queue="q", state=JobState.READY)
    a.args.append(1)
    a.kwargs["x"] = 1
    assert b.args == [] and b.kwargs == {}
    assert _JOB_DEFAULTS["args"] == [] and _JOB_DEFAULTS["kwargs"] == {}


def test_jobs_stay_frozen() -> None:
    job = Job.from_fields(id=JobId(1), task="t", queue="q", state=JobState.READY)
    try:
        job.state = JobState.DEAD  # type: ignore[misc]
    except dataclasses.FrozenInstanceError:
        pass
    else:
        raise AssertionError("Job must be immutable")
