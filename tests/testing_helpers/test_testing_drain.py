"""drain and perform against real brokers: retries, dead jobs, time, limits, paused queues,
cancels, progress, async and transactional tasks, and the errors they give."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from sg_plugin_pg import plugin_pg_env, repo_sluicegate_postgres  # noqa: F401

from sluicegate import App, ConfigError, JobFailed, JobState
from sluicegate.context import current_job
from sluicegate.testing import FakeClock, drain, perform


def test_a_job_that_always_fails_ends_dead_within_one_drain(sluicegate_any: App) -> None:
    app = sluicegate_any

    @app.task(max_attempts=4, backoff_base=3600)
    def broken() -> None:
        raise ConnectionError("down")

    job = broken.enqueue()
    result = drain(app)
    assert result.counts == {"succeeded": 0, "retried": 3, "dead": 1, "lease_lost": 0}
    dead = app.get_job(job.id)
    assert (dead.state, dead.attempts) == (JobState.DEAD, 4)
    assert [e["event"] for e in dead.history] == ["failed"] * 4
    assert "dead" in dead.history[-1] and "retry_at" in dead.history[0]
    assert [j.attempts for j in result.jobs["retried"]] == [1, 2, 3]


def test_drain_and_perform_run_the_apps_job_hooks_in_order(sluicegate_sqlite: App) -> None:
    app = sluicegate_sqlite
    heard: list[str] = []
    app.before_job(lambda job: heard.append(f"before {job.attempts}"))
    app.after_job(lambda job, outcome: heard.append(f"after {job.attempts}"))
    app.on_retry(lambda job, outcome: heard.append(f"retry {job.attempts}"))
    app.on_dead(lambda job, outcome: heard.append(f"dead {job.attempts}"))

    @app.task(max_attempts=2)
    def broken() -> None:
        raise ConnectionError("down")

    broken.enqueue()
    drain(app)
    assert heard == ["before 1", "after 1", "retry 1", "before 2", "after 2", "dead 2"]

    @app.task
    def fine() -> int:
        return 1

    heard.clear()
    assert perform(fine) == 1
    assert heard == ["before 1", "after 1"]


def test_jobs_enqueued_by_jobs_run_in_the_same_drain(sluicegate_sqlite: App) -> None:
    app = sluicegate_sqlite

    @app.task
    def countdown(n: int) -> int:
        if n:
            countdown.enqueue(n - 1)
        return n

    countdown.enqueue(3)
    assert drain(app).succeeded == 4


def test_a_task_that_enqueues_itself_forever_is_stopped(sluicegate_sqlite: App) -> None:
    app = sluicegate_sqlite

    @app.task
    def again() -> None:
        again.enqueue()

    again.enqueue()
    with pytest.raises(RuntimeError, match="drain ran 5 attempts and jobs are still ready"):
        drain(app, limit=5)
    [ready] = app.broker.list_jobs(state=JobState.READY)  # the sixth, handed back unrun
    assert ready.attempts == 0


def test_with_scheduled_needs_a_test_clock(tmp_path: Path) -> None:
    app = App(broker=f"sqlite:///{tmp_path / 'jobs.db'}", config=False)
    try:
        with pytest.raises(ConfigError, match=r"needs clock=FakeClock\(...\)"):
            drain(app, with_scheduled=True)
        assert drain(app).attempts == 0  # on the real clock, a drain works
    finally:
        app.close()


def test_bad_arguments_are_clear_errors(sluicegate_sqlite: App) -> None:
    with pytest.raises(ConfigError, match="queues must be a list of queue names, not the str"):
        drain(sluicegate_sqlite, queues="email")
    with pytest.raises(ConfigError, match=r"limit must be an integer >= 1 \(attempts\), not 0"):
        drain(sluicegate_sqlite, limit=0)


def test_an_empty_drain(sluicegate_sqlite: App) -> None:
    sluicegate_sqlite.enqueue("anything")
    result = drain(sluicegate_sqlite, queues=[])
    assert (result.attempts, repr(result)) == (
        0,
        "DrainResult(succeeded=0, retried=0, dead=0, lease_lost=0)",
    )


def test_a_job_of_an_unknown_task_ends_dead(sluicegate_sqlite: App) -> None:
    job = sluicegate_sqlite.enqueue("not_registered_here", args=[1])
    assert drain(sluicegate_sqlite).dead == 1
    error = sluicegate_sqlite.get_job(job.id).last_error
    assert error is not None and error.type == "UnknownTask"


def test_a_paused_queue_waits_for_its_resume(sluicegate_sqlite: App) -> None:
    app = sluicegate_sqlite

    @app.task(queue="slow")
    def work() -> None: ...

    work.enqueue()
    app.pause_queue("slow")
    assert drain(app).attempts == 0
    assert drain(app, queues=["slow"]).attempts == 0
    app.resume_queue("slow")
    assert drain(app).succeeded == 1


def test_progress_is_stored_and_a_cancel_refuses_the_outcome(sluicegate_any: App) -> None:
    app = sluicegate_any

    @app.task
    def halfway() -> str:
        current_job().progress(0.5, "half")
        return "done"

    @app.task
    def cancelled_meanwhile() -> str:
        assert current_job().cancelled is False
        app.cancel(current_job().id, by="the test")
        assert current_job().cancelled is True  # as a thread pool's task would see it
        return "too late"

    done = halfway.enqueue()
    gone = cancelled_meanwhile.enqueue()
    result = drain(app)
    assert (result.succeeded, result.lease_lost) == (1, 1)
    progress = app.get_job(done.id).progress
    assert progress is not None and (progress.fraction, progress.message) == (0.5, "half")
    assert app.get_job(gone.id).state is JobState.CANCELLED
    assert app.get_job(gone.id).result is None


def test_limits_are_registered_and_respected(sluicegate_sqlite: App) -> None:
    app = sluicegate_sqlite
    app.limit("storage", concurrency=1)

    @app.task(limits=["storage"])
    def store(n: int) -> int:
        return n

    store.enqueue_many([(1,), (2,), (3,)])
    assert drain(app).succeeded == 3


def test_a_rate_limit_is_waited_out_on_the_test_clock(
    sluicegate_sqlite: App, sluicegate_clock: FakeClock
) -> None:
    app = sluicegate_sqlite
    app.limit("api", rate="1/s", burst=1)

    @app.task(limits=["api"])
    def call(n: int) -> int:
        return n

    start = sluicegate_clock()
    call.enqueue_many([(1,), (2,), (3,)])
    assert drain(app).succeeded == 1  # the rest wait for tokens: the clock stands still
    assert drain(app, with_scheduled=True).succeeded == 2
    assert sluicegate_clock() > start


def test_async_tasks_run_with_their_timeout(sluicegate_sqlite: App) -> None:
    app = sluicegate_sqlite

    @app.task(timeout=0.05, max_attempts=1)
    async def stuck() -> None:
        await asyncio.sleep(60)

    stuck.enqueue()
    result = drain(app)
    assert result.dead == 1
    error = result.jobs["dead"][0].last_error
    assert error is not None and error.type == "TimeoutError"
    with pytest.raises(TimeoutError, match=r"timed out after 0\.05 s"):
        perform(stuck)


def test_drain_and_perform_inside_a_running_event_loop(sluicegate_sqlite: App) -> None:
    app = sluicegate_sqlite

    @app.task
    async def double(n: int) -> int:
        return n * 2

    async def handler() -> tuple[int, int]:
        double.enqueue(1)
        return drain(app).succeeded, perform(double, 21)

    assert asyncio.run(handler()) == (1, 42)


def test_transactional_tasks_commit_with_their_ack(sluicegate_postgres: App) -> None:
    app = sluicegate_postgres

    @app.task(transactional=True)
    def in_transaction(n: int, connection: object) -> int:
        row = connection.execute("SELECT %s::int + 1", (n,)).fetchone()  # type: ignore[attr-defined]
        return int(row[0])

    job = in_transaction.enqueue(41)
    assert drain(app).succeeded == 1
    assert app.get_job(job.id).result == 42
    assert perform(in_transaction, 1) == 2


def test_a_transactional_task_needs_postgresql(sluicegate_sqlite: App) -> None:
    app = sluicegate_sqlite

    @app.task(transactional=True)
    def in_transaction(connection: object) -> None: ...

    job = in_transaction.enqueue()
    with pytest.raises(ConfigError, match="transactional, which needs the postgresql://"):
        drain(app)
    left = app.get_job(job.id)  # handed back, its attempt refunded: not stuck running
    assert (left.state, left.attempts) == (JobState.READY, 0)


def test_perform_returns_the_result_as_stored(sluicegate_any: App) -> None:
    app = sluicegate_any

    @app.task(queue="busy")
    def pair(a: int, b: int) -> tuple[int, int]:
        return (a, b)

    other = pair.enqueue(0, 0)  # already waiting in the queue: perform leaves it be
    assert perform(pair, 1, b=2) == [1, 2]  # a tuple comes back as JSON's list
    untouched = app.get_job(other.id)
    assert (untouched.state, untouched.attempts, untouched.history) == (JobState.READY, 0, [])


def test_perform_records_a_failure_as_a_worker_would(sluicegate_sqlite: App) -> None:
    app = sluicegate_sqlite

    @app.task(max_attempts=2)
    def flaky() -> None:
        raise KeyError("missing")

    with pytest.raises(KeyError, match="missing"):
        perform(flaky)
    [job] = app.broker.list_jobs(task="flaky")
    assert (job.state, job.attempts) == (JobState.SCHEDULED, 1)  # its retry, as a worker's


def test_perform_of_a_result_that_is_not_json(sluicegate_sqlite: App) -> None:
    app = sluicegate_sqlite

    @app.task(max_attempts=1)
    def opaque() -> object:
        return object()

    with pytest.raises(JobFailed, match="SerializationError: result is not JSON-serializable"):
        perform(opaque)
    with pytest.raises(TypeError, match="perform needs a task"):
        perform(print)  # type: ignore[arg-type]
