"""A job's timeline: the happy path from its own timestamps (enqueued, due, started,
finished) and every other transition from its history (failed, recovered, released,
cancelled, retried), in time order. Pure: it reads a Job and a list, nothing else."""

from __future__ import annotations

from typing import Any

from ..job import Job, JobState

SAME_INSTANT = 0.001  # s: times closer than this are one instant (see _in_order)


def timeline(job: Job, history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = [
        _entry(job.enqueued_at, "enqueued", detail=f"into queue {job.queue}")
    ]
    if job.run_at > job.enqueued_at + SAME_INSTANT and not history:
        entries.append(_entry(job.run_at, "due", detail="scheduled to be ready at this time"))
    if job.started_at is not None:
        entries.append(
            _entry(job.started_at, "started", attempt=job.attempts, worker=job.worker_id)
        )
    for item in history:
        entries.append(_from_history(item))
    last = history[-1] if history and isinstance(history[-1], dict) else {}
    if job.finished_at is not None and last.get("event") != job.state.value:
        # (An operator's cancel is in the history already, with the state it left.)
        entries.append(
            _entry(
                job.finished_at,
                job.state.value,
                attempt=job.attempts,
                error=str(job.last_error)
                if job.state is JobState.DEAD and job.last_error
                else None,
            )
        )
    return _in_order(entries)


def _in_order(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """By time; at one instant, by attempt, then in the order of a life (as listed): an
    attempt starts, then fails, then the job finishes. A broker may store one instant as
    two nearby floats (SQLite's JSON keeps 15 digits, a few microseconds of a Unix time),
    so times less than SAME_INSTANT apart are one instant: grouped by their gaps, never
    rounded to a grid, which splits two such floats whenever they straddle a step of it.
    Entries without a time go last, by attempt."""
    timed = sorted((e for e in entries if e["at"] is not None), key=lambda e: e["at"])
    instants: list[list[dict[str, Any]]] = []
    for entry in timed:
        if instants and entry["at"] - instants[-1][-1]["at"] < SAME_INSTANT:
            instants[-1].append(entry)
        else:
            instants.append([entry])
    listed = {id(e): i for i, e in enumerate(entries)}
    out = [
        e
        for instant in instants
        for e in sorted(instant, key=lambda e: (e["attempt"] or 0, listed[id(e)]))
    ]
    return out + sorted((e for e in entries if e["at"] is None), key=lambda e: e["attempt"] or 0)


def _entry(
    at: float | None,
    event: str,
    *,
    attempt: int | None = None,
    worker: str | None = None,
    error: str | None = None,
    detail: str | None = None,
) -> dict[str, Any]:
    return {
        "at": at,
        "event": event,
        "attempt": attempt,
        "worker": worker,
        "error": error,
        "detail": detail,
        "retry_at": None,
    }


def _from_history(item: dict[str, Any]) -> dict[str, Any]:
    """One history entry as the broker stored it; any field may be missing or odd."""
    error = item.get("error")
    text = None
    if isinstance(error, dict):
        kind, message = str(error.get("type") or ""), str(error.get("message") or "")
        text = f"{kind}: {message}" if message else kind or None
    elif error:
        text = str(error)
    detail = None
    if item.get("dead"):
        detail = "no attempts left: dead"
    elif isinstance(item.get("retry_at"), int | float):
        detail = "retry scheduled"
    elif item.get("from"):
        detail = f"from {item['from']}"
    at = item.get("at")
    attempt = item.get("attempt")
    return {
        "at": float(at) if isinstance(at, int | float) else None,
        "event": str(item.get("event") or "?"),
        "attempt": attempt if isinstance(attempt, int) else None,
        "worker": str(item["worker"]) if item.get("worker") else None,
        "error": text,
        "detail": detail,
        "retry_at": item.get("retry_at") if isinstance(item.get("retry_at"), int | float) else None,
    }
