"""Many workers on one PostgreSQL: does the drain rate hold as worker processes are added,
and does the claim stay free of lock contention? Prints figures; asserts nothing.

    .venv/bin/python bench/many_workers.py                       # 100,000 jobs, 1x8 ... 16x4
    .venv/bin/python bench/many_workers.py --jobs 5000 --configs 1x8,4x8

For each configuration W x S (``--configs``), in a fresh schema ``many_<random>`` (dropped
afterwards; ``--one-schema``: one schema for all, so each drain finds the history of the
ones before): queue ``default`` is paused, N no-op jobs are stored by one bulk enqueue,
W real ``sluicegate worker`` processes with S thread slots each are started and waited
for (each LISTENing), the table's figures are read ("before"), and the queue is resumed,
which wakes every worker at once. Until the queue has drained, a sampler thread asks the
server every ``--sample-ms`` which of this run's backends (the workers connect with
``application_name=<schema>-worker``) wait and on what (``pg_stat_activity``), and which
locks they have asked for and not been granted (``pg_locks``). Then the workers are
stopped (each publishes its last metrics snapshot) and the table's figures are read again
("after"), once every backend of theirs has exited and flushed its statistics.

- rate: N / (first job's start .. last job's finish), the broker's own columns.
- claim p50/p99: the workers' own claim latency (one broker claim call, timed by the
  claimer), from their final registry snapshots, merged; histogram estimates (~12%).
- lock waits: share of samples in which any backend of the run waited on a heavyweight
  lock (wait_event_type 'Lock': tuple, transactionid, relation, ...), the peak number
  waiting at once, and the ungranted pg_locks by lock type.
- dead tuples and size: pg_stat_user_tables and pg_total_relation_size of the jobs table,
  with autovacuum as the server is configured (printed). Nothing is VACUUMed by hand
  unless ``--vacuum-between`` says so.
- CPU per 1,000 jobs: the worker processes' utime + stime, and that of the PostgreSQL
  backends serving them (psutil), from the resume to the end of the drain.

See bench/README.md ("Many workers").
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import secrets
import statistics
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

import psutil  # noqa: E402

import benchapp  # noqa: E402
from pgcluster import own_cluster  # noqa: E402
from pgscratch import connect, drop_schema, schema_of, with_schema  # noqa: E402
from sluicegate.metrics.histogram import merge_all, quantile  # noqa: E402
from throughput import (  # noqa: E402
    Worker,
    close_all,
    machine,
    open_app,
    parse_config,
    process_cpu,
    wait_listening,
)

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/test"
DEFAULT_CONFIGS = "1x8,2x8,4x8,8x8,16x4"
QUEUE = "default"
SETTINGS = (
    "server_version",
    "autovacuum",
    "autovacuum_naptime",
    "autovacuum_vacuum_scale_factor",
    "autovacuum_vacuum_threshold",
    "synchronous_commit",
    "fsync",
    "shared_buffers",
    "max_connections",
)
TABLE_STATS = """
SELECT s.n_live_tup, s.n_dead_tup, s.n_tup_upd, s.n_tup_hot_upd, s.autovacuum_count,
       s.last_autovacuum, s.autoanalyze_count, s.vacuum_count, s.analyze_count,
       pg_table_size(s.relid), pg_indexes_size(s.relid), pg_total_relation_size(s.relid)
FROM pg_stat_user_tables AS s WHERE s.schemaname = %s AND s.relname = 'jobs'
"""
# One round trip per sample: what each active backend of the run waits on, the locks they
# asked for and have not been granted, and who holds them up (a backend of this run or
# not) doing what.
SAMPLE = r"""
SELECT 'wait', coalesce(wait_event_type, 'CPU'), coalesce(wait_event, '-'),
       query LIKE '%%FOR UPDATE SKIP LOCKED%%', count(*)
FROM pg_stat_activity WHERE application_name = %(app)s AND state = 'active'
GROUP BY 2, 3, 4
UNION ALL
SELECT 'lock', l.locktype || coalesce(' ' || l.relation::regclass::text, '')
              || coalesce(' ' || l.classid::regclass::text || ' ' || l.objid, ''),
       l.mode, false, count(*)
