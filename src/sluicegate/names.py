"""Validation of queue, task and pool names, and of the numbers settings give.

Names travel through URLs, CLI specs (``NAME=QUEUE,QUEUE:SLOTS``) and metric labels,
so the charset excludes every separator those use.
"""

from __future__ import annotations

import math
import re

from .errors import ConfigError

NAME_PATTERN = re.compile(r"[A-Za-z0-9_.\-]{1,127}")
NAME_RULE = "1-127 characters from A-Z a-z 0-9 _ . -"


_seen: set[str] = set()  # names already checked: enqueue in bulk checks the same few


def check_name(kind: str, name: object) -> str:
    """Return ``name`` if it is a valid queue/task/pool name, else raise ConfigError."""
    if not isinstance(name, str):
        raise ConfigError(f"invalid {kind} name {name!r}: must be a string")
    if name in _seen:
        return name
    if NAME_PATTERN.fullmatch(name) is None:
        raise ConfigError(f"invalid {kind} name {name!r}: use {NAME_RULE}")
    if len(_seen) < 10_000:
        _seen.add(name)
    return name


def number_problem(value: object, minimum: float, integer: bool = False) -> str | None:
    """What is wrong with a setting's number (a settings-file key, a pool option), or
    None; one wording wherever a number is checked: "must be an integer >= 1, not 0".
    NaN and infinities (TOML has both) are never a setting's value."""
    kinds = (int,) if integer else (int, float)
    if (
        isinstance(value, bool)
        or not isinstance(value, kinds)
        or not math.isfinite(value)
        or value < minimum
    ):
        kind = "an integer" if integer else "a number"
        return f"must be {kind} >= {minimum:g}, not {value!r}"
    return None


# A worker's lease, in seconds: it is renewed every lease/3, so it must outlast a few
# broker round trips (shorter, and a busy worker's own jobs expire under it and run
# again); and it is how long a dead worker's jobs wait to come back (longer than a day,
# and they practically never do).
LEASE_RANGE = (0.5, 86_400.0)


def lease_problem(value: object) -> str | None:
    """What is wrong with a lease (``--lease``, ``lease =``, ``Worker(lease=)``), or None."""
    low, high = LEASE_RANGE
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or not low <= value <= high
    ):
        return f"must be a number of seconds from {low:g} to {high:g}, not {value!r}"
    return None
