"""Jobs, their states, and the pure transition table every broker applies.

This module does no I/O. Brokers ask it which states an event may start from
(``sources``) and where it leads (``apply``); they never invent transitions.
"""

from __future__ import annotations

import dataclasses
import json
import math
import operator
import re
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, NewType, Protocol

from .errors import InvalidJobId

JobId = NewType("JobId", int)
_DECIMAL = re.compile(r"\s*[+-]?[0-9]+\s*")


def job_id_of(value: object) -> JobId:
    """A job id from what a caller passed: an integer, or its decimal text (an id taken
    from a URL or a form, ``"42"``). Anything else (``"abc"``, ``4.2``, ``True``) raises
    InvalidJobId, the same on every broker."""
    if isinstance(value, str):
        if _DECIMAL.fullmatch(value):
            return JobId(int(value))
    elif not isinstance(value, bool):
        try:
            return JobId(operator.index(value))  # type: ignore[arg-type]
        except TypeError:
            pass
    raise InvalidJobId(f"no job has id {value!r}: a job id is an integer or its decimal text")


class JobState(StrEnum):
    SCHEDULED = "scheduled"
    READY = "ready"
    CLAIMED = "claimed"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    DEAD = "dead"
    CANCELLED = "cancelled"


TERMINAL: frozenset[JobState] = frozenset({JobState.SUCCEEDED, JobState.DEAD, JobState.CANCELLED})
HELD: frozenset[JobState] = frozenset({JobState.CLAIMED, JobState.RUNNING})
UNFINISHED: frozenset[JobState] = frozenset(JobState) - TERMINAL


class Event(StrEnum):
    """Everything that can happen to a job."""

    PROMOTE = "promote"  # run_at reached
    CLAIM = "claim"  # a worker takes it with a lease (charges an attempt)
    START = "start"  # its body began
    ACK = "ack"  # handler returned, result committed
    RETRY = "retry"  # failed with attempts left: back to scheduled with backoff
    BURY = "bury"  # failed with no attempts left
    RELEASE = "release"  # shutdown handed it back; the attempt is refunded
    RECOVER = "recover"  # lease expired with attempts left
    RECOVER_DEAD = "recover_dead"  # lease expired with no attempts left
    CANCEL = "cancel"
    REVIVE = "revive"  # operator retry of a dead or cancelled job, fresh budget


S = JobState
TRANSITIONS: dict[tuple[JobState, Event], JobState] = {
    (S.SCHEDULED, Event.PROMOTE): S.READY,
    (S.READY, Event.CLAIM): S.CLAIMED,
    (S.CLAIMED, Event.START): S.RUNNING,
    **{(s, Event.ACK): S.SUCCEEDED for s in HELD},
    **{(s, Event.RETRY): S.SCHEDULED for s in HELD},
    **{(s, Event.BURY): S.DEAD for s in HELD},
    **{(s, Event.RELEASE): S.READY for s in HELD},
    **{(s, Event.RECOVER): S.READY for s in HELD},
    **{(s, Event.RECOVER_DEAD): S.DEAD for s in HELD},
    **{(s, Event.CANCEL): S.CANCELLED for s in UNFINISHED},
    (S.DEAD, Event.REVIVE): S.READY,
    (S.CANCELLED, Event.REVIVE): S.READY,
}
del S


def can_apply(state: JobState, event: Event) -> bool:
    return (state, event) in TRANSITIONS


def apply(state: JobState, event: Event) -> JobState:
    """The state after ``event``; raises InvalidTransition when the event is not allowed."""
    from .errors import InvalidTransition

    try:
        return TRANSITIONS[(state, event)]
    except KeyError:
        raise InvalidTransition(f"cannot {event.value} a job that is {state.value}") from None


def sources(event: Event) -> tuple[JobState, ...]:
    """States from which ``event`` is allowed, in a stable order (used to build SQL)."""
    return tuple(s for s in JobState if (s, event) in TRANSITIONS)


def expired(expires_at: float | None, now: float) -> bool:
    """A job may be claimed only while ``now`` is before its ``expires_at``."""
    return expires_at is not None and expires_at <= now


def initial_state(run_at: float, now: float) -> JobState:
    return JobState.READY if run_at <= now else JobState.SCHEDULED


@dataclass(frozen=True, slots=True)
class ErrorInfo:
    """Why an attempt failed, truncated to bounds so a row never grows without limit."""

    type: str
    message: str
    traceback: str = ""

    def __str__(self) -> str:
        return f"{self.type}: {self.message}" if self.message else self.type

    def to_dict(self) -> dict[str, str]:
        return {"type": self.type, "message": self.message, "traceback": self.traceback}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ErrorInfo:
        return cls(
            str(data.get("type", "")), str(data.get("message", "")), str(data.get("traceback", ""))
        )


