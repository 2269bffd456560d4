"""Concurrency models behind one interface: thread, async (one event loop), process.

An executor runs work items in its slots and reports back through two callbacks;
it never talks to the broker about leases (the worker's main thread does all
heartbeats, acks and claims).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Protocol

from ..job import ClaimedJob
from ..outcomes import Report
from ..retry import RetryPolicy

Work = Callable[[], Report]


@dataclass(frozen=True, slots=True)
class WorkItem:
    """One job to run. ``run`` runs it here (thread model); ``arun`` is its coroutine form
    (async model); process pools send ``claimed`` to a child, which looks up the task."""

    claimed: ClaimedJob
    run: Work | None = None
    arun: Callable[[], Coroutine[Any, Any, Report]] | None = None
    timeout: float | None = None
    policy: RetryPolicy | None = None  # for failures decided outside the task (a dead child)


StartCallback = Callable[[WorkItem], None]
DoneCallback = Callable[[WorkItem, Report], None]


class Executor(Protocol):
    def start(self, on_start: StartCallback, on_done: DoneCallback) -> None: ...

    def submit(self, item: WorkItem) -> None:
        """Run ``item`` in a free slot; the caller guarantees a slot is free."""

    def stop(self) -> None:
        """Stop taking work; in-flight items may still finish and report."""


class ThreadExecutor:
    """N long-lived daemon threads fed by one queue: no per-job thread set-up."""

    def __init__(self, name: str, slots: int) -> None:
        self.name = name
        self.slots = slots
        self._queue: queue.SimpleQueue[WorkItem | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []

    def start(self, on_start: StartCallback, on_done: DoneCallback) -> None:
        for index in range(self.slots):
            thread = threading.Thread(
                target=self._serve, args=(on_start, on_done),
                name=f"sluicegate-{self.name}-{index}", daemon=True,
            )  # fmt: skip
            thread.start()
            self._threads.append(thread)

    def _serve(self, on_start: StartCallback, on_done: DoneCallback) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            on_start(item)
            assert item.run is not None
            on_done(item, item.run())

    def submit(self, item: WorkItem) -> None:
        self._queue.put(item)

    def stop(self) -> None:
        for _ in self._threads:
            self._queue.put(None)


def make_executor(model: str, name: str, slots: int, **options: Any) -> Executor:
    if model == "thread":
        return ThreadExecutor(name, slots)
    if model == "async":
        from .aio import AsyncExecutor

        return AsyncExecutor(name, slots, **options)
    if model == "process":
        from .processes import ProcessExecutor

        return ProcessExecutor(name, slots, **options)
    raise ValueError(f"unknown concurrency model {model!r}")
