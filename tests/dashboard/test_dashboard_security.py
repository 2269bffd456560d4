"""The dashboard is safe by default: job data is escaped wherever it shows (hostile
markup, attribute breakers, 100 KB strings, odd Unicode), every response carries the
security headers, no page has an inline script or style, a token guards the pages when
given, other Host headers are refused when asked, redirects stay inside the dashboard,
and mounted under a prefix every link, form and asset stays under it."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from typing import Any
from urllib.parse import urlsplit

import pytest
from dash_kit import client, csrf_of, job_ids, publish_worker, seed, state_of
from starlette.applications import Starlette
from starlette.routing import Mount
from starlette.testclient import TestClient

from sluicegate import App
from sluicegate.dashboard import asgi_app
from sluicegate.dashboard.render import Page
from sluicegate.dashboard.security import CSP
from sluicegate.job import ErrorInfo
from support.brokers import over_brokers

SCRIPT = "<script>alert(1)</script>"
BREAKER = '"><img src=x onerror=alert(1)>'
SINGLE = "' onmouseover='alert(1)"
ODD = [
    "\\ud800 \\udcff (the escapes, as text)",
    "Ã© mojibake \ufffd replacement",
    "\u202eright-to-left override\u202c and \u200bzero\u200dwidth",
    "e\u0301 combining, \U0001f600 emoji, \u0000 NUL, \x1b[31m escape",
    "</textarea></pre></title><!--",
]
TOKEN = "a-long-dashboard-token-0123456789"
PAGES = ["/", "/jobs", "/dead", "/workers", "/limits", "/queues/email"]


def hostile(app: App) -> dict[str, int]:
    """Jobs whose every field a user can set holds something hostile."""
    broker = app.broker
    ids = {}
    values: list[Any] = [SCRIPT, BREAKER, SINGLE, *ODD, "x" * 100_000]
    ids["args"] = app.enqueue("evil", args=values, kwargs={SCRIPT: BREAKER}, queue="email").id
    ids["key"] = app.enqueue("evil", args=[1], queue="email", unique_key=BREAKER + SCRIPT).id
    # A dead one: error type, message and traceback are the task's own text.
    job = app.enqueue("evil", args=[2], queue="burn", max_attempts=1)
    (got,) = broker.claim(["burn"], 1, 30.0, "w-1", "host-a")
    assert got.job.id == job.id
    error = ErrorInfo(SCRIPT, BREAKER + "y" * 100_000, "Traceback\n" + SCRIPT + "\n" + ODD[2])
    broker.fail(got.claim, error, None)
    ids["dead"] = job.id
    # A succeeded one whose result is hostile.
    job = app.enqueue("evil", args=[3], queue="done")
    (got,) = broker.claim(["done"], 1, 30.0, "w-1", "host-a")
    broker.ack(got.claim, json.dumps({"html": SCRIPT, "attr": BREAKER, "odd": ODD}))
    ids["ok"] = job.id
    publish_worker(app, worker="w-<b>1</b>", host=BREAKER)
    return ids


class Markup(HTMLParser):
    """What a page's HTML really contains, as a browser would parse it."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.script_text: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        self._in_script = tag == "script"

    def handle_endtag(self, tag: str) -> None:
        self._in_script = False

    def handle_data(self, data: str) -> None:
        if self._in_script and data.strip():
            self.script_text.append(data)


def parsed(html: str) -> Markup:
    m = Markup()
    m.feed(html)
    return m


def assert_inert(html: str) -> None:
    """No element or attribute the payloads tried to create, and no inline code."""
    page = parsed(html)
    tags = [t for t, _ in page.tags]
    assert "img" not in tags and "b" not in tags
    assert tags.count("script") == 1  # dashboard.js only
    assert not page.script_text
    for tag, attrs in page.tags:
        assert not any(a.startswith("on") for a in attrs), (tag, attrs)
        assert "style" not in attrs, (tag, attrs)
        if tag == "script":
            assert (attrs["src"] or "").startswith("/static/dashboard.js")
    assert SCRIPT not in html and BREAKER not in html
    assert "<style" not in html


