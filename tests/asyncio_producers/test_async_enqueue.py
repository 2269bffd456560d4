"""The asyncio producer API at the App level, on every broker: ``task.enqueue_async``,
``with_options(...).enqueue_async``, ``app.enqueue_async`` by name,
``enqueue_many_async`` and ``get_job_async``; the PostgreSQL side's transactional
enqueue on an AsyncConnection, its loop binding and its closing. Refusals of bad input
are in tests/unit/test_bad_input.py, next to the sync ones; broker semantics in the
conformance suite (``async_producers``)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from sluicegate import App, ConfigError, JobState, SerializationError
from sluicegate.brokers.base import Broker


def make_app(broker: Broker | str) -> App:
    app = App(broker=broker, config=False)

    @app.task(queue="mail", max_attempts=5, priority=3)
    def send(user: int, note: str = "") -> None: ...

    return app


def run(app: App, body: Callable[[], Awaitable[Any]]) -> Any:
    """``body()`` in a fresh loop, the app's asyncio resources closed in it at the end."""

    async def main() -> Any:
        try:
            return await body()
        finally:
            await app.aclose()

    return asyncio.run(main())


def test_the_async_calls_store_what_the_sync_calls_store(broker: Broker) -> None:
    app = make_app(broker)
    send = app.tasks["send"]

    async def body() -> None:
        job = await send.enqueue_async(42, note="hi")
        twin = send.enqueue(42, note="hi")
        assert (job.task, job.queue, job.priority, job.max_attempts) == ("send", "mail", 3, 5)
        assert (job.args, job.kwargs, job.state) == ([42], {"note": "hi"}, JobState.READY)
        assert (twin.queue, twin.priority, twin.max_attempts) == ("mail", 3, 5)
        assert await app.get_job_async(job.id) == app.get_job(job.id) == job

        later = await send.with_options(delay=60, priority=-1, queue="slow").enqueue_async(1)
        assert (later.state, later.priority, later.queue) == (JobState.SCHEDULED, -1, "slow")
        assert later.run_at == pytest.approx(later.enqueued_at + 60)

        first = await send.with_options(unique_key="u-1").enqueue_async(1)
        again = await send.with_options(unique_key="u-1").enqueue_async(2)
        assert again.id == first.id and again.args == [1]

        by_name = await app.enqueue_async("elsewhere", args=[1], kwargs={"a": 2}, priority=7)
        assert (by_name.task, by_name.queue, by_name.priority) == ("elsewhere", "default", 7)
        assert by_name.max_attempts == 3  # the defaults of a task this app does not register

    run(app, body)


def test_bulk_is_ordered_and_all_or_nothing(broker: Broker) -> None:
    app = make_app(broker)
    send = app.tasks["send"]

    async def body() -> None:
        jobs = await send.enqueue_many_async([(i,) for i in range(250)])  # three slices
        assert [j.args for j in jobs] == [[i] for i in range(250)]
        ids = [j.id for j in jobs]
        assert ids == sorted(ids) and len(set(ids)) == 250
        mixed = await app.enqueue_many_async([("send", [1], {}), ("other", [], {"k": 1})])
        assert [(j.task, j.queue) for j in mixed] == [("send", "mail"), ("other", "default")]
        before = len(app.broker.list_jobs(limit=1000))
        with pytest.raises(SerializationError, match="argument 0"):
            await send.enqueue_many_async([(1,), (float("nan"),), (3,)])
        assert len(app.broker.list_jobs(limit=1000)) == before  # nothing of the batch
        assert await send.enqueue_many_async([]) == []

    run(app, body)


def test_an_app_opened_by_url_opens_its_broker_off_the_loop(tmp_path: Path) -> None:
    """The first async call opens the broker (a migration here) in a thread; close() after
    the loop ended, and a second loop later, both work."""
    app = make_app(f"sqlite:///{tmp_path / 'jobs.db'}")

    async def body() -> int:
        return (await app.tasks["send"].enqueue_async(1)).id

    job_id = asyncio.run(body())
    assert app.get_job(job_id).state is JobState.READY
    app.close()
    assert run(app, body) == job_id + 1


