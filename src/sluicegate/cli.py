"""The ``sluicegate`` command line (click + rich).

Every command that reaches the broker takes ``--broker URL`` (or SLUICEGATE_BROKER);
the default is ``sqlite:///sluicegate.db`` in the current folder. Expected failures print one
line on stderr and exit 2 (bad input) or 1 (e.g. no such job); no tracebacks.
"""

from __future__ import annotations

import functools
import json
import logging
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click
from rich.console import Console
from rich.table import Table

from .app import BROKER_ENV, App, default_broker_url
from .brokers.base import DAY, Retention
from .config import Settings, load_settings
from .errors import ConfigError, InvalidTransition, JobNotFound, SerializationError, SluicegateError
from .job import Job, JobState
from .loading import load_app
from .worker import Worker, parse_pool_spec
from .worker.pool import DEFAULT_POOL, SPEC_FORMAT
from .worker.routing import model_mismatch, pools_for

F = TypeVar("F", bound=Callable[..., Any])
EXIT_USAGE = 2
EXIT_FAILURE = 1

broker_option = click.option(
    "--broker",
    "broker_url",
    envvar=BROKER_ENV,
    default=None,
    metavar="URL",
    help="Broker URL: sqlite:///PATH (default sqlite:///sluicegate.db), "
    "postgresql://USER@HOST/DB?schema=NAME, memory://. "
    f"Also read from {BROKER_ENV}.",
)


def fail(message: str, code: int = EXIT_USAGE) -> None:
    click.echo(f"sluicegate: {message}", err=True)
    sys.exit(code)