@over_brokers
def test_hostile_job_data_is_escaped_everywhere(db_url: str) -> None:
    app = App(broker=db_url, config=False)
    ids = hostile(app)
    c = client(app)
    paths = [*PAGES, "/jobs?state=dead", "/jobs?state=succeeded", "/jobs?q=" + BREAKER]
    paths += [f"/jobs/{i}" for i in ids.values()]
    for path in paths:
        page = c.get(path)
        assert page.status_code == 200, (path, page.text[:300])
        assert_inert(page.text)
        assert len(page.text) < 200_000, path  # 100 KB values are cut on pages
    detail = c.get(f"/jobs/{ids['args']}").text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in detail
    assert "&#34;&gt;&lt;img src=x onerror=alert(1)&gt;" in detail.replace("\\&#34;", "&#34;")
    assert "\u202eright-to-left" in detail  # shown, isolated by CSS (unicode-bidi)
    assert "more characters" in detail
    dead = c.get(f"/jobs/{ids['dead']}").text
    assert 'data-testid="job-error-type">&lt;script&gt;alert(1)&lt;/script&gt;<' in dead
    assert job_ids(c.get("/jobs?q=" + BREAKER + SCRIPT).text) == [ids["key"]]
    raw = c.get(f"/jobs/{ids['args']}/json")
    assert raw.headers["content-type"].startswith("application/json")
    assert raw.headers["x-content-type-options"] == "nosniff"
    assert raw.json()["args"][0] == SCRIPT and len(raw.json()["args"][-1]) == 100_000
    app.close()


def test_a_lone_surrogate_is_written_as_its_escape() -> None:
    assert Page("a\ud800b").body == b"a\\ud800b"


def test_security_headers_on_every_response(dash_app: App) -> None:
    seed(dash_app)
    c = client(dash_app)
    responses = [c.get(p) for p in PAGES]
    responses += [c.get("/static/dashboard.css"), c.get("/jobs/999999"), c.get("/nope")]
    responses += [c.post("/jobs/1/retry", data={}), c.get("/jobs/1/json")]
    for r in responses:
        assert r.headers["content-security-policy"] == CSP
        assert "script-src 'self'" in CSP and "unsafe-inline" not in CSP
        assert r.headers["x-content-type-options"] == "nosniff"
        assert r.headers["referrer-policy"] == "no-referrer"
        assert r.headers["x-frame-options"] == "DENY"
    assert responses[0].headers["cache-control"] == "no-store"
    cookie = responses[0].headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/" in cookie
    js = c.get("/static/dashboard.js")
    assert js.status_code == 200 and "javascript" in js.headers["content-type"]


def test_pages_carry_no_inline_script_or_style(dash_app: App) -> None:
    jobs = seed(dash_app)
    c = client(dash_app)
    for path in [*PAGES, f"/jobs/{jobs.dead.id}", f"/jobs/{jobs.running.id}"]:
        html = c.get(path).text
        assert_inert(html)
        for tag, attrs in parsed(html).tags:
            for name in ("src", "href"):
                value = attrs.get(name) or ""
                assert not urlsplit(value).netloc, (path, tag, value)  # nothing from elsewhere


def test_a_token_guards_every_page(dash_app: App) -> None:
    jobs = seed(dash_app)
    c = client(dash_app, token=TOKEN)
    first = c.get("/jobs?state=dead")
    assert first.status_code == 303
    assert first.headers["location"] == "/login?next=/jobs%3Fstate%3Ddead"
    assert c.get("/", headers={"X-Sluicegate-Live": "1"}).status_code == 401
    assert c.get("/jobs/1/json").status_code == 303
    assert c.post(f"/jobs/{jobs.dead.id}/retry", data={}).status_code == 401
    assert c.get("/static/dashboard.css").status_code == 200
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    assert c.get("/", headers=bearer).status_code == 200
    assert c.get("/", headers={"Authorization": "Bearer wrong"}).status_code == 303

    token = csrf_of(c, "/login")
    wrong = c.post("/login", data={"csrf": token, "token": "nope", "next": "/dead"})
    assert wrong.status_code == 401 and 'data-testid="login-failed"' in wrong.text
    assert c.post("/login", data={"token": TOKEN}).status_code == 403  # no CSRF field
    signed = c.post("/login", data={"csrf": token, "token": TOKEN, "next": "/dead"})
    assert signed.status_code == 303 and signed.headers["location"] == "/dead"
    cookie = signed.headers["set-cookie"]
    assert "sluicegate_auth=" in cookie and TOKEN not in cookie
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
    assert c.get("/dead").status_code == 200
    retried = c.post(f"/jobs/{jobs.dead.id}/retry", data={"csrf": csrf_of(c, "/dead")})
    assert retried.status_code == 303 and state_of(dash_app, jobs.dead.id) == "ready"
    out = c.post("/logout", data={"csrf": csrf_of(c, "/")})
    assert out.status_code == 303 and "Max-Age=0" in out.headers["set-cookie"]
    assert c.get("/").status_code == 303


