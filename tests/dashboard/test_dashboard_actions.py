"""Retry, cancel and limit changes through the dashboard's forms, on a real broker: each
works with the page's CSRF field, is refused (403) without it and changes nothing, and a
read-only dashboard hides every form and refuses every POST."""

from __future__ import annotations

import re

import pytest
from dash_kit import client, csrf_of, post, seed, state_of

from sluicegate import App
from sluicegate.job import ErrorInfo
from support.brokers import over_brokers

pytestmark = over_brokers

ACTIONS = ["/jobs/{dead}/retry", "/jobs/{ready}/cancel", "/jobs/retry", "/jobs/cancel",
           "/limits/storage", "/limits/storage/reset"]  # fmt: skip


def bury(app: App, task: str, queue: str, n: int) -> list[int]:
    """``n`` dead jobs of ``task``, failed as a worker fails them."""
    ids = []
    for i in range(n):
        job = app.enqueue(task, args=[i], queue=queue, max_attempts=1)
        (got,) = app.broker.claim([queue], 1, 30.0, "w-x", "host-a")
        assert got.job.id == job.id
        app.broker.fail(got.claim, ErrorInfo("Boom", f"failure {i}"), None)
        ids.append(job.id)
    return ids


def test_retry_and_cancel_one_job(dash_app: App) -> None:
    jobs = seed(dash_app)
    c = client(dash_app)
    done = post(c, f"/jobs/{jobs.dead.id}/retry", {"next": f"/jobs/{jobs.dead.id}"})
    assert done.status_code == 303 and done.headers["location"] == f"/jobs/{jobs.dead.id}"
    assert state_of(dash_app, jobs.dead.id) == "ready"
    shown = c.get(done.headers["location"]).text
    assert 'data-testid="flash" data-kind="ok"' in shown and "is ready again" in shown
    assert 'data-testid="flash"' not in c.get("/").text  # shown once

    assert post(c, f"/jobs/{jobs.ready[0].id}/cancel").status_code == 303
    assert state_of(dash_app, jobs.ready[0].id) == "cancelled"
    assert post(c, f"/jobs/{jobs.running.id}/cancel").status_code == 303
    assert state_of(dash_app, jobs.running.id) == "cancelled"

    again = post(c, f"/jobs/{jobs.succeeded.id}/retry", {"next": "/jobs"})
    assert again.status_code == 303
    refused = c.get("/jobs").text
    assert 'data-kind="error"' in refused and "it is succeeded" in refused
    assert state_of(dash_app, jobs.succeeded.id) == "succeeded"


def test_posts_without_a_valid_csrf_field_change_nothing(dash_app: App) -> None:
    jobs = seed(dash_app)
    c = client(dash_app)
    paths = [p.format(dead=jobs.dead.id, ready=jobs.ready[0].id) for p in ACTIONS]
    good = csrf_of(c)
    wrong = good[:-1] + ("1" if good.endswith("0") else "0")  # one digit off, never equal
    stranger = client(dash_app)  # another browser: its own cookie, no page of ours
    for path in paths:
        form = {"state": "ready", "concurrency": "5"}
        assert c.post(path, data=form).status_code == 403, path
        assert c.post(path, data={**form, "csrf": "0" * 64}).status_code == 403, path
        assert c.post(path, data={**form, "csrf": wrong}).status_code == 403, path
        assert stranger.post(path, data={**form, "csrf": good}).status_code == 403, path
    assert state_of(dash_app, jobs.dead.id) == "dead"
    assert state_of(dash_app, jobs.ready[0].id) == "ready"
    assert dash_app.broker.limit_figures().limits["storage"].concurrency == 1
    assert c.get("/jobs/1/retry").status_code == 405  # state changes are POSTs only


def test_bulk_retry_for_a_filter(dash_app: App) -> None:
    mail = bury(dash_app, "send", "email", 3)
    reports = bury(dash_app, "report", "reports", 2)
    c = client(dash_app)
    page = c.get("/dead?queue=reports").text
    assert 'data-testid="bulk-retry"' in page and "Retry 2 dead jobs of queue reports" in page
    done = post(c, "/jobs/retry", {"queue": "reports", "next": "/dead?queue=reports"})
    assert done.status_code == 303
    assert [state_of(dash_app, i) for i in reports] == ["ready", "ready"]
    assert [state_of(dash_app, i) for i in mail] == ["dead"] * 3
    assert "retried 2 dead jobs of queue reports" in c.get(done.headers["location"]).text
    assert post(c, "/jobs/retry", {"task": "send"}).status_code == 303
    assert [state_of(dash_app, i) for i in mail] == ["ready"] * 3


def test_bulk_cancel_for_a_filter(dash_app: App) -> None:
    keep = [dash_app.enqueue("a", args=[i], queue="q1").id for i in range(2)]
    gone = [dash_app.enqueue("b", args=[i], queue="q2").id for i in range(3)]
    c = client(dash_app)
    page = c.get("/jobs?state=ready&queue=q2").text
    assert 'data-testid="bulk-cancel"' in page and "Cancel 3 ready jobs of queue q2" in page
    assert 'data-testid="bulk-cancel"' not in c.get("/jobs").text  # no state chosen
    assert post(c, "/jobs/cancel", {"state": "ready", "queue": "q2"}).status_code == 303
    assert [state_of(dash_app, i) for i in gone] == ["cancelled"] * 3
    assert [state_of(dash_app, i) for i in keep] == ["ready"] * 2
    post(c, "/jobs/cancel", {"state": "succeeded", "next": "/jobs"})
    assert "cannot cancel succeeded jobs" in c.get("/jobs").text


