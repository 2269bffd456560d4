"""Every broker behaves like the reference broker (MemoryBroker) on random operations."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ...brokers.base import Broker
from ...brokers.memory import MemoryBroker
from ...errors import SluicegateError
from ...job import Claim
from ...outcomes import Buried, Retried, Succeeded
from .. import BrokerKind, FakeClock
from .helpers import BOOM, spec, suite

# ---- every broker behaves like the reference broker ----------------------------------------
# Random sequences of operations run on the broker under test and on MemoryBroker, on one
# shared fake clock; after every step the answers and every stored job must agree.
EXAMPLE_START = 1_700_000_000.0
CLAIM_OPS = ("start", "ack", "fail_retry", "fail_dead", "heartbeat", "release")
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("enqueue"), st.sampled_from("ab"), st.integers(0, 2),
                  st.sampled_from([0.0, 5.0]), st.integers(1, 3), st.sampled_from([None, "k"])),
        st.tuples(st.just("claim"), st.sampled_from([("a",), ("b",), ("a", "b")]),
                  st.integers(1, 3), st.sampled_from([5.0, 10.0]), st.sampled_from("wv")),
        st.tuples(st.sampled_from(CLAIM_OPS), st.integers(0, 3)),  # 0: the latest claim
        st.tuples(st.sampled_from(["cancel", "retry"]), st.integers(1, 12)),
        st.tuples(st.just("recover"), st.integers(1, 3)),
        st.tuples(st.just("recover_worker"), st.sampled_from("wv")),
        st.tuples(st.just("advance"), st.sampled_from([1.0, 4.0, 11.0])),
    ),
    max_size=40,
)  # fmt: skip


def _apply_claim_op(broker: Broker, op: str, claim: Claim) -> list[Claim]:
    if op == "start":
        return broker.record([claim], [])
    if op == "ack":
        return broker.record([], [Succeeded(claim, "[1]")])
    if op == "fail_retry":
        return broker.record([claim], [Retried(claim, BOOM, 3.0)])
    if op == "fail_dead":
        return broker.record([], [Buried(claim, BOOM)])
    if op == "heartbeat":
        return broker.heartbeat([claim], 10.0)
    return broker.release([claim])


def _step(broker: Broker, claims: list[Claim], op: tuple[Any, ...]) -> tuple[Any, ...]:
    kind = op[0]
    try:
        if kind == "enqueue":
            _, queue, priority, delay, attempts, key = op
            new = spec(
                queue=queue, priority=priority, delay=delay, max_attempts=attempts, unique_key=key
            )
            return ("ids", [j.id for j in broker.enqueue([new])])
        if kind == "claim":
            got = broker.claim(list(op[1]), op[2], op[3], op[4])
            claims.extend(c.claim for c in got)
            return ("ids", [c.job.id for c in got])
        if kind in CLAIM_OPS:
            if not claims:
                return ("nothing",)
            claim = claims[-1 - op[1] % len(claims)]
            return ("lost", bool(_apply_claim_op(broker, kind, claim)))
        if kind in ("cancel", "retry"):
            ids = sorted(_ranks(broker))
            target = ids[op[1] % len(ids)] if ids and op[1] < 12 else 10**9
            job = broker.cancel(target) if kind == "cancel" else broker.retry(target)
            return ("ids", [job.id])
        if kind == "recover_worker":
            recovery = broker.recover_worker(op[1])
        else:
            recovery = broker.recover_expired(limit=op[1])
        return ("recovery", sorted(recovery.requeued), sorted(recovery.dead))
    except SluicegateError as exc:
        return ("error", type(exc).__name__)


def _ranks(broker: Broker) -> dict[int, int]:
    """Job ids by creation order. Ids are opaque: a broker may skip some (SQLite does when a
    unique key turns an insert into nothing), so brokers are compared by rank, not id."""
    ids = sorted(j.id for j in broker.list_jobs(limit=10_000))
    return {job_id: rank for rank, job_id in enumerate(ids)}


def _normalized(broker: Broker, result: tuple[Any, ...]) -> tuple[Any, ...]:
    rank = _ranks(broker)
    if result[0] == "ids":
        return ("ids", [rank[i] for i in result[1]])
    if result[0] == "recovery":
        return ("recovery", [rank[i] for i in result[1]], [rank[i] for i in result[2]])
    return result


def _observe(broker: Broker) -> object:
    rank = _ranks(broker)
    return (
        [{**j.to_dict(), "id": rank[j.id]} for j in broker.list_jobs(limit=10_000)],
        broker.stats().to_dict(),
        [broker.has_work(qs) for qs in (["a"], ["b"], ["a", "b"])],
        broker.next_due(["a", "b"]),
    )


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=OPS)
def test_behaves_like_the_reference_broker(
    broker_kind: BrokerKind, tmp_path: Path, clock: FakeClock, ops: list[tuple[Any, ...]]
) -> None:
    if broker_kind.name == "memory":
        pytest.skip("memory is the reference")
    folder = tmp_path / f"example-{len(list(tmp_path.iterdir()))}"
    folder.mkdir()
    clock.now = EXAMPLE_START  # the fixture outlives one example
    reference = MemoryBroker(clock=clock)
    url = broker_kind.url(folder)
    tested = broker_kind.open(url, clock)
    try:
        ref_claims: list[Claim] = []
        tested_claims: list[Claim] = []
        for op in ops:
            if op[0] == "advance":
                clock.advance(op[1])
                continue
            expected = _normalized(reference, _step(reference, ref_claims, op))
            assert _normalized(tested, _step(tested, tested_claims, op)) == expected, op
            assert _observe(tested) == _observe(reference), op
    finally:
        tested.close()
        reference.close()
        broker_kind.done(url)


__all__ = suite(globals())
