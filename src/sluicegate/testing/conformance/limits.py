"""Dependency limits: concurrency and rate budgets that claims respect, for every broker.

A job's needs are written by ``encode_needs`` into ``JobSpec.limits``; the broker admits
a limited job only when each limit it names has room, gives the tokens back when the job
stops being held (ack, fail, release, cancel, lease recovery), never blocks the jobs
behind a held-back one, and keeps the usual (priority, run_at, id) order among waiters.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence, Set
from typing import Any

import pytest

from ...brokers.base import Broker, ClaimBatch
from ...errors import ConfigError
from ...job import ClaimedJob, Job, JobSpec
from ...limits import HOST_ENV, Limit, Need, encode_needs
from .. import BrokerKind, FakeClock, run_released
from .helpers import BOOM, LEASE, S, get, spec, suite
from .races import _run_threads

DB: Need = ("db", None, 1)
API: Need = ("api", None, 1)


# ---- helpers ---------------------------------------------------------------------------
def needing(*needs: Need, **fields: Any) -> JobSpec:
    """A spec of queue ``q`` (unless given) whose job names ``needs``."""
    return spec(limits=encode_needs(needs), **fields)


def put_many(broker: Broker, count: int, *needs: Need, **fields: Any) -> list[Job]:
    return broker.enqueue([needing(*needs, args=[i], **fields) for i in range(count)])


def claim(
    broker: Broker, n: int = 100, host: str = "h1", worker: str = "w1", lease: float = LEASE
) -> ClaimBatch:
    batch = broker.claim(["q"], n, lease, worker, host=host)
    assert all(c.problem is None for c in batch)
    return batch


def ids(batch: Sequence[ClaimedJob]) -> list[int]:
    return [c.job.id for c in batch]


def held(broker: Broker, name: str, partition: str | None = None) -> int:
    """Tokens of ``name`` (and ``partition``) held, as the broker's figures report them."""
    return sum(
        cost for n, p, _, cost in broker.limit_figures().held if n == name and p == partition
    )


def held_by_key(
    rows: Sequence[tuple[str, str | None, str | None, int]], host_scoped: Set[str] = frozenset()
) -> dict[tuple[str, str | None, str | None], int]:
    """Figures' held rows summed per (limit, partition, host): a broker may report one
    row per job or one per key. The host counts only for the ``host_scoped`` limits."""
    out: dict[tuple[str, str | None, str | None], int] = {}
    for name, partition, host, cost in rows:
        key = (name, partition, host if name in host_scoped else None)
        out[key] = out.get(key, 0) + cost
    return out


def assert_held_back(batch: ClaimBatch) -> None:
    assert list(batch) == []
    assert batch.retry_in is not None and batch.retry_in > 0, "a held-back job needs retry_in"


# ---- concurrency -----------------------------------------------------------------------
GIVE_BACK = ["ack", "fail_retry", "fail_dead", "release", "cancel_claimed", "cancel_running"]


def give_back(broker: Broker, claimed: ClaimedJob, how: str) -> None:
    """End ``claimed``'s hold on its job in one of the ways a job stops being held."""
    claim_ = claimed.claim
    if how == "ack":
        broker.ack(claim_, "null")
    elif how == "fail_retry":
        broker.fail(claim_, BOOM, 60.0)
    elif how == "fail_dead":
        broker.fail(claim_, BOOM, None)
    elif how == "release":
        broker.release_one(claim_)
    elif how == "cancel_claimed":
        broker.cancel(claim_.job_id)
    else:
        broker.start(claim_)
        broker.cancel(claim_.job_id)


