"""Cancel notices: a cancel of a claimed or running job tells the workers, alike on every
broker, so a worker stops the job's attempt at once instead of at its next heartbeat.

The notice carries nothing: a worker that hears it renews its leases, and the claims
found lost are the cancelled ones it holds. So these tests check who is told, and when
not (a cancel of a job no worker holds wakes no worker), and that the fencing holds: the
stopped attempt's outcome and heartbeat are refused.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from ...brokers.base import Broker
from ...outcomes import Succeeded
from .. import BrokerKind
from .helpers import LEASE, S, get, put, suite, take

QUIET = 0.3  # s a test waits to see that no notice came


def listening(broker: Broker) -> tuple[threading.Event, Callable[[], None]]:
    """An event set by each notice from now on (one the subscription itself may fire
    as it starts, for what it missed, is cleared)."""
    heard = threading.Event()
    unsubscribe = broker.subscribe_cancelled(heard.set)
    heard.clear()
    return heard, unsubscribe


class TestCancelNotices:
    @pytest.mark.parametrize("held", ["claimed", "running"])
    def test_a_cancel_of_a_held_job_tells_the_workers(self, broker: Broker, held: str) -> None:
        put(broker)
        claimed = take(broker)
        if held == "running":
            broker.start(claimed.claim)
        heard, unsubscribe = listening(broker)
        try:
            broker.cancel(claimed.job.id, by="ops")
            assert heard.wait(5)
        finally:
            unsubscribe()
        # The worker's heartbeat finds it lost, and its outcome is refused.
        assert broker.heartbeat([claimed.claim], LEASE) == [claimed.claim]
        assert broker.record([], [Succeeded(claimed.claim, "1")]) == [claimed.claim]
        assert get(broker, claimed.job.id).state is S.CANCELLED

    def test_a_cancel_of_a_waiting_job_tells_no_worker(self, broker: Broker) -> None:
        ready, later = put(broker), put(broker, delay=60.0)
        heard, unsubscribe = listening(broker)
        try:
            broker.cancel(ready.id)
            broker.cancel(later.id)
            assert broker.cancel_matching(state=S.READY) == 0
            assert not heard.wait(QUIET)
        finally:
            unsubscribe()

    def test_a_bulk_cancel_of_running_jobs_tells_them_once(self, broker: Broker) -> None:
        claims = []
        for _ in range(3):
            put(broker)
            claimed = take(broker)
            broker.start(claimed.claim)
            claims.append(claimed.claim)
        heard, unsubscribe = listening(broker)
        try:
            assert broker.cancel_matching(state=S.RUNNING, by="ops") == 3
            assert heard.wait(5)
        finally:
            unsubscribe()
        assert set(broker.heartbeat(claims, LEASE)) == set(claims)

    def test_a_cancel_through_another_handle_tells_the_workers(
        self, broker_kind: BrokerKind, open_broker: Callable[[], Broker]
    ) -> None:
        if not broker_kind.shared:
            pytest.skip(f"{broker_kind.name}: handles do not share storage")
        worker, operator = open_broker(), open_broker()
        put(worker)
        claimed = take(worker)
        worker.start(claimed.claim)
        heard, unsubscribe = listening(worker)
        try:
            operator.cancel(claimed.job.id)
            assert heard.wait(5)
        finally:
            unsubscribe()
        assert worker.heartbeat([claimed.claim], LEASE) == [claimed.claim]


__all__ = suite(globals())
