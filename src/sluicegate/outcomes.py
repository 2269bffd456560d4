"""Outcomes of an attempt, as values that say which lifecycle event they are.

The worker (through the pure retry module) decides; the broker records. Neither
infers the event from a field: each outcome carries its ``event`` (ack, retry, bury).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .job import Claim, ErrorInfo, Event, Happened


@dataclass(frozen=True, slots=True)
class Succeeded:
    """The task returned; its encoded result is acknowledged with the claim."""

    claim: Claim
    result_json: str
    event: ClassVar[Event] = Event.ACK


@dataclass(frozen=True, slots=True)
class Retried:
    """A failed attempt with attempts left: back to scheduled in ``retry_in`` seconds."""

    claim: Claim
    error: ErrorInfo
    retry_in: float
    timed_out: bool = False  # the model stopped it at its deadline (a signal, not a state)
    event: ClassVar[Event] = Event.RETRY


@dataclass(frozen=True, slots=True)
class Buried:
    """A failed attempt that ends the job: ``dead``, keeping its error."""

    claim: Claim
    error: ErrorInfo
    timed_out: bool = False
    event: ClassVar[Event] = Event.BURY


@dataclass(frozen=True, slots=True)
class Settled:
    """Already written by the task's own transaction (transactional tasks), or refused there
    because the lease was lost (``lease_lost``): the worker records nothing more."""

    claim: Claim
    lease_lost: bool = False


Failed = Retried | Buried
Outcome = Succeeded | Retried | Buried
Report = Succeeded | Retried | Buried | Settled  # what an executor hands back to the worker


def failed(outcome: Failed) -> str:
    """What the job's history says of a failed attempt (sluicegate.job.Happened)."""
    return (Happened.TIMEOUT if outcome.timed_out else Happened.FAILED).value
