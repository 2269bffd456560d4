"""SQLite under faults, with real worker processes, real producers and real signals:

- another program takes the write lock for seconds at a time while workers and
  producers run: nobody crashes, producers and workers wait it out (or, past their
  busy_timeout, get BrokerBusy and back off), no task ever sees it;
- the database fills up: enqueue raises StorageFull and stores nothing, workers keep
  their unwritten outcomes, and once space returns every job completes, once;
- workers are SIGKILLed over and over mid-write while producers enqueue:
  PRAGMA integrity_check stays ok and every job a producer was told about completes;
- a long drain with a reader that keeps reading: the WAL file stays bounded.

The cycles are shorter than the issue's (a lock held 3 s every 5 s rather than every
10 s, a 12 s kill storm, 20k jobs) so the module runs in about a minute; each test says
what it keeps of the original scenario. Figures are printed (``pytest -s`` shows them).
"""

from __future__ import annotations

import collections
import contextlib
import os
import random
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import chaosapp
import pytest
import sqlitefaultsapp

from sluicegate import App, BrokerBusy, JobState, StorageFull
from support.fleet import (
    APPS_DIR,
    Fleet,
    counts,
    enqueue_batch,
    held_by,
    stop_all,
    wait_for,
)

SCRIPT = str(APPS_DIR / "sqlitefaultsapp.py")


def path_of(url: str) -> str:
    return url.split("?")[0].removeprefix("sqlite:///")


