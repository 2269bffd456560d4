"""A clock that moves only when told to: the time seam of tests (every broker takes
``clock=``), so a test about scheduled jobs advances time instead of sleeping."""

from __future__ import annotations

T0 = 1_700_000_000.0  # a fixed, exactly representable epoch for the fake clock


class FakeClock:
    """A clock that moves only when told to; pass it as ``clock=`` to a broker."""

    def __init__(self, start: float = T0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> float:
        """Move by ``seconds`` (tests of stale readings may go back); the new time."""
        self.now += seconds
        return self.now
