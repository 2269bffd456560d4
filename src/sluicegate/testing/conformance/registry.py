"""The worker registry and the signals read beside it: ``publish_worker`` and
``list_workers`` (times on the broker's clock), ``queue_depths`` (unfinished jobs per
queue) and ``arrivals`` (jobs stored since an id, per queue)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

import pytest

from ...brokers import base
from ...brokers.base import FORGET_WORKERS_AFTER, Broker, QueueDepth, WorkerInfo, WorkerRecord
from ...limits import encode_needs
from .. import T0, BrokerKind, FakeClock
from .helpers import BOOM, LEASE, put, spec, suite

POOLS = ({"name": "default", "queues": ["q"], "slots": 4, "model": "threads"},)


def info(worker_id: str = "w1", host: str = "h1", **fields: Any) -> WorkerInfo:
    values: dict[str, Any] = {"pid": 100, "version": "1.0", "pools": POOLS, **fields}
    return WorkerInfo(worker_id, host, **values)


def snapshot(**figures: Any) -> str:
    return json.dumps({"v": 1, **figures})


def workers(broker: Broker, gone_within: float = 3600.0) -> dict[str, WorkerRecord]:
    return {w.info.id: w for w in broker.list_workers(gone_within).workers}


# ---- publish_worker and list_workers ------------------------------------------------------
class TestWorkerRegistry:
    def test_an_empty_registry(self, broker: Broker, clock: FakeClock) -> None:
        listed = broker.list_workers()
        assert listed.workers == [] and listed.now == pytest.approx(clock.now)

    def test_the_first_publish_registers_the_worker(self, broker: Broker, clock: FakeClock) -> None:
        broker.publish_worker(info(), 3, snapshot(jobs=7))
        listed = broker.list_workers()
        assert listed.now == pytest.approx(T0)
        [record] = listed.workers
        assert record.info == info()
        assert record.info.pools == POOLS and isinstance(record.info.pools, tuple)
        assert record.started_at == pytest.approx(T0)
        assert record.last_seen == pytest.approx(T0)
        assert record.stopped_at is None
        assert record.held == 3
        assert record.snapshot == {"v": 1, "jobs": 7}

    def test_a_publish_keeps_started_at_and_updates_the_rest(
        self, broker: Broker, clock: FakeClock
    ) -> None:
        broker.publish_worker(info(), 3, snapshot(jobs=7))
        clock.advance(2.5)
        broker.publish_worker(info(pid=101, version="1.1"), 0, snapshot(jobs=9))
        [record] = broker.list_workers().workers
        assert record.started_at == pytest.approx(T0)
        assert record.last_seen == pytest.approx(T0 + 2.5)
        assert (record.info.pid, record.info.version) == (101, "1.1")
        assert record.held == 0 and record.snapshot == {"v": 1, "jobs": 9}
        assert broker.list_workers().now == pytest.approx(T0 + 2.5)

    def test_a_stop_sets_stopped_at_and_it_stays(self, broker: Broker, clock: FakeClock) -> None:
        broker.publish_worker(info(), 2, snapshot())
        clock.advance(5)
        broker.publish_worker(info(), 0, snapshot(), stopped=True)
        [record] = broker.list_workers().workers
        assert record.stopped_at == pytest.approx(T0 + 5)
        assert record.last_seen == pytest.approx(T0 + 5) and record.held == 0
        clock.advance(1)
        broker.publish_worker(info(), 0, snapshot())  # once stopped, always stopped
        [record] = broker.list_workers().workers
        assert record.stopped_at == pytest.approx(T0 + 5)
        assert record.last_seen == pytest.approx(T0 + 6)

    def test_gone_within_hides_workers_stopped_longer_ago(
        self, broker: Broker, clock: FakeClock
    ) -> None:
        broker.publish_worker(info("stopped"), 0, snapshot(), stopped=True)
        broker.publish_worker(info("silent"), 1, snapshot())
        clock.advance(100)
        broker.publish_worker(info("live"), 1, snapshot())
        assert set(workers(broker, gone_within=200)) == {"stopped", "silent", "live"}
        assert set(workers(broker, gone_within=100)) == {"stopped", "silent", "live"}
        # a worker gone without saying stays listed (its last_seen tells how long ago)
        assert set(workers(broker, gone_within=50)) == {"silent", "live"}
        assert set(workers(broker)) == {"stopped", "silent", "live"}

    def test_listed_by_host_then_start_then_id(self, broker: Broker, clock: FakeClock) -> None:
        broker.publish_worker(info("b", host="h2"), 0, snapshot())
        clock.advance(1)
        broker.publish_worker(info("z", host="h1"), 0, snapshot())
        broker.publish_worker(info("a", host="h1"), 0, snapshot())
        clock.advance(1)
        broker.publish_worker(info("0", host="h1"), 0, snapshot())
        broker.publish_worker(info("b", host="h2"), 0, snapshot())  # started first, on h2
        assert [w.info.id for w in broker.list_workers().workers] == ["a", "z", "0", "b"]

    def test_rows_of_workers_gone_an_hour_are_deleted(
        self, broker: Broker, clock: FakeClock
    ) -> None:
        broker.publish_worker(info("stopped"), 0, snapshot(), stopped=True)
        broker.publish_worker(info("silent"), 0, snapshot())
        broker.publish_worker(info("live"), 0, snapshot())
        clock.advance(FORGET_WORKERS_AFTER - 1)
        broker.publish_worker(info("live"), 0, snapshot())  # not yet: kept
        assert set(workers(broker, gone_within=1e9)) == {"stopped", "silent", "live"}
        clock.advance(2)
        assert set(workers(broker, gone_within=1e9)) == {"stopped", "silent", "live"}, (
            "rows go at the next publish, not when listed"
        )
        broker.publish_worker(info("live"), 0, snapshot())
        assert set(workers(broker, gone_within=1e9)) == {"live"}
        assert workers(broker)["live"].started_at == pytest.approx(T0)

    def test_a_worker_stopped_an_hour_ago_publishing_again_starts_afresh(
        self, broker: Broker, clock: FakeClock
    ) -> None:
        broker.publish_worker(info(), 0, snapshot(), stopped=True)
        clock.advance(FORGET_WORKERS_AFTER + 1)
        broker.publish_worker(info(), 0, snapshot())
        [record] = broker.list_workers().workers
        assert record.stopped_at is None
        assert record.started_at == pytest.approx(T0 + FORGET_WORKERS_AFTER + 1)

    @pytest.mark.parametrize("text", ["", "not json", "[1, 2]", '"text"', "null"])
    def test_a_snapshot_that_is_not_an_object_reads_as_empty(
        self, broker: Broker, text: str
    ) -> None:
        broker.publish_worker(info(), 0, text)
        [record] = broker.list_workers().workers
        assert record.snapshot == {}

    def test_another_handle_sees_the_registry(
        self, broker_kind: BrokerKind, open_broker: Callable[[], Broker]
    ) -> None:
        if not broker_kind.shared:
            pytest.skip(f"{broker_kind.name}: handles do not share storage")
        first, second = open_broker(), open_broker()
        first.publish_worker(info(), 1, snapshot())
        assert set(workers(second)) == {"w1"}

    def test_a_publish_wakes_no_claimer(self, broker: Broker) -> None:
        fired = threading.Event()
        unsubscribe = broker.subscribe(fired.set)
        try:
            fired.wait(0.2)  # a subscription may fire once as it starts
            fired.clear()
            broker.publish_worker(info(), 0, snapshot())
            broker.publish_worker(info(), 0, snapshot(), stopped=True)
            assert not fired.wait(0.5), "a registry write makes no job ready"
        finally:
            unsubscribe()


# ---- queue_depths ---------------------------------------------------------------------------
class TestQueueDepths:
    def test_an_empty_broker_has_no_queues(self, broker: Broker) -> None:
        assert broker.queue_depths() == {}
        assert broker.queue_depths(["q"]) == {"q": QueueDepth()}
        assert broker.queue_depths([]) == {}

    def test_each_unfinished_state_is_counted_and_finished_jobs_are_not(
        self, broker: Broker, clock: FakeClock
    ) -> None:
        # Held jobs first: a claim takes every ready job of its queue.
        jobs = broker.enqueue([spec(queue="a", args=[i]) for i in range(5)])
        held = broker.claim(["a"], 5, LEASE, "w1")
        assert [c.job.id for c in held] == [j.id for j in jobs]
        broker.start(held[0].claim)  # running
        broker.ack(held[1].claim, "null")  # succeeded
        broker.fail(held[2].claim, BOOM, None)  # dead
        broker.cancel(held[3].claim.job_id)  # cancelled
        # held[4]: claimed
        put(broker, queue="a", delay=10.0)  # due by the end: counts as ready
        put(broker, queue="a", delay=500.0)  # scheduled
        put(broker, queue="a", delay=600.0)  # scheduled
        clock.advance(5)
        put(broker, queue="a")  # ready, 15 s old at the end
        put(broker, queue="a", limits=encode_needs([("db", None, 1)]))  # ready, waits on a limit
        put(broker, queue="done")
        broker.cancel(put(broker, queue="done", delay=5.0).id)
        [only] = broker.claim(["done"], 1, LEASE, "w1")
        broker.ack(only.claim, "null")
        put(broker, queue="b", delay=1000.0)
        clock.advance(15)
        expected = {
            "a": QueueDepth(ready=3, scheduled=2, claimed=1, running=1, oldest_ready_age_s=15.0),
            "b": QueueDepth(scheduled=1),
        }
        assert _rounded(broker.queue_depths()) == expected
        assert _rounded(broker.queue_depths(["a", "b"])) == expected

    def test_the_oldest_ready_is_the_earliest_due(self, broker: Broker, clock: FakeClock) -> None:
        db = encode_needs([("db", None, 1)])
        put(broker, queue="a", delay=5.0)
        put(broker, queue="g", limits=db)
        clock.advance(10)
        put(broker, queue="a", priority=-5)  # claimed first, but younger
        put(broker, queue="a", limits=db)
        put(broker, queue="g")
        clock.advance(10)
        depths = _rounded(broker.queue_depths())
        assert depths["a"] == QueueDepth(ready=3, oldest_ready_age_s=15.0), "due 15 s ago"
        assert depths["g"] == QueueDepth(ready=2, oldest_ready_age_s=20.0), "waits on a limit"

    def test_no_ready_job_means_age_zero(self, broker: Broker, clock: FakeClock) -> None:
        put(broker, queue="a", delay=100.0)
        put(broker, queue="a")
        broker.claim(["a"], 1, LEASE, "w1")
        clock.advance(50)
        assert broker.queue_depths() == {"a": QueueDepth(scheduled=1, claimed=1)}

    def test_only_the_queues_asked_for_each_one_listed(
        self, broker: Broker, clock: FakeClock
    ) -> None:
        put(broker, queue="a")
        put(broker, queue="b", delay=50.0)
        done = put(broker, queue="finished")
        broker.cancel(done.id)
        clock.advance(2)
        assert _rounded(broker.queue_depths(["b", "a", "nothing", "finished", "a"])) == {
            "a": QueueDepth(ready=1, oldest_ready_age_s=2.0),
            "b": QueueDepth(scheduled=1),
            "nothing": QueueDepth(),
            "finished": QueueDepth(),
        }
        assert set(broker.queue_depths(["b"])) == {"b"}
        assert set(broker.queue_depths()) == {"a", "b"}

    def test_a_retried_job_is_scheduled_then_ready(self, broker: Broker, clock: FakeClock) -> None:
        put(broker, queue="a")
        [claimed] = broker.claim(["a"], 1, LEASE, "w1")
        broker.fail(claimed.claim, BOOM, 30.0)
        assert broker.queue_depths() == {"a": QueueDepth(scheduled=1)}
        clock.advance(40)
        assert _rounded(broker.queue_depths()) == {
            "a": QueueDepth(ready=1, oldest_ready_age_s=10.0)
        }


def _rounded(depths: dict[str, QueueDepth]) -> dict[str, QueueDepth]:
    """Ages to the millisecond: a server keeps times in microseconds."""
    return {
        q: QueueDepth(d.ready, d.scheduled, d.claimed, d.running, round(d.oldest_ready_age_s, 3))
        for q, d in depths.items()
    }


# ---- arrivals -----------------------------------------------------------------------------
class TestArrivals:
    def test_an_empty_broker(self, broker: Broker) -> None:
        assert broker.arrivals(None) == (0, {})
        assert broker.arrivals(0) == (0, {})
        assert broker.arrivals(41) == (41, {}), "nothing read: the id given comes back"

    def test_none_gives_the_highest_id_and_counts_nothing(self, broker: Broker) -> None:
        jobs = broker.enqueue([spec(queue="a"), spec(queue="b")])
        assert broker.arrivals(None) == (jobs[-1].id, {})

    def test_jobs_since_an_id_per_queue(self, broker: Broker, clock: FakeClock) -> None:
        mark, counts = broker.arrivals(None)
        assert counts == {}
        first = broker.enqueue([spec(queue="a"), spec(queue="b"), spec(queue="a")])
        done = put(broker, queue="c", delay=60.0)
        broker.cancel(done.id)  # stored since the mark: counted whatever its state
        mark2, counts = broker.arrivals(mark)
        assert (mark2, counts) == (done.id, {"a": 2, "b": 1, "c": 1})
        assert mark2 > first[-1].id
        assert broker.arrivals(mark2) == (mark2, {})
        later = put(broker, queue="b")
        assert broker.arrivals(mark2) == (later.id, {"b": 1})
        assert broker.arrivals(first[0].id) == (later.id, {"a": 1, "b": 2, "c": 1})

    def test_one_call_reads_at_most_arrivals_scan_jobs(
        self, broker: Broker, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """ARRIVALS_SCAN is read at each call (brokers read it from its module)."""
        monkeypatch.setattr(base, "ARRIVALS_SCAN", 3)
        jobs = broker.enqueue([spec(queue="ab"[i % 2], args=[i]) for i in range(7)])
        mark, _ = broker.arrivals(0)
        assert (mark, _) == (jobs[2].id, {"a": 2, "b": 1})
        assert broker.arrivals(mark) == (jobs[5].id, {"b": 2, "a": 1})
        assert broker.arrivals(jobs[5].id) == (jobs[6].id, {"a": 1})
        assert broker.arrivals(jobs[6].id) == (jobs[6].id, {})


__all__ = suite(globals())
