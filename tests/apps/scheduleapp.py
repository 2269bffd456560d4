"""A periodic job every second, for real ``sluicegate worker`` processes
(tests/worker/test_schedules_fleet.py): each tick's job returns the pid that ran it."""

from __future__ import annotations

import os

from sluicegate import App

app = App(config=False)


@app.periodic("* * * * * *", name="every_second", args=["sec"], catch_up=5)
@app.task(queue="cron")
def tick(label: str) -> int:
    return os.getpid()
