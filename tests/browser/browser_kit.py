"""What the browser tests share: finding Chromium (Debian's, never one downloaded at test
time), a real ``sluicegate dashboard`` process on a free loopback port, and a watch on
each page for script errors and Content-Security-Policy violations."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

try:
    from playwright.sync_api import expect
except ImportError:  # the `browser` fixture skips (or, in CI, fails) and says why
    expect = None  # type: ignore[assignment]

CHROMIUM_ENV = "SLUICEGATE_CHROMIUM"
REQUIRE_ENV = "SLUICEGATE_REQUIRE_BROWSER"
DEFAULT_CHROMIUM = "/usr/bin/chromium"
TIMEOUT_MS = 15_000  # every wait of a page: generous for a loaded 2-core machine
START_TIMEOUT_S = 30.0
VIEWPORT = {"width": 1280, "height": 800}

# Runs in every page before its own scripts (Playwright injects it past the page's CSP):
# it records CSP violations as the page reports them.
WATCH_SCRIPT = """
window.__cspViolations = [];
document.addEventListener("securitypolicyviolation", function (e) {
  window.__cspViolations.push(e.violatedDirective + " " + (e.blockedURI || "inline"));
});
"""


def required() -> bool:
    return os.environ.get(REQUIRE_ENV, "") not in ("", "0", "false", "no")


def find_chromium() -> tuple[str | None, str]:
    """Chromium's path (SLUICEGATE_CHROMIUM, else /usr/bin/chromium, else ``chromium`` on
    PATH), or None and why not."""
    given = os.environ.get(CHROMIUM_ENV)
    if given:
        if os.path.isfile(given) and os.access(given, os.X_OK):
            return given, ""
        return None, f"{CHROMIUM_ENV}={given} is not an executable file"
    if os.access(DEFAULT_CHROMIUM, os.X_OK):
        return DEFAULT_CHROMIUM, ""
    on_path = shutil.which("chromium")
    if on_path:
        return on_path, ""
    return None, (
        f"no Chromium ({DEFAULT_CHROMIUM}, `chromium` on PATH or {CHROMIUM_ENV}): "
        "`make browser` installs Debian's"
    )


def need_browser() -> str:
    """Chromium's path, when Playwright and Chromium are both here; otherwise skip with
    the reason, or fail when CI requires the browser tests (SLUICEGATE_REQUIRE_BROWSER=1)."""
    reason = ""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        reason = "Playwright is not installed: pip install -e '.[dev]'"
    path, missing = find_chromium()
    reason = reason or missing
    if path is None or reason:
        if required():
            pytest.fail(f"browser tests required ({REQUIRE_ENV}=1) but {reason}", pytrace=False)
        pytest.skip(f"browser tests skipped: {reason}")
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def sluicegate_command() -> list[str]:
    script = Path(sys.executable).parent / "sluicegate"
    return [str(script)] if script.exists() else [sys.executable, "-m", "sluicegate.cli"]


def clean_env() -> dict[str, str]:
    """This environment without a dashboard token or broker a developer may have set."""
    drop = ("SLUICEGATE_DASHBOARD_TOKEN", "SLUICEGATE_BROKER")
    return {k: v for k, v in os.environ.items() if k not in drop}


class DashboardProcess:
    """One real ``sluicegate dashboard`` process on a free loopback port, its output in a
    log file. Starting it does not wait: ``ready()`` does (so several start at once)."""

    def __init__(self, broker_url: str, folder: Path, *args: str, name: str = "dashboard"):
        self.broker_url = broker_url
        self.folder = folder
        self.args = args
        self.log_path = folder / f"{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self._launch()

    def _launch(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        command = [*sluicegate_command(), "dashboard", "--port", str(self.port),
                   "--broker", self.broker_url, *self.args]  # fmt: skip
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, env=clean_env(), cwd=self.folder
            )

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def ready(self) -> DashboardProcess:
        """Wait until the overview answers 200 (the broker opened, the first page drawn).
        A port taken between choosing and binding it is chosen again, twice at most."""
        assert self.proc is not None
        tries = 3
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if self.proc.poll() is not None:
                tries -= 1
                if tries and "address already in use" in self.log().lower():
                    self._launch()
                    continue
                raise AssertionError(
                    f"the dashboard exited ({self.proc.returncode}):\n{self.log()}"
                )
            try:
                with urllib.request.urlopen(self.url + "/", timeout=5) as answer:
                    if answer.status == 200:
                        return self
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise AssertionError(
                    f"the dashboard did not answer in {START_TIMEOUT_S:g} s:\n{self.log()}"
                )
            time.sleep(0.1)

    def stop(self) -> None:
        """SIGTERM (uvicorn shuts down), SIGKILL if it lingers; reaped either way."""
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=15)


class Watch:
    """What went wrong in one browser context: uncaught script errors, console errors,
    and Content-Security-Policy violations (console messages and the page's own
    ``securitypolicyviolation`` events, read with ``csp_events``)."""

    def __init__(self) -> None:
        self.errors: list[str] = []

    def on_console(self, message: Any) -> None:
        if message.type == "error":
            self.errors.append(f"console: {message.text}")

    def on_response(self, response: Any) -> None:
        if response.status >= 400:
            self.errors.append(f"HTTP {response.status}: {response.request.method} {response.url}")

    def on_page_error(self, error: Any) -> None:
        self.errors.append(f"page error: {error}")

    def csp_console(self) -> list[str]:
        return [e for e in self.errors if "Content Security Policy" in e]

    def take(self) -> list[str]:
        """The errors so far, forgotten (for a test that expects some, such as a 403)."""
        taken, self.errors = self.errors, []
        return taken


def csp_events(page: Any) -> list[str]:
    """The CSP violations this document has reported so far (WATCH_SCRIPT records them)."""
    found = page.evaluate("() => window.__cspViolations || []")
    return [str(v) for v in found]