class TestLimitConcurrency:
    def test_claims_stop_at_the_concurrency(self, broker: Broker) -> None:
        broker.register_limits([Limit("db", concurrency=3)])
        jobs = put_many(broker, 20, DB)
        first = claim(broker, 10)
        assert ids(first) == [j.id for j in jobs[:3]], "the oldest three, in claim order"
        assert first.retry_in is not None
        assert all(c.job.state is S.CLAIMED for c in first)
        assert_held_back(claim(broker, 10))
        assert held(broker, "db") == 3
        assert [get(broker, j.id).state for j in jobs[3:]] == [S.READY] * 17
        broker.ack(first[0].claim, "null")
        assert ids(claim(broker, 10)) == [jobs[3].id], "one token back: exactly one more"
        assert_held_back(claim(broker, 10))

    def test_a_claimer_reuses_the_tokens_of_its_own_ended_jobs(self, broker: Broker) -> None:
        """``done``: the caller's claims whose bodies ended (outcomes not yet written) hold
        no tokens for its claim; a claim made with someone else's token changes nothing."""
        broker.register_limits([Limit("db", concurrency=2)])
        jobs = put_many(broker, 6, DB)
        first = claim(broker, 10)
        assert ids(first) == [jobs[0].id, jobs[1].id]
        forged = [type(first[0].claim)(first[0].claim.job_id, first[0].claim.token + 1)]
        assert_held_back(broker.claim(["q"], 10, LEASE, "w1", host="h1", done=forged))
        again = broker.claim(["q"], 10, LEASE, "w1", host="h1", done=[first[0].claim])
        assert ids(again) == [jobs[2].id], "the ended job's token, and only that one"
        broker.ack(first[0].claim, "null")  # its outcome lands later: nothing changes
        assert_held_back(claim(broker, 10))
        assert held(broker, "db") == 2

    @pytest.mark.parametrize("how", GIVE_BACK)
    def test_a_job_leaving_the_held_states_gives_its_token_back(
        self, broker: Broker, how: str
    ) -> None:
        broker.register_limits([Limit("db", concurrency=3)])
        put_many(broker, 20, DB, max_attempts=5)
        first = claim(broker, 10)
        assert len(first) == 3
        give_back(broker, first[1], how)
        assert held(broker, "db") == 2
        again = claim(broker, 10)
        assert len(again) == 1, f"{how} must give its token back"
        assert_held_back(claim(broker, 10))
        assert held(broker, "db") == 3

    def test_running_jobs_hold_their_tokens(self, broker: Broker) -> None:
        broker.register_limits([Limit("db", concurrency=2)])
        put_many(broker, 5, DB)
        for c in claim(broker):
            broker.start(c.claim)
        assert_held_back(claim(broker))
        assert held(broker, "db") == 2

    def test_costs_count_against_the_concurrency(self, broker: Broker) -> None:
        broker.register_limits([Limit("db", concurrency=4)])
        jobs = put_many(broker, 6, ("db", None, 2))
        first = claim(broker, 10)
        assert ids(first) == [jobs[0].id, jobs[1].id]
        assert held(broker, "db") == 4
        assert_held_back(claim(broker, 10))
        broker.ack(first[0].claim, "null")
        assert ids(claim(broker, 10)) == [jobs[2].id]

    def test_mixed_costs_fill_the_limit_exactly(self, broker: Broker) -> None:
        broker.register_limits([Limit("db", concurrency=4)])
        three = put_many(broker, 1, ("db", None, 3))
        ones = put_many(broker, 3, DB)
        assert ids(claim(broker, 10)) == [three[0].id, ones[0].id]
        assert held(broker, "db") == 4

    def test_a_waiting_job_keeps_its_place_for_its_key(self, broker: Broker) -> None:
        """Once a job waits for a limit, no later job of the same claim takes that limit
        (even one that would fit), however differently their needs are written."""
        broker.register_limits([Limit("db", concurrency=2)])
        [first] = put_many(broker, 1, DB)
        [big] = put_many(broker, 1, ("db", None, 2))
        [small] = put_many(broker, 1, DB)
        [other] = broker.enqueue([spec(args=["free"])])
        got = claim(broker)
        assert ids(got) == [first.id, other.id], "big waits; small stays behind it"
        assert get(broker, small.id).state is S.READY
        assert_held_back(claim(broker))
        broker.ack(got[0].claim, "null")
        assert ids(claim(broker)) == [big.id]
        assert_held_back(claim(broker))

    def test_a_job_needs_room_in_every_limit_it_names(self, broker: Broker) -> None:
        broker.register_limits([Limit("db", concurrency=1), Limit("api", concurrency=1)])
        [db_only] = put_many(broker, 1, DB)
        [both] = put_many(broker, 1, API, DB)
        [api_only] = put_many(broker, 1, API)
        got = claim(broker)
        # ``both`` waits for db; it takes no api token while it waits, so api_only runs
        assert ids(got) == [db_only.id, api_only.id]
        assert get(broker, both.id).state is S.READY
        assert (held(broker, "db"), held(broker, "api")) == (1, 1)
        broker.ack(got[0].claim, "null")
        assert_held_back(claim(broker))  # db is free now, api is not
        broker.ack(got[1].claim, "null")
        assert ids(claim(broker)) == [both.id]
        assert (held(broker, "db"), held(broker, "api")) == (1, 1)

    def test_a_claim_without_limited_jobs_has_no_retry_in(self, broker: Broker) -> None:
        broker.register_limits([Limit("db", concurrency=5)])
        assert claim(broker).retry_in is None
        broker.enqueue([spec(args=[i]) for i in range(3)])
        put_many(broker, 2, DB)
        batch = claim(broker)
        assert len(batch) == 5 and batch.retry_in is None

    def test_needs_are_stored_with_the_job(self, broker: Broker) -> None:
        broker.register_limits(
            [Limit("acct", concurrency=1, partition="account"), Limit("db", concurrency=4)]
        )
        needs = (("acct", "k 1/é", 1), ("db", None, 3))
        [job] = broker.enqueue([needing(*needs)])
        [plain] = broker.enqueue([spec()])
        assert job.limits == needs and plain.limits == ()
        assert get(broker, job.id).limits == needs
        assert [c.job.limits for c in claim(broker)] == [needs, ()]
        assert [j.limits for j in broker.list_jobs()] == [(), needs]


