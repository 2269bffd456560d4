"""Running an app: `worker` (bounded pools over the app's queues) and `tasks` (what a worker
with those pools would run, and where)."""

from __future__ import annotations

import json
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from ..errors import ConfigError
from ..logs import FORMATS, configure_logging
from ..names import lease_problem, number_problem
from ..worker import Worker, parse_pool_spec
from ..worker.health import STALL_AFTER
from ..worker.pool import DEFAULT_POOL, SPEC_FORMAT
from ..worker.routing import model_mismatch, pools_for
from ..worker.services.registry import PUBLISH_INTERVAL
from ..worker.startup import open_broker
from .common import (
    broker_option,
    friendly_errors,
    group_broker,
    load_configured_app,
    make_retention,
    open_app,
    retention_options,
)


@click.command()
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
    "also how fast a dead worker's jobs come back. From 0.5 to 86400. [default: 30]",
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
@click.option(
    "--log-format",
    default="text",
    show_default=True,
    type=click.Choice(FORMATS),
    help="text: readable lines; json: one JSON object a line (job outcomes as keys).",
)
@click.option(
    "--metrics-port",
    type=click.IntRange(0, 65535),
    default=None,
    help="Serve Prometheus metrics at /metrics and the health check at /healthz on this "
    "port (0: any free port).",
)
@click.option(
    "--metrics-host",
    default="127.0.0.1",
    show_default=True,
    help="Address the metrics port binds to (loopback unless you say otherwise).",
)
@click.option(
    "--publish-interval",
    type=click.FloatRange(min=0.05),
    default=PUBLISH_INTERVAL,
    show_default=True,
    help="Seconds between registry heartbeats, each carrying this worker's metrics snapshot.",
)
@click.option(
    "--stall-after",
    type=click.FloatRange(min=0.1),
    default=STALL_AFTER,
    show_default=True,
    help="Seconds a pool with free slots and ready work may go without trying to claim "
    "before the health check calls the worker unhealthy.",
)
@click.option(
    "--no-metrics",
    is_flag=True,
    help="Keep no per-job figures (durations, waits, utilisation); the registry heartbeat "
    "and health check still run.",
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
    log_format: str,
    metrics_port: int | None,
    metrics_host: str,
    publish_interval: float,
    stall_after: float,
    no_metrics: bool,
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
    if (problem := lease_problem(lease)) is not None:
        raise ConfigError(f"--lease {problem}")
    if (problem := number_problem(shutdown_timeout, 0)) is not None:
        raise ConfigError(f"--shutdown-timeout {problem}")
    configure_logging(log_level, log_format)
    open_app(broker_url or group_broker() or settings.broker, app, open_now=False)
    open_broker(app)  # a write lock held elsewhere at start is waited out, not fatal
    retention = (
        None
        if no_prune
        else make_retention(keep_succeeded_days, keep_dead_days, keep_cancelled_days)
    )
    runner = Worker(
        app,
        pools,
        lease=lease,
        shutdown_timeout=shutdown_timeout,
        burst=burst,
        retention=retention,
        metrics=not no_metrics,
        metrics_port=metrics_port,
        metrics_host=metrics_host,
        publish_interval=publish_interval,
        stall_after=stall_after,
    )
    runner.install_signal_handlers()
    runner.run()


@click.command()
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
                "limits": {name: cost for name, cost in o.costs},
                "problem": next((m for p in served if (m := model_mismatch(task, p.model))), None)
                or (None if served else "no pool serves this queue"),
            }
        )
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    limited = any(r["limits"] for r in rows)  # a limits column only when a task uses one
    head = ["task", "queue", "pool", "model", "attempts", "timeout", "priority"]
    table = Table(*head, *(["limits"] if limited else []), "note")
    for r in rows:
        limits = ", ".join(n if c == 1 else f"{n} x{c}" for n, c in r["limits"].items())
        table.add_row(
            r["task"],
            r["queue"],
            ",".join(r["pools"]) or "-",
            ",".join(r["models"]) or "-",
            str(r["max_attempts"]),
            f"{r['timeout']:g}s" if r["timeout"] else "-",
            str(r["priority"]),
            *([limits or "-"] if limited else []),
            r["problem"] or ("transactional" if r["transactional"] else ""),
        )
    Console().print(table)
