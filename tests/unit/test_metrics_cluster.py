"""The read side of worker metrics, without a broker: worker status and health, the
cluster fold, sizing by Little's law, and the Prometheus export, all from hand-built
registry rows and snapshots."""

from __future__ import annotations

import bisect
import json
import math
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

from sluicegate.brokers.base import QueueDepth, WorkerInfo, WorkerList, WorkerRecord
from sluicegate.metrics import histogram, sizing
from sluicegate.metrics.cluster import fold
from sluicegate.metrics.prometheus import SnapshotCollector, exposition
from sluicegate.metrics.schema import (
    BUCKETS,
    VERSION,
    WINDOW_SECONDS,
    WINDOWS,
    Bin,
    Hist,
    LimitFigures,
    PoolFigures,
    QueueFigures,
    QueueWindow,
    Snapshot,
    TaskFigures,
)
from sluicegate.metrics.status import health_of, worker_status

T0 = 1_700_000_000.0  # the broker's clock: an epoch-sized "now"


# ---- builders -------------------------------------------------------------------------
def hist(*values: float, times: int = 1) -> Hist:
    """Each value observed ``times`` times, in the bucket whose bound is the first >= it."""
    counts = [0] * (len(BUCKETS) + 1)
    for value in values:
        counts[bisect.bisect_left(BUCKETS, value)] += times
    return {"counts": counts, "count": len(values) * times, "sum": sum(values) * times}


def qwindow(
    seconds: float = 60.0,
    enqueued: int = 0,
    completed: int = 0,
    duration: Hist | None = None,
    wait: Hist | None = None,
) -> QueueWindow:
    return {
        "seconds": seconds,
        "enqueued": enqueued,
        "completed": completed,
        "duration": duration or hist(),
        "wait": wait or hist(),
    }


def queue(
    ready: int = 0,
    scheduled: int = 0,
    claimed: int = 0,
    running: int = 0,
    oldest_ready_age_s: float = 0.0,
    enqueued: int = 0,
    completed: int = 0,
    failed: int = 0,
    **recent: QueueWindow,
) -> QueueFigures:
    """``recent`` by window name (``m1``, ``m5``, ``m15``); missing windows are empty."""
    given = {key[1:] + "m": value for key, value in recent.items()}
    return {
        "ready": ready,
        "scheduled": scheduled,
        "claimed": claimed,
        "running": running,
        "oldest_ready_age_s": oldest_ready_age_s,
        "enqueued": enqueued,
        "completed": completed,
        "failed": failed,
        "recent": {w: given.get(w, qwindow(WINDOW_SECONDS[w])) for w in WINDOWS},
    }


def pool(
    queues: list[str],
    slots: int = 4,
    busy: int = 0,
    model: str = "thread",
    claimed: int = 0,
    utilisation: float = 0.0,
    by_concurrency: dict[str, Bin] | None = None,
) -> PoolFigures:
    return {
        "queues": queues,
        "model": model,
        "slots": slots,
        "busy": busy,
        "claimed": claimed,
        "utilisation": dict.fromkeys(WINDOWS, utilisation),
        "by_concurrency": by_concurrency or {},
    }


def task(
    queue: str,
    succeeded: int = 0,
    retried: int = 0,
    dead: int = 0,
    timed_out: int = 0,
    duration: Hist | None = None,
    wait: Hist | None = None,
) -> TaskFigures:
    return {
        "queues": [queue],
        "succeeded": succeeded,
        "failed": retried + dead,
        "retried": retried,
        "timed_out": timed_out,
        "dead": dead,
        "duration": duration or hist(),
        "wait": wait or hist(),
    }


def limit(
    in_use: int = 0,
    waiting: int = 0,
    concurrency: int | None = 4,
    rate: str | None = None,
    oldest_wait_s: float = 0.0,
) -> LimitFigures:
    return {
        "concurrency": concurrency,
        "rate": rate,
        "in_use": in_use,
        "waiting": waiting,
        "oldest_wait_s": oldest_wait_s,
    }


