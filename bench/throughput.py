"""Throughput, latency and CPU benchmark for sluicegate. Prints figures; asserts nothing.

    .venv/bin/python bench/throughput.py [--broker URL] [--jobs N] [--repeat R]

Measures, each ``--repeat`` times (medians reported), on a fresh temporary SQLite
file per measurement unless ``--broker`` names one:

1. one-by-one enqueue: ``task.enqueue()`` in a loop, N no-op jobs -> jobs/s
2. bulk enqueue: one ``task.enqueue_many()`` of N no-op jobs -> jobs/s
3. drain: N queued no-op jobs run by ONE real worker subprocess with one pool of 8
   thread slots (``--burst``); rate = N / (first job's start .. last job's finish) from
   the broker's started_at/finished_at, plus the worker's CPU per 1,000 jobs (raw, and
   net of an idle start/exit run with 0 jobs)
4. enqueue-to-start latency with an idle worker: one job at a time, ~20 ms apart; the
   task returns time.time() at its start -> p50 / p99 / max
5. idle CPU: the same worker with no work for a few seconds -> % of one core

See bench/README.md for what each figure means and a recorded run.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import platform
import resource
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

import benchapp  # noqa: E402
from sluicegate.job import JobState  # noqa: E402

POOL = "default=default:8"  # one pool, 8 thread slots, over queue "default"
CLK_TCK = os.sysconf("SC_CLK_TCK")
CPU_KEYS = ("user", "sys")

TARGETS = {
    "enqueue_one": ">= 3,000 jobs/s",
    "enqueue_bulk": ">= 50,000 jobs/s",
    "drain": ">= 4,000 jobs/s",
    "cpu_net": "<= 0.25 s",
    "latency_p50": "< 10 ms",
    "idle_cpu": "< 2 %",
}
PEERS = [
    ("huey, SQLite storage", "~2,100 jobs/s"),
    ("hand-written loop, one job per transaction", "~1,700 jobs/s"),
    ("hand-written loop, 100 jobs per transaction", "~49,000 jobs/s"),
]


# ---- small helpers --------------------------------------------------------------
def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty list."""
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def children_cpu() -> float:
    """User + system CPU seconds of all waited-for child processes so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def process_cpu(pid: int) -> float:
    """utime + stime of a running process, in seconds, from /proc/PID/stat."""
    text = Path(f"/proc/{pid}/stat").read_text()
    fields = text[text.rindex(")") + 2 :].split()  # fields from #3 (state) on
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # #14 utime, #15 stime


def is_memory(url: str) -> bool:
    return url.startswith("memory:")


@contextlib.contextmanager
def broker_url(given: str | None) -> Iterator[str]:
    """The broker to use for one measurement: the given URL, or a fresh SQLite file."""
    if given:
        yield given
        return
    folder = tempfile.mkdtemp(prefix="sluicegate-bench-")
    try:
        yield f"sqlite:///{folder}/bench.db"  # folder is absolute: sqlite:////tmp/...
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def open_app(url: str) -> None:
    """Point the benchmark's app at ``url`` and open the broker now (not inside a timing)."""
    benchapp.app.use_broker(url)
    benchapp.app.broker  # noqa: B018


