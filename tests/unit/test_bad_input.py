"""Bad input at the producer, on every broker (memory, SQLite, PostgreSQL): each case gets
the package's own error naming what is wrong and stores nothing, or has the outcome
README's "Bad input" section documents. The same answer on every broker.

Worker-side cases (tasks that misbehave) are in tests/worker/test_bad_tasks.py, the CLI's
in tests/cli/test_bad_input_cli.py, broker round trips of edge values in the conformance
suite (sluicegate.testing.conformance.edge_values).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import math
import sqlite3
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sluicegate import App, ConfigError, InvalidJobId, JobNotFound, JobState, SerializationError
from sluicegate.brokers.base import Broker
from sluicegate.codec import TOO_DEEP, dumps, loads


@pytest.fixture
def app(broker: Broker) -> Iterator[App]:
    """An App on the broker under test (the conformance fixture: each broker kind)."""
    app = App(broker=broker, config=False)

    @app.task(queue="q")
    def t(*args: Any, **kwargs: Any) -> None: ...

    app.limit("per_account", concurrency=1, partition="account")

    @app.task(queue="q", limits=["per_account"])
    def for_account(account: Any) -> None: ...

    yield app


def nested(levels: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(levels):
        value = [value]
    return value


def assert_nothing_stored(app: App) -> None:
    assert app.broker.list_jobs() == []


# ---- arguments ----------------------------------------------------------------------------
# (args, kwargs, what the error names): refused alike by every enqueue call, sync or async
ARGUMENT_CASES: list[tuple[list[Any], dict[str, Any], str]] = [
    ([math.nan], {}, "argument 0 (Out of range float values are not JSON compliant)"),
    ([1, [math.inf]], {}, "argument 1 (Out of range float values are not JSON compliant)"),
    ([], {"x": -math.inf}, "keyword argument 'x' (Out of range float values"),
    (["ok", "lone \ud800 surrogate"], {}, "argument 1 (a string holds a lone surrogate"),
    ([{"k\udfff": 1}], {}, "argument 0 (a string holds a lone surrogate"),
    ([], {"k\udc00": 1}, "keyword argument 'k\\udc00' (a string holds a lone surrogate"),
    ([], {"v": ["\udfff"]}, "keyword argument 'v' (a string holds a lone surrogate"),
    ([nested(10_000)], {}, f"argument 0 ({TOO_DEEP})"),
    ([], {"deep": nested(10_000)}, f"keyword argument 'deep' ({TOO_DEEP})"),
]


@pytest.mark.parametrize(("args", "kwargs", "named"), ARGUMENT_CASES)
def test_arguments_no_broker_can_store_are_refused_by_name(
    app: App, args: list[Any], kwargs: dict[str, Any], named: str
) -> None:
    with pytest.raises(SerializationError, match=r"^task 't': ") as info:
        app.enqueue("t", args=args, kwargs=kwargs)
    assert named in str(info.value) and "is not JSON-serializable" in str(info.value)
    with pytest.raises(SerializationError):
        app.tasks["t"].enqueue_many([("fine",), *[(a,) for a in args or [kwargs]]])
    assert_nothing_stored(app)


def test_nul_characters_and_deep_nesting_within_the_limit_round_trip(app: App) -> None:
    """NUL is stored escaped inside JSON, so every broker keeps it; 500 levels of nesting
    (well inside the limit) come back whole."""
    args = ["a\x00b", {"\x00key": "\x00"}, nested(500), "emoji \U0001f600", "é\u2028"]
    job = app.enqueue("t", args=args, kwargs={"nul": "x\x00y"})
    assert app.get_job(job.id).args == args
    assert app.get_job(job.id).kwargs == {"nul": "x\x00y"}
    [claimed] = app.broker.claim(["q"], 1, 30, "w")
    assert claimed.problem is None and claimed.job.args == args


# ---- options -----------------------------------------------------------------------------
# (options, the problem named): refused alike by every enqueue call, sync or async
OPTION_CASES: list[tuple[dict[str, Any], str]] = [
    ({"delay": math.nan}, "delay must be a finite number of seconds, not nan"),
    ({"delay": math.inf}, "delay must be a finite number of seconds, not inf"),
    ({"delay": -math.inf}, "delay must be a finite number of seconds, not -inf"),
    ({"delay": 1e300}, "delay must be at most 3.15576e+09 s (a century), not 1e+300"),
    ({"delay": dt.timedelta(days=10**6)}, "delay must be at most"),
    ({"run_at": math.nan}, "run_at must be a finite number of seconds, not nan"),
    ({"run_at": 1e15}, "run_at must be epoch seconds of the years 1 to 9999"),
    ({"run_at": -1e15}, "run_at must be epoch seconds of the years 1 to 9999"),
    ({"priority": 2**31}, "priority 2147483648 is out of range"),
    ({"priority": -(2**31) - 1}, "priority -2147483649 is out of range"),
    ({"priority": 10**100}, "is out of range (-2147483648, 2147483647)"),
    ({"priority": 1.5}, "priority must be an integer, not 1.5"),
    ({"max_attempts": 2**31}, "max_attempts must be at most 2147483647, not 2147483648"),
    ({"max_attempts": 0}, "max_attempts must be an integer >= 1, not 0"),
    ({"unique_key": "a\x00b"}, "unique_key 'a\\x00b' contains a NUL character"),
    ({"unique_key": "a\ud800"}, "unique_key 'a\\ud800' contains a lone surrogate"),
    ({"unique_key": ""}, "unique_key must be a non-empty string, not ''"),
]


@pytest.mark.parametrize(("options", "problem"), OPTION_CASES)
def test_options_no_broker_can_store_are_refused(
    app: App, options: dict[str, Any], problem: str
) -> None:
    with pytest.raises(ConfigError) as info:
        app.enqueue("t", **options)
    assert problem in str(info.value)
    with pytest.raises(ConfigError):
        app.tasks["t"].with_options(**options)
    assert_nothing_stored(app)


def test_limit_partition_values_no_broker_can_store_are_refused(app: App) -> None:
    """A partition value is stored as text inside the job's needs, which PostgreSQL reads
    as JSON in the claim: a NUL or a lone surrogate there would break every claim."""
    task = app.tasks["for_account"]
    with pytest.raises(ConfigError, match="partition value 'a\\\\x00' contains a NUL"):
        task.enqueue("a\x00")
    with pytest.raises(SerializationError, match=r"argument 0 \(a string holds a lone"):
        task.enqueue("b\udfff")  # refused as an argument first
    with pytest.raises(ConfigError, match="limit_key 'c\\\\x00' contains a NUL"):
        task.with_options(limit_key="c\x00").enqueue("ok")
    with pytest.raises(ConfigError, match="limit_key 'd\\\\ud800' contains a lone"):
        task.with_options(limit_key={"per_account": "d\ud800"}).enqueue("ok")
    assert_nothing_stored(app)
    job = task.enqueue("\U0001f600 é")  # any other text is a partition value
    assert job.limits == (("per_account", "\U0001f600 é", 1),)
    app.broker.register_limits(list(app.limits.values()))  # as a worker does
    [claimed] = app.broker.claim(["q"], 1, 30, "w")
    assert claimed.job.id == job.id


def test_delays_at_the_edges(app: App) -> None:
    """A negative delay is no delay (ready at once); zero too; a century is the most."""
    assert app.enqueue("t", delay=-5).state is JobState.READY
    assert app.enqueue("t", delay=dt.timedelta(seconds=-1)).state is JobState.READY
    assert app.enqueue("t", delay=-0.0).state is JobState.READY
    far = app.enqueue("t", delay=100 * 365.25 * 86_400)
    assert far.state is JobState.SCHEDULED
    assert app.get_job(far.id).run_at == pytest.approx(far.enqueued_at + 100 * 365.25 * 86_400)
    last = app.enqueue("t", run_at=dt.datetime(9999, 12, 31, 23, 59, 59, tzinfo=dt.UTC))
    assert app.get_job(last.id).state is JobState.SCHEDULED
    assert len(app.broker.claim(["q"], 10, 30, "w")) == 3  # the three without a delay


def test_priorities_and_attempts_at_the_integer_bounds(app: App) -> None:
    low = app.enqueue("t", priority=2**31 - 1, max_attempts=2**31 - 1)
    high = app.enqueue("t", priority=-(2**31))
    middle = app.enqueue("t")
    assert app.get_job(low.id).max_attempts == 2**31 - 1
    claimed = app.broker.claim(["q"], 3, 30, "w")
    assert [c.job.id for c in claimed] == [high.id, middle.id, low.id]
    assert [c.job.priority for c in claimed] == [-(2**31), 0, 2**31 - 1]


# ---- job ids -------------------------------------------------------------------------------
def test_job_ids_of_the_wrong_type_get_one_answer_on_every_broker(app: App) -> None:
    job = app.enqueue("t")
    assert app.get_job(str(job.id)) == app.get_job(job.id)
    for bad in ("abc", "", "5.0", 5.5, None, True, b"1", [job.id]):
        with pytest.raises(InvalidJobId, match=r"^no job has id .*: a job id is an integer"):
            app.get_job(bad)  # type: ignore[arg-type]
    for missing in (10**6, "1000000", 2**63, -(2**70), -1):
        with pytest.raises(JobNotFound, match=f"^job {missing} not found$"):
            app.get_job(missing)
    with pytest.raises(InvalidJobId):
        app.broker.cancel(5.5)  # type: ignore[arg-type]
    with pytest.raises(InvalidJobId):
        app.broker.retry(None)  # type: ignore[arg-type]
    assert app.get_job(job.id).state is JobState.READY  # nothing changed


# ---- the asyncio producer calls: the same refusals ----------------------------------------
def run_async(app: App, body: Callable[[], Awaitable[None]]) -> None:
    """``body()`` in a fresh loop; what the app's async calls opened in it is closed in it."""

    async def main() -> None:
        try:
            await body()
            assert_nothing_stored(app)
        finally:
            await app.aclose()

    asyncio.run(main())