def friendly_errors(fn: F) -> F:
    """Turn expected errors into one stderr line and an exit status, never a traceback."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (JobNotFound, InvalidTransition) as exc:
            fail(str(exc), EXIT_FAILURE)
        except SluicegateError as exc:
            fail(str(exc), EXIT_USAGE)
        return None

    return wrapper  # type: ignore[return-value]


def _group_broker() -> str | None:
    """``sluicegate --broker URL COMMAND`` works as well as ``sluicegate COMMAND --broker URL``."""
    ctx = click.get_current_context(silent=True)
    return ctx.find_root().params.get("broker_url") if ctx is not None else None


def open_app(broker_url: str | None, app: str | App | None = None) -> App:
    """The app to act through: the user's (MODULE:APP, or loaded) with --broker replacing
    its broker, or a bare one. A bare app reads no settings file: it has no tasks for
    ``[tasks.NAME]`` to name."""
    broker_url = broker_url or _group_broker()
    if app is None:
        app = App(broker=broker_url or default_broker_url(), config=False)
    else:
        app = load_app(app) if isinstance(app, str) else app
        if broker_url:
            app.use_broker(broker_url)
    app.broker  # noqa: B018 - open now, so a bad URL fails here with a clear message
    return app


def load_configured_app(app_target: str, config_path: str | None) -> tuple[App, Settings]:
    """MODULE:APP with its settings applied: from --config FILE if given, else from the
    file the app itself would read (by default ./sluicegate.toml, else pyproject's
    [tool.sluicegate])."""
    app = load_app(app_target)
    if config_path is not None:
        app.use_config(config_path)
    applied = app.configure()  # the file the app read: the worker's settings come from it too
    return app, load_settings(applied.path) if applied.path is not None else Settings()


def parse_json(option: str, text: str | None, kind: type) -> Any:
    if text is None:
        return kind()
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{option} is not valid JSON: {exc}") from None
    if not isinstance(value, kind):
        expected = "an array" if kind is list else "an object"
        raise ConfigError(f"{option} must be {expected} in JSON, not {type(value).__name__}")
    return value


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="sluicegate")
@broker_option
def main(broker_url: str | None) -> None:
    """sluicegate: durable job queues and bounded worker pools.

    A queue holds work that may wait; a pool is a concurrency budget that limits
    the work that runs now, per job class.
    """


def retention_options(fn: F) -> F:
    """--keep-*-days options shared by `worker` and `prune`; defaults from ``Retention()``."""
    kept = sorted(Retention().by_state().items(), key=lambda item: item[0].value)
    for state, seconds in kept:
        fn = click.option(
            f"--keep-{state.value}-days",
            type=click.FloatRange(min=0),
            default=seconds / DAY,
            show_default=True,
            help=f"Delete {state.value} jobs this many days after they finished.",
        )(fn)
    return fn


def make_retention(succeeded: float, dead: float, cancelled: float) -> Retention:
    return Retention(succeeded=succeeded * DAY, dead=dead * DAY, cancelled=cancelled * DAY)


@main.command()
@click.argument("app_target", metavar="MODULE:APP")
@click.option(
    "--pool",
    "pool_specs",
    multiple=True,
    metavar="SPEC",
    help=f"A pool as {SPEC_FORMAT} (repeatable), e.g. email=email:3. "
    "Default: one pool 'default' of 10 thread slots over queue 'default'.",
)
@click.option(
    "--lease",
    type=float,
    default=None,
    help="Seconds a claim stays valid without a heartbeat (heartbeats every lease/3); "
    "also how fast a dead worker's jobs come back. [default: 30]",
)
@click.option(
    "--shutdown-timeout",
    type=float,
    default=None,
    help="On SIGTERM/SIGINT, seconds to let running jobs finish before releasing "
    "them. [default: 30]",
)
@click.option(
    "--config",
    "config_path",
    metavar="FILE",
    help="Settings file (default: the app's, App(config=...): by default ./sluicegate.toml, "
    "else [tool.sluicegate] in ./pyproject.toml). Flags override it.",
)
@click.option("--burst", is_flag=True, help="Exit once the pools' queues have no ready work left.")
@click.option("--no-prune", is_flag=True, help="Never delete finished jobs from this worker.")
@retention_options
@click.option(
    "--log-level",
    default="info",
    show_default=True,
    type=click.Choice(["debug", "info", "warning", "error"]),
)
@broker_option
@friendly_errors
def worker(
    app_target: str,
    pool_specs: tuple[str, ...],
    lease: float | None,
    shutdown_timeout: float | None,
    config_path: str | None,
    burst: bool,
    no_prune: bool,
    keep_succeeded_days: float,
    keep_dead_days: float,
    keep_cancelled_days: float,
    log_level: str,
    broker_url: str | None,
) -> None:
    """Run a worker for MODULE:APP with one or more bounded pools.

    \b
    Example:
      sluicegate worker myapp:app --pool transcode=transcode:4 --pool email=email:3

    SIGTERM or SIGINT stops claiming at once, lets running jobs finish within
    --shutdown-timeout, releases the rest without charging an attempt, and exits 0.
    A second signal releases at once. Finished jobs past their retention are pruned
    in the background, in small batches, unless --no-prune.
    """
    app, settings = load_configured_app(app_target, config_path)
    pools = [parse_pool_spec(spec) for spec in pool_specs] or settings.pools or None
    lease = lease if lease is not None else settings.lease or 30.0
    shutdown_timeout = (
        shutdown_timeout if shutdown_timeout is not None else settings.shutdown_timeout
    )
    shutdown_timeout = 30.0 if shutdown_timeout is None else shutdown_timeout
    if lease <= 0:
        raise ConfigError(f"--lease must be positive, not {lease}")
    if shutdown_timeout < 0:
        raise ConfigError(f"--shutdown-timeout must not be negative, not {shutdown_timeout}")
    logging.basicConfig(
        level=log_level.upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    open_app(broker_url or _group_broker() or settings.broker, app)
    retention = (
        None
        if no_prune
        else make_retention(keep_succeeded_days, keep_dead_days, keep_cancelled_days)
    )
    runner = Worker(
        app, pools, lease=lease, shutdown_timeout=shutdown_timeout, burst=burst, retention=retention
    )
    runner.install_signal_handlers()
    runner.run()


@main.command()
@click.argument("app_target", metavar="MODULE:APP")
@click.option("--pool", "pool_specs", multiple=True, metavar="SPEC", help="As for `worker`.")
@click.option("--config", "config_path", metavar="FILE", help="As for `worker`.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@friendly_errors
def tasks(
    app_target: str, pool_specs: tuple[str, ...], config_path: str | None, as_json: bool
) -> None:
    """List the app's tasks as a worker with these pools would run them: queue, pool,
    model and options (config overrides applied)."""
    app, settings = load_configured_app(app_target, config_path)
    pools = [parse_pool_spec(s) for s in pool_specs] or settings.pools or [DEFAULT_POOL]
    rows: list[dict[str, Any]] = []
    for task in sorted(app.tasks.values(), key=lambda t: t.name):
        served = pools_for(task, pools)
        o = task.options
        rows.append(
            {
                "task": task.name,
                "queue": o.queue,
                "pools": [p.name for p in served],
                "models": [p.model for p in served],
                "kind": "coroutine" if task.is_coroutine else "function",
                "max_attempts": o.max_attempts,
                "timeout": o.timeout,
                "priority": o.priority,
                "transactional": o.transactional,
                "problem": next((m for p in served if (m := model_mismatch(task, p.model))), None)
                or (None if served else "no pool serves this queue"),
            }
        )
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    table = Table("task", "queue", "pool", "model", "attempts", "timeout", "priority", "note")
    for r in rows:
        table.add_row(
            r["task"],
            r["queue"],
            ",".join(r["pools"]) or "-",
            ",".join(r["models"]) or "-",
            str(r["max_attempts"]),
            f"{r['timeout']:g}s" if r["timeout"] else "-",
            str(r["priority"]),
            r["problem"] or ("transactional" if r["transactional"] else ""),
        )
    Console().print(table)


@main.command()
@click.argument("task")
@click.option("--args", "args_json", metavar="JSON", help="Positional arguments as a JSON array.")
@click.option("--kwargs", "kwargs_json", metavar="JSON", help="Keyword arguments as a JSON object.")
@click.option("--queue", help="Queue (default: the task's queue with --app, else 'default').")
@click.option("--delay", type=float, help="Seconds to wait before the job is ready.")
@click.option("--priority", type=int, help="Lower runs first within a queue (default 0).")
@click.option("--unique-key", help="While a job with this key is unfinished, return it instead.")
@click.option("--max-attempts", type=int, help="Attempts before the job is dead.")
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
    app_target: str | None,
    broker_url: str | None,
) -> None:
    """Enqueue a job for TASK and print its id. Durable when the command returns."""
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
        )
    except SerializationError as exc:
        raise ConfigError(str(exc)) from None
    click.echo(job.id)


@main.group()
def jobs() -> None:
    """List, show, retry and cancel jobs."""


def _age(job: Job) -> str:
    import time

    seconds = max(0.0, time.time() - job.enqueued_at)
    return f"{seconds:.0f}s" if seconds < 120 else f"{seconds / 60:.0f}m"


@jobs.command("list")
@click.option(
    "--state", type=click.Choice([s.value for s in JobState]), help="Only jobs in this state."
)
@click.option("--queue", help="Only jobs of this queue.")
@click.option("--limit", type=click.IntRange(1, 100_000), default=50, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON (one array of jobs).")
@broker_option
@friendly_errors
def jobs_list(
    state: str | None, queue: str | None, limit: int, as_json: bool, broker_url: str | None
) -> None:
    """List jobs, newest first."""
    app = open_app(broker_url)
    found = app.broker.list_jobs(JobState(state) if state else None, queue, limit)
    if as_json:
        click.echo(json.dumps([j.to_dict() for j in found], indent=2))
        return
    table = Table("id", "task", "queue", "state", "attempts", "age", "last error")
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
@click.argument("job_id", type=int)
@click.option("--json", "as_json", is_flag=True, help="Print the job as JSON.")
@broker_option
@friendly_errors
def jobs_show(job_id: int, as_json: bool, broker_url: str | None) -> None:
    """Show one job, with its last error and traceback."""
    job = open_app(broker_url).get_job(job_id)
    data = job.to_dict()
    if as_json:
        click.echo(json.dumps(data, indent=2))
        return
    console = Console()
    for key, value in data.items():
        if key == "last_error" and value:
            console.print(f"[bold]last_error[/]: {value['type']}: {value['message']}")
            if value.get("traceback"):
                console.print(value["traceback"], markup=False, highlight=False)
        else:
            console.print(f"[bold]{key}[/]: {json.dumps(value)}", highlight=False)


@jobs.command("retry")
@click.argument("job_id", type=int)
@broker_option
@friendly_errors
def jobs_retry(job_id: int, broker_url: str | None) -> None:
    """Bring a dead (or cancelled) job back to ready with a fresh attempt budget."""
    job = open_app(broker_url).broker.retry(job_id)
    click.echo(f"job {job.id} is {job.state.value}")


@jobs.command("cancel")
@click.argument("job_id", type=int)
@broker_option
@friendly_errors
def jobs_cancel(job_id: int, broker_url: str | None) -> None:
    """Cancel a job that has not finished. A running job's outcome is then refused."""
    job = open_app(broker_url).broker.cancel(job_id)
    click.echo(f"job {job.id} is {job.state.value}")


