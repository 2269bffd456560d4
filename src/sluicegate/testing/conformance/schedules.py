"""Periodic schedules: each tick enqueued once, alike on every broker.

The scheduler of every worker offers each due tick; ``enqueue_tick`` must store exactly
one job per schedule and tick, whoever offers it and however late, also after that
tick's job has finished (a unique key alone would allow a second one then).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from ...brokers.base import Broker
from ...job import JobSpec
from .. import BrokerKind, FakeClock
from .helpers import LEASE, get, spec, suite

T = 1_800_000_000.0  # a tick (epoch s)


def tick_spec(name: str, tick: float) -> JobSpec:
    return spec(task="tick", args=[name, tick], unique_key=f"schedule:{name}:{tick:.0f}")


class TestSchedules:
    def test_register_keeps_the_first_sight(self, broker: Broker, clock: FakeClock) -> None:
        states = broker.schedule_states()
        assert states.rows == {}
        assert states.now == pytest.approx(clock(), abs=1e-3)
        broker.register_schedules(["a", "b"])
        first = broker.schedule_states().rows
        assert sorted(first) == ["a", "b"]
        assert first["a"].since == pytest.approx(clock(), abs=1e-3)
        assert (first["a"].last_tick, first["a"].last_job_id) == (None, None)
        clock.advance(60)
        broker.register_schedules(["a", "c"])
        again = broker.schedule_states()
        assert again.rows["a"].since == first["a"].since
        assert again.rows["c"].since == pytest.approx(clock(), abs=1e-3)
        assert again.now == pytest.approx(clock(), abs=1e-3)

    def test_a_tick_is_enqueued_once(self, broker: Broker) -> None:
        broker.register_schedules(["s"])
        job = broker.enqueue_tick("s", T, tick_spec("s", T))
        assert job is not None
        assert (job.task, job.args, job.unique_key) == ("tick", ["s", T], f"schedule:s:{T:.0f}")
        assert get(broker, job.id).state.value == "ready"
        assert broker.enqueue_tick("s", T, tick_spec("s", T)) is None
        row = broker.schedule_states().rows["s"]
        assert (row.last_tick, row.last_job_id) == (T, job.id)

    def test_an_earlier_tick_is_refused_and_a_later_one_taken(self, broker: Broker) -> None:
        first = broker.enqueue_tick("s", T, tick_spec("s", T))
        assert first is not None
        assert broker.enqueue_tick("s", T - 1, tick_spec("s", T - 1)) is None
        later = broker.enqueue_tick("s", T + 5, tick_spec("s", T + 5))
        assert later is not None and later.id != first.id
        assert broker.schedule_states().rows["s"].last_job_id == later.id

    def test_a_finished_tick_is_not_enqueued_again(self, broker: Broker) -> None:
        """The tick's job ran and finished: its unique key is free again, the tick is not."""
        job = broker.enqueue_tick("s", T, tick_spec("s", T))
        assert job is not None
        [claimed] = broker.claim(["q"], 1, LEASE, "w1")
        broker.ack(claimed.claim, "null")
        assert broker.enqueue_tick("s", T, tick_spec("s", T)) is None
        assert [j.id for j in broker.list_jobs()] == [job.id]  # one job only, finished

    def test_an_unregistered_schedule_is_made_by_its_first_tick(
        self, broker: Broker, clock: FakeClock
    ) -> None:
        job = broker.enqueue_tick("new", T, tick_spec("new", T))
        assert job is not None
        row = broker.schedule_states().rows["new"]
        assert row.since == pytest.approx(clock(), abs=1e-3)
        assert (row.last_tick, row.last_job_id) == (T, job.id)

    def test_schedules_are_apart(self, broker: Broker) -> None:
        a = broker.enqueue_tick("a", T, tick_spec("a", T))
        b = broker.enqueue_tick("b", T, tick_spec("b", T))
        assert a is not None and b is not None and a.id != b.id


def test_racing_schedulers_enqueue_each_tick_once(
    broker_kind: BrokerKind, broker: Broker, open_broker: Callable[[], Broker]
) -> None:
    """Six threads (each on a handle of its own where the broker is shared) offer the same
    40 ticks in order, as the schedulers of six workers would: one job per tick."""
    handles = [open_broker() if broker_kind.shared else broker for _ in range(6)]
    won: list[tuple[float, int]] = []
    lock = threading.Lock()
    start = threading.Barrier(len(handles))

    def scheduler(handle: Broker) -> None:
        start.wait()
        for n in range(40):
            tick = T + n
            job = handle.enqueue_tick("race", tick, tick_spec("race", tick))
            if job is not None:
                with lock:
                    won.append((tick, job.id))

    threads = [threading.Thread(target=scheduler, args=(h,)) for h in handles]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(tick for tick, _ in won) == [T + n for n in range(40)]
    ids = [job_id for _, job_id in won]
    assert len(set(ids)) == 40
    stored = broker.list_jobs(limit=100)
    assert sorted(j.id for j in stored) == sorted(ids)
    row = broker.schedule_states().rows["race"]
    assert row.last_tick == T + 39


__all__ = suite(globals())
