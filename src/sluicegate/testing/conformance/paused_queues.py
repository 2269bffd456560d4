"""Paused queues: pause, resume and the paused set, alike on every broker.

A pause is a row in the broker that workers read; the claim itself does not look at it
(workers leave paused queues out of their claims), so these tests check what is stored,
who sees it, and that a pause or resume wakes subscribers the way an enqueue does.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from ...brokers.base import Broker
from ...errors import ConfigError
from .. import BrokerKind, FakeClock
from .helpers import S, put, suite, take


class TestPausedQueues:
    def test_pause_and_resume_a_never_used_queue(self, broker: Broker, clock: FakeClock) -> None:
        """A queue exists by its name: one without jobs can be paused ahead of them."""
        assert broker.paused_queues() == {}
        assert broker.pause_queue("email", by="ops@host") is True
        paused = broker.paused_queues()
        assert list(paused) == ["email"]
        assert paused["email"].queue == "email"
        assert paused["email"].paused_by == "ops@host"
        assert paused["email"].paused_at == pytest.approx(clock(), abs=1e-3)
        assert broker.resume_queue("email") is True
        assert broker.paused_queues() == {}

    def test_pause_twice_keeps_the_first(self, broker: Broker, clock: FakeClock) -> None:
        assert broker.pause_queue("q", by="first") is True
        at = broker.paused_queues()["q"].paused_at
        clock.advance(10)
        assert broker.pause_queue("q", by="second") is False
        kept = broker.paused_queues()["q"]
        assert (kept.paused_by, kept.paused_at) == ("first", at)

    def test_resume_a_queue_that_is_not_paused(self, broker: Broker) -> None:
        assert broker.resume_queue("q") is False
        broker.pause_queue("q")
        assert broker.resume_queue("q") is True
        assert broker.resume_queue("q") is False

    def test_default_by_names_user_and_host(self, broker: Broker) -> None:
        broker.pause_queue("q")
        assert "@" in broker.paused_queues()["q"].paused_by

    def test_many_queues_in_name_order(self, broker: Broker) -> None:
        for name in ("c", "a.b", "B-2", "x_1"):
            broker.pause_queue(name, by="ops")
        assert list(broker.paused_queues()) == sorted(["c", "a.b", "B-2", "x_1"])
        broker.resume_queue("c")
        assert list(broker.paused_queues()) == sorted(["a.b", "B-2", "x_1"])

    @pytest.mark.parametrize("bad", ["", "has space", "a/b", "x" * 128, 5, None])
    def test_bad_queue_names_are_refused(self, broker: Broker, bad: object) -> None:
        for call in (broker.pause_queue, broker.resume_queue):
            with pytest.raises(ConfigError, match="invalid queue name"):
                call(bad)  # type: ignore[arg-type]
        assert broker.paused_queues() == {}

    @pytest.mark.parametrize("bad", ["", "   ", "x" * 201, 5])
    def test_bad_by_is_refused(self, broker: Broker, bad: object) -> None:
        with pytest.raises(ConfigError, match="invalid pause 'by'"):
            broker.pause_queue("q", by=bad)  # type: ignore[arg-type]
        assert broker.paused_queues() == {}

    def test_enqueue_into_a_paused_queue_works(self, broker: Broker) -> None:
        """Producers are never refused: the jobs wait, ready, for the resume. The broker's
        claim does not read pauses (workers leave paused queues out of their claims)."""
        broker.pause_queue("q")
        job = put(broker, queue="q")
        assert job.state is S.READY
        assert broker.stats().queues["q"].counts[S.READY] == 1
        broker.resume_queue("q")
        assert take(broker, "q").job.id == job.id

    @pytest.mark.parametrize("action", ["pause", "resume"])
    def test_pause_and_resume_wake_subscribers(
        self, broker_kind: BrokerKind, open_broker: Callable[[], Broker], action: str
    ) -> None:
        """Workers learn of a pause or resume through the wake-up path, not only by their
        once-a-second read: through another handle where handles share storage."""
        watcher = open_broker()
        actor = open_broker() if broker_kind.shared else watcher
        if action == "resume":
            actor.pause_queue("q")
        fired = threading.Event()
        unsubscribe = watcher.subscribe(fired.set)
        try:
            if action == "pause":
                actor.pause_queue("q")
            else:
                actor.resume_queue("q")
            assert fired.wait(5)
        finally:
            unsubscribe()


def test_pauses_are_shared_and_survive_reopening(
    broker_kind: BrokerKind, open_broker: Callable[[], Broker]
) -> None:
    """The paused state lives in the broker: every handle sees it, and a worker that
    starts later (a new handle) finds it."""
    if not broker_kind.shared:
        pytest.skip(f"{broker_kind.name}: nothing outlives the broker")
    first, other = open_broker(), open_broker()
    first.pause_queue("email", by="ops")
    assert list(other.paused_queues()) == ["email"]
    first.close()
    again = open_broker()
    assert again.paused_queues()["email"].paused_by == "ops"
    other.resume_queue("email")
    assert again.paused_queues() == {}


__all__ = suite(globals())