class Worker:
    """A real ``sluicegate worker benchapp:app`` subprocess, its log in a temporary file."""

    def __init__(self, url: str, *, burst: bool) -> None:
        self.log = tempfile.NamedTemporaryFile(  # noqa: SIM115 - closed in close()
            prefix="sluicegate-bench-worker-", suffix=".log"
        )
        cmd = [sys.executable, "-m", "sluicegate.cli", "worker", "benchapp:app",
               "--pool", POOL, "--broker", url]  # fmt: skip
        if burst:
            cmd.append("--burst")
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [
            str(BENCH_DIR), os.environ.get("PYTHONPATH")]))}  # fmt: skip
        self.started = time.perf_counter()
        self.proc = subprocess.Popen(
            cmd, cwd=BENCH_DIR, env=env, stdin=subprocess.DEVNULL,
            stdout=self.log, stderr=subprocess.STDOUT,
        )  # fmt: skip

    def log_text(self) -> str:
        return Path(self.log.name).read_text(errors="replace")

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Until the worker logs that it started (pools up, subscribed to wake-ups)."""
        deadline = time.monotonic() + timeout
        while " started: " not in self.log_text():
            if self.proc.poll() is not None:
                raise RuntimeError(f"worker exited early:\n{self.log_text()[-2000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"worker not ready after {timeout:g} s")
            time.sleep(0.01)

    def wait(self, timeout: float) -> float:
        """Wait for exit; returns wall seconds since spawn."""
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise RuntimeError(f"worker did not finish within {timeout:g} s") from None
        if self.proc.returncode != 0:
            raise RuntimeError(f"worker exited {self.proc.returncode}:\n{self.log_text()[-2000:]}")
        return time.perf_counter() - self.started

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def close(self) -> None:
        self.stop()
        self.log.close()


# ---- measurements ---------------------------------------------------------------
@dataclass
class Results:
    enqueue_one: list[float] = field(default_factory=list)  # jobs/s
    enqueue_bulk: list[float] = field(default_factory=list)  # jobs/s
    drain: list[float] = field(default_factory=list)  # jobs/s (broker timestamps)
    drain_wall: list[float] = field(default_factory=list)  # jobs/s incl. interpreter start
    drain_cpu: list[float] = field(default_factory=list)  # CPU s of the whole worker run
    idle_start_cpu: list[float] = field(default_factory=list)  # CPU s of a 0-job run
    lat_p50: list[float] = field(default_factory=list)  # seconds
    lat_p99: list[float] = field(default_factory=list)
    lat_max: list[float] = field(default_factory=list)
    enqueue_call_p50: list[float] = field(default_factory=list)
    idle_cpu: list[float] = field(default_factory=list)  # fraction of one core
    notes: list[str] = field(default_factory=list)


def measure_enqueue_one(url: str, n: int) -> float:
    open_app(url)
    enqueue = benchapp.parked.enqueue
    start = time.perf_counter()
    for _ in range(n):
        enqueue()
    elapsed = time.perf_counter() - start
    benchapp.app.close()
    return n / elapsed


def measure_enqueue_bulk(url: str, n: int) -> float:
    open_app(url)
    calls = [[] for _ in range(n)]
    start = time.perf_counter()
    benchapp.parked.enqueue_many(calls)
    elapsed = time.perf_counter() - start
    benchapp.app.close()
    return n / elapsed


def run_burst_worker(url: str, timeout: float) -> tuple[float, float]:
    """Run a burst worker to exit; returns (wall seconds, CPU seconds) of that child."""
    cpu_before = children_cpu()
    worker = Worker(url, burst=True)
    try:
        wall = worker.wait(timeout)
    finally:
        worker.close()
    return wall, children_cpu() - cpu_before


def measure_drain(url: str, n: int) -> tuple[float, float, float]:
    """Returns (jobs/s from broker timestamps, jobs/s wall incl. start-up, worker CPU s)."""
    open_app(url)
    ids = {job.id for job in benchapp.noop.enqueue_many([[] for _ in range(n)])}
    benchapp.app.close()
    wall, cpu = run_burst_worker(url, timeout=max(120.0, n / 50))
    open_app(url)
    done = benchapp.app.broker.list_jobs(JobState.SUCCEEDED, "default", limit=n + 1000)
    benchapp.app.close()
    ours = [j for j in done if j.id in ids]
    if len(ours) != n:
        raise RuntimeError(f"drain: {len(ours)} of {n} jobs succeeded")
    # A no-op's start and ack are usually recorded in one write, where started_at is set
    # to the ack time; the window is then first ack .. last ack (one job's run short).
    first = min(j.started_at or j.finished_at or 0.0 for j in ours)
    last = max(j.finished_at or 0.0 for j in ours)
    return n / (last - first), n / wall, cpu


def measure_latency_and_idle(
    url: str, count: int, spacing: float, idle_seconds: float
) -> tuple[list[float], list[float], float]:
    """Returns (latencies s, enqueue call durations s, idle CPU fraction of one core)."""
    open_app(url)  # creates the schema before the worker starts
    worker = Worker(url, burst=False)
    try:
        worker.wait_ready()
        get_job = benchapp.app.get_job

        def one() -> tuple[float, float]:
            time.sleep(spacing)  # the worker goes back to waiting
            t0 = time.time()
            job = benchapp.stamp.enqueue()
            t1 = time.time()
            deadline = time.monotonic() + 30
            while True:
                current = get_job(job.id)
                if current.state is JobState.SUCCEEDED:
                    return float(current.result) - t0, t1 - t0
                if current.finished or time.monotonic() > deadline:
                    raise RuntimeError(f"latency job {job.id} is {current.state}")
                time.sleep(0.002)

        for _ in range(5):  # warm-up, not counted
            one()
        samples = [one() for _ in range(count)]
        time.sleep(1.0)  # let the last job's bookkeeping settle
        cpu0, t0 = process_cpu(worker.proc.pid), time.monotonic()
        time.sleep(idle_seconds)
        cpu1, t1 = process_cpu(worker.proc.pid), time.monotonic()
    finally:
        worker.close()
        benchapp.app.close()
    return [s[0] for s in samples], [s[1] for s in samples], (cpu1 - cpu0) / (t1 - t0)


# ---- reporting ------------------------------------------------------------------
def git_describe() -> str:
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=BENCH_DIR, capture_output=True,
            text=True, check=True,
        ).stdout.strip()  # fmt: skip
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "../src"], cwd=BENCH_DIR,
            capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + (" (src modified)" if dirty else "")


def machine() -> str:
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    return (
        f"nproc {affinity or os.cpu_count()}, Python {platform.python_version()} "
        f"({platform.python_implementation()}), SQLite {sqlite3.sqlite_version}, "
        f"{platform.system()} {platform.release()} {platform.machine()}, commit {git_describe()}"
    )


def verdict(value: float, ok: Callable[[float], bool]) -> str:
    if math.isnan(value):
        return "n/a"
    return "met" if ok(value) else "MISSED"


def load() -> str:
    """1-minute load average: on a shared machine, other work skews every figure."""
    return f"{os.getloadavg()[0]:.2f}" if hasattr(os, "getloadavg") else "n/a"


def print_table(r: Results, args: argparse.Namespace, broker: str, load_before: str) -> None:
    n = args.jobs
    one, bulk, drain = median(r.enqueue_one), median(r.enqueue_bulk), median(r.drain)
    cpu_raw = median([c / n * 1000 for c in r.drain_cpu])
    startup = median(r.idle_start_cpu)
    cpu_net = median([(c - startup) / n * 1000 for c in r.drain_cpu])
    p50, p99, pmax = (median(v) * 1000 for v in (r.lat_p50, r.lat_p99, r.lat_max))
    idle = median(r.idle_cpu) * 100
    rows = [
        ("enqueue, one by one (task.enqueue loop)", f"{one:,.0f} jobs/s",
         TARGETS["enqueue_one"], verdict(one, lambda v: v >= 3000)),
        ("enqueue, bulk (task.enqueue_many)", f"{bulk:,.0f} jobs/s",
         TARGETS["enqueue_bulk"], verdict(bulk, lambda v: v >= 50000)),
        ("drain, 1 worker x 8 thread slots", f"{drain:,.0f} jobs/s",
         TARGETS["drain"], verdict(drain, lambda v: v >= 4000)),
        ("  same, wall incl. interpreter start-up", f"{median(r.drain_wall):,.0f} jobs/s", "", ""),
        ("worker CPU per 1,000 no-op jobs, net", f"{cpu_net:.3f} s",
         TARGETS["cpu_net"], verdict(cpu_net, lambda v: v <= 0.25)),
        (f"  raw (start/exit alone costs {startup:.2f} s)", f"{cpu_raw:.3f} s", "", ""),
        ("idle enqueue-to-start, p50", f"{p50:.2f} ms",
         TARGETS["latency_p50"], verdict(p50, lambda v: v < 10)),
        ("  p99", f"{p99:.2f} ms", "", ""),
        ("  max", f"{pmax:.2f} ms", "", ""),
        ("  (enqueue call itself, p50)", f"{median(r.enqueue_call_p50) * 1000:.2f} ms", "", ""),
        ("idle worker CPU", f"{idle:.2f} % of a core",
         TARGETS["idle_cpu"], verdict(idle, lambda v: v < 2)),
    ]  # fmt: skip
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    head = ("measure", "median", "target", "")
    widths = [max(w, len(h)) for w, h in zip(widths, head, strict=True)]
    line = "  ".join("-" * w for w in widths)

    def fmt(row: tuple[str, str, str, str]) -> str:
        a, b, c, d = row
        return f"{a:<{widths[0]}}  {b:>{widths[1]}}  {c:<{widths[2]}}  {d}".rstrip()

    print()
    print(f"sluicegate throughput benchmark: {n:,} jobs, median of {args.repeat} run(s)")
    print(f"machine: {machine()}")
    print(f"broker:  {broker}")
    print(f"load:    1-min load average {load_before} before, {load()} after")
    print(line)
    print(fmt(head))
    print(line)
    for row in rows:
        print(fmt(row))
    print(line)
    print("peer reference figures quoted in the issue (not measured here):")
    for name, figure in PEERS:
        print(f"  {name:<45} {figure}")
    for note in r.notes:
        print(f"note: {note}")


def run(args: argparse.Namespace) -> Results:
    r = Results()
    n, reps = args.jobs, args.repeat

    def step(label: str, fn: Callable[[], str]) -> None:
        for i in range(reps):
            print(f"[{label} {i + 1}/{reps}] {fn()}", flush=True)

    def one() -> str:
        with broker_url(args.broker) as url:
            r.enqueue_one.append(measure_enqueue_one(url, n))
        return f"{r.enqueue_one[-1]:,.0f} jobs/s"

    def bulk() -> str:
        with broker_url(args.broker) as url:
            r.enqueue_bulk.append(measure_enqueue_bulk(url, n))
        return f"{r.enqueue_bulk[-1]:,.0f} jobs/s"

    step("enqueue one-by-one", one)
    step("enqueue bulk", bulk)
    if args.broker and is_memory(args.broker):
        r.notes.append(
            "memory:// is per process: worker measurements (drain, latency, idle) skipped"
        )
        return r

    def idle_start() -> str:
        with broker_url(args.broker) as url:
            open_app(url)  # schema exists, so the worker's start-up is not a migration
            benchapp.app.close()
            r.idle_start_cpu.append(run_burst_worker(url, timeout=60)[1])
        return f"worker start/exit with 0 jobs: {r.idle_start_cpu[-1]:.3f} s CPU"

    def drain() -> str:
        with broker_url(args.broker) as url:
            rate, wall_rate, cpu = measure_drain(url, n)
        r.drain.append(rate)
        r.drain_wall.append(wall_rate)
        r.drain_cpu.append(cpu)
        return f"{rate:,.0f} jobs/s (wall {wall_rate:,.0f}/s), worker CPU {cpu:.2f} s"

    def latency() -> str:
        with broker_url(args.broker) as url:
            lat, calls, idle = measure_latency_and_idle(
                url, args.latency_jobs, args.spacing / 1000, args.idle_seconds
            )
        r.lat_p50.append(percentile(lat, 50))
        r.lat_p99.append(percentile(lat, 99))
        r.lat_max.append(max(lat))
        r.enqueue_call_p50.append(percentile(calls, 50))
        r.idle_cpu.append(idle)
        return (
            f"p50 {r.lat_p50[-1] * 1000:.2f} ms, p99 {r.lat_p99[-1] * 1000:.2f} ms, "
            f"max {r.lat_max[-1] * 1000:.2f} ms; idle CPU {idle * 100:.2f} % of a core"
        )

    step("idle start/exit", idle_start)
    step("drain", drain)
    step("latency + idle", latency)
    return r


def main() -> None:
    parser = argparse.ArgumentParser(
        description="sluicegate throughput, latency and CPU benchmark (prints; asserts nothing)"
    )
    parser.add_argument("--broker", metavar="URL", default=None,
                        help="broker URL to use for every measurement (default: a fresh "
                        "temporary SQLite file per measurement); use a scratch database")  # fmt: skip
    parser.add_argument("--jobs", type=int, default=10_000, metavar="N",
                        help="jobs per enqueue and drain measurement (default 10000)")  # fmt: skip
    parser.add_argument("--repeat", type=int, default=3, metavar="R",
                        help="runs per measurement; medians are reported (default 3)")  # fmt: skip
    parser.add_argument("--latency-jobs", type=int, default=200, metavar="N",
                        help="jobs per latency run, one at a time (default 200)")  # fmt: skip
    parser.add_argument("--spacing", type=float, default=20.0, metavar="MS",
                        help="pause before each latency job, ms (default 20)")  # fmt: skip
    parser.add_argument("--idle-seconds", type=float, default=5.0, metavar="S",
                        help="how long idle CPU is sampled (default 5)")  # fmt: skip
    args = parser.parse_args()
    if args.jobs < 1 or args.repeat < 1 or args.latency_jobs < 1 or args.idle_seconds <= 0:
        parser.error("--jobs, --repeat, --latency-jobs and --idle-seconds must be positive")
    broker = args.broker or "fresh temporary SQLite file per measurement (synchronous=full)"
    load_before = load()
    print(f"machine: {machine()}; load average {load_before}", flush=True)
    results = run(args)
    print_table(results, args, broker, load_before)


if __name__ == "__main__":
    main()
