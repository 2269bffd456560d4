"""What ``sluicegate limits list`` and ``jobs show`` say about limits, computed from one
snapshot of the broker's raw figures (``Broker.limit_figures``). No I/O here.

In use per limit is summed over the held jobs' needs (global scope: every host's; host
scope: per host, the busiest shown). Waiting counts the ready jobs that name the limit,
and the wait is the age of the oldest of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .brokers.base import LimitFigures
from .job import Job, JobState
from .limits import Candidate, admit, decode_needs, in_use_of, key_of, refill

TOP_PARTITIONS = 10  # partitions shown per limit, busiest first
NOT_REGISTERED = "not registered"  # the capacity shown for a limit jobs name but no worker declared


@dataclass(slots=True)
class Usage:
    """One limit, or one partition (or host) of it."""

    in_use: int = 0
    waiting: int = 0
    oldest: float | None = None  # run_at of the oldest waiting job
    tokens: float | None = None  # rate limits: tokens in the bucket now

    def wait_s(self, now: float) -> float:
        return 0.0 if self.oldest is None else max(0.0, now - self.oldest)


@dataclass(slots=True)
class LimitLine:
    name: str
    capacity: str  # "4 at once", "10/s (burst 10)", or both
    scope: str
    partition: str | None
    overridden: bool
    total: Usage = field(default_factory=Usage)
    parts: dict[str, Usage] = field(default_factory=dict)  # partition value (or host) -> usage
    concurrency: int | None = None

    def to_dict(self, now: float) -> dict[str, Any]:
        busiest = sorted(self.parts.items(), key=lambda kv: (-kv[1].in_use, -kv[1].waiting))
        return {
            "name": self.name,
            "capacity": self.capacity,
            "concurrency": self.concurrency,
            "scope": self.scope,
            "partition": self.partition,
            "set_by_operator": self.overridden,
            "in_use": self.total.in_use,
            "waiting": self.total.waiting,
            "oldest_wait_s": round(self.total.wait_s(now), 3),
            "partitions": [
                {
                    "key": key,
                    "in_use": u.in_use,
                    "waiting": u.waiting,
                    "oldest_wait_s": round(u.wait_s(now), 3),
                    **({"tokens": round(u.tokens, 3)} if u.tokens is not None else {}),
                }
                for key, u in busiest[:TOP_PARTITIONS]
            ],
            "partitions_total": len(self.parts),
        }


def report(figures: LimitFigures) -> list[LimitLine]:
    """One line per registered limit (and per limit jobs name that none registered)."""
    lines: dict[str, LimitLine] = {}
    for name, limit in sorted(figures.limits.items()):
        lines[name] = LimitLine(
            name,
            limit.bounds(),
            limit.scope,
            limit.partition,
            name in figures.overridden,
            concurrency=limit.concurrency,
        )

    def line(name: str) -> LimitLine:
        if name not in lines:
            lines[name] = LimitLine(name, NOT_REGISTERED, "-", None, False)
        return lines[name]

    for name, partition, host, cost in figures.held:
        held_scope = figures.limits[name].scope if name in figures.limits else "global"
        entry = line(name)
        entry.total.in_use += cost
        part = _part_label(held_scope, partition, host)
        if part is not None:
            entry.parts.setdefault(part, Usage()).in_use += cost
    for text, jobs, oldest in figures.waiting:
        for name, partition, _cost in decode_needs(text):
            entry = line(name)
            for usage in (entry.total, *([entry.parts.setdefault(partition, Usage())]
                                         if partition is not None else [])):  # fmt: skip
                usage.waiting += jobs
                usage.oldest = oldest if usage.oldest is None else min(usage.oldest, oldest)
    for (name, partition, host), bucket in figures.buckets.items():
        rated = figures.limits.get(name)
        if rated is None:
            continue
        tokens = refill(bucket, rated, figures.now).tokens
        part = _part_label(rated.scope, partition or None, host or None)
        usage = line(name).parts.setdefault(part, Usage()) if part else line(name).total
        usage.tokens = tokens
    return list(lines.values())


def _part_label(scope: str, partition: str | None, host: str | None) -> str | None:
    if scope == "host":
        return f"{partition} @ {host}" if partition else f"@ {host}"
    return partition


def waiting_for(job: Job, figures: LimitFigures, host: str) -> str | None:
    """Why a ready job that names limits has not started: the first limit without room
    for it, as seen from ``host``; None when every limit has room (it waits for a slot)."""
    if job.state is not JobState.READY or not job.limits:
        return None
    limits = figures.limits
    in_use = in_use_of(figures.held, host, limits)
    admission = admit(
        [Candidate(job.id, job.limits)], 1, limits, in_use, figures.buckets, figures.now, host
    )
    reason = admission.reasons.get(job.id)
    if reason is None:  # room for it alone: do earlier jobs wait for one of its limits?
        for text, _jobs, oldest in figures.waiting:
            for name, partition, _cost in decode_needs(text):
                mine = any(n == name and p == partition for n, p, _ in job.limits)
                if mine and oldest < job.run_at:
                    label = name if partition is None else f"{name}[{partition}]"
                    return f"limit {label}: earlier jobs wait for it (they start first)"
    return reason


def needs_text(needs: Sequence[tuple[str, str | None, int]]) -> str:
    """``storage, email_provider[acct-7] x2``: a job's limits for humans."""
    out = []
    for name, partition, cost in needs:
        label = name if partition is None else f"{name}[{partition}]"
        out.append(label if cost == 1 else f"{label} x{cost}")
    return ", ".join(out)


__all__ = ["LimitLine", "Usage", "key_of", "needs_text", "report", "waiting_for"]
