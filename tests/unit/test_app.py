"""The producer API (App, Task, with_options, enqueue_many) on memory:// and SQLite files."""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sluicegate import (
    App,
    ConfigError,
    InvalidJobId,
    JobNotFound,
    JobState,
    SerializationError,
    Task,
)
from sluicegate.brokers import broker_from_url
from sluicegate.brokers.memory import MemoryBroker
from sluicegate.retry import RetryPolicy
from sluicegate.task import EnqueueOptions, EnqueueOptionsDict, TaskOptions, TaskOptionsDict

S = JobState


@pytest.fixture(params=["memory", "sqlite"])
def app(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[App]:
    url = "memory://" if request.param == "memory" else f"sqlite:///{tmp_path / 'app.db'}"
    app = App(broker=url)
    yield app
    app.close()


def assert_nothing_stored(app: App) -> None:
    assert app.broker.list_jobs() == []
    assert app.broker.stats().to_dict() == {"queues": {}}


def assert_fresh_read_matches(app: App, job: Any) -> None:
    assert app.get_job(job.id) == job


# ---- registering tasks ---------------------------------------------------------------
def test_task_decorator_forms(app: App) -> None:
    @app.task
    def plain(x: int) -> int:
        return x * 2

    @app.task(
        name="renamed",
        queue="email",
        max_attempts=5,
        priority=-2,
        timeout=3.5,
        retry_on=[KeyError],
        backoff_base=2,
        backoff_max=60,
    )
    def configured() -> None: ...

    assert isinstance(plain, Task) and plain.name == "plain"
    assert plain(21) == 42  # calling a task runs it here and now
    assert app.tasks == {"plain": plain, "renamed": configured}
    opts = configured.options
    assert (opts.queue, opts.max_attempts, opts.priority, opts.timeout) == ("email", 5, -2, 3.5)
    assert opts.retry == RetryPolicy(backoff_base=2, backoff_max=60, retry_on=(KeyError,))
    assert opts.retry_on == (KeyError,)
    # max_attempts is stored once: the retry policy has no copy to disagree with
    assert not hasattr(opts.retry, "max_attempts")


def test_option_dicts_name_the_fields_of_the_option_values() -> None:
    """The TypedDicts the signatures unpack and the checked values have the same names."""
    task_fields = {f.name for f in dataclasses.fields(TaskOptions) if f.init}
    enqueue_fields = {f.name for f in dataclasses.fields(EnqueueOptions)}
    assert set(TaskOptionsDict.__annotations__) == task_fields
    assert set(EnqueueOptionsDict.__annotations__) == enqueue_fields


def test_duplicate_task_registration_is_refused(app: App) -> None:
    @app.task
    def dup() -> None: ...

    with pytest.raises(ConfigError, match="'dup' is registered twice"):

        @app.task
        def dup() -> None: ...

    with pytest.raises(ConfigError, match="registered twice"):
        app.task(name="dup")(lambda: None)


@pytest.mark.parametrize("name", ["", "has space", "a:b", "x/y", "a=b", "é", "n" * 128])
def test_invalid_task_names_are_refused(app: App, name: str) -> None:
    with pytest.raises(ConfigError, match="invalid task name"):
        app.task(name=name)(lambda: None)
    with pytest.raises(ConfigError, match="invalid task name"):
        app.enqueue(name)
    assert name not in app.tasks
    assert_nothing_stored(app)


@pytest.mark.parametrize("queue", ["", "bad queue", "a:b", "a,b", "q" * 128])
def test_invalid_queue_names_are_refused(app: App, queue: str) -> None:
    with pytest.raises(ConfigError, match="invalid queue name"):
        app.task(queue=queue)(lambda: None)

    @app.task
    def fine() -> None: ...

    with pytest.raises(ConfigError, match="invalid queue name"):
        fine.with_options(queue=queue).enqueue()
    with pytest.raises(ConfigError, match="invalid queue name"):
        app.enqueue("fine", queue=queue)
    assert_nothing_stored(app)


TIMEOUT = "timeout must be a number of seconds > 0 (at most a century)"


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        ({"max_attempts": 0}, "max_attempts must be an integer >= 1, not 0"),
        ({"max_attempts": 2**31}, "max_attempts must be at most 2147483647, not 2147483648"),
        ({"max_attempts": True}, "max_attempts must be an integer >= 1, not True"),
        ({"priority": 1.5}, "priority must be an integer, not 1.5"),
        ({"priority": 2**31}, "priority 2147483648 is out of range"),
        ({"timeout": 0}, f"{TIMEOUT}, not 0"),
        ({"timeout": -1}, f"{TIMEOUT}, not -1"),
        ({"timeout": True}, f"{TIMEOUT}, not True"),
        ({"timeout": float("inf")}, f"{TIMEOUT}, not inf"),
        ({"timeout": float("nan")}, f"{TIMEOUT}, not nan"),
        ({"timeout": 1e10}, f"{TIMEOUT}, not 10000000000.0"),
        ({"backoff_base": float("inf")}, "backoff_base must be a number >= 0, not inf"),
        ({"backoff_max": 1e300}, "backoff_max must be at most 3.15576e+09, not 1e+300"),
        ({"retry_on": ValueError}, "retry_on must be a tuple of exception types"),
        ({"retry_on": (ValueError, int)}, "retry_on must be a tuple of exception types"),
        ({"backoff_base": -1}, "backoff_base must be a number >= 0, not -1"),
        ({"backoff_max": "1h"}, "backoff_max must be a number >= 0, not '1h'"),
        ({"transactional": "yes"}, "transactional must be True or False"),
        ({"retries": 3}, "unknown option 'retries' (options: backoff_base, backoff_max,"),
    ],
)
def test_invalid_task_options_are_refused(app: App, options: dict[str, Any], problem: str) -> None:
    def job() -> None: ...

    with pytest.raises(ConfigError) as err:
        app.task(**options)(job)
    assert str(err.value).startswith(f"task 'job': {problem}"), err.value
    assert app.tasks == {}


