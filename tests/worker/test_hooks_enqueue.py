"""on_enqueue and the hook registration API, in the producer's process, on both brokers.

on_enqueue runs once per stored job, after the broker stored it (the hook can read the job
back), for every way of enqueueing through an app: ``app.enqueue``, ``task.enqueue``,
``with_options(...).enqueue``, ``enqueue_many`` and their asyncio forms. A hook that raises
is logged and the enqueue still returns its jobs. Bad registrations are ConfigErrors.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from typing import Any

import pytest

from sluicegate import App, ConfigError, Job, JobState
from support.brokers import over_brokers

pytestmark = over_brokers


@pytest.fixture
def app(db_url: str) -> Iterator[App]:
    app = App(broker=db_url, config=False)
    yield app
    app.close()


def test_on_enqueue_sees_each_stored_job_sync_async_and_bulk(app: App) -> None:
    seen: list[tuple[int, str, str]] = []

    @app.task(queue="q")
    def add(a: int, b: int) -> int:
        return a + b

    @app.on_enqueue
    def stored(job: Job) -> None:
        found = app.broker.get_job(job.id)  # the broker has it already
        assert found is not None and found.state is JobState.READY
        seen.append((job.id, job.task, job.queue))

    one = app.enqueue("add", [1, 2])
    two = add.enqueue(3, 4)
    three = add.with_options(queue="other").enqueue(5, 6)
    many = app.enqueue_many([("add", [1, 1], {}), ("add", [2, 2], {})])
    bulk = add.enqueue_many([[7, 7], [8, 8]])

    async def produce() -> list[Job]:
        a = await app.enqueue_async("add", [9, 9])
        b = await add.enqueue_async(10, 10)
        c = await add.with_options(priority=1).enqueue_async(11, 11)
        d = await app.enqueue_many_async([("add", [12, 12], {}), ("add", [13, 13], {})])
        e = await add.enqueue_many_async([[14, 14]])
        await app.aclose()
        return [a, b, c, *d, *e]

    later = asyncio.run(produce())
    jobs = [one, two, three, *many, *bulk, *later]
    assert seen == [(job.id, job.task, job.queue) for job in jobs]
    assert three.queue == "other"


def test_a_raising_on_enqueue_hook_is_logged_and_the_job_is_returned(
    app: App, caplog: pytest.LogCaptureFixture
) -> None:
    calls: list[int] = []

    @app.hook("on_enqueue")
    def broken(job: Job) -> None:
        raise RuntimeError("on_enqueue fails")

    app.on_enqueue(lambda job: calls.append(job.id))  # the next hook still runs

    with caplog.at_level(logging.ERROR, logger="sluicegate.hooks"):
        job = app.enqueue("anything", [1])
        batch = asyncio.run(enqueue_many_async(app))
    assert app.get_job(job.id).state is JobState.READY
    assert calls == [job.id, *(j.id for j in batch)]
    failures = [r for r in caplog.records if "hook on_enqueue" in r.getMessage()]
    assert len(failures) == 3
    assert "broken raised" in failures[0].getMessage()
    assert failures[0].exc_info is not None and "on_enqueue fails" in str(failures[0].exc_info[1])


async def enqueue_many_async(app: App) -> list[Job]:
    try:
        return await app.enqueue_many_async([("anything", [2], {}), ("anything", [3], {})])
    finally:
        await app.aclose()


def test_enqueue_headers_are_stored_with_each_job_later_hooks_winning(app: App) -> None:
    seen: list[tuple[str, str]] = []

    @app.enqueue_headers
    def first(task: str, queue: str) -> dict[str, str]:
        seen.append((task, queue))
        return {"origin": "first", "task": task}

    app.hook("enqueue_headers")(lambda task, queue: {"origin": "second"})
    app.enqueue_headers(lambda task, queue: None)  # nothing to add

    job = app.enqueue("anything", queue="elsewhere")
    [bulk] = app.enqueue_many([("other", [], {})])
    assert job.headers == {"origin": "second", "task": "anything"}
    assert app.get_job(job.id).headers == job.headers
    assert app.get_job(bulk.id).headers == {"origin": "second", "task": "other"}
    assert seen == [("anything", "elsewhere"), ("other", "default")]


@pytest.mark.parametrize(
    "bad",
    [
        lambda t, q: 1 / 0,
        lambda t, q: {"n": 1},
        lambda t, q: ["traceparent"],
        lambda t, q: {3: "x"},
    ],
)
def test_a_failing_enqueue_headers_hook_is_logged_and_left_out(
    app: App, bad: Any, caplog: pytest.LogCaptureFixture
) -> None:
    app.enqueue_headers(bad)
    app.enqueue_headers(lambda task, queue: {"kept": "yes"})
    with caplog.at_level(logging.ERROR, logger="sluicegate.hooks"):
        job = app.enqueue("anything")
    assert app.get_job(job.id).headers == {"kept": "yes"}
    [failure] = [r for r in caplog.records if "hook enqueue_headers" in r.getMessage()]
    assert failure.exc_info is not None


def test_hooks_run_in_registration_order(app: App) -> None:
    order: list[str] = []
    app.on_enqueue(lambda job: order.append("first"))
    app.hook("on_enqueue")(lambda job: order.append("second"))
    app.enqueue("anything")
    assert order == ["first", "second"]


@pytest.mark.parametrize("kind", ["on_finish", "", None, "before-job"])
def test_an_unknown_hook_kind_is_refused_naming_the_kinds(app: App, kind: Any) -> None:
    with pytest.raises(
        ConfigError, match=r"unknown hook .*the hooks are: enqueue_headers, on_enqueue, "
    ):
        app.hook(kind)


def test_a_hook_must_be_callable(app: App) -> None:
    with pytest.raises(ConfigError, match="hook 'after_job' must be callable, not str"):
        app.hook("after_job")("not a function")  # type: ignore[type-var]
    with pytest.raises(ConfigError, match="must be callable"):
        app.on_dead(42)  # type: ignore[type-var]
    assert not app.hooks