FROM pg_locks AS l JOIN pg_stat_activity AS a ON a.pid = l.pid
WHERE NOT l.granted AND a.application_name = %(app)s
GROUP BY 2, 3
UNION ALL
SELECT 'blocker', CASE WHEN b.application_name = %(app)s THEN 'this run' ELSE 'other' END,
       coalesce(b.wait_event_type, 'CPU') || ':' || coalesce(b.wait_event, '-'), false, count(*)
FROM pg_stat_activity AS a
CROSS JOIN LATERAL unnest(pg_blocking_pids(a.pid)) AS bp(pid)
JOIN pg_stat_activity AS b ON b.pid = bp.pid
WHERE a.application_name = %(app)s AND a.wait_event_type = 'Lock'
GROUP BY 2, 3
UNION ALL
SELECT 'waiter', wait_event, left(regexp_replace(query, '\s+', ' ', 'g'), 60), false, count(*)
FROM pg_stat_activity WHERE application_name = %(app)s AND wait_event_type = 'Lock'
GROUP BY 2, 3
"""
BACKENDS = "SELECT pid FROM pg_stat_activity WHERE application_name = %s"


# ---- the table's figures ----------------------------------------------------------
@dataclass
class TableFigures:
    live: int = 0
    dead: int = 0
    updates: int = 0
    hot_updates: int = 0
    autovacuums: int = 0
    last_autovacuum: Any = None
    autoanalyzes: int = 0
    vacuums: int = 0
    analyzes: int = 0
    heap: int = 0  # bytes (with TOAST and maps)
    indexes: int = 0
    total: int = 0


def table_figures(url: str) -> TableFigures:
    with connect(url) as conn:
        row = conn.execute(TABLE_STATS, (schema_of(url),)).fetchone()
    return TableFigures(*row) if row else TableFigures()


def mb(size: int) -> str:
    return f"{size / 2**20:.1f} MB"


# ---- the sampler ------------------------------------------------------------------
@dataclass
class Samples:
    count: int = 0
    with_lock_wait: int = 0  # samples in which any backend of the run waited on a lock
    peak_lock_waiting: int = 0
    active_total: int = 0  # sum over samples of the run's active backends
    peak_active: int = 0
    waits: Counter[str] = field(default_factory=Counter)  # "Type:event" -> backend-samples
    claim_waits: Counter[str] = field(default_factory=Counter)  # the same, claim statements
    ungranted: Counter[str] = field(default_factory=Counter)  # "locktype mode" -> samples
    blockers: Counter[str] = field(default_factory=Counter)  # "whose: doing" -> samples
    waiters: Counter[str] = field(default_factory=Counter)  # "event in 'statement'" -> samples
    peak_ungranted: int = 0
    slow: int = 0  # samples that took longer than the interval
    seconds: float = 0.0  # how long the sampler ran

    def in_server_ms(self, claims: int) -> float | None:
        """Mean server-side time of one claim statement by Little's law: claim statements
        in flight per sample = claims per second x time each spends in the server."""
        if not (claims and self.count and self.seconds):
            return None
        in_flight = sum(self.claim_waits.values()) / self.count
        return in_flight * self.seconds / claims * 1000


class Sampler(threading.Thread):
    """Polls pg_stat_activity and pg_locks for the run's backends until stopped."""

    def __init__(self, url: str, app_name: str, interval: float) -> None:
        super().__init__(name="lock-sampler", daemon=True)
        self.url, self.app_name, self.interval = url, app_name, interval
        self.samples = Samples()
        self.halt = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        started = time.monotonic()
        try:
            with connect(self.url) as conn:
                while not self.halt.is_set():
                    began = time.monotonic()
                    rows = conn.execute(SAMPLE, {"app": self.app_name}).fetchall()
                    self.record(rows)
                    spent = time.monotonic() - began
                    if spent > self.interval:
                        self.samples.slow += 1
                    self.halt.wait(max(0.0, self.interval - spent))
        except BaseException as exc:  # reported by the caller
            self.error = exc
        self.samples.seconds = time.monotonic() - started

    def record(self, rows: list[tuple[str, str, str, bool, int]]) -> None:
        s = self.samples
        s.count += 1
        active = lock_waiting = ungranted = 0
        for kind, a, b, claim, n in rows:
            if kind == "wait":
                active += n
                s.waits[f"{a}:{b}"] += n
                if claim:
                    s.claim_waits[f"{a}:{b}"] += n
                if a == "Lock":
                    lock_waiting += n
            elif kind == "lock":
                ungranted += n
                s.ungranted[f"{a} {b}"] += n
            elif kind == "waiter":
                s.waiters[f"{a} in {b!r}"] += n
            else:
                s.blockers[f"{a}, {b}"] += n
        s.active_total += active
        s.peak_active = max(s.peak_active, active)
        if lock_waiting:
            s.with_lock_wait += 1
        s.peak_lock_waiting = max(s.peak_lock_waiting, lock_waiting)
        s.peak_ungranted = max(s.peak_ungranted, ungranted)

    def stop(self) -> Samples:
        self.halt.set()
        self.join(10)
        if self.error is not None:
            raise RuntimeError(f"sampler failed: {self.error}") from self.error
        return self.samples


