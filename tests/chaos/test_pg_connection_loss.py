"""Workers on PostgreSQL survive losing the server: connections cut mid-run, an outage
that refuses new connections for longer than a lease, backends terminated by the server,
and commits whose fate the worker cannot know.

Workers reach the server through a loopback TCP proxy the test controls (tests/apps/
tcpproxy.py); the test itself and the tasks' own side-effect connections go straight to
the server. Every time: the worker processes stay up, log the outage once (not once per
failed call) and their recovery, and lose nothing -- every job ends succeeded, none
without its side effect. Jobs they held come back by lease expiry or their own release,
and an ack whose commit fate is unknown is retried, never counted as done unseen.
"""

from __future__ import annotations

import collections
import logging
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pgchaosapp
import pytest
from tcpproxy import TcpProxy

from sluicegate import App, Job, JobState
from sluicegate.brokers.postgres import RECONNECT_CAP
from sluicegate.worker import PoolSpec, Worker
from support.brokers import connect, only_postgresql, plain_dsn, rewrite, schema_of
from support.fleet import Fleet, WorkerProcess, counts, enqueue_mixed, stop_all, wait_for

pytestmark = [only_postgresql, pytest.mark.slow]

LEASE = 1.5
WORKERS = 3
SLOTS = 4
JOBS = 90
JOB_SECONDS = 0.3
QUEUE = pgchaosapp.QUEUE
BROKER_APP_NAME = "sg-chaos-broker"  # the workers' broker connections, for pg_stat_activity
MAX_ERRORS_PER_OUTAGE = 3  # "broker error" lines one worker may log for one outage
MAX_NOISE_PER_OUTAGE = 40  # every WARNING/ERROR line (jobs retried after a broken transaction)


@pytest.fixture
def proxy(db_url: str) -> Iterator[TcpProxy]:
    parts = urlsplit(db_url)
    proxy = TcpProxy(parts.hostname or "127.0.0.1", parts.port or 5432)
    yield proxy
    proxy.close()


@pytest.fixture
def proxied_url(db_url: str, proxy: TcpProxy) -> str:
    """The broker URL through the proxy, tagged so the server can tell these connections."""
    return rewrite(db_url, port=proxy.port, application_name=BROKER_APP_NAME)


@pytest.fixture
def fleet(proxied_url: str, tmp_path: Path) -> Iterator[Fleet]:
    """Worker processes connecting through the proxy; killed and reaped at teardown."""
    fleet = Fleet(proxied_url, tmp_path)
    yield fleet
    fleet.close()


@pytest.fixture
def effects(db_url: str, producer: App) -> str:
    """The side-effect table (in the test's schema, which opening the producer creates)."""
    producer.broker  # noqa: B018
    table = f"{schema_of(db_url)}.effects"
    with connect(db_url) as conn:
        conn.execute(pgchaosapp.EFFECTS_TABLE.format(table=table))
    return table


def enqueue_jobs(producer: App, db_url: str, table: str, n: int = JOBS) -> list[Job]:
    """Half plain jobs (side effect on their own connection), half transactional ones."""
    dsn = plain_dsn(db_url)
    plain = (pgchaosapp.record, [dsn, table, JOB_SECONDS])
    tx = (pgchaosapp.record_tx, [table, JOB_SECONDS])
    return enqueue_mixed(producer, (tx if i % 2 else plain for i in range(n)))


def start_workers(fleet: Fleet, lease: float = LEASE) -> list[WorkerProcess]:
    return [
        fleet.start([f"pg={QUEUE}:{SLOTS}"], lease=lease, shutdown_timeout=10, app="pgchaosapp:app")
        for _ in range(WORKERS)
    ]


def wait_mid_run(producer: App, fleet: Fleet) -> None:
    """Some jobs done, several in flight: the moment to break things."""

    def mid_run() -> bool:
        c = counts(producer.broker, QUEUE)
        return c["succeeded"] >= JOBS // 6 and c["running"] + c["claimed"] >= WORKERS

    wait_for(mid_run, timeout=30, what=lambda: f"{counts(producer.broker, QUEUE)}\n{fleet.logs()}")


def effects_by_job(db_url: str, table: str) -> dict[int, list[tuple[int, int]]]:
    runs: dict[int, list[tuple[int, int]]] = collections.defaultdict(list)
    with connect(db_url) as conn:
        for job_id, attempt, pid in conn.execute(f"SELECT job_id, attempt, pid FROM {table}"):
            runs[job_id].append((attempt, pid))
    return runs


def noise(text: str) -> list[str]:
    """WARNING/ERROR lines about storage trouble (not the per-job lease/recovery news)."""
    return [
        line
        for line in text.splitlines()
        if re.search(r" (WARNING|ERROR) ", line)
        and "lease lost on job" not in line
        and "recovered expired leases" not in line
    ]


