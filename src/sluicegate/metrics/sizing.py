"""How many slots a queue needs, by Little's law: busy slots = jobs per second x mean
duration. Aim below 100% busy (``target``) so a burst queues briefly instead of piling up.

``declared`` sizes from figures an operator gives; ``observed`` from what live workers
measured, with notes on when more slots would not help: a full limit, or durations that
grow with concurrency (the dependency behind the pool is saturated). No I/O here.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from ..limits import parse_rate as parse_limit_rate
from . import histogram
from .cluster import arrival_rate, completion_rate, windows_of
from .schema import WINDOW_SECONDS, WINDOWS, Bin
from .status import current
from .windows import SLOT_SECONDS

if TYPE_CHECKING:
    from ..brokers.base import WorkerList

DEFAULT_TARGET = 0.8
GREW_FACTOR = 1.5  # mean duration at high concurrency over low that counts as growth
GREW_MIN_JOBS = 20  # jobs each end of the comparison needs before it says anything
LITTLE = "Little's law: slots = completions per second x mean duration"

_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|m|h)?\s*$")
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
_NUMBER = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*$")


@dataclass(frozen=True, slots=True)
class Sizing:
    """One sizing and the figures it came from; ``lines`` shows the arithmetic."""

    rate: float  # jobs per second
    duration_s: float  # mean
    target_utilisation: float = DEFAULT_TARGET
    duration_p50_s: float | None = None  # observed only
    duration_p95_s: float | None = None
    samples: int | None = None  # jobs the observed durations come from
    queue: str | None = None
    window: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def slots_exact(self) -> float:
        """Slots busy on average."""
        return self.rate * self.duration_s

    @property
    def slots_at_target(self) -> int:
        return slots_for(self.slots_exact, self.target_utilisation)

    def lines(self) -> list[str]:
        out = []
        if self.queue is not None:
            spread = ""
            if self.duration_p50_s is not None and self.duration_p95_s is not None:
                spread = (
                    f" (p50 {_secs(self.duration_p50_s)} s, p95 {_secs(self.duration_p95_s)} s"
                    f", from {self.samples} jobs)"
                )
            out.append(
                f"queue {self.queue}, last {self.window}: {_num(self.rate)} jobs/s, "
                f"mean duration {_secs(self.duration_s)} s{spread}"
            )
        out.append(
            f"{_num(self.rate)} jobs/s x {_secs(self.duration_s)} s = "
            f"{_slots(self.slots_exact)} slots busy on average ({LITTLE})"
        )
        out.append(
            f"at {_num(self.target_utilisation * 100)}% target utilisation: "
            f"{self.slots_at_target} slots"
        )
        return out + self.notes

    def to_dict(self) -> dict[str, Any]:
        return {
            "queue": self.queue,
            "window": self.window,
            "rate": self.rate,
            "duration_s": self.duration_s,
            "duration_p50_s": self.duration_p50_s,
            "duration_p95_s": self.duration_p95_s,
            "samples": self.samples,
            "slots_exact": self.slots_exact,
            "target_utilisation": self.target_utilisation,
            "slots_at_target": self.slots_at_target,
            "notes": list(self.notes),
        }


def slots_for(slots_exact: float, target: float) -> int:
    """Slots so that ``slots_exact`` of them keep them ``target`` busy, rounded up (a hair
    of float error above a whole number does not cost a slot)."""
    need = slots_exact / target
    return max(0, math.ceil(need - 1e-9 * max(1.0, need)))


def declared(rate: float, duration_s: float, target: float = DEFAULT_TARGET) -> Sizing:
    """Size from a rate (jobs/s) and a mean duration (s) the operator expects."""
    if not (math.isfinite(rate) and rate > 0):
        raise ValueError(f"rate must be a positive number of jobs per second, not {rate!r}")
    if not (math.isfinite(duration_s) and duration_s > 0):
        raise ValueError(f"duration must be a positive number of seconds, not {duration_s!r}")
    _check_target(target)
    return Sizing(rate=rate, duration_s=duration_s, target_utilisation=target)


# ---- parsing what an operator types ---------------------------------------------------
def parse_duration(text: str) -> float:
    """Seconds from "500ms", "0.5s", "2m", "1h" or a bare number of seconds ("1.5")."""
    match = _DURATION.match(text) if isinstance(text, str) else None
    if match is None:
        raise ValueError(
            f"duration must be a number with an optional unit (ms, s, m, h), like '500ms', "
            f"'0.5s', '2m' or '1.5' (seconds), not {text!r}"
        )
    number, unit = match.groups()
    return float(number) * _DURATION_UNITS[unit or "s"]


def parse_window(text: str) -> str:
    """One of the snapshot's windows: "1m", "5m" or "15m"."""
    window = text.strip() if isinstance(text, str) else text
    if window not in WINDOWS:
        raise ValueError(f"window must be one of {', '.join(WINDOWS)}, not {text!r}")
    return str(window)