# ---- one drain ----------------------------------------------------------------------
@dataclass
class Run:
    config: str
    jobs: int
    fill_rate: float = 0.0
    rate: float = 0.0
    window_s: float = 0.0
    claims: int = 0
    claim_p50: float | None = None
    claim_p99: float | None = None
    claim_mean: float | None = None
    worker_cpu: float = 0.0  # s, all workers
    backend_cpu: float = 0.0  # s, all their backends
    backends_peak: int = 0
    before: TableFigures = field(default_factory=TableFigures)
    after: TableFigures = field(default_factory=TableFigures)
    samples: Samples = field(default_factory=Samples)
    load_before: float = 0.0
    load_after: float = 0.0


def backend_pids(url: str, app_name: str) -> set[int]:
    with connect(url) as conn:
        return {r[0] for r in conn.execute(BACKENDS, (app_name,)).fetchall()}


def cpu_of(pids: set[int]) -> dict[int, float]:
    """utime + stime of each process still there (backends run as the server's user;
    their /proc/PID/stat is readable by anyone)."""
    out = {}
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            t = psutil.Process(pid).cpu_times()
            out[pid] = t.user + t.system
    return out


def wait_drained(timeout: float) -> None:
    """Until queue ``default`` has nothing unfinished: read through the partial indexes,
    every 250 ms (the rate comes from the jobs' own timestamps)."""
    deadline = time.monotonic() + timeout
    while True:
        depth = benchapp.app.broker.queue_depths([QUEUE]).get(QUEUE)
        if depth is None or not (depth.ready + depth.scheduled + depth.claimed + depth.running):
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"not drained within {timeout:g} s: {depth}")
        time.sleep(0.25)


def wait_backends_gone(url: str, app_name: str, timeout: float = 30.0) -> None:
    """Until the workers' backends have exited: each flushes its table statistics then."""
    deadline = time.monotonic() + timeout
    while backend_pids(url, app_name) and time.monotonic() < deadline:
        time.sleep(0.1)


def drain_window(url: str, low: int, high: int, n: int) -> tuple[float, float]:
    """(jobs/s, window s) of this drain's jobs (ids ``low``..``high``), from their own
    columns. A no-op's start and ack are usually written together, ``started_at`` then
    being the ack's time: the window is one job's run short (as in throughput.py)."""
    schema = schema_of(url)
    with connect(url) as conn:
        row = conn.execute(
            f"SELECT count(*), extract(epoch FROM min(coalesce(started_at, finished_at))), "
            f"extract(epoch FROM max(finished_at)) FROM {schema}.jobs "
            "WHERE state = 'succeeded' AND id BETWEEN %s AND %s",
            (low, high),
        ).fetchone()
    count, first, last = row  # type: ignore[misc]
    if count != n:
        raise RuntimeError(f"{count} of {n} jobs succeeded in this drain")
    window = float(last) - float(first)
    return n / window, window


def claim_latency(pids: set[int]) -> tuple[int, float | None, float | None, float | None]:
    """(claims, p50, p99, mean) in s over the workers ``pids``, from their last snapshots."""
    records = benchapp.app.broker.list_workers().workers
    hists = [
        r.snapshot["worker_figures"]["claim_latency"]
        for r in records
        if r.info.pid in pids and r.snapshot.get("worker_figures")
    ]
    if len(hists) != len(pids):
        print(f"  (claim latency from {len(hists)} of {len(pids)} workers' snapshots)")
    merged = merge_all(hists)
    mean = merged["sum"] / merged["count"] if merged["count"] else None
    return merged["count"], quantile(merged, 0.5), quantile(merged, 0.99), mean


