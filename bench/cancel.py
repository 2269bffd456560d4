"""Cancelling running work: from ``app.cancel()`` returning to the attempt stopped, and to
the slot running the next job, per pool model, on a real worker process.

One worker with three 1-slot pools (async, thread, process) and a 30 s lease, so only the
cancel notice (NOTIFY on PostgreSQL, the doorbell on SQLite) can make it prompt: the
heartbeat would come 10 s later. Each round: a holder job runs, a quick job waits behind
it in the same queue, the holder is cancelled; measured from the cancel's return to
- stopped: the holder's coroutine or thread stamping its stop (async, thread), or its
  child's pid gone (process: killed, polled every millisecond);
- next: the quick job's body starting in the freed slot (process: a fresh child imports
  the app first).
Prints medians and p90 in ms; asserts nothing.

    .venv/bin/python bench/cancel.py [--postgres URL] [--rounds N]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import cancelbenchapp as tasks  # noqa: E402
from pgscratch import scratch_schema, server_info  # noqa: E402
from sluicegate import App  # noqa: E402
from sluicegate.job import JobState  # noqa: E402

LEASE = 30.0
POOLS = ["aio=aio:1:async", "thr=thr:1:thread", "proc=proc:1:process"]
MODELS = {  # model: (holder, quick job, its queue)
    "async": (tasks.aio_hold, tasks.amark, "aio"),
    "thread": (tasks.thr_hold, tasks.mark, "thr"),
    "process": (tasks.proc_hold, tasks.mark, "proc"),
}


def wait_until(predicate: Callable[[], object], timeout: float = 60.0, poll: float = 0.001) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError("timed out")
        time.sleep(poll)


def read_stamp(path: Path) -> float:
    wait_until(lambda: path.exists() and path.read_text())
    return float(path.read_text())


@contextlib.contextmanager
def worker(url: str, log: Path) -> Iterator[subprocess.Popen[bytes]]:
    env = {**os.environ, "PYTHONPATH": str(HERE)}
    command = [sys.executable, "-m", "sluicegate.cli", "worker", "cancelbenchapp:app"]
    command += [f"--pool={p}" for p in POOLS] + ["--lease", str(LEASE), "--broker", url]
    with log.open("wb") as out:
        process = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: b"started" in log.read_bytes(), poll=0.05)
        yield process
    except BaseException:
        print(log.read_text()[-3000:], file=sys.stderr)  # what the worker said
        raise
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:  # a job it was still running after an error
            process.kill()
            process.wait()


def pid_gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] == "Z"
    except OSError:
        return True


def one_round(app: App, model: str, folder: Path) -> tuple[float, float]:
    holder, quick, queue = MODELS[model]
    held = app.enqueue(holder.name, [str(folder)], queue=queue)
    read_stamp(folder / f"{held.id}.began")
    pid = int((folder / f"{held.id}.pid").read_text()) if model == "process" else 0
    nxt = app.enqueue(quick.name, [str(folder)], queue=queue)
    time.sleep(0.05)  # the worker idle again, its lease keeper asleep
    app.cancel(held.id, by="bench")
    t0 = time.time()
    if model == "process":
        wait_until(lambda: pid_gone(pid))
        stopped = time.time()
    else:
        stopped = read_stamp(folder / f"{held.id}.stopped")
    began = read_stamp(folder / f"{nxt.id}.began")
    assert app.get_job(held.id).state is JobState.CANCELLED
    return (stopped - t0) * 1000, (began - t0) * 1000


def measure(url: str, rounds: int, name: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        app = App(broker=url, config=False)
        app.broker  # noqa: B018  (migrate before the worker starts)
        with worker(url, folder / "worker.log"):
            for model in MODELS:
                one_round(app, model, folder)  # warm-up: not counted
                figures = [one_round(app, model, folder) for _ in range(rounds)]
                stop = [f[0] for f in figures]
                nxt = [f[1] for f in figures]
                print(
                    f"{name:10} {model:8} stopped p50 {statistics.median(stop):7.1f} "
                    f"p90 {pct(stop, 0.9):7.1f} ms   next job p50 {statistics.median(nxt):7.1f} "
                    f"p90 {pct(nxt, 0.9):7.1f} ms   (load {os.getloadavg()[0]:.2f})"
                )
        app.close()


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--postgres", help="also on this PostgreSQL (a scratch schema)")
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    print(f"lease {LEASE:g} s (heartbeat every {LEASE / 3:g} s); {args.rounds} rounds per model")
    with tempfile.TemporaryDirectory() as tmp:
        measure(f"sqlite:///{tmp}/jobs.db", args.rounds, "sqlite")
    if args.postgres:
        print(f"postgresql: {server_info(args.postgres)}")
        with scratch_schema(args.postgres) as url:
            measure(url, args.rounds, "postgresql")


if __name__ == "__main__":
    main()
