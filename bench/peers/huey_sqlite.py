"""huey on SQLite (``SqliteHuey``) for bench/compare.py: the roles of bench/peers/README.md.

The worker is huey's own consumer (``Huey.create_consumer``, what ``huey_consumer`` runs):
``default`` = its defaults (1 worker thread, polling with backoff from 0.1 s to 10 s);
N = ``-w N -k thread``. huey has no bulk insert: its ``Task.map`` (the documented call for
many jobs) enqueues them one by one.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from importlib.metadata import version

import contract
import sink
from huey import SqliteHuey
from huey.consumer_options import ConsumerConfig

SINK = {"path": ""}
huey = SqliteHuey("compare", filename=":memory:")  # replaced by configure(); nothing opened
DEFAULT = "huey_consumer defaults: 1 worker thread (-w 1 -k thread), polling backoff 0.1-10 s"


def configure(path: str) -> None:
    """Point the module's huey (and its tasks) at the run's SQLite file."""
    global huey
    huey = SqliteHuey("compare", filename=path)

    @huey.task(name="noop")
    def noop(index: int, sent: float) -> None:
        sink.stamp(SINK["path"], index, sent)

    @huey.task(name="io20")
    def io20(index: int, sent: float) -> None:
        sink.stamp(SINK["path"], index, sent)
        time.sleep(0.02)
        sink.stamp(SINK["path"] + ".done", index, sent)

    TASKS.update(noop=noop, io20=io20)


TASKS: dict[str, object] = {}


def emit(payload: dict[str, object]) -> None:
    print(json.dumps(payload), flush=True)


def worker(args: argparse.Namespace) -> None:
    SINK["path"] = args.sink
    if args.concurrency == "default":
        config = ConsumerConfig()
        notes = DEFAULT
    else:
        workers = int(args.concurrency)
        config = ConsumerConfig(workers=workers, worker_type="thread")
        notes = f"huey_consumer -w {workers} -k thread"
    config.validate()
    config.setup_logger(logging.getLogger())  # as huey_consumer: INFO, a line per task
    consumer = huey.create_consumer(**config.values)
    emit({"ready": True, "notes": notes})
    consumer.run()  # SIGTERM: huey's immediate shutdown


def enqueue(args: argparse.Namespace) -> None:
    task = TASKS[args.task]
    huey.storage.queue_size()  # connect (and create the tables) before the timer
    if args.mode == "bulk":
        calls = [(i, 0.0) for i in range(args.jobs)]
        started = time.perf_counter()
        task.map(calls)  # type: ignore[attr-defined]
        seconds = time.perf_counter() - started
    else:
        stamp_sent = args.sent
        started = time.perf_counter()
        for i in range(args.jobs):
            task(i, time.time() if stamp_sent else 0.0)  # type: ignore[operator]
        seconds = time.perf_counter() - started
    emit({"seconds": seconds, "jobs": args.jobs})


def latency(args: argparse.Namespace) -> None:
    task = TASKS["noop"]
    huey.storage.queue_size()
    for i in range(args.jobs):
        time.sleep(args.spacing / 1000)
        task(i, time.time())  # type: ignore[operator]
    emit({"jobs": args.jobs})


def main() -> None:
    args = contract.parse_args(__doc__)
    if args.role == "describe":
        emit(
            {
                "system": "huey, SQLite",
                "version": version("huey"),
                "default_concurrency": "1 worker thread",
                "notes": f"{DEFAULT}; bulk = Task.map (one insert per job); crash "
                "recovery: none (a task is deleted from the queue when a worker takes it)",
            }
        )
        return
    configure(args.broker)
    if args.role == "setup":
        huey.storage.queue_size()
        emit({})
    elif args.role == "enqueue":
        enqueue(args)
    elif args.role == "latency":
        latency(args)
    else:
        worker(args)


if __name__ == "__main__":
    main()