def drain(url: str, config: str, args: argparse.Namespace) -> Run:
    """One configuration's drain of ``--jobs`` no-op jobs in the schema of ``url``."""
    workers, slots = parse_config(config)
    schema = schema_of(url)
    app_name = f"{schema}-worker"
    worker_url = f"{url}&application_name={app_name}"
    run = Run(config, args.jobs, load_before=os.getloadavg()[0])

    open_app(url)  # creates the schema (migration) on first use
    benchapp.app.pause_queue(QUEUE, by="bench/many_workers.py")
    began = time.perf_counter()
    ids = [job.id for job in benchapp.noop.enqueue_many([[] for _ in range(args.jobs)])]
    run.fill_rate = args.jobs / (time.perf_counter() - began)
    benchapp.app.close()  # its backend exits and flushes the insert's statistics

    procs = [Worker(worker_url, burst=False, slots=slots) for _ in range(workers)]
    pids = {p.proc.pid for p in procs}
    try:
        for proc in procs:
            proc.wait_ready(timeout=120)
        wait_listening(url, workers, timeout=60)
        time.sleep(1.0)  # past start-up: stats of the fill flushed, workers idle
        if args.vacuum_between:
            with connect(url) as conn:
                conn.execute(f"VACUUM {schema}.jobs")
        run.before = table_figures(url)
        backends = backend_pids(url, app_name)
        cpu0 = {p.proc.pid: process_cpu(p.proc.pid) for p in procs}
        bcpu0 = cpu_of(backends)
        sampler = Sampler(url, app_name, args.sample_ms / 1000)
        sampler.start()
        open_app(url)
        benchapp.app.resume_queue(QUEUE)
        try:
            wait_drained(timeout=max(300.0, args.jobs / 20))
        finally:
            run.samples = sampler.stop()
        run.worker_cpu = sum(process_cpu(pid) - c for pid, c in cpu0.items())
        backends_now = backend_pids(url, app_name)
        run.backends_peak = len(backends | backends_now)
        bcpu1 = cpu_of(backends_now)
        run.backend_cpu = sum(c - bcpu0.get(pid, 0.0) for pid, c in bcpu1.items())
    finally:
        close_all(procs)
    wait_backends_gone(url, app_name)
    run.rate, run.window_s = drain_window(url, min(ids), max(ids), args.jobs)
    run.claims, run.claim_p50, run.claim_p99, run.claim_mean = claim_latency(pids)
    benchapp.app.close()
    time.sleep(0.5)
    run.after = table_figures(url)
    run.load_after = os.getloadavg()[0]
    return run


# ---- autovacuum, for a server that runs without it ------------------------------------
AUTOVACUUM_DUE = """
SELECT s.n_dead_tup > v.threshold + v.scale * greatest(c.reltuples, 0)
       OR s.n_ins_since_vacuum > i.threshold + i.scale * greatest(c.reltuples, 0),
       s.n_mod_since_analyze > a.threshold + a.scale * greatest(c.reltuples, 0)
FROM pg_stat_user_tables AS s JOIN pg_class AS c ON c.oid = s.relid,
     LATERAL (SELECT current_setting('autovacuum_vacuum_threshold')::float8,
                     current_setting('autovacuum_vacuum_scale_factor')::float8) AS v(threshold, scale),
     LATERAL (SELECT current_setting('autovacuum_vacuum_insert_threshold')::float8,
                     current_setting('autovacuum_vacuum_insert_scale_factor')::float8)
             AS i(threshold, scale),
     LATERAL (SELECT current_setting('autovacuum_analyze_threshold')::float8,
                     current_setting('autovacuum_analyze_scale_factor')::float8) AS a(threshold, scale)
WHERE s.schemaname = %s AND s.relname = 'jobs'
"""