def test_limit_form_changes_and_resets_a_limit(dash_app: App) -> None:
    seed(dash_app)
    c = client(dash_app)
    page = c.get("/limits").text
    assert 'data-testid="limit-form" data-limit="storage"' in page
    done = post(c, "/limits/storage", {"concurrency": "3", "rate": "", "burst": "",
                                       "next": "/limits"}, page="/limits")  # fmt: skip
    assert done.status_code == 303
    figures = dash_app.broker.limit_figures()
    assert figures.limits["storage"].concurrency == 3 and "storage" in figures.overridden
    after = c.get("/limits").text
    assert "limit storage: 3 at once" in after and 'data-testid="limit-reset"' in after

    post(c, "/limits/storage", {"concurrency": "0", "next": "/limits"}, page="/limits")
    assert 'data-kind="error"' in c.get("/limits").text
    post(c, "/limits/storage", {"rate": "fast", "next": "/limits"}, page="/limits")
    assert "rate must be" in c.get("/limits").text
    post(c, "/limits/nosuch", {"concurrency": "2", "next": "/limits"}, page="/limits")
    assert "no limit named" in c.get("/limits").text
    assert dash_app.broker.limit_figures().limits["storage"].concurrency == 3

    post(c, "/limits/storage", {"rate": "10/s", "burst": "5"}, page="/limits")
    assert dash_app.broker.limit_figures().limits["storage"].rate == 10.0
    assert post(c, "/limits/storage/reset", page="/limits").status_code == 303
    figures = dash_app.broker.limit_figures()
    assert figures.limits["storage"].concurrency == 1 and figures.limits["storage"].rate is None
    assert "storage" not in figures.overridden


def test_read_only_hides_and_refuses_every_action(dash_app: App) -> None:
    jobs = seed(dash_app)
    c = client(dash_app, read_only=True)
    hidden = ("job-retry", "job-cancel", "bulk-retry", "bulk-cancel", "limit-form",
              "limit-reset", "limit-submit")  # fmt: skip
    pages = ["/", "/jobs", "/dead", "/jobs?state=ready", "/limits", "/workers",
             f"/jobs/{jobs.dead.id}", f"/jobs/{jobs.ready[0].id}", "/queues/email"]  # fmt: skip
    for path in pages:
        html = c.get(path).text
        assert 'data-testid="read-only-badge"' in html
        for testid in hidden:
            assert f'data-testid="{testid}"' not in html, (path, testid)
        assert not re.search(r'<form method="post"', html), path
    token = csrf_of(c)
    for template in ACTIONS:
        path = template.format(dead=jobs.dead.id, ready=jobs.ready[0].id)
        refused = c.post(path, data={"csrf": token, "state": "ready", "concurrency": "4"})
        assert refused.status_code == 403, path
    assert state_of(dash_app, jobs.dead.id) == "dead"
    assert state_of(dash_app, jobs.ready[0].id) == "ready"
    assert dash_app.broker.limit_figures().limits["storage"].concurrency == 1


@pytest.mark.parametrize("kind", ["multipart/form-data; boundary=x", "application/json"])
def test_only_urlencoded_forms_are_read(dash_app: App, kind: str) -> None:
    jobs = seed(dash_app)
    c = client(dash_app)
    token = csrf_of(c)
    sent = c.post(f"/jobs/{jobs.dead.id}/retry", content=f"csrf={token}",
                  headers={"content-type": kind})  # fmt: skip
    assert sent.status_code == 415
    assert state_of(dash_app, jobs.dead.id) == "dead"


def test_a_post_without_a_body_is_refused_for_its_missing_csrf_field(dash_app: App) -> None:
    jobs = seed(dash_app)
    c = client(dash_app)
    csrf_of(c)  # the browser has its CSRF cookie; the request just has no form
    assert c.post(f"/jobs/{jobs.dead.id}/retry").status_code == 403
    assert state_of(dash_app, jobs.dead.id) == "dead"


def test_a_form_too_large_is_refused(dash_app: App) -> None:
    jobs = seed(dash_app)
    c = client(dash_app)
    big = {"csrf": csrf_of(c), "pad": "x" * 100_000}
    assert c.post(f"/jobs/{jobs.dead.id}/retry", data=big).status_code == 413
    assert state_of(dash_app, jobs.dead.id) == "dead"


def test_counts_are_read_again_after_an_action(dash_app: App) -> None:
    dead = bury(dash_app, "send", "email", 2)
    c = client(dash_app)
    tab = r'data-state="dead"[^>]*>dead <span class="count">{}</span>'
    assert re.search(tab.format(2), c.get("/jobs").text)
    post(c, f"/jobs/{dead[0]}/retry")
    assert re.search(tab.format(1), c.get("/jobs").text)  # not the second-old read