class Outage:
    """Log positions of every worker when the trouble starts, to judge what came after."""

    def __init__(self, workers: list[WorkerProcess]) -> None:
        self.workers = workers
        self.offsets = {w.pid: len(w.log()) for w in workers}

    def since(self, worker: WorkerProcess) -> str:
        return worker.log()[self.offsets[worker.pid] :]

    # What a worker logs when its connections break, and when they are back: its LISTEN
    # connection always notices; its broker calls only if one was under way (or a new
    # connection could not be made), since a pooled connection found dead before use is
    # replaced without a word.
    TROUBLE = (
        ("broker error", "broker reachable again"),
        ("LISTEN connection lost", "LISTEN connection restored"),
    )

    def noticed_by(self) -> list[WorkerProcess]:
        return [w for w in self.workers if any(lost in self.since(w) for lost, _ in self.TROUBLE)]

    def recovered(self, worker: WorkerProcess) -> bool:
        """Each kind of trouble it logged is followed by its end."""
        text = self.since(worker)
        return all(
            lost not in text or back in text[text.rfind(lost) :] for lost, back in self.TROUBLE
        )

    def wait_noticed(self) -> None:
        """Until every worker has logged the outage."""
        wait_for(lambda: len(self.noticed_by()) == len(self.workers), timeout=20, what=self.report)

    def wait_recovered(self) -> None:
        """Until every worker has logged that the broker and its wake-ups are back."""
        wait_for(lambda: all(self.recovered(w) for w in self.workers), timeout=30, what=self.report)

    def check_logged_once(self, expect_all: bool = True) -> None:
        """Each worker that noticed logs the outage once (not a flood), then its recovery."""
        noticed = self.noticed_by()
        if expect_all:
            assert len(noticed) == len(self.workers), self.report()
        assert noticed, self.report()
        for worker in noticed:
            text = self.since(worker)
            assert text.count("broker error") <= MAX_ERRORS_PER_OUTAGE, self.report()
            assert len(noise(text)) <= MAX_NOISE_PER_OUTAGE, self.report()
            assert not re.search(r" (WARNING|ERROR) psycopg", text), self.report()
            assert self.recovered(worker), self.report()

    def report(self) -> str:
        return "\n".join(
            f"--- worker {w.pid} since the outage ---\n{self.since(w)}" for w in self.workers
        )


def check_all_done(
    producer: App,
    db_url: str,
    table: str,
    jobs: list[Job],
    workers: list[WorkerProcess],
    fleet: Fleet,
) -> dict[int, list[tuple[int, int]]]:
    """Every job succeeded, none lost or dead, each with the side effect of its acked run;
    the workers are alive, and exit 0 on SIGTERM."""
    wait_for(
        lambda: counts(producer.broker, QUEUE)["succeeded"] == len(jobs),
        timeout=60,
        interval=0.05,
        what=lambda: f"all jobs succeeded: {counts(producer.broker, QUEUE)}\n{fleet.logs()}",
    )
    for worker in workers:
        assert worker.alive(), worker.log()
    c = counts(producer.broker, QUEUE)
    assert c["succeeded"] == len(jobs) and sum(c.values()) == len(jobs), c
    runs = effects_by_job(db_url, table)
    plain_task = pgchaosapp.record.name
    for job in jobs:
        done = producer.get_job(job.id)
        assert done.state == JobState.SUCCEEDED and done.result["attempt"] == done.attempts
        acked_run = (done.attempts, done.result["pid"])
        what = (job.id, done, runs[job.id])
        assert acked_run in runs[job.id], ("succeeded without its side effect", *what)
        if done.task != plain_task:  # transactional: the row commits with the ack, or never
            assert runs[job.id] == [acked_run], what
    stop_all(workers)
    for worker in workers:
        assert "Traceback" not in worker.log(), worker.log()
    return runs


def broker_backends(db_url: str) -> list[int]:
    with connect(db_url) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = %s", (BROKER_APP_NAME,)
        ).fetchall()
    return [r[0] for r in rows]


def start_mid_run(
    producer: App, db_url: str, effects: str, fleet: Fleet
) -> tuple[list[Job], list[WorkerProcess]]:
    """Enqueue the jobs, start the workers and wait until they are busy with them."""
    jobs = enqueue_jobs(producer, db_url, effects)
    workers = start_workers(fleet)
    wait_mid_run(producer, fleet)
    # Every worker in the run, not only enough jobs in flight: on a busy machine one
    # worker may still be starting, with no connection to lose when the trouble starts.
    wait_for(
        lambda: all(" succeeded task=" in w.log() for w in workers),
        timeout=60,
        what=lambda: f"every worker to finish a job\n{fleet.logs()}",
    )
    return jobs, workers


