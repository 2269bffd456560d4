"""Operating the broker: `prune`, `migrate`; and the `demo` scenario."""

from __future__ import annotations

import click

from .common import (
    broker_option,
    friendly_errors,
    make_retention,
    open_app,
    retention_options,
)


@click.command()
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


@click.command()
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


@click.command()
@click.option("--quick", is_flag=True, help="A smaller run (fewer jobs), for a fast look.")
@click.option(
    "--keep-in",
    metavar="DIR",
    type=click.Path(file_okay=False, exists=True),
    help="Keep each run's broker in DIR (shared.db, separate.db), so that "
    "`sluicegate top --broker sqlite:///DIR/separate.db` can watch it.",
)
@friendly_errors
def demo(quick: bool, keep_in: str | None) -> None:
    """The 09:00 video-platform scenario: one shared pool vs separate budgets per job class.

    Runs on temporary SQLite files; nothing is left behind unless --keep-in.
    """
    from ..demo import run_demo

    run_demo(quick=quick, keep_in=keep_in)
