"""Shared fixtures: a fake clock and a ``broker`` fixture run against every broker kind.

To add a broker (e.g. PostgreSQL), add one ``BrokerKind`` to ``BROKER_KINDS``; every
test that takes ``broker`` (the conformance suite) then runs against it too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from sluicegate.brokers.base import Broker
from sluicegate.brokers.memory import MemoryBroker
from sluicegate.brokers.sqlite import SQLiteBroker

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


def sqlite_url(path: Path) -> str:
    """``sqlite:////ABS/PATH`` for an absolute path."""
    return f"sqlite:///{path.resolve()}"


@dataclass(frozen=True)
class BrokerKind:
    """How to open one kind of broker for a test.

    ``url(tmp_path)`` names the storage; opening the same URL again gives another handle
    on the same jobs when ``shared`` is true (every durable broker). ``multiprocess``:
    separate OS processes may open that URL at once.
    """

    name: str
    url: Callable[[Path], str]
    open: Callable[[str, Callable[[], float]], Broker]
    shared: bool
    multiprocess: bool


BROKER_KINDS: dict[str, BrokerKind] = {
    "memory": BrokerKind(
        "memory", lambda tmp: "memory://", lambda url, clock: MemoryBroker(url, clock=clock),
        shared=False, multiprocess=False,
    ),
    "sqlite": BrokerKind(
        "sqlite", lambda tmp: sqlite_url(tmp / "jobs.db"),
        lambda url, clock: SQLiteBroker(url, clock=clock), shared=True, multiprocess=True,
    ),
}  # fmt: skip


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(params=list(BROKER_KINDS))
def broker_kind(request: pytest.FixtureRequest) -> BrokerKind:
    return BROKER_KINDS[request.param]


@pytest.fixture
def broker_url(broker_kind: BrokerKind, tmp_path: Path) -> str:
    return broker_kind.url(tmp_path)


@pytest.fixture
def open_broker(
    broker_kind: BrokerKind, broker_url: str, clock: FakeClock
) -> Iterator[Callable[[], Broker]]:
    """Opens more handles on the test's storage (same URL, same fake clock); closes them all."""
    opened: list[Broker] = []

    def open_one() -> Broker:
        broker = broker_kind.open(broker_url, clock)
        opened.append(broker)
        return broker

    yield open_one
    for broker in reversed(opened):
        broker.close()


@pytest.fixture
def broker(open_broker: Callable[[], Broker]) -> Broker:
    """A fresh, empty broker of each kind, on the fake ``clock``."""
    return open_broker()
