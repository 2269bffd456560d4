"""Pool benchmark: the three concurrency models, and what separate pools buy. Prints figures;
asserts nothing.

    .venv/bin/python bench/pools.py [--repeat 3] [--jobs 10000] [--cpu-jobs 200]

Each measurement runs a real worker subprocess (``sluicegate worker pools:app --pool ...``)
on a fresh temporary SQLite file. The worker is started and left idle first (a process
pool's children also run one warm-up job each), then the jobs are enqueued, so neither
interpreter nor child start-up is measured. Rates are N / (first job's ``started_at`` ..
last job's ``finished_at``), the broker's own columns; waits are (the task body's own start
time) - ``enqueued_at``. Every figure is the median of ``--repeat`` runs.

1. async: N jobs that each ``await asyncio.sleep(0.02)`` on 50 async slots, as a share of
   the Little's-law bound 50 / 0.02 s = 2,500 jobs/s
2. thread: the same with ``time.sleep(0.02)`` on 50 thread slots
3. process: CPU-bound jobs (~20 ms of SHA-256, calibrated here) on 1 process slot, then on
   2; the speed-up of 2 over 1
4. isolation: long jobs (2 s) and 100 short ones (10 ms) arriving over 2 s, with one shared
   pool of 10 thread slots over both queues vs separate pools (long 8, short 2): the short
   jobs' p95 wait. Once with 8 long jobs (the shared pool then still has 2 free slots, as
   many as the separate short pool) and once with 20 (a backlog that can fill any pool).

This file is also the app the worker subprocesses load (``pools:app``, with ``bench/`` on
PYTHONPATH); importing it opens no broker and runs nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import hashlib
import math
import os
import platform
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from sluicegate import App
from sluicegate.job import Job, JobState

BENCH_DIR = Path(__file__).resolve().parent
CLK_TCK = os.sysconf("SC_CLK_TCK")
SLEEP = 0.02  # seconds per job in the async and thread measurements
IO_SLOTS = 50
BOUND = IO_SLOTS / SLEEP  # Little's law: slots / mean duration = 2,500 jobs/s
CPU_SECONDS = 0.02  # CPU per job in the process measurement
LONG, SHORT, SHORTS, ARRIVALS = 2.0, 0.01, 100, 2.0  # isolation: durations, count, spread
SHARED_POOL = ["--pool", "shared=long,short:10"]
SEPARATE_POOLS = ["--pool", "long=long:8", "--pool", "short=short:2"]
PEERS = [
    ("Dramatiq, threads, the same 50 x 20 ms test", "73 % of the bound"),
    ("Celery, thread pool, the same test", "20 % of the bound"),
]

app = App()


@app.task(queue="aio")
async def nap_async(seconds: float) -> float:
    """Returns how long the sleep really took (the job's true duration, for Little's law)."""
    began = time.perf_counter()
    await asyncio.sleep(seconds)
    return time.perf_counter() - began


@app.task(queue="thr")
def nap(seconds: float) -> float:
    began = time.perf_counter()
    time.sleep(seconds)
    return time.perf_counter() - began


def hash_rounds(rounds: int) -> str:
    """``rounds`` x 64 KiB of SHA-256: the CPU work of one process-pool job."""
    data = b"sluicegate" * 6554
    digest = hashlib.sha256()
    for _ in range(rounds):
        digest.update(data)
    return digest.hexdigest()


@app.task(queue="cpu")
def burn(rounds: int) -> list[float]:
    """Returns [wall, CPU] seconds of the body: CPU / wall is the share of a core it got."""
    wall, cpu = time.perf_counter(), time.process_time()
    hash_rounds(rounds)
    return [time.perf_counter() - wall, time.process_time() - cpu]


@app.task(queue="cpu")
def warm() -> None:
    """One per child before the clock starts: the child has imported the app once it ran."""


@app.task(queue="long")
def long_job(seconds: float) -> float:
    started = time.time()
    time.sleep(seconds)
    return started


@app.task(queue="short")
def short_job(seconds: float) -> float:
    started = time.time()
    time.sleep(seconds)
    return started


# ---- helpers ------------------------------------------------------------------------
def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty list."""
    ordered = sorted(values)
    return ordered[max(1, math.ceil(q / 100 * len(ordered))) - 1]


