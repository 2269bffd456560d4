"""The in-memory side of the signals: histograms, windows, utilisation, host sampling and
the worker's recorder, all on fake clocks (no broker, no sleeping)."""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import psutil
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sluicegate.metrics import histogram
from sluicegate.metrics.histogram import SIZE, Histogram
from sluicegate.metrics.host import HostSampler
from sluicegate.metrics.recorder import WorkerMetrics
from sluicegate.metrics.schema import (
    BUCKETS,
    WINDOWS,
    Bin,
    Health,
    Hist,
    HostFigures,
    LimitFigures,
    PoolFigures,
    QueueFigures,
    QueueWindow,
    Snapshot,
    TaskFigures,
    WorkerFigures,
)
from sluicegate.metrics.utilisation import BusyTracker
from sluicegate.metrics.windows import SLOT_SECONDS, CountWindow, HistWindow, spans
from sluicegate.testing import FakeClock

values = st.floats(min_value=0.0, max_value=4000.0, allow_nan=False)


def hist_of(data: list[float]) -> Histogram:
    h = Histogram()
    for v in data:
        h.observe(v)
    return h


def bucket_of(value: float) -> int:
    """The bucket index by the definition (value <= bound), written out plainly."""
    for i, bound in enumerate(BUCKETS):
        if value <= bound:
            return i
    return len(BUCKETS)


# ---- histograms ----------------------------------------------------------------------
def test_buckets_follow_le_bounds() -> None:
    h = hist_of([0.0, 0.001, 0.0011, 3600.0, 3600.5, -3.0])
    assert h.counts[0] == 3  # 0, the bound itself, and the negative read as 0
    assert h.counts[1] == 1
    assert h.counts[len(BUCKETS) - 1] == 1
    assert h.counts[len(BUCKETS)] == 1
    assert h.count == 6
    assert h.sum == pytest.approx(0.001 + 0.0011 + 3600.0 + 3600.5)


def test_nan_and_infinity_are_dropped() -> None:
    h = hist_of([math.nan, math.inf, 1.0])
    assert h.count == 1
    assert sum(h.counts) == 1
    json.dumps(h.to_dict(), allow_nan=False)


def test_quantiles_on_known_data() -> None:
    # Ten values in (0.16, 0.2], ten in (0.63, 0.8]: the median sits at the top of the first.
    h = hist_of([0.2] * 10 + [0.75] * 10)
    assert h.quantile(0.5) == pytest.approx(0.2)
    # Rank 15 is the fifth of ten in (0.63, 0.8]: half way through that bucket.
    assert h.quantile(0.75) == pytest.approx(0.715)
    # Rank 2 of the ten in (0.16, 0.2]: 0.16 + 0.04 x 2/10.
    assert h.quantile(0.1) == pytest.approx(0.168)
    assert h.quantile(1.0) == pytest.approx(0.8)
    assert h.quantile(0.0) == pytest.approx(0.16)  # the lower bound of the first bucket used
    assert h.mean == pytest.approx((0.2 * 10 + 0.75 * 10) / 20)


def test_quantile_past_the_last_bound_is_the_last_bound() -> None:
    h = hist_of([5000.0, 9000.0])
    assert h.quantile(0.5) == BUCKETS[-1]
    assert h.quantile(0.99) == BUCKETS[-1]


def test_empty_histogram_has_no_quantile_or_mean() -> None:
    assert Histogram().quantile(0.5) is None
    assert Histogram().mean is None
    assert histogram.quantile(histogram.empty(), 0.9) is None


def test_quantile_rejects_q_outside_0_1() -> None:
    with pytest.raises(ValueError):
        hist_of([1.0]).quantile(1.5)


def test_evenly_spread_values_give_their_exact_quantiles() -> None:
    # 1000 values evenly spaced through (1, 2.5]: interpolation is exact to one step.
    data = [1.0 + 1.5 * (i + 1) / 1000 for i in range(1000)]
    h = hist_of(data)
    for q in (0.1, 0.25, 0.5, 0.9, 0.99):
        exact = sorted(data)[math.ceil(q * len(data)) - 1]
        estimate = h.quantile(q)
        assert estimate is not None
        assert abs(estimate - exact) <= 1.5 / 1000 + 1e-12


