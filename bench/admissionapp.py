"""The app bench/admission_overload.py's worker loads: one task of a steady duration."""

from __future__ import annotations

import time

from sluicegate import App

app = App(config=False)


@app.task(queue="bounded")
def steady(seconds: float) -> None:
    """Sleeps ``seconds``: a job of known duration, so the completion rate is slots/duration."""
    time.sleep(seconds)
