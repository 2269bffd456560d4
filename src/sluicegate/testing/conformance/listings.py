"""Filtered, keyset-paginated listings (``list_jobs`` with ``task``, ``unique_key`` and
``before_id``): every combination of filters lists what a brute-force filter of the full
listing holds, newest first, and paging with ``before_id`` walks it without a gap or a
repeat, whatever the page size."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from ...brokers.base import Broker
from ...errors import InvalidJobId
from ...job import Job, JobState
from ...outcomes import Buried, Retried, Succeeded
from .. import FakeClock
from .helpers import BOOM, LEASE, S, put, spec, suite

EVERY_JOB = 10**6
TASKS = ("send", "resize", "report")
QUEUES = ("a", "b")


def populate(broker: Broker, clock: FakeClock) -> list[Job]:
    """Jobs of three tasks over two queues (a task in both) in every state, some sharing
    unique keys across states; returns the full listing."""
    for round_ in range(2):
        for task, queue in itertools.product(TASKS, QUEUES):
            key = f"{task}-{queue}"
            broker.enqueue([spec(task=task, queue=queue, args=[round_, i]) for i in range(7)])
            claimed = broker.claim([queue], 6, LEASE, f"w-{round_}")
            claims = [c.claim for c in claimed]
            broker.record(claims[:1], [])  # running
            # claims[1]: claimed
            broker.record(
                (),
                [
                    Succeeded(claims[2], "null"),
                    Buried(claims[3], BOOM),
                    Retried(claims[4], BOOM, 30.0),  # scheduled (its backoff)
                ],
            )
            broker.cancel(claims[5].job_id)
            # the seventh stays ready; one more, keyed, dies or waits
            # first in claim order (priority -1), so a claim takes it before the ready one
            [keyed] = broker.enqueue([spec(task=task, queue=queue, unique_key=key, priority=-1)])
            if round_ == 0:
                [held] = broker.claim([queue], 1, LEASE, "w-key")
                assert held.job.id == keyed.id
                broker.fail(held.claim, BOOM, None)
            put(broker, task=task, queue=queue, delay=600.0)
            clock.advance(1.0)
    return broker.list_jobs(limit=EVERY_JOB)


def expected(
    every: list[Job],
    state: JobState | None = None,
    queue: str | None = None,
    task: str | None = None,
    unique_key: str | None = None,
    before_id: int | None = None,
    limit: int = 100,
) -> list[Job]:
    return [
        j
        for j in every
        if (state is None or j.state is state)
        and (queue is None or j.queue == queue)
        and (task is None or j.task == task)
        and (unique_key is None or j.unique_key == unique_key)
        and (before_id is None or j.id < before_id)
    ][:limit]


class TestFilteredListings:
    def test_every_combination_of_filters(self, broker: Broker, clock: FakeClock) -> None:
        every = populate(broker, clock)
        assert [j.id for j in every] == sorted((j.id for j in every), reverse=True)
        assert {j.state for j in every} == set(JobState)
        middle = every[len(every) // 2].id
        for state, queue, task, key, before in itertools.product(
            (None, *JobState),
            (None, "a", "none"),
            (None, "send", "none"),
            (None, "send-a", "none"),
            (None, middle),
        ):
            filters = {"state": state, "queue": queue, "task": task, "unique_key": key}
            for limit in (1, 100):
                want = expected(every, **filters, before_id=before, limit=limit)
                got = broker.list_jobs(**filters, before_id=before, limit=limit)
                assert got == want, (filters, before, limit)

    @pytest.mark.parametrize("size", [1, 3, 10])
    def test_pages_walk_a_listing_without_gaps_or_repeats(
        self, broker: Broker, clock: FakeClock, size: int
    ) -> None:
        every = populate(broker, clock)
        walks: list[dict[str, Any]] = [
            {},
            {"queue": "a"},
            {"state": S.DEAD},
            {"task": "send"},
            {"task": "resize", "queue": "b"},
            {"task": "report", "state": S.READY},
            {"unique_key": "send-a"},
        ]
        for filters in walks:
            walked: list[Job] = []
            before = None
            while page := broker.list_jobs(**filters, limit=size, before_id=before):
                assert len(page) <= size
                walked += page
                before = page[-1].id
            assert walked == expected(every, **filters, limit=EVERY_JOB), filters

    def test_a_unique_key_lists_its_jobs_in_every_state(
        self, broker: Broker, clock: FakeClock
    ) -> None:
        first = put(broker, unique_key="k")
        [claimed] = broker.claim(["q"], 1, LEASE, "w")
        broker.fail(claimed.claim, BOOM, None)
        second = put(broker, unique_key="k")
        broker.cancel(second.id)
        third = put(broker, unique_key="k")
        put(broker, unique_key="other")
        put(broker)
        listed = broker.list_jobs(unique_key="k")
        assert [(j.id, j.state) for j in listed] == [
            (third.id, S.READY),
            (second.id, S.CANCELLED),
            (first.id, S.DEAD),
        ]
        assert [j.id for j in broker.list_jobs(unique_key="k", state=S.DEAD)] == [first.id]
        assert broker.list_jobs(unique_key="k", queue="elsewhere") == []
        assert broker.list_jobs(unique_key="k", task="other-task") == []

    def test_a_task_lists_its_held_jobs_too(self, broker: Broker) -> None:
        jobs = broker.enqueue([spec(task="t", args=[i]) for i in range(4)])
        put(broker, task="u")
        claimed = broker.claim(["q"], 2, LEASE, "w")
        broker.start(claimed[0].claim)
        ids = [j.id for j in jobs]
        assert [j.id for j in broker.list_jobs(task="t")] == ids[::-1]
        assert [j.id for j in broker.list_jobs(task="t", state=S.RUNNING)] == [ids[0]]
        assert [j.id for j in broker.list_jobs(task="t", state=S.CLAIMED)] == [ids[1]]
        assert [j.id for j in broker.list_jobs(task="t", queue="q", limit=3)] == ids[:0:-1]

    def test_before_id_bounds(self, broker: Broker) -> None:
        jobs = broker.enqueue([spec(args=[i]) for i in range(3)])
        ids = [j.id for j in jobs]
        assert [j.id for j in broker.list_jobs(before_id=ids[2])] == [ids[1], ids[0]]
        assert [j.id for j in broker.list_jobs(before_id=str(ids[1]))] == [ids[0]]  # type: ignore[arg-type]
        assert broker.list_jobs(before_id=ids[0]) == []
        assert broker.list_jobs(before_id=-(2**63)) == []
        assert len(broker.list_jobs(before_id=2**63 + 5)) == 3
        assert len(broker.list_jobs(state=S.READY, before_id=2**64)) == 3
        assert broker.list_jobs(limit=0) == []
        with pytest.raises(InvalidJobId):
            broker.list_jobs(before_id="next")  # type: ignore[arg-type]

    def test_the_positional_signature_still_works(self, broker: Broker) -> None:
        a = put(broker, queue="a")
        put(broker, queue="b")
        assert broker.list_jobs(S.READY, "a", 5) == [a]
        assert broker.list_jobs(None, None, 1)[0].queue == "b"


__all__ = suite(globals())