@given(st.lists(values, min_size=1, max_size=200), st.floats(min_value=0.0, max_value=1.0))
def test_quantile_lies_in_the_bucket_of_the_exact_quantile(data: list[float], q: float) -> None:
    ordered = sorted(data)
    exact = ordered[max(1, math.ceil(q * len(data))) - 1]  # nearest rank
    i = bucket_of(exact)
    lower = BUCKETS[i - 1] if i else 0.0
    upper = BUCKETS[i] if i < len(BUCKETS) else BUCKETS[-1]
    estimate = hist_of(data).quantile(q)
    assert estimate is not None
    assert lower - 1e-12 <= estimate <= upper + 1e-12
    assert histogram.quantile(hist_of(data).to_dict(), q) == estimate


@given(st.lists(values), st.lists(values), st.lists(values))
def test_merge_is_associative_and_matches_observing_everything(
    a: list[float], b: list[float], c: list[float]
) -> None:
    ha, hb, hc = (hist_of(x).to_dict() for x in (a, b, c))
    left = histogram.merge(histogram.merge(ha, hb), hc)
    right = histogram.merge(ha, histogram.merge(hb, hc))
    assert left["counts"] == right["counts"]
    assert left["count"] == right["count"]
    assert math.isclose(left["sum"], right["sum"], rel_tol=1e-12, abs_tol=1e-9)  # float adds
    everything = hist_of(a + b + c)
    assert left["counts"] == everything.counts
    assert left["count"] == everything.count == len(a + b + c)
    assert histogram.merge(ha, hb) == histogram.merge(hb, ha)
    # The object form agrees with the dict form.
    obj = hist_of(a)
    obj.merge(hist_of(b))
    obj.merge(hist_of(c))
    assert obj.counts == left["counts"]


def test_dict_round_trip_copies_and_checks_the_buckets() -> None:
    h = hist_of([0.3, 7.0])
    d = h.to_dict()
    back = Histogram.from_dict(d)
    assert back.to_dict() == d
    d["counts"][0] = 99
    assert back.counts[0] == 0
    with pytest.raises(ValueError):
        Histogram.from_dict({"counts": [0] * (SIZE - 1), "count": 0, "sum": 0.0})
    with pytest.raises(ValueError):
        histogram.merge(d, {"counts": [0], "count": 0, "sum": 0.0})


# ---- windows -------------------------------------------------------------------------
def test_spans_cover_min_of_window_and_uptime_in_whole_slots() -> None:
    assert spans(37.0) == {"1m": (4, 37.0), "5m": (4, 37.0), "15m": (4, 37.0)}
    # At 65 s the 1m window is slots 1..6: from 10 s on, 55 s.
    assert spans(65.0)["1m"] == (6, 55.0)
    assert spans(65.0)["5m"] == (7, 65.0)
    one, five, fifteen = (spans(5000.0)[w] for w in WINDOWS)
    assert one == (6, 50.0)  # at a slot boundary the current slot is empty
    assert five == (30, 290.0)
    assert fifteen == (90, 890.0)


def test_count_window_rolls_over() -> None:
    clock = FakeClock()
    w = CountWindow(clock)
    clock.advance(5.0)
    w.add(3)
    clock.advance(60.0)  # t = 65: slot 0 left the 1m window
    w.add(2)
    assert w.totals() == {"1m": (2, 55.0), "5m": (5, 65.0), "15m": (5, 65.0)}
    clock.advance(300.0)  # t = 365: the 5m window (slots 7..36) holds neither
    assert w.totals() == {"1m": (0, 55.0), "5m": (0, 295.0), "15m": (5, 365.0)}
    clock.advance(540.0)  # t = 905: slot 0 has left the ring, slot 6 has not
    assert w.totals()["15m"] == (2, 895.0)


