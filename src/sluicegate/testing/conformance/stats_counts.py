"""``stats()`` counts every job exactly, whatever happened to it and whenever the broker
settles its finished counts: each case compares ``stats()`` with a count of every stored
job (``list_jobs`` without a filter), through enqueue, claim, start, ack, failures, dead,
cancel, retry (revive), release, recovery and prune, with settling on every call, never,
and at random points (SQL brokers settle past ``base.SETTLE_AT`` unsettled jobs, in steps
of ``base.SETTLE_STEP``; both are lowered here). Also the filtered listings against the
same brute-force list."""

from __future__ import annotations

import contextlib
import threading
from collections import Counter
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ...brokers import base
from ...brokers.base import Broker, Retention, Stats
from ...errors import SluicegateError
from ...job import TERMINAL, Claim, Job, JobState
from ...outcomes import Buried, Retried, Succeeded
from .. import BrokerKind, FakeClock
from .helpers import BOOM, LEASE, S, put, spec, suite

EVERY_JOB = 10**6


def counted(broker: Broker, now: float) -> dict[str, Any]:
    """What ``stats().to_dict()`` must say, counted job by job."""
    jobs = broker.list_jobs(limit=EVERY_JOB)
    counts: dict[str, Counter[JobState]] = {}
    oldest: dict[str, float] = {}
    for job in jobs:
        shown = job.state
        if shown is S.SCHEDULED and job.run_at <= now:
            shown = S.READY  # a claim would promote it first
        counts.setdefault(job.queue, Counter())[shown] += 1
        if shown is S.READY:
            oldest[job.queue] = max(oldest.get(job.queue, 0.0), now - job.run_at)
    return {
        "queues": {
            queue: {
                **{s.value: c[s] for s in JobState},
                "oldest_ready_age_s": round(max(0.0, oldest.get(queue, 0.0)), 3),
            }
            for queue, c in sorted(counts.items())
        }
    }


def check(broker: Broker, clock: FakeClock) -> Stats:
    stats = broker.stats()
    assert stats.to_dict() == counted(broker, clock.now)
    return stats


SETTLING = ["every call", "never", "in steps of 2"]


def settle_on(monkeypatch: pytest.MonkeyPatch, when: str) -> None:
    """When stats() settles: on every call, never (only prune does), or on every call in
    steps of two jobs."""
    monkeypatch.setattr(base, "SETTLE_AT", EVERY_JOB if when == "never" else 0)
    if when == "in steps of 2":
        monkeypatch.setattr(base, "SETTLE_STEP", 2)


def finish(broker: Broker, queue: str, outcomes: list[str]) -> list[Job]:
    """Jobs of ``queue`` claimed in one batch and finished by one record call: "ack",
    "dead", "retry" or "start" (left running) per job."""
    jobs = broker.enqueue([spec(queue=queue, max_attempts=2) for _ in outcomes])
    claimed = broker.claim([queue], len(outcomes), LEASE, "w1")
    assert len(claimed) == len(outcomes)
    started: list[Claim] = []
    done: list[Any] = []
    for how, c in zip(outcomes, claimed, strict=True):
        if how == "ack":
            done.append(Succeeded(c.claim, "null"))
        elif how == "dead":
            done.append(Buried(c.claim, BOOM))
        elif how == "retry":
            done.append(Retried(c.claim, BOOM, 5.0))
        else:
            started.append(c.claim)
    assert broker.record(started, done) == []
    return jobs


