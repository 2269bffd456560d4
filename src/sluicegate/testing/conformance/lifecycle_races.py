"""Races between a job's outcome and what else may happen to it at the same moment: its
lease expiring, an operator's cancel, an operator's retry. Each race runs on a few
thousand jobs, in rounds of BATCH, with threads on their own handles (and, where the
broker allows it, OS processes), so a round is over in a fraction of a second.

What each race checks, per job:

- expiry against completion (the job took exactly its lease and its heartbeat came
  late): one terminal transition, never two; a state once seen terminal never changes;
- cancel against claim, and cancel against retry backoff: cancelled or succeeded, never
  both; no claim that began after the cancel returned takes the job, no start or outcome
  that began after it is accepted, no attempt is charged after it;
- a retry of a dead job against other retries: exactly one revives it, and it runs once.

Calls are stamped with ``time.monotonic()`` (one clock for every thread and process of
the machine): a call that *began* after another *returned* came after its commit.
Afterwards every claim taken in the race is spent: its start, heartbeat, outcomes and
release are refused and change nothing.
"""

from __future__ import annotations

import functools
import os
import random
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from ...brokers.base import Broker, Recovery
from ...errors import InvalidTransition
from ...job import TERMINAL, Claim, ClaimedJob, Job, JobId, JobState
from ...outcomes import Buried, Outcome, Retried, Succeeded
from .. import BrokerKind, FakeClock, run_released
from .helpers import BOOM, LEASE, S, spec, suite
from .races import _run_threads

# Every race runs ROUNDS rounds of BATCH jobs (the two with the most writes per job, three
# quarters of that); SLUICEGATE_RACE_ROUNDS=400 makes a soak of it.
ROUNDS = int(os.environ.get("SLUICEGATE_RACE_ROUNDS", "40"))
BATCH = 50


def _handles(
    kind: BrokerKind, broker: Broker, open_broker: Callable[[], Broker], count: int
) -> list[Broker]:
    """One handle per thread where handles share storage (each its own connection), else
    the one broker every thread shares."""
    return [open_broker() if kind.shared else broker for _ in range(count)]


def _together(*targets: Callable[[], None]) -> None:
    """Run each target in a thread of its own, all released at once."""
    _run_threads(len(targets), lambda i: targets[i]())


def _snapshot(broker: Broker, jobs: list[Job]) -> dict[JobId, Job]:
    """The jobs as stored now, in one query (they are the newest of queue q)."""
    found = {j.id: j for j in broker.list_jobs(queue="q", limit=len(jobs))}
    assert set(found) == {j.id for j in jobs}
    return found


@dataclass
class Log:
    """What the threads of one race did, stamped (list.append is atomic)."""

    seed: int = 0  # the race's, named in failures
    claims: list[tuple[float, Claim]] = field(default_factory=list)  # call began, claim
    starts: list[tuple[float, Claim, bool]] = field(default_factory=list)  # began, .., ok
    outcomes: list[tuple[float, Outcome, bool]] = field(default_factory=list)  # began, ..
    cancels: dict[JobId, tuple[float, Job]] = field(default_factory=dict)  # returned, job
    refused: list[str] = field(default_factory=list)  # operator actions refused

    def claim(self, broker: Broker, n: int, worker: str) -> list[ClaimedJob]:
        began = time.monotonic()
        batch = broker.claim(["q"], n, LEASE, worker)
        for c in batch:
            assert c.job.state is S.CLAIMED, f"a claim returned a job that is {c.job.state}"
            self.claims.append((began, c.claim))
        return batch

    def start(self, broker: Broker, claim: Claim) -> bool:
        began = time.monotonic()
        ok = not broker.record([claim], ())
        self.starts.append((began, claim, ok))
        return ok

    def finish(self, broker: Broker, outcomes: list[Outcome], start: bool = False) -> None:
        """Record outcomes (with their starts, as a worker's batch does, when ``start``)."""
        began = time.monotonic()
        lost = set(broker.record([o.claim for o in outcomes] if start else (), outcomes))
        self.outcomes.extend((began, o, o.claim not in lost) for o in outcomes)

    def cancel(self, broker: Broker, job_id: JobId) -> None:
        try:
            job = broker.cancel(job_id)
        except InvalidTransition as exc:
            self.refused.append(str(exc))
            return
        self.cancels[job_id] = (time.monotonic(), job)

    def won(self, kind: type = object) -> set[JobId]:
        """Jobs with an accepted outcome (of ``kind``)."""
        return {o.claim.job_id for _, o, ok in self.outcomes if ok and isinstance(o, kind)}

    def assert_nothing_after_cancel(self) -> None:
        """No claim, start or outcome that began after a cancel returned took effect."""
        for began, claim in self.claims:
            cancelled = self.cancels.get(claim.job_id)
            assert cancelled is None or began < cancelled[0], (
                f"job {claim.job_id} was claimed by a claim that began after its cancel "
                f"returned (seed {self.seed})"
            )
        for began, claim, ok in self.starts:
            cancelled = self.cancels.get(claim.job_id)
            assert not (ok and cancelled and began > cancelled[0]), (
                f"job {claim.job_id} started after its cancel returned (seed {self.seed})"
            )
        for began, outcome, ok in self.outcomes:
            cancelled = self.cancels.get(outcome.claim.job_id)
            assert not (ok and cancelled and began > cancelled[0]), (
                f"job {outcome.claim.job_id}: an outcome was accepted after its cancel "
                f"returned (seed {self.seed})"
            )