# ---- enqueueing ----------------------------------------------------------------------------
def test_task_enqueue_stores_a_ready_job(app: App) -> None:
    @app.task(queue="email", max_attempts=4, priority=2)
    def send(user_id: int, *, template: str) -> None: ...

    job = send.enqueue(42, template="reset")
    assert (job.task, job.queue, job.state) == ("send", "email", S.READY)
    assert (job.args, job.kwargs) == ([42], {"template": "reset"})
    assert (job.max_attempts, job.priority, job.attempts) == (4, 2, 0)
    assert job.run_at == job.enqueued_at
    assert_fresh_read_matches(app, job)


def test_enqueue_returns_what_a_fresh_read_sees(app: App) -> None:
    """The returned job is the stored one: JSON values, not the caller's Python objects."""

    @app.task
    def t(*args: Any, **kwargs: Any) -> None: ...

    pair = [1, 2]
    job = t.enqueue((1, 2), {"n": (3,)}, pair, k=(4, 5))
    assert job.args == [[1, 2], {"n": [3]}, [1, 2]] and job.kwargs == {"k": [4, 5]}
    pair.append(3)  # the caller's list changing later does not change the job
    assert job.args[2] == [1, 2]
    assert_fresh_read_matches(app, job)


def test_with_options_delay_schedules(app: App) -> None:
    @app.task
    def later() -> None: ...

    job = later.with_options(delay=60).enqueue()
    assert job.state is S.SCHEDULED and job.run_at == job.enqueued_at + 60
    other = later.with_options(delay=dt.timedelta(minutes=2)).enqueue()
    assert other.state is S.SCHEDULED and other.run_at == other.enqueued_at + 120
    now = later.with_options(delay=-5).enqueue()  # negative delays mean now
    assert now.state is S.READY
    assert app.broker.next_due(["default"]) is not None
    for j in (job, other, now):
        assert_fresh_read_matches(app, j)


def test_with_options_run_at(app: App) -> None:
    @app.task
    def at() -> None: ...

    when = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
    job = at.with_options(run_at=when).enqueue()
    assert job.state is S.SCHEDULED and job.run_at == when.timestamp()
    past = at.with_options(run_at=when - dt.timedelta(days=1)).enqueue()
    assert past.state is S.READY
    epoch = at.with_options(run_at=when.timestamp()).enqueue()
    assert epoch.state is S.SCHEDULED and epoch.run_at == when.timestamp()


def test_naive_datetime_run_at_is_refused(app: App) -> None:
    @app.task
    def at() -> None: ...

    with pytest.raises(ConfigError, match="timezone-aware"):
        at.with_options(run_at=dt.datetime(2030, 1, 1)).enqueue()
    with pytest.raises(ConfigError, match="timezone-aware"):
        app.enqueue("at", run_at=dt.datetime(2030, 1, 1))
    assert_nothing_stored(app)