# ---- partitions ------------------------------------------------------------------------
class TestLimitPartitions:
    def test_each_partition_has_its_own_budget(self, broker: Broker) -> None:
        broker.register_limits([Limit("acct", concurrency=1, partition="account")])
        keys = [f"k{k}" for k in range(5)]
        jobs = {k: put_many(broker, 4, ("acct", k, 1)) for k in keys}
        got = claim(broker, 20)
        assert ids(got) == [jobs[k][0].id for k in keys], "one per key, the oldest of each"
        assert {c.job.limits[0][1] for c in got} == set(keys)
        assert_held_back(claim(broker, 20))
        broker.ack(got[2].claim, "null")
        assert ids(claim(broker, 20)) == [jobs["k2"][1].id]
        assert held(broker, "acct", "k2") == 1 and held(broker, "acct", "k0") == 1

    def test_a_partitioned_rate_keeps_a_bucket_per_partition(
        self, broker: Broker, clock: FakeClock
    ) -> None:
        broker.register_limits([Limit.of("mail", rate="1/s", partition="account")])
        for k in ("a", "b", "c"):
            put_many(broker, 2, ("mail", k, 1))
        assert len(claim(broker)) == 3
        batch = claim(broker)
        assert list(batch) == [] and batch.retry_in == pytest.approx(1.0, abs=1e-3)
        clock.advance(1.5)
        assert len(claim(broker)) == 3