@pytest.mark.parametrize(("args", "kwargs", "named"), ARGUMENT_CASES)
def test_async_enqueue_refuses_the_same_arguments(
    app: App, args: list[Any], kwargs: dict[str, Any], named: str
) -> None:
    async def body() -> None:
        with pytest.raises(SerializationError, match=r"^task 't': ") as info:
            await app.enqueue_async("t", args=args, kwargs=kwargs)
        assert named in str(info.value)
        with pytest.raises(SerializationError):
            await app.tasks["t"].enqueue_async(*args, **kwargs)
        with pytest.raises(SerializationError):
            await app.tasks["t"].enqueue_many_async([("fine",), *[(a,) for a in args or [kwargs]]])
        assert await app.broker.enqueue_async([]) == []

    run_async(app, body)


@pytest.mark.parametrize(("options", "problem"), OPTION_CASES)
def test_async_enqueue_refuses_the_same_options(
    app: App, options: dict[str, Any], problem: str
) -> None:
    async def body() -> None:
        with pytest.raises(ConfigError) as info:
            await app.enqueue_async("t", **options)
        assert problem in str(info.value)

    run_async(app, body)


def test_async_calls_refuse_unknown_options_tasks_and_ids_alike(app: App) -> None:
    async def body() -> None:
        with pytest.raises(ConfigError, match="unknown option 'dealy'"):
            await app.enqueue_async("t", dealy=5)  # type: ignore[call-arg]
        with pytest.raises(ConfigError, match="task name"):
            await app.enqueue_async("")
        with pytest.raises(ConfigError, match="partitioned by 'account'"):
            await app.enqueue_async("for_account")
        with pytest.raises(InvalidJobId, match=r"^no job has id .*: a job id is an integer"):
            await app.get_job_async("abc")
        with pytest.raises(JobNotFound, match=r"^job 1000000 not found$"):
            await app.get_job_async(10**6)

    run_async(app, body)


