"""Backoff and retry decisions, as pure functions of the attempt (randomness injected)."""

from __future__ import annotations

import math
import random
import traceback as tb
from collections.abc import Callable
from dataclasses import dataclass

from .errors import ConfigError
from .job import Claim, ErrorInfo
from .outcomes import Buried, Failed, Retried

MAX_MESSAGE = 2_000
MAX_TRACEBACK = 8_000
# The longest wait anything may ask for (a delay, a backoff): a century. Nothing a job
# system promises lies beyond it, and it stays well inside every broker's time range.
MAX_DELAY = 100 * 365.25 * 86_400


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How a task backs off between attempts, and which exceptions are worth another one.

    ``retry_on`` empty means every exception is retried. How many attempts a job gets is
    not here: it is the job's own ``max_attempts`` (``decide`` takes it).
    """

    backoff_base: float = 1.0
    backoff_factor: float = 2.0
    backoff_max: float = 3600.0
    jitter: float = 0.25
    retry_on: tuple[type[BaseException], ...] = ()

    def __post_init__(self) -> None:
        for name, minimum, maximum in (
            ("backoff_base", 0.0, MAX_DELAY),
            ("backoff_factor", 1.0, None),
            ("backoff_max", 0.0, MAX_DELAY),
            ("jitter", 0.0, None),
        ):
            value = getattr(self, name)
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not math.isfinite(value)
                or not value >= minimum
            ):
                raise ConfigError(f"{name} must be a number >= {minimum:g}, not {value!r}")
            if maximum is not None and value > maximum:
                raise ConfigError(f"{name} must be at most {maximum:g}, not {value!r}")
        if not isinstance(self.retry_on, tuple) or not all(
            isinstance(kind, type) and issubclass(kind, BaseException) for kind in self.retry_on
        ):
            raise ConfigError(f"retry_on must be a tuple of exception types, not {self.retry_on!r}")


def backoff(policy: RetryPolicy, attempt: int, rand: Callable[[], float] = random.random) -> float:
    """Seconds before retry number ``attempt`` (1-based): exponential, capped, with +/- jitter."""
    exponent = max(attempt - 1, 0)
    try:
        raw = policy.backoff_base * policy.backoff_factor**exponent
    except OverflowError:
        raw = policy.backoff_max
    delay = min(raw, policy.backoff_max)
    spread = delay * policy.jitter
    return max(0.0, delay - spread + 2 * spread * rand())


def decide(
    policy: RetryPolicy,
    attempts: int,
    max_attempts: int,
    exc: BaseException | None,
    rand: Callable[[], float] = random.random,
) -> float | None:
    """Seconds until the next try, or None when the job should be dead.

    ``attempts`` counts the attempt that just failed. ``exc`` None means a failure
    that is not an exception of the task (timeout, lost child): always retryable.
    """
    if attempts >= max_attempts:
        return None
    if exc is not None and policy.retry_on and not isinstance(exc, policy.retry_on):
        return None
    return backoff(policy, attempts, rand)


def failure(
    policy: RetryPolicy,
    claim: Claim,
    attempts: int,
    max_attempts: int,
    error: ErrorInfo,
    exc: BaseException | None = None,
    rand: Callable[[], float] = random.random,
    timed_out: bool = False,
) -> Failed:
    """The outcome of a failed attempt: ``Retried`` with its backoff, or ``Buried``.

    The one place a failure becomes a retry or a dead job; brokers and the worker
    read the outcome's event and never decide again.
    """
    retry_in = decide(policy, attempts, max_attempts, exc, rand)
    if retry_in is None:
        return Buried(claim, error, timed_out)
    return Retried(claim, error, retry_in, timed_out)


def _truncate(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[: limit // 2] + "\n... truncated ...\n" + text[-limit // 2 :]


def _storable(text: str) -> str:
    """``text`` with any lone surrogate written as its escape: an error report must be
    stored whatever the task put in its message (it could not be written as UTF-8)."""
    if text.isascii():
        return text
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _message(exc: BaseException) -> str:
    """``str(exc)``, or what the traceback module says when the exception's own
    ``__str__`` raises: the failure is reported either way."""
    try:
        return str(exc)
    except BaseException:  # whatever __str__ raises, the job still needs its outcome
        return "<exception str() failed>"


def error_info(exc: BaseException) -> ErrorInfo:
    """Type, message and traceback of ``exc``, each truncated to a bound and storable."""
    try:
        text = "".join(tb.format_exception(type(exc), exc, exc.__traceback__))
    except BaseException:  # an exception odd enough to break the traceback module
        text = f"{type(exc).__qualname__}: <traceback could not be formatted>"
    return ErrorInfo(
        type=_storable(type(exc).__qualname__),
        message=_storable(_truncate(_message(exc), MAX_MESSAGE)),
        traceback=_storable(_truncate(text, MAX_TRACEBACK)),
    )


def plain_error(kind: str, message: str) -> ErrorInfo:
    return ErrorInfo(type=_storable(kind), message=_storable(_truncate(message, MAX_MESSAGE)))
