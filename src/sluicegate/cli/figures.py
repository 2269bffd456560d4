"""How figures read in a terminal: short ages, durations, rates and utilisation bars."""

from __future__ import annotations

from typing import Any


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