# ---- the scenarios ----------------------------------------------------------------------
def test_cut_connections_mid_run(
    db_url: str, proxy: TcpProxy, fleet: Fleet, producer: App, effects: str
) -> None:
    jobs, workers = start_mid_run(producer, db_url, effects, fleet)

    outage = Outage(workers)
    assert proxy.cut() >= WORKERS * 2  # every worker: a pool connection and its LISTEN one
    outage.wait_noticed()
    outage.wait_recovered()
    check_all_done(producer, db_url, effects, jobs, workers, fleet)
    outage.check_logged_once()


def test_outage_longer_than_a_lease(
    db_url: str, proxy: TcpProxy, fleet: Fleet, producer: App, effects: str
) -> None:
    jobs, workers = start_mid_run(producer, db_url, effects, fleet)

    outage = Outage(workers)
    proxy.block()
    proxy.cut()
    outage.wait_noticed()
    down_since = time.monotonic()
    # The outage lasts longer than a lease (its length is the point of the test, so a
    # fixed wait): leases of jobs in flight expire meanwhile, by the server's clock.
    wait_for(lambda: time.monotonic() > down_since + LEASE + 1.0)
    assert all(w.alive() for w in workers), outage.report()
    refused_during = proxy.refused
    assert refused_during > 0, "nobody tried to reconnect during the outage"
    proxy.unblock()

    outage.wait_recovered()
    check_all_done(producer, db_url, effects, jobs, workers, fleet)
    outage.check_logged_once()
    # Reconnecting was paced (capped, jittered backoff), not a tight loop.
    assert refused_during <= WORKERS * 30, refused_during


def test_backends_terminated_by_the_server(
    db_url: str, proxy: TcpProxy, fleet: Fleet, producer: App, effects: str
) -> None:
    jobs, workers = start_mid_run(producer, db_url, effects, fleet)

    before = set(broker_backends(db_url))
    assert before, "the workers' broker connections should be visible on the server"
    outage = Outage(workers)
    with connect(db_url) as conn:
        killed = conn.execute(
            "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE application_name = %s",
            (BROKER_APP_NAME,),
        ).fetchone()[0]
    assert killed >= WORKERS, killed
    outage.wait_noticed()
    outage.wait_recovered()
    # They reconnected: new backends, none of the terminated ones.
    wait_for(lambda: set(broker_backends(db_url)) - before, timeout=10, what="new backends")
    check_all_done(producer, db_url, effects, jobs, workers, fleet)
    outage.check_logged_once()


def test_acks_whose_commit_fate_is_unknown(
    db_url: str, proxy: TcpProxy, fleet: Fleet, producer: App, effects: str
) -> None:
    """The connection drops right at an ack's COMMIT: either before the server got it
    (rolled back) or after it committed (reply lost). Leases outlast the reconnect here,
    so no job may run twice: each retried ack finds its own earlier write or its lease.
    (Jobs whose claim's fate is unknown to their worker come back when their lease
    expires, and run then, once.)"""
    jobs = enqueue_jobs(producer, db_url, effects)
    modes = ["committed", "lost"] * 4
    proxy.fail_commits(modes, pgchaosapp.ACK_MARKER.encode())
    workers = start_workers(fleet, lease=4)
    outage = Outage(workers)
    wait_for(lambda: proxy.faults_pending() == 0, timeout=30, what=outage.report)
    assert sorted(proxy.faults_fired) == sorted(modes)

    runs = check_all_done(producer, db_url, effects, jobs, workers, fleet)
    outage.check_logged_once(expect_all=False)
    for job in jobs:
        done = producer.get_job(job.id)
        if done.task == pgchaosapp.record.name:
            # The plain task's side effect is not rolled back with anything, so a second
            # run would show; its ack was retried instead, within the lease.
            assert len(runs[job.id]) == 1, (job.id, done, runs[job.id])


LONG_OUTAGE = 18.0


def test_reconnect_after_a_long_outage_is_capped(
    db_url: str, proxy: TcpProxy, fleet: Fleet, producer: App, effects: str
) -> None:
    """However long the server was away, a worker is back within its capped backoff (plus
    a connect) of the server's return, not after a delay that grew with the outage."""
    workers = [fleet.start([f"pg={QUEUE}:2"], lease=LEASE, app="pgchaosapp:app") for _ in range(2)]
    wait_for(lambda: all("started" in w.log() for w in workers), what=fleet.logs)
    outage = Outage(workers)
    proxy.block()
    proxy.cut()
    outage.wait_noticed()
    down_since = time.monotonic()
    wait_for(lambda: time.monotonic() > down_since + LONG_OUTAGE, timeout=LONG_OUTAGE + 5)
    proxy.unblock()
    back_at = time.monotonic()
    bound = RECONNECT_CAP + 2.0
    late: dict[int, float] = {}

    def all_back() -> bool:
        for w in workers:
            if w.pid not in late and outage.recovered(w):
                late[w.pid] = time.monotonic() - back_at
        return len(late) == len(workers)

    wait_for(all_back, timeout=bound, what=lambda: f"reconnects ({late})\n{outage.report()}")
    jobs = enqueue_jobs(producer, db_url, effects, n=8)
    check_all_done(producer, db_url, effects, jobs, workers, fleet)
    outage.check_logged_once()


