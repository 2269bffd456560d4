"""What every service of the worker loop is: one job, a time it is next due, a run."""

from __future__ import annotations

from dataclasses import dataclass


class Service:
    """One job of the worker process, scheduled by its loop.

    The loop calls ``run(now)`` when ``due_in(now)`` is zero or less, in the order the
    services were registered, and otherwise sleeps until the nearest due time or a
    wake-up. ``None`` means nothing scheduled. While the broker is failing, services
    with ``uses_broker`` are held back until the shared backoff has passed.
    """

    uses_broker = True

    def start(self) -> None:
        """Called once before the loop's first turn."""

    def stop(self) -> None:
        """Called once after the loop's last turn (in reverse order of registration)."""

    def due_in(self, now: float) -> float | None:
        return None

    def run(self, now: float) -> None:
        """Do the work that is due; a broker error raised here starts the backoff."""

    def wake(self) -> None:
        """Jobs may have become ready (an enqueue here or elsewhere). Any thread."""

    def halt(self) -> None:
        """Shutdown began: start nothing new (claims, enqueues); finish what is held."""

    def drained(self) -> bool:
        """Nothing of this service's is in flight or waiting to be written (burst mode
        exits only when every service is drained and the pools' queues are empty)."""
        return True


@dataclass(slots=True)
class Counters:
    """What this worker process did, counted where it happens (read by tests and logs)."""

    claimed: int = 0
    succeeded: int = 0
    retried: int = 0
    dead: int = 0
    released: int = 0
    recovered: int = 0
    lease_lost: int = 0
    timed_out: int = 0