# ---- scope -----------------------------------------------------------------------------
class TestLimitScope:
    def test_host_scope_counts_each_host_apart(self, broker: Broker) -> None:
        broker.register_limits([Limit("disk", concurrency=2, scope="host")])
        put_many(broker, 10, ("disk", None, 1))
        on_a = claim(broker, 10, host="a", worker="wa")
        assert len(on_a) == 2
        assert len(claim(broker, 10, host="b", worker="wb")) == 2
        assert_held_back(claim(broker, 10, host="a", worker="wa2"))
        assert_held_back(claim(broker, 10, host="b", worker="wb"))
        held_by = Counter(h for n, _, h, c in broker.limit_figures().held for _ in range(c))
        assert held_by == {"a": 2, "b": 2}
        broker.ack(on_a[0].claim, "null")
        assert_held_back(claim(broker, 10, host="b", worker="wb"))
        assert len(claim(broker, 10, host="a", worker="wa")) == 1

    def test_an_empty_host_means_this_machine(
        self, broker: Broker, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setenv(HOST_ENV, "box-1")
        broker.register_limits([Limit("disk", concurrency=2, scope="host")])
        put_many(broker, 10, ("disk", None, 1))
        assert len(broker.claim(["q"], 10, LEASE, "w1")) == 2
        assert_held_back(claim(broker, 10, host="box-1"))
        assert len(claim(broker, 10, host="box-2")) == 2

    def test_host_scoped_rates_keep_a_bucket_per_host(
        self, broker: Broker, clock: FakeClock
    ) -> None:
        broker.register_limits([Limit.of("cpu", rate="2/s", scope="host")])
        put_many(broker, 10, ("cpu", None, 1))
        assert len(claim(broker, host="a")) == 1
        assert len(claim(broker, host="b")) == 1
        assert list(claim(broker, host="a")) == []
        clock.advance(0.75)
        assert len(claim(broker, host="a")) == 1
        assert len(claim(broker, host="b")) == 1

    def test_global_scope_counts_every_host(self, broker: Broker) -> None:
        broker.register_limits([Limit("db", concurrency=3)])
        put_many(broker, 10, DB)
        assert len(claim(broker, 2, host="a", worker="wa")) == 2
        on_b = claim(broker, 5, host="b", worker="wb")
        assert len(on_b) == 1
        assert_held_back(claim(broker, 5, host="a", worker="wa"))
        assert_held_back(claim(broker, 5, host="c", worker="wc"))
        broker.ack(on_b[0].claim, "null")
        assert len(claim(broker, 5, host="a", worker="wa")) == 1
        assert held(broker, "db") == 3


# ---- lease recovery --------------------------------------------------------------------
class TestLimitRecovery:
    def test_recovery_gives_the_token_back(self, broker: Broker, clock: FakeClock) -> None:
        broker.register_limits([Limit("db", concurrency=1)])
        jobs = put_many(broker, 3, DB)
        assert ids(claim(broker, 5, lease=10)) == [jobs[0].id]
        assert_held_back(claim(broker, 5))
        clock.advance(11)
        assert broker.recover_expired().requeued == [jobs[0].id]
        assert held(broker, "db") == 0
        again = claim(broker, 5, worker="w2")
        assert ids(again) == [jobs[0].id], "the recovered job is still the oldest"
        assert again[0].job.attempts == 2
        assert_held_back(claim(broker, 5))

    def test_recovery_to_dead_gives_the_token_back(self, broker: Broker, clock: FakeClock) -> None:
        broker.register_limits([Limit("db", concurrency=1)])
        jobs = put_many(broker, 2, DB, max_attempts=1)
        claim(broker, 5, lease=10)
        clock.advance(11)
        assert broker.recover_expired().dead == [jobs[0].id]
        assert ids(claim(broker, 5)) == [jobs[1].id]

    def test_a_heartbeat_keeps_the_token(self, broker: Broker, clock: FakeClock) -> None:
        broker.register_limits([Limit("db", concurrency=1)])
        put_many(broker, 2, DB)
        [held_job] = claim(broker, 5, lease=10)
        clock.advance(8)
        assert broker.heartbeat([held_job.claim], 10) == []
        clock.advance(8)
        assert broker.recover_expired().requeued == []
        assert_held_back(claim(broker, 5))


# ---- order -----------------------------------------------------------------------------
class TestLimitOrder:
    def test_a_full_limit_blocks_nothing_behind_it(self, broker: Broker) -> None:
        broker.register_limits([Limit("db", concurrency=1)])
        limited = put_many(broker, 50, DB)
        free = broker.enqueue([spec(args=[i]) for i in range(10)])
        got = claim(broker, 11)
        assert ids(got) == [limited[0].id, *(j.id for j in free)]
        assert got.retry_in is not None
        assert_held_back(claim(broker, 11))

    def test_a_deep_line_of_waiting_jobs_blocks_nothing(self, broker: Broker) -> None:
        broker.register_limits([Limit("db", concurrency=1), Limit("api", concurrency=2)])
        put_many(broker, 1500, DB)
        put_many(broker, 500, API)
        free = broker.enqueue([spec(args=[i]) for i in range(5)])
        got = claim(broker, 10)
        assert [c.job.limits for c in got] == [(DB,), (API,), (API,)] + [()] * 5
        assert ids(got)[3:] == [j.id for j in free]

    def test_every_group_gets_its_turn_past_a_thousand(self, broker: Broker) -> None:
        """More partitions waiting than a claim visits at once (1,000 on the SQL brokers):
        successive claims go round them all, none waits for the first ones to drain."""
        broker.register_limits([Limit("per", concurrency=1, partition="k")])
        keys = [f"k{i:04d}" for i in range(1100)]
        broker.enqueue([needing(("per", key, 1)) for key in keys for _ in range(2)])
        started: set[str | None] = set()
        for _ in range(3):
            started |= {c.job.limits[0][1] for c in claim(broker, 2000)}
        assert started == set(keys)

    def test_other_limits_behind_a_full_one_still_start(self, broker: Broker) -> None:
        broker.register_limits([Limit("db", concurrency=1), Limit("api", concurrency=2)])
        put_many(broker, 10, DB)
        apis = put_many(broker, 3, API)
        got = claim(broker, 10)
        assert ids(got)[1:] == [apis[0].id, apis[1].id]

    def test_freed_tokens_go_to_the_first_waiter_in_claim_order(
        self, broker: Broker, clock: FakeClock
    ) -> None:
        broker.register_limits([Limit("db", concurrency=1)])
        [first] = broker.enqueue([needing(DB, args=["first"])])
        waiting = broker.enqueue(
            [
                needing(DB, args=["low"], priority=5),
                needing(DB, args=["mid-new"], priority=1),
                needing(DB, args=["mid-old"], priority=1, run_at=clock.now - 10),
                needing(DB, args=["mid-new-2"], priority=1),
                needing(DB, args=["late"], priority=9, delay=5),
            ]
        )
        [holding] = claim(broker)
        assert holding.job.id == first.id
        clock.advance(5)  # the scheduled one is due now, but last in priority
        order = []
        for _ in waiting:
            assert_held_back(claim(broker))
            broker.ack(holding.claim, "null")
            [holding] = claim(broker)
            order.append(holding.job.args[0])
        assert order == ["mid-old", "mid-new", "mid-new-2", "low", "late"]

    def test_a_limit_freed_by_a_retry_goes_to_the_next_waiter(
        self, broker: Broker, clock: FakeClock
    ) -> None:
        broker.register_limits([Limit("db", concurrency=1)])
        jobs = put_many(broker, 3, DB)
        [c] = claim(broker)
        clock.advance(1)
        broker.fail(c.claim, BOOM, 0.0)  # due at once, but behind the older waiters
        assert ids(claim(broker)) == [jobs[1].id]


# ---- rate ------------------------------------------------------------------------------
class TestLimitRate:
    def test_a_rate_spaces_the_starts(self, broker: Broker, clock: FakeClock) -> None:
        broker.register_limits([Limit.of("api", rate="10/s")])
        put_many(broker, 10, API)
        assert len(claim(broker)) == 1
        batch = claim(broker)
        assert list(batch) == [] and batch.retry_in == pytest.approx(0.1, abs=1e-3)
        clock.advance(0.1)
        assert len(claim(broker)) == 1, "after waiting retry_in, the next job starts"
        clock.advance(0.05)
        assert list(claim(broker)) == []

    def test_waiting_retry_in_is_enough(self, broker: Broker, clock: FakeClock) -> None:
        """A claimer that waits exactly the retry_in a claim gave gets the job."""
        broker.register_limits([Limit.of("api", rate="3/s")])
        put_many(broker, 10, API)
        starts = 0
        for _ in range(5):
            batch = claim(broker)
            starts += len(batch)
            assert batch.retry_in is not None
            clock.advance(batch.retry_in)
        assert starts + len(claim(broker)) == 6

    def test_a_burst_starts_at_once_then_refills(self, broker: Broker, clock: FakeClock) -> None:
        broker.register_limits([Limit.of("api", rate="10/s", burst=5)])
        put_many(broker, 40, API)
        assert len(claim(broker, 20)) == 5
        batch = claim(broker, 20)
        assert list(batch) == [] and batch.retry_in == pytest.approx(0.1, abs=1e-3)
        clock.advance(0.25)
        assert len(claim(broker, 20)) == 2
        clock.advance(100)  # an idle spell refills to the burst, no further
        assert len(claim(broker, 20)) == 5
        assert list(claim(broker, 20)) == []

    def test_a_cost_takes_that_many_rate_tokens(self, broker: Broker, clock: FakeClock) -> None:
        broker.register_limits([Limit.of("api", rate="10/s", burst=4)])
        put_many(broker, 5, ("api", None, 3))
        assert len(claim(broker)) == 1
        batch = claim(broker)
        assert list(batch) == [] and batch.retry_in == pytest.approx(0.2, abs=1e-3)
        clock.advance(0.3)
        assert len(claim(broker)) == 1

    def test_tokens_are_spent_not_returned(self, broker: Broker, clock: FakeClock) -> None:
        broker.register_limits([Limit.of("api", rate="1/s")])
        put_many(broker, 3, API)
        [c] = claim(broker)
        broker.ack(c.claim, "null")
        assert list(claim(broker)) == [], "an ack gives back no rate token"

    def test_rate_and_concurrency_together(self, broker: Broker, clock: FakeClock) -> None:
        broker.register_limits([Limit.of("api", rate="10/s", burst=5, concurrency=2)])
        put_many(broker, 10, API)
        first = claim(broker)
        assert len(first) == 2
        broker.ack(first[0].claim, "null")
        assert len(claim(broker)) == 1, "the burst had tokens left; concurrency was full"
        clock.advance(10)
        assert_held_back(claim(broker))

    def test_a_steady_rate_over_ten_seconds(self, broker: Broker, clock: FakeClock) -> None:
        broker.register_limits([Limit.of("api", rate="20/s")])
        put_many(broker, 300, API)
        start = clock.now
        starts: list[float] = []
        for tick in range(1001):  # a claim every 10 ms for 10 s
            clock.now = start + tick * 0.01
            batch = claim(broker, 10)
            starts.extend([clock.now - start] * len(batch))
            for c in batch:
                broker.ack(c.claim, "null")
        assert 199 <= len(starts) <= 201, f"{len(starts)} starts in 10 s at 20/s"
        worst = max(sum(1 for t in starts if s <= t <= s + 1.0) for s in starts)
        assert worst <= 21, f"{worst} starts in 1 s: at most burst + rate * T in any T seconds"


# ---- registering and overriding limits -------------------------------------------------
class TestLimitRegistry:
    def test_registered_limits_read_back(self, broker: Broker) -> None:
        limits = [
            Limit("db", concurrency=3),
            Limit.of("api", rate="600/m", burst=7, concurrency=2, scope="host"),
            Limit.of("acct", rate="5/2s", partition="account"),
        ]
        broker.register_limits(limits)
        figures = broker.limit_figures()
        assert figures.limits == {lim.name: lim for lim in limits}
        assert figures.overridden == frozenset()

    def test_a_new_declaration_replaces_the_old(self, broker: Broker) -> None:
        broker.register_limits([Limit("db", concurrency=1)])
        broker.register_limits([Limit("db", concurrency=3)])
        assert broker.limit_figures().limits["db"] == Limit("db", concurrency=3)
        put_many(broker, 5, DB)
        assert len(claim(broker)) == 3

    def test_raising_a_limit_admits_more(self, broker: Broker) -> None:
        broker.register_limits([Limit("db", concurrency=1)])
        put_many(broker, 10, DB)
        assert len(claim(broker)) == 1
        broker.set_limit(Limit("db", concurrency=3))
        assert len(claim(broker)) == 2
        assert_held_back(claim(broker))

    def test_lowering_a_limit_revokes_nothing(self, broker: Broker) -> None:
        broker.register_limits([Limit("db", concurrency=3)])
        put_many(broker, 10, DB)
        got = claim(broker)
        assert len(got) == 3
        broker.set_limit(Limit("db", concurrency=1))
        assert all(get(broker, c.job.id).state is S.CLAIMED for c in got)
        assert broker.heartbeat([c.claim for c in got], LEASE) == []
        assert_held_back(claim(broker))
        broker.ack(got[0].claim, "null")
        assert_held_back(claim(broker))  # 2 held, limit 1
        broker.ack(got[1].claim, "null")
        assert_held_back(claim(broker))  # 1 held, limit 1
        broker.ack(got[2].claim, "null")
        assert len(claim(broker)) == 1

    def test_reset_goes_back_to_the_declaration(self, broker: Broker) -> None:
        declared = Limit("db", concurrency=2)
        broker.register_limits([declared])
        broker.set_limit(Limit("db", concurrency=5))
        assert broker.limit_figures().overridden == frozenset({"db"})
        assert broker.reset_limit("db") == declared
        figures = broker.limit_figures()
        assert figures.limits["db"] == declared and figures.overridden == frozenset()
        put_many(broker, 5, DB)
        assert len(claim(broker)) == 2

    def test_a_declaration_keeps_out_of_an_operators_values(self, broker: Broker) -> None:
        broker.register_limits([Limit("db", concurrency=2)])
        broker.set_limit(Limit("db", concurrency=5))
        broker.register_limits([Limit("db", concurrency=3)])  # a worker (re)starts
        figures = broker.limit_figures()
        assert figures.limits["db"].concurrency == 5 and "db" in figures.overridden
        put_many(broker, 10, DB)
        assert len(claim(broker)) == 5
        # ... but the declaration is remembered for a reset
        assert broker.reset_limit("db") == Limit("db", concurrency=3)
        assert broker.limit_figures().limits["db"] == Limit("db", concurrency=3)

    def test_an_operator_may_set_a_rate(self, broker: Broker, clock: FakeClock) -> None:
        broker.register_limits([Limit("api", concurrency=10)])
        broker.set_limit(Limit.of("api", rate="1/s"))
        put_many(broker, 5, API)
        assert len(claim(broker)) == 1
        clock.advance(1.5)
        assert len(claim(broker)) == 1

    def test_unknown_names_are_refused(self, broker: Broker) -> None:
        broker.register_limits([Limit("db", concurrency=1)])
        with pytest.raises(ConfigError, match=r"(?s)'nope'.*db"):
            broker.set_limit(Limit("nope", concurrency=1))
        with pytest.raises(ConfigError, match="nope"):
            broker.reset_limit("nope")
        assert set(broker.limit_figures().limits) == {"db"}

    def test_a_job_naming_an_unregistered_limit_waits_for_it(self, broker: Broker) -> None:
        [ghostly] = put_many(broker, 1, ("ghost", None, 1))
        free = broker.enqueue([spec(args=["free"])])
        batch = claim(broker)
        assert ids(batch) == [j.id for j in free], "nothing behind it is blocked"
        assert batch.retry_in is not None
        assert_held_back(claim(broker))
        assert get(broker, ghostly.id).state is S.READY
        broker.register_limits([Limit("ghost", concurrency=1)])
        assert ids(claim(broker)) == [ghostly.id]


# ---- the read side ---------------------------------------------------------------------
class TestLimitFigures:
    def test_figures_follow_the_jobs(self, broker: Broker, clock: FakeClock) -> None:
        t0 = clock.now
        broker.register_limits(
            [
                Limit("disk", concurrency=2, scope="host"),
                Limit.of("api", rate="10/s", burst=2),
                Limit("acct", concurrency=2, partition="account"),
            ]
        )
        disk, api, acct = ("disk", None, 1), API, ("acct", "a1", 2)  # acct: one at a time
        put_many(broker, 2, disk)
        put_many(broker, 1, api)
        clock.advance(5)
        put_many(broker, 1, disk)
        put_many(broker, 2, acct)
        empty = broker.limit_figures()
        assert empty.held == [] and empty.buckets == {} and empty.now == clock.now
        assert sorted(empty.waiting) == sorted(
            [
                (encode_needs([disk]), 3, t0),
                (encode_needs([api]), 1, t0),
                (encode_needs([acct]), 2, t0 + 5),
            ]
        )
        clock.advance(1)
        got = claim(broker, host="a")
        assert len(got) == 4
        figures = broker.limit_figures()
        assert held_by_key(figures.held, {"disk"}) == {
            ("acct", "a1", None): 2,
            ("api", None, None): 1,
            ("disk", None, "a"): 2,
        }
        assert sorted(figures.waiting) == sorted(
            [(encode_needs([disk]), 1, t0 + 5), (encode_needs([acct]), 1, t0 + 5)]
        )
        bucket = figures.buckets[("api", "", "")]
        assert bucket.tokens == pytest.approx(1.0) and bucket.at == clock.now
        assert figures.now == clock.now
        for c in got:
            broker.ack(c.claim, "null")
        after = broker.limit_figures()
        assert after.held == []
        assert after.buckets[("api", "", "")].tokens == pytest.approx(1.0)

    def test_figures_leave_out_finished_and_scheduled_jobs(
        self, broker: Broker, clock: FakeClock
    ) -> None:
        broker.register_limits([Limit("db", concurrency=5)])
        jobs = put_many(broker, 4, DB)
        put_many(broker, 1, DB, delay=60)
        got = claim(broker, 3)
        broker.ack(got[0].claim, "null")
        broker.fail(got[1].claim, BOOM, 60.0)
        broker.cancel(jobs[3].id)
        figures = broker.limit_figures()
        assert [(n, c) for n, _, _, c in figures.held] == [("db", 1)]
        assert figures.waiting == []


# ---- races -----------------------------------------------------------------------------
class TestLimitRaces:
    def test_threads_never_hold_more_than_the_limit(
        self, broker_kind: BrokerKind, broker: Broker, open_broker: Callable[[], Broker]
    ) -> None:
        broker.register_limits([Limit("db", concurrency=3)])
        jobs = put_many(broker, 60, DB)
        handles = [open_broker() if broker_kind.shared else broker for _ in range(6)]
        lock = threading.Lock()
        holding = [0]
        peaks: list[int] = []
        done: list[int] = []

        def work(i: int) -> None:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                batch = handles[i].claim(["q"], 2, LEASE, f"w{i}", host=f"h{i}")
                if not batch:
                    if not handles[i].has_work(["q"]):
                        return
                    time.sleep(0.001)
                    continue
                with lock:
                    holding[0] += len(batch)
                    peaks.append(holding[0])
                peaks.append(held(handles[i], "db"))
                for c in batch:
                    with lock:
                        holding[0] -= 1
                        done.append(c.job.id)
                    handles[i].ack(c.claim, "null")

        _run_threads(len(handles), work)
        assert sorted(done) == sorted(j.id for j in jobs)
        assert max(peaks) <= 3

    def test_processes_never_hold_more_than_the_limit(
        self, broker_kind: BrokerKind, broker: Broker, broker_url: str
    ) -> None:
        if not broker_kind.multiprocess:
            pytest.skip(f"{broker_kind.name}: cannot be shared between processes")
        broker.register_limits([Limit("db", concurrency=3)])
        jobs = put_many(broker, 24, DB)
        outputs = run_released(CHILD, [[broker_url, f"p{i}", "0.03"] for i in range(4)], timeout=30)
        spans = [span for out in outputs for span in out["spans"]]
        assert sorted(job_id for job_id, _, _ in spans) == sorted(j.id for j in jobs)
        assert max(peak for out in outputs for peak in out["peaks"]) <= 3
        assert max_overlap([(start, end) for _, start, end in spans]) <= 3
        assert all(get(broker, j.id).state is S.SUCCEEDED for j in jobs)


def max_overlap(spans: Sequence[tuple[float, float]]) -> int:
    """The most spans open at one instant (a span ending when another starts: not both)."""
    events = sorted([(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans])
    most = now = 0
    for _, step in events:
        now += step
        most = max(most, now)
    return most


# Each child claims with its own host name (a global limit counts them all), holds what
# it got for a while, then acks. ``spans``: from after the claim returned to before the
# ack was sent, so each lies inside the time the broker held the job's tokens; ``peaks``:
# the tokens held by the broker's figures right after each claim.
CHILD = r"""
import json, sys, time
from sluicegate.brokers import broker_from_url
url, worker, hold = sys.argv[1], sys.argv[2], float(sys.argv[3])
broker = broker_from_url(url)
try:
    print("ready", flush=True)
    sys.stdin.readline()
    spans, peaks = [], []
    deadline = time.time() + 20
    while time.time() < deadline:
        batch = broker.claim(["q"], 2, 30.0, worker, host=worker)
        if not batch:
            if not broker.has_work(["q"]):
                break
            time.sleep(0.002)
            continue
        got = time.time()
        peaks.append(sum(c for n, _, _, c in broker.limit_figures().held if n == "db"))
        time.sleep(hold)
        for c in batch:
            spans.append([c.claim.job_id, got, time.time()])
            broker.ack(c.claim, "null")
    print(json.dumps({"spans": spans, "peaks": peaks}), flush=True)
finally:
    broker.close()
"""


__all__ = suite(globals())
