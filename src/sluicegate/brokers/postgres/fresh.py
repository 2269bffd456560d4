"""Jobs just stored, built from their specs instead of read back.

An enqueue knows every column it wrote but the few the server decides (the id, the
clock's times, the state): reading back the whole row, 23 columns with their time
conversions, and decoding it again cost more than the insert's own work. These Jobs are
equal to what ``get_job`` reads (tests/brokers/test_postgres_copyin.py checks it)."""

from __future__ import annotations

from collections.abc import Sequence
from operator import itemgetter
from typing import Any

from ...codec import loads_own
from ...job import Job, JobId, JobSpec, JobState, stored_headers
from ...limits import decode_needs
from ..sqlfiles import Query

STORED = ("id", "state", "run_at", "enqueued_at", "expires_at")  # fragment_stored's columns
STATES = {state.value: state for state in JobState}

# Every field's default, as a dict to copy per job (mutable ones replaced per job below).
_TEMPLATE: dict[str, Any] = dict(
    Job.from_fields(id=JobId(0), task="", queue="", state=JobState.READY).__dict__
)
_new, _set = object.__new__, object.__setattr__


def spec_job(
    spec: JobSpec,
    id_: int,
    state: JobState,
    run_at: float,
    enqueued_at: float,
    expires_at: float | None,
) -> Job:
    """The Job stored from ``spec`` (no unique key) with what the server decided."""
    values = _TEMPLATE.copy()
    values["id"] = id_
    values["task"] = spec.task
    values["queue"] = spec.queue
    values["state"] = state
    values["args"] = loads_own(spec.args_json)
    kwargs = spec.kwargs_json
    values["kwargs"] = {} if kwargs == "{}" else loads_own(kwargs)
    values["priority"] = spec.priority
    values["max_attempts"] = spec.max_attempts
    values["run_at"] = run_at
    values["enqueued_at"] = enqueued_at
    values["history"] = []
    if spec.limits:
        values["limits"] = decode_needs(spec.limits)
    values["headers"] = {} if spec.headers is None else stored_headers(spec.headers)
    values["expires_at"] = expires_at
    job: Job = _new(Job)
    _set(job, "__dict__", values)  # the frozen class refuses setattr; its dict is ours
    return job


class StoredRows:
    """Jobs from a plain insert's rows (``fragment_stored``) and the specs they stored."""

    __slots__ = ("_id", "_pick")

    def __init__(self, query: Query) -> None:
        self._pick = itemgetter(*(query.at[c] for c in STORED))
        self._id = itemgetter(query.at["id"])

    def job(self, spec: JobSpec, row: Any) -> Job:
        id_, state, run_at, enqueued_at, expires_at = self._pick(row)
        return spec_job(spec, id_, STATES[state], run_at, enqueued_at, expires_at)

    def jobs(self, specs: Sequence[JobSpec], rows: list[Any]) -> list[Job]:
        """A batch's Jobs: its rows in id order are its specs' order (``insert_jobs``)."""
        rows.sort(key=self._id)
        return [self.job(spec, row) for spec, row in zip(specs, rows, strict=True)]
