"""The SQLite fault tests' app and their outside processes (tests/chaos/test_sqlite_faults.py).

``bulky`` records a side effect (chaosapp's effects table) and returns a result large
enough to need pages of its own, so writing its outcome needs free space in the file.

Run as a script, it is one of the processes around the workers:

- ``lock PATH HOLD GAP CYCLES``: another program on the same file, taking the write lock
  (``BEGIN IMMEDIATE``) for HOLD s after every GAP s, CYCLES times; prints ``held T`` and
  ``released T`` (monotonic clock) as it goes.
- ``produce URL SECONDS EFFECTS_DB``: a producer enqueueing chaosapp.record jobs in small batches
  for SECONDS; prints the id of every job its enqueue returned, then ``done``.
- ``read URL SECONDS HOLD``: a reader for SECONDS: ``stats`` and ``jobs list`` in a loop,
  and a read transaction (one snapshot) held HOLD s after every ten rounds; prints
  ``snapshot`` for each one held, then ``done``.
"""

from __future__ import annotations

import os
import random
import sqlite3
import sys
import time

from chaosapp import _append_effect
from chaosapp import record as record_task

from sluicegate import App

app = App()

RESULT_BYTES = 6000  # more than a page: each ack needs a page of its own


@app.task(queue="full", max_attempts=25, backoff_base=0)
def bulky(effects_db: str, seconds: float) -> str:
    """Work for ``seconds`` with a side effect in the middle; a big result."""
    time.sleep(seconds / 2)
    _append_effect(effects_db)
    time.sleep(seconds / 2)
    return f"{os.getpid()}:" + "x" * RESULT_BYTES


def hold_lock(path: str, hold: float, gap: float, cycles: int) -> None:
    conn = sqlite3.connect(path, isolation_level=None, timeout=60)
    for _ in range(cycles):
        time.sleep(gap)
        conn.execute("BEGIN IMMEDIATE")
        print("held", time.monotonic(), flush=True)
        time.sleep(hold)
        conn.execute("COMMIT")
        print("released", time.monotonic(), flush=True)
    conn.close()


def produce(url: str, seconds: float, effects_db: str) -> None:
    producer = App(broker=url, config=False)
    rng = random.Random()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        specs = [
            producer.build_spec(
                record_task.name,
                [effects_db, 0.0],
                queue=record_task.options.queue,
                max_attempts=record_task.options.max_attempts,
            )
            for _ in range(rng.randint(1, 4))
        ]
        for job in producer.broker.enqueue(specs):
            print(job.id, flush=True)
        time.sleep(rng.uniform(0.0, 0.01))
    print("done", flush=True)


def read(url: str, seconds: float, hold: float) -> None:
    reader = App(broker=url, config=False)
    conn = sqlite3.connect(url.split("?")[0].removeprefix("sqlite:///"), isolation_level=None)
    rounds = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        reader.broker.stats()
        reader.broker.list_jobs(limit=50)
        rounds += 1
        if rounds % 10 == 0:
            conn.execute("BEGIN")
            conn.execute("SELECT count(*) FROM jobs").fetchone()  # the snapshot is taken here
            time.sleep(hold)
            conn.execute("COMMIT")
            print("snapshot", flush=True)
    print("done", flush=True)


if __name__ == "__main__":
    verb, *rest = sys.argv[1:]
    if verb == "lock":
        hold_lock(rest[0], float(rest[1]), float(rest[2]), int(rest[3]))
    elif verb == "produce":
        produce(rest[0], float(rest[1]), rest[2])
    elif verb == "read":
        read(rest[0], float(rest[1]), float(rest[2]))
    else:
        raise SystemExit(f"unknown verb {verb!r}")