def test_delay_and_run_at_together_are_refused(app: App) -> None:
    with pytest.raises(ConfigError, match="delay or run_at"):
        app.enqueue("t", delay=1, run_at=dt.datetime.now(dt.UTC))
    assert_nothing_stored(app)


@pytest.mark.parametrize("delay", ["10", True, [5]])
def test_bad_delay_types_are_refused(app: App, delay: Any) -> None:
    with pytest.raises(ConfigError, match="delay must be seconds"):
        app.enqueue("t", delay=delay)
    assert_nothing_stored(app)


def test_with_options_priority_queue_and_attempts(app: App) -> None:
    @app.task(queue="normal", priority=5)
    def work(n: int) -> None: ...

    low = work.enqueue(1)
    high = work.with_options(priority=-1).enqueue(2)
    moved = work.with_options(queue="urgent", max_attempts=9).enqueue(3)
    assert (low.priority, high.priority) == (5, -1)
    assert (moved.queue, moved.max_attempts, moved.priority) == ("urgent", 9, 5)
    claimed = app.broker.claim(["normal"], 5, 30, "w")
    assert [c.job.args for c in claimed] == [[2], [1]]
    chained = work.with_options(queue="urgent").with_options(priority=0).enqueue(4)
    assert (chained.queue, chained.priority) == ("urgent", 0)


def test_with_options_unique_key(app: App) -> None:
    @app.task
    def once(n: int) -> None: ...

    first = once.with_options(unique_key="report-1").enqueue(1)
    again = once.with_options(unique_key="report-1").enqueue(2)
    other = once.with_options(unique_key="report-2").enqueue(3)
    assert again.id == first.id and again.args == [1]
    assert other.id != first.id
    assert len(app.broker.list_jobs()) == 2
    app.broker.cancel(first.id)
    assert once.with_options(unique_key="report-1").enqueue(4).id not in (first.id, other.id)


@pytest.mark.parametrize("key", ["", 5])
def test_bad_unique_keys_are_refused(app: App, key: Any) -> None:
    with pytest.raises(ConfigError, match="unique_key"):
        app.enqueue("t", unique_key=key)
    assert_nothing_stored(app)


def test_with_options_rejects_unknown_options(app: App) -> None:
    @app.task
    def t() -> None: ...

    with pytest.raises(ConfigError, match=r"'t'.*bogus"):
        t.with_options(bogus=1)  # type: ignore[call-arg]
    with pytest.raises(ConfigError, match=r"^task 't': unknown option 'bogus' \(options: conn"):
        t.with_options(delay=1).with_options(bogus=1)  # type: ignore[call-arg]
    with pytest.raises(ConfigError, match=r"^task 'named': unknown option 'dely'"):
        app.enqueue("named", dely=5)  # type: ignore[call-arg]
    with pytest.raises(ConfigError, match=r"^task 'named': unknown option 'dely'"):
        app.build_spec("named", dely=5)  # type: ignore[call-arg]
    assert_nothing_stored(app)


def test_chained_options_are_checked_together(app: App) -> None:
    @app.task
    def t() -> None: ...

    with pytest.raises(ConfigError, match=r"^task 't': give delay or run_at, not both"):
        t.with_options(delay=1).with_options(run_at=dt.datetime.now(dt.UTC))
    assert t.with_options(delay=1).with_options(delay=None, run_at=0.0).enqueue().run_at == 0.0


def test_build_spec_takes_the_enqueue_options(app: App) -> None:
    @app.task(queue="email", priority=3)
    def mail(n: int) -> None: ...

    spec = app.build_spec("mail", [1], delay=30, max_attempts=2, unique_key="k")
    assert (spec.queue, spec.priority, spec.max_attempts) == ("email", 3, 2)
    assert (spec.delay, spec.unique_key, spec.args_json) == (30.0, "k", "[1]")
    assert app.broker.enqueue([spec])[0].state is S.SCHEDULED


@pytest.mark.parametrize("priority", [1.5, "1", True, -(2**31) - 1])
def test_bad_priorities_are_refused(app: App, priority: Any) -> None:
    with pytest.raises(ConfigError, match="priority"):
        app.enqueue("t", priority=priority)
    assert_nothing_stored(app)


