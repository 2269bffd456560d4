"""Attempt accounting under repeated kills: jobs with max_attempts=1 run on thread and
process pools of several workers while workers holding jobs are SIGKILLed again and again
(and replaced). A claim charges the attempt, so a job whose worker died is dead
("worker lost") once its lease expires, never run again: each job's body ran at most
once, by the side-effect log. On SQLite and on PostgreSQL.
"""

from __future__ import annotations

import collections
import random
import signal
import time

import chaosapp
import pytest

from sluicegate import App, Job, JobState
from support.brokers import over_brokers
from support.fleet import Fleet, counts, held_by, holders, stop_all, wait_for

pytestmark = [over_brokers, pytest.mark.slow]

WORKERS = 3
JOBS = 80  # half on a thread pool, half on a process pool
KILLS = 5
LEASE = 1.0
POOLS = ["once=once:3:thread", "oncep=once_p:2:process"]
QUEUES = ("once", "once_p")


def finished(app: App) -> int:
    return sum(counts(app.broker, q)[s] for q in QUEUES for s in ("succeeded", "dead"))


def test_sigkilled_workers_never_run_a_single_attempt_job_twice(
    fleet: Fleet, producer: App, effects_db: str
) -> None:
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    specs = [
        producer.build_spec(
            chaosapp.once.name,
            [effects_db, rng.uniform(0.1, 0.4)],
            queue=QUEUES[i % 2],
            max_attempts=1,
        )
        for i in range(JOBS)
    ]
    jobs: list[Job] = producer.broker.enqueue(specs)
    start = lambda: fleet.start(POOLS, lease=LEASE, shutdown_timeout=5)  # noqa: E731
    workers = [start() for _ in range(WORKERS)]
    killed: set[int] = set()

    deadline = time.monotonic() + 90
    while len(killed) < KILLS and finished(producer) < JOBS * 0.8:
        assert time.monotonic() < deadline, f"no progress (seed {seed}):\n{fleet.logs()}"
        busy = holders(producer, workers, QUEUES)  # mid-run: kill only a worker that holds jobs
        if not busy:
            time.sleep(0.02)
            continue
        victim = rng.choice(busy)
        victim.send(signal.SIGKILL)
        assert victim.wait(10) == -signal.SIGKILL
        killed.add(victim.pid)
        workers.remove(victim)
        workers.append(start())
        time.sleep(rng.uniform(0.1, 0.3))

    assert len(killed) >= 3, f"only {len(killed)} kills happened (seed {seed})"
    wait_for(
        lambda: finished(producer) == JOBS,
        timeout=60,
        what=lambda: f"every job finished: {finished(producer)} of {JOBS} (seed {seed})",
    )
    stop_all(workers)

    runs: dict[int, list[tuple[int, int]]] = collections.defaultdict(list)
    for job_id, attempt, pid in chaosapp.read_effects(effects_db):
        runs[job_id].append((attempt, pid))
    dead = 0
    for job in jobs:
        done = producer.get_job(job.id)
        assert done.attempts == 1, (done, seed)
        assert len(runs[job.id]) <= 1, (f"job {job.id} ran {len(runs[job.id])} times", seed)
        if done.state == JobState.SUCCEEDED:
            assert runs[job.id] == [(1, done.result)], (done, runs[job.id], seed)
        else:  # its worker was killed holding it: recovered dead, not run again
            assert done.state == JobState.DEAD, (done, seed)
            assert done.last_error is not None and done.last_error.type == "WorkerLost"
            assert any(held_by(done, pid) for pid in killed), (done, killed, seed)
            dead += 1
    assert dead > 0, f"no kill caught a job mid-run (seed {seed})"
