"""Workers: the registry (live, late, lost, stopped), each worker's health and reasons,
its pools' busy/slots, the jobs it holds, and its hosts' load."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from ..render import dashboard, render


def workers(request: Request) -> Response:
    source = dashboard(request).source
    view = source.workers()
    held = source.held_jobs()
    return render(
        request,
        "workers.html",
        {
            "now": view["now"],
            "workers": view["workers"],
            "held": held,
            "hosts": view["hosts"],
        },
        nav="workers",
    )