class AutovacuumLike(threading.Thread):
    """``--emulate-autovacuum``: what the server's autovacuum launcher would do for the jobs
    table, on a server run with ``autovacuum=off`` (a shared test server may be): every
    naptime, VACUUM it when its dead (or newly inserted) tuples pass the server's
    autovacuum thresholds, ANALYZE it when its changes do, throttled by the autovacuum cost
    settings. Counted as manual vacuums and analyzes in the table's statistics."""

    def __init__(self, url: str, naptime: float) -> None:
        super().__init__(name="autovacuum-like", daemon=True)
        self.url, self.naptime = url, naptime
        self.halt = threading.Event()
        self.done: list[str] = []  # "VACUUM", "ANALYZE" in order, for the report

    def run(self) -> None:
        try:
            self.emulate()
        except Exception as exc:  # shown in the run's output, not raised in a thread
            self.done.append(f"failed: {exc}")

    def emulate(self) -> None:
        schema = schema_of(self.url)
        with connect(self.url) as conn:
            delay = conn.execute("SHOW autovacuum_vacuum_cost_delay").fetchone()[0]  # type: ignore[index]
            limit = conn.execute("SHOW autovacuum_vacuum_cost_limit").fetchone()[0]  # type: ignore[index]
            conn.execute(f"SET vacuum_cost_delay = '{delay}'")
            if int(limit) > 0:
                conn.execute(f"SET vacuum_cost_limit = {int(limit)}")
            while not self.halt.wait(self.naptime):
                due = conn.execute(AUTOVACUUM_DUE, (schema,)).fetchone()
                if due and due[0]:
                    conn.execute(f"VACUUM {schema}.jobs")
                    self.done.append("VACUUM")
                elif due and due[1]:
                    conn.execute(f"ANALYZE {schema}.jobs")
                    self.done.append("ANALYZE")

    def stop(self) -> None:
        self.halt.set()
        self.join(600)


@contextlib.contextmanager
def fresh_schema(base_url: str, emulate_autovacuum: float | None) -> Iterator[str]:
    url = with_schema(base_url, f"many_{secrets.token_hex(4)}")
    autovacuum = AutovacuumLike(url, emulate_autovacuum) if emulate_autovacuum else None
    if autovacuum is not None:
        autovacuum.start()
    try:
        yield url
    finally:
        if autovacuum is not None:
            autovacuum.stop()
            done = ", ".join(autovacuum.done) or "nothing (below the thresholds at each look)"
            print(f"autovacuum emulated on {schema_of(url)}: {done}", flush=True)
        with contextlib.suppress(Exception):
            benchapp.app.close()
        drop_schema(url)


# ---- reporting ------------------------------------------------------------------------
def ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.1f}"


def describe(run: Run) -> str:
    s = run.samples
    share = s.with_lock_wait / s.count if s.count else 0.0
    return (
        f"{run.rate:,.0f} jobs/s over {run.window_s:.1f} s; claim p50 {ms(run.claim_p50)} ms, "
        f"p99 {ms(run.claim_p99)} ms ({run.claims:,} claims); lock waits in {share:.1%} of "
        f"{s.count} samples (peak {s.peak_lock_waiting}); dead tuples {run.before.dead:,} -> "
        f"{run.after.dead:,}; load {run.load_before:.2f} -> {run.load_after:.2f}"
    )


def table(runs: list[Run]) -> list[str]:
    head = (
        "config",
        "rate jobs/s",
        "vs first",
        "claim p50/p99 ms",
        "claims (jobs/claim)",
        "lock-wait samples (peak)",
        "dead tuples before→after",
        "size before→after",
        "worker / PG CPU s per 1,000 jobs",
    )
    first = runs[0].rate if runs else 0.0
    rows = [head]
    for r in runs:
        s = r.samples
        share = s.with_lock_wait / s.count if s.count else 0.0
        rows.append(
            (
                r.config,
                f"{r.rate:,.0f}",
                f"{r.rate / first:.2f}x" if first else "-",
                f"{ms(r.claim_p50)} / {ms(r.claim_p99)}",
                f"{r.claims:,} ({r.jobs / r.claims:.1f})" if r.claims else "-",
                f"{share:.1%} of {s.count} ({s.peak_lock_waiting})",
                f"{r.before.dead:,} → {r.after.dead:,}",
                f"{mb(r.before.total)} → {mb(r.after.total)}",
                f"{r.worker_cpu / r.jobs * 1000:.2f} / {r.backend_cpu / r.jobs * 1000:.2f}",
            )
        )
    out = ["| " + " | ".join(row) + " |" for row in rows]
    out.insert(1, "|" + "|".join("---" for _ in head) + "|")
    return out


