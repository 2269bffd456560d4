"""Fixtures for chaos tests: real worker processes on one broker (a SQLite file, or a fresh
PostgreSQL schema when a module opts in with ``sg_brokers.over_brokers``), a producer App,
and a side-effect database the tasks append to."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

APPS = Path(__file__).resolve().parents[1] / "apps"
if str(APPS) not in sys.path:
    sys.path.insert(0, str(APPS))

import sg_brokers  # noqa: E402
from chaosapp import create_effects_db  # noqa: E402
from sg_harness import Fleet  # noqa: E402

from sluicegate import App  # noqa: E402


@pytest.fixture
def broker_name(request: pytest.FixtureRequest) -> str:
    """``sqlite`` unless the test is parametrised (indirectly) over ``sg_brokers.BROKERS``."""
    return str(getattr(request, "param", "sqlite"))


@pytest.fixture
def db_url(broker_name: str, tmp_path: Path) -> Iterator[str]:
    """The workers' broker URL; a PostgreSQL schema is dropped after everything using it."""
    with sg_brokers.broker_url(broker_name, tmp_path) as url:
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


@pytest.fixture
def effects_db(tmp_path: Path) -> str:
    path = str(tmp_path / "effects.db")
    create_effects_db(path)
    return path
