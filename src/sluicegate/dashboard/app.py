"""The dashboard's ASGI app: its routes, the security middleware in front of them, the
static files, and error pages. ``sluicegate.dashboard.asgi_app`` builds it."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from ..errors import BrokerUnavailable
from .data import Source, open_broker
from .pages import auth, jobs, limits, overview, queues, workers
from .render import STATIC, Dashboard, render, static_version, templates
from .security import Guard, Handler, Policy, action

if TYPE_CHECKING:
    from ..app import App
    from ..brokers import Broker


def routes(policy: Policy) -> list[BaseRoute]:
    """Every page is a GET; every change a POST through ``action`` (CSRF, read-only)."""

    def post(path: str, handler: Handler, name: str, session: bool = False) -> Route:
        return Route(path, action(policy, handler, session=session), methods=["POST"], name=name)

    return [
        Route("/", overview.overview, name="overview"),
        Route("/queues/{name}", queues.queue, name="queue"),
        Route("/jobs", jobs.jobs, name="jobs"),
        Route("/dead", jobs.dead, name="dead"),
        Route("/jobs/{job_id:int}", jobs.job, name="job"),
        Route("/jobs/{job_id:int}/json", jobs.job_json, name="job_json"),
        Route("/workers", workers.workers, name="workers"),
        Route("/limits", limits.limits, name="limits"),
        Route("/login", auth.login_page, name="login_page"),
        post("/jobs/{job_id:int}/retry", jobs.retry_one, "job_retry"),
        post("/jobs/{job_id:int}/cancel", jobs.cancel_one, "job_cancel"),
        post("/jobs/retry", jobs.retry_all, "jobs_retry"),
        post("/jobs/cancel", jobs.cancel_all, "jobs_cancel"),
        post("/limits/{name}", limits.set_limit, "limit_set"),
        post("/limits/{name}/reset", limits.reset_limit, "limit_reset"),
        post("/login", auth.login, "login", session=True),
        post("/logout", auth.logout, "logout", session=True),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]


def build(
    source: App | Broker | str,
    *,
    read_only: bool = False,
    token: str | None = None,
    title: str = "sluicegate",
    secret: str | bytes | None = None,
    allowed_hosts: Iterable[str] | None = None,
) -> Starlette:
    policy = Policy.of(token, secret, read_only, allowed_hosts)
    app = Starlette(
        routes=routes(policy),
        middleware=[Middleware(Guard, policy=policy)],
        exception_handlers={HTTPException: _http_error, BrokerUnavailable: _broker_down},
    )
    app.state.dashboard = Dashboard(
        source=Source(open_broker(source)),
        policy=policy,
        title=title,
        templates=templates(),
        static_version=static_version(),
    )
    return app


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    return _error_page(request, exc.status_code, exc.detail)


async def _broker_down(request: Request, exc: Exception) -> Response:
    return _error_page(request, 503, f"the broker is unavailable: {exc}")


def _error_page(request: Request, status: int, message: str) -> Response:
    return render(request, "error.html", {"status": status, "message": message}, nav="error",
                  status=status)  # fmt: skip
