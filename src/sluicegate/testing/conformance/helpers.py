"""The suite's fixtures, all built from the user's ``broker_kind``, and the helpers its
cases share: specs, jobs brought to a state through the broker's own operations."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from ...brokers.base import Broker
from ...codec import encode_payload
from ...job import ClaimedJob, ErrorInfo, Job, JobSpec, JobState
from .. import BrokerKind, FakeClock


# ---- fixtures, all built from the user's broker_kind ------------------------------------
@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def broker_url(broker_kind: BrokerKind, tmp_path: Path) -> str:
    return broker_kind.url(tmp_path)


@pytest.fixture
def open_broker(
    broker_kind: BrokerKind, broker_url: str, clock: FakeClock
) -> Iterator[Callable[[], Broker]]:
    """Opens more handles on the test's storage (same URL, same fake clock); closes them all."""
    opened: list[Broker] = []

    def open_one() -> Broker:
        broker = broker_kind.open(broker_url, clock)
        opened.append(broker)
        return broker

    yield open_one
    for broker in reversed(opened):
        broker.close()


@pytest.fixture
def broker(open_broker: Callable[[], Broker]) -> Broker:
    """A fresh, empty broker of the kind under test, on the fake ``clock``."""
    return open_broker()


S = JobState
LEASE = 30.0
BOOM = ErrorInfo("ValueError", "boom", "Traceback ...")


# ---- helpers ----------------------------------------------------------------------
def spec(
    task: str = "t",
    queue: str = "q",
    args: Sequence[Any] = (),
    kwargs: dict[str, Any] | None = None,
    **options: Any,
) -> JobSpec:
    args_json, kwargs_json = encode_payload(task, list(args), kwargs or {})
    return JobSpec(task=task, queue=queue, args_json=args_json, kwargs_json=kwargs_json, **options)


def put(broker: Broker, **fields: Any) -> Job:
    [job] = broker.enqueue([spec(**fields)])
    return job


def take(broker: Broker, queue: str = "q", lease: float = LEASE, worker: str = "w1") -> ClaimedJob:
    """Claim exactly one job of ``queue``."""
    [claimed] = broker.claim([queue], 1, lease, worker)
    assert claimed.problem is None
    return claimed


def get(broker: Broker, job_id: int) -> Job:
    job = broker.get_job(job_id)
    assert job is not None
    return job


def state(broker: Broker, job_id: int) -> JobState:
    return get(broker, job_id).state


def make_state(broker: Broker, clock: FakeClock, target: JobState, **fields: Any) -> Job:
    """A job of queue ``q`` brought to ``target`` through the broker's own operations."""
    if target is S.SCHEDULED:
        return put(broker, delay=60.0, **fields)
    job = put(broker, **fields)
    if target is S.READY:
        return job
    if target is S.CANCELLED:
        return broker.cancel(job.id)
    claimed = broker.claim(["q"], 1, LEASE, "w1")
    assert [c.job.id for c in claimed] == [job.id], "make_state needs queue q to be empty"
    claim = claimed[0].claim
    if target is S.CLAIMED:
        return get(broker, job.id)
    if target is S.RUNNING:
        broker.start(claim)
    elif target is S.SUCCEEDED:
        broker.ack(claim, "null")
    elif target is S.DEAD:
        broker.fail(claim, BOOM, None)
    return get(broker, job.id)


def suite(namespace: dict[str, Any]) -> list[str]:
    """A module's ``__all__``: its test classes and test functions, in their order."""
    return [name for name in list(namespace) if name.startswith(("Test", "test_"))]


__all__ = ["broker", "broker_url", "clock", "open_broker"]
