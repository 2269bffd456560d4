"""Hooks: plain callables an app registers to hear of its jobs' lifecycle (docs/hooks.md).

Each kind is kept as a tuple, so a worker with no hooks pays one truthiness check of an
empty tuple per call site and allocates nothing. A hook that raises is logged, naming
it, and never changes a job's outcome or an enqueue's result.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from .errors import ConfigError
from .job import Claim, encode_headers
from .outcomes import Buried, Report, Retried, Settled, Succeeded

if TYPE_CHECKING:
    from .job import Job

log = logging.getLogger("sluicegate.hooks")

F = TypeVar("F", bound=Callable[..., Any])

# The kinds, in the order of a job's life; each with the arguments its hooks get.
KINDS = (
    "enqueue_headers",  # (task, queue) -> dict | None: headers to store with the job
    "on_enqueue",  # (job): the stored job, in the producer, after the broker stored it
    "on_worker_start",  # (worker): in the worker process, before its first claim
    "before_job",  # (job): where the attempt runs, just before the task is called
    "after_job",  # (job, outcome): where the attempt ended, whatever its outcome
    "on_retry",  # (job, outcome): after after_job, when the outcome is Retried
    "on_dead",  # (job, outcome): after after_job, when the outcome is Buried
    "on_worker_stop",  # (worker): in the worker process, after it stopped
)


@dataclass(frozen=True, slots=True)
class Stopped:
    """after_job's outcome for an attempt the worker stopped or disowned (its job was
    cancelled, or its lease lost): nothing of it is recorded, so neither on_retry nor
    on_dead follows. ``report`` is what the attempt itself came to."""

    claim: Claim
    report: Report


HookOutcome = Report | Stopped  # what after_job gets


def outcome_name(outcome: HookOutcome) -> str:
    """A word for an attempt's outcome: succeeded, retried, dead, timed_out (retried or
    dead at a timeout: ``isinstance`` tells which), stopped (cancelled or its lease lost),
    settled (a transactional task's own commit) or lease_lost (its commit refused)."""
    if isinstance(outcome, Succeeded):
        return "succeeded"
    if isinstance(outcome, Stopped):
        return "stopped"
    if isinstance(outcome, Settled):
        return "lease_lost" if outcome.lease_lost else "settled"
    if outcome.timed_out:
        return "timed_out"
    return "retried" if isinstance(outcome, Retried) else "dead"


class Hooks:
    """The hooks of one app, by kind (``app.hooks``). Register with ``app.hook(kind)`` or
    the ``app.on_enqueue``-style shortcuts; the tuples are read on the hot path."""

    __slots__ = (*KINDS, "ending")

    def __init__(self) -> None:
        for kind in KINDS:
            setattr(self, kind, ())
        # Whether ``ended`` would call anything: kept as a plain attribute, as the runner
        # reads it once per attempt.
        self.ending = False

    def add(self, kind: str, fn: F) -> F:
        check_kind(kind)
        if not callable(fn):
            raise ConfigError(f"hook {kind!r} must be callable, not {type(fn).__name__}")
        setattr(self, kind, (*getattr(self, kind), fn))
        self.ending = bool(self.after_job or self.on_retry or self.on_dead)
        return fn

    def __bool__(self) -> bool:
        return any(getattr(self, kind) for kind in KINDS)

    # ---- firing (callers check the kind's tuple first, so no hooks costs no call) ----
    def fire(self, kind: str, *args: Any) -> None:
        """Call every hook of ``kind`` in registration order; log (never raise) failures."""
        for fn in getattr(self, kind):
            try:
                fn(*args)
            except Exception:
                log.exception("hook %s %s raised (ignored)", kind, describe(fn))

    def ended(self, job: Job, outcome: HookOutcome) -> None:
        """An attempt ended: after_job, then on_retry or on_dead as the outcome says."""
        if self.after_job:
            self.fire("after_job", job, outcome)
        if self.on_retry and isinstance(outcome, Retried):
            self.fire("on_retry", job, outcome)
        elif self.on_dead and isinstance(outcome, Buried):
            self.fire("on_dead", job, outcome)

    def headers(self, task: str, queue: str) -> str | None:
        """The enqueue_headers hooks' headers for one job, merged (later hooks win) and
        encoded; a hook that raises, or returns what is not a dict of str, is logged and
        left out."""
        merged: dict[str, str] = {}
        for fn in self.enqueue_headers:
            try:
                found = fn(task, queue)
                if found is not None:
                    encode_headers(found)  # checks keys and values
                    merged.update(found)
            except Exception:
                log.exception("hook enqueue_headers %s raised (ignored)", describe(fn))
        try:
            return encode_headers(merged)
        except ValueError:  # too long, together
            log.exception("hook enqueue_headers: the headers are left out")
            return None

    # Declared for the type checker; __slots__ holds the values.
    if TYPE_CHECKING:
        enqueue_headers: tuple[Callable[..., Any], ...]
        on_enqueue: tuple[Callable[..., Any], ...]
        on_worker_start: tuple[Callable[..., Any], ...]
        before_job: tuple[Callable[..., Any], ...]
        after_job: tuple[Callable[..., Any], ...]
        on_retry: tuple[Callable[..., Any], ...]
        on_dead: tuple[Callable[..., Any], ...]
        on_worker_stop: tuple[Callable[..., Any], ...]


def check_kind(kind: object) -> None:
    if kind not in KINDS:
        raise ConfigError(f"unknown hook {kind!r}; the hooks are: {', '.join(KINDS)}")


def describe(fn: object) -> str:
    module = getattr(fn, "__module__", None)
    name = getattr(fn, "__qualname__", None) or repr(fn)
    return f"{module}.{name}" if module else name


NO_HOOKS = Hooks()  # the runner's default: nothing registered, nothing called
