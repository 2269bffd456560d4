"""Shared fixtures: a fake clock and a ``broker`` fixture run against every broker kind.

To add a broker, add one ``BrokerKind`` to ``BROKER_KINDS``; every test that takes
``broker`` (the conformance suite) then runs against it too.

PostgreSQL runs on a real server found by tests/pgserver.py, each test on its own freshly
migrated schema (dropped at teardown). Without a server its tests are skipped with the
reason, unless ``SLUICEGATE_REQUIRE_POSTGRES=1`` (CI), which turns the skip into a failure.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import pgserver
from pgserver import require_postgres
from sluicegate.brokers.base import Broker
from sluicegate.brokers.memory import MemoryBroker
from sluicegate.brokers.sqlite import SQLiteBroker

# The worker and chaos tests' shared fixtures live with their helpers in tests/apps.
APPS = Path(__file__).resolve().parent / "apps"
if str(APPS) not in sys.path:
    sys.path.insert(0, str(APPS))
pytest_plugins = ["sg_fixtures"]

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


# Schemas handed out by postgres_url during the current test; dropped at its teardown.
_PG_SCHEMAS: list[str] = []


def postgres_url(tmp: Path) -> str:
    """A URL on a new schema of the test server (migrated when the first handle opens)."""
    url, schema = pgserver.fresh_url()
    _PG_SCHEMAS.append(schema)
    return url


def open_postgres(url: str, clock: Callable[[], float]) -> Broker:
    from sluicegate.brokers.postgres import PostgresBroker

    return PostgresBroker(url, clock=clock)


BROKER_KINDS: dict[str, BrokerKind] = {
    "memory": BrokerKind(
        "memory", lambda tmp: "memory://", lambda url, clock: MemoryBroker(url, clock=clock),
        shared=False, multiprocess=False,
    ),
    "sqlite": BrokerKind(
        "sqlite", lambda tmp: sqlite_url(tmp / "jobs.db"),
        lambda url, clock: SQLiteBroker(url, clock=clock), shared=True, multiprocess=True,
    ),
    "postgresql": BrokerKind(
        "postgresql", postgres_url, open_postgres, shared=True, multiprocess=True,
    ),
}  # fmt: skip


@pytest.fixture(autouse=True)
def _drop_postgres_schemas() -> Iterator[None]:
    """Drops the schemas a test made; autouse, so it tears down after the brokers close."""
    first = len(_PG_SCHEMAS)
    yield
    while len(_PG_SCHEMAS) > first:
        pgserver.drop_schema(_PG_SCHEMAS.pop())


@pytest.fixture
def pg_dsn() -> str:
    """The test server's DSN (skip without one, fail when required), for PostgreSQL-only tests."""
    return require_postgres()


@pytest.fixture
def pg_url(pg_dsn: str, tmp_path: Path) -> str:
    """A broker URL on a fresh schema of the test server, dropped at teardown."""
    return postgres_url(tmp_path)


def pytest_report_header(config: pytest.Config) -> str:
    return f"postgresql: {pgserver.describe(final=False)}"


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    missing = pgserver.server.cache_info().currsize > 0 and pgserver.server()[0] is None
    terminalreporter.write_line(
        f"postgresql: {pgserver.describe(final=True)}",
        red=missing and pgserver.required(),
        yellow=missing and not pgserver.required(),
    )


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(params=list(BROKER_KINDS))
def broker_kind(request: pytest.FixtureRequest) -> BrokerKind:
    if request.param == "postgresql":
        require_postgres()
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
