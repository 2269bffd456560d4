"""Outcomes of an attempt, as values. The worker decides; the broker records."""

from __future__ import annotations

from dataclasses import dataclass

from .job import Claim, ErrorInfo


@dataclass(frozen=True, slots=True)
class Succeeded:
    claim: Claim
    result_json: str


@dataclass(frozen=True, slots=True)
class Failed:
    """A failed attempt. ``retry_in`` seconds until the next try, or None: the job is dead."""

    claim: Claim
    error: ErrorInfo
    retry_in: float | None


@dataclass(frozen=True, slots=True)
class Settled:
    """Already written by the task's own transaction (transactional tasks), or refused there
    because the lease was lost (``lease_lost``): the worker records nothing more."""

    claim: Claim
    lease_lost: bool = False


Outcome = Succeeded | Failed
Report = Succeeded | Failed | Settled  # what an executor hands back to the worker
