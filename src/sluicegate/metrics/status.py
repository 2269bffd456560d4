"""Whether a worker row is live, late, lost or stopped, and whether it is healthy.

Ages come from one clock, the broker's (``WorkerList.now`` against ``last_seen``), never
from comparing two machines'. A worker publishes every ``interval_s``; missing three
publishes makes it late, and missing them for longer than its lease (or ten publishes,
if longer) makes it lost: by then its jobs' leases have expired and been recovered.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from .schema import VERSION, Snapshot

if TYPE_CHECKING:  # the read side only reads these rows: no import of the broker package
    from ..brokers.base import WorkerList, WorkerRecord

LIVE, LATE, LOST, STOPPED = "live", "late", "lost", "stopped"
DEFAULT_INTERVAL_S = 2.0  # a row without a snapshot: the recorder's default publish interval
LIVE_INTERVALS = 3.0  # publishes missed before a worker counts as late
LOST_INTERVALS = 10.0  # ... and before it counts as lost, unless its lease is longer


def snapshot_of(record: WorkerRecord) -> Snapshot | None:
    """The row's snapshot when it has this schema's version; None otherwise (readers skip
    other versions rather than misread them)."""
    snap = record.snapshot
    if not snap or snap.get("v") != VERSION:
        return None
    return cast("Snapshot", snap)


def thresholds(record: WorkerRecord) -> tuple[float, float]:
    """(late after, lost after) in seconds since ``last_seen``."""
    snap = snapshot_of(record)
    interval = snap["interval_s"] if snap and snap["interval_s"] > 0 else DEFAULT_INTERVAL_S
    lease = snap["lease_s"] if snap else 0.0
    return LIVE_INTERVALS * interval, max(lease, LOST_INTERVALS * interval)


def worker_status(record: WorkerRecord, now: float) -> str:
    """ "live", "late", "lost" or "stopped" (``stopped_at`` set: it said it stopped)."""
    if record.stopped_at is not None:
        return STOPPED
    age = max(0.0, now - record.last_seen)
    late_after, lost_after = thresholds(record)
    if age <= late_after:
        return LIVE
    if age < lost_after:
        return LATE
    return LOST


def health_of(record: WorkerRecord, now: float) -> tuple[bool, list[str]]:
    """Healthy only when live and its own last snapshot says healthy; the reasons, in
    words, otherwise. A late or lost worker's own reasons are from its last publish."""
    status = worker_status(record, now)
    if status == STOPPED:
        return False, [STOPPED]
    reasons: list[str] = []
    if status != LIVE:
        reasons.append(f"no heartbeat for {max(0.0, now - record.last_seen):.1f} s")
    snap = snapshot_of(record)
    if snap is None:
        reasons.append(_no_snapshot(record))
        return False, reasons
    own = _own_reasons(snap)
    if status != LIVE:
        own = [f"{reason} (at its last publish)" for reason in own]
    reasons.extend(own)
    return not reasons, reasons


def current(workers: WorkerList) -> list[tuple[WorkerRecord, Snapshot]]:
    """The rows whose figures still count (live or late, with a readable snapshot),
    freshest first: a lost or stopped worker's figures describe a process that is gone."""
    rows = [
        (record, snap)
        for record in workers.workers
        if worker_status(record, workers.now) in (LIVE, LATE)
        and (snap := snapshot_of(record)) is not None
    ]
    rows.sort(key=lambda row: row[0].last_seen, reverse=True)
    return rows


def _own_reasons(snap: Snapshot) -> list[str]:
    health = snap["health"]
    if health["healthy"]:
        return []
    if health["reasons"]:
        return list(health["reasons"])
    # An unhealthy snapshot that gave no words: say what its fields show.
    reasons = [] if health["broker_ok"] else ["broker unreachable"]
    reasons += [
        f"pool {pool} has free slots and ready jobs but has not claimed lately"
        for pool in health["stalled"]
    ]
    return reasons or ["the worker reports itself unhealthy"]


def _no_snapshot(record: WorkerRecord) -> str:
    if not record.snapshot:
        return "no metrics snapshot published yet"
    return (
        f"metrics snapshot of version {record.snapshot.get('v')!r} not understood "
        f"(this reader knows version {VERSION})"
    )
