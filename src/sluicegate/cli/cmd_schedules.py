"""Periodic jobs: `schedules list` (docs/schedules.md)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..app import App
from ..brokers import ScheduleStates
from .common import broker_option, friendly_errors, load_configured_app, open_app


def iso(at: float | None, tz: str = "UTC") -> str | None:
    if at is None:
        return None
    return datetime.fromtimestamp(at, UTC).astimezone(ZoneInfo(tz)).isoformat()


def schedule_lines(app: App, states: ScheduleStates) -> list[dict[str, Any]]:
    """Each schedule: its declaration, next fire time, last run and that job's state."""
    lines = []
    for name in sorted(set(app.schedules) | set(states.rows)):
        schedule, row = app.schedules.get(name), states.rows.get(name)
        line: dict[str, Any] = {"name": name, "declared": schedule is not None}
        tz = "UTC"
        if schedule is not None:
            line.update(schedule.describe())
            line["policy"] = f"catch_up = {schedule.catch_up}" if schedule.catch_up else "skip"
            tz = schedule.tz
            line["next_fire"] = iso(schedule.next_fire(states.now), tz)
        last_tick = row.last_tick if row is not None else None
        job_id = row.last_job_id if row is not None else None
        outcome = None
        if job_id is not None:
            job = app.broker.get_job(job_id)
            outcome = job.state.value if job is not None else "pruned"
        line.update(
            first_seen=iso(row.since if row is not None else None, tz),
            last_tick=iso(last_tick, tz),
            last_job_id=job_id,
            last_outcome=outcome,
        )
        lines.append(line)
    return lines


@click.group()
def schedules() -> None:
    """Periodic jobs: declared with @app.periodic or [schedules.NAME]."""


@schedules.command("list")
@click.argument("app_target", metavar="MODULE:APP")
@click.option("--config", "config_path", metavar="FILE", help="As for `worker`.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (one array of schedules).")
@broker_option
@friendly_errors
def schedules_list(
    app_target: str, config_path: str | None, as_json: bool, broker_url: str | None
) -> None:
    """Each schedule of the app: cron, time zone, missed-tick policy, next fire time,
    last run (tick and job id) and last outcome (that job's state). Times in the
    schedule's time zone, by the broker's clock."""
    app = open_app(broker_url, load_configured_app(app_target, config_path)[0])
    lines = schedule_lines(app, app.broker.schedule_states())
    if as_json:
        click.echo(json.dumps(lines, indent=2))
        return
    table = Table("schedule", "task", "cron", "tz", "policy", "next fire", "last tick", "job",
                  "outcome")  # fmt: skip
    for line in lines:
        if not line["declared"]:
            table.add_row(escape(line["name"]), "(not declared in this app)", *[""] * 4,
                          line["last_tick"] or "-", str(line["last_job_id"] or "-"),
                          line["last_outcome"] or "-")  # fmt: skip
            continue
        table.add_row(
            escape(line["name"]),
            escape(line["task"]),
            escape(line["cron"]),
            line["tz"],
            line["policy"],
            line["next_fire"] or "never",
            line["last_tick"] or "-",
            str(line["last_job_id"] or "-"),
            line["last_outcome"] or "-",
        )
    Console().print(table)