# ---- the same, watched from inside one worker ---------------------------------------------
START_MARKER = b"SET state = 'running'"  # only the start statement's text has it


@pytest.mark.parametrize(
    ("write", "kind", "fate"),
    [
        ("ack", "plain", "committed"),
        ("ack", "plain", "lost"),
        ("ack", "transactional", "committed"),
        ("ack", "transactional", "lost"),
        ("start", "plain", "committed"),
        ("start", "plain", "lost"),
    ],
)
def test_a_write_of_unknown_fate_is_not_counted_until_settled(
    write: str,
    kind: str,
    fate: str,
    db_url: str,
    proxy: TcpProxy,
    proxied_url: str,
    producer: App,
    effects: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The server goes away right at the COMMIT of a job's ack (or of its start), before
    or after committing it. While the server cannot be asked again the worker has not
    counted the job as done, whatever the server did; once it can, the job is settled
    exactly once: a retried write finds its own earlier one or still holds the lease."""
    caplog.set_level(logging.INFO, logger="sluicegate")
    app = App(broker=proxied_url)
    runs: list[int] = []
    gate = threading.Event()  # a started job keeps running until the worker is back

    @app.task(queue="fate", name="plain", max_attempts=3, backoff_base=0)
    def plain() -> str:
        runs.append(1)
        if write == "start":
            gate.wait(30)
        return pgchaosapp.ACK_MARKER

    @app.task(queue="fate", name="transactional", transactional=True, backoff_base=0)
    def transactional(*, connection: Any) -> str:
        runs.append(1)
        connection.execute(f"INSERT INTO {effects} (job_id, attempt, pid) VALUES (0, 0, 0)")
        return pgchaosapp.ACK_MARKER

    job = producer.enqueue(kind, queue="fate", max_attempts=3)
    marker = pgchaosapp.ACK_MARKER.encode() if write == "ack" else START_MARKER
    proxy.fail_commits([fate], marker, then_block=True)
    worker = Worker(app, [PoolSpec("fate", ("fate",), 1)], lease=30, shutdown_timeout=5)
    thread = threading.Thread(target=worker.run, daemon=True)
    try:
        thread.start()
        wait_for(lambda: proxy.faults_pending() == 0, timeout=20, what="the write to be sent")
        assert proxy.faults_fired == [fate]
        state = producer.get_job(job.id).state
        if write == "ack" and fate == "committed":
            assert state == JobState.SUCCEEDED
        elif write == "start" and fate == "committed":
            assert state == JobState.RUNNING
        else:
            assert state in (JobState.CLAIMED, JobState.RUNNING)
        refused = proxy.refused
        wait_for(lambda: proxy.refused > refused, timeout=20, what="a reconnect attempt")
        assert worker.counters.succeeded == 0, "counted as done while its fate was unknown"
        proxy.unblock()
        if write == "start":  # the job finishes only after its start was written again
            wait_for(lambda: "broker reachable again" in caplog.text, timeout=20, what="reconnect")
            gate.set()

        def settled() -> bool:
            return producer.get_job(job.id).state == JobState.SUCCEEDED and not (
                worker.busy or worker.results.unwritten
            )

        wait_for(settled, timeout=15, what=lambda: f"job settled: {producer.get_job(job.id)}")
    finally:
        gate.set()
        worker.stop(immediate=True)
        thread.join(15)
        app.close()
    assert not thread.is_alive()
    done = producer.get_job(job.id)
    assert done.state == JobState.SUCCEEDED
    assert worker.counters.lease_lost == 0, caplog.text
    rows = len(effects_by_job(db_url, effects).get(0, []))
    if kind == "plain":
        # The retried write found its own earlier one (committed) or still held the lease.
        assert (done.attempts, len(runs), worker.counters.succeeded) == (1, 1, 1)
    elif fate == "committed":
        # The task's transaction (row + ack) committed; the retried failure finds it settled.
        assert (done.attempts, len(runs), rows) == (1, 1, 1)
        assert worker.counters.succeeded + worker.counters.retried == 1
    else:
        # Rolled back (row and ack): the failure is recorded and the job runs again.
        assert (done.attempts, len(runs), rows) == (2, 2, 1)
        assert worker.counters.succeeded == 1
