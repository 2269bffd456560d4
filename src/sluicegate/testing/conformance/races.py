"""Races: threads and OS processes claiming and recovering the same jobs, each job once."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from ...brokers.base import Broker, Recovery
from ...job import Claim, Job, JobId
from .. import BrokerKind, FakeClock, run_released
from .helpers import LEASE, S, get, spec, suite


# ---- races -----------------------------------------------------------------------------
def _run_threads(count: int, target: Callable[[int], None]) -> None:
    barrier = threading.Barrier(count)
    errors: list[BaseException] = []

    def run(index: int) -> None:
        try:
            barrier.wait(timeout=10)
            target(index)
        except BaseException as exc:  # reported in the main thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads)
    assert not errors, errors


def _drain(broker: Broker, worker: str, batch: int = 3) -> list[tuple[int, int]]:
    got: list[tuple[int, int]] = []
    while True:
        claimed = broker.claim(["q"], batch, LEASE, worker)
        if not claimed:
            return got
        got.extend((c.claim.job_id, c.claim.token) for c in claimed)


def _assert_claimed_once(broker: Broker, ids: Sequence[int], claims: list[tuple[int, int]]) -> None:
    counts = Counter(job_id for job_id, _ in claims)
    assert [i for i, n in counts.items() if n > 1] == [], "a job was claimed twice"
    assert sorted(counts) == sorted(ids), "a job was never claimed"
    jobs = [get(broker, i) for i in ids]
    assert all(j.state is S.CLAIMED and j.attempts == 1 for j in jobs)
    for job_id, token in claims:  # every winner really holds its job
        assert broker.heartbeat([Claim(JobId(job_id), token)], LEASE) == []


BACKLOG = 300


class TestRaces:
    def test_threads_claiming_share_the_backlog(self, broker: Broker) -> None:
        ids = [j.id for j in broker.enqueue([spec(args=[i]) for i in range(BACKLOG)])]
        results: list[list[tuple[int, int]]] = [[] for _ in range(8)]

        def work(i: int) -> None:
            results[i] = _drain(broker, f"w{i}", batch=1 + i % 4)

        _run_threads(8, work)
        _assert_claimed_once(broker, ids, [c for r in results for c in r])

    def test_threads_with_their_own_handles(
        self, broker_kind: BrokerKind, broker: Broker, open_broker: Callable[[], Broker]
    ) -> None:
        if not broker_kind.shared:
            pytest.skip(f"{broker_kind.name}: handles do not share storage")
        ids = [j.id for j in broker.enqueue([spec(args=[i]) for i in range(BACKLOG)])]
        handles = [open_broker() for _ in range(6)]
        results: list[list[tuple[int, int]]] = [[] for _ in handles]

        def work(i: int) -> None:
            results[i] = _drain(handles[i], f"w{i}")

        _run_threads(len(handles), work)
        _assert_claimed_once(broker, ids, [c for r in results for c in r])

    def test_concurrent_recovery_recovers_each_job_once(
        self, broker: Broker, clock: FakeClock
    ) -> None:
        jobs = broker.enqueue([spec(args=[i], max_attempts=1 + i % 2) for i in range(200)])
        broker.claim(["q"], len(jobs), 10, "w-lost")
        clock.advance(11)
        results: list[list[Recovery]] = [[] for _ in range(8)]

        def work(i: int) -> None:
            while (recovery := broker.recover_expired(limit=7)) != Recovery():
                results[i].append(recovery)

        _run_threads(8, work)
        passes = [r for rs in results for r in rs]
        _assert_recovered_once(
            broker,
            jobs,
            [i for r in passes for i in r.requeued],
            [i for r in passes for i in r.dead],
        )


def _assert_recovered_once(
    broker: Broker, jobs: list[Job], requeued: list[int], dead: list[int]
) -> None:
    assert len(requeued) == len(set(requeued)) and len(dead) == len(set(dead))
    assert sorted(requeued) == sorted(j.id for j in jobs if j.max_attempts == 2)
    assert sorted(dead) == sorted(j.id for j in jobs if j.max_attempts == 1)
    for job in jobs:
        now = get(broker, job.id)
        assert now.attempts == 1, "recovery must not charge a second attempt"
        assert now.state is (S.READY if job.max_attempts == 2 else S.DEAD)
        assert now.last_error is not None and now.last_error.type == "WorkerLost"


# ---- races between OS processes ---------------------------------------------------------
# Each child opens its own broker on the URL through the public seam, waits for "go" on
# stdin so all of them start together, then prints a JSON list of what it got.
CHILD = r"""
import json, sys
from sluicegate.brokers import broker_from_url
url, action, worker = sys.argv[1:4]
broker = broker_from_url(url)
try:
    print("ready", flush=True)
    sys.stdin.readline()
    got = []
    if action == "claim":
        while batch := broker.claim(["q"], 2, 30.0, worker):
            got.extend([c.claim.job_id, c.claim.token] for c in batch)
    else:
        while (rec := broker.recover_expired(limit=3)).requeued or rec.dead:
            got.extend(["requeued", i] for i in rec.requeued)
            got.extend(["dead", i] for i in rec.dead)
    print(json.dumps(got), flush=True)
finally:
    broker.close()
"""


def _run_children(url: str, action: str, count: int) -> list[list[Any]]:
    return run_released(CHILD, [[url, action, f"p{i}"] for i in range(count)])


class TestProcessRaces:
    @pytest.fixture(autouse=True)
    def _multiprocess_only(self, broker_kind: BrokerKind) -> None:
        if not broker_kind.multiprocess:
            pytest.skip(f"{broker_kind.name}: cannot be shared between processes")

    def test_processes_claiming_share_the_backlog(self, broker: Broker, broker_url: str) -> None:
        ids = [j.id for j in broker.enqueue([spec(args=[i]) for i in range(BACKLOG)])]
        outputs = _run_children(broker_url, "claim", 4)
        _assert_claimed_once(broker, ids, [(job_id, token) for o in outputs for job_id, token in o])

    def test_processes_recovering_recover_each_job_once(
        self, broker: Broker, broker_url: str
    ) -> None:
        # The fake clock stands at T0, years before now: by the children's real clocks
        # every lease taken here has expired.
        jobs = broker.enqueue([spec(args=[i], max_attempts=1 + i % 2) for i in range(200)])
        broker.claim(["q"], len(jobs), 10, "w-lost")
        outputs = [pair for o in _run_children(broker_url, "recover", 4) for pair in o]
        _assert_recovered_once(
            broker,
            jobs,
            [i for kind, i in outputs if kind == "requeued"],
            [i for kind, i in outputs if kind == "dead"],
        )


__all__ = suite(globals())
