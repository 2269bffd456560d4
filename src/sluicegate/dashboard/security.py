"""Safe by default, in one place: who may see the dashboard, which requests may change
anything, and the headers every response carries.

- **Authentication.** Without a token the dashboard trusts whoever reaches it: it binds
  to loopback, or it is mounted behind the host project's own authentication. With a
  token, a request must carry it (``Authorization: Bearer TOKEN``) or the session cookie
  the login form sets (an HMAC of the token, never the token itself).
- **Host check.** ``allowed_hosts`` refuses other Host headers: the CLI on loopback
  without a token sets it, so a page on another site cannot reach the dashboard through
  DNS rebinding.
- **CSRF.** Every state-changing request is a POST built by ``action``: it carries a
  form field that must equal the HMAC of a random per-browser cookie (signed double
  submit), so another site can neither read nor forge it. Cookies are HttpOnly and
  SameSite=Strict, scoped to the dashboard's path, and Secure over HTTPS.
- **Read-only** refuses every request that is not GET or HEAD, besides login/logout.
- **Headers.** A Content-Security-Policy that allows scripts, styles and images only
  from the dashboard itself (no inline script or style, no CDN), no framing, nosniff,
  no referrer, and no caching of pages that show job data.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import ipaddress
import secrets
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, quote, urlsplit

from starlette.datastructures import MutableHeaders
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "frame-ancestors 'none'; form-action 'self'; base-uri 'none'; object-src 'none'"
)
HEADERS = {
    "content-security-policy": CSP,
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "x-frame-options": "DENY",
    "cross-origin-opener-policy": "same-origin",
}
AUTH_COOKIE = "sluicegate_auth"
CSRF_COOKIE = "sluicegate_csrf"
FLASH_COOKIE = "sluicegate_flash"
CSRF_FIELD = "csrf"
SAFE_METHODS = frozenset({"GET", "HEAD"})
OPEN_PATHS = ("/login", "/static/")  # reachable without signing in
SESSION_PATHS = ("/login", "/logout")  # POSTs a read-only dashboard still takes
MAX_FORM_BYTES = 64 * 1024
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
MIN_TOKEN_CHARS = 16
FAILED_LOGIN_DELAY_S = 0.25

Form = dict[str, str]


def is_loopback(host: str) -> bool:
    """True for localhost and loopback addresses (127.0.0.0/8, ::1)."""
    name = host.strip("[]").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def token_problem(token: str) -> str | None:
    """Why a dashboard token is too weak, or None."""
    if len(token) < MIN_TOKEN_CHARS or not token.strip():
        return (
            f"the dashboard token must be at least {MIN_TOKEN_CHARS} characters "
            "(make one with: python -c 'import secrets; print(secrets.token_urlsafe())')"
        )
    return None


@dataclass(frozen=True, slots=True)
class Policy:
    token: str | None
    secret: bytes  # signs the CSRF field, the session cookie and flash messages
    read_only: bool = False
    allowed_hosts: frozenset[str] | None = None  # None: any Host header

    @classmethod
    def of(
        cls,
        token: str | None,
        secret: str | bytes | None,
        read_only: bool,
        allowed_hosts: Iterable[str] | None,
    ) -> Policy:
        """The secret defaults to one derived from the token (so several processes agree)
        or, without a token, a random one per process; pass ``secret`` when several
        processes serve one dashboard without a token."""
        if isinstance(secret, str):
            key = secret.encode()
        elif secret is not None:
            key = secret
        elif token is not None:
            key = hashlib.sha256(b"sluicegate-dashboard\x00" + token.encode()).digest()
        else:
            key = secrets.token_bytes(32)
        hosts = None if allowed_hosts is None else frozenset(_host(h) for h in allowed_hosts)
        return cls(token or None, key, read_only, hosts)

    def sign(self, purpose: str, value: str) -> str:
        mac = hmac.new(self.secret, f"{purpose}\x00{value}".encode(), hashlib.sha256)
        return mac.hexdigest()

    def session_value(self) -> str:
        assert self.token is not None
        return self.sign("session", self.token)

    def authenticated(self, request: Request) -> bool:
        if self.token is None:
            return True
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer" and self.token_matches(given.strip()):
            return True
        cookie = request.cookies.get(AUTH_COOKIE, "")
        return bool(cookie) and hmac.compare_digest(cookie, self.session_value())

    def token_matches(self, given: str) -> bool:
        return self.token is not None and hmac.compare_digest(
            given.encode("utf-8", "replace"), self.token.encode()
        )

    def host_allowed(self, scope: Scope) -> bool:
        if self.allowed_hosts is None:
            return True
        host = next((v for k, v in scope["headers"] if k == b"host"), b"").decode("latin-1")
        return _host(host) in self.allowed_hosts


def _host(value: str) -> str:
    """A Host header's name without its port; IPv6 without brackets; lower case."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[1 : value.find("]")] if "]" in value else value[1:]
    if value.count(":") == 1:
        return value.split(":", 1)[0]
    return value


