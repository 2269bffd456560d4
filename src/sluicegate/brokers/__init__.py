"""Brokers by URL scheme: ``memory://``, ``sqlite:///PATH``, ``postgresql://...``.

A broker is one module with a ``Broker`` subclass taking the URL, plus one entry in
``BROKERS``. Modules are imported only when their scheme is used, so a broker's
optional dependencies (psycopg) are needed only by those who use it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from .base import Broker, QueueStats, Recovery, Retention, Stats

# URL scheme -> "module:Class", relative to this package.
BROKERS: dict[str, str] = {
    "memory": ".memory:MemoryBroker",
    "sqlite": ".sqlite:SQLiteBroker",
    "postgresql": ".postgres:PostgresBroker",
}
ALIASES = {"postgres": "postgresql"}  # other spellings of a scheme


def broker_class(scheme: str) -> Callable[[str], Broker]:
    """The broker class registered for ``scheme`` (it takes the URL); KeyError if unknown."""
    module, _, name = BROKERS[ALIASES.get(scheme, scheme)].partition(":")
    cls: Callable[[str], Broker] = getattr(importlib.import_module(module, __name__), name)
    return cls


def broker_from_url(url: str) -> Broker:
    """Open the broker a URL names; ConfigError for an unknown scheme or bad URL."""
    from ..errors import ConfigError

    scheme, sep, _ = url.partition("://")
    known = ", ".join(BROKERS)
    if not sep:
        raise ConfigError(f"invalid broker URL {url!r}: expected SCHEME://..., one of {known}")
    if ALIASES.get(scheme, scheme) not in BROKERS:
        raise ConfigError(f"unknown broker URL scheme {scheme!r} in {url!r}: use one of {known}")
    return broker_class(scheme)(url)


__all__ = [
    "BROKERS",
    "Broker",
    "QueueStats",
    "Recovery",
    "Retention",
    "Stats",
    "broker_class",
    "broker_from_url",
]
