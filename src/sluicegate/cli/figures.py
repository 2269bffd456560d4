"""How figures read in a terminal: short ages, durations, rates and utilisation bars."""

from __future__ import annotations

from typing import Any


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


def rate(per_second: float | None) -> str:
    if per_second is None:
        return "-"
    if per_second < 10:
        return f"{per_second:.1f}"
    return f"{per_second:,.0f}"


def bar(fraction: float, width: int = 10) -> str:
    """A utilisation bar: ▇▇▇▇▇▁▁▁▁▁ for 0.5 (clamped to 0..1)."""
    filled = round(max(0.0, min(1.0, fraction)) * width)
    return "\u2587" * filled + "\u2581" * (width - filled)


def status(worker: dict[str, Any]) -> str:
    """A worker's status as shown: a live worker that fails its health check reads
    "unhealthy" (late, lost and stopped already say what is wrong)."""
    if worker["status"] == "live" and not worker["healthy"]:
        return "unhealthy"
    return str(worker["status"])