def snapshot(
    worker: str = "w1",
    *,
    interval_s: float = 2.0,
    lease_s: float = 30.0,
    healthy: bool = True,
    reasons: list[str] | None = None,
    broker_ok: bool = True,
    stalled: list[str] | None = None,
    queues: dict[str, QueueFigures] | None = None,
    pools: dict[str, PoolFigures] | None = None,
    tasks: dict[str, TaskFigures] | None = None,
    limits: dict[str, LimitFigures] | None = None,
    cpu_percent: float = 10.0,
    iowait_percent: float | None = 1.5,
    **worker_figures: Any,
) -> Snapshot:
    """A full, valid snapshot; every figure not given is zero or empty."""
    figures = {
        "claimed": 0,
        "released": 0,
        "recovered": 0,
        "lease_lost": 0,
        "broker_errors": 0,
        "heartbeat_lag_s": 0.0,
        "held": 0,
        "claim_latency": hist(),
    }
    figures.update(worker_figures)
    return {
        "v": VERSION,
        "worker": worker,
        "at": T0,
        "uptime_s": 1000.0,
        "interval_s": interval_s,
        "lease_s": lease_s,
        "health": {
            "healthy": healthy,
            "loop_age_s": 0.1,
            "broker_ok": broker_ok,
            "stalled": stalled or [],
            "reasons": reasons or [],
        },
        "queues": queues or {},
        "pools": pools or {},
        "tasks": tasks or {},
        "worker_figures": figures,  # type: ignore[typeddict-item]
        "host": {
            "cpus": 8,
            "cpu_percent": cpu_percent,
            "iowait_percent": iowait_percent,
            "load1": 1.0,
            "load5": 0.5,
            "load15": 0.25,
        },
        "limits": limits or {},
    }


def record(
    snap: Snapshot | dict[str, Any] | None = None,
    *,
    worker: str | None = None,
    host: str = "h1",
    age: float = 1.0,
    stopped_at: float | None = None,
    started_at: float = T0 - 1000.0,
    held: int = 0,
) -> WorkerRecord:
    """A registry row last seen ``age`` seconds before T0."""
    worker_id = worker or (snap or {}).get("worker") or "w1"
    info = WorkerInfo(
        id=worker_id,
        host=host,
        pid=100,
        version="0.1.0",
        pools=({"name": "default", "queues": ["default"], "slots": 4, "model": "thread"},),
    )
    return WorkerRecord(
        info=info,
        started_at=started_at,
        last_seen=T0 - age,
        stopped_at=stopped_at,
        held=held,
        snapshot=dict(snap) if snap is not None else {},
    )


def rows(*records: WorkerRecord) -> WorkerList:
    return WorkerList(now=T0, workers=list(records))


# ---- histogram arithmetic ---------------------------------------------------------------
def test_quantile_interpolates_within_the_bucket() -> None:
    h = hist(0.02, times=10)  # all in (0.016, 0.02]
    assert histogram.quantile(h, 0.5) == pytest.approx(0.018)
    assert histogram.quantile(h, 1.0) == pytest.approx(0.02)
    assert histogram.mean(h) == pytest.approx(0.02)


def test_quantile_spans_buckets_and_caps_the_overflow() -> None:
    h = hist(0.0005, 0.0005, 0.003, 5000.0)
    assert histogram.quantile(h, 0.25) == pytest.approx(0.0005)  # half way into (0, 0.001]
    assert histogram.quantile(h, 0.75) == pytest.approx(0.00315)  # top of (0.0025, 0.00315]
    assert histogram.quantile(h, 1.0) == BUCKETS[-1]  # unbounded: the highest bound
    assert histogram.quantile(hist(), 0.5) is None
    assert histogram.mean(hist()) is None


def test_merge_adds_bucket_by_bucket() -> None:
    merged = histogram.merge(hist(0.02, times=3), hist(0.2, 0.02))
    assert merged["count"] == 5
    assert merged["sum"] == pytest.approx(0.28)
    assert merged["counts"] == hist(0.02, 0.02, 0.02, 0.02, 0.2)["counts"]
    with pytest.raises(ValueError, match="buckets"):
        histogram.merge(hist(), {"counts": [1], "count": 1, "sum": 1.0})


