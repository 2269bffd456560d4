"""Signing in with the dashboard token (when it has one) and signing out. The session
cookie holds an HMAC of the token, never the token."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from ..render import dashboard, render
from ..security import Form, safe_next, sign_in, sign_out, slow_down


def login_page(request: Request) -> Response:
    """The sign-in form; without a token there is nothing to sign in to."""
    if dashboard(request).policy.token is None:
        return RedirectResponse(safe_next(request, request.query_params.get("next")), 303)
    return render(
        request,
        "login.html",
        {"next": safe_next(request, request.query_params.get("next")), "failed": False},
        nav="login",
    )


async def login(request: Request, form: Form) -> Response:
    policy = dashboard(request).policy
    target = safe_next(request, form.get("next"))
    if policy.token is None:
        return RedirectResponse(target, status_code=303)
    if not policy.token_matches(form.get("token", "")):
        await slow_down()
        return render(
            request, "login.html", {"next": target, "failed": True}, nav="login", status=401
        )
    response = RedirectResponse(target, status_code=303)
    sign_in(policy, request.scope, response)
    return response


async def logout(request: Request, form: Form) -> Response:
    response = RedirectResponse(safe_next(request, None) + "login", status_code=303)
    sign_out(request.scope, response)
    return response
