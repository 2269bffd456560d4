"""The last hour by minute: each worker's wall-clock-aligned buckets (``metrics.minutes``
through the recorder's snapshot) and their cluster-wide merge (``metrics.history``), on
fake clocks: no broker, no sleeping."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sluicegate.brokers.base import WorkerInfo, WorkerList, WorkerRecord
from sluicegate.metrics.cluster import fold
from sluicegate.metrics.history import POINTS, history
from sluicegate.metrics.minutes import BUCKETS, STEP_S, MinuteBusy, MinuteCounts
from sluicegate.metrics.recorder import WorkerMetrics
from sluicegate.metrics.schema import Health, History, PoolHistory, QueueHistory, Snapshot
from sluicegate.testing import FakeClock

M0 = 1_699_999_980.0  # a whole epoch minute: FakeClock's default start is M0 + 20
POOLS = [("io", ["emails"], "thread", 4), ("cpu", ["reports"], "process", 2)]
HEALTH: Health = {
    "healthy": True,
    "loop_age_s": 0.1,
    "broker_ok": True,
    "stalled": [],
    "reasons": [],
}


@dataclass
class Depth:
    ready: int = 0
    scheduled: int = 0
    claimed: int = 0
    running: int = 0
    oldest_ready_age_s: float = 0.0


def recorder(
    at: float, pools: list[tuple[str, list[str], str, int]] = POOLS, name: str = "w"
) -> tuple[WorkerMetrics, FakeClock]:
    """A recorder started at epoch ``at``, its monotonic and wall clocks one fake clock."""
    clock = FakeClock(at)
    return WorkerMetrics(name, pools, 2.0, 30.0, clock=clock, wall=clock), clock


def done(m: WorkerMetrics, at: float, outcome: str = "succeeded", queue: str = "emails") -> None:
    pool = "io" if queue == "emails" else "cpu"
    m.finished(pool, "send", queue, 0.01, outcome, 1, now=at)


def row(snap: Snapshot, *, seen: float | None = None, stopped: bool = False) -> WorkerRecord:
    """The registry row a publish of ``snap`` leaves, read back through JSON; ``seen``
    (the broker's clock at the publish) defaults to the snapshot's own time."""
    last_seen = snap["at"] if seen is None else seen
    info = WorkerInfo(id=snap["worker"], host="h", pid=1, version="0", pools=())
    return WorkerRecord(
        info=info,
        started_at=last_seen - snap["uptime_s"],
        last_seen=last_seen,
        stopped_at=last_seen if stopped else None,
        held=0,
        snapshot=json.loads(json.dumps(snap, separators=(",", ":"))),
    )


def hist_of(snap: Snapshot) -> History:
    assert "history" in snap
    return snap["history"]


# ---- one worker's buckets ------------------------------------------------------------
def test_buckets_follow_the_wall_clock_not_the_monotonic_one() -> None:
    mono = FakeClock(5000.0)
    m = WorkerMetrics("w", POOLS, 2.0, 30.0, clock=mono, wall=lambda: mono.now - 5000.0 + M0 + 50)
    mono.advance(9.0)  # M0 + 59
    done(m, mono())
    mono.advance(2.0)  # M0 + 61: the next wall minute, though not 60 s after the start
    done(m, mono())
    done(m, mono())
    h = hist_of(m.snapshot(HEALTH, held=0))
    assert (h["step_s"], h["newest"], h["since"], h["until"]) == (60, M0 + 60, M0 + 50, M0 + 61)
    # No depth sample yet: the ages are unknown, not 0.
    assert h["queues"]["emails"] == {"completed": [1, 2], "oldest_ready_age_s": [None, None]}


def test_series_that_would_be_all_zeros_are_left_out() -> None:
    m, clock = recorder(M0)
    m.depths({})
    clock.advance(61.0)
    m.depths({})
    h = hist_of(m.snapshot(HEALTH, held=0))
    assert h["queues"] == {"emails": {}, "reports": {}}  # sampled, and nothing waited
    assert h["pools"] == {"io": {}, "cpu": {}}


def test_failed_attempts_and_the_oldest_age_per_minute() -> None:
    m, clock = recorder(M0 + 20)
    m.depths({"emails": Depth(ready=2, oldest_ready_age_s=3.04)})
    done(m, clock.advance(5.0), "retried")
    done(m, clock(), "dead")
    done(m, clock())
    m.depths({"emails": Depth(ready=2, oldest_ready_age_s=5.0)})
    m.depths({"emails": Depth(ready=2, oldest_ready_age_s=4.0)})
    clock.advance(60.0)  # minute 1: no depth sample (the broker was unreachable, say)
    clock.advance(60.0)  # minute 2: sampled, and nothing waits
    m.depths({})
    q = hist_of(m.snapshot(HEALTH, held=0))["queues"]["emails"]
    assert q == {
        "completed": [2, 0, 0],
        "failed": [2, 0, 0],
        "oldest_ready_age_s": [5.0, None, 0.0],
    }


def test_the_hour_rolls_over() -> None:
    m, clock = recorder(M0 + 20)
    for minute in range(90):  # minute k: k % 5 + 1 jobs, 10 s into it
        clock.now = M0 + minute * STEP_S + 10
        for _ in range(minute % 5 + 1):
            done(m, clock())
    clock.now = M0 + 89 * STEP_S + 30
    h = hist_of(m.snapshot(HEALTH, held=0))
    assert h["newest"] == M0 + 89 * STEP_S
    assert h["since"] == M0 + 20  # the worker's start: older than the hour kept
    assert h["queues"]["emails"]["completed"] == [k % 5 + 1 for k in range(30, 90)]
    assert len(h["queues"]["emails"]["completed"]) == BUCKETS == 60


@pytest.mark.parametrize("gap", [3601.0, 7200.0, 86_400.0 * 3])
def test_an_idle_gap_longer_than_an_hour_leaves_nothing_but_what_was_held(gap: float) -> None:
    m, clock = recorder(M0 + 20)
    m.busy_changed("io", 4, clock())
    m.busy_changed("cpu", 1, clock())
    done(m, clock.advance(1.0))
    m.busy_changed("io", 0, clock())
    clock.advance(gap)  # no call at all: the cpu pool stays half busy throughout
    h = hist_of(m.snapshot(HEALTH, held=0))
    assert h["queues"]["emails"] == {"oldest_ready_age_s": [None] * 60}  # never sampled
    assert "io" not in h["pools"] or h["pools"]["io"] == {}
    assert h["pools"]["cpu"]["utilisation"] == [0.5] * 60
    assert h["newest"] == (M0 + 21 + gap) // STEP_S * STEP_S
    clock.advance(30.0)
    done(m, clock())  # and the ring records again after the gap
    assert hist_of(m.snapshot(HEALTH, held=0))["queues"]["emails"]["completed"][-1] == 1


def test_utilisation_is_busy_slot_seconds_over_the_seconds_covered() -> None:
    m, clock = recorder(M0 + 20)  # io: 4 slots
    m.busy_changed("io", 2, M0 + 30)
    m.busy_changed("io", 4, M0 + 75)
    m.busy_changed("io", 0, M0 + 150)
    clock.now = M0 + 170
    h = hist_of(m.snapshot(HEALTH, held=0))
    # Minute 0 covers 40 s (the worker started at 20): 2 x 30 slot-seconds of 4 x 40.
    # Minute 1: 2 x 15 + 4 x 45 of 4 x 60. Minute 2, so far (50 s): 4 x 30 of 4 x 50.
    assert h["pools"]["io"]["utilisation"] == [0.375, 0.875, 0.6]
    assert h["pools"]["cpu"] == {}


def exact_minutes(changes: list[tuple[float, int]], end: float) -> dict[int, float]:
    """Busy slot-seconds per epoch minute of a step function, by brute force."""
    out: dict[int, float] = {}
    for (t, busy), (t_next, _) in zip(changes, [*changes[1:], (end, 0)], strict=True):
        while t < t_next:
            minute = int(t // STEP_S)
            edge = min(t_next, (minute + 1) * STEP_S)
            out[minute] = out.get(minute, 0.0) + busy * (edge - t)
            t = edge
    return out


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.floats(min_value=0.0, max_value=400.0), st.integers(0, 8)), max_size=40),
    st.floats(min_value=0.0, max_value=5000.0),
)
def test_minute_busy_matches_exact_integration(steps: list[tuple[float, int]], tail: float) -> None:
    now = M0 + 20
    ring = MinuteBusy(0.0, now)
    changes = [(now, 0)]
    for dt, busy in steps:
        now += dt
        ring.change(busy, now)
        changes.append((now, busy))
    now += tail
    newest = int(now // STEP_S)
    got = ring.seconds(now, newest, BUCKETS)
    exact = exact_minutes(changes, now)
    for back, seconds in enumerate(reversed(got)):
        assert seconds == pytest.approx(exact.get(newest - back, 0.0), abs=1e-6)


def test_a_clock_going_back_never_rewrites_a_bucket_left_behind() -> None:
    ring = MinuteCounts(0.0, M0 + 20)
    ring.add(M0 + 70)
    ring.add(M0 + 30)  # an outcome counted late: it lands in the newest bucket
    assert ring.series(int((M0 + 80) // STEP_S), 2) == [0, 2]


def test_a_stepped_wall_clock_moves_later_buckets_only() -> None:
    mono = FakeClock(100.0)
    wall = FakeClock(M0 + 20)

    def tick(seconds: float) -> None:
        mono.advance(seconds)
        wall.advance(seconds)

    m = WorkerMetrics("w", POOLS, 2.0, 30.0, clock=mono, wall=wall)
    tick(10.0)
    done(m, mono())  # M0 + 30
    m.snapshot(HEALTH, held=0)
    wall.advance(300.0)  # the wall clock is set five minutes ahead
    tick(5.0)
    assert hist_of(m.snapshot(HEALTH, held=0))["newest"] == M0 + 300
    done(m, mono())  # M0 + 335 on the new wall clock
    h = hist_of(m.snapshot(HEALTH, held=0))
    assert h["queues"]["emails"]["completed"] == [1, 0, 0, 0, 0, 1]


def test_history_lists_every_queue_and_pool_and_only_schema_keys() -> None:
    m, clock = recorder(M0 + 20)
    done(m, clock.advance(1.0), "retried")
    m.depths({"emails": Depth(ready=1, oldest_ready_age_s=2.0)})
    m.busy_changed("io", 1, clock())
    clock.advance(1.0)
    snap = m.snapshot(HEALTH, held=0)
    h = hist_of(snap)
    assert set(h) == set(History.__annotations__)
    assert set(h["queues"]) == set(snap["queues"])
    assert set(h["pools"]) == set(snap["pools"])
    for q in h["queues"].values():
        assert set(q) <= set(QueueHistory.__annotations__)
    for p in h["pools"].values():
        assert set(p) <= set(PoolHistory.__annotations__)
    assert h["queues"]["emails"] == {"failed": [1], "oldest_ready_age_s": [2.0]}
    assert h["pools"]["io"] == {"utilisation": [0.125]}  # 1 of 4 slots for 1 of 2 s


def busy_hour(names: tuple[str, str, str] = ("a", "b", "c")) -> Snapshot:
    """A snapshot after an hour of work on 3 queues and 3 pools: every series present."""
    pools = [(name, [name], "thread", 8) for name in names]
    m, clock = recorder(M0 + 20, pools)
    for i in range(3600 * 4):
        t = clock.advance(0.25)
        name = names[i % 3]
        m.busy_changed(name, 1 + i % 7, t)
        m.finished(name, "t", name, 0.1, "succeeded" if i % 17 else "retried", 1, now=t)
        if i % 8 == 0:
            m.depths({n: Depth(ready=3, oldest_ready_age_s=(i % 300) / 7) for n in names})
    return m.snapshot(HEALTH, held=0)


def test_the_history_of_a_busy_hour_stays_small() -> None:
    snap = busy_hour()
    compact = len(json.dumps(hist_of(snap), separators=(",", ":")))
    whole = len(json.dumps(snap, separators=(",", ":")))
    print(f"\nhistory of 3 queues and 3 pools, every series full: {compact} bytes of {whole}")
    assert compact < 3_500
    assert whole < 16_000


# ---- the cluster's hour --------------------------------------------------------------
def test_two_workers_started_at_different_seconds_line_up() -> None:
    a, clock_a = recorder(M0 + 5, name="a")
    b, clock_b = recorder(M0 + 47, name="b")
    for at in (M0 + 30, M0 + 70):
        done(a, at)
    for at in (M0 + 50, M0 + 61, M0 + 119):
        done(b, at)
    clock_a.now = clock_b.now = M0 + 125
    snaps = [a.snapshot(HEALTH, held=0), b.snapshot(HEALTH, held=0)]
    assert hist_of(snaps[0])["newest"] == hist_of(snaps[1])["newest"] == M0 + 120
    assert hist_of(snaps[0])["queues"]["emails"]["completed"] == [1, 1, 0]
    assert hist_of(snaps[1])["queues"]["emails"]["completed"] == [1, 2, 0]

    view = history(WorkerList(now=M0 + 125, workers=[row(s) for s in snaps]))
    assert (view["step_s"], view["start"], view["workers"]) == (60, M0 + 120 - 59 * 60, 2)
    rates = view["queues"]["emails"]["completed_per_s"]
    assert len(rates) == POINTS == 60
    assert rates[:-3] == [None] * 57  # before either worker started
    # Minute 0: 2 jobs over the 55 s covered by either worker (a from 5, b from 47);
    # minute 1: 3 over 60 s; the newest, so far: none in 5 s.
    assert rates[-3:] == [round(2 / 55, 4), 0.05, 0.0]
    assert view["queues"]["emails"]["failed_per_s"][-3:] == [0.0, 0.0, 0.0]


def sample(m: WorkerMetrics, clock: FakeClock, at: float, age: float = 0.0) -> None:
    clock.now = at
    m.depths({"emails": Depth(ready=1, oldest_ready_age_s=age)} if age else {})


def test_minutes_no_worker_covered_are_gaps() -> None:
    a, clock_a = recorder(M0 + 20, name="a")
    a.busy_changed("io", 4, clock_a())
    for at, age in ((M0 + 20, 0.0), (M0 + 80, 0.0), (M0 + 170, 9.0), (M0 + 190, 0.0)):
        sample(a, clock_a, at, age)
    done(a, M0 + 170)
    clock_a.now = M0 + 200  # its last publish; then it was killed
    gone = a.snapshot(HEALTH, held=0)
    b, clock_b = recorder(M0 + 600, name="b")
    for at in (M0 + 600, M0 + 690):
        sample(b, clock_b, at)
    done(b, M0 + 630)
    clock_b.now = M0 + 700
    live = b.snapshot(HEALTH, held=0)
    view = history(WorkerList(now=M0 + 700, workers=[row(gone), row(live)]))
    assert view["workers"] == 2
    rates = view["queues"]["emails"]["completed_per_s"]
    ages = view["queues"]["emails"]["oldest_ready_age_s"]
    busy = view["pools"]["io"]["utilisation"]
    tail = slice(-12, None)  # minutes M0 .. M0 + 660
    gap = [None] * 6  # M0 + 240 .. M0 + 540: a was gone, b not yet started
    assert rates[tail] == [0.0, 0.0, round(1 / 60, 4), 0.0, *gap, round(1 / 60, 4), 0.0]
    assert ages[tail] == [0.0, 0.0, 9.0, 0.0, *gap, 0.0, 0.0]
    assert busy[tail] == [1.0, 1.0, 1.0, 1.0, *gap, 0.0, 0.0]
    assert rates[:-12] == [None] * 48


def test_merge_sums_completions_takes_the_oldest_age_and_weights_utilisation_by_slots() -> None:
    small, clock_s = recorder(M0, [("io", ["emails"], "thread", 4)], name="small")
    big, clock_b = recorder(M0, [("io", ["emails"], "thread", 12)], name="big")
    small.busy_changed("io", 4, M0)  # 4 slots pinned, 12 idle: 25% of the pool's slots
    for i in range(3):
        done(small, M0 + 10 + i)
    for i in range(5):
        done(big, M0 + 20 + i)
    small.depths({"emails": Depth(ready=4, oldest_ready_age_s=3.0)})
    big.depths({"emails": Depth(ready=4, oldest_ready_age_s=7.5)})
    clock_s.now = clock_b.now = M0 + 60
    rows = [row(small.snapshot(HEALTH, held=0)), row(big.snapshot(HEALTH, held=0))]
    view = history(WorkerList(now=M0 + 61, workers=rows))
    emails = view["queues"]["emails"]
    assert emails["completed_per_s"][-2:] == [round(8 / 60, 4), None]  # none published yet
    assert emails["oldest_ready_age_s"][-2] == 7.5
    assert view["pools"]["io"]["utilisation"][-2] == 0.25


def test_a_worker_that_started_mid_minute_weighs_by_the_seconds_it_covered() -> None:
    full, clock_f = recorder(M0 - 60, [("io", ["emails"], "thread", 2)], name="full")
    late, clock_l = recorder(M0 + 30, [("io", ["emails"], "thread", 2)], name="late")
    full.busy_changed("io", 0, M0)
    late.busy_changed("io", 2, M0 + 30)  # pinned for the 30 s it covered
    clock_f.now = clock_l.now = M0 + 60
    rows = [row(full.snapshot(HEALTH, held=0)), row(late.snapshot(HEALTH, held=0))]
    assert rows[1].snapshot["history"]["pools"]["io"]["utilisation"] == [1.0, 0.0]
    view = history(WorkerList(now=M0 + 60, workers=rows))
    # 2 slots x 30 s busy of 2 x 60 + 2 x 30 slot-seconds.
    assert view["pools"]["io"]["utilisation"][-2] == round(60 / 180, 3)


def test_a_worker_with_a_skewed_clock_is_placed_by_whole_minutes() -> None:
    m, clock = recorder(M0 + 20)  # its clock runs 125 s behind the broker's
    done(m, M0 + 30)
    clock.now = M0 + 40
    snap = m.snapshot(HEALTH, held=0)
    view = history(WorkerList(now=M0 + 170, workers=[row(snap, seen=M0 + 165)]))
    rates = view["queues"]["emails"]["completed_per_s"]
    # Moved two minutes on, into the broker's current minute (its 20 s covered, shifted).
    assert rates[-3:] == [None, None, round(1 / 20, 4)]


def test_old_snapshots_without_a_history_are_skipped_and_fold_still_reads_them() -> None:
    m, clock = recorder(M0 + 20)
    done(m, clock.advance(5.0))
    snap = m.snapshot(HEALTH, held=0)
    old: dict[str, Any] = {k: v for k, v in snap.items() if k != "history"}
    other = row(snap, seen=M0 + 26)
    listed = WorkerList(
        now=M0 + 26,
        workers=[
            row(old, seen=M0 + 26),  # type: ignore[arg-type]
            WorkerRecord(other.info, M0, M0 + 26, None, 0, {"v": 99, "history": {}}),
            WorkerRecord(other.info, M0, M0 + 26, None, 0, {}),
        ],
    )
    view = history(listed)
    assert (view["workers"], view["queues"], view["pools"]) == (0, {}, {})
    assert fold(listed)["queues"]["emails"]["completion_rate"] is not None
    both = history(WorkerList(now=M0 + 26, workers=[*listed.workers, other]))
    assert both["workers"] == 1 and both["queues"]["emails"]["completed_per_s"][-1] == 0.2


def test_workers_whose_history_ended_before_the_hour_are_left_out() -> None:
    m, clock = recorder(M0 + 20)
    done(m, clock.advance(5.0))
    snap = m.snapshot(HEALTH, held=0)
    view = history(WorkerList(now=M0 + 26 + 3600, workers=[row(snap, stopped=True)]))
    assert view["workers"] == 0 and view["queues"] == {} and view["pools"] == {}
