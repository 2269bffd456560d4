"""Declaring periodic jobs: @app.periodic, Schedule.of's checks, and the tick walk
(sluicegate.schedules). No broker: the scheduler's tests are tests/worker/test_scheduler_*."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from cronsim import CronSim

from sluicegate import App
from sluicegate.errors import ConfigError
from sluicegate.schedules import Schedule


def make_app() -> App:
    return App(broker="memory://", config=False)


def test_periodic_stacks_above_a_task() -> None:
    app = make_app()

    @app.periodic("*/5 * * * *", tz="Europe/Berlin", args=[1], kwargs={"k": "v"}, queue="cron")
    @app.periodic("0 3 * * *", name="nightly", catch_up=2)
    @app.task(queue="reports")
    def report(n: int = 0, k: str = "") -> None: ...

    assert report.name in app.tasks  # the decorator returns the task itself
    first, nightly = app.schedules["report"], app.schedules["nightly"]
    assert (first.cron, first.tz, first.args, dict(first.kwargs), first.queue, first.catch_up) == (
        "*/5 * * * *", "Europe/Berlin", (1,), {"k": "v"}, "cron", 0,
    )  # fmt: skip
    assert (nightly.task, nightly.catch_up, nightly.queue) == ("report", 2, None)


def test_periodic_refuses_a_plain_function_and_a_second_schedule_of_one_name() -> None:
    app = make_app()
    with pytest.raises(ConfigError, match=r"put it above @app\.task"):

        @app.periodic("* * * * *")
        def plain() -> None: ...

    @app.task
    def t() -> None: ...

    app.periodic("* * * * *")(t)
    with pytest.raises(ConfigError, match="declared twice"):
        app.periodic("0 * * * *")(t)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"cron": "* * * *"}, "has 4 fields"),
        ({"cron": "60 * * * *"}, "bad cron"),
        ({"cron": 5}, "cron must be a string"),
        ({"tz": "Europe/Nowhere"}, "unknown time zone"),
        ({"tz": ""}, "tz must be an IANA"),
        ({"catch_up": -1}, "catch_up must be a whole number"),
        ({"catch_up": True}, "catch_up must be a whole number"),
        ({"catch_up": 10**6}, "catch_up is at most"),
        ({"args": "abc"}, "args must be a list"),
        ({"kwargs": [1]}, "kwargs must be a table"),
        ({"args": [object()]}, "schedule 's'"),
        ({"queue": "a b"}, "invalid queue name"),
        ({"name": "a/b"}, "invalid schedule name"),
    ],
)
def test_bad_declarations_are_named(options: dict[str, object], message: str) -> None:
    fields: dict[str, object] = {"name": "s", "task": "t", "cron": "* * * * *", **options}
    name, task, cron = fields.pop("name"), fields.pop("task"), fields.pop("cron")
    with pytest.raises(ConfigError, match=message):
        Schedule.of(name, task, cron, **fields)  # type: ignore[arg-type]


def test_the_settings_file_declares_schedules_and_they_replace_codes(tmp_path: Path) -> None:
    folder = tmp_path
    (folder / "s.toml").write_text(
        '[schedules.report]\ntask = "report"\ncron = "0 6 * * 1-5"\ntz = "Asia/Tokyo"\n'
        'kwargs = { region = "eu" }\n'
    )
    app = App(broker="memory://", config=str(folder / "s.toml"))

    @app.periodic("* * * * *")
    @app.task
    def report(region: str = "") -> None: ...

    app.configure()
    s = app.schedules["report"]
    assert (s.cron, s.tz, dict(s.kwargs)) == ("0 6 * * 1-5", "Asia/Tokyo", {"region": "eu"})


@pytest.mark.parametrize(
    ("cron", "tz", "span"),
    [
        ("* * * * * *", "UTC", 7200),
        ("*/7 * * * *", "Europe/Berlin", 86400 * 3),
        ("30 2 * * *", "Europe/Berlin", 86400 * 400),
        ("0 0 29 2 *", "UTC", 86400 * 366 * 9),
    ],
)
def test_ticks_are_cronsims_own_whatever_the_window(cron: str, tz: str, span: float) -> None:
    """The windowed walk finds exactly the latest ticks a plain walk from the start does."""
    from zoneinfo import ZoneInfo

    s = Schedule.of("s", "t", cron, tz=tz)
    after = datetime(2026, 1, 1, 0, 0, 30, tzinfo=UTC).timestamp()
    until = after + span
    plain = []
    for when in CronSim(cron, datetime.fromtimestamp(after, UTC).astimezone(ZoneInfo(tz))):
        if when.timestamp() > until:
            break
        plain.append(when.timestamp())
    for most in (1, 3, 50):
        assert s.ticks(after, until, most) == plain[-most:]
    assert s.ticks(until, until, 5) == []
    assert s.next_fire(after) == plain[0]


def test_tick_key_is_the_schedule_and_the_utc_time() -> None:
    s = Schedule.of("nightly", "t", "* * * * *")
    at = datetime(2026, 3, 29, 1, 0, tzinfo=UTC).timestamp()
    assert s.tick_key(at) == "schedule:nightly:2026-03-29T01:00:00Z"


def test_a_tick_job_the_app_refuses_fails_the_scheduler_at_start() -> None:
    """What only the app can check (here its payload limit) is checked when a worker's
    scheduler is made, not at the first tick."""
    from sluicegate.errors import SerializationError
    from sluicegate.worker.services.scheduler import Scheduler

    app = App(broker="memory://", config=False, payload_limit=100)

    @app.periodic("* * * * *", args=["x" * 200])
    @app.task
    def big(text: str) -> None: ...

    app.configure()
    with pytest.raises(SerializationError, match="big"):
        Scheduler(app, app.broker, list(app.schedules.values()))


def test_without_the_extra_the_error_says_how_to_get_it(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "cronsim", None)  # as if not installed
    with pytest.raises(ConfigError, match=r"pip install 'sluicegate\[schedules\]'"):
        Schedule.of("s", "t", "* * * * *")
