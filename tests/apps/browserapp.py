"""The app real ``sluicegate worker`` processes run in the dashboard's browser tests.

``repair`` fails (one attempt: the job dies) until the file it names exists, so a test
can fix the cause and retry the dead job through the dashboard. ``nap`` works for a
moment, for a worker to drain. ``store`` holds the ``storage`` limit. The app names no
broker: workers get ``--broker``, tests enqueue through their own App.
"""

from __future__ import annotations

import time
from pathlib import Path

from sluicegate import App

app = App(config=False)
app.limit("storage", concurrency=2)


@app.task(queue="repair", max_attempts=1)
def repair(flag: str) -> str:
    if not Path(flag).exists():
        raise RuntimeError(f"{flag} is missing")
    return "repaired"


@app.task(queue="drain", max_attempts=1)
def nap(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


@app.task(queue="store", limits=["storage"])
def store(n: int) -> int:
    return n * 2
