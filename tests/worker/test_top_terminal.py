"""`sluicegate top` in a real terminal (tmux): while a worker runs jobs on a SQLite file,
the captured screen shows the queue, the pool's utilisation and the worker within 80
columns; q quits."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from sluicegate import App
from sluicegate.worker import PoolSpec, Worker
from support.fleet import wait_for

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")


def test_top_in_a_terminal(
    app: App, run_worker: Callable[..., Worker], db_url: str, tmp_path: Path
) -> None:
    @app.task(queue="transcode")
    def work() -> None:
        time.sleep(0.2)  # the job's body: the pool stays busy while top is read

    worker = run_worker([PoolSpec("transcode", ("transcode",), 4)], publish_interval=0.2)
    for _ in range(200):
        work.enqueue()
    wait_for(lambda: worker.registry.latest is not None, what="the first publish")
    top = Path(sys.executable).parent / "sluicegate"
    tmux = ["tmux", "-L", f"sg-test-{tmp_path.name}", "-f", "/dev/null"]
    command = f"{top} top --broker '{db_url}'"
    subprocess.run([*tmux, "new-session", "-d", "-s", "top", "-x", "80", "-y", "24", command],
                   check=True)  # fmt: skip
    try:

        def screen() -> str:
            out = subprocess.run(
                [*tmux, "capture-pane", "-p", "-t", "top"], capture_output=True, text=True
            )
            return out.stdout

        shown = wait_for(
            lambda: (s := screen()) and "4/4" in s and "transcode" in s and s,
            timeout=20,
            interval=0.2,
            what=lambda: f"top to show the busy pool:\n{screen()}",
        )
        lines = shown.splitlines()
        assert all(len(line) <= 80 for line in lines)
        assert "q: quit" in shown and "live" in shown
        subprocess.run([*tmux, "send-keys", "-t", "top", "q"], check=True)
        wait_for(
            lambda: subprocess.run([*tmux, "has-session", "-t", "top"]).returncode != 0,
            timeout=10,
            what="top to quit on q",
        )
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True)
