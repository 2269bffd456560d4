"""Weighted queues within one pool: shares follow the weights, nobody starves."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from sluicegate import App, ConfigError
from sluicegate.worker import PoolSpec, Worker, parse_pool_spec
from sluicegate.worker.services.claimer import Stride


def test_spec_parses_weights() -> None:
    spec = parse_pool_spec("mixed=email*3,reports:8")
    assert spec.queues == ("email", "reports")
    assert spec.weights == (3, 1)
    assert parse_pool_spec("p=a,b:2").weights is None
    with pytest.raises(ConfigError, match="WEIGHT must be an integer"):
        parse_pool_spec("p=a*x:2")
    with pytest.raises(ConfigError, match="one weight >= 1 per queue"):
        parse_pool_spec("p=a*0:2")


def test_stride_shares_follow_weights_one_slot_at_a_time() -> None:
    stride = Stride(parse_pool_spec("mixed=email*3,reports:8"))
    picks = [next(iter(stride.split(1, set()))) for _ in range(400)]
    assert picks.count("email") == 300
    assert picks.count("reports") == 100
    # never more than 3 emails in a row: reports never waits long
    run = longest = 0
    for queue in picks:
        run = run + 1 if queue == "email" else 0
        longest = max(longest, run)
    assert longest <= 4  # weight 3, plus one on a tie


def test_empty_queue_is_skipped() -> None:
    stride = Stride(parse_pool_spec("mixed=email*3,reports:8"))
    assert stride.split(4, {"email"}) == {"reports": 4}
    assert stride.split(4, {"email", "reports"}) == {}


def test_backlog_of_both_is_taken_about_three_to_one(tmp_path: Path) -> None:
    app = App(broker=f"sqlite:///{tmp_path}/jobs.db")
    order: list[str] = []
    lock = threading.Lock()

    @app.task(queue="email")
    def email(i: int) -> None:
        with lock:
            order.append("email")

    @app.task(queue="reports")
    def report(i: int) -> None:
        with lock:
            order.append("reports")

    email.enqueue_many([(i,)] for i in range(600))
    report.enqueue_many([(i,)] for i in range(600))
    Worker(app, [parse_pool_spec("mixed=email*3,reports:8")], burst=True).run()
    first = order[:400]
    ratio = first.count("email") / max(first.count("reports"), 1)
    assert 2.4 <= ratio <= 3.6, ratio
    assert first.count("reports") > 0  # no starvation while email has a backlog
    assert len(order) == 1200  # and everything ran once the backlog drained
    app.close()


def test_priority_orders_within_a_weighted_queue(tmp_path: Path) -> None:
    app = App(broker=f"sqlite:///{tmp_path}/jobs.db")
    seen: list[int] = []

    @app.task(queue="a")
    def t(p: int) -> None:
        seen.append(p)

    for p in (5, 1, 3):
        t.with_options(priority=p).enqueue(p)
    Worker(app, [PoolSpec("w", ("a", "b"), 1, weights=(2, 1))], burst=True).run()
    assert seen == [1, 3, 5]
    app.close()