# ---- every operation, one at a time -------------------------------------------------------
class TestStatsCounts:
    @pytest.mark.parametrize("when", SETTLING)
    def test_counts_follow_every_operation(
        self, broker: Broker, clock: FakeClock, monkeypatch: pytest.MonkeyPatch, when: str
    ) -> None:
        settle_on(monkeypatch, when)
        check(broker, clock)
        jobs = finish(broker, "a", ["ack", "ack", "dead", "retry", "start"])
        check(broker, clock)
        put(broker, queue="b", delay=30.0)
        cancelled = broker.cancel(put(broker, queue="b").id)
        check(broker, clock)
        assert broker.retry(jobs[2].id).state is S.READY  # dead -> ready
        check(broker, clock)
        assert broker.retry(cancelled.id).state is S.READY  # cancelled -> ready
        check(broker, clock)
        clock.advance(31.0)  # the scheduled jobs are due, the running job's lease expired
        check(broker, clock)
        assert len(broker.recover_expired().requeued) == 1
        check(broker, clock)
        claimed = broker.claim(["a", "b"], 10, 5.0, "w2")
        assert len(claimed) == 5
        broker.release([claimed[0].claim])
        check(broker, clock)
        clock.advance(6.0)
        recovered = broker.recover_expired()  # jobs claimed twice are out of attempts
        assert len(recovered.dead) + len(recovered.requeued) == 4 and recovered.dead
        check(broker, clock)
        finish(broker, "b", ["ack", "dead"])
        broker.cancel(put(broker, queue="c").id)
        check(broker, clock)
        once = put(broker, queue="d", max_attempts=1)
        again = put(broker, queue="d", max_attempts=2)
        assert len(broker.claim(["d"], 2, 30.0, "w3")) == 2
        recovered = broker.recover_worker("w3")  # its process died: one dead, one requeued
        assert (recovered.dead, recovered.requeued) == ([once.id], [again.id])
        check(broker, clock)

    @pytest.mark.parametrize("when", SETTLING)
    def test_a_revived_job_counts_once_wherever_it_ends(
        self, broker: Broker, clock: FakeClock, monkeypatch: pytest.MonkeyPatch, when: str
    ) -> None:
        settle_on(monkeypatch, when)
        [dead] = finish(broker, "a", ["dead"])
        check(broker, clock)
        for _ in range(3):
            broker.retry(dead.id)
            check(broker, clock)
            [c] = broker.claim(["a"], 1, LEASE, "w1")
            broker.fail(c.claim, BOOM, None)
            check(broker, clock)
        broker.retry(dead.id)
        [c] = broker.claim(["a"], 1, LEASE, "w1")
        broker.ack(c.claim, "null")
        stats = check(broker, clock)
        assert stats.queues["a"].counts.get(S.SUCCEEDED) == 1
        assert stats.queues["a"].counts.get(S.DEAD, 0) == 0

    @pytest.mark.parametrize("when", SETTLING)
    def test_prune_takes_the_jobs_it_deletes_out_of_the_counts(
        self, broker: Broker, clock: FakeClock, monkeypatch: pytest.MonkeyPatch, when: str
    ) -> None:
        settle_on(monkeypatch, when)
        finish(broker, "a", ["ack"] * 5 + ["dead"] * 2)
        broker.cancel(put(broker, queue="b").id)
        broker.stats()  # settles, unless never
        clock.advance(100.0)
        finish(broker, "a", ["ack", "ack", "dead"])  # newer: kept
        check(broker, clock)
        assert broker.prune(Retention(succeeded=50.0, dead=50.0, cancelled=50.0), batch=2) == 8
        stats = check(broker, clock)
        assert "b" not in stats.queues  # a queue with no job left is not shown
        assert stats.queues["a"].counts == {S.SUCCEEDED: 2, S.DEAD: 1}
        clock.advance(100.0)
        assert broker.prune(Retention(succeeded=50.0, dead=50.0, cancelled=50.0)) == 3
        assert check(broker, clock).to_dict() == {"queues": {}}

    def test_settled_and_unsettled_jobs_leave_the_counts_alike(
        self, broker: Broker, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Revived and pruned jobs of a queue and state that has settled jobs, some of
        them settled, some not: each leaves the counts once."""
        monkeypatch.setattr(base, "SETTLE_AT", EVERY_JOB)
        old = finish(broker, "a", ["dead", "ack", "dead", "ack"])
        broker.cancel(put(broker, queue="a").id)
        monkeypatch.setattr(base, "SETTLE_AT", 0)
        check(broker, clock)  # settles them
        monkeypatch.setattr(base, "SETTLE_AT", EVERY_JOB)
        clock.advance(10.0)
        new = finish(broker, "a", ["dead", "ack", "dead", "ack"])
        cancelled = broker.cancel(put(broker, queue="a").id)
        check(broker, clock)
        for job in (new[0], old[0], cancelled):  # unsettled, settled, unsettled
            broker.retry(job.id)
            check(broker, clock)
        clock.advance(10.0)
        kept = Retention(succeeded=15.0, dead=15.0, cancelled=15.0)
        assert broker.prune(kept) == 4  # the settled ones: 2 acked, 1 dead, 1 cancelled
        check(broker, clock)
        assert broker.prune(Retention(succeeded=5.0, dead=5.0, cancelled=5.0)) == 3
        stats = check(broker, clock)
        assert stats.queues["a"].counts == {S.READY: 3}

    def test_a_clock_that_goes_back_changes_nothing(
        self, broker: Broker, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Jobs finished after a settling with an older finished_at (the clock was set
        back) are counted, and a prune that deletes them alone takes nothing settled."""
        monkeypatch.setattr(base, "SETTLE_AT", 0)
        clock.advance(100.0)
        finish(broker, "a", ["ack", "dead", "ack"])
        check(broker, clock)  # settled, finished at T0 + 100
        clock.advance(-50.0)
        finish(broker, "a", ["ack", "dead"])  # finished at T0 + 50, after the settling
        monkeypatch.setattr(base, "SETTLE_AT", EVERY_JOB)
        check(broker, clock)
        clock.advance(60.0)  # T0 + 110
        assert broker.prune(Retention(succeeded=30.0, dead=30.0, cancelled=30.0)) == 2
        stats = check(broker, clock)
        assert stats.queues["a"].counts == {S.SUCCEEDED: 2, S.DEAD: 1}
        monkeypatch.setattr(base, "SETTLE_AT", 0)
        assert check(broker, clock).queues["a"].counts == {S.SUCCEEDED: 2, S.DEAD: 1}

    def test_many_finished_jobs_settle_and_count_once(
        self, broker: Broker, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setattr(base, "SETTLE_AT", 10)
        monkeypatch.setattr(base, "SETTLE_STEP", 7)
        for round_ in range(4):
            finish(broker, f"q{round_ % 2}", ["ack"] * 20 + ["dead"] * 3)
            check(broker, clock)
            check(broker, clock)  # after settling: the same counts
        stats = check(broker, clock)
        assert stats.queues["q0"].counts == {S.SUCCEEDED: 40, S.DEAD: 6}

    def test_a_finish_committed_after_a_settling_is_counted(
        self, broker: Broker, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Transactions commit in any order: an ack inside a transaction that stays open
        while stats() settles is counted once it commits, and not before."""
        if not broker.supports_transactions:
            pytest.skip(f"{type(broker).__name__} has no transactional ack")
        monkeypatch.setattr(base, "SETTLE_AT", 0)
        put(broker)
        put(broker)
        slow, fast = broker.claim(["q"], 2, LEASE, "w1")
        with broker.transaction() as conn:
            broker.ack_on(conn, slow.claim, "null")
            broker.ack(fast.claim, "null")  # commits first, settles with the next call
            assert check(broker, clock).queues["q"].counts == {S.CLAIMED: 1, S.SUCCEEDED: 1}
        assert check(broker, clock).queues["q"].counts == {S.SUCCEEDED: 2}
        broker.stats()
        assert check(broker, clock).queues["q"].counts == {S.SUCCEEDED: 2}

    def test_counts_stay_exact_under_concurrent_settling(
        self, broker_kind: BrokerKind, open_broker: Any, clock: FakeClock, monkeypatch: Any
    ) -> None:
        """Handles finishing, reviving and pruning jobs while others call stats() (and
        settle on every call): the counts at the end are exact."""
        if not broker_kind.shared:
            pytest.skip(f"{broker_kind.name}: handles do not share storage")
        monkeypatch.setattr(base, "SETTLE_AT", 0)
        monkeypatch.setattr(base, "SETTLE_STEP", 5)
        handles = [open_broker() for _ in range(4)]
        errors: list[BaseException] = []
        stop = threading.Event()

        def work(broker: Broker, queue: str) -> None:
            try:
                for i in range(15):
                    finish(broker, queue, ["ack", "dead", "ack"])
                    if i % 3 == 0:
                        broker.retry(broker.list_jobs(S.DEAD, queue, limit=1)[0].id)
                    if i % 5 == 0:
                        clock.advance(1.0)
                        broker.prune(Retention(succeeded=0.5, dead=1e9, cancelled=0.5))
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        def poll(broker: Broker) -> None:
            try:
                while not stop.is_set():
                    broker.stats()
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(handles[i], f"q{i}")) for i in (0, 1)]
        pollers = [threading.Thread(target=poll, args=(h,)) for h in handles[2:]]
        for t in [*threads, *pollers]:
            t.start()
        for t in threads:
            t.join()
        stop.set()
        for t in pollers:
            t.join()
        assert not errors, errors
        for handle in handles:
            check(handle, clock)


# ---- random operations --------------------------------------------------------------------
FINISH = st.tuples(
    st.just("finish"),
    st.sampled_from("ab"),
    st.lists(st.sampled_from(["ack", "dead", "retry", "start"]), min_size=1, max_size=4),
)
SETTLE = st.tuples(
    st.just("stats"), st.sampled_from([0, 1, 3, EVERY_JOB]), st.sampled_from([1, 2, 1000])
)
OPS = st.lists(
    st.one_of(
        FINISH, FINISH, SETTLE,
        st.tuples(st.just("enqueue"), st.sampled_from("ab"), st.sampled_from([0.0, 5.0])),
        st.tuples(st.sampled_from(["cancel", "retry", "retry"]), st.integers(0, 3)),
        st.tuples(st.just("recover"), st.integers(1, 3)),
        st.tuples(st.just("prune"), st.sampled_from([0.5, 5.0, 50.0]), st.integers(1, 3)),
        st.tuples(st.just("advance"), st.sampled_from([1.0, 6.0, 40.0, -30.0])),
    ),
    min_size=4,
    max_size=30,
)  # fmt: skip
"""Finishing and settling come up most; cancel and retry take one of the newest jobs they
may (retrying one settled or not yet); prune follows time (``advance``)."""


def _step(broker: Broker, clock: FakeClock, op: tuple[Any, ...]) -> None:
    kind = op[0]
    if kind == "advance":
        clock.advance(op[1])
    elif kind == "finish":
        finish(broker, op[1], op[2])
    elif kind == "enqueue":
        put(broker, queue=op[1], delay=op[2])
    elif kind in ("cancel", "retry"):
        wanted = TERMINAL if kind == "retry" else frozenset(JobState) - TERMINAL
        jobs = [j for j in broker.list_jobs(limit=EVERY_JOB) if j.state in wanted]
        if jobs:
            job = jobs[op[1] % len(jobs)]
            with contextlib.suppress(SluicegateError):  # refused: nothing changed
                broker.cancel(job.id) if kind == "cancel" else broker.retry(job.id)
    elif kind == "recover":
        broker.recover_expired(limit=op[1])
    elif kind == "prune":
        age = op[1]
        broker.prune(Retention(succeeded=age, dead=age * 2, cancelled=age), batch=op[2])
    else:  # stats, settling past op[1] unsettled jobs, op[2] per step
        base.SETTLE_AT, base.SETTLE_STEP = op[1], op[2]
        broker.stats()


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=OPS)
def test_stats_match_a_count_of_every_job(
    broker_kind: BrokerKind, tmp_path: Any, clock: FakeClock, ops: list[tuple[Any, ...]]
) -> None:
    """After every step of a random history, stats() equals a count of every stored job,
    however the settled counts were reached."""
    folder = tmp_path / f"example-{len(list(tmp_path.iterdir()))}"
    folder.mkdir()
    url = broker_kind.url(folder)
    broker = broker_kind.open(url, clock)
    saved = base.SETTLE_AT, base.SETTLE_STEP
    try:
        for op in ops:
            _step(broker, clock, op)
            base.SETTLE_AT = EVERY_JOB  # the check never settles: only "stats" steps do
            check(broker, clock)
    finally:
        base.SETTLE_AT, base.SETTLE_STEP = saved
        broker.close()
        broker_kind.done(url)


# ---- listings -----------------------------------------------------------------------------
class TestListings:
    def test_every_filter_lists_what_a_full_listing_holds_newest_first(
        self, broker: Broker, clock: FakeClock
    ) -> None:
        for name in ("a", "b", "c"):
            finish(broker, name, ["ack", "dead", "retry", "start", "ack"])
            put(broker, queue=name)
            put(broker, queue=name, delay=60.0)
            broker.cancel(put(broker, queue=name).id)
        finish(broker, "a", ["ack"] * 4)
        every = broker.list_jobs(limit=EVERY_JOB)
        assert [j.id for j in every] == sorted((j.id for j in every), reverse=True)
        for limit in (1, 3, 100):
            for state in (None, *JobState):
                for queue in (None, "a", "b", "none"):
                    expected = [
                        j
                        for j in every
                        if (state is None or j.state is state)
                        and (queue is None or j.queue == queue)
                    ][:limit]
                    listed = broker.list_jobs(state=state, queue=queue, limit=limit)
                    assert listed == expected, (state, queue, limit)


__all__ = suite(globals())
