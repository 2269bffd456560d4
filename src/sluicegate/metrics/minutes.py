"""The last hour, minute by minute, in buckets aligned on the wall clock.

A dashboard charts the last hour from the workers' snapshots, so each worker keeps 60
one-minute buckets whose edges are whole minutes of the epoch: the buckets of workers
started at different seconds line up and can be summed. Recording takes the recorder's
monotonic times (the dispatcher's own readings); ``offset`` (wall clock minus monotonic
clock) maps them onto the epoch. The recorder measures it at start and again at each
snapshot and ``rebase``s when the wall clock was stepped, which moves later buckets,
never one already left.

As in ``windows``: recording into the newest bucket is one comparison and one addition;
buckets left behind are reset lazily when a ring next moves, at most all 60 once,
however long the gap. Not thread-safe, like the recorder.
"""

from __future__ import annotations

STEP_S = 60  # seconds per bucket
BUCKETS = 60  # buckets kept: the last hour, the newest (current, partial) one included


class MinuteRing:
    """The epoch-minute bookkeeping shared by every ring; subclasses hold the buckets."""

    __slots__ = ("_end", "_head", "_index", "_offset")

    def __init__(self, offset: float, now: float) -> None:
        self._offset = offset
        self._head = int((now + offset) // STEP_S)  # the epoch minute of the newest bucket
        self._index = self._head % BUCKETS  # its place in the ring
        self._end = (self._head + 1) * STEP_S - offset  # when it ends, on the monotonic clock

    @property
    def head(self) -> int:
        """The epoch minute (epoch seconds // 60) of the newest bucket reached."""
        return self._head

    def rebase(self, offset: float) -> None:
        """The wall clock now reads ``offset`` ahead of the monotonic one. A clock stepped
        back keeps recording into the newest bucket until it reaches the next minute."""
        self._offset = offset
        self._end = (self._head + 1) * STEP_S - offset

    def _slot(self, now: float) -> int:
        """The ring index for ``now``, after resetting the buckets moved past since the
        last call. A time before the newest bucket's end reads as in it."""
        if now >= self._end:
            self.advance(int((now + self._offset) // STEP_S))
        return self._index

    def advance(self, minute: int) -> None:
        """Make epoch minute ``minute`` the newest bucket, resetting those it passes (at
        most all of them once); never back."""
        head = self._head
        if minute > head:
            for m in range(max(head + 1, minute - BUCKETS + 1), minute + 1):
                self._reset(m % BUCKETS)
            self._head = minute
            self._index = minute % BUCKETS
            self._end = (minute + 1) * STEP_S - self._offset

    def _newest_first(self, count: int) -> list[int]:
        """The ring indexes of the newest ``count`` buckets, oldest first (sic: the name
        says which end ``count`` counts from)."""
        head = self._head
        return [(head - back) % BUCKETS for back in range(min(count, BUCKETS) - 1, -1, -1)]

    def _reset(self, index: int) -> None:
        raise NotImplementedError


class MinuteCounts(MinuteRing):
    """Events per minute (jobs completed, failed attempts)."""

    __slots__ = ("_slots",)

    def __init__(self, offset: float, now: float) -> None:
        super().__init__(offset, now)
        self._slots = [0] * BUCKETS

    def _reset(self, index: int) -> None:
        self._slots[index] = 0

    def add(self, now: float) -> None:
        if now < self._end:  # the hot path: the newest bucket
            self._slots[self._index] += 1
        else:
            self._slots[self._slot(now)] += 1

    def series(self, minute: int, count: int) -> list[int]:
        """The ``count`` buckets up to epoch minute ``minute`` (see ``advance``), oldest first."""
        self.advance(minute)
        return [self._slots[i] for i in self._newest_first(count)]


class MinuteMax(MinuteRing):
    """The largest value sampled per minute (the oldest ready job's age); None: no sample."""

    __slots__ = ("_slots",)

    def __init__(self, offset: float, now: float) -> None:
        super().__init__(offset, now)
        self._slots: list[float | None] = [None] * BUCKETS

    def _reset(self, index: int) -> None:
        self._slots[index] = None

    def observe(self, value: float, now: float) -> None:
        index = self._slot(now)
        old = self._slots[index]
        if old is None or value > old:
            self._slots[index] = value

    def series(self, minute: int, count: int) -> list[float | None]:
        self.advance(minute)
        return [self._slots[i] for i in self._newest_first(count)]


class MinuteBusy(MinuteRing):
    """Busy slot-seconds per minute, integrated exactly as ``utilisation.BusyTracker``
    does: the busy count is a step function, so each change adds busy x the seconds since
    the last one, split at minute edges; a read integrates up to now first."""

    __slots__ = ("_seconds", "_since", "busy")

    def __init__(self, offset: float, now: float) -> None:
        super().__init__(offset, now)
        self.busy = 0
        self._since = now  # integrated up to here (monotonic)
        self._seconds = [0.0] * BUCKETS

    def _reset(self, index: int) -> None:
        self._seconds[index] = 0.0

    def change(self, busy_now: int, now: float) -> None:
        """The pool's busy count became ``busy_now`` at ``now``; one reported late (before
        ``since``) corrects the seconds since its time, as ``BusyTracker.change`` does."""
        since = self._since
        if since <= now < self._end:  # the hot path: within the newest bucket
            self._seconds[self._index] += self.busy * (now - since)
            self._since = now
        elif now < since:
            self._correct(now, since, busy_now - self.busy)
        else:
            self._integrate(now)
        self.busy = busy_now

    def _correct(self, lo: float, hi: float, delta: int) -> None:
        """Add ``delta`` x the seconds of [lo, hi] (monotonic) to the buckets it spans
        that are kept (time after the newest bucket's start counts in it)."""
        if not delta:
            return
        head, offset = self._head, self._offset
        first = max(int((lo + offset) // STEP_S), head - BUCKETS + 1)
        for m in range(first, min(int((hi + offset) // STEP_S), head) + 1):
            top = hi if m == head else min(hi, (m + 1) * STEP_S - offset)
            span = top - max(lo, m * STEP_S - offset)
            if span > 0:
                self._seconds[m % BUCKETS] += delta * span

    def _integrate(self, now: float) -> None:
        """Add busy x time from the last change up to ``now`` into the buckets it spans
        (only the last BUCKETS of them; time before the newest bucket, after a rebase,
        counts in it)."""
        since = self._since
        if now <= since:  # a reading from before the last one: nothing to add
            return
        first = self._head  # the bucket holding ``since``
        self._slot(now)  # resets the buckets entered since
        busy, last, offset = self.busy, self._head, self._offset
        if busy:
            for m in range(max(first, last - BUCKETS + 1), last + 1):
                lo = since if m == first else max(since, m * STEP_S - offset)
                hi = min(now, (m + 1) * STEP_S - offset) if m < last else now
                if hi > lo:
                    self._seconds[m % BUCKETS] += busy * (hi - lo)
        self._since = now

    def seconds(self, now: float, minute: int, count: int) -> list[float]:
        """Busy slot-seconds of the ``count`` buckets up to epoch minute ``minute``, oldest
        first, integrated up to ``now``."""
        self._integrate(now)
        self.advance(minute)
        return [self._seconds[i] for i in self._newest_first(count)]


def covered(minute: int, since: float, until: float) -> float:
    """Seconds of epoch minute ``minute`` within [since, until] (epoch seconds)."""
    start = minute * STEP_S
    return max(0.0, min(until, start + STEP_S) - max(since, start))
