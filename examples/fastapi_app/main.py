"""A FastAPI app that hands work to sluicegate: enqueue, status, wait, cancel, and the
dashboard mounted under /admin/jobs. The guide is docs/fastapi.md; how to run it, this
folder's README.md.

    uvicorn main:api                      # beside: sluicegate worker tasks:jobs
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Query, Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from tasks import build_report, jobs

from sluicegate import (
    BrokerUnavailable,
    InvalidTransition,
    Job,
    JobCancelled,
    JobFailed,
    JobNotFound,
    JobState,
)
from sluicegate.dashboard import asgi_app


@asynccontextmanager
async def lifespan(_: FastAPI) -> AsyncIterator[None]:
    """The web app owns the sluicegate App: opened before the first request (a broker
    that cannot be reached stops the start), closed after the last one, in this loop
    (the asyncio connections, the waiting hub)."""
    await jobs.open_async()
    try:
        yield
    finally:
        await jobs.aclose()


api = FastAPI(title="reports", lifespan=lifespan)


class ReportRequest(BaseModel):
    user_id: int
    rows: int = Field(3, ge=1, le=10_000)
    row_seconds: float = Field(0.05, ge=0, le=10)


def status_of(job: Job) -> dict[str, Any]:
    """What a client may see of a job: never its arguments or a traceback."""
    body: dict[str, Any] = {
        "job_id": job.id,
        "state": job.state.value,
        "attempts": job.attempts,
        "progress": None,
    }
    if job.progress is not None:
        body["progress"] = {"fraction": job.progress.fraction, "message": job.progress.message}
    if job.state is JobState.SUCCEEDED:
        body["result"] = job.result
    if job.last_error is not None:
        body["error"] = {"type": job.last_error.type, "message": job.last_error.message}
    return body


def pending(job_id: int, status_code: int) -> JSONResponse:
    """Not finished within the wait: 202 (ask again) or 504 (this call promised a result)."""
    return JSONResponse(
        {"job_id": job_id, "state": "pending", "status_url": f"/jobs/{job_id}"},
        status_code=status_code,
        headers={"Retry-After": "1", "Location": f"/jobs/{job_id}"},
    )


# ---- what sluicegate raises, as HTTP answers ----------------------------------------
@api.exception_handler(JobNotFound)  # InvalidJobId too (a subclass)
async def not_found(_: Request, exc: Exception) -> JSONResponse:
    return JSONResponse({"detail": str(exc)}, status_code=404)


@api.exception_handler(JobFailed)  # the job ended dead: its last error, no traceback
async def job_failed(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, JobFailed)
    error = {"type": exc.type, "message": exc.message}
    body = {"job_id": exc.job_id, "state": "dead", "error": error}
    return JSONResponse(body, status_code=500)


@api.exception_handler(JobCancelled)
async def job_cancelled(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, JobCancelled)
    return JSONResponse({"job_id": exc.job_id, "state": "cancelled"}, status_code=409)


@api.exception_handler(InvalidTransition)  # cancelling a job that has finished
async def conflict(_: Request, exc: Exception) -> JSONResponse:
    return JSONResponse({"detail": str(exc)}, status_code=409)


@api.exception_handler(BrokerUnavailable)  # the database is down or busy: try later
async def unavailable(_: Request, exc: Exception) -> JSONResponse:
    body = {"detail": f"the job store is unavailable: {exc}"}
    return JSONResponse(body, status_code=503, headers={"Retry-After": "5"})


# ---- routes -----------------------------------------------------------------------
@api.post("/reports", status_code=202)
async def start_report(report: ReportRequest, response: Response) -> dict[str, Any]:
    """Enqueue and answer at once: the client follows the job by its status URL."""
    job = await build_report.enqueue_async(report.user_id, report.rows, report.row_seconds)
    response.headers["Location"] = f"/jobs/{job.id}"
    return status_of(job)


@api.post("/reports/now", response_model=None)
async def report_now(
    report: ReportRequest, wait: float = Query(10.0, ge=0, le=30)
) -> dict[str, Any] | JSONResponse:
    """Enqueue and wait for the result, up to ``wait`` seconds: 200 with it, or 504 (the
    job goes on; the body says where to follow it)."""
    job = await build_report.enqueue_async(report.user_id, report.rows, report.row_seconds)
    try:
        return {"job_id": job.id, "result": await job.wait_async(timeout=wait)}
    except TimeoutError:
        return pending(job.id, 504)


@api.get("/jobs/{job_id}")
async def job_status(job_id: int) -> dict[str, Any]:
    return status_of(await jobs.get_job_async(job_id))


@api.get("/jobs/{job_id}/result", response_model=None)
async def job_result(
    job_id: int, wait: float = Query(10.0, ge=0, le=30)
) -> dict[str, Any] | JSONResponse:
    """The result once the job succeeded, waiting up to ``wait`` seconds for it; 202 with
    Retry-After while it runs (long polling)."""
    try:
        return {"job_id": job_id, "result": await jobs.wait_async(job_id, timeout=wait)}
    except TimeoutError:
        return pending(job_id, 202)


@api.post("/jobs/{job_id}/cancel")
def cancel_job(job_id: int) -> dict[str, Any]:
    """A plain ``def``: FastAPI runs it in its thread pool, as ``jobs.cancel`` blocks."""
    return status_of(jobs.cancel(job_id, by="reports api"))


# The dashboard, only with a token (at least 16 characters): it shows job arguments and
# results, and can retry and cancel jobs. Or mount it behind your own authentication.
if token := os.environ.get("SLUICEGATE_DASHBOARD_TOKEN"):
    api.mount("/admin/jobs", asgi_app(jobs, token=token, title="reports jobs"))