def _assert_spent(broker: Broker, jobs: list[Job], claims: list[Claim]) -> None:
    """Every claim of a finished race: start, heartbeat, outcomes and release refused,
    nothing changed, and no lease left to recover."""
    claims = list(dict.fromkeys(claims))
    before = _snapshot(broker, jobs)
    assert all(j.finished for j in before.values())
    assert broker.record(claims, ()) == claims
    assert broker.heartbeat(claims, LEASE) == claims
    assert broker.record((), [Succeeded(c, '"stale"') for c in claims]) == claims
    assert broker.record((), [Retried(c, BOOM, 0.0) for c in claims]) == claims
    assert broker.record((), [Buried(c, BOOM) for c in claims]) == claims
    assert broker.release(claims) == claims
    assert broker.recover_expired() == Recovery()
    assert _snapshot(broker, jobs) == before


def _seed() -> int:
    return random.randrange(2**32)


# ---- expiry against completion ---------------------------------------------------------
class ExpiryRound:
    """One round: the owner of BATCH expired claims finishes them (a late heartbeat first,
    now and then) while two recoverers, a second worker and a reader run."""

    def __init__(self, handles: list[Broker], first: list[Claim], rng: random.Random) -> None:
        self.owner, self.rec_a, self.rec_b, self.second, self.reader = handles
        self.first, self.rng = first, rng
        self.log = Log()
        self.recoveries: list[Recovery] = []
        self.seen: dict[JobId, list[tuple[JobState, object]]] = defaultdict(list)
        self.owned, self.recovered, self.finished = (threading.Event() for _ in range(3))

    def run(self) -> None:
        _together(self.own, self.recoverers, self.claim_again, self.read)

    def own(self) -> None:
        i = 0
        while i < len(self.first):
            chunk = self.first[i : i + self.rng.randint(1, 5)]
            i += len(chunk)
            if self.rng.random() < 0.2:
                self.owner.heartbeat(chunk, LEASE)
            outcomes: list[Outcome] = [
                Succeeded(c, '"first"') if c.job_id % 4 else Buried(c, BOOM) for c in chunk
            ]
            self.log.finish(self.owner, outcomes, start=self.rng.random() < 0.5)
        self.owned.set()

    def recover(self, handle: Broker) -> None:
        while True:
            done = self.owned.is_set()
            got = handle.recover_expired(limit=self.rng.randint(1, 6))
            if got != Recovery():
                self.recoveries.append(got)
            elif done:
                return
            else:
                time.sleep(0.0005)

    def recoverers(self) -> None:
        _together(lambda: self.recover(self.rec_a), lambda: self.recover(self.rec_b))
        self.recovered.set()

    def claim_again(self) -> None:
        while True:
            done = self.recovered.is_set()
            if batch := self.log.claim(self.second, self.rng.randint(1, 6), "w-second"):
                self.log.finish(self.second, [Succeeded(c.claim, '"second"') for c in batch], True)
            elif done:
                break
            else:
                time.sleep(0.0005)
        self.finished.set()

    def read(self) -> None:
        while not self.finished.is_set():
            for job in self.reader.list_jobs(queue="q", limit=BATCH):
                self.seen[job.id].append((job.state, job.result))
            time.sleep(0.001)

    def check(self, jobs: list[Job], final: dict[JobId, Job], seed: int) -> None:
        """Each job ended once: its owner's outcome stood, or recovery buried it, or
        requeued it for the second worker's ack. A state once seen terminal stays."""
        requeued = Counter(i for r in self.recoveries for i in r.requeued)
        dead = Counter(i for r in self.recoveries for i in r.dead)
        first = set(self.first)
        by_owner = {o.claim.job_id for _, o, ok in self.log.outcomes if ok and o.claim in first}
        by_second = self.log.won() - by_owner
        again = Counter(c.job_id for _, c in self.log.claims)
        for job in jobs:
            now, why = final[job.id], (final[job.id], requeued, dead, by_owner, seed)
            assert (job.id in by_owner) + dead[job.id] + (job.id in by_second) == 1, why
            assert requeued[job.id] + dead[job.id] <= 1, why
            if job.id in by_owner:  # the owner's outcome stood: nobody took the job
                expected = (S.SUCCEEDED, "first") if job.id % 4 else (S.DEAD, None)
                assert (now.state, now.result, now.attempts, again[job.id]) == (*expected, 1, 0)
            elif dead[job.id]:  # recovered with no attempt left
                assert (now.state, now.attempts, again[job.id]) == (S.DEAD, 1, 0), why
                assert now.last_error is not None and now.last_error.type == "WorkerLost"
            else:  # requeued, claimed once more, acked by the second worker
                assert requeued[job.id] == 1 and again[job.id] == 1, why
                assert (now.state, now.result, now.attempts) == (S.SUCCEEDED, "second", 2)
            states = self.seen[job.id]
            ended = next((i for i, (s, _) in enumerate(states) if s in TERMINAL), None)
            if ended is not None:  # once seen finished, seen the same ever after
                assert set(states[ended:]) == {(now.state, now.result)}, (states, seed)


