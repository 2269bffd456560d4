"""The example's background work: one sluicegate App and its tasks.

The web app (main.py) imports this module to enqueue; the worker runs it:

    sluicegate worker tasks:jobs          # pools from ./sluicegate.toml

Both find the broker in SLUICEGATE_BROKER (else sqlite:///sluicegate.db, in the folder
they run in), so start them from the same folder or give both the same URL.
"""

from __future__ import annotations

import time

from sluicegate import App
from sluicegate.context import current_job

jobs = App()  # the broker opens on first use: importing this module connects to nothing


@jobs.task(queue="reports", retry_on=(ConnectionError,), timeout=600)
def build_report(user_id: int, rows: int = 3, row_seconds: float = 0.05) -> dict[str, object]:
    """Builds a report of ``rows`` rows, ``row_seconds`` each (the stand-in for real
    work). A user id below 1 has no data: LookupError, not retried (only a
    ConnectionError is worth another attempt), so the job ends dead at once."""
    if user_id < 1:
        raise LookupError(f"user {user_id} has no data")
    job = current_job()
    lines = []
    for n in range(rows):
        job.raise_if_cancelled()  # a thread cannot be killed: a cancel is seen here
        time.sleep(row_seconds)
        lines.append(f"row {n + 1} of user {user_id}")
        job.progress((n + 1) / rows, f"row {n + 1} of {rows}")
    return {"user_id": user_id, "rows": lines}
