"""Predicted wait from a live worker's figures: `sluicegate stats` shows it per queue, and
a per-enqueue ``max_wait`` refuses on it. A worker with 2 slots finishes 50 ms jobs; the
queue is then paused with 20 jobs ready, so 20 x 0.05 s / 2 slots = 0.5 s."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from sluicegate import App
from sluicegate.errors import QueueFull
from sluicegate.worker import PoolSpec, Worker
from support.fleet import wait_for

DURATION = 0.05


def stats(url: str, *extra: str) -> str:
    command = [str(Path(sys.executable).parent / "sluicegate"), "stats", "--broker", url, *extra]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_stats_and_max_wait_use_the_observed_figures(
    app: App, run_worker: Callable[..., Worker], db_url: str
) -> None:
    @app.task(queue="waits")
    def slow() -> None:
        time.sleep(DURATION)  # the job's body: its duration is the figure under test

    worker = run_worker([PoolSpec("waits", ("waits",), 2)], publish_interval=0.25)
    for _ in range(6):
        slow.enqueue()
    wait_for(lambda: worker.counters.succeeded == 6, what="the first jobs")
    published = worker.registry.latest
    wait_for(lambda: worker.registry.latest is not published, what="a publish after them")
    app.pause_queue("waits")
    wait_for(lambda: worker.pauses.paused == {"waits"}, what="the pause read by the worker")
    for _ in range(20):
        slow.enqueue()

    row = json.loads(stats(db_url, "--json"))["queues"]["waits"]
    assert row["ready"] == 20 and row["predicted_wait_unserved"] is False
    assert 0.4 <= row["predicted_wait_s"] <= 1.0, row  # 20 x ~0.05 s / 2
    assert "wait~" in stats(db_url)

    predicted = app.predicted_wait("waits")
    assert predicted is not None and 0.4 <= predicted <= 1.0
    with pytest.raises(QueueFull) as caught:
        slow.with_options(max_wait=0.1).enqueue()
    exc = caught.value
    assert (exc.queue, exc.bound, exc.limit, exc.depth) == ("waits", "max_wait", 0.1, 20)
    assert exc.predicted_wait is not None and exc.predicted_wait > 0.1
    assert (
        len(app.broker.list_jobs(queue="waits", state=None, limit=1000)) == 26
    )  # none stored (6 done, 20 ready)
    slow.with_options(max_wait=30).enqueue()  # well within: stored
    app.resume_queue("waits")