@pytest.mark.parametrize("gap", [0.0, 100.0, 400.0, 890.0, 900.0, 905.0, 86_400.0 * 3])
def test_count_window_after_a_long_idle_gap(gap: float) -> None:
    clock = FakeClock()
    w = CountWindow(clock)
    for _ in range(50):  # fill many slots
        w.add(1)
        clock.advance(SLOT_SECONDS)
    clock.advance(gap)
    totals = w.totals()
    # Whatever the gap, the event of slot i counts iff i is among a window's newest slots.
    current = int((500.0 + gap) // SLOT_SECONDS)
    newest = {"1m": 6, "5m": 30, "15m": 90}
    expected = {w: sum(1 for i in range(50) if current - i < n) for w, n in newest.items()}
    assert {name: total for name, (total, _) in totals.items()} == expected
    w.add(7)
    assert all(total >= 7 for total, _ in w.totals().values())
    assert w.totals()["1m"][0] == 7 + expected["1m"]


def test_count_window_forgets_everything_after_15_idle_minutes() -> None:
    clock = FakeClock()
    w = CountWindow(clock)
    w.add(100)
    clock.advance(900.0 + SLOT_SECONDS)
    assert [t for t, _ in w.totals().values()] == [0, 0, 0]
    clock.advance(10_000.0)
    w.add(1)
    assert [t for t, _ in w.totals().values()] == [1, 1, 1]


def test_hist_window_rolls_over_and_survives_idle_gaps() -> None:
    clock = FakeClock()
    w = HistWindow(clock)
    w.observe(0.2)
    clock.advance(70.0)
    w.observe(3.0)
    totals = w.totals()
    assert totals["1m"][0].count == 1
    assert totals["1m"][0].sum == pytest.approx(3.0)
    assert totals["5m"][0].count == 2
    assert totals["15m"][1] == pytest.approx(70.0)
    clock.advance(5000.0)
    assert [h.count for h, _ in w.totals().values()] == [0, 0, 0]
    w.observe(1.0)
    assert [h.count for h, _ in w.totals().values()] == [1, 1, 1]


def test_a_clock_going_back_never_rewrites_an_old_slot() -> None:
    clock = FakeClock()
    w = CountWindow(clock)
    clock.advance(30.0)
    w.add(1)
    clock.advance(-25.0)  # a caller's stale ``now``
    w.add(1)
    assert w.totals()["1m"] == (2, 30.0)


# ---- utilisation ---------------------------------------------------------------------
def exact_utilisation(
    changes: list[tuple[float, int]], start: float, now: float, seconds: float, slots: int
) -> float:
    """Busy slot-seconds over [now - seconds, now] of the step function ``changes``
    ((time, busy) in order; 0 before the first), by brute-force integration."""
    lo, total = now - seconds, 0.0
    points = [*changes, (now, 0)]
    busy, t = 0, start
    for when, level in points:
        a, b = max(t, lo), min(when, now)
        if b > a:
            total += busy * (b - a)
        busy, t = level, when
    return total / (slots * seconds) if seconds > 0 else 0.0


def test_utilisation_of_a_known_step_function() -> None:
    clock = FakeClock()
    start = clock()
    tracker = BusyTracker(4, clock)
    changes: list[tuple[float, int]] = []
    for dt, busy in [(3.0, 1), (4.5, 4), (20.0, 2), (61.0, 3), (0.25, 0), (400.0, 4), (7.7, 1)]:
        clock.advance(dt)
        tracker.change(busy)
        changes.append((clock(), busy))
    clock.advance(13.0)  # an open interval at busy 1 up to now
    got = tracker.utilisation()
    for w, (_, seconds) in spans(clock() - start).items():
        exact = exact_utilisation(changes, start, clock(), seconds, 4)
        assert abs(got[w] - exact) < 0.005, w


def test_utilisation_while_younger_than_the_window_covers_all_uptime() -> None:
    clock = FakeClock()
    tracker = BusyTracker(2, clock)
    clock.advance(12.0)
    tracker.change(2)
    clock.advance(18.0)  # t = 30: busy 2 for 18 of 30 s
    assert tracker.utilisation() == pytest.approx({w: 36.0 / 60.0 for w in WINDOWS})


def test_utilisation_stays_full_without_changes_and_after_long_gaps() -> None:
    clock = FakeClock()
    tracker = BusyTracker(3, clock)
    tracker.change(3)
    clock.advance(3 * 3600.0)
    assert tracker.utilisation() == pytest.approx({w: 1.0 for w in WINDOWS})
    tracker.change(0)
    clock.advance(2000.0)
    assert tracker.utilisation() == {w: 0.0 for w in WINDOWS}


def test_utilisation_with_no_time_or_no_slots_is_zero() -> None:
    clock = FakeClock()
    assert BusyTracker(4, clock).utilisation() == {w: 0.0 for w in WINDOWS}
    empty = BusyTracker(0, clock)
    clock.advance(30.0)
    assert empty.utilisation() == {w: 0.0 for w in WINDOWS}


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.floats(min_value=0.0, max_value=400.0), st.integers(0, 8)), max_size=40),
    st.floats(min_value=0.0, max_value=2000.0),
)
def test_utilisation_matches_exact_integration(steps: list[tuple[float, int]], tail: float) -> None:
    clock = FakeClock()
    start = clock()
    tracker = BusyTracker(8, clock)
    changes: list[tuple[float, int]] = []
    for dt, busy in steps:
        clock.advance(dt)
        tracker.change(busy)
        changes.append((clock(), busy))
    clock.advance(tail)
    got = tracker.utilisation()
    for w, (_, seconds) in spans(clock() - start).items():
        exact = exact_utilisation(changes, start, clock(), seconds, 8)
        assert abs(got[w] - exact) < 0.005, w


