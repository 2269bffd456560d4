"""Operator actions on every job of a filter, a batch at a time: ``retry_matching`` (dead
jobs back to ready, each as ``retry`` would) and ``cancel_matching`` (unfinished jobs of a
state cancelled, each as ``cancel`` would). Each call changes at most ``limit`` jobs and a
caller loops until it returns 0; unique keys are kept as ``retry`` keeps them; stats stay
exact; and the calls race workers, single actions and each other without a job revived
twice or a finished one cancelled."""

from __future__ import annotations

import functools
import random
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from ...brokers.base import Broker
from ...errors import InvalidTransition, LeaseLost
from ...job import TERMINAL, UNFINISHED, Job, JobId, JobState
from ...outcomes import Buried, Succeeded
from .. import BrokerKind, FakeClock
from .helpers import BOOM, LEASE, S, get, put, spec, suite
from .lifecycle_races import ROUNDS, _handles, _together
from .stats_counts import counted


def bury(broker: Broker, jobs: list[Job], queue: str = "q") -> None:
    """Claim ``jobs`` (the ready jobs of ``queue``) and fail them with no attempt left."""
    claimed = broker.claim([queue], len(jobs), LEASE, "w")
    assert sorted(c.job.id for c in claimed) == sorted(j.id for j in jobs)
    assert broker.record((), [Buried(c.claim, BOOM) for c in claimed]) == []


def dead_jobs(
    broker: Broker, queue: str = "q", task: str = "t", n: int = 1, **options: Any
) -> list[Job]:
    jobs = broker.enqueue([spec(task=task, queue=queue, args=[i], **options) for i in range(n)])
    bury(broker, jobs, queue)
    return jobs


def loop(action: Callable[[], int], limit: int) -> list[int]:
    """Call ``action`` until it returns 0; the counts it returned (0 last)."""
    counts = [action()]
    while counts[-1]:
        assert counts[-1] <= limit
        counts.append(action())
    return counts


