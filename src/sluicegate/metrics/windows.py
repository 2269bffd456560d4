"""Recent figures (the last 1, 5 and 15 minutes) from rings of 10-second slots.

A ring holds 90 slots; the slot of a moment is fixed by the time since the ring started,
so recording is one clock read, one index and one addition. Slots left behind are reset
lazily when the ring next moves (a recording or a read), never by a timer: after any
idle gap, even one far longer than 15 minutes, the ring resets what the gap passed over
(at most every slot once) and reads as if it had been kept up to date.

A window sums whole slots: the current, partly elapsed one and the full ones before it,
so it covers between (window - 10 s) and the window (less while the ring is younger).
``spans`` gives the seconds really covered, which is what a rate must divide by.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from .histogram import Histogram
from .schema import WINDOW_SECONDS, WINDOWS

Clock = Callable[[], float]

SLOT_SECONDS = 10.0
SLOT_COUNT = round(WINDOW_SECONDS[WINDOWS[-1]] / SLOT_SECONDS)  # 90: the longest window
WINDOW_SLOTS = {w: round(WINDOW_SECONDS[w] / SLOT_SECONDS) for w in WINDOWS}


def spans(elapsed: float) -> dict[str, tuple[int, float]]:
    """Per window: how many slots (newest first) it sums, and the seconds they cover, for
    a ring that started ``elapsed`` seconds ago."""
    current = int(elapsed // SLOT_SECONDS)
    into = elapsed - current * SLOT_SECONDS  # seconds of the current slot so far
    out: dict[str, tuple[int, float]] = {}
    for w in WINDOWS:
        n = WINDOW_SLOTS[w]
        out[w] = (min(n, current + 1), min(elapsed, (n - 1) * SLOT_SECONDS + into))
    return out


class Ring:
    """The clock and slot bookkeeping shared by every ring; subclasses hold the slots."""

    def __init__(self, clock: Clock = time.monotonic, start: float | None = None) -> None:
        self._clock = clock
        self._start = clock() if start is None else start
        self._elapsed = 0.0  # the latest time seen, since start; it never goes back
        self._head = 0  # the absolute number of the newest slot reached
        self._index = 0  # its place in the ring
        self._head_end = SLOT_SECONDS  # where it ends (seconds since start)

    def _now(self, now: float | None) -> float:
        """Seconds since start at ``now`` (read from the clock when None). A time before
        the latest one seen reads as that one, so a slot once left is never written again."""
        elapsed = (self._clock() if now is None else now) - self._start
        if elapsed > self._elapsed:
            self._elapsed = elapsed
        return self._elapsed

    def _slot(self, elapsed: float) -> int:
        """The ring index for ``elapsed``, after resetting the slots moved past since the
        last call (at most the whole ring, however long the gap)."""
        if elapsed < self._head_end:  # the common case: still in the newest slot
            return self._index
        k = int(elapsed // SLOT_SECONDS)
        head = self._head
        if k > head:
            for i in range(max(head + 1, k - SLOT_COUNT + 1), k + 1):
                self._reset(i % SLOT_COUNT)
            self._head = k
            self._index = k % SLOT_COUNT
            self._head_end = (k + 1) * SLOT_SECONDS
        return self._index

    def _reset(self, index: int) -> None:
        raise NotImplementedError


class CountWindow(Ring):
    """Events per slot (jobs stored, jobs completed)."""

    def __init__(self, clock: Clock = time.monotonic, start: float | None = None) -> None:
        super().__init__(clock, start)
        self._slots = [0] * SLOT_COUNT

    def _reset(self, index: int) -> None:
        self._slots[index] = 0

    def add(self, n: int = 1, now: float | None = None) -> None:
        elapsed = (self._clock() if now is None else now) - self._start
        if self._elapsed <= elapsed < self._head_end:  # the hot path: the newest slot
            self._elapsed = elapsed
            self._slots[self._index] += n
        else:
            self._slots[self._slot(self._now(now))] += n

    def totals(self, now: float | None = None) -> dict[str, tuple[int, float]]:
        """Per window: the events in it and the seconds it covers."""
        elapsed = self._now(now)
        index = self._slot(elapsed)
        windows = spans(elapsed)
        slots, running, cumulative = self._slots, 0, []
        for back in range(max(n for n, _ in windows.values())):  # newest first
            running += slots[(index - back) % SLOT_COUNT]
            cumulative.append(running)
        return {w: (cumulative[n - 1], s) for w, (n, s) in windows.items()}


class HistWindow(Ring):
    """A histogram per slot (durations, waits); a window's histogram is their merge."""

    def __init__(self, clock: Clock = time.monotonic, start: float | None = None) -> None:
        super().__init__(clock, start)
        self._slots = [Histogram() for _ in range(SLOT_COUNT)]

    def _reset(self, index: int) -> None:
        self._slots[index].clear()

    def observe(self, value: float, now: float | None = None) -> None:
        elapsed = (self._clock() if now is None else now) - self._start
        if self._elapsed <= elapsed < self._head_end:  # the hot path: the newest slot
            self._elapsed = elapsed
            self._slots[self._index].observe(value)
        else:
            self._slots[self._slot(self._now(now))].observe(value)

    def totals(self, now: float | None = None) -> dict[str, tuple[Histogram, float]]:
        """Per window: a new histogram of the observations in it, and the seconds it covers."""
        elapsed = self._now(now)
        index = self._slot(elapsed)
        windows = spans(elapsed)
        merged, out = Histogram(), {}
        for back in range(max(n for n, _ in windows.values())):  # newest first
            slot = self._slots[(index - back) % SLOT_COUNT]
            if slot.count:
                merged.merge(slot)
            for w, (n, s) in windows.items():
                if n == back + 1:
                    out[w] = (merged.copy(), s)
        return out