class TestExpiryRaces:
    def test_expiry_racing_completion_ends_each_job_once(
        self,
        broker_kind: BrokerKind,
        broker: Broker,
        open_broker: Callable[[], Broker],
        clock: FakeClock,
    ) -> None:
        """Jobs that took exactly their lease: their owner's late heartbeats and outcomes
        race two recoverers, a second worker claiming what they requeue, and a reader.
        Each job ends once, and a state once seen terminal is seen ever after."""
        seed = _seed()
        rng = random.Random(seed)
        handles = _handles(broker_kind, broker, open_broker, 5)
        everything: list[Job] = []
        claims: list[Claim] = []
        for round_ in range(ROUNDS):
            jobs = broker.enqueue(
                [spec(args=[round_, i], max_attempts=1 + i % 2) for i in range(BATCH)]
            )
            first = [c.claim for c in broker.claim(["q"], BATCH, LEASE, "w-slow")]
            assert len(first) == BATCH
            clock.advance(LEASE)  # the jobs took exactly their lease: still held
            assert broker.recover_expired() == Recovery(), "a lease expired at its last instant"
            clock.advance(0.5)  # and the heartbeat comes late: the leases have expired
            rng.shuffle(first)
            race = ExpiryRound(handles, first, rng)
            race.run()
            race.check(jobs, _snapshot(broker, jobs), seed)
            everything += jobs
            claims += first + [c for _, c in race.log.claims]
        clock.advance(10 * LEASE)
        _assert_spent(broker, everything, claims)


# ---- cancel against claim, and against retry backoff -------------------------------------
class CancelRound:
    """One round: two workers claim and finish jobs while an operator cancels them all."""

    def __init__(self, handles: list[Broker], ids: list[JobId], rng: random.Random) -> None:
        self.a, self.b, self.operator = handles[:3]
        self.ids, self.rng = ids, rng
        self.log = Log()
        self.cancelled = threading.Event()

    def run(self) -> None:
        _together(lambda: self.work(self.a, "w-a"), lambda: self.work(self.b, "w-b"), self.cancel)

    def cancel(self) -> None:
        for job_id in self.ids:
            self.log.cancel(self.operator, job_id)
        self.cancelled.set()

    def work(self, handle: Broker, worker: str) -> None:
        """Until nothing is ready: no job comes back (no retries here)."""
        while batch := self.log.claim(handle, self.rng.randint(1, 4), worker):
            for claimed in batch:
                claim = claimed.claim
                if self.rng.random() < 0.3:  # a start of its own, then the ack
                    self.log.start(handle, claim)
                    self.log.finish(handle, [Succeeded(claim, '"done"')])
                else:  # start and ack in one record
                    self.log.finish(handle, [Succeeded(claim, '"done"')], start=True)

    def check(self, jobs: list[Job], final: dict[JobId, Job], seed: int) -> None:
        self.log.seed = seed
        self.log.assert_nothing_after_cancel()
        acked = self.log.won(Succeeded)
        for job in jobs:
            now = final[job.id]
            assert (job.id in self.log.cancels) != (job.id in acked), (now, seed)
            assert now.state is (S.CANCELLED if job.id in self.log.cancels else S.SUCCEEDED)


