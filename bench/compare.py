"""sluicegate side by side with its peers, every system driven the same way (issue 16).

    .venv/bin/python bench/compare.py                  # every system, ~15-20 min on 2 cores
    .venv/bin/python bench/compare.py --quick          # 1,000 jobs, once each: a try-out
    .venv/bin/python bench/compare.py --systems sluicegate-sqlite,huey --workloads one,eight
    .venv/bin/python bench/compare.py --peers-venv /path/to/venv --out compare.md --json c.json

Each system is an adapter script in bench/peers (the contract: bench/peers/README.md),
run under the Python that has it: the project's .venv for sluicegate and the hand-written
PostgreSQL baseline, a separate virtualenv for the peers (``.venv-peers``, made from
bench/peers/requirements.txt on first use). Every job body appends one line to the same
sink file; rates run from the sink's first line to its last, so start-up is never timed.
Method and figures: bench/README.md ("Peer comparison").
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent / "peers"))

import sink

import compare_report as report
import compare_stores as stores
from compare_procs import (
    AdapterError,
    PidCpu,
    SinkWatcher,
    System,
    Unsupported,
    Worker,
    run_role,
    stop_all,
)

SYSTEMS = [
    System("sluicegate-sqlite", "sluicegate, SQLite", "sluicegate_sqlite.py", "project", "sqlite"),
    System("huey", "huey, SQLite", "huey_sqlite.py", "peers", "sqlite"),
    System("sluicegate-pg", "sluicegate, PostgreSQL", "sluicegate_pg.py", "project", "postgresql"),
    System("bare-pg", "hand-written PostgreSQL", "bare_pg.py", "project", "postgresql"),
    System("pgqueuer", "PgQueuer", "pgqueuer_pg.py", "peers", "postgresql"),
    System("procrastinate", "Procrastinate", "procrastinate_pg.py", "peers", "postgresql"),
    System("celery", "Celery, Redis", "celery_redis.py", "peers", "redis"),
    System("dramatiq", "Dramatiq, Redis", "dramatiq_redis.py", "peers", "redis"),
]
WORKLOADS = ["one", "bulk", "default", "eight", "io20", "latency", "kill"]
IO20_JOBS, IO20_SLOTS, IO20_SECONDS = 2000, 50, 0.02
LATENCY_WARMUP = 10  # the first latency samples are dropped: the worker is warm after them
ABORT = threading.Event()  # Ctrl-C during the kill workloads: their threads clean up and end


@dataclass
class Run:
    """The options and the run's scratch folder (sinks and worker logs)."""

    args: argparse.Namespace
    scratch: Path
    counter: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def sink(self) -> Path:
        with self.lock:  # the kill workloads run in threads
            self.counter += 1
            return self.scratch / f"sink-{self.counter}.txt"

    def redis_url(self, system: System) -> str:
        """--redis's database for the first Redis system, the one below it for the
        second: the kill workloads of both run at the same time."""
        offset = [s.key for s in SYSTEMS if s.store == "redis"].index(system.key)
        base, _, db = self.args.redis.rstrip("/").rpartition("/")
        return f"{base}/{int(db or 0) - offset}"


def log(message: str) -> None:
    print(f"[{datetime.now(UTC):%H:%M:%S}] {message}", flush=True)


# ---- stores ----------------------------------------------------------------------
@dataclass
class Store:
    broker: str
    database: str | None = None  # PostgreSQL: the run's own database


@contextlib.contextmanager
def fresh_store(run: Run, system: System) -> Iterator[Store]:
    """A new, empty store for one measurement, set up by the adapter, removed after."""
    if system.store == "sqlite":
        ctx: contextlib.AbstractContextManager[str] = stores.sqlite_file()
    elif system.store == "postgresql":
        ctx = stores.pg_database(run.args.postgres, run.args.pg_prefix)
    else:
        ctx = stores.redis_database(run.redis_url(system))
    with ctx as broker:
        database = broker.rsplit("/", 1)[1] if system.store == "postgresql" else None
        run_role(system, "setup", "--broker", broker, timeout=120)
        yield Store(broker, database)