def parse_rate(text: str) -> float:
    """Jobs per second from "100/s", "600/m", "5/2s" (as limits are written) or a bare
    number, read as per second."""
    if isinstance(text, str) and (match := _NUMBER.match(text)):
        return float(match.group(1))
    try:
        return parse_limit_rate(text)
    except ConfigError:
        raise ValueError(
            f"rate must be jobs per time like '100/s', '600/m', '5/2s' or '1000/h', "
            f"or a number per second, not {text!r}"
        ) from None


# ---- from what workers measured --------------------------------------------------------
def observed(
    view: dict[str, Any],
    workers: WorkerList,
    queue: str,
    window: str = "15m",
    target: float = DEFAULT_TARGET,
) -> Sizing:
    """Size ``queue`` from what workers measured over ``window``: the figures of live
    workers (and late ones, as ``cluster.fold`` counts them). ``view`` is ``cluster.fold``
    of the same ``workers``: its pools and limits feed the notes."""
    window = parse_window(window)
    _check_target(target)
    windows = windows_of((snap for _, snap in current(workers)), queue, window)
    if not windows:
        raise ValueError(
            f"no live worker has figures for queue {queue!r} (queues watched: "
            f"{', '.join(sorted(view.get('queues', {}))) or 'none'}); start a worker for it, "
            "or size it from expected figures instead (declared)"
        )
    notes = []
    covered = max(w["seconds"] for w in windows)
    # A window sums whole 10 s slots, so a full one covers between window - 10 s and the
    # window; shorter than that, the workers have not been up for the whole window.
    if covered < WINDOW_SECONDS[window] - SLOT_SECONDS - 0.5:
        notes.append(
            f"the figures cover only the last {covered:.0f} s (the workers' uptime), not {window}"
        )
    # Every worker watching the queue counts the same arrivals: the largest count is
    # the best one (a worker that started later saw fewer), never their sum.
    rate = max(arrival_rate(w) for w in windows)
    if not any(w["enqueued"] for w in windows):
        rate = sum(completion_rate(w) for w in windows)
        notes.append(
            f"no job arrived in queue {queue} in the last {window}: sized from completions "
            f"instead ({_num(rate)} jobs/s)"
        )
    durations = histogram.merge_all(w["duration"] for w in windows)
    mean = histogram.mean(durations)
    if mean is None:
        raise ValueError(
            f"no job of queue {queue!r} finished on a live worker in the last {window}: "
            "there is no duration to size from (try a longer window)"
        )
    needed = slots_for(rate * mean, target)
    notes += _slots_note(view, queue, needed, target)
    notes += _limit_notes(view)
    notes += _concurrency_notes(view, queue)
    return Sizing(
        rate=rate,
        duration_s=mean,
        target_utilisation=target,
        duration_p50_s=histogram.quantile(durations, 0.5),
        duration_p95_s=histogram.quantile(durations, 0.95),
        samples=durations["count"],
        queue=queue,
        window=window,
        notes=notes,
    )


def _slots_note(view: dict[str, Any], queue: str, needed: int, target: float) -> list[str]:
    serving = {
        name: pool for name, pool in view.get("pools", {}).items() if queue in pool["queues"]
    }
    if not serving:
        return [f"no live pool serves queue {queue}: {needed} slots needed"]
    slots = sum(pool["slots"] for pool in serving.values())
    gap = needed - slots
    verdict = f"short by {gap}" if gap > 0 else "enough" if gap == 0 else f"{-gap} to spare"
    note = (
        f"pools serving {queue} ({', '.join(sorted(serving))}) have {slots} slots now; "
        f"{needed} needed at {_num(target * 100)}%: {verdict}"
    )
    shared = sorted(name for name, pool in serving.items() if len(pool["queues"]) > 1)
    if shared:
        note += f" (pool {', '.join(shared)} also serves other queues: its slots are shared)"
    return [note]


