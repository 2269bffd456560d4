"""`sluicegate size --queue` on a measured workload: jobs of 20 ms arriving at 200/s for
10 s keep 200 x 0.020 = 4 slots busy on average (Little's law). A real worker serves the
queue; a producer in its own interpreter keeps to a schedule of one job every 5 ms; the
command reads only what the worker published.

What the command says is checked against what this run measured itself, not against
the nominal figures: on a busy machine a 20 ms sleep takes 22-25 ms, and the worker
drains its backlog after the producer stops, so the window the figures cover is longer
than 10 s (2.25 slots were reported, correctly, for a 22 s window). The command must say:

- durations: every job's (``samples``), with a mean that contains the bodies' own
  (measured around their sleep) and exceeds it by at most 15%, the worker's handling;
- the arrival rate: the 2,000 jobs over the seconds the worker has been up, which this
  test brackets with its own clock (from before the worker was made to after the
  command returned, and from after it was made to the last body's end);
- slots: rate x mean duration, which is then the bodies' own busy time over that window
  (the average occupancy Little's law predicts), within the same brackets.

The nominal 4 slots are printed beside what was measured, not asserted.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sluicegate import App
from sluicegate.worker import PoolSpec, Worker
from support.cli import run_cli
from support.waiting import wait_for

RATE = 200.0  # jobs/s
DURATION = 0.020  # s per job
SECONDS = 10.0
WINDOW = "5m"  # longer than any run: the window covers the worker's whole uptime
OVERHEAD = 0.15  # the most the worker's own handling may add to a body's time

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
    app: App, run_worker: Callable[..., Worker], db_url: str, tmp_path: Path
) -> None:
    lock = threading.Lock()
    bodies: list[tuple[float, float]] = []  # (start, end) of each body, monotonic

    @app.task(queue="sized", name="twenty")
    def twenty() -> None:
        start = time.monotonic()
        time.sleep(DURATION)
        end = time.monotonic()
        with lock:
            bodies.append((start, end))

    made_before = time.monotonic()  # the worker's figures start between these two
    worker = run_worker([PoolSpec("sized", ("sized",), 10)], publish_interval=0.25)
    made_after = time.monotonic()
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

    def finished() -> dict[str, Any] | None:
        snap = worker.registry.latest
        done = snap is not None and snap["queues"]["sized"]["recent"][WINDOW]["completed"] == n
        return snap if done else None

    taken = wait_for(finished, what="a snapshot with every job in it")
    assert taken["queues"]["sized"]["recent"][WINDOW]["enqueued"] == n  # every arrival
    # ... and in the broker: the worker writes a snapshot before it takes the next one.
    wait_for(lambda: worker.registry.latest is not taken, what="the publish after it")
    result = json.loads(size(db_url, tmp_path, "--json"))
    answered = time.monotonic()

    last_end = max(end for _, end in bodies)
    body_mean = sum(end - start for start, end in bodies) / len(bodies)
    busy = sum(end - start for start, end in bodies)
    # The seconds the command's figures cover: the worker's uptime when its snapshot was
    # taken, after the last body ended and before the command answered.
    longest, shortest = answered - made_before, last_end - made_after
    print(  # the figures, for the record (pytest -s shows them)
        f"\nsize --queue: {result['rate']:.1f} jobs/s x {result['duration_s'] * 1000:.2f} ms"
        f" = {result['slots_exact']:.2f} slots over {n / result['rate']:.1f} s (nominal: 200"
        f" jobs/s x 20 ms = 4.00 over 10 s); measured here: bodies of"
        f" {body_mean * 1000:.2f} ms, {busy / longest:.2f}-{busy / shortest:.2f} slots busy"
        f" over {shortest:.1f}-{longest:.1f} s; the producer kept {produced.stdout.strip()}"
        " jobs/s"
    )
    assert len(bodies) == result["samples"] == n, result
    assert body_mean <= result["duration_s"] <= body_mean * (1 + OVERHEAD), (body_mean, result)
    assert n / longest <= result["rate"] <= n / shortest, (shortest, longest, result)
    slots = result["slots_exact"]
    assert busy / longest <= slots <= busy * (1 + OVERHEAD) / shortest, (busy, result)
    assert "Little's law" in size(db_url, tmp_path)


def size(url: str, cwd: Path, *extra: str) -> str:
    """`sluicegate size --queue sized --window 5m`, as an operator would run it."""
    done = run_cli("size", "--queue", "sized", "--window", WINDOW, "--broker", url, *extra, cwd=cwd)
    assert done.exit_code == 0, done.output
    return done.stdout
