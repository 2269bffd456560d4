"""The ``sluicegate`` command line (click + rich).

Every command that reaches the broker takes ``--broker URL`` (or SLUICEGATE_BROKER);
the default is ``sqlite:///sluicegate.db`` in the current folder. Expected failures print one
line on stderr and exit 2 (bad input) or 1 (e.g. no such job); no tracebacks.

One module per concern: ``common`` (the --broker option, error handling, opening the app,
JSON arguments, retention options), ``cmd_worker`` (worker, tasks), ``cmd_jobs`` (enqueue,
jobs ...), ``cmd_limits`` (limits list|set|reset), ``cmd_queues`` (queues list|pause|resume), ``cmd_schedules`` (schedules list), ``cmd_signals`` (stats, workers, health,
size), ``top`` (the live view), ``cmd_ops`` (prune, migrate, demo), ``cmd_dashboard`` (the
web dashboard, an optional extra imported only when it runs). This module builds the
group.
"""

from __future__ import annotations

import click

from .cmd_dashboard import dashboard
from .cmd_jobs import enqueue, jobs, jobs_cancel, jobs_list, jobs_retry, jobs_show
from .cmd_limits import limits
from .cmd_ops import demo, migrate, prune
from .cmd_queues import queues
from .cmd_schedules import schedules
from .cmd_signals import health, size, stats, workers
from .cmd_worker import tasks, worker
from .common import (
    EXIT_FAILURE,
    EXIT_USAGE,
    broker_option,
    fail,
    friendly_errors,
    load_configured_app,
    make_retention,
    open_app,
    parse_json,
    retention_options,
)
from .top import top

__all__ = [
    "EXIT_FAILURE",
    "EXIT_USAGE",
    "broker_option",
    "dashboard",
    "demo",
    "enqueue",
    "fail",
    "friendly_errors",
    "health",
    "jobs",
    "jobs_cancel",
    "jobs_list",
    "jobs_retry",
    "jobs_show",
    "limits",
    "load_configured_app",
    "main",
    "make_retention",
    "migrate",
    "open_app",
    "parse_json",
    "prune",
    "queues",
    "retention_options",
    "schedules",
    "size",
    "stats",
    "tasks",
    "top",
    "worker",
    "workers",
]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="sluicegate")
@broker_option
def main(broker_url: str | None) -> None:
    """sluicegate: durable job queues and bounded worker pools.

    A queue holds work that may wait; a pool is a concurrency budget that limits
    the work that runs now, per job class.
    """


for _command in (
    worker,
    tasks,
    enqueue,
    jobs,
    limits,
    queues,
    stats,
    top,
    workers,
    health,
    size,
    dashboard,
    prune,
    migrate,
    demo,
    schedules,
):
    main.add_command(_command)
