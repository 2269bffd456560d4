"""A job's history (``Job.history``): one entry per transition off the happy path, in
order, on the broker's clock, the same on every broker; none on the happy path; at most
``HISTORY_CAP`` entries, the oldest dropped first."""

from __future__ import annotations

from typing import Any

import pytest

from ...brokers.base import Broker, Recovery, who_asked
from ...errors import ConfigError
from ...job import ENTRY_KEYS, HISTORY_CAP, HISTORY_MESSAGE, ErrorInfo
from ...outcomes import Buried, Retried, Succeeded
from .. import FakeClock
from .helpers import BOOM, LEASE, S, get, put, suite, take

ERROR = {"type": BOOM.type, "message": BOOM.message}  # as an entry keeps it: no traceback


def entry(at: float, event: str, attempt: int, **fields: Any) -> dict[str, Any]:
    return {"at": at, "event": event, "attempt": attempt, **fields}


class TestHistory:
    def test_the_happy_path_leaves_none(self, broker: Broker, clock: FakeClock) -> None:
        first, second = put(broker), put(broker, delay=5.0)
        claimed = take(broker)
        broker.heartbeat([claimed.claim], LEASE)
        broker.start(claimed.claim)
        broker.ack(claimed.claim, "1")
        clock.advance(6.0)
        folded = take(broker)  # promoted, then started and acked in one record
        assert broker.record([folded.claim], [Succeeded(folded.claim, "2")]) == []
        for job_id in (first.id, second.id):
            job = get(broker, job_id)
            assert job.state is S.SUCCEEDED and job.history == []
            assert job.to_dict()["history"] == []

    @pytest.mark.parametrize("timed_out", [False, True])
    def test_a_failed_attempt_retried_later(
        self, broker: Broker, clock: FakeClock, timed_out: bool
    ) -> None:
        job = put(broker, max_attempts=3)
        claimed = take(broker, worker="w1")
        clock.advance(2.0)
        assert broker.record((), [Retried(claimed.claim, BOOM, 5.0, timed_out)]) == []
        event = "timeout" if timed_out else "failed"
        assert get(broker, job.id).history == [
            entry(clock.now, event, 1, worker="w1", error=ERROR, retry_at=clock.now + 5.0)
        ]

    @pytest.mark.parametrize("timed_out", [False, True])
    def test_a_failed_attempt_with_none_left(
        self, broker: Broker, clock: FakeClock, timed_out: bool
    ) -> None:
        job = put(broker, max_attempts=1)
        claimed = take(broker, worker="w1")
        broker.start(claimed.claim)
        assert broker.record((), [Buried(claimed.claim, BOOM, timed_out)]) == []
        event = "timeout" if timed_out else "failed"
        now = get(broker, job.id)
        assert now.state is S.DEAD
        assert now.history == [entry(clock.now, event, 1, worker="w1", error=ERROR, dead=True)]

    def test_an_expired_lease_recovered_then_buried(self, broker: Broker, clock: FakeClock) -> None:
        job = put(broker, max_attempts=2)
        take(broker, lease=10, worker="w-a")
        clock.advance(11)
        assert broker.recover_expired() == Recovery(requeued=[job.id])
        first = clock.now
        take(broker, lease=10, worker="w-b")
        clock.advance(11)
        assert broker.recover_expired() == Recovery(dead=[job.id])
        assert get(broker, job.id).history == [
            entry(first, "recovered", 1, worker="w-a"),
            entry(clock.now, "recovered", 2, worker="w-b", dead=True),
        ]

    def test_a_lost_worker(self, broker: Broker, clock: FakeClock) -> None:
        job = put(broker, max_attempts=1)
        again = put(broker, max_attempts=2)
        broker.claim(["q"], 2, LEASE, "w-gone")
        clock.advance(1)
        assert broker.recover_worker("w-gone") == Recovery(requeued=[again.id], dead=[job.id])
        assert get(broker, job.id).history == [
            entry(clock.now, "worker_lost", 1, worker="w-gone", dead=True)
        ]
        assert get(broker, again.id).history == [
            entry(clock.now, "worker_lost", 1, worker="w-gone")
        ]

    def test_a_release_at_shutdown(self, broker: Broker, clock: FakeClock) -> None:
        job = put(broker)
        claimed = take(broker, worker="w1")
        broker.start(claimed.claim)
        clock.advance(3)
        assert broker.release([claimed.claim]) == []
        back = get(broker, job.id)
        assert back.attempts == 0  # refunded; the entry names the attempt it was
        assert back.history == [entry(clock.now, "released", 1, worker="w1")]

    def test_cancels_say_what_they_stopped(self, broker: Broker, clock: FakeClock) -> None:
        waiting = put(broker, delay=60.0)
        running = put(broker)
        claimed = take(broker, worker="w1")
        broker.start(claimed.claim)
        clock.advance(1)
        broker.cancel(waiting.id)
        broker.cancel(running.id, by="alice (on call)")
        assert get(broker, waiting.id).history == [  # not said: this process's user@host
            entry(clock.now, "cancelled", 0, by=who_asked(None), **{"from": "scheduled"})
        ]
        assert get(broker, running.id).history == [
            entry(
                clock.now, "cancelled", 1, worker="w1", by="alice (on call)", **{"from": "running"}
            )
        ]

    @pytest.mark.parametrize("by", ["", "   ", "x" * 201, 7])
    def test_a_bad_by_is_refused_and_cancels_nothing(self, broker: Broker, by: Any) -> None:
        job = put(broker)
        with pytest.raises(ConfigError, match="invalid cancel 'by'"):
            broker.cancel(job.id, by=by)
        with pytest.raises(ConfigError, match="invalid cancel 'by'"):
            broker.cancel_matching(state=S.READY, by=by)
        assert get(broker, job.id).state is S.READY

    def test_retries_by_an_operator(self, broker: Broker, clock: FakeClock) -> None:
        dead = put(broker, max_attempts=1)
        claimed = take(broker, worker="w1")
        broker.fail(claimed.claim, BOOM, None)
        died = clock.now
        clock.advance(60)
        broker.retry(dead.id)
        cancelled = put(broker, delay=60.0)
        broker.cancel(cancelled.id, by="ops")
        broker.retry(cancelled.id)
        assert get(broker, dead.id).history == [
            entry(died, "failed", 1, worker="w1", error=ERROR, dead=True),
            entry(clock.now, "retried", 1, **{"from": "dead"}),
        ]
        assert get(broker, cancelled.id).history == [
            entry(clock.now, "cancelled", 0, by="ops", **{"from": "scheduled"}),
            entry(clock.now, "retried", 0, **{"from": "cancelled"}),
        ]

    def test_bulk_actions_leave_the_same_entries(self, broker: Broker, clock: FakeClock) -> None:
        job = put(broker, max_attempts=1)
        broker.fail(take(broker, worker="w1").claim, BOOM, None)
        died = clock.now
        clock.advance(5)
        assert broker.retry_matching(queue="q") == 1
        revived = clock.now
        clock.advance(5)
        assert broker.cancel_matching(state=S.READY, queue="q", by="dashboard") == 1
        assert get(broker, job.id).history == [
            entry(died, "failed", 1, worker="w1", error=ERROR, dead=True),
            entry(revived, "retried", 1, **{"from": "dead"}),
            entry(clock.now, "cancelled", 0, by="dashboard", **{"from": "ready"}),
        ]

    def test_a_whole_timeline_in_order(self, broker: Broker, clock: FakeClock) -> None:
        """Failed, recovered, released, dead, retried, succeeded: each entry once, in the
        order it happened; the success adds none."""
        job = put(broker, max_attempts=3)
        times = []
        broker.fail(take(broker, worker="w1").claim, BOOM, 0.0)
        times.append(clock.now)
        take(broker, lease=5, worker="w2")
        clock.advance(6)
        broker.recover_expired()
        times.append(clock.now)
        broker.release([take(broker, worker="w3").claim])
        times.append(clock.now)
        broker.fail(take(broker, worker="w4").claim, BOOM, None)
        times.append(clock.now)
        clock.advance(1)
        broker.retry(job.id)
        times.append(clock.now)
        broker.ack(take(broker, worker="w5").claim, "1")
        history = get(broker, job.id).history
        assert [(e["event"], e["attempt"], e.get("worker")) for e in history] == [
            ("failed", 1, "w1"),
            ("recovered", 2, "w2"),
            ("released", 3, "w3"),
            ("failed", 3, "w4"),
            ("retried", 3, None),
        ]
        assert [e["at"] for e in history] == times
        for e in history:  # read alike from every broker: keys in one order
            assert list(e) == [k for k in ENTRY_KEYS if k in e], e

    def test_the_history_keeps_its_newest_entries(self, broker: Broker, clock: FakeClock) -> None:
        job = put(broker, max_attempts=1000)
        extra = 7
        for _ in range(HISTORY_CAP + extra):
            broker.fail(take(broker).claim, BOOM, 0.0)
            clock.advance(1)
        history = get(broker, job.id).history
        assert len(history) == HISTORY_CAP
        assert [e["attempt"] for e in history] == list(range(extra + 1, HISTORY_CAP + extra + 1))

    def test_an_entry_keeps_the_start_of_a_long_message(self, broker: Broker) -> None:
        job = put(broker, max_attempts=1)
        long = ErrorInfo("E", "x\x00" + "y" * 2 * HISTORY_MESSAGE, "trace")
        broker.fail(take(broker).claim, long, None)
        now = get(broker, job.id)
        assert now.last_error == long  # the error itself is kept whole
        [kept] = now.history
        assert kept["error"] == {
            "type": "E",
            "message": ("x\ufffd" + "y" * 2 * HISTORY_MESSAGE)[:HISTORY_MESSAGE],
        }


__all__ = suite(globals())
