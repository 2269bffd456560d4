"""docs/fastapi.md's transactional enqueue, as the guide writes it, on PostgreSQL: a
psycopg AsyncConnectionPool opened in the lifespan, a dependency lending a connection
per request, and a handler that inserts a user and enqueues the welcome mail in one
transaction. A committed sign-up leaves its job ready; one rolled back (the e-mail is
taken) leaves none. The app runs in this test's loop through httpx's ASGI transport,
inside its own lifespan."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any

import httpx2 as httpx
import psycopg
from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse
from psycopg_pool import AsyncConnectionPool
from pydantic import BaseModel

from sluicegate import App, JobState
from support.brokers import plain_dsn, schema_of


class NewUser(BaseModel):
    email: str


async def db(request: Request) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
    """A connection of the app's pool for one request (a FastAPI dependency)."""
    async with request.app.state.db.connection() as conn:
        yield conn


def make_api(jobs: App, dsn: str, users: str) -> FastAPI:
    """The guide's code; ``users`` is the table (in the test's schema)."""

    @jobs.task(queue="mail")
    def send_welcome(user_id: int) -> None: ...

    @asynccontextmanager
    async def lifespan(api: FastAPI) -> AsyncIterator[None]:
        await jobs.open_async()
        try:
            async with AsyncConnectionPool(dsn, min_size=1, max_size=10) as pool:
                api.state.db = pool
                yield
        finally:
            await jobs.aclose()

    api = FastAPI(lifespan=lifespan)

    @api.post("/users", status_code=201)
    async def sign_up(
        user: NewUser, conn: Annotated[psycopg.AsyncConnection[Any], Depends(db)]
    ) -> dict[str, int]:
        async with conn.transaction():  # both, or neither
            cur = await conn.execute(
                f"INSERT INTO {users} (email) VALUES (%s) RETURNING id", (user.email,)
            )
            row = await cur.fetchone()
            assert row is not None
            job = await send_welcome.with_options(connection=conn).enqueue_async(row[0])
        return {"user_id": row[0], "job_id": job.id}

    @api.exception_handler(psycopg.errors.UniqueViolation)
    async def taken(_: Request, exc: Exception) -> JSONResponse:
        return JSONResponse({"detail": "that e-mail is taken"}, status_code=409)

    return api


def test_a_sign_up_and_its_job_commit_or_roll_back_together(pg_url: str) -> None:
    dsn, users = plain_dsn(pg_url), f"{schema_of(pg_url)}.users"
    jobs = App(broker=pg_url, config=False)
    with psycopg.connect(dsn, autocommit=True) as setup:
        jobs.broker  # noqa: B018 -- creates the schema (a migration)
        setup.execute(f"CREATE TABLE {users} (id serial PRIMARY KEY, email text UNIQUE)")
    api = make_api(jobs, dsn, users)

    async def main() -> None:
        async with api.router.lifespan_context(api):
            transport = httpx.ASGITransport(app=api)
            async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
                first = await client.post("/users", json={"email": "ada@example.org"})
                assert first.status_code == 201, first.text
                taken = await client.post("/users", json={"email": "ada@example.org"})
                assert (taken.status_code, taken.json()) == (
                    409,
                    {"detail": "that e-mail is taken"},
                )
                job = await jobs.get_job_async(first.json()["job_id"])
                assert (job.task, job.args, job.state) == (
                    "send_welcome",
                    [first.json()["user_id"]],
                    JobState.READY,
                )
        assert jobs._broker is None  # the lifespan closed the App

    asyncio.run(main())
    try:
        with psycopg.connect(dsn) as conn:
            signed_up = [row[0] for row in conn.execute(f"SELECT id FROM {users}")]
        assert len(signed_up) == 1  # the second insert was rolled back...
        queued = jobs.broker.list_jobs(None, "mail", limit=10)
        assert [job.args for job in queued] == [signed_up]  # ...and its job with it
    finally:
        jobs.close()
