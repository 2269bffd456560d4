"""Producing and inspecting jobs: `enqueue`, and `jobs list|show|retry|cancel`."""

from __future__ import annotations

import json

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..errors import ConfigError, SerializationError
from ..job import Job, JobState
from ..limit_report import needs_text, waiting_for
from ..limits import local_host
from ..units import age
from .common import broker_option, friendly_errors, open_app, parse_json


@click.command()
@click.argument("task")
@click.option("--args", "args_json", metavar="JSON", help="Positional arguments as a JSON array.")
@click.option("--kwargs", "kwargs_json", metavar="JSON", help="Keyword arguments as a JSON object.")
@click.option("--queue", help="Queue (default: the task's queue with --app, else 'default').")
@click.option("--delay", type=float, help="Seconds to wait before the job is ready.")
@click.option("--priority", type=int, help="Lower runs first within a queue (default 0).")
@click.option("--unique-key", help="While a job with this key is unfinished, return it instead.")
@click.option("--max-attempts", type=int, help="Attempts before the job is dead.")
@click.option("--limit-key", help="Partition of the task's partitioned limits (with --app).")
@click.option(
    "--expires-in",
    type=float,
    help="Seconds after which the job, if not started, ends cancelled (reason: expired).",
)
@click.option(
    "--app", "app_target", metavar="MODULE:APP", help="Apply the task's own queue and options."
)
@broker_option
@friendly_errors
def enqueue(
    task: str,
    args_json: str | None,
    kwargs_json: str | None,
    queue: str | None,
    delay: float | None,
    priority: int | None,
    unique_key: str | None,
    max_attempts: int | None,
    limit_key: str | None,
    expires_in: float | None,
    app_target: str | None,
    broker_url: str | None,
) -> None:
    """Enqueue a job for TASK and print its id. Durable when the command returns."""
    if limit_key is not None and app_target is None:
        raise ConfigError(
            "--limit-key needs --app MODULE:APP (the task's limits are declared there)"
        )
    args = parse_json("--args", args_json, list)
    kwargs = parse_json("--kwargs", kwargs_json, dict)
    app = open_app(broker_url, app_target)
    try:
        job = app.enqueue(
            task,
            args,
            kwargs,
            queue=queue,
            delay=delay,
            priority=priority,
            unique_key=unique_key,
            max_attempts=max_attempts,
            limit_key=limit_key,
            expires_in=expires_in,
        )
    except SerializationError as exc:
        raise ConfigError(str(exc)) from None
    click.echo(job.id)


@click.group()
def jobs() -> None:
    """List, show, retry and cancel jobs."""


def _age(job: Job) -> str:
    import time

    seconds = max(0.0, time.time() - job.enqueued_at)
    return f"{seconds:.0f}s" if seconds < 120 else f"{seconds / 60:.0f}m"


def _progress_text(job: Job) -> str:
    """40% transcoding 2 of 5 (reported 3.1s ago), or why there is none."""
    import time

    progress = job.progress
    if progress is None:
        return "none reported"
    text = f"{progress.fraction:.0%}"
    if progress.message:
        text += f" {progress.message}"
    if progress.at is not None:
        text += f" (reported {age(max(0.0, time.time() - progress.at))} ago)"
    return text


