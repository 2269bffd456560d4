"""The hand-written PostgreSQL baseline for bench/compare.py: what a queue costs with no
library at all, one job per transaction.

A table ``bare_jobs`` (id, task, index, sent). Enqueue: one INSERT and COMMIT per job;
bulk: one ``COPY`` in one transaction. Worker: C threads, each with its own connection,
loop over ``SELECT ... ORDER BY id FOR UPDATE SKIP LOCKED LIMIT 1``, the body, ``DELETE``,
``COMMIT``; an empty queue is polled every 10 ms (no LISTEN). ``default`` = 1 thread.
A crashed worker's locks go with its connections, so its jobs are ready again at once
(and the ones it was running run twice).
"""

from __future__ import annotations

import argparse
import json
import signal
import threading
import time
from importlib.metadata import version

import contract
import psycopg
import sink

POLL = 0.01
SCHEMA = """
CREATE TABLE IF NOT EXISTS bare_jobs (
    id bigserial PRIMARY KEY,
    task text NOT NULL,
    idx integer NOT NULL,
    sent double precision NOT NULL
)"""
INSERT = "INSERT INTO bare_jobs (task, idx, sent) VALUES (%s, %s, %s)"
CLAIM = "SELECT id, task, idx, sent FROM bare_jobs ORDER BY id FOR UPDATE SKIP LOCKED LIMIT 1"
DEFAULT = "1 thread (one connection, one job per transaction)"


def emit(payload: dict[str, object]) -> None:
    print(json.dumps(payload), flush=True)


def serve(dsn: str, sink_path: str, stop: threading.Event) -> None:
    """One worker thread: claim, run, delete, commit; one job per transaction."""
    with psycopg.connect(dsn) as conn:
        while not stop.is_set():
            with conn.transaction():
                row = conn.execute(CLAIM).fetchone()
                if row is not None:
                    job_id, task, index, sent = row
                    sink.stamp(sink_path, index, sent)
                    if task == "io20":
                        time.sleep(0.02)
                        sink.stamp(sink_path + ".done", index, sent)
                    conn.execute("DELETE FROM bare_jobs WHERE id = %s", (job_id,))
            if row is None:
                stop.wait(POLL)


def worker(args: argparse.Namespace) -> None:
    threads = 1 if args.concurrency == "default" else int(args.concurrency)
    stop = threading.Event()
    stopping = {signal.SIGTERM, signal.SIGINT}
    signal.pthread_sigmask(signal.SIG_BLOCK, stopping)  # the threads inherit the mask
    pool = [
        threading.Thread(target=serve, args=(args.broker, args.sink, stop), daemon=True)
        for _ in range(threads)
    ]
    for thread in pool:
        thread.start()
    emit(
        {"ready": True, "notes": DEFAULT if args.concurrency == "default" else f"{threads} threads"}
    )
    signal.sigwait(stopping)  # not a handler: setting the Event from one can deadlock
    stop.set()
    for thread in pool:
        thread.join(timeout=5)


def enqueue(args: argparse.Namespace) -> None:
    with psycopg.connect(args.broker) as conn:
        conn.execute("SELECT 1")
        conn.commit()
        if args.mode == "bulk":
            rows = [(args.task, i, 0.0) for i in range(args.jobs)]
            started = time.perf_counter()
            with (
                conn.cursor() as cur,
                cur.copy("COPY bare_jobs (task, idx, sent) FROM STDIN") as copy,
            ):
                for row in rows:
                    copy.write_row(row)
            conn.commit()
            seconds = time.perf_counter() - started
        else:
            stamp_sent, task = args.sent, args.task
            started = time.perf_counter()
            for i in range(args.jobs):
                conn.execute(INSERT, (task, i, time.time() if stamp_sent else 0.0))
                conn.commit()
            seconds = time.perf_counter() - started
    emit({"seconds": seconds, "jobs": args.jobs})


def latency(args: argparse.Namespace) -> None:
    with psycopg.connect(args.broker, autocommit=True) as conn:
        for i in range(args.jobs):
            time.sleep(args.spacing / 1000)
            conn.execute(INSERT, ("noop", i, time.time()))
    emit({"jobs": args.jobs})


def main() -> None:
    args = contract.parse_args(__doc__)
    if args.role == "describe":
        emit(
            {
                "system": "hand-written PostgreSQL",
                "version": f"psycopg {version('psycopg')}",
                "default_concurrency": "1 thread",
                "notes": f"{DEFAULT}; SKIP LOCKED LIMIT 1 + DELETE + COMMIT per job, "
                "polls every 10 ms when empty; bulk = COPY; crash recovery: immediate "
                "(row locks die with the connection)",
            }
        )
    elif args.role == "setup":
        with psycopg.connect(args.broker, autocommit=True) as conn:
            conn.execute(SCHEMA)
        emit({})
    elif args.role == "enqueue":
        enqueue(args)
    elif args.role == "latency":
        latency(args)
    else:
        worker(args)


if __name__ == "__main__":
    main()
