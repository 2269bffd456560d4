"""Jobs: the listing (filtered by state, queue and task, searched by id or unique key,
paged by keyset: each page is one index range below the last id shown, as fast on page
1,000 as on page 1), the dead jobs, one job in full, and the retry and cancel actions,
one job at a time or in bulk for a filter."""

from __future__ import annotations

import json
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from ...errors import SluicegateError
from ...job import TERMINAL, UNFINISHED, JobState
from ..data import BULK_PER_REQUEST, JobQuery
from ..render import Page, back, dashboard, render
from ..security import Form, base_path
from ..timeline import timeline

STATES = [s.value for s in JobState]
TEXT_MAX = 500  # longest filter value taken from a URL


def jobs(request: Request) -> Response:
    return _listing(request, dead=False)


def dead(request: Request) -> Response:
    return _listing(request, dead=True)


def _listing(request: Request, dead: bool) -> Response:
    params = request.query_params
    state = JobState.DEAD if dead else _state(params.get("state"))
    queue = _text(params.get("queue"))
    task = _text(params.get("task"))
    search = _text(params.get("q"))
    before = _before(params.get("before"))
    source = dashboard(request).source
    unique_key = None
    if search is not None:
        job = source.job(int(search)) if search.isdigit() and len(search) < 19 else None
        if job is not None:
            path = request.app.url_path_for("job", job_id=job.id)
            return RedirectResponse(base_path(request.scope) + str(path), status_code=303)
        unique_key = search
    page = source.jobs(JobQuery(state, queue, task, unique_key, before))
    system = source.system()
    stats = system.stats
    counts = _state_counts(stats, queue)
    filters = {
        "state": None if dead else (state.value if state else None),
        "queue": queue,
        "task": task,
        "q": search,
    }
    return render(
        request,
        "jobs.html",
        {
            "dead_page": dead,
            "jobs": page.jobs,
            "next_before": page.next_before,
            "first_page": before is None,
            "filters": filters,
            "state": state.value if state else None,
            "counts": counts,
            "queues": sorted(stats.queues),
            "tasks": sorted(system.view["tasks"]),
            "states": STATES,
            "can_retry_all": state is JobState.DEAD,
            "can_cancel_all": state is not None and state in UNFINISHED,
            "matching": None if task or unique_key else counts.get(state.value if state else ""),
            "bulk_max": BULK_PER_REQUEST,
            "now": source.clock(),
        },
        nav="dead" if dead else "jobs",
    )


def _state(value: str | None) -> JobState | None:
    if not value:
        return None
    try:
        return JobState(value)
    except ValueError:
        raise HTTPException(
            400, f"no job state {value!r}: use one of {', '.join(STATES)}"
        ) from None


def _text(value: str | None) -> str | None:
    value = (value or "").strip()
    if not value:
        return None
    if len(value) > TEXT_MAX:
        raise HTTPException(400, f"a filter is at most {TEXT_MAX} characters")
    return value


def _before(value: str | None) -> int | None:
    if not value:
        return None
    if not value.isdigit() or len(value) > 19:
        raise HTTPException(400, "before must be a job id")
    return int(value)


def _state_counts(stats: Any, queue: str | None) -> dict[str, int]:
    """Jobs per state (of one queue, or all): the broker's counters, not a count."""
    out = dict.fromkeys(STATES, 0)
    for name, q in stats.queues.items():
        if queue is None or name == queue:
            for s, n in q.counts.items():
                out[s.value] += n
    return out


# ---- one job ------------------------------------------------------------------------
def job(request: Request) -> Response:
    source = dashboard(request).source
    found = source.job(request.path_params["job_id"])
    if found is None:
        raise HTTPException(404, f"job {request.path_params['job_id']} not found")
    history = source.history_of(found)
    worker = None
    if found.worker_id:
        worker = next((w for w in source.workers()["workers"] if w["id"] == found.worker_id), None)
    return render(
        request,
        "job.html",
        {
            "job": found,
            "held": found.state in (JobState.CLAIMED, JobState.RUNNING),
            "can_retry": found.state in (JobState.DEAD, JobState.CANCELLED),
            "can_cancel": found.state not in TERMINAL,
            "timeline": timeline(found, history),
            "worker": worker,
            "waiting_for": source.waiting_for(found),
            "needs": source.needs(found),
            "now": source.clock(),
        },
        nav="jobs",
    )


def job_json(request: Request) -> Response:
    """The job as JSON (its full arguments and result, uncut), for scripts and copying."""
    source = dashboard(request).source
    found = source.job(request.path_params["job_id"])
    if found is None:
        raise HTTPException(404, f"job {request.path_params['job_id']} not found")
    data = {**found.to_dict(), "history": source.history_of(found)}
    body = json.dumps(data, indent=2, ensure_ascii=True, default=repr)
    return Page(body, media_type="application/json")


# ---- actions ------------------------------------------------------------------------
async def retry_one(request: Request, form: Form) -> Response:
    job_id = request.path_params["job_id"]
    try:
        found = await run_in_threadpool(dashboard(request).source.retry, job_id)
    except SluicegateError as exc:
        return back(request, form, "error", str(exc))
    return back(request, form, "ok", f"job {found.id} is {found.state.value} again")


async def cancel_one(request: Request, form: Form) -> Response:
    job_id = request.path_params["job_id"]
    try:
        source = dashboard(request).source
        found = await run_in_threadpool(source.cancel, job_id, _asker(request))
    except SluicegateError as exc:
        return back(request, form, "error", str(exc))
    return back(request, form, "ok", f"job {found.id} is {found.state.value}")


async def retry_all(request: Request, form: Form) -> Response:
    """Every dead job of the filter (queue, task) back to ready, in batches."""
    queue, task = _form_text(form, "queue"), _form_text(form, "task")
    try:
        n = await run_in_threadpool(dashboard(request).source.retry_matching, queue, task)
    except SluicegateError as exc:
        return back(request, form, "error", str(exc))
    return back(request, form, "ok", _bulk_text(n, "dead job", "retried", queue, task))


async def cancel_all(request: Request, form: Form) -> Response:
    """Every job of the filter (state, queue, task) cancelled, in batches."""
    queue, task = _form_text(form, "queue"), _form_text(form, "task")
    try:
        state = JobState(form.get("state", ""))
        n = await run_in_threadpool(
            dashboard(request).source.cancel_matching, state, queue, task, _asker(request)
        )
    except ValueError:
        return back(request, form, "error", "choose the state of the jobs to cancel")
    except SluicegateError as exc:
        return back(request, form, "error", str(exc))
    return back(request, form, "ok", _bulk_text(n, f"{state.value} job", "cancelled", queue, task))


def _asker(request: Request) -> str:
    """Who cancels, as the job's history records it: the dashboard, and from where."""
    client = request.client.host if request.client else "unknown"
    return f"dashboard from {client}"


def _form_text(form: Form, key: str) -> str | None:
    value = form.get(key, "").strip()
    return value[:TEXT_MAX] or None


def _bulk_text(n: int, what: str, done: str, queue: str | None, task: str | None) -> str:
    scope = "".join([f" of queue {queue}" if queue else "", f" of task {task}" if task else ""])
    text = f"{done} {n:,} {what}{'' if n == 1 else 's'}{scope}"
    if n >= BULK_PER_REQUEST:
        text += f" (at most {BULK_PER_REQUEST:,} at a time: press again for the rest)"
    return text
