"""The SQLite broker's wake-ups from other processes: a doorbell ring, and a change of
``PRAGMA data_version`` for writers that cannot ring it."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from ..doorbell import Bell, Doorbell

BELL_CHECK = 0.5  # with a doorbell: seconds between data_version checks for other writers


class Watcher:
    """The watch loop of the broker's Subscribers: ``run`` in its thread, ``interrupt`` to
    stop it promptly. ``bell`` is this process's bell while the loop listens on one."""

    def __init__(
        self,
        doorbell: Doorbell | None,
        poll_interval: float,
        data_version: Callable[[bool], int | None],
        check_with_bell: bool = True,
    ) -> None:
        """``check_with_bell`` False: while a bell listens, rings alone count (news that
        every writer rings, where any commit is no sign of it); data_version is then read
        only without a bell, every ``poll_interval``."""
        self.doorbell = doorbell
        self.poll_interval = poll_interval
        self._data_version = data_version
        self.check_with_bell = check_with_bell
        self.bell: Bell | None = None  # this process's, while someone is subscribed
        # Set once the loop listens (its bell bound, or none to bind): a ring from then
        # on is heard. A subscriber that must not miss one waits for it.
        self.listening = threading.Event()

    def ring_others(self) -> None:
        """Ring every other process waiting on this database."""
        if self.doorbell is not None:
            self.doorbell.ring()

    def run(self, stop: threading.Event, fire: Callable[[], None]) -> None:
        """Wake subscribers when another process commits work.

        On a doorbell ring at once; and on a change of PRAGMA data_version, which changes
        when another connection commits: checked every BELL_CHECK s with a doorbell (for
        writers that cannot ring it: another path to the same file, a folder they may not
        enter, an older version), every poll_interval without one. data_version is read on
        the writer connection, so this broker's own writes (which notify locally) never
        count; a check that finds the writer busy is skipped."""
        bell = self.doorbell.listen() if self.doorbell is not None else None
        self.bell = bell
        self.listening.set()
        checks = bell is None or self.check_with_bell
        try:
            last = self._data_version(True) if checks else None
            while not stop.is_set():
                if bell is not None:
                    rang = bell.wait(BELL_CHECK)
                else:  # time.sleep + is_set costs less CPU per turn than Event.wait
                    time.sleep(self.poll_interval)
                    rang = False
                if stop.is_set():
                    break
                version = self._data_version(False) if checks else None
                changed = version is not None and version != last
                if changed:
                    last = version
                if rang or changed:
                    fire()
        finally:
            self.listening.clear()
            if bell is not None:
                if self.bell is bell:  # a later watcher may already have its own
                    self.bell = None
                bell.close()

    def interrupt(self) -> None:
        bell = self.bell
        if bell is not None:
            bell.interrupt()

    def close(self) -> None:
        if self.doorbell is not None:
            self.doorbell.close()