# ---- PostgreSQL: transactions, loops, closing ------------------------------------------------
def test_transactional_enqueue_on_an_async_connection(pg_url: str, pg_dsn: str) -> None:
    import psycopg

    app = make_app(pg_url)
    send = app.tasks["send"]

    async def body() -> None:
        async with await psycopg.AsyncConnection.connect(pg_dsn) as conn:
            async with conn.transaction():
                kept = await send.with_options(connection=conn).enqueue_async(1)
                many = await send.enqueue_many_async([(2,), (3,)], connection=conn)
                keyed = await app.enqueue_async("send", [4], connection=conn, unique_key="k")
                # written in the caller's transaction: nobody else sees them yet
                assert await app.broker.get_job_async(kept.id) is None
                assert app.broker.list_jobs() == []
            assert {j.id for j in app.broker.list_jobs()} == {
                kept.id,
                keyed.id,
                *(j.id for j in many),
            }

            class Abort(Exception):
                pass

            with pytest.raises(Abort):
                async with conn.transaction():
                    gone = await app.enqueue_async("send", [5], connection=conn)
                    raise Abort
            assert app.broker.get_job(gone.id) is None
        refused = r"takes a psycopg 3 AsyncConnection.*\(use enqueue\)"
        with psycopg.connect(pg_dsn) as sync_conn, pytest.raises(ConfigError, match=refused):
            await app.enqueue_async("send", [6], connection=sync_conn)

    run(app, body)


def test_a_sync_enqueue_refuses_an_async_connection_by_name(pg_url: str, pg_dsn: str) -> None:
    import psycopg

    app = make_app(pg_url)

    async def body() -> None:
        async with await psycopg.AsyncConnection.connect(pg_dsn) as conn:
            with pytest.raises(ConfigError, match="use enqueue_async"):
                app.enqueue("send", [1], connection=conn)

    run(app, body)
    app.close()


def test_the_async_pool_belongs_to_one_loop(pg_url: str) -> None:
    """Another loop is refused while the pool's loop is open; once it is closed, the next
    loop gets a fresh pool."""
    app = make_app(pg_url)
    send = app.tasks["send"]
    first = asyncio.new_event_loop()
    try:
        job = first.run_until_complete(send.enqueue_async(1))

        async def elsewhere() -> None:
            with pytest.raises(ConfigError, match="opened in another event loop"):
                await send.enqueue_async(2)

        asyncio.run(elsewhere())
        app.close()  # closes the pool in its own loop (not running: run until closed)
        assert first.run_until_complete(app.get_job_async(job.id)).id == job.id
    finally:
        app.close()
        first.close()

    async def later() -> int:
        return (await send.enqueue_async(3)).id

    assert run(app, later) > job.id
    app.close()


def test_a_pooled_connection_the_server_closed_is_replaced_before_use(
    pg_url: str, pg_dsn: str
) -> None:
    """Dead before anything was sent on it: replaced, and the enqueue goes through."""
    import psycopg

    app = make_app(pg_url)
    send = app.tasks["send"]

    async def body() -> None:
        await send.enqueue_async(1)
        broker: Any = app.broker
        async with broker._adb.single() as conn:
            pid = conn.info.backend_pid
        with psycopg.connect(pg_dsn, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", [pid])
            deadline = time.monotonic() + 5
            while admin.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", [pid]).fetchone():
                assert time.monotonic() < deadline
                time.sleep(0.01)
        job = await send.enqueue_async(2)
        assert (await app.get_job_async(job.id)).args == [2]

    run(app, body)


def test_jobs_from_the_async_calls_can_be_waited_on(broker: Broker) -> None:
    """What enqueue_async, enqueue_many_async and get_job_async return knows its app, as
    the sync calls' jobs do: ``await job.wait_async()`` reaches the job's outcome."""
    from sluicegate import JobCancelled

    app = make_app(broker)
    send = app.tasks["send"]

    async def body() -> None:
        one = await send.enqueue_async(1)
        many = await send.enqueue_many_async([(2,), (3,)])
        read = await app.get_job_async(one.id)
        for job in (one, *many):
            app.broker.cancel(job.id)
        for job in (one, read, *many):
            with pytest.raises(JobCancelled):
                await job.wait_async(timeout=10)

    run(app, body)