# ---- host ----------------------------------------------------------------------------
def test_host_sampler_primes_then_reports() -> None:
    sampler = HostSampler()
    first = sampler.sample()
    assert first["cpu_percent"] == 0.0
    assert first["iowait_percent"] is None
    second = sampler.sample()
    assert set(second) == set(HostFigures.__annotations__)
    assert 0.0 <= second["cpu_percent"] <= 100.0
    assert second["cpus"] >= 1
    assert second["load1"] >= 0.0


def test_host_sampler_never_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: object, **kwargs: object) -> Any:
        raise OSError("no /proc here")

    sampler = HostSampler()
    monkeypatch.setattr(psutil, "cpu_times_percent", broken)
    monkeypatch.setattr(psutil, "getloadavg", broken)
    monkeypatch.setattr(os, "getloadavg", broken)
    figures = sampler.sample()
    assert figures["cpu_percent"] == 0.0
    assert figures["iowait_percent"] is None
    assert (figures["load1"], figures["load5"], figures["load15"]) == (0.0, 0.0, 0.0)


# ---- the recorder --------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Depth:
    ready: int = 0
    scheduled: int = 0
    claimed: int = 0
    running: int = 0
    oldest_ready_age_s: float = 0.0


HEALTH: Health = {
    "healthy": True,
    "loop_age_s": 0.1,
    "broker_ok": True,
    "stalled": [],
    "reasons": [],
}
POOLS = [("io", ["emails", "hooks"], "thread", 4), ("cpu", ["reports"], "process", 2)]


def scripted() -> tuple[WorkerMetrics, FakeClock]:
    clock = FakeClock()
    m = WorkerMetrics("w-1", POOLS, interval_s=2.0, lease_s=30.0, clock=clock)
    m.arrived({"emails": 5, "reports": 1, "elsewhere": 9})
    m.claimed("io", 3, 0.004)
    m.claimed("io", 0, 0.002)
    m.claimed("cpu", 1, 0.003)
    m.busy_changed("io", 1)
    m.started("send", "emails", 0.5)
    m.busy_changed("io", 2)
    m.started("send", "emails", 0.7)
    m.busy_changed("io", 3)
    m.started("send", "emails", 1.5)
    clock.advance(2.0)
    m.finished("io", "send", "emails", 2.0, "succeeded", 1)
    m.busy_changed("io", 2)
    m.finished("io", "send", "emails", 2.0, "retried", 2, timed_out=True)
    m.busy_changed("io", 1)
    m.finished("io", "send", "emails", 2.0, "dead", 3)
    m.busy_changed("io", 0)
    m.busy_changed("cpu", 1)
    m.started("report", "reports", 0.1)
    clock.advance(8.0)
    m.finished("cpu", "report", "reports", 8.0, "succeeded", 1)
    m.busy_changed("cpu", 0)
    m.tallies(
        claimed=4, released=2, recovered=1, lease_lost=1, broker_errors=2, heartbeat_lag_s=0.25
    )
    m.depths({"emails": Depth(ready=4, oldest_ready_age_s=3.5), "other": Depth(ready=99)})
    m.limits({"smtp": {"concurrency": 5, "rate": None, "in_use": 1, "waiting": 0,
                       "oldest_wait_s": 0.0}})  # fmt: skip
    m.host({"cpus": 8, "cpu_percent": 12.5, "iowait_percent": None, "load1": 0.5,
            "load5": 0.4, "load15": 0.3})  # fmt: skip
    clock.advance(10.0)  # t = 20
    return m, clock


