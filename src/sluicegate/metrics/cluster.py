"""The whole system's view, folded from every worker's last snapshot (JSON-safe).

Only live and late workers' figures count towards queues, pools, tasks, hosts and
limits: a lost or stopped worker's snapshot describes a process that is gone. Every row
is still listed under ``workers``, so an operator sees who went away.

How figures combine across workers:

- Arrivals are seen by every worker that watches a queue (each samples the broker), so
  a queue's enqueue rate is the largest any worker saw, never the sum.
- Completions, slots, busy slots and task counters are each worker's own: they add up.
- Histograms merge bucket by bucket; quantiles come from the merged histogram.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from . import histogram
from .schema import WINDOWS, Bin, Hist, QueueFigures, QueueWindow, Snapshot, TaskFigures
from .status import LIVE, LOST, STOPPED, current, health_of, snapshot_of, worker_status

if TYPE_CHECKING:
    from ..brokers.base import QueueDepth, WorkerList, WorkerRecord

RATE_WINDOW = "1m"  # the window of the view's rates and recent quantiles
TASK_COUNTERS = ("succeeded", "failed", "retried", "timed_out", "dead")


def fold(workers: WorkerList, depths: dict[str, QueueDepth] | None = None) -> dict[str, Any]:
    """The cluster view of one ``list_workers`` read; ``depths`` (``queue_depths``), when
    given, replaces the snapshots' queue depths with a fresher read."""
    rows = current(workers)
    snaps = [snap for _, snap in rows]
    live = [row for row in rows if worker_status(row[0], workers.now) == LIVE]
    return {
        "now": workers.now,
        "queues": _queues(snaps, depths or {}),
        "pools": _pools(snaps),
        "tasks": _tasks(snaps),
        "workers": [
            _worker(record, workers.now)
            for record in sorted(workers.workers, key=lambda r: (r.info.host, r.info.id))
        ],
        "hosts": _hosts(live),
        "limits": _limits(live),
    }


def arrival_rate(window: QueueWindow) -> float:
    """Jobs stored in the queue per second over one window; 0 for an empty window."""
    return window["enqueued"] / window["seconds"] if window["seconds"] > 0 else 0.0


def completion_rate(window: QueueWindow) -> float:
    """Jobs of the queue this worker finished per second over one window."""
    return window["completed"] / window["seconds"] if window["seconds"] > 0 else 0.0


def windows_of(snaps: Iterable[Snapshot], queue: str, window: str) -> list[QueueWindow]:
    """The ``recent[window]`` figures of ``queue`` from every snapshot that watches it."""
    return [
        snap["queues"][queue]["recent"][window]
        for snap in snaps
        if queue in snap["queues"] and window in snap["queues"][queue]["recent"]
    ]


# ---- queues -------------------------------------------------------------------------
def _queues(snaps: list[Snapshot], depths: dict[str, QueueDepth]) -> dict[str, Any]:
    names = {name for snap in snaps for name in snap["queues"]} | set(depths)
    out: dict[str, Any] = {}
    for name in sorted(names):
        watching = [snap["queues"][name] for snap in snaps if name in snap["queues"]]
        windows = windows_of(snaps, name, RATE_WINDOW)
        duration = histogram.merge_all(w["duration"] for w in windows)
        wait = histogram.merge_all(w["wait"] for w in windows)
        out[name] = {
            **_depth(depths.get(name), watching[0] if watching else None),
            # None: no live worker watches the queue, so nobody measures its rates.
            "enqueue_rate": max((arrival_rate(w) for w in windows), default=0.0)
            if watching
            else None,
            "completion_rate": sum(completion_rate(w) for w in windows) if watching else None,
            # Failed attempts counted by the live workers since they started.
            "failed": sum(q["failed"] for q in watching) if watching else None,
            "duration_p50_s": histogram.quantile(duration, 0.5),
            "duration_p95_s": histogram.quantile(duration, 0.95),
            "wait_p50_s": histogram.quantile(wait, 0.5),
        }
    return out


def _depth(depth: QueueDepth | None, freshest: QueueFigures | None) -> dict[str, Any]:
    if depth is not None:
        return {
            "ready": depth.ready,
            "scheduled": depth.scheduled,
            "claimed": depth.claimed,
            "running": depth.running,
            "oldest_ready_age_s": depth.oldest_ready_age_s,
        }
    assert freshest is not None  # a queue is listed because a depth or a snapshot names it
    return {
        "ready": freshest["ready"],
        "scheduled": freshest["scheduled"],
        "claimed": freshest["claimed"],
        "running": freshest["running"],
        "oldest_ready_age_s": freshest["oldest_ready_age_s"],
    }


# ---- pools --------------------------------------------------------------------------
@dataclass(slots=True)
class _Pool:
    workers: int = 0
    slots: int = 0
    busy: int = 0
    weighted: dict[str, float] = field(default_factory=lambda: dict.fromkeys(WINDOWS, 0.0))
    queues: set[str] = field(default_factory=set)
    models: set[str] = field(default_factory=set)
    bins: dict[str, Bin] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "workers": self.workers,
            "slots": self.slots,
            "busy": self.busy,
            # Slot-weighted: a 32-slot pool half busy outweighs a 2-slot pool idle.
            "utilisation": {
                w: self.weighted[w] / self.slots if self.slots > 0 else 0.0 for w in WINDOWS
            },
            "queues": sorted(self.queues),
            "model": ",".join(sorted(self.models)),  # several only if workers disagree
            "by_concurrency": {
                busy: self.bins[busy] for busy in sorted(self.bins, key=_busy_order)
            },
        }


