"""Signals from any machine: `stats`, `workers`, `health` and `size`.

Everything here reads the registry (each worker's row and its last metrics snapshot,
``Broker.list_workers``) and the broker's own counts; the figures are folded by
``sluicegate.metrics.cluster``. Nothing here touches the claim path.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from ..admission import observe, predicted_wait
from ..brokers import PausedQueue, QueueStats
from ..brokers.base import WorkerList
from ..errors import ConfigError, JobNotFound
from ..job import JobState
from ..metrics import sizing
from ..metrics.cluster import fold
from ..units import age, ms
from .cmd_queues import since
from .common import broker_option, friendly_errors, open_app
from .figures import rate, status


def mark_paused(data: dict[str, Any], paused: Mapping[str, PausedQueue]) -> None:
    """Each queue row says whether it is paused (a paused queue without jobs gets a row),
    and ``paused_queues`` lists who paused which when."""
    rows = data["queues"]
    for name in paused:
        if name not in rows:
            rows[name] = QueueStats({}, 0.0).to_dict() | {
                k: None
                for k in ("enqueue_rate", "completion_rate", "duration_p50_s", "duration_p95_s")
            }
    data["queues"] = {name: rows[name] | {"paused": name in paused} for name in sorted(rows)}
    data["paused_queues"] = [p.to_dict() for _, p in sorted(paused.items())]


def add_predicted_waits(data: dict[str, Any], workers: WorkerList) -> None:
    """Each queue row's ``predicted_wait_s``: what a job enqueued now would wait to start
    (ready jobs x observed mean duration / live slots; sluicegate.admission). None while
    no duration is observed; infinite (JSON: null, ``predicted_wait_unserved``) when
    jobs are ready and no live worker serves the queue."""
    for name, row in data["queues"].items():
        seen = observe(workers, name)
        wait = predicted_wait(row["ready"], seen.mean_duration, seen.slots)
        unserved = wait is not None and math.isinf(wait)
        row["predicted_wait_s"] = None if unserved else wait
        row["predicted_wait_unserved"] = unserved


def echo_paused(paused: list[dict[str, Any]]) -> None:
    for p in paused:
        click.echo(f"queue {p['queue']}: paused by {p['paused_by']} since {since(p['paused_at'])}")


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON (see docs/metrics.md).")
@broker_option
@friendly_errors
def stats(as_json: bool, broker_url: str | None) -> None:
    """The whole system: per queue (counts by state, oldest ready age, enqueue and
    completion rates, durations), per pool summed over live workers, and per worker."""
    broker = open_app(broker_url).broker
    data: dict[str, Any] = broker.stats().to_dict()
    view = fold(broker.list_workers())
    for name, row in data["queues"].items():
        seen = view["queues"].get(name, {})
        for key in ("enqueue_rate", "completion_rate", "duration_p50_s", "duration_p95_s"):
            row[key] = seen.get(key)
    for key in ("pools", "workers", "tasks", "limits", "hosts"):
        data[key] = view[key]
    mark_paused(data, broker.paused_queues())
    add_predicted_waits(data, broker.list_workers(gone_within=0.0))
    if as_json:
        click.echo(json.dumps(data, indent=2))
        return
    console = Console()
    states = [s.value for s in JobState]
    counts = compact("queue", *states, "oldest", "wait~")
    rates = compact("queue", "in/s", "done/s", "p50", "p95")
    for name, row in data["queues"].items():
        counts.add_row(
            name,
            *(str(row[s]) for s in states),
            age(row["oldest_ready_age_s"]),
            "no worker" if row["predicted_wait_unserved"] else age(row["predicted_wait_s"]),
        )
        if row["completion_rate"] is not None:
            rates.add_row(
                name,
                rate(row["enqueue_rate"]),
                rate(row["completion_rate"]),
                ms(row["duration_p50_s"]),
                ms(row["duration_p95_s"]),
            )
    console.print(counts)
    echo_paused(data["paused_queues"])
    if rates.row_count:
        console.print()
        console.print(rates)
    if data["pools"]:
        pools = compact("pool", "model", "workers", "busy/slots", "util 1m", "5m", "15m")
        for name, p in sorted(data["pools"].items()):
            u = p["utilisation"]
            pools.add_row(
                name,
                p["model"],
                str(p["workers"]),
                f"{p['busy']}/{p['slots']}",
                *(f"{100 * u[w]:.0f}%" for w in ("1m", "5m", "15m")),
            )
        console.print()
        console.print(pools)
        console.print()
        console.print(concurrency_table(data["pools"]))
    for table in (tasks_table(data["tasks"]), limits_table(data["limits"])):
        if table.row_count:
            console.print()
            console.print(table)
    if data["workers"]:
        console.print()
        console.print(workers_table(data["workers"]))
    for host, h in sorted(data["hosts"].items()):
        iowait = "-" if h["iowait_percent"] is None else f"{h['iowait_percent']:.0f}%"
        console.print(
            f"host {host}: CPU {h['cpu_percent']:.0f}% of {h['cpus']}, I/O wait {iowait}, "
            f"load {h['load1']:.2f} {h['load5']:.2f} {h['load15']:.2f}",
            highlight=False,
        )


def tasks_table(tasks: dict[str, Any]) -> Table:
    """Per task over the live workers' lifetimes: outcomes, and duration and wait."""
    table = compact("task", "ok", "failed", "retried", "timeout", "dead", "p50", "p95", "wait")
    for name, t in sorted(tasks.items()):
        table.add_row(
            name,
            *(str(t[k]) for k in ("succeeded", "failed", "retried", "timed_out", "dead")),
            ms(t["duration_p50_s"]),
            ms(t["duration_p95_s"]),
            ms(t["wait_p50_s"]),
        )
    return table


