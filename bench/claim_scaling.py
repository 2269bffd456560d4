"""Claim latency vs. table size: does a claim cost the same with 1,000 or 1,000,000 ready jobs?

    .venv/bin/python bench/claim_scaling.py --broker 'postgresql://postgres@127.0.0.1/test?schema=bench'
    .venv/bin/python bench/claim_scaling.py --broker ... --no-sqlite --large 100000

For each size, a fresh PostgreSQL schema (dropped afterwards; SQLite: a temporary file)
is loaded with SQL (INSERT ... SELECT over generate_series / a recursive CTE, not through
enqueue), then VACUUM ANALYZE:

- small: ``--small`` ready jobs (default 1,000), no history
- large: ``--large`` ready jobs (default 1,000,000) plus as many succeeded jobs, older,
  so they sit first in the heap as they would after months of work

Then, timed through the broker's own methods: ``--probes`` idle probes (``has_work``,
what an idle worker asks on each wake-up), and ``--claims`` cycles of one claim of
``--batch`` jobs followed by a release of those jobs (so the ready count stays exactly
at the size). Prints median/p99 per size, the large/small ratio, the claim statement's
EXPLAIN (ANALYZE, BUFFERS) on the large table (and whether the generic plan a prepared
statement ends up with uses the same index), and what a transaction held open elsewhere
does to claims (PostgreSQL: claim + ack cycles while another session holds a snapshot).
Prints; asserts nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import re
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

from pgscratch import connect, is_postgres, schema_of, scratch_schema, server_info  # noqa: E402
from sluicegate.brokers import Broker, broker_from_url  # noqa: E402
from sluicegate.outcomes import Succeeded  # noqa: E402

QUEUE = ["default"]
LEASE = 30.0
RATIO_TARGET = 2.0  # the large table's median claim within 2x of the small one's

PG_FINISHED = """
INSERT INTO {schema}.jobs (queue, task, state, run_at, attempts, enqueued_at, started_at,
                           finished_at, result, lease_token, worker_id)
SELECT 'default', 'noop', 'succeeded', t, 1, t, t, t, 'null', g, 'bench-history'
FROM generate_series(1, %(n)s) AS g
CROSS JOIN LATERAL (SELECT now() - interval '10 days' + g * interval '1 ms' AS t) AS x
"""
PG_READY = """
INSERT INTO {schema}.jobs (queue, task, state, run_at, enqueued_at)
SELECT 'default', 'noop', 'ready', t, t
FROM generate_series(1, %(n)s) AS g
CROSS JOIN LATERAL (SELECT now() - interval '1 day' + g * interval '1 ms' AS t) AS x
"""
SQLITE_ROWS = """
WITH RECURSIVE g(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM g WHERE x < :n)
INSERT INTO jobs (queue, task, state, run_at, attempts, enqueued_at, started_at,
                  finished_at, result, lease_token, worker_id)
SELECT 'default', 'noop', :state, :t0 + x / 1000.0, :attempts, :t0 + x / 1000.0,
       {finished}, {finished}, {result}, {token}, {worker}