def test_enqueue_by_name_of_an_unregistered_task(app: App) -> None:
    assert "elsewhere" not in app.tasks
    job = app.enqueue("elsewhere", args=[1], kwargs={"a": "b"})
    assert (job.task, job.queue, job.state) == ("elsewhere", "default", S.READY)
    assert (job.args, job.kwargs, job.max_attempts, job.priority) == ([1], {"a": "b"}, 3, 0)
    routed = app.enqueue("elsewhere", queue="far", priority=3, max_attempts=1, delay=30)
    assert (routed.queue, routed.priority, routed.max_attempts) == ("far", 3, 1)
    assert routed.state is S.SCHEDULED and (routed.args, routed.kwargs) == ([], {})
    assert_fresh_read_matches(app, routed)


def test_enqueue_by_name_uses_the_registered_defaults(app: App) -> None:
    @app.task(queue="email", max_attempts=6, priority=1)
    def mail() -> None: ...

    job = app.enqueue("mail")
    assert (job.queue, job.max_attempts, job.priority) == ("email", 6, 1)


def test_task_enqueue_many(app: App) -> None:
    @app.task(queue="bulk")
    def add(a: int, b: int) -> int:
        return a + b

    jobs = add.enqueue_many([(1, 2), [3, 4], (5, 6)])
    assert [j.args for j in jobs] == [[1, 2], [3, 4], [5, 6]]
    assert all(j.queue == "bulk" and j.state is S.READY for j in jobs)
    assert len({j.id for j in jobs}) == 3
    assert add.enqueue_many([]) == []
    for job in jobs:
        assert_fresh_read_matches(app, job)


def test_app_enqueue_many_mixes_tasks(app: App) -> None:
    @app.task(queue="a")
    def one(x: int) -> None: ...

    jobs = app.enqueue_many([("one", [1], {}), ("not_here", [], {"k": 2})])
    assert [(j.task, j.queue, j.args, j.kwargs) for j in jobs] == [
        ("one", "a", [1], {}),
        ("not_here", "default", [], {"k": 2}),
    ]


def test_enqueue_many_is_all_or_nothing(app: App) -> None:
    @app.task
    def t(x: Any) -> None: ...

    with pytest.raises(SerializationError, match="argument 0"):
        t.enqueue_many([(1,), (object(),), (3,)])
    with pytest.raises(ConfigError, match="invalid task name"):
        app.enqueue_many([("t", [1], {}), ("bad name", [], {})])
    assert_nothing_stored(app)


# ---- bad payloads lose nothing and store nothing ------------------------------------------
def test_non_json_positional_argument_is_named(app: App) -> None:
    @app.task
    def t(*args: Any) -> None: ...

    with pytest.raises(SerializationError, match=r"task 't': argument 1 .*not JSON-serializable"):
        t.enqueue(1, object(), 3)
    with pytest.raises(SerializationError, match="argument 0"):
        t.enqueue(float("nan"))
    with pytest.raises(SerializationError, match="argument 2"):
        app.enqueue("t", args=[1, 2, {b"k"}])
    assert_nothing_stored(app)


def test_non_json_keyword_argument_is_named(app: App) -> None:
    @app.task
    def t(**kwargs: Any) -> None: ...

    with pytest.raises(SerializationError, match="keyword argument 'when'"):
        t.enqueue(ok=1, when=dt.datetime.now())
    with pytest.raises(SerializationError, match="keyword argument 'x'"):
        t.with_options(delay=5).enqueue(x=float("inf"))
    with pytest.raises(SerializationError, match="keyword names must be strings"):
        app.enqueue("t", kwargs={1: "x"})
    assert_nothing_stored(app)


def test_args_and_kwargs_shapes(app: App) -> None:
    with pytest.raises(SerializationError, match="args must be a list"):
        app.enqueue("t", args="abc")
    with pytest.raises(SerializationError, match="kwargs must be an object"):
        app.enqueue("t", kwargs=[("a", 1)])  # type: ignore[arg-type]
    assert_nothing_stored(app)


def test_payload_over_the_limit_is_refused(tmp_path: Path) -> None:
    for url in ("memory://", f"sqlite:///{tmp_path / 'limit.db'}"):
        app = App(broker=url, payload_limit=100)
        try:

            @app.task
            def big(blob: str) -> None: ...

            with pytest.raises(SerializationError, match="over the limit of 100 bytes"):
                big.enqueue("x" * 200)
            with pytest.raises(SerializationError, match="over the limit"):
                big.enqueue_many([("small",), ("y" * 200,)])
            assert_nothing_stored(app)
            assert big.enqueue("x" * 50).args == ["x" * 50]
        finally:
            app.close()


# ---- reading back ------------------------------------------------------------------------
def test_get_job_of_a_missing_id(app: App) -> None:
    with pytest.raises(JobNotFound, match="job 999 not found"):
        app.get_job(999)