def details(run: Run) -> list[str]:
    s = run.samples
    b, a = run.before, run.after
    waits = ", ".join(f"{k} {v / s.count:.2f}" for k, v in s.waits.most_common(6)) or "none"
    locks = ", ".join(f"{k} {v}" for k, v in s.ungranted.most_common(4)) or "none"
    claims = ", ".join(f"{k} {v}" for k, v in s.claim_waits.most_common(6)) or "none seen"
    server = s.in_server_ms(run.claims)
    in_server = "?" if server is None else f"{server:.1f} ms"
    blockers = ", ".join(f"{k} {v}" for k, v in s.blockers.most_common(4)) or "none"
    waiters = "; ".join(f"{k} {v}" for k, v in s.waiters.most_common(4)) or "none"
    hot = a.hot_updates - b.hot_updates
    updates = a.updates - b.updates
    return [
        f"{run.config}: fill (one bulk enqueue) {run.fill_rate:,.0f} jobs/s; drain window "
        f"{run.window_s:.1f} s; claim mean {ms(run.claim_mean)} ms; load {run.load_before:.2f}"
        f" -> {run.load_after:.2f}",
        f"  backends of the run: {run.backends_peak} connections; active per sample: mean "
        f"{s.active_total / max(1, s.count):.2f}, peak {s.peak_active}; {s.slow} samples "
        "overran the interval",
        f"  what active backends waited on (mean backends per sample): {waits}",
        f"  of those, claim statements (backend-samples): {claims}; so about {in_server} "
        "in the server per claim (mean, by Little's law over the sampled time)",
        f"  ungranted pg_locks (backend-samples): {locks}; peak at once {s.peak_ungranted}",
        f"  lock waiters' blockers (whose, doing what; backend-samples): {blockers}",
        f"  lock waiters' statements (backend-samples): {waiters}",
        f"  table: live {b.live:,} -> {a.live:,}, dead {b.dead:,} -> {a.dead:,}; updates "
        f"{updates:,} ({hot / updates:.0%} HOT); heap {mb(b.heap)} -> {mb(a.heap)}, indexes "
        f"{mb(b.indexes)} -> {mb(a.indexes)}; autovacuum runs {b.autovacuums} -> "
        f"{a.autovacuums} (last {a.last_autovacuum or 'never'}), autoanalyze "
        f"{b.autoanalyzes} -> {a.autoanalyzes}, manual vacuums {b.vacuums} -> {a.vacuums}, "
        f"analyzes {b.analyzes} -> {a.analyzes}"
        if updates
        else f"  table: live {b.live:,} -> {a.live:,}, dead {b.dead:,} -> {a.dead:,}",
    ]


def scaling(runs: list[Run], configs: list[str]) -> str:
    """The drain rate (median over repeats) as worker processes are added up to nproc."""
    cores = len(os.sched_getaffinity(0))
    rates = {c: statistics.median(r.rate for r in runs if r.config == c) for c in configs}
    upto = [c for c in configs if parse_config(c)[0] <= cores]
    steps = " -> ".join(f"{c} {rates[c]:,.0f}" for c in upto)
    held = all(rates[b] >= rates[a] for a, b in itertools.pairwise(upto))
    beyond = ", ".join(f"{c} {rates[c]:,.0f}" for c in configs if c not in upto)
    return (
        f"rate (jobs/s, median of repeats) as workers are added up to nproc {cores}: {steps}"
        f" ({'held' if held else 'FELL'})" + (f"; beyond nproc: {beyond}" if beyond else "")
    )


def server_settings(url: str) -> str:
    with connect(url) as conn:
        values = {n: conn.execute(f"SHOW {n}").fetchone()[0] for n in SETTINGS}  # type: ignore[index]
    version = values.pop("server_version").split()[0]
    return f"PostgreSQL {version}: " + ", ".join(f"{k}={v}" for k, v in values.items())


