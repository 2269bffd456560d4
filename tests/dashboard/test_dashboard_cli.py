"""`sluicegate dashboard` as users run it: it refuses to bind anywhere but loopback without
a token, refuses a weak token, says how to install the extra when it is missing (those in
process, support.cli.run_cli), and serves pages (token or not) until stopped: those in its
own long-running process, stopped with SIGTERM."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from support.cli import Result, cli_argv, cli_env, run_cli

TOKEN = "cli-test-token-0123456789abcdef"


def env_without_token() -> dict[str, str]:
    """This process's environment without SLUICEGATE_DASHBOARD_TOKEN or SLUICEGATE_BROKER."""
    return cli_env()


def run(*args: str, cwd: Path, env: dict[str, str | None] | None = None) -> Result:
    return run_cli("dashboard", *args, cwd=cwd, env=env)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.0.2.10", "example.com"])
def test_refuses_other_addresses_without_a_token(tmp_path: Path, host: str) -> None:
    done = run("--host", host, "--port", "1", cwd=tmp_path)
    assert done.returncode == 2
    assert "without a token" in done.stderr and "SLUICEGATE_DASHBOARD_TOKEN" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "sluicegate.db").exists()  # refused before opening anything


def test_refuses_a_weak_token(tmp_path: Path) -> None:
    done = run("--host", "0.0.0.0", cwd=tmp_path, env={"SLUICEGATE_DASHBOARD_TOKEN": "hunter2"})
    assert done.returncode == 2 and "at least 16 characters" in done.stderr


def test_says_how_to_install_the_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "uvicorn", None)  # `import uvicorn` fails: not installed
    done = run("--broker", "memory://", cwd=tmp_path)
    assert done.returncode == 2
    assert "pip install 'sluicegate[dashboard]'" in done.stderr
    assert "Traceback" not in done.stderr


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def serving(tmp_path: Path, *args: str, env: dict[str, str]) -> Iterator[str]:
    port = free_port()
    proc = subprocess.Popen(
        cli_argv("dashboard", "--port", str(port),
                 "--broker", f"sqlite:///{tmp_path / 'jobs.db'}", *args),
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    _, err = proc.communicate(timeout=5)
                    raise AssertionError(f"the dashboard did not start: {err}") from None
                time.sleep(0.1)
        yield base
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.close()
        proc.stderr.close()


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


def lower(headers: object) -> dict[str, str]:
    return {k.lower(): v for k, v in dict(headers).items()}  # type: ignore[call-overload]


def fetch(url: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], str]:
    opener = urllib.request.build_opener(NoRedirect)
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with opener.open(request, timeout=10) as response:
            return response.status, lower(response.headers), response.read().decode()
    except urllib.error.HTTPError as exc:
        body = exc.read().decode()
        exc.close()
        return exc.code, lower(exc.headers), body


def test_serves_on_loopback_and_refuses_other_host_names(tmp_path: Path) -> None:
    with serving(tmp_path, env=env_without_token()) as base:
        status, headers, body = fetch(base + "/")
        assert status == 200 and 'data-testid="page-overview"' in body
        assert headers["content-security-policy"].startswith("default-src 'self'")
        assert fetch(base + "/", {"Host": "rebound.example"})[0] == 400


def test_serves_with_a_token(tmp_path: Path) -> None:
    env = {**env_without_token(), "SLUICEGATE_DASHBOARD_TOKEN": TOKEN}
    with serving(tmp_path, "--read-only", env=env) as base:
        status, headers, _ = fetch(base + "/workers")
        assert status == 303 and headers["location"] == "/login?next=/workers"
        status, _, body = fetch(base + "/workers", {"Authorization": f"Bearer {TOKEN}"})
        assert status == 200 and 'data-testid="read-only-badge"' in body
