"""sluicegate's side of the peer comparison: the app the worker loads, and the roles.

``sluicegate_sqlite.py`` and ``sluicegate_pg.py`` call :func:`main`; the worker role execs
``python -m sluicegate.cli worker sluicegate_common:app`` so that the measured worker is
the one users run. The job body's sink path reaches the worker in ``COMPARE_SINK``
(read per job: the adapter process that enqueues never runs a body).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from importlib.metadata import version
from pathlib import Path

import contract
import sink

from sluicegate import App

HERE = Path(__file__).resolve().parent
SINK_ENV = "COMPARE_SINK"
DEFAULT = "one pool 'default' of 10 thread slots (the worker's --pool default)"

app = App(config=False)


@app.task
def noop(index: int, sent: float) -> None:
    """Stamps the sink, nothing more: the system's own cost per job."""
    sink.stamp(os.environ[SINK_ENV], index, sent)


@app.task(queue="io")
async def io20(index: int, sent: float) -> None:
    """Stamps the sink, then 20 ms of I/O on the worker's event loop: queue "io", served by
    an async pool (a coroutine task may not sit on a thread pool's queue)."""
    sink.stamp(os.environ[SINK_ENV], index, sent)
    await asyncio.sleep(0.02)
    sink.stamp(os.environ[SINK_ENV] + ".done", index, sent)


def broker_url(given: str) -> str:
    """A bare SQLite file path becomes a ``sqlite:///`` URL; URLs pass as given."""
    return given if "://" in given else f"sqlite:///{Path(given).resolve()}"


def emit(payload: dict[str, object]) -> None:
    print(json.dumps(payload), flush=True)


def pool_for(concurrency: str, task: str) -> list[str]:
    """The ``--pool`` options: none for ``default`` (noop); N thread slots over queue
    "default" for noop, N async slots over queue "io" for io20."""
    if task == "io20":
        slots = 10 if concurrency == "default" else int(concurrency)
        return ["--pool", f"io=io:{slots}:async"]
    if concurrency == "default":
        return []
    return ["--pool", f"default=default:{int(concurrency)}:thread"]


def run_worker(args: argparse.Namespace, url: str) -> None:
    os.environ[SINK_ENV] = str(Path(args.sink).resolve())
    path = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), path]))
    pools = pool_for(args.concurrency, args.task)
    cmd = [sys.executable, "-m", "sluicegate.cli", "worker", "sluicegate_common:app"]
    cmd += ["--broker", url, *pools]
    emit({"ready": True, "notes": " ".join(pools) or DEFAULT})
    sys.stdout.flush()
    os.execv(sys.executable, cmd)  # same pid and process group: the harness's signals reach it


def enqueue(args: argparse.Namespace) -> None:
    task = io20 if args.task == "io20" else noop
    app.broker  # noqa: B018 - connect (and migrate) before the timer
    if args.mode == "bulk":
        calls = [(i, 0.0) for i in range(args.jobs)]
        started = time.perf_counter()
        task.enqueue_many(calls)
        seconds = time.perf_counter() - started
    else:
        stamp_sent = args.sent
        started = time.perf_counter()
        for i in range(args.jobs):
            task.enqueue(i, time.time() if stamp_sent else 0.0)
        seconds = time.perf_counter() - started
    emit({"seconds": seconds, "jobs": args.jobs})


def latency(args: argparse.Namespace) -> None:
    app.broker  # noqa: B018
    for i in range(args.jobs):
        time.sleep(args.spacing / 1000)
        noop.enqueue(i, time.time())
    emit({"jobs": args.jobs})


def parse(argv: list[str] | None) -> argparse.Namespace:
    return contract.parse_args(__doc__, argv)


def main(system: str, argv: list[str] | None = None) -> None:
    """Run one role for ``system`` ("sluicegate, SQLite" or "sluicegate, PostgreSQL")."""
    args = parse(argv)
    if args.role == "describe":
        emit(
            {
                "system": system,
                "version": version("sluicegate"),
                "default_concurrency": "10 thread slots",
                "notes": f"{DEFAULT}; crash recovery: on the same host at once (a dead "
                "worker's lock file frees, and a live or restarted worker of the host "
                "returns its jobs within a second); across hosts by the lease, 30 s by default",
            }
        )
        return
    url = broker_url(args.broker)
    if args.role == "worker":
        run_worker(args, url)
        return
    app.use_broker(url)
    try:
        if args.role == "setup":
            app.broker  # noqa: B018 - opening the broker runs its migrations
            emit({})
        elif args.role == "enqueue":
            enqueue(args)
        else:
            latency(args)
    finally:
        app.close()
