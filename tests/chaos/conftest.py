"""Fixtures for chaos tests: real worker processes on one broker (a SQLite file, or a fresh
PostgreSQL schema when a module opts in with ``support.brokers.over_brokers``), a producer App,
and a side-effect database the tasks append to."""

from __future__ import annotations

from pathlib import Path

import pytest
from chaosapp import create_effects_db


@pytest.fixture
def effects_db(tmp_path: Path) -> str:
    path = str(tmp_path / "effects.db")
    create_effects_db(path)
    return path
