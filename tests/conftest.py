"""Shared fixtures: a fake clock and a ``broker`` fixture run against every broker kind.

To add a broker, add one ``BrokerKind`` to ``BROKER_KINDS``; every test that takes
``broker`` (the conformance suite, sluicegate.testing.conformance) then runs against it
too. ``clock``, ``broker_url``, ``open_broker`` and ``broker`` are the suite's own
fixtures, built from ``broker_kind``.

PostgreSQL runs on a real server found by tests/pgserver.py, each test on its own freshly
migrated schema (dropped at teardown). Without a server its tests are skipped with the
reason, unless ``SLUICEGATE_REQUIRE_POSTGRES=1`` (CI), which turns the skip into a failure.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import pgserver
from pgserver import require_postgres
from sluicegate.brokers.base import RUNTIME_DIR_ENV, Broker
from sluicegate.brokers.memory import MemoryBroker
from sluicegate.brokers.sqlite import SQLiteBroker
from sluicegate.testing import BrokerKind, FakeClock
from sluicegate.testing.conformance import broker, broker_url, clock, open_broker

# The worker and chaos tests' shared fixtures live with their helpers in tests/apps.
APPS = Path(__file__).resolve().parent / "apps"
if str(APPS) not in sys.path:
    sys.path.insert(0, str(APPS))
pytest_plugins = ["sg_fixtures"]


def sqlite_url(path: Path) -> str:
    """``sqlite:////ABS/PATH`` for an absolute path."""
    return f"sqlite:///{path.resolve()}"


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
        "memory",
        lambda tmp: "memory://",
        lambda url, clock: MemoryBroker(url, clock=clock),
        shared=False,
        multiprocess=False,
    ),
    "sqlite": BrokerKind(
        "sqlite",
        lambda tmp: sqlite_url(tmp / "jobs.db"),
        lambda url, clock: SQLiteBroker(url, clock=clock),
        shared=True,
        multiprocess=True,
    ),
    "postgresql": BrokerKind(
        "postgresql",
        postgres_url,
        open_postgres,
        shared=True,
        multiprocess=True,
    ),
}


@pytest.fixture(autouse=True)
def _drop_postgres_schemas() -> Iterator[None]:
    """Drops the schemas a test made; autouse, so it tears down after the brokers close."""
    first = len(_PG_SCHEMAS)
    yield
    while len(_PG_SCHEMAS) > first:
        pgserver.drop_schema(_PG_SCHEMAS.pop())


@pytest.fixture(autouse=True, scope="session")
def _runtime_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Workers keep their PostgreSQL lock folders (Broker.local_folder) under this session's
    temporary folder, not the system's: every test's fresh schema would leave one there.
    Worker processes started by tests inherit it."""
    before = os.environ.get(RUNTIME_DIR_ENV)
    os.environ[RUNTIME_DIR_ENV] = str(tmp_path_factory.mktemp("runtime"))
    yield
    if before is None:
        del os.environ[RUNTIME_DIR_ENV]
    else:
        os.environ[RUNTIME_DIR_ENV] = before


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
    if terminalreporter.config.pluginmanager.hasplugin("dsession"):
        # Tests ran in pytest-xdist's workers (-n): this process asked for no server.
        line = f"postgresql: {pgserver.describe(final=False)}, in the test workers"
        terminalreporter.write_line(line)
        return
    missing = pgserver.server.cache_info().currsize > 0 and pgserver.server()[0] is None
    terminalreporter.write_line(
        f"postgresql: {pgserver.describe(final=True)}",
        red=missing and pgserver.required(),
        yellow=missing and not pgserver.required(),
    )


@pytest.fixture(params=list(BROKER_KINDS))
def broker_kind(request: pytest.FixtureRequest) -> BrokerKind:
    if request.param == "postgresql":
        require_postgres()
    return BROKER_KINDS[request.param]


# Re-exported: the suite's fixtures serve every test here, and tests import the fake
# clock and BrokerKind from this module.
__all__ = ["BrokerKind", "FakeClock", "broker", "broker_url", "clock", "open_broker"]