class BrokerCpu:
    """The store server's CPU: the run's PostgreSQL backends, or redis-server."""

    def __init__(self, run: Run, system: System, store: Store) -> None:
        self.kind = system.store
        self.run, self.store = run, store
        self.pids = PidCpu()
        self.conn = stores.pg_connect(run.args.postgres) if self.kind == "postgresql" else None
        self.redis_pid: int | None = None
        if self.kind == "redis":
            pid = int(stores.redis_info(run.redis_url(system)).get("process_id", "0"))
            self.redis_pid = pid if pid and psutil.pid_exists(pid) else None

    def sample(self, *, baseline: bool = False) -> None:
        if self.conn is not None:
            rows = self.conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = %s", (self.store.database,)
            ).fetchall()
            self.pids.sample([int(r[0]) for r in rows], baseline=baseline)
        elif self.redis_pid:
            self.pids.sample([self.redis_pid], baseline=baseline)

    def used(self) -> float | None:
        if self.kind == "sqlite" or (self.kind == "redis" and not self.redis_pid):
            return None  # SQLite: inside the worker's own process
        return self.pids.used()

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()


# ---- workloads --------------------------------------------------------------------
def enqueue(system: System, store: Store, mode: str, jobs: int, task: str = "noop") -> float:
    answer = run_role(
        system, "enqueue", "--broker", store.broker, "--jobs", str(jobs), "--mode", mode,
        "--task", task,
    )  # fmt: skip
    return jobs / float(answer["seconds"])


def fill(system: System, store: Store, jobs: int, task: str = "noop") -> None:
    """Jobs for a drain, untimed: in bulk where the system has a bulk call."""
    try:
        enqueue(system, store, "bulk", jobs, task)
    except Unsupported:
        enqueue(system, store, "one", jobs, task)


def worker_args(store: Store, sink_path: Path, concurrency: str, task: str) -> list[str]:
    return ["--broker", store.broker, "--sink", str(sink_path), "--concurrency", concurrency,
            "--task", task]  # fmt: skip


