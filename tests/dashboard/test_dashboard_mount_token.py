"""``asgi_app``'s token, for a dashboard mounted in someone's own app: an empty token (an
environment variable set to nothing) or a short one is refused when the app is built,
never taken as "no sign-in" or guarded weakly; a good one guards every page."""

from __future__ import annotations

from pathlib import Path

import pytest
from starlette.applications import Starlette
from starlette.routing import Mount
from starlette.testclient import TestClient

from sluicegate import App
from sluicegate.dashboard import asgi_app

GOOD = "a-mounted-dashboard-token-0123456789"


@pytest.mark.parametrize("token", ["", "   ", "short", " " * 20, "x" * 15])
def test_an_empty_or_short_token_is_refused(tmp_path: Path, token: str) -> None:
    with pytest.raises(ValueError, match="at least 16 characters"):
        asgi_app(f"sqlite:///{tmp_path / 'jobs.db'}", token=token)


def test_a_token_that_is_not_text_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="must be a string or None, not b'"):
        asgi_app(f"sqlite:///{tmp_path / 'jobs.db'}", token=b"0123456789abcdef0123")  # type: ignore[arg-type]


def test_a_good_token_guards_the_mounted_pages(tmp_path: Path) -> None:
    jobs = App(broker=f"sqlite:///{tmp_path / 'jobs.db'}", config=False)
    try:
        dashboard = asgi_app(jobs, token=GOOD)
        client = TestClient(Starlette(routes=[Mount("/ops", dashboard)]), follow_redirects=False)
        assert client.get("/ops/").status_code == 303
        assert client.post("/ops/jobs/cancel").status_code == 401
        signed = client.get("/ops/", headers={"Authorization": f"Bearer {GOOD}"})
        assert signed.status_code == 200, signed.text
    finally:
        jobs.close()
