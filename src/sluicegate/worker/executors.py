"""Concurrency models behind one interface.

An executor runs work items in its slots and reports back through two callbacks;
it never talks to the broker (the worker's main thread does all broker I/O). This
issue ships the thread model; process and async models plug in here.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from ..job import ClaimedJob
from ..outcomes import Report

Work = Callable[[], Report]


@dataclass(frozen=True, slots=True)
class WorkItem:
    claimed: ClaimedJob
    run: Work


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
            on_done(item, item.run())

    def submit(self, item: WorkItem) -> None:
        self._queue.put(item)

    def stop(self) -> None:
        for _ in self._threads:
            self._queue.put(None)


def make_executor(model: str, name: str, slots: int) -> Executor:
    if model == "thread":
        return ThreadExecutor(name, slots)
    raise ValueError(f"unknown concurrency model {model!r}")
