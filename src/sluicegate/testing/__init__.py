"""Helpers for testing sluicegate brokers, and users' own code, without pytest.

``sluicegate.testing.conformance`` is the suite every broker passes (it needs pytest and
hypothesis); this package itself imports neither.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..brokers.base import Broker

T0 = 1_700_000_000.0  # a fixed, exactly representable epoch for the fake clock


class FakeClock:
    """A clock that moves only when told to; pass it as ``clock=`` to a broker."""

    def __init__(self, start: float = T0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> float:
        self.now += seconds
        return self.now


@dataclass(frozen=True)
class BrokerKind:
    """How to open one kind of broker for a test.

    ``url(tmp_path)`` names the storage; opening the same URL again gives another handle
    on the same jobs when ``shared`` is true (every durable broker). ``multiprocess``:
    separate OS processes may open that URL at once (through ``broker_from_url``, so the
    broker's scheme must be registered in ``sluicegate.brokers.BROKERS``).
    """

    name: str
    url: Callable[[Path], str]
    open: Callable[[str, Callable[[], float]], Broker]
    shared: bool
    multiprocess: bool


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


__all__ = ["T0", "BrokerKind", "FakeClock", "run_released"]
