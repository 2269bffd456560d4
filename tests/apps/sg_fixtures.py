"""Fixtures shared by the worker and chaos tests (a pytest plugin, loaded by tests/conftest.py).

``broker_name`` is ``sqlite`` unless a module opts in with ``sg_brokers.over_brokers``;
``db_url`` is that broker for one test; ``producer`` an App on it; ``fleet`` real
``sluicegate worker`` processes on it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sg_brokers import broker_url
from sg_harness import Fleet

from sluicegate import App


@pytest.fixture
def broker_name(request: pytest.FixtureRequest) -> str:
    """``sqlite`` unless the test is parametrised (indirectly) over ``sg_brokers.BROKERS``."""
    return str(getattr(request, "param", "sqlite"))


@pytest.fixture
def db_url(broker_name: str, tmp_path: Path) -> Iterator[str]:
    """The test's broker URL; a PostgreSQL schema is dropped after everything using it."""
    with broker_url(broker_name, tmp_path) as url:
        yield url


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