def _limit_notes(view: dict[str, Any]) -> list[str]:
    """Limits holding ready jobs back. The snapshot does not say which queues' jobs name
    a limit, so each note says which limit and leaves the queue to the reader."""
    notes = []
    for name, limit in sorted(view.get("limits", {}).items()):
        if limit["waiting"] <= 0:
            continue
        concurrency = limit.get("concurrency")
        held = f"{limit['waiting']} ready jobs waiting for it (the oldest {limit['oldest_wait_s']:.1f} s)"
        if concurrency is not None and limit["in_use"] >= concurrency:
            why = f"limit {name} is full ({limit['in_use']} of {concurrency} in use) with {held}"
        elif limit.get("rate"):
            why = f"limit {name}'s rate ({limit['rate']}) holds back {held}"
        else:
            continue
        notes.append(
            f"a limit, not the pool, is the ceiling: {why}; more slots will not help the "
            "jobs that need it until the limit is raised"
        )
    return notes


def _concurrency_notes(view: dict[str, Any], queue: str) -> list[str]:
    notes = []
    for name, pool in sorted(view.get("pools", {}).items()):
        if queue not in pool["queues"]:
            continue
        grew = _grew(pool["by_concurrency"])
        if grew is None:
            continue
        low, low_mean, high, high_mean = grew
        notes.append(
            f"duration grew with concurrency in pool {name}: jobs started with {high} slots "
            f"busy took {_secs(high_mean)} s on average, with {low} busy {_secs(low_mean)} s "
            f"({high_mean / low_mean:.1f}x). The dependency behind it is saturated: more "
            "slots will not help, they make each job slower"
        )
    return notes


def _grew(bins: dict[str, Bin]) -> tuple[str, float, str, float] | None:
    """(low busy range, its mean, high busy range, its mean) when the highest third of
    occupied concurrency bins averages >= GREW_FACTOR x the lowest third, each end with
    at least GREW_MIN_JOBS jobs; None otherwise."""
    occupied = sorted((int(busy), b) for busy, b in bins.items() if busy.isdigit() and b["count"])
    if len(occupied) < 2:
        return None
    third = max(1, len(occupied) // 3)
    low, high = occupied[:third], occupied[-third:]
    low_n, high_n = (sum(b["count"] for _, b in end) for end in (low, high))
    if low_n < GREW_MIN_JOBS or high_n < GREW_MIN_JOBS:
        return None
    low_mean = sum(b["sum"] for _, b in low) / low_n
    high_mean = sum(b["sum"] for _, b in high) / high_n
    if low_mean <= 0 or high_mean < GREW_FACTOR * low_mean:
        return None
    return _span(low), low_mean, _span(high), high_mean


def _span(end: list[tuple[int, Bin]]) -> str:
    first, last = end[0][0], end[-1][0]
    return str(first) if first == last else f"{first}-{last}"


def _check_target(target: float) -> None:
    if isinstance(target, bool) or not (isinstance(target, int | float) and 0 < target <= 1):
        raise ValueError(
            f"target utilisation must be above 0 and at most 1 (0.8 = 80%), not {target!r}"
        )


# ---- formatting -----------------------------------------------------------------------
def _num(x: float) -> str:
    """3 significant figures or more, never an exponent: 100, 33.3, 0.0167."""
    text = f"{x:.4g}"
    if "e" in text:
        text = f"{x:.0f}" if abs(x) >= 1 else f"{x:.9f}".rstrip("0").rstrip(".")
    return text


def _secs(x: float) -> str:
    return f"{x:.3f}" if x >= 0.001 or x == 0 else f"{x:.3g}"


def _slots(x: float) -> str:
    return f"{x:.1f}" if x >= 1 or x == 0 else f"{x:.3g}"