def route_path(scope: Scope) -> str:
    """The path inside the dashboard (what follows the prefix it is mounted under)."""
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    if root and path.startswith(root) and (len(path) == len(root) or path[len(root)] == "/"):
        return path[len(root) :] or "/"
    return path


def base_path(scope: Scope) -> str:
    return str(scope.get("root_path", "")).rstrip("/")


def cookie(scope: Scope, name: str, value: str, max_age: int | None = None) -> str:
    """A Set-Cookie value: HttpOnly, SameSite=Strict, only under the dashboard's path."""
    parts = [f"{name}={value}", f"Path={base_path(scope) or ''}/", "HttpOnly", "SameSite=Strict"]
    if max_age is not None:
        parts.append(f"Max-Age={max_age}")
    if scope.get("scheme") == "https":
        parts.append("Secure")
    return "; ".join(parts)


class Guard:
    """ASGI middleware in front of every route: the host check, authentication, the
    read-only refusal, the CSRF cookie, and the security headers."""

    def __init__(self, app: ASGIApp, policy: Policy) -> None:
        self.app = app
        self.policy = policy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        set_cookies: list[str] = []
        request = Request(scope)
        nonce = request.cookies.get(CSRF_COOKIE, "")
        if len(nonce) < 32 or not nonce.replace("-", "").replace("_", "").isalnum():
            nonce = secrets.token_urlsafe(32)
            set_cookies.append(cookie(scope, CSRF_COOKIE, nonce))
        scope["sluicegate.csrf"] = self.policy.sign("csrf", nonce)
        send = _with_headers(send, set_cookies, cache=not route_path(scope).startswith("/static/"))
        refusal = self.refusal(scope, request)
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def refusal(self, scope: Scope, request: Request) -> Response | None:
        policy, path = self.policy, route_path(scope)
        if not policy.host_allowed(scope):
            return PlainTextResponse("host not allowed", status_code=400)
        if not policy.authenticated(request) and not path.startswith(OPEN_PATHS):
            if request.method in SAFE_METHODS and "x-sluicegate-live" not in request.headers:
                target = quote(base_path(scope) + path + _query(scope), safe="/")
                return RedirectResponse(f"{base_path(scope)}/login?next={target}", 303)
            return PlainTextResponse("sign in: a dashboard token is required", status_code=401)
        if request.method not in SAFE_METHODS and policy.read_only and path not in SESSION_PATHS:
            return PlainTextResponse("the dashboard is read-only", status_code=403)
        return None


def _query(scope: Scope) -> str:
    qs = scope.get("query_string", b"").decode("latin-1")
    return f"?{qs}" if qs else ""


def _with_headers(send: Send, set_cookies: list[str], cache: bool) -> Send:
    async def wrapped(message: Message) -> None:
        if message["type"] == "http.response.start":
            headers = MutableHeaders(scope=message)
            for name, value in HEADERS.items():
                headers[name] = value
            if cache:
                headers["cache-control"] = "no-store"
            for value in set_cookies:
                headers.append("set-cookie", value)
        await send(message)

    return wrapped


