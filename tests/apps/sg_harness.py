"""Moved to tests/support/fleet.py; kept while the last tests move their imports."""

from support.fleet import (  # noqa: F401
    Fleet,
    WorkerProcess,
    counts,
    enqueue,
    held_by,
    holders,
    sqlite_url,
    states,
    stop_all,
    wait_for,
)
