"""A Starlette request handler enqueues on PostgreSQL without a thread hop: the request
goes through httpx's ASGI transport in this test's own loop, and while it is handled the
loop's default executor refuses any work (``asyncio.to_thread`` and ``run_in_executor``
go there), as does ``run_in_executor`` with any executor, and no new thread may start. The enqueue's I/O is psycopg's asyncio
connection on the loop's thread."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable
from typing import Any

import httpx2 as httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from sluicegate import App


class RefusingExecutor(concurrent.futures.ThreadPoolExecutor):
    """A default executor that fails any call handed to it, and counts them."""

    def __init__(self) -> None:
        super().__init__(max_workers=1)
        self.refused = 0

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        self.refused += 1
        raise AssertionError(f"a thread hop: {fn!r}")


def test_a_starlette_handler_enqueues_on_the_loop_thread(pg_url: str) -> None:
    app = App(broker=pg_url, config=False)

    @app.task(queue="web")
    def welcome(user: int) -> None: ...

    async def enqueue(request: Request) -> JSONResponse:
        body = await request.json()
        job = await welcome.enqueue_async(body["user"])
        same = await app.get_job_async(job.id)
        return JSONResponse({"id": job.id, "state": same.state.value})

    web = Starlette(routes=[Route("/signup", enqueue, methods=["POST"])])

    async def main() -> None:
        await welcome.enqueue_async(0)  # opens the broker (in a thread) and the pool
        loop = asyncio.get_running_loop()
        refusing = RefusingExecutor()
        loop.set_default_executor(refusing)
        hops: list[object] = []

        def no_executor(executor: object, fn: Callable[..., Any], *args: Any) -> Any:
            hops.append(fn)  # any executor at all, the default or one of the broker's
            raise AssertionError(f"a thread hop: {fn!r}")

        loop.run_in_executor = no_executor  # type: ignore[method-assign,assignment]
        threads = {t.ident for t in threading.enumerate()}
        try:
            transport = httpx.ASGITransport(app=web)
            async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
                for user in (1, 2, 3):
                    response = await client.post("/signup", json={"user": user})
                    assert response.status_code == 200, response.text
                    assert response.json()["state"] == "ready"
            assert refusing.refused == 0 and hops == []
            assert {t.ident for t in threading.enumerate()} <= threads  # no thread started
        finally:
            del loop.run_in_executor  # the class's own again
            refusing.shutdown()
            loop.set_default_executor(concurrent.futures.ThreadPoolExecutor(1))
            await app.aclose()  # closing the sync side may use a thread: that is allowed

    asyncio.run(main())