@jobs.command("list")
@click.option(
    "--state", type=click.Choice([s.value for s in JobState]), help="Only jobs in this state."
)
@click.option("--queue", help="Only jobs of this queue.")
@click.option("--task", help="Only jobs of this task.")
@click.option("--unique-key", help="Only jobs with this unique key (in any state).")
@click.option(
    "--before",
    "before_id",
    type=int,
    metavar="ID",
    help="Only jobs with ids below ID: the next page starts below the last id shown.",
)
@click.option("--limit", type=click.IntRange(1, 100_000), default=50, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON (one array of jobs).")
@broker_option
@friendly_errors
def jobs_list(
    state: str | None,
    queue: str | None,
    task: str | None,
    unique_key: str | None,
    before_id: int | None,
    limit: int,
    as_json: bool,
    broker_url: str | None,
) -> None:
    """List jobs, newest first, a page at a time (--limit, then --before)."""
    app = open_app(broker_url)
    found = app.broker.list_jobs(
        JobState(state) if state else None,
        queue,
        limit,
        task=task,
        unique_key=unique_key,
        before_id=before_id,
    )
    if as_json:
        click.echo(json.dumps([j.to_dict() for j in found], indent=2))
        return
    more = f"next page: --before {found[-1].id}" if len(found) == limit else None
    table = Table("id", "task", "queue", "state", "attempts", "age", "last error", caption=more)
    for job in found:
        error = str(job.last_error) if job.last_error else ""
        table.add_row(
            str(job.id),
            job.task,
            job.queue,
            job.state.value,
            f"{job.attempts}/{job.max_attempts}",
            _age(job),
            error[:60],
        )
    Console().print(table)


@jobs.command("show")
@click.argument("job_id")
@click.option("--json", "as_json", is_flag=True, help="Print the job as JSON.")
@broker_option
@friendly_errors
def jobs_show(job_id: str, as_json: bool, broker_url: str | None) -> None:
    """Show one job: its last error and traceback, and its history off the happy path."""
    app = open_app(broker_url)
    job = app.get_job(job_id)
    data = job.to_dict()
    if job.limits and job.state is JobState.READY:  # read from the broker now, not stored
        data["waiting_for"] = waiting_for(job, app.broker.limit_figures(), local_host())
    if as_json:
        click.echo(json.dumps(data, indent=2))
        return
    console = Console()
    for key, value in data.items():
        if key == "last_error" and value:
            console.print(f"[bold]last_error[/]: {value['type']}: {value['message']}")
            if value.get("traceback"):
                console.print(value["traceback"], markup=False, highlight=False)
        elif key == "limits":
            if value:
                console.print(f"[bold]limits[/]: {escape(needs_text(job.limits))}", highlight=False)
        elif key == "history":
            console.print(f"[bold]history[/]: {len(value) or 'none off the happy path'}")
            for entry in value:  # oldest first, one a line
                console.print(f"  {json.dumps(entry)}", highlight=False, markup=False)
        elif key == "progress":
            console.print(f"[bold]progress[/]: {escape(_progress_text(job))}", highlight=False)
        elif key == "waiting_for":
            reason = value or "no limit: every limit it names has room (waiting for a slot)"
            console.print(f"[bold]waiting_for[/]: {escape(reason)}", highlight=False)
        else:
            console.print(f"[bold]{key}[/]: {json.dumps(value)}", highlight=False)


@jobs.command("retry")
@click.argument("job_id")
@broker_option
@friendly_errors
def jobs_retry(job_id: str, broker_url: str | None) -> None:
    """Bring a dead (or cancelled) job back to ready with a fresh attempt budget."""
    job = open_app(broker_url).broker.retry(job_id)
    click.echo(f"job {job.id} is {job.state.value}")


@jobs.command("cancel")
@click.argument("job_id")
@click.option("--by", metavar="TEXT", help="Who cancels it, kept in its history (user@host).")
@broker_option
@friendly_errors
def jobs_cancel(job_id: str, by: str | None, broker_url: str | None) -> None:
    """Cancel a job that has not finished. A running one is stopped within a heartbeat:
    an async job's coroutine is cancelled, a process pool's child killed and replaced, and
    a thread pool's task sees current_job().cancelled (its slot is busy until it returns).
    It is never retried, and `jobs show` records who cancelled it and when."""
    job = open_app(broker_url).cancel(job_id, by=by)
    entry = job.history[-1] if job.history else {}
    was = entry.get("from")
    where = f" on worker {entry['worker']}" if entry.get("worker") else ""
    stopping = f"; it was {was}{where}, which stops it" if was in ("claimed", "running") else ""
    click.echo(f"job {job.id} is {job.state.value}{stopping}")