@main.command()
@click.option("--json", "as_json", is_flag=True, help='Print JSON: {"queues": {NAME: {...}}}.')
@broker_option
@friendly_errors
def stats(as_json: bool, broker_url: str | None) -> None:
    """Per-queue counts by state and the age of the oldest ready job."""
    data = open_app(broker_url).broker.stats().to_dict()
    if as_json:
        click.echo(json.dumps(data, indent=2))
        return
    states = [s.value for s in JobState]
    table = Table("queue", *states, "oldest ready (s)")
    for name, row in data["queues"].items():
        table.add_row(name, *(str(row[s]) for s in states), f"{row['oldest_ready_age_s']:.1f}")
    Console().print(table)


@main.command()
@retention_options
@broker_option
@friendly_errors
def prune(
    keep_succeeded_days: float,
    keep_dead_days: float,
    keep_cancelled_days: float,
    broker_url: str | None,
) -> None:
    """Delete finished jobs older than their retention, in small batches; prints the count."""
    retention = make_retention(keep_succeeded_days, keep_dead_days, keep_cancelled_days)
    deleted = open_app(broker_url).broker.prune(retention)
    click.echo(f"pruned {deleted} job(s)")


@main.command()
@broker_option
@friendly_errors
def migrate(broker_url: str | None) -> None:
    """Create or upgrade the broker's schema (numbered migrations; safe to run twice).

    For PostgreSQL deploys whose app role may not run DDL: run this with a role that
    owns the schema, and give workers and producers URLs with ?migrate=false.
    """
    broker = open_app(broker_url).broker
    applied = broker.migrate() or broker.migrations_applied
    click.echo(
        f"applied migration(s): {', '.join(map(str, applied))}"
        if applied
        else "schema is up to date"
    )


@main.command()
@click.option("--quick", is_flag=True, help="A smaller run (fewer jobs), for a fast look.")
@friendly_errors
def demo(quick: bool) -> None:
    """The 09:00 video-platform scenario: one shared pool vs separate budgets per job class.

    Runs on a temporary SQLite file; nothing is left behind.
    """
    from .demo import run_demo

    run_demo(quick=quick)


if __name__ == "__main__":  # pragma: no cover
    main()
