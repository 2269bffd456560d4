"""A seeded chaos soak on PostgreSQL: real workers and producers under interleaved faults,
then a drain and a table of verdicts. ``make chaos`` runs it (``CHAOS_MINUTES``, default 5;
``CHAOS_SEED``, default random and printed).

    .venv/bin/python chaos/soak.py [--minutes 5 | --seconds 30] [--seed N] [--out FILE]

It starts a throwaway cluster (initdb/pg_ctl; exit 2 with a message without them), a
loopback proxy in front of it (tests/apps/tcpproxy.py), ``--workers`` real ``sluicegate
worker soakapp:app`` processes and two producer processes, both through the proxy. The
producers enqueue ``soak`` jobs (50-500 ms of sleep; chaos/soakapp.py) at a steady total
``--rate``, each with a unique key, and write what each enqueue said to a file. A seeded
scheduler then fires one fault at a time, every 2-6 s: SIGKILL a worker (a replacement
starts at once), SIGSTOP one for 1-6 s, ``proxy.cut()``, a proxy black hole for 2-8 s, and
``pg_ctl restart -m immediate``. The first two workers are never SIGKILLed (they may be
stopped or cut off): their RSS is the leak witness. At the end: faults stop, producers
stop, the queue drains, workers get SIGTERM.

Verdicts (the script exits 1 when any of the first three is not 0):

- lost: jobs enqueue reported stored, plus jobs whose enqueue raised EnqueueFateUnknown
  and which exist (looked up by unique key), that are missing or neither succeeded nor
  dead after the drain.
- duplicates: jobs whose body ran to completion (an ``end`` line) more than once. Every
  completed run but the one whose result the broker kept must be *explained*: its worker
  logged "lease lost on job <id>" (fencing refused its outcome), or was SIGSTOPped or
  SIGKILLed, or a network fault (cut, black hole, server restart) fell, between its start
  and one lease after its end. Unexplained otherwise.
- stale calls accepted: succeeded jobs whose stored result does not come from the attempt
  the broker charged last (``result["attempt"] != job.attempts``), or names no run that
  completed (no ``end`` line for that job, attempt and pid). Fencing tokens exist to make
  this 0: an outcome from an earlier claim must be refused, never written over a later
  one.
- stale calls refused: "lease lost on job" lines in the workers' logs (they survive
  SIGKILL), the workers' ``lease_lost`` figure.
- recovery time: for each SIGKILL or SIGSTOP, from the signal until every job the worker
  held then (read from the server just before) started again elsewhere or finished.
- worker RSS: VmRSS of the never-killed workers, sampled every 5 s; the mean of the first
  minute against the last (first and last third for runs under 3 minutes).
- the jobs table: pg_total_relation_size and n_dead_tup with autovacuum on (the default).
  An immediate restart drops the statistics, so these count since the last restart.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
for extra in (HERE, ROOT / "tests", ROOT / "tests" / "apps"):
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))

from support.brokers import rewrite  # noqa: E402  (tests/support: the suite's URL helpers)

SCHEMA = "soak"
LEASE = 3.0
FAULT_KINDS = ("sigkill", "sigstop", "cut", "blackhole", "restart")
FAULT_WEIGHTS = (3, 3, 2, 2, 1)
PROTECTED = 2  # the first workers are never SIGKILLed: the RSS witnesses


def _gap(text: str) -> tuple[float, float]:
    """``LO,HI`` seconds, 0 < LO <= HI."""
    try:
        lo, hi = (float(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected LO,HI seconds, got {text!r}") from None
    if not 0 < lo <= hi:
        raise argparse.ArgumentTypeError(f"expected 0 < LO <= HI, got {text!r}")
    return lo, hi


# ---- producer process ---------------------------------------------------------------


def produce(url: str, index: int, rate: float, seed: int, folder: str, out: str) -> None:
    """Enqueue ``soak`` jobs at ``rate`` a second until SIGTERM; one JSON line per enqueue:
    stored (with the id), unknown (EnqueueFateUnknown) or error (its class)."""
    from sluicegate import App, BrokerUnavailable, EnqueueFateUnknown

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    rng = random.Random(seed * 1000 + index)
    app = App(broker=url)
    n = 0
    next_at = time.monotonic()
    with open(out, "a", buffering=1) as log:
        while not stop.is_set():
            n += 1
            key = f"p{index}-{n}"
            seconds = round(rng.uniform(0.05, 0.5), 3)
            record: dict[str, Any] = {"key": key, "at": time.time()}
            try:
                job = app.enqueue("soak", args=[key, seconds, folder], queue="soak", unique_key=key)
            except EnqueueFateUnknown:
                record["outcome"] = "unknown"
            except BrokerUnavailable as exc:
                record["outcome"] = "error"
                record["error"] = type(exc).__name__
            else:
                record["outcome"] = "stored"
                record["id"] = int(job.id)
            log.write(json.dumps(record) + "\n")
            next_at = max(next_at + 1 / rate, time.monotonic() - 1.0)  # no burst after a wait
            stop.wait(max(0.0, next_at - time.monotonic()))
    app.close()


# ---- the soak ---------------------------------------------------------------------


@dataclass
class Fault:
    kind: str
    at: float  # wall time
    until: float  # wall time the fault ended (== at for instant ones)
    pid: int | None = None
    held: list[tuple[int, int]] = field(default_factory=list)  # (job id, attempt) at the time
    asked: float = 0.0  # when ``held`` was read (a job may end between that and the signal)


def percentile(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = min(len(ordered) - 1, max(0, round(p / 100 * (len(ordered) - 1))))
    return ordered[k]


def rss_kib(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError):
        return None
    return None


class Soak:
    def __init__(self, args: argparse.Namespace, bindir: str) -> None:
        from tcpproxy import TcpProxy

        from support import pg as pgserver
        from support.fleet import WorkerProcess

        self.args = args
        self.rng = random.Random(args.seed)
        self.folder = Path(args.workdir)
        self.effects = self.folder / "effects"
        self.effects.mkdir(parents=True, exist_ok=True)
        self.cluster = pgserver.Cluster(bindir)
        self.cluster.start()
        self.direct = rewrite(self.cluster.dsn, schema=SCHEMA)
        self.proxy = TcpProxy("127.0.0.1", self.cluster.port)
        self.worker_url = rewrite(
            self.cluster.dsn, port=self.proxy.port, schema=SCHEMA, application_name="sg-soak"
        )
        self.WorkerProcess = WorkerProcess
        self.workers: list[Any] = []  # every worker ever started
        self.killed: set[int] = set()
        self.faults: list[Fault] = []
        self.rss: dict[int, list[tuple[float, int]]] = defaultdict(list)
        self.stop_sampling = threading.Event()
        self.producers: list[subprocess.Popen[bytes]] = []
        os.environ["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(HERE), os.environ.get("PYTHONPATH", "")) if p
        )

    # ---- processes ------------------------------------------------------------
    def start_worker(self) -> Any:
        log = self.folder / f"worker-{len(self.workers)}.log"
        worker = self.WorkerProcess(
            self.worker_url,
            [f"soak=soak:{self.args.slots}"],
            log,
            lease=LEASE,
            shutdown_timeout=15,
            app="soakapp:app",
        )
        self.workers.append(worker)
        return worker

    def live_workers(self) -> list[Any]:
        return [w for w in self.workers if w.pid not in self.killed and w.alive()]

    def start_producers(self) -> None:
        for index in range(self.args.producers):
            out = self.folder / f"producer-{index}.jsonl"
            log = open(self.folder / f"producer-{index}.log", "wb")  # noqa: SIM115
            self.producers.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        __file__,
                        "--produce",
                        str(index),
                        "--url",
                        self.worker_url,
                        "--rate",
                        str(self.args.rate / self.args.producers),
                        "--seed",
                        str(self.args.seed),
                        "--workdir",
                        str(self.folder),
                        "--out",
                        str(out),
                    ],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            )

    def sample_rss(self) -> None:
        while not self.stop_sampling.wait(5.0):
            now = time.monotonic()
            for worker in self.workers[: self.args.workers]:
                if worker.pid in self.killed:
                    continue
                kib = rss_kib(worker.pid)
                if kib is not None:
                    self.rss[worker.pid].append((now, kib))

    # ---- the server, read directly ---------------------------------------------
    def sql(self, query: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        import psycopg

        with psycopg.connect(self.cluster.dsn, autocommit=True, connect_timeout=10) as conn:
            return list(conn.execute(query, params).fetchall())

    def held_by(self, pid: int) -> list[tuple[int, int]]:
        return [
            (int(r[0]), int(r[1]))
            for r in self.sql(
                f"SELECT id, attempts FROM {SCHEMA}.jobs WHERE state IN ('claimed', 'running') "
                "AND worker_id LIKE %s",
                (f"%-{pid}-%",),
            )
        ]

    def unfinished(self) -> int:
        row = self.sql(
            f"SELECT count(*) FROM {SCHEMA}.jobs "
            "WHERE state IN ('scheduled', 'ready', 'claimed', 'running')"
        )
        return int(row[0][0])

    # ---- faults -------------------------------------------------------------
    def fire(self, kind: str) -> None:
        rng = self.rng
        if kind in ("sigkill", "sigstop"):
            live = self.live_workers()
            if kind == "sigkill":
                live = [w for w in live if w not in self.workers[:PROTECTED]]
            if not live:
                return
            worker = rng.choice(live)
            asked = time.time()
            held = self.held_by(worker.pid)
            at = time.time()
            if kind == "sigkill":
                worker.send(signal.SIGKILL)
                worker.proc.wait(30)
                self.killed.add(worker.pid)
                self.faults.append(Fault(kind, at, at, worker.pid, held, asked))
                self.start_worker()
            else:
                worker.send(signal.SIGSTOP)
                time.sleep(rng.uniform(1.0, 6.0))
                worker.send(signal.SIGCONT)
                self.faults.append(Fault(kind, at, time.time(), worker.pid, held, asked))
        elif kind == "cut":
            at = time.time()
            self.proxy.cut()
            self.faults.append(Fault(kind, at, at))
        elif kind == "blackhole":
            at = time.time()
            self.proxy.blackhole()
            time.sleep(rng.uniform(2.0, 8.0))
            self.proxy.restore()
            self.faults.append(Fault(kind, at, time.time()))
        elif kind == "restart":
            at = time.time()
            self.cluster.restart("immediate")
            self.faults.append(Fault(kind, at, time.time()))

    # ---- the run ------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        from sluicegate import App

        say = self.args.say
        App(broker=self.direct).close()  # migrates the schema
        for _ in range(self.args.workers):
            self.start_worker()
        deadline = time.monotonic() + 60
        while not all("started" in w.log() for w in self.workers):
            if time.monotonic() > deadline:
                raise RuntimeError("workers did not start:\n" + self.workers[0].log())
            time.sleep(0.2)
        sampler = threading.Thread(target=self.sample_rss, daemon=True)
        sampler.start()
        began = time.monotonic()
        self.start_producers()
        time.sleep(min(5.0, self.args.seconds / 6))  # a calm start
        end = began + self.args.seconds
        unfired = list(FAULT_KINDS) if self.args.every_kind else []
        self.rng.shuffle(unfired)
        while time.monotonic() < end or unfired:  # --every-kind: each fires, however slow
            kind = unfired.pop() if unfired else self.rng.choices(FAULT_KINDS, FAULT_WEIGHTS)[0]
            self.fire(kind)
            say(f"  {time.monotonic() - began:6.1f} s  {kind}")
            gap = self.rng.uniform(*self.args.fault_gap)
            time.sleep(gap if unfired else max(0.0, min(gap, end - time.monotonic())))
        faulted = time.monotonic() - began
        for producer in self.producers:
            producer.send_signal(signal.SIGTERM)
        for producer in self.producers:
            producer.wait(60)
        say(f"faults over after {faulted:.0f} s; draining")
        drain_began = time.monotonic()
        while self.unfinished():
            if time.monotonic() - drain_began > self.args.drain_timeout:
                say(f"drain timed out with {self.unfinished()} jobs unfinished")
                break
            time.sleep(0.5)
        drained = time.monotonic() - drain_began
        self.stop_sampling.set()
        sampler.join()
        for worker in self.live_workers():
            worker.send(signal.SIGTERM)
        exits = [w.proc.wait(60) for w in self.live_workers()]
        return {"seconds": faulted, "drain": drained, "exits": exits}

    def close(self) -> None:
        for producer in self.producers:
            if producer.poll() is None:
                producer.kill()
                producer.wait()
        for worker in self.workers:
            worker.kill()
        self.proxy.close()
        self.cluster.stop()

    # ---- verdicts ------------------------------------------------------------
    def verdicts(self, run: dict[str, Any]) -> dict[str, Any]:  # noqa: C901
        # What the producers were told.
        enqueues: list[dict[str, Any]] = []
        for path in sorted(self.folder.glob("producer-*.jsonl")):
            for line in path.read_text().splitlines():
                if line.strip():
                    enqueues.append(json.loads(line))
        outcomes = Counter(e["outcome"] for e in enqueues)
        errors = Counter(e.get("error") for e in enqueues if e["outcome"] == "error")
        stored = {e["id"]: e["key"] for e in enqueues if e["outcome"] == "stored"}
        unknown_keys = [e["key"] for e in enqueues if e["outcome"] == "unknown"]

        # What the server holds.
        rows = self.sql(
            f"SELECT id, state, attempts, result, unique_key, worker_id FROM {SCHEMA}.jobs"
        )
        jobs = {int(r[0]): r for r in rows}
        by_key = {r[4]: int(r[0]) for r in rows}
        landed = [by_key[k] for k in unknown_keys if k in by_key]
        expected = set(stored) | set(landed)
        lost = sorted(
            j for j in expected if j not in jobs or jobs[j][1] not in ("succeeded", "dead")
        )
        states = Counter(r[1] for r in rows)

        # What the task bodies did.
        starts: dict[int, list[tuple[int, int, float]]] = defaultdict(list)
        ends: dict[int, list[tuple[int, int, float]]] = defaultdict(list)
        for path in self.effects.glob("*.log"):
            for line in path.read_text().splitlines():
                parts = line.split()
                if len(parts) != 5:
                    continue
                what, job_id, attempt, pid, at = parts
                bucket = starts if what == "start" else ends
                bucket[int(job_id)].append((int(attempt), int(pid), float(at)))
        start_at = {(j, a, p): t for j, runs in starts.items() for a, p, t in runs}

        # Workers' words: lease lost per (pid, job).
        refused = 0
        lease_lost: set[tuple[int, int]] = set()
        for worker in self.workers:
            for line in worker.log().splitlines():
                if "lease lost on job" in line:
                    refused += 1
                    job_id = int(line.split("lease lost on job ", 1)[1].split(":")[0])
                    lease_lost.add((worker.pid, job_id))

        # Stale calls accepted.
        stale_accepted = []
        for job_id, row in jobs.items():
            if row[1] != "succeeded":
                continue
            result = json.loads(row[3]) if row[3] else None
            attempt, pid = (result or {}).get("attempt"), (result or {}).get("pid")
            if attempt != row[2] or (attempt, pid) not in [(a, p) for a, p, _ in ends[job_id]]:
                stale_accepted.append(job_id)

        # Duplicates.
        lease = LEASE
        net = [f for f in self.faults if f.kind in ("cut", "blackhole", "restart")]
        proc_faults = [f for f in self.faults if f.kind in ("sigkill", "sigstop")]
        duplicates = explained = 0
        explained_by: Counter[str] = Counter()
        unexplained: list[int] = []
        for job_id, runs in ends.items():
            if len(runs) < 2:
                continue
            duplicates += 1
            row = jobs.get(job_id)
            result = json.loads(row[3]) if row and row[3] else {}
            # The run whose result was kept: the last to end with its attempt and pid (after
            # a server crash loses a claim, the next claim charges the same attempt again,
            # possibly in the same worker).
            kept_key = (result.get("attempt"), result.get("pid"))
            matching = [r for r in runs if (r[0], r[1]) == kept_key]
            kept = max(matching, key=lambda r: r[2]) if matching else None
            ok = True
            for attempt, pid, end_at in runs:
                if (attempt, pid, end_at) == kept:
                    continue
                began = start_at.get((job_id, attempt, pid), end_at)
                window = (began, end_at + lease)
                if (pid, job_id) in lease_lost:
                    explained_by["lease lost logged"] += 1
                elif any(
                    f.pid == pid and f.at <= window[1] and f.until >= window[0] for f in proc_faults
                ):
                    explained_by["worker stopped/killed"] += 1
                elif any(f.at <= window[1] and f.until >= window[0] for f in net):
                    explained_by["network fault / restart"] += 1
                else:
                    ok = False
            if ok:
                explained += 1
            else:
                unexplained.append(job_id)

        # Recovery times.
        recovery: list[float] = []
        unrecovered = 0
        for fault in proc_faults:
            if not fault.held:
                continue
            latest = fault.at
            for job_id, attempt in fault.held:
                candidates = [
                    t
                    for a, p, t in starts.get(job_id, [])
                    if t >= fault.at and (p != fault.pid or a > attempt)
                ]
                candidates += [
                    max(t, fault.at)
                    for a, p, t in ends.get(job_id, [])
                    if t >= fault.asked and p == fault.pid
                ]
                if not candidates:
                    unrecovered += 1
                    continue
                latest = max(latest, min(candidates))
            recovery.append(latest - fault.at)

        # RSS of the never-killed workers.
        rss_rows = []
        for pid, samples in self.rss.items():
            if pid in self.killed or len(samples) < 3:
                continue
            t0, t1 = samples[0][0], samples[-1][0]
            window = 60.0 if t1 - t0 >= 180 else (t1 - t0) / 3
            first = [k for t, k in samples if t <= t0 + window]
            last = [k for t, k in samples if t >= t1 - window]
            a, b = statistics.mean(first), statistics.mean(last)
            rss_rows.append((pid, a, b, (b - a) / a * 100))

        size, dead, live, autovacuums, last_autovacuum = self.sql(
            "SELECT pg_total_relation_size(relid), n_dead_tup, n_live_tup, autovacuum_count, "
            "last_autovacuum FROM pg_stat_user_tables WHERE schemaname = %s AND relname = 'jobs'",
            (SCHEMA,),
        )[0]
        autovacuum = self.sql("SHOW autovacuum")[0][0]
        return {
            "run": run,
            "enqueues": len(enqueues),
            "outcomes": outcomes,
            "errors": errors,
            "stored": len(stored),
            "unknown": len(unknown_keys),
            "landed": len(landed),
            "jobs": len(jobs),
            "states": states,
            "lost": lost,
            "duplicates": duplicates,
            "explained": explained,
            "explained_by": explained_by,
            "unexplained": unexplained,
            "refused": refused,
            "stale_accepted": stale_accepted,
            "faults": Counter(f.kind for f in self.faults),
            "recovery": recovery,
            "unrecovered": unrecovered,
            "rss": rss_rows,
            "size": size,
            "dead": dead,
            "live": live,
            "autovacuums": autovacuums,
            "last_autovacuum": last_autovacuum,
            "autovacuum": autovacuum,
            "workers_started": len(self.workers),
            "runs": sum(len(r) for r in starts.values()),
        }


def table(v: dict[str, Any], args: argparse.Namespace) -> str:
    run = v["run"]
    faults = v["faults"]
    why = ", ".join(f"{k} {n}" for k, n in v["explained_by"].items()) or "none"
    rows: list[tuple[str, str]] = [
        ("seed", str(args.seed)),
        (
            "duration",
            f"{run['seconds']:.0f} s of faults, drained in {run['drain']:.1f} s",
        ),
        (
            "setup",
            f"{args.workers} workers x {args.slots} slots, lease {LEASE:g} s, "
            f"{args.producers} producers at {args.rate:g} jobs/s in all",
        ),
        (
            "enqueues",
            f"{v['enqueues']}: stored {v['stored']}, fate unknown {v['unknown']} "
            f"(landed {v['landed']}), refused {v['outcomes'].get('error', 0)}"
            + (f" {dict(v['errors'])}" if v["errors"] else ""),
        ),
        ("jobs", f"{v['jobs']} in the table: {dict(sorted(v['states'].items()))}"),
        ("task runs started", str(v["runs"])),
        (
            "faults",
            ", ".join(f"{k} {faults.get(k, 0)}" for k in FAULT_KINDS)
            + f" (total {sum(faults.values())}); workers started {v['workers_started']}",
        ),
        ("LOST", str(len(v["lost"])) + (f" {v['lost'][:10]}" if v["lost"] else "")),
        (
            "duplicates",
            f"{v['duplicates']} jobs ran to completion more than once; explained "
            f"{v['explained']} ({why})",
        ),
        (
            "UNEXPLAINED DUPLICATES",
            str(len(v["unexplained"])) + (f" {v['unexplained'][:10]}" if v["unexplained"] else ""),
        ),
        ("stale calls refused", f"{v['refused']} (lease lost, fenced)"),
        (
            "STALE CALLS ACCEPTED",
            str(len(v["stale_accepted"]))
            + (f" {v['stale_accepted'][:10]}" if v["stale_accepted"] else ""),
        ),
        (
            "recovery (kill/stop)",
            f"p50 {percentile(v['recovery'], 50):.2f} s, p99 {percentile(v['recovery'], 99):.2f}"
            f" s, max {max(v['recovery'], default=float('nan')):.2f} s over "
            f"{len(v['recovery'])} faults that held jobs"
            + (f"; {v['unrecovered']} jobs never ran again" if v["unrecovered"] else ""),
        ),
    ]
    for pid, a, b, growth in v["rss"]:
        rows.append(
            (f"worker {pid} RSS", f"{a / 1024:.1f} MiB -> {b / 1024:.1f} MiB ({growth:+.1f}%)")
        )
    if v["rss"]:
        worst = max(g for *_, g in v["rss"])
        rows.append(("RSS growth (worst)", f"{worst:+.1f}% (limit +10%)"))
    rows += [
        (
            "jobs table",
            f"{v['size'] / 1024 / 1024:.1f} MiB total, {v['live']} live / {v['dead']} dead "
            f"tuples (autovacuum {v['autovacuum']}, {v['autovacuums']} runs since the last "
            f"restart, last {v['last_autovacuum'] or 'never'})",
        ),
        ("worker exits", " ".join(str(c) for c in run["exits"])),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {val}" for k, val in rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--seconds", type=float, default=None, help="overrides --minutes")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--slots", type=int, default=8)
    parser.add_argument("--producers", type=int, default=2)
    parser.add_argument("--rate", type=float, default=30.0, help="jobs/s, all producers")
    parser.add_argument("--drain-timeout", type=float, default=180.0)
    parser.add_argument("--out", default="chaos-report.txt")
    parser.add_argument("--workdir", default=None, help="logs and effects (default: a temp dir)")
    parser.add_argument("--quiet", action="store_true")
    parser.add_argument(
        "--fault-gap",
        type=_gap,
        default=(2.0, 6.0),
        metavar="LO,HI",
        help="seconds between faults, drawn uniformly (default 2,6)",
    )
    parser.add_argument(
        "--every-kind",
        action="store_true",
        help="fire each kind of fault once before any repeats, past the end if need be",
    )
    parser.add_argument("--produce", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--url", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.produce is not None:
        produce(
            args.url,
            args.produce,
            args.rate,
            args.seed,
            str(Path(args.workdir) / "effects"),
            args.out,
        )
        return 0

    from support import pg as pgserver

    bindir = pgserver.find_binaries()
    if bindir is None:
        print(
            "make chaos needs PostgreSQL's initdb and pg_ctl (on PATH or under "
            "/usr/lib/postgresql/*/bin); install the server package, e.g. "
            "apt-get install postgresql",
            file=sys.stderr,
        )
        return 2
    if args.seed is None:
        args.seed = random.SystemRandom().randrange(1, 1_000_000)
    if args.seconds is None:
        args.seconds = args.minutes * 60
    if args.workdir is None:
        import tempfile

        args.workdir = tempfile.mkdtemp(prefix="sluicegate-soak-")
    args.say = (lambda _msg: None) if args.quiet else (lambda msg: print(msg, flush=True))
    args.say(f"chaos soak: seed {args.seed}, {args.seconds:.0f} s, logs in {args.workdir}")
    soak = Soak(args, bindir)
    try:
        run = soak.run()
        verdicts = soak.verdicts(run)
    finally:
        soak.close()
    report = table(verdicts, args)
    print(report)
    Path(args.out).write_text(report + "\n")
    print(f"(written to {args.out})")
    bad = verdicts["lost"] or verdicts["unexplained"] or verdicts["stale_accepted"]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
