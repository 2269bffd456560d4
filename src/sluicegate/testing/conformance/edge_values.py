"""Values at the edges of what sluicegate accepts, stored and read back the same on every
broker: priorities and attempt budgets at the 32-bit bounds, run_at at the ends of the
calendar and the longest backoff, NUL characters and characters outside the BMP in
payloads, results, errors and keys, deep (but allowed) nesting, and job ids no storage
holds. What lies beyond these edges is refused before a broker sees it (sluicegate.task,
sluicegate.codec); a broker must take everything up to them.
"""

from __future__ import annotations

import pytest

from ...brokers.base import Broker
from ...codec import dumps, encode_result
from ...errors import JobNotFound
from ...job import ErrorInfo
from ...outcomes import Buried, Outcome, Retried, Succeeded
from ...retry import MAX_DELAY, error_info
from ...task import MAX_ATTEMPTS, PRIORITY_RANGE, RUN_AT_RANGE
from .. import FakeClock
from .helpers import LEASE, S, get, put, suite, take

ODD_TEXT = "nul \x00 inside, é, \u2028, \U0001f600 and \uffff"


def _nested(levels: int) -> list[object]:
    value: list[object] = []
    for _ in range(levels):
        value = [value]
    return value


class TestEdgeValues:
    def test_priorities_and_attempts_at_the_integer_bounds(self, broker: Broker) -> None:
        low, high = PRIORITY_RANGE
        last = put(broker, args=["last"], priority=high, max_attempts=MAX_ATTEMPTS)
        middle = put(broker, args=["middle"])
        first = put(broker, args=["first"], priority=low)
        assert get(broker, last.id).max_attempts == MAX_ATTEMPTS
        claimed = broker.claim(["q"], 3, LEASE, "w")
        assert [c.job.id for c in claimed] == [first.id, middle.id, last.id]
        assert [c.job.priority for c in claimed] == [low, 0, high]

    def test_run_at_at_the_ends_of_the_calendar(self, broker: Broker, clock: FakeClock) -> None:
        earliest, latest = RUN_AT_RANGE
        past = put(broker, run_at=earliest)
        future = put(broker, run_at=latest)
        assert get(broker, past.id).state is S.READY
        assert get(broker, future.id).state is S.SCHEDULED
        assert get(broker, future.id).run_at == latest
        assert broker.next_due(["q"]) == pytest.approx(latest - clock.now)
        assert [c.job.id for c in broker.claim(["q"], 2, LEASE, "w")] == [past.id]

    def test_the_longest_backoff_and_leases_at_their_bounds(
        self, broker: Broker, clock: FakeClock
    ) -> None:
        job = put(broker, max_attempts=2)
        claim = take(broker, lease=0.5).claim
        assert broker.heartbeat([claim], 86_400.0) == []
        assert get(broker, job.id).lease_expires_at == clock.now + 86_400.0
        broker.fail(claim, ErrorInfo("E", "again"), MAX_DELAY)
        assert get(broker, job.id).run_at == pytest.approx(clock.now + MAX_DELAY)
        assert broker.next_due(["q"]) == pytest.approx(MAX_DELAY)
        assert broker.claim(["q"], 1, LEASE, "w") == []

    def test_odd_characters_round_trip_everywhere(self, broker: Broker) -> None:
        """NUL (escaped inside JSON), characters outside the BMP and line separators in
        arguments, results, error messages and unique keys come back as they went in."""
        job = put(broker, args=[ODD_TEXT, {ODD_TEXT: [ODD_TEXT]}], kwargs={"k": ODD_TEXT})
        keyed = put(broker, args=[1], unique_key="key \U0001f600 é")
        assert put(broker, args=[2], unique_key="key \U0001f600 é").id == keyed.id
        claimed = {c.job.id: c for c in broker.claim(["q"], 2, LEASE, "w")}
        assert claimed[job.id].problem is None
        assert claimed[job.id].job.args == [ODD_TEXT, {ODD_TEXT: [ODD_TEXT]}]
        assert claimed[job.id].job.kwargs == {"k": ODD_TEXT}
        broker.ack(claimed[job.id].claim, encode_result({"r": ODD_TEXT}))
        try:
            raise ValueError(ODD_TEXT)
        except ValueError as exc:
            broker.fail(claimed[keyed.id].claim, error_info(exc), None)
        done, dead = get(broker, job.id), get(broker, keyed.id)
        assert done.result == {"r": ODD_TEXT}
        assert dead.last_error is not None and dead.last_error.message == ODD_TEXT
        assert ODD_TEXT in dead.last_error.traceback and dead.unique_key == "key \U0001f600 é"
        listed = {j.id: j for j in broker.list_jobs()}
        assert (listed[job.id], listed[keyed.id]) == (done, dead)

    def test_deep_nesting_within_the_limit_round_trips(self, broker: Broker) -> None:
        deep = _nested(500)
        job = put(broker, args=[deep], kwargs={"k": deep})
        [claimed] = broker.claim(["q"], 1, LEASE, "w")
        assert claimed.problem is None and claimed.job.args == [deep]
        broker.record([], [Succeeded(claimed.claim, dumps(deep))])
        assert get(broker, job.id).result == deep

    def test_error_reports_whose_text_cannot_be_stored_as_is_are_stored_escaped(
        self, broker: Broker
    ) -> None:
        """A task's exception may carry a lone surrogate: its report is stored with it
        escaped (the job's outcome must be written whatever its message says)."""
        retried, buried = put(broker, max_attempts=2), put(broker, max_attempts=1)
        claims = {c.job.id: c.claim for c in broker.claim(["q"], 2, LEASE, "w")}
        errors = []
        for text in ("lone \ud800 high", "lone \udfff low"):
            try:
                raise RuntimeError(text)
            except RuntimeError as exc:
                errors.append(error_info(exc))
        outcomes: list[Outcome] = [
            Retried(claims[retried.id], errors[0], 0.0),
            Buried(claims[buried.id], errors[1]),
        ]
        assert broker.record([], outcomes) == []
        again, dead = get(broker, retried.id), get(broker, buried.id)
        assert again.state is S.SCHEDULED and dead.state is S.DEAD
        assert again.last_error is not None and again.last_error.message == "lone \\ud800 high"
        assert dead.last_error is not None and dead.last_error.message == "lone \\udfff low"

    def test_ids_no_storage_holds_are_simply_not_found(self, broker: Broker) -> None:
        put(broker)
        for job_id in (0, -1, 2**63 - 1, 2**63, -(2**63) - 1, 10**40):
            assert broker.get_job(job_id) is None
            with pytest.raises(JobNotFound, match=f"job {job_id} not found"):
                broker.cancel(job_id)
            with pytest.raises(JobNotFound, match=f"job {job_id} not found"):
                broker.retry(job_id)


__all__ = suite(globals())
