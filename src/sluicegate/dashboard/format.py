"""How figures and job data read on a page: short ages, durations, rates, times in UTC,
and JSON values cut to a size a browser shows comfortably. Every function returns plain
text; the templates escape it (autoescape), so nothing here builds markup."""

from __future__ import annotations

import json
import time
from typing import Any

from ..units import age as age
from ..units import ms as ms

SHOWN_CHARS = 20_000  # a value's JSON shown on the job page; the rest is in its JSON view
CELL_CHARS = 120  # a value in a table cell


def rate(per_second: float | None) -> str:
    if per_second is None:
        return "-"
    if per_second < 10:
        return f"{per_second:.1f}/s"
    return f"{per_second:,.0f}/s"


def pct(fraction: float | None) -> str:
    return "-" if fraction is None else f"{100 * fraction:.0f}%"


def count(n: int | None) -> str:
    return "-" if n is None else f"{n:,}"


def when(epoch: float | None) -> str:
    """2026-12-01 09:00:01Z: the broker's clock, in UTC."""
    if epoch is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(epoch))


def iso(epoch: float | None) -> str:
    """For a <time datetime=...> attribute."""
    if epoch is None:
        return ""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def ago(epoch: float | None, now: float) -> str:
    if epoch is None:
        return "-"
    delta = now - epoch
    return f"in {age(-delta)}" if delta < 0 else f"{age(delta)} ago"


def pretty(value: Any, limit: int = SHOWN_CHARS) -> str:
    """JSON, indented, cut at ``limit`` characters with a note of how much was left out."""
    text = json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False, default=repr)
    return cut(text, limit)


def cut(text: str | None, limit: int = CELL_CHARS) -> str:
    """At most ``limit`` characters of ``text``, saying how many more there were."""
    if text is None:
        return ""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\u2026 ({len(text) - limit:,} more characters)"


def brief(value: Any, limit: int = CELL_CHARS) -> str:
    """A compact one-line JSON of ``value`` for a table cell."""
    return cut(json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=repr), limit)


FILTERS = {
    "age": age,
    "ms": ms,
    "rate": rate,
    "pct": pct,
    "count": count,
    "when": when,
    "iso": iso,
    "pretty": pretty,
    "cut": cut,
    "brief": brief,
}
