"""Waiting on a condition: poll it until it holds, or fail saying what was awaited.

Tests wait on events, never on fixed sleeps. A test that must show something does NOT
happen waits on a signal the code gives (a claimer's turn counter, a service's count of
passes) until the code has had its chances, then checks nothing happened.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(
    predicate: Callable[[], T],
    timeout: float = 30.0,
    interval: float = 0.02,
    what: str | Callable[[], str] = "condition",
) -> T:
    """Poll ``predicate`` until it returns something truthy (returned); fail after
    ``timeout`` seconds with ``what`` (a string, or a callable for late detail)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            detail = what() if callable(what) else what
            raise AssertionError(f"timed out after {timeout:g} s waiting for {detail}")
        time.sleep(interval)
