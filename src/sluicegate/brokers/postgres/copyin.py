"""Large batches in by binary ``COPY``: the PostgreSQL broker's bulk enqueue.

COPY is the server's cheapest way in (no array literals to parse, no executor per row),
and the rows stream while the client still formats later ones. But COPY computes
nothing and returns nothing, so what the batched INSERT does in SQL happens here,
exactly as the server would do it:

- the ids: one round trip first takes a batch's ids from the jobs' identity sequence, in
  batch order (``reserve_ids``; ids are the claim order's last tie-break), with the clock
  that stamps the batch (``{now}``: the test clock, else the statement's time);
- the times, in integer microseconds, the unit timestamptz stores and COPY's binary
  format carries: ``to_timestamp(s)`` is ``float8_timestamptz`` (rounds half to even
  after subtracting 2000-01-01), ``{now} + make_interval(secs => d)`` adds ``d`` rounded
  to microseconds the same way (tests/brokers/test_postgres_copyin.py checks both against
  the server);
- the state: ready when due (``run_at <= now``), else scheduled;
- the Jobs handed back: built from each spec, its id and its times, as a read of the row
  would give them (times as unix seconds, from exact microseconds).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...job import Job, JobSpec, JobState
from .fresh import spec_job

PG_EPOCH = 946_684_800  # 2000-01-01 in unix seconds: where timestamptz counts from
PG_EPOCH_US = PG_EPOCH * 1_000_000
COPY_MIN = 100  # a plain run of at least this many specs goes in by COPY, smaller by INSERT

# COPY's binary types, column by column (copy_jobs' list). A timestamptz travels as the
# int8 count of microseconds since 2000-01-01: that is its binary format, so the int8
# dumper writes it exactly, with no datetime made per row.
COPY_TYPES = [
    "int8", "text", "text", "text", "text", "text", "int4", "int8", "int4", "int8",
    "text", "text", "int8",
]  # fmt: skip
READY, SCHEDULED = JobState.READY, JobState.SCHEDULED


def pg_micros(seconds: float) -> int:
    """``to_timestamp(seconds)`` in microseconds since 2000-01-01, rounded as the server
    rounds (``rint``: half to even)."""
    return round((seconds - PG_EPOCH) * 1e6)


def interval_micros(seconds: float) -> int:
    """``make_interval(secs => seconds)`` in microseconds, rounded as the server rounds."""
    return round(seconds * 1e6)


class CopyBatch:
    """One run of plain specs (no unique key) as COPY rows, and the Jobs they become.

    ``now_us`` is the batch's clock in unix microseconds (``reserve_ids``' ``now``);
    ``ids`` its reserved ids, ascending: the i-th spec gets the i-th id."""

    __slots__ = ("_times", "ids", "now_us", "specs")

    def __init__(self, specs: Sequence[JobSpec], ids: list[int], now_us: int) -> None:
        if len(ids) != len(specs):
            raise RuntimeError(f"reserved {len(ids)} ids for {len(specs)} jobs")
        ids.sort()  # nextval's order; sorted anyway, ids are the batch's order
        self.specs, self.ids, self.now_us = specs, ids, now_us
        self._times: list[tuple[int, int | None]] = []  # (run_at, expires_at), 2000-based us

    def rows(self) -> Any:
        """The COPY rows, in batch order (each spec's times kept for ``jobs``)."""
        now = self.now_us - PG_EPOCH_US
        times = self._times
        for spec, id_ in zip(self.specs, self.ids, strict=True):
            run_at = spec.run_at
            run = now + interval_micros(spec.delay) if run_at is None else pg_micros(run_at)
            if spec.expires_at is not None:
                expires: int | None = pg_micros(spec.expires_at)
            elif spec.expires_in is not None:
                expires = now + interval_micros(spec.expires_in)
            else:
                expires = None
            times.append((run, expires))
            yield (
                id_, spec.queue, spec.task, spec.args_json, spec.kwargs_json,
                "ready" if run <= now else "scheduled", spec.priority, run,
                spec.max_attempts, now, spec.limits, spec.headers, expires,
            )  # fmt: skip

    def jobs(self, start: int = 0, stop: int | None = None) -> list[Job]:
        """The stored jobs (``start:stop`` of them), as ``get_job`` would read them back;
        after ``rows``."""
        now = self.now_us - PG_EPOCH_US
        enqueued_at = self.now_us / 1_000_000  # int / int: correctly rounded, as extract
        part = slice(start, stop)
        return [
            spec_job(
                spec,
                id_,
                READY if run <= now else SCHEDULED,
                (run + PG_EPOCH_US) / 1_000_000,
                enqueued_at,
                None if expires is None else (expires + PG_EPOCH_US) / 1_000_000,
            )
            for spec, id_, (run, expires) in zip(
                self.specs[part], self.ids[part], self._times[part], strict=True
            )
        ]
