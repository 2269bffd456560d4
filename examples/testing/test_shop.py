"""The shop's tests, written with the sluicegate pytest plugin alone.

``sluicegate_any`` is the shop's app on a fresh SQLite file, then on a fresh PostgreSQL
schema (when SLUICEGATE_TEST_POSTGRES names a server; skipped otherwise).
``sluicegate_clock`` is the brokers' time: it moves only when the test says.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import shop

from sluicegate import App, JobState
from sluicegate.testing import (
    FakeClock,
    assert_enqueued,
    assert_not_enqueued,
    drain,
    perform,
)


@pytest.fixture(autouse=True)
def fresh_mailer() -> Iterator[shop.Mailer]:
    shop.mailer.outbox.clear()
    shop.mailer.fail_next = 0
    yield shop.mailer


def test_placing_an_order_enqueues_its_jobs(sluicegate_any: App) -> None:
    shop.place_order(1, "ada@example.com", 2500)

    assert_enqueued(shop.charge, args=[1, 2500], queue="billing")
    [receipt] = assert_enqueued(shop.send_receipt, args=[1, "ada@example.com"])
    assert receipt.state is JobState.READY
    [review] = assert_enqueued(shop.ask_for_review, count=1)
    assert review.state is JobState.SCHEDULED
    assert_not_enqueued(shop.send_receipt, args=[2, "ada@example.com"])
    assert_not_enqueued(shop.daily_report)


def test_drain_runs_what_is_due(sluicegate_any: App) -> None:
    shop.place_order(1, "ada@example.com", 2500)

    result = drain(sluicegate_any)

    assert result.counts == {"succeeded": 2, "retried": 0, "dead": 0, "lease_lost": 0}
    assert shop.mailer.outbox == [("ada@example.com", "receipt for order 1")]
    [charged] = [j for j in result.jobs["succeeded"] if j.task == "charge"]
    assert charged.result == {"order": 1, "charged": 2500}
    # The review request is due tomorrow: not run, still scheduled.
    [review] = assert_enqueued(shop.ask_for_review)
    assert review.state is JobState.SCHEDULED


def test_a_flaky_mailer_is_retried_then_succeeds(sluicegate_any: App) -> None:
    shop.mailer.fail_next = 1
    job = shop.send_receipt.enqueue(7, "bob@example.com")

    result = drain(sluicegate_any)

    assert (result.retried, result.succeeded, result.dead) == (1, 1, 0)
    done = sluicegate_any.get_job(job.id)
    assert done.state is JobState.SUCCEEDED
    assert done.result == {"job": job.id, "attempt": 2}
    assert [entry["event"] for entry in done.history] == ["failed"]
    assert shop.mailer.outbox == [("bob@example.com", "receipt for order 7")]


def test_a_bad_charge_ends_dead(sluicegate_any: App) -> None:
    job = shop.charge.enqueue(3, 0)

    result = drain(sluicegate_any)

    # ValueError is not in retry_on: dead at the first attempt.
    assert result.counts == {"succeeded": 0, "retried": 0, "dead": 1, "lease_lost": 0}
    dead = sluicegate_any.get_job(job.id)
    assert dead.state is JobState.DEAD
    assert dead.last_error is not None and dead.last_error.type == "ValueError"


def test_a_mailer_that_never_recovers_ends_dead_after_its_attempts(
    sluicegate_any: App,
) -> None:
    shop.mailer.fail_next = 1000
    job = shop.send_receipt.enqueue(8, "cy@example.com")

    result = drain(sluicegate_any)

    assert (result.retried, result.dead) == (2, 1)  # max_attempts=3
    assert sluicegate_any.get_job(job.id).attempts == 3


def test_backoff_is_waited_out_on_the_test_clock(
    sluicegate_any: App, sluicegate_clock: FakeClock
) -> None:
    shop.mailer.fail_next = 1
    job = shop.send_receipt.enqueue(9, "di@example.com")

    first = drain(sluicegate_any, skip_backoff=False)
    assert (first.retried, first.succeeded) == (1, 0)
    retry_at = sluicegate_any.get_job(job.id).run_at
    assert retry_at > sluicegate_clock()  # waiting out its backoff

    assert drain(sluicegate_any, skip_backoff=False).attempts == 0
    sluicegate_clock.advance(retry_at - sluicegate_clock())
    assert drain(sluicegate_any, skip_backoff=False).succeeded == 1


def test_the_review_request_goes_out_a_day_later(
    sluicegate_any: App, sluicegate_clock: FakeClock
) -> None:
    shop.place_order(1, "ada@example.com", 2500)
    drain(sluicegate_any)

    sluicegate_clock.advance(shop.REVIEW_DELAY - 1)
    assert drain(sluicegate_any).attempts == 0
    sluicegate_clock.advance(1)
    assert drain(sluicegate_any).succeeded == 1
    assert ("ada@example.com", "how was order 1?") in shop.mailer.outbox


def test_drain_with_scheduled_runs_future_jobs_now(
    sluicegate_any: App, sluicegate_clock: FakeClock
) -> None:
    start = sluicegate_clock()
    shop.place_order(1, "ada@example.com", 2500)

    result = drain(sluicegate_any, with_scheduled=True)

    assert result.succeeded == 3
    assert sluicegate_clock() == start + shop.REVIEW_DELAY  # time moved to the job's time


def test_drain_only_some_queues(sluicegate_any: App) -> None:
    shop.place_order(1, "ada@example.com", 2500)

    assert drain(sluicegate_any, queues=["billing"]).succeeded == 1
    assert shop.mailer.outbox == []
    assert drain(sluicegate_any, queues=["email"]).succeeded == 1


def test_perform_runs_one_job_as_a_worker_would(sluicegate_any: App) -> None:
    result = perform(shop.send_receipt, 5, "ed@example.com")

    [job] = assert_enqueued(shop.send_receipt, args=[5, "ed@example.com"])
    assert result == {"job": job.id, "attempt": 1}  # current_job() inside the task
    assert job.state is JobState.SUCCEEDED


def test_perform_raises_the_tasks_error(sluicegate_any: App) -> None:
    with pytest.raises(ValueError, match="cannot charge 0 cents"):
        perform(shop.charge, 4, 0)
    [job] = assert_enqueued(shop.charge, args=[4, 0])
    assert job.state is JobState.DEAD


def test_async_tasks_run_on_an_event_loop(sluicegate_any: App) -> None:
    job = shop.daily_report.enqueue("2026-12-01")
    assert drain(sluicegate_any).succeeded == 1
    assert sluicegate_any.get_job(job.id).result == {"day": "2026-12-01", "job": job.id}
    assert perform(shop.daily_report, "2026-12-02")["day"] == "2026-12-02"


def test_the_sqlite_fixture_alone(sluicegate_sqlite: App) -> None:
    shop.place_order(2, "fay@example.com", 100)
    assert sluicegate_sqlite.broker.url.endswith("sluicegate.db")
    assert drain(sluicegate_sqlite).succeeded == 2
