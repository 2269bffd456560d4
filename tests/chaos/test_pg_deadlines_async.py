"""The asyncio producer's deadlines on PostgreSQL (``enqueue_async``), as
test_pg_deadlines.py shows them for the sync one: a black-holed connection gives up
within ``call_timeout`` with EnqueueFateUnknown once the insert went out, or
BrokerUnavailable when nothing could be sent; a commit whose answer never comes names
the unique key, and enqueueing again with it is safe. The same watchdog enforces the
bound: cancelling the await instead would make psycopg try to cancel the query on the
server, over the path that stopped answering, and wait up to seconds for that."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest
from tcpproxy import TcpProxy

from sluicegate import App, BrokerUnavailable, EnqueueFateUnknown, JobState
from support.brokers import only_postgresql, rewrite

pytestmark = only_postgresql

SLACK = 0.75  # scheduling noise on a shared machine, on top of a bound
PRODUCER_BOUND = 1.0  # the producers' call_timeout here


@pytest.fixture
def aproxy(db_url: str) -> Iterator[TcpProxy]:
    parts = urlsplit(db_url)
    proxy = TcpProxy(parts.hostname or "127.0.0.1", parts.port or 5432)
    yield proxy
    proxy.close()


def through(db_url: str, proxy: TcpProxy) -> str:
    return rewrite(db_url, port=proxy.port, application_name="sg-deadlines-async", call_timeout="1")


async def timed(call: Awaitable[Any]) -> tuple[float, BaseException | None]:
    started = time.monotonic()
    try:
        await call
    except Exception as exc:
        return time.monotonic() - started, exc
    return time.monotonic() - started, None


def test_an_async_producer_never_hangs_on_a_black_hole(db_url: str, aproxy: TcpProxy) -> None:
    app = App(broker=through(db_url, aproxy), config=False)

    async def main() -> None:
        try:
            await app.enqueue_async("t", args=[0])  # the async pool holds a live connection
            assert aproxy.blackhole(new_connections=True) >= 1

            took, exc = await timed(app.enqueue_async("t", args=[1]))
            assert isinstance(exc, EnqueueFateUnknown), exc
            assert exc.unique_keys == (None,) and not exc.retry_is_safe
            assert "did not answer within 1 s" in str(exc)
            assert took <= PRODUCER_BOUND + SLACK, took

            for key in (None, "k-1"):
                took, exc = await timed(app.enqueue_async("t", args=[2], unique_key=key))
                assert type(exc) is BrokerUnavailable, exc
                assert "nothing was sent" in str(exc)
                assert took <= PRODUCER_BOUND + SLACK, took

            aproxy.restore()
            deadline = time.monotonic() + 15
            while True:
                try:
                    job = await app.enqueue_async("t", args=[3])
                    break
                except BrokerUnavailable:
                    assert time.monotonic() < deadline
                    await asyncio.sleep(0.2)
            assert (await app.get_job_async(job.id)).state is JobState.READY
        finally:
            aproxy.restore()
            await app.aclose()

    asyncio.run(main())


def test_an_async_commit_whose_answer_never_comes_names_the_unique_key(
    db_url: str, aproxy: TcpProxy
) -> None:
    app = App(broker=through(db_url, aproxy), config=False)

    async def main() -> None:
        try:
            await app.enqueue_async("t", args=[0])
            aproxy.fail_commits(["silent"], b"order-8")
            took, exc = await timed(app.enqueue_async("t", args=[8], unique_key="order-8"))
            assert isinstance(exc, EnqueueFateUnknown), exc
            assert exc.unique_keys == ("order-8",) and exc.retry_is_safe
            assert took <= PRODUCER_BOUND + SLACK, took
            again = await app.enqueue_async("t", args=[8], unique_key="order-8")
            jobs = app.broker.list_jobs(unique_key="order-8")
            assert [j.id for j in jobs] == [again.id]
        finally:
            aproxy.restore()
            await app.aclose()

    asyncio.run(main())
