"""Admission's arithmetic and errors without a worker: the predicted wait, the effective
concurrency (slots lowered by limits), QueueFull's fields and message, bounds declared in
code and in the settings file, and refusals and sheds on a real SQLite broker."""

from __future__ import annotations

import math
import textwrap
from pathlib import Path
from typing import Any

import pytest

from sluicegate import App
from sluicegate.admission import (
    Gate,
    Observed,
    QueueBounds,
    effective_concurrency,
    observe,
    predicted_wait,
)
from sluicegate.brokers.base import WorkerInfo, WorkerList, WorkerRecord
from sluicegate.errors import ConfigError, QueueFull
from sluicegate.job import JobState
from sluicegate.limits import Limit
from sluicegate.metrics.histogram import Histogram


# ---- arithmetic ----------------------------------------------------------------------
def test_predicted_wait_is_backlog_times_mean_over_concurrency() -> None:
    assert predicted_wait(100, 0.2, 4) == pytest.approx(5.0)
    assert predicted_wait(0, 0.2, 4) == 0.0  # nothing ahead: starts at once
    assert predicted_wait(10, None, 4) is None  # no duration observed yet: unknown
    assert predicted_wait(10, 0.2, 0) == math.inf  # nobody serves the queue


def test_limits_lower_the_concurrency_where_they_bind() -> None:
    seen = Observed(slots=8, mean_duration=0.5, hosts=2)
    limits = {
        "api": Limit.of("api", concurrency=3),
        "disk": Limit.of("disk", concurrency=2, scope="host"),
        "mail": Limit.of("mail", rate="2/s"),
        "per_account": Limit.of("per_account", concurrency=1, partition="account"),
    }
    assert effective_concurrency(seen, (), limits) == 8
    assert effective_concurrency(seen, (("api", 1),), limits) == 3
    assert effective_concurrency(seen, (("api", 2),), limits) == 1  # 3 // 2
    assert effective_concurrency(seen, (("disk", 1),), limits) == 4  # 2 per host x 2 hosts
    # 2 starts/s x 0.5 s = 1 slot's worth of throughput
    assert effective_concurrency(seen, (("mail", 1),), limits) == pytest.approx(1.0)
    assert effective_concurrency(seen, (("per_account", 1),), limits) == 8  # per partition


def _record(pools: dict[str, Any], durations: list[float], queue: str = "q") -> WorkerRecord:
    hist = Histogram()
    for d in durations:
        hist.observe(d)
    window = {"seconds": 60.0, "enqueued": 0, "completed": len(durations)}
    snap = {
        "v": 1,
        "interval_s": 1.0,
        "lease_s": 5.0,
        "pools": pools,
        "queues": {queue: {"recent": {"1m": {**window, "duration": hist.to_dict()}}}},
    }
    info = WorkerInfo("w", "host-a", 1, "0", ())
    return WorkerRecord(info, 0.0, 100.0, None, 0, snap)


def test_observe_sums_live_slots_and_merges_durations() -> None:
    pools = {"p": {"queues": ["q"], "slots": 3}, "other": {"queues": ["x"], "slots": 7}}
    rows = [_record(pools, [0.1, 0.3]), _record(pools, [0.2])]
    seen = observe(WorkerList(100.5, rows), "q")
    assert seen.slots == 6 and seen.hosts == 1
    assert seen.mean_duration == pytest.approx(0.2)
    gone = observe(WorkerList(1000.0, rows), "q")  # every row lost: no figures
    assert gone == Observed(0, None, 0)


# ---- QueueFull and bounds --------------------------------------------------------------
def test_queue_full_carries_its_figures() -> None:
    exc = QueueFull("email", 240, 8.4, "max_wait", 5.0)
    assert (exc.queue, exc.depth, exc.predicted_wait, exc.bound, exc.limit) == (
        "email", 240, 8.4, "max_wait", 5.0,
    )  # fmt: skip
    assert str(exc) == (
        "queue 'email' is full: 240 ready jobs ahead, predicted wait 8.40 s, "
        "over its max_wait of 5 s"
    )
    assert exc.retry_after == 4  # the wait beyond the bound, rounded up
    depth = QueueFull("email", 10, None, "max_ready", 10)
    assert "predicted wait unknown" in str(depth) and depth.retry_after == 1


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "give max_ready, max_wait, or both"),
        ({"max_ready": -1}, "max_ready must be an integer >= 0"),
        ({"max_ready": 1.5}, "max_ready must be an integer >= 0"),
        ({"max_wait": 0}, "max_wait must be a positive finite number"),
        ({"max_wait": math.nan}, "max_wait must be a positive finite number"),
        ({"max_wait": "5s"}, "max_wait must be a number of seconds"),
        ({"max_wait": 5, "policy": "drop"}, "policy must be one of refuse, shed"),
    ],
)
def test_bad_bounds_say_what_is_wrong(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        QueueBounds("q", **kwargs)


def test_bad_per_enqueue_max_wait(tmp_path: Path) -> None:
    app = App(f"sqlite:///{tmp_path / 'jobs.db'}", config=False)
    with pytest.raises(ConfigError, match="task 't': max_wait must be a positive"):
        app.enqueue("t", max_wait=-1)
    app.close()


def write(folder: Path, text: str) -> str:
    path = folder / "sluicegate.toml"
    path.write_text(textwrap.dedent(text))
    return str(path)


def test_settings_file_declares_bounds_and_wins_over_code(tmp_path: Path) -> None:
    config = write(tmp_path, """
        [queues.email]
        max_ready = 2
        policy = "shed"
        [queues.reports]
        max_wait = 30.5
    """)  # fmt: skip
    app = App(f"sqlite:///{tmp_path / 'jobs.db'}", config=config)
    app.queue("email", max_ready=100)
    app.configure()
    assert app.queues["email"] == QueueBounds("email", max_ready=2, policy="shed")
    assert app.queues["reports"] == QueueBounds("reports", max_wait=30.5)
    app.close()


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ("[queues.email]\nmax_size = 3\n", r"queues\.email\.max_size: unknown key"),
        ("[queues.email]\npolicy = 'shed'\n", r"queues\.email: .*give max_ready, max_wait"),
        ("[queues.email]\nmax_wait = -2\n", r"queues\.email: max_wait must be a positive"),
        ("[queues.email]\nmax_ready = 5\npolicy = 'drop'\n", r"queues\.email: policy must"),
        ("queues = 3\n", r"queues: must be a table"),
    ],
)
def test_settings_file_errors_name_file_and_key(tmp_path: Path, table: str, message: str) -> None:
    config = write(tmp_path, table)
    app = App(f"sqlite:///{tmp_path / 'jobs.db'}", config=config)
    with pytest.raises(ConfigError, match=message) as caught:
        app.configure()
    assert str(caught.value).startswith(config)
    app.close()