# ---- status and health ---------------------------------------------------------------
@pytest.mark.parametrize(
    ("age", "lease_s", "expected"),
    [
        (0.0, 30.0, "live"),
        (6.0, 30.0, "live"),  # three publishes of 2 s
        (6.01, 30.0, "late"),
        (29.9, 30.0, "late"),  # until the lease (longer than ten publishes)
        (30.0, 30.0, "lost"),
        (19.9, 5.0, "late"),  # a short lease: ten publishes
        (20.0, 5.0, "lost"),
    ],
)
def test_status_thresholds(age: float, lease_s: float, expected: str) -> None:
    assert worker_status(record(snapshot(lease_s=lease_s), age=age), T0) == expected


def test_status_follows_the_publish_interval_and_defaults_without_a_snapshot() -> None:
    slow = snapshot(interval_s=5.0, lease_s=1.0)
    assert worker_status(record(slow, age=15.0), T0) == "live"
    assert worker_status(record(slow, age=49.0), T0) == "late"
    assert worker_status(record(slow, age=50.0), T0) == "lost"
    assert worker_status(record(None, age=6.0), T0) == "live"  # 2 s interval assumed
    assert worker_status(record(None, age=7.0), T0) == "late"
    assert worker_status(record(None, age=20.0), T0) == "lost"
    assert worker_status(record(snapshot(), age=0.0, stopped_at=T0 - 1), T0) == "stopped"


def test_health_live_and_healthy() -> None:
    assert health_of(record(snapshot()), T0) == (True, [])


def test_health_reasons_in_words() -> None:
    assert health_of(record(snapshot(), age=12.34), T0) == (False, ["no heartbeat for 12.3 s"])
    assert health_of(record(snapshot(), stopped_at=T0 - 5), T0) == (False, ["stopped"])
    stalled = "pool email has free slots and ready jobs but has not claimed for 61 s"
    assert health_of(record(snapshot(healthy=False, reasons=[stalled])), T0) == (
        False,
        [stalled],
    )
    # An unhealthy snapshot without words: its fields speak for it.
    wordless = snapshot(healthy=False, broker_ok=False, stalled=["email"])
    healthy, reasons = health_of(record(wordless), T0)
    assert not healthy
    assert reasons[0] == "broker unreachable"
    assert reasons[1].startswith("pool email has free slots and ready jobs but has not claimed")


def test_health_of_a_late_worker_keeps_its_last_words_and_of_unreadable_rows() -> None:
    late = record(snapshot(healthy=False, reasons=["broker unreachable"]), age=10.0)
    assert health_of(late, T0) == (
        False,
        ["no heartbeat for 10.0 s", "broker unreachable (at its last publish)"],
    )
    assert health_of(record(None), T0) == (False, ["no metrics snapshot published yet"])
    healthy, reasons = health_of(record({"v": VERSION + 1, "worker": "w9"}), T0)
    assert not healthy
    assert "version" in reasons[0]


# ---- the cluster fold ----------------------------------------------------------------
def email_worker(
    worker: str,
    enqueued_1m: int,
    completed_1m: int,
    slots: int,
    utilisation: float,
    ready: int,
    **extra: Any,
) -> Snapshot:
    return snapshot(
        worker,
        queues={
            "email": queue(
                ready=ready,
                m1=qwindow(
                    60.0,
                    enqueued_1m,
                    completed_1m,
                    hist(0.02, times=completed_1m),
                    hist(0.004, times=completed_1m),
                ),
            )
        },
        pools={
            "email": pool(
                ["email"],
                slots=slots,
                busy=slots // 2,
                utilisation=utilisation,
                by_concurrency={"1": {"count": 10, "sum": 1.0}},
            )
        },
        tasks={
            "send": task(
                "email",
                succeeded=completed_1m,
                retried=1,
                dead=1,
                duration=hist(0.02, times=completed_1m),
            )
        },
        **extra,
    )


