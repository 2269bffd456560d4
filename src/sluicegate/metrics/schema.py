"""The metrics snapshot a worker publishes with its registry heartbeat, as typed dicts.

One snapshot per worker process, JSON-safe, a few KB: the worker's recorder builds it
(``recorder.WorkerMetrics.snapshot``), the registry row carries it, and every reader
(``stats``, ``top``, ``size``, the Prometheus collector, the dashboard) reads only this
shape. Counters are cumulative since the worker started; ``recent`` figures cover the
last 1, 5 and 15 minutes (or the worker's uptime, if shorter: ``seconds`` says which).
Times are seconds. Bump ``v`` on an incompatible change; readers skip other versions. A
key added later is optional (``NotRequired``) within a version: readers of it must take a
snapshot without it (a worker of an older release) as having nothing to say there.
"""

from __future__ import annotations

from typing import Literal, NotRequired, TypedDict

VERSION = 1
WINDOWS: tuple[Literal["1m"], Literal["5m"], Literal["15m"]] = ("1m", "5m", "15m")
WINDOW_SECONDS = {"1m": 60.0, "5m": 300.0, "15m": 900.0}

# Upper bounds (s) of the histogram buckets; a last, unbounded bucket follows. Ten per
# decade (the R10 series: 1, 1.25, 1.6, 2, 2.5, 3.15, 4, 5, 6.3, 8) from 1 ms to an hour,
# so an estimated quantile is within about 12% of the truth wherever it falls.
_R10 = (1.0, 1.25, 1.6, 2.0, 2.5, 3.15, 4.0, 5.0, 6.3, 8.0)
BUCKETS: tuple[float, ...] = (
    *(round(step * 10.0**exponent, 6) for exponent in range(-3, 3) for step in _R10),
    *(1000.0, 1250.0, 1600.0, 2000.0, 2500.0, 3150.0, 3600.0),
)


class Hist(TypedDict):
    """``counts[i]`` observations in bucket i (not cumulative): len(BUCKETS) + 1 entries,
    the last for values above every bound. ``sum`` is exact, so the mean is too."""

    counts: list[int]
    count: int
    sum: float


class QueueWindow(TypedDict):
    seconds: float  # how much time this window really covers
    enqueued: int  # jobs stored in the queue (by anyone) in the window
    completed: int  # jobs of the queue this worker finished (succeeded or dead)
    duration: Hist  # this worker's jobs of the queue that finished in the window
    wait: Hist  # ready-to-start wait of this worker's jobs that started in the window


class QueueFigures(TypedDict):
    # From the broker's depth sample (every publish); the same on every worker of the queue.
    ready: int
    scheduled: int
    claimed: int
    running: int
    oldest_ready_age_s: float
    enqueued: int  # stored in the queue since this worker started watching it
    completed: int  # finished here since start
    failed: int  # failed attempts here since start (retried or dead; timeouts included)
    recent: dict[str, QueueWindow]  # by WINDOWS


class Bin(TypedDict):
    count: int
    sum: float


class PoolFigures(TypedDict):
    queues: list[str]
    model: str
    slots: int
    busy: int  # slots busy now
    claimed: int  # jobs claimed since start
    utilisation: dict[str, float]  # by WINDOWS: busy slot-seconds / (slots x seconds), 0..1
    # Job durations by how many of the pool's slots were busy when the job started
    # (itself included): str(busy) -> count and sum of durations. Cumulative.
    by_concurrency: dict[str, Bin]


class TaskFigures(TypedDict):
    queues: list[str]  # the queues its jobs came from (per-queue figures are in QueueFigures)
    succeeded: int
    failed: int  # failed attempts: retried + dead (a timeout is a failed attempt too)
    retried: int
    timed_out: int
    dead: int
    duration: Hist  # attempts that ended (any outcome)
    wait: Hist  # ready (run_at) to body start


class WorkerFigures(TypedDict):
    claimed: int
    released: int
    recovered: int  # expired leases (anyone's) this worker returned to ready or dead
    lease_lost: int
    broker_errors: int
    heartbeat_lag_s: float  # how late the last lease heartbeat ran past its due time
    held: int
    claim_latency: Hist  # one broker claim call


class HostFigures(TypedDict):
    cpus: int
    cpu_percent: float
    iowait_percent: float | None  # None where the platform has no I/O wait figure
    load1: float
    load5: float
    load15: float


class LimitFigures(TypedDict):
    concurrency: int | None
    rate: str | None  # "10/s", as declared
    in_use: int
    waiting: int  # ready jobs held back by this limit
    oldest_wait_s: float  # how long the oldest of them has been ready


class Health(TypedDict):
    healthy: bool
    loop_age_s: float  # since the worker's loop last turned
    broker_ok: bool  # the last broker call succeeded
    stalled: list[str]  # pools with free slots and ready work that have not claimed lately
    reasons: list[str]  # why not healthy, in words; [] when healthy


class QueueHistory(TypedDict, total=False):
    """One queue's minutes, oldest first, one entry per minute of ``History``; a key is
    left out when every entry would be 0."""

    completed: list[int]  # jobs of the queue this worker finished (succeeded or dead)
    failed: list[int]  # failed attempts here (retried or dead; timeouts included)
    # The largest oldest-ready age among the minute's depth samples (0.1 s); None: no sample.
    oldest_ready_age_s: list[float | None]


class PoolHistory(TypedDict, total=False):
    """Left out when every entry would be 0."""

    # Per minute: busy slot-seconds / (slots x seconds of the minute covered), 0..1, to 0.001.
    utilisation: list[float]


class History(TypedDict):
    """The last hour by minute, on the worker's wall clock: buckets start on whole minutes
    of the epoch, so different workers' buckets line up. Every list has one entry per
    minute covered, oldest first, ending with the newest (current) minute: at most 60,
    fewer while the worker is younger than an hour."""

    step_s: int  # 60: seconds per bucket
    newest: int  # epoch s the newest bucket starts at (a multiple of step_s)
    since: float  # epoch s the history begins (the worker's start): no minute before is covered
    until: float  # epoch s it covers up to (when taken), within the newest bucket
    queues: dict[str, QueueHistory]  # every queue of the snapshot's ``queues``
    pools: dict[str, PoolHistory]  # every pool of the snapshot's ``pools``


class Snapshot(TypedDict):
    v: int
    worker: str
    at: float  # the worker's wall clock when taken (for display only; ages use the broker's)
    uptime_s: float
    interval_s: float  # how often it publishes
    lease_s: float
    health: Health
    queues: dict[str, QueueFigures]
    pools: dict[str, PoolFigures]
    tasks: dict[str, TaskFigures]
    worker_figures: WorkerFigures
    host: HostFigures
    limits: dict[str, LimitFigures]
    history: NotRequired[History]  # added within version 1: absent from older workers' rows
