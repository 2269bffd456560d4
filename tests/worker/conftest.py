"""Fixtures for worker tests: an App on a real SQLite file (or a fresh PostgreSQL schema
for modules that opt in with ``support.brokers.over_brokers``), in-process workers run in
threads (stopped and joined at teardown), and real ``sluicegate worker`` processes."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from sluicegate import App
from sluicegate.worker import PoolSpec, Worker


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