def outside(*args: Any) -> subprocess.Popen[str]:
    """One of the processes around the workers (tests/apps/sqlitefaultsapp.py)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(APPS_DIR), env.get("PYTHONPATH")) if p)
    return subprocess.Popen(
        [sys.executable, SCRIPT, *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def effects_by_job(effects_db: str) -> dict[int, list[tuple[int, int]]]:
    runs: dict[int, list[tuple[int, int]]] = collections.defaultdict(list)
    for job_id, attempt, pid in chaosapp.read_effects(effects_db):
        runs[job_id].append((attempt, pid))
    return runs


def no_crash_in(fleet: Fleet) -> None:
    logs = fleet.logs()
    assert "Traceback" not in logs and "sqlite3." not in logs, logs


# ---- a write lock held by another program ------------------------------------------------

HOLD, GAP, CYCLES = 3.0, 2.0, 2  # the 3 s every 10 s, as 3 s every 5 s, twice
LOCK_LEASE = 15.0  # longer than a hold plus the backoff: no lease expires because of it


def produce_while(app: App, effects_db: str, running: threading.Event, out: dict[str, Any]) -> None:
    """Enqueue one job at a time until ``running`` is cleared; note ids, waits, errors."""
    while running.is_set():
        began = time.monotonic()
        try:
            job = app.enqueue(
                chaosapp.record.name,
                args=[effects_db, 0.05],
                queue=chaosapp.record.options.queue,
                max_attempts=chaosapp.record.options.max_attempts,
            )
        except BrokerBusy:
            out["busy"] += 1
        except Exception as exc:  # anything else fails the test
            out["errors"].append(repr(exc))
        else:
            out["ids"].append(job.id)
        out["waits"].append(time.monotonic() - began)
        time.sleep(0.03)


def test_an_outside_write_lock_is_waited_out_or_refused_typed(
    fleet: Fleet, producer: App, db_url: str, effects_db: str
) -> None:
    """Another program holds BEGIN IMMEDIATE for 3 s every 5 s (the issue: every 10 s;
    the gap does not matter, the hold's length against the busy timeouts does) while 6
    workers and 2 producers run. Half the workers and both producers keep the default
    busy_timeout (10 s): they wait each hold out. The other workers and a third,
    impatient producer have busy_timeout=1000: a hold outlasts it, so they get BrokerBusy
    (the workers back off and carry on). No job sees the lock: every job succeeds at its
    first attempt, with one side effect."""
    path = path_of(db_url)
    producer.broker  # noqa: B018 - migrated before anyone starts
    impatient_url = f"{db_url}?busy_timeout=1000"
    workers = []
    for i in range(6):
        fleet.url = impatient_url if i % 2 else db_url
        workers.append(fleet.start(["chaos=chaos:4"], lease=LOCK_LEASE, shutdown_timeout=10))
    wait_for(lambda: all("started" in w.log() for w in workers), timeout=30, what=fleet.logs)

    apps = [App(broker=db_url, config=False) for _ in range(2)]
    apps.append(App(broker=f"{db_url}?busy_timeout=500", config=False))
    results = [{"ids": [], "waits": [], "errors": [], "busy": 0} for _ in apps]
    running = threading.Event()
    running.set()
    threads = [
        threading.Thread(target=produce_while, args=(app, effects_db, running, out))
        for app, out in zip(apps, results, strict=True)
    ]
    for thread in threads:
        thread.start()
    holder = outside("lock", path, HOLD, GAP, CYCLES)
    try:
        out, err = holder.communicate(timeout=CYCLES * (HOLD + GAP) + 60)
    finally:
        running.clear()
        for thread in threads:
            thread.join(30)
        for app in apps:
            app.close()
    assert holder.returncode == 0, err
    holds = [line for line in out.splitlines() if line.startswith("held")]
    assert len(holds) == CYCLES

    patient = results[0]["waits"] + results[1]["waits"]
    print(f"\nlock: producers waited up to {max(patient):.2f} s (patient), "
          f"impatient producer: {results[2]['busy']} BrokerBusy of {len(results[2]['waits'])}")  # fmt: skip
    assert not any(r["errors"] for r in results), results
    assert results[0]["busy"] == results[1]["busy"] == 0
    assert HOLD * 0.5 < max(patient) < HOLD + 5.0, max(patient)  # waited out a hold
    assert results[2]["busy"] >= 1  # a hold outlasted its 500 ms
    ids = [i for r in results for i in r["ids"]]
    assert len(ids) == len(set(ids))
    assert sum(counts(producer.broker, "chaos").values()) == len(ids)  # no job unreported

    wait_for(
        lambda: counts(producer.broker, "chaos")["succeeded"] == len(ids),
        timeout=60,
        what=lambda: f"{counts(producer.broker, 'chaos')}\n{fleet.logs()}",
    )
    assert all(w.alive() for w in workers), fleet.logs()
    for worker in workers[1::2]:  # the impatient ones met the lock, and got over it
        text = worker.log()
        assert "broker error (will retry)" in text and "is locked by" in text
        assert "broker reachable again" in text[text.rfind("broker error") :], text
    stop_all(workers)
    no_crash_in(fleet)
    runs = effects_by_job(effects_db)
    assert sorted(runs) == sorted(ids)
    assert all(len(r) == 1 for r in runs.values())
    for job in producer.broker.list_jobs(JobState.SUCCEEDED, "chaos", limit=len(ids) + 1):
        assert job.attempts == 1 and job.last_error is None, job


# ---- a full disk -------------------------------------------------------------------------

CAP = 400  # pages (x 4 KiB): the database's max_pages in this test
OUTAGE = 3.0  # s the database stays full (at least)
FULL_JOBS = 60


def fill_up(path: str) -> sqlite3.Connection:
    """Fill the database to CAP pages with a filler table, as a full disk would; the
    connection's DELETE FROM filler later gives the space back."""
    conn = sqlite3.connect(path, isolation_level=None, timeout=30)
    conn.execute(f"PRAGMA max_page_count = {CAP}")
    conn.execute("CREATE TABLE IF NOT EXISTS filler (blob BLOB)")
    for size in (3000, 300, 30):
        try:
            while True:
                conn.execute("INSERT INTO filler VALUES (randomblob(?))", (size,))
        except sqlite3.OperationalError as exc:
            assert "full" in str(exc), exc
    return conn


def ended_but_unwritten(effects_db: str, app: App, settled_for: float) -> list[int]:
    """Jobs whose body ended (side effect at least ``settled_for`` s ago) but whose
    outcome is not in the database."""
    conn = sqlite3.connect(effects_db, timeout=30)
    try:
        cutoff = time.time() - settled_for
        ids = [r[0] for r in conn.execute("SELECT job_id FROM effects WHERE at < ?", (cutoff,))]
    finally:
        conn.close()
    return [i for i in ids if app.get_job(i).state != JobState.SUCCEEDED]


def test_a_full_database_refuses_enqueues_and_workers_keep_their_outcomes(
    fleet: Fleet, db_url: str, effects_db: str
) -> None:
    """The database is capped at CAP pages (max_pages, PRAGMA max_page_count: SQLite
    answers exactly as on a full disk, SQLITE_FULL) and filled up mid-run by another
    connection; later that connection frees the space. While full: an enqueue raises
    StorageFull and stores nothing; workers fail to write outcomes (each result needs a
    page of its own), log it, keep them and stay up. Once space returns every job
    completes: none lost, none run twice (the lease, 30 s, outlasts the outage)."""
    url = f"{db_url}?max_pages={CAP}"
    path = path_of(url)
    app = App(broker=url, config=False)
    try:
        jobs = enqueue_batch(
            app, sqlitefaultsapp.bulky, ([effects_db, 0.3] for _ in range(FULL_JOBS))
        )
        fleet.url = url
        workers = [
            fleet.start(["full=full:4"], lease=30, app="sqlitefaultsapp:app") for _ in range(3)
        ]
        wait_for(lambda: counts(app.broker, "full")["succeeded"] >= 8, timeout=60, what=fleet.logs)

        full_at = time.monotonic()
        filler = fill_up(path)
        stored = sum(counts(app.broker, "full").values())
        with pytest.raises(StorageFull, match="is full"):
            app.enqueue("bulky", args=[effects_db, 0.0, "x" * 8000], queue="full")
        with pytest.raises(StorageFull, match="is full"):
            app.enqueue_many([("bulky", [effects_db, 0.0], {}), ("bulky", ["x" * 8000], {})])
        assert sum(counts(app.broker, "full").values()) == stored  # nothing half-written

        def all_noticed() -> bool:
            return all(
                "broker error (will retry)" in w.log() and "is full" in w.log() for w in workers
            )

        wait_for(all_noticed, timeout=30, what=fleet.logs)
        time.sleep(max(0.0, full_at + OUTAGE - time.monotonic()))  # the outage lasts
        # bodies that ended seconds ago, their outcomes still only in their workers' memory
        kept = wait_for(
            lambda: ended_but_unwritten(effects_db, app, 2.0), timeout=30, what=fleet.logs
        )
        assert all(w.alive() for w in workers), fleet.logs()

        filler.execute("DELETE FROM filler")  # space comes back
        filler.close()
        freed_at = time.monotonic()
        late = app.enqueue("bulky", args=[effects_db, 0.0], queue="full", max_attempts=25)
        wait_for(
            lambda: counts(app.broker, "full")["succeeded"] == FULL_JOBS + 1,
            timeout=60,
            what=lambda: f"{counts(app.broker, 'full')}\n{fleet.logs()}",
        )
        print(f"\nfull: {freed_at - full_at:.1f} s full, {len(kept)} outcomes seen kept in "
              f"memory, all done {time.monotonic() - freed_at:.1f} s after space returned")  # fmt: skip
        stop_all(workers)
        no_crash_in(fleet)
        runs = effects_by_job(effects_db)
        assert sorted(runs) == sorted([j.id for j in jobs] + [late.id])
        assert all(len(r) == 1 for r in runs.values()), runs  # none twice
        for job in jobs:
            done = app.get_job(job.id)
            assert done.state == JobState.SUCCEEDED and done.attempts == 1, done
            ((_, pid),) = runs[job.id]
            assert done.result == f"{pid}:" + "x" * sqlitefaultsapp.RESULT_BYTES
            assert held_by(done, pid)
    finally:
        app.close()


# ---- SIGKILL storms -------------------------------------------------------------------------

STORM = 7.0  # s of kills: some thirty SIGKILLs, most of them mid-write
STORM_WORKERS = 4


def test_sigkill_storms_leave_the_database_intact(
    fleet: Fleet, producer: App, db_url: str, effects_db: str
) -> None:
    """Two producer processes enqueue small batches for STORM s while workers running
    quick jobs (each a write to the broker and one to the effects file) are SIGKILLed
    every 0.1-0.4 s and replaced, always one that holds jobs (so mid-work, and mostly
    mid-write). One producer is SIGKILLed too, halfway, and replaced. Then: PRAGMA
    integrity_check is ok, every job a producer printed exists, at most one batch exists
    that no producer printed (the one committed just before its producer died), and
    every job completes."""
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    producer.broker  # noqa: B018
    path = path_of(db_url)
    workers = [
        fleet.start(["chaos=chaos:4"], lease=1.0, shutdown_timeout=5) for _ in range(STORM_WORKERS)
    ]
    producers = [outside("produce", db_url, STORM, effects_db) for _ in range(2)]
    began = time.monotonic()
    kills, producer_killed = 0, False
    outputs: list[str] = []
    while time.monotonic() - began < STORM:
        time.sleep(rng.uniform(0.1, 0.4))
        if not producer_killed and time.monotonic() - began > STORM / 2:
            victim_producer = producers.pop(0)
            victim_producer.send_signal(signal.SIGKILL)
            outputs.append(victim_producer.communicate(timeout=30)[0])
            producers.append(outside("produce", db_url, STORM / 2, effects_db))
            producer_killed = True
        held = producer.broker.list_jobs(JobState.RUNNING, "chaos", limit=1000)
        held += producer.broker.list_jobs(JobState.CLAIMED, "chaos", limit=1000)
        busy = [w for w in workers if any(held_by(j, w.pid) for j in held)]
        victim = rng.choice(busy or workers)
        victim.send(signal.SIGKILL)
        assert victim.wait(10) == -signal.SIGKILL
        kills += 1
        workers.remove(victim)
        workers.append(fleet.start(["chaos=chaos:4"], lease=1.0, shutdown_timeout=5))
    for proc in producers:
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0 and out.endswith("done\n"), err
        outputs.append(out)

    conn = sqlite3.connect(path, timeout=30)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        stored = {r[0] for r in conn.execute("SELECT id FROM jobs")}
    finally:
        conn.close()
    printed = {int(line) for out in outputs for line in out.splitlines() if line.isdigit()}
    assert printed <= stored, (
        f"printed but not stored: {sorted(printed - stored)[:10]} (seed {seed})"
    )
    assert len(stored - printed) <= 4, (sorted(stored - printed), seed)  # one batch at most
    wait_for(
        lambda: counts(producer.broker, "chaos")["succeeded"] == len(stored),
        timeout=90,
        what=lambda: f"{counts(producer.broker, 'chaos')} of {len(stored)} (seed {seed})",
    )
    stop_all(workers)
    conn = sqlite3.connect(path, timeout=30)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    finally:
        conn.close()
    c = counts(producer.broker, "chaos")
    assert c["succeeded"] == len(stored) and c["dead"] == 0, c
    assert set(effects_by_job(effects_db)) == stored  # every job ran
    print(f"\nkill storm: {kills} workers and 1 producer SIGKILLed in {STORM:g} s, "
          f"{len(stored)} jobs, integrity_check ok (seed {seed})")  # fmt: skip


# ---- the WAL during a long drain -----------------------------------------------------------

DRAIN_JOBS = 20_000
WAL_LIMIT_MB = 8
WAL_BOUND = 3 * WAL_LIMIT_MB * 1e6  # 10-11 MB measured; 46-80 MB without the limit


def test_the_wal_stays_bounded_during_a_long_drain_with_a_reader(
    fleet: Fleet, producer: App, db_url: str, tmp_path: Path
) -> None:
    """Workers drain DRAIN_JOBS quick jobs while another process keeps reading: stats and
    a listing in a loop, and a read transaction held 0.5 s every ten rounds. Its reads
    overlap so that SQLite's own checkpoints never reset the log, which grew to 46-80 MB
    in this drain without a limit; with wal_limit_mb=8 a writer truncates it whenever it
    passes 8 MB, and it stays under 3 x the limit."""
    url = f"{db_url}?wal_limit_mb={WAL_LIMIT_MB}"
    wal = path_of(url) + "-wal"
    for _ in range(DRAIN_JOBS // 1000):
        enqueue_batch(producer, chaosapp.slow, ([0] for _ in range(1000)))
    largest = [0]
    sampling = threading.Event()
    sampling.set()

    def sample() -> None:
        while sampling.is_set():
            with contextlib.suppress(FileNotFoundError):
                largest[0] = max(largest[0], os.path.getsize(wal))
            time.sleep(0.01)

    sampler = threading.Thread(target=sample)
    sampler.start()
    reader = outside("read", url, 600, 0.5)
    fleet.url = url
    try:
        workers = [fleet.start(["slow=slow:16"], lease=30) for _ in range(4)]
        began = time.monotonic()
        wait_for(
            lambda: counts(producer.broker, "slow")["succeeded"] == DRAIN_JOBS,
            timeout=180,
            interval=0.2,
            what=lambda: f"{counts(producer.broker, 'slow')}\n{fleet.logs()}",
        )
        drained = time.monotonic() - began
    finally:
        reader.send_signal(signal.SIGKILL)
        out, err = reader.communicate(timeout=30)
        sampling.clear()
        sampler.join()
    assert reader.returncode == -signal.SIGKILL, err  # it was still reading at the end
    snapshots = out.count("snapshot")
    assert snapshots >= 3, (out, err)
    stop_all(workers)
    no_crash_in(fleet)
    truncations = fleet.logs().count("checkpointed and truncated")
    print(f"\nWAL: {DRAIN_JOBS} jobs drained in {drained:.1f} s with a reader; largest WAL "
          f"{largest[0] / 1e6:.1f} MB (limit {WAL_LIMIT_MB} MB), {truncations} truncations, "
          f"{snapshots} snapshots held by the reader")  # fmt: skip
    assert 0 < largest[0] < WAL_BOUND, largest[0]
