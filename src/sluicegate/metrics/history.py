"""The last hour, cluster-wide and minute by minute, for charts (the web dashboard).

Folded from the ``history`` each worker publishes in its snapshot (``schema.History``),
so a chart shows the whole hour as soon as it opens, not only since its reader started.
Every registry row counts whose history covers part of the hour: live workers, and gone
ones (stopped or lost) through their last snapshot, since the last hour includes the
work of a worker that stopped ten minutes ago. Rows without a history (workers of an
older release) are skipped. Buckets start on whole epoch minutes on every worker; one
whose clock is off the broker's by half a minute or more (its ``until`` against the
row's ``last_seen``, on the broker's clock) is shifted by whole minutes.

How one minute combines across workers:

- completions and failed attempts add up, and are divided by the seconds of the minute
  that any worker watching the queue covered (the union), so a worker that started or
  stopped within the minute neither dilutes nor inflates the rate;
- the oldest ready age is the largest any worker sampled (they sample the same queue);
- utilisation is weighted by slot-seconds covered: sum(u x slots x seconds) /
  sum(slots x seconds), which over whole minutes is the slot-weighted mean.

A minute no worker covered is None (a gap in the chart), never 0. The newest point is
the current minute, so far.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypedDict, TypeVar

from .minutes import STEP_S, covered
from .schema import History
from .status import snapshot_of

if TYPE_CHECKING:
    from ..brokers.base import WorkerList, WorkerRecord

T = TypeVar("T")

POINTS = 60  # one per minute: the last hour


class QueueSeries(TypedDict):
    completed_per_s: list[float | None]  # jobs finished (succeeded or dead) per second
    failed_per_s: list[float | None]  # failed attempts (retried or dead) per second
    oldest_ready_age_s: list[float | None]  # the largest sampled in the minute


class PoolSeries(TypedDict):
    utilisation: list[float | None]  # busy slot-seconds / slot-seconds, 0..1


class ClusterHistory(TypedDict):
    step_s: int  # 60
    start: int  # epoch s (broker clock) the first point's minute starts at
    now: float  # the time the series end at: the last point is the minute holding it
    workers: int  # how many workers' histories went in
    queues: dict[str, QueueSeries]  # each list: one entry per minute, oldest first
    pools: dict[str, PoolSeries]


@dataclass(slots=True)
class _Covered:
    """One worker's history, on the broker's clock."""

    since: float
    until: float
    newest: int  # epoch minute of its newest bucket
    history: History
    slots: dict[str, int]


def history(workers: WorkerList, now: float | None = None, points: int = POINTS) -> ClusterHistory:
    """The cluster's last ``points`` minutes up to ``now`` (default: the broker's clock
    when ``workers`` was read). Pass ``broker.list_workers()`` (it keeps gone workers
    for an hour by default)."""
    now = workers.now if now is None else now
    last = int(now // STEP_S)
    first = last - points + 1
    rows = [w for record in workers.workers if (w := _covered(record)) is not None]
    rows = [w for w in rows if w.until > first * STEP_S and w.since < (last + 1) * STEP_S]
    minutes = range(first, last + 1)
    queues = sorted({name for w in rows for name in w.history["queues"]})
    pools = sorted({name for w in rows for name in w.history["pools"] if name in w.slots})
    return {
        "step_s": STEP_S,
        "start": first * STEP_S,
        "now": now,
        "workers": len(rows),
        "queues": {name: _queue(name, rows, minutes) for name in queues},
        "pools": {name: _pool(name, rows, minutes) for name in pools},
    }


def _covered(record: WorkerRecord) -> _Covered | None:
    """The row's history placed on the broker's clock, or None without one (a worker of
    an older release) or with one of another step."""
    snap = snapshot_of(record)
    hist = snap.get("history") if snap is not None else None
    if snap is None or hist is None or hist.get("step_s") != STEP_S:
        return None
    shift = round((record.last_seen - hist["until"]) / STEP_S) * STEP_S
    slots = {name: fig["slots"] for name, fig in snap["pools"].items()}
    return _Covered(
        since=hist["since"] + shift,
        until=hist["until"] + shift,
        newest=(hist["newest"] + shift) // STEP_S,
        history=hist,
        slots=slots,
    )


def _entries(w: _Covered, series: Sequence[T] | None, minutes: range) -> list[tuple[int, T]]:
    """(index into ``minutes``, value) for the entries of one list that fall in them;
    the list ends at the worker's newest minute."""
    if series is None:
        return []
    out = []
    for back, value in enumerate(reversed(series)):
        minute = w.newest - back
        if minute < minutes.start:
            break
        if minute < minutes.stop:
            out.append((minute - minutes.start, value))
    return out


def _spans(w: _Covered, minutes: range) -> list[tuple[int, float]]:
    """(index into ``minutes``, seconds covered) for the minutes the worker covered."""
    out = []
    for j, minute in enumerate(minutes):
        seconds = covered(minute, w.since, w.until)
        if seconds > 0:
            out.append((j, seconds))
    return out


def _union(intervals: list[tuple[float, float]], minute: int) -> float:
    """Seconds of ``minute`` inside any of ``intervals``."""
    start = minute * STEP_S
    clipped = sorted(
        (max(lo, start), min(hi, start + STEP_S))
        for lo, hi in intervals
        if hi > start and lo < start + STEP_S
    )
    total, reached = 0.0, float(start)
    for lo, hi in clipped:
        if hi > reached:
            total += hi - max(lo, reached)
            reached = hi
    return total


def _queue(name: str, rows: list[_Covered], minutes: range) -> QueueSeries:
    n = len(minutes)
    completed, failed = [0.0] * n, [0.0] * n
    ages: list[float | None] = [None] * n
    intervals: list[tuple[float, float]] = []
    for w in rows:
        q = w.history["queues"].get(name)
        if q is None:
            continue
        intervals.append((w.since, w.until))
        for j, count in _entries(w, q.get("completed"), minutes):
            completed[j] += count
        for j, count in _entries(w, q.get("failed"), minutes):
            failed[j] += count
        sampled: list[tuple[int, float | None]]
        if "oldest_ready_age_s" in q:
            sampled = _entries(w, q["oldest_ready_age_s"], minutes)
        else:  # left out: 0 in every minute it covered
            sampled = [(j, 0.0) for j, _ in _spans(w, minutes)]
        for j, age in sampled:
            best = ages[j]
            if age is not None and (best is None or age > best):
                ages[j] = age
    union = [_union(intervals, minute) for minute in minutes]
    return {
        "completed_per_s": [_rate(c, s) for c, s in zip(completed, union, strict=True)],
        "failed_per_s": [_rate(f, s) for f, s in zip(failed, union, strict=True)],
        "oldest_ready_age_s": [None if a is None else round(a, 1) for a in ages],
    }


def _pool(name: str, rows: list[_Covered], minutes: range) -> PoolSeries:
    n = len(minutes)
    busy, capacity = [0.0] * n, [0.0] * n
    for w in rows:
        p = w.history["pools"].get(name)
        slots = w.slots.get(name, 0)
        if p is None or slots <= 0:
            continue
        given = dict(_entries(w, p.get("utilisation"), minutes))
        for j, seconds in _spans(w, minutes):
            weight = slots * seconds
            busy[j] += (given.get(j) or 0.0) * weight
            capacity[j] += weight
    return {
        "utilisation": [
            round(b / c, 3) if c > 0 else None for b, c in zip(busy, capacity, strict=True)
        ]
    }


def _rate(count: float, seconds: float) -> float | None:
    return round(count / seconds, 4) if seconds > 0 else None