def load() -> str:
    return f"{os.getloadavg()[0]:.2f}"


def machine() -> str:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    try:
        commit = subprocess.run(
            ["git", "-C", str(BENCH_DIR), "describe", "--always", "--dirty"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown"
    return (
        f"nproc {cores}, Python {platform.python_version()}, SQLite {sqlite3.sqlite_version}, "
        f"{platform.system()} {platform.release()}, commit {commit}"
    )


def seconds_per_round() -> float:
    """CPU seconds of one ``hash_rounds`` round here: the fastest of a few timings."""
    hash_rounds(10)
    best = float("inf")
    for _ in range(5):
        began = time.process_time()
        hash_rounds(50)
        best = min(best, (time.process_time() - began) / 50)
    return best


@contextlib.contextmanager
def fresh_broker() -> Iterator[str]:
    """A fresh temporary SQLite file, opened by the benchmark's app; removed afterwards."""
    folder = tempfile.mkdtemp(prefix="sluicegate-bench-pools-")
    url = f"sqlite:///{folder}/bench.db"
    app.use_broker(url)
    app.broker  # noqa: B018 - create the schema before the worker starts
    try:
        yield url
    finally:
        app.close()
        shutil.rmtree(folder, ignore_errors=True)


class Worker:
    """A real ``sluicegate worker pools:app`` subprocess, its log in a temporary file."""

    def __init__(self, url: str, pools: list[str]) -> None:
        self.log = tempfile.NamedTemporaryFile(  # noqa: SIM115 - closed in close()
            prefix="sluicegate-bench-pools-", suffix=".log"
        )
        cmd = [sys.executable, "-m", "sluicegate.cli", "worker", "pools:app", *pools]
        cmd += ["--broker", url, "--no-prune"]
        path = os.pathsep.join(filter(None, [str(BENCH_DIR), os.environ.get("PYTHONPATH")]))
        self.proc = subprocess.Popen(
            cmd,
            cwd=BENCH_DIR,
            env={**os.environ, "PYTHONPATH": path},
            stdin=subprocess.DEVNULL,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 60
        while " started: " not in self.text():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.close()
                raise RuntimeError(f"worker did not start:\n{self.text()[-2000:]}")
            time.sleep(0.01)

    def text(self) -> str:
        return Path(self.log.name).read_text(errors="replace")

    def cpu(self) -> float:
        """CPU seconds (user + system) the worker process has used so far (Linux)."""
        stat = Path(f"/proc/{self.proc.pid}/stat").read_text()
        fields = stat[stat.rindex(")") + 2 :].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def wait_done(jobs: list[Job], timeout: float, before: int = 0) -> list[Job]:
    """Until every job in ``jobs`` (one queue, where ``before`` jobs had already succeeded)
    succeeded; returns their final rows."""
    queue, ids = jobs[0].queue, {j.id for j in jobs}
    deadline = time.monotonic() + timeout
    while True:
        counts = app.broker.stats().queues[queue].counts
        if counts.get(JobState.DEAD, 0):
            raise RuntimeError(f"a job on queue {queue!r} is dead")
        if counts.get(JobState.SUCCEEDED, 0) >= len(ids) + before:
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"jobs on queue {queue!r} not done after {timeout:g} s")
        time.sleep(0.1)
    done = app.broker.list_jobs(JobState.SUCCEEDED, queue, limit=len(ids) + 1000)
    ours = [j for j in done if j.id in ids]
    if len(ours) != len(ids):
        raise RuntimeError(f"{len(ours)} of {len(ids)} jobs on {queue!r} succeeded")
    return ours


def rate(jobs: list[Job]) -> float:
    """Jobs per second over the first start .. last finish, from the broker's columns."""
    first = min(j.started_at or j.finished_at or 0.0 for j in jobs)
    last = max(j.finished_at or 0.0 for j in jobs)
    return len(jobs) / (last - first)


# ---- measurements ---------------------------------------------------------------------
def drain(
    pool: str, enqueue: Callable[[], list[Job]], warm_ups: int = 0
) -> tuple[list[Job], float]:
    """Start a worker with ``pool``, warm its children, enqueue, wait. Returns the jobs and
    the share of one core the worker process (not its children) used meanwhile."""
    with fresh_broker() as url:
        worker = Worker(url, ["--pool", pool])
        try:
            if warm_ups:
                wait_done(warm.enqueue_many([[] for _ in range(warm_ups)]), timeout=60)
            jobs = enqueue()
            cpu, wall = worker.cpu(), time.perf_counter()
            done = wait_done(jobs, timeout=300, before=warm_ups)
            return done, (worker.cpu() - cpu) / (time.perf_counter() - wall)
        finally:
            worker.close()


def measure_io(model: str, n: int, notes: dict[str, list[float]]) -> float:
    """jobs/s; notes the jobs' mean true duration (s) and the worker's CPU use."""
    task, queue = (nap_async, "aio") if model == "async" else (nap, "thr")
    jobs, busy = drain(
        f"{queue}={queue}:{IO_SLOTS}:{model}", lambda: task.enqueue_many([[SLEEP]] * n)
    )
    notes["body"].append(statistics.fmean(j.result for j in jobs))
    notes["busy"].append(busy)
    return rate(jobs)


def measure_cpu(slots: int, n: int, rounds: int, notes: dict[str, list[float]]) -> float:
    """jobs/s; notes the share of a core the jobs got while running, and the worker's."""
    jobs, busy = drain(
        f"cpu=cpu:{slots}:process", lambda: burn.enqueue_many([[rounds]] * n), warm_ups=slots
    )
    notes["share"].append(sum(j.result[1] for j in jobs) / sum(j.result[0] for j in jobs))
    notes["busy"].append(busy)
    return rate(jobs)


def measure_isolation(pools: list[str], longs: int) -> float:
    """p95 wait (ms) of the short jobs, arriving evenly over ARRIVALS s after the long ones."""
    with fresh_broker() as url:
        worker = Worker(url, pools)
        try:
            long_jobs = long_job.enqueue_many([[LONG]] * longs)
            began = time.monotonic()
            shorts = []
            for i in range(SHORTS):
                time.sleep(max(0.0, began + 0.1 + i * ARRIVALS / SHORTS - time.monotonic()))
                shorts.append(short_job.enqueue(SHORT))
            done = wait_done(shorts, timeout=120)
            wait_done(long_jobs, timeout=120)
        finally:
            worker.close()
    return percentile([(j.result - j.enqueued_at) * 1000 for j in done], 95)


# ---- the run ------------------------------------------------------------------------------
def repeat(label: str, times: int, fn: Callable[[], float], unit: str) -> list[float]:
    values = []
    for i in range(times):
        values.append(fn())
        print(f"[{label} {i + 1}/{times}] {values[-1]:,.1f} {unit}  (load {load()})", flush=True)
    return values


def row(label: str, shown: str, target: str = "", met: bool | None = None) -> list[str]:
    return [label, shown, target, "" if met is None else ("met" if met else "MISSED")]


def print_rows(rows: list[list[str]]) -> None:
    head = ["measure", "median", "target", ""]
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(4)]
    line = "  ".join("-" * w for w in widths)
    print(line)
    for r in [head, None, *rows]:
        if r is None:
            print(line)
            continue
        print(f"{r[0]:<{widths[0]}}  {r[1]:>{widths[1]}}  {r[2]:<{widths[2]}}  {r[3]}".rstrip())
    print(line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--repeat",
        type=int,
        default=3,
        metavar="R",
        help="runs per measurement; medians are reported (default 3)",
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=10_000,
        metavar="N",
        help="jobs per async and thread measurement (default 10000)",
    )
    parser.add_argument(
        "--cpu-jobs",
        type=int,
        default=200,
        metavar="N",
        help="jobs per process measurement (default 200)",
    )
    args = parser.parse_args()
    if min(args.repeat, args.jobs, args.cpu_jobs) < 1:
        parser.error("--repeat, --jobs and --cpu-jobs must be positive")
    r, n = args.repeat, args.jobs
    load_before = load()
    print(f"machine: {machine()}; load average {load_before}", flush=True)
    per_round = seconds_per_round()
    rounds = max(1, round(CPU_SECONDS / per_round))
    print(f"CPU job: {rounds} x 64 KiB of SHA-256 = {rounds * per_round * 1000:.1f} ms of CPU")

    notes: dict[str, dict[str, list[float]]] = {
        k: {"body": [], "busy": [], "share": []} for k in ("async", "thread", "cpu1", "cpu2")
    }
    aio = repeat(
        f"async {IO_SLOTS} slots", r, lambda: measure_io("async", n, notes["async"]), "jobs/s"
    )
    thr = repeat(
        f"thread {IO_SLOTS} slots", r, lambda: measure_io("thread", n, notes["thread"]), "jobs/s"
    )
    cpu1 = repeat(
        "process 1 slot", r, lambda: measure_cpu(1, args.cpu_jobs, rounds, notes["cpu1"]), "jobs/s"
    )
    cpu2 = repeat(
        "process 2 slots", r, lambda: measure_cpu(2, args.cpu_jobs, rounds, notes["cpu2"]), "jobs/s"
    )
    iso: dict[tuple[int, str], list[float]] = {}
    for longs in (8, 20):
        for layout, pools in (("shared", SHARED_POOL), ("separate", SEPARATE_POOLS)):
            label = f"isolation, {longs} long jobs, {layout}"
            run = functools.partial(measure_isolation, pools, longs)
            iso[(longs, layout)] = repeat(label, r, run, "ms p95 wait")

    a, t, c1, c2 = median(aio), median(thr), median(cpu1), median(cpu2)
    print()
    print(f"sluicegate pool benchmark, median of {r} run(s), fresh temporary SQLite file each")
    print(f"machine: {machine()}")
    print(f"load:    1-min load average {load_before} before, {load()} after")
    rows = []
    for model, value, target in (("async", a, 0.85), ("thread", t, 0.75)):
        body = median(notes[model]["body"])
        rows += [
            row(
                f"{model}, {n:,} x {SLEEP * 1000:g} ms sleeps, {IO_SLOTS} slots",
                f"{value:,.0f} jobs/s = {value / BOUND:.0%}",
                f">= {target:.0%} of {BOUND:,.0f}",
                value >= target * BOUND,
            ),
            row(
                f"  true mean job time {body * 1000:.1f} ms: bound {IO_SLOTS / body:,.0f} jobs/s",
                f"{value * body / IO_SLOTS:.0%} of it",
            ),
            row(
                "  worker process CPU while draining",
                f"{median(notes[model]['busy']):.0%} of a core",
            ),
        ]
    rows += [
        row(
            f"process, {args.cpu_jobs} x {rounds * per_round * 1000:.0f} ms CPU, 1 slot",
            f"{c1:,.1f} jobs/s",
            f"(bound {1 / (rounds * per_round):.1f})",
        ),
        row("  2 slots", f"{c2:,.1f} jobs/s"),
        row("  speed-up, 2 slots over 1", f"{c2 / c1:.2f}x", ">= 1.8x", c2 / c1 >= 1.8),
        row(
            "  share of a core each job got, 1 slot / 2 slots",
            f"{median(notes['cpu1']['share']):.0%} / {median(notes['cpu2']['share']):.0%}",
        ),
        row(
            "  worker process (parent) CPU, 1 slot / 2 slots",
            f"{median(notes['cpu1']['busy']):.0%} / {median(notes['cpu2']['busy']):.0%}",
        ),
    ]
    for longs in (8, 20):
        s, p = median(iso[(longs, "shared")]), median(iso[(longs, "separate")])
        rows += [
            row(f"short jobs' p95 wait, {longs} long jobs: shared 10", f"{s:,.0f} ms"),
            row("  separate long 8 + short 2", f"{p:,.0f} ms"),
        ]
    print_rows(rows)
    print(
        f"isolation: {SHORTS} short jobs ({SHORT * 1000:g} ms) arrive evenly over "
        f"{ARRIVALS:g} s, 0.1 s after the long jobs ({LONG:g} s) were enqueued; 8 long jobs "
        "leave the shared pool 2 free slots (as many as the separate short pool), 20 fill it"
    )
    print("peer reference figures quoted in the issue (not measured here):")
    for name, figure in PEERS:
        print(f"  {name:<48} {figure}")


if __name__ == "__main__":
    main()