class TestRetryMatching:
    def test_dead_jobs_of_a_filter_come_back_as_retry_brings_them(
        self, broker: Broker, clock: FakeClock
    ) -> None:
        a_x = dead_jobs(broker, "a", "x", 3, max_attempts=2)
        a_y = dead_jobs(broker, "a", "y", 2)
        b_x = dead_jobs(broker, "b", "x", 2)
        cancelled = put(broker, queue="a", task="x")
        broker.cancel(cancelled.id)
        ready = put(broker, queue="a", task="x")
        clock.advance(10)
        assert broker.retry_matching(queue="a", task="x") == 3
        for job in a_x:
            back = get(broker, job.id)
            assert back.state is S.READY and back.attempts == 0 and back.max_attempts == 2
            assert back.run_at == clock.now and back.finished_at is None
            assert back.worker_id is None and back.lease_expires_at is None
            assert back.last_error is not None and back.last_error.type == BOOM.type
        assert {get(broker, j.id).state for j in a_y + b_x} == {S.DEAD}
        assert get(broker, cancelled.id).state is S.CANCELLED  # retry_matching: dead only
        assert get(broker, ready.id).state is S.READY
        assert broker.retry_matching(queue="a", task="x") == 0
        assert broker.retry_matching(task="y") == 2
        assert broker.retry_matching(queue="b") == 2
        assert broker.retry_matching() == 0
        claimed = broker.claim(["a", "b"], 100, LEASE, "w2")
        assert {c.job.attempts for c in claimed} == {1}
        assert len(claimed) == 8

    @pytest.mark.parametrize("limit", [1, 3, 7, 50])
    def test_a_loop_of_limited_calls_revives_every_dead_job(
        self, broker: Broker, clock: FakeClock, limit: int
    ) -> None:
        jobs = dead_jobs(broker, "q", "t", 7) + dead_jobs(broker, "r", "t", 4)
        counts = loop(lambda: broker.retry_matching(task="t", limit=limit), limit)
        assert sum(counts) == 11
        assert {get(broker, j.id).state for j in jobs} == {S.READY}
        assert broker.retry_matching(limit=0) == 0

    def test_a_taken_unique_key_keeps_its_dead_job_dead(
        self, broker: Broker, clock: FakeClock
    ) -> None:
        """As ``retry`` refuses it; the loop still revives every other dead job and ends."""
        blocked = [dead_jobs(broker, unique_key=f"k{i}")[0] for i in range(5)]
        holders = [put(broker, unique_key=f"k{i}", queue="hold") for i in range(5)]
        free = dead_jobs(broker, n=3)
        keyed = dead_jobs(broker, unique_key="free-key")
        counts = loop(lambda: broker.retry_matching(limit=1), 1)
        assert sum(counts) == 4
        assert {get(broker, j.id).state for j in blocked} == {S.DEAD}
        assert {get(broker, j.id).state for j in free + keyed} == {S.READY}
        for job in blocked:
            with pytest.raises(InvalidTransition, match="unique key"):
                broker.retry(job.id)
        broker.cancel(holders[0].id)  # the key is free again: the next call takes its job
        assert broker.retry_matching() == 1
        assert get(broker, blocked[0].id).state is S.READY

    def test_of_dead_jobs_sharing_a_unique_key_one_comes_back(
        self, broker: Broker, clock: FakeClock
    ) -> None:
        first = dead_jobs(broker, unique_key="k")[0]
        second = dead_jobs(broker, unique_key="k")[0]
        assert broker.retry_matching() == 1
        states = {get(broker, first.id).state, get(broker, second.id).state}
        assert states == {S.READY, S.DEAD}
        assert broker.retry_matching() == 0
        unfinished = [j for j in broker.list_jobs(unique_key="k") if j.state in UNFINISHED]
        assert len(unfinished) == 1

    def test_stats_count_the_revived_jobs(self, broker: Broker, clock: FakeClock) -> None:
        dead_jobs(broker, "a", n=4)
        dead_jobs(broker, "b", n=2)
        broker.stats()
        assert broker.retry_matching(queue="a", limit=3) == 3
        assert broker.stats().to_dict() == counted(broker, clock.now)
        assert broker.retry_matching() == 3
        assert broker.stats().to_dict() == counted(broker, clock.now)


class TestCancelMatching:
    @pytest.mark.parametrize("state", [S.SCHEDULED, S.READY, S.CLAIMED, S.RUNNING])
    def test_jobs_of_a_state_are_cancelled_as_cancel_cancels_them(
        self, broker: Broker, clock: FakeClock, state: JobState
    ) -> None:
        delay = 60.0 if state is S.SCHEDULED else 0.0
        jobs = broker.enqueue([spec(task="t", args=[i], delay=delay) for i in range(4)])
        other_task = put(broker, task="u", delay=delay)
        other_queue = put(broker, queue="r", task="t", delay=delay)
        claims = []
        if state in (S.CLAIMED, S.RUNNING):
            claimed = broker.claim(["q"], 5, LEASE, "w")
            claims = [c.claim for c in claimed if c.job.task == "t"]
            broker.record(claims if state is S.RUNNING else (), ())
        clock.advance(1)
        assert broker.cancel_matching(state=state, queue="q", task="t") == 4
        for job in jobs:
            now = get(broker, job.id)
            assert now.state is S.CANCELLED and now.finished_at == clock.now
            assert now.lease_expires_at is None
        for claim in claims:  # the worker's outcome is refused, as after a cancel
            with pytest.raises(LeaseLost):
                broker.ack(claim, "null")
        assert get(broker, other_queue.id).state is not S.CANCELLED
        assert get(broker, other_task.id).state is not S.CANCELLED
        assert broker.cancel_matching(state=state, queue="q", task="t") == 0
        clock.advance(10 * LEASE)  # nothing cancelled comes back, even after its lease
        assert {c.job.id for c in broker.claim(["q"], 10, LEASE, "w")} <= {other_task.id}

    @pytest.mark.parametrize("state", sorted(TERMINAL))
    def test_a_finished_state_is_refused(self, broker: Broker, state: JobState) -> None:
        put(broker)
        with pytest.raises(InvalidTransition, match="finished"):
            broker.cancel_matching(state=state)

    @pytest.mark.parametrize("limit", [1, 4, 100])
    def test_a_loop_of_limited_calls_cancels_every_job(
        self, broker: Broker, clock: FakeClock, limit: int
    ) -> None:
        jobs = broker.enqueue([spec(queue=f"q{i % 3}", args=[i]) for i in range(10)])
        broker.stats()
        counts = loop(lambda: broker.cancel_matching(state=S.READY, limit=limit), limit)
        assert sum(counts) == 10
        assert {get(broker, j.id).state for j in jobs} == {S.CANCELLED}
        assert broker.stats().to_dict() == counted(broker, clock.now)
        assert broker.cancel_matching(state=S.READY, limit=0) == 0


