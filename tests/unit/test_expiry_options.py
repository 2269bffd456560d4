"""Expiry at the producer: ``expires_in`` / ``expires_at`` on every enqueue path (task,
with_options, app.enqueue, build_spec, the async calls, enqueue_many through the task's
own ``expires_in``, the CLI), and a clear error for every bad value, nothing stored.
The claim's side is the conformance suite's (sluicegate.testing.conformance.expiry)."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import math
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sluicegate import App, ConfigError
from sluicegate.brokers.memory import MemoryBroker
from sluicegate.testing import FakeClock
from support.cli import Result, run_cli

UTC = dt.UTC


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def app(clock: FakeClock) -> Iterator[App]:
    broker = MemoryBroker(clock=clock)
    app = App(broker=broker, config=False)

    @app.task(queue="q")
    def plain(x: int = 0) -> None: ...

    @app.task(queue="q", expires_in=dt.timedelta(minutes=10))
    def fresh(x: int = 0) -> None: ...

    yield app
    app.close()


def test_every_producer_path_stores_the_expiry(app: App, clock: FakeClock) -> None:
    plain, fresh = app.tasks["plain"], app.tasks["fresh"]
    now = clock.now
    assert plain.enqueue(1).expires_at is None
    assert fresh.enqueue(1).expires_at == now + 600  # the task's own
    assert plain.with_options(expires_in=30).enqueue(1).expires_at == now + 30
    at = dt.datetime.fromtimestamp(now + 45, UTC)
    assert plain.with_options(expires_at=at).enqueue(1).expires_at == now + 45
    assert fresh.with_options(expires_at=now + 5).enqueue(1).expires_at == now + 5  # overrides
    assert app.enqueue("plain", [1], expires_in=dt.timedelta(seconds=7)).expires_at == now + 7
    assert app.enqueue("not_here", expires_in=8).expires_at == now + 8  # a task not registered
    [spec] = [app.build_spec("plain", [1], expires_in=9)]
    assert app.broker.enqueue([spec])[0].expires_at == now + 9
    assert [j.expires_at for j in fresh.enqueue_many([(1,), (2,)])] == [now + 600] * 2
    assert [j.expires_at for j in app.enqueue_many([("fresh", [1], {})])] == [now + 600]
    # a later with_options' expiry replaces the earlier one's, whichever kind
    chained = plain.with_options(expires_in=30).with_options(expires_at=now + 3)
    assert chained.enqueue(1).expires_at == now + 3

    async def produce() -> list[float | None]:
        jobs = [
            await plain.with_options(expires_in=11).enqueue_async(1),
            await app.enqueue_async("plain", [1], expires_at=now + 12),
            *(await fresh.enqueue_many_async([(1,)])),
            await fresh.enqueue_async(1),
        ]
        return [j.expires_at for j in jobs]

    assert asyncio.run(produce()) == [now + 11, now + 12, now + 600, now + 600]


BAD: list[tuple[dict[str, Any], str]] = [
    ({"expires_in": 0}, "expires_in must be more than 0 s and at most"),
    ({"expires_in": -5}, "expires_in must be more than 0 s and at most"),
    ({"expires_in": math.nan}, "expires_in must be a finite number of seconds, not nan"),
    ({"expires_in": math.inf}, "expires_in must be a finite number of seconds, not inf"),
    ({"expires_in": 1e300}, "expires_in must be more than 0 s and at most 3.15576e+09 s"),
    ({"expires_in": "60"}, "expires_in must be seconds or a timedelta, not '60'"),
    ({"expires_in": True}, "expires_in must be seconds or a timedelta, not True"),
    ({"expires_at": math.nan}, "expires_at must be a finite number of seconds, not nan"),
    ({"expires_at": 1e15}, "expires_at must be epoch seconds of the years 1 to 9999"),
    ({"expires_at": dt.datetime(2030, 1, 1)}, "expires_at must be timezone-aware"),
    ({"expires_at": "tomorrow"}, "expires_at must be seconds or a timedelta"),
    ({"expires_in": 60, "expires_at": 2e9}, "give expires_in or expires_at, not both"),
    ({"delay": 60, "expires_in": 60}, "expires_in=60 must be more than delay=60"),
    ({"delay": 90, "expires_in": 60}, "the job would expire before it is due"),
    (
        {"run_at": 2e9, "expires_at": 2e9 - 1},
        "expires_at=1999999999.0 must be after run_at=2000000000.0",
    ),
]


@pytest.mark.parametrize(("options", "problem"), BAD)
def test_bad_expiry_is_refused_by_every_call_and_stores_nothing(
    app: App, options: dict[str, Any], problem: str
) -> None:
    with pytest.raises(ConfigError, match=r"^task 'plain': ") as info:
        app.enqueue("plain", **options)
    assert problem in str(info.value)
    with pytest.raises(ConfigError, match=re.escape(problem[:20])):
        app.tasks["plain"].with_options(**options)
    with pytest.raises(ConfigError, match=re.escape(problem[:20])):
        asyncio.run(app.enqueue_async("plain", **options))
    with pytest.raises(ConfigError, match=re.escape(problem[:20])):
        app.build_spec("plain", **options)
    assert app.broker.list_jobs() == []


def test_a_delay_past_the_tasks_own_expiry_is_refused(app: App) -> None:
    with pytest.raises(ConfigError, match=r"expires_in=600 \(the task's\) must be more than"):
        app.tasks["fresh"].with_options(delay=600).enqueue(1)
    assert app.tasks["fresh"].with_options(delay=600, expires_in=700).enqueue(1).expires_at
    assert len(app.broker.list_jobs()) == 1


@pytest.mark.parametrize("value", [0, -1, math.nan, "10", True])
def test_a_bad_task_level_expires_in_is_refused_at_registration(value: Any) -> None:
    app = App(broker="memory://", config=False)

    def f() -> None: ...

    with pytest.raises(ConfigError, match=r"^task 'f': expires_in must be"):
        app.task(expires_in=value)(f)


def test_cli_enqueue_expires_in(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/jobs.db"

    def cli(*args: str) -> Result:
        return run_cli(*args, "--broker", url, cwd=tmp_path)

    done = cli("enqueue", "t", "--expires-in", "90")
    assert done.returncode == 0, done.stderr
    job_id = done.stdout.strip()
    shown = cli("jobs", "show", job_id, "--json")
    assert shown.returncode == 0, shown.stderr
    job = json.loads(shown.stdout)
    assert job["expires_at"] == pytest.approx(job["enqueued_at"] + 90)
    bad = cli("enqueue", "t", "--expires-in", "-1")
    assert bad.returncode != 0 and "expires_in must be more than 0 s" in bad.stderr
    bad = cli("enqueue", "t", "--delay", "100", "--expires-in", "50")
    assert bad.returncode != 0 and "the job would expire before it is due" in bad.stderr
