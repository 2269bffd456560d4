"""Producers and workers survive PostgreSQL restarts.

A throwaway cluster of the test's own is restarted with ``pg_ctl restart -m immediate``
(every backend killed at once, crash recovery at start) three times while four worker
processes run jobs and two producers enqueue about 50 jobs a second. Afterwards:

- every job that enqueue reported as stored exists and has succeeded (and so has any job
  whose enqueue's fate was reported unknown but landed);
- the producers saw only the documented errors (BrokerUnavailable, EnqueueFateUnknown);
- the workers stayed up, logged each restart a bounded number of times, and reconnected
  at a bounded pace: their connection attempts (counted by a loopback proxy in front of
  the server) stay far below what a hot loop would make.
"""

from __future__ import annotations

import collections
import logging
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tcpproxy import TcpProxy

from sluicegate import App, BrokerUnavailable, EnqueueFateUnknown, Job, JobState
from support import pg as pgserver
from support.brokers import rewrite
from support.fleet import Fleet, stop_all, wait_for

WORKERS = 4
PRODUCERS = 2
RATE = 25.0  # jobs per second per producer
RESTARTS = 3
BETWEEN = 3.0  # seconds of normal running before each restart (and after the last)
LEASE = 3.0
JOB_SECONDS = 0.02
MAX_BROKER_ERRORS = 3 * RESTARTS  # "broker error" lines one worker may log in the run
MAX_ATTEMPTS_PER_WORKER = 25 * RESTARTS  # connection attempts through the proxy
DEMOTED = ("error connecting in", "discarding", "reconnection attempt")  # psycopg_pool's


@pytest.fixture
def cluster() -> Iterator[pgserver.Cluster]:
    bindir = pgserver.find_binaries()
    if bindir is None:
        reason = "no initdb/pg_ctl on PATH or under /usr/lib/postgresql/*/bin"
        print(f"restart test not run: {reason}")
        if pgserver.required():
            pytest.fail(f"{pgserver.ENV_REQUIRE}=1 but {reason}")
        pytest.skip(reason)
    cluster = pgserver.Cluster(bindir)
    cluster.start()
    yield cluster
    cluster.stop()


class Producer:
    """Enqueues ``slow`` jobs at a steady pace on its own App (its own pool) until stopped;
    keeps what enqueue said: the jobs stored, and every error."""

    def __init__(self, url: str, index: int) -> None:
        self.app = App(broker=url)
        self.index = index
        self.stored: list[Job] = []
        self.errors: list[BaseException] = []
        self.slowest = 0.0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True, name=f"producer-{index}")

    def _run(self) -> None:
        n = 0
        next_at = time.monotonic()
        while not self.stop.is_set():
            n += 1
            started = time.monotonic()
            try:
                job = self.app.enqueue("slow", args=[JOB_SECONDS], queue="slow", max_attempts=10)
            except Exception as exc:  # judged afterwards: only documented errors allowed
                self.errors.append(exc)
            else:
                self.stored.append(job)
            self.slowest = max(self.slowest, time.monotonic() - started)
            next_at = max(next_at + 1 / RATE, time.monotonic() - 1.0)  # no burst after a wait
            self.stop.wait(max(0.0, next_at - time.monotonic()))


def broker_errors(log: str) -> int:
    return len(re.findall(r" ERROR sluicegate\.worker: broker error", log))


