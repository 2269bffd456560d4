"""The suite's fixtures (a pytest plugin, loaded by tests/conftest.py).

Brokers: ``broker_kind`` (every kind: the conformance suite's ``clock``, ``broker_url``,
``open_broker`` and ``broker`` are built from it); ``broker_name`` (``sqlite`` unless a
module opts in with ``support.brokers.over_brokers``), ``db_url`` that broker for one
test, ``producer`` an App on it and ``fleet`` real ``sluicegate worker`` processes on it.
PostgreSQL: ``pg_dsn`` the server, ``pg_url`` a migrated empty schema for this test,
``pg_fresh_url`` a schema that does not exist yet (tests of migration).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from sluicegate import App
from sluicegate.brokers.base import RUNTIME_DIR_ENV
from sluicegate.testing import BrokerKind
from support import brokers, pg
from support.fleet import Fleet


@pytest.fixture(autouse=True)
def _give_back_schemas() -> Iterator[None]:
    """Autouse, so it tears down after everything that used a lent schema has closed."""
    first = len(brokers.LENT)
    yield
    brokers.give_back_lent(first)


@pytest.fixture(autouse=True)
def _runtime_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Workers keep their PostgreSQL lock folders (Broker.local_folder) under a folder of
    this test's, not the system's: a schema lent again to the next test must not show it
    the lock files of this test's killed workers. Worker processes inherit it."""
    before = os.environ.get(RUNTIME_DIR_ENV)
    os.environ[RUNTIME_DIR_ENV] = str(tmp_path_factory.mktemp("run", numbered=True))
    yield
    if before is None:
        del os.environ[RUNTIME_DIR_ENV]
    else:
        os.environ[RUNTIME_DIR_ENV] = before


@pytest.fixture(params=list(brokers.KINDS))
def broker_kind(request: pytest.FixtureRequest) -> BrokerKind:
    if request.param == "postgresql":
        pg.require_postgres()
    return brokers.KINDS[request.param]


@pytest.fixture
def pg_dsn() -> str:
    """The test server's DSN (skip without one, fail when required), for PostgreSQL-only tests."""
    return pg.require_postgres()


@pytest.fixture
def pg_url(pg_dsn: str) -> str:
    """A broker URL on a migrated, empty schema of the test server, for this test only."""
    return brokers.postgres_url()


@pytest.fixture
def pg_fresh_url(pg_dsn: str) -> Iterator[str]:
    """A broker URL on a schema that does not exist yet (tests of migration); dropped."""
    url, schema = pg.fresh_url()
    yield url
    pg.drop_schema(schema)


@pytest.fixture
def broker_name(request: pytest.FixtureRequest) -> str:
    """``sqlite`` unless the test is parametrised (indirectly) over ``brokers.BROKERS``."""
    return str(getattr(request, "param", "sqlite"))


@pytest.fixture
def db_url(broker_name: str, tmp_path: Path) -> str:
    """The test's broker URL (a PostgreSQL schema is given back after everything using it)."""
    return brokers.broker_url(broker_name, tmp_path)


@pytest.fixture
def producer(db_url: str) -> Iterator[App]:
    """An App on the workers' broker for enqueueing and reading jobs; closed at teardown."""
    app = App(broker=db_url)
    yield app
    app.close()


@pytest.fixture
def fleet(db_url: str, tmp_path: Path) -> Iterator[Fleet]:
    """Real worker processes on ``db_url``; every one is killed and reaped at teardown."""
    fleet = Fleet(db_url, tmp_path)
    yield fleet
    fleet.close()
