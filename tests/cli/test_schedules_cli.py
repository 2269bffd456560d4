"""``sluicegate schedules list MODULE:APP [--json]``: each schedule's next fire time, last
run and last outcome, from code (@app.periodic) and the settings file ([schedules.NAME]).
In process (support.cli.run_cli) on tests/apps/scheduleapp.py and a SQLite file; each
call imports scheduleapp afresh, as a new process would, not the test's own module."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from sluicegate import App
from sluicegate.worker.services.scheduler import Scheduler
from support.cli import Result, run_cli

SETTINGS = """
[schedules.nightly]
task = "tick"
cron = "30 2 * * *"
tz = "Europe/Berlin"
args = ["night"]
catch_up = 2
"""


def sluicegate(cwd: Path, *args: str) -> Result:
    return run_cli(*args, cwd=cwd, env={"COLUMNS": "250"})


def listed(cwd: Path, url: str, *extra: str) -> dict[str, dict[str, Any]]:
    result = sluicegate(
        cwd, "schedules", "list", "scheduleapp:app", "--broker", url, "--json", *extra
    )
    assert result.returncode == 0, result.stderr
    return {line["name"]: line for line in json.loads(result.stdout)}


def test_list_shows_next_fire_last_run_and_outcome(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    (tmp_path / "s.toml").write_text(SETTINGS)
    before = listed(tmp_path, url, "--config", "s.toml")
    assert sorted(before) == ["every_second", "nightly"]
    sec, night = before["every_second"], before["nightly"]
    assert (sec["cron"], sec["tz"], sec["policy"], sec["queue"]) == (
        "* * * * * *",
        "UTC",
        "catch_up = 5",
        None,
    )
    assert (night["tz"], night["policy"], night["args"]) == (
        "Europe/Berlin",
        "catch_up = 2",
        ["night"],
    )
    assert night["next_fire"].endswith(("T02:30:00+01:00", "T02:30:00+02:00", "T03:00:00+02:00"))
    assert sec["last_tick"] is None and sec["last_outcome"] is None and sec["first_seen"] is None

    import scheduleapp

    app = App(broker=url, config=False)
    try:
        with scheduleapp.app.borrowing(app.broker):
            scheduler = Scheduler(
                scheduleapp.app, app.broker, [scheduleapp.app.schedules["every_second"]]
            )
            scheduler.enqueue_due()  # first seen now
            time.sleep(1.1)
            scheduler.enqueue_due()
        # The ticks of the second boundaries crossed in between: one, or two when the
        # first look came late in its second (or the machine is busy); catch_up = 5.
        assert scheduler.enqueued in (1, 2)
        after = listed(tmp_path, url)["every_second"]
        assert after["first_seen"] is not None and after["last_tick"] is not None
        job = app.get_job(after["last_job_id"])
        assert after["last_outcome"] == "ready" == job.state.value
        assert job.unique_key is not None and job.unique_key.startswith("schedule:every_second:")
        # Every tick's job (the last one too, not only the oldest) runs and succeeds.
        claimed = app.broker.claim(["cron"], 5, 30, "w")
        assert len(claimed) == scheduler.enqueued
        for each in claimed:
            app.broker.ack(each.claim, "1")
        assert listed(tmp_path, url)["every_second"]["last_outcome"] == "succeeded"
    finally:
        app.close()

    table = sluicegate(tmp_path, "schedules", "list", "scheduleapp:app", "--broker", url)
    assert table.returncode == 0, table.stderr
    assert "every_second" in table.stdout and "succeeded" in table.stdout


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ('[schedules.x]\ntask = "tick"\n', "schedules.x.cron: missing"),
        (
            '[schedules.x]\ntask = "tick"\ncron = "61 * * * *"\n',
            "schedules.x: schedule 'x': bad cron",
        ),
        ('[schedules.x]\ntask = "tick"\ncron = "* * * *"\n', "has 4 fields"),
        (
            '[schedules.x]\ntask = "tick"\ncron = "* * * * *"\ntz = "Mars/Base"\n',
            "unknown time zone 'Mars/Base'",
        ),
        (
            '[schedules.x]\ntask = "tick"\ncron = "* * * * *"\ncatch_up = -1\n',
            "schedules.x.catch_up: must be",
        ),
        (
            '[schedules.x]\ntask = "nope"\ncron = "* * * * *"\n',
            "schedules.x: task 'nope' is not a task",
        ),
        (
            '[schedules.x]\ntask = "tick"\ncron = "* * * * *"\nevery = 5\n',
            "schedules.x.every: unknown key",
        ),
        (
            '[schedules.x]\ntask = "tick"\ncron = "* * * * *"\nargs = "a"\n',
            "schedules.x.args: must be an array",
        ),
    ],
)
def test_bad_settings_are_named(tmp_path: Path, toml: str, message: str) -> None:
    (tmp_path / "s.toml").write_text(toml)
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    result = sluicegate(
        tmp_path, "schedules", "list", "scheduleapp:app", "--broker", url, "--config", "s.toml"
    )
    assert result.returncode == 2, result.stdout
    assert message in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