FROM g
"""


# ---- helpers ----------------------------------------------------------------------
def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(1, math.ceil(q / 100 * len(ordered))) - 1]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f} ms"


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


@dataclass
class Size:
    label: str
    ready: int
    finished: int
    load_s: float = 0.0
    probe: list[float] = field(default_factory=list)
    claim: list[float] = field(default_factory=list)
    release: list[float] = field(default_factory=list)
    statement_ms: float = float("nan")  # PostgreSQL: the claim statement's execution time
    statement_buffers: int = 0

    def p50(self, values: list[float]) -> float:
        return statistics.median(values) if values else float("nan")


# ---- loading ------------------------------------------------------------------------
def load_postgres(url: str, ready: int, finished: int) -> float:
    """Create the schema through the broker (migration), then bulk-load rows in SQL."""
    broker_from_url(url).close()
    schema = schema_of(url)
    start = time.perf_counter()
    with connect(url) as conn:
        if finished:
            conn.execute(PG_FINISHED.format(schema=schema), {"n": finished})  # type: ignore[arg-type]
        conn.execute(PG_READY.format(schema=schema), {"n": ready})  # type: ignore[arg-type]
        conn.execute(f"VACUUM ANALYZE {schema}.jobs")
    elapsed = time.perf_counter() - start
    # Write the load's dirty pages out now, so that the timed commits do not compete with
    # a checkpoint flushing them (needs superuser or pg_checkpoint; skipped without).
    with contextlib.suppress(Exception), connect(url) as conn:
        conn.execute("CHECKPOINT")
    return elapsed


def load_sqlite(url: str, ready: int, finished: int) -> float:
    broker_from_url(url).close()
    path = url.removeprefix("sqlite:///")
    start = time.perf_counter()
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        t0 = time.time()
        conn.execute("BEGIN")
        if finished:
            sql = SQLITE_ROWS.format(
                finished=":t0 + x / 1000.0", result="'null'", token="x", worker="'bench-history'"
            )
            conn.execute(
                sql, {"n": finished, "state": "succeeded", "t0": t0 - 864000, "attempts": 1}
            )
        sql = SQLITE_ROWS.format(finished="NULL", result="NULL", token="NULL", worker="NULL")
        conn.execute(sql, {"n": ready, "state": "ready", "t0": t0 - 86400, "attempts": 0})
        conn.execute("COMMIT")
        conn.execute("ANALYZE")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    return time.perf_counter() - start


@contextmanager
def fresh_url(kind: str, given: str | None) -> Iterator[str]:
    if kind == "postgresql":
        with scratch_schema(given) as url:  # type: ignore[arg-type]
            yield url
        return
    folder = tempfile.mkdtemp(prefix="sluicegate-claims-")
    try:
        yield f"sqlite:///{folder}/claims.db"
    finally:
        shutil.rmtree(folder, ignore_errors=True)


# ---- measuring ----------------------------------------------------------------------
def cycles(broker: Broker, size: Size, count: int, batch: int) -> None:
    """``count`` x (claim ``batch`` jobs, then release them): the ready count stays put."""
    for _ in range(count):
        start = time.perf_counter()
        claimed = broker.claim(QUEUE, batch, LEASE, "bench-claims")
        middle = time.perf_counter()
        if len(claimed) != batch:
            raise RuntimeError(f"claimed {len(claimed)} of {batch} jobs")
        lost = broker.release([c.claim for c in claimed])
        end = time.perf_counter()
        if lost:
            raise RuntimeError(f"release refused for {len(lost)} jobs")
        size.claim.append(middle - start)
        size.release.append(end - middle)


def measure(kind: str, args: argparse.Namespace, size: Size, url: str) -> Broker:
    loader = load_postgres if kind == "postgresql" else load_sqlite
    size.load_s = loader(url, size.ready, size.finished)
    broker = broker_from_url(url)
    for _ in range(args.probes):
        size.probe.append(timed(lambda: broker.has_work(QUEUE)))
    cycles(broker, Size("warm-up", 0, 0), 10, args.batch)  # plans cached, pages in memory
    cycles(broker, size, args.claims, args.batch)
    return broker


def claim_params(batch: int) -> dict[str, object]:
    return {
        "queues": QUEUE,
        "n": batch,
        "token": 1,
        "lease": LEASE,
        "worker": "explain",
        "now": None,
        "promote": True,
    }


def statement_cost(url: str, broker: Broker, batch: int, runs: int = 9) -> tuple[float, int]:
    """Median server-side execution time (ms) and shared buffers touched by the claim
    statement alone, from EXPLAIN (ANALYZE, BUFFERS), each run rolled back: the claim's
    cost without commit, fsync and round trips."""
    claim_sql = broker._queries["claim"]  # type: ignore[attr-defined]
    times, buffers = [], []
    with connect(url, autocommit=False) as conn:
        for _ in range(runs):
            cursor = conn.execute("EXPLAIN (ANALYZE, BUFFERS) " + claim_sql, claim_params(batch))
            plan = [r[0] for r in cursor]
            conn.rollback()
            times.append(float(plan[-1].split(":")[1].split()[0]))  # "Execution Time: 0.5 ms"
            hits = plan[1].strip().removeprefix("Buffers: shared ").split()  # hit=N read=M ...
            buffers.append(sum(int(h.split("=")[1]) for h in hits if h[:4] in ("hit=", "read")))
    return statistics.median(times), int(statistics.median(buffers))


def generic_plan(conn: Any, query: str, params: dict[str, object]) -> list[str]:
    """EXPLAIN ANALYZE of the generic plan, as the broker's connections run it
    (plan_cache_mode=force_generic_plan, jit off): PREPARE, then EXECUTE; rolled back.
    EXPLAIN with parameters would plan for their values instead."""
    from psycopg import sql as pgsql  # PostgreSQL runs only: psycopg is an optional extra

    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        if match.group(1) not in names:
            names.append(match.group(1))
        return f"${names.index(match.group(1)) + 1}"

    conn.execute("SET plan_cache_mode = force_generic_plan")
    conn.execute("SET jit = off")
    conn.execute("PREPARE claim AS " + re.sub(r"%\((\w+)\)s", number, query).rstrip("; \n"))
    values = pgsql.SQL(", ").join(pgsql.Literal(params[n]) for n in names)
    plan = conn.execute(pgsql.SQL("EXPLAIN (ANALYZE) EXECUTE claim({})").format(values))
    lines = [r[0] for r in plan]
    conn.rollback()
    return lines


def explain(url: str, broker: Broker, batch: int) -> list[str]:
    """EXPLAIN (ANALYZE, BUFFERS) of the broker's own claim statement, rolled back; then
    the generic plan's indexes and time (the broker's connections force generic plans)."""
    claim_sql = broker._queries["claim"]  # type: ignore[attr-defined]
    params = claim_params(batch)
    lines = ["EXPLAIN (ANALYZE, BUFFERS) of the claim statement (custom plan, rolled back):"]
    with connect(url, autocommit=False) as conn:
        lines += [
            "  " + r[0] for r in conn.execute("EXPLAIN (ANALYZE, BUFFERS) " + claim_sql, params)
        ]
        conn.rollback()
        generic = generic_plan(conn, claim_sql, params)
    used = sorted({line.split(" using ")[1].split()[0] for line in generic if " using " in line})
    took = next((line.strip() for line in generic if line.startswith("Execution Time")), "?")
    lines.append(
        f"generic plan (what the broker's connections run): uses {', '.join(used)}; {took}"
    )
    # The probe's plan, scanning from the heap's start as a first scan does (later scans may
    # start where an earlier one stopped: synchronize_seqscans).
    probe_sql = broker._queries["probe_work"]  # type: ignore[attr-defined]
    with connect(url) as conn:
        conn.execute("SET synchronize_seqscans = off")
        cursor = conn.execute(
            "EXPLAIN (ANALYZE, BUFFERS) " + probe_sql, {"queues": QUEUE, "now": None}
        )
        probe = [r[0] for r in cursor]
    lines.append(
        "EXPLAIN (ANALYZE, BUFFERS) of the idle probe (has_work), synchronize_seqscans=off:"
    )
    lines += ["  " + line for line in probe]
    return lines


def held_snapshot(url: str, broker: Broker, count: int, batch: int) -> list[str]:
    """Claim + ack cycles (a worker's real path) while another session holds a snapshot:
    dead index entries of acked jobs cannot be cleaned up, so each claim steps over more."""
    before, during, after = Size("before", 0, 0), Size("during", 0, 0), Size("after", 0, 0)

    def claim_ack(size: Size, n: int) -> None:
        for _ in range(n):
            start = time.perf_counter()
            claimed = broker.claim(QUEUE, batch, LEASE, "bench-claims")
            size.claim.append(time.perf_counter() - start)
            broker.record([], [Succeeded(c.claim, "null") for c in claimed])

    tail = max(10, count // 10)
    claim_ack(before, tail)
    with connect(url, autocommit=False) as other:
        other.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        other.execute("SELECT count(*) FROM pg_class").fetchone()  # the snapshot is taken
        claim_ack(during, count)
        other.rollback()
    claim_ack(after, tail)
    first, last = during.claim[:tail], during.claim[-tail:]
    return [
        f"claim + ack, {batch} jobs per claim, while another session holds a REPEATABLE READ "
        f"snapshot ({count} claims, {count * batch:,} jobs acked meanwhile):",
        f"  claim p50 before it opened (last {tail})      {ms(statistics.median(before.claim))}",
        f"  claim p50, first {tail} claims with it open   {ms(statistics.median(first))}",
        f"  claim p50, last {tail} claims with it open    {ms(statistics.median(last))}",
        f"  claim p50 after it ended (next {tail})        {ms(statistics.median(after.claim))}",
    ]


# ---- reporting ----------------------------------------------------------------------
def report(kind: str, sizes: list[Size], args: argparse.Namespace) -> list[str]:
    head = (
        "size",
        "ready",
        "succeeded",
        "load",
        "probe p50",
        "probe max",
        "claim p50",
        "claim p99",
        "release p50",
    )
    rows = [head] + [
        (
            s.label,
            f"{s.ready:,}",
            f"{s.finished:,}",
            f"{s.load_s:.1f} s",
            ms(s.p50(s.probe)) if s.probe else "-",
            ms(max(s.probe)) if s.probe else "-",
            ms(s.p50(s.claim)),
            ms(percentile(s.claim, 99)),
            ms(s.p50(s.release)),
        )
        for s in sizes
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    out = [
        "  ".join(
            c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))
        )
        for r in rows
    ]
    out.insert(1, "  ".join("-" * w for w in widths))
    small, large = sizes
    ratio = large.p50(large.claim) / small.p50(small.claim)
    verdict = "met" if ratio <= RATIO_TARGET else "MISSED"
    probe_ratio = large.p50(large.probe) / small.p50(small.probe) if small.probe else float("nan")
    out.append(
        f"{kind}: claim p50 large/small = {ratio:.2f}x (target <= {RATIO_TARGET:g}x: {verdict}); "
        f"probe p50 large/small = {probe_ratio:.1f}x"
    )
    if kind == "postgresql":
        costs = ", ".join(
            f"{s.label} {s.statement_ms:.3f} ms / {s.statement_buffers} buffers" for s in sizes
        )
        out.append(
            f"claim statement alone (EXPLAIN ANALYZE execution time, median of 9, rolled back): "
            f"{costs}; large/small = {large.statement_ms / small.statement_ms:.2f}x"
        )
    return out


def run(kind: str, args: argparse.Namespace) -> list[str]:
    sizes = [Size("small", args.small, 0), Size("large", args.large, args.large)]
    extra: list[str] = []
    for size in sizes:
        with fresh_url(kind, args.broker) as url:
            print(
                f"[{kind} {size.label}] loading {size.ready:,} ready + {size.finished:,} "
                "succeeded jobs ...",
                flush=True,
            )
            broker = measure(kind, args, size, url)
            try:
                print(
                    f"[{kind} {size.label}] loaded in {size.load_s:.1f} s; claim p50 "
                    f"{ms(size.p50(size.claim))}, probe p50 {ms(size.p50(size.probe))}",
                    flush=True,
                )
                if kind == "postgresql":
                    size.statement_ms, size.statement_buffers = statement_cost(
                        url, broker, args.batch
                    )
                if kind == "postgresql" and size is sizes[-1]:
                    extra += explain(url, broker, args.batch)
                    if args.held_claims:
                        extra += held_snapshot(url, broker, args.held_claims, args.batch)
            finally:
                broker.close()
    return report(kind, sizes, args) + extra


def main() -> None:
    parser = argparse.ArgumentParser(description="claim latency vs. table size (prints only)")
    parser.add_argument(
        "--broker",
        metavar="URL",
        help="postgresql://...?schema=NAME: fresh schemas NAME_xxxx, dropped "
        "afterwards (without it only SQLite is measured)",
    )
    parser.add_argument(
        "--small",
        type=int,
        default=1_000,
        metavar="N",
        help="ready jobs of the small table (default 1000)",
    )
    parser.add_argument(
        "--large",
        type=int,
        default=1_000_000,
        metavar="N",
        help="ready jobs, and as many succeeded ones, of the large table (default 1000000)",
    )
    parser.add_argument(
        "--claims",
        type=int,
        default=200,
        metavar="N",
        help="timed claim + release cycles per size (default 200)",
    )
    parser.add_argument(
        "--batch",
        type=int,
        default=8,
        metavar="N",
        help="jobs per claim (default 8: a pool of 8 free slots)",
    )
    parser.add_argument(
        "--probes",
        type=int,
        default=20,
        metavar="N",
        help="timed idle probes (has_work) per size (default 20)",
    )
    parser.add_argument(
        "--held-claims",
        type=int,
        default=1000,
        metavar="N",
        help="claim + ack cycles while a snapshot is held elsewhere "
        "(PostgreSQL; default 1000, 0 skips)",
    )
    parser.add_argument("--no-sqlite", action="store_true", help="skip the SQLite measurement")
    args = parser.parse_args()
    if args.broker and not is_postgres(args.broker):
        parser.error("--broker must be a postgresql:// URL (SQLite uses temporary files)")
    if min(args.small, args.large, args.claims, args.batch) < 1 or args.small < args.batch:
        parser.error("--small, --large, --claims and --batch must be positive, --small >= --batch")
    kinds = (["postgresql"] if args.broker else []) + ([] if args.no_sqlite else ["sqlite"])
    if not kinds:
        parser.error("nothing to measure: give --broker or drop --no-sqlite")
    started = time.perf_counter()
    load_before = f"{os.getloadavg()[0]:.2f}"
    lines: list[str] = []
    for kind in kinds:
        lines += ["", f"== {kind} ==", *run(kind, args)]
    print()
    print(
        f"sluicegate claim scaling: {args.claims} claims of {args.batch} jobs per size "
        f"(each claim then released), {args.probes} probes"
    )
    print(f"machine: nproc {os.cpu_count()}, SQLite {sqlite3.sqlite_version}")
    if args.broker:
        print(f"server:  {server_info(args.broker)}")
    print(
        f"load:    1-min load average {load_before} before, {os.getloadavg()[0]:.2f} after; "
        f"run took {time.perf_counter() - started:.0f} s"
    )
    for line in lines:
        print(line)


if __name__ == "__main__":
    main()