def test_read_only_with_a_token_still_signs_in(dash_app: App) -> None:
    c = client(dash_app, token=TOKEN, read_only=True)
    page = c.get("/login")
    assert page.status_code == 200 and 'data-testid="login-form"' in page.text
    assert_inert(page.text)
    done = c.post("/login", data={"csrf": csrf_of(c, "/login"), "token": TOKEN, "next": "/"})
    assert done.status_code == 303
    assert c.get("/").status_code == 200


def test_other_host_headers_are_refused_when_asked(dash_app: App) -> None:
    c = client(dash_app, allowed_hosts=["127.0.0.1", "localhost", "::1"])
    assert c.get("/", headers={"host": "127.0.0.1:8420"}).status_code == 200
    assert c.get("/", headers={"host": "[::1]:8420"}).status_code == 200
    assert c.get("/", headers={"host": "localhost"}).status_code == 200
    assert c.get("/", headers={"host": "attacker.example:8420"}).status_code == 400
    assert c.get("/", headers={"host": "127.0.0.1.attacker.example"}).status_code == 400


@pytest.mark.parametrize(
    "target", ["https://evil.example/", "//evil.example/x", "/\\evil.example", "javascript:x"]
)
def test_redirects_after_an_action_stay_inside(dash_app: App, target: str) -> None:
    jobs = seed(dash_app)
    c = client(dash_app)
    done = c.post(f"/jobs/{jobs.dead.id}/retry", data={"csrf": csrf_of(c), "next": target})
    assert done.status_code == 303 and done.headers["location"] == "/"


def test_mounted_under_a_prefix(dash_app: App) -> None:
    jobs = seed(dash_app)
    host = Starlette(routes=[Mount("/ops/jobs", asgi_app(dash_app))])
    c = TestClient(host, follow_redirects=False)
    home = c.get("/ops/jobs/")
    assert home.status_code == 200
    assert "Path=/ops/jobs/" in home.headers["set-cookie"]
    links: set[str] = set()
    for path in ["/ops/jobs/", "/ops/jobs/jobs", f"/ops/jobs/jobs/{jobs.dead.id}",
                 "/ops/jobs/dead", "/ops/jobs/limits", "/ops/jobs/queues/email"]:  # fmt: skip
        for tag, attrs in parsed(c.get(path).text).tags:
            for name in ("href", "src", "action"):
                value = attrs.get(name)
                if value and not value.startswith("#"):
                    assert value.startswith("/ops/jobs/"), (path, tag, value)
                    links.add(value.split("#")[0])
    for link in sorted(links):
        if "/retry" in link or "/cancel" in link or "/limits/" in link or "logout" in link:
            continue  # the forms' actions: POST only
        if link.endswith("/login"):
            continue
        assert c.get(link).status_code in (200, 303), link
    token = re.search(r'name="csrf" value="([0-9a-f]+)"', c.get("/ops/jobs/dead").text)
    assert 'name="sluicegate-csrf"' in c.get("/ops/jobs/").text
    assert token
    done = c.post(f"/ops/jobs/jobs/{jobs.dead.id}/retry",
                  data={"csrf": token.group(1), "next": f"/ops/jobs/jobs/{jobs.dead.id}"})  # fmt: skip
    assert done.status_code == 303
    assert done.headers["location"] == f"/ops/jobs/jobs/{jobs.dead.id}"
    assert state_of(dash_app, jobs.dead.id) == "ready"
    found = c.get(f"/ops/jobs/jobs?q={jobs.unique.id}")
    assert found.headers["location"] == f"/ops/jobs/jobs/{jobs.unique.id}"
    guarded = TestClient(
        Starlette(routes=[Mount("/ops", asgi_app(dash_app, token=TOKEN))]), follow_redirects=False
    )
    assert guarded.get("/ops/workers").headers["location"] == "/ops/login?next=/ops/workers"
