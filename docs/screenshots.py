"""The dashboard's screenshots in docs/dashboard.md, taken while the demo's workload runs.

    .venv/bin/python docs/screenshots.py [--out docs/img] [--rounds 3] [--warm-up SECONDS]
    make screenshots

(The pictures in docs/dashboard.md were taken so that the last-hour charts
have a few minutes of figures: ``--rounds 60 --warm-up 180``.)

In a temporary folder it starts a real ``sluicegate worker`` for the demo's tasks with
the demo's separate budgets (transcode: 4 process slots, email: 3 async, index: 2
threads), a real ``sluicegate dashboard`` on a free loopback port, and Chromium through
Playwright (SLUICEGATE_CHROMIUM, else /usr/bin/chromium, else ``chromium`` on PATH:
``make browser`` installs Debian's; none is ever downloaded). A producer enqueues the
demo's 09:00 arrivals (a burst of transcodes, then emails and index updates trickling
in) ``--rounds`` times, and three jobs with a bad payload, which die. While the pools are
busy it writes, at 1366x900:

    dashboard-overview.png   the overview: queues backing up, pools busy, the worker
    dashboard-job.png        a dead job: its error, traceback and timeline
    dashboard-dead.png       the dead jobs, with their errors

Everything it started is stopped, and the folder removed, when it ends.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from sluicegate import App
from sluicegate.demo.scenario import SEPARATE, build_schedule
from sluicegate.demo.tasks import seconds_per_round

ROOT = Path(__file__).resolve().parent.parent
VIEWPORT = {"width": 1366, "height": 900}
TIMEOUT_MS = 60_000
# Bad payloads, as a caller's bug would send them: each raises in the task's body.
BAD: list[tuple[str, list[Any], str]] = [
    ("transcode_video", [4711, "12"], "transcode"),  # rounds as a string: range("12")
    ("send_email", [77], "email"),  # the provider's wait left out
    ("update_search_index", [9, 0.05, "fr"], "index"),  # one argument too many
]


def chromium() -> str:
    given = os.environ.get("SLUICEGATE_CHROMIUM")
    found = given or ("/usr/bin/chromium" if os.access("/usr/bin/chromium", os.X_OK) else None)
    found = found or shutil.which("chromium")
    if not found:
        sys.exit("no Chromium: `make browser` installs Debian's (or set SLUICEGATE_CHROMIUM)")
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def sluicegate() -> list[str]:
    script = Path(sys.executable).parent / "sluicegate"
    return [str(script)] if script.exists() else [sys.executable, "-m", "sluicegate.cli"]


def start(command: list[str], folder: Path, name: str) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLUICEGATE_DASHBOARD")}
    with open(folder / f"{name}.log", "wb") as log:
        return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=folder, env=env)


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(30)


def wait_until_up(url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit(f"the dashboard exited:\n{log.read_text(errors='replace')}")
        try:
            with urllib.request.urlopen(url, timeout=5) as answer:
                if answer.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    sys.exit("the dashboard did not answer in 60 s")


def shoot(page: Any, path: Path) -> None:
    """The viewport, cut short below the page's end when the page is shorter."""
    bottom = page.evaluate("() => document.querySelector('main').getBoundingClientRect().bottom")
    height = min(VIEWPORT["height"], int(bottom) + 24)
    page.screenshot(path=path, clip={"x": 0, "y": 0, "width": VIEWPORT["width"], "height": height})


def produce(app: App, rounds: int, per_round: float, done: threading.Event) -> None:
    """The demo's arrivals, ``rounds`` times over, each at its moment."""
    schedule = build_schedule()
    tasks = SEPARATE.tasks
    n = 0
    for _ in range(rounds):
        began = time.monotonic()
        for arrival in schedule:
            if done.wait(max(0.0, began + arrival.at - time.monotonic())):
                return
            n += 1
            args: list[Any] = [n, round(arrival.seconds, 3)]
            if arrival.job_class == "transcode":
                args[1] = max(1, round(arrival.seconds / per_round))  # MiB to hash
            app.enqueue(tasks[arrival.job_class], args=args, queue=arrival.job_class)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "img")
    parser.add_argument("--rounds", type=int, default=3, help="times the arrivals are sent")
    parser.add_argument(
        "--warm-up", type=float, default=0.0, help="seconds of workload before the first picture"
    )
    options = parser.parse_args()
    from playwright.sync_api import expect, sync_playwright

    options.out.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="sluicegate-demo-"))
    url = f"sqlite:///{folder / 'jobs.db'}"
    app = App(broker=url, config=False)
    app.broker.stats()  # the schema, before the worker and the dashboard open the file
    pools = [f"--pool={p.name}={','.join(p.queues)}:{p.slots}:{p.model}" for p in SEPARATE.pools]
    worker = start([*sluicegate(), "worker", "sluicegate.demo.tasks:app", "--broker", url,
                    *pools, "--lease", "5"], folder, "worker")  # fmt: skip
    port = free_port()
    dashboard = start([*sluicegate(), "dashboard", "--port", str(port), "--broker", url],
                      folder, "dashboard")  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    done = threading.Event()
    producer = threading.Thread(target=produce, daemon=True,
                                args=(app, options.rounds, seconds_per_round(), done))  # fmt: skip
    try:
        wait_until_up(base + "/", dashboard, folder / "dashboard.log")
        dead = [app.enqueue(task, args=args, queue=queue, max_attempts=1).id
                for task, args, queue in BAD]  # fmt: skip
        producer.start()
        time.sleep(options.warm_up)  # a few minutes of history for the charts
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium(), args=["--no-sandbox"])
            page = browser.new_page(viewport=VIEWPORT)  # type: ignore[arg-type]
            page.set_default_timeout(TIMEOUT_MS)
            expect.set_options(timeout=TIMEOUT_MS)

            page.goto(base + "/")  # the live refresh follows the run from here
            transcode = page.locator('[data-testid="pool-row"][data-pool="transcode"]')
            expect(transcode.get_by_test_id("pool-busy")).to_have_text("4/4")
            expect(page.locator('[data-testid="pool-row"][data-pool="email"]')).to_be_visible()
            backlog = page.locator('[data-testid="queue-row"][data-queue="transcode"]')
            expect(backlog.get_by_test_id("queue-ready")).not_to_have_text("0")
            expect(page.get_by_test_id("live-status")).to_contain_text("updated")
            shoot(page, options.out / "dashboard-overview.png")

            page.goto(f"{base}/jobs/{dead[0]}")
            expect(page.get_by_test_id("job-state")).to_have_attribute("data-state", "dead")
            shoot(page, options.out / "dashboard-job.png")

            page.goto(base + "/dead")
            expect(page.locator('[data-testid="job-row"][data-state="dead"]')).to_have_count(3)
            shoot(page, options.out / "dashboard-dead.png")
            browser.close()
    finally:
        done.set()
        if producer.ident is not None:
            producer.join(10)
        stop(dashboard)
        stop(worker)
        app.close()
        shutil.rmtree(folder, ignore_errors=True)
    for name in ("overview", "job", "dead"):
        path = options.out / f"dashboard-{name}.png"
        print(f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}: "
              f"{path.stat().st_size // 1024} KB")  # fmt: skip


if __name__ == "__main__":
    main()