def test_get_job_by_its_text(app: App) -> None:
    """A web handler passes the id from its URL as it came: text."""
    job = app.enqueue("t", args=[])
    assert app.get_job(str(job.id)) == job
    with pytest.raises(InvalidJobId, match=r"no job has id 'abc': a job id is an integer"):
        app.get_job("abc")
    with pytest.raises(JobNotFound, match="job 999 not found"):
        app.get_job("999")


def test_get_job_is_a_fresh_read(app: App) -> None:
    job = app.enqueue("t")
    [claimed] = app.broker.claim(["default"], 1, 30, "w")
    app.broker.ack(claimed.claim, '"done"')
    assert job.state is S.READY  # the snapshot does not change
    fresh = app.get_job(job.id)
    assert (fresh.state, fresh.result, fresh.attempts) == (S.SUCCEEDED, "done", 1)


# ---- brokers by URL ------------------------------------------------------------------------
def test_broker_opens_lazily(tmp_path: Path) -> None:
    path = tmp_path / "lazy.db"
    app = App(broker=f"sqlite:///{path}")
    assert app.broker_url == f"sqlite:///{path}" and not path.exists()
    try:
        app.enqueue("t")
        assert path.exists()
    finally:
        app.close()


def test_broker_instance_and_env_default(monkeypatch: pytest.MonkeyPatch) -> None:
    broker = MemoryBroker()
    assert App(broker=broker).broker is broker
    monkeypatch.setenv("SLUICEGATE_BROKER", "memory://")
    assert App().broker_url == "memory://"
    monkeypatch.delenv("SLUICEGATE_BROKER")
    assert App().broker_url == "sqlite:///sluicegate.db"


@pytest.mark.parametrize(
    "url",
    [
        "nothing",
        "redis://localhost",
        "sqlite://host/x.db",
        "sqlite:///",
        "sqlite:///:memory:",
        "sqlite:///x.db?bogus=1",
        "sqlite:///x.db?synchronous=sometimes",
        "sqlite:////no/such/folder/x.db",
    ],
)
def test_bad_broker_urls(url: str) -> None:
    with pytest.raises(ConfigError):
        broker_from_url(url)


# ---- the options are typed: mypy --strict checks callers ----------------------------------
TYPED_CALLERS = """
import datetime as dt
from sluicegate import App

app = App(broker="memory://")

@app.task
def plain(x: int) -> int:
    return x

@app.task(queue="email", max_attempts=5, timeout=30, retry_on=(ConnectionError,))
def send_reset(user_id: int) -> None: ...

send_reset.enqueue(42)
send_reset.with_options(delay=60, priority=-1, unique_key="k").enqueue(42)
send_reset.with_options(queue="q").with_options(run_at=dt.datetime.now(dt.UTC)).enqueue(1)
send_reset.enqueue_many([(1,), (2,), (3,)])
app.enqueue("send_reset", args=[42], kwargs={}, queue=None, delay=None, priority=None,
            unique_key=None)
app.enqueue("send_reset", [1], max_attempts=2, connection=None)
app.build_spec("send_reset", [1], delay=dt.timedelta(seconds=3))

app.task(max_attemps=5)  # E: call-overload
app.task(priority="high")  # E: call-overload
send_reset.with_options(delya=60)  # E: call-arg
send_reset.with_options(priority="low")  # E: arg-type
send_reset.with_options(queue="q").with_options(unique=1)  # E: call-arg
app.enqueue("x", dealy=1)  # E: call-arg
app.build_spec("x", queue=3)  # E: arg-type
send_reset.enqueue("not an int")  # E: arg-type
"""


def test_option_names_and_types_are_checked_by_mypy(tmp_path: Path) -> None:
    """Callers of the README surface type-check; a misspelt or mistyped option does not."""
    source = tmp_path / "callers.py"
    source.write_text(TYPED_CALLERS)
    command = [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--no-error-summary"]
    result = subprocess.run(
        [*command, "--cache-dir", os.devnull, str(source)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    found: dict[int, set[str]] = {}
    for line in result.stdout.splitlines():
        if match := re.match(r".*callers\.py:(\d+): error: .*\[([a-z-]+)\]$", line):
            found.setdefault(int(match[1]), set()).add(match[2])
    expected = {
        number: {text.partition("# E: ")[2]}
        for number, text in enumerate(TYPED_CALLERS.splitlines(), start=1)
        if "# E: " in text
    }
    assert found == expected, result.stdout
