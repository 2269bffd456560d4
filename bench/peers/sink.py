"""The one sink every system's job body writes to, so every system is timed the same way.

A job appends one line, ``<wall time at its start> <sent> <index>``, to the sink file in
append mode (one ``write`` of one short line: lines from concurrent writers never
interleave). ``sent`` is the producer's ``time.time()`` just before it enqueued the job
(0 where latency is not measured); ``index`` numbers the jobs of a run, so a run can tell
lost jobs from jobs that ran twice. Standard library only: the peers' virtualenv imports it.
"""

from __future__ import annotations

import os
import time


def stamp(path: str, index: int = 0, sent: float = 0.0) -> None:
    """Record one job's run: called first thing in every system's job body."""
    line = f"{time.time():.6f} {sent:.6f} {index}\n".encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def read(path: str) -> list[tuple[float, float, int]]:
    """The sink's lines as (ran_at, sent, index), in file order."""
    try:
        with open(path) as f:
            rows = [line.split() for line in f if line.strip()]
    except FileNotFoundError:
        return []
    return [(float(a), float(b), int(c)) for a, b, c in rows]
