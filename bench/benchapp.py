"""The app the benchmark's worker subprocesses load: ``sluicegate worker benchapp:app``.

The broker comes from ``--broker`` (worker) or ``App.use_broker`` (benchmark process),
so importing this module opens nothing.
"""

from __future__ import annotations

import time

from sluicegate import App

app = App(config=False)
app.limit("bench50", concurrency=50)  # bench/limits.py: a global limit of 50


@app.task
def noop() -> None:
    """Does nothing: measures the system's own cost per job (queue "default")."""


@app.task(name="parked", queue="parked")
def parked() -> None:
    """A no-op on a queue no benchmark worker serves: the enqueue measurements use it,
    so the jobs they leave behind (on a shared ``--broker``) never feed a later worker."""


@app.task
def stamp() -> float:
    """Returns the wall-clock time its body started, for enqueue-to-start latency."""
    return time.time()


@app.task(limits=["bench50"])
def noop_limited() -> None:
    """A no-op under the global limit "bench50" (queue "default"): what a limit costs."""