class BackoffRound(CancelRound):
    """One round: jobs in their retry backoff while the clock runs on; two workers promote,
    claim and finish them (failing some again) while an operator cancels them all."""

    def __init__(
        self, handles: list[Broker], ids: list[JobId], rng: random.Random, clock: FakeClock
    ) -> None:
        super().__init__(handles, ids, rng)
        self.clock = clock

    def run(self) -> None:
        _together(
            lambda: self.work(self.a, "w-a"),
            lambda: self.work(self.b, "w-b"),
            self.cancel,
            self.tick,
        )

    def tick(self) -> None:
        while not self.cancelled.is_set():
            self.clock.advance(0.1)  # backoffs come due while the race runs
            time.sleep(0.001)

    def work(self, handle: Broker, worker: str) -> None:
        while True:
            done = self.cancelled.is_set()
            batch = self.log.claim(handle, self.rng.randint(1, 3), worker)
            if not batch:
                if done:  # every job is cancelled or succeeded by now
                    return
                time.sleep(0.001)
                continue
            outcomes: list[Outcome] = []
            for claimed in batch:
                claim, job = claimed.claim, claimed.job
                if job.attempts < job.max_attempts and self.rng.random() < 0.5:
                    outcomes.append(Retried(claim, BOOM, self.rng.choice((0.0, 0.3, 1.0))))
                else:
                    outcomes.append(Succeeded(claim, '"done"'))
            if self.rng.random() < 0.3:  # starts of their own first
                for claimed in batch:
                    self.log.start(handle, claimed.claim)
            self.log.finish(handle, outcomes, start=True)

    def check(self, jobs: list[Job], final: dict[JobId, Job], seed: int) -> None:
        """Besides CancelRound's: a cancelled job kept the attempts it had at the cancel."""
        super().check(jobs, final, seed)
        for job_id, (_, at_cancel) in self.log.cancels.items():
            assert final[job_id].attempts == at_cancel.attempts, (final[job_id], at_cancel, seed)

    def in_backoff(self) -> int:
        """Cancels that met a job waiting out its backoff (scheduled, not due yet)."""
        return sum(job.run_at > (job.finished_at or 0.0) for _, job in self.log.cancels.values())