def test_fold_sums_what_is_each_workers_own_and_takes_the_max_of_arrivals() -> None:
    w1 = record(email_worker("w1", 600, 300, 4, 0.5, ready=5), age=3.0)
    w2 = record(email_worker("w2", 540, 240, 12, 1.0, ready=9), age=1.0, host="h2")
    view = fold(rows(w1, w2))

    email = view["queues"]["email"]
    assert email["enqueue_rate"] == pytest.approx(10.0)  # max(600, 540) / 60, not the sum
    assert email["completion_rate"] == pytest.approx(9.0)  # (300 + 240) / 60
    assert email["ready"] == 9  # the freshest snapshot's depth
    assert email["duration_p50_s"] == pytest.approx(0.018)
    assert 0.016 < email["duration_p95_s"] <= 0.02
    assert 0.0025 < email["wait_p50_s"] <= 0.005

    pools = view["pools"]["email"]
    assert (pools["workers"], pools["slots"], pools["busy"]) == (2, 16, 8)
    assert pools["utilisation"]["1m"] == pytest.approx((4 * 0.5 + 12 * 1.0) / 16)
    assert pools["queues"] == ["email"]
    assert pools["model"] == "thread"
    assert pools["by_concurrency"] == {"1": {"count": 20, "sum": 2.0}}

    send = view["tasks"]["send"]
    assert (send["succeeded"], send["retried"], send["dead"], send["failed"]) == (540, 2, 2, 4)
    assert send["duration_mean_s"] == pytest.approx(0.02)
    assert send["queues"] == ["email"]
    assert view["now"] == T0
    json.dumps(view, allow_nan=False)  # JSON-safe


def test_fold_leaves_out_lost_and_stopped_workers_figures_but_lists_them() -> None:
    live = record(email_worker("w1", 600, 300, 4, 0.5, ready=5))
    lost = record(email_worker("w2", 6000, 3000, 100, 1.0, ready=99), age=120.0)
    stopped = record(
        email_worker("w3", 6000, 3000, 100, 1.0, ready=99),
        stopped_at=T0 - 50.0,
        started_at=T0 - 250.0,
    )
    view = fold(rows(live, lost, stopped))

    assert view["queues"]["email"]["enqueue_rate"] == pytest.approx(10.0)
    assert view["queues"]["email"]["completion_rate"] == pytest.approx(5.0)
    assert view["pools"]["email"]["slots"] == 4
    assert view["tasks"]["send"]["succeeded"] == 300

    by_id = {w["id"]: w for w in view["workers"]}
    assert [w["id"] for w in view["workers"]] == ["w1", "w2", "w3"]
    assert by_id["w2"]["status"] == "lost"
    assert by_id["w2"]["reasons"] == ["no heartbeat for 120.0 s"]
    assert by_id["w2"]["last_seen_age_s"] == pytest.approx(120.0)
    assert by_id["w2"]["uptime_s"] == pytest.approx(880.0)  # until its last sign of life
    assert by_id["w3"]["status"] == "stopped"
    assert (by_id["w3"]["healthy"], by_id["w3"]["reasons"]) == (False, ["stopped"])
    assert by_id["w3"]["uptime_s"] == pytest.approx(200.0)
    assert by_id["w1"]["healthy"] is True
    assert by_id["w1"]["pools"] == [{"name": "email", "slots": 4, "busy": 2, "model": "thread"}]


def test_fold_counts_late_workers_but_takes_hosts_and_limits_from_live_ones() -> None:
    late = record(
        snapshot("w1", cpu_percent=99.0, limits={"api": limit(in_use=1)}),
        age=10.0,
    )
    old = record(snapshot("w2", cpu_percent=50.0, limits={"api": limit(in_use=2)}), age=4.0)
    fresh = record(snapshot("w3", cpu_percent=20.0, limits={"smtp": limit()}), age=0.5)
    other = record(snapshot("w4", cpu_percent=70.0), host="h2", age=2.0)
    view = fold(rows(late, old, fresh, other))

    assert view["hosts"]["h1"]["cpu_percent"] == 20.0  # the freshest live worker of h1
    assert view["hosts"]["h2"]["cpu_percent"] == 70.0
    assert view["limits"]["api"]["in_use"] == 2  # the freshest live snapshot that has it
    assert set(view["limits"]) == {"api", "smtp"}
    assert {w["id"]: w["status"] for w in view["workers"]}["w1"] == "late"