def test_worker_settings_accept_queue_tables(tmp_path: Path) -> None:
    from sluicegate.config import load_settings

    config = write(tmp_path, "[queues.email]\nmax_ready = 5\n")
    assert load_settings(config).queues == {"email": QueueBounds("email", max_ready=5)}


# ---- on a real broker -------------------------------------------------------------------
@pytest.fixture
def app(tmp_path: Path) -> Any:
    app = App(f"sqlite:///{tmp_path / 'jobs.db'}", config=False)
    yield app
    app.close()


def test_max_ready_refuses_and_stores_nothing(app: App) -> None:
    app.queue("email", max_ready=3)
    for _ in range(3):
        app.enqueue("send", queue="email")
    with pytest.raises(QueueFull) as caught:
        app.enqueue("send", queue="email")
    assert (caught.value.depth, caught.value.bound, caught.value.limit) == (3, "max_ready", 3)
    assert len(app.broker.list_jobs(queue="email")) == 3
    app.enqueue("send", queue="other")  # other queues are not bounded


def test_max_ready_counts_a_fresh_read_after_the_cache_ages(app: App) -> None:
    clock = [0.0]
    app._gate = Gate(ttl=1.0, clock=lambda: clock[0])
    app.queue("email", max_ready=2)
    a = app.enqueue("send", queue="email")
    app.enqueue("send", queue="email")
    with pytest.raises(QueueFull):
        app.enqueue("send", queue="email")
    app.cancel(a.id)  # another process makes room; seen once the figures are re-read
    with pytest.raises(QueueFull):
        app.enqueue("send", queue="email")
    clock[0] = 1.5
    app.enqueue("send", queue="email")


def test_shed_policy_cancels_the_job_that_would_start_last(app: App) -> None:
    app.queue("email", max_ready=2, policy="shed")
    first = app.enqueue("send", queue="email", priority=0)
    low = app.enqueue("send", queue="email", priority=5)
    newest = app.enqueue("send", queue="email", priority=1)
    assert app.get_job(low.id).state is JobState.CANCELLED
    assert app.get_job(low.id).history[-1]["by"] == "shed: queue full"
    assert app.get_job(first.id).state is app.get_job(newest.id).state is JobState.READY
    with pytest.raises(QueueFull, match="max_ready of 2"):  # only more urgent jobs ahead
        app.enqueue("send", queue="email", priority=3)


def test_max_wait_without_a_worker_refuses_once_jobs_wait(app: App) -> None:
    """No live worker serves the queue: the first job (nothing ahead) is admitted, the
    next one would wait forever."""
    app.queue("email", max_wait=1.0)
    app.enqueue("send", queue="email")
    assert app.predicted_wait("email") == math.inf
    with pytest.raises(QueueFull, match="unbounded") as caught:
        app.enqueue("send", queue="email")
    assert caught.value.retry_after == 30
    app.enqueue("send", queue="other", max_wait=1.0)  # the same per enqueue, another queue


def test_max_wait_admits_while_no_duration_is_observed() -> None:
    assert predicted_wait(50, None, 4) is None  # a worker serves it; no job finished yet


def test_enqueue_async_checks_the_same_bounds(app: App) -> None:
    import asyncio

    async def main() -> None:
        app.queue("email", max_ready=2, policy="shed")
        app.queue("refusing", max_ready=1)
        first = await app.enqueue_async("send", queue="email")
        second = await app.enqueue_async("send", queue="email")
        third = await app.enqueue_async("send", queue="email")  # sheds the youngest
        assert (await app.get_job_async(second.id)).state is JobState.CANCELLED
        assert (await app.get_job_async(first.id)).state is JobState.READY
        assert (await app.get_job_async(third.id)).state is JobState.READY
        await app.enqueue_async("send", queue="refusing")
        with pytest.raises(QueueFull):
            await app.enqueue_async("send", queue="refusing")
        await app.aclose()

    asyncio.run(main())
