"""Wake-ups from other processes: LISTEN on a dedicated connection, polling while it is down."""

from __future__ import annotations

import contextlib
import logging
import random
import selectors
import socket
import threading
import time
from collections.abc import Callable

from .connections import CONNECT_DEFAULTS, psycopg
from .url import Settings

log = logging.getLogger("sluicegate.postgres")

LISTEN_IDLE = 5.0  # the listener's longest sleep, should a stop's interrupt be lost


class Listener:
    """The watch loop of the broker's Subscribers: ``run`` in its thread, ``interrupt`` to
    stop it promptly; ``listening`` is set while LISTEN is in place."""

    def __init__(self, settings: Settings, channel: str | None = None) -> None:
        """``channel``: the settings' (work to claim) unless given (finished jobs)."""
        self.settings = settings
        self.channel = settings.channel if channel is None else channel
        self.listening = threading.Event()
        # The loop sleeps in select() on its connection and this pair's reading end;
        # stopping writes to the other end (no periodic wake-ups while idle).
        self._wake = socket.socketpair()
        for end in self._wake:
            end.setblocking(False)

    def interrupt(self) -> None:
        with contextlib.suppress(OSError):
            self._wake[1].send(b"!")

    def close(self) -> None:
        for end in self._wake:
            end.close()

    def run(self, stop: threading.Event, fire: Callable[[], None]) -> None:
        """LISTEN on a dedicated connection. Fires once each time LISTEN is (re)established
        (for what committed while nobody listened) and every poll_interval while it is down
        (polling fallback); reconnects with capped, jittered backoff."""
        delay = 0.0
        try:
            while not stop.is_set():
                try:
                    with psycopg.connect(
                        self.settings.dsn, autocommit=True, **CONNECT_DEFAULTS
                    ) as conn:
                        conn.execute(f'LISTEN "{self.channel}"')
                        if delay:
                            log.info("LISTEN connection restored")
                        delay = 0.0
                        fire()
                        self.listening.set()
                        with selectors.DefaultSelector() as waiting:
                            waiting.register(conn.fileno(), selectors.EVENT_READ)
                            waiting.register(self._wake[0], selectors.EVENT_READ)
                            while not stop.is_set():
                                self._await_notification(waiting)
                                if any(True for _ in conn.notifies(timeout=0)):
                                    fire()
                except psycopg.Error as exc:
                    self.listening.clear()
                    if delay == 0.0:
                        log.warning("LISTEN connection lost (%s); polling until it is back", exc)
                    delay = min(max(delay * 2, 0.1), 5.0)
                    until = time.monotonic() + delay * random.uniform(0.5, 1.0)
                    while not stop.is_set() and (left := until - time.monotonic()) > 0:
                        stop.wait(min(left, self.settings.poll_interval))
                        fire()
        finally:
            self.listening.clear()

    def _await_notification(self, waiting: selectors.BaseSelector) -> None:
        """Sleep until the LISTEN connection has input (a notification, or the server
        closing it) or stop is asked for. A long timeout only bounds a lost interrupt.
        A selector, not select(): it has no limit on descriptor numbers."""
        wake = self._wake[0]
        try:
            ready = waiting.select(LISTEN_IDLE)
        except (OSError, ValueError):  # the wake socket was closed: the broker is closing
            time.sleep(0.1)
            return
        if any(key.fileobj is wake for key, _ in ready):
            with contextlib.suppress(OSError):
                while wake.recv(64):
                    pass
