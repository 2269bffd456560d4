"""Celery on Redis, driven through the contract in bench/peers/README.md.

Used the way Celery's docs show: a ``Celery`` app with the Redis broker and no result
backend, one job = ``task.delay(i, s)``, bulk = ``task.apply_async(..., producer=p)`` for
every job on one pooled producer (the calling guide's manual-publisher form, faster here
than ``group(...).apply_async()``; kombu has no multi-message publish to Redis), and
the worker = ``app.worker_main(["worker", ...])``, the ``celery worker`` command run in
this process (its prefork children are forked from it).

The worker learns the sink path and the task from its own ``--sink``/``--task`` options,
kept in the environment (``PEER_SINK``, ``PEER_TASK``) so its pool processes see them.
Celery's banner goes to stderr; stdout carries only the ready line.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import celery
import contract
import sink
from celery import Celery
from celery.signals import worker_ready

app = Celery("bench", broker=os.environ.get("PEER_BROKER") or None)


@app.task(name="bench")
def bench(i: int, s: float) -> None:
    sink.stamp(os.environ["PEER_SINK"], i, s)
    if os.environ.get("PEER_TASK") == "io20":
        time.sleep(0.02)
        sink.stamp(os.environ["PEER_SINK"] + ".done", i, s)


def warm() -> None:
    """Connect the pooled producer that delay() reuses, before the clock starts."""
    with app.producer_or_acquire() as producer:
        producer.connection.ensure_connection()
        producer.connection.default_channel  # noqa: B018 - opens the channel


def enqueue(args: argparse.Namespace) -> dict[str, object]:
    n, sent = args.jobs, args.sent
    warm()
    start = time.perf_counter()
    if args.mode == "one":
        for i in range(n):
            bench.delay(i, time.time() if sent else 0.0)
    else:
        # The calling guide's manual-publisher form: one pooled producer for every
        # message. group(...).apply_async() sends them the same way but measured 0.5-0.7x
        # as fast (it freezes each signature into the group first).
        with app.producer_or_acquire() as producer:
            for i in range(n):
                bench.apply_async((i, time.time() if sent else 0.0), producer=producer)
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "jobs": n}


def latency(args: argparse.Namespace) -> dict[str, object]:
    warm()
    for i in range(args.jobs):
        time.sleep(args.spacing / 1000)
        bench.delay(i, time.time())
    return {"jobs": args.jobs}


def worker(args: argparse.Namespace) -> None:
    os.environ["PEER_SINK"], os.environ["PEER_TASK"] = args.sink, args.task
    if args.concurrency == "default":
        extra: list[str] = []
        notes = f"Celery defaults: {DEFAULTS}"
    else:
        extra = ["--pool", "threads", "--concurrency", args.concurrency]
        notes = f"--pool threads --concurrency {args.concurrency}, other settings default"
    out = os.dup(1)
    os.dup2(2, 1)  # the banner and anything else printed go to stderr

    @worker_ready.connect
    def ready(**_: object) -> None:
        os.write(out, (json.dumps({"ready": True, "notes": notes}) + "\n").encode())

    # SIGTERM = Celery's warm shutdown (finishes the jobs it runs, restores prefetched ones).
    app.worker_main(["worker", "--loglevel", "WARNING", *extra])


DEFAULTS = (
    f"prefork pool, concurrency = CPU count ({os.cpu_count()}), prefetch multiplier 4, "
    "acks_late=False (acked when a pool process takes the job), gossip, mingle and "
    "heartbeat events on"
)


def describe() -> dict[str, object]:
    return {
        "system": "Celery",
        "version": celery.__version__,
        "default_concurrency": f"prefork, {os.cpu_count()} processes",
        "notes": (
            f"{DEFAULTS}; Redis broker, no result backend. Bulk = apply_async on one "
            "producer for all jobs (no multi-message publish; group(...).apply_async() "
            "measured slower). "
            "On SIGKILL the jobs already handed to a pool process are lost (acked early); "
            "the prefetched ones wait in Redis's unacked set until visibility_timeout (1 h)"
        ),
    }


def main() -> None:
    args = contract.parse_args(__doc__)
    os.environ["PEER_BROKER"] = args.broker
    app.conf.broker_url = args.broker
    if args.role == "worker":
        worker(args)
        return
    roles = {"setup": lambda _: {}, "enqueue": enqueue, "latency": latency}
    out = describe() if args.role == "describe" else roles[args.role](args)
    sys.stdout.write(json.dumps(out) + "\n")


if __name__ == "__main__":
    main()