class TestCancelRaces:
    def test_cancel_racing_claims_stops_every_later_attempt(
        self, broker_kind: BrokerKind, broker: Broker, open_broker: Callable[[], Broker]
    ) -> None:
        """Two workers claim, start and ack while an operator cancels the same jobs, in
        claim order or at random. Each job is cancelled or succeeded, never both; once a
        cancel returned, no claim takes the job and no start or ack of it counts."""
        seed = _seed()
        rng = random.Random(seed)
        handles = _handles(broker_kind, broker, open_broker, 3)
        everything: list[Job] = []
        claims: list[Claim] = []
        for round_ in range(ROUNDS):
            jobs = broker.enqueue([spec(args=[round_, i]) for i in range(BATCH)])
            ids = [j.id for j in jobs]
            if round_ % 2:
                rng.shuffle(ids)
            race = CancelRound(handles, ids, rng)
            race.run()
            race.check(jobs, _snapshot(broker, jobs), seed)
            assert set(Counter(c.job_id for _, c in race.log.claims).values()) <= {1}
            for message in race.log.refused:
                assert message.endswith(": it is succeeded"), message
            everything += jobs
            claims += [c for _, c in race.log.claims]
        _assert_spent(broker, everything, claims)

    def test_cancel_racing_retry_backoff_charges_no_attempt_after_it(
        self,
        broker_kind: BrokerKind,
        broker: Broker,
        open_broker: Callable[[], Broker],
        clock: FakeClock,
    ) -> None:
        """Jobs fail and wait out their backoff while the clock runs on; two workers
        promote and claim them when due (failing some again) while an operator cancels
        them, in backoff or mid-attempt. A cancelled job is not claimed, started or
        finished after the cancel returned, never ready again, and keeps its attempts."""
        seed = _seed()
        rng = random.Random(seed)
        handles = _handles(broker_kind, broker, open_broker, 4)
        everything: list[Job] = []
        claims: list[Claim] = []
        in_backoff = 0
        for round_ in range(ROUNDS * 3 // 4):
            jobs = broker.enqueue([spec(args=[round_, i], max_attempts=3) for i in range(BATCH)])
            first = broker.claim(["q"], BATCH, LEASE, "w-first")
            broker.record((), [Retried(c.claim, BOOM, rng.choice((0.0, 0.3, 1.0))) for c in first])
            ids = [j.id for j in jobs]
            rng.shuffle(ids)
            race = BackoffRound(handles, ids, rng, clock)
            race.run()
            race.check(jobs, _snapshot(broker, jobs), seed)
            in_backoff += race.in_backoff()
            clock.advance(5.0)  # every backoff is due: no cancelled job comes back
            assert handles[3].claim(["q"], BATCH, LEASE, "w-late") == []
            everything += jobs
            claims += [c.claim for c in first] + [c for _, c in race.log.claims]
        assert in_backoff > 0, "no cancel met a job waiting out its backoff"
        _assert_spent(broker, everything, claims)


# ---- retry against retry ----------------------------------------------------------------
class ReviveRound:
    """One round: three operators retry every dead job while a worker runs what comes back."""

    def __init__(self, handles: list[Broker], jobs: list[Job], rng: random.Random) -> None:
        self.operators, self.worker = handles[:3], handles[3]
        self.jobs, self.rng = jobs, rng
        self.log = Log()
        self.revived: Counter[JobId] = Counter()
        self.retried = threading.Event()

    def run(self) -> None:
        _together(self.revive_all, self.work)

    def revive_all(self) -> None:
        _together(*(functools.partial(self.revive, h) for h in self.operators))
        self.retried.set()

    def revive(self, handle: Broker) -> None:
        ids = [j.id for j in self.jobs]
        self.rng.shuffle(ids)
        for job_id in ids:
            try:
                job = handle.retry(job_id)
            except InvalidTransition as exc:
                self.log.refused.append(str(exc))
                continue
            assert job.state is S.READY and job.attempts == 0, job
            self.revived[job_id] += 1

    def work(self) -> None:
        while True:
            done = self.retried.is_set()
            if batch := self.log.claim(self.worker, self.rng.randint(1, 10), "w2"):
                self.log.finish(self.worker, [Succeeded(c.claim, '"again"') for c in batch], True)
            elif done:
                return
            else:
                time.sleep(0.0005)

    def check(self, final: dict[JobId, Job], seed: int) -> None:
        runs = Counter(c.job_id for _, c in self.log.claims)
        for job in self.jobs:
            now = final[job.id]
            assert self.revived[job.id] == 1 and runs[job.id] == 1, (now, self.revived, seed)
            assert now.state is S.SUCCEEDED and now.attempts == 1, (now, seed)
        assert len(self.log.refused) == 2 * len(self.jobs)
        for message in self.log.refused:
            assert message.startswith("cannot retry job "), message
            assert message.rsplit(": it is ", 1)[1] in ("ready", "claimed", "succeeded"), message


class TestReviveRaces:
    def test_concurrent_retries_of_a_dead_job_revive_it_once(
        self, broker_kind: BrokerKind, broker: Broker, open_broker: Callable[[], Broker]
    ) -> None:
        """Three operators retry the same dead (a few: cancelled) jobs at once while a
        worker claims what comes back: each job is revived by exactly one retry, the
        others are refused, and it runs once more."""
        seed = _seed()
        rng = random.Random(seed)
        handles = _handles(broker_kind, broker, open_broker, 4)
        everything: list[Job] = []
        claims: list[Claim] = []
        for round_ in range(ROUNDS * 3 // 4):
            jobs = broker.enqueue([spec(args=[round_, i], max_attempts=1) for i in range(BATCH)])
            died = broker.claim(["q"], BATCH, LEASE, "w1")
            broker.record((), [Buried(c.claim, BOOM) for c in died[2:]])
            for c in died[:2]:  # a cancelled job comes back the same way
                broker.cancel(c.job.id)
            race = ReviveRound(handles, jobs, rng)
            race.run()
            race.check(_snapshot(broker, jobs), seed)
            everything += jobs
            claims += [c.claim for c in died] + [c for _, c in race.log.claims]
        _assert_spent(broker, everything, claims)


# ---- the same races between OS processes -----------------------------------------------
# Each child opens the URL through the public seam, waits for "go", then prints a JSON
# list of what it did, with time.monotonic() stamps (one clock for every process).
CHILD = r"""
import json, random, sys, time
from sluicegate.brokers import broker_from_url
from sluicegate.errors import InvalidTransition
from sluicegate.outcomes import Succeeded
url, action, seed, ids = sys.argv[1], sys.argv[2], int(sys.argv[3]), json.loads(sys.argv[4])
rng = random.Random(seed)
broker = broker_from_url(url)
try:
    print("ready", flush=True)
    sys.stdin.readline()
    got = []
    if action == "retry":
        rng.shuffle(ids)
        for job_id in ids:
            try:
                broker.retry(job_id)
                got.append(["revived", job_id, None])
            except InvalidTransition:
                got.append(["refused", job_id, None])
    elif action == "cancel":
        for job_id in ids:
            try:
                broker.cancel(job_id)
                got.append(["cancelled", job_id, time.monotonic()])
            except InvalidTransition:
                got.append(["refused", job_id, None])
    else:
        while True:
            began = time.monotonic()
            batch = broker.claim(["q"], rng.randint(1, 3), 30.0, action)
            if not batch:
                break
            got.extend(["claimed", c.job.id, began] for c in batch if c.job.state == "claimed")
            for c in batch:
                acking = time.monotonic()
                ok = not broker.record([c.claim], [Succeeded(c.claim, '"done"')])
                got.append(["acked" if ok else "lost", c.job.id, acking])
    print(json.dumps(got), flush=True)
finally:
    broker.close()
"""

PROCESS_JOBS = 600


class TestOperatorProcessRaces:
    @pytest.fixture(autouse=True)
    def _multiprocess_only(self, broker_kind: BrokerKind) -> None:
        if not broker_kind.multiprocess:
            pytest.skip(f"{broker_kind.name}: cannot be shared between processes")

    def test_processes_retrying_the_same_dead_jobs_revive_each_once(
        self, broker: Broker, broker_url: str
    ) -> None:
        jobs = broker.enqueue([spec(args=[i], max_attempts=1) for i in range(PROCESS_JOBS)])
        died = broker.claim(["q"], PROCESS_JOBS, LEASE, "w1")
        broker.record((), [Buried(c.claim, BOOM) for c in died])
        ids = [j.id for j in jobs]
        seed = _seed()
        argvs = [[broker_url, "retry", str(seed + i), str(ids)] for i in range(3)]
        done = [entry for output in run_released(CHILD, argvs) for entry in output]
        revived = Counter(job_id for kind, job_id, _ in done if kind == "revived")
        assert revived == Counter(ids), f"not one revival per job (seed {seed})"
        again = broker.claim(["q"], PROCESS_JOBS + 1, LEASE, "w2")
        assert sorted(c.job.id for c in again) == sorted(ids)
        assert {c.job.attempts for c in again} == {1}

    def test_processes_claiming_while_another_cancels(
        self, broker: Broker, broker_url: str
    ) -> None:
        jobs = broker.enqueue([spec(args=[i]) for i in range(PROCESS_JOBS)])
        seed = _seed()
        argvs = [[broker_url, f"p{i}", str(seed + i), "[]"] for i in range(2)]
        argvs.append([broker_url, "cancel", str(seed), str([j.id for j in jobs])])
        *workers, operator = run_released(CHILD, argvs)
        cancelled = {job_id: at for kind, job_id, at in operator if kind == "cancelled"}
        done = [entry for output in workers for entry in output]
        for kind, job_id, began in done:
            assert not (kind != "lost" and job_id in cancelled and began > cancelled[job_id]), (
                f"job {job_id} {kind} after its cancel returned (seed {seed})"
            )
        claimed = Counter(job_id for kind, job_id, _ in done if kind == "claimed")
        assert sum(claimed.values()) == len([e for e in done if e[0] in ("acked", "lost")])
        acked = {job_id for kind, job_id, _ in done if kind == "acked"}
        final = _snapshot(broker, jobs)
        for job in jobs:
            now = final[job.id]
            assert claimed[job.id] <= 1 and (job.id in cancelled) != (job.id in acked), now
            assert now.state is (S.CANCELLED if job.id in cancelled else S.SUCCEEDED), now


__all__ = suite(globals())