@pytest.mark.slow
def test_producers_and_workers_survive_immediate_restarts(
    cluster: pgserver.Cluster, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    began = time.monotonic()
    caplog.set_level(logging.DEBUG, logger="psycopg")  # psycopg's own words, at any level
    url = f"{cluster.dsn}?schema=restarts"
    reader = App(broker=url)  # migrates the schema; reads at the end
    proxy = TcpProxy("127.0.0.1", cluster.port)
    fleet = Fleet(rewrite(url, port=proxy.port, application_name="sg-restart-worker"), tmp_path)
    producers = [Producer(url, i) for i in range(PRODUCERS)]
    restarts: list[float] = []
    try:
        workers = [
            fleet.start(["slow=slow:4"], lease=LEASE, shutdown_timeout=10) for _ in range(WORKERS)
        ]
        wait_for(lambda: all("started" in w.log() for w in workers), timeout=30, what=fleet.logs)
        for producer in producers:
            producer.thread.start()
        for _ in range(RESTARTS):
            time.sleep(BETWEEN)
            at = time.monotonic()
            cluster.restart("immediate")
            restarts.append(time.monotonic() - at)
        time.sleep(BETWEEN)
        for producer in producers:
            producer.stop.set()
        for producer in producers:
            producer.thread.join(30)
            assert not producer.thread.is_alive()

        stored = [job for p in producers for job in p.stored]
        errors = [exc for p in producers for exc in p.errors]
        assert len(stored) >= RATE * PRODUCERS * BETWEEN * RESTARTS / 2, len(stored)

        def unfinished() -> list[Job]:
            return [
                j
                for j in reader.broker.list_jobs(limit=100_000)
                if j.state is not JobState.SUCCEEDED
            ]

        wait_for(
            lambda: not unfinished(),
            timeout=40,
            interval=0.2,
            what=lambda: f"{unfinished()[:5]}\n{fleet.logs()[-5000:]}",
        )
        # Nothing that enqueue reported as stored is lost; each ran to success.
        every = {j.id: j for j in reader.broker.list_jobs(limit=100_000)}
        missing = [j.id for j in stored if j.id not in every]
        assert not missing, missing
        assert all(j.state is JobState.SUCCEEDED for j in every.values())
        # Only the documented errors reached the producers.
        kinds = collections.Counter(type(exc).__name__ for exc in errors)
        assert all(type(exc) in (BrokerUnavailable, EnqueueFateUnknown) for exc in errors), errors
        landed = len(every) - len(stored)  # jobs whose enqueue's fate was unknown, stored
        assert 0 <= landed <= kinds["EnqueueFateUnknown"], (landed, kinds)

        # psycopg's pool said nothing above DEBUG, here or in the workers: each outage is
        # sluicegate's own line (the pool's news stays visible at DEBUG).
        loud = [
            r
            for r in caplog.records
            if r.name.startswith("psycopg") and r.levelno >= logging.WARNING
        ]
        assert not loud, [r.getMessage() for r in loud]
        demoted = [r for r in caplog.records if r.getMessage().startswith(DEMOTED)]
        for worker in workers:
            assert worker.alive(), worker.log()
            log = worker.log()
            assert broker_errors(log) <= MAX_BROKER_ERRORS, log
            assert "Traceback" not in log, log
            assert not re.search(r" (WARNING|ERROR) psycopg", log), log
        attempts = proxy.accepted + proxy.refused
        assert attempts <= WORKERS * MAX_ATTEMPTS_PER_WORKER, (proxy.accepted, proxy.refused)
        stop_all(workers)
        print(
            f"\n{RESTARTS} immediate restarts ({', '.join(f'{s:.1f}' for s in restarts)} s each); "
            f"{len(stored)} jobs stored and all succeeded, {landed} more stored by enqueues of "
            f"unknown fate; producer errors: {dict(kinds) or 'none'}; slowest enqueue "
            f"{max(p.slowest for p in producers):.2f} s; worker connection attempts "
            f"{proxy.accepted} made + {proxy.refused} refused; broker errors logged per worker "
            f"{[broker_errors(w.log()) for w in workers]}; producers' pool warnings at DEBUG "
            f"{len(demoted)}; {time.monotonic() - began:.0f} s"
        )
    finally:
        for producer in producers:
            producer.stop.set()
            producer.thread.join(30)
            producer.app.close()
        fleet.close()
        proxy.close()
        reader.close()