class Happened(StrEnum):
    """What a job's history records: each transition off the happy path. The happy one
    (enqueued, run, succeeded) is in the job's times, and writes nothing more."""

    FAILED = "failed"  # an attempt raised: retried later ("retry_at") or dead ("dead")
    TIMEOUT = "timeout"  # an attempt ran past its timeout: the same
    RECOVERED = "recovered"  # its lease expired without a heartbeat: ready, or dead
    WORKER_LOST = "worker_lost"  # its worker's process was seen gone: ready, or dead
    RELEASED = "released"  # handed back at a shutdown, its attempt refunded
    CANCELLED = "cancelled"  # by an operator ("from": the state it left, "by": who asked),
    # or by a claim, for a job not started by its expires_at ("reason": "expired")
    RETRIED = "retried"  # revived by an operator ("from": dead or cancelled)


HISTORY_CAP = 50  # entries a job keeps; past it the oldest goes, so a row stays bounded
HISTORY_MESSAGE = 500  # characters of an error's message an entry keeps (last_error: all)


ENTRY_KEYS = (
    "at", "event", "attempt", "worker", "from", "by", "reason", "error", "retry_at", "dead",
)  # fmt: skip
# The "reason" of a cancelled entry written by a claim, for a job not started by its
# expires_at (an operator's cancel has none: it says "by").
EXPIRED = "expired"


def history_entry(at: float, happened: Happened, attempt: int, **fields: Any) -> dict[str, Any]:
    """One history entry: when (the broker's clock), what, at which attempt, and what else
    the event says (``worker``, ``from``, ``error``, ``retry_at``, ``dead``); fields that
    are None are left out. Every broker writes the same entry for the same transition."""
    return in_order({"at": at, "event": happened.value, "attempt": attempt, **fields})


def in_order(entry: dict[str, Any]) -> dict[str, Any]:
    """An entry with its keys in ENTRY_KEYS' order (others after), None values left out:
    every broker's entries read alike, whatever order its storage keeps."""
    ordered = {k: entry[k] for k in ENTRY_KEYS if entry.get(k) is not None}
    ordered.update((k, v) for k, v in entry.items() if k not in ordered and v is not None)
    return ordered


def history_error(error: ErrorInfo) -> dict[str, str]:
    """An error as an entry holds it: its type and the start of its message, NUL shown as
    U+FFFD (PostgreSQL's jsonb cannot hold it; last_error keeps the text as it was)."""
    return {
        "type": error.type.replace("\x00", "\ufffd"),
        "message": error.message[:HISTORY_MESSAGE].replace("\x00", "\ufffd"),
    }


def appended(history: list[dict[str, Any]], entry: dict[str, Any]) -> list[dict[str, Any]]:
    """``history`` with ``entry`` last, the oldest entries dropped past HISTORY_CAP."""
    return [*history[max(0, len(history) - HISTORY_CAP + 1) :], entry]


PROGRESS_MESSAGE = 200  # characters of a progress message kept; longer ones are cut


@dataclass(frozen=True, slots=True)
class Progress:
    """How far a running job says it is: a fraction in [0, 1], an optional message, and
    ``at``, when the broker stored it (its clock, within one heartbeat of the report)."""

    fraction: float
    message: str | None = None
    at: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"fraction": self.fraction, "message": self.message, "at": self.at}

    @classmethod
    def from_dict(cls, data: Any) -> Progress | None:
        """A stored progress (JSON object), or None for anything that is not one: a job is
        never refused for what only a reader looks at."""
        if not isinstance(data, dict):
            return None
        fraction, message, at = data.get("fraction"), data.get("message"), data.get("at")
        if isinstance(fraction, bool) or not isinstance(fraction, int | float):
            return None
        return cls(
            float(fraction),
            message if isinstance(message, str) else None,
            float(at) if isinstance(at, int | float) and not isinstance(at, bool) else None,
        )


def checked_progress(fraction: object, message: object = None) -> tuple[float, str | None]:
    """A task's progress report, validated: ``fraction`` a finite real number in [0, 1]
    (not a bool), ``message`` None or a str, cut to PROGRESS_MESSAGE characters (a
    progress message is a status line, and a task in a loop should not fail over one)."""
    if isinstance(fraction, bool) or not isinstance(fraction, int | float):
        raise TypeError(f"progress fraction must be a number in [0, 1], not {fraction!r}")
    value = float(fraction)
    if not math.isfinite(value) or not 0.0 <= value <= 1.0:
        raise ValueError(f"progress fraction must be a finite number in [0, 1], not {fraction!r}")
    if message is None:
        return value, None
    if not isinstance(message, str):
        raise TypeError(f"progress message must be a str or None, not {type(message).__name__}")
    return value, message[:PROGRESS_MESSAGE].replace("\x00", "\ufffd")


