"""The app the soak's worker processes load (``soakapp:app``, with ``chaos/`` on PYTHONPATH).

One task, ``soak``: sleep, then return ``{"pid", "attempt"}``. Its side effect is two lines
in a file of its own process (``EFFECTS_DIR/<pid>.log``): ``start`` when the body begins and
``end`` when it has run to completion, each with job id, attempt, pid and wall time. A file
per process, appended with one ``os.write`` a line, needs no lock: a shared SQLite file
would let a worker SIGSTOPped inside a write stall every other worker for the whole stop.
Importing this module opens no broker and runs nothing.
"""

from __future__ import annotations

import os
import time
from typing import Any

from sluicegate import App
from sluicegate.context import current_job

app = App()

QUEUE = "soak"
_fd: dict[str, int] = {}


def _effect(folder: str, what: str, job_id: int, attempt: int) -> None:
    path = os.path.join(folder, f"{os.getpid()}.log")
    fd = _fd.get(path)
    if fd is None:
        fd = _fd[path] = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.write(fd, f"{what} {job_id} {attempt} {os.getpid()} {time.time():.6f}\n".encode())


@app.task(queue=QUEUE, max_attempts=50, backoff_base=0)
def soak(key: str, seconds: float, folder: str) -> dict[str, Any]:
    """Work for ``seconds``; record the start and the completed run."""
    job = current_job()
    job_id = int(job.id)
    _effect(folder, "start", job_id, job.attempts)
    time.sleep(seconds)
    _effect(folder, "end", job_id, job.attempts)
    return {"pid": os.getpid(), "attempt": job.attempts, "key": key}
