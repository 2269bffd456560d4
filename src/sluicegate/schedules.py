"""Periodic jobs: a schedule's declaration, its cron ticks, and the missed-tick policy.

Cron expressions are parsed and walked by cronsim (the ``schedules`` extra), never by
code of ours; time zones come from zoneinfo. No I/O here: the worker's scheduler service
(``worker/services/scheduler.py``) reads each schedule's last tick from the broker and
asks this module which ticks are due; the broker enqueues each tick once (docs/schedules.md).
"""

from __future__ import annotations

import collections
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from .codec import encode_payload
from .errors import ConfigError, SerializationError
from .names import check_name

if TYPE_CHECKING:
    from cronsim import CronSim

MISSING = "periodic jobs need the cronsim package: pip install 'sluicegate[schedules]'"
MAX_CATCH_UP = 10_000
FIRST_WINDOW = 3600.0  # s: ticks are looked for this far back first, then twice as far


def _cronsim() -> type[CronSim]:
    try:
        from cronsim import CronSim
    except ImportError:  # an optional extra: say how to get it
        raise ConfigError(MISSING) from None
    return CronSim


def check_cron(name: str, cron: object) -> str:
    """``cron`` if cronsim accepts it (5 fields, or 6 with seconds first), else ConfigError."""
    if not isinstance(cron, str):
        raise ConfigError(f"schedule {name!r}: cron must be a string, not {cron!r}")
    if len(cron.split()) not in (5, 6):
        raise ConfigError(
            f"schedule {name!r}: cron {cron!r} has {len(cron.split())} fields; use 5 "
            "(minute hour day month weekday) or 6 (a seconds field first)"
        )
    walk = _cronsim()  # first: without the extra, say how to get it
    from cronsim import CronSimError

    try:
        next(iter(walk(cron, datetime.now(UTC))))
    except CronSimError as exc:
        raise ConfigError(f"schedule {name!r}: bad cron {cron!r}: {exc}") from None
    except StopIteration:
        raise ConfigError(f"schedule {name!r}: cron {cron!r} never fires") from None
    return cron


def check_tz(name: str, tz: object) -> ZoneInfo:
    if not isinstance(tz, str) or not tz:
        raise ConfigError(f"schedule {name!r}: tz must be an IANA time zone name, not {tz!r}")
    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError):
        raise ConfigError(
            f"schedule {name!r}: unknown time zone {tz!r} (an IANA name, e.g. 'Europe/Berlin')"
        ) from None


@dataclass(frozen=True, slots=True, eq=False)
class Schedule:
    """One periodic job: run ``task`` with ``args``/``kwargs`` at each tick of ``cron``,
    read in time zone ``tz``. ``catch_up``: after a gap with no worker, how many missed
    ticks before the latest due one are enqueued too (0, the default, is ``skip``)."""

    name: str
    task: str
    cron: str
    tz: str = "UTC"
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    queue: str | None = None
    catch_up: int = 0

    @classmethod
    def of(
        cls,
        name: str,
        task: str,
        cron: str,
        *,
        tz: str = "UTC",
        args: Sequence[Any] | None = None,
        kwargs: Mapping[str, Any] | None = None,
        queue: str | None = None,
        catch_up: int = 0,
    ) -> Schedule:
        """A checked schedule: every bad value is a ConfigError naming the schedule."""
        check_name("schedule", name)
        check_name("task", task)
        check_cron(name, cron)
        check_tz(name, tz)
        if queue is not None:
            check_name("queue", queue)
        if args is not None and (isinstance(args, str | bytes) or not isinstance(args, Sequence)):
            raise ConfigError(f"schedule {name!r}: args must be a list, not {args!r}")
        if kwargs is not None and not isinstance(kwargs, Mapping):
            raise ConfigError(f"schedule {name!r}: kwargs must be a table/dict, not {kwargs!r}")
        if isinstance(catch_up, bool) or not isinstance(catch_up, int) or catch_up < 0:
            raise ConfigError(
                f"schedule {name!r}: catch_up must be a whole number >= 0 (0 is skip), "
                f"not {catch_up!r}"
            )
        if catch_up > MAX_CATCH_UP:
            raise ConfigError(f"schedule {name!r}: catch_up is at most {MAX_CATCH_UP}")
        args_t, kwargs_d = tuple(args or ()), dict(kwargs or {})
        try:
            encode_payload(task, args_t, kwargs_d)  # JSON only: a bad argument is named now
        except SerializationError as exc:
            raise ConfigError(f"schedule {name!r}: {exc}") from None
        return cls(name, task, cron, tz, args_t, kwargs_d, queue, catch_up)

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.tz)

    def _walk(self, after: float) -> CronSim:
        """cronsim's ticks strictly after ``after`` (epoch s), in this schedule's zone."""
        start = datetime.fromtimestamp(math.floor(after), UTC).astimezone(self.zone)
        return _cronsim()(self.cron, start)

    def next_fire(self, after: float) -> float | None:
        """The first tick after ``after`` (epoch s); None if the cron never fires again."""
        try:
            return next(self._walk(after)).timestamp()
        except StopIteration:
            return None

    def ticks(self, after: float, until: float, most: int) -> list[float]:
        """The latest ``most`` ticks in ``(after, until]``, oldest first (epoch s).

        Walks forward from a window before ``until`` that doubles until it holds
        ``most`` ticks or reaches ``after``: a long outage of a per-second schedule costs
        a few thousand steps, not one per missed second."""
        window = FIRST_WINDOW
        while True:
            start = max(after, until - window)
            found: collections.deque[float] = collections.deque(maxlen=most)
            for when in self._walk(start):
                tick = when.timestamp()
                if tick > until:
                    break
                if tick > after:
                    found.append(tick)
            if len(found) >= most or start <= after:
                return list(found)
            window *= 2

    def due(self, last: float, now: float) -> list[float]:
        """The ticks to enqueue now, oldest first, given the last tick enqueued (or when the
        schedule was first seen): the latest due tick, and up to ``catch_up`` missed ones
        before it. A tick is missed when a later one is due too."""
        return self.ticks(last, now, self.catch_up + 1)

    def tick_key(self, tick: float) -> str:
        """The job's unique key for one tick: schedule name and the tick in UTC."""
        at = datetime.fromtimestamp(tick, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        return f"schedule:{self.name}:{at}"

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "task": self.task,
            "cron": self.cron,
            "tz": self.tz,
            "args": list(self.args),
            "kwargs": dict(self.kwargs),
            "queue": self.queue,
            "catch_up": self.catch_up,
        }
