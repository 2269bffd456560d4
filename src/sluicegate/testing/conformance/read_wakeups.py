"""The read side (get, list, stats), wake-ups (subscribe), and jobs surviving a reopen."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable

import pytest

from ...brokers.base import Broker
from ...errors import InvalidJobId, JobNotFound
from .. import BrokerKind, FakeClock
from .helpers import BOOM, S, get, make_state, put, suite, take


# ---- read side -------------------------------------------------------------------------
class TestRead:
    def test_get_job_of_unknown_id(self, broker: Broker) -> None:
        assert broker.get_job(123456) is None

    def test_job_ids_as_text(self, broker: Broker, clock: FakeClock) -> None:
        """An id taken from a URL or a form is text: its decimal text finds the job, on
        every broker; text that is no integer's is refused with a clear error."""
        job = put(broker)
        assert broker.get_job(str(job.id)) == broker.get_job(job.id) == job
        assert broker.get_job(f" {job.id}\n") == job
        assert broker.get_job("123456") is None
        assert broker.get_job(str(2**70)) is None  # no storage holds it: simply not found
        for bad in ("abc", "", "1.0", "0x1", str(job.id) + "a", 1.0, True, None, [job.id]):
            with pytest.raises(InvalidJobId, match="a job id is an integer"):
                broker.get_job(bad)  # type: ignore[arg-type]
            with pytest.raises(JobNotFound):  # what a web handler's 404 may catch
                broker.cancel(bad)  # type: ignore[arg-type]
            with pytest.raises(ValueError):
                broker.retry(bad)  # type: ignore[arg-type]
        assert broker.cancel(str(job.id)).state is S.CANCELLED
        assert broker.retry(str(job.id)).state is S.READY

    def test_list_jobs_filters_and_limits(self, broker: Broker, clock: FakeClock) -> None:
        a1 = put(broker, queue="a")
        a2 = put(broker, queue="a", delay=100.0)
        b1 = put(broker, queue="b")
        a3 = put(broker, queue="a")
        assert [j.id for j in broker.list_jobs()] == [a3.id, b1.id, a2.id, a1.id]
        assert [j.id for j in broker.list_jobs(queue="a")] == [a3.id, a2.id, a1.id]
        assert [j.id for j in broker.list_jobs(state=S.READY)] == [a3.id, b1.id, a1.id]
        assert [j.id for j in broker.list_jobs(state=S.SCHEDULED, queue="a")] == [a2.id]
        assert broker.list_jobs(state=S.DEAD) == []
        assert broker.list_jobs(queue="zzz") == []
        assert [j.id for j in broker.list_jobs(limit=2)] == [a3.id, b1.id]
        assert [j.id for j in broker.list_jobs(state=S.READY, queue="a", limit=1)] == [a3.id]
        assert broker.list_jobs()[0] == get(broker, a3.id)

    def test_stats_of_an_empty_broker(self, broker: Broker) -> None:
        assert broker.stats().to_dict() == {"queues": {}}

    def test_stats_shape_and_counts(self, broker: Broker, clock: FakeClock) -> None:
        for target in (S.SUCCEEDED, S.DEAD, S.RUNNING, S.CLAIMED):
            make_state(broker, clock, target)
        make_state(broker, clock, S.CANCELLED)
        put(broker, delay=60.0)
        put(broker, delay=5.0)
        put(broker, queue="other")
        clock.advance(2)
        put(broker)
        put(broker)
        clock.advance(4)  # the 5 s job is due: counted as ready; the oldest ready is 4 s old
        stats = broker.stats().to_dict()
        assert json.loads(json.dumps(stats)) == stats
        assert stats == {
            "queues": {
                "other": {
                    "scheduled": 0,
                    "ready": 1,
                    "claimed": 0,
                    "running": 0,
                    "succeeded": 0,
                    "dead": 0,
                    "cancelled": 0,
                    "oldest_ready_age_s": 6.0,
                },
                "q": {
                    "scheduled": 1,
                    "ready": 3,
                    "claimed": 1,
                    "running": 1,
                    "succeeded": 1,
                    "dead": 1,
                    "cancelled": 1,
                    "oldest_ready_age_s": 4.0,
                },
            }
        }
        assert list(stats["queues"]["q"]) == [
            "scheduled",
            "ready",
            "claimed",
            "running",
            "succeeded",
            "dead",
            "cancelled",
            "oldest_ready_age_s",
        ]

    def test_oldest_ready_age_is_zero_without_ready_jobs(
        self, broker: Broker, clock: FakeClock
    ) -> None:
        put(broker, delay=10.0)
        clock.advance(3)
        assert broker.stats().to_dict()["queues"]["q"]["oldest_ready_age_s"] == 0.0


# ---- wake-ups ---------------------------------------------------------------------------
class TestSubscribe:
    def test_callback_fires_on_enqueue_until_unsubscribed(self, broker: Broker) -> None:
        fired = threading.Event()
        calls: list[int] = []

        def callback() -> None:
            calls.append(1)
            fired.set()

        unsubscribe = broker.subscribe(callback)
        try:
            put(broker)
            assert fired.wait(5)
        finally:
            unsubscribe()
        seen = len(calls)
        put(broker)
        assert len(calls) == seen

    @pytest.mark.parametrize("how", ["release", "recover", "retry_later", "revive"])
    def test_callback_fires_when_jobs_come_back(
        self, broker: Broker, clock: FakeClock, how: str
    ) -> None:
        job = put(broker)
        claim = take(broker, lease=1).claim
        if how == "revive":
            broker.fail(claim, BOOM, None)
        fired = threading.Event()
        unsubscribe = broker.subscribe(fired.set)
        try:
            if how == "release":
                broker.release_one(claim)
            elif how == "recover":
                clock.advance(2)
                broker.recover_expired()
            elif how == "retry_later":
                broker.fail(claim, BOOM, 1.0)
            else:
                broker.retry(job.id)
            assert fired.wait(5)
        finally:
            unsubscribe()

    def test_enqueue_through_another_handle_wakes_subscribers(
        self, broker_kind: BrokerKind, open_broker: Callable[[], Broker]
    ) -> None:
        if not broker_kind.shared:
            pytest.skip(f"{broker_kind.name}: handles do not share storage")
        watcher, producer = open_broker(), open_broker()
        fired = threading.Event()
        unsubscribe = watcher.subscribe(fired.set)
        try:
            put(producer)
            assert fired.wait(5)
        finally:
            unsubscribe()


# ---- durability across handles -----------------------------------------------------------
def test_jobs_survive_reopening(
    broker_kind: BrokerKind, open_broker: Callable[[], Broker], clock: FakeClock
) -> None:
    if not broker_kind.shared:
        pytest.skip(f"{broker_kind.name}: nothing outlives the broker")
    first = open_broker()
    job = put(first, args=["kept"])
    claim = take(first).claim
    first.close()
    second = open_broker()
    assert get(second, job.id).args == ["kept"]
    second.ack(claim, "true")
    assert get(second, job.id).result is True


__all__ = suite(globals())