def test_fold_takes_depths_from_the_broker_when_given() -> None:
    w1 = record(email_worker("w1", 600, 300, 4, 0.5, ready=5))
    depths = {
        "email": QueueDepth(ready=7, scheduled=1, claimed=2, running=3, oldest_ready_age_s=4.5),
        "reports": QueueDepth(ready=40, oldest_ready_age_s=900.0),
    }
    view = fold(rows(w1), depths)
    assert view["queues"]["email"]["ready"] == 7
    assert view["queues"]["email"]["oldest_ready_age_s"] == 4.5
    assert view["queues"]["email"]["enqueue_rate"] == pytest.approx(10.0)
    # A queue no live worker watches: its depth, and no rates (nobody measures them).
    reports = view["queues"]["reports"]
    assert (reports["ready"], reports["enqueue_rate"], reports["completion_rate"]) == (
        40,
        None,
        None,
    )
    assert reports["duration_p50_s"] is None
    json.dumps(view, allow_nan=False)


# ---- sizing ---------------------------------------------------------------------------
def test_declared_shows_the_arithmetic() -> None:
    s = sizing.declared(100, 0.5)
    assert s.slots_exact == 50.0
    assert s.slots_at_target == 63
    assert s.lines() == [
        "100 jobs/s x 0.500 s = 50.0 slots busy on average "
        "(Little's law: slots = completions per second x mean duration)",
        "at 80% target utilisation: 63 slots",
    ]
    assert sizing.declared(100, 0.5, target=1.0).slots_at_target == 50
    assert sizing.declared(200, 0.02).slots_at_target == 5  # 4.0 / 0.8: no float creep to 6