def test_recorder_counts_a_scripted_sequence_exactly() -> None:
    m, _ = scripted()
    snap = m.snapshot(HEALTH, held=0)
    send = snap["tasks"]["send"]
    assert (send["succeeded"], send["retried"], send["dead"]) == (1, 1, 1)
    assert (send["failed"], send["timed_out"], send["queues"]) == (2, 1, ["emails"])
    assert snap["queues"]["emails"]["failed"] == 2
    assert send["duration"]["count"] == 3
    assert send["duration"]["sum"] == pytest.approx(6.0)
    assert send["wait"]["count"] == 3
    assert send["wait"]["sum"] == pytest.approx(2.7)
    assert snap["tasks"]["report"]["succeeded"] == 1

    emails = snap["queues"]["emails"]
    assert (emails["enqueued"], emails["completed"]) == (5, 2)  # the retry is not completed
    assert (emails["ready"], emails["oldest_ready_age_s"]) == (4, 3.5)
    for w in WINDOWS:
        recent = emails["recent"][w]
        assert recent["seconds"] == pytest.approx(20.0)
        assert (recent["enqueued"], recent["completed"]) == (5, 2)
        assert recent["duration"]["count"] == 3  # every attempt held a slot
        assert recent["wait"]["count"] == 3
    assert snap["queues"]["reports"]["ready"] == 0  # absent from the sample: empty
    assert snap["queues"]["reports"]["completed"] == 1
    assert snap["queues"]["hooks"]["recent"]["1m"]["enqueued"] == 0  # idle, still present
    assert set(snap["queues"]) == {"emails", "hooks", "reports"}

    io = snap["pools"]["io"]
    assert (io["claimed"], io["busy"], io["slots"], io["model"]) == (3, 0, 4, "thread")
    assert io["queues"] == ["emails", "hooks"]
    assert io["by_concurrency"] == {
        "1": {"count": 1, "sum": 2.0},
        "2": {"count": 1, "sum": 2.0},
        "3": {"count": 1, "sum": 2.0},
    }
    # io: 3 slots busy for 2 s out of 4 slots x 20 s.
    assert io["utilisation"] == pytest.approx({w: 6.0 / 80.0 for w in WINDOWS})
    # cpu: 1 slot busy for 8 s out of 2 slots x 20 s.
    assert snap["pools"]["cpu"]["utilisation"] == pytest.approx({w: 0.2 for w in WINDOWS})

    wf = snap["worker_figures"]
    assert (wf["claimed"], wf["released"], wf["recovered"]) == (4, 2, 1)
    assert (wf["lease_lost"], wf["broker_errors"], wf["heartbeat_lag_s"]) == (1, 2, 0.25)
    assert wf["claim_latency"]["count"] == 3
    assert snap["limits"]["smtp"]["in_use"] == 1
    assert snap["host"]["cpus"] == 8
    assert snap["uptime_s"] == pytest.approx(20.0)
    assert (snap["v"], snap["worker"], snap["interval_s"], snap["lease_s"]) == (
        1,
        "w-1",
        2.0,
        30.0,
    )


def test_recorder_windows_forget_old_activity() -> None:
    m, clock = scripted()
    clock.advance(1000.0)
    snap = m.snapshot(HEALTH, held=0)
    emails = snap["queues"]["emails"]
    assert emails["completed"] == 2  # cumulative
    assert all(emails["recent"][w]["completed"] == 0 for w in WINDOWS)
    assert all(emails["recent"][w]["duration"]["count"] == 0 for w in WINDOWS)
    assert snap["pools"]["io"]["utilisation"] == {w: 0.0 for w in WINDOWS}
    assert snap["tasks"]["send"]["duration"]["count"] == 3  # cumulative