def limits_table(limits: dict[str, Any]) -> Table:
    table = compact("limit", "concurrency", "rate", "in use", "waiting", "oldest wait")
    for name, lim in sorted(limits.items()):
        table.add_row(
            name,
            "-" if lim["concurrency"] is None else str(lim["concurrency"]),
            lim["rate"] or "-",
            str(lim["in_use"]),
            str(lim["waiting"]),
            age(lim["oldest_wait_s"]),
        )
    return table


def compact(*columns: str) -> Table:
    """A borderless table: the whole view fits an 80-column terminal."""
    return Table(*columns, box=None, header_style="bold", pad_edge=False)


def concurrency_table(pools: dict[str, Any]) -> Table:
    """Mean job duration by how many of the pool's slots were busy when the job started:
    if it grows with concurrency, more slots moved the pressure to a dependency."""
    table = compact("pool", "busy at start", "jobs", "mean duration")
    for name, pool in sorted(pools.items()):
        for busy, b in sorted(pool["by_concurrency"].items(), key=lambda kv: int(kv[0])):
            if b["count"]:
                table.add_row(name, busy, str(b["count"]), ms(b["sum"] / b["count"]))
    return table


def _busy(pool: dict[str, Any]) -> str:
    return "-" if pool["busy"] is None else str(pool["busy"])  # None: no snapshot yet


def workers_table(rows: list[dict[str, Any]]) -> Table:
    table = compact("worker", "host", "pid", "status", "held", "pools", "up", "seen")
    for w in rows:
        table.add_row(
            w["id"],
            w["host"],
            str(w["pid"]),
            status(w),
            str(w["held"]),
            " ".join(f"{p['name']} {_busy(p)}/{p['slots']}" for p in w["pools"]),
            age(w["uptime_s"]),
            f"{age(w['last_seen_age_s'])} ago",
        )
    return table


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option(
    "--gone-within",
    type=click.FloatRange(min=0),
    default=3600.0,
    show_default=True,
    help="Also list workers that stopped or were lost this many seconds ago.",
)
@broker_option
@friendly_errors
def workers(as_json: bool, gone_within: float, broker_url: str | None) -> None:
    """Live workers, and those gone recently: stopped (gracefully) or lost (no word)."""
    view = fold(open_app(broker_url).broker.list_workers(gone_within))
    # Gone: stopped or lost, for as long as the last heartbeat is old (a stopping worker's
    # last publish is its stop).
    rows = [
        w
        for w in view["workers"]
        if w["status"] in ("live", "late") or w["last_seen_age_s"] <= gone_within
    ]
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    Console().print(workers_table(rows))


@click.command()
@click.option("--worker", "worker_id", required=True, help="A worker id (or a unique prefix).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@broker_option
@friendly_errors
def health(worker_id: str, as_json: bool, broker_url: str | None) -> None:
    """Exit 0 if the worker is healthy, 1 if not: its heartbeat is recent, its loop
    turns, its broker connection works, and it consumes when work is ready."""
    view = fold(open_app(broker_url).broker.list_workers())
    found = [w for w in view["workers"] if w["id"] == worker_id] or [
        w for w in view["workers"] if w["id"].startswith(worker_id)
    ]
    if not found:
        raise JobNotFound(f"no worker {worker_id!r} in the registry")
    if len(found) > 1:
        raise ConfigError(f"{worker_id!r} matches {len(found)} workers; give more of the id")
    row = found[0]
    if as_json:
        click.echo(json.dumps(row, indent=2))
    else:
        verdict = "healthy" if row["healthy"] else "unhealthy"
        click.echo(f"{row['id']}: {verdict} ({row['status']})")
        for reason in row["reasons"]:
            click.echo(f"  - {reason}")
    raise SystemExit(0 if row["healthy"] else 1)


@click.command()
@click.option("--rate", "rate_text", metavar="RATE", help='Arrivals, e.g. "100/s" or "600/m".')
@click.option("--duration", "duration_text", metavar="TIME", help='Mean job time, e.g. "500ms".')
@click.option("--queue", help="Size from what the workers observed for this queue.")
@click.option(
    "--window",
    default=None,
    type=click.Choice(["1m", "5m", "15m"]),
    help="With --queue: the window of observed figures. [default: 15m]",
)
@click.option(
    "--target",
    type=click.FloatRange(0.01, 1.0),
    default=0.8,
    show_default=True,
    help="Target utilisation: slots needed = busy slots on average / target.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@broker_option
@friendly_errors
def size(
    rate_text: str | None,
    duration_text: str | None,
    queue: str | None,
    window: str | None,
    target: float,
    as_json: bool,
    broker_url: str | None,
) -> None:
    """Slots a pool needs, by Little's law: slots = completions per second x mean duration.

    \b
    From declared figures:  sluicegate size --rate 100/s --duration 500ms
    From observed figures:  sluicegate size --queue transcode --window 15m
    """
    try:
        if queue is not None:
            if rate_text or duration_text:
                raise ConfigError("give --queue, or --rate and --duration, not both")
            broker = open_app(broker_url).broker
            listed = broker.list_workers()
            result = sizing.observed(fold(listed), listed, queue, window or "15m", target)
        else:
            if not (rate_text and duration_text):
                raise ConfigError("give --rate and --duration (or --queue to use observed figures)")
            if window is not None:
                raise ConfigError("--window goes with --queue (observed figures), not --rate")
            result = sizing.declared(
                sizing.parse_rate(rate_text), sizing.parse_duration(duration_text), target
            )
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if as_json:
        click.echo(json.dumps(result.to_dict(), indent=2))
        return
    for line in result.lines():
        click.echo(line)
