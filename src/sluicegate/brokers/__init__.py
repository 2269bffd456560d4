"""Brokers by URL scheme: ``memory://``, ``sqlite:///PATH``, ``postgresql://...``.

A broker is one module with a ``Broker`` subclass taking the URL, plus one entry in
``BROKERS``. Modules are imported only when their scheme is used, so a broker's
optional dependencies (psycopg) are needed only by those who use it. A broker of
another package registers its scheme with an entry point in the group
``sluicegate.brokers`` (``myscheme = "mypackage.broker:MyBroker"``), which every process
sees, worker children included.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from .base import (
    Broker,
    PausedQueue,
    QueueDepth,
    QueueStats,
    Recovery,
    Retention,
    ScheduleState,
    ScheduleStates,
    Stats,
    WorkerInfo,
    WorkerList,
    WorkerRecord,
)

# URL scheme -> "module:Class", relative to this package.
BROKERS: dict[str, str] = {
    "memory": ".memory:MemoryBroker",
    "sqlite": ".sqlite:SQLiteBroker",
    "postgresql": ".postgres:PostgresBroker",
}
ALIASES = {"postgres": "postgresql"}  # other spellings of a scheme
ENTRY_POINTS = "sluicegate.brokers"  # other packages' brokers: scheme = "module:Class"


def broker_class(scheme: str) -> Callable[[str], Broker]:
    """The broker class registered for ``scheme`` (it takes the URL); KeyError if unknown."""
    scheme = ALIASES.get(scheme, scheme)
    if scheme not in BROKERS:
        found = _entry_points(name=scheme)
        if not found:
            raise KeyError(scheme)
        cls: Callable[[str], Broker] = next(iter(found)).load()
        return cls
    module, _, name = BROKERS[scheme].partition(":")
    cls = getattr(importlib.import_module(module, __name__), name)
    return cls


def known_schemes() -> list[str]:
    """Every scheme a URL may use: this package's, then those of installed packages."""
    return [*BROKERS, *sorted({e.name for e in _entry_points()} - set(BROKERS))]


def _entry_points(name: str | None = None) -> Any:
    """Installed packages' brokers. importlib.metadata is imported only here: it costs
    every process ~20 ms to import, and most URLs name a built-in scheme."""
    from importlib.metadata import entry_points

    found = entry_points(group=ENTRY_POINTS)
    return found if name is None else found.select(name=name)


def broker_from_url(url: str) -> Broker:
    """Open the broker a URL names; ConfigError for an unknown scheme or bad URL."""
    from ..errors import ConfigError

    scheme, sep, _ = url.partition("://")
    if not sep:
        known = ", ".join(known_schemes())
        raise ConfigError(f"invalid broker URL {url!r}: expected SCHEME://..., one of {known}")
    try:
        cls = broker_class(scheme)
    except KeyError:
        known = ", ".join(known_schemes())
        raise ConfigError(
            f"unknown broker URL scheme {scheme!r} in {url!r}: use one of {known}"
        ) from None
    return cls(url)


__all__ = [
    "BROKERS",
    "Broker",
    "PausedQueue",
    "QueueDepth",
    "QueueStats",
    "Recovery",
    "Retention",
    "ScheduleState",
    "ScheduleStates",
    "Stats",
    "WorkerInfo",
    "WorkerList",
    "WorkerRecord",
    "broker_class",
    "broker_from_url",
    "known_schemes",
]
