"""examples/fastapi_app as its README runs it, on SQLite and PostgreSQL: a real
``sluicegate worker tasks:jobs`` and a real ``uvicorn main:api`` on 127.0.0.1, both
started in the example's folder, driven over HTTP. Enqueue and wait, the status with its
progress, a failing job's 500, a running job cancelled (409 for its result after), the
202 and 504 answers of a wait that runs out, the mounted dashboard behind its token, and
a clean shutdown of the lifespan (``await jobs.aclose()``)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest

from support.brokers import over_brokers
from support.fleet import wait_for

pytestmark = over_brokers

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "fastapi_app"
TOKEN = "example-dashboard-token-0123456789"
SLOW = 60.0


@dataclass
class Process:
    """One process of the example, its output in a log file."""

    proc: subprocess.Popen[bytes]
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self, sig: int = signal.SIGTERM) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(30)
            raise AssertionError(f"still running 30 s after {sig!r}; log:\n{self.log()}") from None


def start(command: list[str], log_path: Path, db_url: str) -> Process:
    """``command`` in the example's folder, as its README says, on the test's broker."""
    env = dict(os.environ, SLUICEGATE_BROKER=db_url, SLUICEGATE_DASHBOARD_TOKEN=TOKEN)
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # leave no __pycache__ in the example's folder
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=EXAMPLE)
    return Process(proc, log_path)


@dataclass
class Served:
    client: httpx.Client
    web: Process
    worker: Process


@pytest.fixture
def served(db_url: str, tmp_path: Path) -> Iterator[Served]:
    """The worker (lease 1 s, so progress is stored every third of a second) and the web
    app on a free port; at the end both get SIGTERM and must exit cleanly."""
    bin_dir = Path(sys.executable).parent
    worker = start(
        [str(bin_dir / "sluicegate"), "worker", "tasks:jobs", "--lease", "1"],
        tmp_path / "worker.log",
        db_url,
    )
    web = start(
        [sys.executable, "-m", "uvicorn", "main:api", "--host", "127.0.0.1", "--port", "0"],
        tmp_path / "web.log",
        db_url,
    )
    try:
        address = wait_for(
            lambda: (
                re.search(r"Uvicorn running on (http://127\.0\.0\.1:\d+)", web.log())
                or web.proc.poll() is not None
            ),
            timeout=SLOW,
            what="uvicorn to listen",
        )
        assert isinstance(address, re.Match), web.log()
        wait_for(lambda: " started: " in worker.log() or worker.proc.poll() is not None, SLOW)
        assert worker.proc.poll() is None, worker.log()
        with httpx.Client(base_url=address.group(1), timeout=SLOW) as client:
            yield Served(client, web, worker)
    finally:
        web_code = web.stop(signal.SIGTERM)
        worker_code = worker.stop(signal.SIGTERM)
    # uvicorn re-raises the signal once it has shut down gracefully (recent versions)
    assert web_code in (0, -signal.SIGTERM), web.log()
    assert "Application shutdown complete" in web.log(), web.log()
    assert "Traceback" not in web.log(), web.log()
    assert worker_code == 0, worker.log()


def report(client: httpx.Client, **body: Any) -> dict[str, Any]:
    answer = client.post("/reports", json=body)
    assert answer.status_code == 202, answer.text
    assert answer.headers["location"] == f"/jobs/{answer.json()['job_id']}"
    job: dict[str, Any] = answer.json()
    return job


def status(client: httpx.Client, job_id: int) -> dict[str, Any]:
    answer = client.get(f"/jobs/{job_id}")
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


def test_enqueue_wait_for_the_result_and_read_the_status(served: Served) -> None:
    c = served.client
    job = report(c, user_id=7, rows=2)
    assert job["state"] in ("ready", "claimed", "running", "succeeded")

    answer = c.get(f"/jobs/{job['job_id']}/result", params={"wait": 30})
    assert answer.status_code == 200, answer.text
    rows = ["row 1 of user 7", "row 2 of user 7"]
    assert answer.json() == {"job_id": job["job_id"], "result": {"user_id": 7, "rows": rows}}
    done = status(c, job["job_id"])
    assert (done["state"], done["attempts"]) == ("succeeded", 1)
    assert done["result"] == {"user_id": 7, "rows": rows}
    assert "error" not in done

    now = c.post("/reports/now", params={"wait": 30}, json={"user_id": 3, "rows": 1})
    assert now.status_code == 200, now.text
    assert now.json()["result"] == {"user_id": 3, "rows": ["row 1 of user 3"]}
    assert status(c, now.json()["job_id"])["state"] == "succeeded"


def test_a_failing_job_answers_500_with_its_error(served: Served) -> None:
    c = served.client
    now = c.post("/reports/now", params={"wait": 30}, json={"user_id": 0})
    assert now.status_code == 500, now.text
    body = now.json()
    error = {"type": "LookupError", "message": "user 0 has no data"}
    assert body == {"job_id": body["job_id"], "state": "dead", "error": error}

    job = report(c, user_id=-4)
    later = c.get(f"/jobs/{job['job_id']}/result", params={"wait": 30})
    assert later.status_code == 500, later.text
    assert later.json()["error"] == {"type": "LookupError", "message": "user -4 has no data"}
    dead = status(c, job["job_id"])
    assert (dead["state"], dead["attempts"]) == ("dead", 1)  # not retried: no ConnectionError
    assert dead["error"]["type"] == "LookupError" and "traceback" not in dead["error"]


def test_a_running_job_is_followed_then_cancelled(served: Served) -> None:
    c = served.client
    job = report(c, user_id=8, rows=3000, row_seconds=0.02)  # a minute, unless cancelled
    job_id = job["job_id"]

    running = wait_for(
        lambda: (s := status(c, job_id))["state"] == "running" and s["progress"] and s,
        timeout=SLOW,
        what="the job to run and report progress",
    )
    assert 0 < running["progress"]["fraction"] < 1
    assert re.fullmatch(r"row \d+ of 3000", running["progress"]["message"])

    pending = c.get(f"/jobs/{job_id}/result", params={"wait": 0.2})
    assert pending.status_code == 202, pending.text
    assert pending.headers["retry-after"] == "1"
    assert pending.json() == {"job_id": job_id, "state": "pending", "status_url": f"/jobs/{job_id}"}

    late = c.post("/reports/now", params={"wait": 0.2}, json={"user_id": 9, "rows": 3000})
    assert late.status_code == 504, late.text
    other = late.json()["job_id"]
    assert late.headers["location"] == f"/jobs/{other}"

    cancelled = c.post(f"/jobs/{job_id}/cancel")
    assert cancelled.status_code == 200, cancelled.text
    assert cancelled.json()["state"] == "cancelled"
    after = c.get(f"/jobs/{job_id}/result", params={"wait": 5})
    assert (after.status_code, after.json()) == (409, {"job_id": job_id, "state": "cancelled"})
    again = c.post(f"/jobs/{job_id}/cancel")
    assert again.status_code == 409 and "cancelled" in again.json()["detail"], again.text
    assert status(c, job_id)["state"] == "cancelled"
    wait_for(lambda: f"job {job_id} (build_report): stopping" in served.worker.log(), SLOW)

    assert c.post(f"/jobs/{other}/cancel").json()["state"] == "cancelled"
    quick = c.post("/reports/now", params={"wait": 30}, json={"user_id": 5, "rows": 1})
    assert quick.status_code == 200, quick.text  # the cancelled jobs gave their slots back

    for path in ("/jobs/999999", "/jobs/999999/result", "/jobs/99999999999999999999999"):
        missing = c.get(path, params={"wait": 0})
        assert missing.status_code == 404 and "not found" in missing.json()["detail"], path
    assert c.post("/jobs/999999/cancel").status_code == 404
    assert c.get("/jobs/abc").status_code == 422  # FastAPI's own check of the path


def test_the_dashboard_is_mounted_behind_its_token(served: Served) -> None:
    c = served.client
    job = report(c, user_id=2, rows=1)
    assert c.get(f"/jobs/{job['job_id']}/result", params={"wait": 30}).status_code == 200

    anonymous = c.get("/admin/jobs/", follow_redirects=False)
    assert anonymous.status_code == 303
    assert anonymous.headers["location"] == "/admin/jobs/login?next=/admin/jobs/"
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    page = c.get(f"/admin/jobs/jobs/{job['job_id']}", headers=bearer)
    assert page.status_code == 200, page.text
    assert "build_report" in page.text and "succeeded" in page.text
    assert 'href="/admin/jobs/' in page.text  # its links follow the mount's prefix
    as_json = c.get(f"/admin/jobs/jobs/{job['job_id']}/json", headers=bearer)
    assert as_json.json()["result"] == {"user_id": 2, "rows": ["row 1 of user 2"]}
    wrong = c.get("/admin/jobs/jobs", headers={"Authorization": "Bearer not-the-token"})
    assert wrong.status_code == 303
