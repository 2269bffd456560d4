"""assert_enqueued / assert_not_enqueued: what they match, and the text of their failures
(the diff a user reads), on the plugin's own SQLite fixture."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from sluicegate import App
from sluicegate.testing import assert_enqueued, assert_not_enqueued


@pytest.fixture
def shop(sluicegate_sqlite: App) -> SimpleNamespace:
    app = sluicegate_sqlite

    @app.task(queue="email")
    def send(to: str, subject: str = "hello") -> None: ...

    @app.task
    def resize(image_id: int) -> None: ...

    return SimpleNamespace(app=app, send=send, resize=resize)


def failure(call: object, *args: object, **kwargs: object) -> str:
    with pytest.raises(AssertionError) as caught:
        call(*args, **kwargs)  # type: ignore[operator]
    return str(caught.value)


def test_a_match_returns_the_jobs_newest_first(shop: SimpleNamespace) -> None:
    first = shop.send.enqueue("a@x")
    second = shop.send.enqueue("a@x")
    shop.send.enqueue("b@x")
    found = assert_enqueued(shop.send, args=("a@x",), kwargs={}, queue="email", count=2)
    assert [job.id for job in found] == [second.id, first.id]
    assert [job.id for job in assert_enqueued("send", app=shop.app, args=["b@x"])] == [3]
    assert len(assert_enqueued(shop.send)) == 3  # nothing named: any job of the task


def test_nothing_of_the_task_lists_the_tasks_that_were_enqueued(shop: SimpleNamespace) -> None:
    shop.resize.enqueue(1)
    shop.resize.enqueue(2)
    shop.app.enqueue("elsewhere", args=[])
    assert failure(assert_enqueued, shop.send, args=["a@x"]) == (
        "expected a job of task 'send' with args=['a@x'] to be enqueued, but none was.\n"
        "No job of that task was enqueued. Tasks enqueued: elsewhere (1), resize (2)."
    )


def test_nothing_enqueued_at_all_says_so(shop: SimpleNamespace) -> None:
    assert failure(assert_enqueued, shop.send) == (
        "expected a job of task 'send' to be enqueued, but none was.\n"
        "No job of that task was enqueued. No job was enqueued at all."
    )


def test_near_misses_come_closest_first_with_what_differs(shop: SimpleNamespace) -> None:
    shop.send.enqueue("b@x")  # job 1: args differ
    shop.send.with_options(queue="bulk").enqueue("a@x", subject="sale")  # 2: kwargs, queue
    shop.send.enqueue("c@x")  # job 3: args differ
    message = failure(assert_enqueued, shop.send, args=["a@x"], kwargs={}, queue="email")
    assert message == (
        "expected a job of task 'send' with args=['a@x'], kwargs={}, queue='email' to be "
        "enqueued, but none was.\n"
        "Jobs of task 'send' enqueued (3), closest first:\n"
        "  job 3 [ready] queue='email' args=['c@x'] kwargs={}\n"
        "      args: expected ['a@x'], got ['c@x']\n"
        "  job 1 [ready] queue='email' args=['b@x'] kwargs={}\n"
        "      args: expected ['a@x'], got ['b@x']\n"
        "  job 2 [ready] queue='bulk' args=['a@x'] kwargs={'subject': 'sale'}\n"
        "      kwargs: expected {}, got {'subject': 'sale'}\n"
        "      queue: expected 'email', got 'bulk'"
    )


def test_many_near_misses_are_cut_short(shop: SimpleNamespace) -> None:
    shop.send.enqueue_many([(f"{n}@x",) for n in range(8)])
    message = failure(assert_enqueued, shop.send, args=["a@x"])
    assert message.count("      args: expected") == 5
    assert message.endswith("  ... and 3 more")


def test_a_wrong_count_lists_the_matches(shop: SimpleNamespace) -> None:
    shop.send.enqueue("a@x")
    assert failure(assert_enqueued, shop.send, args=["a@x"], count=2) == (
        "expected 2 jobs of task 'send' with args=['a@x'] to be enqueued, found 1:\n"
        "  job 1 [ready] queue='email' args=['a@x'] kwargs={}"
    )


def test_assert_not_enqueued(shop: SimpleNamespace) -> None:
    shop.send.enqueue("a@x")
    assert_not_enqueued(shop.send, args=["b@x"])
    assert_not_enqueued(shop.resize)
    assert_not_enqueued(shop.send, queue="bulk")
    assert failure(assert_not_enqueued, shop.send, queue="email") == (
        "expected no job of task 'send' with queue='email' to be enqueued, but found 1:\n"
        "  job 1 [ready] queue='email' args=['a@x'] kwargs={}"
    )


def test_bad_expectations_are_clear_errors(shop: SimpleNamespace) -> None:
    with pytest.raises(TypeError, match=r"args must be a list or tuple of arguments, not 'a@x'"):
        assert_enqueued(shop.send, args="a@x")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"a task given by name \('send'\) needs app="):
        assert_enqueued("send")
    with pytest.raises(TypeError, match="task must be a task"):
        assert_enqueued(42)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="args must be JSON, as an enqueue stores it"):
        assert_enqueued(shop.send, args=[object()])
    with pytest.raises(ValueError, match=r"count must be an integer >= 1 \(use assert_not_"):
        assert_enqueued(shop.send, count=0)
