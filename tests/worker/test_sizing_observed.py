"""`sluicegate size --queue` on a measured workload: 20 ms jobs arriving at 200/s keep
200 x 0.020 = 4 slots busy (Little's law), so the command must say 4 slots at 100%
utilisation, within 15%. A real worker serves the queue; the producer keeps to a
schedule of one job every 5 ms for 8 s; the command reads only what the worker published."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

from click.testing import CliRunner
from sg_harness import wait_for

from sluicegate import App
from sluicegate.cli import main
from sluicegate.worker import PoolSpec, Worker

RATE = 200.0  # jobs/s
DURATION = 0.020  # s per job
SECONDS = 8.0


def test_size_from_observed_figures_finds_littles_law(
    app: App, run_worker: Callable[..., Worker], db_url: str
) -> None:
    @app.task(queue="sized")
    def twenty() -> None:
        time.sleep(DURATION)

    worker = run_worker([PoolSpec("sized", ("sized",), 10)], publish_interval=0.25)
    wait_for(lambda: worker.registry.mark is not None, what="the first publish")
    start = time.monotonic()
    n = int(RATE * SECONDS)
    for i in range(n):
        pause = start + i / RATE - time.monotonic()
        if pause > 0:
            time.sleep(pause)
        twenty.enqueue()
    wait_for(lambda: worker.counters.succeeded == n, timeout=30, what="the workload")
    published = worker.registry.latest
    wait_for(lambda: worker.registry.latest is not published, what="a publish after the last job")

    out = CliRunner().invoke(
        main, ["size", "--queue", "sized", "--window", "1m", "--json", "--broker", db_url]
    )
    assert out.exit_code == 0, out.output
    result = json.loads(out.output)
    assert abs(result["slots_exact"] - 4.0) <= 0.15 * 4.0, result
    assert abs(result["duration_s"] - DURATION) <= 0.15 * DURATION, result
    text = CliRunner().invoke(
        main, ["size", "--queue", "sized", "--window", "1m", "--broker", db_url]
    )
    assert text.exit_code == 0 and "Little's law" in text.output
