"""How busy a pool's slots were: busy slot-seconds per 10-second slot, integrated exactly.

The busy count is a step function that changes only when a job starts or ends, so its
integral needs no sampling: at each change the interval since the last one is added
(busy x seconds), split at slot boundaries. Reads integrate the open interval up to now
first, so a pool that has been fully busy for ten minutes without a change reads 100%.
A window covers whole slots (``windows.spans``): the figure is exact for the seconds it
covers, which are between (window - 10 s) and the window.
"""

from __future__ import annotations

import time

from .windows import SLOT_COUNT, SLOT_SECONDS, Clock, Ring, spans


class BusyTracker(Ring):
    """Utilisation of one pool of ``slots`` slots; ``change`` on every busy-count change."""

    def __init__(
        self, slots: int, clock: Clock = time.monotonic, start: float | None = None
    ) -> None:
        super().__init__(clock, start)
        self.slots = slots
        self.busy = 0
        self._since = 0.0  # integrated up to here (seconds since start)
        self._seconds = [0.0] * SLOT_COUNT  # busy slot-seconds per slot

    def _reset(self, index: int) -> None:
        self._seconds[index] = 0.0

    def change(self, busy_now: int, now: float | None = None) -> None:
        """The pool's busy count became ``busy_now`` (at ``now``, or the clock's time). A
        change reported late, dated before what is integrated already (a read, or a later
        change, came first), corrects the seconds since its time: the count was
        ``busy_now`` from then on, not the one integrated."""
        elapsed = (self._clock() if now is None else now) - self._start
        since = self._since
        if since <= elapsed < self._head_end:  # the hot path: within the newest slot
            self._seconds[self._index] += self.busy * (elapsed - since)
            self._since = self._elapsed = elapsed
        elif elapsed < since:
            self._correct(max(0.0, elapsed), since, busy_now - self.busy)
        else:
            self._integrate(self._now(now))
        self.busy = busy_now

    def _correct(self, lo: float, hi: float, delta: int) -> None:
        """Add ``delta`` x the seconds of [lo, hi] to the slots it spans that are still kept."""
        if not delta:
            return
        first = max(int(lo // SLOT_SECONDS), self._head - SLOT_COUNT + 1)
        for k in range(first, int(hi // SLOT_SECONDS) + 1):
            span = min(hi, (k + 1) * SLOT_SECONDS) - max(lo, k * SLOT_SECONDS)
            if span > 0:
                self._seconds[k % SLOT_COUNT] += delta * span

    def _integrate(self, elapsed: float) -> None:
        """Add busy x time from the last change up to ``elapsed`` into the slots it spans
        (only the last SLOT_COUNT of them: older ones have left every window)."""
        since, first = self._since, self._head  # the head is the slot holding ``since``
        if elapsed < self._head_end:  # the common case: the interval lies in the newest slot
            if elapsed > since:
                self._seconds[self._index] += self.busy * (elapsed - since)
                self._since = elapsed
            return
        self._slot(elapsed)  # resets the slots entered since
        busy = self.busy
        if busy and elapsed > since:
            last = int(elapsed // SLOT_SECONDS)
            for k in range(max(first, last - SLOT_COUNT + 1), last + 1):
                lo = max(since, k * SLOT_SECONDS)
                hi = min(elapsed, (k + 1) * SLOT_SECONDS)
                if hi > lo:
                    self._seconds[k % SLOT_COUNT] += busy * (hi - lo)
        self._since = elapsed

    def utilisation(self, now: float | None = None) -> dict[str, float]:
        """Per window: busy slot-seconds / (slots x seconds covered), 0..1 (0 when the
        window covers no time yet or the pool has no slots)."""
        elapsed = self._now(now)
        self._integrate(elapsed)
        index = self._head % SLOT_COUNT
        windows = spans(elapsed)
        running, cumulative = 0.0, []
        for back in range(max(n for n, _ in windows.values())):  # newest first
            running += self._seconds[(index - back) % SLOT_COUNT]
            cumulative.append(running)
        out: dict[str, float] = {}
        for w, (n, seconds) in windows.items():
            capacity = self.slots * seconds
            out[w] = min(1.0, max(0.0, cumulative[n - 1] / capacity)) if capacity > 0 else 0.0
        return out
