"""The asyncio producer calls (``enqueue_async``, ``get_job_async``): the same storage,
semantics and errors as their sync twins, on every broker. Each test runs its awaits in
a fresh event loop and closes what the broker opened in it before the loop ends."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

import pytest

from ...brokers.base import Broker
from ...errors import ConfigError, InvalidJobId
from .helpers import S, put, spec, suite, take

T = TypeVar("T")


def run(broker: Broker, body: Callable[[], Awaitable[T]]) -> T:
    """``body()`` in a new loop; the broker's asyncio resources of that loop are closed
    before it ends (the broker itself stays open for the fixture to close)."""

    async def main() -> T:
        try:
            return await body()
        finally:
            adb = getattr(broker, "_adb", None)  # postgresql's asyncio pool
            if adb is not None:
                await adb.aclose()

    return asyncio.run(main())


class TestEnqueueAsync:
    def test_stores_what_the_sync_enqueue_stores(self, broker: Broker) -> None:
        async def body() -> None:
            [job] = await broker.enqueue_async(
                [spec(task="send", queue="email", args=[1, "a"], kwargs={"k": [True]})]
            )
            assert (job.task, job.queue, job.state) == ("send", "email", S.READY)
            assert (job.args, job.kwargs) == ([1, "a"], {"k": [True]})
            assert broker.get_job(job.id) == job
            assert await broker.get_job_async(job.id) == job

        run(broker, body)

    def test_bulk_keeps_order_and_unique_keys_return_the_holder(self, broker: Broker) -> None:
        kept = put(broker, unique_key="held", args=["kept"])

        async def body() -> None:
            jobs = await broker.enqueue_async(
                [
                    spec(args=[0], unique_key="k0"),
                    spec(args=[1]),
                    spec(args=["dup"], unique_key="held"),
                    spec(args=[2], delay=60.0),
                ]
            )
            assert [j.args for j in jobs] == [[0], [1], ["kept"], [2]]
            assert jobs[2] == kept
            assert [j.state for j in jobs] == [S.READY, S.READY, S.READY, S.SCHEDULED]
            fresh = [j.id for j in jobs if j.id != kept.id]
            assert fresh == sorted(fresh) and len(set(fresh)) == 3
            plain = await broker.enqueue_async([spec(args=[i]) for i in range(3)])
            assert [j.args for j in plain] == [[0], [1], [2]]
            assert await broker.enqueue_async([]) == []

        run(broker, body)
        assert take(broker).job.id == kept.id  # claim order as after a sync enqueue

    def test_an_async_enqueue_is_claimable_at_once(self, broker: Broker) -> None:
        async def body() -> int:
            [job] = await broker.enqueue_async([spec()])
            return job.id

        job_id = run(broker, body)
        assert take(broker).job.id == job_id

    def test_connection_is_refused_where_the_sync_call_refuses_it(self, broker: Broker) -> None:
        """A connection that is no asyncio connection of the broker's kind."""

        async def body() -> None:
            with pytest.raises(ConfigError):
                await broker.enqueue_async([spec()], connection=object())

        run(broker, body)
        assert broker.list_jobs() == []


class TestGetJobAsync:
    def test_missing_and_malformed_ids_answer_as_get_job(self, broker: Broker) -> None:
        job = put(broker)

        async def body() -> None:
            assert await broker.get_job_async(job.id) == job
            assert await broker.get_job_async(str(job.id)) == job
            assert await broker.get_job_async(job.id + 1000) is None
            assert await broker.get_job_async(2**70) is None
            with pytest.raises(InvalidJobId):
                await broker.get_job_async("nope")

        run(broker, body)


__all__ = suite(globals())
