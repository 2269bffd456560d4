"""Pages as HTML: the Jinja2 environment (autoescape on for every template), the helpers
templates call to build links that work under any mount prefix, and the response that
renders a template whole or, for the live refresh, only its main region."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast
from urllib.parse import quote, urlencode

import jinja2
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.templating import Jinja2Templates

from . import charts, format
from .data import Source
from .security import (
    Policy,
    base_path,
    clear_flash,
    csrf_token,
    safe_next,
    set_flash,
    take_flash,
)

HERE = Path(__file__).resolve().parent
STATIC = HERE / "static"
LIVE_HEADER = "x-sluicegate-live"  # the live refresh asks for the main region only


@dataclass(frozen=True, slots=True)
class Dashboard:
    """What every page needs, kept on the Starlette app's state."""

    source: Source
    policy: Policy
    title: str
    templates: Jinja2Templates
    static_version: str


def dashboard(request: Request) -> Dashboard:
    return cast("Dashboard", request.app.state.dashboard)


class Page(HTMLResponse):
    """HTML whose text cannot fail to encode: a lone surrogate (which no stored job
    should hold, but an error message from a mangled file name might) is written as
    its escape, never a server error."""

    def render(self, content: Any) -> bytes | memoryview:
        if isinstance(content, str):
            return content.encode("utf-8", "backslashreplace")
        return super().render(content)


def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(HERE / "templates"),
        autoescape=jinja2.select_autoescape(["html"], default=True, default_for_string=True),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(format.FILTERS)
    env.globals.update(
        url=_url, static=_static, qs=_qs, bar=charts.bar, legend=charts.legend, ago=format.ago
    )
    return env


def templates() -> Jinja2Templates:
    return Jinja2Templates(env=environment())


def static_version() -> str:
    """A short hash of the static files, so browsers fetch them again after an upgrade."""
    digest = hashlib.sha256()
    for path in sorted(STATIC.iterdir()):
        digest.update(path.read_bytes())
    return digest.hexdigest()[:10]


@jinja2.pass_context
def _url(ctx: Any, route: str, /, **params: Any) -> str:
    """The path of ``route`` under the prefix the dashboard is mounted at."""
    request: Request = ctx["request"]
    quoted = {k: v if isinstance(v, int) else quote(str(v), safe="") for k, v in params.items()}
    return base_path(request.scope) + str(request.app.url_path_for(route, **quoted))


@jinja2.pass_context
def _static(ctx: Any, path: str) -> str:
    request: Request = ctx["request"]
    version = dashboard(request).static_version
    return f"{base_path(request.scope)}/static/{quote(path)}?v={version}"


def _qs(params: dict[str, Any] | None = None, **more: Any) -> str:
    """``?a=1&b=2`` of the values that are set ('' when none are)."""
    merged = {**(params or {}), **more}
    kept = {k: v for k, v in merged.items() if v is not None and v != ""}
    return f"?{urlencode(kept)}" if kept else ""


def here(request: Request) -> str:
    """This page's own path and query, for a form's ``next`` field."""
    query = request.scope.get("query_string", b"").decode("latin-1")
    return quote(request.scope["path"]) + (f"?{query}" if query else "")


def render(
    request: Request, template: str, context: dict[str, Any], *, nav: str, status: int = 200
) -> Response:
    """The page, or only its main region when the live refresh asks (same data)."""
    d = dashboard(request)
    fragment = LIVE_HEADER in request.headers
    flash = None if fragment else take_flash(d.policy, request)
    html = d.templates.get_template(template).render(
        {
            **context,
            "request": request,
            "nav": nav,
            "title": d.title,
            "read_only": d.policy.read_only,
            "csrf": csrf_token(request),
            "fragment": fragment,
            "flash": flash,
            "broker_url": d.source.url(),
            "token_session": d.policy.token is not None,
            "here": here(request),
        }
    )
    response = Page(html, status_code=status)
    if flash is not None:
        clear_flash(request.scope, response)
    return response


def back(request: Request, form: dict[str, str], kind: str, text: str) -> Response:
    """After an action: to the page the form came from (``next``), with a message."""
    response = RedirectResponse(safe_next(request, form.get("next")), status_code=303)
    set_flash(dashboard(request).policy, request.scope, response, kind, text)
    return response
