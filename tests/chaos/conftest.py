"""Fixtures for chaos tests: real worker processes on one SQLite file, a producer App,
and a side-effect database the tasks append to."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

APPS = Path(__file__).resolve().parents[1] / "apps"
if str(APPS) not in sys.path:
    sys.path.insert(0, str(APPS))

from chaosapp import create_effects_db  # noqa: E402
from sg_harness import Fleet, sqlite_url  # noqa: E402

from sluicegate import App  # noqa: E402


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    return sqlite_url(tmp_path / "jobs.db")


@pytest.fixture
def producer(db_url: str) -> Iterator[App]:
    """An App on the workers' database for enqueueing and reading jobs; closed at teardown."""
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
