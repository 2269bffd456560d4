"""How a time reads as short text, the same in the terminal and on the dashboard: ages
(0.4s, 12s, 3.5m, 2.0h, 3.1d) and job durations (0.8ms, 20ms, 1.5s)."""

from __future__ import annotations


def age(seconds: float | None) -> str:
    """0.4s, 12s, 3.5m, 2.0h, 3.1d: two or three significant characters."""
    if seconds is None:
        return "-"
    if seconds < 10:
        return f"{seconds:.1f}s"
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.1f}m"
    if seconds < 172_800:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86_400:.1f}d"


def ms(seconds: float | None) -> str:
    """A job duration: 0.8ms, 20ms, 1.5s."""
    if seconds is None:
        return "-"
    if seconds < 0.01:
        return f"{seconds * 1000:.1f}ms"
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    return age(seconds)