def wait_first_line(watcher: SinkWatcher, worker: Worker, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while watcher.count() == 0:
        if worker.proc.poll() is not None:
            raise AdapterError(f"worker exited {worker.proc.returncode} before any job ran")
        if time.monotonic() > deadline:
            raise AdapterError(f"no job ran within {timeout:.0f} s of the worker's start")
        time.sleep(0.002)


def drain(
    run: Run, system: System, store: Store, jobs: int, concurrency: str, task: str = "noop",
    cpu: bool = False,
) -> dict[str, Any]:  # fmt: skip
    """Start a worker on ``jobs`` queued jobs; rate from the sink's first line to its last."""
    path = run.sink()
    watcher = SinkWatcher(path)
    broker = BrokerCpu(run, system, store) if cpu else None
    worker = Worker(system, worker_args(store, path, concurrency, task), run.scratch, path.stem)
    try:
        worker.wait_ready()
        wait_first_line(watcher, worker)
        n0, w0 = watcher.count(), worker.cpu()
        if broker:
            broker.sample(baseline=True)
        deadline = time.monotonic() + run.args.drain_timeout
        next_sample = time.monotonic() + 0.25
        while watcher.count() < jobs and time.monotonic() < deadline:
            if worker.proc.poll() is not None:
                raise AdapterError(f"worker exited {worker.proc.returncode} mid-drain")
            time.sleep(0.005)
            if broker and time.monotonic() > next_sample:
                broker.sample()
                next_sample = time.monotonic() + 0.25
        n1, w1 = watcher.count(), worker.cpu()
        if broker:
            broker.sample()
    finally:
        worker.stop()
        if broker:
            broker.close()
    rows = sink.read(str(path))
    ran = [r[0] for r in rows]
    span = max(ran) - min(ran)
    done = max(n1 - n0, 1)
    result: dict[str, Any] = {
        "rate": len(rows) / span if span > 0 else float("nan"),
        "ran": len(rows),
        "jobs": jobs,
        "complete": len(rows) >= jobs,
        "span_s": span,
        "first_start": min(ran),
        "sink": str(path),
        "notes": worker.notes,
    }
    if cpu:
        result["worker_cpu_ms_per_1k"] = (w1 - w0) / done * 1e6
        used = broker.used() if broker else None
        result["broker_cpu_ms_per_1k"] = None if used is None else used / done * 1e6
    return result


def io20(run: Run, system: System) -> dict[str, Any]:
    """2,000 jobs of 20 ms I/O on 50 slots, against Little's law: N x 20 ms / 50."""
    with fresh_store(run, system) as store:
        fill(system, store, IO20_JOBS, "io20")
        drained = drain(run, system, store, IO20_JOBS, str(IO20_SLOTS), "io20")
    finished = [at for at, _, _ in sink.read(drained["sink"] + ".done")]
    if finished:  # from the first start to the last job's end
        seconds = max(finished) - drained["first_start"]
    else:  # no completion stamps: the last start plus its 20 ms
        seconds = drained["span_s"] + IO20_SECONDS
    bound = IO20_JOBS * IO20_SECONDS / IO20_SLOTS
    return {"seconds": seconds, "bound": bound, "complete": drained["complete"],
            "ran": drained["ran"], "notes": drained["notes"]}  # fmt: skip


def latency(run: Run, system: System) -> dict[str, Any]:
    """Enqueue-to-start with an idle, warm worker at its defaults: ran_at - sent."""
    jobs = run.args.latency_jobs + LATENCY_WARMUP
    with fresh_store(run, system) as store:
        path = run.sink()
        watcher = SinkWatcher(path)
        worker = Worker(system, worker_args(store, path, "default", "noop"), run.scratch, path.stem)
        try:
            worker.wait_ready()
            time.sleep(run.args.warm)
            run_role(system, "latency", "--broker", store.broker, "--jobs", str(jobs),
                     "--spacing", str(run.args.spacing))  # fmt: skip
            deadline = time.monotonic() + 30
            while watcher.count() < jobs and time.monotonic() < deadline:
                time.sleep(0.05)
        finally:
            worker.stop()
    rows = sorted(sink.read(str(path)), key=lambda r: r[2])[LATENCY_WARMUP:]
    samples = [(ran - sent) * 1000 for ran, sent, _ in rows if sent > 0]
    if not samples:
        raise AdapterError("no latency sample reached the sink")
    return {"p50_ms": report.percentile(samples, 50), "p99_ms": report.percentile(samples, 99),
            "max_ms": max(samples), "samples": len(samples), "sent": jobs - LATENCY_WARMUP}  # fmt: skip


def kill(run: Run, system: System) -> dict[str, Any]:
    """SIGKILL a worker's process group halfway through 2,000 io20 jobs at 8-way, start a
    fresh worker at once, and after --kill-wait seconds count the sink by index."""
    jobs, wait = IO20_JOBS, run.args.kill_wait
    with fresh_store(run, system) as store:
        fill(system, store, jobs, "io20")
        path = run.sink()
        watcher = SinkWatcher(path)
        args = worker_args(store, path, "8", "io20")
        first = Worker(system, args, run.scratch, f"{path.stem}-killed")
        first.wait_ready()
        deadline = time.monotonic() + 120
        while watcher.count() < jobs // 2 and time.monotonic() < deadline:
            if first.proc.poll() is not None or ABORT.is_set():
                raise AdapterError("worker exited before the kill")
            time.sleep(0.002)
        first.kill()
        killed_at = time.time()
        second = Worker(system, args, run.scratch, f"{path.stem}-fresh")
        try:
            while time.time() < killed_at + wait and not ABORT.is_set():
                time.sleep(0.1)
        finally:
            second.stop()
    return kill_counts(sink.read(str(path)), sink.read(f"{path}.done"), jobs, killed_at, wait)


def kill_counts(
    rows: list[tuple[float, float, int]], done: list[tuple[float, float, int]], jobs: int,
    killed_at: float, wait: float,
) -> dict[str, Any]:  # fmt: skip
    """Lost = jobs not done after the wait; duplicates = jobs started more than once;
    recovery = from the kill until every job had finished once.

    With the adapter's completion stamps (``SINK.done``) "done" is known. Without them it is
    guessed from starts: a job whose last start fell within its own 20 ms before the kill
    was cut short, and if it never started again it was never done."""
    runs = Counter(index for _, _, index in rows)
    never = sum(1 for i in range(jobs) if runs[i] == 0)
    if done:
        finished: dict[int, float] = {}
        for at, _, index in done:
            finished[index] = min(at, finished.get(index, at))
        lost = sum(1 for i in range(jobs) if i not in finished)
        last = max(finished.values())
        how = "completion stamps"
    else:
        latest: dict[int, float] = {}
        for ran, _, index in rows:
            latest[index] = max(ran, latest.get(index, 0.0))
        cut = sum(1 for t in latest.values() if killed_at - IO20_SECONDS < t <= killed_at)
        lost = never + cut
        last = max(ran for ran, _, _ in rows) + IO20_SECONDS
        how = "start stamps only (cut jobs guessed)"
    recovery = max(last - killed_at, 0.0) if lost == 0 else None
    return {"lost": lost, "never_ran": never, "duplicates": sum(1 for c in runs.values() if c > 1),
            "recovery_s": recovery, "wait_s": wait, "counted_by": how,
            "started_before_kill": sum(1 for ran, _, _ in rows if ran <= killed_at)}  # fmt: skip


# ---- one system ----------------------------------------------------------------------
def measure(run: Run, system: System, results: dict[str, Any]) -> None:
    """Every chosen workload on ``system``; figures land in ``results`` as they come."""
    want, jobs = set(run.args.workloads), run.args.jobs
    name = system.key
    for r in range(1, run.args.repeat + 1):
        if want & {"one", "default"}:
            with fresh_store(run, system) as store:
                if "one" in want:
                    rate = enqueue(system, store, "one", jobs)
                    results.setdefault("one", []).append({"rate": rate})
                    log(f"{name} #{r} enqueue one by one: {rate:,.0f}/s")
                else:
                    fill(system, store, jobs)
                if "default" in want:
                    drained = drain(run, system, store, jobs, "default")
                    results.setdefault("default", []).append(drained)
                    log(f"{name} #{r} drain default: {drained['rate']:,.0f}/s "
                        f"({drained['ran']} jobs; {drained['notes']})")  # fmt: skip
        if want & {"bulk", "eight"}:
            with fresh_store(run, system) as store:
                if "bulk" in want and not isinstance(results.get("bulk"), str):
                    try:
                        rate = enqueue(system, store, "bulk", jobs)
                        results.setdefault("bulk", []).append({"rate": rate})
                        log(f"{name} #{r} enqueue bulk: {rate:,.0f}/s")
                    except Unsupported as exc:
                        results["bulk"] = f"n/a: {exc}"
                        log(f"{name} enqueue bulk: n/a ({exc})")
                        fill(system, store, jobs)
                else:
                    fill(system, store, jobs)
                if "eight" in want:
                    drained = drain(run, system, store, jobs, "8", cpu=True)
                    results.setdefault("eight", []).append(drained)
                    broker = drained["broker_cpu_ms_per_1k"]
                    log(f"{name} #{r} drain 8-way: {drained['rate']:,.0f}/s, worker CPU "
                        f"{drained['worker_cpu_ms_per_1k']:,.0f} ms/1k, broker CPU "
                        f"{'n/a' if broker is None else f'{broker:,.0f}'} ms/1k")  # fmt: skip
        if "io20" in want:
            done = io20(run, system)
            results.setdefault("io20", []).append(done)
            log(f"{name} #{r} 2000 x 20 ms on 50 slots: {done['seconds']:.2f} s "
                f"(bound {done['bound']:.2f} s: {done['bound'] / done['seconds']:.0%})")  # fmt: skip
    if "latency" in want:
        results["latency"] = lat = latency(run, system)
        log(f"{name} idle latency: p50 {lat['p50_ms']:.1f} ms, p99 {lat['p99_ms']:.1f} ms")
    if "kill" in want and run.args.kill_serial:
        kill_one(run, system, results)


def kill_one(run: Run, system: System, results: dict[str, Any]) -> None:
    results["kill"] = k = kill(run, system)
    recovery = "not within the wait" if k["recovery_s"] is None else f"{k['recovery_s']:.1f} s"
    log(
        f"{system.key} kill: {k['lost']} not done ({k['never_ran']} never started), "
        f"{k['duplicates']} started twice, recovery {recovery} (by {k['counted_by']})"
    )


def kill_all(run: Run, entries: list[dict[str, Any]]) -> None:
    """The kill workload of every system at once, each started --kill-stagger s after the
    previous one: each is busy only for its first seconds (2,000 jobs of 20 ms at 8-way),
    then waits out --kill-wait, so the busy parts do not overlap and the run is minutes
    shorter than one after the other."""

    def one(entry: dict[str, Any]) -> None:
        try:
            kill_one(run, entry["system"], entry["results"])
        except Exception as exc:  # reported in the table; the others go on
            entry["error"] = f"kill: {exc}"
            log(f"{entry['key']} kill: stopped by an error: {exc}")

    log(f"kill workloads: {len(entries)} systems, {run.args.kill_stagger:g} s apart")
    threads: list[threading.Thread] = []
    try:
        for i, entry in enumerate(entries):
            if i:
                time.sleep(run.args.kill_stagger)
            thread = threading.Thread(target=one, args=(entry,), daemon=True)
            thread.start()
            threads.append(thread)
        for thread in threads:
            thread.join()
    except KeyboardInterrupt:
        ABORT.set()  # each thread stops its workers and removes its store, then ends
        for thread in threads:
            thread.join(timeout=60)
        raise


# ---- environments and availability -------------------------------------------------
def prepare(args: argparse.Namespace, scratch: Path) -> list[dict[str, Any]]:
    """Each chosen system with its Python, version and notes, or the reason it is skipped."""
    chosen = [s for s in SYSTEMS if s.key in args.systems]
    peers_python, peers_note = None, ""
    if any(s.env == "peers" and s.path.exists() for s in chosen):
        create = args.peers_venv is None
        venv = Path(args.peers_venv or stores.REPO / ".venv-peers")
        if create:
            log(f"peers' virtualenv: {venv} (made or refreshed from requirements.txt)")
        peers_python, peers_note = stores.peers_venv(venv, create=create, log=scratch / "pip.log")
        log(f"peers' virtualenv: {peers_note}")
    reachable = {"sqlite": None, "postgresql": None, "redis": None}
    if any(s.store == "postgresql" for s in chosen):
        try:
            stores.pg_connect(args.postgres).close()
        except Exception as exc:
            reachable["postgresql"] = f"PostgreSQL unreachable at {args.postgres}: {exc}"
    if any(s.store == "redis" for s in chosen):
        try:
            stores.redis_call(args.redis, "PING")
        except (OSError, RuntimeError) as exc:
            reachable["redis"] = f"Redis unreachable at {args.redis}: {exc}"
    entries = []
    for system in chosen:
        entry: dict[str, Any] = {"key": system.key, "label": system.label,
                                 "store": system.store, "results": {}}  # fmt: skip
        python = sys.executable if system.env == "project" else peers_python
        if not system.path.exists():
            entry["skipped"] = f"no adapter bench/peers/{system.adapter}"
        elif python is None:
            entry["skipped"] = f"no peers' virtualenv ({peers_note})"
        elif reachable[system.store]:
            entry["skipped"] = reachable[system.store]
        else:
            system = replace(system, python=python)
            try:
                described = run_role(system, "describe", timeout=120)
                entry.update(version=described.get("version", "?"),
                             notes=described.get("notes", ""))  # fmt: skip
            except AdapterError as exc:
                entry["skipped"] = f"not installed or broken: {exc}"
        entry["system"] = system
        entries.append(entry)
        log(f"{system.key}: {entry.get('skipped') or 'version ' + entry['version']}")
    return entries


def estimate(args: argparse.Namespace, systems: int) -> float:
    """Seconds, roughly, at ~3,000 jobs/s where a system is that fast (slower ones are
    capped by --drain-timeout)."""
    per_rate = args.jobs / 3000
    want = set(args.workloads)
    each = args.repeat * (
        ("one" in want) * (per_rate + 2)
        + ("default" in want) * min(per_rate, args.drain_timeout)
        + 4
        + ("bulk" in want) * 1
        + ("eight" in want) * min(per_rate, args.drain_timeout)
        + 4
        + ("io20" in want) * 6
    )
    each += ("latency" in want) * (
        args.warm + (args.latency_jobs + LATENCY_WARMUP) * args.spacing / 800 + 5
    )
    total = systems * each
    if "kill" in want:
        per = args.kill_wait + 12
        total += systems * per if args.kill_serial else (systems - 1) * args.kill_stagger + per
    return total


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    keys = [s.key for s in SYSTEMS]
    parser.add_argument(
        "--systems", default=",".join(keys), help=f"comma-separated: {','.join(keys)}"
    )
    parser.add_argument(
        "--workloads", default=",".join(WORKLOADS), help=f"comma-separated: {','.join(WORKLOADS)}"
    )
    parser.add_argument("--jobs", type=int, default=None, help="jobs per enqueue/drain (10000)")
    parser.add_argument("--repeat", type=int, default=None, help="runs of each rate workload (3)")
    parser.add_argument("--kill-wait", type=float, default=None, help="seconds after the kill (60)")
    parser.add_argument("--drain-timeout", type=float, default=None, help="cap per drain, s (20)")
    parser.add_argument("--latency-jobs", type=int, default=None, help="latency samples (200)")
    parser.add_argument("--spacing", type=float, default=20.0, help="ms before each latency job")
    parser.add_argument("--warm", type=float, default=2.0, help="s an idle worker waits first")
    parser.add_argument(
        "--kill-stagger", type=float, default=10.0, help="s between the kill workloads' starts"
    )
    parser.add_argument(
        "--kill-serial", action="store_true", help="each kill workload after the previous one"
    )
    parser.add_argument("--quick", action="store_true", help="1,000 jobs, once, 35 s kill wait")
    parser.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432/test",
                        help="server to make each run's database on (the URL's own db: admin)")  # fmt: skip
    parser.add_argument("--pg-prefix", default="cmp_", help="prefix of the runs' databases")
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/15", help="flushed per run")
    parser.add_argument("--peers-venv", default=None, help="use this virtualenv for the peers")
    parser.add_argument("--out", default=None, help="write the markdown here too")
    parser.add_argument("--json", default=None, help="write the raw figures here")
    parser.add_argument(
        "--keep-scratch", action="store_true", help="keep the sinks and worker logs"
    )
    args = parser.parse_args(argv)
    quick = args.quick
    defaults = {"jobs": (1000, 10_000), "repeat": (1, 3), "kill_wait": (35.0, 60.0),
                "drain_timeout": (15.0, 20.0), "latency_jobs": (50, 200)}  # fmt: skip
    for name, (short, full) in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, short if quick else full)
    args.systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    args.workloads = [w.strip() for w in args.workloads.split(",") if w.strip()]
    for value, known, what in (
        (args.systems, keys, "system"),
        (args.workloads, WORKLOADS, "workload"),
    ):
        unknown = sorted(set(value) - set(known))
        if unknown:
            parser.error(f"unknown {what}(s): {', '.join(unknown)}; known: {', '.join(known)}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    signal.signal(signal.SIGINT, signal.default_int_handler)  # also when started with "&"
    scratch = Path(tempfile.mkdtemp(prefix="compare-"))
    try:
        return run_all(Run(args, scratch))
    except KeyboardInterrupt:
        log("interrupted: cleaning up")
        return 130
    finally:
        stop_all()  # the stores were removed on the way out of their with-blocks
        if args.keep_scratch:
            log(f"sinks and worker logs kept in {scratch}")
        else:
            shutil.rmtree(scratch, ignore_errors=True)


def run_all(run: Run) -> int:
    args, started = run.args, time.monotonic()
    load_before = stores.loadavg()
    log(f"scratch folder (sinks, worker logs): {run.scratch}; 1-minute load {load_before}")
    systems = prepare(args, run.scratch)
    live = [s for s in systems if not s.get("skipped")]
    log(f"{len(live)} systems x {','.join(args.workloads)}; {args.jobs:,} jobs, "
        f"repeat {args.repeat}, kill wait {args.kill_wait:.0f} s: about "
        f"{estimate(args, len(live)) / 60:.0f} min")  # fmt: skip
    for entry in live:
        try:
            measure(run, entry["system"], entry["results"])
        except Exception as exc:  # one system's failure must not end the others' run
            entry["error"] = str(exc)
            log(f"{entry['key']}: stopped by an error: {exc}")
    if "kill" in args.workloads and not args.kill_serial:
        kill_all(run, [e for e in live if not e.get("error")])
    return finish(run, systems, load_before, started)


def finish(run: Run, systems: list[dict[str, Any]], load_before: str, started: float) -> int:
    """The machine, the tables, the files."""
    args = run.args
    machine = stores.machine(
        args.postgres if any(s["store"] == "postgresql" for s in systems) else None,
        args.redis if any(s["store"] == "redis" for s in systems) else None,
    )
    machine["date (UTC)"] = f"{datetime.now(UTC):%Y-%m-%d %H:%M}"
    machine["1-minute load before / after"] = f"{load_before} / {stores.loadavg()}"
    for entry in systems:
        entry.pop("system", None)
        if entry.get("error"):
            entry["notes"] = f"{entry.get('notes', '')} ERROR: {entry['error']}"
    options = (f"--jobs {args.jobs} --repeat {args.repeat} --kill-wait {args.kill_wait:g} "
               f"--drain-timeout {args.drain_timeout:g} --latency-jobs {args.latency_jobs}")  # fmt: skip
    result = {"date": machine["date (UTC)"], "systems": systems, "machine": machine,
              "options": options, "total_s": time.monotonic() - started}  # fmt: skip
    text = report.markdown(result)
    print()
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