HEADERS_LIMIT = 8192  # characters of a job's encoded headers


def encode_headers(headers: object) -> str | None:
    """A job's headers as stored: string keys to string values, as JSON text (None when
    there are none). Anything else raises TypeError naming what is wrong; more than
    HEADERS_LIMIT characters, ValueError."""
    if headers is None:
        return None
    if not isinstance(headers, dict):
        raise TypeError(f"job headers must be a dict of str to str, not {type(headers).__name__}")
    for key, value in headers.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise TypeError(f"job header {key!r}: keys and values must be str, not {value!r}")
    if not headers:
        return None
    text = json.dumps(headers, sort_keys=True, separators=(",", ":"))
    if len(text) > HEADERS_LIMIT:
        raise ValueError(f"job headers take {len(text)} characters; at most {HEADERS_LIMIT}")
    return text


def stored_headers(text: str | None) -> dict[str, str]:
    """A row's headers; anything unreadable reads as none (a job is never refused for
    what only its tracing reads)."""
    if not text:
        return {}
    try:
        data = json.loads(text)
    except ValueError:
        return {}
    if not isinstance(data, dict):
        return {}
    return {k: v for k, v in data.items() if isinstance(k, str) and isinstance(v, str)}


class Waiter(Protocol):
    """What a Job's ``wait`` and ``cancel`` go back to: the App that stored or read it."""

    def wait(self, job_id: int | str, timeout: float | None = None) -> Any: ...

    async def wait_async(self, job_id: int | str, timeout: float | None = None) -> Any: ...

    def cancel(self, job_id: int | str, by: str | None = None) -> Job: ...


@dataclass(frozen=True)  # not slotted: from_fields below needs a __dict__
class Job:
    """A snapshot of one job as the broker last stored it."""

    id: JobId
    task: str
    queue: str
    state: JobState
    args: list[Any] = field(default_factory=list)
    kwargs: dict[str, Any] = field(default_factory=dict)
    priority: int = 0
    attempts: int = 0
    max_attempts: int = 3
    run_at: float = 0.0
    enqueued_at: float = 0.0
    started_at: float | None = None
    finished_at: float | None = None
    result: Any = None
    last_error: ErrorInfo | None = None
    unique_key: str | None = None
    worker_id: str | None = None
    lease_expires_at: float | None = None
    limits: tuple[tuple[str, str | None, int], ...] = ()  # (limit, partition value, cost)
    history: list[dict[str, Any]] = field(default_factory=list)  # off the happy path: Happened
    progress: Progress | None = None  # as a running attempt last reported it (heartbeats)
    headers: dict[str, str] = field(default_factory=dict)  # set at enqueue (trace context)
    expires_at: float | None = None  # not claimed from then on: cancelled, reason "expired"

    @classmethod
    def from_fields(cls, **fields: Any) -> Job:
        """Build a Job without the frozen __init__'s per-field setattr calls.

        Brokers build thousands of jobs per bulk enqueue or claim; this is about 4x
        cheaper and yields an equal object. Fields not given take their defaults.
        """
        job = object.__new__(cls)
        values = dict(_JOB_DEFAULTS)
        values["args"], values["kwargs"] = [], {}  # fresh mutable defaults, never shared
        values["history"] = []
        values["headers"] = {}
        values.update(fields)
        job.__dict__.update(values)
        return job

    @property
    def finished(self) -> bool:
        return self.state in TERMINAL

    # ---- waiting for the result ------------------------------------------------------
    def bound(self, waiter: Waiter) -> Job:
        """A copy of this snapshot whose ``wait`` goes to ``waiter`` (App.enqueue, get_job
        and Task.enqueue hand out such copies). A copy, so a snapshot a broker keeps (the
        memory broker's) never holds an App."""
        job = object.__new__(Job)
        job.__dict__.update(self.__dict__)
        job.__dict__["_waiter"] = waiter
        return job

    def bind(self, waiter: Waiter) -> None:
        """``bound``, in place: for a snapshot no one else holds (one a broker built for
        this caller alone, ``Broker.fresh_jobs``), where a copy would be wasted."""
        self.__dict__["_waiter"] = waiter

    def wait(self, timeout: float | None = None) -> Any:
        """Block until the job finishes; its result. Raises JobFailed (dead: the last
        error's type, message and traceback), JobCancelled, TimeoutError after ``timeout``
        seconds (None: no limit). Woken by the broker's own notifications, not by polling."""
        return self._way_back().wait(self.id, timeout)

    async def wait_async(self, timeout: float | None = None) -> Any:
        """``wait`` for asyncio: never blocks the event loop."""
        return await self._way_back().wait_async(self.id, timeout)

    def cancel(self, by: str | None = None) -> Job:
        """Cancel this job (``App.cancel``): the job as it is now, cancelled."""
        return self._way_back().cancel(self.id, by)

    def _way_back(self) -> Waiter:
        # Not a field (never compared, shown, stored, or carried by dataclasses.replace):
        # an entry of this instance's __dict__, set by ``bound``.
        waiter: Waiter | None = self.__dict__.get("_waiter")
        if waiter is None:
            from .errors import ConfigError

            raise ConfigError(
                f"job {self.id} has no app to wait or cancel through: it was not handed out "
                "by App.enqueue, App.get_job or Task.enqueue (built or copied elsewhere); "
                f"use app.wait({self.id}) or app.cancel({self.id})"
            )
        return waiter

    def __getstate__(self) -> dict[str, Any]:
        """Pickled and deep-copied without its App (locks, connections)."""
        state = dict(self.__dict__)
        state.pop("_waiter", None)
        return state

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "task": self.task,
            "queue": self.queue,
            "state": self.state.value,
            "args": self.args,
            "kwargs": self.kwargs,
            "priority": self.priority,
            "attempts": self.attempts,
            "max_attempts": self.max_attempts,
            "run_at": self.run_at,
            "enqueued_at": self.enqueued_at,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "result": self.result,
            "last_error": self.last_error.to_dict() if self.last_error else None,
            "unique_key": self.unique_key,
            "worker_id": self.worker_id,
            "lease_expires_at": self.lease_expires_at,
            "limits": [{"limit": n, "partition": p, "cost": c} for n, p, c in self.limits],
            "history": self.history,
            "progress": self.progress.to_dict() if self.progress else None,
            "headers": self.headers,
            "expires_at": self.expires_at,
        }