# ---- state-changing requests ----------------------------------------------------------
def csrf_token(request: Request) -> str:
    """The value every form of this page carries in its ``csrf`` field."""
    return str(request.scope.get("sluicegate.csrf", ""))


class FormRefused(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


async def read_form(request: Request) -> Form:
    """An urlencoded form body, at most MAX_FORM_BYTES; first value of each field."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if not kind:
        return {}  # no form at all: no CSRF field either, so the caller answers 403
    if kind != "application/x-www-form-urlencoded":
        raise FormRefused(415, "send the form as application/x-www-form-urlencoded")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            raise FormRefused(413, "form too large")
    form: Form = {}
    for key, value in parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True):
        form.setdefault(key, value)
    return form


Handler = Callable[[Request, Form], Awaitable[Response]]


def action(
    policy: Policy, handler: Handler, *, session: bool = False
) -> Callable[[Request], Awaitable[Response]]:
    """A POST endpoint that runs ``handler`` only with a valid CSRF field (and never on a
    read-only dashboard, unless it only signs in or out: ``session``); otherwise 403 and
    nothing changes."""

    async def endpoint(request: Request) -> Response:
        if policy.read_only and not session:
            return PlainTextResponse("the dashboard is read-only", status_code=403)
        try:
            form = await read_form(request)
        except FormRefused as exc:
            return PlainTextResponse(str(exc), status_code=exc.status)
        if not hmac.compare_digest(form.get(CSRF_FIELD, "").encode(), csrf_token(request).encode()):
            return PlainTextResponse(
                "the form's CSRF token is missing or stale: reload the page and try again",
                status_code=403,
            )
        return await handler(request, form)

    endpoint.__name__ = getattr(handler, "__name__", "action")
    return endpoint


def safe_next(request: Request, target: str | None) -> str:
    """Where to go after a POST: a path inside the dashboard, never another site."""
    base = base_path(request.scope)
    home = f"{base}/"
    if not target or "\\" in target or target.startswith("//"):
        return home
    parts = urlsplit(target)
    if parts.scheme or parts.netloc or not target.startswith(home):
        return home
    return target


async def slow_down() -> None:
    """A failed sign-in waits a little, so guessing costs time."""
    await asyncio.sleep(FAILED_LOGIN_DELAY_S)


# ---- one-time messages after an action --------------------------------------------------
def set_flash(policy: Policy, scope: Scope, response: Response, kind: str, text: str) -> None:
    payload = base64.urlsafe_b64encode(f"{kind}\x00{text[:500]}".encode()).decode()
    signed = f"{payload}.{policy.sign('flash', payload)[:32]}"
    response.headers.append("set-cookie", cookie(scope, FLASH_COOKIE, signed, max_age=60))


def take_flash(policy: Policy, request: Request) -> tuple[str, str] | None:
    """The (kind, text) an action left for this page, if it is ours."""
    raw = request.cookies.get(FLASH_COOKIE)
    if not raw or "." not in raw:
        return None
    payload, mac = raw.rsplit(".", 1)
    if not hmac.compare_digest(mac, policy.sign("flash", payload)[:32]):
        return None
    try:
        kind, _, text = base64.urlsafe_b64decode(payload).decode().partition("\x00")
    except (ValueError, UnicodeDecodeError):
        return None
    return (kind if kind in ("ok", "error") else "ok"), text


def clear_flash(scope: Scope, response: Response) -> None:
    response.headers.append("set-cookie", cookie(scope, FLASH_COOKIE, "", max_age=0))


def sign_in(policy: Policy, scope: Scope, response: Response) -> None:
    response.headers.append("set-cookie", cookie(scope, AUTH_COOKIE, policy.session_value()))


def sign_out(scope: Scope, response: Response) -> None:
    response.headers.append("set-cookie", cookie(scope, AUTH_COOKIE, "", max_age=0))


__all__ = ["Any", "Form", "Guard", "Policy", "action", "csrf_token", "is_loopback"]
