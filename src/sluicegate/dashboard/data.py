"""The dashboard's read model and its actions: the ONE module that calls the broker and
the metrics fold, so every page costs the same few cheap reads and the read side changes
in one place.

What a page may cost: ``stats()`` (unfinished jobs off their partial indexes, finished
ones from the settled counters: never a count over the table), ``list_workers()`` (one
row per worker, with its metrics snapshot), ``limit_figures()``, ``paused_queues()`` (a row per paused queue), one ``get_job``, and
listings that read one index range of at most a page of rows (``list_jobs``, newest
first). Nothing here writes except the operator actions at the bottom.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from ..app import App
from ..brokers import Broker, broker_from_url
from ..brokers.base import PausedQueue, QueueDepth, Stats, WorkerList, unknown_limit
from ..errors import ConfigError, InvalidTransition, SluicegateError
from ..job import TERMINAL, Job, JobId, JobState
from ..limit_report import needs_text, report, waiting_for
from ..limits import Limit, changed, local_host
from ..metrics.cluster import fold
from ..metrics.history import history as cluster_history

PAGE = 50  # jobs per listing page
BULK = 1000  # jobs one bulk call changes at most (the broker's own batch)
BULK_PER_REQUEST = 10_000  # jobs one bulk request changes at most; press again for more
HELD_SCAN = 2000  # claimed or running jobs read for the workers page (bounded by slots)
SYSTEM_TTL_S = 1.0  # a system read serves every page asked for within this (any browser)
HISTORY_POINTS = 60


@dataclass(frozen=True, slots=True)
class JobQuery:
    """A jobs listing: filters and the keyset position (ids below ``before_id``)."""

    state: JobState | None = None
    queue: str | None = None
    task: str | None = None
    unique_key: str | None = None
    before_id: int | None = None
    limit: int = PAGE


@dataclass(frozen=True, slots=True)
class JobPage:
    jobs: list[Job]
    next_before: int | None  # before_id of the next (older) page; None: this is the last


@dataclass(frozen=True, slots=True)
class System:
    """One read of the whole system: the broker's counts and the workers' figures."""

    now: float
    stats: Stats
    view: dict[str, Any]  # sluicegate.metrics.cluster.fold, depths from the same read
    history: dict[str, Any]  # the last hour, one point a minute (metrics.history)
    paused: dict[str, PausedQueue] = field(default_factory=dict)  # paused queues, by name


def open_broker(source: App | Broker | str) -> Callable[[], Broker]:
    """How the dashboard reaches storage: an App's broker, a Broker, or a URL. Opened on
    first use, so building the ASGI app (at import of the user's project) connects to
    nothing."""
    if isinstance(source, Broker):
        return lambda: source
    if isinstance(source, App):
        return lambda: source.broker
    if not isinstance(source, str):
        raise ConfigError(f"asgi_app needs an App, a Broker or a broker URL, not {source!r}")
    lock = threading.Lock()
    opened: list[Broker] = []

    def get() -> Broker:
        with lock:
            if not opened:
                opened.append(broker_from_url(source))
            return opened[0]

    return get


def display_url(url: str) -> str:
    """The broker URL without its password, for the page header."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{parts.username or ''}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


class Source:
    """Everything a page reads or does, over one broker."""

    def __init__(self, broker: Callable[[], Broker], host: str | None = None) -> None:
        self._broker = broker
        self.host = host or local_host()  # for host-scoped limits in waiting_for
        self._system: tuple[float, System] | None = None
        self._system_lock = threading.Lock()

    @property
    def broker(self) -> Broker:
        return self._broker()

    def url(self) -> str:
        """The broker's URL for the header, password hidden; the error page shows it too,
        so a broker that cannot be opened says so instead of failing again."""
        try:
            return display_url(self.broker.url)
        except SluicegateError as exc:
            return f"(broker not open: {exc})"

    # ---- the system ---------------------------------------------------------------
    def system(self) -> System:
        """Counts per queue and state and the workers' figures: one read serves every
        request within SYSTEM_TTL_S, and concurrent requests wait for the same read, so
        however many browsers refresh live the broker sees about one read a second."""
        with self._system_lock:
            cached = self._system
            if cached is not None and time.monotonic() - cached[0] < SYSTEM_TTL_S:
                return cached[1]
            system = self._read_system()
            self._system = (time.monotonic(), system)
            return system

    def forget(self) -> None:
        """After an action: the next page reads the counts afresh."""
        with self._system_lock:
            self._system = None

    def _read_system(self) -> System:
        """``stats`` (settled counters and partial indexes, never a count of the table)
        and the registry, folded with the depths of that same stats read."""
        stats = self.broker.stats()
        workers = self.broker.list_workers()
        view = fold(workers, depths_of(stats))
        paused = self.broker.paused_queues()  # one row per paused queue
        return System(workers.now, stats, view, self.history(workers), paused)

    def history(self, workers: WorkerList) -> dict[str, Any]:
        """The cluster's last hour, a point a minute, from the workers' own snapshots (so
        a dashboard opened now already has the hour behind it)."""
        return dict(cluster_history(workers, workers.now, HISTORY_POINTS))

    def workers(self) -> dict[str, Any]:
        return fold(self.broker.list_workers())

    @staticmethod
    def clock() -> float:
        """This machine's time, for "ago" on pages (ages that matter, such as the oldest
        ready job's, come from the broker's clock)."""
        return time.time()

    def held_jobs(self) -> dict[str, list[Job]]:
        """Claimed and running jobs by the worker that holds them (bounded by the slots
        of every worker: two partial-index ranges)."""
        held: dict[str, list[Job]] = {}
        for state in (JobState.RUNNING, JobState.CLAIMED):
            for job in self.broker.list_jobs(state, None, HELD_SCAN):
                held.setdefault(job.worker_id or "", []).append(job)
        for jobs in held.values():
            jobs.sort(key=lambda j: j.id, reverse=True)
        return held

    # ---- limits -------------------------------------------------------------------
    def limits(self) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]], float]:
        """Per limit: capacity, in use, waiting (``limit_report``), and the registered
        values by name (what the form starts from)."""
        figures = self.broker.limit_figures()
        lines = [line.to_dict(figures.now) for line in report(figures)]
        values = {name: limit.to_dict() for name, limit in figures.limits.items()}
        return lines, values, figures.now

    # ---- jobs ---------------------------------------------------------------------
    def jobs(self, q: JobQuery) -> JobPage:
        """One page, newest first, and where the next (older) one starts: one index
        range of at most a page and one row."""
        rows = self.broker.list_jobs(
            q.state,
            q.queue,
            q.limit + 1,
            task=q.task,
            unique_key=q.unique_key,
            before_id=q.before_id,
        )
        return page_of(rows, q.limit)

    def job(self, job_id: int) -> Job | None:
        return self.broker.get_job(job_id)

    def waiting_for(self, job: Job) -> str | None:
        """Why a ready job that names limits has not started (None: it waits for a slot)."""
        if job.state is not JobState.READY or not job.limits:
            return None
        return waiting_for(job, self.broker.limit_figures(), self.host)

    @staticmethod
    def history_of(job: Job) -> list[dict[str, Any]]:
        """The job's non-happy transitions (failed, recovered, released, ...)."""
        return [entry for entry in job.history if isinstance(entry, dict)]

    @staticmethod
    def needs(job: Job) -> str:
        return needs_text(job.limits)

    # ---- operator actions ---------------------------------------------------------
    def retry(self, job_id: int) -> Job:
        self.forget()
        return self.broker.retry(job_id)

    def cancel(self, job_id: int, by: str | None = None) -> Job:
        self.forget()
        return self.broker.cancel(job_id, by=by)

    def retry_matching(self, queue: str | None, task: str | None) -> int:
        """Dead jobs of the filter back to ready, up to BULK_PER_REQUEST, a broker batch
        (one short transaction) at a time."""
        self.forget()
        done = 0
        while done < BULK_PER_REQUEST:
            n = self.broker.retry_matching(
                queue=queue, task=task, limit=min(BULK, BULK_PER_REQUEST - done)
            )
            done += n
            if n == 0:
                break
        return done

    def cancel_matching(
        self, state: JobState, queue: str | None, task: str | None, by: str | None = None
    ) -> int:
        """Unfinished jobs of the filter cancelled, up to BULK_PER_REQUEST, a broker batch
        at a time."""
        if state in TERMINAL:
            raise InvalidTransition(f"cannot cancel {state.value} jobs: they have finished")
        self.forget()
        done = 0
        while done < BULK_PER_REQUEST:
            n = self.broker.cancel_matching(
                state=state,
                queue=queue,
                task=task,
                limit=min(BULK, BULK_PER_REQUEST - done),
                by=by,
            )
            done += n
            if n == 0:
                break
        return done

    def set_limit(
        self, name: str, concurrency: int | None, rate: str | None, burst: int | None
    ) -> Limit:
        """New values for a registered limit (what is not given keeps its value)."""
        known = self.broker.limit_figures().limits
        current = known.get(name)
        if current is None:
            raise unknown_limit(name, known)
        updated = changed(current, concurrency, rate, burst)
        if updated is None:
            raise ConfigError("give a concurrency, a rate or a burst")
        self.forget()
        self.broker.set_limit(updated)
        return updated

    def reset_limit(self, name: str) -> Limit:
        self.forget()
        return self.broker.reset_limit(name)


def page_of(rows: list[Job], limit: int) -> JobPage:
    """The first ``limit`` of ``rows`` (newest first), and whether an older page follows."""
    page = rows[:limit]
    return JobPage(page, page[-1].id if len(rows) > limit and page else None)


def depths_of(stats: Stats) -> dict[str, QueueDepth]:
    """The unfinished counts of a stats read as queue depths (the same partial-index
    read ``queue_depths`` makes), so a page reads them once."""
    return {
        name: QueueDepth(
            ready=q.counts.get(JobState.READY, 0),
            scheduled=q.counts.get(JobState.SCHEDULED, 0),
            claimed=q.counts.get(JobState.CLAIMED, 0),
            running=q.counts.get(JobState.RUNNING, 0),
            oldest_ready_age_s=q.oldest_ready_age_s,
        )
        for name, q in stats.queues.items()
    }


__all__ = ["PAGE", "JobId", "JobPage", "JobQuery", "Source", "System", "open_broker"]