def _pools(snaps: list[Snapshot]) -> dict[str, Any]:
    pools: dict[str, _Pool] = {}
    for snap in snaps:
        for name, fig in snap["pools"].items():
            pool = pools.setdefault(name, _Pool())
            pool.workers += 1
            pool.slots += fig["slots"]
            pool.busy += fig["busy"]
            for window in WINDOWS:
                pool.weighted[window] += fig["slots"] * fig["utilisation"].get(window, 0.0)
            pool.queues.update(fig["queues"])
            pool.models.add(fig["model"])
            for busy, fig_bin in fig["by_concurrency"].items():
                acc = pool.bins.setdefault(busy, {"count": 0, "sum": 0.0})
                acc["count"] += fig_bin["count"]
                acc["sum"] += fig_bin["sum"]
    return {name: pools[name].to_dict() for name in sorted(pools)}


def _busy_order(busy: str) -> tuple[int, str]:
    return (int(busy), busy) if busy.isdigit() else (1 << 62, busy)


# ---- tasks --------------------------------------------------------------------------
def _tasks(snaps: list[Snapshot]) -> dict[str, Any]:
    counters: dict[str, dict[str, int]] = {}
    durations: dict[str, Hist] = {}
    waits: dict[str, Hist] = {}
    queues: dict[str, set[str]] = {}
    for snap in snaps:
        for name, fig in snap["tasks"].items():
            sums = counters.setdefault(name, dict.fromkeys(TASK_COUNTERS, 0))
            for key, count in _task_counts(fig).items():
                sums[key] += count
            durations[name] = histogram.merge(
                durations.get(name, histogram.empty()), fig["duration"]
            )
            waits[name] = histogram.merge(waits.get(name, histogram.empty()), fig["wait"])
            queues.setdefault(name, set()).update(fig["queues"])
    return {
        name: {
            **counters[name],
            "duration_p50_s": histogram.quantile(durations[name], 0.5),
            "duration_p95_s": histogram.quantile(durations[name], 0.95),
            "duration_mean_s": histogram.mean(durations[name]),
            "wait_p50_s": histogram.quantile(waits[name], 0.5),
            "queues": sorted(queues[name]),
        }
        for name in sorted(counters)
    }


def _task_counts(fig: TaskFigures) -> dict[str, int]:
    return {
        "succeeded": fig["succeeded"],
        "failed": fig["failed"],
        "retried": fig["retried"],
        "timed_out": fig["timed_out"],
        "dead": fig["dead"],
    }


# ---- workers, hosts, limits ---------------------------------------------------------
def _worker(record: WorkerRecord, now: float) -> dict[str, Any]:
    snap = snapshot_of(record)
    status = worker_status(record, now)
    healthy, reasons = health_of(record, now)
    # Uptime ends where the process did: its stop, or its last sign of life if lost.
    if status == STOPPED and record.stopped_at is not None:
        end = record.stopped_at
    else:
        end = record.last_seen if status == LOST else now
    figures = snap["worker_figures"] if snap else None
    return {
        "id": record.info.id,
        "host": record.info.host,
        "pid": record.info.pid,
        "version": record.info.version,
        "status": status,
        "healthy": healthy,
        "reasons": reasons,
        "started_at": record.started_at,
        "last_seen_age_s": max(0.0, now - record.last_seen),
        "uptime_s": max(0.0, end - record.started_at),
        "held": record.held,
        "pools": _worker_pools(record, snap),
        "claimed": figures["claimed"] if figures else None,
        "recovered": figures["recovered"] if figures else None,
        "lease_lost": figures["lease_lost"] if figures else None,
        "broker_errors": figures["broker_errors"] if figures else None,
        "heartbeat_lag_s": figures["heartbeat_lag_s"] if figures else None,
    }


def _worker_pools(record: WorkerRecord, snap: Snapshot | None) -> list[dict[str, Any]]:
    """From the snapshot when there is one (it has busy slots); else as registered."""
    if snap is not None:
        return [
            {"name": name, "slots": fig["slots"], "busy": fig["busy"], "model": fig["model"]}
            for name, fig in sorted(snap["pools"].items())
        ]
    return [
        {"name": p.get("name"), "slots": p.get("slots"), "busy": None, "model": p.get("model")}
        for p in record.info.pools
    ]


def _hosts(live: list[tuple[WorkerRecord, Snapshot]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for record, snap in live:  # freshest first
        out.setdefault(record.info.host, dict(snap["host"]))
    return dict(sorted(out.items()))


def _limits(live: list[tuple[WorkerRecord, Snapshot]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for _, snap in live:  # freshest first
        for name, fig in snap["limits"].items():
            out.setdefault(name, dict(fig))
    return dict(sorted(out.items()))
