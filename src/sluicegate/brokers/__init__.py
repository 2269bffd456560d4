"""Broker selection by URL: ``memory://``, ``sqlite:///PATH`` (later ``postgresql://``)."""

from __future__ import annotations

from .base import Broker, QueueStats, Recovery, Retention, Stats

SCHEMES = ("memory", "sqlite", "postgresql")


def broker_from_url(url: str) -> Broker:
    """Open the broker a URL names; ConfigError for an unknown scheme or bad URL."""
    from ..errors import ConfigError

    scheme, sep, _ = url.partition("://")
    if not sep:
        raise ConfigError(
            f"invalid broker URL {url!r}: expected SCHEME://..., one of {', '.join(SCHEMES)}"
        )
    if scheme == "memory":
        from .memory import MemoryBroker

        return MemoryBroker(url)
    if scheme == "sqlite":
        from .sqlite import SQLiteBroker

        return SQLiteBroker(url)
    if scheme in ("postgresql", "postgres"):
        from .postgres import PostgresBroker

        return PostgresBroker(url)
    raise ConfigError(
        f"unknown broker URL scheme {scheme!r} in {url!r}: use one of {', '.join(SCHEMES)}"
    )


__all__ = ["Broker", "QueueStats", "Recovery", "Retention", "Stats", "broker_from_url"]
