"""Expired jobs are never started, with real workers and real clocks, on SQLite and
PostgreSQL (issue 15's "must show"):

- a worker process SIGSTOPped while a job's expiry passes, then continued: it never
  starts that job (cancelled, reason expired, no attempt), and runs the others;
- no worker running while a job expires, then one starts: the same;
- the expiry racing the claim: hundreds of jobs expiring while four claimers (threads,
  each on its own broker handle: connections of their own) take them, so expiries fall
  at the claims' moments. Each job is either claimed before its expiry (the claim's time,
  by the broker's clock, is read off the lease it set) or cancelled as expired with no
  attempt; never claimed at or after it, never both, never left waiting.
"""

from __future__ import annotations

import random
import signal
import threading
import time

import chaosapp

from sluicegate import App, Job, JobState
from sluicegate.brokers import broker_from_url
from sluicegate.job import EXPIRED
from sluicegate.outcomes import Succeeded
from support.brokers import over_brokers
from support.fleet import Fleet, WorkerProcess, enqueue, stop_all, wait_for

POOLS = ["exp=slow:2"]
LEASE = 30.0


def started(worker: WorkerProcess) -> None:
    wait_for(lambda: " started: " in worker.log() or not worker.alive(), timeout=60)
    assert worker.alive(), worker.log()


def assert_expired_unstarted(app: App, job: Job) -> None:
    now = app.get_job(job.id)
    assert now.state is JobState.CANCELLED, now
    assert now.attempts == 0 and now.started_at is None and now.worker_id is None
    assert now.expires_at is not None and now.finished_at is not None
    assert now.finished_at >= now.expires_at  # ended by a claim at or after its expiry
    assert now.history[-1]["event"] == "cancelled" and now.history[-1]["reason"] == EXPIRED


def past(job: Job, margin: float = 0.3) -> None:
    """Wait until the job's expiry has passed (the broker's clock is this host's)."""
    assert job.expires_at is not None
    wait_for(lambda: time.time() > job.expires_at + margin, timeout=30)  # type: ignore[operator]


def succeeded(app: App, jobs: list[Job]) -> bool:
    return all(app.get_job(j.id).state is JobState.SUCCEEDED for j in jobs)


@over_brokers
def test_a_stopped_worker_never_starts_a_job_that_expired_meanwhile(
    fleet: Fleet, producer: App
) -> None:
    worker = fleet.start(POOLS, lease=5)
    started(worker)
    warm = enqueue(producer, chaosapp.slow, 0.0)  # it claims and runs: awake and working
    wait_for(lambda: succeeded(producer, [warm]))
    worker.send(signal.SIGSTOP)
    try:
        doomed = enqueue(producer, chaosapp.slow, 0.0, expires_in=1.0)
        plain = enqueue(producer, chaosapp.slow, 0.0)
        roomy = enqueue(producer, chaosapp.slow, 0.0, expires_in=300.0)
        past(doomed)
        assert producer.get_job(doomed.id).state is JobState.READY  # no sweeper: a claim ends it
    finally:
        worker.send(signal.SIGCONT)
    wait_for(lambda: succeeded(producer, [plain, roomy]), what=lambda: fleet.logs())
    assert_expired_unstarted(producer, doomed)
    stop_all([worker])
    assert "Traceback" not in worker.log(), worker.log()


@over_brokers
def test_a_job_that_expired_while_no_worker_ran_is_never_started(
    fleet: Fleet, producer: App
) -> None:
    doomed = [enqueue(producer, chaosapp.slow, 0.0, expires_in=0.5) for _ in range(3)]
    plain = enqueue(producer, chaosapp.slow, 0.0, priority=1)  # behind them in claim order
    past(doomed[-1])
    worker = fleet.start(POOLS, lease=5)
    started(worker)
    wait_for(lambda: succeeded(producer, [plain]), what=lambda: fleet.logs())
    for job in doomed:
        assert_expired_unstarted(producer, job)
    stop_all([worker])


@over_brokers
def test_expiry_racing_concurrent_claims(db_url: str, producer: App) -> None:
    count, claimers, batch = 600, 4, 3
    rng = random.Random(15)
    # Expiries spread over ~1.2 s from 0.3 s on, in an order unrelated to the claim order
    # (random priorities): the claimers, slowed to a few hundred jobs a second, meet
    # expiries all through their run.
    specs = [
        producer.build_spec(
            "noop", queue="race", priority=rng.randrange(100), expires_in=0.3 + i * 0.002
        )
        for i in range(count)
    ]
    last_expiry = 0.0  # set once the jobs are in
    claimed_at: dict[int, float] = {}  # job id -> the claim's time, by the broker's clock
    errors: list[BaseException] = []
    lock = threading.Lock()
    # Used twice: every claimer's broker is open before the jobs go in (opening takes
    # seconds on a busy machine, longer than the first expiries), then all start at once.
    together = threading.Barrier(claimers + 1)

    def claimer(name: str) -> None:
        broker = broker_from_url(db_url)
        try:
            together.wait(60)
            together.wait(60)
            while True:
                got = broker.claim(["race"], batch, LEASE, name)
                if not got:
                    if time.time() > last_expiry + 0.2:
                        return  # nothing ready, and every expiry has passed
                    time.sleep(0.005)  # nothing ready yet: this claim loop looks again
                    continue
                with lock:
                    for c in got:
                        assert c.job.lease_expires_at is not None
                        assert c.job.id not in claimed_at, "claimed twice"
                        claimed_at[c.job.id] = c.job.lease_expires_at - LEASE
                broker.record([c.claim for c in got], [])  # started
                time.sleep(0.01)  # the jobs' bodies: slowed claimers meet expiries all along
                broker.record((), [Succeeded(c.claim, "null") for c in got])
        except BaseException as exc:  # reported by the test thread
            errors.append(exc)
        finally:
            broker.close()

    threads = [threading.Thread(target=claimer, args=(f"c{i}",)) for i in range(claimers)]
    for thread in threads:
        thread.start()
    together.wait(60)
    jobs = producer.broker.enqueue(specs)
    last_expiry = max(j.expires_at or 0.0 for j in jobs)
    together.wait(60)
    for thread in threads:
        thread.join(120)
    assert not errors, errors
    final = {j.id: producer.get_job(j.id) for j in jobs}
    expired = [j for j in final.values() if j.state is JobState.CANCELLED]
    ran = [j for j in final.values() if j.state is JobState.SUCCEEDED]
    assert len(expired) + len(ran) == count, {j.state for j in final.values()}
    assert {j.id for j in ran} == set(claimed_at)
    for job in ran:
        assert job.expires_at is not None
        assert claimed_at[job.id] < job.expires_at + 1e-5, (job, claimed_at[job.id])
    for job in expired:
        assert_expired_unstarted(producer, job)
    late = [j.started_at - j.expires_at for j in ran if j.started_at > j.expires_at]  # type: ignore[operator]
    print(
        f"{len(ran)} claimed before their expiry, {len(expired)} expired unclaimed; "
        f"closest claim {min((j.expires_at - claimed_at[j.id] for j in ran), default=0.0) * 1000:.2f} ms "  # type: ignore[operator]
        f"before expiry; {len(late)} start writes landed after the expiry (by at most "
        f"{max(late, default=0.0) * 1000:.1f} ms: the body began after a claim made in time)"
    )
    assert ran and expired  # the race was run: both outcomes met
