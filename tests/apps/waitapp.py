"""Tasks for the job.wait tests, run by real ``sluicegate worker`` processes."""

from __future__ import annotations

import time

from sluicegate import App

app = App()


@app.task(queue="wait")
def add(a: int, b: int) -> dict[str, int]:
    return {"sum": a + b}


@app.task(queue="wait", max_attempts=1)
def explode(message: str) -> None:
    raise ValueError(message)


@app.task(queue="wait")
def sleep(seconds: float) -> None:
    time.sleep(seconds)
