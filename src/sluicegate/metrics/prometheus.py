"""A Prometheus collector that turns the worker's last snapshot into metric families.

The worker already builds a snapshot every few seconds for its registry row; a scrape
reads that one snapshot, so exporting costs nothing on the hot path and Prometheus sees
exactly what ``stats`` and ``top`` see. No ``worker`` label on the figures (Prometheus
adds ``instance`` itself, and a label per process start would grow without bound); one
``sluicegate_worker_info`` gauge says which worker and version an instance runs.

Across instances, add completions, slots and job counts, but take the max of a queue's
depths and ``sluicegate_queue_enqueued_total`` rate: every worker of a queue samples the
same queue.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
    SummaryMetricFamily,
)
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector, CollectorRegistry

from .schema import BUCKETS, VERSION, WINDOWS, Hist, Snapshot

Row = tuple[Sequence[str], float]


class SnapshotCollector(Collector):
    """Collects from ``get_snapshot()`` at scrape time: the latest snapshot, or None
    before the first one (then only the info gauge is exported)."""

    def __init__(
        self,
        get_snapshot: Callable[[], Snapshot | None],
        worker_id: str,
        host: str,
        version: str | None = None,
    ) -> None:
        self.get_snapshot = get_snapshot
        self.worker_id = worker_id
        self.host = host
        self.version = version if version is not None else _package_version()

    def collect(self) -> Iterator[Metric]:
        yield _gauge(
            "sluicegate_worker_info",
            "Which worker process this instance runs: always 1.",
            ("worker", "host", "version"),
            [((self.worker_id, self.host, self.version), 1.0)],
        )
        snap = self.get_snapshot()
        if snap is None or snap.get("v") != VERSION:
            return
        yield from _queue_families(snap)
        yield from _pool_families(snap)
        yield from _task_families(snap)
        yield from _worker_families(snap)
        yield from _host_families(snap)
        yield from _limit_families(snap)

    def describe(self) -> list[Metric]:
        """Nothing to describe ahead: registering must not call ``get_snapshot``."""
        return []


def exposition(snapshot: Snapshot, host: str = "", version: str | None = None) -> bytes:
    """The text exposition of one snapshot, from a fresh registry (tests, the CLI)."""
    registry = CollectorRegistry()
    registry.register(SnapshotCollector(lambda: snapshot, snapshot["worker"], host, version))
    return generate_latest(registry)


def histogram_buckets(hist: Hist) -> list[tuple[str, float]]:
    """Prometheus ``le`` buckets (cumulative, then ``+Inf``) from the snapshot's per-bucket
    counts."""
    out: list[tuple[str, float]] = []
    total = 0
    for bound, count in zip(BUCKETS, hist["counts"], strict=False):
        total += count
        out.append((repr(float(bound)), float(total)))
    out.append(("+Inf", float(sum(hist["counts"]))))
    return out


# ---- one section of the snapshot each ------------------------------------------------
def _queue_families(snap: Snapshot) -> Iterator[Metric]:
    queues = sorted(snap["queues"].items())
    depths = {
        "ready": [((name,), float(q["ready"])) for name, q in queues],
        "scheduled": [((name,), float(q["scheduled"])) for name, q in queues],
        "claimed": [((name,), float(q["claimed"])) for name, q in queues],
        "running": [((name,), float(q["running"])) for name, q in queues],
    }
    for state, rows in depths.items():
        yield _gauge(
            f"sluicegate_queue_{state}_jobs",
            f"Jobs {state} in the queue, as this worker last sampled it.",
            ("queue",),
            rows,
        )
    yield _gauge(
        "sluicegate_queue_oldest_ready_age_seconds",
        "How long the oldest ready job of the queue has waited.",
        ("queue",),
        [((name,), q["oldest_ready_age_s"]) for name, q in queues],
    )
    yield _counter(
        "sluicegate_queue_enqueued_total",
        "Jobs stored in the queue (by anyone) since this worker started watching it; "
        "every worker of the queue counts the same jobs: take the max, not the sum.",
        ("queue",),
        [((name,), float(q["enqueued"])) for name, q in queues],
    )
    yield _counter(
        "sluicegate_queue_completed_total",
        "Jobs of the queue this worker finished (succeeded or dead).",
        ("queue",),
        [((name,), float(q["completed"])) for name, q in queues],
    )
    yield _counter(
        "sluicegate_queue_failed_total",
        "Failed attempts of the queue's jobs on this worker (retried or dead, timeouts included).",
        ("queue",),
        [((name,), float(q["failed"])) for name, q in queues],
    )


def _pool_families(snap: Snapshot) -> Iterator[Metric]:
    pools = sorted(snap["pools"].items())
    yield _gauge(
        "sluicegate_pool_slots",
        "Slots of the pool: jobs it may run at once.",
        ("pool", "model"),
        [((name, p["model"]), float(p["slots"])) for name, p in pools],
    )
    yield _gauge(
        "sluicegate_pool_busy_slots",
        "Slots of the pool busy now.",
        ("pool",),
        [((name,), float(p["busy"])) for name, p in pools],
    )
    yield _gauge(
        "sluicegate_pool_utilisation_ratio",
        "Busy slot-seconds over slot-seconds in the window (0 to 1).",
        ("pool", "window"),
        [
            ((name, window), p["utilisation"][window])
            for name, p in pools
            for window in WINDOWS
            if window in p["utilisation"]
        ],
    )
    yield _counter(
        "sluicegate_pool_claimed_total",
        "Jobs the pool claimed.",
        ("pool",),
        [((name,), float(p["claimed"])) for name, p in pools],
    )
    by_concurrency = SummaryMetricFamily(
        "sluicegate_duration_by_concurrency_seconds",
        "Job durations by how many of the pool's slots were busy when the job started "
        "(itself included): a mean that grows with busy slots means a saturated dependency.",
        labels=("pool", "busy"),
    )
    for name, p in pools:
        for busy, b in sorted(p["by_concurrency"].items(), key=lambda item: _int(item[0])):
            by_concurrency.add_metric((name, busy), count_value=b["count"], sum_value=b["sum"])
    yield by_concurrency


def _task_families(snap: Snapshot) -> Iterator[Metric]:
    tasks = sorted(snap["tasks"].items())
    duration = HistogramMetricFamily(
        "sluicegate_job_duration_seconds",
        "Duration of attempts that ended (any outcome).",
        labels=("task",),
    )
    wait = HistogramMetricFamily(
        "sluicegate_job_wait_seconds",
        "From ready (run_at) to the start of the body.",
        labels=("task",),
    )
    for name, t in tasks:
        duration.add_metric((name,), histogram_buckets(t["duration"]), t["duration"]["sum"])
        wait.add_metric((name,), histogram_buckets(t["wait"]), t["wait"]["sum"])
    yield duration
    yield wait
    yield _counter(
        "sluicegate_jobs_total",
        "Attempts that ended, by outcome (retried and dead attempts failed).",
        ("task", "outcome"),
        [
            ((name, outcome), float(count))
            for name, t in tasks
            for outcome, count in (
                ("succeeded", t["succeeded"]),
                ("retried", t["retried"]),
                ("dead", t["dead"]),
            )
        ],
    )
    yield _counter(
        "sluicegate_job_timeouts_total",
        "Attempts that ran past their timeout.",
        ("task",),
        [((name,), float(t["timed_out"])) for name, t in tasks],
    )


def _worker_families(snap: Snapshot) -> Iterator[Metric]:
    w = snap["worker_figures"]
    for name, doc, value in (
        (
            "recovered",
            "Expired leases (anyone's) this worker returned to ready or dead.",
            w["recovered"],
        ),
        (
            "lease_lost",
            "Jobs whose lease this worker lost before their outcome was written.",
            w["lease_lost"],
        ),
        ("broker_errors", "Broker calls that failed.", w["broker_errors"]),
        ("released", "Claimed jobs this worker released back to the queue.", w["released"]),
    ):
        yield _counter(f"sluicegate_worker_{name}_total", doc, (), [((), float(value))])
    yield _gauge(
        "sluicegate_worker_heartbeat_lag_seconds",
        "How late the last lease heartbeat ran past its due time.",
        (),
        [((), w["heartbeat_lag_s"])],
    )
    yield _gauge(
        "sluicegate_worker_held_jobs",
        "Jobs the worker holds (claimed or running).",
        (),
        [((), float(w["held"]))],
    )
    yield _gauge(
        "sluicegate_worker_healthy",
        "1 when the worker judges itself healthy, else 0.",
        (),
        [((), 1.0 if snap["health"]["healthy"] else 0.0)],
    )
    latency = HistogramMetricFamily(
        "sluicegate_claim_latency_seconds", "Duration of one broker claim call.", labels=()
    )
    latency.add_metric((), histogram_buckets(w["claim_latency"]), w["claim_latency"]["sum"])
    yield latency


def _host_families(snap: Snapshot) -> Iterator[Metric]:
    host = snap["host"]
    figures: list[tuple[str, str, float | None]] = [
        ("cpus", "Logical CPUs of the host.", float(host["cpus"])),
        ("cpu_percent", "CPU busy on the host, percent of all CPUs.", host["cpu_percent"]),
        ("iowait_percent", "CPU time waiting for I/O, percent.", host["iowait_percent"]),
        ("load1", "Load average over 1 minute.", host["load1"]),
        ("load5", "Load average over 5 minutes.", host["load5"]),
        ("load15", "Load average over 15 minutes.", host["load15"]),
    ]
    for name, doc, value in figures:
        if value is not None:  # no I/O wait figure on some platforms: no series
            yield _gauge(f"sluicegate_host_{name}", doc, (), [((), value)])


def _limit_families(snap: Snapshot) -> Iterator[Metric]:
    limits = sorted(snap["limits"].items())
    yield _gauge(
        "sluicegate_limit_in_use",
        "Cost units of the limit held by claimed and running jobs.",
        ("limit",),
        [((name,), float(lim["in_use"])) for name, lim in limits],
    )
    yield _gauge(
        "sluicegate_limit_waiting_jobs",
        "Ready jobs held back by the limit.",
        ("limit",),
        [((name,), float(lim["waiting"])) for name, lim in limits],
    )
    yield _gauge(
        "sluicegate_limit_capacity",
        "Concurrency of the limit: cost units it allows at once.",
        ("limit",),
        [
            ((name,), float(lim["concurrency"]))
            for name, lim in limits
            if lim["concurrency"] is not None
        ],
    )
    yield _gauge(
        "sluicegate_limit_oldest_wait_seconds",
        "How long the oldest job held back by the limit has been ready.",
        ("limit",),
        [((name,), lim["oldest_wait_s"]) for name, lim in limits],
    )


# ---- building families ----------------------------------------------------------------
def _gauge(name: str, doc: str, labels: Sequence[str], rows: Sequence[Row]) -> Metric:
    family = GaugeMetricFamily(name, doc, labels=labels)
    for values, value in rows:
        family.add_metric(values, value)
    return family


def _counter(name: str, doc: str, labels: Sequence[str], rows: Sequence[Row]) -> Metric:
    family = CounterMetricFamily(name, doc, labels=labels)
    for values, value in rows:
        family.add_metric(values, value)
    return family


def _int(text: str) -> int:
    return int(text) if text.isdigit() else 1 << 62


def _package_version() -> str:
    import sluicegate  # at call time: this module may load while the package still does

    return sluicegate.__version__
