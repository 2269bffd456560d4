"""`sluicegate size --queue` on a measured workload: 20 ms jobs arriving at 200/s keep
200 x 0.020 = 4 slots busy (Little's law), so the command must say 4 slots at 100%
utilisation, within 15%. A real worker serves the queue; the producer keeps to a
schedule of one job every 5 ms for 8 s; the command reads only what the worker published."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from sg_harness import wait_for

from sluicegate import App
from sluicegate.worker import PoolSpec, Worker

RATE = 200.0  # jobs/s
DURATION = 0.020  # s per job
SECONDS = 10.0

# The producer runs in its own interpreter, so the worker's loop and the producer's
# schedule do not take turns on one GIL: arrivals keep to 200/s on a busy machine too.
PRODUCER = """
import sys, time
from sluicegate import App
url, rate, seconds = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
app = App(broker=url, config=False)
start = time.monotonic()
for i in range(int(rate * seconds)):
    pause = start + i / rate - time.monotonic()
    if pause > 0:
        time.sleep(pause)
    app.enqueue("twenty", queue="sized")
print(f"{int(rate * seconds) / (time.monotonic() - start):.1f}")
"""


def test_size_from_observed_figures_finds_littles_law(
    app: App, run_worker: Callable[..., Worker], db_url: str
) -> None:
    @app.task(queue="sized", name="twenty")
    def twenty() -> None:
        time.sleep(DURATION)

    worker = run_worker([PoolSpec("sized", ("sized",), 10)], publish_interval=0.25)
    wait_for(lambda: worker.registry.mark is not None, what="the first publish")
    n = int(RATE * SECONDS)
    produced = subprocess.run(
        [sys.executable, "-c", PRODUCER, db_url, str(RATE), str(SECONDS)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert produced.returncode == 0, produced.stderr
    wait_for(lambda: worker.counters.succeeded == n, timeout=60, what="the workload")
    published = worker.registry.latest
    wait_for(lambda: worker.registry.latest is not published, what="a publish after the last job")

    result = json.loads(size(db_url, "--json"))
    print(  # the figures, for the record (pytest -s shows them)
        f"\nsize --queue: {result['rate']:.1f} jobs/s x {result['duration_s'] * 1000:.2f} ms"
        f" = {result['slots_exact']:.2f} slots (Little's law: 4.00; the producer kept"
        f" {produced.stdout.strip()} jobs/s)"
    )
    assert abs(result["slots_exact"] - 4.0) <= 0.15 * 4.0, result
    assert abs(result["duration_s"] - DURATION) <= 0.15 * DURATION, result
    assert "Little's law" in size(db_url)


def size(url: str, *extra: str) -> str:
    """`sluicegate size --queue sized --window 1m` from another process, as an operator would."""
    command = [str(Path(sys.executable).parent / "sluicegate"), "size", "--queue", "sized"]
    command += ["--window", "1m", "--broker", url, *extra]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout
