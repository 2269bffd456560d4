"""Throughput, latency and CPU benchmark for sluicegate. Prints figures; asserts nothing.

    .venv/bin/python bench/throughput.py [--broker URL] [--jobs N] [--repeat R] [--workers W]
    .venv/bin/python bench/throughput.py --broker 'postgresql://postgres@127.0.0.1/test?schema=bench'

Measures, each ``--repeat`` times (medians reported), on a fresh temporary SQLite
file per measurement unless ``--broker`` names one (PostgreSQL: a fresh schema per
measurement, named after the URL's ``schema=`` plus a random suffix, dropped afterwards):

1. one-by-one enqueue: ``task.enqueue()`` in a loop, N no-op jobs -> jobs/s
2. bulk enqueue: one ``task.enqueue_many()`` of N no-op jobs -> jobs/s
3. drain: N queued no-op jobs run by ONE real worker subprocess with one pool of 8
   thread slots (``--burst``); rate = N / (first job's start .. last job's finish) from
   the broker's started_at/finished_at, plus the worker's CPU per 1,000 jobs (raw, and
   net of an idle start/exit run with 0 jobs)
4. drain by W worker processes x 8 slots (``--workers``), and by the best documented
   configuration (``--best WxS``; PostgreSQL by default): the workers are started and
   idle first, then N jobs are enqueued in one transaction; rate = N / (first start ..
   last finish) from the broker's timestamps; CPU of all workers per 1,000 jobs
5. enqueue-to-start latency with an idle worker: one job at a time, ~20 ms apart; the
   task returns time.time() at its start -> p50 / p99 / max
6. idle CPU: the same worker with no work for a few seconds -> % of one core

``--search`` instead drains N jobs once per configuration of a grid (workers x slots)
and prints the table, to find the best configuration.

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
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

import benchapp  # noqa: E402
from pgscratch import is_postgres, listeners, scratch_schema, server_info  # noqa: E402
from sluicegate.job import JobState  # noqa: E402
from sluicegate.worker.pool import DEFAULT_POOL  # noqa: E402

SLOTS = 8  # the standard pool: "default=default:8", 8 thread slots over queue "default"
CLK_TCK = os.sysconf("SC_CLK_TCK")

Check = Callable[[float], bool]
# Targets from the issues, per broker kind: (text printed, test of the median).
TARGETS: dict[str, dict[str, tuple[str, Check]]] = {
    "sqlite": {
        "enqueue_one": (">= 3,000 jobs/s", lambda v: v >= 3000),
        "enqueue_bulk": (">= 50,000 jobs/s", lambda v: v >= 50000),
        "drain": (">= 4,000 jobs/s", lambda v: v >= 4000),
        "cpu_net": ("<= 0.25 s", lambda v: v <= 0.25),
        "latency_p50": ("< 10 ms", lambda v: v < 10),
        "idle_cpu": ("< 2 %", lambda v: v < 2),
    },
    "postgresql": {
        "drain": (">= 3,000 jobs/s", lambda v: v >= 3000),
        "best": (">= 5,600 jobs/s", lambda v: v >= 5600),
        "cpu_net": ("<= 0.25 s", lambda v: v <= 0.25),
        "latency_p50": ("< 3 ms", lambda v: v < 3),
        "latency_p99": ("< 10 ms", lambda v: v < 10),
        "idle_cpu": ("< 2 %", lambda v: v < 2),
    },
}
TARGETS["memory"] = TARGETS["sqlite"]
PEERS = {
    "sqlite": [
        ("huey, SQLite storage", "~2,100 jobs/s"),
        ("hand-written loop, one job per transaction", "~1,700 jobs/s"),
        ("hand-written loop, 100 jobs per transaction", "~49,000 jobs/s"),
    ],
    "postgresql": [
        ("PgQueuer", "~2,800 jobs/s"),
        ("PgQueuer 1.6 drain at its defaults (issue 16)", "~6,458 jobs/s"),
        ("PgQueuer 1.6 drain, 8-way (issue 16)", "~2,240 jobs/s"),
        ("Procrastinate", "~160 jobs/s"),
        ("Celery on Redis", "~600 jobs/s"),
        ("hand-written SKIP LOCKED loop, 1 job per transaction", "~1,400 jobs/s"),
        ("hand-written SKIP LOCKED loop, 100 jobs per transaction", "~23,000 jobs/s"),
        ("idle enqueue-to-start p50, PgQueuer and Celery", "~5 ms"),
    ],
}
PEERS["memory"] = PEERS["sqlite"]
# The best configuration found with --search on the recorded machine (bench/README.md).
BEST = {"postgresql": "2x32"}
SEARCH_GRID = ["1x8", "1x16", "1x32", "1x64", "2x8", "2x16", "2x32", "2x64", "4x8", "4x16", "4x32"]


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


def kind_of(url: str | None) -> str:
    """ "sqlite" (also the default), "postgresql" or "memory"."""
    if is_postgres(url):
        return "postgresql"
    return "memory" if url and url.startswith("memory:") else "sqlite"


def parse_config(text: str) -> tuple[int, int]:
    """``WxS`` -> (worker processes, slots per worker), e.g. ``2x32``."""
    workers, sep, slots = text.lower().partition("x")
    try:
        w, s = int(workers), int(slots)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected WORKERSxSLOTS like 2x32, not {text!r}"
        ) from None
    if not sep or w < 1 or s < 1:
        raise argparse.ArgumentTypeError(f"expected WORKERSxSLOTS like 2x32, not {text!r}")
    return w, s


@contextlib.contextmanager
def broker_url(given: str | None) -> Iterator[str]:
    """The broker for one measurement: a fresh PostgreSQL schema (dropped afterwards), the
    given URL (SQLite, memory), or a fresh temporary SQLite file."""
    if is_postgres(given):
        with scratch_schema(given) as url:  # type: ignore[arg-type]
            yield url
        return
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

    def __init__(
        self, url: str, *, burst: bool, slots: int | None = SLOTS, extra: tuple[str, ...] = ()
    ) -> None:
        self.log = tempfile.NamedTemporaryFile(  # noqa: SIM115 - closed in close()
            prefix="sluicegate-bench-worker-", suffix=".log"
        )
        cmd = [sys.executable, "-m", "sluicegate.cli", "worker", "benchapp:app"]
        if slots is not None:  # None: the worker's default pool
            cmd += ["--pool", f"default=default:{slots}"]
        cmd += ["--broker", url]
        if burst:
            cmd.append("--burst")
        cmd += extra
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(
                filter(None, [str(BENCH_DIR), os.environ.get("PYTHONPATH")])
            ),
        }
        self.started = time.perf_counter()
        self.proc = subprocess.Popen(
            cmd,
            cwd=BENCH_DIR,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )

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


def close_all(workers: list[Worker]) -> None:
    """SIGTERM every worker first, then wait for each: they shut down in parallel."""
    for worker in workers:
        if worker.proc.poll() is None:
            worker.proc.send_signal(signal.SIGTERM)
    for worker in workers:
        worker.close()


def wait_listening(url: str, workers: int, timeout: float = 15.0) -> None:
    """Until every worker can hear an enqueue (PostgreSQL: its LISTEN is in place)."""
    if not is_postgres(url):
        time.sleep(0.2)  # SQLite's watcher thread starts with the subscription
        return
    deadline = time.monotonic() + timeout
    while listeners(url) < workers:
        if time.monotonic() > deadline:
            raise RuntimeError(f"fewer than {workers} worker(s) LISTENing after {timeout:g} s")
        time.sleep(0.02)


# ---- measurements ---------------------------------------------------------------
@dataclass
class Results:
    enqueue_one: list[float] = field(default_factory=list)  # jobs/s
    enqueue_bulk: list[float] = field(default_factory=list)  # jobs/s
    drain: list[float] = field(default_factory=list)  # jobs/s (broker timestamps)
    drain_wall: list[float] = field(default_factory=list)  # jobs/s incl. interpreter start
    drain_cpu: list[float] = field(default_factory=list)  # CPU s of the whole worker run
    drain_default: list[float] = field(default_factory=list)  # jobs/s, the default pool
    idle_start_cpu: list[float] = field(default_factory=list)  # CPU s of a 0-job run
    # warm drains by configuration "WxS": jobs/s and all workers' CPU s per 1,000 jobs
    warm: dict[str, list[float]] = field(default_factory=dict)
    warm_cpu: dict[str, list[float]] = field(default_factory=dict)
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


def run_burst_worker(url: str, timeout: float, slots: int | None = SLOTS) -> tuple[float, float]:
    """Run a burst worker to exit; returns (wall seconds, CPU seconds) of that child."""
    cpu_before = children_cpu()
    worker = Worker(url, burst=True, slots=slots)
    try:
        wall = worker.wait(timeout)
    finally:
        worker.close()
    return wall, children_cpu() - cpu_before


def drain_rate(ids: set[int], n: int) -> float:
    """N / (first start .. last finish) of the jobs ``ids``, from the broker's own columns."""
    done = benchapp.app.broker.list_jobs(JobState.SUCCEEDED, "default", limit=n + 1000)
    ours = [j for j in done if j.id in ids]
    if len(ours) != n:
        raise RuntimeError(f"drain: {len(ours)} of {n} jobs succeeded")
    # A no-op's start and ack are usually recorded in one write, where started_at is set
    # to the ack time; the window is then first ack .. last ack (one job's run short).
    first = min(j.started_at or j.finished_at or 0.0 for j in ours)
    last = max(j.finished_at or 0.0 for j in ours)
    return n / (last - first)


def measure_drain(url: str, n: int, slots: int | None = SLOTS) -> tuple[float, float, float]:
    """Returns (jobs/s from broker timestamps, jobs/s wall incl. start-up, worker CPU s).
    ``slots`` None: the worker's default pool (no ``--pool``)."""
    open_app(url)
    ids = {job.id for job in benchapp.noop.enqueue_many([[] for _ in range(n)])}
    benchapp.app.close()
    wall, cpu = run_burst_worker(url, timeout=max(120.0, n / 50), slots=slots)
    open_app(url)
    try:
        return drain_rate(ids, n), n / wall, cpu
    finally:
        benchapp.app.close()


def wait_drained(n: int, timeout: float) -> None:
    """Until queue "default" has no unfinished job. Polled every 250 ms: a count over the
    table costs the server CPU the workers need; the rate comes from the broker's timestamps,
    so the poll's granularity does not matter."""
    unfinished = (JobState.SCHEDULED, JobState.READY, JobState.CLAIMED, JobState.RUNNING)
    deadline = time.monotonic() + timeout
    while True:
        queue = benchapp.app.broker.stats().queues.get("default")
        if queue is not None and not any(queue.counts.get(s, 0) for s in unfinished):
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"{n} jobs not drained within {timeout:g} s")
        time.sleep(0.25)


def measure_warm_drain(
    url: str, n: int, workers: int, slots: int, task: Any = None, extra: tuple[str, ...] = ()
) -> tuple[float, float]:
    """W idle workers x S slots (``extra``: more worker flags), then N jobs of ``task``
    (default: ``noop``) in one transaction; returns (jobs/s, CPU s)."""
    open_app(url)  # creates the schema before the workers start
    procs = [Worker(url, burst=False, slots=slots, extra=extra) for _ in range(workers)]
    try:
        for proc in procs:
            proc.wait_ready()
        wait_listening(url, workers)
        time.sleep(0.2)  # past the workers' first idle probes
        cpu0 = sum(process_cpu(p.proc.pid) for p in procs)
        task = task or benchapp.noop
        ids = {job.id for job in task.enqueue_many([[] for _ in range(n)])}
        wait_drained(n, timeout=max(120.0, n / 50))
        cpu1 = sum(process_cpu(p.proc.pid) for p in procs)
    finally:
        close_all(procs)
    try:
        return drain_rate(ids, n), cpu1 - cpu0
    finally:
        benchapp.app.close()


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
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=BENCH_DIR,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "../src"],
            cwd=BENCH_DIR,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
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


def verdict(value: float, ok: Check | None) -> str:
    if ok is None:
        return ""
    if math.isnan(value):
        return "n/a"
    return "met" if ok(value) else "MISSED"


def load() -> str:
    """1-minute load average: on a shared machine, other work skews every figure."""
    return f"{os.getloadavg()[0]:.2f}" if hasattr(os, "getloadavg") else "n/a"


Row = tuple[str, str, str, str]


def target_row(label: str, value: float, shown: str, key: str, kind: str) -> Row:
    text, check = TARGETS[kind].get(key, ("", None))
    return (label, shown, text, verdict(value, check))


def print_rows(rows: list[Row], head: Row = ("measure", "median", "target", "")) -> None:
    widths = [max(len(row[i]) for row in [head, *rows]) for i in range(4)]
    line = "  ".join("-" * w for w in widths).rstrip()

    def fmt(row: Row) -> str:
        a, b, c, d = row
        return f"{a:<{widths[0]}}  {b:>{widths[1]}}  {c:<{widths[2]}}  {d}".rstrip()

    print(line)
    print(fmt(head))
    print(line)
    for row in rows:
        print(fmt(row))
    print(line)


def warm_rows(r: Results, config: str, label: str, key: str, kind: str) -> list[Row]:
    rate, cpu = median(r.warm.get(config, [])), median(r.warm_cpu.get(config, []))
    return [
        target_row(label, rate, f"{rate:,.0f} jobs/s", key, kind),
        ("  CPU of all its workers per 1,000 jobs", f"{cpu:.3f} s", "", ""),
    ]


def table_rows(r: Results, args: argparse.Namespace, kind: str) -> list[Row]:
    n = args.jobs
    one, bulk, drain = median(r.enqueue_one), median(r.enqueue_bulk), median(r.drain)
    cpu_raw = median([c / n * 1000 for c in r.drain_cpu])
    startup = median(r.idle_start_cpu)
    cpu_net = median([(c - startup) / n * 1000 for c in r.drain_cpu])
    p50, p99, pmax = (median(v) * 1000 for v in (r.lat_p50, r.lat_p99, r.lat_max))
    idle = median(r.idle_cpu) * 100
    rows = [
        target_row(
            "enqueue, one by one (task.enqueue loop)",
            one,
            f"{one:,.0f} jobs/s",
            "enqueue_one",
            kind,
        ),
        target_row(
            "enqueue, bulk (task.enqueue_many)", bulk, f"{bulk:,.0f} jobs/s", "enqueue_bulk", kind
        ),
    ]
    if args.drains_only:
        rows = []
    if not r.drain:
        return rows
    default = median(r.drain_default)
    rows += [
        target_row(
            f"drain, 1 worker x {SLOTS} thread slots", drain, f"{drain:,.0f} jobs/s", "drain", kind
        ),
        ("  same, wall incl. interpreter start-up", f"{median(r.drain_wall):,.0f} jobs/s", "", ""),
        target_row(
            f"drain, 1 worker, default pool ({DEFAULT_POOL.slots} thread slots)",
            default,
            f"{default:,.0f} jobs/s",
            "drain_default",
            kind,
        ),
    ]
    if args.drains_only:
        return rows
    if args.workers:
        config = f"{args.workers}x{SLOTS}"
        label = f"drain, {args.workers} workers x {SLOTS} slots (started idle)"
        rows += warm_rows(r, config, label, "", kind)
    if args.best:
        w, s = parse_config(args.best)
        label = f"best: {w} worker{'s' if w > 1 else ''} x {s} slots (started idle)"
        rows += warm_rows(r, args.best, label, "best", kind)
    rows += [
        target_row(
            "worker CPU per 1,000 no-op jobs, net", cpu_net, f"{cpu_net:.3f} s", "cpu_net", kind
        ),
        (f"  raw (start/exit alone costs {startup:.2f} s)", f"{cpu_raw:.3f} s", "", ""),
        target_row("idle enqueue-to-start, p50", p50, f"{p50:.2f} ms", "latency_p50", kind),
        target_row("  p99", p99, f"{p99:.2f} ms", "latency_p99", kind),
        ("  max", f"{pmax:.2f} ms", "", ""),
        ("  (enqueue call itself, p50)", f"{median(r.enqueue_call_p50) * 1000:.2f} ms", "", ""),
        target_row("idle worker CPU", idle, f"{idle:.2f} % of a core", "idle_cpu", kind),
    ]
    return rows


def print_header(args: argparse.Namespace, title: str, broker: str, load_before: str) -> None:
    print()
    print(f"sluicegate {title}: {args.jobs:,} jobs, median of {args.repeat} run(s)")
    print(f"machine: {machine()}")
    print(f"broker:  {broker}")
    print(f"load:    1-min load average {load_before} before, {load()} after")


def print_table(r: Results, args: argparse.Namespace, broker: str, load_before: str) -> None:
    kind = kind_of(args.broker)
    print_header(args, "throughput benchmark", broker, load_before)
    print_rows(table_rows(r, args, kind))
    print("peer reference figures quoted in the issue (not measured here):")
    for name, figure in PEERS[kind]:
        print(f"  {name:<56} {figure}")
    for note in r.notes:
        print(f"note: {note}")


def print_search(r: Results, args: argparse.Namespace, broker: str, load_before: str) -> None:
    print_header(args, "drain configurations (workers started idle)", broker, load_before)
    rows: list[Row] = []
    for config in args.grid:
        rate, cpu = median(r.warm[config]), median(r.warm_cpu[config])
        runs = ", ".join(f"{v:,.0f}" for v in r.warm[config])
        w, s = parse_config(config)
        rows.append(
            (
                f"{w} worker(s) x {s} slots  ({runs})",
                f"{rate:,.0f} jobs/s",
                f"{cpu:.3f} s CPU / 1,000 jobs",
                "",
            )
        )
    print_rows(rows, ("configuration  (runs, jobs/s)", "median", "workers' CPU", ""))
    best = max(args.grid, key=lambda c: median(r.warm[c]))
    print(f"best: {best} ({median(r.warm[best]):,.0f} jobs/s); use it with --best {best}")


def stepper(reps: int) -> Callable[[str, Callable[[], str]], None]:
    def step(label: str, fn: Callable[[], str]) -> None:
        for i in range(reps):
            print(f"[{label} {i + 1}/{reps}] {fn()}", flush=True)

    return step


def warm_measure(r: Results, args: argparse.Namespace, config: str) -> Callable[[], str]:
    """One warm drain of ``config`` ("WxS") on a fresh broker, recorded in ``r``."""
    workers, slots = parse_config(config)

    def measure() -> str:
        with broker_url(args.broker) as url:
            rate, cpu = measure_warm_drain(url, args.jobs, workers, slots)
        r.warm.setdefault(config, []).append(rate)
        r.warm_cpu.setdefault(config, []).append(cpu / args.jobs * 1000)
        return f"{rate:,.0f} jobs/s, workers' CPU {cpu:.2f} s"

    return measure


def run_search(args: argparse.Namespace) -> Results:
    r = Results()
    step = stepper(args.repeat)
    for config in args.grid:
        step(f"drain {config}", warm_measure(r, args, config))
    return r


def run_metrics_cost(args: argparse.Namespace) -> None:
    """Warm 1 x 8 drains with the worker's signals on (the default) and off
    (``--no-metrics``), alternating within each repeat so both see the same machine.
    Also the worker's CPU per 1,000 jobs: on a shared machine CPU time is the steadier
    figure (throughput moves with whatever else runs)."""
    rates: dict[str, list[float]] = {"on": [], "off": []}
    cpus: dict[str, list[float]] = {"on": [], "off": []}
    for i in range(args.repeat):
        for label, extra in (("on", ()), ("off", ("--no-metrics",))):
            with broker_url(args.broker) as url:
                rate, cpu = measure_warm_drain(url, args.jobs, 1, SLOTS, extra=extra)
            rates[label].append(rate)
            cpus[label].append(cpu / args.jobs * 1000)
            print(
                f"[metrics {label} {i + 1}/{args.repeat}] {rate:,.0f} jobs/s, "
                f"CPU {cpus[label][-1] * 1000:.1f} ms per 1,000 jobs",
                flush=True,
            )
    on, off = median(rates["on"]), median(rates["off"])
    cpu_on, cpu_off = median(cpus["on"]), median(cpus["off"])
    print(f"\ndrain 1x{SLOTS}, {args.jobs:,} no-op jobs, medians of {args.repeat}:")
    print(f"  {'':12} {'jobs/s':>9} {'CPU ms/1,000 jobs':>18}")
    print(f"  {'metrics on':12} {on:>9,.0f} {cpu_on * 1000:>18.1f}")
    print(f"  {'metrics off':12} {off:>9,.0f} {cpu_off * 1000:>18.1f}")
    print(f"  {'on / off':12} {on / off:>9.3f} {cpu_on / cpu_off:>18.3f}")


def run(args: argparse.Namespace) -> Results:
    r = Results()
    n = args.jobs
    step = stepper(args.repeat)

    def one() -> str:
        with broker_url(args.broker) as url:
            r.enqueue_one.append(measure_enqueue_one(url, n))
        return f"{r.enqueue_one[-1]:,.0f} jobs/s"

    def bulk() -> str:
        with broker_url(args.broker) as url:
            r.enqueue_bulk.append(measure_enqueue_bulk(url, n))
        return f"{r.enqueue_bulk[-1]:,.0f} jobs/s"

    if not args.drains_only:
        step("enqueue one-by-one", one)
        step("enqueue bulk", bulk)
    if kind_of(args.broker) == "memory":
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

    def drain_default() -> str:
        with broker_url(args.broker) as url:
            rate, wall_rate, cpu = measure_drain(url, n, slots=None)
        r.drain_default.append(rate)
        return f"{rate:,.0f} jobs/s (wall {wall_rate:,.0f}/s), worker CPU {cpu:.2f} s"

    if args.drains_only:  # A/B runs: the two burst drains, alternating within each repeat
        for i in range(args.repeat):
            print(f"[drain default pool {i + 1}/{args.repeat}] {drain_default()}", flush=True)
            print(f"[drain 1x{SLOTS} {i + 1}/{args.repeat}] {drain()}", flush=True)
        return r
    step("idle start/exit", idle_start)
    step(f"drain 1x{SLOTS}", drain)
    step(f"drain default pool ({DEFAULT_POOL.slots} slots)", drain_default)
    if args.workers:
        step(f"drain {args.workers}x{SLOTS}", warm_measure(r, args, f"{args.workers}x{SLOTS}"))
    if args.best:
        step(f"drain best {args.best}", warm_measure(r, args, args.best))
    step("latency + idle", latency)
    return r