def test_recorder_rejects_an_unknown_outcome() -> None:
    m = WorkerMetrics("w", POOLS, 2.0, 30.0, clock=FakeClock())
    with pytest.raises(ValueError):
        m.finished("io", "send", "emails", 1.0, "cancelled", 1)


def test_fresh_snapshot_lists_every_pool_queue_with_zeros() -> None:
    m = WorkerMetrics("w", POOLS, 2.0, 30.0, clock=FakeClock())
    snap = m.snapshot(HEALTH, held=0)
    assert set(snap["queues"]) == {"emails", "hooks", "reports"}
    assert snap["queues"]["hooks"]["recent"]["15m"] == {
        "seconds": 0.0,
        "enqueued": 0,
        "completed": 0,
        "duration": histogram.empty(),
        "wait": histogram.empty(),
    }
    assert snap["pools"]["cpu"]["utilisation"] == {w: 0.0 for w in WINDOWS}
    assert snap["tasks"] == {}


def check_keys(value: dict[str, Any], shape: type) -> None:
    assert set(value) == set(shape.__annotations__), shape.__name__


def test_snapshot_is_json_and_has_exactly_the_schema_keys() -> None:
    m, _ = scripted()
    snap: Snapshot = m.snapshot(HEALTH, held=3)
    text = json.dumps(snap, allow_nan=False)
    assert json.loads(text) == snap
    assert len(text) < 16_000
    check_keys(dict(snap), Snapshot)
    check_keys(dict(snap["health"]), Health)
    check_keys(dict(snap["worker_figures"]), WorkerFigures)
    check_keys(dict(snap["worker_figures"]["claim_latency"]), Hist)
    check_keys(dict(snap["host"]), HostFigures)
    for limit in snap["limits"].values():
        check_keys(dict(limit), LimitFigures)
    for queue in snap["queues"].values():
        check_keys(dict(queue), QueueFigures)
        assert list(queue["recent"]) == list(WINDOWS)
        for window in queue["recent"].values():
            check_keys(dict(window), QueueWindow)
            check_keys(dict(window["duration"]), Hist)
            check_keys(dict(window["wait"]), Hist)
            assert len(window["duration"]["counts"]) == SIZE
    for pool in snap["pools"].values():
        check_keys(dict(pool), PoolFigures)
        assert list(pool["utilisation"]) == list(WINDOWS)
        for b in pool["by_concurrency"].values():
            check_keys(dict(b), Bin)
    for task in snap["tasks"].values():
        check_keys(dict(task), TaskFigures)
        check_keys(dict(task["duration"]), Hist)
        check_keys(dict(task["wait"]), Hist)
    assert snap["worker_figures"]["held"] == 3


# ---- the hot path does no I/O --------------------------------------------------------
_IO_EVENTS = ("open", "os.", "socket.", "subprocess.", "shutil.", "sqlite3.", "urllib.")
_seen: list[str] | None = None  # collecting while not None


def _audit(event: str, args: tuple[object, ...]) -> None:
    if _seen is not None and event.startswith(_IO_EVENTS):
        _seen.append(event)


sys.addaudithook(_audit)  # hooks cannot be removed; this one is idle outside io_events()


@contextmanager
def io_events() -> Iterator[list[str]]:
    """The audit events of file, socket and process I/O raised inside the block."""
    global _seen
    _seen = seen = []
    try:
        yield seen
    finally:
        _seen = None


def test_hot_path_calls_do_no_io() -> None:
    clock = FakeClock()
    m = WorkerMetrics("w", POOLS, 2.0, 30.0, clock=clock)
    outcomes = ("succeeded", "retried", "dead")
    with io_events() as seen:
        for i in range(200):
            clock.advance(0.7)
            m.claimed("io", 1, 0.001)
            m.busy_changed("io", 1)
            m.started("send", "emails", 0.01 * i)
            m.finished("io", "send", "emails", 0.02 * i, outcomes[i % 3], 1, timed_out=i % 5 == 0)
            m.busy_changed("io", 0)
    assert seen == []
    with io_events() as seen:  # the hook does see I/O
        open(__file__).close()
    assert seen == ["open"]