# ---- races ------------------------------------------------------------------------------
BATCH = 60


class CancelSweep:
    """One round: two workers claim, start and ack while an operator cancels the running,
    ready and claimed jobs in batches of 3 until the workers run dry."""

    def __init__(self, handles: list[Broker], rng: random.Random) -> None:
        self.a, self.b, self.operator = handles
        self.rng = rng
        self.acked: set[JobId] = set()
        self.cancelled: list[int] = []
        self.working, self.drained = threading.Event(), threading.Event()

    def run(self) -> None:
        _together(self.workers, self.cancel)

    def workers(self) -> None:
        _together(lambda: self.work(self.a, "w-a"), lambda: self.work(self.b, "w-b"))
        self.drained.set()

    def work(self, handle: Broker, worker: str) -> None:
        while batch := handle.claim(["q"], self.rng.randint(1, 4), LEASE, worker):
            self.working.set()
            claims = [c.claim for c in batch]
            handle.record(claims, ())
            lost = handle.record((), [Succeeded(c, "null") for c in claims])
            self.acked.update(c.job_id for c in claims if c not in lost)

    def cancel(self) -> None:
        self.working.wait(5)
        while not self.drained.is_set():
            for state in (S.RUNNING, S.READY, S.CLAIMED):
                self.cancelled.append(self.operator.cancel_matching(state=state, limit=3))

    def check(self, jobs: list[Job], final: dict[JobId, Job], seed: int) -> None:
        ended = Counter(j.state for j in final.values())
        assert set(final) == {j.id for j in jobs}
        assert set(ended) <= {S.CANCELLED, S.SUCCEEDED}, (ended, seed)
        assert ended[S.CANCELLED] == sum(self.cancelled), seed
        assert {i for i, j in final.items() if j.state is S.SUCCEEDED} == self.acked, seed