# ---- nesting: what a producer could encode, a worker decodes ------------------------------
def test_text_nested_near_the_limit_decodes_deep_in_a_stack() -> None:
    """A worker decodes deeper in its stack than the producer that encoded: text nested as
    deep as a shallow caller could encode still decodes there (on a fresh stack)."""
    text = dumps(nested(950))

    def deep_in_a_stack(depth: int) -> Any:
        return loads(text) if depth == 0 else deep_in_a_stack(depth - 1)

    assert deep_in_a_stack(300) == nested(950)


def test_text_nested_past_any_decoder_is_a_corrupt_row(tmp_path: Path) -> None:
    """Too deep for any decoder (written by something else than sluicegate): loads says
    ValueError, so a claim hands the job over with its problem (it goes dead, the rest of
    the claim is unharmed), as for any corrupt row."""
    with pytest.raises(ValueError, match="nested too deeply"):
        loads("[" * 100_000 + "]" * 100_000)
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    app = App(broker=url, config=False)
    try:
        bad, good = app.enqueue("t", queue="q"), app.enqueue("t", args=[1], queue="q")
        with sqlite3.connect(tmp_path / "jobs.db") as conn:
            conn.execute(
                "UPDATE jobs SET args = ? WHERE id = ?", ("[" * 50_000 + "]" * 50_000, bad.id)
            )
        claimed = {c.job.id: c for c in app.broker.claim(["q"], 2, 30, "w")}
        assert (
            claimed[bad.id].problem is not None and "nested too deeply" in claimed[bad.id].problem
        )
        assert claimed[good.id].problem is None and claimed[good.id].job.args == [1]
    finally:
        app.close()
