"""The dashboard tests' App: on the test's broker (``db_url``: a SQLite file, or a fresh
PostgreSQL schema in modules that run ``over_brokers``), with one declared limit."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sluicegate import App


@pytest.fixture
def dash_app(db_url: str) -> Iterator[App]:
    app = App(broker=db_url, config=False)
    app.limit("storage", concurrency=1)

    @app.task(queue="files", limits=["storage"])
    def store(n: int) -> int:
        return n

    yield app
    app.close()
