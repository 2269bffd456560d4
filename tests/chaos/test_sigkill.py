"""SIGKILL random workers while several of them drain a few hundred jobs.

Delivery is at-least-once: every job ends succeeded and has at least one side effect;
a side effect is repeated only for jobs that were in flight on a killed worker, so the
duplicates are bounded by kills x slots per worker. On SQLite and on PostgreSQL.
"""

from __future__ import annotations

import collections
import random
import signal
import time

import chaosapp

from sluicegate import App
from support.brokers import over_brokers
from support.fleet import (
    Fleet,
    counts,
    enqueue_batch,
    held_by,
    holders,
    stop_all,
    wait_for,
)

pytestmark = over_brokers

WORKERS = 4
SLOTS = 4
JOBS = 300
KILLS = 6
LEASE = 1.5
POOL = f"chaos=chaos:{SLOTS}"


def test_sigkill_random_workers_mid_run(fleet: Fleet, producer: App, effects_db: str) -> None:
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    jobs = enqueue_batch(
        producer, chaosapp.record, ([effects_db, rng.uniform(0.1, 0.2)] for _ in range(JOBS))
    )
    workers = [fleet.start([POOL], lease=LEASE, shutdown_timeout=5) for _ in range(WORKERS)]
    killed: set[int] = set()

    deadline = time.monotonic() + 60
    while len(killed) < KILLS and counts(producer.broker, "chaos")["succeeded"] < JOBS * 0.9:
        assert time.monotonic() < deadline, f"no progress (seed {seed}):\n{fleet.logs()}"
        busy = holders(producer, workers, ["chaos"])  # mid-run: kill only a worker that holds jobs
        if not busy:
            time.sleep(0.02)
            continue
        victim = rng.choice(busy)
        victim.send(signal.SIGKILL)
        assert victim.wait(10) == -signal.SIGKILL
        killed.add(victim.pid)
        workers.remove(victim)
        workers.append(fleet.start([POOL], lease=LEASE, shutdown_timeout=5))
        time.sleep(rng.uniform(0.1, 0.3))  # pacing between kills, not waiting on a condition

    assert len(killed) >= 3, f"only {len(killed)} kills happened (seed {seed})"
    wait_for(
        lambda: counts(producer.broker, "chaos")["succeeded"] == JOBS,
        timeout=60,
        what=lambda: f"all jobs succeeded: {counts(producer.broker, 'chaos')} (seed {seed})",
    )

    stop_all(workers)

    c = counts(producer.broker, "chaos")
    assert c["succeeded"] == JOBS and c["dead"] == 0, c
    runs: dict[int, list[tuple[int, int]]] = collections.defaultdict(list)
    for job_id, attempt, pid in chaosapp.read_effects(effects_db):
        runs[job_id].append((attempt, pid))
    assert set(runs) == {job.id for job in jobs}, "some job has no side effect"

    duplicates = sum(len(r) - 1 for r in runs.values())
    assert duplicates <= len(killed) * SLOTS, (duplicates, len(killed), seed)
    for job_id, job_runs in runs.items():
        # Every run but the acked one happened on a worker killed before it could ack.
        *lost, (attempt, pid) = job_runs
        assert all(p in killed for _, p in lost), (job_id, job_runs, killed, seed)
        done = producer.get_job(job_id)
        assert (done.result, done.attempts) == (pid, attempt), (job_id, done, job_runs, seed)
        assert held_by(done, pid)
