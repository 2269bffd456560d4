"""Subscribers to "jobs may be ready" signals, with an optional watcher thread.

Brokers call ``notify_local`` after their own commits (same-process wake-ups are
immediate); a broker that can observe other processes supplies a watch loop that
runs in one daemon thread while anyone is subscribed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

WatchLoop = Callable[[threading.Event, Callable[[], None]], None]


class Subscribers:
    def __init__(
        self, watch_loop: WatchLoop | None = None, interrupt: Callable[[], None] | None = None
    ) -> None:
        """``interrupt`` wakes a watch loop that blocks for long, so that stop is prompt."""
        self._callbacks: list[Callable[[], None]] = []
        self._lock = threading.Lock()
        self._watch_loop = watch_loop
        self._interrupt = interrupt
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def add(self, callback: Callable[[], None]) -> Callable[[], None]:
        with self._lock:
            self._callbacks.append(callback)
            if self._watch_loop is not None and self._thread is None:
                self._stop.clear()
                self._thread = threading.Thread(
                    target=self._watch_loop,
                    args=(self._stop, self.notify_local),
                    name="sluicegate-watcher",
                    daemon=True,
                )
                self._thread.start()

        def remove() -> None:
            with self._lock:
                if callback in self._callbacks:
                    self._callbacks.remove(callback)
                empty = not self._callbacks
            if empty:
                self.stop()

        return remove

    def notify_local(self) -> None:
        for callback in list(self._callbacks):
            callback()

    def stop(self) -> None:
        with self._lock:
            thread, self._thread = self._thread, None
        self._stop.set()
        if thread is not None and self._interrupt is not None:
            self._interrupt()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=2)
