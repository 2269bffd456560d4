"""Helpers for testing sluicegate brokers, and users' own code.

For an app's tests: ``drain`` (run its jobs through the real lifecycle),
``assert_enqueued`` / ``assert_not_enqueued``, ``perform`` (one job as a worker runs
it), ``FakeClock`` (time that moves when told) and ``bound_to`` (the app on a test
broker); the pytest plugin (``sluicegate.testing.plugin``, loaded by entry point) gives
fixtures for them. ``sluicegate.testing.conformance`` is the suite every broker passes
(it needs pytest and hypothesis); this package itself imports neither, and loads the
helpers that run jobs only when first used.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..brokers.base import Broker
from .clock import T0, FakeClock

if TYPE_CHECKING:
    from .assertions import assert_enqueued, assert_not_enqueued
    from .binding import bound_to
    from .drain import DrainResult, drain
    from .perform import perform

# Public names loaded on first use (they import the worker's runner): name -> module.
_LAZY = {
    "assert_enqueued": "assertions",
    "assert_not_enqueued": "assertions",
    "bound_to": "binding",
    "DrainResult": "drain",
    "drain": "drain",
    "perform": "perform",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


@dataclass(frozen=True)
class BrokerKind:
    """How to open one kind of broker for a test.

    ``url(tmp_path)`` names the storage; opening the same URL again gives another handle
    on the same jobs when ``shared`` is true (every durable broker). ``multiprocess``:
    separate OS processes may open that URL at once (through ``broker_from_url``, so the
    broker's scheme must be registered in ``sluicegate.brokers.BROKERS``). ``done(url)``
    says a test is finished with storage it named (every handle closed): a property test
    that names new storage per example calls it after each, so a kind that hands out
    prepared storage (an emptied, already migrated schema) can hand the same one out next.
    """

    name: str
    url: Callable[[Path], str]
    open: Callable[[str, Callable[[], float]], Broker]
    shared: bool
    multiprocess: bool
    done: Callable[[str], None] = field(default=lambda url: None)


def run_released(script: str, argvs: Sequence[Sequence[str]], timeout: float = 60) -> list[Any]:
    """One ``python -c script ARGV`` child per argv, all released at once: each prints
    "ready", waits for a line on stdin, then prints one JSON document. Returns the
    documents in child order; a child that fails raises AssertionError with its stderr."""
    children = [
        subprocess.Popen(
            [sys.executable, "-c", script, *argv],
            text=True,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for argv in argvs
    ]
    try:
        for child in children:
            assert child.stdout is not None
            line = child.stdout.readline()
            assert line == "ready\n", (line, child.stderr and child.stderr.read())
        for child in children:  # release them all before waiting on any
            assert child.stdin is not None
            child.stdin.write("go\n")
            child.stdin.flush()
        outputs = []
        for child in children:
            out, err = child.communicate(timeout=timeout)
            assert child.returncode == 0, err
            outputs.append(json.loads(out))
        return outputs
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.communicate()


__all__ = [
    "T0",
    "BrokerKind",
    "DrainResult",
    "FakeClock",
    "assert_enqueued",
    "assert_not_enqueued",
    "bound_to",
    "drain",
    "perform",
    "run_released",
]
