"""Fixtures for worker tests: an App on a real SQLite file (or a fresh PostgreSQL schema
for modules that opt in with ``sg_brokers.over_brokers``), in-process workers run in
threads (stopped and joined at teardown), and real ``sluicegate worker`` processes."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

APPS = Path(__file__).resolve().parents[1] / "apps"
if str(APPS) not in sys.path:
    sys.path.insert(0, str(APPS))

import sg_brokers  # noqa: E402
from sg_harness import Fleet  # noqa: E402

from sluicegate import App  # noqa: E402
from sluicegate.worker import PoolSpec, Worker  # noqa: E402


@pytest.fixture
def broker_name(request: pytest.FixtureRequest) -> str:
    """``sqlite`` unless the test is parametrised (indirectly) over ``sg_brokers.BROKERS``."""
    return str(getattr(request, "param", "sqlite"))


@pytest.fixture
def db_url(broker_name: str, tmp_path: Path) -> Iterator[str]:
    """The test's broker URL; a PostgreSQL schema is dropped after everything using it."""
    with sg_brokers.broker_url(broker_name, tmp_path) as url:
        yield url


@pytest.fixture
def app(db_url: str) -> Iterator[App]:
    """A fresh App with no tasks, on the test's own broker; closed at teardown."""
    app = App(broker=db_url)
    yield app
    app.close()


@pytest.fixture
def gate() -> Iterator[threading.Event]:
    """An event blocking tasks wait on; set at teardown so no task thread outlives the test."""
    event = threading.Event()
    yield event
    event.set()


@pytest.fixture
def run_worker(app: App, gate: threading.Event) -> Iterator[Callable[..., Worker]]:
    """Start ``Worker(app, pools, **options)`` in a thread; teardown stops it at once and joins."""
    running: list[tuple[Worker, threading.Thread]] = []

    def start(pools: list[PoolSpec], **options: Any) -> Worker:
        worker = Worker(app, pools, **options)
        thread = threading.Thread(target=worker.run, name="test-worker", daemon=True)
        thread.start()
        running.append((worker, thread))
        return worker

    yield start
    gate.set()
    for worker, thread in running:
        worker.stop(immediate=True)
        thread.join(15)
        assert not thread.is_alive(), "worker thread did not stop"


@pytest.fixture
def drain(app: App) -> Callable[..., Worker]:
    """Run a burst worker until the pools' queues are drained; returns it for its counters."""

    def run(pools: list[PoolSpec], **options: Any) -> Worker:
        options.setdefault("lease", 10.0)
        worker = Worker(app, pools, burst=True, **options)
        thread = threading.Thread(target=worker.run, name="burst-worker", daemon=True)
        thread.start()
        thread.join(30)
        if thread.is_alive():
            worker.stop(immediate=True)
            thread.join(10)
            raise AssertionError("burst worker did not drain its queues within 30 s")
        return worker

    return run


@pytest.fixture
def fleet(db_url: str, tmp_path: Path) -> Iterator[Fleet]:
    """Real worker processes on ``db_url``; every one is killed and reaped at teardown."""
    fleet = Fleet(db_url, tmp_path)
    yield fleet
    fleet.close()


@pytest.fixture
def producer(db_url: str) -> Iterator[App]:
    """An App on the workers' database for enqueueing and reading jobs; closed at teardown."""
    app = App(broker=db_url)
    yield app
    app.close()