class ReviveSweep:
    """One round: three operators loop retry_matching over the same dead jobs while an
    operator retries some of them one by one and a worker runs what comes back."""

    def __init__(self, handles: list[Broker], jobs: list[Job], rng: random.Random) -> None:
        self.handles, self.jobs, self.rng = handles, jobs, rng
        self.revived: list[int] = []
        self.singles: Counter[JobId] = Counter()
        self.runs: Counter[JobId] = Counter()
        self.done = threading.Event()

    def run(self) -> None:
        _together(self.operators, self.work)

    def operators(self) -> None:
        _together(
            *(functools.partial(self.sweep, h) for h in self.handles[:3]),
            functools.partial(self.single, self.handles[3]),
        )
        self.done.set()

    def sweep(self, handle: Broker) -> None:
        while n := handle.retry_matching(limit=self.rng.randint(1, 7)):
            self.revived.append(n)

    def single(self, handle: Broker) -> None:
        for job in self.rng.sample(self.jobs, len(self.jobs) // 3):
            try:
                handle.retry(job.id)
            except InvalidTransition:
                continue
            self.singles[job.id] += 1

    def work(self) -> None:
        worker = self.handles[4]
        while True:
            finished = self.done.is_set()
            batch = worker.claim(["q"], self.rng.randint(1, 5), LEASE, "w2")
            self.runs.update(c.job.id for c in batch)
            worker.record((), [Succeeded(c.claim, "null") for c in batch])
            if not batch and finished:
                return

    def check(self, final: dict[JobId, Job], seed: int) -> None:
        assert sum(self.revived) + sum(self.singles.values()) == len(self.jobs), seed
        assert self.runs == Counter({j.id: 1 for j in self.jobs}), seed
        assert {j.state for j in final.values()} == {S.SUCCEEDED}, seed


class KeyRace:
    """One round: a producer enqueues jobs with the unique keys of dead jobs while an
    operator revives those."""

    def __init__(self, handles: list[Broker], keys: list[str], rng: random.Random) -> None:
        self.producer, self.operator = handles
        self.keys, self.rng = keys, rng
        self.stored: list[Job] = []

    def run(self) -> None:
        _together(self.produce, self.revive)

    def produce(self) -> None:
        for key in self.rng.sample(self.keys, len(self.keys)):
            self.stored += self.producer.enqueue([spec(unique_key=key, queue="other")])

    def revive(self) -> None:
        while self.operator.retry_matching(limit=self.rng.randint(1, 5)):
            pass

    def check(self, broker: Broker, seed: int) -> None:
        """One unfinished job per key: the revived one (the producer got it back), or the
        producer's (the dead one stayed dead)."""
        for key in self.keys:
            of_key = broker.list_jobs(unique_key=key)
            unfinished = [j for j in of_key if j.state in UNFINISHED]
            assert len(unfinished) == 1, (key, of_key, seed)
            assert [j.id for j in self.stored if j.unique_key == key] == [unfinished[0].id]


class TestBulkRaces:
    def test_cancel_matching_racing_workers_cancels_no_finished_job(
        self, broker_kind: BrokerKind, broker: Broker, open_broker: Callable[[], Broker]
    ) -> None:
        """Each job ends cancelled or succeeded, the counts returned are the jobs
        cancelled, and no outcome of a cancelled job counts."""
        seed = random.randrange(2**32)
        rng = random.Random(seed)
        handles = _handles(broker_kind, broker, open_broker, 3)
        for round_ in range(ROUNDS // 4):
            jobs = broker.enqueue([spec(args=[round_, i]) for i in range(BATCH)])
            race = CancelSweep(handles, rng)
            race.run()
            race.check(jobs, {j.id: j for j in broker.list_jobs(queue="q", limit=BATCH)}, seed)

    def test_retry_matching_racing_itself_revives_each_job_once(
        self, broker_kind: BrokerKind, broker: Broker, open_broker: Callable[[], Broker]
    ) -> None:
        """Each dead job comes back exactly once, by one sweep or one single retry, and
        runs once more."""
        seed = random.randrange(2**32)
        rng = random.Random(seed)
        handles = _handles(broker_kind, broker, open_broker, 5)
        for round_ in range(ROUNDS // 4):
            jobs = dead_jobs(broker, n=BATCH, max_attempts=1, kwargs={"round": round_})
            race = ReviveSweep(handles, jobs, rng)
            race.run()
            race.check({j.id: j for j in broker.list_jobs(queue="q", limit=BATCH)}, seed)

    def test_retry_matching_racing_enqueues_of_its_unique_keys(
        self, broker_kind: BrokerKind, broker: Broker, open_broker: Callable[[], Broker]
    ) -> None:
        """Never two unfinished jobs of one key: each dead job comes back, or stays dead
        because the producer's new job holds its key."""
        seed = random.randrange(2**32)
        rng = random.Random(seed)
        handles = _handles(broker_kind, broker, open_broker, 2)
        for round_ in range(ROUNDS // 4):
            keys = [f"k-{round_}-{i}" for i in range(BATCH)]
            bury(broker, broker.enqueue([spec(unique_key=key) for key in keys]))
            race = KeyRace(handles, keys, rng)
            race.run()
            race.check(broker, seed)
            for queue in ("q", "other"):  # the next round's jobs are the only ones ready
                broker.cancel_matching(state=S.READY, queue=queue)


__all__ = suite(globals())
