"""One queue: its depth, rates and oldest age, the pools that serve it (busy/slots and
duration against concurrency), its tasks, its newest jobs, and its charts."""

from __future__ import annotations

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from ..data import JobQuery
from ..render import dashboard, render
from .overview import history_charts, pool_rows, queue_rows

RECENT = 20


def queue(request: Request) -> Response:
    name = request.path_params["name"]
    source = dashboard(request).source
    system = source.system()
    row = next((q for q in queue_rows(system) if q["name"] == name), None)
    if row is None:
        raise HTTPException(404, f"no queue {name!r}: it has no jobs and no worker watches it")
    pools = [p for p in pool_rows(system.view) if name in p["queues"]]
    tasks = {t: f for t, f in system.view["tasks"].items() if name in f["queues"]}
    recent = source.jobs(JobQuery(queue=name, limit=RECENT))
    return render(
        request,
        "queue.html",
        {
            "now": system.now,
            "queue": row,
            "pools": pools,
            "tasks": tasks,
            "jobs": recent.jobs,
            "charts": history_charts(system.history, queue=name),
        },
        nav="overview",
    )
