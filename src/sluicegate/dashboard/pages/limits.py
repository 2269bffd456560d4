"""Limits: capacity, units in use, jobs waiting and the oldest wait, per limit and per
partition; a form that changes a limit's values for every worker, and a reset."""

from __future__ import annotations

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from ...errors import SluicegateError
from ..render import back, dashboard, render
from ..security import Form


def limits(request: Request) -> Response:
    lines, values, now = dashboard(request).source.limits()
    for line in lines:
        concurrency = line["concurrency"]
        line["saturation"] = line["in_use"] / concurrency if concurrency else None
    return render(
        request, "limits.html", {"limits": lines, "values": values, "now": now}, nav="limits"
    )


async def set_limit(request: Request, form: Form) -> Response:
    name = request.path_params["name"]
    try:
        concurrency = _number(form, "concurrency")
        burst = _number(form, "burst")
        rate = form.get("rate", "").strip() or None
        limit = await run_in_threadpool(
            dashboard(request).source.set_limit, name, concurrency, rate, burst
        )
    except (SluicegateError, ValueError) as exc:
        return back(request, form, "error", str(exc))
    return back(request, form, "ok", f"limit {name}: {limit.describe()}")


async def reset_limit(request: Request, form: Form) -> Response:
    name = request.path_params["name"]
    try:
        limit = await run_in_threadpool(dashboard(request).source.reset_limit, name)
    except SluicegateError as exc:
        return back(request, form, "error", str(exc))
    return back(request, form, "ok", f"limit {name} reset to {limit.describe()}")


def _number(form: Form, key: str) -> int | None:
    text = form.get(key, "").strip()
    if not text:
        return None
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"{key} must be a whole number of at least 1, not {text[:40]!r}")
    return int(text)