def main() -> None:
    parser = argparse.ArgumentParser(
        description="sluicegate throughput, latency and CPU benchmark (prints; asserts nothing)"
    )
    parser.add_argument(
        "--broker",
        metavar="URL",
        default=None,
        help="broker URL (default: a fresh temporary SQLite file per "
        "measurement). postgresql://...?schema=NAME: a fresh schema NAME_xxxx "
        "per measurement, dropped afterwards. sqlite:// and memory:// URLs are "
        "used as given: use a scratch database",
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=10_000,
        metavar="N",
        help="jobs per enqueue and drain measurement (default 10000)",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=3,
        metavar="R",
        help="runs per measurement; medians are reported (default 3)",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=4,
        metavar="W",
        help=f"also drain with W worker processes x {SLOTS} slots, started "
        "idle (default 4; 0 skips)",
    )
    parser.add_argument(
        "--best",
        metavar="WxS",
        default=None,
        help="also drain with this configuration, W workers x S slots each "
        f"(default for PostgreSQL: {BEST['postgresql']}; 'none' skips)",
    )
    parser.add_argument(
        "--search",
        action="store_true",
        help="only drain once per configuration of --grid (x --repeat) and "
        "print the table, to find the best configuration",
    )
    parser.add_argument(
        "--metrics-cost",
        action="store_true",
        help="only compare warm 1x8 drains with the worker's metrics on and off "
        "(--no-metrics), alternating, and print both medians and their ratio",
    )
    parser.add_argument(
        "--drains-only",
        action="store_true",
        help="only the two burst drains (1 worker x 8 slots, and the default pool), "
        "alternating within each repeat: for comparing two versions of the code",
    )
    parser.add_argument(
        "--grid",
        metavar="WxS,...",
        default=",".join(SEARCH_GRID),
        help="configurations for --search (default: %(default)s)",
    )
    parser.add_argument(
        "--latency-jobs",
        type=int,
        default=200,
        metavar="N",
        help="jobs per latency run, one at a time (default 200)",
    )
    parser.add_argument(
        "--spacing",
        type=float,
        default=20.0,
        metavar="MS",
        help="pause before each latency job, ms (default 20)",
    )
    parser.add_argument(
        "--idle-seconds",
        type=float,
        default=5.0,
        metavar="S",
        help="how long idle CPU is sampled (default 5)",
    )
    args = parser.parse_args()
    if args.jobs < 1 or args.repeat < 1 or args.latency_jobs < 1 or args.idle_seconds <= 0:
        parser.error("--jobs, --repeat, --latency-jobs and --idle-seconds must be positive")
    if args.workers < 0:
        parser.error("--workers must not be negative")
    kind = kind_of(args.broker)
    if args.best is None:
        args.best = BEST.get(kind)
    elif args.best.lower() == "none":
        args.best = None
    try:
        args.grid = [f"{w}x{s}" for w, s in map(parse_config, args.grid.split(","))]
        if args.best:
            args.best = "{}x{}".format(*parse_config(args.best))
    except argparse.ArgumentTypeError as exc:
        parser.error(str(exc))
    if args.search and kind == "memory":
        parser.error("--search needs a broker shared with worker processes (not memory://)")
    if kind == "postgresql":
        broker = (
            f"{args.broker} (fresh schema per measurement)\nserver:  {server_info(args.broker)}"
        )
    else:
        broker = args.broker or "fresh temporary SQLite file per measurement (synchronous=full)"
    load_before = load()
    print(f"machine: {machine()}; load average {load_before}", flush=True)
    if args.metrics_cost:
        print(f"broker:  {broker}", flush=True)
        run_metrics_cost(args)
        return
    results = run_search(args) if args.search else run(args)
    if args.search:
        print_search(results, args, broker, load_before)
    else:
        print_table(results, args, broker, load_before)


if __name__ == "__main__":
    main()
