"""Dramatiq on Redis, driven through the contract in bench/peers/README.md.

Used the way Dramatiq's docs show: a ``RedisBroker`` set as the global broker, one job =
``actor.send(i, s)``, and the worker = the ``dramatiq`` command (``python -m dramatiq
dramatiq_redis --path <this folder>``) started by the ``worker`` role as its child, in its
process group. Dramatiq has no bulk enqueue: ``bulk`` = ``group(...).run()``, its
composition for sending many messages, which enqueues them one by one.

The worker processes import this module, so it reads everything from the environment:
``PEER_BROKER`` (the Redis URL), ``PEER_SINK`` (the sink path), ``PEER_TASK`` (``noop``
or ``io20``); the ``worker`` role sets them from its options.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from importlib.metadata import version

import contract
import dramatiq
import sink
from dramatiq.brokers.redis import RedisBroker

dramatiq.set_broker(RedisBroker(url=os.environ.get("PEER_BROKER") or None))

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULTS = (
    f"processes = CPU count ({os.cpu_count()}), 8 threads each, prefetch 2x threads, "
    "Retries/TimeLimit/AgeLimit/Callbacks/Pipelines middleware"
)


@dramatiq.actor(actor_name="bench")
def bench(i: int, s: float) -> None:
    sink.stamp(os.environ["PEER_SINK"], i, s)
    if os.environ.get("PEER_TASK") == "io20":
        time.sleep(0.02)
        sink.stamp(os.environ["PEER_SINK"] + ".done", i, s)


def set_broker(url: str) -> None:
    os.environ["PEER_BROKER"] = url
    broker = RedisBroker(url=url)
    broker.declare_actor(bench)
    bench.broker = broker
    dramatiq.set_broker(broker)
    broker.client.ping()  # connect before the clock starts


def enqueue(args: argparse.Namespace) -> dict[str, object]:
    set_broker(args.broker)
    n, sent = args.jobs, args.sent
    start = time.perf_counter()
    if args.mode == "one":
        for i in range(n):
            bench.send(i, time.time() if sent else 0.0)
    else:
        dramatiq.group(bench.message(i, time.time() if sent else 0.0) for i in range(n)).run()
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "jobs": n}


def latency(args: argparse.Namespace) -> dict[str, object]:
    set_broker(args.broker)
    for i in range(args.jobs):
        time.sleep(args.spacing / 1000)
        bench.send(i, time.time())
    return {"jobs": args.jobs}


def worker(args: argparse.Namespace) -> None:
    """Run the ``dramatiq`` command; say ready once each of its processes is."""
    env = dict(os.environ, PEER_BROKER=args.broker, PEER_SINK=args.sink, PEER_TASK=args.task)
    cmd = [sys.executable, "-m", "dramatiq", "dramatiq_redis", "--path", HERE]
    processes = os.cpu_count() or 1
    notes = f"Dramatiq defaults: {DEFAULTS}"
    if args.concurrency != "default":
        processes = 1
        cmd += ["--processes", "1", "--threads", args.concurrency]
        notes = f"--processes 1 --threads {args.concurrency}, other settings default"
    child = subprocess.Popen(cmd, env=env, stdout=2, stderr=subprocess.PIPE, text=True)
    # Forward SIGTERM (the harness may signal only this process, not its group).
    signal.signal(signal.SIGTERM, lambda *_: child.send_signal(signal.SIGTERM))

    def relay() -> None:
        ready = 0
        assert child.stderr is not None
        for line in child.stderr:
            sys.stderr.write(line)
            if "Worker process is ready for action" in line:
                ready += 1
                if ready == processes:
                    print(json.dumps({"ready": True, "notes": notes}), flush=True)

    thread = threading.Thread(target=relay, daemon=True)
    thread.start()
    child.wait()
    thread.join(timeout=2)


def describe() -> dict[str, object]:
    return {
        "system": "Dramatiq",
        "version": version("dramatiq"),
        "default_concurrency": f"{os.cpu_count()} processes x 8 threads",
        "notes": (
            f"{DEFAULTS}; Redis broker. No bulk API: bulk = group(...).run(), one enqueue "
            "per message. On SIGKILL a worker's unacked messages (running and prefetched) "
            "are requeued by another live worker's broker maintenance (run on ~0.1% of "
            "its commands) once the dead one's heartbeat is older than 60 s"
        ),
    }


def main() -> None:
    args = contract.parse_args(__doc__)
    if args.role == "worker":
        worker(args)
        return
    roles = {"setup": lambda _: {}, "enqueue": enqueue, "latency": latency}
    out = describe() if args.role == "describe" else roles[args.role](args)
    sys.stdout.write(json.dumps(out) + "\n")


if __name__ == "__main__":
    main()
