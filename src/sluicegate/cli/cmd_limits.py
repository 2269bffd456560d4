"""Dependency limits in the broker: `limits list`, `limits set`, `limits reset`."""

from __future__ import annotations

import json

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..brokers.base import unknown_limit
from ..errors import ConfigError
from ..limit_report import NOT_REGISTERED, report
from ..limits import changed
from .common import broker_option, friendly_errors, open_app


@click.group()
def limits() -> None:
    """Show and change dependency limits (shared by every worker on the broker)."""


@limits.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (one array of limits).")
@broker_option
@friendly_errors
def limits_list(as_json: bool, broker_url: str | None) -> None:
    """Capacity, tokens in use, jobs waiting and the oldest wait, per limit and per
    partition (the busiest first)."""
    figures = open_app(broker_url).broker.limit_figures()
    lines = [line.to_dict(figures.now) for line in report(figures)]
    if as_json:
        click.echo(json.dumps(lines, indent=2))
        return
    table = Table("limit", "capacity", "scope", "in use", "waiting", "oldest wait (s)", "set by")
    for line in lines:
        partition = f" per {line['partition']}" if line["partition"] else ""
        registered = line["capacity"] != NOT_REGISTERED
        table.add_row(
            escape(line["name"]),
            line["capacity"] + partition,
            line["scope"],
            str(line["in_use"]),
            str(line["waiting"]),
            f"{line['oldest_wait_s']:.1f}",
            ("operator" if line["set_by_operator"] else "workers") if registered else "-",
        )
        for part in line["partitions"]:
            tokens = f" (tokens {part['tokens']:.2f})" if "tokens" in part else ""
            table.add_row(
                f"  {escape(str(part['key']))}",
                tokens.strip(),
                "",
                str(part["in_use"]),
                str(part["waiting"]),
                f"{part['oldest_wait_s']:.1f}",
                "",
            )
        hidden = line["partitions_total"] - len(line["partitions"])
        if hidden > 0:
            table.add_row(f"  ... {hidden} more partition(s)", "", "", "", "", "", "")
    Console().print(table)


@limits.command("set")
@click.argument("name")
@click.option("--concurrency", type=click.IntRange(min=1), help="Cost units held at once.")
@click.option("--rate", metavar="N/UNIT", help="Starts per time: 10/s, 600/m, 5/2s, 1000/h.")
@click.option("--burst", type=click.IntRange(min=1), help="Starts allowed back to back.")
@broker_option
@friendly_errors
def limits_set(
    name: str,
    concurrency: int | None,
    rate: str | None,
    burst: int | None,
    broker_url: str | None,
) -> None:
    """Change limit NAME for every worker, while they run (within about a second).

    The value holds until `limits reset NAME`: a worker that starts later keeps it."""
    if concurrency is None and rate is None and burst is None:
        raise ConfigError("give --concurrency, --rate or --burst")
    broker = open_app(broker_url).broker
    known = broker.limit_figures().limits
    current = known.get(name)
    if current is None:
        raise unknown_limit(name, known)
    updated = changed(current, concurrency, rate, burst)
    if updated is None:
        raise ConfigError("give --concurrency, --rate or --burst")
    broker.set_limit(updated)
    click.echo(f"limit {name}: {updated.describe()}")


@limits.command("reset")
@click.argument("name")
@broker_option
@friendly_errors
def limits_reset(name: str, broker_url: str | None) -> None:
    """Give limit NAME back the values its workers declare."""
    limit = open_app(broker_url).broker.reset_limit(name)
    click.echo(f"limit {name}: {limit.describe()}")