def main() -> None:
    parser = argparse.ArgumentParser(
        description="many worker processes on one PostgreSQL (prints; asserts nothing)"
    )
    parser.add_argument(
        "--postgres",
        metavar="URL",
        default=DEFAULT_URL,
        help="server and database (default %(default)s); schemas many_<random> are "
        "created and dropped",
    )
    parser.add_argument(
        "--own-cluster",
        action="store_true",
        help="start a fresh PostgreSQL cluster with initdb's defaults (autovacuum on, fsync "
        "on) on a free port and measure there instead of --postgres; removed afterwards",
    )
    parser.add_argument(
        "--jobs", type=int, default=100_000, metavar="N", help="jobs per drain (default 100000)"
    )
    parser.add_argument(
        "--configs",
        default=DEFAULT_CONFIGS,
        metavar="WxS,...",
        help="worker processes x thread slots, in order (default %(default)s)",
    )
    parser.add_argument(
        "--repeat", type=int, default=1, metavar="R", help="runs of each configuration"
    )
    parser.add_argument(
        "--sample-ms",
        type=float,
        default=50.0,
        metavar="MS",
        help="interval of the lock sampler (default 50)",
    )
    parser.add_argument(
        "--one-schema",
        action="store_true",
        help="run every drain in one schema (each finds the finished jobs and dead "
        "tuples of those before it); default: a fresh schema per drain",
    )
    parser.add_argument(
        "--vacuum-between",
        action="store_true",
        help="VACUUM the jobs table by hand before each drain (default: never)",
    )
    parser.add_argument(
        "--emulate-autovacuum",
        nargs="?",
        type=float,
        const=0.0,
        default=None,
        metavar="NAPTIME",
        help="for a server run with autovacuum=off: a thread does for the jobs table what "
        "autovacuum would, with the server's thresholds and cost settings, every NAPTIME s "
        "(default: the server's autovacuum_naptime)",
    )
    args = parser.parse_args()
    try:
        configs = [f"{w}x{s}" for w, s in map(parse_config, args.configs.split(","))]
    except argparse.ArgumentTypeError as exc:
        parser.error(str(exc))
    if args.jobs < 1 or args.repeat < 1 or args.sample_ms <= 0:
        parser.error("--jobs, --repeat and --sample-ms must be positive")
    with contextlib.ExitStack() as cluster:
        if args.own_cluster:
            args.postgres = cluster.enter_context(own_cluster())
            print(f"own cluster: {args.postgres} (initdb defaults)", flush=True)
        run(args, configs)


def run(args: argparse.Namespace, configs: list[str]) -> None:

    if args.emulate_autovacuum == 0.0:
        with connect(args.postgres) as conn:
            row = conn.execute(
                "SELECT setting::float8 FROM pg_settings WHERE name = 'autovacuum_naptime'"
            ).fetchone()
        args.emulate_autovacuum = float(row[0])  # type: ignore[index]
    load0 = os.getloadavg()[0]
    print(f"machine: {machine()}; 1-min load {load0:.2f}", flush=True)
    print(f"server:  {server_settings(args.postgres)}", flush=True)
    print(
        f"{args.jobs:,} no-op jobs per drain; configurations {', '.join(configs)} x "
        f"{args.repeat}; {'one schema for all drains' if args.one_schema else 'a fresh schema per drain'}"
        f"; {'VACUUM by hand before each drain' if args.vacuum_between else 'no VACUUM by hand'}"
        + (
            f"; autovacuum emulated every {args.emulate_autovacuum:g} s"
            if args.emulate_autovacuum
            else "; autovacuum as the server runs it"
        ),
        flush=True,
    )
    runs: list[Run] = []
    plan = [c for _ in range(args.repeat) for c in configs]
    with contextlib.ExitStack() as stack:
        shared = (
            stack.enter_context(fresh_schema(args.postgres, args.emulate_autovacuum))
            if args.one_schema
            else None
        )
        for i, config in enumerate(plan, 1):
            with contextlib.ExitStack() as one:
                url = shared or one.enter_context(
                    fresh_schema(args.postgres, args.emulate_autovacuum)
                )
                run = drain(url, config, args)
            runs.append(run)
            print(f"[{i}/{len(plan)} {config}] {describe(run)}", flush=True)

    print()
    for run in runs:
        for line in details(run):
            print(line)
    print()
    for line in table(runs):
        print(line)
    print(
        "\nclaim p50/p99: the workers' own timing of each broker claim call (their final "
        "registry snapshots, merged; histogram estimates, within ~12%). lock-wait samples: "
        "share of samples with any backend of the run waiting on a heavyweight lock "
        f"(peak waiting at once); sampled every {args.sample_ms:g} ms."
    )
    print(scaling(runs, configs))
    print(
        f"\nmachine: {machine()}\nserver:  {server_settings(args.postgres)}\n"
        f"load:    1-min load average {load0:.2f} before, {os.getloadavg()[0]:.2f} after"
    )


if __name__ == "__main__":
    main()