def _defaults(cls: type) -> dict[str, Any]:
    """Each field's default, read from the dataclass so it is written once (a factory's
    value too; from_fields replaces mutable ones with fresh objects per job)."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = f.default_factory()
    return out


_JOB_DEFAULTS = _defaults(Job)


@dataclass(frozen=True, slots=True)
class Claim:
    """The fencing pair: a job id and the token of the claim that holds it."""

    job_id: JobId
    token: int


@dataclass(frozen=True, slots=True)
class ClaimedJob:
    """What a worker gets from ``claim``: the job to run and the claim that fences it."""

    claim: Claim
    job: Job
    problem: str | None = None  # set when the stored row cannot be decoded: the job goes dead


def in_claim_order(claimed: list[ClaimedJob]) -> list[ClaimedJob]:
    """(priority, run_at, id): the order every broker hands claimed jobs to a worker."""
    return sorted(claimed, key=lambda c: (c.job.priority, c.job.run_at, c.job.id))


@dataclass(frozen=True, slots=True)
class JobSpec:
    """A validated, encoded job ready to be stored by ``enqueue``."""

    task: str
    queue: str
    args_json: str
    kwargs_json: str
    run_at: float | None = None  # None: now, by the broker's clock
    delay: float = 0.0
    priority: int = 0
    max_attempts: int = 3
    unique_key: str | None = None
    limits: str | None = None  # the job's needs, encoded (sluicegate.limits.encode_needs)
    headers: str | None = None  # string pairs as JSON text (encode_headers); None: none
    expires_at: float | None = None  # epoch seconds; None: expires_in from now, or never
    expires_in: float | None = None  # seconds after the enqueue, by the broker's clock

    @classmethod
    def of_fields(cls, values: tuple[Any, ...]) -> JobSpec:
        """A spec from every field's value, in field order, unchecked: the frozen
        ``__init__`` costs about twice as much, and a bulk enqueue builds thousands."""
        spec = _new(cls)
        for put, value in zip(_SPEC_SETTERS, values, strict=True):
            put(spec, value)
        return spec

    def expiry(self, now: float) -> float | None:
        """When the job stored at ``now`` (the broker's clock) expires; None: never."""
        if self.expires_at is not None:
            return self.expires_at
        return None if self.expires_in is None else now + self.expires_in


_new = object.__new__
# Each JobSpec field's slot setter, in field order (JobSpec.of_fields).
_SPEC_SETTERS = tuple(getattr(JobSpec, f.name).__set__ for f in dataclasses.fields(JobSpec))