@pytest.mark.parametrize(
    ("rate", "duration", "target", "message"),
    [
        (0, 0.5, 0.8, "rate must be a positive"),
        (-1, 0.5, 0.8, "rate must be a positive"),
        (math.nan, 0.5, 0.8, "rate must be a positive"),
        (100, 0, 0.8, "duration must be a positive"),
        (100, math.inf, 0.8, "duration must be a positive"),
        (100, 0.5, 0, "target utilisation must be above 0 and at most 1"),
        (100, 0.5, 1.2, "target utilisation must be above 0 and at most 1"),
    ],
)
def test_declared_refuses_nonsense(
    rate: float, duration: float, target: float, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        sizing.declared(rate, duration, target)


def test_parsing_durations_windows_and_rates() -> None:
    assert sizing.parse_duration("500ms") == pytest.approx(0.5)
    assert sizing.parse_duration("0.5s") == 0.5
    assert sizing.parse_duration("2m") == 120.0
    assert sizing.parse_duration("1.5") == 1.5
    assert sizing.parse_duration("1h") == 3600.0
    for bad in ("", "fast", "-1s", "5 days", "nan"):
        with pytest.raises(ValueError, match="duration must be a number"):
            sizing.parse_duration(bad)
    assert [sizing.parse_window(w) for w in ("1m", "5m", "15m")] == ["1m", "5m", "15m"]
    with pytest.raises(ValueError, match="window must be one of 1m, 5m, 15m, not '1h'"):
        sizing.parse_window("1h")
    assert sizing.parse_rate("100/s") == 100.0
    assert sizing.parse_rate("600/m") == 10.0
    assert sizing.parse_rate("100") == 100.0
    with pytest.raises(ValueError, match="rate must be jobs per time"):
        sizing.parse_rate("lots")


def steady_worker(
    worker: str,
    *,
    enqueued: int = 180_000,
    completed: int = 90_000,
    duration: float = 0.02,
    by_concurrency: dict[str, Bin] | None = None,
    limits: dict[str, LimitFigures] | None = None,
) -> Snapshot:
    """A worker of queue ``email`` over a full 15 minutes: 200 jobs/s arrive, and it
    finishes ``completed`` of them, each taking ``duration``."""
    m15 = qwindow(900.0, enqueued, completed, hist(duration, times=completed))
    return snapshot(
        worker,
        queues={"email": queue(m15=m15)},
        pools={"email": pool(["email"], slots=4, by_concurrency=by_concurrency)},
        limits=limits,
    )


def observe(*snaps: Snapshot, **kwargs: Any) -> sizing.Sizing:
    workers = rows(*(record(snap) for snap in snaps))
    return sizing.observed(fold(workers), workers, "email", **kwargs)


def test_observed_sizes_20ms_jobs_at_200_per_second_to_4_slots() -> None:
    s = observe(steady_worker("w1"), steady_worker("w2"))
    assert s.rate == pytest.approx(200.0)  # both saw the same arrivals: not 400
    assert s.duration_s == pytest.approx(0.02)
    assert s.slots_exact == pytest.approx(4.0)
    assert s.slots_at_target == 5
    assert s.samples == 180_000
    assert s.duration_p50_s == pytest.approx(0.018)
    assert s.duration_p95_s is not None and 0.016 < s.duration_p95_s <= 0.02
    assert (s.queue, s.window) == ("email", "15m")
    assert s.lines()[:3] == [
        "queue email, last 15m: 200 jobs/s, mean duration 0.020 s "
        "(p50 0.018 s, p95 0.020 s, from 180000 jobs)",
        "200 jobs/s x 0.020 s = 4.0 slots busy on average "
        "(Little's law: slots = completions per second x mean duration)",
        "at 80% target utilisation: 5 slots",
    ]
    assert s.notes == ["pools serving email (email) have 8 slots now; 5 needed at 80%: 3 to spare"]
    json.dumps(s.to_dict(), allow_nan=False)


def test_observed_falls_back_to_completions_when_nothing_arrived() -> None:
    s = observe(steady_worker("w1", enqueued=0), steady_worker("w2", enqueued=0))
    assert s.rate == pytest.approx(200.0)  # 2 x 90,000 / 900 s
    assert any("sized from completions instead" in note for note in s.notes)


def test_observed_without_figures_says_so() -> None:
    workers = rows(record(steady_worker("w1"), age=300.0))  # lost: its figures do not count
    with pytest.raises(ValueError, match="no live worker has figures for queue 'email'"):
        sizing.observed(fold(workers), workers, "email")
    workers = rows(record(steady_worker("w1")))
    with pytest.raises(ValueError, match="no live worker has figures for queue 'sms'"):
        sizing.observed(fold(workers), workers, "sms")
    with pytest.raises(ValueError, match="window must be one of"):
        sizing.observed(fold(workers), workers, "email", window="1h")
    idle = rows(record(steady_worker("w1", enqueued=10, completed=0)))
    with pytest.raises(ValueError, match="no job of queue 'email' finished"):
        sizing.observed(fold(idle), idle, "email")


def test_observed_names_a_full_limit_as_the_ceiling() -> None:
    limits = {
        "smtp": limit(in_use=4, waiting=12, concurrency=4, oldest_wait_s=3.2),
        "idle": limit(in_use=1, waiting=0, concurrency=4),
        "roomy": limit(in_use=1, waiting=3, concurrency=4),  # room left: not the ceiling
    }
    s = observe(steady_worker("w1", limits=limits))
    ceiling = [note for note in s.notes if "a limit, not the pool, is the ceiling" in note]
    assert len(ceiling) == 1
    assert "limit smtp is full (4 of 4 in use) with 12 ready jobs waiting" in ceiling[0]
    assert "more slots will not help" in ceiling[0]


def test_observed_says_when_duration_grew_with_concurrency() -> None:
    saturated: dict[str, Bin] = {
        "1": {"count": 30, "sum": 3.0},  # 0.1 s each
        "2": {"count": 30, "sum": 3.0},
        "3": {"count": 30, "sum": 5.0},
        "4": {"count": 30, "sum": 6.0},
        "5": {"count": 30, "sum": 9.0},  # 0.3 s each
        "6": {"count": 30, "sum": 9.0},
    }
    s = observe(steady_worker("w1", by_concurrency=saturated))
    grew = [note for note in s.notes if note.startswith("duration grew with concurrency")]
    assert len(grew) == 1
    assert "pool email" in grew[0]
    assert "with 5-6 slots busy took 0.300 s" in grew[0]
    assert "with 1-2 busy 0.100 s (3.0x)" in grew[0]
    assert "more slots will not help" in grew[0]


@pytest.mark.parametrize(
    "bins",
    [
        {"1": {"count": 30, "sum": 3.0}, "8": {"count": 30, "sum": 4.0}},  # 1.33x: flat enough
        {"1": {"count": 10, "sum": 1.0}, "8": {"count": 30, "sum": 9.0}},  # 10 jobs: too few
        {"4": {"count": 500, "sum": 50.0}},  # one level of concurrency: nothing to compare
    ],
)
def test_observed_is_quiet_about_concurrency_without_evidence(bins: dict[str, Bin]) -> None:
    s = observe(steady_worker("w1", by_concurrency=bins))
    assert not [note for note in s.notes if "grew with concurrency" in note]


# ---- Prometheus ----------------------------------------------------------------------
def exported(snap: Snapshot) -> dict[str, Any]:
    """name -> family, parsed back from the text exposition."""
    text = exposition(snap, host="h1", version="9.9").decode()
    return {family.name: family for family in text_string_to_metric_families(text)}


def samples(family: Any, name: str | None = None) -> dict[tuple[tuple[str, str], ...], float]:
    return {
        tuple(sorted(s.labels.items())): s.value
        for s in family.samples
        if name is None or s.name == name
    }


def prom_snapshot() -> Snapshot:
    return snapshot(
        "w1",
        queues={"email": queue(ready=3, running=2, oldest_ready_age_s=1.5, enqueued=70)},
        pools={
            "email": pool(
                ["email"],
                slots=8,
                busy=5,
                model="async",
                claimed=64,
                utilisation=0.625,
                by_concurrency={"2": {"count": 3, "sum": 0.3}, "10": {"count": 1, "sum": 0.5}},
            )
        },
        tasks={
            "send": task(
                "email",
                succeeded=60,
                retried=3,
                dead=1,
                timed_out=2,
                duration=hist(0.02, 0.02, 0.3, 5000.0),
                wait=hist(0.001),
            )
        },
        limits={"smtp": limit(in_use=4, waiting=2), "api": limit(concurrency=None, rate="10/s")},
        iowait_percent=None,
        recovered=2,
        lease_lost=1,
        broker_errors=5,
        released=7,
        held=5,
        heartbeat_lag_s=0.25,
        claim_latency=hist(0.002, 0.004),
    )


def test_prometheus_exposition_round_trip() -> None:
    families = exported(prom_snapshot())

    assert samples(families["sluicegate_queue_ready_jobs"]) == {(("queue", "email"),): 3.0}
    assert samples(families["sluicegate_queue_running_jobs"]) == {(("queue", "email"),): 2.0}
    assert families["sluicegate_queue_enqueued"].type == "counter"
    assert samples(families["sluicegate_queue_enqueued"], "sluicegate_queue_enqueued_total") == {
        (("queue", "email"),): 70.0
    }
    assert samples(families["sluicegate_pool_slots"]) == {
        (("model", "async"), ("pool", "email")): 8.0
    }
    assert samples(families["sluicegate_pool_utilisation_ratio"]) == {
        (("pool", "email"), ("window", w)): 0.625 for w in WINDOWS
    }
    assert samples(families["sluicegate_jobs"], "sluicegate_jobs_total") == {
        (("outcome", "succeeded"), ("task", "send")): 60.0,
        (("outcome", "retried"), ("task", "send")): 3.0,
        (("outcome", "dead"), ("task", "send")): 1.0,
    }
    assert samples(families["sluicegate_job_timeouts"], "sluicegate_job_timeouts_total") == {
        (("task", "send"),): 2.0
    }
    assert samples(families["sluicegate_worker_info"]) == {
        (("host", "h1"), ("version", "9.9"), ("worker", "w1")): 1.0
    }
    assert samples(families["sluicegate_worker_healthy"]) == {(): 1.0}
    assert samples(families["sluicegate_worker_released"], "sluicegate_worker_released_total") == {
        (): 7.0
    }
    assert samples(families["sluicegate_worker_heartbeat_lag_seconds"]) == {(): 0.25}
    assert samples(families["sluicegate_limit_in_use"]) == {
        (("limit", "api"),): 0.0,
        (("limit", "smtp"),): 4.0,
    }
    # Capacity only for limits with a concurrency; no I/O wait series where there is none.
    assert samples(families["sluicegate_limit_capacity"]) == {(("limit", "smtp"),): 4.0}
    assert "sluicegate_host_iowait_percent" not in families
    assert samples(families["sluicegate_host_load5"]) == {(): 0.5}

    by_concurrency = families["sluicegate_duration_by_concurrency_seconds"]
    assert samples(by_concurrency, "sluicegate_duration_by_concurrency_seconds_count") == {
        (("busy", "2"), ("pool", "email")): 3.0,
        (("busy", "10"), ("pool", "email")): 1.0,
    }
    assert samples(by_concurrency, "sluicegate_duration_by_concurrency_seconds_sum")[
        (("busy", "2"), ("pool", "email"))
    ] == pytest.approx(0.3)

    # Only worker_info names the worker: no per-process label on the figures.
    for family in families.values():
        if family.name != "sluicegate_worker_info":
            assert all("worker" not in s.labels for s in family.samples), family.name


def test_prometheus_histograms_are_cumulative() -> None:
    families = exported(prom_snapshot())
    duration = families["sluicegate_job_duration_seconds"]
    assert duration.type == "histogram"
    buckets = [
        (s.labels["le"], s.value)
        for s in duration.samples
        if s.name == "sluicegate_job_duration_seconds_bucket"
    ]
    assert len(buckets) == len(BUCKETS) + 1
    assert [float(le) for le, _ in buckets[:-1]] == list(BUCKETS)
    assert buckets[-1] == ("+Inf", 4.0)
    values = [value for _, value in buckets]
    assert values == sorted(values)  # cumulative: never decreasing
    assert dict(buckets)["0.025"] == 2.0  # the two 20 ms jobs
    assert dict(buckets)["0.5"] == 3.0  # ... and the 300 ms one
    assert dict(buckets)["3600.0"] == 3.0  # 5000 s is only in +Inf
    assert samples(duration, "sluicegate_job_duration_seconds_count") == {(("task", "send"),): 4.0}
    assert samples(duration, "sluicegate_job_duration_seconds_sum")[
        (("task", "send"),)
    ] == pytest.approx(5000.34)
    latency = families["sluicegate_claim_latency_seconds"]
    assert samples(latency, "sluicegate_claim_latency_seconds_count") == {(): 2.0}
    assert "sluicegate_job_wait_seconds" in families


def test_collector_reads_the_snapshot_at_scrape_time_only() -> None:
    calls: list[int] = []
    current: list[Snapshot | None] = [None]

    def latest() -> Snapshot | None:
        calls.append(1)
        return current[0]

    registry = CollectorRegistry()
    registry.register(SnapshotCollector(latest, "w1", "h1"))
    assert calls == []  # registering does not read a snapshot
    names = {metric.name for metric in registry.collect()}
    assert names == {"sluicegate_worker_info"}  # before the first snapshot: who, only
    current[0] = prom_snapshot()
    assert registry.get_sample_value("sluicegate_queue_ready_jobs", {"queue": "email"}) == 3.0
    assert (
        registry.get_sample_value(
            "sluicegate_worker_info", {"worker": "w1", "host": "h1", "version": "0.1.0"}
        )
        == 1.0
    )
    calls.clear()
    list(registry.collect())
    assert len(calls) == 1  # one snapshot read per scrape
