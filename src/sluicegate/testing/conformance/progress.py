"""Job progress (``Job.progress``): a running attempt's latest report, written by the
heartbeat that carries it with the broker's clock, fenced like the heartbeat, kept on the
finished job, and read back alike by every read."""

from __future__ import annotations

from ...brokers.base import Broker, Recovery
from ...job import PROGRESS_MESSAGE, Progress, checked_progress
from ...outcomes import Buried, Retried
from .. import FakeClock
from .helpers import BOOM, LEASE, S, get, put, suite, take


class TestProgress:
    def test_none_until_reported(self, broker: Broker) -> None:
        job = put(broker)
        claimed = take(broker)
        assert broker.heartbeat([claimed.claim], LEASE) == []
        assert get(broker, job.id).progress is None
        assert get(broker, job.id).to_dict()["progress"] is None

    def test_a_heartbeat_stores_it_with_the_broker_clock(
        self, broker: Broker, clock: FakeClock
    ) -> None:
        job = put(broker)
        claimed = take(broker)
        broker.start(claimed.claim)
        clock.advance(3.0)
        reported = {claimed.claim: Progress(0.4, "transcoding 2 of 5")}
        assert broker.heartbeat([claimed.claim], LEASE, reported) == []
        now = get(broker, job.id)
        assert now.progress == Progress(0.4, "transcoding 2 of 5", clock.now)
        assert now.lease_expires_at == clock.now + LEASE
        assert now.to_dict()["progress"] == {
            "fraction": 0.4,
            "message": "transcoding 2 of 5",
            "at": clock.now,
        }
        listed = broker.list_jobs(S.RUNNING, "q", 10)
        assert [j.progress for j in listed] == [now.progress]

    def test_latest_wins_and_a_bare_heartbeat_keeps_it(
        self, broker: Broker, clock: FakeClock
    ) -> None:
        job = put(broker)
        claimed = take(broker)
        broker.heartbeat([claimed.claim], LEASE, {claimed.claim: Progress(0.1)})
        clock.advance(1.0)
        broker.heartbeat([claimed.claim], LEASE, {claimed.claim: Progress(0.9, None)})
        at = clock.now
        clock.advance(1.0)
        broker.heartbeat([claimed.claim], LEASE)
        broker.heartbeat([claimed.claim], LEASE, {})
        assert get(broker, job.id).progress == Progress(0.9, None, at)

    def test_one_batch_writes_only_the_claims_that_reported(
        self, broker: Broker, clock: FakeClock
    ) -> None:
        jobs = [put(broker) for _ in range(3)]
        claims = [take(broker).claim for _ in jobs]
        reported = {claims[0]: Progress(0.0, "zero"), claims[2]: Progress(1.0, "done")}
        assert broker.heartbeat(claims, LEASE, reported) == []
        got = [get(broker, j.id).progress for j in jobs]
        assert got == [Progress(0.0, "zero", clock.now), None, Progress(1.0, "done", clock.now)]

    def test_a_fenced_heartbeat_writes_no_progress(self, broker: Broker, clock: FakeClock) -> None:
        job = put(broker, max_attempts=3)
        stale = take(broker, lease=10, worker="w-a")
        clock.advance(11)
        assert broker.recover_expired() == Recovery(requeued=[job.id])
        fresh = take(broker, lease=10, worker="w-b")
        broker.heartbeat([fresh.claim], 10, {fresh.claim: Progress(0.2, "mine")})
        at = clock.now
        clock.advance(1)
        lost = broker.heartbeat([stale.claim], 10, {stale.claim: Progress(0.99, "stale")})
        assert lost == [stale.claim]
        assert get(broker, job.id).progress == Progress(0.2, "mine", at)

    def test_a_finished_job_keeps_the_last_stored(self, broker: Broker, clock: FakeClock) -> None:
        done, dead, retried = put(broker), put(broker, max_attempts=1), put(broker, max_attempts=2)
        claims = [take(broker).claim for _ in range(3)]
        reported = {c: Progress(0.5 + i / 10, f"step {i}") for i, c in enumerate(claims)}
        broker.heartbeat(claims, LEASE, reported)
        at = clock.now
        clock.advance(1)
        broker.ack(claims[0], "1")
        broker.record((), [Buried(claims[1], BOOM), Retried(claims[2], BOOM, 5.0)])
        for i, job_id in enumerate((done.id, dead.id, retried.id)):
            assert get(broker, job_id).progress == Progress(0.5 + i / 10, f"step {i}", at)
        assert [get(broker, j.id).state for j in (done, dead, retried)] == [
            S.SUCCEEDED,
            S.DEAD,
            S.SCHEDULED,
        ]

    def test_a_message_at_its_bounds_reads_back_alike(
        self, broker: Broker, clock: FakeClock
    ) -> None:
        texts = ["", "zwölf Schritte \u2014 \U0001f3ac", "x\x00y" + "z" * 2 * PROGRESS_MESSAGE]
        jobs = [put(broker) for _ in texts]
        claims = [take(broker).claim for _ in jobs]
        checked = [checked_progress(1, t) for t in texts]
        broker.heartbeat(
            claims, LEASE, {c: Progress(*v) for c, v in zip(claims, checked, strict=True)}
        )
        for job, (fraction, message) in zip(jobs, checked, strict=True):
            assert get(broker, job.id).progress == Progress(fraction, message, clock.now)
        assert len(checked[2][1] or "") == PROGRESS_MESSAGE


__all__ = suite(globals())
