"""Pausing queues: `queues list`, `queues pause NAME`, `queues resume NAME`.

A pause lives in the broker: every worker stops claiming from the queue within about a
second (running jobs finish), workers started later keep it, and enqueue still works.
Pausing a paused queue or resuming a running one changes nothing and says so (exit 0).
"""

from __future__ import annotations

import json
import time
from typing import Any

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..brokers import Broker
from .common import broker_option, friendly_errors, open_app


@click.group()
def queues() -> None:
    """List queues and pause or resume them (for every worker on the broker)."""


def queue_rows(broker: Broker) -> list[dict[str, Any]]:
    """Every queue with unfinished jobs or a pause, by name: its depth and pause."""
    paused = broker.paused_queues()
    depths = broker.queue_depths()
    rows = []
    for name in sorted(set(depths) | set(paused)):
        depth, pause = depths.get(name), paused.get(name)
        rows.append(
            {
                "queue": name,
                "paused": pause is not None,
                "paused_by": None if pause is None else pause.paused_by,
                "paused_at": None if pause is None else pause.paused_at,
                "ready": 0 if depth is None else depth.ready,
                "scheduled": 0 if depth is None else depth.scheduled,
                "running": 0 if depth is None else depth.claimed + depth.running,
            }
        )
    return rows


def since(at: float) -> str:
    """A pause's time, in UTC (the broker's clock)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))


@queues.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (one array of queues).")
@broker_option
@friendly_errors
def queues_list(as_json: bool, broker_url: str | None) -> None:
    """Queues with unfinished jobs or a pause: ready, scheduled and running jobs, and
    who paused it when."""
    rows = queue_rows(open_app(broker_url).broker)
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    table = Table("queue", "state", "ready", "scheduled", "running", "paused by", "since")
    for row in rows:
        table.add_row(
            escape(row["queue"]),
            "paused" if row["paused"] else "running",
            str(row["ready"]),
            str(row["scheduled"]),
            str(row["running"]),
            escape(row["paused_by"] or "-"),
            since(row["paused_at"]) if row["paused"] else "-",
        )
    Console().print(table)


@queues.command("pause")
@click.argument("name")
@click.option("--by", metavar="TEXT", help="Who pauses it, shown by `queues list` (user@host).")
@broker_option
@friendly_errors
def queues_pause(name: str, by: str | None, broker_url: str | None) -> None:
    """Stop every worker claiming from queue NAME within about a second. Running jobs
    finish; enqueue still works; the pause holds until `queues resume NAME`."""
    broker = open_app(broker_url).broker
    if broker.pause_queue(name, by):
        click.echo(f"queue {name}: paused")
        return
    pause = broker.paused_queues().get(name)
    where = "" if pause is None else f" (by {pause.paused_by} since {since(pause.paused_at)})"
    click.echo(f"queue {name}: already paused{where}")


@queues.command("resume")
@click.argument("name")
@broker_option
@friendly_errors
def queues_resume(name: str, broker_url: str | None) -> None:
    """Let workers claim from queue NAME again (within about a second)."""
    if open_app(broker_url).broker.resume_queue(name):
        click.echo(f"queue {name}: resumed")
    else:
        click.echo(f"queue {name}: not paused, nothing to resume")
